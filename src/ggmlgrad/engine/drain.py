"""The drain: compute the queue as ONE ggml graph, or with a cached plan; attribute failures.

One route for every compute (:meth:`Drainer.drain`): the queue's one record (an eager or
check-mode op) looks up its op plan, a queue of graph-mode records looks up the plan of its
record key, and without a plan the records are built (:mod:`.build`) and computed as one graph.
Every route counts the same counters (drains and computes by reason) and fails the same way.

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

from .._ggml import lib, new_context
from ..runtime import Device, Storage, StridedAlias, choose_threads, executor_for
from ..runtime.faults import ARMED as _FAULTS, hit as _fault
from . import checks as _checks
from .array import COMPUTED, FAILED, PENDING, Array
from .build import _OVERHEAD, make_op_plan
from .context import current
from .errors import GraphError, GraphMemoryError
from .plans import Plan, Uncacheable, freeze_params
from .records import _phase_label, user_site

_GRAPH_OVERHEAD: dict[int, int] = {}  # graph size → ggml_graph_overhead_custom
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
    """Engine part: drains, cached-plan computes and failure attribution (mixed into ``Engine``)."""

    last_plan = None  # the graph plan the last planned drain ran (see forward.plan_of_last_drain)
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
        if not (self.roots or self.effects or self.lazy):
            return False  # nothing queued (leaving a graph-mode block after a read): no lock needed
        with self.lock:
            return self._drain_locked(reason)

    def _drain_locked(self, reason: str) -> bool:
        """:meth:`drain` for a caller that holds the lock. The one route of every compute: a queue
        of one record (an eager op) looks up its op plan, a longer one its graph plan; without a
        plan the records are built and computed as one graph. Same counters, same failures."""
        lazy = self.lazy
        if self._draining or not (self.roots or self.effects or lazy):
            return False
        c = current()
        observer, counters = c.observer, c.counters
        if lazy:
            if observer is None and self._fail_next is None and not self.effects and self._drain_planned(c, reason):
                return True
            self._materialize()
        return self._drain_built(observer, counters, reason)

    def _drain_built(self, observer, counters, reason: str) -> bool:
        """Compute the built queue as one graph (the records were materialised)."""
        counters.drains[reason] += 1
        if observer is not None:
            observer.on_drain(reason)
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
            for ctx in ctx_list:
                used += lib.used_mem(ctx)
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
                counters.compute(reason, n_nodes)
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
        if self.settle_queue:
            self._settle()
        return True

    def _fail_queue(self, e: BaseException, reason: str):
        """A drain failed before it took the queue: take it now (its tensors fail), then raise as :meth:`_fail`."""
        roots, labels, site, epoch = self.roots, self.labels, self.site, self.epoch
        for ctx in self.ctx_list:
            self._ctxs.put(ctx)
        self.epoch += 1
        self._new_epoch_state()
        current().counters.drains[reason] += 1
        self._fail(e, roots, labels, site, reason, epoch)

    def _fail(self, e: BaseException, roots, labels, site, reason: str, epoch: int):
        """A drain failed: its pending tensors become failed (with the reason), then raise."""
        current().counters.failed += 1
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

    def _drain_planned(self, c, reason: str) -> bool:
        """Compute a queue of lazily recorded ops with the plan of its signature (made on the
        signature's second drain). False: the caller drains the ordinary way."""
        sig = self._plan_signature()
        if sig is None:
            return False
        key, leaves, kept = sig
        plans = c.graph_plans
        plan = plans.plans.get(key, False)
        if plan is None:
            return False
        if plan is not False:
            plans.touch(plan)
        device = self.device
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
            plan = self._make_graph_plan(plans, key, device, leaves, [kept[j][0] for j in order], outs)
            if plan is None:
                return False
        c.counters.drains[reason] += 1
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
            c.counters.compute(reason, plan.n_nodes)
            self.last_plan = plan
            keep_results(plan, outs, left)
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
        if self.settle_queue:
            self._settle()
        return True

    def _make_graph_plan(self, plans, key, device: Device, leaves: list[Array], results: list[Array], outs):
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
                plans.put(key, None)
            return None  # the nodes stay in the queue's contexts: the ordinary drain computes them
        for c in ctxs:  # the plan owns them now
            self.ctx_list.remove(c)
        if self.ctx in ctxs:
            self.ctx, self._credit = 0, 0
        plans.put(key, plan)
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
            self._graph_ctx = new_context(self._graph_ctx_size)
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

    def _drain_one(self, one: tuple, reason: str) -> bool:
        """Compute the queue's one record (an eager or check-mode op) whose inputs are computed
        with the cached plan of its op signature (made on the signature's second use). False:
        nothing done, the caller builds the record and drains the ordinary way."""
        out, label, build, inputs, work, params, c = one
        sig = []
        for x in inputs:
            s = x._storage
            if x._status != COMPUTED or s is None or not x.numel_ or type(s) is StridedAlias:
                return False  # (a plan's leaves are contiguous)
            sig.append(x.shape)
            sig.append(x.dtype)
        device = out.device
        plans = c.op_plans
        try:
            # Inputs share out's device (every op's validation checks it).
            key = (build, out.shape, out.dtype, device.dev_ptr, c.precision, *sig,
                   freeze_params(params) if params else ())
            plan = plans.plans.get(key, False)
        except TypeError:  # an unhashable parameter (e.g. a tensor): no plan
            return False
        if plan is None:
            return False
        w = work or float(out.numel_)
        if plan is False:
            if not plans.want(key):
                return False
            s = Storage(device, out.nbytes)
            plan = make_op_plan(plans, key, device, build, inputs, out, params, s, work)
            if plan is None:
                return False
        else:
            s = None
        counters = c.counters
        counters.drains[reason] += 1
        try:
            if s is None:  # a hit: the plan picks the result's memory
                status, s = plan.run_op(inputs, device, out.nbytes, choose_threads(w, w))
            else:
                status = plan.run([x._storage for x in inputs], (s,), choose_threads(w, w))
            if status != 0:
                raise RuntimeError(f"ggml graph compute returned status {status}")
        except BaseException as e:  # the drain's failure path (the op's own call is the site)
            self._fail(e, (), [_phase_label.get() or label], None, reason, self.epoch)
        counters.compute(reason, plan.n_nodes)
        out._storage = s
        if self.checks:
            _checks.after_drain(self, out._epoch, (out,))
        return True
