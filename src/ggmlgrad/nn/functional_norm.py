"""Normalisation functions of ``gg.nn.functional``: ``batch_norm``, ``instance_norm``, ``group_norm``,
``rms_norm`` (``layer_norm`` is in functional.py).

Every one runs as graph ops: ``batch_norm`` is one fused op (ops/norm_ops.py: per-channel sums
with ggml's ``sum_rows``, no copy of the input in another layout), the others normalise rows with
ggml's ``norm`` kernel (the ``layer_norm`` op) or ``rms_norm`` kernel after a reshape that puts the
normalised elements on the last axis. Running statistics are updated in place
under ``no_grad``, all buffers of one call in ONE write (:func:`write_buffers`): in graph mode
that write is an in-place write (it drains first, as every in-place write does); inside a
capture the write is part of the recorded graph, so a replay updates the statistics in the
same compute as the forward.

>>> import ggmlgrad as gg, ggmlgrad.nn.functional as F
>>> [round(v, 3) for v in F.group_norm(gg.tensor([[[1.0, 3.0], [2.0, 6.0]]]), 2).reshape(-1).tolist()]
[-1.0, 1.0, -1.0, 1.0]
"""
from __future__ import annotations

import math

import numpy as np

from ..engine import ENGINE, context
from ..engine.plans import Exact
from ..ops import op
from ..ops.decl import public as _public
from ..ops.registry import write
from ..tensor import Tensor, no_grad
from ..tensor.views import has_views

#: torch.finfo(torch.float32).eps: ``rms_norm``'s default eps (torch: the input dtype's).
FLOAT32_EPS = float(np.finfo(np.float32).eps)


# ---------------------------------------------------------------- helpers
def write_buffers(pairs: list, label: str = "running stats") -> None:
    """``buffer ← value`` for each ``(buffer, value)`` under no_grad, as one in-place write.

    Inside a capture recording each write is a rebinding of the recorded graph (capture/writes.py:
    the replay writes the buffers in the same compute). Elsewhere the values go through ONE
    ``copy_`` write op after a drain, as ``load_state_dict`` does: one compute for all the
    buffers of a layer instead of one per buffer. Buffers with live views take ``copy_`` (it
    keeps the views in step)."""
    pairs = [(b, v) for b, v in pairs if b is not None]
    if not pairs:
        return
    with no_grad():
        if context.current().recorder is not None or any(has_views(b) for b, _ in pairs):
            for b, v in pairs:
                b.copy_(v)
            return
        flat = []
        for b, v in pairs:
            flat += (b, v if v.dtype is b.dtype else v.to(b.dtype))
        with ENGINE.exclusive("inplace"):
            write("copy_", tuple(flat), Exact(((2, ()),) * len(pairs)), label=label)
    for b, _ in pairs:
        b._version += 1


def _check_param(fn: str, name: str, t, c: int) -> None:
    if t is None:
        return
    if not isinstance(t, Tensor):
        raise TypeError(f"{fn}: {name} must be a Tensor or None, got {type(t).__name__}")
    if tuple(t.shape) != (c,):
        raise RuntimeError(f"{fn}: {name} should contain {c} elements not {t.numel()} (shape {tuple(t.shape)})")


def _affine(y: Tensor, weight, bias) -> Tensor:
    """``y * weight + bias`` with per-channel (axis 1) weight and bias: the channel_affine op (its
    weight and bias gradients are per-channel sums, not generic broadcast gradients)."""
    if (weight is None and bias is None) or y.numel() == 0:
        return y
    n, c = y.shape[:2]
    wb = tuple(t for t in (weight, bias) if t is not None)
    y3 = y.reshape(n, c, math.prod(y.shape[2:]))
    out = op.channel_affine(y3, *wb, has_weight=weight is not None, has_bias=bias is not None)
    return out.reshape(y.shape)


def _input(fn: str, input) -> None:
    if not isinstance(input, Tensor):
        raise TypeError(f"{fn}: input must be a Tensor, got {type(input).__name__}")
    if not input.dtype.is_float:
        raise TypeError(f"{fn}: expected a float32 input, got {input.dtype.name} (cast with .float())")


def _eps(fn: str, eps) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps >= 0:
        raise ValueError(f"{fn}: eps must be a number >= 0, got {eps!r}")
    return float(eps)


def _normalize_rows(rows: Tensor, eps: float) -> Tensor:
    """(R, K) rows normalised to zero mean and unit (biased) variance: ggml's norm kernel."""
    return op.layer_norm(rows, eps=eps)


def _updated(old: Tensor, batch: Tensor, factor) -> Tensor:
    """``(1 - factor) * old + factor * batch`` (factor a number or a 0-d tensor)."""
    if isinstance(factor, Tensor):
        return old + (batch - old) * factor
    return old * (1.0 - factor) + batch * factor


