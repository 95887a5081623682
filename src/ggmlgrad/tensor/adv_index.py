"""Reading with several index tensors in one key, and writing through index tensors: ``x[rows, cols]``, ``x[:, i, j]``, ``x[i, :, j]``, with
broadcasting index shapes and slices, ints, ``None`` and ``...`` around them (torch's advanced indexing).

torch's rule, followed here: ints, slices, ``None`` and ``...`` are applied first (a view of ``x``);
the index tensors, broadcast to one shape, then pick elements of the dimensions they stand in. The
picked dimensions are replaced by the broadcast index shape, in place when the index tensors are
adjacent in the key, else at the front (``x[i, :, j]``: the index shape first).

On the device: the dims being indexed are moved first and merged, the index tensors are combined into
one flat row number (negative values wrapped; each checked against its dimension, an ``IndexError``
in every mode, see ``ops/indexing.py``), and ``index_select`` picks the rows, so the gradient
scatter-adds back (repeats accumulate) and the read works in graph mode and inside ``gg.capture``
(given index tensors; a list index is host data, uploaded by the call).

Writes through index tensors (``x[idx] = v``, ``x[i, j] = v``, ``x[i, j] += v``) run on the device too
(:func:`setitem_many`): the same merged rows, a write count per row (which rows are written), and
the values summed into place after dropping every write that a later one overwrites (torch's CPU
result: the last write wins). Lists, masks and keys with more index elements than
``_MAX_DEVICE_WRITES`` are written through host positions (``tensor/mask_index.py``).

>>> import ggmlgrad as gg
>>> x = gg.arange(12.0).reshape(3, 4)
>>> x[gg.tensor([0, 2]), gg.tensor([1, 3])].tolist()
[1.0, 11.0]
"""
from __future__ import annotations

import numpy as np

from ..runtime import DeviceError   # ValueError and RuntimeError (torch's class for mixed devices)
from ..engine import float32, int32
from ..ops import op
from ..ops.indexing import _EXACT_F32, _check_index
from ..ops.shapes import check_ndim
from .functional_shape import IndexRangeError
from .tensor import Tensor


def is_int(k) -> bool:
    return isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_))


def count_advanced(key) -> int:
    """How many index tensors/lists/arrays ``key`` holds."""
    key = key if isinstance(key, tuple) else (key,)
    return sum(1 for k in key if isinstance(k, (Tensor, list, np.ndarray)))


def _split(x: Tensor, key: tuple):
    """(basic key with every index replaced by a full slice, [(dim in the basic result, index)])."""
    n_cons = sum(1 for k in key if k is not None and k is not Ellipsis)
    if n_cons > x.ndim:
        raise IndexRangeError(f"indexing: too many indices for a tensor of shape {x.shape}: {n_cons} were indexed")
    if sum(k is Ellipsis for k in key) > 1:
        raise IndexError("indexing: an index can only have a single ellipsis ('...')")
    if Ellipsis in [k for k in key if not isinstance(k, (Tensor, list, np.ndarray))]:
        i = next(j for j, k in enumerate(key) if k is Ellipsis)
        key = key[:i] + (slice(None),) * (x.ndim - n_cons) + key[i + 1:]
    else:
        key = key + (slice(None),) * (x.ndim - n_cons)
    # The basic part leaves out the Nones (they only add size-1 dims, put back at the end), so the
    # intermediate never has more dims than x; ``seq`` keeps them: they separate index tensors.
    basic, picks, seq, out_dim, axis = [], [], [], 0, 0
    for k in key:
        if k is None:
            seq.append("n")
            continue
        if isinstance(k, (Tensor, list, np.ndarray)):
            picks.append((out_dim, axis, k))
            basic.append(slice(None))
            seq.append("a")
        else:
            basic.append(k)
            if not is_int(k):
                seq.append("s")
        if not is_int(k):
            out_dim += 1
        axis += 1
    return tuple(basic), picks, seq


def _as_index(k, n: int, axis: int, x: Tensor, to_tensor) -> Tensor:
    """An int32 index tensor (lists and arrays checked on the host, tensors by the index check)."""
    if isinstance(k, Tensor):
        _check_index("indexing", k, n, wrap=True, what=f" (dimension {axis} with size {n}, shape {x.shape})")
        return k
    return to_tensor(k, n, axis, x)


