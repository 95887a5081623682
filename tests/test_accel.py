"""The optional compiled executor accelerator (``_ggml/_accel.c``, ``python -m ggmlgrad build --accel``)
against the pure-Python path it replaces: same bits, same counters, same errors.

- the C ``PointerTable`` makes the same pointer stores as ``_ggml/nodes.py``'s on synthetic nodes
  (always: the file is compiled here when a compiler and Python's headers exist, else skipped);
- in this process, when the accelerator is loaded (CI's fast-build run builds it): the OpInfo
  table's eager samples, graph-mode plans, forward segments and capture replays with it on and off,
  bit for bit, with equal counters, and the C path really taken (``planned_runs``); a failure
  status from C, an armed fault, a replaced ``_graph_compute`` seam and a thread-setting change;
- without it loaded here: ``gg.info()`` says why, no plan is marked for it, and a subprocess with a
  freshly compiled accelerator (``GGMLGRAD_ACCEL=<file>``) matches the pure path bit for bit.
The pure-Python path runs in every case (the off half of each comparison, or the whole suite).
"""
from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import threading
from pathlib import Path

import numpy as np
import pytest

import ggmlgrad as gg
from ggmlgrad._ggml import accel
from ggmlgrad._ggml.api import TensorStruct
from ggmlgrad._ggml.nodes import PointerTable
from ggmlgrad.engine import context, executor
from ggmlgrad.engine.plans import configure_accelerator
from ggmlgrad.engine.trace_cache import OP, TraceCache
from ggmlgrad.runtime import faults
from ggmlgrad.testing.opinfo import all_opinfos, input_arrays, with_tensors

ACTIVE = accel.ACCEL is not None
needs_accel = pytest.mark.skipif(not ACTIVE, reason=f"executor accelerator {accel.STATUS}")
SRC = Path(gg.__file__).resolve().parents[1]


def _can_compile() -> str | None:
    """Why the accelerator cannot be compiled here, or None."""
    if sys.platform == "win32":
        return "the accelerator is built on Linux and macOS only"
    if not any(shutil.which(c) for c in (os.environ.get("CC") or "cc", "gcc", "clang")):
        return "no C compiler"
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").exists():
        return "no Python headers (python3-dev)"
    return None


@pytest.fixture(scope="module")
def built_accel(tmp_path_factory) -> Path:
    """The accelerator compiled into a temporary file by the build's own function."""
    why = _can_compile()
    if why:
        pytest.skip(f"cannot compile the executor accelerator here: {why}")
    from ggmlgrad.fastbuild import build_accel
    d = tmp_path_factory.mktemp("accel")
    return build_accel(out=d / Path(accel.accel_path()).name, log=d / "build.log")


# ------------------------------------------------------------------ the C table against Python's
class _Store:
    """A storage stand-in: ``data`` and ``buffer`` attributes (the generic attribute path)."""

    def __init__(self, data: int, buffer: int) -> None:
        self.data, self.buffer = data, buffer


class _In:
    """An op input stand-in: its ``_storage``."""

    def __init__(self, s: _Store) -> None:
        self._storage = s


def _fake_nodes(n: int) -> tuple[np.ndarray, list[int]]:
    size = ctypes.sizeof(TensorStruct)
    mem = np.zeros(n * size, np.uint8)
    base = mem.ctypes.data
    return mem, [base + i * size for i in range(n)]


