"""Forward segments: the lazy records one call of a built-in module appended, appended again by the
next identical call without running its layers' Python (``nn/module.py`` decides when a call is
identical: same module state, input shape, dtype and device, modes).

Unlike a backward segment (:mod:`.segments`), a forward segment does not depend on what the queue
held before it: its records name their inputs by position in the segment, as "the argument", or as
a parameter tensor. A replay appends the whole segment as ONE lazy record over those inputs
(:func:`build_segment` builds its records when the queue is built), whose plan key part is the
segment itself and one element per input: queuing a 5-layer forward costs about one op's record.
In eager mode (:func:`compute_alone`) a replay is the queue's one record carrying the plan its
earlier replay was computed with, which the drain runs without making a key; a plan reuses its
small result memory once nothing holds it (``drain.result_storages``).
"""
from __future__ import annotations

import weakref

from ..runtime import StridedAlias
from ..runtime.faults import ARMED as _FAULTS
from .array import COMPUTED, PENDING, Array
from .context import current
from .drain import PlannedRecord
from .flat import FlatNode
from .plans import freeze_params
from .records import _NO_LEAF_MEMORY, REC_INPUTS, _Pending, _phase_label, user_site

ARG = -1  # a record input that is the module call's argument


class ForwardMark:
    """Where a module call started in the queue (see :func:`mark`)."""

    __slots__ = ("epoch", "n_lazy", "n_labels", "n_effects", "work", "max_work")

    def __init__(self, e) -> None:
        self.epoch, self.n_lazy, self.n_labels = e.queue.epoch, len(e.queue.lazy), len(e.queue.labels)
        self.n_effects, self.work, self.max_work = len(e.queue.effects), e.queue.work, e.queue.max_work


class ForwardSegment:
    """Records to append again: (build, params, shape, dtype, prec, key header, label, codes) with
    codes indices into the call's resolved inputs: ``externals`` (the argument as :data:`ARG`, the
    parameters) in the order they first appear, then the segment's own results.

    A replay appends them as ONE lazy record (:func:`build_segment` builds the records in order), so
    its cost and the plan key it adds do not grow with the number of layers."""

    __slots__ = ("records", "externals", "out", "work", "max_work", "leaves", "inputs", "labels", "standins",
                 "params", "frozen", "out_shape", "out_dtype", "prec", "tail", "tail_ids", "tail_set")

    def __init__(self, records: tuple, externals: tuple, out: int, work: float, max_work: float,
                 device) -> None:
        self.records = records
        self.externals = externals
        self.out = out
        self.work = work
        self.max_work = max_work
        self.leaves = tuple((x, x.shape, x.dtype, x.device) for x in externals if x is not ARG)
        self.inputs = tuple((x, id(x)) for x in externals)  # with their slot keys (the argument's varies)
        # The parameters after a leading argument (the usual layout), None otherwise: appended to a
        # queue that has not read them yet in one go (see _inputs).
        self.tail = tuple(externals[1:]) if externals and externals[0] is ARG else None
        self.tail_ids = tuple(id(x) for x in self.tail) if self.tail is not None else ()
        self.tail_set = frozenset(self.tail_ids)
        self.labels = tuple(r[6] for r in records)
        # What the builders of later records see of an earlier record's result (shape, dtype, device).
        self.standins = tuple(_Pending(-1, r[2], r[3], device) for r in records)
        self.params = {"seg": self}
        self.frozen = (("seg", _Token()),)  # the plan key's part for this segment (unique, O(1) hash)
        self.out_shape, self.out_dtype, self.prec = records[out][2], records[out][3], records[out][4]


class _Token:
    """An identity: equal only to itself (a segment's part of a plan key)."""

    __slots__ = ("__weakref__",)


def build_segment(ctx: int, nodes: list, inputs: list, out, seg: ForwardSegment) -> int:
    """The lazy record of a replayed segment: build its records in order (each with room for one op,
    as the queue's build gives every record) and return the node of its result."""
    from .queue import ENGINE  # the queue module imports the engine parts, this one among them
    e = ENGINE.current  # the engine building this record (each thread builds its own queue)
    res = list(nodes)
    standins = list(inputs)
    standins += seg.standins
    for k, (build, params, _shape, _dtype, _prec, _header, _label, codes) in enumerate(seg.records):
        e.builder.room()
        ctx = e.builder.ctx
        ins = []
        for i in codes:
            n = res[i]
            ins.append(n.shaped(ctx) if type(n) is FlatNode else n)
        res.append(build(ctx, ins, [standins[i] for i in codes], seg.standins[k], **params))
    return res[len(nodes) + seg.out]


def appendable(e, c) -> bool:
    """Whether a segment may be appended to the queue now (see :func:`mark`)."""
    return not (c.observer is not None or e.queue.hold or c.check or e.queue.updates
                or (not c.graph and len(e.queue)))


