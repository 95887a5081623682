"""The per-op host fast paths (issue 21): ``x[i]`` as a slice of x's memory, ``buf[i] = row`` as one
byte copy, ``item()`` and ``numpy()`` read where the value lies, ``gg.tensor(obs)`` reuses the last
upload's storage. Each is compared with the general path (the fast path switched off) or NumPy:
values, layout, aliasing, version counters, gradients, errors, graph mode and capture."""
from __future__ import annotations

import gc
import importlib

import numpy as np
import pytest

import ggmlgrad as gg
from ggmlgrad.runtime import SliceAlias, Storage, pool_stats
from ggmlgrad.runtime import memory

interop = importlib.import_module("ggmlgrad.tensor.interop")
shape_methods = importlib.import_module("ggmlgrad.tensor.shape_methods")


@pytest.fixture
def eager():
    """The host paths are eager mode's (CI also runs the suite with graph mode on by default)."""
    with gg.graph_mode(False):
        yield


def _general_getitem(monkeypatch):
    monkeypatch.setattr(shape_methods, "try_getitem", lambda *a: None)
    monkeypatch.setattr(shape_methods, "row_read", lambda *a: None)   # (buf[i] calls it first)


def _general_setitem(monkeypatch):
    monkeypatch.setattr(shape_methods, "try_setitem", lambda *a: False)
    monkeypatch.setattr(shape_methods, "row_write", lambda *a: False)   # (buf[i] = v calls it first)


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view({4: np.uint32, 2: np.uint16}[a.dtype.itemsize])


# ---------------------------------------------------------------------------- x[i]
ROW_CASES = [((5,), gg.float32, 2), ((5,), gg.float32, -1), ((6, 3), gg.float32, 0), ((4, 2, 3), gg.int32, -4),
             ((3, 2, 2, 2), gg.float16, 1), ((2, 4), gg.int32, 1)]


def _base(shape, dtype):
    a = np.arange(int(np.prod(shape))).reshape(shape) * 3 - 7
    return gg.tensor(a.astype(dtype.np_dtype), dtype=dtype)


def test_row_read_is_the_slice_ops_view_and_lies_in_the_base_memory(monkeypatch, eager):
    fast = []
    for shape, dtype, i in ROW_CASES:
        x = _base(shape, dtype)
        gg.reset_counters()
        r = x[i]
        assert gg.counters()["computes"] == 0
        assert type(r._storage) is SliceAlias and r._storage.parent is x._storage  # nothing copied
        fast.append((r.shape, r.dtype, r.stride(), r.storage_offset(), r.is_contiguous(), r.tolist()))
    _general_getitem(monkeypatch)
    for (shape, dtype, i), got in zip(ROW_CASES, fast):
        x = _base(shape, dtype)
        r = x[i]
        assert got == (r.shape, r.dtype, r.stride(), r.storage_offset(), r.is_contiguous(), r.tolist())
        assert np.array_equal(np.asarray(got[-1]), x.numpy()[i])


def test_row_read_aliases_both_ways_and_shares_the_version_counter(eager):
    x = gg.tensor(np.zeros((4, 3), np.float32))
    r = x[2]
    v0 = x._version
    x.add_(1.0)                         # a write to the base (the write op: x has a live view)
    assert r.tolist() == [1.0, 1.0, 1.0] and r._version == x._version == v0 + 1
    x[2, 1] = 5.0                       # a host write into the base
    assert r.tolist() == [1.0, 5.0, 1.0]
    r.mul_(2.0)                         # a write through the view
    assert x.numpy()[2].tolist() == [2.0, 10.0, 2.0] and x.numpy()[1].tolist() == [1.0, 1.0, 1.0]
    assert r._version == x._version
    r2 = x[-1][1]                       # a row of a row (a view in its root's memory): still no copy
    assert type(r2._storage) is SliceAlias and r2._storage.parent is x._storage and r2.item() == 1.0
    x[3] = np.full(3, 7.0, np.float32)
    assert r2.item() == 7.0
    assert r2.storage_offset() == 10 and r2.data_ptr() == x.data_ptr() + 40


