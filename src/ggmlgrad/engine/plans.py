"""Cached plans: a graph built and allocated once per signature, recomputed with rebound memory.

Building a graph costs ggml calls per node (leaf headers, the node, the graph, the scheduler's
split and allocation); on small tensors that is most of an op's or a step's time. A plan keeps
the nodes, the graph and a private scheduler (which keeps its allocation between computes) for
one signature, and a later call only rebinds the data pointers of the plan's leaves and outputs
(``_ggml.nodes.PointerTable``: attribute stores, no ggml call) before computing.

Three kinds of entries of the one trace cache (:mod:`.trace_cache`), keyed on record sequences:
- eager ops (:class:`OpPlan`): the one-record sequence the op is (``Drainer._drain_one``);
- graph-mode drains (:class:`Plan`): the whole queued record sequence and the results still alive
  (``RecordQueue.plan_signature``);
- backward segments (:class:`SegmentPlan`): the gradient records one backward pass appended,
  keyed by the records queued before it and the tape (``tensor/tape.py``).

Views whose memory belongs to a leaf or an output (a transpose feeding a matmul, a slice) are
rebound too, in graph order: ggml stores a view's address, not its offset from a live source.

With the optional compiled accelerator on (``_ggml/accel.py``), a plan's table is its C twin
(same methods, same stores) and knows the plan's scheduler and graph: the executor then rebinds and
computes in one C call (``plan.fast``); an eager op's plan also picks its result's memory there, by
:meth:`OpPlan.bind`'s rule.
"""
from __future__ import annotations

import math
from sys import getrefcount

from .._ggml import lib, new_context
from .._ggml.accel import ACCEL, activate as _activate_accel
from .._ggml.nodes import PointerTable, view_of
from ..runtime import Device, Storage, executor_for
from ..runtime.budget import check_graph
from ..runtime.placement import free_sched
from ..runtime.memory import register_spares
from ..runtime.executor import COMPUTE_LOCK
from ..runtime.memory import DEVICE_LOCK
from ..runtime.faults import ARMED as _FAULTS, hit as _fault
from ..runtime.threads import ThreadTuner
from .array import Array
from .executor import BOUND_PLAN, OP_PLAN, ComputeFailed, accelerator_on
from .trace_cache import GRAPH, OP, SEGMENT, TRACE

_OVERHEAD = lib.tensor_overhead()


class Uncacheable(Exception):
    """This graph cannot be replayed by rebinding pointers; use the ordinary drain."""


class Exact(tuple):
    """An op parameter that is its own exact plan key: its maker guarantees it holds no values that
    compare equal across types (1, 1.0, True) or signs (0.0, -0.0), so :func:`freeze` need not
    wrap every element (an optimizer's per-parameter layout, rebuilt each step)."""

    __slots__ = ()


def freeze(value):
    """A hashable, exact key for an op parameter, or raise TypeError (e.g. a tensor parameter).

    The type is part of the key (a builder may treat 1 and 1.0 differently) and so is the sign
    of a zero (``x * -0.0`` is not ``x * 0.0``).
    """
    t = type(value)
    if t is Exact:
        return value
    if t is float:
        if value == 0.0 and math.copysign(1.0, value) < 0:
            return (t, "-0.0")
        return (t, value)
    if t is tuple or t is list:
        for v in value:
            if type(v) is not int:
                return (t, tuple([freeze(v) for v in value]))
        # Only ints (the usual axes and shapes): exact as they are, and never equal to the form
        # above, whose items are tuples (this runs once per recorded op with such a parameter).
        return (t, value if t is tuple else tuple(value))
    hash(value)
    return (t, value)


_PLAIN = frozenset((int, bool, str, type(None)))


def freeze_params(params: dict) -> tuple:
    """:func:`freeze` of every parameter, with the common plain values inlined (this runs once per
    queued op at each graph-mode drain)."""
    if not params:
        return ()
    out = []
    for k, v in params.items():
        t = type(v)
        if t in _PLAIN or (t is float and v != 0.0):  # (a zero float keeps its sign in freeze)
            out.append((k, t, v))  # flat: the collector untracks it at once (a long queue's key holds one per op)
        elif t is tuple:  # freeze(v), inlined for the common axes and shapes (ints only)
            for e in v:
                if type(e) is not int:
                    out.append((k, freeze(v)))
                    break
            else:
                out.append((k, (t, v)))
        else:
            out.append((k, freeze(v)))
    return tuple(out)


