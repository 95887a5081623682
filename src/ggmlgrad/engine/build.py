"""Materialise the queue: turn recorded ops into ggml nodes in pooled node contexts.

Graph mode records ops without building them; a drain (or a recording taking the queue)
builds them here, in order, each computed input entering as a LEAF aliasing its memory
(never as the node that produced it: that would re-run its ancestry from current inputs).
"""
from __future__ import annotations

import weakref
from typing import Callable

from .._ggml import lib, new_context, set_leaf_strides
from ..runtime import Device, Storage, StridedAlias
from ..runtime.placement import device_result
from . import context
from .context import current
from .array import COMPUTED, FAILED, PENDING, Array, ggml_ne
from .errors import PendingError
from .flat import FlatNode
from .plans import OpPlan, Plan, Uncacheable
from .records import REC_INPUTS, REC_REF, _Pending, _phase_label, no_value_message

_CTX_TENSORS = 4096           # tensors per node context
_OP_HEADROOM = 96             # most tensors one op builder may create
_OVERHEAD = lib.tensor_overhead()
_NE: dict[tuple, list[int]] = {}      # shape → ggml ne (leaf creation is on every eager op)


def _new_leaf(ctx: int, a: Array) -> int:
    """A leaf tensor in ``ctx`` aliasing ``a``'s memory (with its strides when it is a strided view
    of another tensor's memory, which ops read through ``ggml_cont``)."""
    ne = _NE.get(a.shape)
    if ne is None:
        ne = _NE[a.shape] = tuple(ggml_ne(a.shape))
    leaf = lib.new_tensor_4d(ctx, a.dtype.ggml_type, ne[0], ne[1], ne[2], ne[3])
    s = a._storage
    if type(s) is StridedAlias:
        set_leaf_strides(leaf, _ggml_nb(s.strides))
    lib.backend_tensor_alloc(s.buffer, leaf, s.data)
    return leaf


def _ggml_nb(strides: tuple) -> tuple:
    """torch-order byte strides (at least one dim: a 0-d view is contiguous) as ggml's nb, innermost
    first over 4 dims (a missing outer dim has size 1: its stride is never used)."""
    nb = list(reversed(strides))
    return tuple(nb + [nb[-1]] * (4 - len(nb)))


class _ContextPool:
    """ggml contexts for nodes, reused across epochs (ggml_reset keeps their memory)."""

    def __init__(self) -> None:
        self.free: list[int] = []
        self.mem_size = _CTX_TENSORS * _OVERHEAD

    def get(self) -> int:
        if self.free:
            return self.free.pop()
        ctx = new_context(self.mem_size)
        if not ctx:
            raise MemoryError("ggmlgrad: ggml_init failed for a node context")
        return ctx

    def put(self, ctx: int) -> None:
        lib.reset(ctx)
        if len(self.free) < 8:
            self.free.append(ctx)
        else:
            lib.free(ctx)



