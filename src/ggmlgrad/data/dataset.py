"""Datasets: anything with ``__len__`` and ``__getitem__``; :class:`TensorDataset` over equal-length arrays."""
from __future__ import annotations

import numpy as np

from ..engine import int32
from ..tensor import Tensor, tensor


class Dataset:
    """Base class (optional: the loader accepts any object with ``__len__`` and ``__getitem__``).
    Like torch's, it defines no ``__len__``: a subclass says its own length."""

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


class IterableDataset(Dataset):
    """A dataset that is a stream: subclasses define ``__iter__`` (no ``__getitem__``). With
    ``DataLoader(num_workers=N)`` every worker iterates its own copy: split the stream with
    :func:`ggmlgrad.data.get_worker_info`, as in torch.

    >>> class Count(IterableDataset):
    ...     def __iter__(self):
    ...         return iter(range(3))
    >>> list(Count())
    [0, 1, 2]
    """

    def __iter__(self):
        raise NotImplementedError

    def __getitem__(self, index):
        raise TypeError(f"{type(self).__name__} is an IterableDataset: it has no __getitem__")

    def __add__(self, other):
        return ChainDataset([self, other])


class ChainDataset(IterableDataset):
    """Several iterable datasets one after the other."""

    def __init__(self, datasets):
        self.datasets = list(datasets)

    def __iter__(self):
        for d in self.datasets:
            yield from d


class Subset(Dataset):
    """The rows of ``dataset`` at ``indices``, in that order.

    >>> import numpy as np
    >>> s = Subset(TensorDataset(np.arange(5.0)), [4, 0])
    >>> len(s), float(s[0][0])
    (2, 4.0)
    """

    def __init__(self, dataset, indices):
        self.dataset = dataset
        self.indices = indices

    def __getitem__(self, idx):
        if isinstance(idx, list):
            return self.dataset[[self.indices[i] for i in idx]]
        return self.dataset[self.indices[idx]]

    def __len__(self) -> int:
        return len(self.indices)


class ConcatDataset(Dataset):
    """Several map-style datasets one after the other (negative indices count from the end).

    >>> import numpy as np
    >>> c = ConcatDataset([TensorDataset(np.zeros(2)), TensorDataset(np.ones(3))])
    >>> len(c), float(c[2][0]), c.cumulative_sizes
    (5, 1.0, [2, 5])
    """

    def __init__(self, datasets):
        self.datasets = list(datasets)
        if not self.datasets:
            raise AssertionError("datasets should not be an empty iterable")
        for d in self.datasets:
            if isinstance(d, IterableDataset):
                raise AssertionError("ConcatDataset does not support IterableDataset")
        self.cumulative_sizes = list(np.cumsum([len(d) for d in self.datasets]).astype(int).tolist())

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, idx):
        if idx < 0:
            if -idx > len(self):
                raise ValueError("absolute value of index should not exceed dataset length")
            idx = len(self) + idx
        if idx >= len(self):
            raise IndexError(f"ConcatDataset: index {idx} is out of range for length {len(self)}")
        which = int(np.searchsorted(self.cumulative_sizes, idx, side="right"))
        start = 0 if which == 0 else self.cumulative_sizes[which - 1]
        return self.datasets[which][idx - start]


def random_split(dataset, lengths, generator=None) -> list:
    """Split ``dataset`` into non-overlapping random :class:`Subset` s of the given ``lengths``:
    counts summing to ``len(dataset)``, or fractions summing to 1 (the remainder goes one row each
    to the first subsets, round-robin, as torch).

    >>> import numpy as np, ggmlgrad as gg
    >>> a, b = random_split(TensorDataset(np.arange(10.0)), [0.7, 0.3], generator=gg.Generator().manual_seed(0))
    >>> len(a), len(b), sorted(a.indices + b.indices) == list(range(10))
    (7, 3, True)
    """
    from ..tensor.generator import numpy_rng
    n = len(dataset)
    lengths = list(lengths)
    if lengths and all(isinstance(x, float) for x in lengths) and abs(sum(lengths) - 1) <= 1e-9 and sum(lengths) <= 1:
        for i, frac in enumerate(lengths):
            if frac < 0 or frac > 1:
                raise ValueError(f"Fraction at index {i} is not between 0 and 1")
        counts = [int(np.floor(n * frac)) for frac in lengths]
        for i in range(n - sum(counts)):
            counts[i % len(counts)] += 1
        lengths = counts
    if sum(lengths) != n:
        raise ValueError("Sum of input lengths does not equal the length of the input dataset!")
    perm = numpy_rng(generator).permutation(n).tolist()
    out, start = [], 0
    for length in lengths:
        out.append(Subset(dataset, perm[start:start + length]))
        start += length
    return out
