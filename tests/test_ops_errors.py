"""Every OpInfo error input raises its error, naming the op, in eager mode, graph mode and inside
gg.capture, before anything reaches ggml.

The calls run in ONE subprocess (a ggml assertion would abort the process): an abort fails the
test, naming the last call, instead of taking pytest down. Anything accepted is read back, so a
graph that ggml would abort in is computed too.
"""
from __future__ import annotations

from battery import run_battery

from ggmlgrad.testing.opinfo import error_cases

SCRIPT = r'''
import json
import numpy as np
import ggmlgrad as gg
from ggmlgrad.testing.opinfo import error_cases, run_error_input


def describe(e):
    return ", ".join(f"{a.dtype}{a.shape}" if isinstance(a, np.ndarray) else repr(a) for a in e.sample.args)


results = []
for mode in ("eager", "graph", "capture"):
    for info, e in error_cases():
        name = f"{info.name}({describe(e)})"
        print("CALL", mode, name, flush=True)   # names the culprit if ggml aborts
        results.append((mode, name, run_error_input(info, e, mode)))
    assert (gg.ones(2) * 3).tolist() == [3.0, 3.0]      # the session still works
print("RESULTS " + json.dumps(results))
'''


def test_every_error_input_raises_in_every_mode():
    results = run_battery(SCRIPT)
    assert len(results) == 3 * len(error_cases())
    bad = [f"{mode}: {name}: {got}" for mode, name, got in results if got != "ok"]
    assert not bad, "error inputs that did not raise the expected error:\n" + "\n".join(bad)


def test_error_inputs_name_the_op_they_belong_to():
    """Each error input's expected message names something (the op, or the argument at fault)."""
    cases = error_cases()
    assert len(cases) >= 135
    assert all(e.match for _, e in cases), [info.name for info, e in cases if not e.match]
