"""Datasets: anything with ``__len__`` and ``__getitem__``; :class:`TensorDataset` over equal-length arrays."""
from __future__ import annotations

import numpy as np

from ..engine import int32
from ..tensor import Tensor, tensor


class Dataset:
    """Base class (optional: the loader accepts any object with ``__len__`` and ``__getitem__``)."""

    def __len__(self) -> int:
        raise NotImplementedError

    def __getitem__(self, index):
        raise NotImplementedError


def _host(x, i: int) -> np.ndarray:
    if isinstance(x, Tensor):
        return x.detach().numpy()            # one read at construction: batches are sliced on the host
    arr = np.asarray(x)
    if arr.dtype == object or arr.dtype.kind not in "biuf":
        raise TypeError(f"TensorDataset: array {i} has dtype {arr.dtype}; expected numbers")
    return arr


def to_tensor(arr, device=None) -> Tensor:
    """Host values as a tensor: floats float32 (float16 stays float16), integers int32 (int64
    values must fit), bools float32 (ggmlgrad has no bool dtype)."""
    arr = np.asarray(arr)
    if arr.dtype.kind in "fb":
        return tensor(arr if arr.dtype in (np.float32, np.float16) else arr.astype(np.float32), device=device)
    if arr.dtype.kind in "iu":
        return tensor(arr, dtype=int32, device=device)
    raise TypeError(f"cannot make a tensor of values of dtype {arr.dtype}")


class TensorDataset(Dataset):
    """Rows of several equal-length arrays (NumPy arrays, nested lists or Tensors), indexed together.

    ``ds[i]`` is a tuple of tensors (as torch's); the rows stay on the host until indexed, and
    :class:`DataLoader` slices whole batches from them.

    >>> import numpy as np, ggmlgrad as gg
    >>> ds = gg.data.TensorDataset(np.zeros((3, 2)), np.array([0, 1, 2]))
    >>> len(ds), int(ds[1][1]), ds[1][0].shape
    (3, 1, (2,))
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

    def __getitem__(self, index) -> tuple:
        if isinstance(index, Tensor):
            index = index.numpy()
        return tuple(to_tensor(a[index]) for a in self.arrays)
