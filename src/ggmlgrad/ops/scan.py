"""cumsum along one dimension (ggml's cumsum kernel on rows), and the row helpers of the scans and
sorts: the dimension is moved last, the tensor runs as a matrix of rows, and is moved back."""
from __future__ import annotations

from .._ggml import lib
from ..engine import float32, int32
from .build import permute, reshape
from .decl import expose
from .registry import define, op, promote_types
from .shapes import norm_axis, numel


def axis_last(shape: tuple, axis: int) -> tuple:
    """The permutation moving ``axis`` last."""
    return tuple(i for i in range(len(shape)) if i != axis) + (axis,)


def inverse(perm: tuple) -> tuple:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)


def as_rows(ctx, node, shape: tuple, axis: int):
    """(matrix, n, rows): ``node`` with ``axis`` moved last, contiguous, as ``rows`` rows of ``n``."""
    if not shape:
        return lib.reshape_2d(ctx, lib.cont(ctx, node), 1, 1), 1, 1
    perm = axis_last(shape, axis)
    if perm != tuple(range(len(shape))):
        node = permute(ctx, node, perm)
    n = shape[axis]
    return lib.reshape_2d(ctx, lib.cont(ctx, node), n, numel(shape) // n), n, numel(shape) // n


def from_rows(ctx, mat, shape: tuple, axis: int):
    """The inverse of :func:`as_rows`: a contiguous node of ``shape``."""
    if not shape:
        return lib.cont(ctx, reshape(ctx, mat, ()))
    perm = axis_last(shape, axis)
    node = reshape(ctx, mat, tuple(shape[i] for i in perm))
    if perm != tuple(range(len(shape))):
        node = permute(ctx, node, inverse(perm))
    return lib.cont(ctx, node)


def check_dim(opname: str, dim, ndim: int) -> int:
    """A dimension of a tensor with ``ndim`` dims (0-d tensors take 0 and -1, as torch)."""
    return norm_axis(opname, dim, ndim)


# ---------------------------------------------------------------- cumsum
def _infer_cumsum(x, dim, reverse=False):
    d = promote_types("cumsum", x)
    check_dim("cumsum", dim, x.ndim)
    if not isinstance(reverse, bool):
        raise TypeError(f"cumsum: reverse must be a bool, got {reverse!r}")
    return x.shape, float32 if d is float32 else int32     # torch: int and bool sums are int64 (here int32)


def _cumsum_backward(g, n):
    return op.cumsum(g, dim=n.params["dim"], reverse=not n.params.get("reverse", False))


@define("cumsum", saves=(), infer=_infer_cumsum, backward=_cumsum_backward, promotes=True,
        expose=expose("cumsum", "method", "function", args=lambda dim: {"dim": dim},
                      doc="Cumulative sums along ``dim`` (ggml's cumsum kernel). int32 and bool inputs give "
                          "int32 (exact below 2**24, like all int32 arithmetic here).",
                      example=">>> gg.cumsum(gg.tensor([1.0, 2.0, 3.0]), dim=0).tolist()\n[1.0, 3.0, 6.0]"))
def _cumsum(ctx, nodes, inputs, out, dim, reverse=False):
    """``reverse``: sums from the end (the gradient of cumsum): total - cumsum + x."""
    x = inputs[0]
    axis = check_dim("cumsum", dim, x.ndim)
    mat, n, rows = as_rows(ctx, nodes[0], x.shape, axis)
    c = lib.cumsum(ctx, mat)
    if reverse:
        total = lib.repeat_4d(ctx, lib.sum_rows(ctx, mat), n, rows, 1, 1)
        c = lib.add(ctx, lib.sub(ctx, total, c), mat)
    return from_rows(ctx, c, x.shape, axis)