# ---------------------------------------------------------------- batch norm
def batch_norm_impl(input: Tensor, running_mean, running_var, weight, bias, training: bool, factor, eps: float,
                    num_batches_tracked=None, fn: str = "batch_norm") -> Tensor:
    """The batch norm of ``F.batch_norm`` and ``nn.BatchNorm*d``: ``factor`` is the momentum (a number)
    or, for a cumulative average, a 0-d tensor ``1 / num_batches_tracked`` computed in the graph;
    ``num_batches_tracked`` (or None) is incremented in the same write as the running statistics."""
    _input(fn, input)
    if input.ndim < 2:
        raise ValueError(f"{fn}: expected an input with at least 2 dimensions (N, C, ...), got {input.shape}")
    c = input.shape[1]
    for name, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight),
                    ("bias", bias)):
        _check_param(fn, name, t, c)
    if not training:
        if running_mean is None or running_var is None:
            raise RuntimeError(f"{fn}: running_mean must be defined in evaluation mode")
        return _eval_norm(input, running_mean, running_var, weight, bias, eps)
    if input.numel() == 0:   # torch: an empty batch gives an empty result; only the batch counter moves
        if num_batches_tracked is not None:
            with no_grad():
                write_buffers([(num_batches_tracked, num_batches_tracked + 1)], f"{fn} running stats")
        return input * 1.0
    per_channel = math.prod(input.shape) // max(c, 1)
    if per_channel == 1:
        raise ValueError(f"Expected more than 1 value per channel when training, got input size {input.shape}")
    x3 = input.reshape(input.shape[0], c, per_channel // input.shape[0])    # (N, C, S): a view
    with no_grad():
        stats = op.batch_norm_stats(x3)                 # (2, C): batch mean and biased variance
    affine = tuple(t for t in (weight, bias) if t is not None)
    y3 = op.batch_norm(x3, stats, *affine, eps=eps, has_weight=weight is not None, has_bias=bias is not None)
    pairs = []
    with no_grad():
        if running_mean is not None:
            pairs.append((running_mean, _updated(running_mean, stats[0], factor)))
        if running_var is not None:   # torch's running variance is the unbiased one
            pairs.append((running_var, _updated(running_var, stats[1] * (per_channel / (per_channel - 1)), factor)))
        if num_batches_tracked is not None:
            pairs.append((num_batches_tracked, num_batches_tracked + 1))
    write_buffers(pairs, f"{fn} running stats")
    return y3.reshape(input.shape)


def _eval_norm(input: Tensor, running_mean: Tensor, running_var: Tensor, weight, bias, eps: float) -> Tensor:
    """``x * scale + shift`` per channel, with the running statistics and the affine folded into the
    two small vectors first (two passes over x)."""
    scale = op.pow_scalar(op.add_scalar(running_var, c=eps), p=-0.5)
    if weight is not None:
        scale = scale * weight
    shift = -running_mean * scale
    if bias is not None:
        shift = shift + bias
    return _affine(input, scale, shift)


@_public(functional="batch_norm")  # torch.batch_norm: another signature
def batch_norm(input: Tensor, running_mean: Tensor | None, running_var: Tensor | None, weight: Tensor | None = None,
               bias: Tensor | None = None, training: bool = False, momentum: float = 0.1,
               eps: float = 1e-5) -> Tensor:
    """Batch normalisation over axis 1 of (N, C, ...) (torch.nn.functional.batch_norm).

    ``training``: normalise with the batch statistics (biased variance) and, when given, update
    ``running_mean``/``running_var`` in place: ``(1 - momentum) * running + momentum * batch``
    with the unbiased batch variance. Not training: normalise with the running statistics.

    >>> import ggmlgrad as gg, ggmlgrad.nn.functional as F
    >>> rm, rv = gg.zeros(2), gg.ones(2)
    >>> y = F.batch_norm(gg.tensor([[1.0, 2.0], [3.0, 6.0]]), rm, rv, training=True)
    >>> [round(v, 3) for v in rm.tolist()], [round(v, 3) for v in rv.tolist()]
    ([0.2, 0.4], [1.1, 1.7])
    """
    if isinstance(momentum, bool) or not isinstance(momentum, (int, float)):
        raise TypeError(f"batch_norm: momentum must be a number, got {momentum!r}")
    return batch_norm_impl(input, running_mean, running_var, weight, bias, bool(training), float(momentum),
                           _eps("batch_norm", eps))


# ---------------------------------------------------------------- instance norm
@_public(functional="instance_norm")  # torch.instance_norm: another signature
def instance_norm(input: Tensor, running_mean: Tensor | None = None, running_var: Tensor | None = None,
                  weight: Tensor | None = None, bias: Tensor | None = None, use_input_stats: bool = True,
                  momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Normalise each (sample, channel) plane of (N, C, ...) on its own (torch.nn.functional.instance_norm).

    With ``use_input_stats`` and running buffers given, they move towards the mean over the batch of
    the per-instance statistics (unbiased variance), as torch; without ``use_input_stats`` the running
    statistics normalise.

    >>> import ggmlgrad as gg, ggmlgrad.nn.functional as F
    >>> [round(v, 3) for v in F.instance_norm(gg.tensor([[[1.0, 3.0]]])).reshape(-1).tolist()]
    [-1.0, 1.0]
    """
    fn = "instance_norm"
    _input(fn, input)
    eps = _eps(fn, eps)
    if input.ndim < 3:
        raise ValueError(f"{fn}: expected an input of at least 3 dimensions (N, C, ...), got {input.shape}")
    n, c = input.shape[:2]
    for name, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight),
                    ("bias", bias)):
        _check_param(fn, name, t, c)
    if not use_input_stats:
        if running_mean is None or running_var is None:
            raise RuntimeError(f"{fn}: Expected running_mean and running_var to be defined when use_input_stats "
                               f"is false")
        return _eval_norm(input, running_mean, running_var, weight, bias, eps)
    spatial = math.prod(input.shape[2:])
    if spatial == 1:
        raise ValueError(f"Expected more than 1 spatial element when training, got input size {input.shape}")
    rows = input.reshape(n * c, spatial)
    y = _normalize_rows(rows, eps).reshape(input.shape)
    if running_mean is not None or running_var is not None:
        with no_grad():
            r = rows.detach()
            mean = r.mean(-1).reshape(n, c).mean(0)
            var = r.var(-1, correction=1).reshape(n, c).mean(0)
            pairs = [(running_mean, _updated(running_mean, mean, float(momentum)) if running_mean is not None
                      else None),
                     (running_var, _updated(running_var, var, float(momentum)) if running_var is not None else None)]
        write_buffers(pairs, f"{fn} running stats")
    return _affine(y, weight, bias)


# ---------------------------------------------------------------- group norm
@_public(functional="group_norm", function="group_norm")
def group_norm(input: Tensor, num_groups: int, weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5) -> Tensor:
    """Normalise each group of ``C // num_groups`` channels of every sample of (N, C, ...), then a
    per-channel affine (torch.nn.functional.group_norm).

    >>> import ggmlgrad as gg, ggmlgrad.nn.functional as F
    >>> F.group_norm(gg.ones(2, 4, 3), 2).shape
    (2, 4, 3)
    """
    fn = "group_norm"
    _input(fn, input)
    eps = _eps(fn, eps)
    if isinstance(num_groups, bool) or not isinstance(num_groups, (int, np.integer)) or num_groups <= 0:
        raise ValueError(f"{fn}: num_groups must be a positive int, got {num_groups!r}")
    if input.ndim < 2:
        raise ValueError(f"{fn}: expected an input with at least 2 dimensions (N, C, ...), got {input.shape}")
    n, c = input.shape[:2]
    if c % num_groups:
        raise RuntimeError(f"Expected number of channels in input to be divisible by num_groups, but got input of "
                           f"shape {list(input.shape)} and num_groups={num_groups}")
    for name, t in (("weight", weight), ("bias", bias)):
        _check_param(fn, name, t, c)
    rows = input.reshape(n * int(num_groups), math.prod(input.shape) // max(n * int(num_groups), 1))
    y = _normalize_rows(rows, eps).reshape(input.shape)
    return _affine(y, weight, bias)


# ---------------------------------------------------------------- rms norm
def normalized_dims(fn: str, normalized_shape) -> tuple:
    """``normalized_shape`` (an int or a sequence of positive ints) as a tuple."""
    ns = (normalized_shape,) if isinstance(normalized_shape, (int, np.integer)) else tuple(normalized_shape)
    if not ns or any(isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s <= 0 for s in ns):
        raise ValueError(f"{fn}: normalized_shape must be a positive int or a non-empty sequence of them, "
                         f"got {normalized_shape!r}")
    return tuple(int(s) for s in ns)


@_public(functional="rms_norm", function="rms_norm")
def rms_norm(input: Tensor, normalized_shape, weight: Tensor | None = None, eps: float | None = None) -> Tensor:
    """``x / sqrt(mean(x^2) + eps) * weight`` over the trailing ``normalized_shape`` axes
    (torch.nn.functional.rms_norm; ``eps=None`` is float32's machine epsilon, as torch). ggml's
    ``rms_norm`` kernel.

    >>> import ggmlgrad as gg, ggmlgrad.nn.functional as F
    >>> [round(v, 4) for v in F.rms_norm(gg.tensor([3.0, 4.0]), [2]).tolist()]
    [0.8485, 1.1314]
    """
    fn = "rms_norm"
    _input(fn, input)
    ns = normalized_dims(fn, normalized_shape)
    if tuple(input.shape[input.ndim - len(ns):]) != ns or len(ns) > input.ndim:
        raise RuntimeError(f"{fn}: normalized_shape {list(ns)} does not match the trailing axes of the input "
                           f"of shape {list(input.shape)}")
    eps = FLOAT32_EPS if eps is None else _eps(fn, eps)
    if weight is not None and tuple(weight.shape) != ns:
        raise RuntimeError(f"{fn}: weight of shape {list(weight.shape)} does not match normalized_shape {list(ns)}")
    x = input
    if len(ns) > 1:
        x = x.reshape(tuple(input.shape[:-len(ns)]) + (math.prod(ns),))
    y = op.rms_norm(x, eps=eps)
    if len(ns) > 1:
        y = y.reshape(input.shape)
    return y * weight if weight is not None else y
