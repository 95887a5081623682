"""CPU thread policy: thread count chosen per graph from its work and the free cores.

ggml's CPU backend synchronises its threads at every node with spinning barriers. On a
2-core VM a tiny graph took ~1.6 µs on 1 thread and ~200 µs on 2; with one core busy
elsewhere, a 784-256-10 training step took 7 ms on 1 thread and 130 ms on 2, and even a
1024³ matmul gained nothing. So threads are used only for graphs whose heaviest node is
large, and never more than the cores the load average leaves free.
"""
from __future__ import annotations

import operator
import os
import warnings

MAX_THREADS = max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))
# The most threads a graph may get: the cores this process may run on (ggml's threads spin at a
# barrier per node, so oversubscription only loses: on 2 busy cores one 64x64 matmul took ~30 µs on
# 1 thread, ~100 ms on 8 and 10-60 s on 1000), and never above ggml's GGML_MAX_N_THREADS (512,
# beyond which it aborts).
THREAD_LIMIT = min(512, MAX_THREADS)
_warned_cap = False
# Work units are flops (≈ output elements for elementwise ops, 2·M·N·K for matmul).
MIN_WORK_FOR_THREADS = 64_000_000
_WORK_PER_THREAD = 32_000_000


def _capped(n: int, source: str) -> int:
    """``n`` bounded by THREAD_LIMIT, with one warning per process when it had to be lowered."""
    global _warned_cap
    if n <= THREAD_LIMIT:
        return n
    if not _warned_cap:
        _warned_cap = True
        warnings.warn(f"ggmlgrad: {source} asked for {n} CPU threads; using {THREAD_LIMIT} (the cores "
                      f"available, at most 512): more threads only wait on each other", RuntimeWarning, stacklevel=3)
    return THREAD_LIMIT


def _from_env(value: str | None) -> int | None:
    """GGMLGRAD_NUM_THREADS as a thread count: unset or empty is None (automatic); anything but a
    positive integer warns and is ignored, a large one is capped (never an abort in ggml)."""
    if value is None or not value.strip():
        return None
    try:
        v = int(value.strip(), 10)
    except ValueError:
        v = 0
    if v < 1:
        warnings.warn(f"ggmlgrad: GGMLGRAD_NUM_THREADS={value!r} is not a positive integer; ignored "
                      f"(threads are chosen per graph)", RuntimeWarning, stacklevel=2)
        return None
    return _capped(v, "GGMLGRAD_NUM_THREADS")


_override: int | None = _from_env(os.environ.get("GGMLGRAD_NUM_THREADS"))


def set_num_threads(n: int | None) -> None:
    """Fix the CPU thread count for every graph (``None`` restores the automatic policy).

    ``n`` must be a positive int (``TypeError`` for other types, ``ValueError`` below 1). Unlike
    ``torch.set_num_threads``, counts above ``THREAD_LIMIT`` (the cores this process may use, at most
    512) are lowered to it with a one-time ``RuntimeWarning``: ggml's threads spin at every node, so
    oversubscription only slows a graph down, and ggml aborts above 512. ``get_num_threads()``
    returns the count in use. The setting is process-wide (every thread's graphs use it).

    >>> import ggmlgrad as gg
    >>> gg.set_num_threads(1); gg.get_num_threads()
    1
    >>> gg.set_num_threads(None)
    """
    global _override
    if n is None:
        _override = None
        return
    if isinstance(n, bool) or not hasattr(type(n), "__index__"):  # ints and NumPy integers
        raise TypeError(f"set_num_threads: expected a positive int or None, got {type(n).__name__} {n!r}")
    n = operator.index(n)
    if n < 1:
        raise ValueError(f"set_num_threads: expected a positive int or None, got {n!r}")
    _override = _capped(n, "set_num_threads()")


def get_num_threads() -> int | None:
    """The fixed thread count (after capping), or None when chosen per graph.

    >>> import ggmlgrad as gg
    >>> gg.get_num_threads() is None or gg.get_num_threads() >= 1
    True
    """
    return _override


def free_cores(own: float = 1.0) -> float:
    """Cores the 1-minute load average leaves to this process, whose own ``own`` busy threads the
    average counts too (added back); MAX_THREADS where the platform has no load average."""
    if not hasattr(os, "getloadavg"):
        return float(MAX_THREADS)
    return MAX_THREADS - os.getloadavg()[0] + own


