"""torch as the op-program fuzzer's second oracle (ggmlgrad.testing.fuzz_torch): a fixed-seed run of 2,000
programs in each of eager, graph, check and capture mode is compared with torch (values, gradients, dtypes,
requires_grad, error classes) and has no MISMATCH outside the documented limits; and each comparison can fail."""
from __future__ import annotations

import os
import re

import numpy as np
import torch

from ggmlgrad.testing import fuzz_programs as fz
from ggmlgrad.testing import fuzz_torch as ft

CI_SEED = 20261130
CI_EXAMPLES = int(os.environ.get("GGMLGRAD_FUZZ_EXAMPLES", "2000"))
CI_RUNS_PER_MODE = 2000


def _classes(report: str) -> dict:
    return {m: dict((k, int(v)) for k, v in (x.rsplit(" ", 1) for x in line.split(", ")))
            for m, line in re.findall(r"torch oracle (\w+): (.*)", report)}


def test_fixed_seed_run_against_numpy_and_torch_in_every_mode():
    ok, report = fz.run_subprocess(CI_SEED, CI_EXAMPLES, fz.MODES, timeout=1200)
    assert ok, report[-6000:]
    assert f"{CI_EXAMPLES} programs x 4 modes" in report
    runs = dict(x.rsplit(" ", 1) for x in re.search(r"runs per mode: (.*)", report).group(1).split(", "))
    assert set(runs) == set(fz.MODES)
    classes = _classes(report)
    assert set(classes) == set(fz.MODES), report[-3000:]          # torch compared every mode
    documented = set(ft.TORCH_LIMITS) | set(ft.TORCH_KNOWN_OPEN) | {f"extension:{e}" for e in ft.EXTENSIONS}
    for m, c in classes.items():
        assert c["programs"] == CI_EXAMPLES, (m, c)
        assert "MISMATCH" not in c, (m, c)
        assert set(c) - {"programs", "agree"} <= documented, (m, c)
        assert c["agree"] > CI_EXAMPLES // 2, (m, c)                # most programs agree outright
    if CI_EXAMPLES >= 2000:
        assert all(int(c) >= CI_RUNS_PER_MODE for c in runs.values()), runs


def test_every_fuzzed_op_has_a_torch_call():
    missing = [name for name in fz.fuzz_ops() if ft.torch_call(name) is None]
    assert not missing, missing


def test_torch_call_rebinds_opinfo_calls():
    assert ft.torch_call("squeeze")(torch.zeros(1, 3), 0).shape == (3,)
    x = torch.tensor([[1.0, -2.0], [3.0, 4.0]])
    assert torch.equal(ft.torch_call("cat")(x, x, 1), torch.cat([x, x], 1))
    assert torch.equal(ft.torch_call("relu")(x), torch.relu(x))


# OpInfo samples where ggmlgrad and torch differ, each a documented class of fuzz_torch (or a reported finding).
_SAMPLE_DIFFERENCES = {
    ("gelu_nonfinite", 0): "torch_overflow: torch's gelu(inf) is NaN",
    ("gelu_nonfinite", 1): "torch_overflow: torch's gelu(inf) is NaN",
    ("leaky_relu_zero_slope_nonfinite", 0): "torch_overflow: torch's leaky_relu(-inf, 0.0) is -inf * 0 = NaN",
    ("leaky_relu_zero_slope_nonfinite", 1): "torch_overflow: torch's leaky_relu(-inf, 0.0) is -inf * 0 = NaN",
    ("getitem_list", 3): "x[[[0, 1], [3, 3]]]: torch reads a nested list as a tuple of indices (NumPy: one "
                         "index array); the fuzzer generates flat lists only",
}


def test_torch_calls_agree_with_ggmlgrad_on_the_opinfo_samples():
    """The oracle's own check: each fuzzed row's torch call gives ggmlgrad's dtype and values on the row's
    samples (where the row has none of its own torch_fn), so a wrong translation cannot pass as agreement."""
    from ggmlgrad.testing.opinfo import all_opinfos, input_arrays, with_tensors
    import ggmlgrad as gg
    ops, checked, bad = fz.fuzz_ops(), 0, []
    for info in all_opinfos():
        if info.name not in ops or ops[info.name].call is not info.fn:
            continue
        call = ft.torch_call(info.name)
        for i, s in enumerate(info.samples(np.random.default_rng(0))):
            if (info.name, i) in _SAMPLE_DIFFERENCES:
                continue
            arrays = input_arrays(s)
            want = call(*with_tensors(s, [ft.to_torch(a) if a.dtype.kind in "iu" else torch.from_numpy(a.copy())
                                          for a in arrays]), **s.kwargs)
            got = info.fn(*with_tensors(s, [gg.tensor(a, dtype=gg.int32 if a.dtype.kind == "i" else None)
                                            for a in arrays]), **s.kwargs)
            checked += 1
            msg = fz.compare(got.detach().numpy().astype(np.float64), want.detach().double().numpy(),
                             max(info.atol, 1e-6), max(info.rtol, 1e-5))
            if got.dtype.name != ft.gg_dtype_name(want) or msg:
                bad.append((info.name, i, got.dtype.name, str(want.dtype), msg))
    assert not bad, bad
    assert checked > 800, checked


