"""Per-thread engine state: every thread records into, drains and fails its own queue.

``ENGINE`` (see :mod:`.queue`) is a :class:`PerThread` proxy: ``ENGINE.record(...)``,
``ENGINE.drain(...)`` reach the calling thread's own ``Engine``, created on its first use. So an
eager op on one thread never computes, nor fails, another thread's graph-mode queue. (Modes and a
capture recording's observer live in the execution context, :mod:`.context`, which is per thread
and per asyncio task too.)
What stays shared is process-wide by nature and locked where it is written: the trace cache,
backends and their schedulers (one graph computes at a time: ``COMPUTE_LOCK``), device memory.

Epochs are unique across threads (each engine counts in its own range), so a tensor pending in
one thread's queue is never mistaken for one of another's: using it there raises a clear error.

Sharing between threads: computed tensors and models are readable from every thread (forward
passes of one model on several threads at once are fine); a captured function called from several
threads takes the calls in turn. A tensor still pending in another thread's graph-mode queue raises
``PendingError`` naming that thread (compute it there first); one whose thread ended without
computing it says so. Training one model from several threads is not synchronised (as in PyTorch:
concurrent optimizer steps interleave): hold a lock around each whole step to get the serial result.
asyncio tasks on one thread share its queue (a sync point in one task may compute what another
queued: the values are the same); their modes are their own (``contextvars``).
"""
from __future__ import annotations

import itertools
import threading
import weakref
from types import MethodType
from typing import Callable

from .array import FAILED, PENDING

# Each engine's epochs start at its id times this: 2^48 drains (~45 years at 200k drains/s)
# before two threads' epochs could meet.
_EPOCH_RANGE = 1 << 48
_engine_ids = itertools.count(1)
_engines: "weakref.WeakSet" = weakref.WeakSet()   # live engines, for error messages only
_local_setattr = threading.local.__setattr__
_local_delattr = threading.local.__delattr__


def first_epoch() -> int:
    """The first epoch of a new engine: a range no other engine of this process uses."""
    return next(_engine_ids) * _EPOCH_RANGE


def register(engine) -> str:
    """Remember a new engine (for :func:`owner_of`); returns its thread's name."""
    _engines.add(engine)
    return threading.current_thread().name


def owner_of(epoch: int):
    """The live engine (of another thread) whose current epoch is ``epoch``, or None."""
    for e in list(_engines):
        if e.epoch == epoch:
            return e
    return None


def retire(engine) -> None:
    """A thread's engine is going away (the thread ended): the tensors still queued in it fail
    with a message saying why, and its ggml contexts are freed."""
    msg = (f"ggmlgrad: this tensor was queued in graph mode by thread {engine.thread_name!r}, which ended "
           f"before computing it; read it (e.g. .numpy()) or leave graph mode in that thread before it ends.")
    q = engine.queue
    for ref, _ in q.results():
        a = ref()
        if a is not None and a._status == PENDING and a._epoch == q.epoch:
            a._status, a._node, a._error = FAILED, 0, msg
    engine.builder.free()
    engine.executor.free()
    q.reset()  # the memory its last queue kept alive goes now, not at the next garbage collection
    engine.builder.drain = engine.builder.discard = None  # (they refer to the drainer, which refers to it)


class PerThread(threading.local):
    """Attribute access forwarded to the calling thread's instance of ``factory()``.

    Methods are cached per thread on first use (a later ``ENGINE.record`` is one C-level
    lookup, ~40 ns more than a plain attribute); data attributes are read and written on the
    engine itself every time, so they never go stale.

    >>> import ggmlgrad as gg
    >>> from ggmlgrad.engine import ENGINE
    >>> len(ENGINE)   # this thread's queue
    0
    """

    def __init__(self, factory: Callable[[], object]) -> None:
        # threading.local runs __init__ again, with the same argument, in every thread that uses it
        engine = factory()
        _local_setattr(self, "_engine", engine)
        # This thread's engine itself, and the data attributes code outside the engine reads (``with
        # ENGINE.lock``), which an engine sets once when it is made: attributes of the thread's own,
        # read without a property's call (``ENGINE.current`` is read per row write and per autograd
        # record, ``ENGINE.lock`` per in-place write)
        _local_setattr(self, "current", engine)
        for name in _FIXED:
            if hasattr(engine, name):
                _local_setattr(self, name, getattr(engine, name))

    def __getattr__(self, name: str):
        value = getattr(self._engine, name)
        if type(value) is MethodType:
            _local_setattr(self, name, value)   # this thread's bound method, found directly next time
        return value

    def __setattr__(self, name: str, value) -> None:
        setattr(self._engine, name, value)
        self.__dict__.pop(name, None)           # a method replaced on the engine (a test's patch)

    def __delattr__(self, name: str) -> None:
        delattr(self._engine, name)
        self.__dict__.pop(name, None)

    def __len__(self) -> int:
        return len(self._engine)

    def __repr__(self) -> str:
        return f"<per-thread {self._engine!r}>"


# The one data attribute read from outside the engine (``with ENGINE.lock``), set once per engine
_FIXED = ("lock",)
