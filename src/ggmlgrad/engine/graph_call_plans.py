"""Graph-mode call plans, the engine's half: append a call's records again from its signature.

In graph mode a public call (``a + b``, ``x.relu()``, a composite front end; see
``tensor/call_plans.py``) appends records to the queue and computes nothing. A repeated call with
the same signature appends the same records: the same builders, parameters, result shapes and
dtypes, precision, labels and work, reading the same arguments. A :class:`GraphCallPlan` keeps those
records with each input as the position of the call argument it was, or the record of the same call
that made it; :func:`run_graph_call_plan` appends them again, without the front end, the ops' inference
or their ``record`` calls. The queue and its plan key come out as the ordinary recording leaves them
(the drain then looks up its plan as always): it is a kind of plan on the one route, the records'
trace, not a route beside it.

Only the call's result gets a tensor; the records of intermediates get a dead result reference,
as the ordinary recording's are once the call returns.

Learning is verified, not guessed (:func:`begin_watching`, :func:`end_watching`): a call is planned
only when it appended records and nothing else (no drain, compute or transfer, no built node,
in-place write, update, index check or alias), its result is its last record's and the only one
still alive, and every record input is a call argument or an earlier record of the call.
"""
from __future__ import annotations

import math
import weakref

from .._ggml.accel import ACCEL
from ..runtime import budget as _budget
from .array import COMPUTED, FAILED, PENDING
from .context import current
from .plans import freeze_params
from .call_plans import _THIS   # this thread's engine, read from a plain thread-local
from .queue import ENGINE as _ENGINES
from .records import REC_INPUTS, REC_REF, _phase_label, user_site

__all__ = ["GraphCallPlan", "run_graph_call_plan", "begin_watching", "end_watching"]

# The compiled accelerator's one-record append (``_ggml/_accel.c`` graph_append), once the tensor
# class is known (:func:`set_tensor_class`); None: the Python path.
_COMPILED_APPEND = None
_BLANK = None   # the tensor class's _blank (the Python append makes results with it)


def set_tensor_class(cls: type) -> None:
    """The class of the results graph call plans make (the tensor layer's ``Tensor``, made with
    ``Tensor._blank``'s fields): the compiled append, when the accelerator has one, makes them too."""
    global _COMPILED_APPEND, _BLANK
    _BLANK = cls._blank
    configure = getattr(ACCEL, "configure_graph_append", None)
    if configure is None or (COMPUTED, PENDING) != (0, 1):   # (the values _accel.c writes)
        _COMPILED_APPEND = None
        return
    configure(cls)
    _COMPILED_APPEND = ACCEL.graph_append


def use_compiled_append(on: bool) -> bool:
    """Append one-record plans with the accelerator's ``graph_append`` (True, when it has one) or
    the Python path (False); returns the previous setting (tests compare the two)."""
    global _COMPILED_APPEND
    was = _COMPILED_APPEND is not None
    _COMPILED_APPEND = getattr(ACCEL, "graph_append", None) if on else None
    return was


class _Gone:
    """An object that is gone as soon as it is made (see ``_DEAD``)."""


# The result reference of an intermediate record: a dead one, as the ordinary recording's is once
# the call returns (so the queue's length, results and plan key are the same both ways).
_DEAD = weakref.ref(_Gone())


class GraphCallPlan:
    """The records one call signature appended in graph mode: per record ``(build, params, shape,
    dtype, prec, label, header, refs)`` with ``header`` its plan-key header and ``refs`` its inputs
    (``i >= 0``: call argument ``i``; ``-1 - k``: record ``k`` of the call); the device and the
    work the records add (total, heaviest). A call with a result large enough to be checked against
    the device's memory is never planned (the ordinary path checks it each time)."""

    __slots__ = ("records", "one", "arg_refs", "device", "shape", "dtype", "numel", "work", "max_work")

    def __init__(self, records: tuple, device, work: float, max_work: float) -> None:
        self.records = records
        self.arg_refs = tuple(sorted({r for rec in records for r in rec[7] if r >= 0}))
        # The one record of a call that made one, reading arguments only (appended in one call)
        self.one = records[0] if len(records) == 1 and all(r >= 0 for r in records[0][7]) else None
        self.device = device
        self.shape = records[-1][2]
        self.dtype = records[-1][3]
        self.numel = math.prod(self.shape)
        self.work = work
        self.max_work = max_work


