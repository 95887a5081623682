"""Graph mode's purpose on a device: graph computes, graph nodes (≈ kernel launches) and time per
step in eager mode, graph mode and capture, for the 64-64-64-8 MLP training step (batch 256, Adam),
the PPO example's acting step (actor + critic forward of 4 CartPole observations) and its update
(one minibatch of 128 rows gathered from device-resident rollout storage, clipped gradients, Adam).

    GGMLGRAD_GGML_LIB=$VIRTUAL_ENV/share/ggmlgrad/ggml-0.20.2.post1-vulkan/lib GGML_VK_VISIBLE_DEVICES=0 \\
        python benchmarks/bench_device.py --device vulkan:0 [--steps 20] [--json out.json]

Per step: ``computes`` is the number of ggml graph computes (``gg.counters()``), ``nodes`` the
graph nodes those computes ran (ggml launches about one kernel per node on a GPU backend; Vulkan
fuses a few), ``up``/``down`` the host<->device transfers. Time is the median wall time of a step
over ``--steps`` steps after a warm-up. On lavapipe (Mesa's software Vulkan, running on the CPU)
the times show dispatch overhead, not GPU speed.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import header  # noqa: E402  (also puts the checkout's src on the path)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
import ggmlgrad as gg  # noqa: E402
from ggmlgrad.engine import graph_node_counts  # noqa: E402

MODES = ("eager", "graph", "capture")


def mlp_step(mode: str):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((256, 64), dtype=np.float32)
    y = rng.integers(0, 8, 256).astype(np.int32)
    model = gg.nn.Sequential(gg.nn.Linear(64, 64), gg.nn.ReLU(), gg.nn.Linear(64, 64), gg.nn.ReLU(),
                             gg.nn.Linear(64, 8))
    opt = gg.optim.Adam(model.parameters(), lr=1e-3)
    gx, gy = gg.tensor(x), gg.tensor(y, dtype=gg.int32)
    if mode == "capture":
        # NumPy arguments, as a training loop passes its batches: one packed upload per step (a
        # device tensor argument is read back to the host staging first: see README "GPU")
        step = gg.capture_step(lambda a, b: gg.nn.functional.cross_entropy(model(a), b), opt)
        return lambda: step(x, y)

    def run():
        with gg.graph_mode(mode == "graph"):
            opt.zero_grad()
            loss = gg.nn.functional.cross_entropy(model(gx), gy)
            loss.backward()
            opt.step()
        return loss.item()
    return run


def ppo_parts():
    from ppo_cartpole import Agent, Config, Rollout, make_act, ppo_loss
    cfg = Config()
    gg.manual_seed(1)
    agent = Agent(4, 2)
    store = Rollout(cfg, 4)
    rng = np.random.default_rng(1)
    store.write(rng.standard_normal((cfg.batch, 4)).astype(np.float32), rng.integers(0, 2, cfg.batch).astype(np.int32),
                np.full(cfg.batch, -0.69, np.float32), rng.standard_normal(cfg.batch).astype(np.float32),
                rng.standard_normal(cfg.batch).astype(np.float32))
    return cfg, agent, store, make_act, ppo_loss


def ppo_act(mode: str):
    cfg, agent, _, make_act, _ = ppo_parts()
    act = make_act(agent, mode)
    obs = np.random.default_rng(2).standard_normal((cfg.num_envs, 4)).astype(np.float32)
    return lambda: act(obs)


def ppo_update(mode: str):
    cfg, agent, store, _, ppo_loss = ppo_parts()
    opt = gg.optim.Adam(agent.parameters(), lr=cfg.lr, eps=1e-5)
    idx = np.random.default_rng(3).permutation(cfg.batch)[:cfg.minibatch].astype(np.int32)
    if mode == "capture":
        step = gg.capture_step(lambda i: ppo_loss(agent, store, i, cfg), opt, max_grad_norm=cfg.max_grad_norm)
        return lambda: step(idx)
    gidx = gg.tensor(idx, dtype=gg.int32)

    def run():
        with gg.graph_mode(mode == "graph"):
            opt.zero_grad()
            loss = ppo_loss(agent, store, gidx, cfg)
            loss.backward()
            gg.nn.utils.clip_grad_norm_(agent.parameters(), cfg.max_grad_norm)
            opt.step()
        return loss.item()
    return run


WORKLOADS = {"MLP 64-64-64-8 train step": mlp_step, "PPO acting step": ppo_act, "PPO update step": ppo_update}


def measure(make, mode: str, steps: int) -> dict:
    try:
        step = make(mode)
        for _ in range(3):   # records (capture), builds plans, compiles the device's pipelines
            step()
        gg.reset_counters()
        before = len(graph_node_counts())
        step()
        c = gg.counters()
        nodes = sum(graph_node_counts()[before:]) if c["computes"] <= 1000 else None
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
        return {"computes": c["computes"], "nodes": nodes, "uploads": c["uploads"], "downloads": c["downloads"],
                "ms": statistics.median(times) * 1e3}
    except Exception as e:  # noqa: BLE001  (a row says what failed instead of ending the table)
        return {"error": f"{type(e).__name__}: {str(e)[:160]}"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="auto", help="device to run on (default: the first non-CPU one)")
    ap.add_argument("--steps", type=int, default=20, help="timed steps per cell (median)")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--only", choices=["mlp", "act", "update"], action="append",
                    help="run only these workloads (repeatable; default: all)")
    args = ap.parse_args(argv)
    dev = gg.runtime.resolve_device(args.device)
    gg.set_device(dev)
    print(header(gg) + f" | device {dev.name} ({dev.description})")
    results = {}
    print("| workload | mode | computes/step | graph nodes/step | uploads | downloads | ms/step |")
    print("|---|---|---:|---:|---:|---:|---:|")
    keys = dict(zip(("mlp", "act", "update"), WORKLOADS))
    chosen = [keys[k] for k in args.only] if args.only else list(WORKLOADS)
    for name, make in ((n, WORKLOADS[n]) for n in chosen):
        for mode in MODES:
            r = measure(make, mode, args.steps)
            results[f"{name} / {mode}"] = r
            if "error" in r:
                print(f"| {name} | {mode} | failed: {r['error']} ||||")
            else:
                print(f"| {name} | {mode} | {r['computes']} | {r['nodes']} | {r['uploads']} | {r['downloads']} "
                      f"| {r['ms']:.2f} |", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": dev.name, "description": dev.description, "results": results}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
