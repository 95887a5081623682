"""Replayable segments: the records one backward appended, appended again by the next one.

Autograd (``tensor/tape.py``) marks the queue before a backward pass, takes the records the pass
appended as a segment, and replays it on the next identical pass instead of running the gradient
rules. Only valid on a queue whose key so far is the same as at the mark. Segments are entries of
the one trace cache (:mod:`.trace_cache`), keyed by the record sequence queued before the pass
(:attr:`Mark.key`) and the tape the pass walks.
"""
from __future__ import annotations

import weakref

from .context import current
from .array import COMPUTED, PENDING, Array
from .records import REC_INPUTS, REC_REF, REC_SHAPE
from .trace_cache import SEGMENT


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



class Mark:
    """Where a backward pass started in the queue (:meth:`Segments.lazy_mark`); ``key`` is the
    start of the pass's trace cache key (engine/trace_cache.py): the kind, the device and the
    record sequence queued so far (equal keys: equal indices and slots)."""

    __slots__ = ("epoch", "n_lazy", "n_sig", "n_leaves", "n_labels", "work", "key")

    def __init__(self, epoch: int, n_lazy: int, n_sig: int, n_leaves: int, n_labels: int, work: float, key: tuple):
        self.epoch = epoch
        self.n_lazy = n_lazy
        self.n_sig = n_sig
        self.n_leaves = n_leaves
        self.n_labels = n_labels
        self.work = work
        self.key = key


class Segments:
    """Backward segments over one :class:`~.records.RecordQueue`: marks, the records appended
    since a mark, and their replay (``tensor/tape.py`` decides when a backward is identical)."""

    def __init__(self, queue, lock) -> None:
        self.queue = queue
        self.lock = lock

    # ------------------------------------------------------------------ replayable segments
    # Autograd records the same gradient ops every training step. A segment is the lazy records
    # one backward appended, kept so that the next identical backward appends them again without
    # running the gradient rules (see tensor/tape.py). Valid only on a queue whose key so far is
    # the same as when the segment was taken: the same records, so the same indices and slots.
    def lazy_mark(self) -> Mark | None:
        """The lazy queue's position and key so far, or None when nothing can be replayed here
        (not plain graph mode, a capture recording, built nodes in the queue)."""
        q = self.queue
        c = current()
        if q._sig is None or c.observer is not None or q.hold or not c.graph or c.check \
                or q.device is None:
            return None
        return Mark(q.epoch, len(q.lazy), len(q._sig), len(q._sig_leaves), len(q.labels),
                    q.work, (SEGMENT, q.device.dev_ptr, *q._sig))

    def queue_refs(self, arrays) -> list | None:
        """Each array in the lazy queue's key: its record index (>= 0) or -1-slot for a computed
        tensor the queue reads; None when one is neither."""
        q = self.queue
        epoch, slot_of = q.epoch, q._sig_slot
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

    def refs_state(self) -> tuple[int, dict]:
        """(epoch, slot by id of computed tensor): what :meth:`queue_refs` reads, for a caller that
        inlines it over many arrays (autograd's backward key reads every tape input)."""
        q = self.queue
        return q.epoch, q._sig_slot

    def result_index(self, a: Array) -> int | None:
        """The index of the lazy record of this queue whose result ``a`` is, or None."""
        q = self.queue
        if a._status != PENDING or a._epoch != q.epoch or a._node >= 0:
            return None
        return -1 - a._node

    def lazy_segment(self, mark: Mark) -> "_Segment | None":
        """The records appended since ``mark``, or None when they cannot be replayed (the queue was
        drained or built since, or they read a computed tensor the queue did not hold at ``mark``)."""
        q = self.queue
        epoch, n_lazy, n_sig, n_leaves = mark.epoch, mark.n_lazy, mark.n_sig, mark.n_leaves
        n_labels, work = mark.n_labels, mark.work
        if (q.epoch != epoch or q._sig is None or len(q._sig_leaves) != n_leaves
                or len(q.lazy) <= n_lazy or q.effects):
            return None
        records = []  # (record, None) to append as is, or (record with slots, True) to rebind
        for rec in q.lazy[n_lazy:]:
            if rec[REC_SHAPE] is None:
                return None  # an update: never part of a backward
            # a result of this queue is its index (>= 0, as recorded), a computed tensor its slot as -1-slot
            ins = [x if type(x) is int else -1 - q._sig_slot[id(x)] for x in rec[REC_INPUTS:]]
            has_slots = any(x < 0 for x in ins)
            records.append(((*rec[:REC_REF], None, *ins), has_slots or None))  # (no ``ref``: the replay adopts its results)
        return _Segment(n_lazy, tuple(records), tuple(q._sig[n_sig:]), tuple(q.labels[n_labels:]),
                        q.work - work, q.max_work)

    def replay_segment(self, seg: "_Segment") -> None:
        """Append ``seg``'s records; the caller checked the queue's key equals the segment's mark."""
        q = self.queue
        with self.lock:
            lazy = q.lazy
            if len(lazy) != seg.start or q._sig is None:
                raise RuntimeError("ggmlgrad internal: a segment replayed on another queue")
            leaves = q._sig_leaves
            for rec, has_slots in seg.records:
                if has_slots:
                    rec = (*rec[:REC_INPUTS], *[x if x >= 0 else leaves[-1 - x] for x in rec[REC_INPUTS:]])
                lazy.append(rec)
            q.bare += len(seg.records)
            q._sig += seg.sig
            q.labels += seg.labels
            q.work += seg.work
            if seg.max_work > q.max_work:
                q.max_work = seg.max_work
