"""Sequence-model training steps: ggmlgrad graph mode and capture vs PyTorch eager, in one run.

    python benchmarks/bench_seq.py                       # both workloads, wall clock
    python benchmarks/bench_seq.py --clock cpu           # one thread, process CPU time (busy machines)
    python benchmarks/bench_seq.py --profile lstm        # cProfile of one graph-mode LSTM step
    python benchmarks/bench_seq.py --threads 1 --clock cpu   # XLA pinned to one thread too

Workloads (issue 24), each a whole training step (forward, loss, backward, Adam) on a fixed batch:
- ``lstm``: ``nn.LSTM(128, 128)`` over a sequence of 32, batch 32, linear head on the last hidden
  state, cross-entropy over 10 classes;
- ``encoder``: ``nn.TransformerEncoderLayer(d_model=128, nhead=4, dim_feedforward=512,
  dropout=0.0, batch_first=True)`` on (16, 64, 128), mean-squared output as the loss.
Peers: torch eager and JAX ``jit`` (the whole step, Adam written by hand, as one jitted function;
the LSTM's time loop is a ``jax.lax.scan``). Every contender starts from the same weights (the
ggmlgrad model's, seeded) and the same batch; the torch and JAX losses of the first two steps (the
second checks the gradient and the Adam update) must match ggmlgrad graph mode's within float32
tolerance before anything is timed, else that peer is reported as not timed. An absent peer is
reported as absent.
Goals (issue 24): captured <= 0.8x the faster peer, graph mode <= 1.0x.
"""
from __future__ import annotations

import argparse
import os

import numpy as np

from common import add_timing_args, compare, fmt, header, profile, ratio, table, timing_setup, try_torch

import ggmlgrad as gg
from ggmlgrad.bench.peers import peers as find_peers

SEQ, BATCH, HIDDEN, CLASSES = 32, 32, 128, 10
D_MODEL, HEADS, FF, T_SEQ, T_BATCH = 128, 4, 512, 64, 16


def _lstm_data():
    rng = np.random.default_rng(0)
    return (rng.standard_normal((BATCH, SEQ, HIDDEN), dtype=np.float32),
            rng.integers(0, CLASSES, BATCH).astype(np.int32))


def _enc_data():
    return np.random.default_rng(1).standard_normal((T_BATCH, T_SEQ, D_MODEL), dtype=np.float32)


# ---------------------------------------------------------------- ggmlgrad
def gg_lstm():
    gg.manual_seed(0)                       # every build (and so every contender) gets the same weights
    lstm, head = gg.nn.LSTM(HIDDEN, HIDDEN, batch_first=True), gg.nn.Linear(HIDDEN, CLASSES)
    opt = gg.optim.Adam(list(lstm.parameters()) + list(head.parameters()), lr=1e-3)

    def forward(xb):
        _, (h, _) = lstm(xb)
        return head(h[-1])
    return (lambda xb, yb: gg.nn.functional.cross_entropy(forward(xb), yb)), opt, _lstm_data(), \
        {"lstm": lstm, "head": head}, forward


def gg_encoder():
    gg.manual_seed(0)
    layer = gg.nn.TransformerEncoderLayer(D_MODEL, HEADS, FF, dropout=0.0, batch_first=True)
    opt = gg.optim.Adam(layer.parameters(), lr=1e-3)
    return (lambda xb: layer(xb).square().mean()), opt, (_enc_data(),), {"layer": layer}, layer


def initial_weights(build) -> dict:
    """``{"module.param": ndarray}`` of a fresh build: the weights every contender starts from."""
    modules = build()[3]
    return {f"{m}.{k}": v.detach().numpy().copy() for m, mod in modules.items() for k, v in mod.state_dict().items()}


def _grads_of(modules: dict) -> dict:
    """``{"module.param": ndarray}`` of the gradients the last backward left (ggmlgrad or torch modules)."""
    return {f"{m}.{k}": np.array(p.grad.detach().numpy()) for m, mod in modules.items()
            for k, p in mod.named_parameters()}


