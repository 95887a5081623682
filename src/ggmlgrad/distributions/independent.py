"""Independent: reinterpret batch dimensions of a distribution as event dimensions."""
from __future__ import annotations

from ..tensor import Tensor
from .distribution import Distribution


def sum_rightmost(x: Tensor, n: int) -> Tensor:
    """``x`` summed over its last ``n`` dimensions."""
    for _ in range(n):
        x = x.sum(-1)
    return x


class Independent(Distribution):
    """The last ``reinterpreted_batch_ndims`` batch dimensions of ``base_distribution`` become event
    dimensions: ``log_prob`` and ``entropy`` sum over them (a diagonal Normal policy).

    >>> import ggmlgrad as gg
    >>> d = gg.distributions.Independent(gg.distributions.Normal(gg.zeros(4, 3), gg.ones(4, 3)), 1)
    >>> d.batch_shape, d.event_shape, d.log_prob(gg.zeros(4, 3)).shape
    ((4,), (3,), (4,))
    """

    def __init__(self, base_distribution: Distribution, reinterpreted_batch_ndims: int, validate_args=None):
        shape = base_distribution.batch_shape + base_distribution.event_shape
        if reinterpreted_batch_ndims > len(base_distribution.batch_shape):
            raise ValueError(f"Expected reinterpreted_batch_ndims <= len(base_distribution.batch_shape), actual "
                             f"{reinterpreted_batch_ndims} vs {len(base_distribution.batch_shape)}")
        event_dim = reinterpreted_batch_ndims + len(base_distribution.event_shape)
        self.base_dist = base_distribution
        self.reinterpreted_batch_ndims = reinterpreted_batch_ndims
        super().__init__(validate_args=validate_args, batch_shape=shape[:len(shape) - event_dim], event_shape=shape[len(shape) - event_dim:])

    @property
    def has_rsample(self) -> bool:
        return self.base_dist.has_rsample

    @property
    def mean(self) -> Tensor:
        return self.base_dist.mean

    @property
    def mode(self) -> Tensor:
        return self.base_dist.mode

    @property
    def variance(self) -> Tensor:
        return self.base_dist.variance

    def sample(self, sample_shape=()) -> Tensor:
        return self.base_dist.sample(sample_shape)

    def rsample(self, sample_shape=()) -> Tensor:
        return self.base_dist.rsample(sample_shape)

    def log_prob(self, value) -> Tensor:
        return sum_rightmost(self.base_dist.log_prob(value), self.reinterpreted_batch_ndims)

    def entropy(self) -> Tensor:
        return sum_rightmost(self.base_dist.entropy(), self.reinterpreted_batch_ndims)

    def __repr__(self) -> str:
        return f"Independent({self.base_dist!r}, {self.reinterpreted_batch_ndims})"
