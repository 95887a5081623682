"""Captured training step and captured forward vs JAX jit and PyTorch eager (when installed).

    PYTHONPATH=src python benchmarks/bench_capture.py [--rounds 7] [--block 0.1] [--threads 1] [--profile]
    PYTHONPATH=src python benchmarks/bench_capture.py --nodes [--threads 1] [--activations tanh]

``--nodes`` prints where a captured call's time goes instead: each ggml node of its graphs timed on
its own (ggml's scheduler stops after every node), summed by op, source shapes and backend (BLAS or
CPU; ``T``: a transposed source), e.g. the forward matmul and the weight-gradient OUT_PROD of the
784-256-10 step are 90% of it, both in OpenBLAS.

Workloads (issues 5 and 14): Adam training steps of MLPs 4-32-32-2 (batch 32), 64-64-64-8 (batch
256), 784-256-10 (batch 128), and a batch-1 forward of 784-256-10, each with ReLU, tanh and GELU
between the layers (``--activations`` picks some; ``gelu_tanh`` adds GELU's tanh approximation).
Goals: <= 0.6x, 0.8x, 1.0x, 0.8x of JAX jit (tanh rows).

How it measures (so that a number holds from run to run):
- Each framework lives in its own worker process for the whole run (a framework's idle worker
  threads, OpenBLAS's, Eigen's, OpenMP's, kept spinning and slowed whichever ran next in one
  process). Every workload is built and warmed up once per worker (JAX compiles, ggmlgrad records
  and its thread tuner settles) before any timing.
- The sides are interleaved at block level: in every round, for every workload, each worker runs
  one block of calls in turn (the order rotates per round), so load that comes and goes hits
  every column alike. A block lasts about ``--block`` seconds; the garbage collector is off
  during a block (collected before it, setup's objects frozen), for every side.
- Per block: the median wall time of a call and the process CPU time per call (all threads of
  the worker: JAX's and OpenBLAS's workers count). The table shows the median over ``--rounds``
  blocks, and for gg/JAX the median and the range of the per-round ratios (each pair of blocks ran
  side by side in time).

Every side gets the same work and its idiomatic fast path: inputs already where the computation
needs them (ggmlgrad tensors, JAX device arrays from ``jax.device_put``, torch tensors), outputs
read back to the host the same way (``np.asarray`` / ``.numpy()`` / ``.item()``), JAX with
synchronous CPU dispatch (``jax_cpu_enable_async_dispatch`` off), a jitted step whose optimizer is
optax's Adam with the parameter and optimizer state donated. JAX's weights are stored (in, out)
as in flax's ``Dense`` (``x @ w``): with torch's (out, in) layout, ``x @ w.T`` inside a jitted
multi-layer function made XLA materialise the transposed 784x256 weight on every call (a copy
fusion), which alone took the batch-1 forward from ~20 µs to 110-220 µs. ggmlgrad and torch keep
their own (out, in) layout, the one their ``linear`` reads without a copy.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import header, profile  # noqa: E402  (also puts the checkout's src on the path)

import ggmlgrad as gg  # noqa: E402

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

    params = _jax_params(jnp, sizes)
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


def _jax_params(jnp, sizes):
    """The same initial weights, stored (in, out) as flax's ``Dense`` does (see the module docstring)."""
    return [(jax_put(jnp, np.ascontiguousarray(w.T)), jax_put(jnp, b)) for w, b in _init(sizes)]


def jax_put(jnp, a):
    import jax
    return jax.device_put(jnp.asarray(a))


def _jax_mlp(p, x, act="relu"):
    """The benchmark MLP's forward in JAX (``act`` between layers; GELU exact, as torch's default);
    weights are (in, out)."""
    import jax
    f = {"relu": jax.nn.relu, "tanh": jax.numpy.tanh, "gelu": lambda h: jax.nn.gelu(h, approximate=False),
         "gelu_tanh": lambda h: jax.nn.gelu(h, approximate=True)}[act]
    h = x
    for i, (w, b) in enumerate(p):
        h = h @ w + b
        if i < len(p) - 1:
            h = f(h)
    return h


def jax_forward(sizes, act="relu"):
    jax = _jax()
    import jax.numpy as jnp
    params = _jax_params(jnp, sizes)
    fwd = jax.jit(lambda p, x: _jax_mlp(p, x, act))
    x = jax.device_put(_data(sizes, 1)[0])
    return lambda: np.asarray(fwd(params, x))


# ---------------------------------------------------------------------------- PyTorch
def _torch_act(torch, act):
    return {"relu": torch.nn.ReLU(), "tanh": torch.nn.Tanh(), "gelu": torch.nn.GELU(),
            "gelu_tanh": torch.nn.GELU(approximate="tanh")}[act]


