"""The workloads of ``python -m ggmlgrad bench``: each validates its contenders, then times them.

A result row is ``{"workload", "group", "unit", "results": {contender: {"median_us", ...} or
{"status": "absent" | "invalid" | "error" | "n/a", "why": ...}}}``. Times are per call (per op, per
training step, per forward, per environment step): lower is better everywhere.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass

import numpy as np

import ggmlgrad as gg

from . import peers as P
from .timing import interleaved

CONTENDERS = ("gg eager", "gg graph", "gg capture", "torch", "jax jit")
MLPS = {"4-32-32-2 b32": ((4, 32, 32, 2), 32), "64-64-64-8 b256": ((64, 64, 64, 8), 256),
        "784-256-10 b128": ((784, 256, 10), 128)}


@dataclass
class Settings:
    rounds: int = 7
    block_s: float = 0.05
    quick: bool = False
    ppo_steps: int = 16_384
    widths: tuple = (32, 64, 128, 256, 512, 1024)
    batches: tuple = (1, 8, 32, 128, 512)
    threads: int | None = None  # pinned for both sides (the PPO runs get it through the environment)
    clock: str = "wall"         # or "cpu": process CPU time (not for the PPO runs: their own wall time)


def _status(status: str, why: str) -> dict:
    return {"status": status, "why": why}


def _row(name: str, group: str, unit: str, results: dict, **extra) -> dict:
    return {"workload": name, "group": group, "unit": unit, "results": results, **extra}


def _timed(fns: dict, s: Settings, fixed: dict) -> dict:
    """Time ``fns`` interleaved; ``fixed`` (statuses of contenders not timed) joins the result."""
    out = dict(fixed)
    if fns:
        out.update(interleaved(fns, s.rounds, s.block_s, clock=s.clock))
    return out


def _guard(make, *args):
    """``make(*args)``, or an error status when building the contender fails."""
    try:
        return make(*args), None
    except Exception as e:  # a contender that cannot even be built is reported, not fatal
        return None, _status("error", f"{type(e).__name__}: {e}"[:200])


# ---------------------------------------------------------------------- per-op table
def _per_op_cases(torch):
    """(name, make(lib) -> fn, result(lib, fn) -> NumPy) per op of the issue's table."""
    rng = np.random.default_rng(0)
    data = {"buf": np.zeros((128, 4, 4), np.float32), "row": rng.standard_normal((4, 4), dtype=np.float32),
            "a": rng.standard_normal((64, 64), dtype=np.float32), "x4": rng.standard_normal(4, dtype=np.float32),
            "x": rng.standard_normal((4, 4), dtype=np.float32), "w": rng.standard_normal((4, 64), dtype=np.float32),
            "s": rng.standard_normal((8, 8), dtype=np.float32), "obs": rng.standard_normal(4).astype(np.float32)}

    def tensors(lib):
        if lib == "gg":
            return {k: gg.tensor(v) for k, v in data.items()}
        return {k: torch.from_numpy(v.copy()) for k, v in data.items()}

    def row_write(lib):
        t = tensors(lib)
        buf, row, i = t["buf"], t["row"], [0]

        def fn():
            buf[i[0] % 128] = row
            i[0] += 1
            return buf
        return fn

    def row_read(lib):
        t = tensors(lib)
        buf, i = t["buf"], [0]

        def fn():
            i[0] += 1
            return buf[i[0] % 128]
        return fn

    def simple(expr):
        def make(lib):
            t = tensors(lib)
            to = gg.tensor if lib == "gg" else torch.as_tensor
            return lambda: expr(t, to)
        return make

    return [
        ("buf[i] = x (4x4 row of 128x4x4)", row_write),
        ("buf[i] (row read)", row_read),
        ("a + a (64x64)", simple(lambda t, to: t["a"] + t["a"])),
        ("x * 2.0 (4 elements)", simple(lambda t, to: t["x4"] * 2.0)),
        ("x @ w (4x4 by 4x64)", simple(lambda t, to: t["x"] @ t["w"])),
        ("x.sum().item()", simple(lambda t, to: t["s"].sum().item())),
        ("(x * 2).numpy()", simple(lambda t, to: (t["x"] * 2).numpy())),
        ("tensor(obs) (4 floats from NumPy)", simple(lambda t, to: to(data["obs"]))),
    ]


