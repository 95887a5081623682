"""Ops behind ``gg.nn``: layer norm, attention, fused losses, one-hot (softmax, masked or not, is in
``activation.py``).

Each op validates its inputs in ``infer`` (a ggml assertion would abort the
process), builds ggml nodes in its forward, and has a backward rule written
with ops, so gradients are graph nodes in the same queue.

Attention: the forward runs ggml's fused ``flash_attn_ext`` (set
``FLASH_ATTENTION = False`` to compose it from matmul + masked softmax
instead); the backward is composed from matmuls and the softmax op's gradient,
because ``ggml_flash_attn_back`` is marked "needs to be adapted to
flash_attn_ext" in ggml 0.20 and does not take a mask.
"""
from __future__ import annotations

from .._ggml import consts, lib, node_ne
from ..engine import float32, int32
from ..engine.flat import FlatNode
from . import fast_math
from .activation import check_mask as _check_mask, mask_node as _mask_node
from .build import SavedNode, expand, merged_op, owned, permute, reshape, saved_node, zeros_node
from .registry import define, op, same_device, same_float
from .shapes import check_ndim, numel
from .shapes import ne as _ne
from ..engine.errors import DTypeError, ShapeError

#: Use ggml_flash_attn_ext for the attention forward (else matmul + softmax).
FLASH_ATTENTION = True


def _real(name: str, key: str, v) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"{name}: `{key}` must be a real number, got {v!r}")
    return float(v)


def _no_empty(name: str, *xs) -> None:
    """Refuse zero-size inputs where the ggml graph would have empty tensors (ggml asserts on them)."""
    for x in xs:
        if numel(x.shape) == 0:
            raise ValueError(f"{name}: empty tensors are not supported (got shape {x.shape})")


def _rows(shape: tuple) -> int:
    return numel(shape[:-1]) if shape else 1


# ---------------------------------------------------------------- layer norm
def _infer_layer_norm(x, eps):
    same_float("layer_norm", x)
    if x.ndim == 0:
        raise ValueError("layer_norm: input must have at least 1 dimension")
    if _real("layer_norm", "eps", eps) < 0:
        raise ValueError(f"layer_norm: eps must be >= 0, got {eps}")
    return x.shape, float32


def _layer_norm_backward(g, n):
    """d/dx of (x - mean) * rstd over the last axis: rstd * (g - mean(g) - xhat * mean(g * xhat))."""
    x = n.inputs[0]
    xhat = n.output
    mu = op.mean(x, axis=-1, keepdim=True)
    var = op.mean(op.square(op.sub(x, mu)), axis=-1, keepdim=True)
    rstd = op.pow_scalar(op.add_scalar(var, c=n.params["eps"]), p=-0.5)
    inner = op.sub(op.sub(g, op.mean(g, axis=-1, keepdim=True)),
                   op.mul(xhat, op.mean(op.mul(g, xhat), axis=-1, keepdim=True)))
    return op.mul(inner, rstd)


@define("layer_norm", saves=(0,), infer=_infer_layer_norm, backward=_layer_norm_backward, save_output=True,
        work=lambda x, eps: 5.0 * numel(x.shape))
def _layer_norm(ctx, nodes, inputs, out, eps):
    """(x - mean) / sqrt(var + eps) over the last axis (biased variance, as PyTorch), via ggml_norm."""
    return lib.norm(ctx, nodes[0], float(eps))


