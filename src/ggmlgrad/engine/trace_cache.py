"""The trace cache: ONE cache of every plan the engine replays, keyed on record sequences.

Every compute of the engine is a drain of recorded ops (:mod:`.drain`): look the plan of the
record sequence up, build it on a miss, run it. The plans of every kind are entries of one
:class:`TraceCache` (one dict, one lock, one eviction policy, one staleness counter), under keys
of one format::

    (kind, device, *records, *kind's part)

``records`` is the record-sequence signature the queue builds as ops are recorded
(``RecordQueue._sig``): per record its builder, result shape and dtype, matmul precision, frozen
parameters and input count, then per input a queue index (a result of an earlier record, >= 0)
or ``-1-slot`` for a computed tensor the sequence reads, followed by that tensor's shape and dtype
where its slot first appears. It is self-delimiting (a header gives its input count, a new slot
is always the next number), so the kind's part that follows cannot be mistaken for a record.

The kinds (``key[0]``):

- :data:`OP` an eager (or check-mode) op's plan (``Drainer._drain_one``): the key of the
  one-record sequence the op is, each input its own slot; no further part. Its entry is an
  ``OpPlan``, which picks its result's memory itself (one spare storage) and is what eager call
  plans (``engine/call_plans.py``) and the accelerator's ``OP_PLAN`` run.
- :data:`GRAPH` a graph-mode drain's plan (``RecordQueue.plan_signature``): the queue's records,
  then ``-1`` and the indices of the records whose results are still alive (they get memory).
  Its entry is a graph ``Plan`` over the queue's leaves, whose results' memory the drain picks
  (``drain.result_storages``, up to two runs back per result).
- :data:`SEGMENT` a backward pass's records (``tensor/tape.py``): the records queued before the
  pass, then the tape the gradient rules would walk (they stand for the records the pass appends:
  those are known only once the rules ran). Its entry is a :class:`~.plans.SegmentPlan`.

The kind is part of the key, so an eager op and the same op recorded alone in graph mode have
keys equal but for ``kind`` (and the graph key's live results) and find DIFFERENT entries: an
op plan and a graph plan bind differently (``OpPlan.bind`` takes the inputs and chooses the result's
memory, keeping one spare ``Storage``; a graph plan takes leaf and result storages the drain chose
and keeps two runs of result storages in the same ``spare`` attribute), and call plans and the
accelerator's ``OP_PLAN`` run need the former. Sharing the entry would need one binding contract.

One policy for every kind (:class:`Budget`): a key must be seen ``min_uses`` times before its plan
is made; the oldest entry of the kind goes first; a kind that thrashes stops building for a while,
then builds only over its entries unused for a while. Each kind has a budget of its own (its
capacity, clock and thrash state), because its entries cost very different amounts: an op plan is
one op's nodes, a graph plan holds a whole step's intermediates, a segment holds no ggml memory;
one shared count would let graph plans crowd out hundreds of op plans (or hold hundreds of steps'
intermediates) and a thrashing graph workload stop eager ops from planning.

One staleness rule: ``removed`` counts every entry the cache ever evicted, replaced or cleared, of
any kind. A holder of an entry outside the cache (an eager call plan holds its op plan weakly)
trusts it while ``removed`` is unchanged and the cache's ``plans`` dict is the one it saw.

``GGMLGRAD_PLAN_CACHE`` (op plans, default 256) and ``GGMLGRAD_GRAPH_PLAN_CACHE`` (graph plans,
default 32) set the budgets of the process-wide cache :data:`TRACE`, which every thread shares.

>>> from ggmlgrad.engine.trace_cache import TraceCache, OP
>>> cache = TraceCache(op=4)
>>> key = (OP, 0, "builder", (2,), "f32", "default", (), 1, -1, (2,), "f32")
>>> cache.want(key), cache.want(key)   # made on the second use
(False, True)
"""
from __future__ import annotations

import os
import threading

OP = "op"
GRAPH = "graph"
SEGMENT = "segment"
KINDS = (OP, GRAPH, SEGMENT)


class Budget:
    """One kind's share of the :class:`TraceCache` and its policy state: ``capacity`` entries at
    most, made on a key's ``min_uses``-th use; ``size`` entries now, ``misses`` entries made (or
    marked unplannable) so far, ``tick`` the kind's clock (lookups that stamp or want)."""

    __slots__ = ("kind", "capacity", "min_uses", "size", "misses", "tick", "seen", "builds", "evictions",
                 "paused", "thrashed")

    def __init__(self, kind: str, capacity: int, min_uses: int) -> None:
        self.kind = kind
        self.capacity = max(1, capacity)
        self.min_uses = min_uses
        self.size = 0
        self.misses = 0
        self.tick = 0
        self.seen: dict = {}     # uses so far of keys that have no entry yet (bounded)
        self.reset()

    def reset(self) -> None:
        """Forget the thrash state (the cache was cleared)."""
        self.builds = self.evictions = 0   # in the current window of builds
        self.paused = 0                    # builds still to decline while thrashing
        self.thrashed = False              # since the last clear(): build only over unused entries
        self.seen.clear()

    def __repr__(self) -> str:
        return f"Budget({self.kind!r}, {self.size}/{self.capacity}, misses={self.misses})"


