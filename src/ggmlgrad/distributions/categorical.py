"""Categorical over the last axis, from logits or probabilities; Gumbel-max sampling on the device."""
from __future__ import annotations

import numpy as np

from ..engine import int32
from ..ops import op
from ..ops.shapes import broadcast_shapes
from ..tensor import Tensor, no_grad, tensor
from .distribution import Distribution, _float_tensor
from .noise import draw_noise
from ..tensor.random import gumbel_argmax_on_host


_CHECK = []


def _check_targets(*args, **kwargs):
    if not _CHECK:
        from ..nn.functional import _check_targets as check  # toolkit peer; imported late (nn imports us)
        _CHECK.append(check)
    return _CHECK[0](*args, **kwargs)

_MIN_LOGIT = -3.0e38   # log-probabilities clamped here so 0 * log(0) is 0, not NaN (as torch's finfo.min)


class Categorical(Distribution):
    """``Categorical(logits=...)`` or ``Categorical(probs=...)`` (not both); classes on the last axis.

    ``logits`` are normalised (``logits - logsumexp``), ``probs`` divided by their sum. ``sample()``
    draws ``argmax(logits + Gumbel noise)`` (int32, no gradient); ``log_prob(value)`` and
    ``entropy()`` are differentiable in the parameters. Values outside ``[0, C)`` raise ``IndexError``
    in every mode (eager: a counted read; graph mode and captures: checked after the compute).

    >>> import ggmlgrad as gg
    >>> d = gg.distributions.Categorical(probs=gg.tensor([0.25, 0.75]))
    >>> round(d.log_prob(gg.tensor(1)).item(), 4)
    -0.2877
    """

    def __init__(self, probs=None, logits=None, validate_args=None) -> None:
        if (probs is None) == (logits is None):
            raise ValueError("Categorical: pass exactly one of probs and logits")
        if probs is not None:
            p = _float_tensor(probs)
            if p.ndim == 0:
                raise ValueError("Categorical: probs must have at least one dimension")
            self.probs = p / p.sum(axis=-1, keepdim=True)
            self.logits = op.clamp(op.log(self.probs), lo=_MIN_LOGIT)
        else:
            lg = _float_tensor(logits)
            if lg.ndim == 0:
                raise ValueError("Categorical: logits must have at least one dimension")
            # Clamped like the probs path: a masked logit (-inf) must give 0 * logit = 0 in
            # log_prob and entropy, not NaN (torch gathers, and clamps in entropy).
            self.logits = op.clamp(lg - op.logsumexp(lg, axis=-1, keepdim=True), lo=_MIN_LOGIT)
            self.probs = op.softmax(lg)
        self._num_events = self.logits.shape[-1]
        super().__init__(validate_args=validate_args, batch_shape=tuple(self.logits.shape[:-1]))

    @property
    def param_shape(self) -> tuple:
        return tuple(self.logits.shape)

    @property
    def mode(self) -> Tensor:
        return op.argmax(self.probs, axis=-1)

    def sample(self, sample_shape=()) -> Tensor:
        """int32 samples of shape ``sample_shape + batch_shape`` via Gumbel-max (no gradient)."""
        shape = self._extended_shape(sample_shape) + (self._num_events,)
        if len(shape) > 4:
            raise ValueError(f"Categorical.sample: {shape} has more than 4 dimensions")
        with no_grad():
            out = gumbel_argmax_on_host(self.logits, shape)  # eager, host memory: NumPy, the same draw and bits
            if out is None:
                g = draw_noise("gumbel", shape, device=self.logits.device)
                out = op.argmax(g + self.logits, axis=-1)
        # An argmax over the classes is in range: log_prob of this very sample, unchanged since (same
        # version), needs no check (a policy's log_prob(sample()) per step skips a host read).
        self._sampled = (out, out._version)
        return out

    def log_prob(self, value) -> Tensor:
        """log p(value) with ``value`` (int32) broadcast against ``batch_shape``."""
        v = value if isinstance(value, Tensor) else tensor(np.asarray(value, dtype=np.int32), dtype=int32,
                                                            device=self.logits.device)
        if v.dtype is not int32:
            raise TypeError(f"Categorical.log_prob: value must be int32, got {v.dtype.name}")
        sampled = self.__dict__.get("_sampled")
        if sampled is None or v is not sampled[0] or v._version != sampled[1]:
            _check_targets("Categorical.log_prob", v, self._num_events, ignore_index=None)
        shape = broadcast_shapes("Categorical.log_prob", tuple(v.shape), self.batch_shape)
        if tuple(v.shape) != shape:
            v = op.broadcast_to(v.float(), shape=shape).to(int32)
        oh = op.one_hot(v, num_classes=self._num_events)
        return (oh * self.logits).sum(axis=-1)

    def entropy(self) -> Tensor:
        return -(self.probs * self.logits).sum(axis=-1)

    def __repr__(self) -> str:
        return f"Categorical(logits: {tuple(self.logits.shape)})"
