"""Post-compute index checks: out-of-range index values raise ``IndexError`` after the compute.

Graph mode and capture cannot read an index tensor before the graph that uses it has run,
so an index op records (besides its clamped, abort-safe node) a one-value check node: the
first value of the index outside its valid range, or any valid value when there is none
(``ops/indexing.py``: ``index_check``). The engine keeps those checks per queue
(``Engine.checks``) and, after a drain computed them, reads each one value (4 bytes): a bad
one fails every result of that drain (reading them raises the same ``IndexError``) and raises
an :class:`~.errors.IndexValueError` naming the op and the value at the sync point. A capture
recording downloads its checks with its outputs (no extra transfer) and verifies them before
the optimizer update, so a bad index changes no parameter and no optimizer state.

Nothing here runs when no index op was queued.
"""
from __future__ import annotations

import numpy as np

from .._ggml.nodes import read_array
from .array import COMPUTED, FAILED
from .counters import COUNTERS
from .errors import IndexErrorText, IndexValueError


class IndexCheck:
    """One queued check: its one-value result tensor, the valid range ``[lo, hi]`` (``ignore``
    allowed too: a class target's ignore_index) and the message, a format string for the value."""

    __slots__ = ("tensor", "lo", "hi", "ignore", "message", "site")

    def __init__(self, tensor, lo: int, hi: int, ignore: int | None, message: str, site: str):
        self.tensor = tensor
        self.lo = lo
        self.hi = hi
        self.ignore = ignore
        self.message = message
        self.site = site

    def bad(self, value: int) -> bool:
        return value != self.ignore and not self.lo <= value <= self.hi

    def error(self, value: int, where: str) -> IndexValueError:
        return IndexValueError(f"{self.message.format(value)} ({where}; queued at {self.site})")


def first_bad(values: np.ndarray, lo: int, hi: int, ignore: int | None = None):
    """The first value (flat order) outside ``[lo, hi]`` other than ``ignore``, or None: the value
    every mode reports (the in-graph check picks the same one)."""
    flat = values.reshape(-1)
    if flat.size <= 16:  # a policy's few targets per step: a Python loop beats three NumPy passes
        for v in flat.tolist():
            if (v < lo or v > hi) and v != ignore:
                return int(v)
        return None
    mask = (flat < lo) | (flat > hi)
    if ignore is not None:
        mask &= flat != ignore
    hits = np.flatnonzero(mask)
    return int(flat[hits[0]]) if hits.size else None


def register(engine, check: IndexCheck) -> None:
    """Queue ``check`` with ``engine``'s current queue (its tensor is a root of that queue)."""
    engine.checks.append(check)


def after_drain(engine, epoch: int, results) -> None:
    """After a successful drain of queue ``epoch``: verify the checks it computed. A bad value fails
    every result of the drain, then raises. Checks of failed or discarded queues are dropped."""
    pending = engine.checks[:]
    engine.checks.clear()  # in place: the queue's list, whoever reaches it
    for c in pending:
        t = c.tensor
        if t._status != COMPUTED or t._epoch != epoch:
            continue
        value = _read_one(t)
        if c.bad(value):
            err = c.error(value, "raised when the queued graph computed")
            _fail_results(results, err)
            raise err


def _read_one(t) -> int:
    """The check's one int32 value (a counted 4-byte download)."""
    one = np.empty(1, np.int32)
    read_array(t._storage, one)
    COUNTERS.downloads["index check"] += 1
    COUNTERS.download_bytes["index check"] += 4
    return int(one[0])


def _fail_results(results, err: IndexValueError) -> None:
    text = IndexErrorText(f"ggmlgrad: this tensor has no value because its graph failed an index check: {err}")
    for a in results:
        if a._status == COMPUTED:
            a._status, a._node, a._storage, a._error = FAILED, 0, None, text


def take_pending(engine) -> list[IndexCheck]:
    """The checks of ``engine``'s current queue, handed to a capture recording (which downloads and
    verifies them on every replay) instead of being verified by a drain."""
    pending = engine.checks[:]
    engine.checks.clear()
    epoch = engine.epoch
    return [c for c in pending if c.tensor._status != COMPUTED and c.tensor._status != FAILED
            and c.tensor._epoch == epoch]


def verify_replay(checks: list, raw: np.ndarray, where: str = "raised by a captured replay") -> None:
    """Raise for the first bad check of a replay; ``checks`` are (byte offset in ``raw``, IndexCheck)."""
    for offset, c in checks:
        value = int(raw[offset:offset + 4].view(np.int32)[0])
        if c.bad(value):
            raise c.error(value, where)
