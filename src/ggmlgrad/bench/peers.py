"""The contenders: ggmlgrad (eager, graph mode, captured), torch eager and JAX ``jit``.

A peer that is not installed is reported as absent (never faked). Every contender of a workload
starts from the same initial weights (made with NumPy) and the same data.
"""
from __future__ import annotations

import os
import sys

import numpy as np

import ggmlgrad as gg

GG_MODES = ("gg eager", "gg graph", "gg capture")


def try_import(name: str):
    """The module, or None when it is not installed (or fails to import)."""
    try:
        return __import__(name)
    except Exception:  # an installed but broken peer is absent too
        return None


def peers(threads: int | None = None) -> dict:
    """``{"torch": module or None, "jax": module or None}``. With ``threads``, XLA is asked for that
    many threads too (read when JAX is first imported; a JAX imported earlier keeps its own)."""
    if threads is not None and "jax" not in sys.modules:
        flags = os.environ.get("XLA_FLAGS", "")
        if "intra_op_parallelism_threads" not in flags:
            os.environ["XLA_FLAGS"] = (flags + f" --xla_cpu_multi_thread_eigen={'true' if threads > 1 else 'false'}"
                                       f" intra_op_parallelism_threads={threads}").strip()
    torch = try_import("torch")
    jax = try_import("jax")
    if jax is not None:
        try:
            import jax.numpy  # noqa: F401  (the numpy namespace is what the workloads use)
        except Exception:
            jax = None
    return {"torch": torch, "jax": jax}


def versions(found: dict) -> dict:
    """Version strings of ggmlgrad, ggml and the peers (None: absent)."""
    info = gg.info()
    out = {"ggmlgrad": getattr(gg, "__version__", "?"), "ggml": info.get("ggml_version"),
           "ggml build": info.get("build"), "vector kernels": info.get("vector_kernels"),
           "executor accelerator": str(info.get("executor_accelerator", "?")).split(":")[0],
           "numpy": np.__version__}
    for name, mod in found.items():
        out[name] = getattr(mod, "__version__", "?") if mod is not None else None
    return out


# ---------------------------------------------------------------------- MLP (tanh, Adam)
def mlp_weights(sizes: tuple, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """(weight (out, in), bias) per layer, torch.nn.Linear's uniform init, from NumPy."""
    rng = np.random.default_rng(seed)
    out = []
    for n_in, n_out in zip(sizes[:-1], sizes[1:]):
        bound = 1.0 / np.sqrt(n_in)
        out.append((rng.uniform(-bound, bound, (n_out, n_in)).astype(np.float32),
                    rng.uniform(-bound, bound, n_out).astype(np.float32)))
    return out


def mlp_data(sizes: tuple, batch: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((batch, sizes[0]), dtype=np.float32),
            rng.integers(0, sizes[-1], batch).astype(np.int32))


def _layers(nn, sizes: tuple) -> list:
    layers = []
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(n_in, n_out))
        if i < len(sizes) - 2:
            layers.append(nn.Tanh())
    return layers


def gg_mlp(sizes: tuple, weights) -> "gg.nn.Sequential":
    layers = _layers(gg.nn, sizes)
    model = gg.nn.Sequential(*layers)
    with gg.no_grad():
        for layer, (w, b) in zip(layers[::2], weights):
            layer.weight.copy_(w)
            layer.bias.copy_(b)
    return model


def torch_mlp(torch, sizes: tuple, weights):
    layers = _layers(torch.nn, sizes)
    model = torch.nn.Sequential(*layers)
    with torch.no_grad():
        for layer, (w, b) in zip(layers[::2], weights):
            layer.weight.copy_(torch.from_numpy(w))
            layer.bias.copy_(torch.from_numpy(b))
    return model


class Step:
    """A timed callable and a way to read the parameters it trains (for validation)."""

    def __init__(self, fn, params):
        self.fn = fn
        self.params = params  # () -> list of NumPy arrays, in (weight, bias) layer order

    def __call__(self):
        return self.fn()


