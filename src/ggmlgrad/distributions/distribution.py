"""Base class: batch and event shapes, sample shapes."""
from __future__ import annotations

import numpy as np

from ..engine import float32
from ..tensor import Tensor, as_tensor


class Distribution:
    """A batch of distributions with ``batch_shape`` (and ``event_shape``, () for the scalar ones here)."""

    def __init__(self, batch_shape: tuple = (), event_shape: tuple = ()) -> None:
        self.batch_shape = tuple(batch_shape)
        self.event_shape = tuple(event_shape)

    def _extended_shape(self, sample_shape=()) -> tuple:
        if isinstance(sample_shape, int):
            sample_shape = (sample_shape,)
        shape = tuple(sample_shape) + self.batch_shape + self.event_shape
        if len(shape) > 4:
            raise ValueError(f"{type(self).__name__}: sample shape {shape} has more than 4 dimensions")
        return shape

    def sample(self, sample_shape=()) -> Tensor:
        raise NotImplementedError

    def rsample(self, sample_shape=()) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} has no reparameterised sampler (rsample)")

    def log_prob(self, value) -> Tensor:
        raise NotImplementedError

    def entropy(self) -> Tensor:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(batch_shape={self.batch_shape})"


def _float_tensor(x, like: Tensor | None = None) -> Tensor:
    if isinstance(x, Tensor):
        return x if x.dtype is float32 else x.float()
    return as_tensor(np.asarray(x, dtype=np.float32), device=like.device if like is not None else None)
