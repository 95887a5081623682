"""One route through the engine (issue 21): ``record`` appends a record, the drain is the only compute.

- ggml's graph compute is called in one module of the engine, ``engine/executor.py`` (the executor),
  and nowhere in ``capture/``;
- exactly one function of ``engine/`` calls the executor's compute: ``Drainer.run``; capture's
  replays call that same function (``ENGINE.run``), never an executor;
- at run time every compute (an eager op with and without its op plan, a graph-mode drain with and
  without a graph plan, an eager forward segment, a capture replay) reaches the executor from
  ``Drainer.run``;
- the engine is composed of parts, not mixins: ``Engine`` has no base class of the package.
Each scan has a self-test on synthetic source, so it can fail.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import numpy as np
import pytest

import ggmlgrad as gg
from ggmlgrad.engine import ENGINE, Engine
from ggmlgrad.engine import executor as executor_mod
from ggmlgrad.tensor import call_plans

PKG = Path(gg.__file__).resolve().parent
# ggml's compute, through ctypes or the optional compiled accelerator (``compute_planned``: a plan's
# lock, bind and compute in one C call)
GGML_COMPUTE = {"backend_sched_graph_compute", "graph_compute", "_graph_compute", "compute_planned"}


@pytest.fixture(autouse=True)
def eager_default():
    """The run-time tests below describe eager ops; CI also runs the suite with GGMLGRAD_GRAPH=1,
    so eager is set here (a test enters graph mode where it says so)."""
    old = call_plans.set_enabled(True)   # (on by default; GGMLGRAD_CALL_PLANS=0 turns them off)
    with gg.graph_mode(False):
        yield
    call_plans.set_enabled(old)


def _receiver_is_executor(node: ast.expr) -> bool:
    """``x.compute(...)`` where ``x`` is an executor: ``executor_for(...)``, ``self.executor``,
    ``plan.executor``, a name ending in ``executor``."""
    if isinstance(node, ast.Call):
        f = node.func
        return (isinstance(f, ast.Name) and f.id == "executor_for") or \
            (isinstance(f, ast.Attribute) and f.attr == "executor_for")
    if isinstance(node, ast.Attribute):
        return node.attr.lower().endswith("executor")
    return isinstance(node, ast.Name) and node.id.lower().endswith("executor")


def compute_calls(source: str) -> list[tuple[str, str]]:
    """``(enclosing function, what)`` of every call of ggml's graph compute (``what`` "ggml") or of
    an executor's ``compute`` (``what`` "executor") in ``source``."""
    out = []

    def visit(node: ast.AST, func: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else func
            if isinstance(child, ast.Call):
                f = child.func
                attr = f.attr if isinstance(f, ast.Attribute) else (f.id if isinstance(f, ast.Name) else "")
                if attr in GGML_COMPUTE:
                    out.append((func, "ggml"))
                elif attr == "compute" and isinstance(f, ast.Attribute) and _receiver_is_executor(f.value):
                    out.append((func, "executor"))
            visit(child, name)

    visit(ast.parse(source), "<module>")
    return out


def _calls_in(folder: str) -> dict[str, list[tuple[str, str]]]:
    found = {}
    for path in sorted((PKG / folder).rglob("*.py")):
        calls = compute_calls(path.read_text(encoding="utf-8"))
        if calls:
            found[f"{folder}/{path.relative_to(PKG / folder)}"] = calls
    return found


def test_the_scan_finds_compute_calls():
    src = ("def a(self):\n    self.executor.compute(p, 1)\n"
           "def b(d):\n    executor_for(d).compute(g, 1, 1)\n"
           "def c(p):\n    lib.backend_sched_graph_compute(p.sched, p.graph)\n"
           "def d(g):\n    g.compute()\n")          # a recording's own compute: not an executor
    assert compute_calls(src) == [("a", "executor"), ("b", "executor"), ("c", "ggml")]


def test_ggml_compute_is_called_by_the_executor_only():
    engine, capture = _calls_in("engine"), _calls_in("capture")
    ggml = {f: [c for c in calls if c[1] == "ggml"] for f, calls in engine.items()}
    assert {f: c for f, c in ggml.items() if c} == {"engine/executor.py": [("compute", "ggml"), ("compute", "ggml"),
                                                                         ("_tuned_compute", "ggml")]}
    assert capture == {}, f"capture computes through ENGINE.run only: {capture}"


def test_one_function_of_the_engine_calls_the_executor():
    engine = _calls_in("engine")
    callers = {(f, fn) for f, calls in engine.items() for fn, what in calls if what == "executor"}
    # the executor itself hands a built graph to the device's shared scheduler; everything else in
    # the engine reaches the executor from the drain's one run step
    assert callers == {("engine/executor.py", "compute"), ("engine/drain.py", "run")}, callers
    assert sum(1 for f, calls in engine.items() if f != "engine/executor.py"
               for _, what in calls if what == "executor") == 1


def test_capture_replays_compute_through_the_engines_run():
    src = (PKG / "capture" / "recording.py").read_text(encoding="utf-8")
    tree = ast.parse(src)
    replay = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "ReplayGraph")
    compute = next(n for n in replay.body if isinstance(n, ast.FunctionDef) and n.name == "compute")
    calls = [n.func for n in ast.walk(compute) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)]
    assert any(f.attr == "run" and isinstance(f.value, ast.Name) and f.value.id == "ENGINE" for f in calls)


