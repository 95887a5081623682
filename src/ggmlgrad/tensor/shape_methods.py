"""Tensor methods for shapes and indexing, attached to :class:`Tensor` at import.

``t[...]`` supports NumPy basic indexing: ints (negative ok), slices with positive
steps along any axis, ``None``/newaxis and ``...``; plus ONE integer index (an int32
tensor, a list or an int array) combined with slices, which selects along its axis
(``index_select``; negative values count from the end). Basic indexing and the view
methods (view, reshape, transpose, narrow, split, ...) return views that alias ``t``
(tensor/views.py); an index tensor gives a copy, as in torch. Negative steps raise. Boolean
masks (``x[mask]``, ``x[:, mask]``) and assignment through an index (``x[mask] = v``,
``x[[0, 2]] = v``) read the mask/index on the host (tensor/mask_index.py): the result's shape
depends on the data, so in graph mode that is a sync point, in a capture a CaptureError.

>>> import ggmlgrad as gg
>>> x = gg.arange(12.0).reshape(3, 4)
>>> x[1].tolist(), x[:, ::2].shape, x[None, -1, 1:].shape
([4.0, 5.0, 6.0, 7.0], (3, 2), (1, 3))
>>> x[[2, 0]].shape
(2, 4)
"""
from __future__ import annotations

import numpy as np

from ..engine import int32
from ..ops import op
from ..ops.shapes import check_ndim
from . import functional_shape as F
from .functional_shape import IndexRangeError
from .grad_mode import is_grad_enabled
from . import mask_index, views
from .tensor import Tensor


# ---------------------------------------------------------------- __getitem__
def _is_int(k) -> bool:
    return isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_))


def _advanced(k) -> bool:
    return isinstance(k, (Tensor, list, np.ndarray))


def _check_key_item(k) -> None:
    if isinstance(k, (bool, np.bool_)):
        raise TypeError("indexing: boolean indices (masks) are not supported: the result shape would "
                        "depend on the data; use gg.where / multiplication by a mask instead")
    if isinstance(k, Tensor) and k.dtype is not int32:
        raise TypeError(f"indexing: index tensors must be int32 or bool (got {k.dtype.name})")
    if isinstance(k, (list, np.ndarray)):
        arr = np.asarray(k)
        if arr.size and arr.dtype.kind not in "iu":
            raise TypeError(f"indexing: index lists/arrays must hold integers, got dtype {arr.dtype}")
    if not (k is None or k is Ellipsis or isinstance(k, slice) or _is_int(k) or _advanced(k)):
        raise TypeError(f"indexing: unsupported index {k!r} (ints, slices, None, ..., or one int "
                        f"tensor/list are supported)")


def _parse(x: Tensor, key):
    """(start, stop, step, out_shape, sliced_shape, adv) of ``x[key]``; ``adv`` is
    (axis, position in out_shape, index) for the one integer index, else None."""
    key = key if isinstance(key, tuple) else (key,)
    for k in key:
        _check_key_item(k)
    if sum(k is Ellipsis for k in key) > 1:
        raise IndexError("indexing: an index can only have a single ellipsis ('...')")
    consuming = sum(1 for k in key if k is not None and k is not Ellipsis)
    if consuming > x.ndim:
        raise IndexRangeError(f"indexing: too many indices for a tensor of shape {x.shape}: {consuming} "
                              f"were indexed")
    if sum(1 for k in key if _advanced(k)) > 1:
        raise TypeError("indexing: only one index tensor/list per indexing expression is supported; "
                        "index in two steps or use gg.gather")
    if Ellipsis in [k for k in key if not _advanced(k)]:
        i = next(j for j, k in enumerate(key) if k is Ellipsis)
        key = key[:i] + (slice(None),) * (x.ndim - consuming) + key[i + 1:]
    else:
        key = key + (slice(None),) * (x.ndim - consuming)

    start, stop, step = [], [], []
    out_shape: list = []      # final shape; the advanced axis is filled in below
    sliced_shape = []
    adv = None                # (axis in x, index)
    axis = 0
    for k in key:
        if k is None:
            out_shape.append(1)
            continue
        n = x.shape[axis]
        if isinstance(k, slice):
            b, e, s = k.indices(n) if k.step is None or k.step > 0 else (0, 0, k.step)
            if s <= 0:
                raise ValueError(f"indexing: negative or zero slice steps are not supported "
                                 f"(got step {k.step} on dimension {axis} of {x.shape})")
            start.append(b), stop.append(e), step.append(s)
            ln = len(range(b, e, s))
            sliced_shape.append(ln)
            out_shape.append(ln)
        elif _is_int(k):
            i = int(k)
            if not -n <= i < n:
                raise IndexRangeError(f"indexing: index {i} is out of range for dimension {axis} with "
                                      f"size {n} (shape {x.shape})")
            i %= n
            start.append(i), stop.append(i + 1), step.append(1)
            sliced_shape.append(1)
        else:
            start.append(0), stop.append(n), step.append(1)
            sliced_shape.append(n)
            adv = (axis, len(out_shape), k)
            out_shape.append(None)
        axis += 1
    return tuple(start), tuple(stop), tuple(step), out_shape, tuple(sliced_shape), adv


