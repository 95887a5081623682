"""Errors as torch raises them: for each mistake, ggmlgrad's exception is an instance of the class
torch raises (shape errors are ValueError and RuntimeError, dtype refusals TypeError and RuntimeError,
out-of-range dims IndexError), in eager, graph and check mode and inside gg.capture (which raises
eager mode's error, not a CaptureError, for a program that is wrong in eager mode)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as tF

import ggmlgrad as gg
import ggmlgrad.nn.functional as F

# constants made outside the functions (a tensor made from host data inside gg.capture is refused)
TW42 = torch.ones(4, 2)
I3, TI3 = gg.tensor([0, 1, 2]), torch.tensor([0, 1, 2])
I2, TI2 = gg.tensor([0, 1]), torch.tensor([0, 1])
I11, TI11 = gg.tensor([[0]]), torch.tensor([[0]])

# name -> (ggmlgrad f(x), torch f(x)); x is a float32 (2, 3) tensor requiring no grad
CASES = {
    "matmul_inner": (lambda x: x @ x, lambda x: x @ x),
    "broadcast": (lambda x: x + x[:, :2], lambda x: x + x[:, :2]),
    "reshape": (lambda x: x.reshape(4, 2), lambda x: x.reshape(4, 2)),
    "view": (lambda x: x.view(5), lambda x: x.view(5)),
    "cat": (lambda x: gg.cat([x, x[:, :2]], 0), lambda x: torch.cat([x, x[:, :2]], 0)),
    "stack": (lambda x: gg.stack([x, x[:, :2]]), lambda x: torch.stack([x, x[:, :2]])),
    "sum_dim": (lambda x: x.sum(2), lambda x: x.sum(2)),
    "softmax_dim": (lambda x: x.softmax(-3), lambda x: x.softmax(-3)),
    "transpose_dim": (lambda x: x.transpose(0, 2), lambda x: x.transpose(0, 2)),
    "unsqueeze_dim": (lambda x: x.unsqueeze(4), lambda x: x.unsqueeze(4)),
    "permute": (lambda x: x.permute(0, 0), lambda x: x.permute(0, 0)),
    "expand": (lambda x: x.expand(3, 3), lambda x: x.expand(3, 3)),
    "linear": (lambda x: F.linear(x, gg.ones(4, 2, device=x.device)), lambda x: tF.linear(x, TW42)),   # x's device
    "layer_norm": (lambda x: F.layer_norm(x, (2,)), lambda x: tF.layer_norm(x, (2,))),
    "cross_entropy_shape": (lambda x: F.cross_entropy(x, I3), lambda x: tF.cross_entropy(x, TI3)),
    "gather_ndim": (lambda x: gg.gather(x, 0, I2), lambda x: torch.gather(x, 0, TI2)),
    "index_select_2d": (lambda x: gg.index_select(x, 0, I11), lambda x: torch.index_select(x, 0, TI11)),
    "int_requires_grad": (lambda x: x.int().requires_grad_(), lambda x: x.int().requires_grad_()),
    "one_hot_float": (lambda x: F.one_hot(x, 3), lambda x: tF.one_hot(x, 3)),
    "item_many": (lambda x: x.item(), lambda x: x.item()),
}
EAGER_ONLY = {"item_many", "int_requires_grad"}     # host reads and autograd flags: not graph ops


def _torch_error(name) -> type:
    tx = torch.zeros(2, 3)
    with pytest.raises(Exception) as e:
        CASES[name][1](tx)
    return type(e.value)


@pytest.mark.parametrize("mode", ["eager", "graph", "check"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_error_class_is_torchs(name, mode):
    want = _torch_error(name)
    with gg.graph_mode(mode != "eager", check=mode == "check"):
        with pytest.raises(Exception) as e:
            out = CASES[name][0](gg.zeros(2, 3))
            if isinstance(out, gg.Tensor):
                out.numpy()
    assert isinstance(e.value, want), f"{name}: torch raises {want.__name__}, ggmlgrad {type(e.value).__mro__}"
    # and still the Python class ggmlgrad documented before (ValueError/TypeError/IndexError)
    assert isinstance(e.value, (ValueError, TypeError, IndexError)), type(e.value).__mro__


@pytest.mark.parametrize("name", sorted(set(CASES) - EAGER_ONLY))
def test_capture_raises_eager_modes_error(name):
    want = _torch_error(name)
    with pytest.raises(Exception) as eager:
        CASES[name][0](gg.zeros(2, 3))
    f = gg.capture(lambda x: CASES[name][0](x))
    with pytest.raises(Exception) as cap:
        f(np.zeros((2, 3), np.float32))
    assert type(cap.value) is type(eager.value) and isinstance(cap.value, want)
    assert not isinstance(cap.value, gg.CaptureError)


def test_error_classes_are_exported_and_documented():
    from ggmlgrad.engine.errors import DTypeError, IndexRangeError, ShapeError
    assert issubclass(ShapeError, ValueError) and issubclass(ShapeError, RuntimeError)
    assert issubclass(DTypeError, TypeError) and issubclass(DTypeError, RuntimeError)
    assert issubclass(IndexRangeError, IndexError) and issubclass(IndexRangeError, ValueError)
    assert gg.ShapeError is ShapeError and gg.DTypeError is DTypeError and gg.IndexRangeError is IndexRangeError