def torch_step(sizes, batch, act="relu"):
    import torch
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
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(w))
            lin.bias.copy_(torch.from_numpy(b))
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


# ---------------------------------------------------------------------------- workers
MAKERS = {  # framework -> (training step maker, forward maker)
    "ggmlgrad": (lambda sizes, batch, act: gg_step(sizes, batch, act)[0], gg_forward),
    "jax": (jax_step, jax_forward),
    "torch": (torch_step, torch_forward),
}


def labels(acts) -> list[str]:
    return [f"{kind} {name} {act} b{batch}" for act in acts
            for kind, name, batch in [("train", n, b) for n, _, b in CONFIGS] + [("forward", CONFIGS[2][0], 1)]]


def make(framework: str, label: str):
    """The call that ``label`` times for ``framework``."""
    kind, name, act, batch = label.split()
    sizes = dict((n, s) for n, s, _ in CONFIGS)[name]
    make_step, make_forward = MAKERS[framework]
    return make_step(sizes, int(batch[1:]), act) if kind == "train" else make_forward(sizes, act)


def pin_threads(framework: str, n: int | None) -> None:
    """Every side on ``n`` threads (None: each framework's default). Call before importing JAX."""
    if n is None:
        return
    if framework == "jax":
        if n != 1:
            raise SystemExit("--threads: JAX can be pinned to 1 thread only (XLA's Eigen pool)")
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                   " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1").strip()
    elif framework == "torch":
        import torch
        torch.set_num_threads(n)
    gg.set_num_threads(n)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
        os.environ.setdefault(var, str(n))


def warm_up(fn, min_calls: int = 60, min_s: float = 0.3) -> float:
    """Run ``fn`` until it is steady (JAX compiled, ggmlgrad recorded and its thread tuner decided);
    returns the seconds a call took at the end."""
    t0 = time.perf_counter()
    calls = 0
    while calls < min_calls or time.perf_counter() - t0 < min_s:
        fn()
        calls += 1
    t1 = time.perf_counter()
    for _ in range(10):
        fn()
    return (time.perf_counter() - t1) / 10


def block(fn, count: int, limit_s: float) -> tuple[float, float]:
    """(median wall seconds of a call, process CPU seconds per call) over ``count`` calls, or fewer
    (at least 5) when they take longer than ``limit_s`` (a burst of load must not stall the run)."""
    gc.collect()
    gc.disable()
    try:
        ts = []
        pc = time.perf_counter
        c0, start = time.process_time(), pc()
        for i in range(count):
            t0 = pc()
            fn()
            ts.append(pc() - t0)
            if i >= 4 and t0 - start > limit_s:
                break
        cpu = (time.process_time() - c0) / len(ts)
    finally:
        gc.enable()
    return statistics.median(ts), cpu


def worker(framework: str, acts, threads: int | None) -> None:
    """Serve the parent: one JSON request a line on stdin, one JSON reply a line on stdout."""
    pin_threads(framework, threads)
    out = sys.stdout
    sys.stdout = sys.stderr  # nothing but replies on the pipe
    fns: dict = {}
    try:
        for lb in labels(acts):
            fns[lb] = make(framework, lb)
        per_call = {lb: warm_up(fn) for lb, fn in fns.items()}
        # What setup made lives for the whole run: out of the collector's way (a full collection
        # took 0.35 s in the JAX worker, so collecting before every block dominated the run).
        gc.collect()
        gc.freeze()
        reply = {"ok": True, "per_call": per_call, "build": build_line(framework)}
    except ImportError as e:
        reply = {"ok": False, "why": str(e)}
    out.write(json.dumps(reply) + "\n")
    out.flush()
    for line in sys.stdin:
        req = json.loads(line)
        wall, cpu = block(fns[req["label"]], req["count"], req["limit"])
        out.write(json.dumps([wall, cpu]) + "\n")
        out.flush()


def build_line(framework: str) -> str:
    if framework == "ggmlgrad":
        return header(gg)
    if framework == "jax":
        import jax
        import jaxlib
        import optax
        return (f"jax {jax.__version__} (jaxlib {jaxlib.__version__}, optax {optax.__version__}), "
                f"{jax.devices()[0].platform}, async dispatch {jax.config.values.get('jax_cpu_enable_async_dispatch')}, "
                f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}")
    import torch
    return f"torch {torch.__version__}, {torch.get_num_threads()} threads"


class Worker:
    def __init__(self, framework: str, acts, threads: int | None):
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", framework, "--activations", ",".join(acts)]
        if threads is not None:
            cmd += ["--threads", str(threads)]
        self.framework = framework
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ready(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.framework} worker died while setting up (see its stderr above)")
        return json.loads(line)

    def run(self, label: str, count: int, limit_s: float) -> tuple[float, float]:
        self.proc.stdin.write(json.dumps({"label": label, "count": count, "limit": limit_s}) + "\n")
        self.proc.stdin.flush()
        return tuple(json.loads(self.proc.stdout.readline()))

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


