"""Eager per-op overhead and an eager MLP training step: ggmlgrad vs PyTorch eager.

    python benchmarks/bench_eager.py                 # prebuilt ggml
    GGMLGRAD_GGML_LIB=/path/to/fast/lib python benchmarks/bench_eager.py
    python benchmarks/bench_eager.py --profile       # cProfile of ggmlgrad's per-op path

Goal (issue 2): eager per-op overhead within 2x of PyTorch eager's.
"""
from __future__ import annotations

import argparse

import numpy as np

from bench_train import gg_step, torch_step
from common import add_timing_args, compare, fmt, header, profile, ratio, timing_setup, table, try_torch

import ggmlgrad as gg


def ops_cases(torch):
    rng = np.random.default_rng(0)
    a32, b32 = rng.standard_normal((2, 32, 32), dtype=np.float32)
    a64, b64 = rng.standard_normal((2, 64, 64), dtype=np.float32)
    ga32, gb32, ga64, gb64 = (gg.tensor(x) for x in (a32, b32, a64, b64))
    cases = [
        ("add 32x32", lambda: ga32 + gb32, None),
        ("mul 32x32", lambda: ga32 * gb32, None),
        ("relu 32x32", lambda: gg.relu(ga32), None),
        ("matmul 64x64", lambda: ga64 @ gb64, None),
    ]
    if torch is not None:
        ta32, tb32, ta64, tb64 = (torch.from_numpy(x.copy()) for x in (a32, b32, a64, b64))
        torch_fns = [lambda: ta32 + tb32, lambda: ta32 * tb32, lambda: torch.relu(ta32), lambda: ta64 @ tb64]
        cases = [(n, g, t) for (n, g, _), t in zip(cases, torch_fns)]
    return cases


def mlp_step_cases(torch, sizes=(64, 128, 128, 10), batch=64):
    """One Adam training step (zero_grad, forward, cross-entropy, backward, step), as in the demo."""
    gg_eager = gg_step(sizes, batch, graph=False)
    t_step = torch_step(torch, sizes, batch) if torch is not None else None
    name = f"MLP {'-'.join(map(str, sizes))} b{batch} Adam step"
    return [(name, gg_eager, t_step)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_timing_args(ap, 2000, "calls per timed block for single ops")
    ap.add_argument("--profile", action="store_true", help="cProfile the eager add 32x32 and the MLP step")
    args = ap.parse_args()
    torch = try_torch()
    timing_setup(args, gg)
    print(header(gg) + f" | clock {args.clock}")
    rows = []
    for name, g, t in ops_cases(torch):
        m = compare({"gg": g, "torch": t}, args.number, args.repeat, clock=args.clock)
        rows.append([name, fmt(m["gg"]), fmt(m["torch"]), ratio(m["gg"], m["torch"])])
    for name, g, t in mlp_step_cases(torch):
        m = compare({"gg": g, "torch": t}, max(20, args.number // 20), args.repeat, clock=args.clock)
        rows.append([name, fmt(m["gg"]), fmt(m["torch"]), ratio(m["gg"], m["torch"])])
    print(table(["eager (median per call)", "ggmlgrad", "torch", "ggmlgrad/torch"], rows))
    print("eager graph computes per MLP step: ", end="")
    step = mlp_step_cases(None)[0][1]
    step()
    gg.reset_counters()
    step()
    print(gg.counters()["computes"])
    if args.profile:
        name, g, _ = ops_cases(None)[0]
        print(f"\ncProfile, ggmlgrad eager {name}, per op:")
        print(profile(g, 20000))
        name, g, _ = mlp_step_cases(None)[0]
        print(f"\ncProfile, ggmlgrad eager {name}, per step:")
        print(profile(g, 300))


if __name__ == "__main__":
    main()
