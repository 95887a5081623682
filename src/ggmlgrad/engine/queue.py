"""The engine facade: one thread's queue, put together from its parts.

``Engine`` joins the units that each do one job: :mod:`.records` (the queue of records and its
plan key), :mod:`.build` (materialising records into ggml nodes), :mod:`.drain` (computing the
queue, with a cached plan when there is one, and attributing failures) and :mod:`.segments`
(backward segments autograd replays). What is left here is the public entry points: ``record``
(every op), ``record_update`` (in-place writes of optimizers, ``copy_``, ``load_state_dict``),
``exclusive`` (drain, write, drain) and the hand-over of the queue to a capture recording.

In eager mode the queue is drained at once (eager is graph mode with an immediate drain). In-place
writes run inside :meth:`Engine.exclusive`, which drains first, so a write can never be ordered
before reads queued ahead of it.
"""
from __future__ import annotations

import threading
from typing import Callable

from .._ggml import lib
from ..runtime import Storage, budget
from . import modes
from .array import COMPUTED, FAILED, PENDING, Array
from .context import current
from .build import Builder, _ContextPool
from .drain import Drainer
from .errors import PendingError
from .local import PerThread, first_epoch, register, retire
from .records import RecordQueue, no_value_message, user_site
from .segments import Segments

__all__ = ["ENGINE", "Engine", "is_pending", "queue_length", "user_site", "no_value_message"]


