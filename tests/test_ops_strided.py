"""The OpInfo table on strided, non-contiguous view inputs (issue 12).

Every sample of every entry (the NaN/±inf ones included) runs again with each tensor input
(index and int tensors too) replaced by a non-contiguous view holding the same values: a step-2
view ``base[..., 0]`` of a base with a decoy value beside each element, or, for every other
sample of rank >= 2, a transposed view ``base.transpose(-2, -1)``; outside capture the base's memory
is shared with NumPy, so each view reads it through its strides. The forward is compared
with NumPy float64 in eager mode, graph mode, check mode and inside ``gg.capture``; for the first sample of
each differentiable entry the gradient must reach the base: the base's gradient is the view's
(finite differences of the reference) scattered into it, zero on the decoys.
"""
from __future__ import annotations

import numpy as np
import pytest

import ggmlgrad as gg
from ggmlgrad.testing.opinfo import all_opinfos, input_arrays, numeric_grad, tensor_indices, with_tensors
from ggmlgrad.tensor.views import contiguous_strides

OPINFOS = all_opinfos()


def _cases():
    for info in OPINFOS:
        rng = np.random.default_rng(abs(hash(info.name)) % 2**32)
        for i, s in enumerate(info.samples(rng)):
            yield pytest.param(info, s, i, id=f"{info.name}-{i}")


def _transposed(arr: np.ndarray, k: int) -> bool:
    """Which view sample ``k`` uses for ``arr``: transposed (odd samples whose last two dims are
    both > 1: a transposed size-1 dim is still contiguous) or step-2 along the last dim."""
    return k % 2 == 1 and arr.ndim >= 2 and arr.shape[-1] > 1 and arr.shape[-2] > 1


def _base_array(arr: np.ndarray, k: int) -> np.ndarray:
    """The base whose view (:func:`_view_of`) holds ``arr``'s values."""
    if _transposed(arr, k):
        return np.ascontiguousarray(np.swapaxes(arr, -1, -2))
    # step 2 along the last dim (same rank: ggml has 4 dims at most); a 0-d input: element 0 of (2,)
    base = np.empty(arr.shape[:-1] + (2 * arr.shape[-1],) if arr.ndim else (2,), arr.dtype)
    base[..., 0::2] = arr
    # a decoy that an op reading the wrong element would pick up (a valid index for index tensors)
    with np.errstate(all="ignore"):  # NaN/inf samples make NaN/inf decoys (float16 ones overflow)
        base[..., 1::2] = arr if arr.dtype.kind in "iub" else np.asarray(arr, np.float64) * -3.0 + 11.0
    return base


def _view_of(base, arr: np.ndarray, k: int):
    """The non-contiguous view of ``base`` (a tensor) with ``arr``'s values."""
    v = base.transpose(-2, -1) if _transposed(arr, k) else base[..., ::2] if arr.ndim else base[0]
    if arr.size >= 2 and any(n > 1 for n in arr.shape):
        assert not v.is_contiguous(), f"view of shape {arr.shape} is contiguous"
        assert v.stride() != contiguous_strides(tuple(arr.shape)), v.stride()
    return v


def _grad_of_view(base_grad: np.ndarray, arr: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray | None]:
    """(the view's gradient read out of the base's, the decoys' gradient or None)."""
    if _transposed(arr, k):
        return np.swapaxes(base_grad, -1, -2), None
    if arr.ndim == 0:
        return base_grad[0], base_grad[1:]
    return base_grad[..., 0::2], base_grad[..., 1::2]


def _tensor(arr: np.ndarray, requires_grad: bool = False):
    """A base whose memory is shared with NumPy, so that its views are strided reads of it (views of
    memory never shared keep their own copy: the capture mode's argument bases test that side)."""
    t = gg.tensor(arr, dtype=gg.int32) if arr.dtype.kind in "iub" else gg.tensor(arr, requires_grad=requires_grad)
    t.detach().numpy()
    return t


def _ref_inputs(sample):
    return [np.asarray(a, dtype=np.float32).astype(np.float64)
            if isinstance(a, np.ndarray) and a.dtype.kind == "f" else a for a in sample.args]


def _diff(info, sample, k):
    """Inputs whose gradient is checked: the first sample of a differentiable entry only."""
    if not info.grad or k != 0:
        return []
    return [i for i in tensor_indices(sample)
            if i not in sample.nondiff and np.asarray(sample.args[i]).dtype.kind == "f"]


