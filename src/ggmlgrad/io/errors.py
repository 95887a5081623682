"""What the two readers share: the error they raise, validated tensor entries, checked reads."""
from __future__ import annotations

import os

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


class FileBytes:
    """Byte ranges of an open file, each checked against the file's length before it is read.
    Reads, not a memory map: a file truncated by another program while it loads gives a
    CheckpointError here, where a map would crash the process (SIGBUS)."""

    def __init__(self, f, where: str, kind: str):
        self.f, self.where, self.kind = f, where, kind      # kind: "GGUF file", "safetensors file"
        self.size = os.fstat(f.fileno()).st_size

    def __len__(self) -> int:
        return self.size

    def check(self, begin: int, n: int, what: str) -> None:
        if n > self.size - begin:
            raise CheckpointError(f"{self.where}: not a valid {self.kind}: truncated in {what} (needs {n} bytes "
                                  f"at offset {begin}, the file has {self.size})")

    def read(self, begin: int, n: int, what: str) -> bytes:
        self.check(begin, n, what)
        self.f.seek(begin)
        out = self.f.read(n)
        if len(out) != n:
            raise CheckpointError(f"{self.where}: the file changed while it was read ({what})")
        return out

    def values(self, e: Entry, np_dtype: np.dtype) -> np.ndarray:
        """The entry's values in a new array (its range was checked when the header was read)."""
        out = np.empty(e.shape, np_dtype)
        if out.nbytes:
            self.check(e.begin, out.nbytes, f"tensor {e.name!r}")
            self.f.seek(e.begin)
            if self.f.readinto(memoryview(out.reshape(-1)).cast("B")) != out.nbytes:
                raise CheckpointError(f"{self.where}: the file changed while tensor {e.name!r} was read")
        return out
