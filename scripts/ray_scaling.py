"""Scaling of gg.distributed on this machine: rollout throughput, data-parallel step time, the
measured costs of gradient averaging and weight broadcast, and the worker count at which that
communication would dominate for the 64-64-64-8 and 784-256-10 networks (ReLU MLPs, batches 256
and 128 as in benchmarks/bench_train.py).

    python scripts/ray_scaling.py                 # 1, 2, 4 workers; prints Markdown tables
    python scripts/ray_scaling.py --quick         # fewer repeats

Every time is a median over repeats, after warm-up. Workers run one ggml thread each. On a
machine with fewer cores than processes (workers + driver), the numbers include the wait for a
core: the script prints the core count and load average so that a reader can tell.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

import ggmlgrad as gg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import ppo_cartpole as base  # noqa: E402
import ppo_ray  # noqa: E402

NETWORKS = {"64-64-64-8": ((64, 64, 64, 8), 256), "784-256-10": ((784, 256, 10), 128)}
BACKENDS = ("gloo", "tree", "ring")


def median_seconds(fn, repeat: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def mlp(sizes) -> gg.nn.Sequential:
    layers = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [gg.nn.Linear(a, b), gg.nn.ReLU()]
    return gg.nn.Sequential(*layers[:-1])


def data(sizes, rows: int):
    rng = np.random.default_rng(0)
    return rng.standard_normal((rows, sizes[0])).astype(np.float32), rng.integers(0, sizes[-1], rows).astype(np.int32)


def loss_fn(model, x, y):
    return gg.nn.functional.cross_entropy(model(x), y)


class Holder:
    """A worker holding a policy copy of one network (for the weight broadcast)."""

    def __init__(self, index: int, sizes) -> None:
        self.params = list(mlp(sizes).parameters())

    def load(self, weights: np.ndarray) -> None:
        gg.distributed.unpack_parameters(weights, self.params)

    def noop(self) -> None:
        return None


def local_steps(sizes, rows: int, repeat: int) -> tuple[float, float]:
    """(graph-mode step, captured step) seconds in this process: the data-parallel worker's code, and
    the fastest single-process step."""
    x, y = data(sizes, rows)
    gg.manual_seed(0)
    model = mlp(sizes)
    opt = gg.optim.Adam(model.parameters(), lr=1e-3)

    def graph_step():
        with gg.graph_mode(True):
            opt.zero_grad()
            loss = loss_fn(model, gg.tensor(x), gg.tensor(y))
            loss.backward()
            gg.distributed.pack_gradients(model.parameters())   # the worker downloads its gradient too
            opt.step()
    captured = gg.capture_step(lambda a, b: loss_fn(model, gg.tensor(a), gg.tensor(b)), opt)
    return median_seconds(graph_step, repeat), median_seconds(lambda: captured(x, y), repeat)


def rollout_throughput(workers: list[int], rounds: int) -> list[list[str]]:
    """Environment steps/s of N CartPole workers, each 4 environments x 128 steps per round."""
    cfg = base.Config(num_envs=4, num_steps=128)
    gg.manual_seed(0)
    weights = gg.distributed.pack_parameters(base.Agent(4, 2).parameters())
    single = ppo_ray.CartPoleWorker(0, cfg, 10**9)
    ppo_ray._ship_by_value(base, ppo_ray)
    rows, it = [], iter(range(10**9))
    for n in workers:
        with gg.distributed.WorkerPool(ppo_ray.CartPoleWorker, n, cfg, 10**9) as pool:
            t = interleaved({"driver": lambda: single.rollout(weights, next(it)),
                             "pool": lambda: pool.map("rollout", weights, next(it))}, rounds)
        rows.append([str(n), f"{n * cfg.batch / t['pool']:,.0f}", f"{t['pool'] * 1e3:.1f}",
                     f"{cfg.batch / t['driver']:,.0f}", f"{n * t['driver'] / t['pool']:.2f}"])
    return rows


def interleaved(fns: dict, repeat: int, warmup: int = 3) -> dict:
    """Median seconds of each function, timed in turns (one call of each per repeat), so that a
    machine whose load changes treats them alike."""
    times = {k: [] for k in fns}
    for i in range(warmup + repeat):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            if i >= warmup:
                times[k].append(time.perf_counter() - t0)
    return {k: float(np.median(v)) for k, v in times.items()}


def dp_steps(sizes, rows: int, n: int, repeat: int) -> dict:
    """{(backend, rows per step): seconds per data-parallel step} for every backend, on one set of
    actors (the gloo group's ranks also run the object-store orders), with ``rows`` rows and with
    one row per worker, timed in turns."""
    x, y = data(sizes, rows)

    def step(backend, k):
        def run():
            dp.backend = backend
            dp.step(x[:k], y[:k])
        return run
    with gg.distributed.DataParallel(lambda: mlp(sizes), lambda ps: gg.optim.Adam(ps, lr=1e-3), loss_fn,
                                     num_workers=n, backend="gloo") as dp:
        return interleaved({(b, k): step(b, k) for b in BACKENDS for k in (rows, n)}, repeat)


def broadcast_cost(sizes, n: int, repeat: int) -> tuple[float, float]:
    """(round with the packed weights loaded by every worker, empty round) seconds, timed in turns."""
    gg.manual_seed(0)
    weights = gg.distributed.pack_parameters(mlp(sizes).parameters())
    with gg.distributed.WorkerPool(Holder, n, sizes) as pool:
        t = interleaved({"load": lambda: pool.map("load", weights), "noop": lambda: pool.map("noop")}, repeat)
    return t["load"], t["noop"]


def first_dominated(comm: dict[int, float], compute: float) -> str:
    """The smallest worker count N >= 2 at which communication >= compute / N, with the measured
    communication at 2 and 4 workers fitted as a + b log2(N) (a tree or a ring on one machine)."""
    if 2 not in comm or 4 not in comm:
        return "needs 2 and 4 workers"
    if comm[2] >= compute / 2:
        return "2 (already)"
    b = max((comm[4] - comm[2]), 1e-9)
    a = comm[2] - b
    for n in range(3, 1 << 20):
        if a + b * math.log2(n) >= compute / n:
            return str(n)
    return "> 10^6"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    repeat = 10 if args.quick else 30
    import ray
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    gg.set_num_threads(1)
    print(f"ray {ray.__version__}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at start, "
          f"ggml build {gg.info()['build']}, one ggml thread per process\n")

    print("**Rollouts** (CartPole-v1, each worker 4 environments x 128 steps per round, PPO's 64-64 policy "
          "captured; the round includes the packed weight broadcast)\n")
    print(table(["workers", "environment steps/s", "round ms", "one process without Ray, steps/s", "speed-up"],
                rollout_throughput(args.workers, repeat)))

    comm_rows, dp_rows, cross_rows = [], [], []
    for name, (sizes, batch) in NETWORKS.items():
        t_graph, t_capture = local_steps(sizes, batch, repeat)
        t_graph_1, t_capture_1 = local_steps(sizes, 1, repeat)
        per_row = max(t_capture - t_capture_1, 1e-9) / (batch - 1)      # captured step time per batch row
        n_params = gg.distributed.pack_parameters(mlp(sizes).parameters()).size
        dp_rows.append([name, str(batch), "1 (no Ray): graph mode / captured", f"{t_graph * 1e3:.2f}",
                        f"{t_capture * 1e3:.2f}", ""])
        grad_comm = {}
        for n in args.workers:
            t = dp_steps(sizes, batch, n, repeat)
            dp_rows.append([name, str(batch), str(n)] + [f"{t[b, batch] * 1e3:.2f}" for b in BACKENDS])
            for b in BACKENDS:
                # gradient averaging + coordination: a step of one row per worker minus one row's local step
                grad_comm[b, n] = t[b, n] - t_graph_1
        bcast = {n: broadcast_cost(sizes, n, repeat) for n in args.workers}
        for n in args.workers:
            comm_rows.append([name, f"{n_params:,} ({n_params * 4 / 1024:.0f} KiB)", str(n)]
                             + [f"{grad_comm[b, n] * 1e3:.2f}" for b in BACKENDS]
                             + [f"{bcast[n][0] * 1e3:.2f} ({bcast[n][1] * 1e3:.2f})"])
        n_ref = 2 if 2 in args.workers else args.workers[0]
        best = min(BACKENDS, key=lambda b: grad_comm[b, n_ref])
        cross_rows.append([name, f"{t_capture * 1e3:.2f}", best,
                           first_dominated({n: grad_comm[best, n] for n in (2, 4) if n in args.workers}, t_capture),
                           first_dominated({n: bcast[n][0] for n in (2, 4) if n in args.workers}, t_capture),
                           f"{grad_comm[best, n_ref] / per_row:,.0f}"])

    print("\n**Data-parallel step** (`DataParallel.step`, Adam, cross-entropy; global batch split over the workers), ms\n")
    print(table(["network", "global batch", "workers"] + [f"{b} ms" for b in BACKENDS], dp_rows))
    print("\n**Communication**, ms per step: gradient averaging (a data-parallel step of one row per worker "
          "minus a local step of one row) per backend, and a rollout round that loads the packed weights "
          "into every worker (in brackets: the same round without weights)\n")
    print(table(["network", "parameters", "workers"] + [f"averaging: {b}" for b in BACKENDS] + ["weight broadcast"],
                comm_rows))
    print("\n**Where communication dominates**: the smallest N at which the measured communication (fitted "
          "a + b log2 N from 2 and 4 workers) is at least the captured single-process step divided by N\n")
    print(table(["network", "captured step ms (1 process)", "fastest averaging", "averaging dominates at N",
                 "weight broadcast dominates at N", "rows per worker whose compute equals the averaging (N=2)"], cross_rows))
    print(f"\nload average at the end {os.getloadavg()[0]:.2f}")
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
