"""The op-program fuzzer (ggmlgrad.testing.fuzz_programs): its checker can fail. The fixed-seed run (2,000
programs in each of eager, graph, check and capture mode, against NumPy and torch) is in test_fuzz_torch.py."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np

from ggmlgrad.testing import fuzz_programs as fz
from ggmlgrad.testing.opinfo import all_opinfos


def test_compare_catches_nan_inf_and_value_differences():
    exp = np.array([1.0, np.nan, np.inf, -np.inf])
    assert fz.compare(exp.copy(), exp, 1e-5, 1e-4) == ""
    assert "NaN" in fz.compare(np.array([1.0, 0.0, np.inf, -np.inf]), exp, 1e-5, 1e-4)
    assert "Inf" in fz.compare(np.array([1.0, np.nan, -np.inf, -np.inf]), exp, 1e-5, 1e-4)
    assert "value" in fz.compare(np.array([1.01, np.nan, np.inf, -np.inf]), exp, 1e-5, 1e-4)
    assert "shape" in fz.compare(exp[:2], exp, 1e-5, 1e-4)


def _program(*ops: str, backward: bool = False) -> fz.Program:
    """A hand-made chain of unary ops on one (3, 4) input with NaN, Inf and ordinary values."""
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    x[0, :2] = [np.nan, np.inf]
    steps = [fz.Step(name, [["i", 0] if k == 0 else ["s", k - 1]], ()) for k, name in enumerate(ops)]
    weights = [np.ones((3, 4), np.float32) for _ in ops] if backward else []
    return fz.Program(0, 0, [x], [0] if backward else [], steps, backward, False, weights)


def test_a_wrong_op_is_caught_in_every_mode(monkeypatch):
    prog = _program("exp", "neg", backward=True)
    assert fz.check_program(prog, fz.MODES).ok
    monkeypatch.setattr(fz.fuzz_ops()["exp"], "call", lambda t: t.exp() * 1.001 + 1e-3)
    rep = fz.check_program(prog, fz.MODES)
    assert not rep.ok
    assert sum("step s0 exp" in p and "vs torch" not in p for p in rep.problems) == 4, rep.problems   # NumPy's check


def test_an_error_outside_the_allowed_types_and_a_mode_disagreement_are_caught(monkeypatch):
    prog = _program("neg", "tanh")

    def bad(t):
        if fz.gg.graph_mode():
            raise AttributeError("broken")
        return -t
    monkeypatch.setattr(fz.fuzz_ops()["neg"], "call", bad)
    rep = fz.check_program(prog, ("eager", "graph"))
    assert any("outside ValueError" in p for p in rep.problems)
    assert any("modes disagree" in p for p in rep.problems)


def test_a_wrong_gradient_is_caught(monkeypatch):
    import ggmlgrad as gg
    prog = _program("tanh", backward=True)
    prog.inputs[0][0, :2] = [0.5, -0.25]                   # smooth everywhere: finite differences apply
    assert fz.check_program(prog, ("eager",)).ok
    monkeypatch.setattr(fz.fuzz_ops()["tanh"], "call", lambda t: gg.tanh(t) + t * 0.2)     # within atol, grad off
    monkeypatch.setattr(fz.fuzz_ops()["tanh"], "atol", 1.0)
    rep = fz.check_program(prog, ("eager",))
    assert any("finite differences" in p for p in rep.problems), rep.problems


def test_an_invalid_op_must_raise():
    # one where no op reads a bool/int/half tensor (there a clear error is acceptable anywhere)
    prog = next(p for p in (fz.generate(3, i) for i in range(200))
                if p.expect_error and not fz._either_error(p, fz._kinds(p)[0]))
    assert prog.expect_error
    ops = fz.fuzz_ops()
    last = ops[prog.steps[-1].op]
    saved = last.call
    try:
        last.call = lambda *a: a[0]                     # "succeeds" where the reference raises
        rep = fz.check_program(prog, ("eager",))
    finally:
        last.call = saved
    assert any("reference raises" in p for p in rep.problems) or rep.outcomes["eager"].kind == "known_open"


def test_snippet_reproduces_the_program(tmp_path):
    prog = fz.generate(0, 3)
    path = tmp_path / "snippet.py"
    path.write_text(fz.snippet(prog, ("eager", "check")))
    r = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, GGML_NO_BACKTRACE="1"))
    assert r.returncode == 0, r.stderr
    assert fz.program_from_json(fz.program_to_json(prog)).steps == prog.steps


def test_a_crash_fails_the_run_and_prints_the_program(monkeypatch):
    monkeypatch.setenv("GGMLGRAD_FUZZ_TEST_ABORT", "2")
    ok, report = fz.run_subprocess(7, 4, ("eager",), timeout=120)
    assert not ok
    assert "seed 7, example 2" in report and "program_from_json" in report
    done, failures, per_mode = fz.run_many(7, 4, ("eager",), chunk=4)       # the long run goes on after a crash
    assert done == 4 and len(failures) == 1 and "example 2" in failures[0]
    assert per_mode == {"eager": 1}          # the chunk after the crash (the crashed one prints no counts)


def test_every_one_or_two_array_opinfo_is_fuzzed():
    rng = np.random.default_rng(0)
    ops = fz.fuzz_ops()
    for o in all_opinfos():
        sig = fz._sig(o, rng)
        if o.name not in fz._AUTO_SKIP and o.fuzz and sig in ({("A",)}, {("A", "A")}):
            assert o.name in ops, o.name
        if not o.fuzz:     # opted out (dtype- or value-specific samples): never fuzzed
            assert o.name not in ops, o.name
    for name in fz._PARAM_OPS:
        assert name in ops or fz._REPLACED[name] in ops, name


def test_known_open_entries_have_reasons():
    assert all(isinstance(v, str) and len(v) > 20 for v in fz.KNOWN_OPEN.values())


def test_docstring_example():
    import doctest
    result = doctest.testmod(fz)
    assert result.attempted > 0 and result.failed == 0
