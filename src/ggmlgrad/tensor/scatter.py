"""Scatter and fill: ``scatter`` (a src tensor or a value; ``reduce=``), ``scatter_add``, ``scatter_reduce``
('sum', 'prod', 'mean', 'amax', 'amin'; ``include_self``), ``index_add``, ``index_copy``, ``index_fill``,
``masked_fill`` (the function form), and their in-place ``_`` forms, as torch's.

ggml has no scatter kernel, so each is composed of ops in the same graph (never on the host):

- sums go through ``gather_backward``/``index_select_backward`` (ggml_get_rows_back: repeated
  indices accumulate), as do the write counts that ``mean`` and the "was this written" masks need;
- ``amax``/``amin``/``prod`` and the replacing ``scatter`` compare every index with every target
  position: the index, flattened to (rows, k), becomes a one-hot (rows, k, size) on the device, the
  values are placed through it and reduced over k (an ``amax``/``amin`` reduction, a product tree).
  That costs rows·k·size elements of memory. With repeated indices, ``scatter`` keeps the last
  write in index order (torch's CPU result); ``index_copy`` finds the last writer of each slice from
  its 1-D index alone (k·size) and picks the slices with ``index_select``;
- ``int32`` tensors compute in float32 and come back (exact within the ±2**24 rule); bool through
  its 0/1 memory.

Index values are checked as ``gather``'s are (``ops/indexing.py``): out of range (negative
included, as torch) is an ``IndexError`` in every mode, and never reaches ggml. Gradients follow
from the ops: ``scatter_add``'s src gets ``grad.gather``, ``amax``/``amin`` share between ties
(self included), ``prod`` is a product of ops (zeros are exact).

>>> import ggmlgrad as gg
>>> x = gg.zeros(2, 3)
>>> x.scatter_add(1, gg.tensor([[0, 0], [2, 1]]), gg.ones(2, 2)).tolist()
[[2.0, 0.0, 0.0], [0.0, 1.0, 1.0]]
"""
from __future__ import annotations

import numpy as np

from ..engine import float32, int32
from ..engine.dtypes import bool_
from ..ops import op
from ..ops.decl import public
from ..ops.indexing import _check_index
from . import bool_ops
from .functional_shape import _dim
from .shape_extra import _as, _check_tensor, _float
from .tensor import Tensor

_REDUCES = ("sum", "prod", "mean", "amax", "amin")
_IDENTITY = {"amax": float("-inf"), "amin": float("inf"), "prod": 1.0}


# ---------------------------------------------------------------- validation
def _index_arg(opname: str, index) -> Tensor:
    if not isinstance(index, Tensor):
        raise TypeError(f"{opname}(): index must be an int32 tensor, got {type(index).__name__}")
    if index.dtype is not int32:
        raise RuntimeError(f"{opname}(): Expected dtype int32 (torch: int64) for index, got {index.dtype.name}")
    return index


def _check_scatter(opname: str, x: Tensor, dim, index, src) -> int:
    """torch's checks of scatter/gather-style arguments; returns the normalised dim."""
    _check_tensor(opname, x)
    _index_arg(opname, index)
    d = _dim(opname, dim, max(x.ndim, 1))
    if index.ndim != max(x.ndim, 1) and index.numel_:
        raise RuntimeError(f"{opname}(): Index tensor must have the same number of dimensions as self tensor "
                           f"(index {index.shape}, self {x.shape})")
    if isinstance(src, Tensor):
        if src.ndim != index.ndim and index.numel_:
            raise RuntimeError(f"{opname}(): Index tensor must have the same number of dimensions as src tensor "
                               f"(index {index.shape}, src {src.shape})")
        if src.dtype is not x.dtype:
            raise RuntimeError(f"{opname}(): Expected self.dtype to be equal to src.dtype ({x.dtype.name} and "
                               f"{src.dtype.name})")
        if src.device is not x.device:
            raise RuntimeError(f"{opname}(): src and self are on different devices")
    if index.numel_:
        for i, k in enumerate(index.shape):
            too_big = (i != d and k > x.shape[i]) or (isinstance(src, Tensor) and k > src.shape[i])
            if too_big:
                raise RuntimeError(f"{opname}(): Expected index {list(index.shape)} to be smaller than self "
                                   f"{list(x.shape)} apart from dimension {d}"
                                   + (f" and to be smaller size than src {list(src.shape)}"
                                      if isinstance(src, Tensor) else ""))
        _check_index(opname, index, x.shape[d], what=f" (dimension {d} of {x.shape})")
    return d


