"""Views in their base's memory once it is shared (tensor/views.py ``share_memory``): every route
that reads memory must read a strided view through its strides (eager op plans, graph plans,
module forward replays, capture arguments, downloads) and writes must land in the base.

References: NumPy float64 on the same values, and torch where installed.
"""
from __future__ import annotations

import numpy as np
import pytest

import ggmlgrad as gg
from ggmlgrad.runtime import SliceAlias, StridedAlias

F32 = np.float32


def _shared(shape, seed=0):
    """A tensor whose memory NumPy shares (``from_numpy``), and that array."""
    a = np.random.default_rng(seed).standard_normal(shape).astype(F32)
    return gg.from_numpy(a), a


@pytest.mark.parametrize("graph", [False, True])
def test_views_of_shared_memory_are_slices_or_strided_reads_of_it(graph):
    x, a = _shared((3, 4))
    y = gg.tensor(a)               # memory never shared: views keep their own copy
    with gg.graph_mode(graph):
        slices = [x[1], x[1:3], x.view(-1)]
        strided = [x.T, x[:, 1], x[:, ::2], x.expand(2, 3, 4), x.permute(1, 0)]
        own = y[:, 1]
        (x + y).sum().item()       # graph mode: a read computes the queue; views move after it
    assert all(type(v._storage) is SliceAlias for v in slices)
    assert all(type(v._storage) is StridedAlias for v in strided)
    assert type(own._storage) not in (SliceAlias, StridedAlias)


@pytest.mark.parametrize("graph", [False, True])
def test_a_numpy_write_reaches_views_made_before_it_through_every_read(graph):
    x, a = _shared((4, 6))
    with gg.graph_mode(graph):
        row, col, t, step = x[2], x[:, 3], x.T, x[1:, ::2]
        a[:] = np.arange(24, dtype=F32).reshape(4, 6)   # written behind ggmlgrad's back
        w = gg.tensor(np.ones((4, 2), F32))
        outs = [row + 1, col * 2, t @ w, step.sum(dim=0), gg.nn.functional.relu(-t)]
    ref = a.astype(np.float64)
    expect = [ref[2] + 1, ref[:, 3] * 2, ref.T @ np.ones((4, 2)), ref[1:, ::2].sum(0), np.maximum(-ref.T, 0)]
    for o, r in zip(outs, expect):
        np.testing.assert_allclose(o.numpy(), r, rtol=1e-6)
    np.testing.assert_array_equal(col.numpy(), ref[:, 3])


def test_an_op_plan_made_on_contiguous_input_is_not_reused_for_a_strided_view():
    """Eager ops cache a plan per signature (shapes, dtypes); a strided view of the same shape must
    not be read as if it were contiguous."""
    x, a = _shared((3, 3))
    c = gg.tensor(np.arange(9, dtype=F32).reshape(3, 3))
    for _ in range(3):                       # plans are made on a signature's second use
        np.testing.assert_allclose((c * 2).numpy(), np.arange(9).reshape(3, 3) * 2)
    for _ in range(3):
        np.testing.assert_allclose((x.T * 2).numpy(), a.T.astype(np.float64) * 2, rtol=1e-6)
    with gg.graph_mode(True):                # graph plans likewise
        for _ in range(3):
            r1 = (c + 1).exp()
            np.testing.assert_allclose(r1.numpy(), np.exp(np.arange(9).reshape(3, 3) + 1.0), rtol=1e-5)
        for _ in range(3):
            r2 = (x.T + 1).exp()
            np.testing.assert_allclose(r2.numpy(), np.exp(a.T.astype(np.float64) + 1), rtol=1e-5)


def test_a_module_forward_replay_reads_a_strided_argument_through_its_strides():
    gg.manual_seed(0)
    lin = gg.nn.Linear(4, 2)
    w, b = lin.weight.detach().numpy().astype(np.float64), lin.bias.detach().numpy().astype(np.float64)
    plain = gg.tensor(np.ones((3, 4), F32))
    for _ in range(4):                       # the forward is recorded, then replayed
        lin(plain)
    x, a = _shared((4, 3))
    for _ in range(3):
        out = lin(x.T)
        np.testing.assert_allclose(out.detach().numpy(), a.T @ w.T + b, rtol=1e-5, atol=1e-6)


def test_a_strided_view_as_a_capture_argument_is_read_through_its_strides():
    f = gg.capture(lambda v: v * 3.0)
    x, a = _shared((3, 5))
    for k in range(3):
        a[:] = k
        a[:, 2] = np.arange(3) + k
        np.testing.assert_allclose(f(x[:, 2]), (np.arange(3) + k) * 3.0)
        np.testing.assert_allclose(f(x.T[1:4]), a.T[1:4] * 3.0)


@pytest.mark.parametrize("opt_cls", [gg.optim.SGD, gg.optim.Adam])
def test_a_parameter_made_from_a_view_shares_its_base_memory(opt_cls):
    """torch: nn.Parameter(view) shares the base's memory, so an optimizer step shows in the base,
    contiguous or strided (Adam: its fused kernel cannot write a strided view, the composed one does)."""
    res = {}
    for view in ("row", "t"):
        w = gg.tensor(np.arange(6, dtype=F32).reshape(2, 3))
        p = gg.nn.Parameter(w[1] if view == "row" else w.t())
        opt = opt_cls([p], lr=0.5)
        for _ in range(2):
            opt.zero_grad()
            (p * p).sum().backward()
            opt.step()
        res[view] = (w.numpy().copy(), p.detach().numpy().copy())
    for view, (wv, pv) in res.items():
        r = np.arange(6, dtype=np.float64).reshape(2, 3)
        sl = (slice(1, 2), slice(None)) if view == "row" else (slice(None), slice(None))
        r[sl] = _steps_ref(r[sl], opt_cls is gg.optim.Adam)
        np.testing.assert_allclose(wv, r, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(pv, r[1] if view == "row" else r.T, rtol=1e-5, atol=1e-6)


def _steps_ref(x, adam: bool, lr=0.5, b1=0.9, b2=0.999, eps=1e-8):
    """Two steps of SGD or Adam (torch's defaults) on sum(x**2), in float64."""
    m = v = np.zeros_like(x)
    for t in (1, 2):
        g = 2 * x
        if not adam:
            x = x - lr * g
            continue
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        x = x - lr * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)
    return x