# ---------------------------------------------------------------- attention (B, H, L, D)
def _infer_attention(q, k, v, *mask, scale, causal=False, flash=None):
    name = "attention"
    same_device(name, q, k, v, *mask)
    same_float(name, q, k, v)
    _no_empty(name, q, k, v, *mask)
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ShapeError(f"{name}: q, k, v must be 4-D (batch, heads, length, dim), got {q.shape}, {k.shape}, {v.shape}")
    b, h, lq, d = q.shape
    if k.shape[:2] != (b, h) or v.shape[:2] != (b, h) or k.shape[3] != d or v.shape[2] != k.shape[2]:
        raise ShapeError(f"{name}: shapes do not fit: q {q.shape}, k {k.shape}, v {v.shape} "
                         f"(expected k (B, H, S, D) and v (B, H, S, Dv) with q (B, H, L, D))")
    _real(name, "scale", scale)
    if not isinstance(causal, bool) or not (flash is None or isinstance(flash, bool)):
        raise TypeError(f"{name}: causal and flash must be bools, got {causal!r}, {flash!r}")
    if len(mask) > 1:
        raise TypeError(f"{name}: at most one mask")
    target = (b, h, lq, k.shape[2])
    if mask:
        _check_mask(name, mask[0], target)
    return (b, h, lq, v.shape[3]), float32


def _attention_backward(g, n):
    """Composed: P = softmax(scale * Q K^T + mask); dV = P^T dO; dS = P * (dP - rowsum(dP * P)) * scale."""
    q, k, v = n.inputs[:3]
    mask = n.inputs[3:]
    scale, causal = n.params["scale"], n.params.get("causal", False)
    p = op.softmax(op.matmul(q, op.transpose_last(k)), *mask, scale=scale, causal=causal)
    gv = op.matmul(op.transpose_last(p), g) if v.requires_grad else None
    gq = gk = gmask = None
    mask_grad = bool(mask) and mask[0].requires_grad
    if q.requires_grad or k.requires_grad or mask_grad:
        dp = op.matmul(g, op.transpose_last(v))
        dz = op.softmax_backward(dp, p, axis=-1)        # the softmax op's own gradient rule
        ds = op.scale(dz, c=scale)
        gq = op.matmul(ds, k) if q.requires_grad else None
        gk = op.matmul(op.transpose_last(ds), q) if k.requires_grad else None
        gmask = dz if mask_grad else None
    return (gq, gk, gv) + ((gmask,) if mask else ())


def _work_attention(q, k, v, *m, **p):
    b, h, lq, d = q.shape
    return 2.0 * b * h * lq * k.shape[2] * (d + v.shape[3])


@define("attention", infer=_infer_attention, backward=_attention_backward, work=_work_attention)
def _attention(ctx, nodes, inputs, out, scale, causal=False, flash=None):
    """softmax(scale * q @ k^T + mask [+ causal]) @ v, via ggml_flash_attn_ext (or composed).

    The flash kernel reads the mask as float16: exact for 0/-inf masks, rounded for general
    additive ones. ``flash=None`` (default) uses it only without a mask; callers that know
    their mask is 0/-inf pass ``flash=True``; ``flash=False`` always composes.
    """
    q, k, v = inputs[:3]
    target = (q.shape[0], q.shape[1], q.shape[2], k.shape[2])
    use_flash = (len(nodes) == 3) if flash is None else flash
    # The CPU kernel only: ggml's Vulkan flash_attn_ext returned zeros for these float32 K/V
    # (lavapipe, tests/test_device_op_table.py); other devices compose it (matmul + softmax).
    if not (FLASH_ATTENTION and use_flash and q.device.kind == "cpu"):
        return _attention_composed(ctx, nodes, inputs, target, scale, causal)
    mask = None
    if len(nodes) > 3:
        mask = _mask_node(ctx, nodes[3], inputs[3].shape, target)
    if causal:
        if mask is None:
            # A zero (L, S) plane built on the device (no upload), then -inf above the diagonal.
            ar = lib.arange(ctx, 0.0, float(target[3]), 1.0)
            mask = lib.fill(ctx, lib.repeat_4d(ctx, ar, target[3], target[2], 1, 1), 0.0)
        mask = lib.diag_mask_inf(ctx, mask, 0)
    if mask is not None:
        mask = lib.cast(ctx, mask, consts.TYPE_F16)  # the CPU kernel reads an F16 mask
    r = lib.flash_attn_ext(ctx, nodes[0], nodes[1], nodes[2], mask, float(scale), 0.0, 0.0)
    lib.flash_attn_ext_set_prec(r, consts.PREC_F32)
    # r is (B, L, H, Dv) in NumPy order; the op returns (B, H, L, Dv).
    return lib.cont(ctx, permute(ctx, r, (0, 2, 1, 3)))