def _as_numpy(v) -> np.ndarray:
    if isinstance(v, (float, int)):
        return np.asarray(v, np.float64)
    if hasattr(v, "detach"):
        v = v.detach()
    return np.asarray(v.numpy() if hasattr(v, "numpy") else v, np.float64)


def per_op(found: dict, s: Settings) -> list[dict]:
    """The issue's per-op table: ggmlgrad eager beside torch eager, one process, one thread each
    (torch's idle worker threads spin after each op and take the core the other side runs on)."""
    torch = found["torch"]
    old = (gg.get_num_threads(), torch.get_num_threads() if torch is not None else None)
    gg.set_num_threads(1)
    if torch is not None:
        torch.set_num_threads(1)
    try:
        with gg.graph_mode(False):  # eager, whatever the environment's default (GGMLGRAD_GRAPH=1)
            return _per_op_rows(torch, s)
    finally:
        gg.set_num_threads(old[0])
        if torch is not None:
            torch.set_num_threads(old[1])


def _per_op_rows(torch, s: Settings) -> list[dict]:
    rows = []
    for name, make in _per_op_cases(torch):
        results = {"gg graph": _status("n/a", "per-op: eager only"), "gg capture": _status("n/a", "per-op: eager only"),
                   "jax jit": _status("n/a", "per-op: eager only")}
        fns = {}
        gfn, err = _guard(make, "gg")
        if err:
            results["gg eager"] = err
        else:
            fns["gg eager"] = gfn
        if torch is None:
            results["torch"] = _status("absent", "torch is not installed")
        else:
            tfn = make("torch")
            fns["torch"] = tfn
            if gfn is not None:  # validate: 130 calls each (a row write wraps the buffer), same values
                for _ in range(130):
                    gv, tv = gfn(), tfn()
                if not np.allclose(_as_numpy(gv), _as_numpy(tv), rtol=1e-5, atol=1e-6):
                    results["gg eager"] = _status("invalid", "values differ from torch's")
                    del fns["gg eager"]
        rows.append(_row(name, "per-op", "us per op", _timed(fns, s, results), threads=1))
    return rows


# ---------------------------------------------------------------------- training steps and forwards
def _validate_steps(steps: dict, reference: str | None) -> dict:
    """Run 3 steps of each; a contender whose parameters then differ from ``reference``'s is invalid."""
    params = {}
    bad = {}
    for k, st in steps.items():
        try:
            for _ in range(3):
                st()
            params[k] = st.params()
        except Exception as e:
            bad[k] = _status("error", f"{type(e).__name__}: {e}"[:200])
    ref = params.get(reference) if reference else None
    if ref is not None:
        for k, ps in params.items():
            if k != reference and not all(a.shape == b.shape and np.allclose(a, b, rtol=1e-3, atol=1e-5)
                                          for a, b in zip(ps, ref)):
                bad[k] = _status("invalid", f"parameters after 3 steps differ from {reference}'s")
    return bad


def train_step(found: dict, name: str, sizes: tuple, batch: int, s: Settings, group: str = "mlp step") -> dict:
    """One Adam step of a tanh MLP (zero_grad, forward, cross-entropy, backward, step), every contender."""
    weights, data = P.mlp_weights(sizes), P.mlp_data(sizes, batch)
    steps, results = {}, {}
    for mode in P.GG_MODES:
        st, err = _guard(P.gg_train_step, mode, sizes, batch, weights, data)
        steps.update({mode: st} if st is not None else {})
        results.update({mode: err} if err else {})
    for key, mod, make in (("torch", found["torch"], P.torch_train_step), ("jax jit", found["jax"], P.jax_train_step)):
        if mod is None:
            results[key] = _status("absent", f"{key.split()[0]} is not installed")
            continue
        st, err = _guard(make, mod, sizes, batch, weights, data)
        steps.update({key: st} if st is not None else {})
        results.update({key: err} if err else {})
    reference = "torch" if "torch" in steps else ("gg eager" if "gg eager" in steps else None)
    bad = _validate_steps(steps, reference)
    results.update(bad)
    fns = {k: v for k, v in steps.items() if k not in bad}
    return _row(name, group, "us per step", _timed(fns, s, results), sizes=list(sizes), batch=batch)


