"""CPU thread policy: thread count chosen per graph from its work and the free cores.

ggml's CPU backend synchronises its threads at every node with spinning barriers. On a
2-core VM a tiny graph took ~1.6 µs on 1 thread and ~200 µs on 2; with one core busy
elsewhere, a 784-256-10 training step took 7 ms on 1 thread and 130 ms on 2, and even a
1024³ matmul gained nothing. So threads are used only for graphs whose heaviest node is
large, and never more than the cores the load average leaves free.
"""
from __future__ import annotations

import os

_override: int | None = None
_env = os.environ.get("GGMLGRAD_NUM_THREADS")
if _env and _env.isdigit() and int(_env) > 0:
    _override = int(_env)

MAX_THREADS = max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))
# Work units are flops (≈ output elements for elementwise ops, 2·M·N·K for matmul).
MIN_WORK_FOR_THREADS = 64_000_000
_WORK_PER_THREAD = 32_000_000


def set_num_threads(n: int | None) -> None:
    """Fix the CPU thread count for every graph (``None`` restores the automatic policy).

    >>> import ggmlgrad as gg
    >>> gg.set_num_threads(1); gg.set_num_threads(None)
    """
    global _override
    if n is None:
        _override = None
        return
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"set_num_threads: expected a positive int or None, got {n!r}")
    _override = n


def get_num_threads() -> int | None:
    """The fixed thread count, or None when chosen per graph."""
    return _override


def choose_threads(total_work: float, max_node_work: float) -> int:
    if _override is not None:
        return _override
    if MAX_THREADS == 1 or max_node_work < MIN_WORK_FOR_THREADS:
        return 1
    # The load average counts this (busy) process too: add it back.
    free_cores = MAX_THREADS - os.getloadavg()[0] + 1.0 if hasattr(os, "getloadavg") else MAX_THREADS
    return max(1, min(MAX_THREADS, int(free_cores), int(max_node_work // _WORK_PER_THREAD)))