def getitem(x: Tensor, key) -> Tensor:
    """``x[key]`` with NumPy basic indexing plus one integer index tensor/list (see module doc)."""
    if mask_index.has_mask(key):  # data-dependent shape: the mask is read (tensor/mask_index.py)
        return mask_index.getitem(x, key, _check_key_item)
    start, stop, step, out_shape, sliced_shape, adv = _parse(x, key)
    if adv is None:   # one op: the slice lays its result out with ints dropped and Nones added
        shape = tuple(out_shape)
        check_ndim("indexing", shape)
        out = op.slice(x, start=start, stop=stop, step=step, shape=shape)
        return views.index_view(out, x, key, start, stop, step)
    y = x
    if sliced_shape != x.shape:
        y = op.slice(x, start=start, stop=stop, step=step)
    ax, pos, k = adv
    # The result's rank first: eager mode checks index values at once, graph mode after the compute,
    # and a >4-D result must be the same error in both.
    shape = tuple(out_shape[:pos] + list(k.shape if isinstance(k, Tensor) else np.shape(k)) + out_shape[pos + 1:])
    check_ndim("indexing", shape)
    idx = _index_for(k, x.shape[ax], ax, x)
    flat = idx if idx.ndim == 1 else op.reshape(idx, shape=(int(np.prod(idx.shape)),))
    y = op.index_select(y, flat, axis=ax, wrap=True)
    return y if y.shape == shape else op.reshape(y, shape=shape)


