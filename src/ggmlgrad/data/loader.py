"""DataLoader: batches of a dataset as tensors, with torch's arguments and reproducible shuffles."""
from __future__ import annotations

from typing import Callable, Iterator

import numpy as np

from ..tensor.generator import numpy_rng
from .collate import collate, convert
from .dataset import IterableDataset, TensorDataset, to_tensor
from .sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler
from .workers import WorkerPool, iterable_batches


class _LoaderShuffle(Sampler):
    """``shuffle=True`` without a sampler: a permutation per epoch from the loader's own stream (so
    ``DataLoader.state_dict`` can resume the sequence)."""

    def __init__(self, loader: "DataLoader"):
        self.loader = loader

    def __iter__(self) -> Iterator[int]:
        return (int(i) for i in self.loader._rng.permutation(len(self.loader.dataset)))

    def __len__(self) -> int:
        return len(self.loader.dataset)


def _check_args(dataset, batch_size, shuffle, sampler, batch_sampler, drop_last, num_workers) -> None:
    if not hasattr(dataset, "__iter__" if isinstance(dataset, IterableDataset) else "__getitem__"):
        raise TypeError("DataLoader: dataset needs __len__ and __getitem__ (or is an IterableDataset)")
    if not isinstance(dataset, IterableDataset) and not hasattr(dataset, "__len__"):
        raise TypeError("DataLoader: dataset needs __len__ and __getitem__")
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer))
                                   or batch_size <= 0):
        raise ValueError(f"DataLoader: batch_size must be a positive int or None, got {batch_size!r}")
    if isinstance(num_workers, bool) or not isinstance(num_workers, (int, np.integer)) or num_workers < 0:
        raise ValueError("num_workers option should be non-negative; use num_workers=0 to disable multiprocessing.")
    if isinstance(dataset, IterableDataset) and (shuffle or sampler is not None or batch_sampler is not None):
        raise ValueError("DataLoader with IterableDataset: expected unspecified shuffle, sampler and batch_sampler "
                         "options")
    if sampler is not None and shuffle:
        raise ValueError("sampler option is mutually exclusive with shuffle")
    if batch_sampler is not None and (batch_size != 1 or shuffle or sampler is not None or drop_last):
        raise ValueError("batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and drop_last")


