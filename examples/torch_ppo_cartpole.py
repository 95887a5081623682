"""The PPO of ``examples/ppo_cartpole.py`` in PyTorch, for a side-by-side time per update.

    pip install torch==2.13.0 gymnasium
    python examples/torch_ppo_cartpole.py [--steps 200000] [--quick]

Same networks, initialisation, hyperparameters, rollout layout and minibatching; the rollout
lives in torch tensors and each minibatch update is a torch eager step. Prints the evaluation
return and the wall time split into environment, acting and learning.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import torch

from ppo_cartpole import Collector, Config, _progress


def mlp(n_in: int, n_out: int, out_gain: float) -> torch.nn.Sequential:
    layers = [torch.nn.Linear(n_in, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
              torch.nn.Linear(64, n_out)]
    for layer, gain in zip(layers[::2], (np.sqrt(2), np.sqrt(2), out_gain)):
        torch.nn.init.orthogonal_(layer.weight, gain=gain)
        torch.nn.init.zeros_(layer.bias)
    return torch.nn.Sequential(*layers)


class Agent(torch.nn.Module):
    def __init__(self, n_obs: int, n_actions: int) -> None:
        super().__init__()
        self.actor = mlp(n_obs, n_actions, 0.01)
        self.critic = mlp(n_obs, 1, 1.0)


def ppo_loss(agent: Agent, b: dict, idx: torch.Tensor, cfg: Config) -> torch.Tensor:
    obs, actions, old_logp, adv, ret = (b[k][idx] for k in ("obs", "actions", "logprobs", "advantages", "returns"))
    dist = torch.distributions.Categorical(logits=agent.actor(obs))
    logp = dist.log_prob(actions)
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    ratio = (logp - old_logp).exp()
    pg = torch.maximum(-adv * ratio, -adv * ratio.clamp(1 - cfg.clip, 1 + cfg.clip)).mean()
    v_loss = 0.5 * ((agent.critic(obs).reshape(-1) - ret) ** 2).mean()
    return pg + cfg.vf_coef * v_loss - cfg.ent_coef * dist.entropy().mean()


def train(cfg: Config, progress: bool = True):
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    col = Collector(cfg)
    agent = Agent(col.n_obs, col.n_actions)
    opt = torch.optim.Adam(agent.parameters(), lr=cfg.lr, eps=1e-5)

    @torch.no_grad()
    def act(obs: np.ndarray):
        o = torch.from_numpy(obs)
        return agent.actor(o).numpy(), agent.critic(o).numpy().reshape(-1)  # as ppo_cartpole.py's act

    n_updates = cfg.total_steps // cfg.batch
    bar = _progress(n_updates * cfg.batch, progress)
    for u in range(n_updates):
        opt.param_groups[0]["lr"] = cfg.lr * (1.0 - u / n_updates)
        obs, actions, logprobs, adv, ret = col.rollout(act, rng)
        t0 = time.perf_counter()
        b = {"obs": torch.from_numpy(obs), "actions": torch.from_numpy(actions.astype(np.int64)),
             "logprobs": torch.from_numpy(logprobs), "advantages": torch.from_numpy(adv),
             "returns": torch.from_numpy(ret)}
        for _ in range(cfg.update_epochs):
            perm = torch.from_numpy(rng.permutation(cfg.batch))
            for start in range(0, cfg.batch, cfg.minibatch):
                loss = ppo_loss(agent, b, perm[start:start + cfg.minibatch], cfg)
                opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(agent.parameters(), cfg.max_grad_norm)
                opt.step()
        col.times["learning"] += time.perf_counter() - t0
        bar.update(cfg.batch)
        if col.returns:
            bar.set_postfix(ret=f"{np.mean(col.returns[-20:]):.0f}")
    bar.close()
    return act, col.times, col.returns, n_updates


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=Config.total_steps)
    ap.add_argument("--seed", type=int, default=Config.seed)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    from ppo_cartpole import evaluate, timing_line
    cfg = Config(total_steps=20_480 if args.quick else args.steps, seed=args.seed)
    start = time.perf_counter()
    act, times, returns, n_updates = train(cfg, progress=not args.no_progress)
    wall = time.perf_counter() - start
    episodes = 5 if args.quick else 20
    score = evaluate(act, episodes, seed=10_000 + args.seed)
    print(f"torch {torch.__version__} ({torch.get_num_threads()} threads)")
    print(f"{n_updates * cfg.batch} environment steps, {n_updates} updates")
    print(f"evaluation: mean return {score:.1f} over {episodes} episodes (greedy policy)")
    print(timing_line(wall, times, n_updates, cfg))
    return 0


if __name__ == "__main__":
    sys.exit(main())
