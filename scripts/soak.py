"""Long-run memory check: resident memory of a training loop must stay flat after warm-up.

Trains the 64-64-64-8 MLP (Adam, cross-entropy) on random data and prints the process's resident
memory (RSS) at intervals, then its growth from the end of warm-up to the end. Exits 1 when a
run grew by more than ``--limit-mb`` (5 MB by default).

    PYTHONPATH=src python scripts/soak.py                      # all three runs below
    PYTHONPATH=src python scripts/soak.py --run capture --steps 20000
    PYTHONPATH=src python scripts/soak.py --run graph --steps 5000
    PYTHONPATH=src python scripts/soak.py --run graph-sizes --steps 32000   # 40 batch sizes in turn

Runs: ``capture`` (``gg.capture_step``, batch 256), ``graph`` (graph mode, batch 256),
``graph-sizes`` (graph mode, the batch size cycling through 40 sizes from 217 to 256: more
signatures than the plan cache holds, so cached plans are evicted and rebuilt all the time).
Each run gets a fresh process, so one run's caches do not count against another's.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

SIZES = (64, 64, 64, 8)
BATCH = 256
N_BATCH_SIZES = 40
DEFAULT_STEPS = {"capture": 20000, "graph": 5000, "graph-sizes": 32000}


def rss_bytes() -> int:
    """Resident memory of this process (Linux /proc; ru_maxrss, a peak, elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        import resource
        scale = 1 if sys.platform == "darwin" else 1024
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def make_step(run: str, seed: int = 0, sizes: tuple = SIZES, batch: int = BATCH, n_batch_sizes: int = N_BATCH_SIZES):
    """(step(i) -> None) for ``run``; batches are drawn once, up front (the loop allocates nothing new)."""
    import numpy as np

    import ggmlgrad as gg
    gg.manual_seed(seed)
    rng = np.random.default_rng(seed)
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(gg.nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(gg.nn.ReLU())
    model = gg.nn.Sequential(*layers)
    opt = gg.optim.Adam(model.parameters(), lr=1e-3)
    batch_sizes = [batch] if run != "graph-sizes" else [batch - k for k in range(n_batch_sizes)]
    data = [(rng.standard_normal((n, sizes[0]), dtype=np.float32),
             rng.integers(0, sizes[-1], n).astype(np.int32)) for n in batch_sizes]
    loss_fn = gg.nn.functional.cross_entropy

    if run == "capture":
        step_fn = gg.capture_step(lambda x, y: loss_fn(model(x), y), opt)

        def step(i: int) -> None:
            x, y = data[i % len(data)]
            step_fn(x, y)
        return step

    def step(i: int) -> None:
        x, y = data[i % len(data)]
        with gg.graph_mode(True):
            opt.zero_grad()
            loss = loss_fn(model(gg.tensor(x)), gg.tensor(y, dtype=gg.int32))
            loss.backward()
            opt.step()
    return step


def soak(run: str, steps: int, warmup: int, every: int, out=sys.stdout, **net) -> dict:
    """Run ``steps`` steps (``net``: :func:`make_step`'s sizes, batch, n_batch_sizes); returns
    {"warm_mb", "end_mb", "growth_mb", "max_mb", "seconds", "rows", "plan_builds"} (plan builds:
    graph plans made after warm-up)."""
    from ggmlgrad.engine.trace_cache import TRACE
    step = make_step(run, **net)
    rows = []
    builds = TRACE.graph.misses
    t0 = time.perf_counter()
    warm = None
    peak = 0
    for i in range(steps):
        step(i)
        done = i + 1
        if done == warmup:
            warm = rss_bytes()
            builds = TRACE.graph.misses
        if done % every == 0 or done == steps:
            r = rss_bytes()
            peak = max(peak, r)
            rows.append((done, r))
            print(f"{run:12s} step {done:6d}  rss {r / 2**20:8.2f} MB  {time.perf_counter() - t0:7.1f} s",
                  file=out, flush=True)
    end = rss_bytes()
    if warm is None:
        warm = rows[0][1]
    return {"warm_mb": warm / 2**20, "end_mb": end / 2**20, "growth_mb": (end - warm) / 2**20,
            "max_mb": max(peak, end) / 2**20, "seconds": time.perf_counter() - t0, "rows": rows,
            "plan_builds": TRACE.graph.misses - builds}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", choices=["all", *DEFAULT_STEPS], default="all")
    ap.add_argument("--steps", type=int, help="steps per run (default: 20000 capture, 5000 graph, "
                                              "32000 graph-sizes)")
    ap.add_argument("--warmup", type=int, help="steps before the baseline RSS is taken (default: steps // 10, "
                                               "at least 400)")
    ap.add_argument("--every", type=int, help="print RSS every this many steps (default: steps // 20)")
    ap.add_argument("--limit-mb", type=float, default=5.0, help="largest allowed growth after warm-up")
    ap.add_argument("--net", default="-".join(map(str, SIZES)), help="layer sizes (default 64-64-64-8)")
    ap.add_argument("--batch", type=int, default=BATCH, help="batch size (graph-sizes: the largest)")
    ap.add_argument("--batch-sizes", type=int, default=N_BATCH_SIZES, help="graph-sizes: how many batch sizes")
    args = ap.parse_args(argv)
    runs = list(DEFAULT_STEPS) if args.run == "all" else [args.run]
    if len(runs) > 1:  # one process per run: caches of one run must not count against another
        rc = 0
        for run in runs:
            cmd = [sys.executable, os.path.abspath(__file__), "--run", run, "--limit-mb", str(args.limit_mb),
                   "--net", args.net, "--batch", str(args.batch), "--batch-sizes", str(args.batch_sizes)]
            for opt in ("steps", "warmup", "every"):
                if getattr(args, opt) is not None:
                    cmd += [f"--{opt.replace('_', '-')}", str(getattr(args, opt))]
            rc |= subprocess.call(cmd)
        return rc
    run = runs[0]
    steps = args.steps or DEFAULT_STEPS[run]
    warmup = args.warmup if args.warmup is not None else max(400, steps // 10)
    every = args.every or max(1, steps // 20)
    net = {"sizes": tuple(int(n) for n in args.net.split("-")), "batch": args.batch,
           "n_batch_sizes": args.batch_sizes}
    r = soak(run, steps, min(warmup, steps), every, **net)
    ok = r["growth_mb"] <= args.limit_mb
    print(f"{run}: {steps} steps in {r['seconds']:.1f} s; RSS {r['warm_mb']:.2f} MB after {warmup} warm-up steps, "
          f"{r['end_mb']:.2f} MB at the end (max {r['max_mb']:.2f}): growth {r['growth_mb']:+.2f} MB "
          f"(limit {args.limit_mb} MB), {r['plan_builds']} graph plans built after warm-up "
          f"{'OK' if ok else 'FAILED'}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