def run_graph_call_plan(entry: GraphCallPlan, args: tuple, blank, c):
    """Append ``entry``'s records reading ``args`` to this thread's queue and return the call's
    result (made by ``blank(shape, dtype, device)``, pending), or None, appending nothing, when the
    queue's state does not let the ordinary recording append lazy records (the caller then runs the
    call the ordinary way). ``c``: the current context (graph mode, no check mode, no capture)."""
    try:
        e = _THIS.engine
    except AttributeError:   # (this thread's first use)
        e = _THIS.engine = _ENGINES._engine
    lock = e.lock
    lock.acquire()
    try:
        q = e.queue
        device = entry.device
        if q.hold:
            return None
        if q.device is not device:
            if q.device is not None and len(q):
                return None   # the ordinary path drains the other device's queue first
            q.device = device
        one = entry.one
        out = None
        if one is not None:   # one record reading arguments the key has seen: appended in one call
            out = (_COMPILED_APPEND or _append_one)(q, one, args, device, entry.numel, _phase_label.get() or one[5])
        if out is None:   # (None: nothing changed) the general path
            epoch = q.epoch
            for r in entry.arg_refs:
                x = args[r]
                st = x._status
                if x.__dict__ or st == FAILED or (st == PENDING and x._epoch != epoch):
                    # A view (its layout may change what the front end records), or an input with
                    # no value here (the ordinary path raises its error)
                    return None
            out = blank(entry.shape, entry.dtype, device)
            _append(q, entry.records, args, out)
        q.work += entry.work
        if entry.max_work > q.max_work:
            q.max_work = entry.max_work
        if q.site is None:
            q.site = user_site(2)
        c.counters.graph_call_plan_hits += 1
    finally:
        lock.release()
    return out


def _append_one(q, one: tuple, args: tuple, device, numel: int, label: str):
    """Append a one-record plan's record as ``record_lazy`` would have and return its result (made
    as ``Tensor._blank`` makes one), or None having changed nothing when an input is not a plain
    tensor the plan key has seen (a view, a new leaf, a failed or foreign one) or the queue has no
    plan key: the general path (:func:`_append`) then appends it. The accelerator's ``graph_append``
    is its compiled twin (same arguments, same result)."""
    sig = q._sig
    if sig is None:
        return None
    slot_of = q._sig_slot
    epoch = q.epoch
    build, params, shape, dtype, prec, _, header, refs = one
    ins = []
    keys = []
    for r in refs:
        x = args[r]
        if x.__dict__:
            return None
        st = x._status
        if st == COMPUTED:
            s = slot_of.get(id(x))
            if s is None:
                return None
            ins.append(x)
            keys.append(-1 - s)
        elif st == PENDING and x._epoch == epoch and x._node < 0:
            p = -1 - x._node
            ins.append(p)
            keys.append(p)
        else:
            return None
    out = _BLANK(shape, dtype, device)
    lazy = q.lazy
    out._node = -1 - len(lazy)
    out._epoch = epoch
    out._status = PENDING
    lazy.append((build, params, shape, dtype, prec, weakref.ref(out), *ins))
    sig += header
    sig += keys
    q.labels.append(label)
    return out


def _append(q, records: tuple, args: tuple, out) -> None:
    """Append ``records`` (a :class:`GraphCallPlan`'s) to ``q`` as ``record_lazy`` would have."""
    lazy = q.lazy
    start = len(lazy)
    epoch = q.epoch
    labels = q.labels
    phase = _phase_label.get()
    last = len(records) - 1
    for k, (build, params, shape, dtype, prec, label, header, refs) in enumerate(records):
        sig = q._sig
        ins = []
        if sig is not None:
            sig += header
            slot_of = q._sig_slot
            for r in refs:
                if r < 0:
                    p = start - 1 - r
                    ins.append(p)
                    if sig is not None:
                        sig.append(p)
                    continue
                x = args[r]
                st = x._status
                if sig is not None:
                    if st == PENDING and x._epoch == epoch and x._node < 0:
                        p = -1 - x._node
                        ins.append(p)
                        sig.append(p)
                        continue
                    if st == COMPUTED and id(x) in slot_of:
                        ins.append(x)
                        sig.append(-1 - slot_of[id(x)])
                        continue
                ins += q.lazy_inputs((x,))   # a new leaf, or no key (any more): the ordinary rule
                sig = q._sig
        else:
            for r in refs:
                if r < 0:
                    ins.append(start - 1 - r)
                else:
                    ins += q.lazy_inputs((args[r],))
        if k == last:
            lazy.append((build, params, shape, dtype, prec, weakref.ref(out), *ins))
            out._node = -1 - (start + k)
            out._epoch = epoch
            out._status = PENDING
        else:
            lazy.append((build, params, shape, dtype, prec, _DEAD, *ins))
        labels.append(phase or label)