def graph_step(build):
    loss_fn, opt, data, modules, forward = build()
    tensors = [gg.tensor(a) for a in data]

    def step():
        with gg.graph_mode(True):
            opt.zero_grad()
            loss = loss_fn(*tensors)
            loss.backward()
            opt.step()
        return loss
    step.grads = lambda: _grads_of(modules)
    step.output = lambda: _no_grad_numpy(gg, forward, tensors[0])
    return step


def _no_grad_numpy(framework, forward, x) -> np.ndarray:
    with framework.no_grad():
        return np.array(forward(x).numpy())


def captured_step(build):
    loss_fn, opt, data, _, _ = build()
    step = gg.capture_step(loss_fn, opt)
    return lambda: step(*data)


# ---------------------------------------------------------------- torch
def _load(torch, modules: dict, weights: dict) -> None:
    for name, mod in modules.items():
        mod.load_state_dict({k.split(".", 1)[1]: torch.from_numpy(v) for k, v in weights.items()
                             if k.split(".", 1)[0] == name})


def torch_lstm(torch, weights):
    lstm, head = torch.nn.LSTM(HIDDEN, HIDDEN, batch_first=True), torch.nn.Linear(HIDDEN, CLASSES)
    _load(torch, modules := {"lstm": lstm, "head": head}, weights)
    opt = torch.optim.Adam(list(lstm.parameters()) + list(head.parameters()), lr=1e-3)
    x, y = _lstm_data()
    tx, ty = torch.from_numpy(x), torch.from_numpy(y.astype(np.int64))

    def forward(x):
        _, (h, _) = lstm(x)
        return head(h[-1])

    def step():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(forward(tx), ty)
        loss.backward()
        opt.step()
        return loss
    step.grads = lambda: _grads_of(modules)
    step.output = lambda: _no_grad_numpy(torch, forward, tx)
    return step


def torch_encoder(torch, weights):
    layer = torch.nn.TransformerEncoderLayer(D_MODEL, HEADS, FF, dropout=0.0, batch_first=True)
    _load(torch, modules := {"layer": layer}, weights)
    opt = torch.optim.Adam(layer.parameters(), lr=1e-3)
    tx = torch.from_numpy(_enc_data())

    def step():
        opt.zero_grad()
        loss = layer(tx).square().mean()
        loss.backward()
        opt.step()
        return loss
    step.grads = lambda: _grads_of(modules)
    step.output = lambda: _no_grad_numpy(torch, layer, tx)
    return step


# ---------------------------------------------------------------- JAX jit
def _jax_adam(jax, lr: float = 1e-3, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8):
    """torch.optim.Adam's update (no weight decay) on a dict of arrays; ``t`` is the 1-based step."""
    jnp = jax.numpy

    def update(params, grads, m, v, t):
        m = {k: b1 * m[k] + (1 - b1) * grads[k] for k in params}
        v = {k: b2 * v[k] + (1 - b2) * grads[k] * grads[k] for k in params}
        c1, c2 = 1 - b1 ** t, 1 - b2 ** t
        params = {k: params[k] - lr * (m[k] / c1) / (jnp.sqrt(v[k] / c2) + eps) for k in params}
        return params, m, v
    return update


