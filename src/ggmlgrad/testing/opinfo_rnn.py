"""OpInfo entries for the recurrent-cell ops (ops/rnn_cell.py): the LSTM cell and its fused gradient."""
from __future__ import annotations

import numpy as np

from ..ops import op
from .opinfo import OpInfo, Sample, bad, register


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def ref_lstm_cell(gates, c):
    # the op's shape rule (no broadcasting; the fuzzer feeds it any shapes and expects the same error)
    if gates.ndim != 2 or c.ndim != 2 or gates.shape != (c.shape[0], 4 * c.shape[1]) or 0 in c.shape:
        raise ValueError(f"lstm_cell: expected gates (N, 4H) and c (N, H), got {gates.shape} and {c.shape}")
    i, f, g, o = np.split(gates, 4, axis=-1)
    c_new = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
    return np.concatenate([_sigmoid(o) * np.tanh(c_new), c_new], axis=-1)


def _cell_samples(r):
    return [Sample((r.standard_normal((n, 4 * h)) * 1.5, r.standard_normal((n, h)))) for n, h in ((1, 1), (3, 4), (5, 8))]


def _cell_nonfinite(r):
    g = r.standard_normal((2, 8))
    g[0, 0], g[1, 5] = np.inf, np.nan
    return [Sample((g, r.standard_normal((2, 2))))]


register(
    OpInfo("lstm_cell", ("lstm_cell", "lstm_cell_backward"), lambda g, c: op.lstm_cell(g, c), ref_lstm_cell,
           _cell_samples, atol=1e-6, nonfinite=_cell_nonfinite,
           error_inputs=(bad(ValueError, "lstm_cell", np.zeros((2, 8), np.float32), np.zeros((2, 3), np.float32)),
                         bad(ValueError, "lstm_cell", np.zeros((2, 8), np.float32), np.zeros((3, 2), np.float32)),
                         bad(TypeError, "lstm_cell", np.zeros((2, 8), np.float32), np.zeros((2, 2), np.int32)),
                         bad(ValueError, "lstm_cell", np.zeros((0, 8), np.float32), np.zeros((0, 2), np.float32)))),
)


def ref_gru_cell(xw, hw, h):
    if (xw.ndim != 2 or h.ndim != 2 or xw.shape != hw.shape or xw.shape != (h.shape[0], 3 * h.shape[1])
            or 0 in h.shape):
        raise ValueError(f"gru_cell: expected xw and hw (N, 3H) and h (N, H), got {xw.shape}, {hw.shape}, {h.shape}")
    xr, xz, xn = np.split(xw, 3, axis=-1)
    hr, hz, hn = np.split(hw, 3, axis=-1)
    r, z = _sigmoid(xr + hr), _sigmoid(xz + hz)
    n = np.tanh(xn + r * hn)
    return (1 - z) * n + z * h


def _gru_samples(r):
    return [Sample((r.standard_normal((n, 3 * h)), r.standard_normal((n, 3 * h)), r.standard_normal((n, h))))
            for n, h in ((1, 1), (3, 4), (4, 6))]


register(
    OpInfo("gru_cell", ("gru_cell", "gru_cell_backward"), lambda x, hw, h: op.gru_cell(x, hw, h), ref_gru_cell,
           _gru_samples, atol=1e-6,
           error_inputs=(bad(ValueError, "gru_cell", np.zeros((2, 6), np.float32), np.zeros((2, 6), np.float32),
                             np.zeros((2, 3), np.float32)),
                         bad(ValueError, "gru_cell", np.zeros((2, 6), np.float32), np.zeros((2, 3), np.float32),
                             np.zeros((2, 2), np.float32)),
                         bad(TypeError, "gru_cell", np.zeros((2, 6), np.float32), np.zeros((2, 6), np.float32),
                             np.zeros((2, 2), np.int32)))),
)