def _attention_composed(ctx, nodes, inputs, target, scale, causal):
    nq, nk, nv = nodes[:3]
    s = lib.mul_mat(ctx, nk, nq)                      # (B, H, L, S): ggml mul_mat(k, q) = q @ k^T
    lib.mul_mat_set_prec(s, consts.PREC_F32)
    if causal:
        s = lib.diag_mask_inf(ctx, s, 0)
    mask = _mask_node(ctx, nodes[3], inputs[3].shape, target) if len(nodes) > 3 else None
    p = lib.soft_max_ext(ctx, s, mask, float(scale), 0.0)
    vt = lib.cont(ctx, permute(ctx, nv, (0, 1, 3, 2)))  # (B, H, Dv, S)
    r = lib.mul_mat(ctx, vt, p)                        # p @ v
    lib.mul_mat_set_prec(r, consts.PREC_F32)
    return r


# ---------------------------------------------------------------- fused softmax cross-entropy (per row)
def _infer_sce(x, q):
    same_device("softmax_cross_entropy", x, q)
    same_float("softmax_cross_entropy", x, q)
    _no_empty("softmax_cross_entropy", x, q)
    if x.ndim == 0 or x.shape != q.shape:
        raise ShapeError(f"softmax_cross_entropy: logits {x.shape} and target probabilities {q.shape} "
                         f"must have the same shape (..., classes)")
    if x.shape[-1] == 0:
        raise ValueError("softmax_cross_entropy: zero classes")
    return x.shape[:-1], float32


def _sce_backward(g, n):
    """d/dx of -sum(q * log_softmax(x)) = softmax(x) * sum(q) - q (targets get no gradient)."""
    x, q = n.inputs
    return op.softmax_cross_entropy_backward(g, x, q), None


F32_LOWEST = -3.4028234663852886e38  # float32's lowest finite value


def _finite_below(ctx, node: int) -> int:
    """``node`` with -inf raised to float32's lowest finite value (a private copy: ggml_clamp
    works in place). A masked logit (-inf) times a zero target weight is then 0, not NaN, as in
    torch, which gathers the target instead of multiplying; NaN and +inf still propagate."""
    return lib.clamp(ctx, lib.dup(ctx, node), F32_LOWEST, float("inf"))


def _sce_rows(ctx, nodes, shape: tuple):
    """(row losses (rows, 1), targets as (rows, c)): -sum_c q_c log_softmax(x)_c, stable."""
    c = shape[-1]
    rows = _rows(shape)
    nx = reshape(ctx, nodes[0], (rows, c))
    nq = reshape(ctx, nodes[1], (rows, c))
    m = lib.pool_1d(ctx, nx, consts.POOL_MAX, c, c, 0)       # (rows, 1) row maxima
    xs = lib.sub(ctx, nx, lib.repeat(ctx, m, nx))
    lse = lib.log(ctx, lib.sum_rows(ctx, lib.exp(ctx, xs)))   # (rows, 1)
    qsum = lib.sum_rows(ctx, nq)
    qx = lib.sum_rows(ctx, lib.mul(ctx, nq, _finite_below(ctx, xs)))
    return lib.sub(ctx, lib.mul(ctx, qsum, lse), qx), nq     # sum(q) * lse - sum(q * xs)


@define("softmax_cross_entropy", infer=_infer_sce, backward=_sce_backward,
        work=lambda x, q: 6.0 * numel(x.shape))
def _softmax_cross_entropy(ctx, nodes, inputs, out):
    """Row losses -sum_c q_c log_softmax(x)_c over the last axis, stable (row max subtracted)."""
    loss, _ = _sce_rows(ctx, nodes, inputs[0].shape)
    return owned(ctx, loss, out.shape if out.shape else (1,))


def _infer_sce_mean(x, q, unit_rows=False):
    _infer_sce(x, q)
    if not isinstance(unit_rows, bool):
        raise TypeError(f"softmax_cross_entropy_mean: unit_rows must be a bool, got {unit_rows!r}")
    return (), float32


