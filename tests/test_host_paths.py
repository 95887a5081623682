"""The eager host paths (tensor/host_writes.py, item(), OpPlan result reuse) give the bits the graph
routes give, run no compute, and keep the ordering and aliasing rules of the write op."""
from __future__ import annotations

import importlib

import numpy as np
import pytest

import ggmlgrad as gg

host_writes = importlib.import_module("ggmlgrad.tensor.host_writes")
shape_methods = importlib.import_module("ggmlgrad.tensor.shape_methods")

KEYS = [0, -1, 5, (2, 1), (slice(None), 1), (1, slice(1, 3)), (slice(0, 6, 2),), (3, slice(None), 2),
        (slice(2, 5), slice(None, None, 3)), (0, 1, 2), (slice(5, 2),)]


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint32 if a.dtype.itemsize == 4 else np.uint16)


def _without_host_path(monkeypatch):
    monkeypatch.setattr(host_writes, "try_setitem", lambda *a: False)
    monkeypatch.setattr(host_writes, "try_getitem", lambda *a: None)
    monkeypatch.setattr(shape_methods, "try_setitem", lambda *a: False)
    monkeypatch.setattr(shape_methods, "try_getitem", lambda *a: None)
    monkeypatch.setattr(shape_methods, "row_read", lambda *a: None)   # (buf[i] calls it first)
    monkeypatch.setattr(shape_methods, "row_write", lambda *a: False)


def _values(shape, dtype, rng):
    """Values for x[key] = v: a same-dtype tensor, float64 arrays whose float32 rounding matters, numbers."""
    if dtype is gg.int32:
        yield gg.tensor(rng.integers(-1000, 1000, shape).astype(np.int32), dtype=gg.int32)
        return
    v64 = rng.standard_normal(shape) * 1e3 + 1e-9  # float64 digits beyond float32's
    yield gg.tensor(v64.astype(np.float32))
    yield v64
    yield v64.astype(np.float16)
    yield 1.0 / 3.0
    yield 7
    yield np.float64(-2.5e-40)  # a float32 subnormal


@pytest.mark.parametrize("dtype", [gg.float32, gg.int32])
def test_setitem_host_path_gives_the_write_ops_bits(monkeypatch, dtype):
    rng = np.random.default_rng(0)
    base = rng.standard_normal((6, 4, 5)).astype(np.float32) * 100
    if dtype is gg.int32:
        base = base.astype(np.int32)
    cases = []
    for key in KEYS:
        shape = np.empty((6, 4, 5))[key].shape
        for v in _values(shape, dtype, rng):
            cases.append((key, v))
    fast = []
    for key, v in cases:
        x = gg.tensor(base, dtype=dtype)
        gg.reset_counters()
        x[key] = v
        empty = np.empty((6, 4, 5))[key].size == 0
        assert gg.counters()["computes"] == 0 or empty  # the host path ran: no graph
        assert x._version == 1
        fast.append(x.numpy().copy())
    _without_host_path(monkeypatch)
    for (key, v), got in zip(cases, fast):
        x = gg.tensor(base, dtype=dtype)
        gg.reset_counters()
        x[key] = v
        assert gg.counters()["computes"] > 0 or np.empty((6, 4, 5))[key].size == 0  # the write op
        assert np.array_equal(_bits(x.numpy()), _bits(got)), (key, v)


def test_setitem_host_path_keeps_torch_semantics():
    torch = pytest.importorskip("torch")
    x, t = gg.zeros(8, 3), torch.zeros(8, 3)
    for i in range(8):
        row = np.arange(3, dtype=np.float64) * i + 0.1
        x[i] = row
        t[i] = torch.from_numpy(row)
    x[2:6, 1] = 9.0
    t[2:6, 1] = 9.0
    assert np.array_equal(x.numpy(), t.numpy())
    with pytest.raises(ValueError):
        x[0] = np.ones(4)            # shape mismatch: the write op's error
    with pytest.raises(IndexError):
        x[8] = np.ones(3)            # out of range: the write op's error
    with pytest.raises(ValueError):
        x[::-1] = 1.0                # negative step: refused as before


def test_setitem_host_path_is_ordered_after_queued_reads():
    """Graph mode: an op queued before the write reads the old value (the queue computes first)."""
    x = gg.tensor(np.ones((4, 2), np.float32))
    with gg.graph_mode(True):
        y = x * 2.0
        x[0] = np.full(2, 5.0, np.float32)
        z = x * 2.0
    assert y.numpy()[0].tolist() == [2.0, 2.0]
    assert z.numpy()[0].tolist() == [10.0, 10.0]


def test_setitem_reaches_aliases_and_views():
    x = gg.zeros(4, 3)
    alias = x.detach()
    shared = x.numpy()                # host memory on the CPU; a copy of a device tensor (as torch's)
    x[1] = np.ones(3, np.float32)
    assert alias.numpy()[1].tolist() == [1.0, 1.0, 1.0]
    assert shared[1].tolist() == ([1.0, 1.0, 1.0] if x.device.type == "cpu" else [0.0, 0.0, 0.0])
    v = x[2]                          # a live view: the write op keeps it in step
    x[2] = np.full(3, 4.0, np.float32)
    assert v.tolist() == [4.0, 4.0, 4.0]


