"""PPO on gymnasium's CartPole-v1 with ggmlgrad: tanh MLP policy and value nets (64-64), GAE,
clipped objective, value and entropy terms, Adam, gradient clipping; every minibatch update is a
``gg.capture_step`` replay that gathers its rows from ``gg.Buffer`` rollout storage on the device.

    pip install -e ".[examples]"
    python examples/ppo_cartpole.py                 # 200,000 environment steps, then 20 evaluation episodes
    python examples/ppo_cartpole.py --quick         # a short run that must show a learning signal (CI)
    python examples/ppo_cartpole.py --act-mode graph   # the per-step policy forward in graph mode
    python examples/ppo_cartpole.py --mode eager    # no capture anywhere: eager updates and acting

Prints a progress bar, the evaluation return, and wall time split into environment, acting (the
policy forward at every environment step, with its CPU time per step) and learning (the minibatch
updates).
``examples/torch_ppo_cartpole.py`` is the same algorithm in PyTorch.
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass

import numpy as np

import ggmlgrad as gg


@dataclass
class Config:
    total_steps: int = 200_000
    num_envs: int = 4
    num_steps: int = 128            # per environment per rollout
    lr: float = 2.5e-4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    update_epochs: int = 10          # SB3 and CleanRL (continuous) use 10; with 4 the default seed evaluated at 421
    num_minibatches: int = 4
    clip: float = 0.2
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    seed: int = 1

    @property
    def batch(self) -> int:
        return self.num_envs * self.num_steps

    @property
    def minibatch(self) -> int:
        return self.batch // self.num_minibatches


def mlp(n_in: int, n_out: int, out_gain: float) -> gg.nn.Sequential:
    """64-64 tanh MLP, orthogonal init (sqrt 2 hidden, ``out_gain`` last), zero biases."""
    layers = [gg.nn.Linear(n_in, 64), gg.nn.Tanh(), gg.nn.Linear(64, 64), gg.nn.Tanh(), gg.nn.Linear(64, n_out)]
    for layer, gain in zip(layers[::2], (np.sqrt(2), np.sqrt(2), out_gain)):
        gg.nn.init.orthogonal_(layer.weight, gain=gain)
        gg.nn.init.zeros_(layer.bias)
    return gg.nn.Sequential(*layers)


class Agent(gg.nn.Module):
    def __init__(self, n_obs: int, n_actions: int) -> None:
        super().__init__()
        self.actor = mlp(n_obs, n_actions, 0.01)
        self.critic = mlp(n_obs, 1, 1.0)


class Rollout:
    """Device-resident rollout storage: one ``gg.Buffer`` per field, rows = batch entries."""

    def __init__(self, cfg: Config, n_obs: int) -> None:
        n = cfg.batch
        self.obs = gg.Buffer((n, n_obs))
        self.actions = gg.Buffer((n,), dtype=gg.int32)
        self.logprobs = gg.Buffer((n,))
        self.advantages = gg.Buffer((n,))
        self.returns = gg.Buffer((n,))

    def write(self, obs, actions, logprobs, advantages, returns) -> None:
        for buf, rows in ((self.obs, obs), (self.actions, actions), (self.logprobs, logprobs),
                          (self.advantages, advantages), (self.returns, returns)):
            buf.write(rows, offset=0)


def ppo_loss(agent: Agent, store: Rollout, idx, cfg: Config):
    """Clipped PPO objective + value loss + entropy bonus on the minibatch rows ``idx``."""
    obs, actions = store.obs.gather(idx), store.actions.gather(idx)
    old_logp, adv, ret = store.logprobs.gather(idx), store.advantages.gather(idx), store.returns.gather(idx)
    dist = gg.distributions.Categorical(logits=agent.actor(obs))
    logp = dist.log_prob(actions)
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    ratio = (logp - old_logp).exp()
    pg = gg.maximum(-adv * ratio, -adv * ratio.clamp(1 - cfg.clip, 1 + cfg.clip)).mean()
    v = agent.critic(obs).reshape(-1)
    v_loss = 0.5 * ((v - ret) ** 2).mean()
    return pg + cfg.vf_coef * v_loss - cfg.ent_coef * dist.entropy().mean()


def make_act(agent: Agent, mode: str):
    """obs (num_envs, 4) -> (logits, values) as NumPy; one policy+value forward per env step."""
    def forward(obs):
        return agent.actor(obs), agent.critic(obs).reshape(-1)
    if mode == "capture":
        return gg.capture(forward)

    def run(obs):
        with gg.no_grad(), gg.graph_mode(mode == "graph"):
            x = gg.tensor(obs)  # a copy: 64 bytes cost less to copy than host memory to wrap (as_tensor)
            logits, values = agent.actor(x), agent.critic(x)  # two replayed forwards (nn/replay.py)
            return logits.numpy(), values.numpy().reshape(-1)  # the values' reshape on the host: a view
    return run


def sample(logits: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Actions drawn from softmax(logits) per row, and their log-probabilities."""
    z = logits - logits.max(axis=1, keepdims=True)
    logp_all = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    u = rng.random((len(z), 1))
    actions = (np.exp(logp_all).cumsum(axis=1) < u).sum(axis=1).clip(0, z.shape[1] - 1)
    return actions.astype(np.int32), logp_all[np.arange(len(z)), actions].astype(np.float32)


