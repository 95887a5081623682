"""Gradient clipping on ``.grad`` (graph ops: no host round trip, works in graph mode and capture).

The clipped gradients replace each parameter's ``.grad`` (a new tensor holding the
scaled values, like every gradient accumulation in ggmlgrad), so the optimizer's next
``step()`` uses them.

>>> import ggmlgrad as gg
>>> from ggmlgrad.nn.utils import clip_grad_norm_
>>> w = gg.tensor([3.0, 4.0], requires_grad=True)
>>> (w * w).sum().backward()                  # grad (6, 8): norm 10
>>> round(clip_grad_norm_([w], max_norm=1.0).item(), 4)
10.0
>>> [round(x, 4) for x in w.grad.tolist()]
[0.6, 0.8]
"""
from __future__ import annotations

import math
from typing import Iterable

import numpy as np

from ...engine import float32, host_value
from ...engine.context import current
from ...ops import op
from ...runtime.executor import COMPUTE_LOCK
from ...tensor import Tensor, no_grad
from ...tensor.tensor import _from_numpy

__all__ = ["clip_grad_norm_", "clip_grad_value_"]


def _params(parameters) -> list[Tensor]:
    if isinstance(parameters, Tensor):
        return [parameters]
    ps = list(parameters)
    for p in ps:
        if not isinstance(p, Tensor):
            raise TypeError(f"expected Tensors, got {type(p).__name__}")
    return ps


def _f32(g: Tensor) -> Tensor:
    return g if g.dtype is float32 else op.cast(g, dtype=float32)


def total_norm(grads: list[Tensor], norm_type: float) -> Tensor:
    """The ``norm_type``-norm of all ``grads`` taken together, as a 0-d tensor (graph ops)."""
    if norm_type == math.inf:
        parts = [op.amax(op.abs(_f32(g))) for g in grads]
        total = parts[0]
        for p in parts[1:]:
            total = op.maximum(total, p)
        return total
    if norm_type == 2.0:
        parts = [op.sum(op.square(_f32(g))) for g in grads]
    elif norm_type == 1.0:
        parts = [op.sum(op.abs(_f32(g))) for g in grads]
    else:
        parts = [op.sum(op.pow_scalar(op.abs(_f32(g)), p=norm_type)) for g in grads]
    s = parts[0]
    for p in parts[1:]:
        s = op.add(s, p)
    if norm_type == 1.0:
        return s
    return op.sqrt(s) if norm_type == 2.0 else op.pow_scalar(s, p=1.0 / norm_type)


def clip_grad_norm_(parameters: Iterable[Tensor] | Tensor, max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False, foreach: bool | None = None) -> Tensor:
    """Scale the gradients so that their joint ``norm_type``-norm is at most ``max_norm``.

    Like ``torch.nn.utils.clip_grad_norm_``: the factor is ``min(1, max_norm / (norm + 1e-6))``,
    applied on the device; the total norm (before clipping) comes back as a 0-d tensor.
    Only ``error_if_nonfinite=True`` reads the norm back to the host (to raise). ``foreach`` is
    accepted for PyTorch compatibility and ignored (every clip is a handful of graph ops anyway).
    With ``norm_type=inf`` a gradient holding NaN may give a finite norm (ggml's max skips NaN).

    >>> import ggmlgrad as gg
    >>> w = gg.tensor([1.0], requires_grad=True)
    >>> (w * 10).sum().backward()
    >>> clip_grad_norm_([w], 2.0).item(), round(w.grad.item(), 5)
    (10.0, 2.0)
    """
    params = _params(parameters)
    try:
        max_norm = float(max_norm)
        norm_type = float(norm_type)
    except (TypeError, ValueError):
        raise TypeError("clip_grad_norm_: max_norm and norm_type must be numbers") from None
    if not norm_type > 0:
        raise ValueError(f"clip_grad_norm_: norm_type must be positive, got {norm_type}")
    with no_grad():
        grads = [p.grad for p in params if p.grad is not None and p.grad.numel() > 0]
        if not grads:
            from ...tensor import tensor
            return tensor(0.0)
        if norm_type == 2.0 and not error_if_nonfinite:
            total = _clip_l2_on_host(params, grads, max_norm)
            if total is not None:
                return total
        total = total_norm(grads, norm_type)
        if error_if_nonfinite and not math.isfinite(total.item()):
            raise RuntimeError(f"The total norm of order {norm_type} for gradients from `parameters` is "
                               f"non-finite, so it cannot be clipped. To disable this error and scale the "
                               f"gradients by the non-finite norm anyway, set `error_if_nonfinite=False`")
        coef = op.clamp(op.rdiv_scalar(op.add_scalar(total, c=1e-6), c=max_norm), hi=1.0)
        for p in params:
            g = p.grad
            if g is None or g.numel() == 0:
                continue
            scaled = op.mul(_f32(g), coef)
            p.grad = scaled if g.dtype is float32 else op.cast(scaled, dtype=g.dtype)
    return total