def setitem(x: Tensor, key, value) -> None:
    """``x[key] = value`` for basic keys (ints, slices with positive steps, None, ...; a mask or an
    index tensor/list: tensor/mask_index.py): an in-place
    write (version bump) that reaches ``x``'s views. With grad on and ``x`` or ``value`` requiring
    grad it is ``x[key].copy_(value)``, differentiable as in torch (or torch's error: ``x`` a leaf
    that requires grad). ``value``: a number (an op parameter, nothing uploaded), or a tensor/array
    that broadcasts to ``x[key].shape``. The out-of-place form is ``gg.slice_scatter``.

    >>> import ggmlgrad as gg
    >>> x = gg.zeros(2, 4)
    >>> x[:, ::2] = 1.0
    >>> x.tolist()
    [[1.0, 0.0, 1.0, 0.0], [1.0, 0.0, 1.0, 0.0]]
    """
    if mask_index.has_mask(key):
        return mask_index.setitem(x, key, value, _check_key_item)
    start, stop, step, out_shape, sliced_shape, adv = _parse(x, key)
    if adv is not None:  # an index tensor/list: the positions are read on the host (tensor/mask_index.py)
        return mask_index.setitem(x, key, value, _check_key_item)
    params = dict(start=start, stop=stop, step=step)
    if isinstance(value, (bool, np.bool_)) or _is_int(value) or isinstance(value, (float, np.floating)):
        if x.requires_grad and is_grad_enabled():
            getitem(x, key).copy_(float(value))  # on the tape, as torch's CopySlices
            return
        x._write("__setitem__", lambda: op.slice_set(x, fill=float(value), **params))
        return
    if isinstance(value, Tensor) and "_view" in value.__dict__ and _is_region(value, x, start, stop, step):
        return  # ``x[key] += v``: Python's setitem of the view the in-place op already wrote through
    from .tensor import tensor
    v = value if isinstance(value, Tensor) else tensor(np.asarray(value), dtype=x.dtype, device=x.device)
    if v.device is not x.device:
        v = v.to(device=x.device)
    shape = tuple(out_shape)
    try:
        np.broadcast_shapes(v.shape, shape)
    except ValueError:
        raise ValueError(f"indexing: cannot assign a value of shape {v.shape} to x[...] of shape {shape}") from None
    if np.broadcast_shapes(v.shape, shape) != shape:
        raise ValueError(f"indexing: cannot assign a value of shape {v.shape} to x[...] of shape {shape}")
    if is_grad_enabled() and (x.requires_grad or v.requires_grad):
        getitem(x, key).copy_(v)  # on the tape, as torch's CopySlices
        return

    def make():
        w = v if v.dtype is x.dtype else op.cast(v, dtype=x.dtype)
        if w.shape != shape:
            w = op.broadcast_to(w, shape=shape)
        if w.shape != sliced_shape:
            w = op.reshape(w, shape=sliced_shape)
        return op.slice_set(x, w, **params)
    x._write("__setitem__", make)


def _is_region(value: Tensor, x: Tensor, start: tuple, stop: tuple, step: tuple) -> bool:
    """Whether the view ``value`` is exactly ``x[start:stop:step]`` (same root, same steps)."""
    rec, xrec = views.record_of(value), views.record_of(x)
    root, steps = (x, ()) if xrec is None else (xrec.root, xrec.steps)
    return (rec.root is root and len(rec.steps) == len(steps) + 1 and rec.steps[:-1] == steps
            and rec.steps[-1][:4] == ("slice", start, stop, step))


def _index_for(k, n: int, axis: int, x: Tensor) -> Tensor:
    """The int32 index tensor for an advanced index; host lists are checked (and wrapped) here."""
    if isinstance(k, Tensor):
        return k
    arr = np.asarray(k)
    if arr.size == 0:
        arr = arr.astype(np.int64)
    if arr.size and (arr.min() < -n or arr.max() >= n):
        bad = arr.min() if arr.min() < -n else arr.max()
        raise IndexRangeError(f"indexing: index {int(bad)} is out of range for dimension {axis} with size "
                              f"{n} (shape {x.shape})")
    arr = np.where(arr < 0, arr + n, arr).astype(np.int32)
    from .tensor import tensor
    return tensor(arr, dtype=int32, device=x.device)


def _iter(x: Tensor):
    if x.ndim == 0:
        raise TypeError("iteration over a 0-d tensor")
    return (getitem(x, i) for i in range(x.shape[0]))


# ---------------------------------------------------------------- methods
def squeeze(self: Tensor, dim=None) -> Tensor:
    return F.squeeze(self, dim)


def unsqueeze(self: Tensor, dim: int) -> Tensor:
    return F.unsqueeze(self, dim)