def _same_stores(mod) -> None:
    """Random rebinding sequences through the C and the Python table leave the same bytes."""
    if mod is not accel.ACCEL:  # a module loaded here for the test: give it field offsets
        accel.activate(mod, _Store, _In, RuntimeError, 1 << 16)
    rng = np.random.default_rng(0)
    for trial in range(20):
        n_leaves, n_out = int(rng.integers(1, 4)), int(rng.integers(1, 3))
        n = n_leaves + n_out
        mems, tables = [], []
        for _ in range(2):
            mem, nodes = _fake_nodes(n + 3)
            bases = [0 if (i < n_leaves and rng.random() < 0.2) else nodes[i] for i in range(n)]
            views = [(nodes[n + k], int(b), int(o)) for k, (b, o) in
                     enumerate(zip(rng.integers(0, n, 3), rng.integers(0, 4096, 3)))]
            mems.append(mem)
            tables.append((bases, views))
        # the same layout in both memories, offset by the memory's own address
        shift = mems[1].ctypes.data - mems[0].ctypes.data
        bases0, views0 = tables[0]
        bases1 = [b + shift if b else 0 for b in bases0]
        views1 = [(v + shift, b, o) for v, b, o in views0]
        py, c = PointerTable(bases0, views0), mod.PointerTable(bases1, views1)
        pool = [_Store(int(d), int(b)) for d, b in zip(rng.integers(1, 1 << 40, 4), rng.integers(1, 1 << 40, 4))]
        for step in range(6):
            picks = [pool[int(i)] for i in rng.integers(0, len(pool), n)]
            if step % 2:
                py.bind(picks[:n_leaves], picks[n_leaves:])
                c.bind(picks[:n_leaves], picks[n_leaves:])
            elif n_out == 1:
                ins = [_In(s) for s in picks[:n_leaves]]
                py.bind_op(ins, picks[-1])
                c.bind_op(ins, picks[-1])
            assert mems[0].tobytes() == mems[1].tobytes(), (trial, step)
            assert c.bound_data == py.bound_data and c.bound_buf == py.bound_buf
        py.unbind(n_leaves)
        c.unbind(n_leaves)
        assert mems[0].tobytes() == mems[1].tobytes()


def test_the_c_table_stores_what_the_python_table_stores(built_accel):
    _same_stores(accel.ACCEL if ACTIVE else accel.load_from(built_accel))


def test_a_library_of_another_abi_is_refused(built_accel, monkeypatch):
    monkeypatch.setattr(accel, "ABI", accel.ABI + 1)
    with pytest.raises(ImportError, match="rebuild it"):
        accel.load_from(built_accel)


def test_the_compute_lock_behaves_as_threading_lock(built_accel):
    mod = accel.ACCEL if ACTIVE else accel.load_from(built_accel)
    lock = mod.ComputeLock()
    assert not lock.locked()
    with lock:
        assert lock.locked()
        assert lock.acquire(False) is False
        assert lock.acquire(timeout=0.01) is False
        got = []
        t = threading.Thread(target=lambda: got.append(lock.acquire(timeout=0.05)))
        t.start()
        t.join()
        assert got == [False]
    assert not lock.locked()
    with pytest.raises(RuntimeError, match="release unlocked lock"):
        lock.release()
    with pytest.raises(ValueError):
        lock.acquire(False, 1.0)
    assert lock.acquire() is True
    released = threading.Timer(0.05, lock.release)  # another thread's release wakes a blocked acquire
    released.start()
    assert lock.acquire(timeout=5) is True
    lock.release()


# ------------------------------------------------------------------ the status of this process
def test_info_says_whether_the_accelerator_is_active():
    status = gg.info()["executor_accelerator"]
    assert status == accel.STATUS
    assert status.startswith("active" if ACTIVE else ("disabled", "not built", "not loaded"))
    assert executor.accelerator_on() is ACTIVE


@pytest.mark.skipif(ACTIVE, reason="the accelerator is loaded in this process (tested below)")
def test_without_it_no_plan_is_marked_for_it():
    a = gg.tensor(np.ones((3, 3), np.float32))
    with gg.graph_mode(False):   # eager ops' plans (the suite also runs with GGMLGRAD_GRAPH=1)
        for _ in range(3):
            (a + a).numpy()
    plans = [p for p in context.current().trace_cache.entries(OP) if p is not None]
    assert plans and all(p.fast == 0 and type(p.pointers) is PointerTable for p in plans)
    with pytest.raises(RuntimeError, match="executor accelerator is"):
        executor.use_accelerator(True)


