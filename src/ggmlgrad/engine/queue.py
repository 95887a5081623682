"""The engine: one thread's queue, builder, executor and drain, behind a thin facade.

``Engine`` holds four parts with narrow interfaces and wires them together:

- :class:`~.records.RecordQueue` (``engine.queue``): the records and their plan key. ``record``
  always appends one: a graph-mode op as a lazy record, an eager op as the queue's one record.
- :class:`~.build.Builder` (``engine.builder``): turns records into ggml nodes (and graph plans).
- :class:`~.executor.Executor` (``engine.executor``): the only caller of ggml's graph compute.
- :class:`~.drain.Drainer` (``engine.drainer``): the only compute: it looks up the queue's plan
  (an op plan for one eager record, a graph plan for a record sequence), builds on a miss, and runs
  it through the executor (``Drainer.run``); then marks the results computed, or failed.

Plus :class:`~.segments.Segments` (``engine.segments``), autograd's replayable backward segments.
The parts' entry points other layers use are the engine's own attributes (bound methods of the part,
so no call goes through the facade). Eager mode is record plus an immediate drain. In-place
writes run inside :meth:`Engine.exclusive`, which drains first, so a write can never be ordered
before reads queued ahead of it.
"""
from __future__ import annotations

import threading
from operator import attrgetter
from typing import Callable

from .._ggml import lib
from ..runtime import Storage, budget
from . import modes
from .array import COMPUTED, FAILED, PENDING, Array
from .build import Builder
from .context import current
from .drain import Drainer
from .errors import PendingError
from .executor import Executor
from .local import PerThread, first_epoch, register, retire
from .records import RecordQueue, no_value_message, user_site
from .segments import Segments

__all__ = ["ENGINE", "Engine", "is_pending", "queue_length", "user_site", "no_value_message"]


def _part(part: str, name: str, doc: str) -> property:
    """An attribute of one of the engine's parts, read (and written) through the engine."""
    return property(attrgetter(f"{part}.{name}"),  # a C-level getter: ``engine._hold`` is read per row write
                    lambda self, v: setattr(getattr(self, part), name, v), doc=doc)


