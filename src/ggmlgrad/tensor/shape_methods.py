"""Tensor methods for shapes and indexing, attached to :class:`Tensor` at import.

``t[...]`` supports NumPy basic indexing: ints (negative ok), slices with positive
steps along any axis, ``None``/newaxis and ``...``; plus integer indices (int32 tensors,
lists or int arrays) combined with slices: one selects along its axis (``index_select``;
negative values count from the end), several broadcast together and pick elements with
torch's rule for where their dimensions go (tensor/adv_index.py). Basic indexing and the view
methods (view, reshape, transpose, narrow, split, ...) return views that alias ``t``
(tensor/views.py); an index tensor gives a copy, as in torch. Negative steps raise. Boolean
masks (``x[mask]``, ``x[:, mask]``) and assignment through a mask or an index list (``x[mask] = v``,
``x[[0, 2]] = v``) read the mask/index on the host (tensor/mask_index.py): the result's shape
depends on the data, so in graph mode that is a sync point, in a capture a CaptureError.
Assignment through index tensors (``x[idx] = v``, ``x[i, j] += v``) runs on the device
(tensor/adv_index.py).

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
from ..ops.decl import public
from . import functional_shape as F
from .functional_shape import IndexRangeError
from .grad_mode import is_grad_enabled
from . import adv_index, mask_index, views
from .host_writes import reshape_alias, row_read, row_write, try_getitem, try_setitem, try_take
from .tensor import Tensor
from ..engine.errors import ShapeError


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
    if type(key) is int:  # buf[i]: try_getitem's row read, without its call (try_take takes arrays only)
        out = row_read(x, key)
    else:
        out = try_getitem(x, key)  # eager, plain host memory: the row copied where it lies (host_writes.py)
        if out is None:
            out = try_take(x, key)  # one NumPy index array (a minibatch's rows): gathered on the host
    if out is not None:
        return out
    if mask_index.has_mask(key):  # data-dependent shape: the mask is read (tensor/mask_index.py)
        return mask_index.getitem(x, key, _check_key_item)
    if adv_index.count_advanced(key) > 1:  # several index tensors (tensor/adv_index.py)
        for k in key:
            _check_key_item(k)
        return adv_index.getitem_many(x, key, getitem, _index_for)
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
    if type(key) is int and row_write(x, key, value):  # buf[i] = row: try_setitem's row write, first
        return
    if try_setitem(x, key, value, False):  # plain host memory, bytes only: NumPy writes the region (host_writes.py)
        return
    if not mask_index.has_mask(key) and adv_index.device_writable(key, value):   # index tensors: on the device
        for k in (key if isinstance(key, tuple) else (key,)):
            _check_key_item(k)
        return adv_index.setitem_many(x, key, value, getitem, _float_of)
    if mask_index.has_mask(key) or adv_index.count_advanced(key) > 1:   # indices read on the host
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
    if v.ndim > len(shape) and all(n == 1 for n in v.shape[:v.ndim - len(shape)]):
        v = v.reshape(v.shape[v.ndim - len(shape):])   # torch drops a value's leading size-1 dims: x[t] = (1, n)
    try:
        np.broadcast_shapes(v.shape, shape)
    except ValueError:
        raise ShapeError(f"indexing: cannot assign a value of shape {v.shape} to x[...] of shape {shape}") from None
    if np.broadcast_shapes(v.shape, shape) != shape:
        raise ShapeError(f"indexing: cannot assign a value of shape {v.shape} to x[...] of shape {shape}")
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


def _float_of(t: Tensor) -> Tensor:
    from .shape_extra import _float
    return _float(t)


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


# ---------------------------------------------------------------- indexing operators (the code above)
public(dunder="__getitem__")(getitem)
public(dunder="__setitem__")(setitem)
public(dunder="__iter__")(_iter)


# ---------------------------------------------------------------- views (tensor/views.py)
# torch returns views (memory shared with the tensor) from these; each is declared once
# (ops/decl.py: public) and installed as the Tensor method and, where torch has one, the gg function.
def _sizes(sizes: tuple) -> tuple:
    """``f(2, 3)`` and ``f((2, 3))`` alike (torch's variadic size arguments)."""
    return tuple(sizes[0]) if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)) else tuple(sizes)


@public(method="reshape")
def reshape(input: Tensor, *shape) -> Tensor:
    """``input`` with a new shape (one entry may be -1): a view when the layout allows, else a copy.

    >>> import ggmlgrad as gg
    >>> gg.arange(6.0).reshape(2, -1).shape
    (2, 3)
    """
    shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape   # _sizes, inline
    out = reshape_alias(input, tuple(shape))  # eager, a root in host memory: a view in its memory (host_writes.py)
    if out is not None:
        return out
    out = op.reshape(input, shape=tuple(shape))
    return views.reshape_view(out, input, out.shape, "reshape", must_view=False)


