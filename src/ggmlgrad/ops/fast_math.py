"""exp, tanh, sigmoid, GELU, ELU, softplus and log_softmax nodes, and linear's small products, bias
add and bias-gradient sums: ggmlgrad's vectorised kernels where built, else ggml's.

ggml's CPU kernels for these call libm once per element (tanh about 40x a ReLU); the fast build's
kernels (:mod:`.._ggml.kernels`) run them at SIMD speed with NaN/Inf as torch, and fuse backward
passes into one node each (tanh's g (1 - y^2), GELU's g d(x), log_softmax's g - exp(y) sum(g)).
They are CPU code, so a ggml with a GPU device keeps ggml's own nodes (a custom op would pull the
graph to the CPU).
"""
from __future__ import annotations

from .._ggml import lib, node_is_leaf, node_nb, node_ne, node_src, node_type, view_source
from .._ggml.consts import TYPE_F32
from .._ggml.kernels import (KERNELS, custom_binary, custom_fun, custom_inplace, custom_node, custom_parts,
                             custom_product, custom_unary)
from ..engine import ENGINE
from ..runtime import devices
from .shapes import ne as _ne


def _use_kernels() -> bool:
    return bool(KERNELS) and all(d.kind == "cpu" for d in devices())


ACTIVE = _use_kernels()


def exp(ctx: int, x: int) -> int:
    return custom_unary(ctx, x, "exp") if ACTIVE else lib.exp(ctx, x)


def tanh(ctx: int, x: int) -> int:
    return custom_unary(ctx, x, "tanh") if ACTIVE else lib.tanh(ctx, x)


def sigmoid(ctx: int, x: int) -> int:
    return custom_unary(ctx, x, "sigmoid") if ACTIVE else lib.sigmoid(ctx, x)


def elu(ctx: int, x: int) -> int:
    """ELU with alpha 1."""
    return custom_unary(ctx, x, "elu") if ACTIVE else lib.elu(ctx, x)


def softplus(ctx: int, x: int) -> int:
    """log(1 + exp(x)) (ggml's own switches to x above 20, where the two agree in float32)."""
    return custom_unary(ctx, x, "softplus") if ACTIVE else lib.softplus(ctx, x)


def relu(ctx: int, x: int) -> int:
    """max(x, 0) keeping NaN, one node; kernels only (ggml's relu turns NaN into 0)."""
    return custom_unary(ctx, x, "relu")


def relu_grad(ctx: int, g: int, y: int) -> int:
    """g where relu's output y is not <= 0 (NaN passes g), one node; kernels only. g and y must have
    the same shape with contiguous rows."""
    return custom_binary(ctx, g, y, "relu_grad")


def gelu_tanh(ctx: int, x: int) -> int:
    """GELU's tanh approximation, x * sigmoid(2 sqrt(2/pi) (x + 0.044715 x^3)); kernels only."""
    return custom_unary(ctx, x, "gelu_tanh")


def gelu_erf(ctx: int, x: int) -> int:
    return custom_unary(ctx, x, "gelu_erf") if ACTIVE else lib.gelu_erf(ctx, x)


def gelu_erf_grad(ctx: int, x: int) -> int:
    """d/dx of x Phi(x), i.e. Phi(x) + x phi(x); kernels only."""
    return custom_unary(ctx, x, "gelu_erf_grad")


def tanh_backward(ctx: int, g: int, y: int) -> int:
    """g * (1 - y^2) from tanh's output y, one node; kernels only (same-shape g and y, contiguous rows)."""
    return custom_binary(ctx, g, y, "tanh_backward")


def gelu_erf_backward(ctx: int, g: int, x: int) -> int:
    """g * (Phi(x) + x phi(x)), the exact GELU's backward in one node; kernels only (as tanh_backward)."""
    return custom_binary(ctx, g, x, "gelu_erf_backward")


def gelu_tanh_backward(ctx: int, g: int, x: int) -> int:
    """g times the tanh-form GELU's derivative at x, one node; kernels only (as tanh_backward)."""
    return custom_binary(ctx, g, x, "gelu_tanh_backward")


# linear's x @ w^T as one kernel node where ggml's CPU product is slow (BLAS takes neither case):
# - inner size K below SMALL_K_BELOW (matmul_small_k): ggml calls a dot product per output element
#   (4-32-32-2's first layer, 32x4 by 4x32: 4.9 us as ggml's mul_mat, ~1.1 us as the kernel);
# - at most MATVEC_ROWS rows of x (matvec_rows): ggml runs one AVX2 dot product per
#   output; a batch-1 784-256 product 12.2 -> 9.2 us (NumPy's sgemv: 9.3).
# - 2 to SMALL_N_MAX outputs with K up to SMALL_N_K_MAX (matmul_small_n): a class head (256x64 by
#   64x8: tinyBLAS 6.5 us, the kernel 4.6; 256x64 by 64x16: 12.1 -> 8.1).
SMALL_K_BELOW = 16
MATVEC_ROWS = 4
SMALL_N_MAX = 16
SMALL_N_K_MAX = 512