# ---------------------------------------------------------------------------- the table
def _us(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.1f}" if v < 1000 else f"{v:.0f}"


def report(LABELS, times: dict, cpu: dict) -> None:
    fws = [fw for fw in MAKERS if fw in times]
    head = f"{'workload':<30}" + "".join(f"{fw + ' µs':>12}" for fw in fws)
    head += f"{'gg/jax':>8}{'per round':>12}{'cpu gg/jax':>11}" if "jax" in fws else ""
    head += f"{'gg/torch':>9}" if "torch" in fws else ""
    print(head)
    for lb in LABELS:
        med = {fw: statistics.median(times[fw][lb]) * 1e6 for fw in fws}
        row = f"{lb:<30}" + "".join(f"{_us(med[fw]):>12}" for fw in fws)
        if "jax" in fws:
            rs = [g / j for g, j in zip(times["ggmlgrad"][lb], times["jax"][lb])]
            cr = statistics.median(cpu["ggmlgrad"][lb]) / statistics.median(cpu["jax"][lb])
            row += f"{statistics.median(rs):8.2f}{f'{min(rs):.2f}-{max(rs):.2f}':>12}{cr:11.2f}"
        if "torch" in fws:
            row += f"{med['ggmlgrad'] / med['torch']:9.2f}"
        print(row)
    print("\nµs: median over rounds of each block's median call (wall). gg/jax: median of the per-round "
          "ratios, 'per round' their range;\ncpu gg/jax: the ratio of process CPU time per call (all threads) "
          "of the two sides.")
    spreads = {fw: max((max(v) - min(v)) / statistics.median(v) for v in times[fw].values()) for fw in fws}
    print("largest run-to-run spread of a workload over the rounds ((max - min) / median): "
          + ", ".join(f"{fw} {100 * v:.0f}%" for fw, v in spreads.items()))


def run_all(acts, rounds: int, block_s: float, threads: int | None) -> None:
    LABELS = labels(acts)
    workers = [Worker(fw, acts, threads) for fw in MAKERS]   # set up side by side
    live, per_call = [], {}
    for w in workers:
        r = w.ready()
        if r["ok"]:
            live.append(w)
            per_call[w.framework] = r["per_call"]
            print(f"[{w.framework}] {r['build']}")
        else:
            print(f"[{w.framework}] not measured: {r['why']}")
            w.close()
    print(f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; threads "
          f"{threads if threads is not None else 'each framework default'}; {rounds} rounds of "
          f"~{block_s} s blocks")
    counts = {w.framework: {lb: max(5, int(block_s / max(per_call[w.framework][lb], 1e-7))) for lb in LABELS}
              for w in live}
    times = {w.framework: {lb: [] for lb in LABELS} for w in live}
    cpu = {w.framework: {lb: [] for lb in LABELS} for w in live}
    t0 = time.perf_counter()
    for r in range(rounds):
        for lb in LABELS:
            k = r % len(live)
            for w in live[k:] + live[:k]:  # who goes first rotates
                wall, c = w.run(lb, counts[w.framework][lb], 3 * block_s)
                times[w.framework][lb].append(wall)
                cpu[w.framework][lb].append(c)
    for w in live:
        w.close()
    print(f"timed for {time.perf_counter() - t0:.0f} s; load {os.getloadavg()[0]:.1f}\n")
    report(LABELS, times, cpu)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7, help="blocks per workload and framework (default 7)")
    ap.add_argument("--block", type=float, default=0.1, help="seconds a block lasts (default 0.1)")
    ap.add_argument("--threads", type=int, help="pin every framework to this many threads (JAX: 1 only)")
    ap.add_argument("--profile", action="store_true",
                    help="cProfile of ggmlgrad's captured steps (calls per step, own time) instead of the table")
    ap.add_argument("--nodes", action="store_true",
                    help="per-node time of ggmlgrad's captured steps (op, shapes, backend) instead of the table")
    ap.add_argument("--activations", default=",".join(DEFAULT_ACTIVATIONS),
                    help=f"comma-separated, of {', '.join(ACTIVATIONS)} (default: {','.join(DEFAULT_ACTIVATIONS)})")
    ap.add_argument("--worker", choices=sorted(MAKERS), help=argparse.SUPPRESS)
    a = ap.parse_args()
    acts = [x for x in a.activations.split(",") if x]
    if not acts or any(x not in ACTIVATIONS for x in acts):
        ap.error(f"--activations takes names from {', '.join(ACTIVATIONS)}")
    if a.worker:
        worker(a.worker, acts, a.threads)
    elif a.profile:
        profile_steps(acts, a.threads)
    elif a.nodes:
        node_profile(acts, a.threads)
    else:
        run_all(acts, a.rounds, a.block, a.threads)


