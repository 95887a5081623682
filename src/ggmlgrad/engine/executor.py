"""The executor: the engine's only caller of ggml's graph compute.

Everything the engine computes reaches ggml through :meth:`Executor.compute`, and only the drain's
run step (``Drainer.run``) calls it (tests/test_one_route.py checks both). What it computes is a
*runnable*: a cached plan (:class:`~.plans.OwnedGraph` and its kinds: an eager op's plan, a graph
plan, a capture recording's graph), bound to this run's memory by its own ``bind`` under the compute
lock, or a :class:`BuiltGraph` (the queue's nodes built for one compute, allocated by the device's
shared scheduler).

With the optional compiled accelerator (``_ggml/accel.py``: ``python -m ggmlgrad build --accel``,
off with ``GGMLGRAD_ACCEL=0``) a cached plan made while it is on (``plan.fast``) is locked, rebound,
computed and checked by one C call (``compute_planned``, when the executor's thread setting is
already the plan's), and the other plans' compute calls ggml without ctypes. Same pointers, same
kernels, same status check: the bits and counters are the pure-Python path's. An armed fault
(``runtime/faults.py``) or a replaced ``_graph_compute`` (a test seam) sends every plan down the
pure-Python path.
"""
from __future__ import annotations

import time

from .._ggml import lib, new_context
from .._ggml.accel import ACCEL, STATUS as ACCEL_STATUS
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
    fast = 0  # never run by the compiled accelerator (see OwnedGraph.fast)

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
        if plan.fast and _graph_compute is _RUN_FAST and not _FAULTS:   # (a BuiltGraph's fast is 0)
            # The compiled accelerator: lock, bind, compute and status check in one C call
            got = plan.pointers.compute_planned(plan, threads, args)
            if got is not NotImplemented:  # (NotImplemented: the thread setting must change first)
                return got
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


# ``plan.fast``: how the accelerator binds a plan (0: it does not run it; the plan's table is Python's)
OP_PLAN, BOUND_PLAN = 1, 2   # OpPlan.bind(inputs, device, nbytes, s); Plan.bind(leaf_storages, out_storages)

# ggml's compute of an allocated graph (a module attribute: tests make it report a failure status):
# the accelerator's call when it is on, else ctypes'.
_GGML_COMPUTE = lib.backend_sched_graph_compute
_ACCEL_COMPUTE = ACCEL.graph_compute if ACCEL is not None else None
_graph_compute = _ACCEL_COMPUTE or _GGML_COMPUTE
# The fast path runs while ``_graph_compute`` is this (None: the accelerator is off).
_RUN_FAST = _ACCEL_COMPUTE


def accelerator_on() -> bool:
    """Whether new plans get the compiled accelerator's table and plans run through it."""
    return _RUN_FAST is not None


def use_accelerator(on: bool) -> bool:
    """Turn the compiled accelerator on or off for plans made from now on (plans made while it was
    on keep a C table but run the pure-Python path while it is off); returns the previous state.
    RuntimeError when turning on an accelerator that is not loaded (:data:`ACCEL_STATUS` says why)."""
    global _graph_compute, _RUN_FAST
    if on and ACCEL is None:
        raise RuntimeError(f"ggmlgrad: the executor accelerator is {ACCEL_STATUS}")
    was = _RUN_FAST is not None
    _graph_compute = _ACCEL_COMPUTE if on else _GGML_COMPUTE
    _RUN_FAST = _ACCEL_COMPUTE if on else None
    return was


def _tuned_compute(plan, ex) -> int:
    """Compute a plan whose tuner is still measuring which thread count pays (it picks the count);
    the caller holds ``COMPUTE_LOCK``. Returns the ggml status."""
    threads = plan.tuner.pick()
    ex.set_threads(threads, plan.accelerated)
    t0 = time.perf_counter()
    status = _graph_compute(plan.sched, plan.graph)
    plan.tuner.record(threads, time.perf_counter() - t0)
    return status
