"""RMS normalisation over the last axis (ggml's ``rms_norm`` kernel), the primitive behind
``F.rms_norm`` and ``nn.RMSNorm`` (the other normalisations compose ``layer_norm``, ops/nn_ops.py).

ggml_rms_norm(x, eps) computes ``x / sqrt(mean(x^2) + eps)`` along ne[0] (NumPy's last axis),
which is torch's ``rms_norm`` without the weight. The backward is written with ops:
``dx = r * (g - y * mean(g * y))`` with ``r = (mean(x^2) + eps)^-1/2`` and ``y`` the output.

Also here: the fused training-mode ``batch_norm`` (with its statistics and backward ops) and
the per-channel ``channel_affine`` / ``channel_sum`` of the normalisation layers.

>>> import ggmlgrad as gg
>>> from ggmlgrad.ops import op
>>> [round(v, 3) for v in op.rms_norm(gg.tensor([3.0, 4.0]), eps=0.0).tolist()]
[0.849, 1.131]
"""
from __future__ import annotations

from .._ggml import lib
from ..engine import float32
from .build import SavedNode, owned, permute, reshape, saved_node
from .registry import define, op, same_float
from .shapes import numel


def _infer_rms_norm(x, eps):
    same_float("rms_norm", x)
    if x.ndim == 0:
        raise ValueError("rms_norm: input must have at least 1 dimension")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)):
        raise TypeError(f"rms_norm: `eps` must be a real number, got {eps!r}")
    if not eps >= 0:
        raise ValueError(f"rms_norm: eps must be >= 0, got {eps}")
    return x.shape, float32


def _rms_norm_backward(g, n):
    """y = x * r with r = (mean(x^2) + eps)^-1/2 over the last axis: dx = r * (g - y * mean(g * y))."""
    x, y = n.inputs[0], n.output
    r = op.pow_scalar(op.add_scalar(op.mean(op.square(x), axis=-1, keepdim=True), c=n.params["eps"]), p=-0.5)
    inner = op.sub(g, op.mul(y, op.mean(op.mul(g, y), axis=-1, keepdim=True)))
    return op.mul(inner, r)


@define("rms_norm", saves=(0,), infer=_infer_rms_norm, backward=_rms_norm_backward, save_output=True,
        work=lambda x, eps: 4.0 * numel(x.shape))
def _rms_norm(ctx, nodes, inputs, out, eps):
    """x / sqrt(mean(x^2) + eps) over the last axis, via ggml_rms_norm.

    Marked as a graph output: ggml's CPU backend fuses an RMS_NORM whose only consumer is a MUL
    (the weight of an RMSNorm) into one kernel that never writes the normalised rows, but this
    op's result is a tensor of its own (read again by the backward, or by the user)."""
    node = lib.rms_norm(ctx, nodes[0], float(eps))
    lib.set_output(node)
    return node


# ---------------------------------------------------------------- batch norm (training), fused
# x is (N, C, S) (the front end reshapes (N, C, ...) to it): statistics per channel over N and S. The
# channel sums are ggml_sum_rows over S, then over N on the small (C, N) transpose: no copy of x in
# another layout and no repeat_back (broadcast gradients of per-channel tensors).
#
# batch_norm_stats(x) gives (2, C): the batch mean and biased variance; batch_norm(x, stats, ...)
# normalises with them. The statistics are a tensor of their own so that the running-statistics
# update reads them, and a backward in a later graph (graph mode drains at that in-place update)
# reads them instead of computing them again. Within one graph the centred input x - mean travels
# on the result nodes (SavedNode) from the statistics to the forward and on to the backward.
def _chan_sum(ctx, node, n: int, c: int, s: int) -> int:
    """Per-channel sums of a contiguous (N, C, S) node, as a (1, C, 1) node."""
    r = lib.sum_rows(ctx, node)                       # (N, C, 1)
    if n == 1:
        return reshape(ctx, r, (1, c, 1))
    t = lib.cont(ctx, permute(ctx, reshape(ctx, r, (n, c)), (1, 0)))   # (C, N): small
    return reshape(ctx, lib.sum_rows(ctx, t), (1, c, 1))


