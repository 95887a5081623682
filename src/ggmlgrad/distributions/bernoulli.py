"""Bernoulli(probs or logits)."""
from __future__ import annotations

from ..nn import functional as F
from ..tensor import Tensor, no_grad
from .distribution import Distribution, _float_tensor, broadcast_params
from .noise import draw_noise

_EPS = 1.1920928955078125e-07   # float32 eps: torch clamps probabilities this far from 0 and 1


class Bernoulli(Distribution):
    """Bernoulli distributions given ``probs`` or ``logits`` (not both); ``sample()`` gives float 0/1.

    >>> import ggmlgrad as gg
    >>> d = gg.distributions.Bernoulli(probs=gg.tensor([0.25]))
    >>> round(d.log_prob(gg.tensor([1.0])).item(), 4), round(d.entropy().item(), 4)
    (-1.3863, 0.5623)
    """

    has_rsample = False

    def __init__(self, probs=None, logits=None, validate_args=None) -> None:
        if (probs is None) == (logits is None):
            raise ValueError("Either `probs` or `logits` must be specified, but not both.")
        if probs is not None:
            self.probs = _float_tensor(probs)
            p = self.probs.clamp(_EPS, 1.0 - _EPS)
            self.logits = p.log() - (1.0 - p).log()
        else:
            self.logits = _float_tensor(logits)
            self.probs = self.logits.sigmoid()
        super().__init__(validate_args=validate_args, batch_shape=tuple(self.logits.shape))

    @property
    def mean(self) -> Tensor:
        return self.probs

    @property
    def variance(self) -> Tensor:
        return self.probs * (1.0 - self.probs)

    @property
    def mode(self) -> Tensor:
        return (self.probs > 0.5).float()

    def sample(self, sample_shape=()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        with no_grad():
            u = draw_noise("uniform", shape, device=self.probs.device)
            return (u < self.probs).float()

    def log_prob(self, value) -> Tensor:
        logits, v = broadcast_params(self.logits, _float_tensor(value, self.logits))
        return -F.binary_cross_entropy_with_logits(logits, v, reduction="none")

    def entropy(self) -> Tensor:
        return F.binary_cross_entropy_with_logits(self.logits, self.probs, reduction="none")