def _head(t: Tensor, shape: tuple) -> Tensor:
    """``t[:shape[0], :shape[1], ...]`` (a copy; ``t`` itself when it has that shape)."""
    if t.shape == tuple(shape):
        return t
    return op.slice(t, start=(0,) * t.ndim, stop=tuple(shape), step=(1,) * t.ndim)


def _region(x: Tensor, index: Tensor, d: int) -> tuple:
    """The part of ``x`` an index of ``index.shape`` can reach: full along ``d``, index-sized elsewhere."""
    return tuple(x.shape[i] if i == d else k for i, k in enumerate(index.shape))


def _put_back(x: Tensor, part: Tensor) -> Tensor:
    """``x`` with its leading region replaced by ``part`` (``part`` itself when it is all of ``x``)."""
    if part.shape == x.shape:
        return part
    return op.slice_set(x, part, start=(0,) * x.ndim, stop=part.shape, step=(1,) * x.ndim)


# ---------------------------------------------------------------- the composed cores (float32 in, float32 out)
def _ones_like_index(index: Tensor) -> Tensor:
    return op.iota(index, shape=index.shape, axis=0, start=1.0, step=0.0)


def _sums(xs_shape: tuple, index: Tensor, values: Tensor, d: int) -> Tensor:
    """Zeros of ``xs_shape`` with each value added at its index along ``d`` (repeats accumulate)."""
    return op.gather_backward(values, index, shape=xs_shape, axis=d)


