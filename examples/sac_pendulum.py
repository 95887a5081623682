"""SAC on gymnasium's Pendulum-v1 with ggmlgrad: twin Q networks with target copies, a squashed
Gaussian policy (tanh of a Normal sample, its log-probability corrected for the squashing),
automatic entropy tuning, and soft target updates written the PyTorch way
(``target.data.copy_(tau * p.data + (1 - tau) * target.data)``).

    pip install -e ".[examples]"
    python examples/sac_pendulum.py                  # 30,000 environment steps, then 10 evaluation episodes
    python examples/sac_pendulum.py --quick          # a short run for CI: it must improve on random actions
    python examples/sac_pendulum.py --mode graph     # every update in graph mode instead of capture

With ``--mode capture`` (the default) the Q update, the policy update, the temperature update and the
soft target update are each a recorded step replayed with new minibatches (``gg.capture_step`` and
``gg.capture``), and acting is a captured forward that draws its noise inside the recording.
``examples/torch_sac_pendulum.py`` is the same algorithm in PyTorch.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass

import numpy as np

import ggmlgrad as gg
from ppo_cartpole import _progress   # the progress bar (tqdm when installed) both examples print

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


@dataclass
class Config:
    total_steps: int = 30_000
    learning_starts: int = 5_000
    batch: int = 256
    hidden: int = 256
    gamma: float = 0.99
    tau: float = 0.005
    policy_lr: float = 3e-4
    q_lr: float = 1e-3
    policy_frequency: int = 2
    buffer_size: int = 1_000_000
    seed: int = 1


def mlp(n_in: int, n_out: int, hidden: int) -> gg.nn.Sequential:
    return gg.nn.Sequential(gg.nn.Linear(n_in, hidden), gg.nn.ReLU(), gg.nn.Linear(hidden, hidden), gg.nn.ReLU(),
                            gg.nn.Linear(hidden, n_out))


class QNetwork(gg.nn.Module):
    def __init__(self, n_obs: int, n_act: int, hidden: int) -> None:
        super().__init__()
        self.net = mlp(n_obs + n_act, 1, hidden)

    def forward(self, obs, act):
        return self.net(gg.cat([obs, act], 1))


class Actor(gg.nn.Module):
    """Squashed Gaussian policy: ``a = tanh(u) * scale + bias`` with ``u ~ Normal(mean, std)``."""

    def __init__(self, n_obs: int, n_act: int, hidden: int, low: np.ndarray, high: np.ndarray) -> None:
        super().__init__()
        self.trunk = gg.nn.Sequential(gg.nn.Linear(n_obs, hidden), gg.nn.ReLU(), gg.nn.Linear(hidden, hidden),
                                      gg.nn.ReLU())
        self.mean = gg.nn.Linear(hidden, n_act)
        self.log_std = gg.nn.Linear(hidden, n_act)
        self.register_buffer("action_scale", gg.tensor(((high - low) / 2.0).astype(np.float32)))
        self.register_buffer("action_bias", gg.tensor(((high + low) / 2.0).astype(np.float32)))

    def forward(self, obs):
        h = self.trunk(obs)
        log_std = gg.tanh(self.log_std(h))
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1.0)
        return self.mean(h), log_std

    def sample(self, obs):
        """(action, log-probability summed over action dims, deterministic action)."""
        mean, log_std = self(obs)
        normal = gg.distributions.Normal(mean, log_std.exp())
        u = normal.rsample()
        y = gg.tanh(u)
        action = y * self.action_scale + self.action_bias
        log_prob = normal.log_prob(u) - (self.action_scale * (1.0 - y * y) + 1e-6).log()
        return action, log_prob.sum(1, keepdim=True), gg.tanh(mean) * self.action_scale + self.action_bias


class Replay:
    """Transitions in NumPy; minibatches go to the recorded steps as array arguments."""

    def __init__(self, size: int, n_obs: int, n_act: int) -> None:
        self.obs = np.zeros((size, n_obs), np.float32)
        self.next_obs = np.zeros((size, n_obs), np.float32)
        self.act = np.zeros((size, n_act), np.float32)
        self.rew = np.zeros((size, 1), np.float32)
        self.done = np.zeros((size, 1), np.float32)
        self.n, self.size = 0, size

    def add(self, obs, act, rew, next_obs, done) -> None:
        i = self.n % self.size
        self.obs[i], self.act[i], self.rew[i], self.next_obs[i], self.done[i] = obs, act, rew, next_obs, done
        self.n += 1

    def sample(self, rng: np.random.Generator, batch: int) -> tuple:
        idx = rng.integers(0, min(self.n, self.size), batch)
        return self.obs[idx], self.act[idx], self.rew[idx], self.next_obs[idx], self.done[idx]


class SAC:
    """The networks, optimizers and the four update functions (recorded once in capture mode)."""

    def __init__(self, cfg: Config, n_obs: int, n_act: int, low: np.ndarray, high: np.ndarray, mode: str) -> None:
        self.cfg = cfg
        self.actor = Actor(n_obs, n_act, cfg.hidden, low, high)
        self.qf1, self.qf2 = QNetwork(n_obs, n_act, cfg.hidden), QNetwork(n_obs, n_act, cfg.hidden)
        self.qf1_target, self.qf2_target = QNetwork(n_obs, n_act, cfg.hidden), QNetwork(n_obs, n_act, cfg.hidden)
        self.qf1_target.load_state_dict(self.qf1.state_dict())
        self.qf2_target.load_state_dict(self.qf2.state_dict())
        self.q_opt = gg.optim.Adam(list(self.qf1.parameters()) + list(self.qf2.parameters()), lr=cfg.q_lr)
        self.actor_opt = gg.optim.Adam(self.actor.parameters(), lr=cfg.policy_lr)
        self.target_entropy = -float(n_act)
        self.log_alpha = gg.zeros(1, requires_grad=True)
        self.alpha_opt = gg.optim.Adam([self.log_alpha], lr=cfg.q_lr)
        self.mode = mode
        if mode == "capture":
            self.q_step = gg.capture_step(self.q_loss, self.q_opt)
            self.actor_step = gg.capture_step(self.actor_loss, self.actor_opt)
            self.alpha_step = gg.capture_step(self.alpha_loss, self.alpha_opt)
            self.soft_update = gg.capture(self._soft_update)
            self.act = gg.capture(lambda obs: self.actor.sample(obs)[0])
        else:
            self.q_step = self._eager_step(self.q_loss, self.q_opt)
            self.actor_step = self._eager_step(self.actor_loss, self.actor_opt)
            self.alpha_step = self._eager_step(self.alpha_loss, self.alpha_opt)
            self.soft_update = self._soft_update

            def act(obs):
                with gg.no_grad():
                    return self.actor.sample(gg.tensor(obs))[0].numpy()
            self.act = act

    def _eager_step(self, loss_fn, opt):
        def step(*arrays):
            opt.zero_grad()
            loss = loss_fn(*(gg.tensor(a) for a in arrays))
            loss.backward()
            opt.step()
            return loss.item()
        return step

    def alpha(self):
        return self.log_alpha.exp().detach()

    def q_loss(self, obs, act, rew, next_obs, done):
        with gg.no_grad():
            next_act, next_logp, _ = self.actor.sample(next_obs)
            q_next = gg.minimum(self.qf1_target(next_obs, next_act), self.qf2_target(next_obs, next_act))
            target = rew + (1.0 - done) * self.cfg.gamma * (q_next - self.alpha() * next_logp)
        q1, q2 = self.qf1(obs, act), self.qf2(obs, act)
        return ((q1 - target) ** 2).mean() + ((q2 - target) ** 2).mean()

    def actor_loss(self, obs):
        act, logp, _ = self.actor.sample(obs)
        q = gg.minimum(self.qf1(obs, act), self.qf2(obs, act))
        return (self.alpha() * logp - q).mean()

    def alpha_loss(self, obs):
        with gg.no_grad():
            _, logp, _ = self.actor.sample(obs)
        return (-self.log_alpha.exp() * (logp + self.target_entropy)).mean()

    def _soft_update(self):
        tau = self.cfg.tau
        with gg.no_grad():
            for net, target in ((self.qf1, self.qf1_target), (self.qf2, self.qf2_target)):
                for p, tp in zip(net.parameters(), target.parameters()):
                    tp.data.copy_(tau * p.data + (1.0 - tau) * tp.data)

    def update(self, step: int, batch: tuple) -> None:
        obs, act, rew, next_obs, done = batch
        with gg.graph_mode(self.mode == "graph"):
            self.q_step(obs, act, rew, next_obs, done)
            if step % self.cfg.policy_frequency == 0:
                for _ in range(self.cfg.policy_frequency):      # TD3-style delayed, compensated updates
                    self.actor_step(obs)
                    self.alpha_step(obs)
            self.soft_update()


def evaluate(agent: SAC, episodes: int, seed: int) -> float:
    """Mean return of the deterministic policy (tanh of the mean)."""
    import gymnasium as gym
    env = gym.make("Pendulum-v1")
    returns = []
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed + ep)
        done, total = False, 0.0
        while not done:
            with gg.no_grad():
                action = agent.actor.sample(gg.tensor(obs[None].astype(np.float32)))[2].numpy()[0]
            obs, r, term, trunc, _ = env.step(action)
            total += float(r)
            done = term or trunc
        returns.append(total)
    return float(np.mean(returns))


def train(cfg: Config, mode: str, progress: bool):
    import gymnasium as gym
    gg.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    env = gym.make("Pendulum-v1")
    env.action_space.seed(cfg.seed)
    low, high = env.action_space.low, env.action_space.high
    n_obs, n_act = env.observation_space.shape[0], env.action_space.shape[0]
    agent = SAC(cfg, n_obs, n_act, low, high, mode)
    replay = Replay(min(cfg.buffer_size, cfg.total_steps), n_obs, n_act)
    obs, _ = env.reset(seed=cfg.seed)
    times = {"environment": 0.0, "acting": 0.0, "learning": 0.0}
    returns, running = [], 0.0
    bar = _progress(cfg.total_steps, progress, desc="SAC Pendulum-v1")
    for step in range(cfg.total_steps):
        t0 = time.perf_counter()
        if step < cfg.learning_starts:
            action = env.action_space.sample()
        else:
            action = agent.act(obs[None].astype(np.float32))[0]
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
            agent.update(step, replay.sample(rng, cfg.batch))
        t3 = time.perf_counter()
        times["acting"] += t1 - t0
        times["environment"] += t2 - t1
        times["learning"] += t3 - t2
        bar.update(1)
    bar.close()
    return agent, times, returns


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=None, help="environment steps (default 30,000; --quick 6,000)")
    ap.add_argument("--seed", type=int, default=Config.seed)
    ap.add_argument("--mode", choices=["capture", "graph", "eager"], default="capture")
    ap.add_argument("--quick", action="store_true", help="a short run for CI (must beat random actions)")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    cfg = Config(seed=args.seed)
    if args.quick:
        cfg = Config(seed=args.seed, total_steps=6_000, learning_starts=1_000, batch=64, hidden=64)
    if args.steps is not None:
        cfg.total_steps = args.steps
    start = time.perf_counter()
    agent, times, returns = train(cfg, args.mode, progress=not args.no_progress)
    wall = time.perf_counter() - start
    episodes = 3 if args.quick else 10
    score = evaluate(agent, episodes, seed=10_000 + args.seed)
    updates = cfg.total_steps - cfg.learning_starts
    print(f"build {gg.info()['build']}, mode {args.mode}")
    print(f"{cfg.total_steps} environment steps, {updates} updates")
    print(f"evaluation: mean return {score:.1f} over {episodes} episodes (deterministic policy)")
    print(f"wall {wall:.1f} s: environment {times['environment']:.1f} s, acting {times['acting']:.1f} s, "
          f"learning {times['learning']:.1f} s ({times['learning'] / max(updates, 1) * 1e3:.2f} ms per update)")
    if args.quick and args.steps is None:
        random_return = float(np.mean(returns[:max(1, cfg.learning_starts // 200)]))
        print(f"learning signal: random-action episodes {random_return:.1f} -> evaluation {score:.1f}")
        if not score > random_return + 200:
            print("no learning signal", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
