"""Bad input never reaches ggml (issue 2 item 8).

A ggml assertion aborts the whole process, so the battery runs in ONE
subprocess: each bad call must raise a Python exception of the expected type;
an abort kills the child (non-zero exit, the last call named on stdout) and the
test fails instead of taking pytest down. Every call runs in eager and in graph
mode (graph mode validates at the call, before anything is queued).
"""
from __future__ import annotations

from battery import failures, run_battery

BATTERY = r'''
import json, sys
import numpy as np
import ggmlgrad as gg

f = lambda *s: gg.tensor(np.ones(s, np.float32))
i32 = gg.tensor([0, 1, 2], dtype="int32")
a23, a34 = f(2, 3), f(3, 4)

E = {"V": (ValueError,), "T": (TypeError,), "I": (IndexError,), "R": (RuntimeError,),
     "VT": (ValueError, TypeError), "VI": (ValueError, IndexError), "TV": (TypeError, ValueError)}

CALLS = [
    # Bad inputs of the ops that have an OpInfo row are that row's error inputs (testing/opinfo_*.py,
    # run in eager, graph and capture mode by tests/test_ops_errors.py); the calls here are the rest.
    # broadcasting and shapes
    (">4-D tensor", "V", lambda: gg.tensor(np.ones((1, 1, 1, 1, 2)))),
    (">4-D zeros", "V", lambda: gg.zeros(1, 2, 1, 2, 1)),
    # dtypes
    ("requires_grad on int", "T", lambda: gg.tensor([1, 2], requires_grad=True)),
    ("bad dtype string", "T", lambda: gg.zeros(2, dtype="float128")),
    ("bad dtype object", "T", lambda: gg.zeros(2, dtype=complex)),
    ("int32 overflow", "V", lambda: gg.tensor([2 ** 40])),
    ("float NaN to int32", "V", lambda: gg.tensor([float("nan")], dtype="int32")),
    # data
    ("non-numeric data", "T", lambda: gg.tensor(["a", "b"])),
    ("object data", "T", lambda: gg.tensor([object()])),
    ("ragged list", "TV", lambda: gg.tensor([[1.0, 2.0], [3.0]])),
    ("complex data", "T", lambda: gg.tensor([1j])),
    ("None data", "T", lambda: gg.tensor(None)),
    ("Tensor() of a string", "T", lambda: gg.Tensor("abc")),        # torch.Tensor(data) is the legacy float32 constructor
    ("negative shape", "V", lambda: gg.zeros(-2)),
    ("float shape", "T", lambda: gg.ones(2.5)),
    ("linspace negative steps", "V", lambda: gg.linspace(0, 1, -1)),
    ("arange zero step", "V", lambda: gg.arange(0, 5, 0)),
    ("randint empty range", "V", lambda: gg.randint(5, 5, size=(2,))),
    ("to: unknown dtype/device", "VT", lambda: a23.to("complex64")),
    # empty tensors
    ("item of empty", "V", lambda: gg.zeros(0).item()),
    ("bool of empty", "V", lambda: bool(gg.zeros(0))),
    # devices
    ("bad device string", "V", lambda: gg.zeros(2, device="tpu")),
    ("set_device bad", "V", lambda: gg.set_device("quantum")),
    ("device wrong type", "TV", lambda: gg.zeros(2, device=3.5)),
    # scalars / params
    ("backward of non-scalar", "R", lambda: (gg.ones(2, requires_grad=True) * 2).backward()),
    ("backward gradient shape", "V", lambda: (gg.ones(2, requires_grad=True) * 2).backward(gg.ones(3))),
    ("copy_ shape mismatch", "V", lambda: gg.zeros(3).copy_(np.ones(4))),
    ("copy_ non-numeric", "T", lambda: gg.zeros(2).copy_(["a", "b"])),
    ("graph_mode bad arg", "T", lambda: gg.graph_mode("on")),
    ("matmul_precision bad", "V", lambda: gg.matmul_precision("f8")),
    ("set_num_threads zero", "V", lambda: gg.set_num_threads(0)),
    # losses
    ("cross_entropy target shape", "V", lambda: gg.nn.functional.cross_entropy(a34, i32[:2])),
]

only = set(sys.argv[2:])
results = []
for graph in (False, True):
    with gg.graph_mode(graph):
        for name, kinds, fn in CALLS:
            if only and name not in only:
                continue
            print("CALL", graph, name, flush=True)  # the last line names the culprit if ggml aborts
            try:
                out = fn()
                # whatever was accepted must compute: a read forces the drain ggml would abort in
                if isinstance(out, gg.Tensor):
                    out.numpy()
                got = "ok" if graph and kinds.endswith("~") else "no exception"
            except E[kinds.rstrip("~")] as e:
                got = "ok"
                if not str(e):
                    got = "empty message"
            except Exception as e:
                got = f"{type(e).__name__}: {e}"
            results.append((graph, name, got))
        # the session still works after the battery
        assert (gg.ones(2) * 3).tolist() == [3.0, 3.0]
print("RESULTS " + json.dumps(results))
'''


def test_bad_input_battery_raises_python_errors_and_never_aborts():
    results = run_battery(BATTERY)
    assert len(results) == 2 * 32
    bad = failures(results)
    assert not bad, "calls that did not raise the expected error:\n" + "\n".join(bad)