def linear_product(ctx: int, w: int, x: int, k: int, rows: int) -> int:
    """x @ w^T (ggml_mul_mat(w, x) for 2-D float32 w (k, N) and x (k, rows) in ggml order) as one
    kernel node when k or rows is small; 0 when neither kernel applies (use ggml_mul_mat). The caller
    knows the sizes and that both are float32 (no ggml header read on the common path)."""
    if k < SMALL_K_BELOW:
        return custom_product(ctx, w, x, "matmul_small_k") if k > 0 and _SMALL_K else 0
    if rows <= MATVEC_ROWS and _MATVEC:
        nbw, nbx = node_nb(w), node_nb(x)
        if nbw[0] == 4 and nbx[0] == 4 and nbw[1] % 4 == 0:  # unit stride along k (and whole-float rows)
            return custom_product(ctx, w, x, "matvec_rows")
    if _SMALL_N and k <= SMALL_N_K_MAX and 2 <= node_ne(w)[1] <= SMALL_N_MAX:   # one output: ggml's dot is faster
        if node_nb(w)[0] == 4 and node_nb(x)[0] == 4:  # unit stride along k
            return custom_product(ctx, w, x, "matmul_small_n")
    return 0


_SMALL_K = ACTIVE and "matmul_small_k" in KERNELS
_MATVEC = ACTIVE and "matvec_rows" in KERNELS
_SMALL_N = ACTIVE and "matmul_small_n" in KERNELS
LINEAR_KERNELS = _SMALL_K or _MATVEC or _SMALL_N


# Cross-entropy against class indices as one node each way (kernels ce_index_*): for classes up to
# CE_INDEX_MAX_CLASSES (the kernels' chunk holds a few rows at least), float32 logits with
# contiguous rows; the targets' out-of-range and ignored rows count in neither sum.
CE_INDEX = ACTIVE and "ce_index_mean" in KERNELS
CE_INDEX_MAX_CLASSES = 1024
_NO_IGNORE = -1  # any index outside [0, C) is never counted: "no ignore index"


def ce_index_applies(n_classes: int, x: int) -> bool:
    """Whether the ce_index kernels take logits node ``x`` (ggml rows of ``n_classes``)."""
    return CE_INDEX and 0 < n_classes <= CE_INDEX_MAX_CLASSES and node_nb(x)[0] == 4


def ce_index_mean(ctx: int, x: int, idx: int, ignore_index: int | None) -> int:
    """Mean cross-entropy of logits ``x`` (C, rows in ggml order) against int32 ``idx`` (rows): 1 float."""
    return custom_node(ctx, (1,), (x, idx), "ce_index_mean", one_thread=True,
                       userdata=_ignored(ignore_index))


def ce_index_backward(ctx: int, g: int, x: int, idx: int, ignore_index: int | None) -> int:
    """Its gradient for the logits (C, rows), from the loss's gradient ``g`` (1 float)."""
    return custom_node(ctx, tuple(node_ne(x)[:2]), (g, x, idx), "ce_index_backward",
                       userdata=_ignored(ignore_index))


def _ignored(ignore_index: int | None) -> int:
    # userdata is a pointer: the int32 travels as its value (two's complement, masked to 64 bits)
    v = _NO_IGNORE if ignore_index is None or not -2**31 <= ignore_index < 2**31 else ignore_index
    return v & 0xFFFFFFFFFFFFFFFF


_ADAMW = ACTIVE and "adamw" in KERNELS


def adamw(ctx: int, w: int, g: int, m: int, v: int, params7: int) -> int:
    """ggml_opt_step_adamw's in-place update as one kernel node when all four are contiguous float32
    of one size (the callers' parameters and state are); 0 otherwise (use ggml's op)."""
    if not _ADAMW or not all(_contiguous(n) for n in (w, g, m, v)):
        return 0
    return custom_inplace(ctx, w, (g, m, v, params7), "adamw")


_COLUMN_SUM = ACTIVE and "column_sum" in KERNELS


