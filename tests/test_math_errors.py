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
    # (name, expected, op name the message must contain, call)
    ("lt shapes", "V", "lt", lambda: a23 < a34),
    ("eq shapes", "V", "eq", lambda: gg.eq(f(2), f(3))),
    ("ge with a string", "T", "ge", lambda: gg.ge(a23, "x")),
    ("eq with None", "T", "eq", lambda: gg.eq(None, a23)),
    ("clamp no bounds", "V", "clamp", lambda: a23.clamp()),
    ("clamp string bound", "T", "clamp", lambda: gg.ops.op.clamp(a23, lo="0")),
    ("clamp int tensor", "T", "clamp", lambda: i23.clamp(0, 1)),
    ("clamp tensor bound shape", "V", "maximum", lambda: a23.clamp(min=f(4))),
    ("maximum shapes", "V", "maximum", lambda: gg.maximum(a23, a34)),
    ("minimum int", "T", "minimum", lambda: gg.minimum(i23, a23)),
    ("where shapes", "V", "where", lambda: gg.where(f(2, 3), f(4, 3), 0.0)),
    ("where float16 branch", "T", "where", lambda: gg.where(a23, h23, a23)),
    ("where int branch", "T", "where", lambda: gg.where(a23, i23, a23)),
    ("where no tensor", "T", "where", lambda: gg.where(1.0, 2.0, 3.0)),
    ("amax axis", "V", "amax", lambda: a23.amax(2)),
    ("amax repeated axis", "V", "amax", lambda: a23.amax((1, -1))),
    ("mean int", "T", "mean", lambda: i23.mean()),
    ("amax int axis", "V", "amax", lambda: i23.amax(2)),
    ("amin int empty", "V", "amin", lambda: gg.tensor(np.ones((2, 0), np.int32)).amin(1)),
    ("argmax int tuple axis", "T", "argmax", lambda: i23.argmax((0, 1))),
    ("sum int overflow", "V", "sum", lambda: gg.tensor(np.array([2**31 - 1, 1], np.int32)).sum()),
    ("sum int keepdim type", "T", "sum", lambda: i23.sum(0, keepdim=1)),
    ("amax empty", "V", "amax", lambda: f(2, 0).amax(1)),
    ("max tuple dim", "T", "amax", lambda: a23.max(dim=(0, 1))),
    ("max dim float", "T", "max", lambda: a23.max(dim=0.5)),
    ("min axis", "V", "min", lambda: a23.min(dim=-3)),
    ("amin axis", "V", "amin", lambda: a23.amin(dim=(0, 2))),
    ("argmax axis", "V", "argmax", lambda: a23.argmax(5)),
    ("argmax tuple axis", "T", "argmax", lambda: a23.argmax((0, 1))),
    ("argmax float16", "T", "argmax", lambda: h23.argmax()),
    ("argmin empty", "V", "argmin", lambda: f(0).argmin()),
    ("argmax keepdim type", "T", "argmax", lambda: a23.argmax(0, keepdim=1)),
    ("var axis", "V", "var", lambda: a23.var(3)),
    ("var int", "T", "var", lambda: i23.var()),
    ("var correction string", "T", "var", lambda: a23.var(correction="1")),
    ("var correction and unbiased", "T", "var", lambda: a23.var(correction=1, unbiased=False)),
    ("std axis", "V", "var", lambda: gg.std(a23, dim=(0, 2))),
    ("logsumexp axis", "V", "logsumexp", lambda: a23.logsumexp(-3)),
    ("logsumexp int", "T", "logsumexp", lambda: gg.logsumexp(i23, 0)),
    ("logsumexp empty", "V", "logsumexp", lambda: f(3, 0).logsumexp(1)),
    ("softmax axis", "V", "softmax", lambda: a23.softmax(2)),
    ("softmax axis type", "T", "softmax", lambda: a23.softmax(0.0)),
    ("softmax int", "T", "softmax", lambda: i23.softmax(0)),
    ("log_softmax float16", "T", "log_softmax", lambda: h23.log_softmax(1)),
    ("leaky_relu slope type", "T", "leaky_relu", lambda: gg.leaky_relu(a23, None)),
    ("leaky_relu int", "T", "leaky_relu", lambda: gg.leaky_relu(i23)),
    ("gelu approximate", "V", "gelu", lambda: gg.gelu(a23, approximate="fast")),
    ("gelu int", "T", "gelu", lambda: gg.gelu(i23)),
    ("silu float16", "T", "silu", lambda: gg.silu(h23)),
    ("softplus beta zero", "V", "softplus", lambda: gg.softplus(a23, beta=0)),
    ("softplus threshold type", "T", "softplus", lambda: gg.softplus(a23, threshold="20")),
    ("elu alpha type", "T", "elu", lambda: gg.elu(a23, alpha=[1.0])),
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
    assert len(results) == 2 * 55
    bad = failures(results)
    assert not bad, "calls that did not raise the expected error:\n" + "\n".join(bad)
