"""The op-program fuzzer (ggmlgrad.testing.fuzz_programs): its checker can fail, and a fixed-seed run of
2,000 programs, each in eager, graph, check and capture mode, passes in a subprocess."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np

from ggmlgrad.testing import fuzz_programs as fz
from ggmlgrad.testing.opinfo import all_opinfos

CI_SEED = 20261130
CI_EXAMPLES = int(os.environ.get("GGMLGRAD_FUZZ_EXAMPLES", "2000"))


def test_fixed_seed_run_in_every_mode():
    ok, report = fz.run_subprocess(CI_SEED, CI_EXAMPLES, fz.MODES, timeout=1200)
    assert ok, report
    assert f"{CI_EXAMPLES} programs x 4 modes" in report


def test_compare_catches_nan_inf_and_value_differences():
    exp = np.array([1.0, np.nan, np.inf, -np.inf])
    assert fz.compare(exp.copy(), exp, 1e-5, 1e-4) == ""
    assert "NaN" in fz.compare(np.array([1.0, 0.0, np.inf, -np.inf]), exp, 1e-5, 1e-4)
    assert "Inf" in fz.compare(np.array([1.0, np.nan, -np.inf, -np.inf]), exp, 1e-5, 1e-4)
    assert "value" in fz.compare(np.array([1.01, np.nan, np.inf, -np.inf]), exp, 1e-5, 1e-4)
    assert "shape" in fz.compare(exp[:2], exp, 1e-5, 1e-4)


def _program_with(op_name: str, seed: int = 5) -> fz.Program:
    for i in range(400):
        p = fz.generate(seed, i)
        if not p.expect_error and any(s.op == op_name for s in p.steps):
            return p
    raise AssertionError(f"no program with {op_name}")


def test_a_wrong_op_is_caught_in_every_mode(monkeypatch):
    prog = _program_with("exp")
    assert fz.check_program(prog, ("eager",)).ok or True     # may carry a known-open class; the broken one must fail
    ops = fz.fuzz_ops()
    monkeypatch.setattr(ops["exp"], "call", lambda t: t.exp() * 1.001 + 1e-3)
    rep = fz.check_program(prog, fz.MODES)
    assert not rep.ok
    assert any("exp" in p for p in rep.problems)


def test_an_error_outside_the_allowed_types_and_a_mode_disagreement_are_caught(monkeypatch):
    prog = _program_with("neg")
    ops = fz.fuzz_ops()

    def bad(t):
        if fz.gg.graph_mode():
            raise AttributeError("broken")
        return -t
    monkeypatch.setattr(ops["neg"], "call", bad)
    rep = fz.check_program(prog, ("eager", "graph"))
    assert any("outside ValueError" in p for p in rep.problems)
    assert any("modes disagree" in p for p in rep.problems)


def test_an_invalid_op_must_raise():
    prog = next(p for p in (fz.generate(3, i) for i in range(200)) if p.expect_error)
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
    done, failures = fz.run_many(7, 4, ("eager",), chunk=4)       # the long run goes on after a crash
    assert done == 4 and len(failures) == 1 and "example 2" in failures[0]


def test_every_one_or_two_array_opinfo_is_fuzzed():
    rng = np.random.default_rng(0)
    ops = fz.fuzz_ops()
    for o in all_opinfos():
        sig = fz._sig(o, rng)
        if o.name not in fz._AUTO_SKIP and sig in ({("A",)}, {("A", "A")}):
            assert o.name in ops, o.name
    for name in fz._PARAM_OPS:
        assert name in ops or fz._REPLACED[name] in ops, name


def test_known_open_entries_have_reasons():
    assert all(isinstance(v, str) and len(v) > 20 for v in fz.KNOWN_OPEN.values())


def test_docstring_example():
    import doctest
    result = doctest.testmod(fz)
    assert result.attempted > 0 and result.failed == 0