def _run(info, sample, k, mode, weight, diff):
    """(output, {input index: base gradient}) with every tensor input a strided view."""
    idx = tensor_indices(sample)
    arrays = input_arrays(sample)
    bases = [_base_array(a, k) for a in arrays]

    def fn(w, *base_tensors):
        for i, b in zip(idx, base_tensors):
            if i in diff:
                b.requires_grad_(True)
        views = [_view_of(b, a, k) for b, a in zip(base_tensors, arrays)]
        out = info.fn(*with_tensors(sample, views), **sample.kwargs)
        if not diff:
            return out
        (out * w).sum().backward()
        return (out,) + tuple(b.grad for i, b in zip(idx, base_tensors) if i in diff)

    w = weight.astype(np.float32)
    if mode == "capture":
        captured = gg.capture(fn)
        if not info.capturable:
            with pytest.raises(gg.CaptureError):
                captured(w, *bases)
            return None
        for _ in range(2):
            res = captured(w, *bases)
    else:
        with gg.graph_mode(mode != "eager", check=mode == "check"):
            res = fn(gg.tensor(w), *[_tensor(b) for b in bases])
    res = _host(res) if not diff else tuple(_host(r) for r in res)
    if not diff:
        return np.asarray(res, dtype=np.float64), {}
    return np.asarray(res[0], dtype=np.float64), dict(zip(diff, res[1:]))


def _host(x):
    # .numpy(), as tests/test_ops.py reads results
    return x.detach().numpy().copy() if isinstance(x, gg.Tensor) else x


@pytest.mark.parametrize("info,sample,k", list(_cases()))
@pytest.mark.parametrize("mode", ["eager", "graph", "check", "capture"])
def test_strided_forward_and_grad(info, sample, k, mode):
    ref_args = _ref_inputs(sample)
    expected = np.asarray(info.ref(*ref_args, **sample.kwargs), dtype=np.float64)
    diff = _diff(info, sample, k)
    weight = np.random.default_rng(0).standard_normal(expected.shape)
    res = _run(info, sample, k, mode, weight, diff)
    if res is None:
        return
    got, grads = res
    assert got.shape == expected.shape, f"{info.name}: shape {got.shape} != {expected.shape}"
    np.testing.assert_allclose(got, expected, atol=info.atol, rtol=info.rtol,
                               err_msg=f"{info.name}: strided forward ({mode})")
    arrays = dict(zip(tensor_indices(sample), input_arrays(sample)))
    for i in diff:
        view_grad, decoy_grad = _grad_of_view(grads[i], arrays[i], k)
        np.testing.assert_allclose(view_grad, numeric_grad(lambda *a: info.ref(*a, **sample.kwargs), ref_args, i, weight, info.fd_eps),
                                   atol=info.grad_atol, rtol=info.grad_rtol,
                                   err_msg=f"{info.name}: base gradient of input {i} ({mode})")
        if decoy_grad is not None:
            np.testing.assert_array_equal(decoy_grad, 0.0, err_msg=f"{info.name}: gradient on decoys ({mode})")


def test_strided_views_are_really_strided():
    """The harness's views are non-contiguous and hold the values (so the table can fail)."""
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    for k in (0, 1):
        base = _tensor(_base_array(a, k))
        v = _view_of(base, a, k)
        assert not v.is_contiguous()
        np.testing.assert_array_equal(v.numpy(), a)
        assert v.data_ptr() - base.data_ptr() == v.storage_offset() * 4   # inside the base's memory
        if v.device.type == "cpu":   # host memory: NumPy sees it (a device tensor's .numpy() is a copy)
            assert np.shares_memory(v.numpy(), base.numpy())   # a strided read of the base's memory


def _train(captured: bool):
    """Three SGD-with-momentum steps of a tiny model, views of its parameters taken before the
    first step; (views' values after each step, parameters' values after each step)."""
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal((6, 4)).astype(np.float32), rng.standard_normal((6, 2)).astype(np.float32)
    gg.manual_seed(0)
    model = gg.nn.Linear(4, 2)
    opt = gg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    views = [model.weight.T, model.weight[1], model.bias[::2]]

    def loss_fn(xb, yb):
        return ((model(xb) - yb) ** 2).mean()

    step = gg.capture_step(loss_fn, opt) if captured else None
    seen = []
    for _ in range(3):
        if captured:
            step(x, y)
        else:
            opt.zero_grad()
            loss_fn(gg.tensor(x), gg.tensor(y)).backward()
            opt.step()
        seen.append(([v.detach().numpy().copy() for v in views], [model.weight.detach().numpy().copy(), model.bias.detach().numpy().copy()]))
    return seen


def test_capture_step_replay_refreshes_live_views_of_parameters():
    """A view of a parameter taken before a captured step shows every replay's update, as after an
    uncaptured step (and as a view taken after the step)."""
    for graph in (False, True):
        with gg.graph_mode(graph):
            eager, captured = _train(False), _train(True)
        for (ev, ep), (cv, cp) in zip(eager, captured):
            w, b = cp
            for got, want in zip(cv, [w.T, w[1], b[::2]]):   # the views follow the captured parameters
                np.testing.assert_array_equal(got, want)
            for got, want in zip(cv + cp, ev + ep):          # and match the uncaptured run
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_zero_dim_bool_converts_to_numpy_array():
    """np.asarray of a 0-d bool tensor (a comparison of a 0-d view) is a 0-d array, as in torch."""
    base = gg.tensor([0.5, 2.0])
    for t, want in ((base[0] == 0.5, True), (base[1] < 0.0, False)):
        a = np.asarray(t)
        assert isinstance(a, np.ndarray) and a.shape == () and a.dtype == np.bool_ and bool(a) is want
