"""The execution queue: record nodes, drain them as ONE ggml graph.

Every op goes through :meth:`Engine.record`. In eager mode the queue is
drained at once (eager is graph mode with an immediate drain: one path, not
two). In graph mode nodes accumulate until a sync point calls :meth:`drain`.

Both reuse work through cached plans (:mod:`.plans`): an eager op whose signature
ran before computes its cached one-op graph; graph mode records ops lazily (no
ggml calls) and a drain whose record sequence ran before computes its cached
graph with the new tensors' memory. Only when there is no plan are the nodes
built (:meth:`_materialize`) and drained the ordinary way.

Rules (each paid for by a silent wrong result in ggmlR, see ag_defer.R):
- the queue is taken and cleared BEFORE computing, so a failed compute is never
  retried against a context in an unknown state;
- every live root is expanded (residual branches and gradients are roots that
  are not reachable from one another);
- a computed tensor enters later graphs as a LEAF aliasing its memory, never as
  the node that produced it (that would re-run its ancestry from current inputs);
- only a complete success marks tensors computed;
- in-place writes run inside :meth:`exclusive`, which drains first, so a write
  can never be ordered before reads queued ahead of it.
"""
from __future__ import annotations

import contextvars
import os
import sys
import threading
import weakref
from collections import Counter
from contextlib import contextmanager
from typing import Callable

from .._ggml import InitParams, lib
from ..runtime import Device, Storage, budget, choose_threads, executor_for
from ..runtime.faults import ARMED as _FAULTS, hit as _fault
from . import checks as _checks, modes
from .array import COMPUTED, FAILED, PENDING, Array, ggml_ne
from .counters import COUNTERS
from .errors import GraphError, GraphMemoryError, PendingError
from .flat import FlatNode
from .local import PerThread, first_epoch, owner_of, register, retire
from .plans import GRAPH_PLANS, OP_PLANS, Plan, Uncacheable, freeze_params

# Set by autograd while it builds gradient nodes (they are labelled "backward" in errors);
# context-local, since two threads may run backward at once.
_phase_label: contextvars.ContextVar[str | None] = contextvars.ContextVar("ggmlgrad_phase", default=None)
_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_CTX_TENSORS = 4096           # tensors per node context
_OP_HEADROOM = 96             # most tensors one op builder may create
_OVERHEAD = lib.tensor_overhead()
_NE: dict[tuple, list[int]] = {}      # shape → ggml ne (leaf creation is on every eager op)
_GRAPH_OVERHEAD: dict[int, int] = {}  # graph size → ggml_graph_overhead_custom


def _new_leaf(ctx: int, a: Array) -> int:
    """A leaf tensor in ``ctx`` aliasing ``a``'s memory."""
    ne = _NE.get(a.shape)
    if ne is None:
        ne = _NE[a.shape] = tuple(ggml_ne(a.shape))
    leaf = lib.new_tensor_4d(ctx, a.dtype.ggml_type, ne[0], ne[1], ne[2], ne[3])
    lib.backend_tensor_alloc(a._storage.buffer, leaf, a._storage.data)
    return leaf


def user_site(skip: int = 2) -> str:
    """file:line of the innermost frame outside the ggmlgrad package."""
    f = sys._getframe(skip)
    while f is not None and f.f_code.co_filename.startswith(_PKG_DIR):
        f = f.f_back
    return f"{f.f_code.co_filename}:{f.f_lineno}" if f is not None else "?"


class _Pending:
    """A lazily recorded op's result as later ops' records hold it: its index in the queue and
    what builders read (shape, dtype, ndim, device). Holding the tensor itself would keep every
    intermediate alive, and each live result costs an output buffer at the drain."""

    __slots__ = ("index", "shape", "dtype", "device")

    def __init__(self, index: int, shape: tuple, dtype, device) -> None:
        self.index = index
        self.shape = shape
        self.dtype = dtype
        self.device = device

    @property
    def ndim(self) -> int:
        return len(self.shape)


class _Segment:
    """Lazy records to append again (:meth:`Engine.replay_segment`): computed inputs as their
    key slots (a record without any is appended as it is), with the key parts, labels and work
    they added."""

    __slots__ = ("start", "records", "sig", "labels", "work", "max_work")

    def __init__(self, start: int, records: tuple, sig: tuple, labels: tuple, work: float, max_work: float):
        self.start = start
        self.records = records
        self.sig = sig
        self.labels = labels
        self.work = work
        self.max_work = max_work


class _ContextPool:
    """ggml contexts for nodes, reused across epochs (ggml_reset keeps their memory)."""

    def __init__(self) -> None:
        self.free: list[int] = []
        self.mem_size = _CTX_TENSORS * _OVERHEAD

    def get(self) -> int:
        if self.free:
            return self.free.pop()
        ctx = lib.init(InitParams(self.mem_size, None, True))
        if not ctx:
            raise MemoryError("ggmlgrad: ggml_init failed for a node context")
        return ctx

    def put(self, ctx: int) -> None:
        lib.reset(ctx)
        if len(self.free) < 8:
            self.free.append(ctx)
        else:
            lib.free(ctx)