def test_row_read_of_a_view_with_memory_of_its_own_is_a_copy_that_follows_writes(eager):
    x = gg.tensor(np.arange(12, dtype=np.float32).reshape(4, 3))
    with gg.graph_mode(True):           # (eager mode's reshape of a root is a view in its memory)
        v = x.reshape(2, 6)             # a view with memory of its own (kept equal by every write)
    v.tolist()
    r = v[1]
    assert type(r._storage) is Storage and r.tolist() == [6.0, 7.0, 8.0, 9.0, 10.0, 11.0]
    del v
    gc.collect()
    x[3] = np.zeros(3, np.float32)      # the row is re-derived from the root, not from the dead view
    assert r.tolist() == [6.0, 7.0, 8.0, 0.0, 0.0, 0.0]


def test_row_read_keeps_torch_semantics():
    torch = pytest.importorskip("torch")
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    with gg.graph_mode(False):
        x, t = gg.tensor(a), torch.from_numpy(a.copy())
        rx, rt = x[1], t[1]
        assert (rx.stride(), rx.storage_offset(), rx.is_contiguous()) == (rt.stride(), rt.storage_offset(), True)
        rx[2] = -1.0
        rt[2] = -1.0
        assert x.tolist() == t.tolist()
        x.data = gg.zeros(4, 6)         # new memory: the view keeps the old values (torch's storage rule)
        t.data = torch.zeros(4, 6)
        assert rx.tolist() == rt.tolist() and x.tolist() == t.tolist()
    for key in (4, -5):
        with pytest.raises(IndexError) as gg_err:
            x[key]
        with pytest.raises(IndexError):
            t[key]
        assert "out of range" in str(gg_err.value) and "(4, 6)" in str(gg_err.value)


def test_row_read_with_grad_and_without(eager):
    w = gg.tensor(np.arange(6, dtype=np.float32).reshape(3, 2), requires_grad=True)
    r = w[1]                            # on the tape: the slice op
    assert r.grad_fn is not None and type(r._storage) is not SliceAlias
    (r * r).sum().backward()
    assert w.grad.tolist() == [[0.0, 0.0], [4.0, 6.0], [0.0, 0.0]]
    with gg.no_grad():
        r = w[2]                        # grad off: the host path's view, made without grad
        assert type(r._storage) is SliceAlias and r.grad_fn is None and not r.requires_grad
        r.add_(1.0)
    assert w.tolist() == [[0.0, 1.0], [2.0, 3.0], [5.0, 6.0]]
    with pytest.raises(RuntimeError, match="no_grad"):
        r.add_(1.0)                     # torch's refusal: a view made in no_grad written with grad on


def test_row_read_in_graph_mode_and_capture_is_recorded():
    x = gg.tensor(np.zeros((3, 2), np.float32))
    with gg.graph_mode(True):
        r = x[1]
        assert r.is_pending             # queued: the slice op, not a host read
        x[1, 0] = 4.0
    assert r.tolist() == [4.0, 0.0]

    buf = gg.tensor(np.zeros((3, 2), np.float32))

    def step(i):
        buf.add_(1.0)
        return buf[1] * i               # recorded: each replay reads the row anew

    f = gg.capture(step)
    for k in range(1, 4):
        out = f(gg.tensor(np.float32(k)))
        assert out.tolist() == [float(k * k)] * 2
    assert buf.tolist() == [[3.0, 3.0]] * 3


def test_row_read_of_memory_the_host_path_must_not_slice_takes_the_op(eager):
    x = gg.tensor(np.arange(6, dtype=np.float32).reshape(3, 2))
    b = x.bool()                        # bool storage: not read as bytes here
    assert type(b[1]._storage) is not SliceAlias and b[1].tolist() == [True, True]
    t = x.t()                           # a non-contiguous view: its row is not one block of memory
    assert t[1].tolist() == [1.0, 3.0, 5.0]
    e = gg.zeros(3, 0)
    assert e[1].shape == (0,)           # no elements: the op