def profile_steps(acts, threads: int | None) -> None:
    """Deterministic proxies of the replay path's cost: Python calls per captured step and their own time."""
    pin_threads("ggmlgrad", threads)
    print(header(gg))
    for act in acts:
        for name, sizes, batch in CONFIGS:
            run, _, _ = gg_step(sizes, batch, act)
            warm_up(run)
            c0, n = time.process_time(), 300
            for _ in range(n):
                run()
            us = (time.process_time() - c0) / n * 1e6
            print(f"\ntrain {name} {act} b{batch}: {us:.1f} µs CPU a step; cProfile per step:")
            print(profile(run, n, top=15))


def _replay_graphs() -> set:
    from ggmlgrad.capture.recording import ReplayGraph
    return {id(o): o for o in gc.get_objects() if type(o) is ReplayGraph}


def _node_kind(lib, node: int) -> str:
    """``OP src0-shape x src1-shape`` (NumPy order), with ``T`` for a transposed source view."""
    from ggmlgrad._ggml import node_nb, node_ne, node_src
    parts = []
    for i in range(2):
        s = node_src(node, i)
        if not s:
            break
        ne, nb = node_ne(s), node_nb(s)
        dims = [d for d in reversed(ne)]
        while len(dims) > 2 and dims[0] == 1:
            dims.pop(0)
        parts.append("x".join(map(str, dims)) + ("T" if nb[0] > nb[1] else ""))
    return f"{lib.op_desc(node).decode()} {' , '.join(parts)}"


def node_profile(acts, threads: int | None, repeat: int = 200) -> None:
    """Per-node wall time of each captured step's graphs: ggml's scheduler stops after every node
    (its eval callback), so each node is computed on its own and timed from the previous node's end.
    Each stop adds a graph launch (~1-2 µs), so the sum exceeds the step; the split between nodes
    is what this is for. Nodes of one kind (op, source shapes, backend) are summed."""
    import ctypes
    from ggmlgrad._ggml import lib, library_info, view_source
    pin_threads("ggmlgrad", threads)
    print(header(gg))
    base = ctypes.CDLL(library_info.files[0])  # libggml-base, already loaded: the scheduler's home
    CB = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_void_p, ctypes.c_bool, ctypes.c_void_p)
    base.ggml_backend_sched_set_eval_callback.argtypes = [ctypes.c_void_p, CB, ctypes.c_void_p]
    base.ggml_backend_sched_set_eval_callback.restype = None
    for act in acts:
        calls = [(f"train {name} {act} b{batch}", lambda s=sizes, b=batch: gg_step(s, b, act)[0])
                 for name, sizes, batch in CONFIGS]
        calls.append((f"forward {CONFIGS[2][0]} {act} b1", lambda: gg_forward(CONFIGS[2][1], act)))
        for label, maker in calls:
            before = _replay_graphs()
            run = maker()
            warm_up(run)
            graphs = [g for k, g in _replay_graphs().items() if k not in before and g.sched]
            clock = time.perf_counter
            totals: dict = {}
            last = [0.0]

            def cb(node, ask, _user):
                if ask:
                    if view_source(node)[0]:
                        return False
                    return True
                now = clock()
                b = lib.backend_name(lib.backend_sched_get_tensor_backend(cb.sched, node)).decode()
                key = (_node_kind(lib, node), b)
                totals[key] = totals.get(key, 0.0) + now - last[0]
                last[0] = clock()
                return True
            c_cb = CB(cb)
            for g in graphs:
                base.ggml_backend_sched_set_eval_callback(g.sched, c_cb, None)
            t0 = clock()
            for _ in range(repeat):
                for g in graphs:
                    cb.sched = g.sched
                    last[0] = clock()
                    g.compute()
            wall = (clock() - t0) / repeat
            for g in graphs:
                base.ggml_backend_sched_set_eval_callback(g.sched, CB(), None)
            c0 = clock()
            for _ in range(repeat):
                run()
            step = (clock() - c0) / repeat
            print(f"\n{label}: call {step * 1e6:.1f} µs; graphs node by node "
                  f"{wall * 1e6:.1f} µs ({len(graphs)} graphs)")
            total = sum(totals.values())
            for (kind, b), t in sorted(totals.items(), key=lambda kv: -kv[1]):
                print(f"  {t / repeat * 1e6:8.1f} µs {100 * t / total:5.1f}%  {b:<5} {kind}")


if __name__ == "__main__":
    main()
