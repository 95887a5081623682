"""Base class: batch and event shapes, sample shapes."""
from __future__ import annotations

import numbers

import numpy as np

from ..engine import float32
from ..ops import op
from ..tensor import Tensor, as_tensor, no_grad


class Distribution:
    """A batch of distributions with ``batch_shape`` (and ``event_shape``, () for the scalar ones here)."""

    def __init__(self, batch_shape: tuple = (), event_shape: tuple = (), validate_args=None) -> None:
        if validate_args:
            raise NotImplementedError(f"{type(self).__name__}(validate_args=True): ggmlgrad does not validate "
                                      f"distribution arguments (it would read every value back to the host); "
                                      f"it behaves as torch with validate_args=False")
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

    has_rsample = False

    @property
    def stddev(self) -> Tensor:
        return self.variance.sqrt()

    def expand(self, batch_shape, _instance=None):
        raise NotImplementedError(f"{type(self).__name__}.expand is not supported; build the distribution "
                                  f"from parameters of the wanted shape")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(batch_shape={self.batch_shape})"


def _float_tensor(x, like: Tensor | None = None) -> Tensor:
    """``x`` as a float32 tensor; a Python number next to a tensor is filled on the device (no upload,
    so it also works inside a capture)."""
    if isinstance(x, Tensor):
        return x if x.dtype is float32 else x.float()
    if like is not None and isinstance(x, numbers.Real) and not isinstance(x, bool):
        with no_grad():
            return op.fill_like(like if like.dtype is float32 else like.float(), c=float(x))
    return as_tensor(np.asarray(x, dtype=np.float32), device=like.device if like is not None else None)


def broadcast_params(*ts: Tensor) -> tuple:
    """The parameter tensors broadcast to one shape (torch's ``broadcast_all``)."""
    from ..ops.shapes import broadcast_shapes
    shape = broadcast_shapes("distribution", *[tuple(t.shape) for t in ts])
    return tuple(t if tuple(t.shape) == shape else op.broadcast_to(t, shape=shape) for t in ts)