class DataLoader:
    """Iterate over ``dataset`` in batches, as tensors, with torch's arguments.

    ``DataLoader(dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None, num_workers=0,
    collate_fn=None, pin_memory=False, drop_last=False, timeout=0, worker_init_fn=None,
    multiprocessing_context=None, generator=None, *, prefetch_factor=None, persistent_workers=False,
    seed=None, device=None)``.

    Float data becomes float32 (float16 stays float16), integers int32, by the dtype rule. A
    :class:`TensorDataset` with the default collate is sliced with one fancy index per array per batch;
    other datasets are read sample by sample and collated (:func:`default_collate`; a tuple sample gives
    a list of tensors, as torch's). ``batch_size=None`` yields single samples, converted.

    ``shuffle=True`` draws a new permutation every epoch from the loader's stream, seeded with ``seed``,
    or from ``generator``, or else from ggmlgrad's generator when the loader is made, so
    ``gg.manual_seed`` makes runs reproducible. ``sampler=``/``batch_sampler=`` take any iterable of
    indices / index lists (see :mod:`ggmlgrad.data.sampler`).

    ``num_workers=N`` reads samples in N worker processes (spawned; see :mod:`ggmlgrad.data.workers`)
    that keep ``prefetch_factor`` (default 2) batches each in flight; collation runs in the main
    process. ``pin_memory`` is accepted and has no effect (host memory is what the CPU computes on).

    >>> import numpy as np, ggmlgrad as gg
    >>> ds = gg.data.TensorDataset(np.arange(6.0))
    >>> [b[0].tolist() for b in gg.data.DataLoader(ds, batch_size=4)]
    [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0]]
    """

    def __init__(self, dataset, batch_size: int | None = 1, shuffle: bool | None = None, sampler=None,
                 batch_sampler=None, num_workers: int = 0, collate_fn: Callable | None = None,
                 pin_memory: bool = False, drop_last: bool = False, timeout: float = 0,
                 worker_init_fn: Callable | None = None, multiprocessing_context=None, generator=None, *,
                 prefetch_factor: int | None = None, persistent_workers: bool = False,
                 pin_memory_device: str = "", in_order: bool = True, seed: int | None = None, device=None):
        _check_args(dataset, batch_size, shuffle, sampler, batch_sampler, drop_last, num_workers)
        if num_workers == 0 and (prefetch_factor is not None or persistent_workers):
            raise ValueError("prefetch_factor and persistent_workers need num_workers > 0 (multiprocessing)")
        self.dataset = dataset
        self.batch_size = None if batch_size is None else int(batch_size)
        self.drop_last = bool(drop_last)
        self.shuffle = bool(shuffle)
        self.num_workers = int(num_workers)
        self.collate_fn = collate_fn
        self.pin_memory = bool(pin_memory)
        self.timeout = float(timeout)
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.prefetch_factor = 2 if prefetch_factor is None and num_workers else prefetch_factor
        self.persistent_workers = bool(persistent_workers)
        self.device = device
        self.generator = generator
        self._rng = np.random.default_rng(seed) if seed is not None else numpy_rng(generator)
        self.seed = seed
        self._pool: WorkerPool | None = None
        self.epoch = 0
        if isinstance(dataset, IterableDataset):
            self.sampler = self.batch_sampler = None
            return
        self.sampler = sampler if sampler is not None else (
            _LoaderShuffle(self) if self.shuffle else SequentialSampler(dataset))
        if batch_sampler is not None:
            self.batch_sampler = batch_sampler
        elif self.batch_size is not None:
            self.batch_sampler = BatchSampler(self.sampler, self.batch_size, self.drop_last)
        else:
            self.batch_sampler = None

    def __len__(self) -> int:
        if isinstance(self.dataset, IterableDataset):
            n = len(self.dataset)                  # TypeError when the stream has no length, as torch
            if self.batch_size is None:
                return n
            return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
        return len(self.batch_sampler if self.batch_sampler is not None else self.sampler)

    # ------------------------------------------------------------------ iteration
    def _make(self, samples, batched: bool):
        if self.collate_fn is not None:
            return self.collate_fn(samples)
        return collate(samples, self.device) if batched else convert(samples, self.device)

    def _index_stream(self):
        if self.batch_sampler is not None:
            return (list(b) for b in self.batch_sampler), True
        return iter(self.sampler), False

    def __iter__(self) -> Iterator:
        self.epoch += 1
        if isinstance(self.dataset, IterableDataset):
            yield from self._iter_stream()
            return
        indices, batched = self._index_stream()
        if self.num_workers:
            yield from self._iter_workers(indices, batched)
            return
        fast = isinstance(self.dataset, TensorDataset) and self.collate_fn is None and batched
        for idx in indices:
            if fast:
                yield [to_tensor(a[np.asarray(idx, dtype=np.int64)], self.device) for a in self.dataset.arrays]
            else:
                yield self._make([self.dataset[i] for i in idx] if batched else self.dataset[idx], batched)

    def _worker_seed(self) -> int:
        return int(self._rng.integers(0, 2**62))

    def _iter_workers(self, indices, batched: bool) -> Iterator:
        pool = self._pool or WorkerPool(self.dataset, self.num_workers, self._worker_seed(), self.worker_init_fn,
                                        self.multiprocessing_context, batched)
        try:
            for samples in pool.run(indices, self.num_workers * self.prefetch_factor, self.timeout):
                yield self._make(samples, batched)
        finally:
            if self.persistent_workers:
                self._pool = pool
            else:
                pool.close()

    def _iter_stream(self) -> Iterator:
        batched = self.batch_size is not None
        if self.num_workers:
            chunks = iterable_batches(self.dataset, self.num_workers, self._worker_seed(), self.worker_init_fn,
                                      self.multiprocessing_context, self.batch_size, self.drop_last, self.timeout)
            for samples in chunks:
                yield self._make(samples, batched)
            return
        batch = []
        for sample in self.dataset:
            if not batched:
                yield self._make(sample, False)
                continue
            batch.append(sample)
            if len(batch) == self.batch_size:
                yield self._make(batch, True)
                batch = []
        if batch and not self.drop_last:
            yield self._make(batch, True)

    def __del__(self):
        if getattr(self, "_pool", None) is not None:
            self._pool.close()

    # ------------------------------------------------------------------ resume
    def state_dict(self) -> dict:
        """The shuffle stream's state (resume a run with the same future epochs)."""
        return {"seed": self.seed, "epoch": self.epoch, "rng": self._rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        self.seed, self.epoch = state["seed"], int(state["epoch"])
        self._rng = np.random.default_rng(self.seed)
        self._rng.bit_generator.state = state["rng"]
