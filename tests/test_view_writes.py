"""Writes through views: torch's view ops share memory with their base, ggmlgrad's return copies.

Until views alias (issue 12), an in-place write to the result of a view op must not be silently
lost: it raises RuntimeError (in every mode, whether or not the base is still alive). Each case runs the same
snippet in torch (when installed) to show the write would have reached the base there.
"""
from __future__ import annotations

import gc

import numpy as np
import pytest

import ggmlgrad as gg

VIEW_WRITES = {  # name -> write through a view of x (shape (2, 3)); both libraries spell it alike
    "index_fill": lambda x: x[0].fill_(5.0),
    "index_setitem": lambda x: x[1].__setitem__(0, -1.0),
    "slice_add": lambda x: x[:, 1:].add_(1.0),
    "view_setitem": lambda x: x.view(-1).__setitem__(0, -1.0),
    "reshape_add": lambda x: x.reshape(6).add_(1.0),
    "flatten_mul": lambda x: x.flatten().mul_(2.0),
    "transpose_zero": lambda x: x.transpose(0, 1).zero_(),
    "permute_sub": lambda x: x.permute(1, 0).sub_(1.0),
    "T_copy": lambda x: x.T.copy_(x.T * 0.0 + 1.0),
    "mT_div": lambda x: x.mT.div_(2.0),
    "unsqueeze_iadd": lambda x: x.unsqueeze(0).__iadd__(1.0),
    "squeeze_clamp": lambda x: x.unsqueeze(0).squeeze(0).clamp_(0.0, 1.0),
    "narrow_fill": lambda x: x.narrow(1, 0, 2).fill_(3.0),
    "chunk_fill": lambda x: x.chunk(2, dim=0)[0].fill_(3.0),
    "split_fill": lambda x: x.split(1, dim=1)[2].fill_(3.0),
    "chain_fill": lambda x: x.reshape(6)[0:2].fill_(9.0),
    "detached_view_fill": lambda x: x[0].detach().fill_(7.0),
}


def _base():
    return np.arange(6, dtype=np.float32).reshape(2, 3) / 4 - 0.5


@pytest.mark.parametrize("case", sorted(VIEW_WRITES))
def test_torch_writes_through_the_view(case):
    torch = pytest.importorskip("torch")
    x = torch.tensor(_base())
    VIEW_WRITES[case](x)
    assert not np.array_equal(x.numpy(), _base()), "torch's view write reached its base"


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
@pytest.mark.parametrize("case", sorted(VIEW_WRITES))
def test_write_through_a_view_copy_raises_and_leaves_the_base(case, graph):
    with gg.graph_mode(graph):
        x = gg.tensor(_base())
        with pytest.raises(RuntimeError, match="in torch is a view"):
            VIEW_WRITES[case](x)
        np.testing.assert_array_equal(x.numpy(), _base())


def test_refused_even_when_the_base_is_a_temporary():
    # Same error whether or not the base still lives (that depends on the GC and on graph mode's
    # queue), so eager and graph mode raise alike; .clone() is the explicit copy.
    for graph in (False, True):
        with gg.graph_mode(graph):
            y = gg.tensor(_base()).reshape(6)
            gc.collect()
            with pytest.raises(RuntimeError, match="reshape"):
                y.add_(1.0)
            z = gg.tensor(_base()).reshape(6).clone()
            z.add_(1.0)
            np.testing.assert_allclose(z.numpy(), _base().reshape(6) + 1.0)


def test_copies_in_torch_too_stay_writable():
    x = gg.tensor(_base())
    picked = x[gg.tensor([1, 0])]               # advanced indexing: a copy in torch as well
    picked.add_(1.0)
    c = x[0].clone()                            # an explicit copy
    c.fill_(4.0)
    x[0] = 5.0                                  # writing the base itself
    x[0:1].clone().zero_()
    expected = _base()
    expected[0] = 5.0
    np.testing.assert_array_equal(x.numpy(), expected)
    np.testing.assert_allclose(picked.numpy(), _base()[[1, 0]] + 1.0)
    np.testing.assert_array_equal(c.numpy(), [4.0, 4.0, 4.0])


def test_torch_copies_stay_copies_in_torch():
    torch = pytest.importorskip("torch")
    x = torch.tensor(_base())
    x[torch.tensor([1, 0])].add_(1.0)
    x[0].clone().fill_(4.0)
    np.testing.assert_array_equal(x.numpy(), _base())


def test_out_of_place_use_of_views_is_unchanged():
    x = gg.tensor(_base(), requires_grad=True)
    (x[0] * 2 + x.reshape(6)[:3] + x.T[:, 0]).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [[4.0, 4.0, 4.0], [0.0, 0.0, 0.0]])
