"""PPO on CartPole-v1 with N Ray rollout workers: the algorithm of ``ppo_cartpole.py`` (imported
from it: networks, rollout storage, loss, GAE, minibatch updates), with the environments spread
over worker processes.

Each worker (a Ray actor) runs ``num_envs / N`` CartPole environments and a CPU copy of the
policy, a captured forward (``gg.capture``). Every iteration the learner broadcasts its weights as
ONE packed float32 array, the workers return their trajectories (with GAE), and the learner runs
the captured minibatch updates on all of them. A worker that dies mid-iteration drops out of that
iteration (the learner trains on the others' rows) and Ray restarts it for the next. A checkpoint
(model, optimizer, iteration) every ``--checkpoint-every`` iterations lets a restarted driver go on
with ``--checkpoint PATH``: the environments restart from seeded resets at those same iterations and
every random draw is seeded by (seed, worker, iteration), so a resumed run equals an unbroken one.

    pip install -e ".[examples,distributed]"
    python examples/ppo_ray.py                    # 200,000 environment steps, 2 workers, local Ray
    python examples/ppo_ray.py --quick            # a short run that must show a learning signal (CI)
    python examples/ppo_ray.py --workers 4 --address auto   # on a running Ray cluster
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, field, replace

import numpy as np

import ggmlgrad as gg

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ppo_cartpole as base  # noqa: E402  (the single-process example: the algorithm's pieces)

N_OBS, N_ACTIONS = 4, 2        # CartPole-v1
RETURN_BAR = 475.0             # the single-process example's bar (CartPole-v1's "solved" return)


class CartPoleWorker:
    """One rollout worker: ``cfg.num_envs`` environments and a captured copy of the policy.

    ``cfg`` is the worker's share (its ``num_envs``); ``seed`` the run's. Environment ``j`` of
    worker ``index`` gets seed ``seed + index * cfg.num_envs + j`` at iteration 0 (the numbering of
    the single-process run), and fresh seeded episodes every ``reset_every`` iterations.
    """

    def __init__(self, index: int, cfg: base.Config, reset_every: int) -> None:
        self.index, self.cfg, self.reset_every = index, cfg, reset_every
        self.collector = base.Collector(cfg)
        self.collector.reset(self._env_seed(0))
        self.agent = base.Agent(self.collector.n_obs, self.collector.n_actions)
        self.params = list(self.agent.parameters())
        self.act = base.make_act(self.agent, "capture")

    def _env_seed(self, iteration: int) -> int:
        return self.cfg.seed + self.index * self.cfg.num_envs + 100_003 * iteration

    def rollout(self, weights: np.ndarray, iteration: int):
        """Load ``weights`` (packed), run one rollout; returns (batch, finished episodes' returns, seconds)."""
        t0 = time.perf_counter()
        gg.distributed.unpack_parameters(weights, self.params)
        if iteration % self.reset_every == 0:
            self.collector.reset(self._env_seed(iteration))
        done_before = len(self.collector.returns)
        batch = self.collector.rollout(self.act, np.random.default_rng([self.cfg.seed, self.index, iteration]))
        return batch, self.collector.returns[done_before:], time.perf_counter() - t0


@dataclass
class Stats:
    returns: list = field(default_factory=list)        # finished episodes, in order
    rows: list = field(default_factory=list)           # rollout rows learned from, per iteration
    failed_calls: int = 0                              # worker calls lost (dead or late workers)
    times: dict = field(default_factory=lambda: {"rollout": 0.0, "learning": 0.0, "worker_rollout": 0.0})


def train(cfg: base.Config, num_workers: int = 2, *, checkpoint: str | None = None, checkpoint_every: int = 10,
          stop_after: int | None = None, worker_cls: type = CartPoleWorker, timeout: float | None = 60.0,
          progress: bool = False):
    """Train PPO with ``num_workers`` rollout actors; returns (agent, Stats). With ``checkpoint``, resume
    from it if it exists and save to it every ``checkpoint_every`` iterations; ``stop_after``: end after
    that iteration (a driver that stops)."""
    if cfg.num_envs % num_workers:
        raise ValueError(f"num_envs={cfg.num_envs} must be a multiple of the worker count {num_workers}")
    gg.manual_seed(cfg.seed)
    agent = base.Agent(N_OBS, N_ACTIONS)
    opt = gg.optim.Adam(agent.parameters(), lr=cfg.lr, eps=1e-5)
    store = base.Rollout(cfg, N_OBS)
    update = gg.capture_step(lambda idx: base.ppo_loss(agent, store, idx, cfg), opt, max_grad_norm=cfg.max_grad_norm)
    start = 0
    if checkpoint and os.path.exists(checkpoint):
        start = gg.distributed.load_checkpoint(checkpoint, agent, opt)
    n_updates = cfg.total_steps // cfg.batch
    share = replace(cfg, num_envs=cfg.num_envs // num_workers)
    stats = Stats()
    _ship_by_value(base, sys.modules[__name__], sys.modules[worker_cls.__module__])
    bar = base._progress((n_updates - start) * cfg.batch, progress)
    with gg.distributed.WorkerPool(worker_cls, num_workers, share, checkpoint_every) as pool:
        for it in range(start, n_updates):
            opt.param_groups[0]["lr"] = cfg.lr * (1.0 - it / n_updates)
            t0 = time.perf_counter()
            results = pool.map("rollout", gg.distributed.pack_parameters(agent.parameters()), it, timeout=timeout)
            t1 = time.perf_counter()
            stats.times["rollout"] += t1 - t0
            if results:                      # all workers lost: nothing to learn from this time
                parts = [results[k] for k in sorted(results)]
                batch = tuple(np.concatenate(field) for field in zip(*(p[0] for p in parts)))
                base.learn(store, update, batch, np.random.default_rng([cfg.seed, it]), cfg)
                stats.returns += [r for p in parts for r in p[1]]
                stats.times["worker_rollout"] += sum(p[2] for p in parts)
            stats.rows.append(sum(len(p[0][0]) for p in results.values()))
            stats.times["learning"] += time.perf_counter() - t1
            bar.update(cfg.batch)
            if stats.returns:
                bar.set_postfix(ret=f"{np.mean(stats.returns[-20:]):.0f}")
            if checkpoint and (it + 1) % checkpoint_every == 0:
                gg.distributed.save_checkpoint(checkpoint, agent, opt, it + 1)
            if stop_after is not None and it + 1 >= stop_after:
                break
        stats.failed_calls = pool.failed_calls
    bar.close()
    return agent, stats


def _ship_by_value(*modules) -> None:
    """Send these modules' code to the workers with the calls (the examples folder is not installed
    on a cluster's machines): Ray pickles ``__main__`` by value, imported modules by name."""
    from ray import cloudpickle
    for m in modules:
        if m.__name__ != "__main__":
            cloudpickle.register_pickle_by_value(m)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=base.Config.total_steps, help="environment steps")
    ap.add_argument("--workers", type=int, default=2, help="rollout workers (Ray actors)")
    ap.add_argument("--seed", type=int, default=base.Config.seed)
    ap.add_argument("--quick", action="store_true", help="20,480 steps; asserts a learning signal")
    ap.add_argument("--checkpoint", help="checkpoint file (.safetensors): resumed from if it exists")
    ap.add_argument("--checkpoint-every", type=int, default=10, help="iterations between checkpoints")
    ap.add_argument("--address", help="a running Ray cluster (e.g. 'auto'); default: a local one")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    import ray
    started = not ray.is_initialized()
    if started:
        if args.address:
            ray.init(address=args.address)
        else:
            ray.init(num_cpus=max(2, args.workers), include_dashboard=False, log_to_driver=False)
    try:
        cfg = base.Config(total_steps=20_480 if args.quick else args.steps, seed=args.seed)
        start = time.perf_counter()
        agent, stats = train(cfg, args.workers, checkpoint=args.checkpoint, checkpoint_every=args.checkpoint_every,
                             progress=not args.no_progress)
        wall = time.perf_counter() - start
    finally:
        if started:
            ray.shutdown()
    episodes = 5 if args.quick else 20
    score = base.evaluate(base.make_act(agent, "capture"), episodes, seed=10_000 + args.seed)
    steps = sum(stats.rows)
    print(f"{args.workers} rollout workers, {steps} environment steps, {len(stats.rows)} iterations "
          f"({stats.failed_calls} worker calls lost)")
    print(f"evaluation: mean return {score:.1f} over {episodes} episodes (greedy policy); bar {RETURN_BAR:.0f}: "
          f"{'reached' if score >= RETURN_BAR else 'not reached'}")
    print(f"wall {wall:.1f} s: rollouts {stats.times['rollout']:.1f} s (workers busy {stats.times['worker_rollout']:.1f} s "
          f"in all), learning {stats.times['learning']:.1f} s; {steps / wall:.0f} environment steps/s")
    if args.quick:
        first, last = np.mean(stats.returns[:10]), np.mean(stats.returns[-10:])
        print(f"learning signal: first episodes {first:.1f} -> last episodes {last:.1f}")
        if not last > 1.5 * first:
            print("no learning signal", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