# ---------------------------------------------------------------------------- buf[i] = row
def test_row_write_gives_the_write_ops_bits_and_version(monkeypatch, eager):
    rng = np.random.default_rng(0)
    base = rng.standard_normal((5, 2, 3)).astype(np.float32)
    other = gg.tensor(rng.standard_normal((4, 2, 3)).astype(np.float32))
    row = rng.standard_normal((2, 3)).astype(np.float32)
    row[0, 0] = np.frombuffer(np.uint32(0x7FC00123).tobytes(), np.float32)[0]  # a NaN payload travels
    values = [lambda: gg.tensor(row), lambda: row, lambda: other[3],           # a row that is a SliceAlias
              lambda: gg.tensor(row) * 1.0, lambda: np.asfortranarray(row),     # an op's result; a strided array
              lambda: row.astype(np.float64) * (1 + 1e-9), lambda: row.astype(np.float16)]  # rounded as the upload rounds

    def run(counts):
        out = []
        for make in values:
            for i in (0, -1, 3):
                x = gg.tensor(base)
                v = make()
                gg.reset_counters()
                x[i] = v
                counts.append(gg.counters()["computes"])
                out.append((x._version, x.numpy().copy()))
        return out
    n_fast, n_slow = [], []
    fast = run(n_fast)
    _general_setitem(monkeypatch)
    slow = run(n_slow)
    for (v1, a1), (v2, a2) in zip(fast, slow):
        assert v1 == v2 == 1 and np.array_equal(_bits(a1), _bits(a2))
    assert all(n == 0 for n in n_fast) and all(n > 0 for n in n_slow)


def test_row_write_keeps_the_rules_of_the_write_op(eager):
    x = gg.tensor(np.zeros((3, 2), np.float32))
    r = x[1]                            # a live view: refreshed (here: it lies in x's memory)
    x[1] = gg.tensor(np.ones(2, np.float32))
    assert r.tolist() == [1.0, 1.0]
    with pytest.raises(IndexError):
        x[3] = np.ones(2, np.float32)
    with pytest.raises(ValueError):
        x[0] = np.ones(3, np.float32)   # the write op's shape error
    src = gg.tensor(np.full(2, 2.0, np.float32), requires_grad=True)
    y = gg.tensor(np.zeros((3, 2), np.float32))
    y[2] = src                          # on the tape: the gradient reaches src
    (y * y).sum().backward()
    assert src.grad.tolist() == [4.0, 4.0]
    with gg.graph_mode(True):
        p = gg.tensor(np.full(2, 9.0, np.float32)) * 1.0
        assert p.is_pending
        z = x * 1.0                     # queued before the write: reads the old value
        x[0] = p                        # a pending value: computed first
    assert z.tolist()[0] == [0.0, 0.0] and x.tolist()[0] == [9.0, 9.0]


def test_row_write_with_live_views_leading_ones_and_int32_matches_the_write_op(monkeypatch, eager):
    # CleanRL's rollout: ``b_x = x.reshape(-1)`` (memory of its own) and row views stay alive while
    # ``x[step] = v`` writes; ``v`` of shape (1, n) (torch drops the leading 1) or int32 (actions).
    rng = np.random.default_rng(1)
    base = rng.standard_normal((4, 3)).astype(np.float32)
    values = [lambda: gg.tensor(rng.standard_normal(3).astype(np.float32)),
              lambda: gg.tensor(rng.standard_normal((1, 3)).astype(np.float32)),
              lambda: gg.tensor(rng.standard_normal((1, 1, 3)).astype(np.float32)) * 1.0,
              lambda: gg.tensor(np.array([16777217, -5, 7], np.int32), dtype=gg.int32),  # 2**24+1: rounds
              lambda: rng.standard_normal(3).astype(np.float32)]

    def run(counts):
        out = []
        for make in values:
            rng.bit_generator.state = np.random.default_rng(1).bit_generator.state
            x = gg.tensor(base)
            flat, row, col = x.reshape(-1), x[2], x[:, 1]
            _ = flat + 0.0                      # (flat's value is read once: refreshed after the write)
            v = make()
            gg.reset_counters()
            x[2] = v
            counts.append(gg.counters()["computes"])
            out.append((x._version, x.numpy().copy(), flat.numpy().copy(), row.numpy().copy(), col.numpy().copy()))
        return out
    n_fast, n_slow = [], []
    with monkeypatch.context() as m:
        m.setattr(shape_methods, "try_setitem", lambda *a: False)   # the row write alone takes every case
        fast = run(n_fast)
    _general_setitem(monkeypatch)
    slow = run(n_slow)
    for f, s in zip(fast, slow):
        assert f[0] == s[0] == 1
        for a, b in zip(f[1:], s[1:]):
            assert np.array_equal(_bits(a), _bits(b))
        assert np.array_equal(f[2], f[1].reshape(-1)) and np.array_equal(f[3], f[1][2])
    assert all(n == 0 for n in n_fast) and all(n > 0 for n in n_slow)
    assert fast[3][1][2].tolist() == [16777216.0, -5.0, 7.0]   # float32(2**24 + 1): nearest, as the cast