class Builder:
    """Builds a :class:`~.records.RecordQueue`'s records into ggml nodes, in node contexts of its own
    (pooled across epochs), each computed input entering as a leaf aliasing its memory.

    ``drain`` and ``discard`` are the engine's: a build for another device drains the queue first,
    and a half-built queue is discarded (its tensors fail clearly)."""

    def __init__(self, queue, drain: Callable[[str], bool], discard: Callable[[], None]) -> None:
        self.queue = queue
        self.drain = drain
        self.discard = discard
        self.pool = _ContextPool()
        self.private_leaves = False  # building a plan: leaves it can rebind, not storages' shared headers
        self.private_leaf_of: dict[int, int] = {}
        self.take_contexts()

    def take_contexts(self) -> list[int]:
        """The node contexts of the epoch that ends (the caller gives them back to :attr:`pool`)."""
        ctx_list = getattr(self, "ctx_list", [])
        self.ctx = 0
        self.ctx_list: list[int] = []
        self._credit = 0  # ops that may still build in self.ctx without asking ggml how full it is
        return ctx_list

    def give_back(self, ctx_list: list[int]) -> None:
        for ctx in ctx_list:
            self.pool.put(ctx)

    def room(self) -> None:
        """Guarantee room for one more op (at most _OP_HEADROOM tensors) in ``self.ctx``.

        ggml_used_mem is asked once per ~40 ops, not per op: with F free tensor slots,
        F // _OP_HEADROOM ops fit before the context must be chained to a new one.
        """
        if self._credit > 0:
            self._credit -= 1
            return
        ctx = self.ctx
        free = self.pool.mem_size - lib.used_mem(ctx) if ctx else 0
        if free < _OP_HEADROOM * _OVERHEAD:
            self.ctx = ctx = self.pool.get()
            self.ctx_list.append(ctx)
            free = self.pool.mem_size - lib.used_mem(ctx)
        self._credit = free // (_OP_HEADROOM * _OVERHEAD) - 1

    # ------------------------------------------------------------------ building
    def node_of(self, a: Array) -> int:
        """The node to use for ``a`` in the current epoch's graph."""
        q = self.queue
        st = a._status
        if st == PENDING:
            if a._epoch == q.epoch:
                if a._node < 0:  # recorded, not built yet: build the queue so far
                    self.materialize()
                n = a._node
                return n if type(n) is not FlatNode else n.shaped(self.ctx)
            # Its queue is gone (taken by a failed or interrupted drain): the node may be freed.
            raise PendingError(a._error or no_value_message(a))
        if st == FAILED:
            raise PendingError(a._error or "ggmlgrad: this tensor's graph failed; it has no value")
        if self.private_leaves:  # building a plan: its own leaves, which it rebinds per drain
            leaf = self.private_leaf_of.get(id(a))
            if leaf is None:
                if type(a._storage) is StridedAlias:
                    raise Uncacheable("a strided view is an input")  # a plan's leaves are contiguous
                leaf = self.private_leaf_of[id(a)] = _new_leaf(self.ctx, a)
                q.keep.append(a._storage)
            return leaf
        epoch = q.epoch
        if a._leaf_epoch == epoch:
            leaf = a._leaf
            if a._leaf_epoch == epoch:  # not rewritten meanwhile by another thread sharing ``a``
                return leaf
        s = a._storage
        # The storage's own header, reused across graphs; not inside a capture recording, which
        # owns (and rewrites) the leaves of its graphs, nor for storage that is not a plain Storage.
        leaf = 0
        observer = current().observer
        if observer is None and type(s) is Storage:
            ne = _NE.get(a.shape)
            if ne is None:
                ne = _NE[a.shape] = tuple(ggml_ne(a.shape))
            leaf = s.leaf_header(a.dtype.ggml_type, ne, a.dtype.itemsize)
        if not leaf:
            leaf = _new_leaf(self.ctx, a)
        q.keep.append(s)
        raw = leaf
        if type(s) is StridedAlias:
            leaf = lib.cont(self.ctx, raw)  # ops read a contiguous copy of a strided view
        a._leaf_epoch = -1  # seqlock order: a reader on another thread sees a stale pair as invalid
        a._leaf = leaf
        a._leaf_epoch = epoch
        if observer is not None:
            # capture: which computed tensors a recording references (memory it wrote: the new value's node)
            leaf = observer.on_leaf(a, raw) or leaf
        return leaf

    def queue_update_writes(self, writes, nodes: list, inputs) -> None:
        """An update's ``(target, node)`` writes as effects: ``node`` copied into ``inputs[target]``'s
        memory, or (target None) ``node`` writing in place by itself."""
        ctx = self.ctx
        effects = self.queue.effects
        for target, node in writes:
            if target is None:
                if any(type(getattr(x, "_storage", None)) is StridedAlias for x in inputs):
                    raise RuntimeError("an in-place update node cannot write a tensor whose memory is a "
                                       "non-contiguous view of another's; make it contiguous first")
                effects.append(node)
                continue
            x = inputs[target]
            dst = nodes[target] if type(getattr(x, "_storage", None)) is not StridedAlias else self.write_node_of(x)
            effects.append(lib.cpy(ctx, node, dst))

    def write_node_of(self, a: Array) -> int:
        """The node a write into ``a``'s memory targets: its leaf, strided as its memory is (a
        strided view's read node is a contiguous copy, which a write must not target)."""
        if a._status != COMPUTED or type(a._storage) is not StridedAlias:
            return self.node_of(a)
        self.queue.keep.append(a._storage)
        return _new_leaf(self.ctx, a)

    def begin(self, device: Device) -> int:
        """Prepare to build nodes for ``device``; returns the ggml context to build in."""
        q = self.queue
        if q.device is not device:
            if q.device is not None and len(q):
                self.drain("device_change")
            q.device = device
        self.room()
        return self.ctx

    def build_record(self, out: Array, label: str, build, inputs, work: float, params: dict | None) -> None:
        """Build one op's node now and queue it (an eager op without a plan, in-place writes, capture)."""
        ctx = self.begin(out.device)
        nodes = [self.node_of(x) for x in inputs]
        node = build(ctx, *nodes) if params is None else build(ctx, nodes, inputs, out, **params)
        q = self.queue
        if not q.device.is_host:  # an op the device lacks: its result is a copy the device makes
            node = device_result(ctx, node, q.device)
        out._node = node
        out._epoch = q.epoch
        out._status = PENDING
        q.roots.append((weakref.ref(out), node))
        q.labels.append(_phase_label.get() or label)
        w = work or float(max(1, out.numel_))
        q.work += w
        if w > q.max_work:
            q.max_work = w

    def materialize(self) -> None:
        """Build the nodes of every lazily recorded op, in order (their inputs come first)."""
        q = self.queue
        lazy = q.lazy
        if not lazy:
            return
        q.lazy = []
        q.updates = 0  # they become effects
        q._sig = None  # built nodes: the ordinary drain
        try:
            built = self._build_lazy(lazy)
        except BaseException:
            # A half-built queue cannot be computed: its tensors fail (clearly) instead.
            self.discard()
            raise
        roots = q.roots
        epoch = q.epoch
        for i, (ref, n) in enumerate(roots):
            if n < 0:
                node = built[-1 - n]
                roots[i] = (ref, node)
                a = ref()
                if a is not None and a._node == n and a._epoch == epoch:
                    a._node = node
        q.bare = 0
        for j, rec in enumerate(lazy):  # the records' own results become roots of built nodes
            ref = rec[REC_REF]
            if ref is not None:
                n = -1 - j
                node = built[j]
                roots.append((ref, node))
                a = ref()
                if a is not None and a._node == n and a._epoch == epoch:
                    a._node = node

    def _build_lazy(self, lazy: list) -> list[int]:
        """The node of each lazy record (0 for updates, whose writes join the effects)."""
        built: list[int] = []
        prec_token = None
        try:
            device = self.queue.device
            standins: list = []  # what the builders see of each record's result (see _Pending)
            for j, rec in enumerate(lazy):
                build, params, shape, dtype, prec = rec[:5]
                if prec != current().precision:  # build as recorded (matmul nodes read the mode)
                    if prec_token is not None:
                        context.pop(prec_token)
                    prec_token = context.push(precision=prec)
                self.room()
                inputs = [standins[x] if type(x) is int else x for x in rec[REC_INPUTS:]]
                nodes = [built[x.index] if type(x) is _Pending else self.node_of(x) for x in inputs]
                for i, n in enumerate(nodes):
                    if type(n) is FlatNode:
                        nodes[i] = n.shaped(self.ctx)
                if shape is None:  # an update (record_update): in-place writes
                    ctx = self.ctx
                    self.queue_update_writes(build(ctx, nodes, inputs, **params), nodes, inputs)
                    built.append(0)
                    standins.append(None)
                else:
                    out = _Pending(j, shape, dtype, device)
                    standins.append(out)
                    node = build(self.ctx, nodes, inputs, out, **params)
                    if not self.queue.device.is_host:
                        node = device_result(self.ctx, node, self.queue.device)
                    built.append(node)
        finally:
            if prec_token is not None:
                context.pop(prec_token)
        return built

    def make_graph_plan(self, plans, key, device: Device, leaves: list[Array], results: list[Array], outs):
        """Build the queued records into contexts a new graph :class:`~.plans.Plan` owns, over
        private leaves; stored in ``plans`` under ``key``. None: the records stay queued (built
        into the queue's own contexts when the plan failed after building them)."""
        q = self.queue
        saved_ctx = (self.ctx, self.ctx_list, self._credit)
        self.ctx, self.ctx_list, self._credit = 0, [], 0
        self.private_leaves = True
        self.private_leaf_of = {}
        try:
            self.materialize()
            ctxs = self.ctx_list
            leaf_nodes = [self.private_leaf_of.get(id(x), 0) for x in leaves]
        finally:
            self.private_leaves = False
            self.private_leaf_of = {}
            self.ctx, self.ctx_list, self._credit = saved_ctx[0], saved_ctx[1] + self.ctx_list, saved_ctx[2]
        try:
            plan = Plan(device, list(ctxs), leaf_nodes, [a._node for a in results], outs, q.effects, q.max_work)
        except (Uncacheable, MemoryError) as e:
            if isinstance(e, Uncacheable):
                plans.put(key, None)
            return None  # the nodes stay in the queue's contexts: the ordinary drain computes them
        for c in ctxs:  # the plan owns them now
            self.ctx_list.remove(c)
        if self.ctx in ctxs:
            self.ctx, self._credit = 0, 0
        plans.put(key, plan)
        return plan

    def free(self) -> None:
        """Free every context (the engine's thread ended)."""
        for ctx in self.ctx_list + self.pool.free:
            lib.free(ctx)
        self.ctx_list, self.pool.free = [], []


def make_op_plan(plans, key, device: Device, build, inputs, out: Array, params: dict, s: Storage, work: float):
    """Build one op over leaves of its own into a cached :class:`~.plans.Plan` (stored in ``plans``
    under ``key``; None stored and returned when the op cannot be planned)."""
    ctx = new_context((len(inputs) + _OP_HEADROOM) * _OVERHEAD)
    if not ctx:
        raise MemoryError("ggmlgrad: ggml_init failed for an op plan")
    leaves = [_new_leaf(ctx, x) for x in inputs]
    try:
        node = device_result(ctx, build(ctx, leaves, inputs, out, **params), device)
        plan = OpPlan(device, [ctx], leaves, [node], (s,), max_work=work or float(out.numel_))
        plan.out_nbytes = out.nbytes  # fixed by the key (the result's shape and dtype)
    except (Uncacheable, MemoryError) as e:
        lib.free(ctx)
        if isinstance(e, Uncacheable):
            plans.put(key, None)
        return None  # the ordinary path computes it
    plans.put(key, plan)
    return plan
