"""Samplers: the order in which a :class:`~ggmlgrad.data.DataLoader` visits a dataset, as torch's
``torch.utils.data`` samplers (same names, arguments and semantics; the random streams are NumPy's,
so the drawn orders differ from torch's).

>>> import ggmlgrad as gg
>>> list(gg.data.BatchSampler(gg.data.SequentialSampler(range(5)), batch_size=2, drop_last=False))
[[0, 1], [2, 3], [4]]
"""
from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np

from ..tensor import Tensor
from ..tensor.generator import numpy_rng


def _positive_int(name: str, value, *, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ValueError(f"{what}: {name} should be a positive integer value, but got {name}={value!r}")
    return int(value)


class Sampler:
    """Base class: an iterable of dataset indices (or of index lists, for batch samplers)."""

    def __init__(self, data_source=None):
        pass

    def __iter__(self) -> Iterator:
        raise NotImplementedError


class SequentialSampler(Sampler):
    """Indices ``0 .. len(data_source) - 1`` in order.

    >>> list(SequentialSampler(range(3)))
    [0, 1, 2]
    """

    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(Sampler):
    """Random indices: a permutation (``replacement=False``) or ``num_samples`` independent draws.
    Without ``replacement``, ``num_samples`` larger than the dataset takes whole permutations, as torch.

    >>> import ggmlgrad as gg
    >>> sorted(RandomSampler(range(4), generator=gg.Generator().manual_seed(0)))
    [0, 1, 2, 3]
    """

    def __init__(self, data_source, replacement: bool = False, num_samples: int | None = None, generator=None):
        if not isinstance(replacement, bool):
            raise TypeError(f"RandomSampler: replacement should be a boolean value, but got replacement={replacement!r}")
        self.data_source = data_source
        self.replacement = replacement
        self._num_samples = num_samples
        self.generator = generator
        if num_samples is not None:
            _positive_int("num_samples", num_samples, what="RandomSampler")

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else int(self._num_samples)

    def __iter__(self) -> Iterator[int]:
        n = len(self.data_source)
        rng = numpy_rng(self.generator)
        if self.replacement:
            yield from (int(i) for i in rng.integers(0, n, self.num_samples))
            return
        for _ in range(self.num_samples // n):
            yield from (int(i) for i in rng.permutation(n))
        yield from (int(i) for i in rng.permutation(n)[:self.num_samples % n])

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """The given ``indices`` in a random order (a new one each pass).

    >>> sorted(SubsetRandomSampler([3, 5, 7]))
    [3, 5, 7]
    """

    def __init__(self, indices: Sequence[int], generator=None):
        self.indices = indices
        self.generator = generator

    def __iter__(self) -> Iterator[int]:
        order = numpy_rng(self.generator).permutation(len(self.indices))
        return (self.indices[int(i)] for i in order)

    def __len__(self) -> int:
        return len(self.indices)


class WeightedRandomSampler(Sampler):
    """``num_samples`` indices drawn with probabilities proportional to ``weights`` (torch's rules:
    weights must be non-negative and finite with a positive sum; without replacement ``num_samples``
    may not exceed the number of non-zero weights).

    >>> s = WeightedRandomSampler([0.0, 1.0, 0.0], num_samples=3)
    >>> list(s)
    [1, 1, 1]
    """

    def __init__(self, weights, num_samples: int, replacement: bool = True, generator=None):
        _positive_int("num_samples", num_samples, what="WeightedRandomSampler")
        if not isinstance(replacement, bool):
            raise ValueError(f"WeightedRandomSampler: replacement should be a boolean value, but got replacement={replacement!r}")
        w = (weights.detach().numpy() if isinstance(weights, Tensor) else np.asarray(weights)).astype(np.float64)
        if w.ndim != 1:
            raise ValueError(f"WeightedRandomSampler: weights should be a 1-d sequence but given weights have shape {w.shape}")
        if not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
            raise RuntimeError("WeightedRandomSampler: invalid multinomial distribution (weights must be "
                               "finite, non-negative and sum to a positive value)")
        if not replacement and num_samples > np.count_nonzero(w):
            raise RuntimeError("WeightedRandomSampler: cannot sample n_sample > prob_dist.size(-1) samples "
                               "without replacement")
        self.weights = w
        self.num_samples = int(num_samples)
        self.replacement = replacement
        self.generator = generator

    def __iter__(self) -> Iterator[int]:
        rng = numpy_rng(self.generator)
        draws = rng.choice(len(self.weights), size=self.num_samples, replace=self.replacement,
                           p=self.weights / self.weights.sum())
        return (int(i) for i in draws)

    def __len__(self) -> int:
        return self.num_samples


class BatchSampler(Sampler):
    """Lists of ``batch_size`` indices from ``sampler``; ``drop_last`` drops a final short list.

    >>> list(BatchSampler(range(5), batch_size=2, drop_last=True))
    [[0, 1], [2, 3]]
    """

    def __init__(self, sampler, batch_size: int, drop_last: bool):
        self.batch_size = _positive_int("batch_size", batch_size, what="BatchSampler")
        if not isinstance(drop_last, bool):
            raise ValueError(f"BatchSampler: drop_last should be a boolean value, but got drop_last={drop_last!r}")
        self.sampler = sampler
        self.drop_last = drop_last

    def __iter__(self) -> Iterator[list]:
        batch: list = []
        for idx in self.sampler:
            batch.append(idx)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