def test_data_set_to_a_view_takes_the_base_memory_and_writes_reach_it():
    base = gg.tensor(np.zeros((2, 3), F32))
    t = gg.zeros(3, 2)
    t.data = base.T                           # torch: t now shares base's memory, transposed
    t.add_(1.0)
    t[0, 1] = 5.0
    np.testing.assert_array_equal(base.numpy(), [[1, 1, 1], [5, 1, 1]])
    np.testing.assert_array_equal(t.numpy(), [[1, 5], [1, 1], [1, 1]])


def test_writes_through_ggmlgrad_and_numpy_interleave_on_strided_views():
    x, a = _shared((3, 4))
    col = x[:, 1]
    col.add_(10.0)                            # through the view: lands in a
    a[0, 1] = -1.0                            # through NumPy: seen by the view
    col.mul_(2.0)
    ref = np.random.default_rng(0).standard_normal((3, 4)).astype(F32).astype(np.float64)
    ref[:, 1] += 10
    ref[0, 1] = -1
    ref[:, 1] *= 2
    np.testing.assert_allclose(a, ref, rtol=1e-6)
    np.testing.assert_allclose(col.numpy(), ref[:, 1], rtol=1e-6)
    assert col._version == x._version == 2


def test_a_view_keeps_the_shared_memory_alive():
    x, a = _shared((4, 4))
    t = x.T
    del x, a
    import gc
    gc.collect()
    junk = [gg.ones(4, 4) * k for k in range(8)]   # reuse freed pool blocks
    ref = np.random.default_rng(0).standard_normal((4, 4)).astype(F32).T
    np.testing.assert_array_equal(t.numpy(), ref)
    np.testing.assert_array_equal((t + 0).numpy(), ref)
    del junk


def test_autograd_through_a_strided_view_of_shared_memory():
    x, a = _shared((3, 4))
    x.requires_grad_(True)
    wv = np.random.default_rng(1).standard_normal(3).astype(F32)
    (x[:, 2] * gg.tensor(wv)).sum().backward()
    g = np.zeros((3, 4), F32)
    g[:, 2] = wv
    np.testing.assert_allclose(x.grad.numpy(), g)


def test_torch_parity_of_strided_sharing():
    torch = pytest.importorskip("torch")
    a = np.arange(12, dtype=F32).reshape(3, 4)
    res = {}
    for lib in ("torch", "gg"):
        arr = a.copy()
        x = torch.from_numpy(arr) if lib == "torch" else gg.from_numpy(arr)
        t, col = x.T, x[:, 1]
        arr[1, 1] = 50.0
        tn = t.numpy()
        tn[2, 0] = -7.0
        res[lib] = (t.stride(), col.stride(), col.storage_offset(), (t @ x).tolist(), arr.copy(),
                    tn.strides, col.numpy().tolist())
    for u, v in zip(res["torch"], res["gg"]):
        if isinstance(u, tuple):
            assert u == v
        else:
            np.testing.assert_array_equal(np.asarray(u), np.asarray(v))


@pytest.mark.parametrize("args", [(1, 3, 2), (1, 2, 1), (0, 1, 1), (-1, 4, 1), (1, 0, 1)])
def test_unfold_is_a_view_with_torch_strides(args):
    a = np.arange(12, dtype=F32).reshape(3, 4)
    x = gg.tensor(a)
    u = x.unfold(*args)
    windows = np.lib.stride_tricks.sliding_window_view(a, args[1], axis=args[0] % 2)
    ref = np.take(windows, range(0, a.shape[args[0] % 2] - args[1] + 1, args[2]), axis=args[0] % 2)
    np.testing.assert_array_equal(u.numpy(), ref)
    d = args[0] % 2
    strides = [4, 1]
    assert u.stride() == tuple(strides[:d] + [strides[d] * args[2]] + strides[d + 1:] + [strides[d]])
    x.add_(1.0)                                   # a write to the base reaches the windows
    np.testing.assert_array_equal(u.numpy(), ref + 1)
    x.numpy()[:] = -a                             # and so does one through NumPy
    np.testing.assert_array_equal((u * 1.0).numpy(), -ref)
    if u.numel():
        with pytest.raises(RuntimeError, match="unfold"):
            u.add_(1.0)                           # windows may share elements: refused, not lost


def test_unfold_errors_as_torch():
    x = gg.zeros(3, 4)
    for args, err, msg in [((1, 5, 1), RuntimeError, "maximum size for tensor at dimension 1 is 4 but size is 5"),
                           ((1, 2, 0), RuntimeError, "step is 0 but must be > 0"),
                           ((1, -1, 1), RuntimeError, "size is -1 but must be >= 0"),
                           ((2, 1, 1), IndexError, "out of range")]:
        with pytest.raises(err, match=msg):
            x.unfold(*args)
    with pytest.raises(ValueError, match="unfold"):
        gg.zeros(2, 2, 2, 2).unfold(0, 1, 1)      # five dimensions: ggml has four
