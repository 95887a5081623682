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


# The transitions of a value, the only writes of an array's value fields outside engine/ and tensor/
# (tests/test_value_owner.py checks it): the value is the engine's (storage, pending node, failure).
def bind(a: Array, storage) -> None:
    """``a`` holds its value in ``storage`` from now on (computed; any cached leaf is stale)."""
    a._storage = storage
    a._status = COMPUTED
    a._node = 0
    a._leaf_epoch = -1


def fail(a: Array, error: str) -> None:
    """``a`` has no value; reading it raises ``error``."""
    a._status = FAILED
    a._node = 0
    a._error = error


def share_value(a: Array, src: Array) -> None:
    """``a`` takes ``src``'s value reference (the same memory, or the same failure)."""
    a._storage, a._status, a._error = src._storage, src._status, src._error
    a._leaf_epoch = -1


def forget_leaf(a: Array) -> None:
    """Drop ``a``'s cached leaf node: the next graph reads its memory anew."""
    a._leaf_epoch = -1


def cache_leaf(a: Array, node: int) -> None:
    """Make ``node`` the leaf ``a`` reads in the graph being built (a capture recording's rewrite:
    memory the recording wrote reads the node of the new value)."""
    a._leaf = node