class TraceCache:
    """Every plan by record-sequence key (see the module docstring); ``None`` entries mark keys
    that cannot be planned. A hit is one lookup in :attr:`plans`, lock-free.

    A working set larger than a kind's capacity would evict and rebuild plans forever, each build
    dearer than the ordinary path it replaces. So when most of the last ``capacity`` builds of a
    kind evicted an entry, that kind makes no new entries (existing ones still serve) for the next
    ``4 * capacity`` keys that would have made one. After that, an entry is made only in place of
    one unused for the last ``4 * capacity`` lookups of its kind (:meth:`touch` stamps uses;
    without stamps every entry counts as unused): a steady working set larger than the cache keeps
    the entries it has instead of cycling them. Building and freeing plans without end fragmented
    the C heap: graph mode cycling through 40 batch sizes grew resident memory by ~2 MB per 1,000
    steps.
    """

    def __init__(self, op: int = 256, graph: int = 32, segment: int = 32) -> None:
        self.plans: dict = {}
        self.removed = 0   # entries evicted, replaced or cleared so far, all kinds (holders check it)
        self.op = Budget(OP, op, 2)
        self.graph = Budget(GRAPH, graph, 2)
        self.segment = Budget(SEGMENT, segment, 1)   # (records only, made on first use)
        self.budgets = {OP: self.op, GRAPH: self.graph, SEGMENT: self.segment}
        self._lock = threading.Lock()   # threads (each with its own queue) share the cache

    def __repr__(self) -> str:
        return f"TraceCache({self.op!r}, {self.graph!r}, {self.segment!r})"

    def entries(self, kind: str) -> list:
        """The entries (plans, and None for unplannable keys) of ``kind``, oldest first."""
        return [p for k, p in list(self.plans.items()) if k[0] == kind]  # (a snapshot: threads may put)

    def touch(self, plan) -> None:
        """Stamp a hit on ``plan`` (an entry in use is not evicted for a new one after thrashing)."""
        b = self.budgets[plan.kind]
        b.tick += 1
        plan.last_use = b.tick

    def want(self, key) -> bool:
        """Count a use of ``key``, which has no entry; True when its plan should be made now."""
        with self._lock:
            return self._want(self.budgets[key[0]], key)

    def _want(self, b: Budget, key) -> bool:
        b.tick += 1
        if b.paused:
            b.paused -= 1
            return False
        if b.min_uses > 1:
            seen = b.seen
            n = seen.get(key, 0) + 1
            if n < b.min_uses:
                if len(seen) >= 4 * b.capacity:
                    seen.pop(next(iter(seen)))
                seen[key] = n
                return False
            seen.pop(key, None)
        return not (b.thrashed and b.size >= b.capacity and self._victim(b, True) is None)

    def _victim(self, b: Budget, unused_only: bool = False):
        """The key to evict for a new entry of ``b``'s kind: its oldest entry, or after thrashing
        its least recently used one; with ``unused_only``, None unless that one was unused for the
        kind's last ``4 * capacity`` lookups."""
        kind = b.kind
        if not b.thrashed:
            for key in self.plans:
                if key[0] == kind:
                    return key
            return None
        oldest_key, oldest = None, b.tick + 1
        for key, plan in self.plans.items():
            if key[0] != kind:
                continue
            used = getattr(plan, "last_use", -1)  # None entries and unstamped plans: unused
            if used < oldest:
                oldest_key, oldest = key, used
        if unused_only and b.tick - oldest <= 4 * b.capacity:
            return None
        return oldest_key

    def put(self, key, plan) -> None:
        """Store ``plan`` (None: the key cannot be planned) under ``key``, evicting for room."""
        with self._lock:
            self._put(self.budgets[key[0]], key, plan)

    def _put(self, b: Budget, key, plan) -> None:
        b.misses += 1
        if plan is not None:
            plan.last_use = b.tick
        plans = self.plans
        if key in plans:
            self.removed += 1
        else:
            while b.size >= b.capacity:
                victim = self._victim(b)
                if victim is None:
                    break
                # Not freed here: another thread may be running it. The last reference frees it (__del__).
                plans.pop(victim)
                b.size -= 1
                self.removed += 1
                b.evictions += 1
            b.size += 1
        plans[key] = plan
        b.builds += 1
        if b.builds >= b.capacity:
            if 2 * b.evictions > b.builds:  # thrashing: stop building for a while
                b.paused = 4 * b.capacity
                b.thrashed = True
            b.builds = b.evictions = 0

    def clear(self, kind: str | None = None) -> None:
        """Free and forget every entry of ``kind`` (None: of every kind), and its thrash state."""
        with self._lock:
            self.removed += 1
            plans = self.plans
            for key in [k for k in plans if kind is None or k[0] == kind]:
                plan = plans.pop(key)
                if plan is not None:
                    plan.free()
            for b in self.budgets.values():
                if kind is None or b.kind == kind:
                    b.size = 0
                    b.reset()


def _env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, str(default)))


# The process-wide trace cache: the default context's (engine/context.py), shared by every thread.
TRACE = TraceCache(op=_env_int("GGMLGRAD_PLAN_CACHE", 256), graph=_env_int("GGMLGRAD_GRAPH_PLAN_CACHE", 32),
                   segment=32)