def _stat_row(ctx, stats: int, row: int, c: int) -> int:
    """Row ``row`` (0: mean, 1: variance) of a (2, C) statistics node, as a (1, C, 1) node."""
    saved = saved_node(stats, ("mean", "var")[row])
    if saved:
        return saved
    return reshape(ctx, lib.view_1d(ctx, stats, c, 4 * c * row), (1, c, 1))


def _centred(ctx, x: int, stats: int, c: int) -> int:
    """x - mean: the statistics op's own node when it is in this graph."""
    return saved_node(stats, "xc") or lib.sub(ctx, x, _stat_row(ctx, stats, 0, c))


def _rstd(ctx, stats: int, c: int, eps: float) -> int:
    var = _stat_row(ctx, stats, 1, c)
    return lib.div(ctx, lib.fill(ctx, var, 1.0), lib.sqrt(ctx, lib.scale_bias(ctx, var, 1.0, float(eps))))


def _infer_batch_norm_stats(x):
    same_float("batch_norm_stats", x)
    if x.ndim != 3 or numel(x.shape) == 0:
        raise ValueError(f"batch_norm_stats: expected a non-empty (N, C, S) input, got {x.shape}")
    return (2, x.shape[1]), float32


@define("batch_norm_stats", infer=_infer_batch_norm_stats, differentiable=False,
        work=lambda x: 4.0 * numel(x.shape))
def _batch_norm_stats(ctx, nodes, inputs, out):
    """(2, C): the mean and the biased variance of each channel of (N, C, S) over N and S (two-pass:
    the variance of the centred values)."""
    n, c, s = inputs[0].shape
    m = n * s
    mean = lib.scale(ctx, _chan_sum(ctx, nodes[0], n, c, s), 1.0 / m)
    xc = lib.sub(ctx, nodes[0], mean)
    var = lib.scale(ctx, _chan_sum(ctx, lib.sqr(ctx, xc), n, c, s), 1.0 / m)
    both = lib.concat(ctx, reshape(ctx, mean, (1, c)), reshape(ctx, var, (1, c)), 1)
    return SavedNode(both, mean=mean, var=var, xc=xc)


def _infer_batch_norm(x, stats, *affine, eps, has_weight=False, has_bias=False):
    same_float("batch_norm", x, stats, *affine)
    if x.ndim != 3 or numel(x.shape) == 0:
        raise ValueError(f"batch_norm: expected a non-empty (N, C, S) input, got {x.shape}")
    if stats.shape != (2, x.shape[1]):
        raise ValueError(f"batch_norm: statistics must have shape (2, {x.shape[1]}), got {stats.shape}")
    if not isinstance(has_weight, bool) or not isinstance(has_bias, bool) or len(affine) != has_weight + has_bias:
        raise TypeError(f"batch_norm: {len(affine)} affine inputs for has_weight={has_weight!r}, "
                        f"has_bias={has_bias!r}")
    for t in affine:
        if t.shape != (x.shape[1],):
            raise ValueError(f"batch_norm: weight and bias must have shape ({x.shape[1]},), got {t.shape}")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps >= 0:
        raise ValueError(f"batch_norm: eps must be a number >= 0, got {eps!r}")
    return x.shape, float32


