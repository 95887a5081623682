"""Graph execution through ``ggml_backend_sched``.

Each device gets one executor whose scheduler spans [the device's backend or an
accelerator such as BLAS, CPU]: a node runs on the first backend that supports
it, so matmuls go to BLAS/the GPU and ops a GPU backend lacks fall back to CPU.
"""
from __future__ import annotations

import os
import threading

from .._ggml import backend_set_threads_fn, consts, lib, new_context, new_threadpool, pointer_array, view_source
from .._ggml.accel import ACCEL
from .budget import check_graph
from .device import ACCELERATORS, Device, cpu_device
from .faults import ARMED as _FAULTS, hit as _fault
from .memory import DEVICE_LOCK
from .placement import free_sched, is_software_vulkan, reserve_compute_buffer

_INITIAL_GRAPH_SIZE = 8192
# lavapipe (Mesa 22.3): the shared scheduler's device compute buffer is allocated at this size
# up front, so that it is not freed and re-created as graphs grow (see placement.py).
_LAVAPIPE_COMPUTE_BYTES = 64 << 20
# Persistent CPU threadpools by (CPU backend, thread count). Without one, every ggml CPU compute
# creates and frees a pool (thread creation beyond one thread); a graph split between BLAS and
# the CPU pays that per CPU split: the 64-64-64-8 training step's graph (14 splits) took 232.8 µs
# with disposable pools and 224.8 µs with a persistent one.
_POOLS: dict[tuple[int, int], int] = {}
# One graph computes at a time: the backends, their thread counts and the CPU threadpools are
# shared by every graph (a capture replay on one Python thread, a drain on another). With the compiled
# accelerator, its lock (threading.Lock's methods), which its planned compute takes without a Python call.
COMPUTE_LOCK = ACCEL.ComputeLock() if ACCEL is not None else threading.Lock()


def _use_pool(cpu_backend: int, n: int) -> None:
    if not hasattr(lib, "backend_cpu_set_threadpool"):
        return
    pool = _POOLS.get((cpu_backend, n))
    if pool is None:
        pool = _POOLS[(cpu_backend, n)] = new_threadpool(n)
    if pool:
        lib.backend_cpu_set_threadpool(cpu_backend, pool)


def _forget_pools() -> None:
    """In a forked child the pools' worker threads do not exist: computing with them would wait
    forever. The child starts over (the parent's pools are not freed: their threads are the parent's),
    and a compute lock held by one of the parent's other threads is released: that thread is gone."""
    if COMPUTE_LOCK.locked():
        COMPUTE_LOCK.release()
    if hasattr(DEVICE_LOCK, "_at_fork_reinit"):   # (CPython's RLock) unlocked, whoever held it
        DEVICE_LOCK._at_fork_reinit()
    _POOLS.clear()
    for ex in _EXECUTORS.values():
        ex._thread_config = (0, 0)
        ex.threads, ex.last_accelerated = 0, None  # a plan must call set_threads again
        if hasattr(lib, "backend_cpu_set_threadpool"):
            lib.backend_cpu_set_threadpool(ex.cpu_backend, None)