# ------------------------------------------------------------------------------------- learning
def begin_watching():
    """Start watching a graph-mode call: a token for :func:`end_watching`, or None when the state
    could not use a graph call plan anyway (not graph mode, check mode, a capture, a hold, a phase label,
    a queue without a plan key)."""
    c = current()
    if not c.graph or c.check or c.observer is not None or _phase_label.get() is not None:
        return None
    e = _ENGINES._engine
    q = e.queue
    if q.hold or q._sig is None:
        return None
    max_work = q.max_work
    q.max_work = 0.0   # (restored by end_watching: the heaviest record of the call is read there)
    return (e, q, c, q.epoch, len(q.lazy), len(q.roots), len(q.effects), q.updates, q.bare, len(q.checks),
            len(q.labels), q.work, max_work, c.counters.totals())


def abort_watching(token) -> None:
    """Stop watching a call (that raised, or whose plan is not kept): the queue's heaviest record is
    again the larger of the one before the call and the call's own (a drain during the call started
    a new queue, whose own it is)."""
    q, epoch, max_work = token[1], token[3], token[12]
    if q.epoch == epoch and q.max_work < max_work:
        q.max_work = max_work


def end_watching(token, out, args: tuple) -> GraphCallPlan | None:
    """Stop watching; the call's :class:`GraphCallPlan` when it qualifies (see the module), else None."""
    e, q, c, epoch, n_lazy, n_roots, n_effects, updates, bare, n_checks, n_labels, work, max_work, before = token
    call_max = q.max_work
    abort_watching(token)
    if (e.queue is not q or q.epoch != epoch or current() is not c or len(q.roots) != n_roots
            or len(q.effects) != n_effects or q.updates != updates or q.bare != bare or len(q.checks) != n_checks
            or q._sig is None or c.counters.totals() != before):
        return None
    lazy = q.lazy
    new = lazy[n_lazy:]
    labels = q.labels[n_labels:]
    if not new or len(labels) != len(new) or q.device is not out.device:
        return None
    for a in args:
        if getattr(a, "__dict__", None):
            return None   # a view argument (or one with attributes of its own): never planned
    last = -1 - (n_lazy + len(new) - 1)
    if out._node != last or out._epoch != epoch or out._status != PENDING:
        return None   # not the call's last record's result
    records = []
    for k, rec in enumerate(new):
        ref = rec[REC_REF]
        if ref is None or rec[2] is None or (k < len(new) - 1 and ref() is not None):
            return None   # a replayed or update record, or an intermediate someone still holds
        refs = []
        for x in rec[REC_INPUTS:]:
            r = _arg_of(x, args, n_lazy, epoch)
            if r is None:
                return None
            refs.append(r)
        build, params, shape, dtype, prec = rec[:5]
        try:
            fp = freeze_params(params) if params else ()
        except TypeError:
            return None
        if math.prod(shape) > _budget.HUGE_NUMEL:
            return None   # checked against the device's memory by the ordinary path, each call
        header = (build, shape, dtype, prec, fp, len(refs))
        records.append((build, params, shape, dtype, prec, labels[k], header, tuple(refs)))
    return GraphCallPlan(tuple(records), out.device, q.work - work, call_max)


def _arg_of(x, args: tuple, start: int, epoch: int) -> int | None:
    """A record input as a plan reference: the call argument it is (its position), or ``-1 - k``
    for record ``k`` of the call; None when it is neither, or when distinct arguments hold it (a
    tensor and its ``detach()`` alias of one pending value: no key tells which one a later call's
    record reads)."""
    if type(x) is int:
        if x >= start:
            return -1 - (x - start)
        found = [i for i, a in enumerate(args)   # a pending argument recorded before the call
                 if getattr(a, "_status", None) == PENDING and a._epoch == epoch and a._node == -1 - x]
    else:
        found = [i for i, a in enumerate(args) if a is x]
    if not found:
        return None
    first = args[found[0]]
    for i in found[1:]:
        if args[i] is not first:
            return None
    return found[0]   # (one object at several places: the call's key says which places are that object)
