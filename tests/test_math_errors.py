"""Bad input to the math ops (comparisons, clamp, maximum/minimum, where, max/min/arg-reductions,
var/std, logsumexp, activations, softmax family) raises a Python error naming the op, before ggml.

The calls run in ONE subprocess (a ggml assertion would abort the process): each must raise the
expected exception type with a message naming the op; anything accepted is read back, so a drain
that ggml would abort in is caught too. Every call runs in eager and in graph mode.
"""
from __future__ import annotations

from battery import failures, run_battery

BATTERY = r'''
import json
import numpy as np
import ggmlgrad as gg

f = lambda *s: gg.tensor(np.ones(s, np.float32))
i23 = gg.tensor(np.ones((2, 3), np.int32))
h23 = f(2, 3).half()
a23, a34 = f(2, 3), f(3, 4)
E = {"V": ValueError, "T": TypeError, "VT": (ValueError, TypeError)}

CALLS = [
    # (name, expected, op name the message must contain, call). The math ops' own bad inputs are
    # the error inputs of their OpInfo rows (testing/opinfo_math.py, run by tests/test_ops_errors.py);
    # what stays here has no OpInfo row of its own (internal ops, copy_).
    ("cast to a non-dtype", "T", "cast", lambda: gg.ops.op.cast(a23, dtype="float32")),
    ("expand_as not broadcastable", "V", "expand_as", lambda: gg.ops.op.expand_as(f(4), a23)),
    ("copy_ from bigger tensor", "V", "", lambda: gg.zeros(3).copy_(gg.ones(4))),
]

results = []
for graph in (False, True):
    with gg.graph_mode(graph):
        for name, kind, opname, fn in CALLS:
            print("CALL", graph, name, flush=True)   # names the culprit if ggml aborts
            try:
                out = fn()
                if isinstance(out, gg.Tensor):
                    out.numpy()
                got = "no exception"
            except E[kind] as e:
                got = "ok" if opname.lower() in str(e).lower() else f"message lacks {opname!r}: {e}"
            except Exception as e:
                got = f"{type(e).__name__}: {e}"
            results.append((graph, name, got))
        assert (gg.ones(2) * 3).tolist() == [3.0, 3.0]      # the session still works
print("RESULTS " + json.dumps(results))
'''


def test_math_bad_input_raises_before_ggml():
    results = run_battery(BATTERY)
    assert len(results) == 2 * 3
    bad = failures(results)
    assert not bad, "calls that did not raise the expected error:\n" + "\n".join(bad)
