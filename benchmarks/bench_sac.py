"""One SAC update (twin-Q critic step, policy step, temperature step, soft target update) on
Pendulum-sized data: ggmlgrad captured and graph mode vs PyTorch eager vs JAX ``jit``, side by side.

    python benchmarks/bench_sac.py [--hidden 256] [--batch 256] [--threads N] [--clock cpu] [--breakdown]

Every contender starts from the same weights (copied from the ggmlgrad networks of
``examples/sac_pendulum.py``) and updates on the same minibatch; the Q-values of the first
critic are compared before timing. JAX runs the whole update as one jitted function (its best case);
an absent peer is reported as absent. ``--threads`` pins XLA too (set before JAX is imported).
``--breakdown`` also times the four recorded steps of the captured update one by one (and torch's
four parts).
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

from common import add_timing_args, compare, fmt, header, ratio, table, timing_setup, try_torch
from ggmlgrad.bench.peers import peers as find_peers

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))

import ggmlgrad as gg  # noqa: E402
from sac_pendulum import SAC, Config  # noqa: E402

N_OBS, N_ACT = 3, 1
LOW, HIGH = np.array([-2.0], np.float32), np.array([2.0], np.float32)


def make_batch(batch: int, seed: int = 0) -> tuple:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((batch, N_OBS)).astype(np.float32), rng.uniform(-2, 2, (batch, N_ACT)).astype(np.float32),
            rng.standard_normal((batch, 1)).astype(np.float32), rng.standard_normal((batch, N_OBS)).astype(np.float32),
            (rng.random((batch, 1)) < 0.05).astype(np.float32))


def linear_weights(module) -> list:
    """(weight, bias) NumPy pairs of the Linear layers of a ggmlgrad module, in order."""
    return [(m.weight.detach().numpy().copy(), m.bias.detach().numpy().copy())
            for m in module.modules() if isinstance(m, gg.nn.Linear)]


def gg_update(mode: str, cfg: Config, batch: tuple):
    gg.manual_seed(0)
    agent = SAC(cfg, N_OBS, N_ACT, LOW, HIGH, mode)

    def step():
        agent.update(0, batch)                  # step 0: the policy and temperature steps run too
    return agent, step


def gg_parts(agent: SAC, batch: tuple) -> dict:
    """The captured update's four recorded steps as separate calls (what ``agent.update`` runs)."""
    obs = batch[0]
    return {"q_step": lambda: agent.q_step(*batch), "actor_step": lambda: agent.actor_step(obs),
            "alpha_step": lambda: agent.alpha_step(obs), "soft_update": agent.soft_update}