class Engine:
    """One thread's queue (``ENGINE`` gives each thread its own, see :mod:`.local`)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.epoch = first_epoch()  # unique across threads: another thread's pending tensor never matches
        self.thread_name = register(self)
        self._ctxs = _ContextPool()
        self._graph_ctx = 0
        self._graph_ctx_size = 0
        self._hold = 0
        self._draining = False
        self._fail_next: str | None = None
        self._private_leaves = False  # building a plan: leaves it can rebind, not storages' shared headers
        self._private_leaf_of: dict[int, int] = {}
        # Capture installs a guard here; it is told about uploads, downloads and drains.
        self.guard = None
        self.checks: list = []  # index checks of the queue, verified after its drain (checks.py)
        self._new_epoch_state()

    def __del__(self) -> None:
        try:
            retire(self)  # its thread ended: queued tensors fail clearly, contexts are freed
        except Exception:  # interpreter shutdown
            pass

    # ------------------------------------------------------------------ queue state
    def _new_epoch_state(self) -> None:
        self.ctx = 0
        self.ctx_list: list[int] = []
        # Graph mode records ops without building them (see _materialize): (build, inputs,
        # params, out shape, out dtype, matmul precision, result stand-in or None for an update).
        # Their arrays' _node is -(index+1).
        self.lazy: list[tuple] = []
        self.updates = 0  # how many of them are in-place updates (record_update)
        # The plan key of the lazy records, built as they are recorded (None: not plannable). One
        # flat sequence: per op its builder, result shape and dtype, precision, parameters and
        # input count, then per input a queue index (>= 0) or -1-slot for a computed tensor,
        # followed by shape and dtype where that slot first appears. Unambiguous, since a new
        # slot is always the next number.
        self._sig: list | None = []
        self._sig_slot: dict[int, int] = {}   # id(computed input) → slot
        self._sig_leaves: list[Array] = []    # computed inputs by slot
        self.roots: list[tuple[weakref.ref, int]] = []
        self.effects: list[int] = []
        self.labels: list[str] = []
        self.keep: list[Storage] = []
        self.site: str | None = None
        self.device: Device | None = None
        self.work = 0.0
        self.max_work = 0.0
        self._credit = 0  # ops that may still build in self.ctx without asking ggml how full it is

    def __len__(self) -> int:
        return len(self.roots) + len(self.effects) + self.updates

    def _room(self) -> None:
        """Guarantee room for one more op (at most _OP_HEADROOM tensors) in ``self.ctx``.

        ggml_used_mem is asked once per ~40 ops, not per op: with F free tensor slots,
        F // _OP_HEADROOM ops fit before the context must be chained to a new one.
        """
        if self._credit > 0:
            self._credit -= 1
            return
        ctx = self.ctx
        free = self._ctxs.mem_size - lib.used_mem(ctx) if ctx else 0
        if free < _OP_HEADROOM * _OVERHEAD:
            self.ctx = ctx = self._ctxs.get()
            self.ctx_list.append(ctx)
            free = self._ctxs.mem_size - lib.used_mem(ctx)
        self._credit = free // (_OP_HEADROOM * _OVERHEAD) - 1

    # ------------------------------------------------------------------ building
    def node_of(self, a: Array) -> int:
        """The node to use for ``a`` in the current epoch's graph."""
        st = a._status
        if st == PENDING:
            if a._epoch == self.epoch:
                if a._node < 0:  # recorded, not built yet: build the queue so far
                    self._materialize()
                n = a._node
                return n if type(n) is not FlatNode else n.shaped(self.ctx)
            # Its queue is gone (taken by a failed or interrupted drain): the node may be freed.
            raise PendingError(a._error or no_value_message(a))
        if st == FAILED:
            raise PendingError(a._error or "ggmlgrad: this tensor's graph failed; it has no value")
        if self._private_leaves:  # building a plan: its own leaves, which it rebinds per drain
            leaf = self._private_leaf_of.get(id(a))
            if leaf is None:
                leaf = self._private_leaf_of[id(a)] = _new_leaf(self.ctx, a)
                self.keep.append(a._storage)
            return leaf
        epoch = self.epoch
        if a._leaf_epoch == epoch:
            leaf = a._leaf
            if a._leaf_epoch == epoch:  # not rewritten meanwhile by another thread sharing ``a``
                return leaf
        s = a._storage
        # The storage's own header, reused across graphs; not inside a capture recording, which
        # owns (and rewrites) the leaves of its graphs, nor for storage that is not a plain Storage.
        leaf = 0
        if self.guard is None and type(s) is Storage:
            ne = _NE.get(a.shape)
            if ne is None:
                ne = _NE[a.shape] = tuple(ggml_ne(a.shape))
            leaf = s.leaf_header(a.dtype.ggml_type, ne, a.dtype.itemsize)
        if not leaf:
            leaf = _new_leaf(self.ctx, a)
        self.keep.append(s)
        a._leaf_epoch = -1  # seqlock order: a reader on another thread sees a stale pair as invalid
        a._leaf = leaf
        a._leaf_epoch = epoch
        if self.guard is not None:
            self.guard.on_leaf(a, leaf)  # capture: which computed tensors a recording references
        return leaf

    def begin(self, device: Device) -> int:
        """Prepare to build nodes for ``device``; returns the ggml context to build in."""
        if self.device is not device:
            if self.device is not None and len(self):
                self.drain("device_change")
            self.device = device
        self._room()
        return self.ctx

    def record(self, out: Array, label: str, build: Callable[..., int], inputs, work: float = 0.0,
               params: dict | None = None) -> Array:
        """Build ``out``'s node from ``inputs`` and queue it (drain at once in eager/check mode).

        ``build(ctx, *nodes)``; or, with ``params`` (an op's keyword parameters), an op
        builder ``build(ctx, nodes, inputs, out, **params)`` called directly (no closure per op).
        """
        with self.lock:
            if out.numel_ == 0:
                # An empty result has no value to compute, and ggml asserts on 0-byte graph
                # tensors it must allocate itself: it never becomes a node.
                for x in inputs:
                    if x._status == FAILED:
                        raise PendingError(x._error or "ggmlgrad: an input of this op has no value")
                out._storage = Storage(out.device, 1)
                out._status = COMPUTED
                return out
            if out.numel_ > budget.HUGE_NUMEL:  # larger than the device's memory: raise before queuing
                budget.check_tensor(out.device, out.nbytes, f"{label}'s result of shape {out.shape} ({out.dtype.name})")
            if self._hold == 0 and params is not None and self.guard is None:
                if not modes.graph_enabled():
                    if (self._fail_next is None and not self.roots and not self.effects
                            and self._run_plan(out, label, build, inputs, work, params)):
                        return out
                elif not modes.check_enabled():
                    return self._record_lazy(out, label, build, inputs, work, params)
            ctx = self.begin(out.device)
            nodes = [self.node_of(x) for x in inputs]
            node = build(ctx, *nodes) if params is None else build(ctx, nodes, inputs, out, **params)
            out._node = node
            out._epoch = self.epoch
            out._status = PENDING
            self.roots.append((weakref.ref(out), node))
            self.labels.append(_phase_label.get() or label)
            w = work or float(max(1, out.numel_))
            self.work += w
            if w > self.max_work:
                self.max_work = w
            if self._hold == 0:
                if not modes.graph_enabled():
                    self.drain("eager")
                elif modes.check_enabled():
                    self.site = user_site(3)
                    self.drain("check")
                elif self.site is None:
                    self.site = user_site(3)
            return out

    def _record_lazy(self, out: Array, label: str, build, inputs, work: float, params: dict) -> Array:
        """Graph mode: queue the op without building its node. The drain computes the queue with a
        cached plan when the same op sequence ran before, and builds the nodes otherwise."""
        if self.device is not out.device:
            if self.device is not None and len(self):
                self.drain("device_change")
            self.device = out.device
        lazy = self.lazy
        epoch = self.epoch
        prec = modes._precision.get()
        self._sign(build, out.shape, out.dtype, prec, params, len(inputs))
        ins = self._lazy_inputs(inputs)
        j = len(lazy)
        lazy.append((build, ins, params, out.shape, out.dtype, prec, _Pending(j, out.shape, out.dtype, out.device)))
        out._node = -1 - j
        out._epoch = epoch
        out._status = PENDING
        self.roots.append((weakref.ref(out), -1 - j))
        self.labels.append(_phase_label.get() or label)
        w = work or float(max(1, out.numel_))
        self.work += w
        if w > self.max_work:
            self.max_work = w
        if self.site is None:
            self.site = user_site(3)
        return out

    def _sign(self, build, shape, dtype, prec, params, n_inputs: int) -> None:
        """Extend the plan key with one record's header (its inputs follow, see _lazy_inputs)."""
        sig = self._sig
        if sig is None:
            return
        try:
            fp = freeze_params(params) if params else ()
        except TypeError:  # an unhashable parameter (e.g. a tensor): this queue gets no plan
            self._sig = None
            return
        sig += (build, shape, dtype, prec, fp, n_inputs)

    def _lazy_inputs(self, inputs) -> list:
        """Inputs as a lazy record holds them: computed tensors themselves (their memory must
        live until the drain), lazily recorded results as their queue entry's stand-in. Extends
        the plan key with them."""
        lazy = self.lazy
        epoch = self.epoch
        sig = self._sig
        ins = []
        try:
            for x in inputs:
                st = x._status
                if st == COMPUTED:
                    ins.append(x)
                    if sig is not None:
                        slot = self._sig_slot.get(id(x))
                        if slot is not None:
                            sig.append(-1 - slot)
                        elif x._storage is None or not x.numel_:
                            self._sig = sig = None  # empty memory: no plan
                        else:
                            slot = self._sig_slot[id(x)] = len(self._sig_leaves)
                            self._sig_leaves.append(x)
                            sig += (-1 - slot, x.shape, x.dtype)
                elif st == PENDING and x._epoch == epoch:
                    n = x._node
                    if n < 0:
                        p = lazy[-1 - n][6]
                        ins.append(p)
                        if sig is not None:
                            sig.append(p.index)
                    else:  # a built node: the ordinary drain
                        ins.append(x)
                        self._sig = sig = None
                else:
                    self.node_of(x)  # raises the error of a failed or discarded input, at this call
        except BaseException:
            self._sig = None  # the key has a header without its record
            raise
        return ins

    def record_update(self, label: str, build, inputs, params: dict, work: float = 0.0) -> None:
        """Queue in-place writes into ``inputs`` (an optimizer's update of its parameters); inside
        :meth:`exclusive` only.

        ``build(ctx, nodes, inputs, **params)`` returns ``[(target, node), ...]``: ``node``'s value
        is copied into ``inputs[target]``, or with ``target`` None, ``node`` writes in place by
        itself (``ggml_opt_step_adamw``). Recorded lazily like graph-mode ops, so a repeated update
        (every optimizer step) replays a cached plan. ``build`` must be a plain function (it is
        part of the plan's key) and ``inputs`` every tensor it reads or writes.
        """
        if self._hold == 0:
            raise RuntimeError("ggmlgrad internal: record_update outside exclusive()")
        device = inputs[0].device
        if self.guard is not None:  # a capture recording takes the queue as built nodes
            ctx = self.begin(device)
            nodes = [self.node_of(x) for x in inputs]
            for target, node in build(ctx, nodes, inputs, **params):
                self.effects.append(node if target is None else lib.cpy(ctx, node, nodes[target]))
        else:
            if self.device is not device:
                if self.device is not None and len(self):
                    self.drain("device_change")
                self.device = device
            prec = modes._precision.get()
            self._sign(build, None, None, prec, params, len(inputs))
            self.lazy.append((build, self._lazy_inputs(inputs), params, None, None, prec, None))
            self.updates += 1
        self.labels.append(label)
        self.add_work(work)

    # ------------------------------------------------------------------ replayable segments
    # Autograd records the same gradient ops every training step. A segment is the lazy records
    # one backward appended, kept so that the next identical backward appends them again without
    # running the gradient rules (see tensor/tape.py). Valid only on a queue whose key so far is
    # the same as when the segment was taken: the same records, so the same indices and slots.
    def lazy_mark(self) -> tuple | None:
        """The lazy queue's position and key so far, or None when nothing can be replayed here
        (not plain graph mode, a capture recording, built nodes in the queue)."""
        if self._sig is None or self.guard is not None or self._hold or not modes.graph_enabled() \
                or modes.check_enabled() or self.device is None:
            return None
        return (self.epoch, len(self.lazy), len(self._sig), len(self._sig_leaves), len(self.labels),
                self.work, tuple(self._sig), self.device.dev_ptr)

    def queue_refs(self, arrays) -> list | None:
        """Each array in the lazy queue's key: its record index (>= 0) or -1-slot for a computed
        tensor the queue reads; None when one is neither."""
        epoch, slot_of = self.epoch, self._sig_slot
        refs = []
        for a in arrays:
            st = a._status
            if st == PENDING:
                n = a._node
                if n >= 0 or a._epoch != epoch:
                    return None
                refs.append(-1 - n)
            elif st == COMPUTED:
                slot = slot_of.get(id(a))
                if slot is None:
                    return None
                refs.append(-1 - slot)
            else:
                return None
        return refs

    def lazy_segment(self, mark: tuple) -> "_Segment | None":
        """The records appended since ``mark``, or None when they cannot be replayed (the queue was
        drained or built since, or they read a computed tensor the queue did not hold at ``mark``)."""
        epoch, n_lazy, n_sig, n_leaves, n_labels, work, _, _ = mark
        if (self.epoch != epoch or self._sig is None or len(self._sig_leaves) != n_leaves
                or len(self.lazy) <= n_lazy or self.effects):
            return None
        records = []  # (record, None) to append as is, or (record with slots, True) to rebind
        for build, ins, params, shape, dtype, prec, standin in self.lazy[n_lazy:]:
            if standin is None:
                return None  # an update: never part of a backward
            ins = tuple([x if type(x) is _Pending else self._sig_slot[id(x)] for x in ins])
            has_slots = any(type(x) is int for x in ins)
            records.append(((build, ins, params, shape, dtype, prec, standin), has_slots or None))
        return _Segment(n_lazy, tuple(records), tuple(self._sig[n_sig:]), tuple(self.labels[n_labels:]),
                        self.work - work, self.max_work)

    def replay_segment(self, seg: "_Segment") -> None:
        """Append ``seg``'s records; the caller checked the queue's key equals the segment's mark."""
        with self.lock:
            lazy = self.lazy
            if len(lazy) != seg.start or self._sig is None:
                raise RuntimeError("ggmlgrad internal: a segment replayed on another queue")
            leaves = self._sig_leaves
            for rec, has_slots in seg.records:
                if has_slots:
                    build, ins, params, shape, dtype, prec, standin = rec
                    rec = (build, [x if type(x) is _Pending else leaves[x] for x in ins], params, shape, dtype,
                           prec, standin)
                lazy.append(rec)
            self._sig += seg.sig
            self.labels += seg.labels
            self.work += seg.work
            if seg.max_work > self.max_work:
                self.max_work = seg.max_work

    def adopt_result(self, out: Array, index: int) -> None:
        """Make ``out`` the result of lazy record ``index`` (a replayed segment's)."""
        out._node = -1 - index
        out._epoch = self.epoch
        out._status = PENDING
        self.roots.append((weakref.ref(out), -1 - index))

    def _materialize(self) -> None:
        """Build the nodes of every lazily recorded op, in order (their inputs come first)."""
        lazy = self.lazy
        if not lazy:
            return
        self.lazy = []
        self.updates = 0  # they become effects
        self._sig = None  # built nodes: the ordinary drain
        try:
            built = self._build_lazy(lazy)
        except BaseException:
            # A half-built queue cannot be computed: its tensors fail (clearly) instead.
            self._discard()
            raise
        roots = self.roots
        epoch = self.epoch
        for i, (ref, n) in enumerate(roots):
            if n < 0:
                node = built[-1 - n]
                roots[i] = (ref, node)
                a = ref()
                if a is not None and a._node == n and a._epoch == epoch:
                    a._node = node

    def _build_lazy(self, lazy: list) -> list[int]:
        """The node of each lazy record (0 for updates, whose writes join the effects)."""
        built: list[int] = []
        prec_token = None
        try:
            for build, inputs, params, shape, dtype, prec, standin in lazy:
                if prec != modes._precision.get():  # build as recorded (matmul nodes read the mode)
                    if prec_token is not None:
                        modes._precision.reset(prec_token)
                    prec_token = modes._precision.set(prec)
                self._room()
                nodes = [built[x.index] if type(x) is _Pending else self.node_of(x) for x in inputs]
                for i, n in enumerate(nodes):
                    if type(n) is FlatNode:
                        nodes[i] = n.shaped(self.ctx)
                if standin is None:  # an update (record_update): in-place writes
                    ctx = self.ctx
                    for target, node in build(ctx, nodes, inputs, **params):
                        self.effects.append(node if target is None else lib.cpy(ctx, node, nodes[target]))
                    built.append(0)
                else:
                    built.append(build(self.ctx, nodes, inputs, standin, **params))
        finally:
            if prec_token is not None:
                modes._precision.reset(prec_token)
        return built

    def _run_plan(self, out: Array, label: str, build, inputs, work: float, params: dict) -> bool:
        """Eager fast path: compute ``out`` with the cached plan of this op signature.

        Returns False (nothing done) when the op cannot use a plan; the caller then records and
        drains it the ordinary way.
        """
        sig = []
        for x in inputs:
            if x._status != COMPUTED or x._storage is None or not x.numel_:
                return False
            sig.append(x.shape)
            sig.append(x.dtype)
        device = out.device
        try:
            # Inputs share out's device (every op's validation checks it).
            key = (build, out.shape, out.dtype, device.dev_ptr, modes._precision.get(), tuple(sig),
                   freeze_params(params) if params else ())
            plan = OP_PLANS.plans.get(key, False)
        except TypeError:  # an unhashable parameter (e.g. a tensor): no plan
            return False
        if plan is None:
            return False
        if plan is False and not OP_PLANS.want(key):
            return False
        s = Storage(device, out.nbytes)
        if plan is False:
            plan = self._make_op_plan(key, device, build, inputs, out, params, s, work)
            if plan is None:
                return False
        COUNTERS.drains["eager"] += 1
        w = work or float(out.numel_)
        try:
            status = plan.run([x._storage for x in inputs], (s,), choose_threads(w, w))
            if status != 0:
                raise RuntimeError(f"ggml graph compute returned status {status}")
        except Exception as e:  # as the ordinary path reports it
            COUNTERS.failed += 1
            raise GraphError(self._failure_message([_phase_label.get() or label], user_site(2), e, "eager")) from e
        COUNTERS.compute("eager", plan.n_nodes)
        out._storage = s
        return True

    @staticmethod
    def _make_op_plan(key, device: Device, build, inputs, out: Array, params: dict, s: Storage, work: float):
        ctx = lib.init(InitParams((len(inputs) + _OP_HEADROOM) * _OVERHEAD, None, True))
        if not ctx:
            raise MemoryError("ggmlgrad: ggml_init failed for an op plan")
        leaves = [_new_leaf(ctx, x) for x in inputs]
        try:
            node = build(ctx, leaves, inputs, out, **params)
            plan = Plan(device, [ctx], leaves, [node], (s,), max_work=work or float(out.numel_))
        except (Uncacheable, MemoryError) as e:
            lib.free(ctx)
            if isinstance(e, Uncacheable):
                OP_PLANS.put(key, None)
            return None  # the ordinary path computes it
        OP_PLANS.put(key, plan)
        return plan

    def alias_pending(self, twin: Array, base: Array) -> None:
        """Make ``twin`` another name for ``base``'s queued node (``detach()`` of a pending
        tensor): the drain gives both the same memory, as eager aliasing would."""
        with self.lock:
            if base._status != PENDING or base._epoch != self.epoch:
                raise PendingError(base._error or no_value_message(base))
            twin._node, twin._epoch, twin._status = base._node, base._epoch, PENDING
            self.roots.append((weakref.ref(twin), base._node))

    def queue_write(self, target: Array, value_node: int, label: str = "write") -> None:
        """Queue ``target ← value`` (call inside :meth:`exclusive` only)."""
        if self._hold == 0:
            raise RuntimeError("ggmlgrad internal: queue_write outside exclusive()")
        self._room()
        leaf = self.node_of(target)
        self.effects.append(lib.cpy(self.ctx, value_node, leaf))
        self.labels.append(label)

    def add_work(self, work: float) -> None:
        """Count flops of nodes built without :meth:`record` (optimizer updates) for the thread policy."""
        self.work += work
        if work > self.max_work:
            self.max_work = work

    def queue_effect(self, node: int, label: str = "effect") -> None:
        """Queue a node that writes in place by itself (e.g. ggml_opt_step_adamw); inside :meth:`exclusive` only."""
        if self._hold == 0:
            raise RuntimeError("ggmlgrad internal: queue_effect outside exclusive()")
        self.effects.append(node)
        self.labels.append(label)

    @contextmanager
    def exclusive(self, reason: str):
        """Drain, let the body queue reads and writes, drain them as their own graph.

        Used for in-place writes and optimizer steps: anything queued before
        computes first, so the writes cannot be reordered before earlier reads.
        """
        with self.lock:
            self.drain(reason)
            self._hold += 1
            try:
                yield self
            except BaseException:
                self._hold -= 1
                self._discard()
                raise
            self._hold -= 1
            self.drain(reason)

    # ------------------------------------------------------------------ draining
    def _discard(self) -> None:
        """Drop the queue without computing (its pending tensors become failed)."""
        roots = self.roots
        for ctx in self.ctx_list:
            self._ctxs.put(ctx)
        self.epoch += 1
        self._new_epoch_state()
        for ref, _ in roots:
            a = ref()
            if a is not None and a._status == PENDING:
                a._status, a._node, a._error = FAILED, 0, "ggmlgrad: the queued op was discarded"

    def fail_next_drain(self, message: str = "injected failure", error: type = RuntimeError) -> None:
        """Test seam: make the next non-empty drain fail as a ggml compute failure would
        (``error=KeyboardInterrupt`` simulates an interrupt during the compute)."""
        self._fail_next = message
        self._fail_error = error

    def drain(self, reason: str) -> bool:
        """Compute everything queued as one graph. Returns False when nothing was queued."""
        with self.lock:
            if self._draining or not (self.roots or self.effects or self.lazy):
                return False
            if self.lazy:
                if (self.guard is None and self._fail_next is None and not self.effects
                        and self._drain_planned(reason)):
                    return True
                self._materialize()
            COUNTERS.drains[reason] += 1
            if self.guard is not None:
                self.guard.on_drain(reason)
            self._draining = True
            roots, effects, labels, keep = self.roots, self.effects, self.labels, self.keep
            ctx_list, site, device, epoch = self.ctx_list, self.site, self.device, self.epoch
            work, max_work = self.work, self.max_work
            # Cleared BEFORE the compute: a failure must not leave a half-run queue to retry.
            self.epoch += 1
            self._new_epoch_state()
            outs: list[Array] = []
            try:
                if _FAULTS:
                    _fault("alloc")
                allocated: dict[int, Storage] = {}
                results_bytes = 0
                for ref, node in roots:
                    a = ref()
                    if a is None or a._status != PENDING or a._node != node:
                        continue  # nobody can read it: computed only if a live node needs it
                    s = allocated.get(node)
                    if s is None:
                        s = allocated[node] = Storage(a.device, a.nbytes)
                        lib.backend_tensor_alloc(s.buffer, node, s.data)
                        results_bytes += s.nbytes
                    a._storage = s  # an alias (alias_pending) shares its base's memory
                    outs.append(a)
                used = 0
                for c in ctx_list:
                    used += lib.used_mem(c)
                # Leaves live in their storages' headers, outside these contexts: one keep entry each.
                n_tensors = used // _OVERHEAD + len(keep) + 16
                graph = self._new_graph(n_tensors)
                for a in outs:
                    lib.build_forward_expand(graph, a._node)
                for n in effects:
                    lib.build_forward_expand(graph, n)
                if self._fail_next is not None:
                    msg, self._fail_next = self._fail_next, None
                    raise self._fail_error(msg)
                n_nodes = lib.graph_n_nodes(graph)
                if n_nodes:
                    status = executor_for(device).compute(graph, n_tensors, choose_threads(work, max_work),
                                                          results_bytes)
                    if status != 0:
                        raise RuntimeError(f"ggml graph compute returned status {status}")
                    COUNTERS.compute(reason, n_nodes)
                for a in outs:
                    a._status = COMPUTED
                    a._node = 0
            except BaseException as e:  # KeyboardInterrupt too: the queue is gone, its tensors must not stay pending
                self._fail(e, roots, labels, site, reason, epoch)
            finally:
                for ctx in ctx_list:
                    self._ctxs.put(ctx)
                del keep
                self._draining = False
            if self.checks:
                _checks.after_drain(self, epoch, outs)
            return True

    def _fail_queue(self, e: BaseException, reason: str):
        """A drain failed before it took the queue: take it now (its tensors fail), then raise as :meth:`_fail`."""
        roots, labels, site, epoch = self.roots, self.labels, self.site, self.epoch
        for ctx in self.ctx_list:
            self._ctxs.put(ctx)
        self.epoch += 1
        self._new_epoch_state()
        COUNTERS.drains[reason] += 1
        self._fail(e, roots, labels, site, reason, epoch)

    def _fail(self, e: BaseException, roots, labels, site, reason: str, epoch: int):
        """A drain failed: its pending tensors become failed (with the reason), then raise."""
        COUNTERS.failed += 1
        # Eager: the op that failed is the call that drained (no site was kept).
        msg = self._failure_message(labels, site or user_site(2), e, reason)
        for ref, _ in roots:
            a = ref()
            if a is not None and a._status == PENDING and a._epoch == epoch:
                a._status, a._node, a._storage = FAILED, 0, None
                a._error = "ggmlgrad: this tensor has no value because its graph failed.\n" + msg
        if not isinstance(e, Exception):
            raise e
        raise (GraphMemoryError if isinstance(e, MemoryError) else GraphError)(msg) from e

    def _plan_signature(self):
        """(key, leaf arrays, kept results by op index) of a queue of lazily recorded ops only, or
        None when it cannot be planned (a built node in the queue, an unhashable parameter)."""
        sig = self._sig
        if sig is None or self.effects:
            return None
        leaves = self._sig_leaves
        for x in leaves:
            if x._status != COMPUTED or x._storage is None:
                return None  # freed or failed since it was recorded: the ordinary drain raises
        epoch = self.epoch
        kept: dict[int, list[Array]] = {}
        for ref, n in self.roots:
            if n >= 0:
                return None
            a = ref()
            if a is None or a._status != PENDING or a._node != n or a._epoch != epoch:
                continue
            lst = kept.get(-1 - n)
            if lst is None:
                kept[-1 - n] = [a]
            else:
                lst.append(a)
        if not kept and not self.updates:
            return None
        return (self.device.dev_ptr, *sig, -1, *sorted(kept)), leaves, kept

    def _drain_planned(self, reason: str) -> bool:
        """Compute a queue of lazily recorded ops with the plan of its signature (made on the
        signature's second drain). False: the caller drains the ordinary way."""
        sig = self._plan_signature()
        if sig is None:
            return False
        key, leaves, kept = sig
        plan = GRAPH_PLANS.plans.get(key, False)
        if plan is None:
            return False
        if plan is not False:
            GRAPH_PLANS.touch(plan)
        device = self.device
        order = sorted(kept)
        try:
            if _FAULTS:
                _fault("alloc")
            outs = [Storage(device, kept[j][0].nbytes) for j in order]
        except BaseException as e:  # the queue must not stay behind to fail every later drain
            self._fail_queue(e, reason)
        if plan is False:
            if not GRAPH_PLANS.want(key):
                return False
            plan = self._make_graph_plan(key, device, leaves, [kept[j][0] for j in order], outs)
            if plan is None:
                return False
        COUNTERS.drains[reason] += 1
        self._draining = True
        roots, labels, site, epoch = self.roots, self.labels, self.site, self.epoch
        work, max_work = self.work, self.max_work
        lazy = self.lazy  # keeps the leaves' memory alive through the compute
        self.epoch += 1
        self._new_epoch_state()
        try:
            status = plan.run([x._storage for x in leaves], outs, choose_threads(work, max_work))
            if status != 0:
                raise RuntimeError(f"ggml graph compute returned status {status}")
            COUNTERS.compute(reason, plan.n_nodes)
            for j, s in zip(order, outs):
                for a in kept[j]:
                    a._storage = s
                    a._status = COMPUTED
                    a._node = 0
        except BaseException as e:
            self._fail(e, roots, labels, site, reason, epoch)
        finally:
            del lazy
            self._draining = False
        if self.checks:
            _checks.after_drain(self, epoch, [a for j in order for a in kept[j]])
        return True

    def _make_graph_plan(self, key, device: Device, leaves: list[Array], results: list[Array], outs):
        """Build the queued nodes into contexts the plan will own, over private leaves."""
        saved_ctx = (self.ctx, self.ctx_list, self._credit)
        self.ctx, self.ctx_list, self._credit = 0, [], 0
        self._private_leaves = True
        self._private_leaf_of = {}
        try:
            self._materialize()
            ctxs = self.ctx_list
            leaf_nodes = [self._private_leaf_of.get(id(x), 0) for x in leaves]
        finally:
            self._private_leaves = False
            self._private_leaf_of = {}
            self.ctx, self.ctx_list, self._credit = saved_ctx[0], saved_ctx[1] + self.ctx_list, saved_ctx[2]
        try:
            plan = Plan(device, list(ctxs), leaf_nodes, [a._node for a in results], outs, self.effects,
                        self.max_work)
        except (Uncacheable, MemoryError) as e:
            if isinstance(e, Uncacheable):
                GRAPH_PLANS.put(key, None)
            return None  # the nodes stay in the queue's contexts: the ordinary drain computes them
        for c in ctxs:  # the plan owns them now
            self.ctx_list.remove(c)
        if self.ctx in ctxs:
            self.ctx, self._credit = 0, 0
        GRAPH_PLANS.put(key, plan)
        return plan

    def _new_graph(self, size: int) -> int:
        need = _GRAPH_OVERHEAD.get(size)
        if need is None:
            if len(_GRAPH_OVERHEAD) > 4096:
                _GRAPH_OVERHEAD.clear()
            need = _GRAPH_OVERHEAD[size] = lib.graph_overhead_custom(size, False) + 1024
        if need > self._graph_ctx_size:
            if self._graph_ctx:
                lib.free(self._graph_ctx)
            self._graph_ctx_size = max(need, 2 * self._graph_ctx_size)
            self._graph_ctx = lib.init(InitParams(self._graph_ctx_size, None, True))
        else:
            lib.reset(self._graph_ctx)
        return lib.new_graph_custom(self._graph_ctx, size, False)

    @staticmethod
    def _failure_message(labels: list[str], site: str | None, err: BaseException, reason: str = "") -> str:
        counts = Counter(labels)  # insertion-ordered: order of first appearance
        ops = ", ".join(f"{k} x{v}" for k, v in counts.items())
        where = f" The first of them was queued at {site}." if site else ""
        if reason in ("eager", "check"):  # one op per graph: the error is already at its own call
            return f"ggmlgrad: the graph of {ops} failed: {err}." + (f" Called at {site}." if site else "")
        return (f"ggmlgrad graph mode: the queued graph failed ({len(labels)} queued ops: {ops}): {err}.{where}\n"
                "Rerun with gg.graph_mode(True, check=True) or GGMLGRAD_GRAPH_CHECK=1 to compute each op as "
                "it is queued and get the error at its own call.")

    def take_for_capture(self):
        """Hand the queue over to a capture recording instead of computing it.

        Returns (roots, effects, ctx_list, labels, device, work, max_work, keep); the caller
        owns the contexts and must give them back with :meth:`release_contexts`.
        """
        with self.lock:
            self._materialize()
            state = (self.roots, self.effects, self.ctx_list, self.labels, self.device, self.work,
                     self.max_work, self.keep)
            self.epoch += 1
            self._new_epoch_state()
            return state

    def release_contexts(self, ctx_list: list[int]) -> None:
        for ctx in ctx_list:
            lib.free(ctx)


def no_value_message(a: Array) -> str:
    """Why a pending tensor that is not in this thread's current queue has no value."""
    owner = owner_of(a._epoch)
    if owner is not None and a._status == PENDING:
        return (f"ggmlgrad: this tensor is queued in the graph-mode queue of another thread "
                f"({owner.thread_name!r}) and has no value yet; each thread computes its own queue. Read it "
                f"(e.g. .numpy()) or leave graph mode in that thread before handing it to this one.")
    return "ggmlgrad: this tensor's queued graph was discarded; it has no value"


# Every thread has its own Engine (its queue, drains, capture guard): see .local.
ENGINE = PerThread(Engine)
modes._on_graph_off.append(lambda: ENGINE.drain("graph_mode_off"))


def queue_length() -> int:
    """How many nodes are queued and not yet computed."""
    return len(ENGINE)


def is_pending(a: Array) -> bool:
    return a._status == PENDING