def gg_train_step(mode: str, sizes: tuple, batch: int, weights, data) -> Step:
    """zero_grad, forward, cross-entropy, backward, Adam step; ``mode`` one of :data:`GG_MODES`."""
    x, y = data
    model = gg_mlp(sizes, weights)
    opt = gg.optim.Adam(model.parameters(), lr=1e-3)
    params = lambda: [p.detach().numpy().copy() for p in model.parameters()]  # noqa: E731
    if mode == "gg capture":
        step = gg.capture_step(lambda xb, yb: gg.nn.functional.cross_entropy(model(xb), yb), opt)
        return Step(lambda: step(x, y), params)
    gx, gy = gg.tensor(x), gg.tensor(y, dtype=gg.int32)
    graph = mode == "gg graph"

    def fn():
        with gg.graph_mode(graph):
            opt.zero_grad()
            loss = gg.nn.functional.cross_entropy(model(gx), gy)
            loss.backward()
            opt.step()
        return loss
    return Step(fn, params)


def torch_train_step(torch, sizes: tuple, batch: int, weights, data) -> Step:
    x, y = data
    model = torch_mlp(torch, sizes, weights)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    tx, ty = torch.from_numpy(x), torch.from_numpy(y.astype(np.int64))

    def fn():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(tx), ty)
        loss.backward()
        opt.step()
        return loss
    return Step(fn, lambda: [p.detach().numpy().copy() for p in model.parameters()])


def _jax_forward(jnp, params, x):
    h = x
    for i, (w, b) in enumerate(params):
        h = h @ w.T + b
        if i < len(params) - 1:
            h = jnp.tanh(h)
    return h


def jax_train_step(jax, sizes: tuple, batch: int, weights, data) -> Step:
    """The same step as one ``jax.jit`` function (Adam written out: optax may be absent), its
    result blocked on every call."""
    jnp = jax.numpy
    x, y = jnp.asarray(data[0]), jnp.asarray(data[1])
    lr, b1, b2, eps = 1e-3, 0.9, 0.999, 1e-8

    def loss_fn(params):
        logits = _jax_forward(jnp, params, x)
        logp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))

    @jax.jit
    def step(state):
        params, m, v, t = state
        loss, grads = jax.value_and_grad(loss_fn)(params)
        t = t + 1
        m = jax.tree_util.tree_map(lambda m_, g: b1 * m_ + (1 - b1) * g, m, grads)
        v = jax.tree_util.tree_map(lambda v_, g: b2 * v_ + (1 - b2) * g * g, v, grads)
        c1, c2 = 1 - b1 ** t, 1 - b2 ** t
        params = jax.tree_util.tree_map(lambda p, m_, v_: p - lr * (m_ / c1) / (jnp.sqrt(v_ / c2) + eps),
                                        params, m, v)
        return (params, m, v, t), loss

    params = [(jnp.asarray(w), jnp.asarray(b)) for w, b in weights]
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    box = [(params, zeros, zeros, jnp.asarray(0.0, jnp.float32))]

    def fn():
        box[0], loss = step(box[0])
        return loss.block_until_ready()
    return Step(fn, lambda: [np.asarray(a) for wb in box[0][0] for a in wb])


def gg_forward(mode: str, sizes: tuple, weights, x: np.ndarray):
    """A no-grad forward of ``x`` read back to NumPy; ``mode`` one of :data:`GG_MODES`."""
    model = gg_mlp(sizes, weights)
    if mode == "gg capture":
        f = gg.capture(lambda xb: model(xb))
        return lambda: f(x)
    graph = mode == "gg graph"

    def fn():
        with gg.no_grad(), gg.graph_mode(graph):
            return model(gg.tensor(x)).numpy()
    return fn


def torch_forward(torch, sizes: tuple, weights, x: np.ndarray):
    model = torch_mlp(torch, sizes, weights)

    def fn():
        with torch.no_grad():
            return model(torch.from_numpy(x)).numpy()
    return fn


def jax_forward(jax, sizes: tuple, weights, x: np.ndarray):
    jnp = jax.numpy
    params = [(jnp.asarray(w), jnp.asarray(b)) for w, b in weights]
    f = jax.jit(lambda p, xb: _jax_forward(jnp, p, xb))
    return lambda: np.asarray(f(params, x))