# ------------------------------------------------------------------ on and off, bit for bit
def _fresh_caches():
    return context.push(trace_cache=TraceCache())


def _counts(before: dict, after: dict) -> dict:
    keys = ("computes", "uploads", "downloads", "failed_drains")
    out = {k: after[k] - before[k] for k in keys}
    for k in ("computes_by_site", "drains_by_reason"):
        out[k] = {s: v - before[k].get(s, 0) for s, v in after[k].items() if v != before[k].get(s, 0)}
    return out


def _bits(x) -> tuple:
    if isinstance(x, (tuple, list)):
        return tuple(_bits(v) for v in x)
    if isinstance(x, gg.Tensor):
        x = x.detach().numpy()
    a = np.asarray(x)
    return (a.dtype.str, a.shape, a.tobytes())


def _with_accelerator(on: bool, fn):
    """``fn()`` with the accelerator on or off and plan caches of its own: (result, counter deltas,
    how many plan computes took the C path)."""
    was = executor.use_accelerator(on)
    token = _fresh_caches()
    runs = accel.ACCEL.planned_runs()
    before = gg.counters()
    try:
        got = fn()
    finally:
        after = gg.counters()
        context.pop(token)
        executor.use_accelerator(was)
    return got, _counts(before, after), accel.ACCEL.planned_runs() - runs


def _op_table_samples():
    rng = np.random.default_rng(7)
    out = []
    for info in all_opinfos():
        samples = info.samples(rng)
        if samples:
            out.append((info, samples[0]))
    return out


def _run_samples(samples, repeats: int = 3):
    """Each sample's forward ``repeats`` times (the op plan is made on the second and hit after),
    its outputs' bits or its error; every result is kept alive to the end and must still hold its
    bits then (a plan reuses a result's memory only when nothing holds it)."""
    got, held = [], []
    for info, sample in samples:
        gg.manual_seed(0)
        arrays = input_arrays(sample)
        tensors = [gg.tensor(a, dtype=gg.int32) if a.dtype.kind == "i" else gg.tensor(a) for a in arrays]
        args = with_tensors(sample, tensors)
        for _ in range(repeats):
            try:
                with np.errstate(all="ignore"):
                    out = info.fn(*args, **sample.kwargs)
                    got.append((info.name, _bits(out)))
                held.append((out, got[-1][1]))
            except Exception as e:  # the same error both ways
                got.append((info.name, type(e).__name__, str(e)))
    changed = [i for i, (out, bits) in enumerate(held) if _bits(out) != bits]
    assert not changed, f"{len(changed)} results changed after later ops"
    return got


@needs_accel
def test_the_op_table_eager_samples_are_the_same_bits_with_and_without():
    samples = _op_table_samples()
    assert len(samples) > 100
    on, on_counts, on_runs = _with_accelerator(True, lambda: _run_samples(samples))
    off, off_counts, off_runs = _with_accelerator(False, lambda: _run_samples(samples))
    assert len(on) == len(off)
    diff = [a[0] for a, b in zip(on, off) if a != b]
    assert not diff, f"{len(diff)} samples differ with the accelerator: {diff[:10]}"
    assert on_counts == off_counts
    assert off_runs == 0
    assert on_runs > len(samples) // 2, (on_runs, len(samples))  # the C path ran the plan hits


def _graph_program(x, w):
    """A graph-mode step (a graph plan from its second drain), an eager forward segment and a
    backward, over the same inputs."""
    outs = []
    for _ in range(3):
        with gg.graph_mode(True):
            y = ((x @ w).tanh() * 0.5 + x.sum()).exp()
        outs.append(y.numpy())
    gg.manual_seed(1)
    net = gg.nn.Sequential(gg.nn.Linear(4, 5), gg.nn.Tanh(), gg.nn.Linear(5, 2))
    with gg.no_grad():
        outs += [net(x).numpy() for _ in range(3)]
    for _ in range(3):
        xr = x.detach().requires_grad_(True)
        (net(xr) ** 2).sum().backward()
        outs.append(xr.grad.numpy())
    return [_bits(o) for o in outs]