def _wrapped(idx: Tensor, n: int) -> Tensor:
    """float32 row numbers of ``idx`` with negative values counted from the end."""
    f = op.cast(idx, dtype=float32)
    neg = op.cast(op.compare_scalar(f, kind="lt", c=0.0), dtype=float32)
    return op.add(f, op.scale(neg, c=float(n))) if n else f


def getitem_many(x: Tensor, key, basic_getitem, to_tensor) -> Tensor:
    """``x[key]`` for a key with two or more index tensors/lists (see the module docstring)."""
    key = key if isinstance(key, tuple) else (key,)
    basic, picks, seq = _split(x, key)
    y = basic_getitem(x, basic)
    dims = [d for d, _, _ in picks]
    idx = [_as_index(k, y.shape[d], a, x, to_tensor) for d, a, k in picks]
    try:
        bshape = tuple(np.broadcast_shapes(*(t.shape for t in idx)))
    except ValueError:
        raise IndexError(f"indexing: shape mismatch: indexing tensors could not be broadcast together with shapes "
                         f"{', '.join(str(list(t.shape)) for t in idx)}") from None
    rest = [d for d in range(y.ndim) if d not in dims]
    rest_shape = tuple(y.shape[d] for d in rest)
    at = [i for i, kind in enumerate(seq) if kind == "a"]
    adjacent = at == list(range(at[0], at[-1] + 1))
    front = seq[:at[0]].count("s") if adjacent else 0            # in y's dims (no Nones)
    sizes_iter = iter(rest_shape)
    full_rest = [1 if kind == "n" else next(sizes_iter) for kind in seq if kind != "a"]
    lead = at[0] if adjacent else 0                               # in the result's dims (Nones included)
    out_shape = tuple(full_rest[:lead]) + bshape + tuple(full_rest[lead:])
    check_ndim("indexing", out_shape)
    sizes = [y.shape[d] for d in dims]
    rows = int(np.prod(sizes, dtype=np.int64))
    if rows > _EXACT_F32:
        raise ValueError(f"indexing: the indexed dimensions {tuple(sizes)} hold more than {_EXACT_F32} elements "
                         f"(row numbers are combined in float32)")
    moved = op.permute(y, axes=tuple(dims + rest)) if dims + rest != list(range(y.ndim)) else y
    table = op.reshape(moved, shape=(rows,) + rest_shape)
    flat, stride = None, rows
    for t, n in zip(idx, sizes):
        stride //= max(n, 1)
        part = _wrapped(t, n)
        part = op.scale(part, c=float(stride)) if stride != 1 else part
        flat = part if flat is None else flat + part
    flat = op.broadcast_to(flat, shape=bshape) if flat.shape != bshape else flat
    ids = op.cast(op.reshape(flat, shape=(int(np.prod(bshape, dtype=np.int64)),)), dtype=int32)
    picked = op.index_select(table, ids, axis=0)
    res = op.reshape(picked, shape=bshape + rest_shape)
    if front:
        nb = len(bshape)
        axes = tuple(range(nb, nb + front)) + tuple(range(nb)) + tuple(range(nb + front, nb + len(rest_shape)))
        res = op.permute(res, axes=axes)
    return res if res.shape == out_shape else op.reshape(res, shape=out_shape)


def host_positions(flat: np.ndarray, hkey: tuple) -> np.ndarray:
    """``flat[hkey]`` with torch's rule for ints among index arrays: the ints (and slices, ``None``,
    ``...``) first, then the arrays (NumPy would count an int as an index array)."""
    arrays = [k for k in hkey if isinstance(k, np.ndarray)]
    if not arrays or not any(is_int(k) for k in hkey):
        return flat[hkey]
    first = tuple(slice(None) if isinstance(k, np.ndarray) else k for k in hkey)
    second = tuple(k if isinstance(k, np.ndarray) else Ellipsis if k is Ellipsis else slice(None)
                   for k in hkey if not is_int(k))
    return flat[first][second]


