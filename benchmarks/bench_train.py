"""A training step of small MLPs with Adam: ggmlgrad eager vs graph mode (vs captured, when
``gg.capture_step`` exists) vs PyTorch eager, side by side in one run.

    python benchmarks/bench_train.py
    GGMLGRAD_GGML_LIB=/path/to/fast/lib python benchmarks/bench_train.py
    python benchmarks/bench_train.py --profile 784-256-10     # cProfile of one graph-mode step
    python benchmarks/bench_train.py --activations tanh        # only the tanh networks

A step = zero_grad, forward, cross-entropy loss, backward, Adam step, on a fixed batch already on
the device (the same for every framework). Each network runs with ReLU, tanh (the usual RL
policy) and GELU (transformers) between its layers; ``--activations`` picks some, and
``gelu_tanh`` adds GELU's tanh approximation. Goal (issues 3 and 14): graph mode at most 0.5x,
0.6x, 0.9x of PyTorch eager's step time on the three networks below, with every activation.
"""
from __future__ import annotations

import argparse

import numpy as np

from common import add_timing_args, compare, fmt, header, profile, ratio, timing_setup, table, try_torch

import ggmlgrad as gg

NETWORKS = {  # name -> (layer sizes, batch, goal for graph mode / torch)
    "4-32-32-2": ((4, 32, 32, 2), 32, 0.5),
    "64-64-64-8": ((64, 64, 64, 8), 256, 0.6),
    "784-256-10": ((784, 256, 10), 128, 0.9),
}


def _data(sizes, batch, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, sizes[0]), dtype=np.float32)
    y = rng.integers(0, sizes[-1], batch).astype(np.int32)
    return x, y


# name -> (module class in nn, its keyword arguments); gelu_tanh runs only when asked for
ACTIVATIONS = {"relu": ("ReLU", {}), "tanh": ("Tanh", {}), "gelu": ("GELU", {}),
               "gelu_tanh": ("GELU", {"approximate": "tanh"})}
DEFAULT_ACTIVATIONS = ("relu", "tanh", "gelu")


def _layers(nn, sizes, act="relu"):
    layers = []
    cls, kwargs = ACTIVATIONS[act]
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(n_in, n_out))
        if i < len(sizes) - 2:
            layers.append(getattr(nn, cls)(**kwargs))
    return layers


def gg_step(sizes, batch, graph: bool, act: str = "relu"):
    """A step function; in graph mode the optimizer step drains the queue (forward+backward, then Adam)."""
    x, y = _data(sizes, batch)
    model = gg.nn.Sequential(*_layers(gg.nn, sizes, act))
    opt = gg.optim.Adam(model.parameters(), lr=1e-3)
    gx, gy = gg.tensor(x), gg.tensor(y, dtype=gg.int32)

    def step():
        with gg.graph_mode(graph):
            opt.zero_grad()
            loss = gg.nn.functional.cross_entropy(model(gx), gy)
            loss.backward()
            opt.step()
        return loss
    return step


def gg_captured_step(sizes, batch, act: str = "relu"):
    x, y = _data(sizes, batch)
    model = gg.nn.Sequential(*_layers(gg.nn, sizes, act))
    opt = gg.optim.Adam(model.parameters(), lr=1e-3)
    captured = gg.capture_step(lambda xb, yb: gg.nn.functional.cross_entropy(model(xb), yb), opt)
    return lambda: captured(x, y)


def torch_step(torch, sizes, batch, act: str = "relu"):
    x, y = _data(sizes, batch)
    model = torch.nn.Sequential(*_layers(torch.nn, sizes, act))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    tx, ty = torch.from_numpy(x), torch.from_numpy(y.astype(np.int64))

    def step():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(tx), ty)
        loss.backward()
        opt.step()
    return step


def computes_per_step(step) -> int:
    step()
    gg.reset_counters()
    step()
    return gg.counters()["computes"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_timing_args(ap, 100, "steps per timed block")
    ap.add_argument("--profile", choices=sorted(NETWORKS), help="cProfile graph-mode steps of one network")
    ap.add_argument("--activations", default=",".join(DEFAULT_ACTIVATIONS),
                    help=f"comma-separated, of {', '.join(ACTIVATIONS)} (default: {','.join(DEFAULT_ACTIVATIONS)})")
    args = ap.parse_args()
    acts = [a for a in args.activations.split(",") if a]
    if not acts or any(a not in ACTIVATIONS for a in acts):
        ap.error(f"--activations takes names from {', '.join(ACTIVATIONS)}")
    torch = try_torch()
    timing_setup(args, gg)
    has_capture = hasattr(gg, "capture_step")
    print(header(gg) + f" | clock {args.clock}")
    rows = []
    for (name, (sizes, batch, goal)), act in ((n, a) for n in NETWORKS.items() for a in acts):
        m = compare({"eager": gg_step(sizes, batch, False, act), "graph": gg_step(sizes, batch, True, act),
                     "capture": gg_captured_step(sizes, batch, act) if has_capture else None,
                     "torch": torch_step(torch, sizes, batch, act) if torch else None}, args.number, args.repeat,
                    clock=args.clock)
        eager, graph, capt, tor = m["eager"], m["graph"], m["capture"], m["torch"]
        n_eager = computes_per_step(gg_step(sizes, batch, False, act))
        n_graph = computes_per_step(gg_step(sizes, batch, True, act))
        rows.append([f"{name} {act} b{batch}", fmt(eager), fmt(graph), fmt(capt), fmt(tor), ratio(eager, tor),
                     ratio(graph, tor), f"<= {goal}x", ratio(capt, tor), f"{n_eager} / {n_graph}"])
    print(table(["Adam step (median)", "gg eager", "gg graph", "gg capture", "torch", "eager/torch",
                 "graph/torch", "goal", "capture/torch", "computes e/g"], rows))
    if args.profile:
        sizes, batch, _ = NETWORKS[args.profile]
        step = gg_step(sizes, batch, graph=True)
        for _ in range(10):
            step()
        print(f"\ncProfile, ggmlgrad graph-mode step {args.profile} b{batch}, per step:")
        print(profile(step, 200))


if __name__ == "__main__":
    main()
