"""DataLoader: batches of a dataset as tensors, with reproducible shuffles."""
from __future__ import annotations

import math
from typing import Iterator

import numpy as np

from ..tensor import Tensor
from .dataset import TensorDataset, to_tensor


def _to_tensor(arr: np.ndarray, device) -> Tensor:
    try:
        return to_tensor(arr, device)
    except TypeError:
        raise TypeError(f"DataLoader: cannot batch values of dtype {np.asarray(arr).dtype}") from None


def _collate(samples: list, device):
    first = samples[0]
    if isinstance(first, (tuple, list)):
        return [_collate([s[i] for s in samples], device) for i in range(len(first))]
    if isinstance(first, dict):
        return {k: _collate([s[k] for s in samples], device) for k in first}
    if isinstance(first, Tensor):
        return _to_tensor(np.stack([s.detach().numpy() for s in samples]), device)
    return _to_tensor(np.stack([np.asarray(s) for s in samples]), device)


class DataLoader:
    """Iterate over ``dataset`` in batches of ``batch_size`` rows, as tensors.

    Float data becomes float32 (float16 stays float16), integers int32. A
    :class:`TensorDataset` is sliced with one fancy index per array per batch;
    other datasets are indexed row by row and stacked. Each sample that is a
    tuple yields a list of tensors (like PyTorch's default collate).

    ``shuffle=True`` draws a new permutation every epoch (every ``iter()``) from a
    generator seeded with ``seed``; with ``seed=None`` the seed is drawn from
    ggmlgrad's generator when the loader is made, so ``gg.manual_seed`` makes runs
    reproducible too. ``drop_last`` drops a final short batch.

    >>> import numpy as np, ggmlgrad as gg
    >>> ds = gg.data.TensorDataset(np.arange(6.0))
    >>> [b[0].tolist() for b in gg.data.DataLoader(ds, batch_size=4)]
    [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0]]
    """

    def __init__(self, dataset, batch_size: int = 1, shuffle: bool = False, drop_last: bool = False,
                 seed: int | None = None, device=None):
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size <= 0:
            raise ValueError(f"DataLoader: batch_size must be a positive int, got {batch_size!r}")
        if not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
            raise TypeError("DataLoader: dataset needs __len__ and __getitem__")
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.device = device
        if seed is None:
            from ..tensor.creation import generator
            seed = int(generator().integers(0, 2**63 - 1))
        self.seed = int(seed)
        self._rng = np.random.default_rng(self.seed)
        self.epoch = 0

    def __len__(self) -> int:
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def _order(self) -> np.ndarray:
        n = len(self.dataset)
        return self._rng.permutation(n) if self.shuffle else np.arange(n)

    def __iter__(self) -> Iterator:
        order = self._order()
        self.epoch += 1
        n = len(order)
        stop = n - n % self.batch_size if self.drop_last else n
        for start in range(0, stop, self.batch_size):
            idx = order[start:start + self.batch_size]
            if isinstance(self.dataset, TensorDataset):
                yield [_to_tensor(a[idx], self.device) for a in self.dataset.arrays]
            else:
                yield _collate([self.dataset[int(i)] for i in idx], self.device)

    def state_dict(self) -> dict:
        """The shuffle generator's state (resume a run with the same future epochs)."""
        return {"seed": self.seed, "epoch": self.epoch, "rng": self._rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        self.seed, self.epoch = int(state["seed"]), int(state["epoch"])
        self._rng = np.random.default_rng(self.seed)
        self._rng.bit_generator.state = state["rng"]

