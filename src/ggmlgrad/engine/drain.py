"""The drain: compute the queue as ONE ggml graph, or with a cached plan; attribute failures.

One route for every compute (:meth:`Drainer.drain`): look up the plan, build on a miss, run it.
Every plan is an entry of the one trace cache (:mod:`.trace_cache`), keyed on the record sequence
it computes. The queue's one record (an eager or check-mode op) looks up its op plan, a record
that carries its plan (an eager forward segment) runs that plan, a queue of graph-mode records
looks up the graph plan of its record sequence, and without a plan the records are built (:mod:`.build`) and computed as
one graph. Every compute is :meth:`Drainer.run`, the one call of the executor (:mod:`.executor`),
which capture replays use too, and so do eager call plans (:mod:`.call_plans`: a repeated eager
call runs the op plan its record found, with this drain's checks, counters and failure route). Every drain counts the same counters (drains and computes by
reason) and fails the same way.

Rules (each paid for by a silent wrong result in ggmlR, see ag_defer.R):
- the queue is taken and cleared BEFORE computing, so a failed compute is never
  retried against a context in an unknown state;
- every live root is expanded (residual branches and gradients are roots that
  are not reachable from one another);
- only a complete success marks tensors computed; a failure marks the queue's pending
  tensors failed and raises a ``GraphError`` naming the queued ops and the call site.
"""
from __future__ import annotations

import weakref
from collections import Counter
from sys import getrefcount

from .._ggml import lib
from ..runtime import Device, Storage, StridedAlias, choose_threads
from ..runtime import threads as _threads
from ..runtime.faults import ARMED as _FAULTS, hit as _fault
from . import checks as _checks
from .array import COMPUTED, FAILED, PENDING, Array
from .build import _OVERHEAD, make_op_plan
from .context import current
from .errors import GraphError, GraphMemoryError
from .executor import BuiltGraph
from .plans import freeze_params
from .records import _phase_label, pending_results, user_site
from .trace_cache import OP

# A plan's results get new memory at every run, and small ones (an acting step's logits) are mostly
# dropped a run or two later: a run takes such memory back when nothing else holds it any more.
_REUSE_BYTES = 1 << 16


def result_storages(plan, device: Device, sizes: list[int]) -> tuple[list[Storage], list]:
    """Memory for a run of ``plan`` whose results have ``sizes`` bytes: for each result, the storage
    one of the last two runs gave it when nothing else refers to it any more (no tensor, NumPy view,
    queue or recording), a new one otherwise; and the candidates not taken (give both to
    :func:`keep_results` after the run). The candidates are claimed first (one attribute swap), so
    two threads never share one."""
    spare, plan.spare = getattr(plan, "spare", None), None
    if spare is None or len(spare[0]) != len(sizes):
        return [Storage(device, n) for n in sizes], None
    last, older = spare  # by result index: the last run's storages and an older one (or None)
    outs = []
    for i, n in enumerate(sizes):
        # Counted before any local name refers to them: only their list may hold them.
        if _refs(last, i) == _REFS_UNSHARED and last[i].nbytes == n and last[i].device is device:
            outs.append(last[i])
            last[i] = None
        elif older[i] is not None and _refs(older, i) == _REFS_UNSHARED and older[i].nbytes == n \
                and older[i].device is device:
            outs.append(older[i])
            older[i] = None
        else:
            outs.append(Storage(device, n))
    return outs, spare


def _refs(items: list, k: int) -> int:
    """The reference count of ``items[k]`` as seen from here (the list and this call's own)."""
    return getrefcount(items[k])


# What _refs reads for an item that only its list holds (measured, not assumed: how many references
# the call itself adds depends on the interpreter); any other holder (a tensor, a NumPy view) adds one.
_REFS_UNSHARED = _refs([object()], 0)


def keep_results(plan, outs: list[Storage], spare) -> None:
    """Let the next runs of ``plan`` reuse ``outs`` once their tensors are gone, and for each result
    the older candidate the run did not take; small results only."""
    total = 0
    for s in outs:
        total += s.nbytes
    if total > _REUSE_BYTES:
        plan.spare = None
        return
    if spare is None:
        plan.spare = (list(outs), [None] * len(outs))
        return
    last, older = spare
    plan.spare = (list(outs), [last[i] if last[i] is not None else older[i] for i in range(len(outs))])


