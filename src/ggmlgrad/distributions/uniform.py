"""Uniform(low, high) with reparameterised sampling."""
from __future__ import annotations

from ..tensor import Tensor, no_grad
from .distribution import Distribution, _float_tensor, broadcast_params
from .noise import draw_noise


class Uniform(Distribution):
    """Uniform distributions on ``[low, high)``; ``rsample()`` is ``low + (high - low) u``.

    >>> import ggmlgrad as gg
    >>> d = gg.distributions.Uniform(gg.tensor([0.0]), gg.tensor([4.0]))
    >>> round(d.log_prob(gg.tensor([1.0])).item(), 4), d.log_prob(gg.tensor([5.0])).item()
    (-1.3863, -inf)
    """

    has_rsample = True

    def __init__(self, low, high, validate_args=None) -> None:
        like = low if isinstance(low, Tensor) else high if isinstance(high, Tensor) else None
        self.low, self.high = broadcast_params(_float_tensor(low, like), _float_tensor(high, like))
        super().__init__(validate_args=validate_args, batch_shape=tuple(self.low.shape))

    @property
    def mean(self) -> Tensor:
        return (self.high + self.low) / 2.0

    @property
    def stddev(self) -> Tensor:
        return (self.high - self.low) / 12 ** 0.5

    @property
    def variance(self) -> Tensor:
        return (self.high - self.low) ** 2 / 12.0

    def rsample(self, sample_shape=()) -> Tensor:
        u = draw_noise("uniform", self._extended_shape(sample_shape), device=self.low.device)
        return self.low + u * (self.high - self.low)

    def sample(self, sample_shape=()) -> Tensor:
        with no_grad():
            return self.rsample(sample_shape)

    def log_prob(self, value) -> Tensor:
        v = _float_tensor(value, self.low)
        inside = (self.low <= v).float() * (self.high > v).float()
        return inside.log() - (self.high - self.low).log()

    def cdf(self, value) -> Tensor:
        v = _float_tensor(value, self.low)
        return ((v - self.low) / (self.high - self.low)).clamp(0.0, 1.0)

    def icdf(self, value) -> Tensor:
        return _float_tensor(value, self.low) * (self.high - self.low) + self.low

    def entropy(self) -> Tensor:
        return (self.high - self.low).log()