def test_the_engine_is_composed_not_mixed():
    assert Engine.__bases__ == (object,)
    e = ENGINE.current
    for part in ("queue", "builder", "executor", "drainer", "segments"):
        assert getattr(e, part).__class__.__module__.startswith("ggmlgrad.engine."), part


def test_every_compute_reaches_the_executor_from_the_drains_run(monkeypatch):
    callers = []
    real = executor_mod.Executor.compute

    def spy(self, plan, threads, args=()):
        f = sys._getframe(1)
        callers.append((Path(f.f_code.co_filename).name, f.f_code.co_name, type(plan).__name__))
        return real(self, plan, threads, args)

    monkeypatch.setattr(executor_mod.Executor, "compute", spy)
    from ggmlgrad.engine.trace_cache import TRACE
    TRACE.clear()   # (a cache that earlier tests left thrashed makes no new op plans for a while)
    a = gg.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    for _ in range(3):                          # the ordinary drain, then the op plan
        np.testing.assert_allclose((a * 2.0).numpy(), np.arange(6).reshape(2, 3) * 2.0)
    hits = gg.counters()["call_plan_hits"]
    for _ in range(4):                          # the op plan, then the call's plan (tensor/call_plans.py)
        np.testing.assert_allclose((a / 4.0).numpy(), np.arange(6).reshape(2, 3) / 4.0)
    assert gg.counters()["call_plan_hits"] > hits
    for _ in range(3):                          # graph mode: built, then a graph plan
        with gg.graph_mode(True):
            y = (a + 1.0).exp()
        np.testing.assert_allclose(y.numpy(), np.exp(np.arange(6).reshape(2, 3) + 1.0), rtol=1e-6)
    net = gg.nn.Sequential(gg.nn.Linear(3, 4), gg.nn.Tanh())
    with gg.no_grad():
        outs = [net(a).numpy() for _ in range(4)]  # an eager forward segment, then its plan
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])
    step = gg.capture(lambda x: (x * 3.0).sum())
    for _ in range(3):
        assert abs(float(step(a).item()) - 45.0) < 1e-4
    with gg.graph_mode(True, check=True):        # check mode: each op drained at its call
        np.testing.assert_allclose((a - 1.0).numpy(), np.arange(6).reshape(2, 3) - 1.0)
    p = gg.tensor(np.ones(3, np.float32), requires_grad=True)
    opt = gg.optim.SGD([p], lr=0.5)
    for _ in range(3):                          # optimizer updates: in-place write records, drained
        opt.zero_grad()
        (p * p).sum().backward()
        opt.step()
    np.testing.assert_allclose(p.detach().numpy(), np.zeros(3), atol=1e-7)  # 1 - 0.5 * 2 = 0 after the first step
    kinds = {k for _, _, k in callers}
    assert {"BuiltGraph", "OpPlan", "Plan", "ReplayGraph"} <= kinds, kinds
    assert {(file, fn) for file, fn, _ in callers} == {("drain.py", "run")}, callers


def test_an_eager_op_is_a_record_then_a_drain(monkeypatch):
    seen = []
    d = ENGINE.current.drainer
    real = d.drain_locked

    def spy(reason):
        seen.append((reason, ENGINE.current.queue.one is not None))
        return real(reason)

    monkeypatch.setattr(ENGINE.current, "_drain_locked", spy)
    x = gg.tensor(np.ones(3, np.float32))
    old = call_plans.set_enabled(False)              # (a repeated call is its call plan: below)
    try:
        y = x + x
    finally:
        call_plans.set_enabled(old)
    assert seen and seen[0] == ("eager", True)       # the record was queued, then drained
    assert ENGINE.current.queue.one is None and len(ENGINE) == 0
    np.testing.assert_array_equal(y.numpy(), np.full(3, 2.0))


def test_a_repeated_eager_call_is_its_call_plan_run_by_the_drain(monkeypatch):
    """A call plan is a plan on the same route: no record, no drain_locked, one Drainer.run (the
    compute of the op plan the call's first runs made), counted as an eager drain."""
    from ggmlgrad.engine.trace_cache import TRACE
    TRACE.clear()   # (a cache that earlier tests left thrashed makes no new op plans for a while)
    d = ENGINE.current.drainer
    x = gg.tensor(np.arange(5, dtype=np.float32))
    for _ in range(3):
        x - 2.0
    drained, ran = [], []
    real_drain, real_run = d.drain_locked, d.run
    monkeypatch.setattr(ENGINE.current, "_drain_locked", lambda reason: drained.append(reason) or real_drain(reason))
    monkeypatch.setattr(d, "run", lambda *a: ran.append(type(a[0]).__name__) or real_run(*a))
    gg.reset_counters()
    y = x - 2.0
    assert drained == [] and ran == ["OpPlan"] and gg.counters()["call_plan_hits"] == 1
    assert gg.counters()["drains_by_reason"] == {"eager": 1} and gg.counters()["computes"] == 1
    np.testing.assert_array_equal(y.numpy(), np.arange(5) - 2.0)