def choose_threads(total_work: float, max_node_work: float) -> int:
    if _override is not None:
        return _override
    if MAX_THREADS == 1 or max_node_work < MIN_WORK_FOR_THREADS:
        return 1
    return max(1, min(MAX_THREADS, int(free_cores()), int(max_node_work // _WORK_PER_THREAD)))


# Heaviest-node flops from which a graph computed many times tries more threads (a 64x64x256
# matmul is 2 MFLOP): below it, a barrier per node costs more than the work saved.
TRY_THREADS_WORK = 1_000_000
# With BLAS doing the matmuls, only heavier nodes try its threads: OpenBLAS on 2 threads was 1.4x
# slower on 64x64x256, and a 64-64-64-8 step stayed ~35% slower after such a trial in 3 of 4
# processes (209 → 280 µs; never with one thread throughout). 784-256-10's 51 MFLOP layer gains.
TRY_BLAS_THREADS_WORK = 16_000_000
_TRIALS = 5  # counted computes per candidate count
_BLOCK = 2  # computes in a row per candidate while measuring; the first of each is not counted
_EARLY_PAIRS = 2      # a clear loser (3x slower) decides after this many counted pairs
_RETUNE_EVERY = 500   # computes after a choice before measuring again (the load changes)
# Each measurement that one thread wins doubles the wait before the next, up to this many times
# _RETUNE_EVERY: a trial on a busy machine costs a few slow computes (on 2 cores with the load
# average at 5, a 784-256-10 step took 20-75 ms on 2 threads against 0.55 ms on one), and one that
# keeps losing should not be paid every 500 computes.
_RETUNE_BACKOFF_MAX = 32
_MANY_MUST_WIN = 0.9  # more threads are chosen only when their median is this much of one thread's


class ThreadTuner:
    """Thread count for a graph that is computed many times (a plan, a capture recording).

    The work estimate cannot see the machine: a barrier per node makes threads a loss on busy
    or small machines and a win on idle ones. So the first computes try ``many`` threads and 1
    in turns, ``_BLOCK`` computes in a row each, and count only the computes after the first of
    each block: the first pays the switch (a thread pool starting, BLAS workers waking from
    sleep), which a steady run never pays. Alternating single computes charged that to every
    many-thread sample and kept a 784-256-10 step on 1 thread, 1.35x slower. The faster median
    wins, more threads only by 10% (a clear loser, 3x slower, decides after two counted pairs).
    The choice is measured again every ``_RETUNE_EVERY`` computes: one made during a burst of
    load (a single slow sample on a noisy VM once kept a 64x256 MLP step on 2 threads, 1.4x
    slower) must not last. No trial starts while the load average leaves fewer than ``many`` cores
    (one thread until the next is due), and each trial one thread wins doubles the wait before the
    next (up to ``_RETUNE_BACKOFF_MAX`` times): on a busy machine trials only cost.
    """

    __slots__ = ("many", "times_many", "times_one", "choice", "_current", "_in_block", "_since", "_backoff")

    def __init__(self, many: int) -> None:
        self.many = many
        self.times_many: list[float] = []
        self.times_one: list[float] = []
        self.choice = 0  # 0 while measuring
        self._current = 1    # the candidate being measured
        self._in_block = 0   # its computes so far in this block
        self._since = 0  # computes since the choice
        self._backoff = 1  # the wait before measuring again, in _RETUNE_EVERY computes
        self._skip_if_busy(1)

    def _skip_if_busy(self, own: int) -> None:
        """No trial while the load average says the cores ``many`` threads need are taken: choose
        one thread until the next measurement is due (threads that wait for a core at every
        node's barrier made steps 40-130x slower on a 2-core VM under load)."""
        if free_cores(own) < self.many - 0.5:
            self.choice = 1

    @classmethod
    def for_work(cls, max_node_work: float, device_kind: str = "cpu", accelerated: bool = False) -> "ThreadTuner | None":
        """A tuner when the graph is heavy enough to try threads on a CPU with several; else None.
        ``accelerated``: its heavy nodes run on BLAS (whose threads are what would be tried)."""
        floor = TRY_BLAS_THREADS_WORK if accelerated else TRY_THREADS_WORK
        if device_kind != "cpu" or MAX_THREADS == 1 or max_node_work < floor:
            return None
        return cls(MAX_THREADS)

    def pick(self) -> int:
        if _override is not None:
            return _override
        return self.choice or self._current

    def record(self, threads: int, seconds: float) -> None:
        if _override is not None:
            return
        if self.choice:
            self._since += 1
            if self._since >= _RETUNE_EVERY * self._backoff:
                own = self.choice  # the threads this graph ran on: the load average counts them
                self._since = 0
                self.choice = 0
                self._current, self._in_block = 1, 0
                self.times_many.clear()
                self.times_one.clear()
                self._skip_if_busy(own)
            return
        if threads != self._current:
            return  # not what the tuner picked (an override came and went): not a sample
        self._in_block += 1
        if self._in_block > 1:  # the first compute of a block pays the switch
            (self.times_many if threads == self.many else self.times_one).append(seconds)
        if self._in_block >= _BLOCK:
            self._in_block = 0
            self._current = self.many if self._current == 1 else 1
        many, one = self.times_many, self.times_one
        if not many or len(many) != len(one):
            return
        m, o = sorted(many)[len(many) // 2], sorted(one)[len(one) // 2]
        if len(many) >= _TRIALS or (len(many) >= _EARLY_PAIRS and (m > 3 * o or o > 3 * m)):
            # More threads must win clearly: they take cores the rest of the process may want.
            self.choice = self.many if m < _MANY_MUST_WIN * o else 1
            self._backoff = 1 if self.choice == self.many else min(2 * self._backoff, _RETUNE_BACKOFF_MAX)
