"""Bijective transforms for :class:`~ggmlgrad.distributions.TransformedDistribution` (torch's
``torch.distributions.transforms`` names): Tanh, Sigmoid, Exp, Affine, and their composition."""
from __future__ import annotations

import math

from ..nn import functional as F
from ..tensor import Tensor
from .distribution import _float_tensor
from .independent import sum_rightmost

_F32_EPS = 1.1920928955078125e-07


class Transform:
    """``y = t(x)``, ``x = t.inv(y)``, ``t.log_abs_det_jacobian(x, y)``; ``event_dim`` says how many
    rightmost dimensions one event spans."""

    bijective = True
    event_dim = 0
    sign = 1
    _cache: tuple | None = None   # (x, y) of the last call when cache_size=1

    def __init__(self, cache_size: int = 0):
        if cache_size not in (0, 1):
            raise ValueError("cache_size must be 0 or 1")
        self._cache_size = cache_size

    def __call__(self, x: Tensor) -> Tensor:
        y = self._call(x)
        if getattr(self, "_cache_size", 0):
            self._cache = (x, y)
        return y

    def inverse_of(self, y: Tensor) -> Tensor:
        """``inv(y)``: the cached input when ``y`` is this transform's last output (cache_size=1)."""
        if self._cache is not None and self._cache[1] is y:
            return self._cache[0]
        return self._inverse(y)

    @property
    def inv(self) -> "Transform":
        return _Inverse(self)

    def _call(self, x: Tensor) -> Tensor:
        raise NotImplementedError

    def _inverse(self, y: Tensor) -> Tensor:
        raise NotImplementedError

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class _Inverse(Transform):
    def __init__(self, base: Transform):
        super().__init__(0)
        self._inv = base
        self.event_dim = base.event_dim

    @property
    def inv(self) -> Transform:
        return self._inv

    def _call(self, x):
        return self._inv.inverse_of(x)

    def _inverse(self, y):
        return self._inv._call(y)

    def log_abs_det_jacobian(self, x, y):
        return -self._inv.log_abs_det_jacobian(y, x)


class ExpTransform(Transform):
    """``y = exp(x)``."""

    def _call(self, x):
        return x.exp()

    def _inverse(self, y):
        return y.log()

    def log_abs_det_jacobian(self, x, y):
        return x


class SigmoidTransform(Transform):
    """``y = sigmoid(x)`` (the inverse clamps y into (0, 1) by float32 eps, as torch)."""

    def _call(self, x):
        return x.sigmoid()

    def _inverse(self, y):
        y = y.clamp(_F32_EPS, 1.0 - _F32_EPS)
        return y.log() - (1.0 - y).log()

    def log_abs_det_jacobian(self, x, y):
        return -F.softplus(-x) - F.softplus(x)


class TanhTransform(Transform):
    """``y = tanh(x)``; ``log|dy/dx| = 2 (log 2 - x - softplus(-2x))`` (stable, as torch). The inverse
    is atanh; with ``cache_size=1`` the inverse of the last output is the input that made it (as torch),
    so a squashed sample's log_prob never takes atanh(±1)."""

    sign = 1

    def _call(self, x):
        return x.tanh()

    def _inverse(self, y):
        return 0.5 * ((1.0 + y).log() - (1.0 - y).log())

    def log_abs_det_jacobian(self, x, y):
        return 2.0 * (math.log(2.0) - x - F.softplus(-2.0 * x))


class AffineTransform(Transform):
    """``y = loc + scale x`` (``event_dim`` rightmost dimensions form one event)."""

    def __init__(self, loc, scale, event_dim: int = 0, cache_size: int = 0):
        super().__init__(cache_size)
        self.loc, self.scale, self.event_dim = loc, scale, event_dim

    def _call(self, x):
        return x * self.scale + self.loc

    def _inverse(self, y):
        return (y - self.loc) / self.scale

    def log_abs_det_jacobian(self, x, y):
        scale = _float_tensor(self.scale, x)
        result = scale.abs().log()
        if tuple(result.shape) != tuple(x.shape):
            result = result.expand(*x.shape)
        return sum_rightmost(result, self.event_dim)


class ComposeTransform(Transform):
    """The transforms applied left to right."""

    def __init__(self, parts: list, cache_size: int = 0):
        super().__init__(cache_size)
        self.parts = list(parts)
        self.event_dim = max((p.event_dim for p in self.parts), default=0)

    def _call(self, x):
        for p in self.parts:
            x = p(x)
        return x

    def _inverse(self, y):
        for p in reversed(self.parts):
            y = p.inverse_of(y)
        return y

    def log_abs_det_jacobian(self, x, y):
        total = None
        for p in self.parts:
            nxt = p(x)
            term = sum_rightmost(p.log_abs_det_jacobian(x, nxt), self.event_dim - p.event_dim)
            total = term if total is None else total + term
            x = nxt
        return total