@public(method="view")
def view(input: Tensor, *shape) -> Tensor:
    """``input`` with a new shape, always a view (an error where the layout does not allow one, as torch).

    >>> import ggmlgrad as gg
    >>> gg.arange(6.0).view(3, 2).shape
    (3, 2)
    """
    shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape   # _sizes, inline
    out = reshape_alias(input, tuple(shape))  # eager, a root in host memory: a view in its memory (host_writes.py)
    if out is not None:
        return out
    out = op.reshape(input, shape=tuple(shape))
    return views.reshape_view(out, input, out.shape, "view", must_view=True)


@public(method="permute")
def permute(input: Tensor, *axes) -> Tensor:
    """The dimensions of ``input`` reordered (a view).

    >>> import ggmlgrad as gg
    >>> gg.ones(2, 3, 4).permute(2, 0, 1).shape
    (4, 2, 3)
    """
    axes = tuple(axes[0]) if len(axes) == 1 and isinstance(axes[0], (tuple, list)) else axes   # _sizes, inline
    return views.permute_view(op.permute(input, axes=axes), input, axes)


@public(method="squeeze", function="squeeze", doc=F.squeeze.__doc__)
def squeeze(input: Tensor, dim=None) -> Tensor:
    return views.squeeze_view(F.squeeze(input, dim), input, dim)


@public(method="unsqueeze", function="unsqueeze", doc=F.unsqueeze.__doc__)
def unsqueeze(input: Tensor, dim: int) -> Tensor:
    out = F.unsqueeze(input, dim)
    return views.unsqueeze_view(out, input, dim % out.ndim)