@define("softmax_cross_entropy_mean", infer=_infer_sce_mean, work=lambda x, q, **p: 6.0 * numel(x.shape),
        backward=lambda g, n: (op.softmax_cross_entropy_backward(g, *n.inputs, mean=True, **n.params), None))
def _softmax_cross_entropy_mean(ctx, nodes, inputs, out, unit_rows=False):
    """sum of the row losses / sum(q): cross-entropy's "mean" in one op (for one-hot targets, the
    number of counted rows; with class weights, their summed weight, as torch). ``unit_rows``
    promises every target row sums to 1 or 0 (class targets, smoothed or ignored), which lets
    the backward use ggml's fused CROSS_ENTROPY_LOSS_BACK.

    ggml's fused CROSS_ENTROPY_LOSS is -sum(q * log_softmax(x)) / rows, any q: one node where the
    composed form took a dozen (which a small network's step pays in full)."""
    shape = inputs[0].shape
    c, rows = shape[-1], _rows(shape)
    nx = _finite_below(ctx, reshape(ctx, nodes[0], (rows, c)))
    nq = reshape(ctx, nodes[1], (rows, c))
    total = lib.scale(ctx, lib.cross_entropy_loss(ctx, nx, nq), float(rows))
    return owned(ctx, lib.div(ctx, total, lib.sum(ctx, nq)), ())


def _infer_sce_backward(g, x, q, mean=False, unit_rows=False):
    _infer_sce(x, q)
    same_float("softmax_cross_entropy_backward", g)
    if not isinstance(mean, bool) or not isinstance(unit_rows, bool) or (unit_rows and not mean):
        raise TypeError(f"softmax_cross_entropy_backward: mean and unit_rows must be bools, unit_rows only "
                        f"with mean; got mean={mean!r}, unit_rows={unit_rows!r}")
    want = () if mean else x.shape[:-1]
    if g.shape != want:
        raise ValueError(f"softmax_cross_entropy_backward: gradient {g.shape} for logits {x.shape} "
                         f"(expected {want})")
    return x.shape, float32


def _unit_rows_mean_backward(ctx, g, nx, nq, denom, shape: tuple) -> int:
    """Gradient of sum(row losses) / denom for targets whose rows sum to 1 or 0, as the logits'
    ``shape`` (a builder's result).

    Row sums s in {0, 1}: softmax * s - q = (softmax - q) * s, and ggml's fused
    CROSS_ENTROPY_LOSS_BACK is (softmax - q) * c / rows for a scalar c."""
    rows = _rows(shape)
    c_node = lib.scale(ctx, lib.div(ctx, reshape(ctx, g, (1, 1)), denom), float(rows))
    d = lib.cross_entropy_loss_back(ctx, c_node, nx, nq)  # (grad, logits, labels): ggml.h's comment is wrong
    s_rows = lib.sum_rows(ctx, nq)  # (rows, 1), repeated to full rows: a column broadcast is a slow path
    r = merged_op(ctx, lib.mul, (d, lib.repeat(ctx, s_rows, d)), shape)
    return r if type(r) is FlatNode else owned(ctx, r, shape)


@define("softmax_cross_entropy_backward", infer=_infer_sce_backward, differentiable=False,
        work=lambda g, x, q, **p: 6.0 * numel(x.shape))
def _softmax_cross_entropy_backward(ctx, nodes, inputs, out, mean=False, unit_rows=False):
    """g * (softmax(x) * sum(q) - q), per row; with ``mean``, g / sum(q) for every row."""
    x = inputs[1]
    c, rows = x.shape[-1], _rows(x.shape)
    nx = reshape(ctx, nodes[1], (rows, c))
    nq = reshape(ctx, nodes[2], (rows, c))
    if unit_rows:
        return _unit_rows_mean_backward(ctx, nodes[0], nx, nq, lib.sum(ctx, nq), x.shape)
    d = lib.sub(ctx, lib.mul(ctx, lib.soft_max(ctx, nx), lib.sum_rows(ctx, nq)), nq)
    if mean:
        scale = lib.div(ctx, reshape(ctx, nodes[0], (1, 1)), lib.sum(ctx, nq))
    else:
        scale = reshape(ctx, nodes[0], (rows, 1))
    return owned(ctx, lib.mul(ctx, d, scale), x.shape)