def _batch_norm_backward(g, n):
    """Per channel: db = sum(g), dw = sum(g * xhat), and dx from both (one op each: the input's
    gradient reads the two sums instead of computing them again). The statistics input gets no
    gradient of its own: dx is the whole derivative, through the batch statistics too."""
    x, stats = n.inputs[:2]
    p = n.params
    w = n.inputs[2] if p.get("has_weight") else None
    b = n.inputs[-1] if p.get("has_bias") else None
    y = n.output
    need_x = x.requires_grad
    sg = op.batch_norm_backward(g, x, y, stats, part="bias", **p) \
        if need_x or (b is not None and b.requires_grad) else None
    sgx = op.batch_norm_backward(g, x, y, stats, part="weight", **p) \
        if need_x or (w is not None and w.requires_grad) else None
    gx = op.batch_norm_backward(g, x, y, stats, sgx, sg, *((w,) if w is not None else ()), part="input", **p) \
        if need_x else None
    gw = sgx if w is not None and w.requires_grad else None
    gb = sg if b is not None and b.requires_grad else None
    return (gx, None) + ((gw,) if w is not None else ()) + ((gb,) if b is not None else ())


@define("batch_norm", infer=_infer_batch_norm, backward=_batch_norm_backward, save_output=True,
        work=lambda x, *a, **p: 4.0 * numel(x.shape))
def _batch_norm(ctx, nodes, inputs, out, eps, has_weight=False, has_bias=False):
    """(x - mean) / sqrt(var + eps) * weight + bias per channel of (N, C, S), with the batch
    statistics ``stats`` (batch_norm_stats: biased variance, as torch's training mode)."""
    c = inputs[0].shape[1]
    stats = nodes[1]
    xc = _centred(ctx, nodes[0], stats, c)
    rstd = _rstd(ctx, stats, c, eps)
    k = lib.mul(ctx, rstd, reshape(ctx, nodes[2], (1, c, 1))) if has_weight else rstd
    y = lib.mul(ctx, xc, k)
    if has_bias:
        y = lib.add(ctx, y, reshape(ctx, nodes[-1], (1, c, 1)))
    return SavedNode(y, xc=xc, rstd=rstd)


def _infer_batch_norm_backward(g, x, y, stats, *sums_w, part, eps, has_weight=False, has_bias=False):
    same_float("batch_norm_backward", g, x, y, stats, *sums_w)
    if g.shape != x.shape or y.shape != x.shape or x.ndim != 3 or stats.shape != (2, x.shape[1]):
        raise ValueError(f"batch_norm_backward: gradient {g.shape}, input {x.shape} and output {y.shape} must be "
                         f"the same (N, C, S) shape, statistics (2, C), got {stats.shape}")
    if part not in ("input", "weight", "bias"):
        raise ValueError(f"batch_norm_backward: part must be 'input', 'weight' or 'bias', got {part!r}")
    want = (2 + bool(has_weight)) if part == "input" else 0
    if len(sums_w) != want or any(t.shape != (x.shape[1],) for t in sums_w):
        raise ValueError(f"batch_norm_backward: part {part!r} takes {want} per-channel inputs of shape "
                         f"({x.shape[1]},), got {[t.shape for t in sums_w]}")
    return (x.shape if part == "input" else (x.shape[1],)), float32


@define("batch_norm_backward", infer=_infer_batch_norm_backward, differentiable=False,
        work=lambda g, *a, **p: 4.0 * numel(g.shape))
def _batch_norm_backward_op(ctx, nodes, inputs, out, part, eps, has_weight=False, has_bias=False):
    """One gradient of :func:`_batch_norm` from the upstream gradient g (sums per channel over N, S):
    bias: sum(g); weight: sum(g * xhat) = rstd * sum(g * (x - mean)); input, given those two sums
    and the weight: k * (g - sum(g) / M - xhat * sum(g * xhat) / M) with k = weight * rstd, computed
    as g * k - (x - mean) * (k * rstd * sum(g * xhat) / M) - k * sum(g) / M (four passes over g)."""
    g, x, y, stats = nodes[:4]
    n, c, s = inputs[1].shape
    if part == "bias":
        return owned(ctx, _chan_sum(ctx, g, n, c, s), (c,))
    xc = saved_node(y, "xc") or _centred(ctx, x, stats, c)
    rstd = saved_node(y, "rstd") or _rstd(ctx, stats, c, eps)
    if part == "weight":
        return owned(ctx, lib.mul(ctx, _chan_sum(ctx, lib.mul(ctx, g, xc), n, c, s), rstd), (c,))
    inv_m = 1.0 / (n * s)
    sgx, sg = (reshape(ctx, t, (1, c, 1)) for t in nodes[4:6])
    k = lib.mul(ctx, rstd, reshape(ctx, nodes[6], (1, c, 1))) if has_weight else rstd
    k2 = lib.scale(ctx, lib.mul(ctx, lib.mul(ctx, k, rstd), sgx), inv_m)
    k3 = lib.scale(ctx, lib.mul(ctx, k, sg), inv_m)
    return lib.sub(ctx, lib.mul(ctx, g, k), lib.add(ctx, lib.mul(ctx, xc, k2), k3))


