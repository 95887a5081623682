"""Worker processes for ``DataLoader(num_workers=N)``: they read samples ahead while the main process
trains, as torch's workers do.

Workers are started with the ``spawn`` method by default (a fresh interpreter: ggml's thread pool and
the parent's queue are never inherited half-way through a fork), so the dataset, ``worker_init_fn``
and the script's ``__main__`` must be picklable/importable, as on torch under macOS and Windows. A
worker reads ``dataset[i]`` (or iterates an :class:`IterableDataset`), turns tensors into NumPy
arrays and sends the samples back; the main process collates them into tensors.
"""
from __future__ import annotations

import collections
import multiprocessing
import queue as queue_mod
import traceback
from typing import Iterator, NamedTuple

from .collate import to_host

_LIVENESS_POLL_S = 1.0


class WorkerInfo(NamedTuple):
    """What :func:`get_worker_info` returns inside a worker."""
    id: int
    num_workers: int
    seed: int
    dataset: object


_worker_info: WorkerInfo | None = None


def get_worker_info() -> WorkerInfo | None:
    """Inside a DataLoader worker process its :class:`WorkerInfo` (id, num_workers, seed, dataset);
    ``None`` in the main process.

    >>> get_worker_info() is None
    True
    """
    return _worker_info


class _Failure:
    """An exception raised in a worker, re-raised in the main process with the worker's traceback."""

    def __init__(self, worker_id: int, exc: BaseException):
        self.text = f"Caught {type(exc).__name__} in DataLoader worker process {worker_id}.\n" + \
            "".join(traceback.format_exception(exc))
        self.exc_type = type(exc)

    def reraise(self):
        try:
            err = self.exc_type(self.text)
        except Exception:
            err = RuntimeError(self.text)
        raise err


def _start(worker_id: int, num_workers: int, seed: int, dataset, init_fn) -> None:
    global _worker_info
    _worker_info = WorkerInfo(worker_id, num_workers, seed, dataset)
    from ..tensor.creation import manual_seed
    manual_seed(seed % 2**63)
    if init_fn is not None:
        init_fn(worker_id)


def _map_worker(dataset, tasks, results, worker_id, num_workers, seed, init_fn, batched) -> None:
    """Answer (seq, indices) tasks with (seq, samples) until a ``None`` task."""
    try:
        _start(worker_id, num_workers, seed, dataset, init_fn)
    except BaseException as e:                     # noqa: BLE001  (sent to the main process)
        results.put((-1, _Failure(worker_id, e)))
        return
    while True:
        task = tasks.get()
        if task is None:
            return
        seq, indices = task
        try:
            samples = [dataset[i] for i in indices] if batched else dataset[indices]
            results.put((seq, to_host(samples)))
        except BaseException as e:                 # noqa: BLE001
            results.put((seq, _Failure(worker_id, e)))


def _iterable_worker(dataset, results, worker_id, num_workers, seed, init_fn, batch_size, drop_last) -> None:
    """Iterate this worker's copy of the stream and send its batches (lists of samples), then ``None``."""
    try:
        _start(worker_id, num_workers, seed, dataset, init_fn)
        batch = []
        for sample in dataset:
            if batch_size is None:
                results.put((worker_id, to_host(sample)))
                continue
            batch.append(sample)
            if len(batch) == batch_size:
                results.put((worker_id, to_host(batch)))
                batch = []
        if batch and not drop_last:
            results.put((worker_id, to_host(batch)))
        results.put((worker_id, None))
    except BaseException as e:                     # noqa: BLE001
        results.put((worker_id, _Failure(worker_id, e)))


class WorkerPool:
    """``num_workers`` processes that answer index batches in order (map-style datasets)."""

    def __init__(self, dataset, num_workers: int, seed: int, init_fn, context, batched: bool):
        ctx = multiprocessing.get_context(context or "spawn")
        self.results = ctx.Queue()
        self.tasks = [ctx.Queue() for _ in range(num_workers)]
        self.procs = [ctx.Process(target=_map_worker, daemon=True,
                                  args=(dataset, self.tasks[w], self.results, w, num_workers, seed + w, init_fn, batched))
                      for w in range(num_workers)]
        for p in self.procs:
            p.start()

    def run(self, batches: Iterator, prefetch: int, timeout: float) -> Iterator:
        """Yield the samples of each index batch, in order, keeping ``prefetch`` batches in flight."""
        pending, done, next_out, seq = 0, {}, 0, 0
        batches = iter(batches)
        exhausted = False
        while True:
            while not exhausted and pending < prefetch:
                try:
                    idx = next(batches)
                except StopIteration:
                    exhausted = True
                    break
                self.tasks[seq % len(self.tasks)].put((seq, idx))
                seq, pending = seq + 1, pending + 1
            if next_out == seq and exhausted:
                return
            while next_out not in done:
                got_seq, payload = receive(self.results, self.procs, timeout)
                done[got_seq] = payload
            payload = done.pop(next_out)
            next_out, pending = next_out + 1, pending - 1
            if isinstance(payload, _Failure):
                payload.reraise()
            yield payload

    def close(self) -> None:
        for q, p in zip(self.tasks, self.procs):
            if p.is_alive():
                q.put(None)
        for p in self.procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()


def receive(results, procs, timeout: float):
    """The next result, raising if a worker died or ``timeout`` (seconds, 0 = none) passed."""
    waited = 0.0
    while True:
        try:
            got = results.get(timeout=_LIVENESS_POLL_S)
        except queue_mod.Empty:
            waited += _LIVENESS_POLL_S
            dead = [p for p in procs if p.exitcode not in (None, 0)]
            if dead:
                raise RuntimeError(f"DataLoader worker (pid(s) {', '.join(str(p.pid) for p in dead)}) exited "
                                   f"unexpectedly with exit code {dead[0].exitcode}") from None
            if timeout and waited >= timeout:
                raise RuntimeError(f"DataLoader timed out after {timeout} seconds") from None
            continue
        if got[0] == -1 and isinstance(got[1], _Failure):
            got[1].reraise()
        return got


def iterable_batches(dataset, num_workers: int, seed: int, init_fn, context, batch_size, drop_last,
                     timeout: float) -> Iterator:
    """Batches (lists of samples) from every worker's copy of an iterable dataset, taken round-robin."""
    ctx = multiprocessing.get_context(context or "spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=_iterable_worker, daemon=True,
                         args=(dataset, results, w, num_workers, seed + w, init_fn, batch_size, drop_last))
             for w in range(num_workers)]
    for p in procs:
        p.start()
    waiting = collections.defaultdict(collections.deque)
    live, turn = list(range(num_workers)), 0
    try:
        while live:
            w = live[turn % len(live)]
            while not waiting[w]:
                got_w, payload = receive(results, procs, timeout)
                waiting[got_w].append(payload)
            payload = waiting[w].popleft()
            if isinstance(payload, _Failure):
                payload.reraise()
            if payload is None:
                live.remove(w)
                continue
            turn += 1
            yield payload
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