def test_row_write_of_a_view_of_the_same_buffer_or_a_wrong_shape_keeps_the_op(eager):
    x = gg.tensor(np.arange(6, dtype=np.float32).reshape(3, 2))
    flat = x.reshape(-1)
    x[0] = x[1]                         # the value is one of x's live views: the write op
    assert x.tolist() == [[2.0, 3.0], [2.0, 3.0], [4.0, 5.0]] and flat.tolist() == [2.0, 3.0, 2.0, 3.0, 4.0, 5.0]
    with pytest.raises(ValueError):
        x[0] = gg.tensor(np.ones((2, 1), np.float32))   # (2, 1) is not a row of 2 with leading 1s: the op's error
    with pytest.raises(ValueError):
        x[0] = gg.tensor(np.ones((2, 2), np.float32))
    assert x.tolist() == [[2.0, 3.0], [2.0, 3.0], [4.0, 5.0]]


def test_row_write_in_capture_is_recorded():
    buf = gg.tensor(np.zeros((4, 2), np.float32))

    def step(i, v):
        buf[i] = v
        return buf.sum()

    f = gg.capture(step)
    for k in range(4):
        out = f(k, gg.tensor(np.full(2, k + 1.0, np.float32)))
        assert out.item() == sum(2.0 * (j + 1) for j in range(k + 1))
    assert buf.tolist() == [[1.0, 1.0], [2.0, 2.0], [3.0, 3.0], [4.0, 4.0]]


# ---------------------------------------------------------------------------- item() / numpy()
def test_item_reads_where_the_value_lies(eager):
    cases = [(gg.tensor(np.array([[1.25]], np.float32)), 1.25), (gg.tensor([-7], dtype=gg.int32), -7),
             (gg.tensor(np.arange(4, dtype=np.float32))[3], 3.0), (gg.tensor(np.float32(1e-45)), float(np.float32(1e-45))),
             (gg.tensor(np.array([0.1], np.float16)), float(np.float16(0.1))), (gg.tensor([True]), True)]
    for t, want in cases:
        gg.reset_counters()
        got = t.item()
        assert got == want and type(got) is type(want)
        c = gg.counters()
        assert c["computes"] == 0 and c["downloads_by_site"].get("item()") == 1
    assert np.isnan(gg.tensor(np.float32(np.nan)).item())
    with pytest.raises(ValueError, match="item"):
        gg.tensor(np.ones(2, np.float32)).item()
    with gg.graph_mode(True):
        s = gg.tensor(np.ones((2, 2), np.float32)).sum()
        assert s.is_pending and s.item() == 4.0   # drained first
    f = gg.capture(lambda a: a.sum().item())
    with pytest.raises(gg.CaptureError):
        f(gg.tensor(np.ones(2, np.float32)))      # a recording cannot read a value


def test_numpy_is_a_view_of_the_memory_that_keeps_it_alive(eager):
    x = gg.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    y = x * 2.0
    a = y.numpy()
    assert a.flags.writeable and a.flags.c_contiguous and a.dtype == np.float32 and a.shape == (2, 3)
    assert a.ctypes.data == y.data_ptr()
    a[0, 0] = -1.0                      # writes on either side are seen by the other
    assert y.tolist()[0][0] == -1.0
    y.add_(1.0)
    assert a[1].tolist() == [7.0, 9.0, 11.0]
    col = y[:, 1]                       # a view made after the sharing lives in the shared memory
    a[1, 1] = 100.0
    assert col.tolist() == [3.0, 100.0]
    expect = a.copy()
    del y, col
    gc.collect()
    junk = [x * 3.0 for _ in range(8)]  # the pool must not hand the array's memory out again
    assert np.array_equal(a, expect) and junk[0].tolist() == [[0.0, 3.0, 6.0], [9.0, 12.0, 15.0]]
    general = interop.host_view(x, "numpy()")  # the general route's array of the same memory
    fast = x.numpy()
    assert (fast.ctypes.data, fast.shape, fast.strides, fast.dtype) == \
        (general.ctypes.data, general.shape, general.strides, general.dtype) and fast.flags.writeable
    for t, dt in ((gg.tensor([1, 2], dtype=gg.int32), np.int32), (gg.tensor(np.ones(3, np.float16)), np.float16),
                  (gg.tensor([True, False]), np.bool_), (gg.tensor(np.arange(4, dtype=np.float32))[1:3], np.float32)):
        got = t.numpy()
        assert got.dtype == dt and got.tolist() == t.tolist()
    w = gg.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="requires grad"):
        w.numpy()
    assert w.numpy(force=True).tolist() == [1.0, 1.0]