# ---------------------------------------------------------------- per-channel affine x * w + b of (N, C, S)
# The affine of group / instance norm and of batch norm in eval mode. Its weight and bias gradients
# are per-channel sums (sum_rows, then over N on a small transpose) instead of the generic broadcast
# gradient (ggml_repeat_back, several times slower on these shapes).
def _infer_channel_affine(x, *wb, has_weight=True, has_bias=True):
    same_float("channel_affine", x, *wb)
    if x.ndim != 3 or numel(x.shape) == 0:
        raise ValueError(f"channel_affine: expected a non-empty (N, C, S) input, got {x.shape}")
    if not isinstance(has_weight, bool) or not isinstance(has_bias, bool) or len(wb) != has_weight + has_bias \
            or not wb:
        raise TypeError(f"channel_affine: {len(wb)} inputs for has_weight={has_weight!r}, has_bias={has_bias!r}")
    for t in wb:
        if t.shape != (x.shape[1],):
            raise ValueError(f"channel_affine: weight and bias must have shape ({x.shape[1]},), got {t.shape}")
    return x.shape, float32


def _channel_affine_backward(g, n):
    x = n.inputs[0]
    p = n.params
    w = n.inputs[1] if p.get("has_weight", True) else None
    b = n.inputs[-1] if p.get("has_bias", True) else None
    gx = (op.channel_affine(g, w, has_weight=True, has_bias=False) if w is not None else g) \
        if x.requires_grad else None
    gw = op.channel_sum(op.mul(g, x)) if w is not None and w.requires_grad else None
    gb = op.channel_sum(g) if b is not None and b.requires_grad else None
    return (gx,) + ((gw,) if w is not None else ()) + ((gb,) if b is not None else ())


@define("channel_affine", infer=_infer_channel_affine, backward=_channel_affine_backward,
        saves=(0, 1), work=lambda x, *a, **p: 2.0 * numel(x.shape))
def _channel_affine(ctx, nodes, inputs, out, has_weight=True, has_bias=True):
    """x * weight[c] + bias[c] for each channel c of (N, C, S)."""
    c = inputs[0].shape[1]
    y = nodes[0]
    if has_weight:
        y = lib.mul(ctx, y, reshape(ctx, nodes[1], (1, c, 1)))
    if has_bias:
        y = lib.add(ctx, y, reshape(ctx, nodes[-1], (1, c, 1)))
    return y


def _infer_channel_sum(x):
    same_float("channel_sum", x)
    if x.ndim != 3 or numel(x.shape) == 0:
        raise ValueError(f"channel_sum: expected a non-empty (N, C, S) input, got {x.shape}")
    return (x.shape[1],), float32


@define("channel_sum", saves=(), infer=_infer_channel_sum,
        backward=lambda g, n: op.expand_as(op.reshape(g, shape=(1, g.shape[0], 1)), n.inputs[0]),
        work=lambda x: float(numel(x.shape)))
def _channel_sum(ctx, nodes, inputs, out):
    """(C,): the sum of each channel of (N, C, S) over N and S."""
    n, c, s = inputs[0].shape
    return owned(ctx, _chan_sum(ctx, nodes[0], n, c, s), (c,))
