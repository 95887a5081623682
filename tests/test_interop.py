"""Zero-copy interop on host devices (issue 12, item 7): ``gg.from_numpy``, ``gg.as_tensor``,
``Tensor.numpy()`` views, ``__array__``'s ``copy=``, and DLPack both ways — torch's sharing
rules, checked against NumPy, and against torch where it is installed."""
from __future__ import annotations

import gc
import subprocess
import sys
import weakref

import numpy as np
import pytest

import ggmlgrad as gg
from ggmlgrad._ggml import dlpack


# ---------------------------------------------------------------------------- from_numpy
def test_from_numpy_shares_memory_both_ways(graph):
    with gg.graph_mode(graph):
        a = np.arange(6, dtype=np.float32).reshape(2, 3)
        t = gg.from_numpy(a)
        assert t.dtype is gg.float32 and t.shape == (2, 3) and not t.requires_grad
        a[0, 1] = 50.0                            # NumPy → tensor
        assert t.tolist() == [[0.0, 50.0, 2.0], [3.0, 4.0, 5.0]]
        t.mul_(2)                                 # tensor → NumPy (in place)
        np.testing.assert_array_equal(a, [[0, 100, 4], [6, 8, 10]])
        t[1] = -1.0
        np.testing.assert_array_equal(a[1], [-1, -1, -1])
        r = (t + 1).sum()                         # an ordinary op reads it (graph mode: at the drain)
        assert r.item() == float((a + 1).sum())


@pytest.mark.parametrize("dt,gd", [(np.float32, gg.float32), (np.float16, gg.float16), (np.int32, gg.int32)])
def test_from_numpy_dtypes_that_share(dt, gd):
    a = np.array([[1, 2], [3, 4]], dtype=dt)
    t = gg.from_numpy(a)
    assert t.dtype is gd
    a[1, 1] = 9
    np.testing.assert_array_equal(t.numpy(), a)


@pytest.mark.parametrize("dt", [np.float64, np.int64, np.bool_, np.uint8, np.int16])
def test_from_numpy_refuses_what_it_cannot_share(dt):
    with pytest.raises(TypeError, match="from_numpy: cannot share memory of a .*gg.tensor"):
        gg.from_numpy(np.zeros(3, dtype=dt))


def test_from_numpy_refuses_strided_arrays_and_non_arrays():
    a = np.zeros((4, 4), np.float32)
    with pytest.raises(ValueError, match="C-contiguous"):
        gg.from_numpy(a[:, 1])
    with pytest.raises(ValueError, match="C-contiguous"):
        gg.from_numpy(a.T)
    with pytest.raises(TypeError, match="expected np.ndarray"):
        gg.from_numpy([1.0, 2.0])


def test_from_numpy_keeps_the_array_alive_and_takes_unaligned_bases():
    buf = np.zeros(1 + 6, np.float32)
    a = buf[1:]                                   # 4 bytes past a 32-byte boundary (or more)
    a[:] = np.arange(6)
    t = gg.from_numpy(a)
    ref = weakref.ref(buf)
    del a, buf
    gc.collect()
    assert ref() is not None                     # the tensor holds it
    assert (t * 2).tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
    del t
    gc.collect()
    assert ref() is None                          # and lets it go


def test_from_numpy_empty_0d_and_read_only():
    assert gg.from_numpy(np.zeros((0, 3), np.float32)).shape == (0, 3)
    s = np.array(2.5, np.float32)
    t = gg.from_numpy(s)
    assert t.shape == () and t.item() == 2.5
    ro = np.ones(3, np.float32)
    ro.flags.writeable = False
    with pytest.warns(UserWarning, match="not writable"):
        assert gg.from_numpy(ro).tolist() == [1.0, 1.0, 1.0]


def test_as_tensor_shares_when_it_can_and_copies_otherwise():
    a = np.ones(3, np.float32)
    t = gg.as_tensor(a)
    a[0] = 5
    assert t.tolist() == [5.0, 1.0, 1.0]
    d = np.ones(3)                                # float64: a float32 copy (the dtype rule)
    c = gg.as_tensor(d)
    d[0] = 5
    assert c.dtype is gg.float32 and c.tolist() == [1.0, 1.0, 1.0]
    assert gg.as_tensor(t) is t
    assert gg.as_tensor(a, dtype=gg.int32).dtype is gg.int32
    assert gg.as_tensor([1, 2]).dtype is gg.int32 and gg.as_tensor([1.0]).dtype is gg.float32