def _views_of(x):
    """Live views of every kind the host write refreshes: reshape, row, column, transpose, expand."""
    return [x.reshape(-1, 5), x[3], x[:, 1], x.permute(2, 0, 1), x[1:2].expand(3, 4, 5), x[2:2]]


def test_setitem_host_path_refreshes_live_views_as_the_write_op_does(monkeypatch, eager):
    """A row write into a buffer with live views (CleanRL's ``b_obs = obs.reshape(...)`` alive while the
    next rollout writes ``obs[step] = ...``): the host path computes nothing, and every view holds the
    write op's bits afterwards. Sources: an array, a view, an int32 tensor into float32, a value with leading size-1 dims."""
    rng = np.random.default_rng(1)
    base = rng.standard_normal((6, 4, 5)).astype(np.float32)
    row = rng.standard_normal((4, 5))
    sources = [lambda: row, lambda: gg.tensor(row.astype(np.float32)).reshape(20).view(4, 5),
               lambda: gg.tensor(np.arange(20, dtype=np.int32).reshape(4, 5) * 12345679, dtype=gg.int32),  # rounds
               lambda: gg.tensor(row.astype(np.float32)[None, None]),  # leading size-1 dims (GAE's (1, n) rows)
               lambda: 2.5]

    def run(keys):
        out = []
        for src in sources:
            x = gg.tensor(base)
            vs = _views_of(x)
            for k in keys:
                v = src()
                gg.reset_counters()
                x[k] = v
                # (tolist: numpy() would share x's memory, and the views would then live in it)
                out.append([np.asarray(w.tolist(), np.float32) for w in vs + [x]])
                out.append(gg.counters()["computes"])
        return out
    keys = [0, 3, slice(1, 3), -1]
    fast = run(keys)
    _without_host_path(monkeypatch)
    slow = run(keys)
    for f, s in zip(fast[::2], slow[::2]):
        for a, b in zip(f, s):
            assert np.array_equal(_bits(a), _bits(b))
    assert all(n == 0 for n in fast[1::2]) and all(n > 0 for n in slow[1::2])


def test_setitem_host_path_declines_a_source_in_the_family():
    x = gg.tensor(np.arange(12, dtype=np.float32).reshape(4, 3))
    v = x[1]
    gg.reset_counters()
    x[0] = v                          # the source is a view of x: the write op does it
    assert gg.counters()["computes"] > 0
    assert x.numpy()[0].tolist() == [3.0, 4.0, 5.0] and v.tolist() == [3.0, 4.0, 5.0]


def test_index_array_host_path_gives_the_ops_bits(monkeypatch, eager):
    """``x[np_index]`` (CleanRL's ``b_obs[mb_inds]``) in eager mode: NumPy gathers the rows on the
    host (no compute), with index_select's bits, shape and dtype; negative and 2-D index arrays,
    int32 tensors, views. Out-of-range indices, autograd and graph mode take the op."""
    rng = np.random.default_rng(2)
    xf = rng.standard_normal((9, 3, 2)).astype(np.float32)
    xf[0, 0, 0] = np.nan
    xi = rng.integers(-50, 50, (9, 4)).astype(np.int32)
    keys = [rng.permutation(9)[:5], np.array([-1, 0, -9, 8], np.int64), np.array([[1, 2], [3, 3]], np.int32),
            np.array([4], np.uint8)]

    def run():
        out = []
        for base, dt in ((xf, gg.float32), (xi, gg.int32)):
            x = gg.tensor(base, dtype=dt)
            for src in (x, x.reshape(9, -1)):   # (the view has memory of its own)
                for k in keys:
                    gg.reset_counters()
                    y = src[k]
                    out.append((y.shape, y.dtype, np.asarray(y.tolist(), base.dtype), gg.counters()["computes"]))
        return out
    fast = run()
    monkeypatch.setattr(shape_methods, "try_take", lambda *a: None)
    slow = run()
    for (s1, d1, v1, n1), (s2, d2, v2, n2) in zip(fast, slow):
        assert s1 == s2 and d1 is d2 and np.array_equal(_bits(v1), _bits(v2))
        assert n1 == 0 and n2 > 0
    x = gg.tensor(xf)
    with pytest.raises(IndexError):
        x[np.array([9])]                  # out of range: the op's error
    w = gg.tensor(xf, requires_grad=True)
    w[np.array([1, 1])].sum().backward()  # on the tape: the gradient reaches w
    assert w.grad.numpy()[1].tolist() == [[2.0, 2.0]] * 3