# ---------------------------------------------------------------- writes on the device
# Repeated positions keep the last write (torch's CPU result): each write is compared with every
# later one (an nb x nb table over the index tensors' broadcast shape), so keys with more index
# elements than this go through the host (tensor/mask_index.py).
_MAX_DEVICE_WRITES = 2048


def device_writable(key, value) -> bool:
    """Whether ``x[key] = value`` is written on the device: index tensors (no lists, arrays or masks) and
    a number or tensor value."""
    key = key if isinstance(key, tuple) else (key,)
    if any(isinstance(k, (list, np.ndarray)) for k in key):
        return False
    tensors = [k for k in key if isinstance(k, Tensor)]
    if not tensors or any(t.dtype is not int32 for t in tensors):
        return False
    if isinstance(value, np.ndarray) or isinstance(value, (list, tuple)):
        return False
    try:
        nb = int(np.prod(np.broadcast_shapes(*(t.shape for t in tensors)), dtype=np.int64))
    except ValueError:
        return True        # the write raises torch's broadcast error
    return nb <= _MAX_DEVICE_WRITES


def _superseded(flat: Tensor) -> Tensor:
    """float32 1 where a later write (in flat order) goes to the same row, else 0: ``flat`` is 1-D."""
    nb = flat.shape[0]
    a = op.broadcast_to(op.reshape(flat, shape=(nb, 1)), shape=(nb, nb))
    b = op.broadcast_to(op.reshape(flat, shape=(1, nb)), shape=(nb, nb))
    same = op.cast(op.eq(a, b), dtype=float32)
    later = op.cast(op.compare_scalar(op.sub(op.iota(flat, shape=(nb, nb), axis=1),
                                             op.iota(flat, shape=(nb, nb), axis=0)), kind="gt", c=0.0), dtype=float32)
    return op.amax(op.mul(same, later), axis=1)


