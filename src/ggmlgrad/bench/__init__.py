"""``python -m ggmlgrad bench``: ggmlgrad eager, graph mode and captured beside torch eager and JAX
``jit``, in one run, on the same workloads, data and initial weights; validated, then timed.

Workloads: the per-op table (row writes and reads, small arithmetic, a small product, reads back
to the host), the three tanh MLP Adam steps (4-32-32-2, 64-64-64-8, 784-256-10), a batch-1
forward, conv / LSTM / transformer steps where ggmlgrad has those layers ("absent layer"
otherwise), the PPO CartPole example end to end per mode (from a checkout), and sweeps of the
step time against the hidden width and the batch size. A peer that is not installed is reported
as absent. Output: a markdown table of medians and ratios, ``bench.json`` and PNG plots
(``pip install ggmlgrad[bench]`` for matplotlib) in ``--out``.

    python -m ggmlgrad bench                 # about two minutes on a quiet 2-core machine
    python -m ggmlgrad bench --quick         # a few seconds: a smoke run (CI)
    python -m ggmlgrad bench --threads 1     # both sides pinned to one thread
    python -m ggmlgrad bench --threads 1 --clock cpu   # CPU time: steadier on a busy machine
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys

from . import report, workloads as W
from .peers import peers, versions

__all__ = ["main", "run"]


def _machine() -> dict:
    cpu = platform.processor() or platform.machine()
    flags = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name") and cpu in ("", platform.machine()):
                    cpu = line.split(":", 1)[1].strip()
                if line.startswith("flags"):
                    flags = line
                    break
    except OSError:
        pass
    simd = [f for f in ("avx512f", "avx2", "fma", "neon") if f" {f}" in flags]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {"cpu": cpu, "simd": simd, "cores": os.cpu_count(), "load_avg_1min": load, "python": sys.version.split()[0],
            "platform": platform.platform()}


def _threads(found: dict, n: int | None) -> dict:
    import ggmlgrad as gg
    if n is not None:
        gg.set_num_threads(n)
        if found["torch"] is not None:
            found["torch"].set_num_threads(n)
    return {"ggmlgrad": gg.info().get("threads"),
            "torch": found["torch"].get_num_threads() if found["torch"] is not None else None,
            "jax": (os.environ.get("XLA_FLAGS") or "XLA's default") if found["jax"] is not None else None}


def run(quick: bool = False, threads: int | None = None, rounds: int | None = None, ppo_steps: int | None = None,
        only: set[str] | None = None, log=print, clock: str = "wall") -> dict:
    """Run the bench; returns the JSON payload (``meta``, ``workloads``, ``sweeps``, ``per_op_summary``)."""
    found = peers(threads)
    s = W.Settings()
    if quick:
        s = W.Settings(rounds=3, block_s=0.004, quick=True, widths=(32, 128), batches=(8, 64))
    if rounds:
        s.rounds = rounds
    if ppo_steps:
        s.ppo_steps = ppo_steps
    s.threads = threads
    s.clock = clock
    want = (lambda g: only is None or g in only)
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": _machine(), "versions": versions(found), "threads": _threads(found, threads),
            "settings": {"rounds": s.rounds, "block_s": s.block_s, "quick": quick, "clock": clock}}
    rows: list[dict] = []
    if want("per-op"):
        log("per-op table ...")
        rows += W.per_op(found, s)
    if want("mlp"):
        for name, (sizes, batch) in W.MLPS.items():
            if quick and name != "4-32-32-2 b32":
                continue
            log(f"MLP step {name} ...")
            rows.append(W.train_step(found, f"step {name} tanh", sizes, batch, s))
    if want("forward"):
        log("batch-1 forward ...")
        rows.append(W.forward_b1(found, s))
    if want("layers"):
        for kind in ("conv", "lstm", "transformer"):
            if quick:
                continue
            log(f"{kind} step ...")
            rows.append(W.layer_step(found, kind, s))
    if want("ppo") and not quick:
        log("PPO end to end ...")
        rows.append(W.ppo(found, s))
    sweeps = None
    if want("sweep"):
        log("sweeps ...")
        sweeps = W.sweep(found, s)
    return {"meta": meta, "workloads": rows, "sweeps": sweeps, "per_op_summary": report.per_op_summary(rows)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ggmlgrad bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a smoke run of a few seconds (fewer workloads and rounds)")
    ap.add_argument("--out", default="bench-results", help="folder for bench.json and the plots (default bench-results)")
    ap.add_argument("--threads", type=int, help="pin ggmlgrad and torch to this many threads (default: each its own)")
    ap.add_argument("--rounds", type=int, help="interleaved timing rounds (default 7, --quick 3)")
    ap.add_argument("--ppo-steps", type=int, help="environment steps of each PPO run (default 16384)")
    ap.add_argument("--only", help="comma-separated groups: per-op,mlp,forward,layers,ppo,sweep")
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                    help="wall time (default) or process CPU time (steadier on a busy machine; use with --threads 1)")
    args = ap.parse_args(argv)
    only = set(args.only.split(",")) if args.only else None
    payload = run(args.quick, args.threads, args.rounds, args.ppo_steps, only, log=lambda m: print(m, file=sys.stderr),
                  clock=args.clock)
    os.makedirs(args.out, exist_ok=True)
    json_path = os.path.join(args.out, "bench.json")
    pngs = report.plots(args.out, payload["workloads"], payload["sweeps"])
    payload["plots"] = [os.path.basename(p) for p in pngs]
    report.write_json(json_path, payload)
    m = payload["meta"]
    print(f"{m['date']} | {m['machine']['cpu']} ({', '.join(m['machine']['simd'])}), {m['machine']['cores']} cores, "
          f"load {m['machine']['load_avg_1min']:.1f} | {m['versions']} | threads {m['threads']} | clock {args.clock}")
    print(report.table(payload["workloads"]))
    if payload["sweeps"]:
        print("\nsweeps (us per Adam step):")
        print(report.table([{**p, "workload": p["workload"]} for a in ("width", "batch") for p in payload["sweeps"][a]]))
    summ = payload["per_op_summary"]
    if summ.get("median_ratio") is not None:
        print(f"\nper-op gg eager / torch eager: median {summ['median_ratio']:.2f}, max {summ['max_ratio']:.2f} "
              f"over {summ['ops']} ops")
    print(f"\nwrote {json_path}" + (f" and {', '.join(payload['plots'])}" if pngs else
                                    " (no plots: matplotlib is not installed; pip install ggmlgrad[bench])"))
    return 0