class Executor:
    def __init__(self, device: Device):
        self.device = device
        cpu = cpu_device()
        self.cpu_backend = cpu.backend
        backends = []
        self.thread_setters = []  # (backend, setter) for every backend that takes a thread count
        if device.kind != "cpu":
            backends.append(device.backend)
        else:
            for acc in ACCELERATORS:
                b = lib.backend_dev_init(acc, None)
                if b:
                    backends.append(b)
                    setter = backend_set_threads_fn(lib.backend_dev_backend_reg(acc))
                    if setter is not None:
                        self.thread_setters.append((b, setter))
        backends.append(self.cpu_backend)
        self.backends = backends
        self.backend_names = [lib.backend_name(b).decode() for b in backends]
        self.sched = 0
        self.graph_size = 0
        self._empty = self._empty_ctx = 0   # an empty graph: see compute
        self.threads = 0
        self.last_accelerated = None  # set_threads's last ``accelerated`` (a plan skips the call when both match)
        self._thread_config = (0, 0)

    def _ensure_sched(self, graph_size: int) -> None:
        if self.sched and graph_size <= self.graph_size:
            return
        if self.sched:
            free_sched(self.sched, self.device)
        size = _INITIAL_GRAPH_SIZE
        while size < graph_size:
            size *= 2
        self._arr, addr = pointer_array(self.backends)
        self.sched = lib.backend_sched_new(addr, None, len(self.backends), size, False, True)
        if not self.sched:
            raise RuntimeError("ggmlgrad: ggml_backend_sched_new failed")
        self.graph_size = size
        if is_software_vulkan(self.device):
            reserve_compute_buffer(self.sched, _LAVAPIPE_COMPUTE_BYTES)

    def _empty_graph(self) -> int:
        g = self._empty
        if not g:
            self._empty_ctx = new_context(lib.graph_overhead_custom(16, False) + 1024)
            if not self._empty_ctx:
                raise MemoryError("ggmlgrad: ggml_init failed for a graph context")
            g = self._empty = lib.new_graph_custom(self._empty_ctx, 16, False)
        return g

    def new_sched(self, graph_size: int) -> tuple[int, object]:
        """A private scheduler over this executor's backends, for a graph that is allocated once
        and computed many times (cached plans, capture recordings). Returns (sched, keep-alive);
        free it with ``placement.free_sched``."""
        arr, addr = pointer_array(self.backends)
        sched = lib.backend_sched_new(addr, None, len(self.backends), graph_size, False, True)
        if not sched:
            raise MemoryError("ggmlgrad: ggml_backend_sched_new failed")
        return sched, arr

    def set_threads(self, n: int, accelerated: bool | None = None) -> None:
        """Give ``n`` threads to the backend that does a graph's heavy work.

        With an accelerator such as BLAS in the scheduler, threads go to ONE of the two: ggml's
        CPU threads spin at their barriers while BLAS runs its own threads, and on 2 cores a
        784-256-10 step took 54 ms with both at 2 threads against 1.3 ms with BLAS alone at 2.
        ``accelerated``: whether the graph has nodes on the accelerator (None: unknown, assume so).
        """
        if self.thread_setters and n > 1:
            cpu_n, acc_n = (1, n) if accelerated is not False else (n, 1)
        else:
            cpu_n = acc_n = n
        if (cpu_n, acc_n) != self._thread_config:
            if cpu_n != self._thread_config[0]:
                _use_pool(self.cpu_backend, cpu_n)
            lib.backend_cpu_set_n_threads(self.cpu_backend, cpu_n)
            for b, setter in self.thread_setters:
                setter(b, acc_n)
            self._thread_config = (cpu_n, acc_n)
        self.threads = n
        self.last_accelerated = accelerated

    def accelerated(self, sched: int, graph: int, n_nodes: int) -> bool:
        """Whether an allocated graph computes on a backend other than the CPU (views, which
        every backend accepts and nobody computes, do not count)."""
        if not self.thread_setters:
            return False
        cpu = self.cpu_backend
        for i in range(n_nodes):
            node = lib.graph_node(graph, i)
            if view_source(node)[0]:
                continue
            b = lib.backend_sched_get_tensor_backend(sched, node)
            if b and b != cpu:
                return True
        return False

    def compute(self, graph: int, graph_size: int, threads: int, results_bytes: int = 0) -> int:
        """Allocate intermediates and compute ``graph``; returns the ggml status (0 = success).

        MemoryError, before anything is allocated, when the intermediates (and ``results_bytes``
        just allocated for its results) do not fit in the device's memory."""
        if _FAULTS:
            _fault("compute")
        with COMPUTE_LOCK, DEVICE_LOCK:
            check_graph(self.device, graph, results_bytes)
            self._ensure_sched(graph_size)
            # This scheduler serves graphs of every shape: ggml keeps the previous graph's memory
            # layout whenever node and leaf counts match and sizes fit, whatever the topology (a
            # 10-node clamp backward's layout reused for a 10-node log_softmax backward overlapped a
            # live intermediate). Reserving an EMPTY graph forgets that layout (node counts differ),
            # so allocating this graph plans its own. Never reserve ``graph`` itself and then
            # allocate it: each pass of ggml's graph splitter points the nodes' sources at copies
            # it makes in its own context for inputs from another backend (a Vulkan op reading a
            # CPU fallback's result) and the second pass starts from those stale pointers into
            # memory it has reset: wrong values, then heap corruption (lavapipe, issue 25).
            if not lib.backend_sched_reserve(self.sched, self._empty_graph()):
                return consts.STATUS_ALLOC_FAILED
            accelerated = None
            if threads > 1 and self.thread_setters:
                # Allocate now (reserve resets the split): threads go to the backend that has the
                # graph's work, as a plan's do, not to BLAS for a graph it has no node of.
                if not lib.backend_sched_alloc_graph(self.sched, graph):
                    return consts.STATUS_ALLOC_FAILED
                accelerated = self.accelerated(self.sched, graph, lib.graph_n_nodes(graph))
            self.set_threads(threads, accelerated)
            # After a reset, ggml_backend_sched_graph_compute allocates the graph itself (returning
            # GGML_STATUS_ALLOC_FAILED when it cannot) and synchronizes every backend before it
            # returns: separate alloc_graph/synchronize calls only cost two more ctypes calls.
            return lib.backend_sched_graph_compute(self.sched, graph)


_EXECUTORS: dict[int, Executor] = {}
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pools)


def executor_for(device: Device) -> Executor:
    ex = _EXECUTORS.get(device.dev_ptr)
    if ex is None:
        ex = _EXECUTORS[device.dev_ptr] = Executor(device)
    return ex
