"""Small forwards outside capture (issue 14 item 5): an RL loop's acting step, ggmlgrad vs torch eager.

At every environment step a PPO loop calls an actor and a critic (4-64-64 tanh MLPs, 2 and 1
outputs) on a batch of 4 observations, without capture, and reads both results back to NumPy:

    x = gg.tensor(obs); logits, value = actor(x), critic(x); logits.numpy(); value.numpy()

ggmlgrad runs it eagerly (each forward computed at its call) and in graph mode (both forwards
queued, computed by the first read), under ``no_grad``; torch eager (``torch.from_numpy``) is the
reference. Columns are interleaved round by round (``benchmarks/common.compare``) and the ratio is
to torch in the same run. ``--variants`` adds the step with ``gg.as_tensor`` (zero-copy) and the
building blocks (the upload, one forward, one read) to see where the time goes.

    python benchmarks/bench_small_forward.py --clock cpu
    GGMLGRAD_GGML_LIB=/path/to/fast/lib python benchmarks/bench_small_forward.py --clock cpu --variants
"""
from __future__ import annotations

import argparse

import numpy as np

from common import add_timing_args, compare, fmt, header, profile, ratio, table, timing_setup, try_torch

import ggmlgrad as gg


def mlp(lib, n_out: int):
    nn = lib.nn
    return nn.Sequential(nn.Linear(4, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, n_out))


def steps(obs: np.ndarray, variants: bool) -> dict:
    """The acting steps to time, by column name (None where torch is missing)."""
    actor, critic = mlp(gg, 2), mlp(gg, 1)

    def gg_eager():
        with gg.no_grad():
            x = gg.tensor(obs)
            return actor(x).numpy(), critic(x).numpy()

    def gg_graph():
        with gg.no_grad(), gg.graph_mode(True):
            x = gg.tensor(obs)
            logits, value = actor(x), critic(x)
            return logits.numpy(), value.numpy()

    fns = {"ggmlgrad eager": gg_eager, "ggmlgrad graph": gg_graph}
    torch = try_torch()
    if torch is not None:
        t_actor, t_critic = mlp(torch, 2), mlp(torch, 1)

        def torch_eager():
            with torch.no_grad():
                x = torch.from_numpy(obs)
                return t_actor(x).numpy(), t_critic(x).numpy()
        fns["torch eager"] = torch_eager
    else:
        fns["torch eager"] = None
    if variants:
        x0 = gg.tensor(obs)
        with gg.no_grad():
            y0 = actor(x0)

        def eager_as_tensor():
            with gg.no_grad():
                x = gg.as_tensor(obs)
                return actor(x).numpy(), critic(x).numpy()

        def graph_as_tensor():
            with gg.no_grad(), gg.graph_mode(True):
                x = gg.as_tensor(obs)
                logits, value = actor(x), critic(x)
                return logits.numpy(), value.numpy()

        def one_forward():
            with gg.no_grad():
                return actor(x0)
        fns.update({"eager, as_tensor": eager_as_tensor, "graph, as_tensor": graph_as_tensor,
                    "gg.tensor(obs)": lambda: gg.tensor(obs), "one eager forward": one_forward,
                    "numpy() of a result": y0.numpy})
    return fns


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_timing_args(ap, 300, "steps per timed block")
    ap.add_argument("--variants", action="store_true", help="also as_tensor steps and the building blocks")
    ap.add_argument("--profile", choices=["eager", "graph"], help="cProfile that step instead of timing")
    args = ap.parse_args(argv)
    timing_setup(args, gg)
    print(header(gg))
    obs = np.random.default_rng(0).standard_normal((4, 4)).astype(np.float32)
    fns = steps(obs, args.variants)
    if args.profile:
        print(profile(fns[f"ggmlgrad {args.profile}"], args.number * 10))
        return 0
    res = compare(fns, args.number, args.repeat, warmup=50, clock=args.clock)
    ref = res.get("torch eager")
    rows = [[name, fmt(us), ratio(us, ref)] for name, us in res.items()]
    print(f"acting step: actor + critic (4-64-64 tanh) on 4 observations, no_grad, {args.clock} clock, "
          f"median of {args.repeat} rounds of {args.number}")
    print(table(["step", "time", "vs torch eager"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
