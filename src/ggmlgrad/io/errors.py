"""The error every reader raises for a file it cannot trust."""
from __future__ import annotations

import math
import mmap

import numpy as np


class CheckpointError(ValueError):
    """A checkpoint file that cannot be read: truncated, corrupt, or not in the expected format.

    The message names the file and, where known, the tensor.

    >>> import ggmlgrad as gg
    >>> issubclass(gg.io.CheckpointError, ValueError)
    True
    """


MAX_DIMS = 4        # ggml tensors have at most 4 dimensions


class Entry:
    """One tensor of a file, validated against the file length: dtype name (``None`` when ggmlgrad
    has no such dtype; ``code`` keeps the file's own name), shape, and its byte range in the file."""

    __slots__ = ("name", "dtype", "code", "shape", "begin", "end")

    def __init__(self, name: str, dtype: str | None, code, shape: tuple, begin: int, end: int):
        self.name, self.dtype, self.code, self.shape, self.begin, self.end = name, dtype, code, shape, begin, end


def check_ranges(entries: list[Entry], where: str) -> None:
    """Refuse tensors whose byte ranges overlap (each range is already inside the file)."""
    ordered = sorted((e for e in entries if e.end > e.begin), key=lambda e: e.begin)
    for a, b in zip(ordered, ordered[1:]):
        if b.begin < a.end:
            raise CheckpointError(f"{where}: tensors {a.name!r} and {b.name!r} overlap in the file "
                                  f"(bytes {a.begin}..{a.end} and {b.begin}..{b.end}; corrupt file)")


def entry_values(data: bytes | mmap.mmap, e: Entry, np_dtype: np.dtype) -> np.ndarray:
    """The entry's values as a read-only view of ``data`` (its range is already checked to lie inside)."""
    return np.frombuffer(data, dtype=np_dtype, count=math.prod(e.shape), offset=e.begin).reshape(e.shape)
