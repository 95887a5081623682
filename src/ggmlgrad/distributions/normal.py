"""Normal(loc, scale) with reparameterised sampling."""
from __future__ import annotations

import math

from ..ops import op
from ..ops.shapes import broadcast_shapes
from ..tensor import Tensor, no_grad
from .distribution import Distribution, _float_tensor
from .noise import draw_noise

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


class Normal(Distribution):
    """Normal distributions with mean ``loc`` and standard deviation ``scale`` (broadcast together).

    ``rsample()`` is ``loc + scale * eps`` with eps ~ N(0, 1) from the seeded generator, so gradients
    flow to ``loc`` and ``scale``; ``sample()`` is the same without gradient.

    >>> import ggmlgrad as gg
    >>> d = gg.distributions.Normal(gg.tensor([0.0]), gg.tensor([2.0]))
    >>> round(d.log_prob(gg.tensor([0.0])).item(), 4)
    -1.6121
    """

    has_rsample = True

    def __init__(self, loc, scale, validate_args=None) -> None:
        like = loc if isinstance(loc, Tensor) else scale if isinstance(scale, Tensor) else None
        self.loc = _float_tensor(loc, like)
        self.scale = _float_tensor(scale, like)
        shape = broadcast_shapes("Normal", tuple(self.loc.shape), tuple(self.scale.shape))
        super().__init__(validate_args=validate_args, batch_shape=shape)

    @property
    def mean(self) -> Tensor:
        return self._full(self.loc)

    @property
    def mode(self) -> Tensor:
        return self.mean

    @property
    def stddev(self) -> Tensor:
        return self._full(self.scale)

    @property
    def variance(self) -> Tensor:
        return self._full(op.square(self.scale))

    def _full(self, t: Tensor) -> Tensor:
        return t if tuple(t.shape) == self.batch_shape else op.broadcast_to(t, shape=self.batch_shape)

    def rsample(self, sample_shape=()) -> Tensor:
        """``loc + scale * eps`` of shape ``sample_shape + batch_shape`` (differentiable)."""
        shape = self._extended_shape(sample_shape)
        eps = draw_noise("normal", shape, device=self.loc.device)
        return self.loc + self.scale * eps

    def sample(self, sample_shape=()) -> Tensor:
        with no_grad():
            return self.rsample(sample_shape)

    def log_prob(self, value) -> Tensor:
        v = _float_tensor(value, self.loc)
        z = (v - self.loc) / self.scale
        return op.square(z) * -0.5 - op.log(self.scale) - _HALF_LOG_2PI

    def entropy(self) -> Tensor:
        return self._full(op.log(self.scale) + (0.5 + _HALF_LOG_2PI))

    def cdf(self, value) -> Tensor:
        raise NotImplementedError("Normal.cdf: needs erf, which ggmlgrad does not have yet")

    def __repr__(self) -> str:
        return f"Normal(loc: {tuple(self.loc.shape)}, scale: {tuple(self.scale.shape)})"
