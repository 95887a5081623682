"""Views share their base's memory, as in torch (issue 12): the acceptance test of strided views.

A view (``x[1]``, ``x[:, 1]``, ``x.T``, ``x.view(-1)``, ``x.narrow(...)``, split pieces, views of
views, ...) is a strided alias of its base's storage: contiguous views a slice of it, the others
read it through their strides. So a write made OUTSIDE ggmlgrad into the base's memory (through
``x.numpy()``, the array given to ``gg.from_numpy``, ``np.from_dlpack(x)``, ``torch.from_dlpack(x)``)
is seen by every view made before it, in its values and as an op input, in eager mode, graph mode,
check mode and capture replays; ``view.numpy()`` and DLPack exports of a view are strided aliases
of the same memory (writable, ``np.shares_memory`` with the base, torch's strides); ``data_ptr()``
is the address of the view's first element. In-place writes through ggmlgrad, autograd through
views and torch's version-counter errors are unchanged.

References: the same program on a NumPy float64 copy of the base (values), the flat element
indices a view selects (which element a write through it reaches), finite differences in float64
(gradients) and torch when installed (strides, pointers, errors, whole programs).
"""
from __future__ import annotations

import gc
import subprocess
import sys

import numpy as np
import pytest

import ggmlgrad as gg
import ggmlgrad.nn.functional as F

SHAPE = (3, 4, 5)
BASE = (np.arange(60, dtype=np.float64).reshape(SHAPE) - 29.5) / 4   # multiples of 1/8: exact in float32
FLAT_INDEX = np.arange(60).reshape(SHAPE)                            # which base element each entry is


# name -> (the view in gg/torch spelling, the same selection on a NumPy array). The NumPy form is
# only used for values and element indices, so it may copy where NumPy cannot view.
CONTIGUOUS = {
    "row": (lambda x: x[1], lambda a: a[1]),
    "row_slice": (lambda x: x[1:3], lambda a: a[1:3]),
    "view_flat": (lambda x: x.view(-1), lambda a: a.reshape(-1)),
    "view_4d": (lambda x: x.view(3, 2, 2, 5), lambda a: a.reshape(3, 2, 2, 5)),
    "reshape": (lambda x: x.reshape(12, 5), lambda a: a.reshape(12, 5)),
    "flatten": (lambda x: x.flatten(1), lambda a: a.reshape(3, 20)),
    "unsqueeze": (lambda x: x.unsqueeze(1), lambda a: a[:, None]),
    "squeeze": (lambda x: x[1:2].squeeze(0), lambda a: a[1]),
    "narrow_dim0": (lambda x: x.narrow(0, 1, 2), lambda a: a[1:3]),
    "select_dim0": (lambda x: x.select(0, 2), lambda a: a[2]),
    "chunk_piece": (lambda x: x.chunk(2, dim=0)[1], lambda a: a[2:3]),
    "unbind_dim0_piece": (lambda x: x.unbind(0)[1], lambda a: a[1]),
    "row_of_row": (lambda x: x[1][2], lambda a: a[1][2]),
    "slice_of_flat_row": (lambda x: x[1].view(-1)[3:9], lambda a: a[1].reshape(-1)[3:9]),
}
STRIDED = {
    "column": (lambda x: x[:, 1], lambda a: a[:, 1]),
    "step_slice": (lambda x: x[:, ::2], lambda a: a[:, ::2]),
    "T": (lambda x: x[0].T, lambda a: a[0].T),
    "t": (lambda x: x[2].t(), lambda a: a[2].T),
    "permute": (lambda x: x.permute(2, 0, 1), lambda a: a.transpose(2, 0, 1)),
    "transpose": (lambda x: x.transpose(0, 2), lambda a: a.transpose(2, 1, 0)),
    "mT": (lambda x: x.mT, lambda a: np.swapaxes(a, 1, 2)),
    "reshape_of_strided": (lambda x: x[:, :, 1:4].reshape(12, 3), lambda a: a[:, :, 1:4].reshape(12, 3)),
    "squeeze_of_strided": (lambda x: x[:, :1].squeeze(1), lambda a: a[:, 0]),
    "unsqueeze_of_strided": (lambda x: x[:, 1].unsqueeze(0), lambda a: a[None, :, 1]),
    "narrow": (lambda x: x.narrow(2, 1, 3), lambda a: a[:, :, 1:4]),
    "select": (lambda x: x.select(1, 2), lambda a: a[:, 2]),
    "split_piece": (lambda x: x.split(2, dim=2)[1], lambda a: a[:, :, 2:4]),
    "unbind_piece": (lambda x: x.unbind(2)[3], lambda a: a[:, :, 3]),
    "view_of_view": (lambda x: x.transpose(0, 2)[1:, ::2], lambda a: a.transpose(2, 1, 0)[1:, ::2]),
    "select_of_permute": (lambda x: x.permute(1, 0, 2)[::2].select(2, 1), lambda a: a.transpose(1, 0, 2)[::2][:, :, 1]),
}
EXPANDED = {  # read only: several elements share one memory location
    "expand": (lambda x: x[:, :1].expand(3, 4, 5), lambda a: np.broadcast_to(a[:, :1], (3, 4, 5))),
    "expand_new_dim": (lambda x: x[1, 2].expand(4, 5), lambda a: np.broadcast_to(a[1, 2], (4, 5))),
}
VIEWS = {**CONTIGUOUS, **STRIDED, **EXPANDED}
WRITABLE = [k for k in VIEWS if k not in EXPANDED]
WRITERS = ["numpy", "from_numpy", "np_from_dlpack", "torch_from_dlpack"]


