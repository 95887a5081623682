"""Timing helpers shared by the benchmark scripts (medians of repeated blocks, never timed tests)."""
from __future__ import annotations

import cProfile
import io
import os
import pstats
import statistics
import sys
import time
from typing import Callable

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
if SRC not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, SRC)


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def compare(fns: dict, number: int, repeat: int = 7, warmup: int = 10, clock: str = "wall") -> dict:
    """Median µs per call of each fn; the fns are interleaved round by round, so a machine whose
    load changes during the run slows all of them alike. A None fn gives None.

    clock="cpu" measures the process's CPU time instead of wall time: with one thread that is the
    step's cost without the waits a busy machine adds (use it with --threads 1)."""
    now = CLOCKS[clock]
    live = {k: f for k, f in fns.items() if f is not None}
    for f in live.values():
        for _ in range(warmup):
            f()
    samples: dict = {k: [] for k in live}
    for _ in range(repeat):
        for k, f in live.items():
            t0 = now()
            for _ in range(number):
                f()
            samples[k].append((now() - t0) / number)
    return {k: (statistics.median(samples[k]) * 1e6 if k in samples else None) for k in fns}


def add_timing_args(ap, number: int, number_help: str) -> None:
    """The timing options every side-by-side script takes (``--number``, ``--repeat``, ``--threads``,
    ``--clock``); :func:`timing_setup` applies them after parsing."""
    ap.add_argument("--number", type=int, default=number, help=number_help)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--threads", type=int, help="pin both frameworks to this many CPU threads")
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                    help="wall time (default) or process CPU time (implies --threads 1; for busy machines)")


def timing_setup(args, gg) -> None:
    """``--clock cpu`` pins one thread; then pin both frameworks to ``--threads``."""
    if args.clock == "cpu":
        args.threads = 1
    set_threads(args.threads, gg)


def set_threads(n: int | None, gg) -> None:
    """Pin ggmlgrad's and torch's CPU thread counts (None: each framework's default)."""
    if n is None:
        return
    gg.set_num_threads(n)
    torch = try_torch()
    if torch is not None:
        torch.set_num_threads(n)


def try_torch():
    """PyTorch if installed (the benchmarks compare against torch==2.13.0 CPU eager), else None."""
    try:
        import torch
    except ImportError:
        return None
    return torch


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a is not None and b else "-"


def fmt(us: float | None) -> str:
    if us is None:
        return "-"
    return f"{us:.1f} µs" if us < 1000 else f"{us / 1000:.3f} ms"


def table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    line = lambda r: "  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def profile(fn: Callable[[], object], number: int, top: int = 25) -> str:
    """cProfile `number` calls of fn; top functions by own time, with µs per call of fn (wall time,
    inflated by the profiler; read the shares). ctypes calls count as their caller's own time."""
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(number):
        fn()
    pr.disable()
    s = io.StringIO()
    st = pstats.Stats(pr, stream=s)
    total = sum(nc for (_, nc, _, _, _) in st.stats.values()) / number
    st.sort_stats("tottime")
    rows = []
    for (file, line, name), (cc, nc, tt, ct, _) in sorted(st.stats.items(), key=lambda kv: -kv[1][2])[:top]:
        short = file.split("/src/")[-1] if "/src/" in file else os.path.basename(file)
        rows.append([f"{short}:{line}:{name}", f"{nc / number:.1f}", f"{tt / number * 1e6:.2f}",
                     f"{ct / number * 1e6:.2f}"])
    return (f"{total:.0f} Python function calls per call\n"
            + table(["function", "calls/iter", "own µs/iter", "cum µs/iter"], rows))


def header(gg) -> str:
    info = gg.info()
    torch = try_torch()
    tv = f"torch {torch.__version__} ({torch.get_num_threads()} threads)" if torch else "torch not installed"
    load = f" | load avg {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else ""
    blas = f" (OpenBLAS {info['blas_kernels']} kernels)" if info.get("blas_kernels") else ""
    return (f"ggmlgrad {gg.__version__} | ggml {info['ggml_version']} {info['build']}{blas}, vector kernels "
            f"{info.get('vector_kernels', False)}, executor accelerator "
            f"{str(info.get('executor_accelerator', '?')).split(':')[0]} "
            f"[{info['library_dir']}] | threads {info['threads']} | {tv} | {os.cpu_count()} CPUs{load}")