def _jax_step(jax, forward, loss_of_output, weights: dict, data: tuple):
    """One jitted function: forward, loss, gradient and Adam update; the step blocks until the new
    weights exist. ``forward(params, x)`` is the model, ``loss_of_output(out, *rest_of_batch)`` its loss."""
    jnp = jax.numpy
    adam = _jax_adam(jax)

    def loss_fn(p, x, *rest):
        return loss_of_output(forward(p, x), *rest)

    def train_step(state, *batch):
        params, m, v, t = state
        loss, grads = jax.value_and_grad(loss_fn)(params, *batch)
        t = t + 1.0
        params, m, v = adam(params, grads, m, v, t)
        return (params, m, v, t), loss

    jitted = jax.jit(train_step)
    params = {k: jnp.asarray(w) for k, w in weights.items()}
    zeros = {k: jnp.zeros_like(w) for k, w in params.items()}
    state = [(params, zeros, dict(zeros), jnp.zeros((), jnp.float32))]
    batch = tuple(jnp.asarray(a) for a in data)

    def step():
        state[0], loss = jitted(state[0], *batch)
        jax.block_until_ready((state[0], loss))
        return loss
    # validation only (not timed): the gradients the first step used, at the initial weights
    step.grads = lambda: {k: np.asarray(g) for k, g in jax.jit(jax.grad(loss_fn))(params, *batch).items()}
    step.output = lambda: np.asarray(jax.jit(forward)(params, batch[0]))
    step.forward, step.loss_fn, step.params, step.batch = forward, loss_fn, params, batch   # for breakdowns
    return step


def jax_lstm(jax, weights):
    jnp = jax.numpy

    def forward(p, x):
        # torch's gate order (input, forget, cell, output); the input projection of all steps at once
        xs = jnp.swapaxes(x @ p["lstm.weight_ih_l0"].T + p["lstm.bias_ih_l0"] + p["lstm.bias_hh_l0"], 0, 1)
        w_hh = p["lstm.weight_hh_l0"].T

        def cell(carry, xg):
            h, c = carry
            i, f, g, o = jnp.split(xg + h @ w_hh, 4, axis=-1)
            c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
            h = jax.nn.sigmoid(o) * jnp.tanh(c)
            return (h, c), None
        h0 = jnp.zeros((x.shape[0], HIDDEN), x.dtype)
        (h, _), _ = jax.lax.scan(cell, (h0, h0), xs)
        return h @ p["head.weight"].T + p["head.bias"]

    def cross_entropy(logits, y):
        return -jnp.take_along_axis(jax.nn.log_softmax(logits, axis=-1), y[:, None], axis=1).mean()
    return _jax_step(jax, forward, cross_entropy, weights, _lstm_data())


def jax_encoder(jax, weights):
    jnp = jax.numpy

    def layer_norm(x, w, b, eps=1e-5):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / jnp.sqrt(var + eps) * w + b

    def forward(p, x):
        # post-norm (norm_first=False), relu, dropout 0: torch.nn.TransformerEncoderLayer's defaults
        b, s, d = x.shape
        dh = d // HEADS
        qkv = x @ p["layer.self_attn.in_proj_weight"].T + p["layer.self_attn.in_proj_bias"]
        q, k, v = (t.reshape(b, s, HEADS, dh).transpose(0, 2, 1, 3) for t in jnp.split(qkv, 3, axis=-1))
        att = jax.nn.softmax(q @ k.transpose(0, 1, 3, 2) / np.sqrt(dh), axis=-1) @ v
        att = att.transpose(0, 2, 1, 3).reshape(b, s, d)
        sa = att @ p["layer.self_attn.out_proj.weight"].T + p["layer.self_attn.out_proj.bias"]
        x = layer_norm(x + sa, p["layer.norm1.weight"], p["layer.norm1.bias"])
        ff = jax.nn.relu(x @ p["layer.linear1.weight"].T + p["layer.linear1.bias"])
        ff = ff @ p["layer.linear2.weight"].T + p["layer.linear2.bias"]
        return layer_norm(x + ff, p["layer.norm2.weight"], p["layer.norm2.bias"])
    return _jax_step(jax, forward, lambda out: jnp.square(out).mean(), weights, (_enc_data(),))


WORKLOADS = {"lstm": (gg_lstm, torch_lstm, jax_lstm, "LSTM 128 seq 32 b32"),
             "encoder": (gg_encoder, torch_encoder, jax_encoder, "EncoderLayer 128/4h seq 64 b16")}


def first_steps(step) -> tuple[np.ndarray, list[float], dict]:
    """A fresh step function's model output at the initial weights, its first two losses (the second
    follows an Adam update) and the first step's gradients. The output is checked too: the encoder's
    loss, the mean square of a layer norm's output, is nearly 1 whatever the attention weights are."""
    out = step.output()
    first = _as_float(step())
    grads = step.grads()
    return out, [first, _as_float(step())], grads


