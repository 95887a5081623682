"""Matrix products: matmul (NumPy semantics, batched with broadcasting) and linear."""
from __future__ import annotations

import math
import os

from .._ggml import consts, lib
from ..engine import float32, int32, precision
from ..engine.flat import FlatNode
from ..runtime.device import ACCELERATORS
from . import fast_math
from .build import expand, merged_shape, owned, permute, reshape, zeros_node
from .registry import define, op, same_device, same_float
from .shapes import broadcast_shapes, numel
from .shapes import ne as _ne
from ..engine.errors import ShapeError

_BIAS_MERGE_BELOW = 128   # output widths from which linear's bias add gains nothing from merged rows


# ggml 0.20.2's Vulkan matrix-multiply shaders hold their tiles in float16 on a device with float16
# arithmetic, whatever precision the node asks for: a 64x64 product on lavapipe was off by 3.3e-4
# (max relative error against float64; 2.5e-7 on the CPU). GGML_VK_DISABLE_F16, set before ggml
# initialises the device, gives float32 tiles (2.7e-7 to 3.6e-7 measured). ggml reads it once, so here too.
_VK_FLOAT32_TILES = "GGML_VK_DISABLE_F16" in os.environ


def check_f32_precision(name: str, device) -> None:
    """Refuse ``matmul_precision("f32")`` where the device cannot give float32 products."""
    if device.kind == "vulkan" and not _VK_FLOAT32_TILES and precision() == "f32":
        raise RuntimeError(
            f"{name}: matmul_precision('f32') cannot be honoured on {device.name}: ggml's Vulkan matrix "
            "products keep float16 tiles (about 3e-4 relative error) unless the process starts with "
            "GGML_VK_DISABLE_F16=1 (set it before importing ggmlgrad); or use matmul_precision('default')")


def _prec(node: int) -> int:
    if precision() == "f32":
        lib.mul_mat_set_prec(node, consts.PREC_F32)
    return node


def _infer_matmul(a, b):
    sa, sb = a.shape, b.shape
    if (len(sa) == 2 and len(sb) == 2 and a.device is b.device and a.dtype is float32 and b.dtype is float32
            and sa[1] == sb[0]):
        # The common case (2-D float32 operands that fit, one device): the checks below, fewer calls.
        check_f32_precision("matmul", a.device)
        return (sa[0], sb[1]), float32
    same_device("matmul", a, b)
    check_f32_precision("matmul", a.device)
    dtype = _matmul_dtype(a, b)
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"matmul: both operands need at least 1 dimension, got {a.shape} and {b.shape}")
    ka = a.shape[-1]
    kb = b.shape[-2] if b.ndim > 1 else b.shape[0]
    if ka != kb:
        raise ShapeError(f"matmul: inner dimensions differ: {a.shape} @ {b.shape} ({ka} != {kb})")
    batch = broadcast_shapes("matmul", a.shape[:-2], b.shape[:-2])
    shape = batch + (a.shape[-2],) if a.ndim > 1 else batch
    if b.ndim > 1:
        shape = shape + (b.shape[-1],)
    if len(batch) + 2 > 4:
        raise ShapeError(f"matmul: {a.shape} @ {b.shape} has more than 2 batch dimensions")
    return shape, dtype


def _matmul_dtype(a, b):
    """float32 @ float32 → float32; int32 @ int32 → int32 as torch (computed in float32: exact while
    the products and sums stay within ±2**24); other pairs raise, as torch (no bool kernel, no
    mixed dtypes)."""
    if a.dtype is int32 and getattr(b, "dtype", None) is int32:
        return int32
    same_float("matmul", a, b)
    return float32


def _work_matmul(a, b):
    sa, sb = a.shape, b.shape
    if len(sa) == 2 and len(sb) == 2:  # no batch dims (the batch count below is 1)
        return 2.0 * sa[0] * sb[1] * sa[1]
    m = a.shape[-2] if a.ndim > 1 else 1
    n = b.shape[-1] if b.ndim > 1 else 1
    batch = numel(broadcast_shapes("", a.shape[:-2], b.shape[:-2]))
    return 2.0 * m * n * a.shape[-1] * batch