def column_sum(ctx: int, node: int, from_shape: tuple, keep_shape: tuple) -> int:
    """``node`` (NumPy shape ``from_shape``) summed over leading axes down to ``keep_shape`` (1s on a
    prefix of the axes, ``from_shape``'s sizes after it) by one kernel node: a bias gradient's sum
    over the batch (256x64: ggml's repeat_back 5 us). 0 when that does not apply (other axes, not
    float32, not contiguous, no kernel): use ggml's repeat_back. Same bits as repeat_back (each
    column summed in row order from +0)."""
    if not _COLUMN_SUM:
        return 0
    p = 0
    while p < len(keep_shape) and keep_shape[p] == 1:
        p += 1
    if tuple(keep_shape[p:]) != tuple(from_shape[p:]) or node_type(node) != TYPE_F32 or not _contiguous(node):
        return 0
    return custom_node(ctx, tuple(_ne(keep_shape)), (node,), "column_sum")


BIAS_ADD = ACTIVE and "add_rows" in KERNELS


def add_bias(ctx: int, y: int, bias: int) -> int:
    """``y`` plus ``bias`` added to each row as one kernel node, in place of ggml's repeat and
    broadcast add: linear's bias, ``y`` its product (a new contiguous float32 node with rows of
    ``bias``'s length). 0 when ``bias`` is not a contiguous float32 vector or there is no kernel
    (use ggml's add)."""
    if not BIAS_ADD or node_type(bias) != TYPE_F32 or not _contiguous(bias):
        return 0
    return custom_node(ctx, tuple(node_ne(y)), (y, bias), "add_rows")


def log_softmax_rows(ctx: int, x: int) -> int:
    """log_softmax along ggml rows (ne0, unit stride), one node; kernels only."""
    return custom_unary(ctx, x, "log_softmax_rows")


def log_softmax_rows_backward(ctx: int, g: int, y: int) -> int:
    """g - exp(y) * sum(g) along ggml rows (y the log_softmax output), one node; kernels only (same
    shapes, unit stride along rows)."""
    return custom_binary(ctx, g, y, "log_softmax_rows_backward")


# GELU in a training step: the forward computes the value and the derivative in one pass, and the
# backward multiplies g by the saved derivative (exact GELU, 16k floats: 16 + 18 us of kernels
# before, 18 + 2 after). The forward leaves the node holding both with the engine, under its input's
# node (``ENGINE.note``: a Python map of this epoch, never a ggml name); the backward, handed the same
# input node, finds it there. Only computed (non-leaf) nodes are noted: they live and die with the
# epoch's graph that holds both nodes, while a leaf's header may be kept for later graphs.
_PARTS = {"none": "gelu_erf_parts", "tanh": "gelu_tanh_parts"}


def _contiguous(x: int) -> bool:
    ne, nb = node_ne(x), node_nb(x)
    return nb[0] == 4 and nb[1] == 4 * ne[0] and nb[2] == nb[1] * ne[1] and nb[3] == nb[2] * ne[2]


def _view_like(ctx: int, node: int, ne, offset: int) -> int:
    """A contiguous float32 view of ``node`` in shape ``ne``, ``offset`` bytes in."""
    return lib.view_4d(ctx, node, ne[0], ne[1], ne[2], ne[3], 4 * ne[0], 4 * ne[0] * ne[1],
                       4 * ne[0] * ne[1] * ne[2], offset)


def _numel(x: int) -> int:
    ne = node_ne(x)
    return ne[0] * ne[1] * ne[2] * ne[3]


def gelu_with_derivative(ctx: int, x: int, approximate: str) -> int:
    """GELU of ``x`` for a forward whose backward follows in the same graph (0 when ``x`` is a leaf
    or not contiguous): one node computes [value | derivative], and the result is a copy of the
    value half (an op's result owns its memory); :func:`gelu_saved_derivative` finds the other."""
    if not _contiguous(x):
        return 0
    base = view_source(x)[0] or x
    if node_is_leaf(base):
        return 0
    parts = custom_parts(ctx, x, _PARTS[approximate])
    ENGINE.note(base, parts)  # for gelu_saved_derivative: this epoch's nodes only (never a ggml name)
    return lib.cont(ctx, _view_like(ctx, parts, node_ne(x), 0))


def gelu_saved_derivative(ctx: int, x: int, approximate: str, like: int) -> int:
    """The derivative :func:`gelu_with_derivative` computed for this very ``x`` node in this graph,
    as a view in ``like``'s shape; 0 when there is none."""
    if not _contiguous(x):
        return 0
    base, offs = view_source(x)
    base = base or x
    parts = ENGINE.noted(base)
    if not parts:
        return 0
    if custom_fun(parts) != KERNELS[_PARTS[approximate]]:
        return 0
    src = node_src(parts, 0)
    src_base, src_offs = view_source(src)
    n = _numel(x)
    if (src_base or src) != base or src_offs != offs or _numel(src) != n:
        return 0
    return _view_like(ctx, parts, node_ne(like), 4 * n)
