"""Function forms of the shape and indexing ops: ``gg.cat``, ``gg.stack``, ``gg.split``, ``gg.gather``, ...

PyTorch names and argument orders. Every result is a new contiguous tensor
(ggmlgrad has no aliasing views): ``squeeze``/``unsqueeze``/``flatten`` are
reshapes, ``expand``/``broadcast_to`` materialise the repeated values.

>>> import ggmlgrad as gg
>>> a, b = gg.ones(2, 3), gg.zeros(1, 3)
>>> gg.cat([a, b]).shape
(3, 3)
>>> [p.shape for p in gg.split(gg.ones(5, 2), 2)]
[(2, 2), (2, 2), (1, 2)]
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..engine import int32
from ..ops import op
from ..ops.decl import public
from ..ops.shape_ops import MAX_CONCAT_INPUTS
from ..ops.shapes import int_sizes, numel
from . import bool_ops
from .tensor import Tensor, tensor
from ..engine.errors import IndexRangeError, ShapeError  # IndexRangeError: imported from here by others too

# The gg.* functions declared here (ops/decl.py: public): cat (concat, concatenate), stack, gather,
# index_select, take_along_axis, embedding, slice_scatter, tile. squeeze, flatten, split, ... here return
# copies: the public forms are the views of tensor/shape_methods.py, built on these.


# ---------------------------------------------------------------- helpers


def _dim(opname: str, dim, ndim: int, extra: int = 0) -> int:
    """Normalise a dimension in [-(ndim+extra), ndim+extra) (``extra=1`` for insert positions)."""
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)):
        raise TypeError(f"{opname}: dim must be an int, got {dim!r}")
    n = ndim + extra
    lo, hi = (-max(n, 1), max(n, 1))
    if not lo <= dim < hi:
        raise IndexRangeError(f"{opname}: dim {dim} is out of range for a tensor with {ndim} dimensions "
                         f"(expected [{lo}, {hi - 1}])")
    return int(dim) % max(n, 1)


def _check_tensor(opname: str, x) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{opname}: expected a Tensor, got {type(x).__name__}")
    return x


def _index_tensor(opname: str, index, device) -> Tensor:
    """An int32 index tensor from a Tensor, list or array of ints (uploaded once)."""
    if isinstance(index, Tensor):
        if index.dtype is not int32:
            raise TypeError(f"{opname}: index must be an int32 tensor, got {index.dtype.name}")
        return index
    arr = np.asarray(index)
    if arr.dtype.kind == "b":
        raise TypeError(f"{opname}: boolean masks are not supported as an index (data-dependent shape)")
    if arr.size == 0 and arr.dtype.kind == "f":
        arr = arr.astype(np.int32)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{opname}: index must hold integers, got dtype {arr.dtype}")
    return tensor(arr.astype(np.int32), dtype=int32, device=device)


def _tensors(opname: str, tensors) -> list[Tensor]:
    if isinstance(tensors, Tensor) or not isinstance(tensors, (list, tuple)):
        raise TypeError(f"{opname}: expected a list or tuple of tensors, got {type(tensors).__name__}")
    if not tensors:
        raise ValueError(f"{opname}: expected a non-empty list of tensors")
    for t in tensors:
        _check_tensor(opname, t)
    return list(tensors)


# ---------------------------------------------------------------- reshapes
def squeeze(x: Tensor, dim=None) -> Tensor:
    """Drop size-1 dimensions (all of them, or those in ``dim``; others are left alone, as in PyTorch).

    >>> import ggmlgrad as gg
    >>> gg.squeeze(gg.ones(1, 3, 1), 0).shape
    (3, 1)
    """
    _check_tensor("squeeze", x)
    if dim is None:
        dims = set(range(x.ndim))
    else:
        seq = dim if isinstance(dim, (tuple, list)) else (dim,)
        listed = [_dim("squeeze", d, x.ndim) for d in seq]
        dims = set(listed)
        if len(dims) != len(listed):   # torch refuses a repeated dim
            raise RuntimeError(f"squeeze: dim {next(d for d in listed if listed.count(d) > 1)} appears multiple "
                               f"times in the list of dims {tuple(seq)}")
    shape = tuple(s for i, s in enumerate(x.shape) if not (i in dims and s == 1))
    return op.reshape(x, shape=shape)


def unsqueeze(x: Tensor, dim: int) -> Tensor:
    """Insert a size-1 dimension at ``dim`` (negative counts from the end of the result).

    >>> import ggmlgrad as gg
    >>> gg.unsqueeze(gg.ones(3), -1).shape
    (3, 1)
    """
    _check_tensor("unsqueeze", x)
    d = _dim("unsqueeze", dim, x.ndim, extra=1)
    if x.ndim >= 4:
        raise ValueError(f"unsqueeze: {x.shape} already has 4 dimensions; ggmlgrad supports at most 4")
    return op.reshape(x, shape=x.shape[:d] + (1,) + x.shape[d:])


def flatten(x: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    """Merge dimensions ``start_dim..end_dim`` into one (a 0-d tensor becomes 1-D).

    >>> import ggmlgrad as gg
    >>> gg.flatten(gg.ones(2, 3, 4), 1).shape
    (2, 12)
    """
    _check_tensor("flatten", x)
    if x.ndim == 0:
        _dim("flatten", start_dim, 0)
        _dim("flatten", end_dim, 0)
        return op.reshape(x, shape=(1,))
    s, e = _dim("flatten", start_dim, x.ndim), _dim("flatten", end_dim, x.ndim)
    if s > e:
        raise ShapeError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim} for {x.shape}")
    return op.reshape(x, shape=x.shape[:s] + (numel(x.shape[s:e + 1]),) + x.shape[e + 1:])


def broadcast_to(x: Tensor, shape) -> Tensor:
    """Repeat size-1 dims (and add leading ones) to reach ``shape``; ``-1`` keeps a size.

    >>> import ggmlgrad as gg
    >>> gg.broadcast_to(gg.ones(3, 1), (2, 3, 4)).shape
    (2, 3, 4)
    """
    _check_tensor("broadcast_to", x)
    if not isinstance(shape, (tuple, list)):
        shape = (shape,)
    return op.broadcast_to(x, shape=tuple(shape))


def expand(x: Tensor, *sizes) -> Tensor:
    """PyTorch ``x.expand(*sizes)``: ``broadcast_to`` taking sizes as arguments or one sequence.

    >>> import ggmlgrad as gg
    >>> gg.expand(gg.ones(3, 1), 3, 4).shape
    (3, 4)
    """
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        sizes = tuple(sizes[0])
    return broadcast_to(x, sizes)


def unflatten(x: Tensor, dim: int, sizes) -> Tensor:
    """Split dimension ``dim`` into ``sizes`` (one entry may be -1).

    >>> import ggmlgrad as gg
    >>> gg.unflatten(gg.ones(2, 12), 1, (3, -1)).shape
    (2, 3, 4)
    """
    _check_tensor("unflatten", x)
    d = _dim("unflatten", dim, x.ndim)
    sizes = int_sizes("unflatten", sizes if isinstance(sizes, (tuple, list)) else (sizes,))
    known = numel(tuple(s for s in sizes if s != -1))
    if sizes.count(-1) > 1 or (sizes.count(-1) == 0 and known != x.shape[d]) or \
            (sizes.count(-1) == 1 and (known == 0 or x.shape[d] % known)):
        raise ShapeError(f"unflatten: sizes {sizes} do not multiply to dimension {dim} of size {x.shape[d]} ({x.shape})")
    sizes = tuple(x.shape[d] // known if s == -1 else s for s in sizes)
    return op.reshape(x, shape=x.shape[:d] + sizes + x.shape[d + 1:])


@public(function="tile")
def tile(x: Tensor, reps) -> Tensor:
    """NumPy ``tile``: the whole tensor repeated ``reps`` times per dim (``Tensor.repeat`` in PyTorch).

    >>> import ggmlgrad as gg
    >>> gg.tile(gg.tensor([1.0, 2.0]), (2, 2)).tolist()
    [[1.0, 2.0, 1.0, 2.0], [1.0, 2.0, 1.0, 2.0]]
    """
    _check_tensor("tile", x)
    reps = int_sizes("tile", reps if isinstance(reps, (tuple, list)) else (reps,), "reps")
    if len(reps) < x.ndim:   # NumPy pads reps with leading 1s
        reps = (1,) * (x.ndim - len(reps)) + reps
    return op.tile(x, reps=reps)


def swapaxes(x: Tensor, axis0: int, axis1: int) -> Tensor:
    """Swap two dimensions (``Tensor.transpose(dim0, dim1)``); a copy, not a view.

    >>> import ggmlgrad as gg
    >>> gg.swapaxes(gg.ones(2, 3), 0, 1).shape
    (3, 2)
    """
    _check_tensor("transpose", x)
    if x.ndim < 2:
        _dim("transpose", axis0, x.ndim)
        _dim("transpose", axis1, x.ndim)
        return op.clone(x) if x.dtype.is_float else op.reshape(x, shape=x.shape)
    a, b = _dim("transpose", axis0, x.ndim), _dim("transpose", axis1, x.ndim)
    axes = list(range(x.ndim))
    axes[a], axes[b] = axes[b], axes[a]
    return op.permute(x, axes=tuple(axes))


def movedim(x: Tensor, source: int, destination: int) -> Tensor:
    """Move dimension ``source`` to position ``destination``.

    >>> import ggmlgrad as gg
    >>> gg.movedim(gg.ones(2, 3, 4), 0, -1).shape
    (3, 4, 2)
    """
    _check_tensor("movedim", x)
    s, d = _dim("movedim", source, x.ndim), _dim("movedim", destination, x.ndim)
    axes = [i for i in range(x.ndim) if i != s]
    axes.insert(d, s)
    return op.permute(x, axes=tuple(axes))


# ---------------------------------------------------------------- join / split
def cat(tensors: Sequence[Tensor], dim: int = 0, *, axis: int | None = None) -> Tensor:
    """Concatenate along an existing dimension (any number of tensors; ``axis`` is ``dim``'s NumPy
    name). Mixed dtypes promote as torch's (bool < int32 < float32).

    >>> import ggmlgrad as gg
    >>> gg.cat([gg.ones(2, 1), gg.zeros(2, 3)], dim=1).shape
    (2, 4)
    """
    dim = dim if axis is None else axis
    ts = bool_ops.promoted(_tensors("cat", tensors))
    if len(ts) == 1:
        _dim("cat", dim, ts[0].ndim)
        return op.reshape(ts[0], shape=ts[0].shape)   # a copy, as every result
    return _grouped(ts, lambda group: op.concat(*group, axis=dim))


def _grouped(ts: list, join):
    """``join`` at most MAX_CONCAT_INPUTS tensors per op; longer lists are joined in rounds."""
    while len(ts) > MAX_CONCAT_INPUTS:
        ts = [join(ts[i:i + MAX_CONCAT_INPUTS]) if len(ts[i:i + MAX_CONCAT_INPUTS]) > 1 else ts[i]
              for i in range(0, len(ts), MAX_CONCAT_INPUTS)]
    return join(ts)


concat = cat
concatenate = cat


def stack(tensors: Sequence[Tensor], dim: int = 0, *, axis: int | None = None) -> Tensor:
    """Join equal-shape tensors along a new dimension ``dim``.

    >>> import ggmlgrad as gg
    >>> gg.stack([gg.ones(3), gg.zeros(3)], dim=1).shape
    (3, 2)
    """
    dim = dim if axis is None else axis
    ts = bool_ops.promoted(_tensors("stack", tensors))
    first = ts[0].shape
    for t in ts[1:]:
        if t.shape != first:
            raise ShapeError(f"stack: all tensors must have the same shape, got "
                             f"{', '.join(str(u.shape) for u in ts)}")
    d = _dim("stack", dim, len(first), extra=1)
    if len(first) >= 4:
        raise ValueError(f"stack: stacking {first} tensors would give 5 dimensions; ggmlgrad supports at most 4")
    if len(ts) <= MAX_CONCAT_INPUTS:
        return op.concat(*ts, axis=d, stack=True)
    groups = [op.concat(*ts[i:i + MAX_CONCAT_INPUTS], axis=d, stack=True) if len(ts[i:i + MAX_CONCAT_INPUTS]) > 1
              else unsqueeze(ts[i], d) for i in range(0, len(ts), MAX_CONCAT_INPUTS)]
    return cat(groups, dim=d)


def narrow(x: Tensor, dim: int, start: int, length: int) -> Tensor:
    """``x`` restricted to ``start:start+length`` along ``dim``.

    >>> import ggmlgrad as gg
    >>> gg.narrow(gg.arange(5.0), 0, 1, 2).tolist()
    [1.0, 2.0]
    """
    _check_tensor("narrow", x)
    d = _dim("narrow", dim, x.ndim)
    n = x.shape[d]
    for name, v in (("start", start), ("length", length)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"narrow: {name} must be an int, got {v!r}")
    if start < 0:
        start += n
    if not (0 <= start <= n) or length < 0 or start + length > n:
        raise IndexRangeError(f"narrow: start {start} with length {length} is out of range for dimension "
                         f"{dim} of size {n} ({x.shape})")
    return _slice_axis(x, d, int(start), int(start + length))


def _slice_axis(x: Tensor, d: int, b: int, e: int) -> Tensor:
    start = tuple(b if i == d else 0 for i in range(x.ndim))
    stop = tuple(e if i == d else s for i, s in enumerate(x.shape))
    return op.slice(x, start=start, stop=stop, step=(1,) * x.ndim)


@public(function="slice_scatter")
def slice_scatter(x: Tensor, src: Tensor, dim: int = 0, start: int | None = None, end: int | None = None,
                  step: int = 1) -> Tensor:
    """A copy of ``x`` with ``x[..., start:end:step, ...]`` (along ``dim``) replaced by ``src``
    (PyTorch ``slice_scatter``; differentiable in both inputs).

    >>> import ggmlgrad as gg
    >>> gg.slice_scatter(gg.zeros(2, 4), gg.ones(2, 2), dim=1, start=1, end=3).tolist()
    [[0.0, 1.0, 1.0, 0.0], [0.0, 1.0, 1.0, 0.0]]
    """
    _check_tensor("slice_scatter", x)
    _check_tensor("slice_scatter", src)
    d = _dim("slice_scatter", dim, x.ndim)
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step <= 0:
        raise ValueError(f"slice_scatter: step must be a positive int, got {step!r}")
    b, e, s = slice(start, end, step).indices(x.shape[d])
    begin = tuple(b if i == d else 0 for i in range(x.ndim))
    stop = tuple(e if i == d else n for i, n in enumerate(x.shape))
    steps = tuple(s if i == d else 1 for i in range(x.ndim))
    return op.slice_set(x, src, start=begin, stop=stop, step=steps)


def split(x: Tensor, split_size_or_sections, dim: int = 0) -> tuple[Tensor, ...]:
    """Split into pieces of ``split_size`` (the last may be smaller) or of the given section sizes.

    >>> import ggmlgrad as gg
    >>> [p.shape for p in gg.split(gg.ones(2, 5), [1, 4], dim=1)]
    [(2, 1), (2, 4)]
    """
    _check_tensor("split", x)
    if x.ndim == 0:
        raise ValueError("split: cannot split a 0-d tensor")
    d = _dim("split", dim, x.ndim)
    n = x.shape[d]
    s = split_size_or_sections
    if isinstance(s, (int, np.integer)) and not isinstance(s, bool):
        if s <= 0:
            raise ValueError(f"split: split_size must be positive, got {s}")
        sizes = [min(s, n - i) for i in range(0, n, s)] or [0]
    elif isinstance(s, (list, tuple)):
        sizes = list(s)
        if any(isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)) for k in sizes):
            raise TypeError(f"split: section sizes must be ints, got {s}")
        if any(k < 0 for k in sizes):
            raise ValueError(f"split: section sizes must be non-negative, got {s}")
        if sum(sizes) != n:
            raise ShapeError(f"split: section sizes {list(s)} sum to {sum(sizes)}, but dimension {dim} of "
                             f"{x.shape} has size {n}")
    else:
        raise TypeError(f"split: expected an int or a list of ints, got {s!r}")
    out, pos = [], 0
    for k in sizes:
        out.append(_slice_axis(x, d, pos, pos + int(k)))
        pos += int(k)
    return tuple(out)


def chunk(x: Tensor, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
    """Split into ``chunks`` pieces of ceil(size / chunks) (fewer when that already covers it, as PyTorch).

    >>> import ggmlgrad as gg
    >>> [p.shape for p in gg.chunk(gg.ones(5), 3)]
    [(2,), (2,), (1,)]
    """
    if isinstance(chunks, (bool, np.bool_)) or not isinstance(chunks, (int, np.integer)):
        raise TypeError(f"chunk: chunks must be an int, got {chunks!r}")
    if chunks <= 0:
        raise ValueError(f"chunk: chunks must be a positive int, got {chunks!r}")
    _check_tensor("chunk", x)
    if x.ndim == 0:
        raise ShapeError("chunk: cannot chunk a 0-d tensor")
    d = _dim("chunk", dim, x.ndim)
    n = x.shape[d]
    size = max(-(-n // int(chunks)), 1)
    return split(x, size, d)


# ---------------------------------------------------------------- index tensors
@public(method="index_select", function="index_select")
def index_select(x: Tensor, dim: int, index) -> Tensor:
    """Entries of ``x`` along ``dim`` at the positions in a 1-D int32 ``index`` (repeats allowed).

    Out-of-range values raise ``IndexError`` in every mode (graph mode and capture: where the graph
    computes, see ``ops/indexing.py``).

    >>> import ggmlgrad as gg
    >>> gg.index_select(gg.tensor([[1., 2.], [3., 4.]]), 0, gg.tensor([1, 1])).tolist()
    [[3.0, 4.0], [3.0, 4.0]]
    """
    _check_tensor("index_select", x)
    return op.index_select(x, _index_tensor("index_select", index, x.device), axis=dim)


@public(method="gather", function="gather")
def gather(x: Tensor, dim: int, index) -> Tensor:
    """PyTorch gather: ``out[i][j] = x[i][index[i][j]]`` for ``dim=1`` (index int32, same ndim as ``x``;
    along the other dims ``index`` may be smaller than ``x``).

    Out-of-range values raise ``IndexError`` in every mode (graph mode and capture: where the graph
    computes, see ``ops/indexing.py``).

    >>> import ggmlgrad as gg
    >>> gg.gather(gg.tensor([[1., 2.], [3., 4.]]), 1, gg.tensor([[1, 1], [0, 1]])).tolist()
    [[2.0, 2.0], [3.0, 4.0]]
    """
    _check_tensor("gather", x)
    index = _index_tensor("gather", index, x.device)
    if x.ndim == 0:
        raise ValueError("gather: cannot gather from a 0-d tensor")
    d = _dim("gather", dim, x.ndim)
    if index.ndim != x.ndim:
        raise ShapeError(f"gather: index must have as many dimensions as the input: input {x.shape}, "
                         f"index {index.shape}")
    if any(i != d and t > s for i, (s, t) in enumerate(zip(x.shape, index.shape))):
        raise ShapeError(f"gather: index {index.shape} is larger than input {x.shape} outside dimension {dim}")
    if any(i != d and t < s for i, (s, t) in enumerate(zip(x.shape, index.shape))):
        stop = tuple(s if i == d else t for i, (s, t) in enumerate(zip(x.shape, index.shape)))
        x = op.slice(x, start=(0,) * x.ndim, stop=stop, step=(1,) * x.ndim)
    return op.gather(x, index, axis=d)


@public(function="take_along_axis")
def take_along_axis(x: Tensor, indices, axis: int) -> Tensor:
    """NumPy ``take_along_axis`` (no broadcasting of ``indices``): ``gather(x, axis, indices)``.

    >>> import ggmlgrad as gg
    >>> gg.take_along_axis(gg.tensor([[1., 2.], [3., 4.]]), gg.tensor([[1], [0]]), 1).tolist()
    [[2.0], [3.0]]
    """
    return gather(x, axis, indices)


@public(function="embedding")
def embedding(weight: Tensor, indices) -> Tensor:
    """Rows of ``weight`` (num_embeddings, dim) for int32 ``indices`` of any shape up to 3-D
    (``torch.embedding`` argument order). Repeated indices accumulate their gradients.

    >>> import ggmlgrad as gg
    >>> gg.embedding(gg.eye(3), gg.tensor([[2, 0]])).shape
    (1, 2, 3)
    """
    _check_tensor("embedding", weight)
    return op.embedding(weight, _index_tensor("embedding", indices, weight.device))


# cat and stack are declared here, apart from their code (another change touches their bodies).
public(function=("cat", "concat", "concatenate"))(cat)
public(function="stack")(stack)