# ---------------------------------------------------------------------------- helpers
def _outside_write(a) -> None:
    """The write made outside ggmlgrad: changes every element (and one to a distinct value)."""
    a *= -2
    a += 1
    a[1, 2, 3] = 40


def _written_base() -> np.ndarray:
    a = BASE.copy()
    _outside_write(a)
    return a


def _base_and_writer(writer: str):
    """A float32 base tensor (BASE) and the function making ``_outside_write`` on its memory from
    outside ggmlgrad, through ``writer``."""
    if writer == "from_numpy":
        src = BASE.astype(np.float32)
        return gg.from_numpy(src), lambda: _outside_write(src)
    x = gg.tensor(BASE)
    if writer == "numpy":
        return x, lambda: _outside_write(x.numpy())
    if writer == "np_from_dlpack":
        return x, lambda: _outside_write(np.from_dlpack(x))
    assert writer == "torch_from_dlpack"
    torch = pytest.importorskip("torch")

    def write():
        t = torch.from_dlpack(x)
        t.mul_(-2).add_(1)
        t[1, 2, 3] = 40
    return x, write


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def _write_through_array(a: np.ndarray) -> None:
    """A write through a (possibly strided) array of a view: every element, and its first one."""
    a *= -2
    a += 3
    a[(0,) * a.ndim] = 99


def _base_after_view_array_write(kind: str) -> np.ndarray:
    """BASE after ``_write_through_array`` on the array of view ``kind``, worked out element by element."""
    _, make_np = VIEWS[kind]
    idx = make_np(FLAT_INDEX)
    want = BASE.copy().reshape(-1)
    want[idx] = want[idx] * -2 + 3
    want[idx[(0,) * idx.ndim]] = 99
    return want.reshape(SHAPE)


# ---------------------------------------------------------------------------- outside writes: values
@pytest.mark.parametrize("writer", WRITERS)
@pytest.mark.parametrize("kind", list(VIEWS))
def test_a_view_sees_an_outside_write_to_its_base(kind, writer, graph):
    make, make_np = VIEWS[kind]
    x, write = _base_and_writer(writer)
    v = make(x)
    np.testing.assert_array_equal(v.numpy(), make_np(BASE))     # the view has its value before the write
    write()
    want = make_np(_written_base())
    np.testing.assert_array_equal(v.numpy(), want)
    assert v.tolist() == want.tolist()
    assert x.tolist() == _written_base().tolist()


def _ops(v, w):
    return [v + 1, v @ w, v.sum(), F.relu(v)]


def _np_ops(a, w):
    return [a + 1, a @ w, a.sum(), np.maximum(a, 0)]


def _weights(v) -> np.ndarray:
    return np.linspace(-1.0, 2.0, v.shape[-1] * 2).reshape(v.shape[-1], 2)


# ---------------------------------------------------------------------------- outside writes: ops
def _check_ops_see_an_outside_write(kind: str, writer: str) -> None:
    make, make_np = VIEWS[kind]
    x, write = _base_and_writer(writer)
    v = make(x)
    wn = _weights(v)
    w = gg.tensor(wn)
    for got, want in zip(_ops(v, w), _np_ops(make_np(BASE), wn)):   # the view is used before the write
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)
    write()
    for got, want in zip(_ops(v, w), _np_ops(make_np(_written_base()), wn)):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("writer", WRITERS)
