"""OpInfo entries for the capture/Buffer internal ops (ggmlgrad.capture.ops)."""
from __future__ import annotations

import numpy as np

from ..capture import ops as _capture_ops  # noqa: F401  (registers the ops)
from ..ops import op
from .opinfo import INTERNAL_OPS, OpInfo, Sample, register


def _norm_samples(r):
    return [Sample((r.standard_normal((3, 4)),)), Sample((r.standard_normal((3, 4)), r.standard_normal(5))),
            Sample((r.standard_normal(()), r.standard_normal((2, 1, 3))))]


def _gather_samples(r):
    return [Sample((r.standard_normal((5, 3)), np.array([4, 0, 0, 2])), nondiff=(1,)),
            Sample((r.standard_normal((4, 2, 3)), np.array([1, 3])), nondiff=(1,)),
            Sample((r.standard_normal((6,)), np.array([5, 5, 0])), nondiff=(1,))]


def _clamped_samples(r):
    return [Sample((r.standard_normal((5, 3)), np.array([-3, 0, 9, 4])), nondiff=(1,))]


register(
    OpInfo("capture_copy", ("capture_copy",), lambda a: op.capture_copy(a), lambda a: a.copy(),
           lambda r: [Sample((r.standard_normal((3, 4)),)), Sample((r.standard_normal(()),))]),
    OpInfo("capture_grad_norm", ("capture_grad_norm",), lambda *gs: op.capture_grad_norm(*gs),
           lambda *gs: np.sqrt(sum((g ** 2).sum() for g in gs)), _norm_samples, grad=False),
    OpInfo("capture_clip_scale", ("capture_clip_scale",), lambda n, m: op.capture_clip_scale(n, m),
           lambda n, m: np.minimum(1.0, m / (n + 1e-6)),
           lambda r: [Sample((np.array(4.0), np.array(1.0))), Sample((np.array(0.5), np.array(1.0))),
                      Sample((np.array(0.0), np.array(2.0)))], grad=False),
    OpInfo("buffer_gather", ("buffer_gather",), lambda t, i: op.buffer_gather(t, i),
           lambda t, i: t[i], _gather_samples, grad=False),
    OpInfo("buffer_gather_clamped", ("buffer_gather",), lambda t, i: op.buffer_gather(t, i, clamp=True),
           lambda t, i: t[np.clip(i, 0, t.shape[0] - 1)], _clamped_samples, grad=False),
    OpInfo("buffer_rows", ("buffer_rows",), lambda t: op.buffer_rows(t, start=1, stop=3),
           lambda t: t[1:3], lambda r: [Sample((r.standard_normal((4, 3)),)), Sample((r.standard_normal((5,)),)),
                                        Sample((r.standard_normal((3, 2, 2)),))], grad=False),
)

_ = INTERNAL_OPS
