"""Cached single-op plans: the eager path's graph, built and allocated once per op signature.

An eager op is a one-node graph. Building it anew each call costs ~20 ggml calls (leaf headers,
the node, a graph, the scheduler's split and allocation): most of an eager op's time on small
tensors. A plan keeps all of that for one signature — the op's builder, input shapes and dtypes,
output, parameters, device and matmul precision — and a call only rebinds the leaves' and the
output's data pointers (attribute stores on ctypes cells, no ggml call) and computes with the
plan's own scheduler, which keeps its allocation between computes.

Views whose memory belongs to a leaf or the output (a transpose feeding a matmul, a slice) are
rebound too, in graph order: ggml stores a view's address, not its offset from a live source.
"""
from __future__ import annotations

import math
import os

from .._ggml import InitParams, lib, pointer_cells, view_source
from ..runtime import Device, Storage, executor_for
from .array import ggml_ne

_MAX_PLANS = int(os.environ.get("GGMLGRAD_PLAN_CACHE", "256"))
_OP_HEADROOM = 96  # most tensors one op builder may create (as in the queue)
_OVERHEAD = lib.tensor_overhead()


class Uncacheable(Exception):
    """This op's graph cannot be replayed by rebinding pointers; use the ordinary drain."""


def freeze(value):
    """A hashable, exact key for an op parameter, or raise TypeError (e.g. a tensor parameter).

    The type is part of the key (a builder may treat 1 and 1.0 differently) and so is the sign
    of a zero (``x * -0.0`` is not ``x * 0.0``).
    """
    t = type(value)
    if t is float:
        if value == 0.0 and math.copysign(1.0, value) < 0:
            return (t, "-0.0")
        return (t, value)
    if t is tuple or t is list:
        return (t, tuple(freeze(v) for v in value))
    hash(value)
    return (t, value)


def freeze_params(params: dict) -> tuple:
    if not params:
        return ()
    return tuple([(k, freeze(v)) for k, v in params.items()])


class OpPlan:
    """One op's graph over leaf headers that are pointed at each call's inputs."""

    __slots__ = ("ctx", "gctx", "graph", "sched", "_keep", "leaf_cells", "out_cells", "views", "n_nodes",
                 "executor", "nbytes")

    def __init__(self, device: Device, build, inputs, out, params: dict, out_storage: Storage):
        self.ctx = self.gctx = self.sched = 0
        self.executor = executor_for(device)
        self.nbytes = out.nbytes
        n_inputs = len(inputs)
        self.ctx = lib.init(InitParams((n_inputs + _OP_HEADROOM) * _OVERHEAD, None, True))
        if not self.ctx:
            raise MemoryError("ggmlgrad: ggml_init failed for an op plan")
        leaves = []
        for x in inputs:
            ne = ggml_ne(x.shape)
            leaf = lib.new_tensor_4d(self.ctx, x.dtype.ggml_type, ne[0], ne[1], ne[2], ne[3])
            # Memory for the scheduler's backend placement at allocation; rebound on every call.
            lib.backend_tensor_alloc(x._storage.buffer, leaf, x._storage.data)
            leaves.append(leaf)
        node = build(self.ctx, leaves, inputs, out, **params)
        if node in leaves or view_source(node)[0]:
            raise Uncacheable("the result is a view of an input")
        # The output's memory is bound per call, so the scheduler must not allocate it.
        lib.backend_tensor_alloc(out_storage.buffer, node, out_storage.data)
        size = 64
        n_tensors = lib.used_mem(self.ctx) // _OVERHEAD + 16
        while size < n_tensors:
            size *= 2
        self.gctx = lib.init(InitParams(lib.graph_overhead_custom(size, False) + 1024, None, True))
        if not self.gctx:
            raise MemoryError("ggmlgrad: ggml_init failed for an op plan's graph")
        self.graph = lib.new_graph_custom(self.gctx, size, False)
        lib.build_forward_expand(self.graph, node)
        self.n_nodes = lib.graph_n_nodes(self.graph)
        if self.n_nodes == 0:
            raise Uncacheable("empty graph")
        # Rebinding order: index 0..n-1 are the inputs, n is the output, then views in graph order.
        bases = {leaf: i for i, leaf in enumerate(leaves)}
        bases[node] = n_inputs
        views = []
        for i in range(self.n_nodes):
            t = lib.graph_node(self.graph, i)
            src, offs = view_source(t)
            if src in bases:
                data_cell, buf_cell = pointer_cells(t)
                views.append((data_cell, buf_cell, bases[src], offs))
        self.views = tuple(views)
        self.leaf_cells = tuple(pointer_cells(leaf) for leaf in leaves)
        self.out_cells = pointer_cells(node)
        self.sched, self._keep = self.executor.new_sched(size)
        if not lib.backend_sched_alloc_graph(self.sched, self.graph):
            raise MemoryError("ggmlgrad: could not allocate an op plan's intermediates")

    def run(self, inputs, out_storage: Storage, threads: int) -> int:
        """Compute into ``out_storage`` from ``inputs``' memory; returns the ggml status."""
        views = self.views
        if views:
            datas = [x._storage.data for x in inputs]
            bufs = [x._storage.buffer for x in inputs]
            datas.append(out_storage.data)
            bufs.append(out_storage.buffer)
            for (d, b), data, buf in zip(self.leaf_cells, datas, bufs):
                d.value = data
                b.value = buf
            for d, b, base, offs in views:
                d.value = datas[base] + offs
                b.value = bufs[base]
        else:
            for (d, b), x in zip(self.leaf_cells, inputs):
                s = x._storage
                d.value = s.data
                b.value = s.buffer
        d, b = self.out_cells
        d.value = out_storage.data
        b.value = out_storage.buffer
        if self.executor.threads != threads:
            self.executor.set_threads(threads)
        return lib.backend_sched_graph_compute(self.sched, self.graph)

    def free(self) -> None:
        if self.sched:
            lib.backend_sched_free(self.sched)
            self.sched = 0
        for name in ("gctx", "ctx"):
            c = getattr(self, name)
            if c:
                lib.free(c)
                setattr(self, name, 0)

    def __del__(self) -> None:
        try:
            self.free()
        except Exception:  # interpreter shutdown
            pass


class PlanCache:
    """:class:`OpPlan` by signature, bounded; ``None`` entries mark signatures that cannot be cached.

    Evicts the oldest entry first (insertion order): a hit costs one dict lookup, and a hot plan
    that is evicted is rebuilt once.
    """

    def __init__(self, capacity: int = _MAX_PLANS) -> None:
        self.capacity = capacity
        self.plans: dict = {}
        self.misses = 0

    def get(self, key):
        return self.plans.get(key, False)

    def put(self, key, plan) -> None:
        self.misses += 1
        self.plans[key] = plan
        while len(self.plans) > self.capacity:
            old = self.plans.pop(next(iter(self.plans)))
            if old is not None:
                old.free()

    def clear(self) -> None:
        for plan in self.plans.values():
            if plan is not None:
                plan.free()
        self.plans.clear()


PLANS = PlanCache()