# ---------------------------------------------------------------------------- gg.tensor(obs)
def test_tensor_from_an_array_reuses_only_a_dropped_uploads_storage():
    a, b = np.arange(4, dtype=np.float32), np.arange(4, dtype=np.float32) + 10
    t1 = gg.tensor(a)
    t2 = gg.tensor(b)                   # t1 is alive: memory of its own
    assert t1._storage is not t2._storage and t1.tolist() == a.tolist() and t2.tolist() == b.tolist()
    s2 = id(t2._storage)                # (an id: a reference here would hold the storage)
    del t2
    t3 = gg.tensor(a * 2)               # t2 was dropped: its storage again
    assert id(t3._storage) == s2 and t3.tolist() == (a * 2).tolist() and t1.tolist() == a.tolist()
    held = t3.numpy()                   # a NumPy view holds t3's memory
    r = t1[1]                           # a view holds t1's memory
    del t3, t1
    t4 = gg.tensor(b * 3)
    assert id(t4._storage) != s2 and held.tolist() == (a * 2).tolist() and r.item() == 1.0
    assert t4.tolist() == (b * 3).tolist()


def test_upload_spares_count_as_cached_memory():
    memory.empty_cache()
    gg.tensor(np.ones(5, np.float32))   # dropped at once: only the spare table holds its storage
    gc.collect()
    n, b = memory._upload_spares(False)
    assert n >= 1 and b >= 20
    before = pool_stats()
    t = gg.tensor(np.ones(5, np.float32))  # takes the spare: one more live storage, one less cached
    after = pool_stats()
    assert after["live_count"] == before["live_count"] + 1
    del t
    gc.collect()
    assert pool_stats()["live_count"] == before["live_count"]
    memory.empty_cache()
    assert memory._upload_spares(False) == (0, 0)


def test_a_dropped_storage_goes_to_the_pool_or_back_to_the_device(monkeypatch):
    """Storage.__del__'s inlined pool path: a dropped block is cached (and handed out again), or freed
    when the cache is full; live counts return to where they were either way."""
    dev = gg.tensor([1.0]).device
    memory.empty_cache()
    base = pool_stats()
    s = Storage(dev, 3000)
    addr, cap = s.data, s.capacity
    assert pool_stats()["live_count"] == base["live_count"] + 1
    del s
    after = pool_stats()
    assert after["live_count"] == base["live_count"] and after["cached_bytes"] == base["cached_bytes"] + cap
    s = Storage(dev, 3000)
    assert s.data == addr               # the cached block again
    monkeypatch.setattr(memory, "_MAX_CACHED_BYTES", 0)
    del s
    full = pool_stats()
    assert full["live_count"] == base["live_count"] and full["cached_bytes"] == base["cached_bytes"]


def test_numpy_of_a_row_is_a_writable_view_of_the_base(eager):
    x = gg.tensor(np.arange(12, dtype=np.float32).reshape(4, 3))
    r = x[2]
    a = r.numpy()
    general = interop.host_view(r, "numpy()")
    assert (a.ctypes.data, a.shape, a.strides, a.dtype) == (general.ctypes.data, general.shape, general.strides,
                                                            general.dtype)
    assert a.flags.writeable and np.shares_memory(a, x.numpy())
    a[1] = -5.0                         # through the row's array: the base and the row see it
    assert x.tolist()[2] == [6.0, -5.0, 8.0] and r.tolist() == [6.0, -5.0, 8.0]
    v = x.reshape(2, 6)                 # made after the sharing: lives in x's memory
    x[0] = np.zeros(3, np.float32)
    assert v.tolist()[0][:3] == [0.0, 0.0, 0.0]
    del x, r, v
    gc.collect()
    assert a.tolist() == [6.0, -5.0, 8.0]  # the array keeps the base's memory alive
