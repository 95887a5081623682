"""The executor: the engine's only caller of ggml's graph compute.

Everything the engine computes reaches ggml through :meth:`Executor.compute`, and only the drain's
run step (``Drainer.run``) calls it (tests/test_one_route.py checks both). What it computes is a
*runnable*: a cached plan (:class:`~.plans.OwnedGraph` and its kinds: an eager op's plan, a graph
plan, a capture recording's graph), bound to this run's memory by its own ``bind`` under the compute
lock, or a :class:`BuiltGraph` (the queue's nodes built for one compute, allocated by the device's
shared scheduler).
"""
from __future__ import annotations

import time

from .._ggml import lib, new_context
from ..runtime import Device, executor_for
from ..runtime.executor import COMPUTE_LOCK
from ..runtime.memory import DEVICE_LOCK
from ..runtime.faults import ARMED as _FAULTS, hit as _fault

_GRAPH_OVERHEAD: dict[int, int] = {}  # graph size → ggml_graph_overhead_custom


class ComputeFailed(RuntimeError):
    """ggml's graph compute returned a failure status (``status``)."""

    def __init__(self, status: int) -> None:
        super().__init__(f"ggml graph compute returned status {status}")
        self.status = status


class BuiltGraph:
    """The queue's built nodes as one graph, computed once (its memory is the engine's graph
    context, reused by the next one)."""

    __slots__ = ("device", "graph", "size", "results_bytes", "n_nodes")

    def __init__(self, device: Device, graph: int, size: int, results_bytes: int) -> None:
        self.device = device
        self.graph = graph
        self.size = size
        self.results_bytes = results_bytes
        self.n_nodes = lib.graph_n_nodes(graph)


class Executor:
    """One thread's executor: computes runnables, and holds the context its built graphs live in."""

    def __init__(self) -> None:
        self.graph_ctx = 0
        self.graph_ctx_size = 0

    def new_graph(self, size: int) -> int:
        """An empty graph of ``size`` nodes in this executor's graph context (the previous one's
        memory, reset)."""
        need = _GRAPH_OVERHEAD.get(size)
        if need is None:
            if len(_GRAPH_OVERHEAD) > 4096:
                _GRAPH_OVERHEAD.clear()
            need = _GRAPH_OVERHEAD[size] = lib.graph_overhead_custom(size, False) + 1024
        if need > self.graph_ctx_size:
            if self.graph_ctx:
                lib.free(self.graph_ctx)
            self.graph_ctx_size = max(need, 2 * self.graph_ctx_size)
            self.graph_ctx = new_context(self.graph_ctx_size)
        else:
            lib.reset(self.graph_ctx)
        return lib.new_graph_custom(self.graph_ctx, size, False)

    def free(self) -> None:
        if self.graph_ctx:
            lib.free(self.graph_ctx)
            self.graph_ctx = 0

    def compute(self, plan, threads: int, args: tuple = ()):
        """Compute ``plan`` once; returns what its ``bind(*args)`` returned (a plan picks memory
        for its results there). Raises :class:`ComputeFailed` on a ggml failure status."""
        if type(plan) is BuiltGraph:
            status = executor_for(plan.device).compute(plan.graph, plan.size, threads, plan.results_bytes)
            got = None
        else:
            # Threads share plans: rebinding and computing go together, under the one compute lock.
            with COMPUTE_LOCK, DEVICE_LOCK:
                got = plan.bind(*args)
                if _FAULTS:
                    _fault("compute")
                ex = plan.executor
                if plan.tuner is None:
                    # The thread count alone is not enough to compare (the split between BLAS and the
                    # CPU depends on the graph): both must match to skip the call (an op plan runs per op)
                    if ex.threads != threads or ex.last_accelerated is not plan.accelerated:
                        ex.set_threads(threads, plan.accelerated)
                    status = _graph_compute(plan.sched, plan.graph)
                else:
                    status = _tuned_compute(plan, ex)
        if status != 0:
            raise ComputeFailed(status)
        return got


# ggml's compute of an allocated graph (a module attribute: tests make it report a failure status)
_graph_compute = lib.backend_sched_graph_compute


def _tuned_compute(plan, ex) -> int:
    """Compute a plan whose tuner is still measuring which thread count pays (it picks the count);
    the caller holds ``COMPUTE_LOCK``. Returns the ggml status."""
    threads = plan.tuner.pick()
    ex.set_threads(threads, plan.accelerated)
    t0 = time.perf_counter()
    status = _graph_compute(plan.sched, plan.graph)
    plan.tuner.record(threads, time.perf_counter() - t0)
    return status
