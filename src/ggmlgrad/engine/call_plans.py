"""Eager call plans, the engine's half: run a call's op plan as the drain of its one record would.

A public entry point (``a + b``, ``x.relu()``, ``F.linear``; see ``tensor/call_plans.py``) whose
call turned into exactly one eager op, computed by that op's cached op plan, keeps a
:class:`CallPlan`: the op plan, the result's shape and dtype, where the op's inputs are among
the call's arguments. A later call with the same signature runs :func:`run_call_plan`: the same
state checks as the queue's one-record drain (``Drainer._drain_one``), the same counters, the same
compute (:meth:`Drainer.run <.drain.Drainer.run>`, the engine's one compute) and the same failure
route, without the front end, the op's inference or the record. It is a plan on the drain's one
route (look up the plan, build on a miss, run it through ``Drainer.run``), keyed by the call.

Learning is verified, not guessed: while the tensor layer runs a call it may plan, the drainer's
``learn`` list is set and ``_drain_one`` notes each op-plan run in it (:func:`begin_learning`,
:func:`end_learning`); a call is planned only when it noted one run, counted one drain and one
compute and no transfer, and returned that run's result.
"""
from __future__ import annotations

import threading
import weakref

from ..runtime import StridedAlias
from ..runtime import budget as _budget
from ..runtime import threads as _threads
from ..runtime.faults import ARMED as _FAULTS
from .array import COMPUTED
from .context import current
from .queue import ENGINE as _ENGINES
from .records import _phase_label

# This thread's engine (``ENGINE._engine``, made once per thread and never replaced), read from a plain
# thread-local: PerThread's ``__getattr__`` hook makes every attribute read of ENGINE cost twice as much.
_THIS = threading.local()

__all__ = ["CallPlan", "run_call_plan", "begin_learning", "end_learning"]


class CallPlan:
    """What one call signature ran: the op plan of its one op (an entry of ``cache``, the trace
    cache, as long as ``cache.removed`` is still ``removed``: the cache's one staleness rule), the context (and matmul precision) it ran in, the result's
    shape, dtype and device, the op's work (the thread policy's input), its label (for errors),
    and ``sel``: for each input of the op, the position of the call argument that is that input
    (None: the arguments themselves, in order)."""

    __slots__ = ("plan", "cache", "plans", "removed", "ctx", "precision", "device", "shape", "dtype", "numel",
                 "nbytes", "work", "label", "sel")

    def __init__(self, plan, cache, ctx, out, work: float, label: str, sel) -> None:
        # Weakly: an op plan the cache evicted is freed once nobody runs it (the cache's ``removed``
        # tells a call plan its op plan may be gone before it dereferences this).
        self.plan = weakref.ref(plan)
        self.cache = cache
        self.plans = cache.plans          # the cache's dict itself (a test may swap it)
        self.removed = cache.removed
        self.ctx = ctx                    # the context it learned in (eager, no capture)
        self.precision = ctx.precision
        self.device = out.device
        self.shape = out.shape
        self.dtype = out.dtype
        self.numel = out.numel_
        self.nbytes = plan.out_nbytes
        self.work = work
        self.label = label
        self.sel = sel


def run_call_plan(entry: CallPlan, args: tuple, blank, c):
    """Compute the call whose arguments are ``args`` with ``entry`` in the current context ``c`` and
    return its result (made by ``blank(shape, dtype, device)``), or None, computing nothing, when the
    state does not let the queue's one-record drain use an op plan now (the caller then runs the
    call the ordinary way)."""
    if c is not entry.ctx and (c.graph or c.observer is not None or c.precision != entry.precision
                               or c.trace_cache is not entry.cache):
        return None   # (contexts never change: the one it learned in allows it)
    cache = entry.cache
    if cache.removed != entry.removed or cache.plans is not entry.plans or _FAULTS or entry.numel > _budget.HUGE_NUMEL:
        return None   # its op plan may be gone, a fault is armed, a huge result is checked against memory
    plan = entry.plan()   # (alive: its cache still holds it)
    if plan is None:
        return None
    sel = entry.sel
    inputs = args if sel is None else tuple([args[i] for i in sel])
    device = entry.device
    for x in inputs:
        s = x._storage
        if x._status != COMPUTED or s is None or type(s) is StridedAlias or x.device is not device:
            return None   # (what _drain_one checks: a plan's leaves are computed and contiguous)
    try:
        e = _THIS.engine
    except AttributeError:   # (this thread's first hit)
        e = _THIS.engine = _ENGINES._engine
    lock = e.lock
    lock.acquire()   # (``with e.lock``, which costs twice as much: its __enter__/__exit__ are looked up per call)
    try:
        q = e.queue
        d = e.drainer
        if (q.hold or q.one is not None or q.lazy or q.roots or q.effects or d._fail_next is not None
                or d.learn is not None or d.checks or d._draining):
            return None
        out = blank(entry.shape, entry.dtype, device)
        threads = _threads._override   # (Drainer._drain_one's choice)
        if threads is None:
            w = entry.work
            threads = 1 if w < _threads.MIN_WORK_FOR_THREADS else _threads.choose_threads(w, w)
        counters = c.counters
        counters.drains["eager"] += 1
        counters.call_plan_hits += 1
        try:
            out._storage = d.run(plan, counters, "eager", threads, inputs, device, entry.nbytes, None)
        except BaseException as err:  # the one-record drain's failure route (the call is the site)
            d._fail(err, (), [_phase_label.get() or entry.label], None, "eager", q.epoch)
    finally:
        lock.release()
    return out


def begin_learning():
    """Start watching a call the tensor layer may plan: a token for :func:`end_learning`, or None
    when the state could not use a call plan anyway (graph mode, a capture, a queue, a nested call)."""
    c = current()
    if c.graph or c.observer is not None:
        return None
    e = _ENGINES._engine
    q = e.queue
    d = e.drainer
    if (q.hold or q.one is not None or q.lazy or q.roots or q.effects or d._fail_next is not None
            or d.learn is not None or d.checks or _FAULTS):
        return None
    notes = d.learn = []
    return d, notes, c, c.counters.totals()


def end_learning(token) -> tuple | None:
    """Stop watching; ``(out, inputs, plan, label, work, cache, context)`` of the one op-plan run the call
    made when it made exactly that and nothing else the engine counts, else None."""
    d, notes, c, before = token
    d.learn = None
    if len(notes) != 1 or current() is not c or c.counters.totals() != _one_more(before):
        return None
    note = notes[0]
    if note[6] is not c or note[5] is not c.trace_cache:
        return None
    return note


def abort_learning(token) -> None:
    """Stop watching a call that raised."""
    token[0].learn = None



def _one_more(before: tuple) -> tuple:
    drains, computes, uploads, downloads, failed = before
    return drains + 1, computes + 1, uploads, downloads, failed
