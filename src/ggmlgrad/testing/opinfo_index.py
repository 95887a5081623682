"""OpInfo entries for the index value check node (ggmlgrad.ops.indexing ``index_check``)."""
from __future__ import annotations

import numpy as np

from ..engine.checks import first_bad
from ..ops import op
from .opinfo import OpInfo, Sample, register


def _check_samples(r):
    big = r.integers(0, 7, 300).astype(np.int32)
    big[[17, 250]] = [9, -2]                                       # the first bad one wins, not the extreme
    return [Sample((np.array([0, 5, 2, 7], np.int32),), dict(lo=0, hi=2)),          # 5: first above
            Sample((np.array([[1, -4], [9, 0]], np.int32),), dict(lo=-3, hi=2)),    # -4: wrapped range
            Sample((np.array([-100, 1, -100, 3, -1], np.int32),), dict(lo=0, hi=2, ignore=-100)),
            Sample((np.array(2 ** 31 - 1, np.int32),), dict(lo=0, hi=4)),           # exact, not via float
            Sample((big,), dict(lo=0, hi=6)),
            Sample((np.array([[3], [0]], np.int32),), dict(lo=0, hi=2))]


def _ref_check(index, lo, hi, ignore=None):
    return np.array([first_bad(np.asarray(index, np.int64), lo, hi, ignore)], np.float64)


register(OpInfo("index_check", ("index_check",), lambda i, **p: op.index_check(i, **p), _ref_check,
                _check_samples, grad=False))
