"""Allreduce (sum) of one flat float32 array per worker, over Ray's object store.

The driver submits the whole exchange as one dependency graph of actor calls (Ray passes
each result on as an object reference), so it never holds the data; the workers'
methods below do the adding. Both orders give every worker bit-identical sums: each
element is added up once, in a fixed order, and then copied.

- ``tree``: pairwise sums in ``ceil(log2 N)`` rounds, the total then read by every worker.
  Few rounds: it wins where each round costs a fixed latency (one machine, small arrays).
- ``ring``: reduce-scatter then allgather of N chunks, ``2 (N - 1)`` rounds in which every
  worker sends ``1/N`` of the array: it wins where bandwidth is the limit (large arrays
  across machines).

``scripts/ray_scaling.py`` measures both; see the README's "Scaling out" section.
"""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["tree_allreduce", "ring_allreduce", "ReduceMixin"]


class ReduceMixin:
    """The worker side: ``self._flat`` is this worker's array (set by the worker before the exchange)."""

    _flat: np.ndarray

    def reduce_add(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return a + b

    def ring_chunk(self, c: int, n: int) -> np.ndarray:
        return np.array_split(self._flat, n)[c]

    def ring_reduce(self, c: int, n: int, incoming: np.ndarray) -> np.ndarray:
        """Add the neighbour's partial sum of chunk ``c`` into mine; return it (the next send)."""
        mine = np.array_split(self._flat, n)[c]
        mine += incoming
        return mine

    def ring_copy(self, c: int, n: int, incoming: np.ndarray) -> np.ndarray:
        """Take the finished chunk ``c``; pass it on."""
        np.array_split(self._flat, n)[c][:] = incoming
        return incoming


def tree_allreduce(workers: list, refs: list) -> Any:
    """Object reference of the sum of ``refs`` (one per worker), added pairwise by the workers.

    >>> class W:
    ...     class _M:
    ...         def __init__(self, f): self.remote = f
    ...     def __init__(self): self.reduce_add = W._M(lambda a, b: a + b)
    >>> tree_allreduce([W(), W(), W()], [1, 2, 4])     # works on plain values too
    7
    """
    refs = list(refs)
    step = 1
    while step < len(refs):
        for i in range(0, len(refs) - step, 2 * step):
            refs[i] = workers[i].reduce_add.remote(refs[i], refs[i + step])
        step *= 2
    return refs[0]


def ring_allreduce(workers: list, ready: list) -> list:
    """Run a ring allreduce of the workers' ``_flat`` arrays; returns the last call of each worker
    (wait on them, then every worker's ``_flat`` holds the sum). ``ready[i]``: a reference that
    worker ``i``'s ``_flat`` is set (a call submitted before; actor calls run in order)."""
    n = len(workers)
    if n == 1:
        return list(ready)
    # Step 0: worker i sends its chunk i. In reduce step s, worker i + 1 adds chunk (i - s) mod n.
    sent = [w.ring_chunk.remote(i, n) for i, w in enumerate(workers)]
    for s in range(n - 1):
        sent = [workers[(i + 1) % n].ring_reduce.remote((i - s) % n, n, sent[i]) for i in range(n)]
        sent = sent[-1:] + sent[:-1]        # sent[j]: what worker j sends next
    # Worker j now holds the finished chunk (j + 1) mod n and sends it round.
    for s in range(n - 1):
        sent = [workers[(i + 1) % n].ring_copy.remote((i + 1 - s) % n, n, sent[i]) for i in range(n)]
        sent = sent[-1:] + sent[:-1]
    return sent
