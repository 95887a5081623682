"""np.asarray / np.array of a tensor that requires grad raises as torch does (a NumPy array of it
would escape autograd); detached tensors, and the library's own conversions, still work."""
from __future__ import annotations

import numpy as np
import pytest

import ggmlgrad as gg

MODES = {"eager": dict(on=False), "graph": dict(on=True), "check": dict(on=True, check=True)}
MESSAGE = "Can't call numpy\\(\\) on Tensor that requires grad"


def _conversions():
    return {"asarray": np.asarray, "array": np.array, "array_copy": lambda t: np.array(t, copy=True),
            "asarray_f64": lambda t: np.asarray(t, dtype=np.float64), "numpy": lambda t: t.numpy()}


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("conv", list(_conversions()))
def test_requires_grad_tensor_refuses_numpy_conversion(mode, conv):
    f = _conversions()[conv]
    with gg.graph_mode(**MODES[mode]):
        leaf = gg.tensor([1.0, -2.0, 3.0], requires_grad=True)
        nonleaf = leaf * 2.0
        for t in (leaf, nonleaf):
            with pytest.raises(RuntimeError, match=MESSAGE):
                f(t)
            got = f(t.detach())
            np.testing.assert_array_equal(got, np.array([1.0, -2.0, 3.0]) * (1.0 if t is leaf else 2.0))
        with gg.no_grad():
            np.testing.assert_array_equal(f(leaf * 1.0), [1.0, -2.0, 3.0])   # computed without grad: no grad


def test_same_error_as_torch():
    torch = pytest.importorskip("torch")
    for lib in (torch, gg):
        t = lib.tensor([1.0, 2.0], requires_grad=True)
        with pytest.raises(RuntimeError, match=MESSAGE):
            np.asarray(t)
        np.testing.assert_array_equal(np.asarray(t.detach()), [1.0, 2.0])


def test_library_paths_that_read_parameters_still_work(tmp_path):
    """state_dict / load_state_dict / save / load / DataLoader read tensors that require grad."""
    model = gg.nn.Linear(3, 2)
    other = gg.nn.Linear(3, 2)
    other.load_state_dict(model.state_dict())
    np.testing.assert_array_equal(other.weight.detach().numpy(), model.weight.detach().numpy())
    path = tmp_path / "m.safetensors"
    gg.save(model.state_dict(), str(path))
    loaded = gg.load(str(path))
    np.testing.assert_array_equal(np.asarray(loaded["weight"].detach()), model.weight.detach().numpy())
    x = gg.tensor(np.ones((4, 3), np.float32), requires_grad=True)
    batch = next(iter(gg.data.DataLoader(gg.data.TensorDataset(x), batch_size=2)))
    np.testing.assert_array_equal(batch[0].numpy(), np.ones((2, 3), np.float32))
