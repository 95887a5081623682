"""The demo: an MLP classifier on the scikit-learn digits (1,797 8x8 images).

    python -m ggmlgrad demo                    # captured training step (the default): record once, replay
    python -m ggmlgrad demo --mode graph       # graph mode: one ggml graph per step
    python -m ggmlgrad demo --mode eager       # one graph compute per op

Prints loss, held-out test accuracy and the median step time per epoch, then a final line
``final test accuracy 0.9xxx`` (tests parse it). Needs scikit-learn: ``pip install "ggmlgrad[examples]"``.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable

import numpy as np

import ggmlgrad as gg

MODES = ("capture", "graph", "eager")
DEFAULT_MODE = "capture"


def load_digits_split(seed: int, test_fraction: float = 0.2):
    """Digits as float32 in [0, 1] and int32 labels, split into (train, test) by a seeded shuffle."""
    try:
        from sklearn.datasets import load_digits
    except ImportError as e:  # the [examples] extra
        raise SystemExit("the demo needs scikit-learn: pip install \"ggmlgrad[examples]\"") from e
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int32)
    order = np.random.default_rng(seed).permutation(len(x))
    n_test = int(round(len(x) * test_fraction))
    test, train = order[:n_test], order[n_test:]
    return (x[train], y[train]), (x[test], y[test])


def make_model(n_in: int, hidden: int, n_out: int) -> "gg.nn.Module":
    return gg.nn.Sequential(
        gg.nn.Linear(n_in, hidden), gg.nn.ReLU(),
        gg.nn.Linear(hidden, hidden), gg.nn.ReLU(),
        gg.nn.Linear(hidden, n_out),
    )


def _train_step(model, optimizer, mode: str) -> Callable[[np.ndarray, np.ndarray], float]:
    """A function (x batch, y batch) -> loss value that trains one step in the given mode."""

    def loss_fn(xb, yb):
        return gg.nn.functional.cross_entropy(model(xb), yb)

    if mode == "capture":
        captured = gg.capture_step(loss_fn, optimizer)

        def step(xb: np.ndarray, yb: np.ndarray) -> float:
            return float(captured(xb, yb))   # 1st call records; later calls replay (2 graph computes)
        return step

    def step(xb: np.ndarray, yb: np.ndarray) -> float:
        loss = loss_fn(gg.tensor(xb), gg.tensor(yb, dtype=gg.int32))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.item()
    return step


def accuracy(model, x: np.ndarray, y: np.ndarray) -> float:
    with gg.no_grad():
        logits = model(gg.tensor(x)).numpy()
    return float((logits.argmax(axis=1) == y).mean())


def _clamped_batch(batch_size: int, n_train: int) -> int:
    """A batch larger than the training set is the whole set, one batch per epoch (PyTorch's
    DataLoader gives that one smaller batch too; the demo otherwise drops the last partial batch).

    >>> _clamped_batch(5000, 1438), _clamped_batch(64, 1438)
    (1438, 64)
    """
    return min(batch_size, n_train)


def run_demo(epochs: int = 15, seed: int = 0, mode: str = DEFAULT_MODE, batch_size: int = 64,
             hidden: int = 128, lr: float = 2e-3, out: Callable[[str], None] = print) -> dict:
    """Train and evaluate; returns {"test_accuracy", "final_loss", "step_ms", "mode", "epochs"}.

    >>> run_demo(epochs=1, mode="eager", out=lambda s: None)["mode"]
    'eager'
    """
    if mode not in MODES:
        raise ValueError(f"demo: mode must be one of {MODES}, got {mode!r}")
    if epochs < 1:
        raise ValueError(f"demo: epochs must be >= 1, got {epochs}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"demo: batch_size must be an int >= 1, got {batch_size!r}")
    gg.manual_seed(seed)
    (x_train, y_train), (x_test, y_test) = load_digits_split(seed)
    asked, batch_size = batch_size, _clamped_batch(batch_size, len(x_train))
    model = make_model(x_train.shape[1], hidden, 10)
    optimizer = gg.optim.Adam(model.parameters(), lr=lr)
    rng = np.random.default_rng(seed + 1)
    out(f"ggmlgrad {gg.__version__} demo: digits {len(x_train)} train / {len(x_test)} test, "
        f"MLP 64-{hidden}-{hidden}-10, Adam lr={lr}, batch {batch_size}"
        f"{'' if asked == batch_size else f' (asked {asked}: the whole training set)'}, mode {mode}, "
        f"build {gg.info()['build']}")
    if gg.info()["library_source"] == "libggml-python":
        out("(prebuilt portable ggml: `python -m ggmlgrad build` makes matmuls and tanh/GELU/sigmoid faster)")

    with gg.graph_mode(mode != "eager"):   # capture records in graph mode too
        step = _train_step(model, optimizer, mode)
        loss = float("nan")
        step_ms: list[float] = []
        for epoch in range(1, epochs + 1):
            order = rng.permutation(len(x_train))
            times, losses = [], []
            computes_before = gg.counters()["computes"]
            # drop the last partial batch: one input signature, one recording in capture mode
            for start in range(0, len(order) - batch_size + 1, batch_size):
                idx = order[start:start + batch_size]
                t0 = time.perf_counter()
                losses.append(step(x_train[idx], y_train[idx]))
                times.append(time.perf_counter() - t0)
            per_step = (gg.counters()["computes"] - computes_before) / len(times)
            loss = float(np.mean(losses))
            acc = accuracy(model, x_test, y_test)
            median_ms = statistics.median(times) * 1e3
            step_ms.append(median_ms)
            out(f"epoch {epoch:3d}/{epochs}  loss {loss:.4f}  test accuracy {acc:.4f}  "
                f"step {median_ms:.3f} ms (median of {len(times)}, {per_step:.0f} graph computes each)")
    acc = accuracy(model, x_test, y_test)
    out(f"final test accuracy {acc:.4f}")
    return {"test_accuracy": acc, "final_loss": loss, "step_ms": step_ms[-1], "mode": mode, "epochs": epochs}