class OwnedGraph:
    """A ggml graph over nodes in contexts it owns (freed with it), allocated once by a private
    scheduler and computed many times: the base of cached plans and capture recordings.

    Subclasses expand their roots with :meth:`expand`, then call :meth:`allocate`; the engine's
    executor computes them (:mod:`.executor`), after their ``bind`` pointed them at a run's memory.
    """

    def __init__(self, device: Device, ctxs: list[int], n_tensors: int, max_work: float):
        self.ctxs = ctxs
        self.gctx = self.sched = 0
        self.executor = executor_for(device)
        # Computed many times: heavy graphs measure whether threads pay on this machine.
        self.max_work = max_work
        self.tuner = ThreadTuner.for_work(max_work, device.kind)
        self.accelerated = True
        self.n_nodes = 0
        size = 64
        while size < n_tensors:
            size *= 2
        self.size = size
        self.gctx = new_context(lib.graph_overhead_custom(size, False) + 1024)
        if not self.gctx:
            raise MemoryError("ggmlgrad: ggml_init failed for a graph context")
        self.graph = lib.new_graph_custom(self.gctx, size, False)

    def expand(self, nodes) -> None:
        for n in nodes:
            lib.build_forward_expand(self.graph, n)
        self.n_nodes = lib.graph_n_nodes(self.graph)

    results_bytes = 0  # host memory just allocated for the results (see runtime.budget.check_graph)
    fast = 0  # how the compiled accelerator runs it (engine/executor.py: OP_PLAN, BOUND_PLAN; 0: it does not)

    def allocate(self) -> None:
        """Allocate the intermediates once (MemoryError, before allocating, when they cannot fit)."""
        if _FAULTS:
            _fault("alloc")
        with COMPUTE_LOCK, DEVICE_LOCK:   # not while another thread computes (runtime/memory.py DEVICE_LOCK)
            check_graph(self.executor.device, self.graph, self.results_bytes)
            self.sched, self._keep = self.executor.new_sched(self.size)
            if not lib.backend_sched_alloc_graph(self.sched, self.graph):
                raise MemoryError("ggmlgrad: could not allocate a graph's intermediates")
            self.accelerated = self.executor.accelerated(self.sched, self.graph, self.n_nodes)
        if self.accelerated and self.tuner is not None:
            self.tuner = ThreadTuner.for_work(self.max_work, self.executor.device.kind, accelerated=True)

    def free(self) -> None:
        self.fast = 0
        if self.sched:
            free_sched(self.sched, self.executor.device)   # kept on lavapipe (runtime/placement.py)
            self.sched = 0
        if self.gctx:
            lib.free(self.gctx)
            self.gctx = 0
        for c in self.ctxs:
            lib.free(c)
        self.ctxs = []

    def __del__(self) -> None:
        try:
            self.free()
        except Exception:  # interpreter shutdown
            pass


class Plan(OwnedGraph):
    """Nodes already built in ``ctxs`` (owned from now on), over ``leaves`` and computing ``outs``
    (and in-place ``effects``).

    Every leaf must have memory when the plan is made, and ``out_storages`` are the first call's
    outputs (the scheduler places and allocates the rest once); :meth:`bind` points leaves and
    outputs at each call's memory.
    """

    def __init__(self, device: Device, ctxs: list[int], leaves: list[int], outs: list[int], out_storages,
                 effects: list[int] = (), max_work: float = 0.0):
        if len(set(outs)) != len(outs):
            raise Uncacheable("two results share a node")
        leaf_set = set(leaves)
        for n in outs:
            if n in leaf_set or view_of(n)[0]:
                raise Uncacheable("a result is an input or a view")
        used = sum(lib.used_mem(c) for c in ctxs) // _OVERHEAD + len(leaves) + 16
        super().__init__(device, [], used, max_work)
        self.expand(outs)
        self.expand(effects)  # in-place writes (views of the leaves they write: rebound below)
        if self.n_nodes == 0:
            raise Uncacheable("empty graph")
        for n, s in zip(outs, out_storages):  # bound per call: the scheduler must not allocate them
            lib.backend_tensor_alloc(s.buffer, n, s.data)
        # Bases for rebinding: leaves are 0..L-1, outputs L..L+K-1.
        bases = {n: i for i, n in enumerate(leaves) if n}
        for k, n in enumerate(outs):
            bases[n] = len(leaves) + k
        views = []
        for i in range(self.n_nodes):
            t = lib.graph_node(self.graph, i)
            src, offs = view_of(t)
            if src in bases:
                views.append((t, bases[src], offs))
        table = ACCEL.PointerTable if accelerator_on() else PointerTable
        self.pointers = table(list(leaves) + list(outs), views)
        try:
            self.results_bytes = sum(s.nbytes for s in out_storages)
            self.allocate()
        except BaseException:
            # The caller computes these nodes the ordinary way: give the outputs back unallocated.
            self.pointers.unbind(len(leaves))
            raise
        self.ctxs = ctxs  # owned from here on (a failed plan leaves them to the caller)
        if (table is not PointerTable and self.tuner is None and type(COMPUTE_LOCK) is ACCEL.ComputeLock
                and self.executor.device.kind == "cpu"):
            # (a plan whose tuner still measures thread counts computes through Python's _tuned_compute;
            # a device plan too: its compute must also hold DEVICE_LOCK, which the C call does not take)
            self.pointers.set_graph(self.sched, self.graph, COMPUTE_LOCK, self.executor, self.accelerated,
                                    self.fast_kind)
            self.fast = self.fast_kind

    fast_kind = BOUND_PLAN  # the executor's accelerated run: bind(leaf_storages, out_storages), compute
    kind = GRAPH            # its trace cache kind (engine/trace_cache.py)

    def bind(self, leaf_storages, out_storages) -> None:
        """Point the plan at this run's memory (the executor calls it under the compute lock, then
        computes): ``leaf_storages`` for its inputs, ``out_storages`` for its results.

        Only tensors whose memory moved since the last run are rebound (parameters, optimizer
        state and recycled output blocks mostly stay where they were: ~0.3 µs per rebinding)."""
        self.pointers.bind(leaf_storages, out_storages)


