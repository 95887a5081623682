"""RMS normalisation over the last axis (ggml's ``rms_norm`` kernel): the primitive behind
``F.rms_norm`` and ``nn.RMSNorm`` (the other normalisations compose ``layer_norm``, ops/nn_ops.py).

ggml_rms_norm(x, eps) computes ``x / sqrt(mean(x^2) + eps)`` along ne[0] (NumPy's last axis),
which is torch's ``rms_norm`` without the weight. The backward is written with ops:
``dx = r * (g - y * mean(g * y))`` with ``r = (mean(x^2) + eps)^-1/2`` and ``y`` the output.
"""
from __future__ import annotations

from .._ggml import lib
from ..engine import float32
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