def flatten(self: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    return F.flatten(self, start_dim, end_dim)


def expand(self: Tensor, *sizes) -> Tensor:
    return F.expand(self, *sizes)


def expand_as(self: Tensor, other: Tensor) -> Tensor:
    return F.broadcast_to(self, other.shape)


def broadcast_to(self: Tensor, shape) -> Tensor:
    return F.broadcast_to(self, shape)


def transpose(self: Tensor, dim0: int, dim1: int) -> Tensor:
    return F.swapaxes(self, dim0, dim1)


def split(self: Tensor, split_size_or_sections, dim: int = 0):
    return F.split(self, split_size_or_sections, dim)


def chunk(self: Tensor, chunks: int, dim: int = 0):
    return F.chunk(self, chunks, dim)


def narrow(self: Tensor, dim: int, start: int, length: int) -> Tensor:
    return F.narrow(self, dim, start, length)


def gather(self: Tensor, dim: int, index) -> Tensor:
    return F.gather(self, dim, index)


def index_select(self: Tensor, dim: int, index) -> Tensor:
    return F.index_select(self, dim, index)


def movedim(self: Tensor, source: int, destination: int) -> Tensor:
    return F.movedim(self, source, destination)


def repeat(self: Tensor, *sizes) -> Tensor:
    """PyTorch ``repeat``: tile the tensor (at least one count per dimension)."""
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        sizes = tuple(sizes[0])
    if len(sizes) < self.ndim:
        raise ValueError(f"repeat: need at least {self.ndim} repeat counts for shape {self.shape}, got {sizes}")
    return F.tile(self, sizes)


def unflatten(self: Tensor, dim: int, sizes) -> Tensor:
    return F.unflatten(self, dim, sizes)


def reshape_as(self: Tensor, other: Tensor) -> Tensor:
    return op.reshape(self, shape=other.shape)


def masked_select(self: Tensor, mask: Tensor) -> Tensor:
    return mask_index.masked_select(self, mask)


def nonzero(self: Tensor, *, as_tuple: bool = False):
    return mask_index.nonzero(self, as_tuple=as_tuple)


def argwhere(self: Tensor) -> Tensor:
    return mask_index.argwhere(self)


for _f in (masked_select, nonzero, argwhere):
    _f.__doc__ = getattr(mask_index, _f.__name__).__doc__

_METHODS = {
    "__getitem__": getitem, "__setitem__": setitem, "__iter__": _iter, "squeeze": squeeze, "unsqueeze": unsqueeze,
    "flatten": flatten, "expand": expand, "expand_as": expand_as, "broadcast_to": broadcast_to,
    "transpose": transpose, "swapaxes": transpose, "split": split, "chunk": chunk, "narrow": narrow,
    "gather": gather, "index_select": index_select, "movedim": movedim, "repeat": repeat,
    "unflatten": unflatten, "reshape_as": reshape_as, "view_as": reshape_as,
    "masked_select": masked_select, "nonzero": nonzero, "argwhere": argwhere,
}

def _squeeze_view(self: Tensor, dim=None) -> Tensor:
    return views.squeeze_view(F.squeeze(self, dim), self)


def _unsqueeze_view(self: Tensor, dim: int) -> Tensor:
    out = F.unsqueeze(self, dim)
    return views.unsqueeze_view(out, self, dim % out.ndim)


def _reshape_like(fn, must_view: bool, name: str):
    def method(self, *args, **kwargs):
        out = fn(self, *args, **kwargs)
        return views.reshape_view(out, self, out.shape, name, must_view)
    return method


def _expand_view(fn):
    def method(self, *args, **kwargs):
        return views.expand_view(fn(self, *args, **kwargs), self)
    return method


def _transpose_view(self: Tensor, dim0: int, dim1: int) -> Tensor:
    out = F.swapaxes(self, dim0, dim1)
    axes = list(range(self.ndim))
    if self.ndim >= 2:
        a, b = dim0 % self.ndim, dim1 % self.ndim
        axes[a], axes[b] = axes[b], axes[a]
    return views.permute_view(out, self, tuple(axes))


def t(self: Tensor) -> Tensor:
    """The transpose of a tensor of at most 2 dims, a view (torch.Tensor.t)."""
    if self.ndim > 2:
        raise ValueError(f"t(): expects a tensor with <= 2 dimensions, got shape {self.shape}; use transpose or mT")
    return _transpose_view(self, 0, self.ndim - 1) if self.ndim == 2 else _transpose_view(self, 0, 0)


def _movedim_view(self: Tensor, source: int, destination: int) -> Tensor:
    out = F.movedim(self, source, destination)
    s, d = source % self.ndim, destination % self.ndim
    axes = [i for i in range(self.ndim) if i != s]
    axes.insert(d, s)
    return views.permute_view(out, self, tuple(axes))


def _split_view(self: Tensor, split_size_or_sections, dim: int = 0):
    return views.axis_slice_views(split(self, split_size_or_sections, dim), self, dim % self.ndim, True)


def _chunk_view(self: Tensor, chunks: int, dim: int = 0):
    return views.axis_slice_views(chunk(self, chunks, dim), self, dim % self.ndim, True)


def _narrow_view(self: Tensor, dim: int, start: int, length: int) -> Tensor:
    out = narrow(self, dim, start, length)
    d = dim % self.ndim
    views.axis_slice_views((out,), self, d, False, first=start + self.shape[d] if start < 0 else start)
    return out


def unbind(self: Tensor, dim: int = 0) -> tuple:
    """The slices along ``dim``, each a view of ``self`` (torch.Tensor.unbind)."""
    d = F._dim("unbind", dim, self.ndim)
    pieces = []
    for i in range(self.shape[d]):
        key = (slice(None),) * d + (i,)
        start, stop, step, out_shape, _, _ = _parse(self, key)
        out = op.slice(self, start=start, stop=stop, step=step, shape=tuple(out_shape))
        views.index_view(out, self, key, start, stop, step, multi=True)
        pieces.append(out)
    return tuple(pieces)


def select(self: Tensor, dim: int, index: int) -> Tensor:
    """``self`` indexed by ``index`` along ``dim``: a view (torch.Tensor.select)."""
    d = F._dim("select", dim, self.ndim)
    return getitem(self, (slice(None),) * d + (index,))


# torch returns views (memory shared with the tensor) from these (tensor/views.py).
_VIEW_METHODS = {
    "squeeze": _squeeze_view, "unsqueeze": _unsqueeze_view,
    "flatten": _reshape_like(flatten, False, "flatten"), "unflatten": _reshape_like(unflatten, False, "unflatten"),
    "view_as": _reshape_like(reshape_as, True, "view_as"), "reshape_as": _reshape_like(reshape_as, False, "reshape_as"),
    "expand": _expand_view(expand), "expand_as": _expand_view(expand_as), "broadcast_to": _expand_view(broadcast_to),
    "transpose": _transpose_view, "swapaxes": _transpose_view, "movedim": _movedim_view,
    "split": _split_view, "chunk": _chunk_view, "narrow": _narrow_view,
    "unbind": unbind, "select": select, "t": t,
}
for _name, _fn in _VIEW_METHODS.items():
    _fn.__name__ = _fn.__qualname__ = _name
    _fn.__doc__ = _fn.__doc__ or getattr(F, _name, _METHODS.get(_name)).__doc__
    _METHODS[_name] = _fn


def _swapaxes_view(x: Tensor, axis0: int, axis1: int) -> Tensor:
    return _transpose_view(x, axis0, axis1)


_swapaxes_view.__doc__ = F.swapaxes.__doc__

# gg.squeeze(x, ...) and friends return the same views as the methods (torch.squeeze etc. are views);
# ggmlgrad/__init__.py exports these over functional_shape's copies.
FUNCTIONAL_VIEWS = {name: _VIEW_METHODS[name] for name in (
    "squeeze", "unsqueeze", "flatten", "unflatten", "narrow", "split", "chunk", "movedim", "broadcast_to",
    "expand", "unbind", "select")}
FUNCTIONAL_VIEWS["swapaxes"] = _swapaxes_view

for _name, _fn in _METHODS.items():
    # Never replace a method the Tensor class defines itself (its owner decides those).
    if _name not in Tensor.__dict__:
        setattr(Tensor, _name, _fn)
