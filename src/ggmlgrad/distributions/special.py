"""lgamma and digamma for positive arguments, composed from graph ops (ggml has neither kernel), and
the standard gamma's pathwise (implicit) derivative, on the host.

``lgamma(x) = lgamma(x + 6) - sum(log(x + k), k < 6)`` with Stirling's series at ``x + 6`` (its next
term is below 2e-9); ``digamma`` likewise. Both are differentiable compositions, so
``d lgamma / dx`` is the derivative of that series: digamma to float32 rounding.

>>> import ggmlgrad as gg, math
>>> round(lgamma(gg.tensor([4.5])).item(), 5) == round(math.lgamma(4.5), 5)
True
"""
from __future__ import annotations

import math

import numpy as np

from ..tensor import Tensor

_SHIFT = 6
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def lgamma(x: Tensor) -> Tensor:
    """log Gamma(x) for x > 0 (graph ops; see the module docstring)."""
    z = x + float(_SHIFT)
    shift = x.log()
    for k in range(1, _SHIFT):
        shift = shift + (x + float(k)).log()
    zi = z.reciprocal()
    zi2 = zi * zi
    tail = zi * (1.0 / 12 + zi2 * (-1.0 / 360 + zi2 * (1.0 / 1260)))
    return (z - 0.5) * z.log() - z + _HALF_LOG_2PI + tail - shift


def digamma(x: Tensor) -> Tensor:
    """d/dx log Gamma(x) for x > 0 (graph ops)."""
    z = x + float(_SHIFT)
    shift = x.reciprocal()
    for k in range(1, _SHIFT):
        shift = shift + (x + float(k)).reciprocal()
    zi = z.reciprocal()
    zi2 = zi * zi
    tail = zi2 * (-1.0 / 12 + zi2 * (1.0 / 120 + zi2 * (-1.0 / 252 + zi2 * (1.0 / 240))))
    return z.log() - zi * 0.5 + tail - shift


def log_beta(a: Tensor, b: Tensor) -> Tensor:
    """log B(a, b) = lgamma(a) + lgamma(b) - lgamma(a + b)."""
    return lgamma(a) + lgamma(b) - lgamma(a + b)


# ---------------------------------------------------------------------- host side: sampling
_lgamma64 = np.frompyfunc(math.lgamma, 1, 1)


def _log_gamma64(a: np.ndarray) -> np.ndarray:
    return _lgamma64(a).astype(np.float64)


def gamma_cdf(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The regularised lower incomplete gamma P(a, x) in float64: the series below ``a + 1``, the
    continued fraction (modified Lentz) above."""
    a, x = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(x, np.float64))
    out = np.empty(a.shape, np.float64)
    log_front = -x + a * np.log(np.maximum(x, 1e-300)) - _log_gamma64(a)
    low = x < a + 1.0
    if low.any():
        aa, xx = a[low], x[low]
        term = 1.0 / aa
        total = term.copy()
        for n in range(1, 2000):
            term = term * xx / (aa + n)
            total += term
            if np.all(np.abs(term) < np.abs(total) * 1e-16):
                break
        out[low] = total * np.exp(log_front[low])
    high = ~low
    if high.any():
        aa, xx = a[high], x[high]
        tiny = 1e-300
        b = xx + 1.0 - aa
        c = np.full_like(b, 1.0 / tiny)
        d = 1.0 / b
        h = d.copy()
        for i in range(1, 2000):
            an = -i * (i - aa)
            b = b + 2.0
            d = an * d + b
            d = np.where(np.abs(d) < tiny, tiny, d)
            c = b + an / c
            c = np.where(np.abs(c) < tiny, tiny, c)
            d = 1.0 / d
            delta = d * c
            h = h * delta
            if np.all(np.abs(delta - 1.0) < 1e-16):
                break
        out[high] = 1.0 - np.exp(log_front[high]) * h
    return out


def standard_gamma_grad(alpha: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The pathwise (implicit reparameterisation) derivative ``dx/dalpha = -(dP/dalpha) / p(x)`` of
    ``Gamma(alpha, 1)`` samples ``x`` (float32), dP/dalpha by a central difference of
    :func:`gamma_cdf` in float64 (torch's ``_standard_gamma_grad`` gives the same values)."""
    a = np.asarray(alpha, np.float64)
    x64 = np.asarray(x, np.float64)
    h = np.maximum(a * 1e-5, 1e-9)
    dcdf = (gamma_cdf(a + h, x64) - gamma_cdf(a - h, x64)) / (2 * h)
    log_pdf = (a - 1.0) * np.log(x64) - x64 - _log_gamma64(a)
    grad = -dcdf / np.exp(log_pdf)
    return np.nan_to_num(grad, nan=0.0, posinf=0.0, neginf=0.0).astype(np.float32)