def _out_prod_form(a, b) -> bool:
    """Whether ``a @ b`` (2-D, on the CPU) runs as ``ggml_out_prod(b, a^T)``.

    ggml_mul_mat wants both operands with the inner dimension contiguous, so ``a @ b`` needs a
    transposed copy of ``b``; out_prod sums over the other axis, which ``b`` already has as its
    inner one and ``a^T`` (a strided view) too. BLAS takes the view as a transposed operand: 4-30x
    faster than copy + mul_mat on 64..784-wide products here. ggml's own CPU out_prod wins for
    inner sizes up to a few hundred and loses above. An explicit ``matmul_precision("f32")`` keeps
    mul_mat, whose precision it sets (out_prod is float32 throughout on the CPU anyway).
    """
    return (a.ndim == 2 and b.ndim == 2 and a.device.kind == "cpu" and precision() == "default"
            and (bool(ACCELERATORS) or a.shape[1] <= 256))


@define("matmul", saves=((0, 1), (1, 0)), infer=_infer_matmul, work=_work_matmul, promotes=True,
        backward=lambda g, n: _matmul_backward(g, n))
def _matmul(ctx, nodes, inputs, out):
    a, b = inputs
    if a.shape[-1] == 0:
        return zeros_node(ctx, out.shape)  # an empty inner dimension sums nothing
    if _out_prod_form(a, b):
        return lib.out_prod(ctx, nodes[1], lib.transpose(ctx, nodes[0]))
    a2 = a.shape if a.ndim > 1 else (1,) + a.shape
    b2 = b.shape if b.ndim > 1 else b.shape + (1,)
    batch = broadcast_shapes("matmul", a2[:-2], b2[:-2])
    nd = len(batch) + 2
    a4 = _lead_pad(a2, nd)
    b4 = _lead_pad(b2, nd)
    na = expand(ctx, reshape(ctx, nodes[0], a4), a4, batch + a4[-2:])
    # ggml_mul_mat(x, y) = y @ x^T in NumPy terms: pass b transposed (contiguous).
    bt = lib.cont(ctx, permute(ctx, reshape(ctx, nodes[1], b4), tuple(range(nd - 2)) + (nd - 1, nd - 2)))
    bt4 = b4[:-2] + (b4[-1], b4[-2])
    bt = expand(ctx, bt, bt4, batch + bt4[-2:])
    r = _prec(lib.mul_mat(ctx, bt, na))
    return owned(ctx, r, out.shape)


def _matmul_backward(g, n):
    a, b = n.inputs
    if a.ndim == 2 and b.ndim == 2 and precision() == "default":
        # Copy-free forms: g @ b^T is linear(g, b) (one mul_mat), a^T @ g is outer_grad(g, a) (one
        # out_prod). The general path below transposes an operand into a copy first.
        return (op.linear(g, b) if a.requires_grad else None,
                op.outer_grad(g, a) if b.requires_grad else None)
    a2 = a if a.ndim > 1 else op.reshape(a, shape=(1,) + a.shape)
    b2 = b if b.ndim > 1 else op.reshape(b, shape=b.shape + (1,))
    g2 = op.reshape(g, shape=_broadcast_out(a2.shape, b2.shape))
    ga = gb = None
    if a.requires_grad:
        ga = op.matmul(g2, op.transpose_last(b2))
        ga = op.reshape(op.sum_to_shape(ga, shape=_lead_pad(a2.shape, ga.ndim)), shape=a.shape) if ga.shape != a.shape else ga
    if b.requires_grad:
        gb = op.matmul(op.transpose_last(a2), g2)
        gb = op.reshape(op.sum_to_shape(gb, shape=_lead_pad(b2.shape, gb.ndim)), shape=b.shape) if gb.shape != b.shape else gb
    return ga, gb


def _lead_pad(shape, nd):
    return (1,) * (nd - len(shape)) + tuple(shape)


def _broadcast_out(a2, b2):
    return broadcast_shapes("matmul", a2[:-2], b2[:-2]) + (a2[-2], b2[-1])


@define("transpose_last", saves=(), infer=lambda a: (a.shape[:-2] + (a.shape[-1], a.shape[-2]), a.dtype),
        backward=lambda g, n: op.transpose_last(g))
