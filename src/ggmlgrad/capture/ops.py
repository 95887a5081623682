"""Internal ops used by capture and gg.Buffer (registered like every op; see testing/opinfo_capture.py).

- ``capture_copy``: a fresh copy of a tensor (an output that is a leaf still needs its own slot);
- ``capture_grad_norm``: the global L2 norm of any number of gradients, one scalar;
- ``capture_clip_scale``: ``min(1, max_norm / (norm + 1e-6))``, branch-free (PyTorch's clip_grad_norm_ rule);
- ``buffer_gather``: rows of a 2-D+ table by an int32 index vector (ggml_get_rows), with optional
  in-graph clamping of the indices to [0, rows-1];
- ``buffer_rows``: a contiguous copy of rows [start, stop) of a table.
"""
from __future__ import annotations

import math

from .._ggml import lib
from ..engine import float32, int32
from ..ops.build import reshape
from ..ops.registry import define, same_device, same_float

_F32_MAX = 3.4028234663852886e38


@define("capture_copy", saves=(), infer=lambda a: (a.shape, a.dtype), backward=lambda g, n: g)
def _capture_copy(ctx, nodes, inputs, out):
    """A contiguous copy of ``a`` (a node of its own, never a view or a leaf)."""
    return lib.dup(ctx, nodes[0])


def _infer_grad_norm(*grads):
    if not grads:
        raise ValueError("capture_grad_norm: needs at least one gradient")
    same_device("capture_grad_norm", *grads)
    same_float("capture_grad_norm", *grads)
    return (), float32


@define("capture_grad_norm", infer=_infer_grad_norm, differentiable=False,
        work=lambda *gs: float(sum(math.prod(g.shape) for g in gs)))
def _capture_grad_norm(ctx, nodes, inputs, out):
    """sqrt(sum_i sum(g_i ** 2)) as a 0-d tensor."""
    total = None
    for n in nodes:
        s = lib.sum(ctx, lib.sqr(ctx, n))
        total = s if total is None else lib.add(ctx, total, s)
    return lib.sqrt(ctx, total)


def _infer_clip_scale(norm, max_norm):
    same_float("capture_clip_scale", norm, max_norm)
    if norm.shape != () or max_norm.shape != ():
        raise ValueError(f"capture_clip_scale: expected 0-d tensors, got {norm.shape} and {max_norm.shape}")
    return (), float32


@define("capture_clip_scale", infer=_infer_clip_scale, differentiable=False)
def _capture_clip_scale(ctx, nodes, inputs, out):
    """min(1, max_norm / (norm + 1e-6)); NaN norm gives NaN (the host check catches it)."""
    norm, max_norm = nodes
    ratio = lib.div(ctx, max_norm, lib.scale_bias(ctx, norm, 1.0, 1e-6))
    # ggml_clamp works in place (a view of its input): clamp a copy, then make it contiguous.
    return lib.cont(ctx, lib.clamp(ctx, lib.dup(ctx, ratio), -_F32_MAX, 1.0))


def _infer_gather(table, index, clamp: bool = False):
    same_device("buffer_gather", table, index)
    if table.dtype not in (float32, int32):
        raise TypeError(f"buffer_gather: table must be float32 or int32, got {table.dtype.name}")
    if index.dtype is not int32 or index.ndim != 1:
        raise TypeError(f"buffer_gather: index must be a 1-D int32 tensor, got {index.shape}:{index.dtype.name}")
    if table.ndim < 1 or table.ndim > 3:
        raise ValueError(f"buffer_gather: table must have 1 to 3 dimensions, got {table.shape}")
    if not isinstance(clamp, bool):
        raise TypeError("buffer_gather: clamp must be a bool")
    return (index.shape[0],) + tuple(table.shape[1:]), table.dtype


@define("buffer_gather", infer=_infer_gather, differentiable=False,
        work=lambda t, i, clamp=False: float(i.shape[0] * math.prod(t.shape[1:])))
def _buffer_gather(ctx, nodes, inputs, out, clamp=False):
    """table[index] along the first axis (rows)."""
    table, index = inputs
    nt, ni = nodes
    rows = table.shape[0]
    row = math.prod(table.shape[1:])
    t2 = reshape(ctx, nt, (rows, row)) if table.ndim != 2 else nt
    if clamp:
        # No integer clamp in ggml: through float32 (exact for indices below 2**24).
        f = lib.cast(ctx, ni, float32.ggml_type)
        f = lib.cont(ctx, lib.clamp(ctx, lib.dup(ctx, f), 0.0, float(max(rows - 1, 0))))
        ni = lib.cast(ctx, f, int32.ggml_type)
    r = lib.get_rows(ctx, t2, ni)
    return lib.cont(ctx, reshape(ctx, r, out.shape))


def _infer_rows(table, start: int, stop: int):
    for k, v in (("start", start), ("stop", stop)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"buffer_rows: {k} must be an int, got {v!r}")
    if table.ndim < 1:
        raise ValueError("buffer_rows: table must have at least 1 dimension")
    if not 0 <= start < stop <= table.shape[0]:
        raise ValueError(f"buffer_rows: rows [{start}, {stop}) out of range for {table.shape[0]} rows")
    return (stop - start,) + tuple(table.shape[1:]), table.dtype


@define("buffer_rows", infer=_infer_rows, backward=None, differentiable=False)
def _buffer_rows(ctx, nodes, inputs, out, start, stop):
    """table[start:stop] as a contiguous copy."""
    table = inputs[0]
    row = math.prod(table.shape[1:])
    t2 = reshape(ctx, nodes[0], (table.shape[0], row))
    nb1 = row * table.dtype.itemsize
    v = lib.view_2d(ctx, t2, row, stop - start, nb1, start * nb1)
    return lib.cont(ctx, reshape(ctx, lib.cont(ctx, v), out.shape))