class Engine:
    """One thread's engine (``ENGINE`` gives each thread its own, see :mod:`.local`)."""

    # The queue's state, for the engine's tests and the index checks (ops/indexing.py).
    epoch = _part("queue", "epoch", "The queue's epoch (a pending tensor of another epoch is not in it).")
    lazy = _part("queue", "lazy", "The queue's graph-mode records not built yet.")
    roots = _part("queue", "roots", "The queue's built results and aliases (weak ref, node); a lazy record's own "
                                    "result is its record's ref.")
    effects = _part("queue", "effects", "The queue's in-place write nodes.")
    labels = _part("queue", "labels", "The queued ops' labels (for errors).")
    checks = property(attrgetter("queue.checks"), doc="The queue's index checks (engine/checks.py).")
    max_work = _part("queue", "max_work", "The queue's heaviest node (the thread policy's input).")
    _hold = _part("queue", "hold", "How many holds are in force (the queue is not drained while > 0).")
    ctx_list = _part("builder", "ctx_list", "The node contexts of the queue's built nodes.")
    _ctxs = _part("builder", "pool", "The builder's pool of node contexts.")
    last_plan = _part("drainer", "last_plan", "The graph plan the last planned drain ran.")

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.queue = q = RecordQueue(first_epoch())  # epochs unique across threads
        self.executor = Executor()
        self.builder = b = Builder(q, None, None)
        self.drainer = d = Drainer(q, b, self.executor, self.lock)
        b.drain, b.discard = d.drain, d.discard
        self.segments = s = Segments(q, self.lock)
        self.thread_name = register(self)
        # The parts' entry points (bound methods of the part: no call through the facade).
        self.drain, self._drain_locked, self._discard = d.drain, d.drain_locked, d.discard
        self.run, self.fail_next_drain, self.settle_when_computed = d.run, d.fail_next_drain, d.settle_when_computed
        self.node_of, self.begin, self._materialize = b.node_of, b.begin, b.materialize
        self.note, self.noted, self.adopt_result, self.add_work = q.note, q.noted, q.adopt_result, q.add_work
        self.lazy_mark, self.lazy_segment, self.replay_segment = s.lazy_mark, s.lazy_segment, s.replay_segment
        self.queue_refs, self.refs_state, self.result_index = s.queue_refs, s.refs_state, s.result_index

    def __del__(self) -> None:
        try:
            retire(self)  # its thread ended: queued tensors fail clearly, contexts are freed
        except Exception:  # interpreter shutdown
            pass

    def __len__(self) -> int:
        return len(self.queue)

    def record(self, out: Array, label: str, build: Callable[..., int], inputs, work: float = 0.0,
               params: dict | None = None) -> Array:
        """Append ``out``'s op to the queue (drained at once in eager and check mode).

        ``build(ctx, *nodes)``; or, with ``params`` (an op's keyword parameters), an op
        builder ``build(ctx, nodes, inputs, out, **params)`` called directly (no closure per op).
        """
        with self.lock:
            n = out.numel_
            if n == 0:
                # An empty result has no value to compute, and ggml asserts on 0-byte graph
                # tensors it must allocate itself: it never becomes a node.
                for x in inputs:
                    if x._status == FAILED:
                        raise PendingError(x._error or "ggmlgrad: an input of this op has no value")
                out._storage = Storage(out.device, 1)
                out._status = COMPUTED
                return out
            if n > budget.HUGE_NUMEL:  # larger than the device's memory: raise before queuing
                budget.check_tensor(out.device, out.nbytes, f"{label}'s result of shape {out.shape} ({out.dtype.name})")
            c = current()
            q = self.queue
            if q.hold == 0 and c.observer is None and params is not None:
                if c.graph and not c.check:
                    if q.device is not out.device:
                        self._switch_device(out.device)
                    return q.record_lazy(out, label, build, inputs, work, params, c.precision)
                if not (q.lazy or q.roots or q.effects):
                    # Eager or check mode: the op is the queue's one record, drained at once (its
                    # op plan, when there is one, computes it before anything is built).
                    q.one = (out, label, build, inputs, work, params, c)
                    self._drain_locked("check" if c.graph else "eager")
                    return out
            self.builder.build_record(out, label, build, inputs, work, params)
            if q.hold == 0:
                if not c.graph:
                    self._drain_locked("eager")
                elif c.check:
                    q.site = user_site(3)
                    self._drain_locked("check")
                elif q.site is None:
                    q.site = user_site(3)
            return out

    def _switch_device(self, device) -> None:
        """Records for another device: what is queued for the last one computes first."""
        q = self.queue
        if q.device is not None and len(q):
            self.drain("device_change")
        q.device = device

    def record_update(self, label: str, build, inputs, params: dict, work: float = 0.0) -> None:
        """Queue in-place writes into ``inputs`` (an optimizer's update of its parameters); inside
        :meth:`exclusive` only.

        ``build(ctx, nodes, inputs, **params)`` returns ``[(target, node), ...]``: ``node``'s value
        is copied into ``inputs[target]``, or with ``target`` None, ``node`` writes in place by
        itself (``ggml_opt_step_adamw``). Recorded lazily like graph-mode ops, so a repeated update
        (every optimizer step) replays a cached plan. ``build`` must be a plain function (it is
        part of the plan's key) and ``inputs`` every tensor it reads or writes.
        """
        q = self.queue
        if q.hold == 0:
            raise RuntimeError("ggmlgrad internal: record_update outside exclusive()")
        device = inputs[0].device
        c = current()
        if c.observer is not None:  # a capture recording takes the queue as built nodes
            b = self.builder
            ctx = b.begin(device)
            nodes = [b.node_of(x) for x in inputs]
            b.queue_update_writes(build(ctx, nodes, inputs, **params), nodes, inputs)
        else:
            if q.device is not device:
                self._switch_device(device)
            q.record_update(build, inputs, params, c.precision)
        q.labels.append(label)
        q.add_work(work)

    # The same, by what it queues: in-place writes (optimizer updates, copy_, load_state_dict).
    record_writes = record_update

    def queue_write(self, target: Array, value_node: int, label: str = "write") -> None:
        """Queue ``target ← value`` (call inside :meth:`exclusive` only)."""
        q = self.queue
        if q.hold == 0:
            raise RuntimeError("ggmlgrad internal: queue_write outside exclusive()")
        b = self.builder
        b.room()
        leaf = b.write_node_of(target)
        q.effects.append(lib.cpy(b.ctx, value_node, leaf))
        q.labels.append(label)

    def queue_effect(self, node: int, label: str = "effect") -> None:
        """Queue a node that writes in place by itself (e.g. ggml_opt_step_adamw); inside :meth:`exclusive` only."""
        q = self.queue
        if q.hold == 0:
            raise RuntimeError("ggmlgrad internal: queue_effect outside exclusive()")
        q.effects.append(node)
        q.labels.append(label)

    def exclusive(self, reason: str) -> "_Exclusive":
        """Drain, let the body queue reads and writes, drain them as their own graph.

        Used for in-place writes and optimizer steps: anything queued before
        computes first, so the writes cannot be reordered before earlier reads.
        """
        return _Exclusive(self, reason)

    def hold(self) -> None:
        """Queue without draining until :meth:`release` (a capture recording's optimizer update
        queues its in-place writes this way; :meth:`exclusive` holds for its body)."""
        self.queue.hold += 1

    def release(self) -> None:
        """End one :meth:`hold`."""
        if self.queue.hold <= 0:
            raise RuntimeError("ggmlgrad internal: release() without hold()")
        self.queue.hold -= 1

    def has_queued(self) -> bool:
        """Whether anything is queued and not computed yet (ops, in-place writes).

        >>> import ggmlgrad as gg
        >>> from ggmlgrad.engine import ENGINE
        >>> with gg.graph_mode(True):
        ...     y = gg.ones(2) * 2.0
        ...     ENGINE.has_queued()
        True
        >>> ENGINE.has_queued()   # leaving graph mode computed it
        False
        """
        return self.queue.has_results()

    def drain_if_queued(self, reason: str) -> bool:
        """:meth:`drain` when :meth:`has_queued` (a capture replay's check before it computes: queued
        work may write what the replay reads); False, without taking the lock, otherwise."""
        if self.queue.has_results():
            return self.drain(reason)
        return False

    def discard(self) -> None:
        """Drop the queue without computing it (its pending tensors fail with a clear error)."""
        with self.lock:
            self._discard()

    def alias_pending(self, twin: Array, base: Array) -> None:
        """Make ``twin`` another name for ``base``'s queued node (``detach()`` of a pending tensor)."""
        with self.lock:
            self.queue.alias_pending(twin, base)

    def rebind_pending(self, base: Array, node: int) -> None:
        """Make ``node`` the queued node of ``base`` and of its aliases (a capture recording's write)."""
        with self.lock:
            self.queue.rebind_pending(base, node)

    def take_for_capture(self):
        """Hand the queue over to a capture recording instead of computing it.

        Returns (roots, effects, ctx_list, labels, device, work, max_work, keep); the caller
        owns the contexts and must give them back with :meth:`release_contexts`.
        """
        with self.lock:
            b, q = self.builder, self.queue
            b.materialize()
            state = (q.roots, q.effects, b.ctx_list, q.labels, q.device, q.work, q.max_work, q.keep)
            b.take_contexts()
            q.next_epoch()
            return state

    def release_contexts(self, ctx_list: list[int]) -> None:
        for ctx in ctx_list:
            lib.free(ctx)


class _Exclusive:
    """:meth:`Engine.exclusive`'s context manager: a class, not a generator (~2 us less per
    optimizer step and in-place write). Holds the lock for the whole block."""

    __slots__ = ("engine", "reason")

    def __init__(self, engine: Engine, reason: str) -> None:
        self.engine = engine
        self.reason = reason

    def __enter__(self) -> Engine:
        e = self.engine
        e.lock.acquire()
        try:
            e._drain_locked(self.reason)
        except BaseException:
            e.lock.release()
            raise
        e.queue.hold += 1
        return e

    def __exit__(self, exc_type, exc, tb) -> bool:
        e = self.engine
        try:
            e.queue.hold -= 1
            if exc_type is not None:
                e._discard()
            else:
                e._drain_locked(self.reason)
        finally:
            e.lock.release()
        return False


# Every thread has its own Engine (its queue and drains; modes and observers are in .context): see .local.
ENGINE = PerThread(Engine)
modes._on_graph_off.append(lambda: ENGINE.drain("graph_mode_off"))


def queue_length() -> int:
    """How many nodes are queued and not yet computed."""
    return len(ENGINE)


def is_pending(a: Array) -> bool:
    return a._status == PENDING
