"""OneHotCategorical: a Categorical whose samples and values are one-hot vectors."""
from __future__ import annotations

from ..nn import functional as F
from ..tensor import Tensor, no_grad
from .categorical import Categorical
from .distribution import Distribution, _float_tensor


class OneHotCategorical(Distribution):
    """Categorical over the last axis with one-hot (float) samples.

    >>> import ggmlgrad as gg
    >>> d = gg.distributions.OneHotCategorical(probs=gg.tensor([0.25, 0.75]))
    >>> d.sample().shape, round(d.log_prob(gg.tensor([0.0, 1.0])).item(), 4)
    ((2,), -0.2877)
    """

    def __init__(self, probs=None, logits=None, validate_args=None) -> None:
        self._categorical = Categorical(probs=probs, logits=logits)
        n = self._categorical._num_events
        super().__init__(validate_args=validate_args, batch_shape=self._categorical.batch_shape, event_shape=(n,))

    @property
    def probs(self) -> Tensor:
        return self._categorical.probs

    @property
    def logits(self) -> Tensor:
        return self._categorical.logits

    @property
    def mean(self) -> Tensor:
        return self.probs

    @property
    def mode(self) -> Tensor:
        return F.one_hot(self._categorical.mode, num_classes=self.event_shape[0]).float()

    @property
    def variance(self) -> Tensor:
        return self.probs * (1.0 - self.probs)

    def sample(self, sample_shape=()) -> Tensor:
        with no_grad():
            idx = self._categorical.sample(sample_shape)
            return F.one_hot(idx, num_classes=self.event_shape[0]).float()

    def log_prob(self, value) -> Tensor:
        """The log-probability of the class each one-hot ``value`` marks (its argmax, as torch)."""
        v = _float_tensor(value, self.logits)
        return self._categorical.log_prob(v.argmax(-1))

    def entropy(self) -> Tensor:
        return self._categorical.entropy()
