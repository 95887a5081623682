"""Interleaved timing: every contender runs a block in turn, round after round; medians per call.

Load that changes during a run (other processes on a shared machine) then hits every column alike,
and the ratios of one run stay comparable even when the absolute times do not.
"""
from __future__ import annotations

import gc
import statistics
import time
from typing import Callable


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def calls_per_block(fn: Callable[[], object], block_s: float, cap: int = 100_000) -> int:
    """How many calls of ``fn`` fill about ``block_s`` seconds (at least 1)."""
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        dt = time.perf_counter() - t0
        if dt >= block_s / 4 or n >= cap:
            break
        n *= 4
    return max(1, min(cap, int(n * block_s / max(dt, 1e-9))))


def interleaved(fns: dict[str, Callable[[], object]], rounds: int, block_s: float, warmup: int = 3,
                clock: str = "wall") -> dict:
    """``{name: {"median_us", "min_us", "max_us", "samples_us"}}`` per call of each fn, the fns run
    in blocks of about ``block_s`` seconds, taking turns (order rotating per round), GC off in a block.
    ``clock="cpu"``: this process's CPU time (all its threads), steadier than wall time on a busy
    machine, and the step's own cost with one thread per framework."""
    now = CLOCKS[clock]
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    numbers = {k: calls_per_block(f, block_s) for k, f in fns.items()}
    samples: dict[str, list[float]] = {k: [] for k in fns}
    names = list(fns)
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)] if names else []
        for k in order:
            fn, n = fns[k], numbers[k]
            gc_was = gc.isenabled()
            gc.disable()
            try:
                t0 = now()
                for _ in range(n):
                    fn()
                dt = now() - t0
            finally:
                if gc_was:
                    gc.enable()
            samples[k].append(dt / n * 1e6)
    return {k: {"median_us": statistics.median(v), "min_us": min(v), "max_us": max(v), "samples_us": v}
            for k, v in samples.items() if v}