def _transpose_last(ctx, nodes, inputs, out):
    nd = inputs[0].ndim
    return lib.cont(ctx, permute(ctx, nodes[0], tuple(range(nd - 2)) + (nd - 1, nd - 2)))


def _infer_linear(x, w, *rest):
    same_device("linear", x, w, *rest)
    check_f32_precision("linear", x.device)
    same_float("linear", x, w, *rest)
    if w.ndim != 2:
        raise ShapeError(f"linear: weight must be 2-D (out_features, in_features), got {w.shape}")
    if x.ndim < 1 or x.shape[-1] != w.shape[1]:
        raise ShapeError(f"linear: input {x.shape} does not match weight {w.shape} (expected last dim {w.shape[1]})")
    if rest and rest[0].shape != (w.shape[0],):
        raise ShapeError(f"linear: bias must have shape ({w.shape[0]},), got {rest[0].shape}")
    return x.shape[:-1] + (w.shape[0],), float32


def _linear_backward(g, n):
    x, w = n.inputs[:2]
    rows = math.prod(x.shape[:-1])   # not -1: with in_features 0 the row count is not inferable
    g2 = op.reshape(g, shape=(rows, w.shape[0])) if g.ndim != 2 else g
    x2 = op.reshape(x, shape=(rows, w.shape[1])) if x.ndim != 2 else x
    gx = None
    if x.requires_grad:
        gx = op.matmul(g2, w)
        gx = op.reshape(gx, shape=x.shape) if gx.shape != x.shape else gx
    gw = op.outer_grad(x2, g2) if w.requires_grad else None
    grads = (gx, gw)
    if len(n.inputs) == 3:
        grads += (op.sum(g2, axis=0) if n.inputs[2].requires_grad else None,)
    return grads


@define("linear", saves=((0, 1), (1, 0)), infer=_infer_linear, backward=_linear_backward,
        work=lambda x, w, *b: 2.0 * numel(x.shape[:-1]) * w.shape[0] * w.shape[1])
def _linear(ctx, nodes, inputs, out):
    """x @ w.T + b with w of shape (out, in): ggml's mul_mat layout, so no transpose."""
    x, w = inputs[:2]
    if w.shape[1] == 0:
        z = zeros_node(ctx, out.shape)
        return lib.add(ctx, z, nodes[2]) if len(nodes) == 3 else z
    nx = nodes[0]
    if x.ndim != 2:
        nx = reshape(ctx, nx, (numel(x.shape[:-1]), x.shape[-1]))
    r = 0
    if fast_math.LINEAR_KERNELS and x.dtype is float32 and w.dtype is float32:
        r = fast_math.linear_product(ctx, nodes[1], nx, w.shape[1], numel(x.shape[:-1]))
    r = r or _prec(lib.mul_mat(ctx, nodes[1], nx))
    if len(nodes) == 3 and fast_math.BIAS_ADD:
        r = fast_math.add_bias(ctx, r, nodes[2]) or lib.add(ctx, r, nodes[2])
    elif len(nodes) == 3:
        merged = merged_shape(out.shape) if x.ndim == 2 and w.shape[0] < _BIAS_MERGE_BELOW else None
        if merged is not None:
            # ggml adds a broadcast row per output row: 256 rows of 8 took 4.4 µs, the bias
            # repeated to one merged row then added 1.1 µs (rows of 64: 5.6 → 3.4; of 256: equal)
            rows, row = merged
            bias = lib.repeat_4d(ctx, nodes[2], row, 1, 1, 1)
            return FlatNode(lib.add(ctx, lib.reshape_2d(ctx, r, row, rows), bias), tuple(_ne(out.shape)))
        r = lib.add(ctx, r, nodes[2])
    if x.ndim != 2:
        r = owned(ctx, r, out.shape)
    return r


@define("outer_grad", infer=lambda x, g: ((g.shape[1], x.shape[1]), float32), differentiable=False,
        work=lambda x, g: 2.0 * x.shape[0] * x.shape[1] * g.shape[1])
def _outer_grad(ctx, nodes, inputs, out):
    """g.T @ x for x (N, in), g (N, out) → (out, in), via ggml_out_prod (no transposes)."""
    return lib.out_prod(ctx, nodes[0], nodes[1])
