"""Long op-program fuzzing run (ggmlgrad.testing.fuzz_programs), crash-tolerant.

Runs the programs in child processes of 1,000 each, in every mode (eager, graph, check, capture),
checked against NumPy float64 and, where torch is installed, against torch (the summary counts, per
mode, the programs that agree with torch, each documented-limit class and each MISMATCH); a crash
(abort, segfault) fails only its chunk, is reported with the program as a runnable snippet, and the
run continues after it. Exit status 1 if anything failed.

    python scripts/fuzz_programs.py --seed 0 --examples 20000 [--modes eager,graph] [--time-limit 3600]
"""
from __future__ import annotations

import argparse
import sys
import time

from ggmlgrad.testing.fuzz_programs import MODES, run_many


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--examples", type=int, default=20000)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--chunk", type=int, default=1000)
    ap.add_argument("--time-limit", type=float, default=0.0, help="seconds; 0: none")
    args = ap.parse_args()
    modes = tuple(args.modes.split(","))
    t0 = time.time()
    torch_counts: dict = {}
    done, failures, per_mode = run_many(args.seed, args.examples, modes, args.chunk, args.time_limit, args.start,
                                        torch_into=torch_counts)
    for f in failures:
        print(f, "\n" + "-" * 100)
    print("runs per mode (crashed chunks not counted): " + ", ".join(f"{m} {c}" for m, c in per_mode.items()))
    for m, c in torch_counts.items():       # torch as the second oracle (where torch is installed)
        print(f"torch oracle {m}: " + ", ".join(f"{k} {v}" for k, v in sorted(c.items(), key=lambda kv: -kv[1])))
    if not torch_counts:
        print("torch oracle: off (torch not installed or GGMLGRAD_FUZZ_TORCH=0)")
    print(f"fuzz_programs: {done} programs x {len(modes)} modes, seed {args.seed}, "
          f"{len(failures)} failing chunks, {time.time() - t0:.0f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
