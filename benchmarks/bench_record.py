"""Op-recording cost per queued op (graph mode) and eager per-op overhead.

The recording cost is the floor of an uncaptured graph-mode step: every op pays
validation + node building + queueing before anything computes.

    PYTHONPATH=src python benchmarks/bench_record.py [--n 20000] [--profile]
    PYTHONPATH=src python benchmarks/bench_record.py --opinfo [--profile]   # over the OpInfo ops

``--opinfo``: every OpInfo entry's first sample called repeatedly in graph mode, µs per RECORDED
op (a composite records several), without grad and with ``requires_grad`` inputs; the median over
the entries is the issue's figure (goal: <= 2 us without grad, <= 4 us with).
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import header  # noqa: E402  (also puts the checkout's src on the path)

import ggmlgrad as gg  # noqa: E402


def _per_op_us(fn, n: int, repeat: int = 5) -> tuple[float, float]:
    """(wall, CPU) microseconds per op, best of ``repeat``. CPU time (this process) is
    the steadier figure on a shared box; both are printed."""
    best_wall = best_cpu = float("inf")
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        fn(n)
        best_cpu = min(best_cpu, time.process_time() - c0)
        best_wall = min(best_wall, time.perf_counter() - t0)
    return best_wall / n * 1e6, best_cpu / n * 1e6


def record_chain(n: int) -> None:
    """n elementwise ops queued in graph mode, drained once (drain time excluded)."""
    x = gg.ones(8, 8)
    with gg.graph_mode(True):
        y = x
        for _ in range(n):
            y = y * 1.0
        gg.engine.ENGINE.discard()  # drop without computing: only recording is timed


def record_binary(n: int) -> None:
    """n tensor-tensor adds (two inputs: leaf lookups + broadcasting inference)."""
    a, b = gg.ones(8, 8), gg.ones(8, 8)
    with gg.graph_mode(True):
        for _ in range(n):
            a + b
        gg.engine.ENGINE.discard()


def record_autograd(n: int) -> None:
    """n ops on a tensor that requires grad (tape Node recorded too)."""
    x = gg.ones(8, 8, requires_grad=True)
    with gg.graph_mode(True):
        y = x
        for _ in range(n):
            y = y * 1.0
        gg.engine.ENGINE.discard()


def eager_small(n: int) -> None:
    """n eager elementwise ops (each one a full graph compute)."""
    x = gg.ones(8, 8)
    for _ in range(n):
        x * 1.0


def eager_matmul(n: int) -> None:
    a, b = gg.ones(64, 64), gg.ones(64, 64)
    for _ in range(n):
        a @ b


def _opinfo_cases():
    """(name, call) per OpInfo entry whose first sample records in graph mode without host reads;
    ``call(grad)`` builds the inputs once and returns a function that records the op once."""
    import numpy as np
    from ggmlgrad.testing.opinfo import all_opinfos, input_arrays, tensor_indices, with_tensors
    rng = np.random.default_rng(0)
    cases = []
    for info in all_opinfos():
        if not info.capturable or info.name.endswith("_nonfinite"):
            continue
        samples = info.samples(rng)
        if not samples:
            continue
        sample = samples[0]

        def make(grad, info=info, sample=sample):
            arrays = input_arrays(sample)
            nondiff = set(sample.nondiff)
            ts = []
            for k, (i, a) in enumerate(zip(tensor_indices(sample), arrays)):
                rg = grad and info.grad and a.dtype.kind == "f" and i not in nondiff
                ts.append(gg.tensor(a, requires_grad=rg) if a.dtype.kind == "f" else gg.tensor(a, dtype=gg.int32))
            args = with_tensors(sample, ts)
            return lambda: info.fn(*args, **sample.kwargs)
        cases.append((info.name, make))
    return cases


def opinfo_record(n: int, profile: bool) -> None:
    """Median µs per recorded op over the OpInfo entries, without and with grad."""
    import statistics
    from ggmlgrad.engine import ENGINE
    for grad in (False, True):
        per_op = []
        pr = cProfile.Profile() if profile and grad else None
        for name, make in _opinfo_cases():
            try:
                call = make(grad)
                with gg.graph_mode(True):
                    call()
                    ops = len(ENGINE)  # the ops one call queued
                    ENGINE.discard()
                    if ops <= 0:
                        continue
                    best = float("inf")
                    for _ in range(3):
                        t0 = time.perf_counter()
                        if pr is not None:
                            pr.enable()
                        for _ in range(n):
                            call()
                        if pr is not None:
                            pr.disable()
                        best = min(best, time.perf_counter() - t0)
                        ENGINE.discard()
            except Exception:  # an entry that syncs (reads the host) in graph mode: not a recording
                gg.engine.ENGINE.discard()
                continue
            per_op.append((best / n / ops * 1e6, name, ops))
        per_op.sort()
        med = statistics.median(x for x, _, _ in per_op)
        print(f"graph-mode recording over {len(per_op)} OpInfo entries, {'requires_grad' if grad else 'no grad'}: "
              f"median {med:.2f} us per recorded op (fastest {per_op[0][1]} {per_op[0][0]:.2f}, "
              f"slowest {per_op[-1][1]} {per_op[-1][0]:.2f})")
        if pr is not None:
            pstats.Stats(pr).sort_stats("tottime").print_stats(25)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--profile", action="store_true", help="cProfile the graph-mode recording path")
    ap.add_argument("--opinfo", action="store_true", help="the median over the OpInfo ops (the issue's measure)")
    args = ap.parse_args()
    n = args.n
    if args.opinfo:
        print(header(gg))
        opinfo_record(max(1, min(n, 50)), args.profile)
        return
    print(header(gg))
    print(f"n={n} ops per measurement (best of 5); us/op: wall  cpu")
    rows = [
        ("graph mode: record x*1.0 (no grad)", record_chain, n),
        ("graph mode: record a+b (no grad)", record_binary, n),
        ("graph mode: record x*1.0 (requires_grad)", record_autograd, n),
        ("eager: x*1.0, 8x8", eager_small, max(n // 10, 100)),
        ("eager: 64x64 @ 64x64", eager_matmul, max(n // 10, 100)),
    ]
    for name, fn, count in rows:
        fn(min(count, 100))  # warm-up
        w, c = _per_op_us(fn, count)
        print(f"{name:45s} {w:8.2f} {c:8.2f}")
    try:
        import torch
        torch.set_num_threads(1)
        ta = torch.ones(8, 8)
        tb, tc = torch.ones(64, 64), torch.ones(64, 64)

        def t_small(k):
            for _ in range(k):
                ta * 1.0

        def t_mm(k):
            for _ in range(k):
                tb @ tc
        for name, fn, count in [("torch eager: x*1.0, 8x8 (1 thread)", t_small, n),
                                ("torch eager: 64x64 @ 64x64 (1 thread)", t_mm, max(n // 10, 100))]:
            w, c = _per_op_us(fn, count)
            print(f"{name:45s} {w:8.2f} {c:8.2f}")
    except ImportError:
        print("(torch not installed: no reference)")
    if args.profile:
        pr = cProfile.Profile()
        pr.enable()
        record_autograd(n)
        pr.disable()
        pstats.Stats(pr).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