# ---------------------------------------------------------------- one-hot (built on the device)
def _infer_one_hot(idx, num_classes, ignore_index=None):
    if idx.dtype is not int32:
        raise DTypeError(f"one_hot: indices must be int32, got {idx.dtype.name}")
    _no_empty("one_hot", idx)
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
        raise ShapeError(f"one_hot: num_classes must be a positive int, got {num_classes!r}")   # torch: RuntimeError
    if ignore_index is not None and (isinstance(ignore_index, bool) or not isinstance(ignore_index, int)):
        raise TypeError(f"one_hot: ignore_index must be an int or None, got {ignore_index!r}")
    shape = tuple(idx.shape) + (num_classes,)
    check_ndim("one_hot", shape)
    return shape, float32


def _eq_const(ctx, node, c: float) -> int:
    """1.0 where node == c (integer-valued floats), else 0.0."""
    return lib.step(ctx, lib.scale_bias(ctx, lib.abs(ctx, lib.scale_bias(ctx, node, 1.0, -c)), -1.0, 0.5))


@define("one_hot", infer=_infer_one_hot, differentiable=False)
def _one_hot(ctx, nodes, inputs, out, num_classes, ignore_index=None):
    """Row i is e_{idx[i]}; indices outside [0, C) or equal to ``ignore_index`` give a zero row."""
    node = one_hot_rows(ctx, nodes[0], max(numel(inputs[0].shape), 1), num_classes, ignore_index)
    want = _ne(out.shape)
    if list(node_ne(node)) == want:
        return owned(ctx, node, out.shape)
    return FlatNode(node, tuple(want))


def one_hot_rows(ctx, idx, n: int, c: int, ignore_index=None) -> int:
    """The one-hot rows (n, c) of ``n`` int32 indices (see one_hot): a builder-made node of n*c
    elements in that layout (1-D where that saved ggml its per-row loop; callers reshape)."""
    t = lib.cast(ctx, reshape(ctx, idx, (n, 1)), consts.TYPE_F32)            # (n, 1)
    tt = lib.repeat_4d(ctx, t, c, n, 1, 1)                                    # (n, c)
    cols = lib.arange(ctx, 0.0, float(c), 1.0)                                # (c,), broadcast by sub
    diff = lib.abs(ctx, lib.reshape_1d(ctx, lib.sub(ctx, tt, cols), n * c))   # one row: no per-row loop
    oh = lib.step(ctx, lib.scale_bias(ctx, diff, -1.0, 0.5))                  # |t - j| < 0.5
    if ignore_index is not None and 0 <= ignore_index < c:
        keep = lib.scale_bias(ctx, _eq_const(ctx, t, float(ignore_index)), -1.0, 1.0)
        oh = lib.reshape_2d(ctx, oh, c, n)
        oh = lib.mul(ctx, oh, lib.repeat(ctx, keep, oh))
    return oh


# ---------------------------------------------------------------- cross-entropy against class indices
def _infer_sce_index(x, idx, ignore_index=None):
    same_device("softmax_cross_entropy_index_mean", x, idx)
    same_float("softmax_cross_entropy_index_mean", x)
    if idx.dtype is not int32:
        raise DTypeError(f"softmax_cross_entropy_index_mean: targets must be int32, got {idx.dtype.name}")
    _no_empty("softmax_cross_entropy_index_mean", x, idx)
    if x.ndim == 0 or tuple(idx.shape) != tuple(x.shape[:-1]):
        raise ShapeError(f"softmax_cross_entropy_index_mean: logits {x.shape} need targets of shape "
                         f"{x.shape[:-1]}, got {idx.shape}")
    if ignore_index is not None and (isinstance(ignore_index, bool) or not isinstance(ignore_index, int)):
        raise TypeError(f"softmax_cross_entropy_index_mean: ignore_index must be an int or None, got {ignore_index!r}")
    return (), float32