# Above this many elements ``sum(square(g))`` runs as its two ops (ggml's loop outruns NumPy's cumsum).
_HOST_SUM_MAX = 512


def _clip_l2_on_host(params: list[Tensor], grads: list[Tensor], max_norm: float) -> Tensor | None:
    """The 2-norm clip with NumPy on gradients in host memory, in eager mode: the ops' arithmetic step
    for step, so the same bits. Each ``sum(square(g))`` is ggml's sum_rows: the float32 squares added
    in order in float64 from 0.0, rounded to float32 once, which a float64 ``cumsum`` is (a large
    ``g`` runs the two ops and its result is read on the host); the float32 adds, sqrt, ``+ 1e-6``,
    ``max_norm / x`` and ``min(x, 1)`` are IEEE operations either way, NaN kept as torch's clamp keeps
    it. Spares most of the ~3 ops per parameter a policy's clip costs at every update. Returns the
    total norm, or None (nothing done) when the ops must run: graph or check mode, a capture, a
    gradient that is not float32 computed in host memory of its own."""
    c = current()
    if c.graph or c.check or c.recorder is not None or c.observer is not None:
        return None
    device = grads[0].device
    if not device.is_host:
        return None
    values = []
    for g in grads:
        v = host_value(g) if g.dtype is float32 and g.device is device else None
        if v is None:
            return None
        values.append(v)
    big = {id(g): op.sum(op.square(g)) for g in grads if g.numel_ > _HOST_SUM_MAX}
    # (no NumPy warnings: overflow to inf and inf * 0 are the ops' silent IEEE results)
    with COMPUTE_LOCK, np.errstate(all="ignore"):  # COMPUTE_LOCK: not while a graph on another thread writes this memory
        parts = []
        for g, v in zip(grads, values):
            if id(g) in big:
                part = host_value(big[id(g)])
                if part is None:
                    return None
                parts.append(float(part))  # (float32, exact as a Python float)
            else:
                parts.append(np.cumsum(v * v, dtype=np.float64)[-1])
        # each part rounded to float32 once, then the float32 adds in order (float32 cumsum: sequential)
        total = np.sqrt(np.cumsum(np.array(parts, np.float64).astype(np.float32))[-1])
        coef = np.minimum(np.float32(max_norm) / np.float32(total + np.float32(1e-6)), np.float32(1.0))
        scaled = {id(g): v * coef for g, v in zip(grads, values)}
    for p in params:
        g = p.grad
        if g is not None and id(g) in scaled:
            p.grad = _from_numpy(scaled[id(g)], float32, device, False)
    return _from_numpy(np.asarray(total, np.float32), float32, device, False)


def clip_grad_value_(parameters: Iterable[Tensor] | Tensor, clip_value: float, foreach: bool | None = None) -> None:
    """Clamp every gradient element to ``[-clip_value, clip_value]`` (graph op; NaN comes out
    clamped, not NaN: ggml's clamp). ``foreach`` is accepted and ignored.

    >>> import ggmlgrad as gg
    >>> w = gg.tensor([1.0, 1.0], requires_grad=True)
    >>> (w * gg.tensor([-3.0, 0.5])).sum().backward()
    >>> clip_grad_value_([w], 1.0); w.grad.tolist()
    [-1.0, 0.5]
    """
    params = _params(parameters)
    v = float(clip_value)
    if not v >= 0:
        raise ValueError(f"clip_grad_value_: clip_value must be non-negative, got {clip_value}")
    with no_grad():
        for p in params:
            g = p.grad
            if g is None:
                continue
            c = op.clamp(_f32(g), lo=-v, hi=v)
            p.grad = c if g.dtype is float32 else op.cast(c, dtype=g.dtype)


from . import rnn  # noqa: E402  (gg.nn.utils.rnn: packed sequences, torch's module path)
