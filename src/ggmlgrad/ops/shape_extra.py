"""Shape ops built on ggml kernels of their own: ``flip`` (get_rows on reversed row numbers), ``roll``
(ggml_roll), and ``iota``, the in-graph index constants of the composite shape and scatter front ends
(``tensor/shape_extra.py``, ``tensor/scatter.py``).

An index constant built by a ggml node (ggml_arange) instead of uploaded from the host is a graph
constant: it costs no transfer and a captured function may use it (an upload while recording is
refused, see ``capture``). Index values made here are in range by construction, so nothing is
checked (``indexing.check_values`` is for user indices).
"""
from __future__ import annotations

from .._ggml import consts, lib
from ..engine import float32
from .build import permute, reshape, shape_only
from .registry import define, op
from .shape_ops import _zeros_of
from .shapes import check_ndim, int_sizes, norm_axis, numel


# ---------------------------------------------------------------- iota
def _infer_iota(ref, shape, axis, start=0.0, step=1.0):
    shape = int_sizes("iota", shape, "shape")
    check_ndim("iota", shape)
    if not shape:
        raise ValueError("iota: shape must have at least one dimension")
    if any(s < 0 for s in shape):
        raise ValueError(f"iota: negative size in {shape}")
    norm_axis("iota", axis, len(shape))
    for k, v in (("start", start), ("step", step)):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TypeError(f"iota: {k} must be a number, got {v!r}")
    return shape, float32


@define("iota", saves=(), infer=_infer_iota, differentiable=False)
def _iota(ctx, nodes, inputs, out, shape, axis, start=0.0, step=1.0):
    """float32 of ``shape`` whose element is ``start + step * (its coordinate along axis)``, built on
    the device (``ref``, the first input, only names the device; nothing of it is read)."""
    shape = tuple(shape)
    if numel(shape) == 0:
        return _zeros_of(ctx, shape, float32, nodes[0])
    ax = axis % len(shape)
    n = shape[ax]
    line = lib.scale_bias(ctx, lib.arange(ctx, 0.0, float(n), 1.0), float(step), float(start))
    one = tuple(n if i == ax else 1 for i in range(len(shape)))
    line = reshape(ctx, line, one)
    if one == shape:
        return lib.cont(ctx, line)
    return lib.repeat(ctx, line, shape_only(ctx, shape))


# ---------------------------------------------------------------- flip
def _norm_dims(opname: str, dims, ndim: int) -> tuple:
    dims = int_sizes(opname, dims if isinstance(dims, (tuple, list)) else (dims,), "dims")
    norm = tuple(norm_axis(opname, d, ndim) for d in dims)
    if len(set(norm)) != len(norm):
        raise RuntimeError(f"{opname}: dim {dims[0]} appears multiple times in the list of dims {dims}")
    return norm


def _infer_flip(x, dims):
    _norm_dims("flip", dims, x.ndim)
    return x.shape, x.dtype


def _axis_first(nd: int, axis: int) -> tuple:
    return (axis,) + tuple(i for i in range(nd) if i != axis)


def _inverse(perm: tuple) -> tuple:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)


@define("flip", saves=(), infer=_infer_flip, backward=lambda g, n: op.flip(g, dims=n.params["dims"]))
def _flip(ctx, nodes, inputs, out, dims):
    """``x`` reversed along each of ``dims``: one get_rows per dim, on the row numbers L-1 .. 0."""
    x = inputs[0]
    shape = tuple(x.shape)
    if numel(shape) == 0 or not shape:
        return _zeros_of(ctx, shape, x.dtype, nodes[0]) if numel(shape) == 0 else lib.cont(ctx, nodes[0])
    node = nodes[0]
    src_type = x.dtype.ggml_type
    if x.dtype.is_float and x.dtype is not float32:     # get_rows gives float32 rows: flip in float32 (exact)
        node = lib.cast(ctx, node, consts.TYPE_F32)
    for d in sorted(set(a % len(shape) for a in (dims if isinstance(dims, (tuple, list)) else (dims,)))):
        L = shape[d]
        if L < 2:
            continue
        perm = _axis_first(len(shape), d)
        moved = tuple(shape[i] for i in perm)
        src = reshape(ctx, lib.cont(ctx, permute(ctx, node, perm)) if perm != tuple(range(len(shape))) else node,
                      (L, numel(moved[1:])))
        ids = lib.cast(ctx, lib.scale_bias(ctx, lib.arange(ctx, 0.0, float(L), 1.0), -1.0, float(L - 1)),
                       consts.TYPE_I32)
        node = reshape(ctx, lib.get_rows(ctx, src, ids), moved)
        inv = _inverse(perm)
        if inv != tuple(range(len(shape))):
            node = permute(ctx, node, inv)
        node = lib.cont(ctx, node)
    if x.dtype.is_float and x.dtype is not float32:
        return lib.cast(ctx, node, src_type)
    return lib.cont(ctx, node) if node == nodes[0] else node