def _program(*ops: str, backward: bool = False, x=None) -> fz.Program:
    """A chain of unary ops on one (3, 4) input."""
    if x is None:
        x = np.random.default_rng(1).uniform(0.5, 2.0, (3, 4)).astype(np.float32)
    steps = [fz.Step(name, [["i", 0] if k == 0 else ["s", k - 1]], ()) for k, name in enumerate(ops)]
    weights = [np.ones(x.shape, np.float32) for _ in ops] if backward else []
    return fz.Program(0, 0, [x], [0] if backward else [], steps, backward, False, weights)


def _raises(e: Exception):
    def call(*args):
        raise e
    return call


def _with_torch(monkeypatch, name: str, call) -> None:
    real = ft.torch_call
    monkeypatch.setattr(ft, "torch_call", lambda n: call if n == name else real(n))


def test_a_value_differing_from_torch_is_a_mismatch(monkeypatch):
    prog = _program("exp", "neg")
    assert fz.check_program(prog, fz.MODES, torch_oracle=True).ok
    _with_torch(monkeypatch, "exp", lambda t: t.exp() * 1.01)
    rep = fz.check_program(prog, fz.MODES, torch_oracle=True)
    assert sum("vs torch: step s0 exp" in p for p in rep.problems) == 4, rep.problems


def test_a_dtype_or_requires_grad_differing_from_torch_is_a_mismatch(monkeypatch):
    prog = _program("neg", backward=True)
    assert fz.check_program(prog, ("eager",), torch_oracle=True).ok
    _with_torch(monkeypatch, "neg", lambda t: (-t).to(torch.float16))
    rep = fz.check_program(prog, ("eager", "graph"), torch_oracle=True)
    assert any("dtype float32, torch float16" in p for p in rep.problems), rep.problems
    _with_torch(monkeypatch, "neg", lambda t: (-t).detach())
    rep = fz.check_program(prog, ("eager",), torch_oracle=True)
    assert any("requires_grad True, torch False" in p for p in rep.problems), rep.problems


def test_a_gradient_differing_from_torch_is_a_mismatch(monkeypatch):
    prog = _program("tanh", backward=True)
    assert fz.check_program(prog, ("eager",), torch_oracle=True).ok
    # same values, another gradient
    _with_torch(monkeypatch, "tanh", lambda t: torch.tanh(t.detach()) + 0.5 * (t - t.detach()))
    rep = fz.check_program(prog, ("eager",), torch_oracle=True)
    assert any("differs from torch's" in p for p in rep.problems), rep.problems


def test_an_error_class_differing_from_torch_is_a_mismatch(monkeypatch):
    x = np.ones((3, 4), np.float32)
    prog = fz.Program(0, 0, [x], [], [fz.Step("reshape", [["i", 0]], ((5,),))], False, True, [])
    assert fz.check_program(prog, fz.MODES, torch_oracle=True).ok      # ShapeError is torch's RuntimeError
    monkeypatch.setattr(fz.fuzz_ops()["reshape"], "call", _raises(IndexError("reshape: another class")))
    rep = fz.check_program(prog, ("eager",), torch_oracle=True)
    assert any("where torch raises RuntimeError" in p for p in rep.problems), rep.problems


def test_accepting_what_torch_refuses_is_a_mismatch(monkeypatch):
    prog = _program("neg")
    _with_torch(monkeypatch, "neg", _raises(RuntimeError("torch refuses")))
    rep = fz.check_program(prog, ("eager",), torch_oracle=True)
    assert any("gave values where torch raises RuntimeError" in p for p in rep.problems), rep.problems


def test_documented_limits_and_known_open_classes_are_counted_not_failed():
    ft.COUNTS.clear()
    big = np.full((2, 2), 3e38, np.float32)          # torch's gelu overflows in float32 (Inf); the float64 value is finite
    assert fz.check_program(_program("gelu", x=big), ("eager",), torch_oracle=True).ok
    assert ft.COUNTS["eager"].get("torch_overflow") == 1 and "torch_overflow" in ft.TORCH_KNOWN_OPEN, ft.COUNTS
    half = fz.Program(0, 0, [np.ones((2, 2), np.float32)], [], [fz.Step("to_half", [["i", 0]], ()),
                                                                 fz.Step("exp", [["s", 0]], ())], False, False, [])
    rep = fz.check_program(half, ("eager",), torch_oracle=True)
    assert rep.ok, rep.problems
    assert ft.COUNTS["eager"].get("float32_compute") == 1, ft.COUNTS          # float16 exp: refused or computed
    assert set(ft.COUNTS["eager"]) == {"programs", "torch_overflow", "float32_compute"}, ft.COUNTS


def test_error_base_maps_torch_classes():
    assert ft.error_base(NotImplementedError) is RuntimeError
    assert ft.error_base(IndexError) is IndexError
    assert ft.error_base(torch.OutOfMemoryError) is RuntimeError


def test_limits_and_known_open_have_reasons():
    for table in (ft.TORCH_LIMITS, ft.TORCH_KNOWN_OPEN, ft.EXTENSIONS):
        assert all(isinstance(v, str) and len(v) > 30 for v in table.values())


def test_docstring_example():
    import doctest
    result = doctest.testmod(ft)
    assert result.attempted > 0 and result.failed == 0