def forward_b1(found: dict, s: Settings, sizes: tuple = (784, 256, 10)) -> dict:
    """A batch-1 no-grad forward of a tanh MLP read back to NumPy, every contender."""
    weights = P.mlp_weights(sizes)
    x = P.mlp_data(sizes, 1)[0]
    fns, results = {}, {}
    for mode in P.GG_MODES:
        fn, err = _guard(P.gg_forward, mode, sizes, weights, x)
        fns.update({mode: fn} if fn is not None else {})
        results.update({mode: err} if err else {})
    for key, mod, make in (("torch", found["torch"], P.torch_forward), ("jax jit", found["jax"], P.jax_forward)):
        if mod is None:
            results[key] = _status("absent", f"{key.split()[0]} is not installed")
            continue
        fn, err = _guard(make, mod, sizes, weights, x)
        fns.update({key: fn} if fn is not None else {})
        results.update({key: err} if err else {})
    ref = None
    for k in list(fns):  # validate against the first contender that runs (torch when present)
        try:
            v = np.asarray(fns[k](), np.float64)
        except Exception as e:
            results[k] = _status("error", f"{type(e).__name__}: {e}"[:200])
            del fns[k]
            continue
        if "torch" in fns:
            ref = np.asarray(fns["torch"](), np.float64) if ref is None else ref
        ref = v if ref is None else ref
        if not np.allclose(v, ref, rtol=1e-4, atol=1e-5):
            results[k] = _status("invalid", "output differs")
            del fns[k]
    name = "forward " + "-".join(map(str, sizes)) + " b1"
    return _row(name, "forward", "us per forward", _timed(fns, s, results))


# ---------------------------------------------------------------------- layers (when they exist)
def _layer_models(nn, kind: str):
    if kind == "conv":
        if not hasattr(nn, "Conv2d"):
            return None
        return nn.Sequential(nn.Conv2d(1, 8, 3), nn.Tanh(), nn.Flatten(), nn.Linear(8 * 14 * 14, 10))
    if kind == "lstm":
        return nn.LSTM(8, 32, batch_first=True) if hasattr(nn, "LSTM") else None
    if kind == "transformer":
        if not hasattr(nn, "TransformerEncoderLayer"):
            return None
        return nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, dropout=0.0, batch_first=True)
    raise ValueError(kind)


_LAYER_INPUTS = {"conv": (8, 1, 16, 16), "lstm": (8, 16, 8), "transformer": (8, 16, 32)}


def layer_step(found: dict, kind: str, s: Settings) -> dict:
    """An Adam step of a small conv / LSTM / transformer model on MSE, where ggmlgrad has the layer."""
    name = {"conv": "conv step (Conv2d 1-8 3x3, 16x16, b8)", "lstm": "LSTM step (8-32, seq 16, b8)",
            "transformer": "transformer step (encoder layer d32 h4, seq 16, b8)"}[kind]
    torch = found["torch"]
    results = {"jax jit": _status("n/a", "not written for JAX")}
    if _layer_models(gg.nn, kind) is None:
        return _row(name, "layers", "us per step", {k: _status("absent", "absent layer") for k in CONTENDERS})
    if torch is None:
        return _row(name, "layers", "us per step",
                    {**{k: _status("n/a", "no reference to validate against") for k in P.GG_MODES},
                     "torch": _status("absent", "torch is not installed"), **results})
    x = np.random.default_rng(2).standard_normal(_LAYER_INPUTS[kind], dtype=np.float32)
    torch.manual_seed(0)
    tmodel = _layer_models(torch.nn, kind)
    init = [p.detach().numpy().copy() for p in tmodel.parameters()]

    def out_of(y):
        return y[0] if isinstance(y, tuple) else y

    def gg_make(mode):
        model = _layer_models(gg.nn, kind)
        ps = list(model.parameters())
        if [tuple(p.shape) for p in ps] != [a.shape for a in init]:
            raise ValueError("parameter layout differs from torch's")
        with gg.no_grad():
            for p, a in zip(ps, init):
                p.copy_(a)
        opt = gg.optim.Adam(ps, lr=1e-3)
        params = lambda: [p.detach().numpy().copy() for p in ps]  # noqa: E731
        loss_fn = lambda xb: (out_of(model(xb)) ** 2).mean()  # noqa: E731
        if mode == "gg capture":
            step = gg.capture_step(loss_fn, opt)
            return P.Step(lambda: step(x), params)
        gx = gg.tensor(x)

        def fn():
            with gg.graph_mode(mode == "gg graph"):
                opt.zero_grad()
                loss = loss_fn(gx)
                loss.backward()
                opt.step()
        return P.Step(fn, params)

    topt = torch.optim.Adam(tmodel.parameters(), lr=1e-3)
    tx = torch.from_numpy(x)

    def tfn():
        topt.zero_grad()
        loss = (out_of(tmodel(tx)) ** 2).mean()
        loss.backward()
        topt.step()
    steps = {"torch": P.Step(tfn, lambda: [p.detach().numpy().copy() for p in tmodel.parameters()])}
    for mode in P.GG_MODES:
        st, err = _guard(gg_make, mode)
        steps.update({mode: st} if st is not None else {})
        results.update({mode: err} if err else {})
    bad = _validate_steps(steps, "torch")
    results.update(bad)
    return _row(name, "layers", "us per step", _timed({k: v for k, v in steps.items() if k not in bad}, s, results))