# ---------------------------------------------------------------------------- numpy() views
def test_numpy_is_a_view_that_follows_in_place_writes(graph):
    with gg.graph_mode(graph):
        t = gg.tensor([1.0, 2.0, 3.0]) * 1
        v = t.numpy()                             # graph mode: computed first
        t.add_(1)
        np.testing.assert_array_equal(v, [2, 3, 4])
        t[0] = 10.0
        t.copy_(np.array([7.0, 8.0, 9.0]))
        np.testing.assert_array_equal(v, [7, 8, 9])
        t.fill_(0.5)
        np.testing.assert_array_equal(v, [0.5, 0.5, 0.5])
        v[1] = -2.0                              # and the other way
        assert t.tolist() == [0.5, -2.0, 0.5]
        assert np.shares_memory(v, t.numpy())


def test_numpy_of_a_view_is_the_base_memory_both_ways(graph):
    """A view's array is its base's memory (torch's sharing), contiguous or strided: a NumPy write
    through it reaches the base, the other views and ops; a ggmlgrad write reaches the array."""
    with gg.graph_mode(graph):
        x = gg.zeros(2, 3)
        row, col = x[1], x[:, 2]
        a, c = row.numpy(), col.numpy()
        assert a.flags.writeable and c.flags.writeable
        assert np.shares_memory(a, x.numpy()) and np.shares_memory(c, x.numpy())
        assert c.strides == (12,)                 # torch's stride (3) times the itemsize
        a[0] = 5.0                                # through the row: the base and ops see it
        c[0] = -2.0                               # through the column
        assert x.tolist() == [[0, 0, -2], [5, 0, 0]]
        assert (row + 0).tolist() == [5, 0, 0] and col.sum().item() == -2.0
        x[1, 2] = 7.0                             # a write through the base reaches both arrays
        np.testing.assert_array_equal(a, [5, 0, 7])
        np.testing.assert_array_equal(c, [-2, 7])


def test_numpy_view_of_a_parameter_follows_the_optimizer(graph):
    with gg.graph_mode(graph):
        p = gg.tensor([1.0, -1.0], requires_grad=True)
        with pytest.raises(RuntimeError, match=r"Can't call numpy\(\) on Tensor that requires grad"):
            p.numpy()                             # torch's rule
        snapshot = p.detach().numpy().copy()
        view = p.numpy(force=True)                # torch's force: a view
        opt = gg.optim.SGD([p], lr=0.5)
        (p * p).sum().backward()
        opt.step()
        np.testing.assert_array_equal(snapshot, [1.0, -1.0])
        np.testing.assert_array_equal(view, [0.0, 0.0])
        np.testing.assert_array_equal(p.detach().numpy(), [0.0, 0.0])


def test_numpy_view_keeps_memory_after_the_tensor_dies():
    v = (gg.tensor([1.0, 2.0]) * 3).numpy()
    gc.collect()
    for _ in range(20):                          # recycled pool memory would overwrite a dangling view
        _ = (gg.tensor([100.0, 200.0]) * 1).numpy()
    np.testing.assert_array_equal(v, [3.0, 6.0])


def test_numpy_copies_what_numpy_cannot_view():
    b = gg.tensor([1.0, 2.0]).to("bfloat16")
    a = b.numpy()
    assert a.dtype == np.float32
    a[0] = 5
    assert b.tolist() == [1.0, 2.0]


def test_graph_mode_reads_shared_memory_when_the_queue_computes():
    """The documented rule (tensor/interop.py): a queued op sees a write made through NumPy
    before the drain; eager mode computed at once."""
    a = np.ones(2, np.float32)
    t = gg.from_numpy(a)
    results = {}
    for graph in (False, True):
        a[:] = 1
        with gg.graph_mode(graph):
            y = t * 2
            a[:] = 5
            results[graph] = y.tolist()
    assert results == {False: [2.0, 2.0], True: [10.0, 10.0]}


# ---------------------------------------------------------------------------- __array__
def test_array_protocol_copy_argument():
    t = gg.tensor([1.0, 2.0])
    a = np.asarray(t, copy=False)
    assert np.shares_memory(a, np.asarray(t))
    c = np.array(t, copy=True)
    assert not np.shares_memory(a, c)
    assert np.asarray(t, dtype=np.float64).dtype == np.float64
    with pytest.raises(ValueError, match="without a copy"):
        np.asarray(t, dtype=np.float64, copy=False)
    with pytest.raises(RuntimeError, match="requires grad"):   # as torch: detach first
        np.asarray(gg.tensor([1.0], requires_grad=True), copy=False)


# ---------------------------------------------------------------------------- DLPack
def test_dlpack_with_numpy_both_ways():
    t = gg.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert t.__dlpack_device__() == (1, 0)
    a = np.from_dlpack(t)
    a[0, 0] = 9.0
    assert t.tolist()[0][0] == 9.0
    n = np.arange(4, dtype=np.int32)
    g = gg.from_dlpack(n)
    assert g.dtype is gg.int32
    g.add_(10)
    np.testing.assert_array_equal(n, [10, 11, 12, 13])
    assert gg.from_dlpack(np.float16([1.5])).dtype is gg.float16


