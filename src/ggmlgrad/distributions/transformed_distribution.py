"""TransformedDistribution: a base distribution pushed through bijective transforms (SAC's squashed
Gaussian: ``TransformedDistribution(Normal(mu, std), [TanhTransform(cache_size=1)])``)."""
from __future__ import annotations

from ..tensor import Tensor, no_grad
from .distribution import Distribution, _float_tensor
from .independent import sum_rightmost
from .transforms import ComposeTransform, Transform


class TransformedDistribution(Distribution):
    """``y = t_n(...t_1(x))`` for ``x ~ base_distribution``; ``log_prob(y)`` subtracts each transform's
    log|det J| (summed over event dimensions), as torch's.

    >>> import ggmlgrad as gg
    >>> from ggmlgrad.distributions.transforms import TanhTransform
    >>> d = gg.distributions.TransformedDistribution(gg.distributions.Normal(gg.zeros(3), gg.ones(3)),
    ...                                              [TanhTransform(cache_size=1)])
    >>> y = d.rsample()
    >>> d.log_prob(y).shape
    (3,)
    """

    def __init__(self, base_distribution: Distribution, transforms, validate_args=None):
        if isinstance(transforms, Transform):
            transforms = [transforms]
        transforms = list(transforms)
        if not all(isinstance(t, Transform) for t in transforms):
            raise ValueError(f"transforms must be a Transform or a list of Transforms, got {transforms!r}")
        self.base_dist = base_distribution
        self.transforms = transforms
        shape = base_distribution.batch_shape + base_distribution.event_shape
        event_dim = max([len(base_distribution.event_shape)] + [t.event_dim for t in transforms])
        super().__init__(validate_args=validate_args, batch_shape=shape[:len(shape) - event_dim], event_shape=shape[len(shape) - event_dim:])

    @property
    def has_rsample(self) -> bool:
        return self.base_dist.has_rsample

    def rsample(self, sample_shape=()) -> Tensor:
        x = self.base_dist.rsample(sample_shape)
        for t in self.transforms:
            x = t(x)
        return x

    def sample(self, sample_shape=()) -> Tensor:
        with no_grad():
            x = self.base_dist.sample(sample_shape)
            for t in self.transforms:
                x = t(x)
            return x

    def log_prob(self, value) -> Tensor:
        event_dim = len(self.event_shape)
        y = value if isinstance(value, Tensor) else _float_tensor(value)
        total = None
        for t in reversed(self.transforms):
            x = t.inverse_of(y)
            term = sum_rightmost(t.log_abs_det_jacobian(x, y), event_dim - t.event_dim)
            total = -term if total is None else total - term
            y = x
        base = sum_rightmost(self.base_dist.log_prob(y), event_dim - len(self.base_dist.event_shape))
        return base if total is None else base + total

    @property
    def mean(self) -> Tensor:
        raise NotImplementedError("TransformedDistribution.mean has no closed form")


__all__ = ["TransformedDistribution", "ComposeTransform"]