# ---------------------------------------------------------------- roll
def _infer_roll(x, shifts, dims):
    shifts = int_sizes("roll", shifts, "shifts")
    dims = _norm_dims("roll", dims, x.ndim)
    if len(shifts) != len(dims):
        raise RuntimeError(f"roll: shifts and dimensions must align. shifts: {len(shifts)}, dims: {len(dims)}")
    if x.dtype is not float32 and not x.dtype.is_bool:
        raise TypeError(f"roll: the ggml kernel rolls float32 (and bool) tensors, got {x.dtype.name}")
    return x.shape, x.dtype


@define("roll", saves=(), infer=_infer_roll,
        backward=lambda g, n: op.roll(g, shifts=tuple(-s for s in n.params["shifts"]), dims=n.params["dims"]))
def _roll(ctx, nodes, inputs, out, shifts, dims):
    """Elements moved ``shifts[i]`` places along ``dims[i]``, wrapping around (ggml_roll)."""
    x = inputs[0]
    nd = x.ndim
    if numel(x.shape) == 0:
        return _zeros_of(ctx, x.shape, x.dtype, nodes[0])
    by_ne = [0, 0, 0, 0]
    for s, d in zip(shifts, dims):
        d %= nd
        size = x.shape[d]
        by_ne[nd - 1 - d] = (by_ne[nd - 1 - d] + s) % size if size else 0
    if not any(by_ne):
        return lib.cont(ctx, nodes[0])
    return lib.roll(ctx, lib.cont(ctx, nodes[0]), *by_ne)


# ---------------------------------------------------------------- tri (ggml_tri: the triangles of diagonal 0 and ±1)
# ggml_tri's kinds, by (lower, diagonal) in torch's terms (GGML_TRI_TYPE_*: ggml.h)
TRI_KINDS = {(False, 0): 0, (False, 1): 1, (True, 0): 2, (True, -1): 3}


def _infer_tri(x, lower, diagonal):
    if x.dtype is not float32:
        raise TypeError(f"tri: expected a float32 tensor, got {x.dtype.name}")
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise ValueError(f"tri: ggml_tri takes square matrices (at least 2 dimensions), got {x.shape}")
    if (bool(lower), diagonal) not in TRI_KINDS:
        raise ValueError(f"tri: ggml_tri keeps the diagonals 0 and -1 (lower) or 0 and 1 (upper), got "
                         f"{'lower' if lower else 'upper'} {diagonal!r}")
    return x.shape, float32


@define("tri", saves=(), infer=_infer_tri,
        backward=lambda g, n: op.tri(g, lower=n.params["lower"], diagonal=n.params["diagonal"]))
def _tri(ctx, nodes, inputs, out, lower, diagonal):
    """The lower (``tril``) or upper (``triu``) triangle of the last two dims, zeros elsewhere (NaN and inf
    included), with ggml_tri."""
    if numel(out.shape) == 0:
        return _zeros_of(ctx, out.shape, float32, nodes[0])
    return lib.tri(ctx, lib.cont(ctx, nodes[0]), TRI_KINDS[(bool(lower), diagonal)])