class Drainer:
    """The only compute of the engine: takes the queue, finds or makes its plan, runs it through
    the executor (:meth:`run`, the one call of :meth:`Executor.compute <.executor.Executor.compute>`),
    and marks its tensors computed, or failed with the queued ops and their call site."""

    last_plan = None  # the graph plan the last planned drain ran (see forward.plan_of_last_drain)

    def __init__(self, queue, builder, executor, lock) -> None:
        self.queue = queue
        self.builder = builder
        self.executor = executor
        self.lock = lock
        self._draining = False
        self._fail_next: str | None = None
        self._fail_error: type = RuntimeError
        self.settle_queue: list = []  # (weak ref, callback): queued tensors to settle once computed
        self.checks = queue.checks  # the queue's index checks (one list, cleared in place: checks.py)
        # While the tensor layer learns a call plan: each op-plan run of _drain_one is noted here
        # (engine/call_plans.py); None otherwise.
        self.learn: list | None = None

    def run(self, plan, counters, reason: str, threads: int, *args):
        """Compute ``plan`` (bound by ``plan.bind(*args)``) and count it; returns what ``bind``
        returned. Every compute of the engine and of capture replays is this call."""
        got = self.executor.compute(plan, threads, args)
        counters.computes[reason] += 1  # counters.compute, inlined (once per eager op)
        counters.nodes.append(plan.n_nodes)
        return got

    def settle_when_computed(self, a: Array, fn) -> None:
        """Call ``fn(a)`` once the queued ``a`` is computed, before its drain returns (a view then
        moves into its base's memory: tensor/views.py)."""
        self.settle_queue.append((weakref.ref(a), fn))

    def _settle(self) -> None:
        keep = []
        for ref, fn in self.settle_queue:
            a = ref()
            if a is not None:
                if a._status == COMPUTED:
                    fn(a)
                elif a._status == PENDING:
                    keep.append((ref, fn))
        self.settle_queue = keep

    def _take(self) -> tuple[list[int], int]:
        """Take the queue's node contexts and end its epoch: (contexts, the epoch that ended)."""
        return self.builder.take_contexts(), self.queue.next_epoch()

    def discard(self) -> None:
        """Drop the queue without computing (its pending tensors become failed); the caller holds the lock."""
        roots = self.queue.results()
        ctx_list, _ = self._take()
        self.builder.give_back(ctx_list)
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
        """Compute everything queued. Returns False when nothing was queued."""
        q = self.queue
        # (``q.one`` is set only under the lock, by a record that drains it at once)
        if not (q.roots or q.effects or q.lazy):
            return False  # nothing queued (leaving a graph-mode block after a read): no lock needed
        with self.lock:
            return self.drain_locked(reason)

    def drain_locked(self, reason: str) -> bool:
        """:meth:`drain` for a caller that holds the lock. The one route of every compute: the
        queue's one record (an eager op) looks up its op plan, a queue of records its graph plan;
        without a plan the records are built and computed as one graph. Same counters, same failures."""
        q = self.queue
        one = q.one
        if one is not None:
            q.one = None
            if type(one) is not tuple:  # a record that carries its plan
                return self._drain_planned_record(one, reason)
            if self._fail_next is None and self._drain_one(one, reason):
                return True
            self.builder.build_record(*one[:6])
        lazy = q.lazy
        if self._draining or not (q.roots or q.effects or lazy):
            return False
        c = current()
        observer, counters = c.observer, c.counters
        if lazy:
            if observer is None and self._fail_next is None and not q.effects and self._drain_planned(c, reason):
                return True
            self.builder.materialize()
        return self._drain_built(observer, counters, reason)

    def _drain_built(self, observer, counters, reason: str) -> bool:
        """Compute the built queue as one graph (the records were materialised)."""
        counters.drains[reason] += 1
        if observer is not None:
            observer.on_drain(reason)
        self._draining = True
        q = self.queue
        roots, effects, labels, keep = q.roots, q.effects, q.labels, q.keep
        site, device, work, max_work = q.site, q.device, q.work, q.max_work
        # Taken BEFORE the compute: a failure must not leave a half-run queue to retry.
        ctx_list, epoch = self._take()
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
            for ctx in ctx_list:
                used += lib.used_mem(ctx)
            # Leaves live in their storages' headers, outside these contexts: one keep entry each.
            n_tensors = used // _OVERHEAD + len(keep) + 16
            graph = self.executor.new_graph(n_tensors)
            for a in outs:
                lib.build_forward_expand(graph, a._node)
            for n in effects:
                lib.build_forward_expand(graph, n)
            if self._fail_next is not None:
                msg, self._fail_next = self._fail_next, None
                raise self._fail_error(msg)
            built = BuiltGraph(device, graph, n_tensors, results_bytes)
            if built.n_nodes:
                self.run(built, counters, reason, choose_threads(work, max_work))
            for a in outs:
                a._status = COMPUTED
                a._node = 0
        except BaseException as e:  # KeyboardInterrupt too: the queue is gone, its tensors must not stay pending
            self._fail(e, roots, labels, site, reason, epoch)
        finally:
            self.builder.give_back(ctx_list)
            del keep
            self._draining = False
        if self.checks:
            _checks.after_drain(q, epoch, outs)
        if self.settle_queue:
            self._settle()
        return True

    def _fail_queue(self, e: BaseException, reason: str):
        """A drain failed before it took the queue: take it now (its tensors fail), then raise as :meth:`_fail`."""
        q = self.queue
        roots, labels, site = q.results(), q.labels, q.site
        ctx_list, epoch = self._take()
        self.builder.give_back(ctx_list)
        current().counters.drains[reason] += 1
        self._fail(e, roots, labels, site, reason, epoch)

    def _fail(self, e: BaseException, roots, labels, site, reason: str, epoch: int):
        """A drain failed: its pending tensors become failed (with the reason), then raise."""
        current().counters.failed += 1
        # Eager: the op that failed is the call that drained (no site was kept).
        msg = _failure_message(labels, site or user_site(2), e, reason)
        for ref, _ in roots:
            a = ref()
            if a is not None and a._status == PENDING and a._epoch == epoch:
                a._status, a._node, a._storage = FAILED, 0, None
                a._error = "ggmlgrad: this tensor has no value because its graph failed.\n" + msg
        if not isinstance(e, Exception):
            raise e
        raise (GraphMemoryError if isinstance(e, MemoryError) else GraphError)(msg) from e

    def _drain_planned(self, c, reason: str) -> bool:
        """Compute a queue of lazily recorded ops with the plan of its signature (made on the
        signature's second drain). False: the caller drains the ordinary way."""
        q = self.queue
        sig = q.plan_signature()
        if sig is None:
            return False
        key, leaves, kept = sig
        plans = c.trace_cache
        plan = plans.plans.get(key, False)
        if plan is None:
            return False
        if plan is not False:
            plans.touch(plan)
        device = q.device
        order = sorted(kept)
        try:
            if _FAULTS:
                _fault("alloc")
            if plan is False:
                outs, left = [Storage(device, kept[j][0].nbytes) for j in order], None
            else:
                outs, left = result_storages(plan, device, [kept[j][0].nbytes for j in order])
        except BaseException as e:  # the queue must not stay behind to fail every later drain
            self._fail_queue(e, reason)
        if plan is False:
            if not plans.want(key):
                return False
            plan = self.builder.make_graph_plan(plans, key, device, leaves, [kept[j][0] for j in order], outs)
            if plan is None:
                return False
        c.counters.drains[reason] += 1
        self._draining = True
        roots, labels, site = q.roots, q.labels, q.site
        work, max_work = q.work, q.max_work
        lazy = q.lazy  # keeps the leaves' memory alive through the compute
        ctx_list, epoch = self._take()
        self.builder.give_back(ctx_list)
        try:
            self.run(plan, c.counters, reason, choose_threads(work, max_work), [x._storage for x in leaves], outs)
            self.last_plan = plan
            keep_results(plan, outs, left)
            for j, s in zip(order, outs):
                for a in kept[j]:
                    a._storage = s
                    a._status = COMPUTED
                    a._node = 0
        except BaseException as e:
            self._fail(e, pending_results(roots, lazy), labels, site, reason, epoch)
        finally:
            del lazy
            self._draining = False
        if self.checks:
            _checks.after_drain(q, epoch, [a for j in order for a in kept[j]])
        if self.settle_queue:
            self._settle()
        return True

    def _drain_planned_record(self, rec: PlannedRecord, reason: str) -> bool:
        """Compute the queue's one record that carries its plan (see :class:`PlannedRecord`)."""
        c = current()
        counters = c.counters
        counters.drains[reason] += 1
        plan, out = rec.plan, rec.out
        c.trace_cache.touch(plan)
        try:
            outs, left = result_storages(plan, out.device, [out.nbytes])
            self.run(plan, counters, reason, choose_threads(rec.work, rec.max_work), rec.leaves, outs)
        except BaseException as err:  # the drain's failure (the call is the site, as for an eager op)
            self._fail(err, (), list(rec.labels), None, reason, self.queue.epoch)
        keep_results(plan, outs, left)
        out._storage = outs[0]
        return True

    def _drain_one(self, one: tuple, reason: str) -> bool:
        """Compute the queue's one record (an eager or check-mode op) whose inputs are computed
        with the cached plan of its op signature (made on the signature's second use). False:
        nothing done, the caller builds the record and drains the ordinary way."""
        out, label, build, inputs, work, params, c = one
        for x in inputs:
            s = x._storage
            if x._status != COMPUTED or s is None or not x.numel_ or type(s) is StridedAlias:
                return False  # (a plan's leaves are contiguous)
        device = out.device
        plans = c.trace_cache
        try:
            # The trace cache key of the one-record sequence this op is (engine/trace_cache.py): the
            # kind, the device (inputs share out's: every op's validation checks it), the record's
            # header, then each input as a new slot with its shape and dtype (an input given twice
            # gets two slots: the op plan binds each input on its own); the usual one or two inputs
            # without a generator (this runs per eager op).
            fp = freeze_params(params) if params else ()
            n = len(inputs)
            if n == 1:
                x = inputs[0]
                key = (OP, device.dev_ptr, build, out.shape, out.dtype, c.precision, fp, 1, -1, x.shape, x.dtype)
            elif n == 2:
                x, y = inputs
                key = (OP, device.dev_ptr, build, out.shape, out.dtype, c.precision, fp, 2, -1, x.shape, x.dtype,
                       -2, y.shape, y.dtype)
            else:
                key = (OP, device.dev_ptr, build, out.shape, out.dtype, c.precision, fp, n,
                       *[v for i, x in enumerate(inputs) for v in (-1 - i, x.shape, x.dtype)])
            plan = plans.plans.get(key, False)
        except TypeError:  # an unhashable parameter (e.g. a tensor): no plan
            return False
        if plan is None:
            return False
        w = work or out.numel_
        # choose_threads(w, w), inlined for the usual small op (this runs per eager op)
        threads = _threads._override
        if threads is None:
            threads = 1 if w < _threads.MIN_WORK_FOR_THREADS else choose_threads(w, w)
        s = None
        if plan is False:
            if not plans.want(key):
                return False
            s = Storage(device, out.nbytes)
            plan = make_op_plan(plans, key, device, build, inputs, out, params, s, work)
            if plan is None:
                return False
        counters = c.counters
        counters.drains[reason] += 1
        try:
            # On a hit (``s`` None) the plan picks the result's memory.
            s = self.run(plan, counters, reason, threads, inputs, device, plan.out_nbytes, s)
        except BaseException as e:  # the drain's failure path (the op's own call is the site)
            self._fail(e, (), [_phase_label.get() or label], None, reason, self.queue.epoch)
        out._storage = s   # (engine/call_plans.py's run_call_plan is this hit without the record: keep them alike)
        if self.learn is not None:  # a call plan is being learned (engine/call_plans.py)
            self.learn.append((out, inputs, plan, label, w, plans, c))
        if self.checks:
            _checks.after_drain(self.queue, out._epoch, (out,))
        return True