def mark(e, c) -> ForwardMark | None:
    """The queue's position before a call whose records may become a segment, or None when they
    cannot (a capture recording, an exclusive section, check mode, a queue with updates)."""
    if c.observer is not None or e.queue.hold or c.check or e.queue.updates:
        return None
    if not c.graph and len(e.queue):
        return None  # eager mode records its segment on an empty queue only
    m = ForwardMark(e)
    e.queue.max_work = 0.0  # from here it is the call's own heaviest node (the thread policy's input); end() restores
    return m


def end(e, m: ForwardMark) -> None:
    """Close the call opened by :func:`mark`: the queue's heaviest node is again the larger of the
    one before the call and the call's own (unless the queue drained meanwhile)."""
    if e.queue.epoch == m.epoch and m.max_work > e.queue.max_work:
        e.queue.max_work = m.max_work


def take(e, m: ForwardMark, arg: Array, out, params_ok: set) -> ForwardSegment | None:
    """The records appended since ``m`` as a segment whose result is ``out``, or None when they
    cannot be replayed (the queue drained, an update or effect, an input that is neither the
    argument, an earlier record of the call, nor one of ``params_ok`` (ids of parameters))."""
    if e.queue.epoch != m.epoch or len(e.queue.effects) != m.n_effects or not isinstance(out, Array) or id(arg) in params_ok:
        return None  # (an argument that is also a parameter would be replayed as the argument only)
    lazy = e.queue.lazy
    n = len(lazy) - m.n_lazy
    if n <= 0 or len(e.queue.labels) - m.n_labels != n:
        return None
    if out._status != PENDING or out._epoch != e.queue.epoch or out._node >= 0 or -1 - out._node < m.n_lazy:
        return None
    arg_index = -1  # the argument's record, when it is a result of this queue
    if arg._status == PENDING and arg._epoch == e.queue.epoch and arg._node < 0:
        arg_index = -1 - arg._node
    raw, ext = [], {}  # records with inputs as ("seg", offset) or ("ext", key); externals by key
    for rec in lazy[m.n_lazy:]:
        build, params, shape, dtype, prec = rec[:5]
        ins = rec[REC_INPUTS:]
        if shape is None:
            return None  # an update
        refs = []
        for x in ins:
            is_result = type(x) is int  # a record's index (see records.REC_BUILD)
            if is_result and x != arg_index:
                if x < m.n_lazy:
                    return None
                refs.append((False, x - m.n_lazy))
                continue
            if x is arg or is_result:
                k, v = ARG, ARG
            elif id(x) in params_ok and x._status == COMPUTED:
                k, v = id(x), x
            else:
                return None
            ext.setdefault(k, v)
            refs.append((True, k))
        try:
            fp = freeze_params(params) if params else ()
        except TypeError:
            return None
        raw.append((build, params, shape, dtype, prec, (build, shape, dtype, prec, fp, len(ins)), refs))
    order = {k: i for i, k in enumerate(ext)}  # dicts keep insertion order: first appearance
    n_ext = len(order)
    records = tuple((build, params, shape, dtype, prec, header, e.queue.labels[m.n_labels + j],
                     tuple(order[v] if is_ext else n_ext + v for is_ext, v in refs))
                    for j, (build, params, shape, dtype, prec, header, refs) in enumerate(raw))
    return ForwardSegment(records, tuple(ext.values()), -1 - out._node - m.n_lazy, e.queue.work - m.work, e.queue.max_work,
                          arg.device)


def resolvable(e, seg: ForwardSegment, arg: Array) -> bool:
    """Whether ``seg`` can be appended to the queue now with ``arg`` as its argument: every input
    is computed or this queue's pending result, and each parameter is as it was recorded."""
    for x, shape, dtype, device in seg.leaves:
        if x._status != COMPUTED or x.shape != shape or x.dtype is not dtype or x.device is not device:
            return False
    st = arg._status
    if st == PENDING:
        return arg._epoch == e.queue.epoch and arg._node < 0
    return st == COMPUTED


def replay(e, seg: ForwardSegment, arg: Array, out: Array) -> None:
    """Append ``seg`` with ``arg`` as the argument as one lazy record and make ``out`` its result;
    the caller holds the lock and checked :func:`resolvable`. The plan key grows by the segment's
    header (its records are fixed by the segment) and its inputs, as for any record."""
    device = arg.device
    if e.queue.device is not device:
        if e.queue.device is not None and len(e):
            e._drain_locked("device_change")
        e.queue.device = device
    shape, dtype, prec = seg.out_shape, seg.out_dtype, seg.prec
    lazy = e.queue.lazy
    sig = e.queue._sig
    if sig is not None:
        sig += (build_segment, shape, dtype, prec, seg.frozen, len(seg.externals))
    ins = _inputs(e, seg, arg, lazy, sig)
    j = len(lazy)
    lazy.append((build_segment, seg.params, shape, dtype, prec, None, *ins))
    e.queue.bare += 1  # its result is adopted below
    phase = _phase_label.get()
    e.queue.labels += seg.labels if phase is None else [phase] * len(seg.labels)
    e.queue.work += seg.work
    if seg.max_work > e.queue.max_work:
        e.queue.max_work = seg.max_work
    e.queue.adopt_result(out, j)
    if e.queue.site is None:
        e.queue.site = user_site(3)