@needs_accel
def test_graph_plans_and_segments_are_the_same_bits_with_and_without():
    rng = np.random.default_rng(3)
    x = gg.tensor(rng.standard_normal((3, 4)).astype(np.float32))
    w = gg.tensor(rng.standard_normal((4, 4)).astype(np.float32))
    on, on_counts, on_runs = _with_accelerator(True, lambda: _graph_program(x, w))
    off, off_counts, off_runs = _with_accelerator(False, lambda: _graph_program(x, w))
    assert on == off
    assert on_counts == off_counts
    assert on_runs > 0 and off_runs == 0


@needs_accel
def test_capture_replays_are_the_same_bits_with_and_without():
    def program():
        gg.manual_seed(2)
        lin = gg.nn.Linear(3, 2)
        step = gg.capture_step(lambda x: (lin(x) ** 2).mean(), gg.optim.SGD(lin.parameters(), lr=0.1))
        forward = gg.capture(lambda x: lin(x).tanh().sum())
        x = gg.tensor(np.arange(6, dtype=np.float32).reshape(2, 3) / 7)
        return ([_bits(step(x)) for _ in range(4)] + [_bits(forward(x)) for _ in range(3)]
                + [_bits(p) for p in lin.parameters()])

    on, on_counts, _ = _with_accelerator(True, program)
    off, off_counts, _ = _with_accelerator(False, program)
    assert on == off and on_counts == off_counts


# ------------------------------------------------------------------ failures and seams
def _failing_compute(status: int):
    """A C function of ggml_backend_sched_graph_compute's signature that reports ``status``."""
    return ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)(lambda sched, graph: status)


def _planned_add():
    """A tensor whose ``a + a`` has an op plan (eager mode: callers run in ``gg.graph_mode(False)``)."""
    a = gg.tensor(np.arange(4, dtype=np.float32))
    for _ in range(3):  # the plan is made and hit
        (a + a).numpy()
    return a


def _fail_planned_add(swap) -> tuple[str, dict]:
    """A planned ``a + a`` whose compute reports a failure (``swap()`` arms it and returns its undo):
    the error's message without its call site, and the counter deltas."""
    a = _planned_add()
    undo = swap()
    try:
        before = gg.counters()
        with pytest.raises(gg.GraphError) as e:
            a + a
        counts = _counts(before, gg.counters())
    finally:
        undo()
    assert (a + a).numpy().tolist() == [0.0, 2.0, 4.0, 6.0]  # the real compute is back
    return str(e.value).split(" Called at")[0], counts


@needs_accel
def test_a_failure_status_from_c_fails_as_the_pure_path_does():
    fake = _failing_compute(7)

    def c_status():
        configure_accelerator(ctypes.cast(fake, ctypes.c_void_p).value)
        return configure_accelerator

    def python_status():
        real = executor._graph_compute
        executor._graph_compute = lambda sched, graph: 7
        return lambda: setattr(executor, "_graph_compute", real)

    with gg.graph_mode(False):  # the failure at the op's own call
        on, _, on_runs = _with_accelerator(True, lambda: _fail_planned_add(c_status))
        off, _, off_runs = _with_accelerator(False, lambda: _fail_planned_add(python_status))
    assert on_runs >= 2 and off_runs == 0  # the failed compute and the one after it ran in C
    assert "status 7" in on[0]
    assert on == off and on[1]["failed_drains"] == 1