class Engine(RecordQueue, Builder, Drainer, Segments):
    """One thread's queue (``ENGINE`` gives each thread its own, see :mod:`.local`)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.epoch = first_epoch()  # unique across threads: another thread's pending tensor never matches
        self.thread_name = register(self)
        self._ctxs = _ContextPool()
        self._graph_ctx = 0
        self._graph_ctx_size = 0
        self._hold = 0
        self._draining = False
        self._fail_next: str | None = None
        self._private_leaves = False  # building a plan: leaves it can rebind, not storages' shared headers
        self._private_leaf_of: dict[int, int] = {}
        self.checks: list = []  # index checks of the queue, verified after its drain (checks.py)
        self.settle_queue: list = []  # (weak ref, callback): queued tensors to settle once computed (drain.py)
        self._new_epoch_state()

    def __del__(self) -> None:
        try:
            retire(self)  # its thread ended: queued tensors fail clearly, contexts are freed
        except Exception:  # interpreter shutdown
            pass

    def record(self, out: Array, label: str, build: Callable[..., int], inputs, work: float = 0.0,
               params: dict | None = None) -> Array:
        """Build ``out``'s node from ``inputs`` and queue it (drain at once in eager/check mode).

        ``build(ctx, *nodes)``; or, with ``params`` (an op's keyword parameters), an op
        builder ``build(ctx, nodes, inputs, out, **params)`` called directly (no closure per op).
        """
        with self.lock:
            if out.numel_ == 0:
                # An empty result has no value to compute, and ggml asserts on 0-byte graph
                # tensors it must allocate itself: it never becomes a node.
                for x in inputs:
                    if x._status == FAILED:
                        raise PendingError(x._error or "ggmlgrad: an input of this op has no value")
                out._storage = Storage(out.device, 1)
                out._status = COMPUTED
                return out
            if out.numel_ > budget.HUGE_NUMEL:  # larger than the device's memory: raise before queuing
                budget.check_tensor(out.device, out.nbytes, f"{label}'s result of shape {out.shape} ({out.dtype.name})")
            c = current()
            if self._hold == 0 and c.observer is None and params is not None:
                if c.graph and not c.check:
                    return self._record_lazy(out, label, build, inputs, work, params, c.precision)
                if not (self.lazy or self.roots or self.effects):
                    # Eager or check mode: the queue is this one record, drained at once: computed
                    # with its op's cached plan when there is one (what _drain_locked does first
                    # with a queue of one record, called here directly: every eager op passes here).
                    reason = "check" if c.graph else "eager"
                    if self._fail_next is None and self._drain_one((out, label, build, inputs, work, params, c),
                                                                   reason):
                        return out
                    self._build_record(out, label, build, inputs, work, params)
                    self._drain_locked(reason)
                    return out
            self._build_record(out, label, build, inputs, work, params)
            if self._hold == 0:
                if not c.graph:
                    self._drain_locked("eager")
                elif c.check:
                    self.site = user_site(3)
                    self._drain_locked("check")
                elif self.site is None:
                    self.site = user_site(3)
            return out

    def record_update(self, label: str, build, inputs, params: dict, work: float = 0.0) -> None:
        """Queue in-place writes into ``inputs`` (an optimizer's update of its parameters); inside
        :meth:`exclusive` only.

        ``build(ctx, nodes, inputs, **params)`` returns ``[(target, node), ...]``: ``node``'s value
        is copied into ``inputs[target]``, or with ``target`` None, ``node`` writes in place by
        itself (``ggml_opt_step_adamw``). Recorded lazily like graph-mode ops, so a repeated update
        (every optimizer step) replays a cached plan. ``build`` must be a plain function (it is
        part of the plan's key) and ``inputs`` every tensor it reads or writes.
        """
        if self._hold == 0:
            raise RuntimeError("ggmlgrad internal: record_update outside exclusive()")
        device = inputs[0].device
        c = current()
        if c.observer is not None:  # a capture recording takes the queue as built nodes
            ctx = self.begin(device)
            nodes = [self.node_of(x) for x in inputs]
            self._queue_update_writes(build(ctx, nodes, inputs, **params), nodes, inputs)
        else:
            if self.device is not device:
                if self.device is not None and len(self):
                    self.drain("device_change")
                self.device = device
            prec = c.precision
            self._sign(build, None, None, prec, params, len(inputs))
            self.lazy.append((build, self._lazy_inputs(inputs), params, None, None, prec, None))
            self.updates += 1
        self.labels.append(label)
        self.add_work(work)

    # The same, by what it queues: in-place writes (optimizer updates, copy_, load_state_dict).
    record_writes = record_update

    def queue_write(self, target: Array, value_node: int, label: str = "write") -> None:
        """Queue ``target ← value`` (call inside :meth:`exclusive` only)."""
        if self._hold == 0:
            raise RuntimeError("ggmlgrad internal: queue_write outside exclusive()")
        self._room()
        leaf = self.write_node_of(target)
        self.effects.append(lib.cpy(self.ctx, value_node, leaf))
        self.labels.append(label)

    def queue_effect(self, node: int, label: str = "effect") -> None:
        """Queue a node that writes in place by itself (e.g. ggml_opt_step_adamw); inside :meth:`exclusive` only."""
        if self._hold == 0:
            raise RuntimeError("ggmlgrad internal: queue_effect outside exclusive()")
        self.effects.append(node)
        self.labels.append(label)

    def exclusive(self, reason: str) -> "_Exclusive":
        """Drain, let the body queue reads and writes, drain them as their own graph.

        Used for in-place writes and optimizer steps: anything queued before
        computes first, so the writes cannot be reordered before earlier reads.
        """
        return _Exclusive(self, reason)

    def hold(self) -> None:
        """Queue without draining until :meth:`release` (a capture recording's optimizer update
        queues its in-place writes this way; :meth:`exclusive` holds for its body)."""
        self._hold += 1

    def release(self) -> None:
        """End one :meth:`hold`."""
        if self._hold <= 0:
            raise RuntimeError("ggmlgrad internal: release() without hold()")
        self._hold -= 1

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
        return bool(self.roots or self.effects or self.updates)

    def drain_if_queued(self, reason: str) -> bool:
        """:meth:`drain` when :meth:`has_queued` (a capture replay's check before it computes: queued
        work may write what the replay reads); False, without taking the lock, otherwise."""
        if self.roots or self.effects or self.updates:
            return self.drain(reason)
        return False

    def discard(self) -> None:
        """Drop the queue without computing it (its pending tensors fail with a clear error)."""
        with self.lock:
            self._discard()

    # ------------------------------------------------------------------ draining
    def take_for_capture(self):
        """Hand the queue over to a capture recording instead of computing it.

        Returns (roots, effects, ctx_list, labels, device, work, max_work, keep); the caller
        owns the contexts and must give them back with :meth:`release_contexts`.
        """
        with self.lock:
            self._materialize()
            state = (self.roots, self.effects, self.ctx_list, self.labels, self.device, self.work,
                     self.max_work, self.keep)
            self.epoch += 1
            self._new_epoch_state()
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
        e._hold += 1
        return e

    def __exit__(self, exc_type, exc, tb) -> bool:
        e = self.engine
        try:
            e._hold -= 1
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