def gae(rewards, values, dones, last_value, last_done, cfg: Config):
    """Generalised advantage estimates and returns, (num_steps, num_envs) each."""
    adv = np.zeros_like(rewards)
    last = np.zeros(cfg.num_envs, np.float32)
    for t in reversed(range(cfg.num_steps)):
        nonterminal = 1.0 - (last_done if t == cfg.num_steps - 1 else dones[t + 1])
        next_value = last_value if t == cfg.num_steps - 1 else values[t + 1]
        delta = rewards[t] + cfg.gamma * next_value * nonterminal - values[t]
        last = delta + cfg.gamma * cfg.gae_lambda * nonterminal * last
        adv[t] = last
    return adv, adv + values


def evaluate(act, episodes: int, seed: int) -> float:
    """Mean return of the greedy policy over ``episodes`` fresh episodes."""
    import gymnasium as gym
    env = gym.make("CartPole-v1")
    returns = []
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed + ep)
        done, total = False, 0.0
        while not done:
            logits, _ = act(obs[None].astype(np.float32))
            obs, r, term, trunc, _ = env.step(int(np.argmax(logits[0])))
            total += float(r)
            done = term or trunc
        returns.append(total)
    return float(np.mean(returns))


class Collector:
    """Vectorised CartPole environments and host buffers for one rollout of ``cfg.num_steps`` steps
    per environment; keeps the observations, episode returns and wall time across rollouts. Shared
    with ``torch_ppo_cartpole.py``: both libraries act through an ``act(obs) -> (logits, values)``
    returning NumPy arrays."""

    def __init__(self, cfg: Config) -> None:
        import gymnasium as gym
        self.cfg = cfg
        self.envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(cfg.num_envs)],
                                             autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
        self.n_obs = self.envs.single_observation_space.shape[0]
        self.n_actions = int(self.envs.single_action_space.n)
        shape = (cfg.num_steps, cfg.num_envs)
        self.obs_buf = np.zeros(shape + (self.n_obs,), np.float32)
        self.act_buf, self.logp_buf = np.zeros(shape, np.int32), np.zeros(shape, np.float32)
        self.rew_buf, self.done_buf, self.val_buf = (np.zeros(shape, np.float32) for _ in range(3))
        self.reset(cfg.seed)
        # Wall times, and the acting step's CPU time (this process's, all threads: the per-step cost
        # without the waits of a busy machine)
        self.times = {"environment": 0.0, "acting": 0.0, "acting_cpu": 0.0, "learning": 0.0}
        self.returns: list[float] = []

    def reset(self, seed: int) -> None:
        """Start fresh episodes in every environment (environment i seeded with ``seed + i``)."""
        self.obs, _ = self.envs.reset(seed=seed)
        self.done = np.zeros(self.cfg.num_envs, np.float32)
        self._running = np.zeros(self.cfg.num_envs)

    def rollout(self, act, rng: np.random.Generator):
        """One rollout; returns (obs, actions, logprobs, advantages, returns), flat over the batch."""
        cfg = self.cfg
        for t in range(cfg.num_steps):
            t0, c0 = time.perf_counter(), time.process_time()
            logits, values = act(self.obs.astype(np.float32))
            actions, logp = sample(logits, rng)
            t1 = time.perf_counter()
            self.times["acting_cpu"] += time.process_time() - c0
            self.obs_buf[t], self.done_buf[t], self.val_buf[t] = self.obs, self.done, values
            self.act_buf[t], self.logp_buf[t] = actions, logp
            self.obs, reward, term, trunc, _ = self.envs.step(actions)
            self.rew_buf[t] = reward
            self.done = (term | trunc).astype(np.float32)
            self._running += reward
            self.returns += list(self._running[self.done > 0])
            self._running[self.done > 0] = 0
            self.times["acting"] += t1 - t0
            self.times["environment"] += time.perf_counter() - t1
        _, last_value = act(self.obs.astype(np.float32))
        adv, ret = gae(self.rew_buf, self.val_buf, self.done_buf, last_value, self.done, cfg)
        return (self.obs_buf.reshape(cfg.batch, self.n_obs), self.act_buf.reshape(-1), self.logp_buf.reshape(-1),
                adv.reshape(-1), ret.reshape(-1))


def plain_update(agent: Agent, store: Rollout, opt, cfg: Config, graph: bool):
    """The minibatch update without capture: zero_grad, loss, backward, clip, Adam step, in eager
    mode or graph mode (``graph``), as torch_ppo_cartpole.py runs it."""
    params = list(agent.parameters())

    def update(idx):
        with gg.graph_mode(graph):
            opt.zero_grad()
            loss = ppo_loss(agent, store, idx, cfg)
            loss.backward()
            gg.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
            opt.step()
    return update