@needs_accel
def test_an_armed_fault_or_a_replaced_compute_takes_the_python_path(monkeypatch):
    was = executor.use_accelerator(True)
    token = _fresh_caches()
    modes = gg.graph_mode(False)
    modes.__enter__()
    try:
        a = _planned_add()
        runs = accel.ACCEL.planned_runs()
        faults.fail_next("compute")
        with pytest.raises(gg.GraphError, match="injected compute failure"):
            a + a
        assert accel.ACCEL.planned_runs() == runs  # the armed fault fired on the Python path
        assert (a + a).numpy().tolist() == [0.0, 2.0, 4.0, 6.0]
        assert accel.ACCEL.planned_runs() == runs + 1  # disarmed: the C path again
        monkeypatch.setattr(executor, "_graph_compute", lambda sched, graph: 5)
        with pytest.raises(gg.GraphError, match="status 5"):
            a + a
        assert accel.ACCEL.planned_runs() == runs + 1
    finally:
        faults.clear()
        modes.__exit__(None, None, None)
        context.pop(token)
        executor.use_accelerator(was)


@needs_accel
def test_a_thread_setting_change_goes_through_python_then_c():
    was = executor.use_accelerator(True)
    token = _fresh_caches()
    prev = gg.get_num_threads()
    modes = gg.graph_mode(False)
    modes.__enter__()
    try:
        a = _planned_add()
        gg.set_num_threads(2)
        runs = accel.ACCEL.planned_runs()
        assert (a + a).numpy().tolist() == [0.0, 2.0, 4.0, 6.0]  # Python sets 2 threads and computes
        assert (a + a).numpy().tolist() == [0.0, 2.0, 4.0, 6.0]  # now the setting matches: C
        assert accel.ACCEL.planned_runs() == runs + 1
    finally:
        gg.set_num_threads(prev)
        modes.__exit__(None, None, None)
        context.pop(token)
        executor.use_accelerator(was)


@needs_accel
def test_an_op_plan_runs_with_or_without_its_optional_storage_argument():
    """``OpPlan.bind(inputs, device, nbytes, s=None)``: the C run takes the same arguments."""
    was = executor.use_accelerator(True)
    token = _fresh_caches()
    try:
        with gg.graph_mode(False):
            a = _planned_add()
        (plan,) = [p for p in context.current().trace_cache.entries(OP) if p is not None]
        assert plan.fast == executor.OP_PLAN
        ex, inputs = executor.Executor(), [a, a]
        runs = accel.ACCEL.planned_runs()
        s3 = ex.compute(plan, 1, (inputs, a.device, plan.out_nbytes))
        s4 = ex.compute(plan, 1, (inputs, a.device, plan.out_nbytes, None))
        assert accel.ACCEL.planned_runs() == runs + 2 and s3.nbytes == s4.nbytes == plan.out_nbytes
        with pytest.raises(TypeError, match="wrong number of bind arguments"):
            ex.compute(plan, 1, (inputs, a.device))
    finally:
        context.pop(token)
        executor.use_accelerator(was)


@needs_accel
def test_threads_share_plans_under_the_c_lock():
    a = gg.tensor(np.arange(64, dtype=np.float32).reshape(8, 8))
    want = (np.arange(64, dtype=np.float32).reshape(8, 8) * 2) @ np.arange(64, dtype=np.float32).reshape(8, 8)
    errors = []

    def work():
        try:
            for _ in range(200):
                got = ((a + a) @ a).numpy()
                if not np.array_equal(got, want):
                    errors.append("wrong values")
                    return
        except Exception as e:  # pragma: no cover - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


# ------------------------------------------------------------------ a fresh build, in a subprocess
_SUBPROCESS = """
import json, numpy as np, ggmlgrad as gg
from ggmlgrad._ggml import accel
from ggmlgrad.engine import context
rng = np.random.default_rng(0)
x = gg.tensor(rng.standard_normal((5, 6)).astype(np.float32))
w = gg.tensor(rng.standard_normal((6, 3)).astype(np.float32))
outs = []
for _ in range(4):
    outs.append(((x @ w).relu() + 1.5).sum(1).numpy().tobytes().hex())
    outs.append((x[1:3].T * 2.0).numpy().tobytes().hex())
    with gg.graph_mode(True):
        y = (x * x).mean() - x.exp().sum()
    outs.append(y.numpy().tobytes().hex())
fast = sorted({p.fast for p in context.current().trace_cache.plans.values()
               if p is not None and p.kind != "segment"})
c = gg.counters()
print(json.dumps({"status": accel.STATUS.split(":")[0], "outs": outs, "fast": fast,
                  "runs": accel.ACCEL.planned_runs() if accel.ACCEL else 0,
                  "counts": [c["computes"], c["computes_by_site"], c["drains_by_reason"]]}))
"""