def torch_update(cfg: Config, agent: SAC, batch: tuple):
    torch = try_torch()
    if torch is None:
        return None, None
    import torch_sac_pendulum as T
    nets = {"actor": T.Actor(N_OBS, N_ACT, cfg.hidden, LOW, HIGH), "qf1": T.QNetwork(N_OBS, N_ACT, cfg.hidden),
            "qf2": T.QNetwork(N_OBS, N_ACT, cfg.hidden), "qf1_t": T.QNetwork(N_OBS, N_ACT, cfg.hidden),
            "qf2_t": T.QNetwork(N_OBS, N_ACT, cfg.hidden)}
    sources = {"actor": agent.actor, "qf1": agent.qf1, "qf2": agent.qf2, "qf1_t": agent.qf1_target,
               "qf2_t": agent.qf2_target}
    with torch.no_grad():
        for k, net in nets.items():
            layers = [m for m in net.modules() if isinstance(m, torch.nn.Linear)]
            for layer, (w, b) in zip(layers, linear_weights(sources[k])):
                layer.weight.copy_(torch.from_numpy(w))
                layer.bias.copy_(torch.from_numpy(b))
    actor, qf1, qf2, qf1_t, qf2_t = (nets[k] for k in ("actor", "qf1", "qf2", "qf1_t", "qf2_t"))
    q_opt = torch.optim.Adam(list(qf1.parameters()) + list(qf2.parameters()), lr=cfg.q_lr)
    actor_opt = torch.optim.Adam(actor.parameters(), lr=cfg.policy_lr)
    log_alpha = torch.zeros(1, requires_grad=True)
    alpha_opt = torch.optim.Adam([log_alpha], lr=cfg.q_lr)
    b_obs, b_act, b_rew, b_next, b_done = (torch.from_numpy(a) for a in batch)

    def q_part():
        alpha = log_alpha.exp().detach()
        with torch.no_grad():
            na, nlp, _ = actor.sample(b_next)
            target = b_rew + (1 - b_done) * cfg.gamma * (torch.min(qf1_t(b_next, na), qf2_t(b_next, na)) - alpha * nlp)
        q_loss = ((qf1(b_obs, b_act) - target) ** 2).mean() + ((qf2(b_obs, b_act) - target) ** 2).mean()
        q_opt.zero_grad()
        q_loss.backward()
        q_opt.step()

    def actor_part():
        a, lp, _ = actor.sample(b_obs)
        actor_loss = (log_alpha.exp().detach() * lp - torch.min(qf1(b_obs, a), qf2(b_obs, a))).mean()
        actor_opt.zero_grad()
        actor_loss.backward()
        actor_opt.step()

    def alpha_part():
        with torch.no_grad():
            _, lp, _ = actor.sample(b_obs)
        alpha_loss = (-log_alpha.exp() * (lp - N_ACT)).mean()
        alpha_opt.zero_grad()
        alpha_loss.backward()
        alpha_opt.step()

    def soft_part():
        with torch.no_grad():
            for net, tnet in ((qf1, qf1_t), (qf2, qf2_t)):
                for p, tp in zip(net.parameters(), tnet.parameters()):
                    tp.data.copy_(cfg.tau * p.data + (1 - cfg.tau) * tp.data)

    def step():
        q_part()
        actor_part()
        alpha_part()
        soft_part()
    step.parts = {"q_step": q_part, "actor_step": actor_part, "alpha_step": alpha_part, "soft_update": soft_part}

    def q_values():
        with torch.no_grad():
            return qf1(b_obs, b_act).numpy()
    return step, q_values


