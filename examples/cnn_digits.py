"""A small CNN on scikit-learn's digits (8x8 images): two Conv2d + BatchNorm2d + ReLU + MaxPool2d
blocks and a linear classifier, trained with Adam, a cosine learning-rate schedule, a DataLoader,
and the best validation checkpoint saved (``.safetensors``) and loaded back for the test.

    python examples/cnn_digits.py                 # capture_step (one compute per step), 15 epochs
    python examples/cnn_digits.py --mode graph    # graph mode
    python examples/cnn_digits.py --quick         # 3 epochs (CI)

It prints one line per epoch (loss, validation accuracy, step time) and the test accuracy of the
best checkpoint; a progress bar when tqdm is installed.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

import ggmlgrad as gg
import ggmlgrad.nn.functional as F
from ggmlgrad import nn


def digits_splits(seed: int):
    """(train, validation, test) pairs of images (N, 1, 8, 8) in [0, 1] and int labels."""
    from sklearn.datasets import load_digits
    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None]
    y = d.target.astype(np.int32)
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order], y[order]
    n_test, n_val = 360, 240
    return ((x[n_test + n_val:], y[n_test + n_val:]), (x[n_test:n_test + n_val], y[n_test:n_test + n_val]),
            (x[:n_test], y[:n_test]))


def make_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),    # 16 x 4 x 4
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),   # 32 x 2 x 2
        nn.Flatten(), nn.Linear(128, 10))


def accuracy(model: nn.Module, x: np.ndarray, y: np.ndarray) -> float:
    model.eval()
    with gg.no_grad():
        pred = model(gg.tensor(x)).argmax(1).numpy()
    model.train()
    return float(np.mean(pred == y))


def _progress(total: int, enabled: bool):
    try:
        from tqdm import tqdm
    except ImportError:
        tqdm = None
    if tqdm is None or not enabled:
        class _Plain:
            def update(self, n=1):
                pass

            def set_postfix(self, **kw):
                pass

            def close(self):
                pass
        return _Plain()
    return tqdm(total=total, unit="step", desc="CNN digits", mininterval=0.5, leave=False)


def train(mode: str, epochs: int, seed: int, batch_size: int, progress: bool, checkpoint: str) -> dict:
    gg.manual_seed(seed)
    (xtr, ytr), (xva, yva), (xte, yte) = digits_splits(seed)
    model = make_model()
    opt = gg.optim.Adam(model.parameters(), lr=3e-3)
    loader = gg.data.DataLoader(gg.data.TensorDataset(xtr, ytr), batch_size=batch_size, shuffle=True,
                                drop_last=True, seed=seed)
    sched = gg.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs * len(loader))

    def loss_fn(xb, yb):
        return F.cross_entropy(model(xb), yb)

    step = gg.capture_step(loss_fn, opt) if mode == "capture" else None
    best, bar = -1.0, _progress(epochs * len(loader), progress)
    with gg.graph_mode(mode == "graph"):
        for epoch in range(1, epochs + 1):
            losses, times = [], []
            for xb, yb in loader:
                t0 = time.perf_counter()
                if step is not None:
                    loss = float(step(xb, yb))
                else:
                    opt.zero_grad()
                    out = loss_fn(xb, yb)
                    out.backward()
                    opt.step()
                    loss = out.item()
                times.append(time.perf_counter() - t0)
                sched.step()
                losses.append(loss)
                bar.update(1)
                bar.set_postfix(loss=f"{loss:.3f}")
            val = accuracy(model, xva, yva)
            if val > best:   # keep the best validation checkpoint
                best = val
                gg.save(model.state_dict(), checkpoint)
            print(f"epoch {epoch:2d}/{epochs}  loss {np.mean(losses):.4f}  val accuracy {val:.4f}  "
                  f"step {np.median(times) * 1e3:.2f} ms (median)", flush=True)
    bar.close()
    model.load_state_dict(gg.load(checkpoint))
    return {"best_val": best, "test": accuracy(model, xte, yte)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=["capture", "graph", "eager"], default="capture")
    ap.add_argument("--epochs", type=int, default=15)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="3 epochs (CI)")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--checkpoint", default=None, help="where the best checkpoint goes (default: a temp file)")
    args = ap.parse_args(argv)
    epochs = 3 if args.quick else args.epochs
    with tempfile.TemporaryDirectory() as tmp:
        path = args.checkpoint or os.path.join(tmp, "cnn_digits_best.safetensors")
        start = time.perf_counter()
        res = train(args.mode, epochs, args.seed, args.batch_size, not args.no_progress, path)
        wall = time.perf_counter() - start
    print(f"mode {args.mode}, build {gg.info()['build']}: best val accuracy {res['best_val']:.4f}, "
          f"test accuracy of the best checkpoint {res['test']:.4f} ({wall:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
