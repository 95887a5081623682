"""Laplace(loc, scale) with reparameterised sampling."""
from __future__ import annotations

import math

from ..tensor import Tensor, no_grad
from .distribution import Distribution, _float_tensor, broadcast_params
from .noise import draw_noise

_F32_EPS = 1.1920928955078125e-07


class Laplace(Distribution):
    """Laplace distributions; ``rsample()`` is ``loc - scale sign(u) log(1 - |u|)`` for u uniform on
    (-1, 1), as torch's.

    >>> import ggmlgrad as gg
    >>> d = gg.distributions.Laplace(gg.tensor([0.0]), gg.tensor([1.0]))
    >>> round(d.log_prob(gg.tensor([1.0])).item(), 4)
    -1.6931
    """

    has_rsample = True

    def __init__(self, loc, scale, validate_args=None) -> None:
        like = loc if isinstance(loc, Tensor) else scale if isinstance(scale, Tensor) else None
        self.loc, self.scale = broadcast_params(_float_tensor(loc, like), _float_tensor(scale, like))
        super().__init__(validate_args=validate_args, batch_shape=tuple(self.loc.shape))

    @property
    def mean(self) -> Tensor:
        return self.loc

    @property
    def mode(self) -> Tensor:
        return self.loc

    @property
    def variance(self) -> Tensor:
        return self.scale * self.scale * 2.0

    @property
    def stddev(self) -> Tensor:
        return self.scale * math.sqrt(2.0)

    def rsample(self, sample_shape=()) -> Tensor:
        u01 = draw_noise("uniform", self._extended_shape(sample_shape), device=self.loc.device)
        u = u01 * (2.0 - _F32_EPS) + (_F32_EPS - 1.0)          # uniform on [eps - 1, 1), as torch
        return self.loc - self.scale * u.sign() * (1.0 - u.abs()).log()

    def sample(self, sample_shape=()) -> Tensor:
        with no_grad():
            return self.rsample(sample_shape)

    def log_prob(self, value) -> Tensor:
        v = _float_tensor(value, self.loc)
        return -(self.scale * 2.0).log() - (v - self.loc).abs() / self.scale

    def cdf(self, value) -> Tensor:
        v = _float_tensor(value, self.loc)
        d = v - self.loc
        return 0.5 - 0.5 * d.sign() * ((-d.abs() / self.scale).exp() - 1.0)

    def entropy(self) -> Tensor:
        return (self.scale * 2.0).log() + 1.0