class PlannedRecord:
    """A record that carries its plan (a forward segment's, ``forward.compute_alone``): its drain
    runs ``plan`` over ``leaves`` (storages) into ``out``, with no key to make."""

    __slots__ = ("plan", "leaves", "out", "labels", "work", "max_work")

    def __init__(self, plan, leaves: list, out: Array, labels, work: float, max_work: float) -> None:
        self.plan, self.leaves, self.out = plan, leaves, out
        self.labels, self.work, self.max_work = labels, work, max_work


def _failure_message(labels: list[str], site: str | None, err: BaseException, reason: str = "") -> str:
    counts = Counter(labels)  # insertion-ordered: order of first appearance
    ops = ", ".join(f"{k} x{v}" for k, v in counts.items())
    where = f" The first of them was queued at {site}." if site else ""
    if reason in ("eager", "check"):  # one op per graph: the error is already at its own call
        return f"ggmlgrad: the graph of {ops} failed: {err}." + (f" Called at {site}." if site else "")
    return (f"ggmlgrad graph mode: the queued graph failed ({len(labels)} queued ops: {ops}): {err}.{where}\n"
            "Rerun with gg.graph_mode(True, check=True) or GGMLGRAD_GRAPH_CHECK=1 to compute each op as "
            "it is queued and get the error at its own call.")