def _grads_match(got: dict, want: dict) -> list[str]:
    """Names of the gradients that differ beyond float32 accumulation (tolerance scaled per tensor)."""
    return [k for k, w in want.items()
            if k not in got or not np.allclose(got[k], w, rtol=1e-3, atol=1e-3 * float(np.abs(w).max()) + 1e-8)]


def _as_float(loss) -> float:
    if hasattr(loss, "detach"):
        loss = loss.detach()
    return float(np.asarray(loss.numpy() if hasattr(loss, "numpy") else loss))


def validated(name: str, peer_build, want: tuple, rtol: float = 1e-4, atol: float = 1e-5):
    """A fresh peer step function if its initial output, first two losses and first gradients match
    ``want`` (ggmlgrad graph mode's :func:`first_steps`), else None (not timed)."""
    out, losses, grads = first_steps(peer_build())
    bad = _grads_match(grads, want[2])
    out_err = float(np.abs(out - want[0]).max()) if out.shape == want[0].shape else float("inf")
    if out_err > 1e-4 * float(np.abs(want[0]).max()) or not np.allclose(losses, want[1], rtol=rtol, atol=atol) or bad:
        print(f"{name}: output max error {out_err:.3g}, losses {losses} (ggmlgrad graph mode {want[1]}), "
              f"gradients differing: {bad or 'none'}, on the same weights and data: not timed")
        return None
    return peer_build()


def computes_per_step(step) -> int:
    step()
    gg.reset_counters()
    step()
    return gg.counters()["computes"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_timing_args(ap, 5, "steps per timed block")
    ap.add_argument("--profile", choices=sorted(WORKLOADS), help="cProfile graph-mode steps of one workload")
    ap.add_argument("--only", choices=sorted(WORKLOADS), help="run one workload")
    args = ap.parse_args()
    timing_setup(args, gg)
    found = find_peers(args.threads)        # sets XLA_FLAGS for --threads before JAX is imported
    torch, jax = found["torch"], found["jax"]
    jv = (f"jax {jax.__version__} (XLA_FLAGS {os.environ.get('XLA_FLAGS') or 'default'})" if jax
          else "jax not installed")
    print(header(gg) + f" | {jv} | clock {args.clock}")
    rows = []
    for name, (build, tbuild, jbuild, label) in WORKLOADS.items():
        if args.only and name != args.only:
            continue
        weights = initial_weights(build)
        want = first_steps(graph_step(build))
        fns = {"graph": graph_step(build), "capture": captured_step(build),
               "torch": validated("torch", lambda: tbuild(torch, weights), want) if torch else None,
               "jax": validated("jax", lambda: jbuild(jax, weights), want) if jax else None}
        m = compare(fns, args.number, args.repeat, warmup=3, clock=args.clock)
        absent = {"torch": "absent" if torch is None else "not timed", "jax": "absent" if jax is None else "not timed"}
        peer = lambda k: fmt(m[k]) if m[k] is not None else absent[k]  # noqa: E731
        faster = min((m[k] for k in ("torch", "jax") if m[k] is not None), default=None)
        rows.append([label, fmt(m["graph"]), fmt(m["capture"]), peer("torch"), peer("jax"),
                     ratio(m["graph"], faster), ratio(m["capture"], faster),
                     f"{computes_per_step(graph_step(build))} / {computes_per_step(captured_step(build))}"])
    print(table(["Adam step (median)", "gg graph", "gg capture", "torch eager", "jax jit", "graph/faster",
                 "capture/faster", "computes g/c"], rows))
    if args.profile:
        step = graph_step(WORKLOADS[args.profile][0])
        for _ in range(3):
            step()
        print(f"\ncProfile, ggmlgrad graph-mode {args.profile} step, per step:")
        print(profile(step, 10))


if __name__ == "__main__":
    main()