@public(method="flatten", function="flatten", doc=F.flatten.__doc__)
def flatten(input: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    if start_dim == 0 and end_dim == -1 and type(input) is Tensor and input.ndim:   # x.flatten(): all of it
        out = reshape_alias(input, (input.numel_,))
        if out is not None:
            return out
    out = F.flatten(input, start_dim, end_dim)
    return views.reshape_view(out, input, out.shape, "flatten", False)


@public(method="unflatten", function="unflatten", doc=F.unflatten.__doc__)
def unflatten(input: Tensor, dim: int, sizes) -> Tensor:
    out = F.unflatten(input, dim, sizes)
    return views.reshape_view(out, input, out.shape, "unflatten", False)


@public(method="view_as")
def view_as(input: Tensor, other: Tensor) -> Tensor:
    """``input.view(other.shape)``.

    >>> import ggmlgrad as gg
    >>> gg.ones(6).view_as(gg.ones(2, 3)).shape
    (2, 3)
    """
    out = op.reshape(input, shape=other.shape)
    return views.reshape_view(out, input, out.shape, "view_as", True)


@public(method="reshape_as")
def reshape_as(input: Tensor, other: Tensor) -> Tensor:
    """``input.reshape(other.shape)``.

    >>> import ggmlgrad as gg
    >>> gg.ones(6).reshape_as(gg.ones(3, 2)).shape
    (3, 2)
    """
    out = op.reshape(input, shape=other.shape)
    return views.reshape_view(out, input, out.shape, "reshape_as", False)


@public(method="expand", function="expand", doc=F.expand.__doc__)
def expand(input: Tensor, *sizes) -> Tensor:
    return views.expand_view(F.expand(input, *sizes), input)


@public(method="expand_as")
def expand_as(input: Tensor, other: Tensor) -> Tensor:
    """``input.expand(other.shape)`` (a view).

    >>> import ggmlgrad as gg
    >>> gg.ones(3, 1).expand_as(gg.ones(3, 4)).shape
    (3, 4)
    """
    return views.expand_view(F.broadcast_to(input, other.shape), input)


@public(method="broadcast_to", function="broadcast_to", doc=F.broadcast_to.__doc__)
def broadcast_to(input: Tensor, shape) -> Tensor:
    return views.expand_view(F.broadcast_to(input, shape), input)


@public(method="transpose")
def transpose(input: Tensor, dim0: int, dim1: int) -> Tensor:
    """``input`` with dimensions ``dim0`` and ``dim1`` swapped (a view; torch.Tensor.transpose).

    >>> import ggmlgrad as gg
    >>> gg.ones(2, 3, 4).transpose(0, 2).shape
    (4, 3, 2)
    """
    out = F.swapaxes(input, dim0, dim1)
    axes = list(range(input.ndim))
    if input.ndim >= 2:
        a, b = dim0 % input.ndim, dim1 % input.ndim
        axes[a], axes[b] = axes[b], axes[a]
    return views.permute_view(out, input, tuple(axes))


@public(method="swapaxes", function="swapaxes")
def swapaxes(input: Tensor, axis0: int, axis1: int) -> Tensor:
    """``input`` with dimensions ``axis0`` and ``axis1`` swapped, a view (torch.swapaxes).

    >>> import ggmlgrad as gg
    >>> gg.swapaxes(gg.ones(2, 3), 0, 1).shape
    (3, 2)
    """
    return transpose(input, axis0, axis1)


@public(method="t")
def t(input: Tensor) -> Tensor:
    """The transpose of a tensor of at most 2 dims, a view (torch.Tensor.t).

    >>> import ggmlgrad as gg
    >>> gg.ones(2, 3).t().shape
    (3, 2)
    """
    if input.ndim > 2:
        raise ValueError(f"t(): expects a tensor with <= 2 dimensions, got shape {input.shape}; use transpose or mT")
    return transpose(input, 0, input.ndim - 1) if input.ndim == 2 else transpose(input, 0, 0)


@public(method="movedim", function="movedim", doc=F.movedim.__doc__)
def movedim(input: Tensor, source: int, destination: int) -> Tensor:
    out = F.movedim(input, source, destination)
    s, d = source % input.ndim, destination % input.ndim
    axes = [i for i in range(input.ndim) if i != s]
    axes.insert(d, s)
    return views.permute_view(out, input, tuple(axes))


@public(method="split", function="split", doc=F.split.__doc__)
def split(input: Tensor, split_size_or_sections, dim: int = 0):
    return views.axis_slice_views(F.split(input, split_size_or_sections, dim), input, dim % input.ndim, True)


@public(method="chunk", function="chunk", doc=F.chunk.__doc__)
def chunk(input: Tensor, chunks: int, dim: int = 0):
    return views.axis_slice_views(F.chunk(input, chunks, dim), input, dim % input.ndim, True)


@public(method="narrow", function="narrow", doc=F.narrow.__doc__)
def narrow(input: Tensor, dim: int, start: int, length: int) -> Tensor:
    out = F.narrow(input, dim, start, length)
    d = dim % input.ndim
    views.axis_slice_views((out,), input, d, False, first=start + input.shape[d] if start < 0 else start)
    return out


@public(method="unfold")
def unfold(input: Tensor, dimension: int, size: int, step: int) -> Tensor:
    """Every ``size``-long window along ``dimension``, ``step`` apart, as a new last dimension: a view
    of ``input`` (torch.Tensor.unfold; windows may overlap). Writing through it raises (clone() it).

    >>> import ggmlgrad as gg
    >>> gg.arange(5.0).unfold(0, 2, 2).tolist()
    [[0.0, 1.0], [2.0, 3.0]]
    """
    d = F._dim("unfold", dimension, max(input.ndim, 1))
    length = input.shape[d] if input.ndim else 1
    if size < 0:
        raise RuntimeError(f"unfold: size is {size} but must be >= 0")
    if size > length:
        raise RuntimeError(f"unfold: maximum size for tensor at dimension {d} is {length} but size is {size}")
    if step <= 0:
        raise RuntimeError(f"unfold: step is {step} but must be > 0")
    check_ndim("unfold", input.shape + (size,))
    if input.ndim == 0:  # (a 0-d input's one window is a copy: its reshape is not a view step here)
        return op.reshape(views.unfold_value(op.reshape(input, shape=(1,)), 0, size, step), shape=(size,))
    return views.unfold_view(views.unfold_value(input, d, size, step), input, d, size, step)


@public(method="unbind", function="unbind")
def unbind(input: Tensor, dim: int = 0) -> tuple:
    """The slices along ``dim``, each a view of ``input`` (torch.unbind).

    >>> import ggmlgrad as gg
    >>> [p.tolist() for p in gg.tensor([[1.0, 2.0], [3.0, 4.0]]).unbind(1)]
    [[1.0, 3.0], [2.0, 4.0]]
    """
    d = F._dim("unbind", dim, input.ndim)
    pieces = []
    for i in range(input.shape[d]):
        key = (slice(None),) * d + (i,)
        start, stop, step, out_shape, _, _ = _parse(input, key)
        out = op.slice(input, start=start, stop=stop, step=step, shape=tuple(out_shape))
        views.index_view(out, input, key, start, stop, step, multi=True)
        pieces.append(out)
    return tuple(pieces)


@public(method="select", function="select")
def select(input: Tensor, dim: int, index: int) -> Tensor:
    """``input`` indexed by ``index`` along ``dim``: a view (torch.select).

    >>> import ggmlgrad as gg
    >>> gg.tensor([[1.0, 2.0], [3.0, 4.0]]).select(1, 0).tolist()
    [1.0, 3.0]
    """
    d = F._dim("select", dim, input.ndim)
    return getitem(input, (slice(None),) * d + (index,))


@public(method="repeat")
def repeat(input: Tensor, *sizes) -> Tensor:
    """PyTorch ``repeat``: tile the tensor (at least one count per dimension); a copy.

    >>> import ggmlgrad as gg
    >>> gg.tensor([1.0, 2.0]).repeat(2).tolist()
    [1.0, 2.0, 1.0, 2.0]
    """
    sizes = _sizes(sizes)
    if len(sizes) < input.ndim:
        raise ShapeError(f"repeat: need at least {input.ndim} repeat counts for shape {input.shape}, got {sizes}")
    return F.tile(input, sizes)


# data-dependent shapes: the mask is read on the host (tensor/mask_index.py)
for _name in ("masked_select", "nonzero", "argwhere"):
    public(method=_name, function=_name)(getattr(mask_index, _name))