def _inputs(e, seg: ForwardSegment, arg: Array, lazy: list, sig: list | None) -> list:
    """The replayed record's inputs as a lazy record holds them (``RecordQueue.lazy_inputs``'s
    rule), for inputs :func:`resolvable` checked (the parameters are computed, the argument computed
    or a result of this queue). Each adds ONE element to the plan key, its queue index or -1-slot,
    even where its slot is new: the segment (in its header) fixes every input's shape and dtype,
    and a new slot is always the next number, so the key still names one graph."""
    slot_of, leaves = e.queue._sig_slot, e.queue._sig_leaves
    tail = seg.tail
    if sig is not None and tail is not None and slot_of.keys().isdisjoint(seg.tail_set):
        ins = _fresh_parameters(e, seg, arg, tail, sig, slot_of, leaves)
        if ins is not None:
            return ins
    ins = []
    for x, key in seg.inputs:
        if x is ARG:
            x = arg
            if x._status == PENDING:
                p = -1 - x._node
                ins.append(p)
                if sig is not None:
                    sig.append(p)
                continue
            key = id(x)
        ins.append(x)
        if sig is not None:
            slot = slot_of.get(key)
            if slot is None:
                if x._storage is None or not x.numel_ or type(x._storage) is StridedAlias:
                    e.queue._sig = sig = None  # empty memory or a strided view: no plan
                    continue
                slot = slot_of[key] = len(leaves)
                leaves.append(x)
            sig.append(-1 - slot)
    return ins


def _fresh_parameters(e, seg: ForwardSegment, arg: Array, tail: tuple, sig: list, slot_of: dict,
                      leaves: list) -> list | None:
    """:func:`_inputs` of a segment whose argument comes first and whose parameters this queue has
    not read yet (each step's first call of a module): the same inputs and key, the parameters'
    slots being the next numbers in order, without a lookup per parameter. None (nothing changed):
    an input the general rule must see (a parameter or new argument without plain memory, the
    argument one of the parameters)."""
    for x in tail:
        if type(x._storage) in _NO_LEAF_MEMORY or not x.numel_:
            return None  # (the general rule drops the queue's key there)
    if arg._status == PENDING:
        first = -1 - arg._node
        ins = [first]
    else:
        key = id(arg)
        if key in seg.tail_set:
            return None
        first = slot_of.get(key)
        if first is None:
            s = arg._storage
            if s is None or type(s) is StridedAlias or not arg.numel_:
                return None
            first = slot_of[key] = len(leaves)
            leaves.append(arg)
        first = -1 - first
        ins = [arg]
    sig.append(first)
    base = len(leaves)
    n = len(tail)
    leaves += tail
    slot_of.update(zip(seg.tail_ids, range(base, base + n)))
    sig += range(-1 - base, -1 - base - n, -1)
    ins += tail
    return ins


def plan_of_last_drain(e):
    """A weak reference to the plan the engine's last drain computed with (taken: the next call
    gives None unless another planned drain ran), or None (an ordinary drain)."""
    d = e.drainer
    plan, d.last_plan = d.last_plan, None
    return weakref.ref(plan) if plan is not None else None


def compute_alone(e, c, seg: ForwardSegment, plan_ref, arg: Array, out: Array) -> bool:
    """Eager mode: append ``seg`` with ``arg`` as the queue's one record, carrying the plan its queued
    replay was computed with before (``plan_ref``), and drain it: the drain runs that plan (no key to
    make). False, doing nothing, when that plan is gone or a test seam is armed; the caller holds
    the lock, checked :func:`resolvable` and that the queue is empty."""
    plan = plan_ref()
    if plan is None or not plan.sched or _FAULTS or e.drainer._fail_next is not None or e.queue.checks:
        return False
    # The replay's one record read these, in this order, as the plan's leaves (first appearance).
    leaves = [arg._storage if x is ARG else x._storage for x in seg.externals]
    for s in leaves:
        if type(s) is StridedAlias:
            return False  # the plan's leaves are contiguous
    e.queue.one = PlannedRecord(plan, leaves, out, seg.labels, seg.work, seg.max_work)
    e._drain_locked("eager")
    return True