def jax_update(cfg: Config, agent: SAC, batch: tuple):
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None, None

    def mlp(ps, x):
        for i, (w, b) in enumerate(ps):
            x = x @ w.T + b
            if i < len(ps) - 1:
                x = jax.nn.relu(x)
        return x

    def actor_sample(ps, obs, key):
        h = obs
        for w, b in ps[:2]:
            h = jax.nn.relu(h @ w.T + b)
        mean = h @ ps[2][0].T + ps[2][1]
        log_std = jnp.tanh(h @ ps[3][0].T + ps[3][1])
        log_std = -5.0 + 0.5 * 7.0 * (log_std + 1)
        std = jnp.exp(log_std)
        u = mean + std * jax.random.normal(key, mean.shape)
        y = jnp.tanh(u)
        logp = -0.5 * ((u - mean) / std) ** 2 - log_std - 0.5 * jnp.log(2 * jnp.pi) - jnp.log(2.0 * (1 - y * y) + 1e-6)
        return 2.0 * y, logp.sum(1, keepdims=True)

    def q(ps, o, a):
        return mlp(ps, jnp.concatenate([o, a], 1))

    def adam(p, g, m, v, t, lr):
        m = jax.tree_util.tree_map(lambda m, g: 0.9 * m + 0.1 * g, m, g)
        v = jax.tree_util.tree_map(lambda v, g: 0.999 * v + 0.001 * g * g, v, g)
        p = jax.tree_util.tree_map(lambda p, m, v: p - lr * (m / (1 - 0.9 ** t)) / (jnp.sqrt(v / (1 - 0.999 ** t)) + 1e-8),
                                   p, m, v)
        return p, m, v

    # the update's four parts, each a function of the whole state; update() runs them in order
    def q_part(state, batch, key):
        (qp, qt, ap, la), (qm, qv, am, av, lm, lv), t = state
        obs, act, rew, nxt, done = batch
        na, nlp = actor_sample(ap, nxt, key)
        target = rew + (1 - done) * cfg.gamma * (jnp.minimum(q(qt[0], nxt, na), q(qt[1], nxt, na)) - jnp.exp(la) * nlp)
        target = jax.lax.stop_gradient(target)

        def q_loss(qp):
            return ((q(qp[0], obs, act) - target) ** 2).mean() + ((q(qp[1], obs, act) - target) ** 2).mean()
        qp, qm, qv = adam(qp, jax.grad(q_loss)(qp), qm, qv, t, cfg.q_lr)
        return ((qp, qt, ap, la), (qm, qv, am, av, lm, lv), t)

    def actor_part(state, obs, key):
        (qp, qt, ap, la), (qm, qv, am, av, lm, lv), t = state
        alpha = jnp.exp(la)

        def actor_loss(ap):
            a, lp = actor_sample(ap, obs, key)
            return (alpha * lp - jnp.minimum(q(qp[0], obs, a), q(qp[1], obs, a))).mean()
        ap, am, av = adam(ap, jax.grad(actor_loss)(ap), am, av, t, cfg.policy_lr)
        return ((qp, qt, ap, la), (qm, qv, am, av, lm, lv), t)

    def alpha_part(state, obs, key):
        (qp, qt, ap, la), (qm, qv, am, av, lm, lv), t = state
        _, lp = actor_sample(ap, obs, key)
        la, lm, lv = adam(la, jax.grad(lambda la: (-jnp.exp(la) * (lp - N_ACT)).mean())(la), lm, lv, t, cfg.q_lr)
        return ((qp, qt, ap, la), (qm, qv, am, av, lm, lv), t)

    def soft_part(state):
        (qp, qt, ap, la), opt_state, t = state
        qt = jax.tree_util.tree_map(lambda p, tp: cfg.tau * p + (1 - cfg.tau) * tp, qp, qt)
        return ((qp, qt, ap, la), opt_state, t)

    def update(state, batch, key):
        k1, k2, k3 = jax.random.split(key, 3)
        state = q_part(state, batch, k1)
        state = actor_part(state, batch[0], k2)
        state = alpha_part(state, batch[0], k3)
        state = soft_part(state)
        return state[:2] + (state[2] + 1,)

    to_j = lambda pairs: [(jnp.asarray(w), jnp.asarray(b)) for w, b in pairs]  # noqa: E731
    qp = [to_j(linear_weights(agent.qf1)), to_j(linear_weights(agent.qf2))]
    qt = [to_j(linear_weights(agent.qf1_target)), to_j(linear_weights(agent.qf2_target))]
    ap = to_j(linear_weights(agent.actor))
    zeros = lambda tree: jax.tree_util.tree_map(jnp.zeros_like, tree)  # noqa: E731
    la = jnp.zeros(1)
    state = [((qp, qt, ap, la), (zeros(qp), zeros(qp), zeros(ap), zeros(ap), jnp.zeros(1), jnp.zeros(1)), 1)]
    jb = tuple(jnp.asarray(a) for a in batch)
    jitted = jax.jit(update)
    key = [jax.random.PRNGKey(0)]

    def step():
        key[0], sub = jax.random.split(key[0])
        state[0] = jitted(state[0], jb, sub)
        jax.block_until_ready(state[0])

    # --breakdown: each part jitted on its own (no fusion across parts; the whole update is `step`)
    jparts = {"q_step": (jax.jit(q_part), lambda: (jb, key[0])), "actor_step": (jax.jit(actor_part), lambda: (jb[0], key[0])),
              "alpha_step": (jax.jit(alpha_part), lambda: (jb[0], key[0])), "soft_update": (jax.jit(soft_part), tuple)}

    def part(fn, args):
        def run():
            state[0] = fn(state[0], *args())
            jax.block_until_ready(state[0])
        return run
    step.parts = {k: part(fn, args) for k, (fn, args) in jparts.items()}

    def q_values():
        return np.asarray(q(qp[0], jb[0], jb[1]))
    return step, q_values


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--breakdown", action="store_true", help="also time the captured update's four steps")
    add_timing_args(ap, number=20, number_help="updates per timed block")
    args = ap.parse_args(argv)
    timing_setup(args, gg)
    found = find_peers(args.threads)            # XLA_FLAGS for --threads, before JAX is imported
    # policy_frequency 1: one policy and one temperature step per update, as the torch and JAX peers
    # do (the example's default 2 runs each twice on a policy step, TD3-style)
    cfg = Config(hidden=args.hidden, batch=args.batch, policy_frequency=1)
    batch = make_batch(args.batch)
    agent, captured = gg_update("capture", cfg, batch)
    _, graph = gg_update("graph", cfg, batch)
    with gg.no_grad():
        want = agent.qf1(gg.tensor(batch[0]), gg.tensor(batch[1])).numpy()
    t_step, t_q = torch_update(cfg, agent, batch)
    j_step, j_q = jax_update(cfg, agent, batch)
    for name, qv in (("torch", t_q), ("jax", j_q)):
        if qv is not None and not np.allclose(qv(), want, rtol=1e-4, atol=1e-4):
            raise SystemExit(f"{name}'s Q-values differ from ggmlgrad's on the same weights: not timed")
    res = compare({"capture": captured, "graph": graph, "torch": t_step, "jax": j_step}, args.number, args.repeat,
                  clock=args.clock)
    jv = (f"jax {found['jax'].__version__} (XLA_FLAGS {os.environ.get('XLA_FLAGS') or 'default'})"
          if found["jax"] is not None else "jax not installed")
    print(header(gg) + f" | {jv} | clock {args.clock}")
    print(f"SAC update, hidden {args.hidden}, batch {args.batch} (critic + policy + temperature + soft target)")
    fastest = min(v for k, v in res.items() if k in ("torch", "jax") and v is not None) \
        if any(res[k] for k in ("torch", "jax")) else None
    rows = [[k, fmt(v) if v is not None else "absent", ratio(v, res["torch"]), ratio(v, res["jax"]), ratio(v, fastest)]
            for k, v in res.items()]
    print(table(["contender", "median per update", "vs torch", "vs jax", "vs faster peer"], rows))
    if args.breakdown:
        print_breakdown(agent, batch, t_step, j_step, args)
    return 0


def print_breakdown(agent: SAC, batch: tuple, t_step, j_step, args) -> None:
    """Median time of each recorded step of the captured update and of the peers' matching parts."""
    parts = gg_parts(agent, batch)
    peers = {"torch": getattr(t_step, "parts", {}), "jax": getattr(j_step, "parts", {})}
    fns = {f"gg {k}": f for k, f in parts.items()}
    for name, ps in peers.items():
        fns.update({f"{name} {k}": f for k, f in ps.items()})
    res = compare(fns, args.number, args.repeat, clock=args.clock)
    rows = [[k, fmt(res[f"gg {k}"]), fmt(res.get(f"torch {k}")), fmt(res.get(f"jax {k}")),
             ratio(res[f"gg {k}"], res.get(f"torch {k}")), ratio(res[f"gg {k}"], res.get(f"jax {k}"))] for k in parts]
    print("\nCaptured update, step by step (JAX: each part jitted on its own):")
    print(table(["recorded step", "gg capture", "torch eager", "jax jit", "gg/torch", "gg/jax"], rows))


if __name__ == "__main__":
    sys.exit(main())
