"""A pool of Ray actors that Ray restarts when they die; one call to all of them per round.

Your worker class stays plain Python (no Ray in it): ``WorkerPool`` hosts one instance per
actor, constructed as ``worker_cls(index, *args, **kwargs)``. A round (:meth:`WorkerPool.map`)
calls one method on every worker with the same arguments; each NumPy array argument is put
in the object store ONCE and read by all (a packed weight vector is one transfer per round,
not one per worker or per parameter). A worker that dies mid-round (or misses the timeout)
drops out of that round only: the round returns the others' results, and Ray restarts the
actor (``max_restarts``); the next round waits for it (``restart_timeout``) so that it takes part. An exception raised by
a worker's method or constructor is a bug, not a fault: it is raised to the caller.
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np

from ._ray import ray_module, worker_setup

__all__ = ["WorkerPool"]


class _Host:
    """The body of each actor: builds the user's worker and forwards calls to it."""

    def __init__(self, worker_cls: type, index: int, num_threads: int | None, args: tuple, kwargs: dict) -> None:
        worker_setup(num_threads)
        self.worker = worker_cls(index, *args, **kwargs)

    def ping(self) -> bool:
        return True

    def call(self, method: str, kwargs: dict, *args: Any) -> Any:
        # args travel as top-level arguments: Ray resolves object references only there
        return getattr(self.worker, method)(*args, **kwargs)


class WorkerPool:
    """``num_workers`` Ray actors each holding ``worker_cls(index, *args, **kwargs)``.

    >>> import ray, ggmlgrad as gg
    >>> _ = ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    >>> class Echo:
    ...     def __init__(self, index): self.index = index
    ...     def times(self, k): return self.index * k
    >>> pool = gg.distributed.WorkerPool(Echo, num_workers=3)
    >>> pool.map("times", 10)
    {0: 0, 1: 10, 2: 20}
    >>> pool.close(); ray.shutdown()
    """

    def __init__(self, worker_cls: type, num_workers: int, *args: Any, max_restarts: int = 3,
                 restart_timeout: float = 60.0, num_threads: int | None = 1, **kwargs: Any) -> None:
        if not isinstance(num_workers, int) or num_workers < 1:
            raise ValueError(f"WorkerPool: num_workers must be a positive int, got {num_workers!r}")
        ray = ray_module()
        # max_task_retries=0: a call in flight when its actor dies fails (the round goes on
        # without it) instead of running again on the restarted actor.
        actor = ray.remote(max_restarts=max_restarts, max_task_retries=0)(_Host)
        self.workers = [actor.remote(worker_cls, i, num_threads, args, kwargs) for i in range(num_workers)]
        self.failed_calls = 0      # calls lost to dead or late workers, over the pool's life
        self.restart_timeout = restart_timeout
        self._lost: set[int] = set()   # workers that failed the last round: waited for before the next
        self.dead: set[int] = set()    # workers whose restarts are used up: no longer called

    def map(self, method: str, *args: Any, timeout: float | None = None, **kwargs: Any) -> dict[int, Any]:
        """Call ``method(*args, **kwargs)`` on every worker; ``{worker index: result}`` of those that
        answered (within ``timeout`` seconds, if given). A late worker is killed and restarted."""
        ray = ray_module()
        self._await_restarts()
        if len(self.dead) == len(self.workers):
            raise RuntimeError(f"WorkerPool: all {len(self.workers)} workers died and used up their restarts")
        args = tuple(ray.put(a) if isinstance(a, np.ndarray) else a for a in args)
        refs = {i: w.call.remote(method, kwargs, *args) for i, w in enumerate(self.workers) if i not in self.dead}
        _, late = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout)
        out = {}
        for i, r in refs.items():
            if r in late:
                ray.kill(self.workers[i], no_restart=False)
                continue
            try:
                out[i] = ray.get(r)
            except ray.exceptions.RayActorError as e:
                if getattr(e, "actor_init_failed", False):    # a bug in the worker's constructor: not a fault to ride out
                    raise RuntimeError(f"WorkerPool: worker {i} could not be constructed: {e}") from e
                # died mid-round: Ray restarts it for the next round
        self._lost = set(refs) - set(out)
        self.failed_calls += len(self._lost)
        return out

    def _await_restarts(self) -> None:
        """Wait (up to ``restart_timeout`` s) until Ray has restarted the workers lost last round, so
        that they rejoin now: a call made while Ray still reports one unreachable would fail."""
        ray = ray_module()
        deadline = time.monotonic() + self.restart_timeout
        for i in sorted(self._lost):
            while True:
                try:
                    ray.get(self.workers[i].ping.remote(), timeout=max(deadline - time.monotonic(), 0.01))
                    break
                except ray.exceptions.ActorUnavailableError:      # not reachable yet: ask again
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.05)
                except ray.exceptions.RayActorError:              # dead for good: restarts used up
                    self.dead.add(i)
                    break
                except ray.exceptions.GetTimeoutError:            # not back in time: this round goes on without it
                    break
        self._lost = set()

    def close(self) -> None:
        """End the actors."""
        ray = ray_module()
        for w in self.workers:
            ray.kill(w)
        self.workers = []

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