def test_dlpack_capsule_names_versions_and_lifetime():
    t = gg.tensor([1.0, 2.0])
    live = len(dlpack._LIVE)
    assert '"dltensor"' in repr(t.__dlpack__())
    assert '"dltensor_versioned"' in repr(t.__dlpack__(max_version=(1, 0)))
    assert '"dltensor"' in repr(t.__dlpack__(max_version=(0, 8)))
    gc.collect()
    assert len(dlpack._LIVE) == live              # unconsumed capsules release their structs
    for v in (None, (1, 0)):
        cap = t.__dlpack__(max_version=v)
        u = gg.from_dlpack(cap)
        assert u.tolist() == [1.0, 2.0]
        with pytest.raises(ValueError, match="consumed only once"):
            gg.from_dlpack(cap)
        del u, cap
        gc.collect()
    assert len(dlpack._LIVE) == live              # the consumer's deleter released them


def test_dlpack_copy_and_device_arguments():
    t = gg.tensor([1.0, 2.0])
    c = gg.from_dlpack(t.__dlpack__(copy=True))
    c.add_(1)
    assert t.tolist() == [1.0, 2.0]
    with pytest.raises(BufferError, match="CPU"):
        t.__dlpack__(dl_device=(2, 0))
    with pytest.raises(BufferError, match="stream"):
        t.__dlpack__(stream=1)
    with pytest.raises(RuntimeError, match="requires grad"):
        gg.tensor([1.0], requires_grad=True).__dlpack__()
    with pytest.raises(TypeError, match="cannot share"):
        gg.from_dlpack(np.zeros(2))               # float64
    with pytest.raises(ValueError, match="strided"):
        gg.from_dlpack(np.zeros((3, 3), np.float32)[:, 1])


def test_a_bad_capsule_never_reaches_ggml():
    code = ("import ggmlgrad as gg, numpy as np\n"
            "try:\n    gg.from_dlpack(object())\nexcept (ValueError, TypeError) as e:\n    print('ok', type(e).__name__)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.startswith("ok"), r.stderr[-2000:]


# ---------------------------------------------------------------------------- against torch
def _sharing_program(lib, a):
    """The same program in torch and ggmlgrad: share, write both ways, view, read."""
    t = lib.from_numpy(a)
    a[1] = 7.0
    t.mul_(2)
    v = t.numpy()
    v[0] = -1.0
    t.add_(1)
    return a.copy(), v.copy(), t.tolist()


def _errors(fn):
    try:
        fn()
    except Exception as e:       # noqa: BLE001  (the type is what is compared)
        return type(e)
    return None


def test_sharing_matches_torch():
    torch = pytest.importorskip("torch")
    for f in (lambda: np.arange(4, dtype=np.float32), lambda: np.arange(6, dtype=np.int32).reshape(2, 3)):
        mine = _sharing_program(gg, f())
        theirs = _sharing_program(torch, f())
        for m, t in zip(mine, theirs):
            np.testing.assert_array_equal(np.asarray(m), np.asarray(t))
    # errors raised alike: strided NumPy input to from_dlpack is fine in torch, not here (a
    # documented difference); a non-array is a TypeError in both
    assert _errors(lambda: gg.from_numpy([1.0])) is _errors(lambda: torch.from_numpy([1.0])) is TypeError


def test_dlpack_with_torch_both_ways():
    torch = pytest.importorskip("torch")
    t = gg.tensor([[1.0, 2.0], [3.0, 4.0]])
    x = torch.from_dlpack(t)
    x[1, 1] = 40.0
    assert t.tolist() == [[1.0, 2.0], [3.0, 40.0]]
    y = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    g = gg.from_dlpack(y)
    g.mul_(3)
    assert y.tolist() == (torch.arange(6.0) * 3).reshape(2, 3).tolist()
    b = torch.tensor([1.5, -2.25], dtype=torch.bfloat16)
    gb = gg.from_dlpack(b)
    assert gb.dtype is gg.bfloat16 and gb.tolist() == [1.5, -2.25]
    back = torch.from_dlpack(gb)
    assert back.dtype is torch.bfloat16 and back.data_ptr() == b.data_ptr()
    with pytest.raises(ValueError, match="strided"):
        gg.from_dlpack(y.T)
    with pytest.raises(TypeError, match="cannot share"):
        gg.from_dlpack(torch.arange(3))           # int64
    assert torch.from_dlpack(gg.tensor([1, 2])).dtype is torch.int32