def _sce_index_backward(g, n):
    x, idx = n.inputs
    return op.softmax_cross_entropy_index_backward(g, x, idx, n.output, **n.params), None


@define("softmax_cross_entropy_index_mean", infer=_infer_sce_index, backward=_sce_index_backward,
        save_output=True, work=lambda x, idx, **p: 6.0 * numel(x.shape))
def _sce_index_mean(ctx, nodes, inputs, out, ignore_index=None):
    """Cross-entropy against class indices, averaged over the counted rows (targets outside
    [0, C) or equal to ``ignore_index`` count in neither sum): one op for what cross_entropy's
    class path would otherwise queue as one_hot + softmax_cross_entropy_mean. On the fast build one
    kernel node; elsewhere the exps, row sums and counted rows ride on the result node for a
    backward in the same graph."""
    shape = inputs[0].shape
    c, rows = shape[-1], _rows(shape)
    nx = reshape(ctx, nodes[0], (rows, c))
    if fast_math.ce_index_applies(c, nx) and inputs[0].dtype is float32:
        return owned(ctx, fast_math.ce_index_mean(ctx, nx, reshape(ctx, nodes[1], (rows,)), ignore_index), ())
    e, s_rows, lse, counted, t = _row_terms(ctx, nx, nodes[1], rows, c, ignore_index)
    # per counted row lse - (x_t - m), picked (never masked by a multiply) so that an uncounted
    # row's NaN stays out of the sum and a -inf target logit gives +inf, as torch's gather
    xs_t = _pick(ctx, e[1], _target_or_extra(ctx, counted, t, rows, c), rows, c)
    per_row = _pick(ctx, lib.sub(ctx, lse, xs_t), _target_or_extra(ctx, counted, None, rows, 1), rows, 1)
    count = lib.sum(ctx, counted)
    loss = lib.div(ctx, lib.sum(ctx, per_row), count)  # no counted row: 0/0, NaN (torch)
    return SavedNode(owned(ctx, loss, ()), exps=e[0], sums=s_rows, counted=counted, count=count)


def _flat(ctx, fn, a: int, b: int, rows: int, c: int) -> int:
    """``fn(a, b)`` of two same-shape (c, rows) nodes as one long row (ggml pays per row)."""
    n = rows * c
    return lib.reshape_2d(ctx, fn(ctx, lib.reshape_1d(ctx, a, n), lib.reshape_1d(ctx, b, n)), c, rows)


def _row_terms(ctx, nx, idx, rows: int, c: int, ignore_index) -> tuple:
    """For logits (c, rows in ggml order): ((exp(x - m), x - m), the first's row sums, their log,
    1.0 per row whose target counts, and the targets as floats; the last four one value per row in
    ONE ggml row (rows,), which ggml's per-row loops take at once. A row holding NaN, or with an
    infinite max, gets NaN sums, as torch's log_softmax."""
    m = lib.pool_1d(ctx, nx, consts.POOL_MAX, c, c, 0)               # (1, rows) row maxima (NaN skipped)
    xs = _flat(ctx, lib.sub, nx, lib.repeat(ctx, m, nx), rows, c)    # NaN where x is, or the max is infinite
    e = lib.reshape_2d(ctx, lib.exp(ctx, lib.reshape_1d(ctx, xs, rows * c)), c, rows)
    s_rows = lib.reshape_1d(ctx, lib.sum_rows(ctx, e), rows)
    t = lib.cast(ctx, lib.reshape_1d(ctx, idx, rows), consts.TYPE_F32)
    counted = lib.mul(ctx, lib.step(ctx, lib.scale_bias(ctx, t, 1.0, 0.5)),             # t >= 0
                      lib.step(ctx, lib.scale_bias(ctx, t, -1.0, c - 0.5)))              # t < c
    if ignore_index is not None and 0 <= ignore_index < c:
        counted = lib.mul(ctx, counted, lib.scale_bias(ctx, _eq_const(ctx, t, float(ignore_index)), -1.0, 1.0))
    return (e, xs), s_rows, lib.log(ctx, s_rows), counted, t