def setitem_many(x: Tensor, key, value, basic_getitem, to_float, accumulate: bool = False) -> None:
    """``x[key] = value`` for a key with index tensors, on the device (see :func:`device_writable`): the
    indexed rows of ``x`` (the dims the index tensors pick, merged) are replaced where written, by a
    number or by ``value`` broadcast to ``x[key]``'s shape, the last write winning. Differentiable
    (``value`` gets the gradient of the writes that stay), capturable. ``accumulate`` (torch's
    ``index_put_(..., accumulate=True)``): every write adds, repeats included."""
    from .tensor import tensor as _tensor
    key = key if isinstance(key, tuple) else (key,)
    for k in key:
        if isinstance(k, Tensor) and k.device is not x.device:
            raise DeviceError("indexing: the index tensors and the tensor are on different devices")
    basic, picks, seq = _split(x, key)
    trivial = all(isinstance(b, slice) and b == slice(None) for b in basic)
    y = x if trivial else basic_getitem(x, basic)
    dims = [d for d, _, _ in picks]
    idx = [_as_index(k, y.shape[d], a, x, None) for d, a, k in picks]
    try:
        bshape = tuple(np.broadcast_shapes(*(t.shape for t in idx)))
    except ValueError:
        raise IndexError(f"indexing: shape mismatch: indexing tensors could not be broadcast together with shapes "
                         f"{', '.join(str(list(t.shape)) for t in idx)}") from None
    rest = [d for d in range(y.ndim) if d not in dims]
    rest_shape = tuple(y.shape[d] for d in rest)
    at = [i for i, kind in enumerate(seq) if kind == "a"]
    adjacent = at == list(range(at[0], at[-1] + 1))
    front = seq[:at[0]].count("s") if adjacent else 0
    sizes_iter = iter(rest_shape)
    full_rest = [1 if kind == "n" else next(sizes_iter) for kind in seq if kind != "a"]
    lead = at[0] if adjacent else 0
    out_shape = tuple(full_rest[:lead]) + bshape + tuple(full_rest[lead:])
    scalar = not isinstance(value, Tensor)
    if not scalar:
        if value.device is not x.device:
            value = value.to(device=x.device)
        try:
            ok = np.broadcast_shapes(value.shape, out_shape) == out_shape
        except ValueError:
            ok = False
        if not ok:
            raise RuntimeError(f"indexing: shape mismatch: value tensor of shape {list(value.shape)} cannot be "
                               f"broadcast to indexing result of shape {list(out_shape)}")
    elif isinstance(value, (bool, np.bool_)):
        value = float(value)
    elif not isinstance(value, (int, float, np.integer, np.floating)):
        value = _tensor(np.asarray(value), device=x.device)
        return setitem_many(x, key, value, basic_getitem, to_float, accumulate)
    sizes = [y.shape[d] for d in dims]
    rows = int(np.prod(sizes, dtype=np.int64))
    nb = int(np.prod(bshape, dtype=np.int64))
    if nb == 0:
        return
    perm = tuple(dims + rest)
    inv = tuple(int(a) for a in np.argsort(perm))

    def rows_of(t):   # y-shaped → (rows, *rest)
        moved = op.permute(t, axes=perm) if perm != tuple(range(y.ndim)) else t
        return op.reshape(moved, shape=(rows,) + rest_shape)

    def unrows(t):    # (rows, *rest) → y-shaped
        moved = op.reshape(t, shape=tuple(sizes) + rest_shape)
        return op.permute(moved, axes=inv) if inv != tuple(range(y.ndim)) else moved

    def flat_rows():
        flat, stride = None, rows
        for t, n in zip(idx, sizes):
            stride //= max(n, 1)
            part = _wrapped(t, n)
            part = op.scale(part, c=float(stride)) if stride != 1 else part
            flat = part if flat is None else flat + part
        flat = op.broadcast_to(flat, shape=bshape) if flat.shape != bshape else flat
        return op.reshape(flat, shape=(nb,))

    def values_as_rows(v):   # out_shape → (nb, *rest) in the picks' order
        v = op.broadcast_to(to_float(v), shape=out_shape) if v.shape != out_shape else to_float(v)
        plain = tuple(rest_shape[:front]) + bshape + tuple(rest_shape[front:])
        v = op.reshape(v, shape=plain) if plain != out_shape else v
        if front:
            nbd = len(bshape)
            axes = tuple(range(front, front + nbd)) + tuple(range(front)) + tuple(range(front + nbd, len(plain)))
            v = op.permute(v, axes=axes)
        return op.reshape(v, shape=(nb,) + rest_shape)

    def compute(old, v):
        table = rows_of(to_float(old))
        flat = flat_rows()
        ids = op.cast(flat, dtype=int32)
        ones = op.iota(flat, shape=(nb,), axis=0, start=1.0, step=0.0)
        hit = op.index_select_backward(ones, ids, shape=(rows,), axis=0)
        written = op.compare_scalar(op.reshape(hit, shape=(rows,) + (1,) * len(rest_shape)), kind="gt", c=0.0)
        if v is None and not accumulate:
            return unrows(op.where_scalar(written, table, c=float(value), tensor_if_true=False))
        if v is None:   # a number added at every write
            v = op.iota(flat, shape=(1,), axis=0, start=float(value), step=0.0)
            v = op.reshape(v, shape=()) if not out_shape else v
        vals = values_as_rows(v)
        if accumulate:
            return unrows(op.add(table, op.index_select_backward(vals, ids, shape=(rows,) + rest_shape, axis=0)))
        keep = op.add_scalar(op.scale(_superseded(flat), c=-1.0), c=1.0)
        vals = op.mul(vals, op.reshape(keep, shape=(nb,) + (1,) * len(rest_shape)))
        placed = op.index_select_backward(vals, ids, shape=(rows,) + rest_shape, axis=0)
        return unrows(op.where(written, placed, table))
    # (the value is not handed over as the write's operand: the in-place rules would broadcast it against
    # y, whose shape it need not have; only whether it requires grad matters there)
    y._inplace("__setitem__", None if scalar else _ReadsGrad(value),
               lambda old, _: compute(old, None if scalar else value), cast_ok=True)


class _ReadsGrad:
    """What an in-place write needs of an operand it reads besides ``self``: whether it requires grad."""

    def __init__(self, t: Tensor):
        self.requires_grad = t.requires_grad
