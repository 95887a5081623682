"""Gamma(concentration, rate), Beta and Dirichlet: log-densities and entropies in the graph
(:mod:`.special`), samples in the graph too (:mod:`.gamma_sampler`: they work inside ``gg.capture``),
with pathwise gradients for ``rsample`` computed on the host.
"""
from __future__ import annotations

import numpy as np

from ..tensor import Tensor, no_grad
from .distribution import Distribution, _float_tensor, broadcast_params
from .gamma_sampler import standard_gamma
from .special import digamma, lgamma, log_beta


class Gamma(Distribution):
    """Gamma distributions with shape ``concentration`` and ``rate`` (inverse scale).

    >>> import ggmlgrad as gg
    >>> d = gg.distributions.Gamma(gg.tensor([2.0]), gg.tensor([3.0]))
    >>> round(d.log_prob(gg.tensor([0.5])).item(), 4), round(d.mean.item(), 4)
    (0.0041, 0.6667)
    """

    has_rsample = True

    def __init__(self, concentration, rate, validate_args=None) -> None:
        like = concentration if isinstance(concentration, Tensor) else rate if isinstance(rate, Tensor) else None
        self.concentration, self.rate = broadcast_params(_float_tensor(concentration, like), _float_tensor(rate, like))
        super().__init__(validate_args=validate_args, batch_shape=tuple(self.rate.shape))

    @property
    def mean(self) -> Tensor:
        return self.concentration / self.rate

    @property
    def mode(self) -> Tensor:
        return ((self.concentration - 1.0) / self.rate).clamp(min=0.0)

    @property
    def variance(self) -> Tensor:
        return self.concentration / (self.rate * self.rate)

    def rsample(self, sample_shape=()) -> Tensor:
        x = standard_gamma(self.concentration, self._extended_shape(sample_shape)) / self.rate
        return x.clamp(min=float(np.finfo(np.float32).tiny))

    def sample(self, sample_shape=()) -> Tensor:
        with no_grad():
            return self.rsample(sample_shape)

    def log_prob(self, value) -> Tensor:
        v = _float_tensor(value, self.rate)
        a, b = self.concentration, self.rate
        return a * b.log() + (a - 1.0) * v.log() - b * v - lgamma(a)

    def entropy(self) -> Tensor:
        a = self.concentration
        return a - self.rate.log() + lgamma(a) + (1.0 - a) * digamma(a)


class Dirichlet(Distribution):
    """Dirichlet distributions over the last axis of ``concentration`` (the event).

    >>> import ggmlgrad as gg
    >>> d = gg.distributions.Dirichlet(gg.tensor([1.0, 2.0, 3.0]))
    >>> round(d.log_prob(gg.tensor([0.2, 0.3, 0.5])).item(), 4)
    1.5041
    """

    has_rsample = True

    def __init__(self, concentration, validate_args=None) -> None:
        self.concentration = _float_tensor(concentration)
        if self.concentration.ndim < 1:
            raise ValueError("`concentration` parameter must be at least one-dimensional.")
        super().__init__(validate_args=validate_args, batch_shape=tuple(self.concentration.shape[:-1]),
                         event_shape=tuple(self.concentration.shape[-1:]))

    @property
    def mean(self) -> Tensor:
        return self.concentration / self.concentration.sum(-1, keepdim=True)

    @property
    def variance(self) -> Tensor:
        a0 = self.concentration.sum(-1, keepdim=True)
        return self.concentration * (a0 - self.concentration) / (a0 * a0 * (a0 + 1.0))

    def rsample(self, sample_shape=()) -> Tensor:
        g = standard_gamma(self.concentration, self._extended_shape(sample_shape))
        return g / g.sum(-1, keepdim=True)

    def sample(self, sample_shape=()) -> Tensor:
        with no_grad():
            return self.rsample(sample_shape)

    def log_prob(self, value) -> Tensor:
        v = _float_tensor(value, self.concentration)
        a = self.concentration
        return ((a - 1.0) * v.log()).sum(-1) + lgamma(a.sum(-1)) - lgamma(a).sum(-1)

    def entropy(self) -> Tensor:
        a = self.concentration
        k = a.shape[-1]
        a0 = a.sum(-1)
        return lgamma(a).sum(-1) - lgamma(a0) - (k - a0) * digamma(a0) - ((a - 1.0) * digamma(a)).sum(-1)


class Beta(Distribution):
    """Beta distributions: ``Beta(concentration1, concentration0)`` (a Dirichlet over two values).

    >>> import ggmlgrad as gg
    >>> d = gg.distributions.Beta(gg.tensor([2.0]), gg.tensor([3.0]))
    >>> round(d.log_prob(gg.tensor([0.25])).item(), 4), round(d.mean.item(), 4)
    (0.5232, 0.4)
    """

    has_rsample = True

    def __init__(self, concentration1, concentration0, validate_args=None) -> None:
        like = concentration1 if isinstance(concentration1, Tensor) else \
            concentration0 if isinstance(concentration0, Tensor) else None
        self.concentration1, self.concentration0 = broadcast_params(_float_tensor(concentration1, like),
                                                                    _float_tensor(concentration0, like))
        super().__init__(validate_args=validate_args, batch_shape=tuple(self.concentration1.shape))

    @property
    def mean(self) -> Tensor:
        return self.concentration1 / (self.concentration1 + self.concentration0)

    @property
    def variance(self) -> Tensor:
        a, b = self.concentration1, self.concentration0
        total = a + b
        return a * b / (total * total * (total + 1.0))

    def rsample(self, sample_shape=()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        x = standard_gamma(self.concentration1, shape)
        y = standard_gamma(self.concentration0, shape)
        return x / (x + y)

    def sample(self, sample_shape=()) -> Tensor:
        with no_grad():
            return self.rsample(sample_shape)

    def log_prob(self, value) -> Tensor:
        v = _float_tensor(value, self.concentration1)
        a, b = self.concentration1, self.concentration0
        return (a - 1.0) * v.log() + (b - 1.0) * (1.0 - v).log() - log_beta(a, b)

    def entropy(self) -> Tensor:
        a, b = self.concentration1, self.concentration0
        return log_beta(a, b) - (a - 1.0) * digamma(a) - (b - 1.0) * digamma(b) + (a + b - 2.0) * digamma(a + b)