def test_tensor_from_float32_array_fast_path_matches_the_general_path():
    """``gg.tensor(float32 C-contiguous array)`` (an observation per step) skips the conversions: the
    same bits (a NaN payload, -0.0, a subnormal), shape, dtype, upload count and copy semantics as
    the general path (``dtype="float32"`` by name takes it)."""
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in ((4,), (2, 3), (2, 1, 3), (1, 2, 2, 2))]
    arrays[0][:3] = [np.frombuffer(np.uint32(0x7FC00123).tobytes(), np.float32)[0], -0.0, 1e-45]
    for a in arrays:
        for kw in ({}, {"dtype": gg.float32}, {"requires_grad": True}):
            gg.reset_counters()
            fast = gg.tensor(a, **kw)
            n_fast = gg.counters()["uploads"]
            gg.reset_counters()
            slow = gg.tensor(a, **{**kw, "dtype": "float32"})
            assert gg.counters()["uploads"] == n_fast == 1
            assert fast.shape == slow.shape == a.shape and fast.dtype is slow.dtype is gg.float32
            assert fast.requires_grad == slow.requires_grad == bool(kw.get("requires_grad"))
            assert np.array_equal(_bits(fast.detach().numpy()), _bits(slow.detach().numpy()))
            assert np.array_equal(_bits(fast.detach().numpy()), _bits(a))
    a = np.ones(3, np.float32)
    t = gg.tensor(a)
    a[0] = 5.0                                   # a copy, not a view of the array
    assert t.tolist() == [1.0, 1.0, 1.0]


def test_setitem_with_grad_takes_the_tape():
    w = gg.zeros(3, 2, requires_grad=True)
    with pytest.raises(RuntimeError):
        w[0] = np.ones(2, np.float32)  # torch's leaf error, not a silent host write
    src = gg.tensor(np.ones(2, np.float32), requires_grad=True)
    buf = gg.zeros(3, 2)
    buf[1] = src                       # recorded (CopySlices): the gradient reaches src
    buf.sum().backward()
    assert src.grad.tolist() == [1.0, 1.0]


@pytest.fixture
def eager():
    """The host read paths are eager mode's (CI runs the suite with graph mode on by default too)."""
    with gg.graph_mode(False):
        yield


def test_getitem_host_path_gives_the_slice_ops_values(monkeypatch, eager):
    a = np.arange(6 * 4 * 5, dtype=np.float32).reshape(6, 4, 5)
    x = gg.tensor(a)
    fast = []
    for key in KEYS:
        gg.reset_counters()
        v = x[key]
        got = v.numpy().copy()
        if v.numel():
            assert gg.counters()["computes"] == 0  # copied on the host, read where it lies
        fast.append((v.shape, got, v.stride(), v.storage_offset()))
    _without_host_path(monkeypatch)
    for key, (shape, val, stride, off) in zip(KEYS, fast):
        v = x[key]
        assert (v.shape, v.stride(), v.storage_offset()) == (shape, stride, off)
        assert np.array_equal(v.numpy(), val) and np.array_equal(val, a[key])


def test_getitem_in_graph_mode_is_the_slice_op():
    x = gg.tensor(np.arange(15, dtype=np.float32).reshape(5, 3))
    with gg.graph_mode(True):
        row = x[2]
        assert row.is_pending  # queued, not copied on the host: the queue may write x before it computes
        x[2, 1] = -1.0
    assert row.tolist() == [6.0, -1.0, 8.0]  # a view: it follows the write, as in eager mode


def test_getitem_host_path_is_a_view(eager):
    x = gg.tensor(np.zeros((5, 3), np.float32))
    row = x[2]
    x[2, 1] = 3.0                       # a write to the base reaches the view
    assert row.tolist() == [0.0, 3.0, 0.0]
    row[0] = 7.0                        # a write through the view reaches the base
    assert x.numpy()[2].tolist() == [7.0, 3.0, 0.0]
    if x.device.type != "cpu":
        return                          # below: NumPy writes to host memory (a device tensor's .numpy() is a copy)
    shared = x.numpy()                  # shared memory: views live in it
    col = x[:, 1]
    shared[4, 1] = -1.0
    assert col.tolist()[4] == -1.0


def test_item_reads_host_memory(eager):
    x = gg.tensor(np.array([[1.5]], np.float32))
    gg.reset_counters()
    assert x.item() == 1.5 and isinstance(x.item(), float)
    c = gg.counters()
    assert c["computes"] == 0 and c["downloads_by_site"].get("item()") == 2
    assert gg.tensor([7], dtype=gg.int32).item() == 7
    assert gg.tensor([True]).item() is True           # bool storage: the download path
    with gg.graph_mode(True):
        s = (x * 2).sum()
        assert s.item() == 3.0                        # pending: drained first


def test_op_plan_reuses_a_dropped_result_only(eager):
    a = gg.tensor(np.arange(16, dtype=np.float32).reshape(4, 4))
    expect = (np.arange(16, dtype=np.float32) * 2).reshape(4, 4)
    kept = [a + a for _ in range(4)]          # all alive: each its own memory
    assert len({t.data_ptr() for t in kept}) == 4
    for t in kept:
        assert np.array_equal(t.numpy(), expect)
    arr = kept[-1].numpy()                   # a NumPy view holds the memory too
    del kept
    for _ in range(3):
        b = a + a
    assert np.array_equal(arr, expect) and np.array_equal(b.numpy(), expect)
    assert b._storage.data != arr.ctypes.data
