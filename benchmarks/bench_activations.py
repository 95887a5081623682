"""Activation micro-benchmark: tanh, sigmoid, GELU (exact and tanh form), exp, ELU, softplus and
ReLU over 256x64 and 128x256 float32, as one captured graph node each, with and without ggmlgrad's
vectorised kernels, beside NumPy; and each result's error against NumPy float64.

    python benchmarks/bench_activations.py [--number 200] [--repeat 7]

The kernels exist on the fast build (``python -m ggmlgrad build``); the "ggml" column runs each
in a child process with ``GGMLGRAD_KERNELS=0`` (ggml's own kernels, one libm call an element).
Times are medians of per-call medians, one thread (ggml and NumPy alike).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

import numpy as np

SHAPES = ((256, 64), (128, 256))


def _functions(gg):
    F = gg.nn.functional
    return {"relu": gg.relu, "tanh": gg.tanh, "sigmoid": gg.sigmoid, "exp": gg.exp, "gelu": F.gelu,
            "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"), "elu": F.elu, "softplus": F.softplus}


_erfc = np.vectorize(math.erfc, otypes=[np.float64])
REFERENCES = {
    "relu": lambda x: np.maximum(x, 0), "tanh": np.tanh, "sigmoid": lambda x: 0.5 * (1 + np.tanh(x / 2)),
    "exp": np.exp, "gelu": lambda x: x * 0.5 * _erfc(-x / np.sqrt(2)),
    "gelu_tanh": lambda x: x / (1 + np.exp(-2 * np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))),
    "elu": lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0))),
    "softplus": lambda x: np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20)))),
}
NUMPY = {"relu": lambda x: np.maximum(x, 0), "tanh": np.tanh, "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
         "exp": np.exp, "elu": lambda x: np.where(x > 0, x, np.expm1(x)),
         "softplus": lambda x: np.logaddexp(x, 0)}


def _median_us(fn, number: int, repeat: int) -> float:
    for _ in range(5):
        fn()
    meds = []
    for _ in range(repeat):
        ts = []
        for _ in range(number):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        meds.append(statistics.median(ts))
    return statistics.median(meds) * 1e6


def _max_ulp(y: np.ndarray, ref: np.ndarray) -> float:
    r32 = ref.astype(np.float32)
    ok = np.isfinite(r32) & (np.abs(r32) >= np.finfo(np.float32).tiny)
    return float(np.max(np.abs(y[ok].astype(np.float64) - ref[ok]) / np.spacing(np.abs(r32[ok])).astype(np.float64)))


def measure(number: int, repeat: int) -> dict:
    """{name: {shape: (µs per call, max ulp error)}} for this process's ggml and kernels."""
    import ggmlgrad as gg
    gg.set_num_threads(1)
    rng = np.random.default_rng(0)
    out = {}
    for name, f in _functions(gg).items():
        out[name] = {}
        for shape in SHAPES:
            x = (rng.standard_normal(shape) * 3).astype(np.float32)
            xt = gg.tensor(x)
            cap = gg.capture(lambda t: f(t))
            y = cap(xt)
            with np.errstate(all="ignore"):
                err = _max_ulp(np.asarray(y), REFERENCES[name](x.astype(np.float64)))
            out[name][f"{shape[0]}x{shape[1]}"] = (_median_us(lambda: cap(xt), number, repeat), err)
    base = {}   # a replay's own cost (upload check, compute call, download): one x * 1 node
    for shape in SHAPES:
        xt = gg.tensor(np.ones(shape, np.float32))
        cap = gg.capture(lambda t: t * 1.0)
        cap(xt)
        base[f"{shape[0]}x{shape[1]}"] = _median_us(lambda: cap(xt), number, repeat)
    return {"results": out, "overhead": base, "build": gg.info()["build"],
            "kernels": gg.info().get("vector_kernels", False)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--number", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print("RESULT " + json.dumps(measure(a.number, a.repeat)))
        return
    runs = {}
    for label, env in (("kernels", {}), ("ggml", {"GGMLGRAD_KERNELS": "0"})):
        r = subprocess.run([sys.executable, __file__, "--child", "--number", str(a.number), "--repeat", str(a.repeat)],
                           capture_output=True, text=True, env={**os.environ, **env}, check=True)
        runs[label] = json.loads([ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")][-1][7:])
    k, g = runs["kernels"], runs["ggml"]
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import ggmlgrad as gg
    from common import header
    print(header(gg))
    print(f"build {k['build']}; vector kernels: {k['kernels']} (the 'kernels' column), one thread")
    print("µs per captured call of one activation node (minus a captured x*1 of the same shape); "
          "max error in float32 ulp against NumPy float64")
    rng = np.random.default_rng(0)
    head = (f"{'activation':<11}{'shape':>9}{'kernels µs':>12}{'ggml µs':>10}{'numpy µs':>10}{'kernels ulp':>13}"
            f"{'ggml ulp':>14}")
    print(head)
    for name in k["results"]:
        for shape in SHAPES:
            s = f"{shape[0]}x{shape[1]}"
            kt, ke = k["results"][name][s]
            gt, ge = g["results"][name][s]
            x = (rng.standard_normal(shape) * 3).astype(np.float32)
            nt = _median_us(lambda: NUMPY[name](x), a.number, a.repeat) if name in NUMPY else float("nan")
            print(f"{name:<11}{s:>9}{kt - k['overhead'][s]:12.1f}{gt - g['overhead'][s]:10.1f}{nt:10.1f}{ke:13.2f}"
                  f"{ge:14.2f}")


if __name__ == "__main__":
    main()