def _rows(t: Tensor, d: int) -> Tensor:
    """``t`` with ``d`` moved last and the other dims merged: (rows, size along d)."""
    axes = tuple(i for i in range(t.ndim) if i != d) + (d,)
    moved = op.permute(t, axes=axes) if axes != tuple(range(t.ndim)) else t
    return op.reshape(moved, shape=(t.numel_ // max(t.shape[d], 1), t.shape[d]))


def _unrows(t: Tensor, shape: tuple, d: int) -> Tensor:
    """The inverse of :func:`_rows` for a (rows, shape[d]) tensor."""
    axes = tuple(i for i in range(len(shape)) if i != d) + (d,)
    moved = op.reshape(t, shape=tuple(shape[i] for i in axes))
    inv = tuple(int(a) for a in np.argsort(axes))
    return op.permute(moved, axes=inv) if inv != tuple(range(len(shape))) else moved


def _placed(xs: Tensor, index: Tensor, values: Tensor, d: int, fill: float) -> tuple[Tensor, Tensor]:
    """(one-hot (rows, k, L) of the index, values placed through it with ``fill`` elsewhere)."""
    L = xs.shape[d]
    idx = _rows(index, d)                                          # (rows, k)
    hot = op.one_hot(idx, num_classes=L)                           # (rows, k, L)
    vals = op.reshape(_rows(values, d), shape=idx.shape + (1,))
    return hot, op.where_scalar(hot, op.broadcast_to(vals, shape=hot.shape), c=fill)


def _product(t: Tensor, axis: int) -> Tensor:
    """The product over ``axis`` as a tree of multiplications (exact gradients, zeros included)."""
    while t.shape[axis] > 1:
        n = t.shape[axis]
        half = n // 2

        def part(b, e):
            start = tuple(b if i == axis else 0 for i in range(t.ndim))
            stop = tuple(e if i == axis else s for i, s in enumerate(t.shape))
            return op.slice(t, start=start, stop=stop, step=(1,) * t.ndim)
        prod = op.mul(part(0, half), part(half, 2 * half))
        t = op.concat(prod, part(2 * half, n), axis=axis) if n % 2 else prod
    return op.reshape(t, shape=tuple(s for i, s in enumerate(t.shape) if i != axis))


def _reduce_core(xs: Tensor, index: Tensor, values: Tensor, d: int, reduce: str, include_self: bool,
                 integral: bool) -> Tensor:
    """scatter_reduce of float32 ``values`` into float32 ``xs`` (index-shaped everywhere but ``d``)."""
    if reduce == "sum":
        total = _sums(xs.shape, index, values, d)
        return op.add(xs, total) if include_self else \
            op.where(_written(xs, index, d), total, xs)
    count = _sums(xs.shape, index, _ones_like_index(index), d)
    if reduce == "mean":
        num = _sums(xs.shape, index, values, d)
        if include_self:
            num, count = op.add(num, xs), op.add_scalar(count, c=1.0)
        mean = op.div(num, op.clamp(count, lo=1.0))
        if integral:
            mean = op.floor(mean)
        return op.where(op.compare_scalar(count, kind="gt", c=0.0), mean, xs)
    hot, placed = _placed(xs, index, values, d, _IDENTITY[reduce])          # (rows, k, L)
    if include_self:
        placed = op.concat(placed, op.reshape(_rows(xs, d), shape=(placed.shape[0], 1, placed.shape[2])), axis=1)
    r = op.amax(placed, axis=1) if reduce == "amax" else op.amin(placed, axis=1) if reduce == "amin" else \
        _product(placed, 1)
    r = _unrows(r, xs.shape, d)
    return r if include_self else op.where(op.compare_scalar(count, kind="gt", c=0.0), r, xs)


def _written(xs: Tensor, index: Tensor, d: int) -> Tensor:
    """bool of ``xs``'s shape: True where the index writes at least once."""
    return op.compare_scalar(_sums(xs.shape, index, _ones_like_index(index), d), kind="gt", c=0.0)


def _last_write(xs: Tensor, index: Tensor, values: Tensor, d: int) -> Tensor:
    """``xs`` with each indexed position replaced by the value written there last (index order)."""
    rows = _rows(index, d).shape                                             # (rows, k)
    hot, _ = _placed(xs, index, values, d, 0.0)
    order = op.iota(hot, shape=hot.shape, axis=1)                            # j along k
    last = op.amax(op.where_scalar(hot, order, c=-1.0), axis=1, keepdim=True)   # (rows, 1, L); -1: none
    is_last = op.mul(hot, op.cast(op.eq(order, op.broadcast_to(last, shape=hot.shape)), dtype=float32))
    vals = op.reshape(_rows(values, d), shape=rows + (1,))
    picked = op.sum(op.where_scalar(is_last, op.broadcast_to(vals, shape=hot.shape), c=0.0), axis=1)
    got = op.compare_scalar(op.reshape(last, shape=(rows[0], hot.shape[2])), kind="ge", c=0.0)
    return op.where(_unrows(got, xs.shape, d), _unrows(picked, xs.shape, d), xs)


# ---------------------------------------------------------------- public front ends
def _run(x: Tensor, index: Tensor, d: int, src, body) -> Tensor:
    """``body(float32 region of x, float32 src region)`` put back into ``x``, in ``x``'s dtype."""
    if not index.numel_:
        return op.reshape(x, shape=x.shape)
    region = _region(x, index, d)
    xs = _float(_head(x, region))
    vs = _float(_head(src, index.shape)) if isinstance(src, Tensor) else src
    part = _as(body(xs, vs), float32 if x.dtype is bool_ else x.dtype)
    if x.dtype is bool_:
        part = op.cast(part, dtype=bool_)
    return _put_back(x, part)


def _scatter_value(x: Tensor, d: int, index: Tensor, value, reduce) -> Tensor:
    if isinstance(value, Tensor):
        if value.ndim:
            raise RuntimeError("scatter(): a value tensor must be 0-dimensional (use src= for a tensor of values)")
        value = value.item()
    if isinstance(value, (bool, np.bool_)):
        value = float(value)
    if not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"scatter(): value must be a number, got {type(value).__name__}")
    if reduce is not None:
        src = op.iota(index, shape=index.shape, axis=0, start=float(value), step=0.0)
        src = _as(src, x.dtype) if x.dtype is not bool_ else op.cast(src, dtype=bool_)
        return _scatter_src(x, d, index, src, reduce)
    return _run(x, index, d, None,
                lambda xs, _: op.where_scalar(_written(xs, index, d), xs, c=float(value), tensor_if_true=False))


def _scatter_src(x: Tensor, d: int, index: Tensor, src: Tensor, reduce) -> Tensor:
    if reduce is None:
        return _run(x, index, d, src, lambda xs, vs: _last_write(xs, index, vs, d))
    if reduce not in ("add", "multiply"):
        raise RuntimeError(f"scatter(): reduce argument must be either add or multiply, got {reduce!r}")
    kind = "sum" if reduce == "add" else "prod"
    return _run(x, index, d, src, lambda xs, vs: _reduce_core(xs, index, vs, d, kind, True, False))


@public(method="scatter", function="scatter")
def scatter(input: Tensor, dim: int, index: Tensor, src=None, *, value=None, reduce: str | None = None) -> Tensor:
    """A copy of ``input`` with ``src`` (a tensor, or a number/``value``) written at ``index`` along ``dim``:
    ``out[i][index[i][j]] = src[i][j]`` for ``dim=1`` (torch.scatter). ``reduce="add"``/``"multiply"``
    combines instead of replacing. Repeated indices: the last write (index order) wins.

    >>> import ggmlgrad as gg
    >>> gg.zeros(2, 3).scatter(1, gg.tensor([[2], [0]]), 7.0).tolist()
    [[0.0, 0.0, 7.0], [7.0, 0.0, 0.0]]
    """
    if src is None and value is None:
        raise TypeError("scatter() missing 1 required argument: 'src' or 'value'")
    if src is not None and value is not None:
        raise TypeError("scatter() got both 'src' and 'value'")
    given_value = src is None
    src = value if given_value else src
    d = _check_scatter("scatter", input, dim, index, None if given_value else src)
    if isinstance(src, Tensor) and not given_value:
        return _scatter_src(input, d, index, src, reduce)
    return _scatter_value(input, d, index, src, reduce)


@public(method="scatter_add", function="scatter_add")
def scatter_add(input: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:
    """A copy of ``input`` with each ``src`` element added at its ``index`` along ``dim`` (repeats
    accumulate; torch.scatter_add).

    >>> import ggmlgrad as gg
    >>> gg.zeros(3).scatter_add(0, gg.tensor([0, 0, 2]), gg.tensor([1.0, 2.0, 3.0])).tolist()
    [3.0, 0.0, 3.0]
    """
    if not isinstance(src, Tensor):
        raise TypeError(f"scatter_add(): src must be a Tensor, got {type(src).__name__}")
    d = _check_scatter("scatter_add", input, dim, index, src)
    return _run(input, index, d, src, lambda xs, vs: _reduce_core(xs, index, vs, d, "sum", True, False))


@public(method="scatter_reduce", function="scatter_reduce")
def scatter_reduce(input: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str, *,
                   include_self: bool = True) -> Tensor:
    """A copy of ``input`` where each position ``index`` writes to is reduced (``"sum"``, ``"prod"``,
    ``"mean"``, ``"amax"``, ``"amin"``) over the ``src`` values written there and, with
    ``include_self``, its own value (torch.scatter_reduce). Positions nothing writes keep theirs.

    >>> import ggmlgrad as gg
    >>> x = gg.tensor([1.0, 5.0])
    >>> x.scatter_reduce(0, gg.tensor([0, 0, 1]), gg.tensor([4.0, 2.0, 3.0]), "amax").tolist()
    [4.0, 5.0]
    """
    reduce = {"max": "amax", "min": "amin"}.get(reduce, reduce)   # torch accepts these spellings too
    if reduce not in _REDUCES:
        raise RuntimeError(f"scatter_reduce(): reduce argument must be either sum, prod, mean, amax or amin, got "
                           f"{reduce!r}")
    if not isinstance(src, Tensor):
        raise TypeError(f"scatter_reduce(): src must be a Tensor, got {type(src).__name__}")
    d = _check_scatter("scatter_reduce", input, dim, index, src)
    integral = input.dtype is int32
    return _run(input, index, d, src,
                lambda xs, vs: _reduce_core(xs, index, vs, d, reduce, bool(include_self), integral))


# ---------------------------------------------------------------- index_add / index_copy / index_fill
def _check_index_op(opname: str, x: Tensor, dim, index, source=None) -> int:
    _check_tensor(opname, x)
    _index_arg(opname, index)
    if index.ndim > 1:
        raise IndexError(f"{opname}(): Index is supposed to be a vector, got shape {index.shape}")
    d = _dim(opname, dim, max(x.ndim, 1))
    n = x.shape[d] if x.ndim else 1
    if source is not None:
        if not isinstance(source, Tensor):
            raise TypeError(f"{opname}(): source must be a Tensor, got {type(source).__name__}")
        want = x.shape[:d] + (index.numel_,) + x.shape[d + 1:] if x.ndim else (index.numel_,) * min(1, source.ndim)
        if source.shape != want and not (x.ndim == 0 and source.numel_ == index.numel_ == 1):
            raise RuntimeError(f"{opname}(): source of shape {source.shape} does not match self {x.shape} with "
                               f"dimension {d} of size {index.numel_} (expected {want})")
        if source.dtype is not x.dtype:
            raise RuntimeError(f"{opname}(): self ({x.dtype.name}) and source ({source.dtype.name}) must have the "
                               f"same scalar type")
    if index.numel_:
        _check_index(opname, index, n, what=f" (dimension {d} of {x.shape})")
    return d


@public(method="index_add", function="index_add")
def index_add(input: Tensor, dim: int, index: Tensor, source: Tensor, *, alpha=1) -> Tensor:
    """A copy of ``input`` with ``alpha * source``'s slices along ``dim`` added at the slices ``index``
    names (repeats accumulate; torch.index_add).

    >>> import ggmlgrad as gg
    >>> gg.zeros(3, 2).index_add(0, gg.tensor([2, 0, 2]), gg.ones(3, 2)).tolist()
    [[1.0, 1.0], [0.0, 0.0], [2.0, 2.0]]
    """
    d = _check_index_op("index_add", input, dim, index, source)
    if not index.numel_:
        return op.reshape(input, shape=input.shape)
    x = input if input.ndim else op.reshape(input, shape=(1,))
    src = source if source.ndim else op.reshape(source, shape=(1,))
    s = _float(src)
    if alpha != 1:
        s = s * float(alpha)
    total = op.index_select_backward(s, index if index.ndim == 1 else op.reshape(index, shape=(1,)),
                                     shape=x.shape, axis=d)
    out = _as(op.add(_float(x), total), input.dtype if input.dtype is not bool_ else float32)
    out = op.cast(out, dtype=bool_) if input.dtype is bool_ else out
    return out if out.shape == input.shape else op.reshape(out, shape=input.shape)


@public(method="index_copy", function="index_copy")
def index_copy(input: Tensor, dim: int, index: Tensor, source: Tensor) -> Tensor:
    """A copy of ``input`` with its slices ``index`` along ``dim`` replaced by ``source``'s (torch.index_copy;
    a repeated index keeps the last slice written).

    >>> import ggmlgrad as gg
    >>> gg.zeros(3).index_copy(0, gg.tensor([2]), gg.tensor([5.0])).tolist()
    [0.0, 0.0, 5.0]
    """
    d = _check_index_op("index_copy", input, dim, index, source)
    if not index.numel_:
        return op.reshape(input, shape=input.shape)
    x = input if input.ndim else op.reshape(input, shape=(1,))
    src = source if source.ndim else op.reshape(source, shape=(1,))
    idx = index if index.ndim == 1 else op.reshape(index, shape=(1,))
    L, k = x.shape[d], idx.numel_
    # the slice of source written last to each target slice: one-hot (k, L) of the index, the largest j per l
    hot = op.one_hot(idx, num_classes=L)
    last = op.amax(op.where_scalar(hot, op.iota(hot, shape=(k, L), axis=0), c=-1.0), axis=0)     # (L,), -1: none
    rows = op.cast(op.clamp(last, lo=0.0), dtype=int32)
    picked = _float(op.index_select(src, rows, axis=d))                      # x's shape
    written = op.reshape(op.compare_scalar(last, kind="ge", c=0.0),
                         shape=tuple(L if i == d else 1 for i in range(x.ndim)))
    out = op.where(written, picked, _float(x))
    out = op.cast(out, dtype=bool_) if input.dtype is bool_ else _as(out, input.dtype)
    return out if out.shape == input.shape else op.reshape(out, shape=input.shape)


@public(method="index_fill", function="index_fill")
def index_fill(input: Tensor, dim: int, index: Tensor, value) -> Tensor:
    """A copy of ``input`` with its slices ``index`` along ``dim`` set to ``value`` (a number or 0-d tensor;
    torch.index_fill).

    >>> import ggmlgrad as gg
    >>> gg.zeros(2, 3).index_fill(1, gg.tensor([0, 2]), -1.0).tolist()
    [[-1.0, 0.0, -1.0], [-1.0, 0.0, -1.0]]
    """
    d = _check_index_op("index_fill", input, dim, index)
    if isinstance(value, Tensor) and value.ndim:
        raise RuntimeError(f"index_fill_(): Expected value to be a 0-dimensional tensor, got {value.ndim} dims")
    if not index.numel_:
        return op.reshape(input, shape=input.shape)
    n = input.shape[d] if input.ndim else 1
    idx = index if index.ndim == 1 else op.reshape(index, shape=(1,))
    hit = op.index_select_backward(_ones_like_index(idx), idx, shape=(n,), axis=0)
    mask = op.compare_scalar(op.reshape(hit, shape=tuple(n if i == d else 1 for i in range(input.ndim))),
                             kind="gt", c=0.0)
    return bool_ops.masked_fill(input, op.broadcast_to(mask, shape=input.shape) if input.ndim else
                                op.reshape(mask, shape=()), value)


@public(function="masked_fill")
def masked_fill(input: Tensor, mask: Tensor, value) -> Tensor:
    """torch.masked_fill: ``input`` with ``value`` where the bool ``mask`` (broadcast with ``input``) is True.

    >>> import ggmlgrad as gg
    >>> gg.masked_fill(gg.zeros(2, 2), gg.tensor([True, False]), 1.0).tolist()
    [[1.0, 0.0], [1.0, 0.0]]
    """
    _check_tensor("masked_fill", input)
    return input.masked_fill(mask, value)


# ---------------------------------------------------------------- in-place forms
class _Operands:
    """The tensors an in-place scatter reads besides ``self`` (only ``requires_grad`` is looked at: with
    grad on, a src that requires grad puts the write on the tape, as torch)."""

    def __init__(self, *tensors):
        self.requires_grad = any(isinstance(t, Tensor) and t.requires_grad for t in tensors)


def _in_place(name: str, x: Tensor, compute, *operands) -> Tensor:
    _check_tensor(name, x)
    return x._inplace(name, _Operands(*operands), lambda old, _: compute(old), cast_ok=True)


@public(method="scatter_")
def scatter_(input: Tensor, dim: int, index: Tensor, src=None, *, value=None, reduce: str | None = None) -> Tensor:
    """In-place :func:`scatter` (a write: version bump, reaches views).

    >>> import ggmlgrad as gg
    >>> gg.zeros(3).scatter_(0, gg.tensor([1]), gg.tensor([4.0])).tolist()
    [0.0, 4.0, 0.0]
    """
    return _in_place("scatter_", input, lambda t: scatter(t, dim, index, src, value=value, reduce=reduce), src)


@public(method="scatter_add_")
def scatter_add_(input: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:
    """In-place :func:`scatter_add`.

    >>> import ggmlgrad as gg
    >>> gg.ones(2).scatter_add_(0, gg.tensor([1, 1]), gg.tensor([1.0, 2.0])).tolist()
    [1.0, 4.0]
    """
    return _in_place("scatter_add_", input, lambda t: scatter_add(t, dim, index, src), src)


@public(method="scatter_reduce_")
def scatter_reduce_(input: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str, *,
                    include_self: bool = True) -> Tensor:
    """In-place :func:`scatter_reduce`.

    >>> import ggmlgrad as gg
    >>> gg.ones(2).scatter_reduce_(0, gg.tensor([0, 0]), gg.tensor([3.0, 5.0]), "prod").tolist()
    [15.0, 1.0]
    """
    return _in_place("scatter_reduce_", input,
                     lambda t: scatter_reduce(t, dim, index, src, reduce, include_self=include_self), src)


@public(method="index_add_")
def index_add_(input: Tensor, dim: int, index: Tensor, source: Tensor, *, alpha=1) -> Tensor:
    """In-place :func:`index_add`.

    >>> import ggmlgrad as gg
    >>> gg.zeros(2).index_add_(0, gg.tensor([1]), gg.tensor([2.0]), alpha=3).tolist()
    [0.0, 6.0]
    """
    return _in_place("index_add_", input, lambda t: index_add(t, dim, index, source, alpha=alpha), source)


@public(method="index_copy_")
def index_copy_(input: Tensor, dim: int, index: Tensor, source: Tensor) -> Tensor:
    """In-place :func:`index_copy`.

    >>> import ggmlgrad as gg
    >>> gg.zeros(2).index_copy_(0, gg.tensor([0]), gg.tensor([7.0])).tolist()
    [7.0, 0.0]
    """
    return _in_place("index_copy_", input, lambda t: index_copy(t, dim, index, source), source)


@public(method="index_fill_")
def index_fill_(input: Tensor, dim: int, index: Tensor, value) -> Tensor:
    """In-place :func:`index_fill`.

    >>> import ggmlgrad as gg
    >>> gg.zeros(2).index_fill_(0, gg.tensor([1]), 9.0).tolist()
    [0.0, 9.0]
    """
    return _in_place("index_fill_", input, lambda t: index_fill(t, dim, index, value), value)


# ---------------------------------------------------------------- index_put
def _index_put_key(opname: str, x: Tensor, indices) -> tuple:
    if not isinstance(indices, (tuple, list)):
        raise TypeError(f"{opname}(): indices must be a tuple of tensors, got {type(indices).__name__}")
    if len(indices) > max(x.ndim, 1):
        raise IndexError(f"{opname}(): too many indices for tensor of dimension {x.ndim} (got {len(indices)})")
    for t in indices:
        if not isinstance(t, Tensor):
            raise TypeError(f"{opname}(): indices must be tensors, got {type(t).__name__}")
    return tuple(indices)


@public(method="index_put_")
def index_put_(input: Tensor, indices, values, accumulate: bool = False) -> Tensor:
    """``input[indices] = values`` (torch.Tensor.index_put_); with ``accumulate=True`` every write adds,
    repeated indices included (``input[indices] += values`` adds once per distinct position).

    >>> import ggmlgrad as gg
    >>> gg.zeros(3).index_put_((gg.tensor([0, 0, 2]),), gg.tensor(1.0), accumulate=True).tolist()
    [2.0, 0.0, 1.0]
    """
    from . import adv_index
    from .shape_methods import getitem, setitem
    _check_tensor("index_put_", input)
    key = _index_put_key("index_put_", input, indices)
    if not accumulate:
        setitem(input, key, values)
        return input
    if any(t.dtype is not int32 for t in key):
        raise TypeError("index_put_(): accumulate=True takes int32 index tensors (masks: use the mask's nonzero())")
    if isinstance(values, Tensor) and values.dtype is not input.dtype:
        raise RuntimeError(f"index_put_(): values ({values.dtype.name}) and self ({input.dtype.name}) must have the "
                           f"same dtype")
    adv_index.setitem_many(input, key, values, getitem, _float, accumulate=True)
    return input


@public(method="index_put", function="index_put")
def index_put(input: Tensor, indices, values, accumulate: bool = False) -> Tensor:
    """Out-of-place :func:`index_put_` (torch.index_put): a copy of ``input`` with ``values`` put at ``indices``.

    >>> import ggmlgrad as gg
    >>> gg.index_put(gg.zeros(2, 2), (gg.tensor([1]), gg.tensor([0])), gg.tensor(5.0)).tolist()
    [[0.0, 0.0], [5.0, 0.0]]
    """
    from .views import copy_of
    _check_tensor("index_put", input)
    return index_put_(copy_of(input), indices, values, accumulate)
