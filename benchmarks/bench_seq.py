"""Sequence-model training steps: ggmlgrad graph mode and capture vs PyTorch eager, in one run.

    python benchmarks/bench_seq.py                       # both workloads, wall clock
    python benchmarks/bench_seq.py --clock cpu           # one thread, process CPU time (busy machines)
    python benchmarks/bench_seq.py --profile lstm        # cProfile of one graph-mode LSTM step

Workloads (issue 24), each a whole training step (forward, loss, backward, Adam) on a fixed batch:
- ``lstm``: ``nn.LSTM(128, 128)`` over a sequence of 32, batch 32, linear head on the last hidden
  state, cross-entropy over 10 classes;
- ``encoder``: ``nn.TransformerEncoderLayer(d_model=128, nhead=4, dim_feedforward=512,
  dropout=0.0, batch_first=True)`` on (16, 64, 128), mean-squared output as the loss.
Goals (issue 24): captured <= 0.8x the faster peer, graph mode <= 1.0x.
"""
from __future__ import annotations

import argparse

import numpy as np

from common import add_timing_args, compare, fmt, header, profile, ratio, table, timing_setup, try_torch

import ggmlgrad as gg

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
    lstm, head = gg.nn.LSTM(HIDDEN, HIDDEN, batch_first=True), gg.nn.Linear(HIDDEN, CLASSES)
    opt = gg.optim.Adam(list(lstm.parameters()) + list(head.parameters()), lr=1e-3)

    def loss_fn(xb, yb):
        _, (h, _) = lstm(xb)
        return gg.nn.functional.cross_entropy(head(h[-1]), yb)
    return loss_fn, opt, _lstm_data()


def gg_encoder():
    layer = gg.nn.TransformerEncoderLayer(D_MODEL, HEADS, FF, dropout=0.0, batch_first=True)
    opt = gg.optim.Adam(layer.parameters(), lr=1e-3)
    return (lambda xb: layer(xb).square().mean()), opt, (_enc_data(),)


def graph_step(build):
    loss_fn, opt, data = build()
    tensors = [gg.tensor(a) for a in data]

    def step():
        with gg.graph_mode(True):
            opt.zero_grad()
            loss = loss_fn(*tensors)
            loss.backward()
            opt.step()
        return loss
    return step


def captured_step(build):
    loss_fn, opt, data = build()
    step = gg.capture_step(loss_fn, opt)
    return lambda: step(*data)


# ---------------------------------------------------------------- torch
def torch_lstm(torch):
    lstm, head = torch.nn.LSTM(HIDDEN, HIDDEN, batch_first=True), torch.nn.Linear(HIDDEN, CLASSES)
    opt = torch.optim.Adam(list(lstm.parameters()) + list(head.parameters()), lr=1e-3)
    x, y = _lstm_data()
    tx, ty = torch.from_numpy(x), torch.from_numpy(y.astype(np.int64))

    def step():
        opt.zero_grad()
        _, (h, _) = lstm(tx)
        loss = torch.nn.functional.cross_entropy(head(h[-1]), ty)
        loss.backward()
        opt.step()
    return step


def torch_encoder(torch):
    layer = torch.nn.TransformerEncoderLayer(D_MODEL, HEADS, FF, dropout=0.0, batch_first=True)
    opt = torch.optim.Adam(layer.parameters(), lr=1e-3)
    tx = torch.from_numpy(_enc_data())

    def step():
        opt.zero_grad()
        loss = layer(tx).square().mean()
        loss.backward()
        opt.step()
    return step


WORKLOADS = {"lstm": (gg_lstm, torch_lstm, "LSTM 128 seq 32 b32"),
             "encoder": (gg_encoder, torch_encoder, "EncoderLayer 128/4h seq 64 b16")}


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
    torch = try_torch()
    timing_setup(args, gg)
    print(header(gg) + f" | clock {args.clock}")
    rows = []
    for name, (build, tbuild, label) in WORKLOADS.items():
        if args.only and name != args.only:
            continue
        m = compare({"graph": graph_step(build), "capture": captured_step(build),
                     "torch": tbuild(torch) if torch else None}, args.number, args.repeat, warmup=3,
                    clock=args.clock)
        rows.append([label, fmt(m["graph"]), fmt(m["capture"]), fmt(m["torch"]), ratio(m["graph"], m["torch"]),
                     ratio(m["capture"], m["torch"]),
                     f"{computes_per_step(graph_step(build))} / {computes_per_step(captured_step(build))}"])
    print(table(["Adam step (median)", "gg graph", "gg capture", "torch eager", "graph/torch", "capture/torch",
                 "computes g/c"], rows))
    if args.profile:
        step = graph_step(WORKLOADS[args.profile][0])
        for _ in range(3):
            step()
        print(f"\ncProfile, ggmlgrad graph-mode {args.profile} step, per step:")
        print(profile(step, 10))


if __name__ == "__main__":
    main()
