"""Small ggml node-building helpers used by op forward builders."""
from __future__ import annotations

from .._ggml import lib, node_is_op_result, node_is_view, node_ne
from ..engine.flat import FlatNode
from .fast_math import column_sum
from .shapes import ne as _ne


class SavedNode(int):
    """An op's result node that carries nodes its builder made on the way (``saved``: name → node),
    for a backward builder of the SAME graph to reuse instead of computing them again. A node that
    enters a later graph as a leaf is a plain int: backward builders then compute what they need."""

    def __new__(cls, node: int, **saved: int):
        self = super().__new__(cls, node)
        self.saved = saved
        return self


def saved_node(node: int, name: str) -> int:
    """``name`` saved on ``node`` by its op's builder (see :class:`SavedNode`), else 0."""
    return node.saved.get(name, 0) if type(node) is SavedNode else 0


def is_view(node: int) -> bool:
    return node_is_view(node)


def materialize(ctx: int, node: int) -> int:
    """A non-view node: op outputs get storage of their own, which a view cannot."""
    return lib.cont(ctx, node) if is_view(node) else node


def owned(ctx: int, node: int, shape: tuple) -> int:
    """``node`` as an op result of ``shape`` (a tensor that owns contiguous memory).

    ``node`` must have been created by the calling builder (never one of its inputs: returning
    that would make two results share memory). When it already has ``shape``'s layout it is the
    result itself; otherwise its reshape is copied (a copy per op costs a pass over the data).
    """
    if node_is_op_result(node) and list(node_ne(node)) == _ne(shape) and lib.is_contiguous(node):
        return node
    return lib.cont(ctx, reshape(ctx, node, shape))


def reshape(ctx: int, node: int, shape: tuple) -> int:
    n = _ne(shape)
    return lib.reshape_4d(ctx, node, n[0], n[1], n[2], n[3])


def shape_only(ctx: int, shape: tuple, ggml_type: int = 0) -> int:
    """A data-less tensor whose only use is to carry a shape (repeat/repeat_back targets)."""
    n = _ne(shape)
    return lib.new_tensor_4d(ctx, ggml_type, n[0], n[1], n[2], n[3])


def expand(ctx: int, node: int, from_shape: tuple, to_shape: tuple) -> int:
    """Broadcast ``node`` (NumPy shape ``from_shape``) to ``to_shape``; no-op when equal."""
    if tuple(from_shape) == tuple(to_shape):
        return node
    n = _ne(to_shape)
    return lib.repeat_4d(ctx, node, n[0], n[1], n[2], n[3])


def sum_to(ctx: int, node: int, from_shape: tuple, keep_shape: tuple) -> int:
    """Sum ``node`` over the axes where ``keep_shape`` (same ndim) has 1s."""
    if tuple(from_shape) == tuple(keep_shape):
        return node
    if all(s == 1 for s in keep_shape):
        return lib.sum(ctx, node)
    return column_sum(ctx, node, from_shape, keep_shape) or lib.repeat_back(ctx, node, shape_only(ctx, keep_shape))


def permute(ctx: int, node: int, axes: tuple) -> int:
    """NumPy-style transpose(axes) of a tensor with len(axes) dims, as a ggml view."""
    nd = len(axes)
    if nd <= 1:
        return node
    # NumPy axis i ↔ ggml dim (nd-1-i). Output axis j takes input axis axes[j]: ggml_permute
    # places source dim d at position p[d].
    p = [0, 1, 2, 3]
    for j, a in enumerate(axes):
        p[nd - 1 - a] = nd - 1 - j
    return lib.permute(ctx, node, p[0], p[1], p[2], p[3])


def zeros_node(ctx: int, shape: tuple) -> int:
    """A node of ``shape`` filled with zeros, computed on the device (no upload)."""
    return lib.fill(ctx, shape_only(ctx, shape), 0.0)


# ---------------------------------------------------------------- elementwise ops on merged rows
_MERGE_BELOW = 1024   # rows this long already amortise ggml's per-row cost
_MERGED_ROW = 8192    # merged rows stay at most this long: multi-threaded kernels split rows


class _MergedSpec:
    """What a builder reads of an input or result (shape, dtype, device, ndim, requires_grad), in merged shape."""

    __slots__ = ("shape", "dtype", "device", "requires_grad")

    def __init__(self, shape: tuple, like) -> None:
        self.shape = shape
        self.dtype = like.dtype
        self.device = like.device
        self.requires_grad = getattr(like, "requires_grad", True)   # a graph-mode pending result: not known yet

    @property
    def ndim(self) -> int:
        return len(self.shape)


def merged_shape(shape: tuple) -> tuple | None:
    """(rows, row length) with rows of up to ``_MERGED_ROW`` elements for a tensor of ``shape``
    whose rows are short, or None when merging gains nothing."""
    if len(shape) < 2 or shape[-1] >= _MERGE_BELOW:
        return None
    row = max(shape[-1], 1)
    rows = 1
    for d in shape[:-1]:
        rows *= d
    k = min(rows, _MERGED_ROW // row)
    if rows % k:
        k = _largest_divisor_at_most(rows, k)
    return (rows // k, row * k) if k > 1 else None


def _largest_divisor_at_most(n: int, limit: int) -> int:
    """The largest divisor of ``n`` not above ``limit`` (divisor pairs up to sqrt(n): a prime row
    count costs ~sqrt(n) steps, not ``limit``)."""
    best = 1
    i = 1
    while i * i <= n:
        if n % i == 0:
            if best < i <= limit:
                best = i
            j = n // i
            if best < j <= limit:
                best = j
        i += 1
    return best


def merged_op(ctx, fn, nodes, shape: tuple) -> int:
    """``fn(ctx, *nodes)`` for same-shape elementwise ggml ops, on merged rows when that pays:
    a builder's result (a :class:`FlatNode` then)."""
    m = merged_shape(shape)
    if m is None:
        return fn(ctx, *nodes)
    return FlatNode(fn(ctx, *(lib.reshape_2d(ctx, n, m[1], m[0]) for n in nodes)), tuple(_ne(shape)))


def repeat_one(ctx, node: int, shape: tuple) -> int | None:
    """A one-element ``node`` repeated to ``shape`` on merged rows, as a builder's result; None when
    the rows do not merge. ggml repeats along a row one element per loop step, so it first fills
    a short row and then repeats that row (a scalar gradient spread over 256x8: 4.9 → ~1 µs)."""
    m = merged_shape(shape)
    if m is None:
        return None
    rows, row = m
    c = min(row, 64)
    while row % c:
        c -= 1
    first = lib.repeat_4d(ctx, node, c, 1, 1, 1) if c > 1 else node
    return FlatNode(lib.repeat_4d(ctx, first, row, rows, 1, 1), tuple(_ne(shape)))


def row_merged(forward):
    """An elementwise op builder that runs on merged rows (:func:`merged_shape`) when every
    tensor input has the result's shape (see :mod:`ggmlgrad.engine.flat` for why). Its result is
    then a :class:`FlatNode` remembering the real shape; other calls build as written."""
    def build(ctx, nodes, inputs, out, **params):
        shape = out.shape
        m = merged_shape(shape)
        if m is None or any(x.shape != shape for x in inputs):
            return forward(ctx, nodes, inputs, out, **params)
        flat = [lib.reshape_2d(ctx, n, m[1], m[0]) for n in nodes]
        node = forward(ctx, flat, [_MergedSpec(m, x) for x in inputs], _MergedSpec(m, out), **params)
        return FlatNode(node, tuple(_ne(shape)))
    build.__doc__ = forward.__doc__
    build.__wrapped__ = forward
    return build