@pytest.mark.parametrize("kind", list(VIEWS))
def test_ops_on_a_view_see_an_outside_write(kind, writer, graph):
    _check_ops_see_an_outside_write(kind, writer)


@pytest.mark.parametrize("kind", list(VIEWS))
def test_ops_on_a_view_see_an_outside_write_in_check_mode(kind):
    with gg.graph_mode(True, check=True):
        _check_ops_see_an_outside_write(kind, "numpy")


@pytest.mark.parametrize("kind", ["row", "column", "T", "view_flat", "view_of_view"])
def test_graph_mode_queued_op_on_a_view_reads_the_memory_when_the_queue_computes(kind):
    """The documented rule of tensor/interop.py, for views: an op queued before an outside write
    reads the memory when the queue computes (as it does for the base)."""
    make, make_np = VIEWS[kind]
    src = BASE.astype(np.float32)
    x = gg.from_numpy(src)
    v = make(x)
    v.numpy()                                       # the view is computed; nothing left queued
    with gg.graph_mode(True):
        y, z = v * 2, x * 2
        _outside_write(src)
        np.testing.assert_array_equal(z.numpy(), _written_base() * 2)
        np.testing.assert_array_equal(y.numpy(), make_np(_written_base()) * 2)


# ---------------------------------------------------------------------------- outside writes: capture
@pytest.mark.parametrize("writer", ["numpy", "from_numpy"])
@pytest.mark.parametrize("kind", list(VIEWS))
def test_a_captured_function_reads_an_outside_view_at_each_replay(kind, writer):
    make, make_np = VIEWS[kind]
    x, write = _base_and_writer(writer)
    v = make(x)

    @gg.capture
    def f(y):
        return v * y + v.sum()

    y = np.linspace(0.5, 2.0, v.numel()).reshape(v.shape).astype(np.float32)
    for _ in range(2):                              # records, then replays
        a = make_np(BASE)
        np.testing.assert_allclose(f(y), a * y + a.sum(), rtol=1e-5, atol=1e-5)
    write()
    a = make_np(_written_base())
    np.testing.assert_allclose(f(y), a * y + a.sum(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("writer", ["numpy", "from_numpy"])
@pytest.mark.parametrize("kind", list(VIEWS))
def test_a_view_passed_to_a_captured_function_is_read_at_each_call(kind, writer):
    make, make_np = VIEWS[kind]
    x, write = _base_and_writer(writer)
    v = make(x)

    @gg.capture
    def f(t, y):
        return t * y + 1

    y = np.linspace(0.5, 2.0, v.numel()).reshape(v.shape).astype(np.float32)
    for _ in range(2):
        np.testing.assert_allclose(f(v, y), make_np(BASE) * y + 1, rtol=1e-6, atol=1e-5)
    write()
    np.testing.assert_allclose(f(v, y), make_np(_written_base()) * y + 1, rtol=1e-6, atol=1e-5)


def test_a_captured_write_through_an_outside_view_then_an_outside_write():
    x = gg.tensor(BASE)
    col = x[:, 1]

    @gg.capture
    def bump(y):
        col.add_(y)
        return col * 1

    y = np.ones((3, 5), np.float32)
    want = BASE.copy()
    for _ in range(2):
        want[:, 1] += 1
        np.testing.assert_array_equal(bump(y), want[:, 1])
    x.numpy()[:, 1] = 0.0                           # outside: the next replay starts from it
    np.testing.assert_array_equal(bump(y), np.ones((3, 5)))
    want[:, 1] = 1.0
    assert x.tolist() == want.tolist()


# ---------------------------------------------------------------------------- view.numpy() aliases the base
@pytest.mark.parametrize("kind", WRITABLE)
def test_numpy_of_a_view_is_a_writable_alias_of_the_base(kind, graph):
    make, make_np = VIEWS[kind]
    x = gg.tensor(BASE)
    v = make(x)
    flat, col = x.view(-1), x[:, 1]                # siblings made before the write
    a = v.numpy()
    assert a.flags.writeable
    assert np.shares_memory(a, x.numpy())
    _write_through_array(a)
    want = _base_after_view_array_write(kind)
    assert x.tolist() == want.tolist()
    np.testing.assert_array_equal(v.numpy(), make_np(want))
    np.testing.assert_array_equal(flat.numpy(), want.reshape(-1))
    np.testing.assert_array_equal(col.numpy(), want[:, 1])
    np.testing.assert_allclose((col * 2 + 1).numpy(), want[:, 1] * 2 + 1, rtol=1e-6)
    np.testing.assert_allclose(x.sum().item(), want.sum(), rtol=1e-6)
    np.testing.assert_allclose((v + 1).numpy(), make_np(want) + 1, rtol=1e-6)


@pytest.mark.parametrize("kind", list(VIEWS))
def test_numpy_of_a_view_has_the_views_strides_and_address(kind):
    make, make_np = VIEWS[kind]
    x = gg.tensor(BASE)
    v = make(x)
    a = v.numpy()
    np.testing.assert_array_equal(a, make_np(BASE))
    assert a.shape == v.shape
    assert a.strides == tuple(4 * s for s in v.stride())
    assert _address(a) == v.data_ptr()
    assert v.data_ptr() - x.data_ptr() == 4 * v.storage_offset()
    assert np.shares_memory(a, x.numpy())


@pytest.mark.parametrize("kind", list(VIEWS))
def test_numpy_of_a_view_matches_torch(kind):
    torch = pytest.importorskip("torch")
    make, _ = VIEWS[kind]
    x, tx = gg.tensor(BASE), torch.tensor(BASE, dtype=torch.float32)
    a, ta = make(x).numpy(), make(tx).numpy()
    assert a.strides == ta.strides
    assert _address(a) - _address(x.numpy()) == _address(ta) - _address(tx.numpy())
    assert a.flags.c_contiguous == ta.flags.c_contiguous
    np.testing.assert_array_equal(a, ta)


@pytest.mark.parametrize("kind", ["row", "column", "T", "view_of_view"])
def test_numpy_of_a_view_that_requires_grad(kind):
    """torch's rule (raise; detach() or force=True for the alias) holds for views too."""
    make, _ = VIEWS[kind]
    p = gg.tensor(BASE, requires_grad=True)
    v = make(p)
    with pytest.raises(RuntimeError, match="requires grad"):     # torch's rule
        v.numpy()
    a = v.detach().numpy()
    assert a.flags.writeable and np.shares_memory(a, p.detach().numpy())
    f = v.numpy(force=True)
    assert np.shares_memory(f, p.detach().numpy())
    _write_through_array(a)
    assert p.tolist() == _base_after_view_array_write(kind).tolist()


def test_a_view_numpy_taken_before_ggmlgrad_writes_follows_them(graph):
    """The views are temporaries: only their arrays live on, and alias the base as in torch."""
    x = gg.tensor(BASE)
    a_col, a_t, a_flat = x[:, 1].numpy(), x[0].T.numpy(), x.view(-1).numpy()
    x.add_(1.0)
    x[0, 1] = 50.0
    x.view(-1)[7] = -3.0
    want = BASE + 1
    want[0, 1] = 50.0
    want.reshape(-1)[7] = -3.0
    np.testing.assert_array_equal(a_col, want[:, 1])
    np.testing.assert_array_equal(a_t, want[0].T)
    np.testing.assert_array_equal(a_flat, want.reshape(-1))


# ---------------------------------------------------------------------------- layout and data_ptr
@pytest.mark.parametrize("dtype", ["float32", "float16", "int32"])
@pytest.mark.parametrize("kind", list(VIEWS))
def test_layout_and_data_ptr_match_torch(kind, dtype):
    torch = pytest.importorskip("torch")
    make, _ = VIEWS[kind]
    x = gg.tensor(BASE.astype(dtype), dtype=getattr(gg, dtype))
    tx = torch.tensor(BASE.astype(dtype))
    v, tv = make(x), make(tx)
    assert v.shape == tuple(tv.shape)
    assert v.stride() == tv.stride()
    assert v.storage_offset() == tv.storage_offset()
    assert v.is_contiguous() == tv.is_contiguous()
    assert v.data_ptr() - x.data_ptr() == tv.data_ptr() - tx.data_ptr() == v.storage_offset() * tx.element_size()


@pytest.mark.parametrize("kind", list(VIEWS))
def test_data_ptr_is_the_address_of_the_first_element(kind):
    make, make_np = VIEWS[kind]
    x = gg.tensor(BASE)
    v = make(x)
    idx = make_np(FLAT_INDEX)
    assert v.storage_offset() == idx[(0,) * idx.ndim]
    assert v.data_ptr() - x.data_ptr() == 4 * v.storage_offset()
    np.testing.assert_array_equal(v.numpy(), make_np(BASE))   # the view has its value (graph mode too)
    base_array = x.numpy()
    first = base_array.reshape(-1)[v.storage_offset():][:1]
    assert _address(first) == v.data_ptr()
    base_array.reshape(-1)[v.storage_offset()] = 123.0     # the element data_ptr points at
    assert v.numpy()[(0,) * v.ndim] == 123.0


@pytest.mark.parametrize("dtype", ["float16", "int32"])
@pytest.mark.parametrize("kind", ["row", "column", "T", "view_flat", "split_piece", "view_of_view"])
def test_other_dtypes_share_memory_with_their_views(kind, dtype):
    make, make_np = VIEWS[kind]
    ints = FLAT_INDEX - 29                          # exact in both dtypes
    x = gg.tensor(ints.astype(dtype), dtype=getattr(gg, dtype))
    v = make(x)
    assert v.tolist() == make_np(ints).tolist()
    outside = x.numpy()
    outside *= -1                                   # a write outside ggmlgrad
    assert v.tolist() == make_np(-ints).tolist()
    a = v.numpy()
    assert a.dtype == np.dtype(dtype) and np.shares_memory(a, x.numpy())
    assert a.strides == tuple(a.itemsize * s for s in v.stride())
    a[...] = 7
    want = (-ints).reshape(-1)
    want[make_np(FLAT_INDEX)] = 7
    assert x.tolist() == want.reshape(SHAPE).tolist()


# ---------------------------------------------------------------------------- DLPack of views
@pytest.mark.parametrize("kind", list(VIEWS))
def test_np_from_dlpack_of_a_view_aliases_the_base(kind, graph):
    make, make_np = VIEWS[kind]
    x = gg.tensor(BASE)
    v = make(x)
    d = np.from_dlpack(v)
    np.testing.assert_array_equal(d, make_np(BASE))
    assert d.strides == tuple(4 * s for s in v.stride())
    assert np.shares_memory(d, x.numpy())
    if kind in EXPANDED:
        return
    _write_through_array(d)
    assert x.tolist() == _base_after_view_array_write(kind).tolist()


@pytest.mark.parametrize("kind", list(VIEWS))
def test_torch_from_dlpack_of_a_view_aliases_the_base(kind, graph):
    torch = pytest.importorskip("torch")
    make, make_np = VIEWS[kind]
    x = gg.tensor(BASE)
    v = make(x)
    t = torch.from_dlpack(v)
    tv = make(torch.tensor(BASE, dtype=torch.float32))
    np.testing.assert_array_equal(t.numpy(), make_np(BASE))
    assert t.stride() == tv.stride()
    assert t.data_ptr() == v.data_ptr()
    if kind in EXPANDED:
        return
    _write_through_array(t.numpy())
    assert x.tolist() == _base_after_view_array_write(kind).tolist()


# ---------------------------------------------------------------------------- torch programs
def _sharing_program(lib, kind):
    """The same program in torch and ggmlgrad: views, an outside write to the base, a write
    through a view's array, reads of everything."""
    make, _ = VIEWS[kind]
    x = lib.tensor(BASE.astype(np.float32))
    v, col = make(x), x[:, 1]
    out = [v.tolist()]
    _outside_write(x.numpy())
    out += [v.tolist(), (v * 2).sum().item(), col.tolist()]
    if kind not in EXPANDED:
        _write_through_array(v.numpy())
        out += [x.tolist(), col.tolist(), v.tolist()]
    out.append(np.shares_memory(v.numpy(), x.numpy()))
    return out


@pytest.mark.parametrize("kind", list(VIEWS))
def test_sharing_program_gives_what_torch_gives(kind, graph):
    torch = pytest.importorskip("torch")
    assert _sharing_program(gg, kind) == _sharing_program(torch, kind)


def test_reshape_that_copies_does_not_alias_as_in_torch(graph):
    """Where torch's reshape/flatten/contiguous copy, an outside write is not seen (and the copy's
    array does not share the base's memory)."""
    x = gg.tensor(BASE)
    copies = {"flatten": x[:, 1:3].flatten(0, 1), "reshape": x.transpose(0, 1).reshape(-1),
              "contiguous": x[:, 1].contiguous()}
    before = {k: c.numpy().copy() for k, c in copies.items()}
    _outside_write(x.numpy())
    for k, c in copies.items():
        np.testing.assert_array_equal(c.numpy(), before[k], err_msg=k)
        assert not np.shares_memory(c.numpy(), x.numpy()), k
        assert c.storage_offset() == 0 and c.is_contiguous(), k
    assert x[1].contiguous().data_ptr() == x[1].data_ptr()      # contiguous already: itself


def test_reshape_that_copies_in_torch_too():
    torch = pytest.importorskip("torch")
    x = torch.tensor(BASE, dtype=torch.float32)
    c = x[:, 1:3].flatten(0, 1)
    r = x.transpose(0, 1).reshape(-1)
    _outside_write(x.numpy())
    assert not np.shares_memory(c.numpy(), x.numpy()) and not np.shares_memory(r.numpy(), x.numpy())


# ---------------------------------------------------------------------------- writes through ggmlgrad
_DTYPE_BASES = {
    "float32": (np.arange(12.0).reshape(3, 4) / 2 - 2, 5.0, 7.0, -1.5),
    "float16": (np.arange(12.0).reshape(3, 4) / 2 - 2, 5.0, 7.0, -1.5),
    "int32": (np.arange(12).reshape(3, 4) - 5, 5, 7, -2),
    "bool": (np.arange(12).reshape(3, 4) % 3 == 0, True, False, True),
}


def _ggmlgrad_writes(x, dtype: str, a, b, c) -> None:
    """Writes through views of a gg or torch tensor ``x`` (shape (3, 4))."""
    x[0].fill_(a)
    x.view(-1)[3] = b
    x.T[2] = c                                       # setitem through a transposed view
    x[:, 3] = x[:, 0].clone()
    if dtype in ("float32", "int32"):                # float16 and bool: storage only, no arithmetic
        x.T[0] += 1
        x.add_(1)


def _numpy_writes(x: np.ndarray, dtype: str, a, b, c) -> None:
    """The same writes on a NumPy array."""
    x[0] = a
    x.reshape(-1)[3] = b
    x.T[2] = c
    x[:, 3] = x[:, 0].copy()
    if dtype in ("float32", "int32"):
        x.T[0] += 1
        x += 1


@pytest.mark.parametrize("dtype", sorted(_DTYPE_BASES))
def test_writes_through_ggmlgrad_reach_views_and_base(dtype, graph):
    base, a, b, c = _DTYPE_BASES[dtype]
    x = gg.tensor(base, dtype=getattr(gg, dtype))
    row, col, tr, flat = x[1], x[:, 2], x.T, x.view(-1)
    arrays = {} if dtype == "bool" else {"row": row.numpy(), "col": col.numpy(), "tr": tr.numpy()}
    want = base.copy()
    _ggmlgrad_writes(x, dtype, a, b, c)
    _numpy_writes(want, dtype, a, b, c)
    assert x.tolist() == want.tolist()
    assert row.tolist() == want[1].tolist() and col.tolist() == want[:, 2].tolist()
    assert tr.tolist() == want.T.tolist() and flat.tolist() == want.reshape(-1).tolist()
    for name, arr in arrays.items():                # arrays taken before the writes follow them
        np.testing.assert_array_equal(arr, {"row": want[1], "col": want[:, 2], "tr": want.T}[name], err_msg=name)


@pytest.mark.parametrize("dtype", sorted(_DTYPE_BASES))
def test_writes_through_ggmlgrad_match_torch(dtype):
    torch = pytest.importorskip("torch")
    base, a, b, c = _DTYPE_BASES[dtype]
    x = gg.tensor(base, dtype=getattr(gg, dtype))
    tx = torch.tensor(base, dtype=getattr(torch, dtype))
    _ggmlgrad_writes(x, dtype, a, b, c)
    _ggmlgrad_writes(tx, dtype, a, b, c)
    assert x.tolist() == tx.tolist()


# ---------------------------------------------------------------------------- autograd
GRAD_KINDS = ["row", "column", "step_slice", "T", "permute", "view_flat", "reshape_of_strided", "narrow",
              "split_piece", "unbind_piece", "view_of_view", "select_of_permute", "expand", "expand_new_dim"]


def _coef(shape) -> np.ndarray:
    return np.linspace(-1.5, 2.0, int(np.prod(shape))).reshape(shape)


def _loss_np(kind, a):
    v = VIEWS[kind][1](a)
    return (np.maximum(v, 0) * _coef(v.shape)).sum() + 0.5 * (v * v).sum()


def _loss(kind, x, relu, as_tensor):
    v = VIEWS[kind][0](x)
    return (relu(v) * as_tensor(_coef(tuple(v.shape)))).sum() + 0.5 * (v * v).sum()


def _finite_differences(kind, a, eps=1e-4) -> np.ndarray:
    g = np.zeros_like(a)
    for i in np.ndindex(a.shape):
        hi, lo = a.copy(), a.copy()
        hi[i] += eps
        lo[i] -= eps
        g[i] = (_loss_np(kind, hi) - _loss_np(kind, lo)) / (2 * eps)
    return g


@pytest.mark.parametrize("kind", GRAD_KINDS)
def test_gradients_through_views_match_finite_differences(kind, graph):
    x = gg.tensor(BASE, requires_grad=True)
    loss = _loss(kind, x, F.relu, gg.tensor)
    loss.backward()
    np.testing.assert_allclose(loss.item(), _loss_np(kind, BASE), rtol=1e-5)
    np.testing.assert_allclose(x.grad.numpy(), _finite_differences(kind, BASE), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kind", GRAD_KINDS)
def test_gradients_through_views_match_torch(kind):
    torch = pytest.importorskip("torch")
    x = gg.tensor(BASE, requires_grad=True)
    tx = torch.tensor(BASE, dtype=torch.float32, requires_grad=True)
    _loss(kind, x, F.relu, gg.tensor).backward()
    _loss(kind, tx, torch.relu, lambda c: torch.tensor(c, dtype=torch.float32)).backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kind", GRAD_KINDS)
def test_gradients_use_the_value_an_outside_write_gave(kind, graph):
    """A view of a leaf made before a write through ``x.detach().numpy()``: the loss and its
    gradient are those of the new value (torch: the view reads the storage)."""
    x = gg.tensor(BASE, requires_grad=True)
    v = VIEWS[kind][0](x)
    v.detach().numpy()                              # the view has its value before the write
    _outside_write(x.detach().numpy())
    loss = (F.relu(v) * gg.tensor(_coef(v.shape))).sum() + 0.5 * (v * v).sum()   # _loss on the view made before
    loss.backward()
    written = _written_base()
    np.testing.assert_allclose(loss.item(), _loss_np(kind, written), rtol=1e-5)
    np.testing.assert_allclose(x.grad.numpy(), _finite_differences(kind, written), rtol=1e-4, atol=1e-4)


SAVED_KINDS = ["row", "column", "T", "view_flat", "narrow", "view_of_view", "split_piece", "unbind_piece"]


def _write_after_save(lib, kind, through_view: bool):
    """A view of a non-leaf is saved for backward, then written in place (through the view or the
    base) before backward: torch raises RuntimeError (at the write for split/unbind pieces)."""
    x = lib.tensor(BASE.astype(np.float32), requires_grad=True)
    b = x * 1.0
    v = VIEWS[kind][0](b)
    y = (v * v).sum()
    if through_view:
        v.mul_(2.0)
    else:
        b.add_(1.0)
    y.backward()


@pytest.mark.parametrize("through_view", [True, False], ids=["view_write", "base_write"])
@pytest.mark.parametrize("kind", SAVED_KINDS)
def test_inplace_after_save_raises_as_torch(kind, through_view, graph):
    multi = kind in ("split_piece", "unbind_piece") and through_view
    with pytest.raises(RuntimeError, match="multiple views" if multi else "modified"):
        _write_after_save(gg, kind, through_view)


@pytest.mark.parametrize("through_view", [True, False], ids=["view_write", "base_write"])
@pytest.mark.parametrize("kind", SAVED_KINDS)
def test_torch_raises_on_inplace_after_save(kind, through_view):
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError):
        _write_after_save(torch, kind, through_view)


# ---------------------------------------------------------------------------- lifetime
def _churn():
    """Allocate and fill memory of the base's size, so freed memory would be overwritten."""
    for k in range(20):
        (gg.tensor(np.full(SHAPE, 1000.0 + k, np.float32)) * 1).numpy()


@pytest.mark.parametrize("source", ["numpy", "from_numpy"])
def test_views_keep_the_base_memory_alive(source, graph):
    """``del base``: its views (and their arrays) still read the memory; an outside write made
    afterwards through an array of the base (or the from_numpy source) still reaches them."""
    if source == "from_numpy":
        outside = BASE.astype(np.float32)
        x = gg.from_numpy(outside)
    else:
        x = gg.tensor(BASE)
        outside = x.numpy()
    views = {k: make(x) for k, (make, _) in VIEWS.items()}
    arrays = {k: v.numpy() for k, v in views.items()}
    del x
    gc.collect()
    _churn()
    for k, (_, make_np) in VIEWS.items():
        np.testing.assert_array_equal(views[k].numpy(), make_np(BASE), err_msg=k)
    _outside_write(outside)
    _churn()
    for k, (_, make_np) in VIEWS.items():
        np.testing.assert_array_equal(views[k].numpy(), make_np(_written_base()), err_msg=k)
        np.testing.assert_array_equal(arrays[k], make_np(_written_base()), err_msg=k)


def test_view_arrays_keep_memory_alive_after_base_and_view_die():
    x = gg.tensor(BASE)
    col, tr = x[:, 1].numpy(), x[0].T.numpy()
    d = np.from_dlpack(x.transpose(0, 2))
    del x
    gc.collect()
    _churn()
    np.testing.assert_array_equal(col, BASE[:, 1])
    np.testing.assert_array_equal(tr, BASE[0].T)
    np.testing.assert_array_equal(d, BASE.transpose(2, 1, 0))
    d[1, 1, 0] = 77.0                                # all three alias one memory: col is x[:, 1] = d[:, 1, :].T
    assert col[0, 1] == 77.0


# ---------------------------------------------------------------------------- bad input
NEGATIVE_STEPS = ["x[::-1]", "x[:, ::-2]", "x[:, 1, ::-1]", "x[0].T[::-1]", "x.view(-1)[::-3]",
                  "x.transpose(0, 2)[1:, ::-1]", "x[:, ::0]"]


@pytest.mark.parametrize("expr", NEGATIVE_STEPS)
def test_negative_and_zero_steps_raise_value_error(expr, graph):
    x = gg.tensor(BASE)
    with pytest.raises(ValueError):
        eval(expr, {"x": x})
    assert x.tolist() == BASE.tolist()


@pytest.mark.parametrize("expr", NEGATIVE_STEPS)
def test_torch_raises_value_error_on_negative_and_zero_steps(expr):
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError):
        eval(expr, {"x": torch.tensor(BASE)})


BAD_VIEWS = NEGATIVE_STEPS + [
    "x[:, 1].view(-1)", "x.transpose(0, 1).view(60)", "x.narrow(0, 0, -1)", "x.narrow(2, 3, 5)",
    "x.select(1, 9)", "x[0].T[7]", "x[:, 1].unsqueeze(5)", "x.permute(0, 0, 1)", "x.split(0)",
    "x.expand(2, 3)", "x[:, :1].expand(3, 4, 5).add_(1)", "x.unbind(3)", "x[:, 1].view(4, 4)",
]


def test_bad_views_raise_in_a_subprocess_without_aborting():
    """Each bad view raises a Python error (never a ggml abort) in both modes."""
    code = ("import warnings, numpy as np, ggmlgrad as gg\n"
            "warnings.simplefilter('ignore')\n"
            f"exprs = {BAD_VIEWS!r}\n"
            "for graph in (False, True):\n"
            "    with gg.graph_mode(graph):\n"
            "        for e in exprs:\n"
            "            x = gg.tensor(np.arange(60, dtype=np.float32).reshape(3, 4, 5))\n"
            "            try:\n"
            "                r = eval(e, {'x': x})\n"
            "                r.tolist()\n"
            "                print('NO ERROR', e)\n"
            "            except (ValueError, TypeError, IndexError, RuntimeError):\n"
            "                print('ok')\n"
            "            assert x.tolist() == np.arange(60).reshape(3, 4, 5).tolist(), e\n"
            "print('done')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180,
                       env={**__import__("os").environ, "GGML_NO_BACKTRACE": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.split()
    assert lines[-1] == "done" and "NO" not in lines, r.stdout[-2000:]
    assert lines.count("ok") == 2 * len(BAD_VIEWS)


def test_torch_raises_on_the_same_bad_views():
    torch = pytest.importorskip("torch")
    for e in BAD_VIEWS:
        x = torch.arange(60.0).reshape(3, 4, 5)
        with pytest.raises((ValueError, TypeError, IndexError, RuntimeError)):
            eval(e, {"x": x})