def learn(store: Rollout, update, batch, rng: np.random.Generator, cfg: Config) -> None:
    """``cfg.update_epochs`` epochs of minibatch updates on one rollout ``batch`` (its rows may be
    fewer than ``cfg.batch``: a distributed rollout that lost a worker)."""
    store.write(*batch)
    n = len(batch[0])
    size = n // cfg.num_minibatches
    for _ in range(cfg.update_epochs):
        perm = rng.permutation(n).astype(np.int32)
        for start in range(0, size * cfg.num_minibatches, size):
            update(perm[start:start + size])


def train(cfg: Config, act_mode: str = "capture", progress: bool = True, mode: str = "capture"):
    gg.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    col = Collector(cfg)
    agent = Agent(col.n_obs, col.n_actions)
    opt = gg.optim.Adam(agent.parameters(), lr=cfg.lr, eps=1e-5)
    store = Rollout(cfg, col.n_obs)
    if mode == "capture":
        update = gg.capture_step(lambda idx: ppo_loss(agent, store, idx, cfg), opt, max_grad_norm=cfg.max_grad_norm)
    else:
        update = plain_update(agent, store, opt, cfg, graph=mode == "graph")
    act = make_act(agent, act_mode)
    n_updates = cfg.total_steps // cfg.batch
    bar = _progress(n_updates * cfg.batch, progress)
    for u in range(n_updates):
        opt.param_groups[0]["lr"] = cfg.lr * (1.0 - u / n_updates)
        batch = col.rollout(act, rng)
        t0 = time.perf_counter()   # GAE (in rollout) is host work both libraries share: not learning
        learn(store, update, batch, rng, cfg)
        col.times["learning"] += time.perf_counter() - t0
        bar.update(cfg.batch)
        if col.returns:
            bar.set_postfix(ret=f"{np.mean(col.returns[-20:]):.0f}")
    bar.close()
    return agent, act, col.times, col.returns, n_updates


def timing_line(wall: float, times: dict, n_updates: int, cfg: Config) -> str:
    """The wall-time split, with the acting step's wall and CPU time per environment step (both examples)."""
    steps = n_updates * cfg.num_steps
    return (f"wall {wall:.1f} s: environment {times['environment']:.1f} s, acting {times['acting']:.1f} s "
            f"({times['acting'] / steps * 1e6:.0f} us per step; CPU {times['acting_cpu'] / steps * 1e6:.0f} us), "
            f"learning {times['learning']:.1f} s ({times['learning'] / n_updates * 1e3:.1f} ms per update)")


def _progress(total: int, enabled: bool, desc: str = "PPO CartPole-v1"):
    try:
        from tqdm import tqdm
    except ImportError:
        tqdm = None
    if tqdm is None or not enabled:
        class _Silent:
            def update(self, n): pass
            def set_postfix(self, **kw): pass
            def close(self): pass
        return _Silent()
    return tqdm(total=total, unit="step", desc=desc, mininterval=1.0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=Config.total_steps, help="environment steps")
    ap.add_argument("--seed", type=int, default=Config.seed)
    ap.add_argument("--quick", action="store_true", help="20,480 steps; asserts a learning signal")
    ap.add_argument("--mode", choices=["capture", "graph", "eager"], default="capture",
                    help="how the minibatch updates run (and the acting, unless --act-mode says otherwise)")
    ap.add_argument("--act-mode", choices=["capture", "graph", "eager"], default=None,
                    help="how the per-step policy forward runs (default: --mode)")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    cfg = Config(total_steps=20_480 if args.quick else args.steps, seed=args.seed)
    act_mode = args.act_mode or args.mode
    start = time.perf_counter()
    agent, act, times, returns, n_updates = train(cfg, act_mode, progress=not args.no_progress, mode=args.mode)
    wall = time.perf_counter() - start
    episodes = 5 if args.quick else 20
    score = evaluate(act, episodes, seed=10_000 + args.seed)
    print(f"build {gg.info()['build']}, vector kernels {gg.info()['vector_kernels']}, mode {args.mode}, "
          f"act mode {act_mode}")
    print(f"{n_updates * cfg.batch} environment steps, {n_updates} updates of "
          f"{cfg.update_epochs * cfg.num_minibatches} {'captured' if args.mode == 'capture' else args.mode} "
          f"minibatch steps")
    print(f"evaluation: mean return {score:.1f} over {episodes} episodes (greedy policy)")
    print(timing_line(wall, times, n_updates, cfg))
    if args.quick:
        first, last = np.mean(returns[:10]), np.mean(returns[-10:])
        print(f"learning signal: first episodes {first:.1f} -> last episodes {last:.1f}")
        if not last > 1.5 * first:
            print("no learning signal", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