_FLAT_PICK_BELOW = 2 ** 24  # flat indices of a (c + 1, rows) block are exact in float32 below this


def _target_or_extra(ctx, counted, t, rows: int, c: int) -> int:
    """Per row r the element to pick (int32, (rows,)) of a (c + 1, rows) block: the target ``t``
    (float, (rows,); 0 when None) where the row counts, else c, the extra zero (see _pick); as a flat
    index r (c + 1) + column while that is exact in float32, else the column alone."""
    if t is None:
        col = lib.scale_bias(ctx, counted, -float(c), float(c))
    else:
        col = lib.scale_bias(ctx, lib.mul(ctx, counted, lib.scale_bias(ctx, t, 1.0, -float(c))), 1.0, float(c))
    if (c + 1) * rows < _FLAT_PICK_BELOW:
        col = lib.add(ctx, lib.scale(ctx, lib.arange(ctx, 0.0, float(rows), 1.0), float(c + 1)), col)
    return lib.cast(ctx, col, consts.TYPE_I32)


def _pick(ctx, a: int, index: int, rows: int, c: int) -> int:
    """One element per row of ``a`` (c, rows; (rows,) when c is 1) with a 0.0 appended to every row,
    at ``index`` (see _target_or_extra): gathered (ggml_get_rows), never masked by a multiply.
    Returns (rows,)."""
    padded = lib.concat(ctx, lib.reshape_2d(ctx, a, c, rows), zeros_node(ctx, (rows, 1)), 0)   # (c + 1, rows)
    if (c + 1) * rows < _FLAT_PICK_BELOW:   # one gather over the block: ggml pays per picked row
        got = lib.get_rows(ctx, lib.reshape_2d(ctx, padded, 1, (c + 1) * rows), index)
    else:                                   # a gather per row, by column (any size)
        got = lib.get_rows(ctx, lib.reshape_3d(ctx, padded, 1, c + 1, rows), lib.reshape_2d(ctx, index, 1, rows))
    return lib.reshape_1d(ctx, got, rows)


def _infer_sce_index_backward(g, x, idx, loss, ignore_index=None):
    _infer_sce_index(x, idx, ignore_index)
    same_float("softmax_cross_entropy_index_backward", g, loss)
    if g.shape != () or loss.shape != ():
        raise ValueError(f"softmax_cross_entropy_index_backward: gradient {g.shape} and loss {loss.shape} "
                         f"must be scalars")
    return x.shape, float32


@define("softmax_cross_entropy_index_backward", infer=_infer_sce_index_backward, differentiable=False,
        work=lambda g, x, idx, loss, **p: 6.0 * numel(x.shape))
def _sce_index_backward_op(ctx, nodes, inputs, out, ignore_index=None):
    """g * (softmax(x) - onehot) / count on counted rows, 0 on the others (NaN where the softmax
    is NaN, as torch's); the loss's node, when it is in this graph, holds the exps and row sums."""
    shape = inputs[1].shape
    c, rows = shape[-1], _rows(shape)
    nx = reshape(ctx, nodes[1], (rows, c))
    if fast_math.ce_index_applies(c, nx) and inputs[1].dtype is float32 and inputs[0].dtype is float32:
        g = reshape(ctx, nodes[0], (1,))
        d = fast_math.ce_index_backward(ctx, g, nx, reshape(ctx, nodes[2], (rows,)), ignore_index)
        return owned(ctx, d, shape)
    e, s_rows, counted, count = (saved_node(nodes[3], k) for k in ("exps", "sums", "counted", "count"))
    if not e:
        (e, _), s_rows, _, counted, _ = _row_terms(ctx, nx, nodes[2], rows, c, ignore_index)
        count = lib.sum(ctx, counted)
    # g / count * (softmax * counted - onehot): an uncounted row gets softmax * 0 (NaN where the
    # softmax is, as torch's), and with no counted row at all every gradient is 0 (count taken as 1)
    nq = lib.reshape_2d(ctx, one_hot_rows(ctx, nodes[2], rows, c, ignore_index), c, rows)
    soft = _flat(ctx, lib.mul, e, lib.repeat(ctx, lib.reshape_2d(ctx, lib.div(ctx, counted, s_rows), 1, rows), e),
                 rows, c)
    scale = lib.div(ctx, reshape(ctx, nodes[0], (1, 1)), lib.clamp(ctx, lib.dup(ctx, count), 1.0, float("inf")))
    d = lib.mul(ctx, lib.reshape_1d(ctx, _flat(ctx, lib.sub, soft, nq, rows, c), rows * c), scale)
    return owned(ctx, d, shape)