def _run_with(value: str) -> dict:
    env = dict(os.environ, GGMLGRAD_ACCEL=value, PYTHONPATH=str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", _SUBPROCESS], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_a_fresh_build_matches_the_pure_path_in_a_subprocess(built_accel):
    on, off = _run_with(str(built_accel)), _run_with("0")
    assert on["status"] == "active" and off["status"] == "disabled"
    assert on["outs"] == off["outs"]
    assert on["counts"] == off["counts"]
    assert off["fast"] == [0] and set(on["fast"]) <= {1, 2} and on["runs"] > 0


# ------------------------------------------------------------------ the build step
def test_build_accel_says_when_python_headers_are_missing(tmp_path, monkeypatch):
    from ggmlgrad import fastbuild
    if sys.platform == "win32":
        pytest.skip("the accelerator is built on Linux and macOS only")
    monkeypatch.setattr(sysconfig, "get_paths", lambda: {"include": str(tmp_path)})
    with pytest.raises(fastbuild.BuildError, match="Python's headers are missing"):
        fastbuild.build_accel(cc=sys.executable, out=tmp_path / "x.so")


@pytest.mark.parametrize("optional,rc", [(False, 1), (True, 0)])
def test_build_dash_dash_accel_reports_a_failure(optional, rc, monkeypatch, capsys):
    from ggmlgrad import fastbuild

    def fail(*a, **k):
        raise fastbuild.BuildError("no compiler, say")

    monkeypatch.setattr(fastbuild, "build_accel", fail)
    assert fastbuild.main(["--accel"] + (["--optional"] if optional else [])) == rc
    out = capsys.readouterr()
    assert "no compiler, say" in (out.out + out.err)


def test_build_dash_dash_accel_builds_and_checks_the_load(monkeypatch, tmp_path, capsys):
    from ggmlgrad import fastbuild
    seen = []
    monkeypatch.setattr(fastbuild, "build_accel", lambda: seen.append("built") or tmp_path / "a.so")
    monkeypatch.setattr(fastbuild, "_verify_accel", lambda: seen.append("verified") or "active: x")
    assert fastbuild.main(["--accel"]) == 0
    assert seen == ["built", "verified"] and "active: x" in capsys.readouterr().out


def test_the_fast_build_goes_on_without_the_accelerator(monkeypatch, tmp_path, capsys):
    """A missing Python header (say) skips the accelerator with a note; the fast build completes."""
    from ggmlgrad import fastbuild
    monkeypatch.setattr(fastbuild, "find_compilers", lambda: ("cc", "c++"))
    monkeypatch.setattr(fastbuild, "fetch_sdist", lambda work, log: tmp_path / "src")

    def fake_ggml(src, build, staging, *a, **k):
        (staging / "lib").mkdir(parents=True)
        return "OpenBLAS"

    def no_headers(*a, **k):
        raise fastbuild.BuildError("this Python's headers are missing")

    monkeypatch.setattr(fastbuild, "build_ggml", fake_ggml)
    monkeypatch.setattr(fastbuild, "build_kernels", lambda *a, **k: None)
    monkeypatch.setattr(fastbuild, "build_accel", no_headers)
    monkeypatch.setattr(fastbuild, "_verify", lambda prefix, selected=False: None)
    prefix = fastbuild.build([], 1, prefix=tmp_path / "prefix")
    assert (prefix / fastbuild.FAST_STAMP).exists()
    assert "executor accelerator skipped: this Python's headers are missing" in capsys.readouterr().out