# ---------------------------------------------------------------------- PPO end to end
def _examples_dir() -> str | None:
    here = os.path.dirname(os.path.abspath(__file__))
    d = os.path.normpath(os.path.join(here, "..", "..", "..", "examples"))
    return d if os.path.exists(os.path.join(d, "ppo_cartpole.py")) else None


_WALL = re.compile(r"wall ([0-9.]+) s")
_STEPS = re.compile(r"^(\d+) environment steps", re.M)
_SCORE = re.compile(r"mean return ([0-9.]+)")


def _run_example(args: list[str], cwd: str, timeout: float, threads: int | None = None) -> dict:
    env = dict(os.environ)
    if threads is not None:  # torch reads OMP_NUM_THREADS at start-up, ggmlgrad GGMLGRAD_NUM_THREADS
        env["OMP_NUM_THREADS"] = env["GGMLGRAD_NUM_THREADS"] = str(threads)
    src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run([sys.executable, *args, "--no-progress"], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=timeout)
    wall, steps, score = _WALL.search(p.stdout), _STEPS.search(p.stdout), _SCORE.search(p.stdout)
    if p.returncode != 0 or not (wall and steps):
        return _status("error", (p.stderr or p.stdout).strip().splitlines()[-1][:200] if (p.stderr or p.stdout)
                       else f"exit {p.returncode}")
    us = float(wall.group(1)) / int(steps.group(1)) * 1e6
    return {"median_us": us, "min_us": us, "max_us": us, "samples_us": [us],
            "steps_per_s": int(steps.group(1)) / float(wall.group(1)),
            "eval_return": float(score.group(1)) if score else None}


def ppo(found: dict, s: Settings) -> dict:
    """examples/ppo_cartpole.py end to end per mode beside examples/torch_ppo_cartpole.py (one run each,
    the example's own wall time, which includes the environment: the whole program)."""
    name = f"PPO CartPole end to end ({s.ppo_steps} env steps)"
    d = _examples_dir()
    results = {"jax jit": _status("n/a", "no JAX PPO example")}
    if d is None:
        return _row(name, "ppo", "us per env step", {**{k: _status("absent", "examples/ not found (run from a "
                                                                     "checkout)") for k in CONTENDERS}, **results})
    if try_gym() is None:
        return _row(name, "ppo", "us per env step",
                    {**{k: _status("absent", "gymnasium is not installed") for k in CONTENDERS}, **results})
    steps = ["--steps", str(s.ppo_steps)]
    for mode in P.GG_MODES:
        results[mode] = _run_example(["ppo_cartpole.py", *steps, "--mode", mode.split()[1]], d, 600, s.threads)
    results["torch"] = (_run_example(["torch_ppo_cartpole.py", *steps], d, 600, s.threads) if found["torch"] is not None
                        else _status("absent", "torch is not installed"))
    scores = {results[m].get("eval_return") for m in P.GG_MODES if "eval_return" in results[m]}
    return _row(name, "ppo", "us per env step", results, same_return_in_every_gg_mode=len(scores) == 1)


def try_gym():
    return P.try_import("gymnasium")


# ---------------------------------------------------------------------- sweeps
def sweep(found: dict, s: Settings) -> dict:
    """Step time of a 64-H-H-10 tanh MLP against the hidden width H (batch 64) and against the batch
    size (H = 64): where per-op overhead stops dominating."""
    out = {"width": [], "batch": []}
    for h in s.widths:
        out["width"].append({"x": h, **train_step(found, f"64-{h}-{h}-10 b64", (64, h, h, 10), 64, s, "sweep")})
    for b in s.batches:
        out["batch"].append({"x": b, **train_step(found, f"64-64-64-10 b{b}", (64, 64, 64, 10), b, s, "sweep")})
    return out