class OpPlan(Plan):
    """An eager op's plan (one op over leaves of its own, one result): the plan a drain of one
    eager record finds; its :meth:`bind` and one executor compute are that drain on a hit.

    Its result goes into the memory the last run gave it when nothing else holds that any more
    (the last result was dropped: ``a + b`` in a loop), else into a new storage: no pool round
    trip, and the output pointer need not be rebound."""

    spare = None  # the last run's result storage (small results only), reused once nobody holds it
    out_nbytes = 0  # its result's size (set by its maker: the key fixes it)
    fast_kind = OP_PLAN  # the accelerated run is this bind (C, same rule) and the compute
    kind = OP

    def bind(self, inputs, device: Device, nbytes: int, s: Storage | None = None) -> Storage:  # type: ignore[override]
        """Point the plan at ``inputs`` (computed, contiguous arrays) and at the result's memory:
        ``s``, or a storage of ``nbytes``; returns the result's storage. The executor calls it under
        the compute lock (threads share plans: choosing the memory, rebinding and computing go
        together), then computes."""
        if s is None:
            s = self.spare
            if s is not None and getrefcount(s) == _SPARE_UNSHARED:
                self.spare = None
            else:
                s = Storage(device, nbytes)
        self.pointers.bind_op(inputs, s)
        if nbytes <= _SPARE_BYTES:
            self.spare = s
        return s


_SPARE_BYTES = 1 << 16


def _spare_refs() -> int:
    """What ``getrefcount`` reads in :meth:`OpPlan.bind` for a storage only the plan holds
    (measured, not assumed: the count depends on the interpreter)."""
    class _Holder:
        spare = None
    h = _Holder()
    h.spare = object()
    s = h.spare
    return getrefcount(s)


_SPARE_UNSHARED = _spare_refs()


def configure_accelerator(compute: int | None = None) -> None:
    """Point the compiled accelerator (when loaded) at the engine: its op plans' new results are
    ``Storage``, inputs ``Array``, failures ``ComputeFailed``, spares up to ``_SPARE_BYTES``; and at
    ggml's compute, or at ``compute`` (the address of a C function of the same signature: a test's
    that reports a failure status)."""
    if ACCEL is not None:
        _activate_accel(ACCEL, Storage, Array, ComputeFailed, _SPARE_BYTES, compute)


configure_accelerator()


def _op_plan_spares(drop: bool) -> tuple[int, int]:
    """(count, bytes) of the eager op plans' spare results that nothing else holds (memory the pool
    counts as live but which is cached); ``drop``: let them go back to the pool."""
    n = b = 0
    with COMPUTE_LOCK:
        for plan in TRACE.entries(OP):
            s = getattr(plan, "spare", None)
            if s is not None and getrefcount(s) == _SPARE_UNSHARED:
                if drop:
                    plan.spare = None
                else:
                    n += 1
                    b += s.capacity
            del s
    return n, b


class SegmentPlan:
    """A trace cache entry of a backward segment (``tensor/tape.py``): the segment, the tape
    positions whose rules it replaces, and where its gradients go. Holds no ggml memory."""

    __slots__ = ("segment", "ran", "assign", "last_use")
    kind = SEGMENT

    def __init__(self, segment, ran: tuple, assign: tuple):
        self.segment = segment
        self.ran = ran
        self.assign = assign
        self.last_use = -1

    def free(self) -> None:
        """Nothing to free (the cache's interface)."""


register_spares(_op_plan_spares)