# ---------------------------------------------------------------- binary cross-entropy with logits
def _infer_bce(x, y, *pw):
    same_device("bce_with_logits", x, y, *pw)
    same_float("bce_with_logits", x, y, *pw)
    _no_empty("bce_with_logits", x, y, *pw)
    if x.shape != y.shape:
        raise ShapeError(f"bce_with_logits: target shape {y.shape} must equal input shape {x.shape}")
    if pw:
        p = pw[0].shape
        if len(p) > x.ndim or any(a not in (1, b) for a, b in zip(p[::-1], x.shape[::-1])):
            raise ShapeError(f"bce_with_logits: pos_weight {p} does not broadcast to the input {x.shape}")
    return x.shape, float32


def _bce_backward(g, n):
    """Of (1 - y) x + L softplus(-x), L = 1 + (pw - 1) y: d/dx = (1 - y) - L sigmoid(-x) and
    d/dy = -x + (pw - 1) softplus(-x), as torch's; pos_weight is not differentiable (torch refuses a
    pos_weight that requires grad, and so does F.binary_cross_entropy_with_logits)."""
    x, y = n.inputs[:2]
    pw = n.inputs[2] if len(n.inputs) == 3 else None
    gx = gy = None
    if x.requires_grad:
        s = op.sigmoid(op.neg(x))
        if pw is not None:
            s = op.mul(s, op.add_scalar(op.mul(op.add_scalar(pw, c=-1.0), y), c=1.0))
        gx = op.mul(g, op.sub(op.add_scalar(op.neg(y), c=1.0), s))
    if y.requires_grad:
        gy = op.neg(x) if pw is None else op.sub(op.mul(op.add_scalar(pw, c=-1.0), op.softplus(op.neg(x))), x)
        gy = op.mul(g, gy)
    return (gx, gy) + ((None,) if pw is not None else ())


@define("bce_with_logits", infer=_infer_bce, backward=_bce_backward, work=lambda x, *r: 8.0 * numel(x.shape))
def _bce_with_logits(ctx, nodes, inputs, out):
    """Elementwise (1 - y) x + L (log(1 + exp(-|x|)) + max(-x, 0)): no overflow for large |x|."""
    nx, ny = nodes[:2]
    sp = lib.add(ctx, lib.log(ctx, lib.scale_bias(ctx, lib.exp(ctx, lib.neg(ctx, lib.abs(ctx, nx))), 1.0, 1.0)),
                 lib.relu(ctx, lib.neg(ctx, nx)))                            # softplus(-x)
    if len(nodes) == 3:
        ps = tuple(inputs[2].shape)
        p_full = (1,) * (len(out.shape) - len(ps)) + ps
        pw = nodes[2] if p_full == out.shape else expand(ctx, reshape(ctx, nodes[2], p_full), p_full, out.shape)
        big_l = lib.scale_bias(ctx, lib.mul(ctx, lib.scale_bias(ctx, pw, 1.0, -1.0), ny), 1.0, 1.0)
        sp = lib.mul(ctx, sp, big_l)
    return lib.add(ctx, lib.mul(ctx, lib.scale_bias(ctx, ny, -1.0, 1.0), nx), sp)
