"""Captured training step and captured forward vs JAX jit and PyTorch eager (when installed).

    PYTHONPATH=src python benchmarks/bench_capture.py [--rounds 3] [--repeat 3] [--breakdown]

Workloads (issues 5 and 14): Adam training steps of MLPs 4-32-32-2 (batch 32), 64-64-64-8 (batch
256), 784-256-10 (batch 128), and a batch-1 forward of 784-256-10, each with ReLU, tanh and GELU
between the layers (``--activations`` picks some; ``gelu_tanh`` adds GELU's tanh approximation).
Each framework is measured in its own process, the processes taking turns for ``--rounds``
rounds; prints the median over rounds of the time per call (in each process the median over
``--repeat`` blocks of the per-call median), the ratio ggmlgrad / JAX jit and that ratio's range
over the rounds.
Goals: <= 0.6x, 0.8x, 1.0x, 0.8x of JAX jit. ``--breakdown`` times each stage of the replay path.

Every side gets the same work and its idiomatic fast path: inputs already where the computation
needs them (ggmlgrad tensors, JAX device arrays, torch tensors), the loss read back to the host
(``np.asarray``/``.item()``), JAX with synchronous CPU dispatch, a jitted step whose optimizer is
optax's Adam with the parameter and optimizer state donated.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

import ggmlgrad as gg

CONFIGS = [("4-32-32-2", (4, 32, 32, 2), 32), ("64-64-64-8", (64, 64, 64, 8), 256),
           ("784-256-10", (784, 256, 10), 128)]
LR = 1e-3
ACTIVATIONS = ("relu", "tanh", "gelu", "gelu_tanh")   # gelu: the exact (erf) form, torch's and JAX's default
DEFAULT_ACTIVATIONS = ("relu", "tanh", "gelu")


def _init(sizes, seed=0):
    r = np.random.default_rng(seed)
    out = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        bound = 1 / np.sqrt(a)
        out.append((r.uniform(-bound, bound, (b, a)).astype(np.float32), r.uniform(-bound, bound, b).astype(np.float32)))
    return out


def _data(sizes, batch, seed=1):
    r = np.random.default_rng(seed)
    x = r.standard_normal((batch, sizes[0])).astype(np.float32)
    y = r.integers(0, sizes[-1], batch).astype(np.int32)
    return x, np.eye(sizes[-1], dtype=np.float32)[y]


def _time(fn, steps: int, repeat: int, block_s: float = 0.8) -> float:
    """Median µs per call: the median over ``repeat`` blocks of each block's per-call median; a
    block lasts about ``block_s`` (at most ``steps`` calls)."""
    t0 = time.perf_counter()
    for _ in range(10):
        fn()
    per_call = (time.perf_counter() - t0) / 10
    count = max(5, min(steps, int(block_s / max(per_call, 1e-7))))
    meds = []
    for _ in range(repeat):
        ts = []
        for _ in range(count):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        meds.append(statistics.median(ts))
    return statistics.median(meds) * 1e6


# ---------------------------------------------------------------------------- ggmlgrad
def _gg_model(sizes):
    ps = []
    for w, b in _init(sizes):
        ps += [gg.tensor(w, requires_grad=True), gg.tensor(b, requires_grad=True)]
    return ps


def _gg_act(h, act):
    F = gg.nn.functional
    return {"relu": gg.relu, "tanh": gg.tanh, "gelu": F.gelu,
            "gelu_tanh": lambda t: F.gelu(t, approximate="tanh")}[act](h)


def _gg_forward(ps, x, act="relu"):
    h = x
    for i in range(0, len(ps), 2):
        h = gg.linear(h, ps[i], ps[i + 1])
        if i < len(ps) - 2:
            h = _gg_act(h, act)
    return h


def _gg_loss(ps, x, y, act="relu"):
    # softmax cross-entropy with one-hot targets, from elementary ops (same math as the peers)
    logits = _gg_forward(ps, x, act)
    return -(gg.log_softmax(logits, axis=-1) * y).sum() * (1.0 / x.shape[0])


def gg_step(sizes, batch, act="relu"):
    ps = _gg_model(sizes)
    opt = gg.optim.Adam(ps, lr=LR)
    step = gg.capture_step(lambda x, y: _gg_loss(ps, x, y, act), opt)
    x, y = (gg.tensor(a) for a in _data(sizes, batch))      # inputs already on the device
    return (lambda: step(x, y)), step, (x, y)


def gg_forward(sizes, act="relu"):
    ps = _gg_model(sizes)
    f = gg.capture(lambda x: _gg_forward(ps, x, act))
    x = gg.tensor(_data(sizes, 1)[0])
    return lambda: f(x)


# ---------------------------------------------------------------------------- JAX
def _jax():
    import jax
    jax.config.update("jax_cpu_enable_async_dispatch", False)   # its fast path for small steps
    return jax


def jax_step(sizes, batch, act="relu"):
    jax = _jax()
    import jax.numpy as jnp
    import optax

    params = [(jnp.asarray(w), jnp.asarray(b)) for w, b in _init(sizes)]
    tx = optax.adam(LR)

    def loss(p, x, y):
        return -(jax.nn.log_softmax(_jax_mlp(p, x, act)) * y).sum() / x.shape[0]

    def step(p, opt_state, x, y):
        l, g = jax.value_and_grad(loss)(p, x, y)
        updates, opt_state = tx.update(g, opt_state, p)
        return l, optax.apply_updates(p, updates), opt_state

    step = jax.jit(step, donate_argnums=(0, 1))
    state = [params, tx.init(params)]
    x, y = (jax.device_put(a) for a in _data(sizes, batch))

    def run():
        l, state[0], state[1] = step(state[0], state[1], x, y)
        return np.asarray(l)
    return run


def _jax_mlp(p, x, act="relu"):
    """The benchmark MLP's forward in JAX (``act`` between layers; GELU exact, as torch's default)."""
    import jax
    f = {"relu": jax.nn.relu, "tanh": jax.numpy.tanh, "gelu": lambda h: jax.nn.gelu(h, approximate=False),
         "gelu_tanh": lambda h: jax.nn.gelu(h, approximate=True)}[act]
    h = x
    for i, (w, b) in enumerate(p):
        h = h @ w.T + b
        if i < len(p) - 1:
            h = f(h)
    return h


def jax_forward(sizes, act="relu"):
    jax = _jax()
    import jax.numpy as jnp
    params = [(jnp.asarray(w), jnp.asarray(b)) for w, b in _init(sizes)]
    fwd = jax.jit(lambda p, x: _jax_mlp(p, x, act))
    x = jax.device_put(_data(sizes, 1)[0])
    return lambda: np.asarray(fwd(params, x))


# ---------------------------------------------------------------------------- PyTorch
def _torch_act(torch, act):
    return {"relu": torch.nn.ReLU(), "tanh": torch.nn.Tanh(), "gelu": torch.nn.GELU(),
            "gelu_tanh": torch.nn.GELU(approximate="tanh")}[act]


def torch_step(sizes, batch, act="relu"):
    import torch
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    layers = []
    for i, (w, b) in enumerate(_init(sizes)):
        lin = torch.nn.Linear(w.shape[1], w.shape[0])
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(w))
            lin.bias.copy_(torch.from_numpy(b))
        layers.append(lin)
        if i < len(sizes) - 2:
            layers.append(_torch_act(torch, act))
    model = torch.nn.Sequential(*layers)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    x, y = _data(sizes, batch)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)

    def run():
        opt.zero_grad()
        loss = -(torch.log_softmax(model(xt), -1) * yt).sum() / x.shape[0]
        loss.backward()
        opt.step()
        return loss.item()
    return run


def torch_forward(sizes, act="relu"):
    import torch
    layers = []
    for i, (w, b) in enumerate(_init(sizes)):
        lin = torch.nn.Linear(w.shape[1], w.shape[0])
        layers.append(lin)
        if i < len(sizes) - 2:
            layers.append(_torch_act(torch, act))
    model = torch.nn.Sequential(*layers)
    x, _ = _data(sizes, 1)
    xt = torch.from_numpy(x)

    def run():
        with torch.no_grad():
            return model(xt).numpy()
    return run


def _maybe(make, *a):
    try:
        return make(*a)
    except ImportError:
        return None


# ---------------------------------------------------------------------------- replay breakdown
def breakdown(step, args, n: int = 2000, budget_s: float = 4.0) -> dict[str, float]:
    """Per-stage median time (µs) of the captured-step replay path, mirroring CapturedStep._run."""
    from ggmlgrad.engine import ENGINE
    t0 = time.perf_counter()
    step(*args)
    n = max(5, min(n, int(budget_s / max(time.perf_counter() - t0, 1e-7))))
    rec = step._cache[step._key(args, {})]
    stages = dict.fromkeys(["signature+lookup", "stale checks", "pack args", "optimizer hparams", "upload",
                            "compute fwd+bwd", "download+unpack", "compute update", "optimizer advance",
                            "output structure"], 0.0)
    pc = time.perf_counter
    samples = {k: [] for k in stages}
    for _ in range(n):
        t0 = pc()
        key = step._key(args, {})
        r = step._cache.get(key)
        t1 = pc()
        step._stale(r)
        ENGINE.drain_if_queued("capture")
        t2 = pc()
        rec.stage_args(list(args))
        t3 = pc()
        for slot, a in zip(rec.hparam_slots, rec.update.hparams()):
            slot.view[...] = a
        t4 = pc()
        rec.inputs.upload()
        t5 = pc()
        rec.graphs[0].compute()
        t6 = pc()
        outs = rec.outputs(rec.download())
        t7 = pc()
        rec.graphs[1].compute()
        t8 = pc()
        rec.update.advance()
        t9 = pc()
        rec.out_spec.build(outs[:rec.n_user_outputs])
        t10 = pc()
        for k, a, b in zip(stages, (t0, t1, t2, t3, t4, t5, t6, t7, t8, t9), (t1, t2, t3, t4, t5, t6, t7, t8, t9, t10)):
            samples[k].append(b - a)
    # medians: robust to the load spikes of a shared machine
    return {k: statistics.median(v) * 1e6 for k, v in samples.items()}


MAKERS = {  # framework -> (training step maker, forward maker)
    "ggmlgrad": (lambda sizes, batch, act: gg_step(sizes, batch, act)[0], gg_forward),
    "jax": (jax_step, jax_forward),
    "torch": (torch_step, torch_forward),
}


def labels(acts) -> list[str]:
    return [f"{kind} {name} {act} b{batch}" for act in acts
            for kind, name, batch in [("train", n, b) for n, _, b in CONFIGS] + [("forward", CONFIGS[2][0], 1)]]


def measure(framework: str, steps: int, repeat: int, acts) -> dict | None:
    """µs per call of every workload for one framework (None when it is not installed)."""
    make_step, make_forward = MAKERS[framework]
    out = {}
    try:
        for act in acts:
            for name, sizes, batch in CONFIGS:
                out[f"train {name} {act} b{batch}"] = _time(make_step(sizes, batch, act), steps, repeat)
            out[f"forward {CONFIGS[2][0]} {act} b1"] = _time(make_forward(CONFIGS[2][1], act), steps, repeat)
    except ImportError:
        return None
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=2000, help="most calls per block (a block lasts ~0.8 s)")
    ap.add_argument("--repeat", type=int, default=3, help="blocks per workload in each process")
    ap.add_argument("--rounds", type=int, default=3, help="processes per framework, taking turns")
    ap.add_argument("--breakdown", action="store_true")
    ap.add_argument("--activations", default=",".join(DEFAULT_ACTIVATIONS),
                    help=f"comma-separated, of {', '.join(ACTIVATIONS)} (default: {','.join(DEFAULT_ACTIVATIONS)})")
    ap.add_argument("--only", choices=sorted(MAKERS), help=argparse.SUPPRESS)  # a child process
    a = ap.parse_args()
    acts = [x for x in a.activations.split(",") if x]
    if not acts or any(x not in ACTIVATIONS for x in acts):
        ap.error(f"--activations takes names from {', '.join(ACTIVATIONS)}")
    if a.only:
        print("RESULT " + json.dumps(measure(a.only, a.steps, a.repeat, acts)))
        return
    from ggmlgrad.runtime import executor_for, get_device, get_num_threads
    info = gg.info()
    print(f"ggmlgrad {gg.__version__}; ggml {info['ggml_version']} {info['build']}, vector kernels "
          f"{info.get('vector_kernels', False)} [{info['library_dir']}]; backends {executor_for(get_device()).backend_names}; "
          f"threads {get_num_threads() or 'auto'}; {os.cpu_count()} CPUs; load {os.getloadavg()[0]:.1f}")
    LABELS = labels(acts)
    # Each framework runs in its own process, the processes taking turns round by round: in one
    # process a framework's idle worker threads (OpenBLAS's, Eigen's, OpenMP's) spin on and slow
    # the next framework, while taking turns spreads this VM's speed drift over every column.
    runs: dict = {fw: [] for fw in MAKERS}
    for _ in range(a.rounds):
        for fw in MAKERS:
            res = subprocess.run([sys.executable, __file__, "--only", fw, "--steps", str(a.steps),
                                  "--repeat", str(a.repeat), "--activations", ",".join(acts)],
                                 capture_output=True, text=True, check=True)
            line = [ln for ln in res.stdout.splitlines() if ln.startswith("RESULT ")][-1]
            got = json.loads(line[len("RESULT "):])
            if got is not None:
                runs[fw].append(got)
    med = {fw: ({lb: statistics.median(r[lb] for r in rs) for lb in LABELS} if rs else None)
           for fw, rs in runs.items()}

    def spread(lb: str) -> str:
        if not runs["jax"]:
            return "-"
        rs = [g[lb] / j[lb] for g, j in zip(runs["ggmlgrad"], runs["jax"])]
        return f"{min(rs):.2f}-{max(rs):.2f}"

    print(f"{'workload':<31}{'ggmlgrad µs':>12}{'jax jit µs':>12}{'torch µs':>12}{'gg/jax':>8}"
          f"{'per round':>11}{'gg/torch':>9}")
    for lb in LABELS:
        g = med["ggmlgrad"][lb]
        j = med["jax"][lb] if med["jax"] else None
        t = med["torch"][lb] if med["torch"] else None
        fj = f"{j:12.1f}" if j else f"{'-':>12}"
        ft = f"{t:12.1f}" if t else f"{'-':>12}"
        rj = f"{g / j:8.2f}" if j else f"{'-':>8}"
        rt = f"{g / t:9.2f}" if t else f"{'-':>9}"
        print(f"{lb:<31}{g:12.1f}{fj}{ft}{rj}{spread(lb):>11}{rt}")
    if a.breakdown:
        for name, sizes, batch in CONFIGS:
            _, step, args = gg_step(sizes, batch)
            st = breakdown(step, args)
            total = sum(st.values())
            print(f"\nreplay breakdown, train {name} (total {total:.1f} µs):")
            for k, v in st.items():
                print(f"  {k:<22}{v:8.1f} µs  {100 * v / total:5.1f}%")


if __name__ == "__main__":
    main()
