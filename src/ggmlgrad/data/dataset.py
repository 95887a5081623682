"""Datasets: anything with ``__len__`` and ``__getitem__``; :class:`TensorDataset` over equal-length arrays."""
from __future__ import annotations

import numpy as np

from ..tensor import Tensor


class Dataset:
    """Base class (optional: the loader accepts any object with ``__len__`` and ``__getitem__``)."""

    def __len__(self) -> int:
        raise NotImplementedError

    def __getitem__(self, index):
        raise NotImplementedError


def _host(x, i: int) -> np.ndarray:
    if isinstance(x, Tensor):
        return x.numpy()            # one read at construction: batches are sliced on the host
    arr = np.asarray(x)
    if arr.dtype == object or arr.dtype.kind not in "biuf":
        raise TypeError(f"TensorDataset: array {i} has dtype {arr.dtype}; expected numbers")
    return arr


class TensorDataset(Dataset):
    """Rows of several equal-length arrays (NumPy arrays, nested lists or Tensors), indexed together.

    >>> import numpy as np, ggmlgrad as gg
    >>> ds = gg.data.TensorDataset(np.zeros((3, 2)), np.array([0, 1, 2]))
    >>> len(ds), int(ds[1][1])
    (3, 1)
    """

    def __init__(self, *arrays):
        if not arrays:
            raise ValueError("TensorDataset: needs at least one array")
        self.arrays = tuple(_host(a, i) for i, a in enumerate(arrays))
        for i, a in enumerate(self.arrays):
            if a.ndim == 0:
                raise ValueError(f"TensorDataset: array {i} is 0-d; expected rows along the first axis")
        n = len(self.arrays[0])
        bad = [(i, len(a)) for i, a in enumerate(self.arrays) if len(a) != n]
        if bad:
            raise ValueError(f"TensorDataset: size mismatch between arrays: first has {n} rows, "
                             + ", ".join(f"array {i} has {m}" for i, m in bad))

    def __len__(self) -> int:
        return len(self.arrays[0])

    def __getitem__(self, index):
        return tuple(a[index] for a in self.arrays)
