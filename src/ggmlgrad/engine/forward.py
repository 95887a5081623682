"""Forward segments: the lazy records one call of a built-in module appended, appended again by the
next identical call without running its layers' Python (``nn/module.py`` decides when a call is
identical: same module state, input shape, dtype and device, modes).

Unlike a backward segment (:mod:`.segments`), a forward segment does not depend on what the queue
held before it: its records name their inputs by position in the segment, as "the argument", or as
a parameter tensor, and a replay resolves them against the queue as it is, extending the plan key
exactly as recording them one by one would.
"""
from __future__ import annotations

from .array import COMPUTED, PENDING, Array
from .context import current
from .plans import freeze_params
from .records import _Pending, _phase_label, user_site

ARG = -1  # a record input that is the module call's argument


class ForwardMark:
    """Where a module call started in the queue (see :func:`mark`)."""

    __slots__ = ("epoch", "n_lazy", "n_labels", "n_effects", "work", "max_work")

    def __init__(self, e) -> None:
        self.epoch, self.n_lazy, self.n_labels = e.epoch, len(e.lazy), len(e.labels)
        self.n_effects, self.work, self.max_work = len(e.effects), e.work, e.max_work


class ForwardSegment:
    """Records to append again: (build, params, shape, dtype, prec, key header, label, codes) with
    codes indices into the call's resolved inputs: ``externals`` (the argument as :data:`ARG`, the
    parameters) in the order they first appear, then the segment's own results."""

    __slots__ = ("records", "externals", "out", "work", "max_work", "leaves")

    def __init__(self, records: tuple, externals: tuple, out: int, work: float, max_work: float) -> None:
        self.records = records
        self.externals = externals
        self.out = out
        self.work = work
        self.max_work = max_work
        self.leaves = tuple((x, x.shape, x.dtype, x.device) for x in externals if x is not ARG)


def appendable(e, c) -> bool:
    """Whether a segment may be appended to the queue now (see :func:`mark`)."""
    return not (c.observer is not None or e._hold or c.check or e.one is not None or e.updates
                or (not c.graph and len(e)))


def mark(e, c) -> ForwardMark | None:
    """The queue's position before a call whose records may become a segment, or None when they
    cannot (a capture recording, an exclusive section, check mode, a queue with updates)."""
    if c.observer is not None or e._hold or c.check or e.one is not None or e.updates:
        return None
    if not c.graph and len(e):
        return None  # eager mode records its segment on an empty queue only
    return ForwardMark(e)


def take(e, m: ForwardMark, arg: Array, out, params_ok: set) -> ForwardSegment | None:
    """The records appended since ``m`` as a segment whose result is ``out``, or None when they
    cannot be replayed (the queue drained, an update or effect, an input that is neither the
    argument, an earlier record of the call, nor one of ``params_ok`` (ids of parameters))."""
    if e.epoch != m.epoch or len(e.effects) != m.n_effects or not isinstance(out, Array) or id(arg) in params_ok:
        return None  # (an argument that is also a parameter would be replayed as the argument only)
    lazy = e.lazy
    n = len(lazy) - m.n_lazy
    if n <= 0 or len(e.labels) - m.n_labels != n:
        return None
    if out._status != PENDING or out._epoch != e.epoch or out._node >= 0 or -1 - out._node < m.n_lazy:
        return None
    arg_standin = None
    if arg._status == PENDING and arg._epoch == e.epoch and arg._node < 0:
        arg_standin = lazy[-1 - arg._node][6]
    raw, ext = [], {}  # records with inputs as ("seg", offset) or ("ext", key); externals by key
    for build, ins, params, shape, dtype, prec, standin in lazy[m.n_lazy:]:
        if standin is None:
            return None  # an update
        refs = []
        for x in ins:
            if type(x) is _Pending and x is not arg_standin:
                if x.index < m.n_lazy:
                    return None
                refs.append((False, x.index - m.n_lazy))
                continue
            if x is arg or x is arg_standin:
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
    records = tuple((build, params, shape, dtype, prec, header, e.labels[m.n_labels + j],
                     tuple(order[v] if is_ext else n_ext + v for is_ext, v in refs))
                    for j, (build, params, shape, dtype, prec, header, refs) in enumerate(raw))
    grew = e.max_work if e.max_work > m.max_work else 0.0
    return ForwardSegment(records, tuple(ext.values()), -1 - out._node - m.n_lazy, e.work - m.work, grew)


def resolvable(e, seg: ForwardSegment, arg: Array) -> bool:
    """Whether ``seg`` can be appended to the queue now with ``arg`` as its argument: every input
    is computed or this queue's pending result, and each parameter is as it was recorded."""
    for x, shape, dtype, device in seg.leaves:
        if x._status != COMPUTED or x.shape != shape or x.dtype is not dtype or x.device is not device:
            return False
    st = arg._status
    if st == PENDING:
        return arg._epoch == e.epoch and arg._node < 0
    return st == COMPUTED


def replay(e, seg: ForwardSegment, arg: Array, out: Array) -> None:
    """Append ``seg``'s records with ``arg`` as the argument and make ``out`` its result; the caller
    holds the lock and checked :func:`resolvable`. The plan key grows as recording them would."""
    if e.device is not arg.device:
        if e.device is not None and len(e):
            e._drain_locked("device_change")
        e.device = arg.device
    lazy, sig = e.lazy, e._sig
    arg_in = lazy[-1 - arg._node][6] if arg._status == PENDING else arg
    res = [arg_in if x is ARG else x for x in seg.externals]
    n_ext = len(res)
    first, later = _external_keys(e, res) if sig is not None else (None, None)
    if first is None:
        sig = None
    seen = 0
    base = len(lazy) - n_ext  # a result's code is n_ext + offset, its queue index base + code
    phase = _phase_label.get()
    labels, device = e.labels, arg.device
    for build, params, shape, dtype, prec, header, label, codes in seg.records:
        if sig is not None:
            sig += header
            for i in codes:
                if i >= n_ext:
                    sig.append(base + i)
                elif i == seen:  # an input's first appearance in the segment (they come in order)
                    sig += first[i]
                    seen += 1
                else:
                    sig.append(later[i])
        p = _Pending(len(lazy), shape, dtype, device)
        lazy.append((build, [res[i] for i in codes], params, shape, dtype, prec, p))
        res.append(p)
        labels.append(phase or label)
    e.work += seg.work
    if seg.max_work > e.max_work:
        e.max_work = seg.max_work
    e.adopt_result(out, base + n_ext + seg.out)
    if e.site is None:
        e.site = user_site(3)


def _external_keys(e, inputs: list):
    """Per input read from outside the segment: its key part where it first appears and where it
    appears again (a queue index, or a slot — a new one with its shape and dtype); slots are given
    in order of first appearance, as :meth:`RecordQueue._lazy_inputs` does. (None, None) when the
    queue can have no plan (empty memory), which then holds for this queue."""
    slot_of, leaves = e._sig_slot, e._sig_leaves
    first, later = [], []
    for x in inputs:
        if type(x) is _Pending:
            first.append((x.index,))
            later.append(x.index)
            continue
        slot = slot_of.get(id(x))
        if slot is not None:
            first.append((-1 - slot,))
        elif x._storage is None or not x.numel_:
            e._sig = None
            return None, None
        else:
            slot = slot_of[id(x)] = len(leaves)
            leaves.append(x)
            first.append((-1 - slot, x.shape, x.dtype))
        later.append(-1 - slot)
    return first, later
