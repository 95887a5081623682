"""The same SAC as ``sac_pendulum.py`` in PyTorch (eager, torch's default threads unless --threads), for the
learning-time ratio: same configuration, replay buffer, schedule and evaluation.

    pip install torch gymnasium
    python examples/torch_sac_pendulum.py [--steps 30000] [--quick]
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import torch
import torch.nn as nn

from ppo_cartpole import _progress
from sac_pendulum import LOG_STD_MAX, LOG_STD_MIN, Config, Replay


def mlp(n_in: int, n_out: int, hidden: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(n_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, n_out))


class QNetwork(nn.Module):
    def __init__(self, n_obs, n_act, hidden):
        super().__init__()
        self.net = mlp(n_obs + n_act, 1, hidden)

    def forward(self, obs, act):
        return self.net(torch.cat([obs, act], 1))


class Actor(nn.Module):
    def __init__(self, n_obs, n_act, hidden, low, high):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(n_obs, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.mean = nn.Linear(hidden, n_act)
        self.log_std = nn.Linear(hidden, n_act)
        self.register_buffer("action_scale", torch.tensor((high - low) / 2.0, dtype=torch.float32))
        self.register_buffer("action_bias", torch.tensor((high + low) / 2.0, dtype=torch.float32))

    def forward(self, obs):
        h = self.trunk(obs)
        log_std = torch.tanh(self.log_std(h))
        return self.mean(h), LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1)

    def sample(self, obs):
        mean, log_std = self(obs)
        normal = torch.distributions.Normal(mean, log_std.exp())
        u = normal.rsample()
        y = torch.tanh(u)
        action = y * self.action_scale + self.action_bias
        log_prob = normal.log_prob(u) - torch.log(self.action_scale * (1 - y.pow(2)) + 1e-6)
        return action, log_prob.sum(1, keepdim=True), torch.tanh(mean) * self.action_scale + self.action_bias


def train(cfg: Config, progress: bool):
    import gymnasium as gym
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    env = gym.make("Pendulum-v1")
    env.action_space.seed(cfg.seed)
    low, high = env.action_space.low, env.action_space.high
    n_obs, n_act = env.observation_space.shape[0], env.action_space.shape[0]
    actor = Actor(n_obs, n_act, cfg.hidden, low, high)
    qf1, qf2 = QNetwork(n_obs, n_act, cfg.hidden), QNetwork(n_obs, n_act, cfg.hidden)
    qf1_t, qf2_t = QNetwork(n_obs, n_act, cfg.hidden), QNetwork(n_obs, n_act, cfg.hidden)
    qf1_t.load_state_dict(qf1.state_dict())
    qf2_t.load_state_dict(qf2.state_dict())
    q_opt = torch.optim.Adam(list(qf1.parameters()) + list(qf2.parameters()), lr=cfg.q_lr)
    actor_opt = torch.optim.Adam(actor.parameters(), lr=cfg.policy_lr)
    target_entropy = -float(n_act)
    log_alpha = torch.zeros(1, requires_grad=True)
    alpha_opt = torch.optim.Adam([log_alpha], lr=cfg.q_lr)
    replay = Replay(min(cfg.buffer_size, cfg.total_steps), n_obs, n_act)
    obs, _ = env.reset(seed=cfg.seed)
    times = {"environment": 0.0, "acting": 0.0, "learning": 0.0}
    returns, running = [], 0.0
    bar = _progress(cfg.total_steps, progress, desc="SAC Pendulum-v1 (torch)")
    for step in range(cfg.total_steps):
        t0 = time.perf_counter()
        if step < cfg.learning_starts:
            action = env.action_space.sample()
        else:
            with torch.no_grad():
                action = actor.sample(torch.tensor(obs[None], dtype=torch.float32))[0].numpy()[0]
        t1 = time.perf_counter()
        next_obs, reward, term, trunc, _ = env.step(action)
        t2 = time.perf_counter()
        replay.add(obs, action, reward, next_obs, float(term))
        running += reward
        obs = next_obs
        if term or trunc:
            returns.append(running)
            running = 0.0
            obs, _ = env.reset()
            bar.set_postfix(ret=f"{np.mean(returns[-5:]):.0f}")
        if step >= cfg.learning_starts:
            b_obs, b_act, b_rew, b_next, b_done = (torch.from_numpy(a) for a in replay.sample(rng, cfg.batch))
            alpha = log_alpha.exp().detach()
            with torch.no_grad():
                next_act, next_logp, _ = actor.sample(b_next)
                q_next = torch.min(qf1_t(b_next, next_act), qf2_t(b_next, next_act))
                target = b_rew + (1 - b_done) * cfg.gamma * (q_next - alpha * next_logp)
            q_loss = ((qf1(b_obs, b_act) - target) ** 2).mean() + ((qf2(b_obs, b_act) - target) ** 2).mean()
            q_opt.zero_grad()
            q_loss.backward()
            q_opt.step()
            if step % cfg.policy_frequency == 0:
                for _ in range(cfg.policy_frequency):
                    act, logp, _ = actor.sample(b_obs)
                    actor_loss = (log_alpha.exp().detach() * logp - torch.min(qf1(b_obs, act), qf2(b_obs, act))).mean()
                    actor_opt.zero_grad()
                    actor_loss.backward()
                    actor_opt.step()
                    with torch.no_grad():
                        _, logp, _ = actor.sample(b_obs)
                    alpha_loss = (-log_alpha.exp() * (logp + target_entropy)).mean()
                    alpha_opt.zero_grad()
                    alpha_loss.backward()
                    alpha_opt.step()
            with torch.no_grad():
                for net, tnet in ((qf1, qf1_t), (qf2, qf2_t)):
                    for p, tp in zip(net.parameters(), tnet.parameters()):
                        tp.data.copy_(cfg.tau * p.data + (1 - cfg.tau) * tp.data)
        t3 = time.perf_counter()
        times["acting"] += t1 - t0
        times["environment"] += t2 - t1
        times["learning"] += t3 - t2
        bar.update(1)
    bar.close()
    return actor, times, returns


def evaluate(actor, episodes: int, seed: int) -> float:
    import gymnasium as gym
    env = gym.make("Pendulum-v1")
    returns = []
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed + ep)
        done, total = False, 0.0
        while not done:
            with torch.no_grad():
                action = actor.sample(torch.tensor(obs[None], dtype=torch.float32))[2].numpy()[0]
            obs, r, term, trunc, _ = env.step(action)
            total += float(r)
            done = term or trunc
        returns.append(total)
    return float(np.mean(returns))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=None, help="environment steps (default 30,000; --quick 6,000)")
    ap.add_argument("--seed", type=int, default=Config.seed)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = Config(seed=args.seed)
    if args.quick:
        cfg = Config(seed=args.seed, total_steps=6_000, learning_starts=1_000, batch=64, hidden=64)
    if args.steps is not None:
        cfg.total_steps = args.steps
    start = time.perf_counter()
    actor, times, _ = train(cfg, progress=not args.no_progress)
    wall = time.perf_counter() - start
    episodes = 3 if args.quick else 10
    score = evaluate(actor, episodes, seed=10_000 + args.seed)
    updates = cfg.total_steps - cfg.learning_starts
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s)")
    print(f"evaluation: mean return {score:.1f} over {episodes} episodes (deterministic policy)")
    print(f"wall {wall:.1f} s: environment {times['environment']:.1f} s, acting {times['acting']:.1f} s, "
          f"learning {times['learning']:.1f} s ({times['learning'] / max(updates, 1) * 1e3:.2f} ms per update)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
