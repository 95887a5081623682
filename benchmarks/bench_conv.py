"""A CNN training step: Conv2d(1->32, 3x3) - BatchNorm2d - ReLU - MaxPool2d(2) - Linear(5408->10) -
cross-entropy - Adam, batch 64 of 1x28x28, on a fixed batch: ggmlgrad captured (``capture_step``)
and graph mode vs PyTorch eager (and JAX ``jit`` when installed), side by side in one run.

    python benchmarks/bench_conv.py                  # medians and ratios
    python benchmarks/bench_conv.py --threads 1      # both frameworks on one thread
    python benchmarks/bench_conv.py --ops            # also each op of the step alone (eager, one compute each)

Goals (issue 22): captured <= 0.8x the faster peer, graph mode <= 1.0x. Per-kernel profiles: run
``perf record -g python benchmarks/bench_conv.py --only captured`` and ``perf report`` (the ggml
kernel names show which node bounds the step); see benchmarks/README.md.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from common import add_timing_args, compare, fmt, header, ratio, table, timing_setup, try_torch

import ggmlgrad as gg

BATCH, CLASSES = 64, 10


def _data(seed: int = 0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((BATCH, 1, 28, 28), dtype=np.float32), rng.integers(0, CLASSES, BATCH).astype(np.int32)


def _model(nn):
    return nn.Sequential(nn.Conv2d(1, 32, 3), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(32 * 13 * 13, CLASSES))


def gg_captured():
    x, y = _data()
    model = _model(gg.nn)
    opt = gg.optim.Adam(model.parameters(), lr=1e-3)
    step = gg.capture_step(lambda xb, yb: gg.nn.functional.cross_entropy(model(xb), yb), opt)
    return lambda: step(x, y)


def gg_graph():
    x, y = _data()
    model = _model(gg.nn)
    opt = gg.optim.Adam(model.parameters(), lr=1e-3)
    gx, gy = gg.tensor(x), gg.tensor(y, dtype=gg.int32)

    def step():
        with gg.graph_mode(True):
            opt.zero_grad()
            loss = gg.nn.functional.cross_entropy(model(gx), gy)
            loss.backward()
            opt.step()
        return loss
    return step


def torch_eager(torch):
    x, y = _data()
    torch.manual_seed(0)
    model = _model(torch.nn)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    tx, ty = torch.tensor(x), torch.tensor(y, dtype=torch.long)

    def step():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(tx), ty)
        loss.backward()
        opt.step()
        return loss
    return step


def jax_jit():
    """The same step in JAX (jit of loss + grad + Adam), or None when JAX is not installed."""
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    x, y = _data()
    key = jax.random.PRNGKey(0)
    k1, k2 = jax.random.split(key)
    params = {"w": jax.random.normal(k1, (32, 1, 3, 3)) * 0.3, "b": jnp.zeros(32), "gamma": jnp.ones(32),
              "beta": jnp.zeros(32), "lw": jax.random.normal(k2, (32 * 13 * 13, CLASSES)) * 0.01,
              "lb": jnp.zeros(CLASSES)}
    state = {"mean": jnp.zeros(32), "var": jnp.ones(32)}

    def loss_fn(p, st, xb, yb):
        h = jax.lax.conv_general_dilated(xb, p["w"], (1, 1), "VALID", dimension_numbers=("NCHW", "OIHW", "NCHW"))
        h = h + p["b"][None, :, None, None]
        mean, var = h.mean(axis=(0, 2, 3)), h.var(axis=(0, 2, 3))
        h = (h - mean[None, :, None, None]) / jnp.sqrt(var[None, :, None, None] + 1e-5)
        h = jax.nn.relu(h * p["gamma"][None, :, None, None] + p["beta"][None, :, None, None])
        h = jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
        logits = h.reshape(BATCH, -1) @ p["lw"] + p["lb"]
        logp = jax.nn.log_softmax(logits)
        n = h.shape[0] * h.shape[2] * h.shape[3]
        new_st = {"mean": 0.9 * st["mean"] + 0.1 * mean, "var": 0.9 * st["var"] + 0.1 * var * n / (n - 1)}
        return -jnp.take_along_axis(logp, yb[:, None], axis=1).mean(), new_st

    def adam(p, m, v, g, t, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8):
        m = jax.tree_util.tree_map(lambda a, b: b1 * a + (1 - b1) * b, m, g)
        v = jax.tree_util.tree_map(lambda a, b: b2 * a + (1 - b2) * b * b, v, g)
        c1, c2 = 1 - b1 ** t, 1 - b2 ** t
        p = jax.tree_util.tree_map(lambda w, a, b: w - lr * (a / c1) / (jnp.sqrt(b / c2) + eps), p, m, v)
        return p, m, v

    @jax.jit
    def step(p, m, v, st, t, xb, yb):
        (loss, st), g = jax.value_and_grad(loss_fn, has_aux=True)(p, st, xb, yb)
        p, m, v = adam(p, m, v, g, t)
        return p, m, v, st, loss

    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    carry = [params, zeros, zeros, state, 1.0]
    xb, yb = jnp.asarray(x), jnp.asarray(y)

    def run():
        p, m, v, st, loss = step(carry[0], carry[1], carry[2], carry[3], carry[4], xb, yb)
        carry[:] = [p, m, v, st, carry[4] + 1.0]
        return loss.block_until_ready()
    return run


def op_times(number: int) -> list[list[str]]:
    """Each op of the step alone in eager mode (one compute each): which node costs what."""
    from ggmlgrad.ops import op
    from ggmlgrad.ops.conv import channel_sums
    x, _ = _data()
    rng = np.random.default_rng(1)
    gx = gg.tensor(x)
    w = gg.tensor(rng.standard_normal((32, 1, 3, 3)).astype(np.float32))
    h = gg.tensor(rng.standard_normal((BATCH, 32, 26, 26)).astype(np.float32))
    p = gg.tensor(rng.standard_normal((BATCH, 32, 13, 13)).astype(np.float32))
    geo = dict(stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1)
    fns = {
        "conv2d forward (im2col + product)": lambda: op.conv2d(gx, w, **geo).numpy(),
        "conv2d weight gradient": lambda: op.conv2d_weight_grad(h, gx, weight_shape=(32, 1, 3, 3), **geo).numpy(),
        "bias gradient (plane sums, then N)": lambda: channel_sums(h).numpy(),
        "relu": lambda: gg.relu(h).numpy(),
        "max_pool2d forward (ggml pool_2d)": lambda: op.max_pool2d(h, kernel_size=(2, 2), stride=(2, 2)).numpy(),
        "max_pool2d backward (pool_2d_back)": lambda: op.max_pool2d_backward(p, h, kernel_size=(2, 2),
                                                                              stride=(2, 2)).numpy(),
    }
    if hasattr(gg.nn, "BatchNorm2d"):
        bn = gg.nn.BatchNorm2d(32)
        fns["batch_norm2d forward (train)"] = lambda: bn(h).detach().numpy()
    res = compare(fns, number)
    return [[k, fmt(v)] for k, v in res.items()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_timing_args(ap, 20, "steps per timed block")
    ap.add_argument("--ops", action="store_true", help="also time each op of the step alone")
    ap.add_argument("--only", choices=["captured", "graph", "torch", "jax"], help="run one framework (for perf)")
    args = ap.parse_args()
    timing_setup(args, gg)
    torch = try_torch()
    if not hasattr(gg.nn, "BatchNorm2d"):
        raise SystemExit("bench_conv: this ggmlgrad has no nn.BatchNorm2d")
    if args.only:
        fn = {"captured": gg_captured, "graph": gg_graph, "torch": lambda: torch_eager(torch), "jax": jax_jit}[args.only]()
        t0 = time.perf_counter()
        for _ in range(args.number * args.repeat):
            fn()
        print(f"{args.only}: {(time.perf_counter() - t0) / (args.number * args.repeat) * 1e3:.2f} ms per step")
        return
    fns = {"ggmlgrad captured": gg_captured(), "ggmlgrad graph mode": gg_graph(),
           "torch eager": torch_eager(torch) if torch else None, "jax jit": jax_jit()}
    res = compare(fns, args.number, args.repeat)
    peers = [v for k, v in res.items() if k in ("torch eager", "jax jit") and v is not None]
    best = min(peers) if peers else None
    print(header(gg))
    print(f"Conv2d(1->32, 3x3)-BatchNorm2d-ReLU-MaxPool2d(2)-Linear-CE-Adam step, batch {BATCH}, 1x28x28; "
          f"median of {args.repeat} blocks of {args.number} steps")
    rows = [[k, fmt(v), ratio(v, res["torch eager"]), ratio(v, best)] for k, v in res.items()]
    print(table(["framework", "per step", "vs torch eager", "vs faster peer"], rows))
    if best:
        print(f"goals: captured <= 0.8x the faster peer ({ratio(res['ggmlgrad captured'], best)}), "
              f"graph mode <= 1.0x ({ratio(res['ggmlgrad graph mode'], best)})")
    if args.ops:
        print(table(["op alone (eager, one compute)", "median"], op_times(args.number)))


if __name__ == "__main__":
    main()
