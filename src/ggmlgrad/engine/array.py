"""The engine's view of a tensor: shape, dtype, device, and where its value is.

A value is COMPUTED (its storage holds it), PENDING (its node is queued in the
current epoch; the storage holds nothing meaningful yet) or FAILED (the graph
that was to compute it failed). ``Tensor`` (layer 5) subclasses this.
"""
from __future__ import annotations

import math

from ..runtime import Device, Storage
from .dtypes import DType

COMPUTED, PENDING, FAILED = 0, 1, 2


class Array:
    __slots__ = ("shape", "dtype", "device", "numel_", "_storage", "_node", "_epoch", "_status", "_leaf",
                 "_leaf_epoch", "_error", "__weakref__")

    def _init_array(self, shape: tuple, dtype: DType, device: Device) -> None:
        self.shape = shape
        self.dtype = dtype
        self.device = device
        self.numel_ = math.prod(shape)  # element count, read on every op (a property cost ~0.2 µs)
        self._storage: Storage | None = None
        self._node = 0
        self._epoch = -1
        self._status = COMPUTED
        self._leaf = 0
        self._leaf_epoch = -1
        self._error = None

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel_ * self.dtype.itemsize

    @property
    def is_pending(self) -> bool:
        return self._status == PENDING


def ggml_ne(shape: tuple) -> list[int]:
    """NumPy shape → ggml ``ne`` (reversed, padded to 4)."""
    ne = list(reversed(shape)) or [1]
    return ne + [1] * (4 - len(ne))
