"""The per-graph CPU thread policy: one thread for small graphs, more only for heavy nodes
and only as many as the load average leaves free."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import ggmlgrad as gg
from ggmlgrad.runtime import threads


@pytest.fixture
def four_cores(monkeypatch):
    monkeypatch.setattr(threads, "MAX_THREADS", 4)
    monkeypatch.setattr(threads, "THREAD_LIMIT", 4)
    monkeypatch.setattr(threads, "_override", None)
    return monkeypatch


def test_small_graphs_run_on_one_thread(four_cores):
    four_cores.setattr(threads.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert threads.choose_threads(1e9, 2 * 256 ** 3) == 1        # 33 MFLOP node: sync costs more


def test_heavy_nodes_use_the_free_cores(four_cores):
    four_cores.setattr(threads.os, "getloadavg", lambda: (1.0, 1.0, 1.0))   # only this process
    assert threads.choose_threads(3e9, 2 * 1024 ** 3) == 4
    four_cores.setattr(threads.os, "getloadavg", lambda: (3.0, 3.0, 3.0))   # two cores busy elsewhere
    assert threads.choose_threads(3e9, 2 * 1024 ** 3) == 2
    four_cores.setattr(threads.os, "getloadavg", lambda: (9.0, 9.0, 9.0))   # oversubscribed
    assert threads.choose_threads(3e9, 2 * 1024 ** 3) == 1
    four_cores.setattr(threads.os, "getloadavg", lambda: (1.0, 1.0, 1.0))
    assert threads.choose_threads(1e8, 70e6) == 2                 # work bounds it too


def test_set_num_threads_overrides_and_validates(four_cores):
    gg.set_num_threads(3)
    try:
        assert threads.choose_threads(0, 0) == 3
        assert gg.get_num_threads() == 3
    finally:
        gg.set_num_threads(None)
    assert gg.get_num_threads() is None
    for bad in (0, -1):
        with pytest.raises(ValueError, match="positive int"):
            gg.set_num_threads(bad)
    for bad in (1.5, True, "2", [2]):
        with pytest.raises(TypeError, match="positive int"):
            gg.set_num_threads(bad)
    assert gg.get_num_threads() is None  # nothing changed by the rejected calls
    gg.set_num_threads(np.int64(2))      # NumPy integers are integers (torch takes them too)
    try:
        assert gg.get_num_threads() == 2 and type(gg.get_num_threads()) is int
    finally:
        gg.set_num_threads(None)


def test_set_num_threads_caps_at_the_limit_and_warns_once(four_cores):
    four_cores.setattr(threads, "_warned_cap", False)
    try:
        with pytest.warns(RuntimeWarning, match="asked for 1000 CPU threads; using 4"):
            gg.set_num_threads(1000)
        assert gg.get_num_threads() == 4 and threads.choose_threads(0, 0) == 4
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the second cap is silent
            gg.set_num_threads(10 ** 6)
        assert gg.get_num_threads() == 4
        gg.set_num_threads(4)  # the limit itself is not capped
        assert gg.get_num_threads() == 4
    finally:
        gg.set_num_threads(None)


_HUGE_THREADS = """
import time, warnings, numpy as np, ggmlgrad as gg
from ggmlgrad.runtime import threads
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as w:
    if {call}:
        gg.set_num_threads(10 ** 6)
assert gg.get_num_threads() == threads.THREAD_LIMIT <= threads.MAX_THREADS, gg.get_num_threads()
assert any("CPU threads" in str(x.message) for x in w) == {call}
a = np.arange(64 * 64, dtype=np.float32).reshape(64, 64) / 4096
t0 = time.perf_counter()
got = (gg.tensor(a) @ gg.tensor(a)).numpy()
took = time.perf_counter() - t0
np.testing.assert_allclose(got, a.astype(np.float64) @ a, rtol=1e-5)
assert took < 5.0, took   # 1000 threads took 10-60 s
print("ok")
"""


@pytest.mark.parametrize("how", ["call", "env"])
def test_a_huge_thread_count_is_capped_not_an_abort(how):
    import os
    env = dict(os.environ, GGML_NO_BACKTRACE="1")
    env.pop("GGMLGRAD_NUM_THREADS", None)
    if how == "env":
        env["GGMLGRAD_NUM_THREADS"] = "1000000"
    code = _HUGE_THREADS.replace("{call}", str(how == "call"))
    if how == "env":  # the warning comes at import, before catch_warnings: check stderr instead
        code = code.replace("== True", "== False")
    r = subprocess.run([sys.executable, "-W", "always", "-c", code], capture_output=True, text=True,
                       timeout=60, env=env)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]
    if how == "env":
        assert "GGMLGRAD_NUM_THREADS asked for 1000000 CPU threads" in r.stderr


@pytest.mark.parametrize("value", ["abc", "0", "-3", "2.5"])
def test_a_bad_thread_count_in_the_environment_warns_and_is_ignored(value):
    import os
    env = dict(os.environ, GGMLGRAD_NUM_THREADS=value, GGML_NO_BACKTRACE="1")
    code = "import ggmlgrad as gg; assert gg.get_num_threads() is None; print(float((gg.ones(3) * 2).sum()))"
    r = subprocess.run([sys.executable, "-W", "always", "-c", code], capture_output=True, text=True,
                       timeout=60, env=env)
    assert r.returncode == 0 and r.stdout.strip() == "6.0", r.stderr[-2000:]
    assert f"GGMLGRAD_NUM_THREADS={value!r} is not a positive integer" in r.stderr


@pytest.fixture(autouse=True)
def _idle_machine(monkeypatch):
    """The tuner tests below script the timings (some with more threads than this machine has); the
    real load average must not skip their trials. Tests of the load policy patch it themselves."""
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (-64.0, -64.0, -64.0), raising=False)


def test_thread_tuner_alternates_then_keeps_the_faster(monkeypatch):
    monkeypatch.setattr(threads, "_override", None)
    t = threads.ThreadTuner(4)
    picks = []
    while not t.choice:
        n = t.pick()
        picks.append(n)
        t.record(n, 1.0 if n == 4 else 1.5)  # 4 threads a little faster
        assert len(picks) <= 24
    # blocks of two computes per count, taking turns; the first of each block is not counted
    assert picks[:6] == [1, 1, 4, 4, 1, 1]
    assert picks.count(1) == picks.count(4) == threads._BLOCK * threads._TRIALS
    assert t.choice == 4 and t.pick() == 4
    close = threads.ThreadTuner(4)
    while not close.choice:
        n = close.pick()
        close.record(n, 0.95 if n == 4 else 1.0)  # 4 threads only 5% faster: not worth the cores
    assert close.choice == 1
    slow = threads.ThreadTuner(4)
    for _ in range(4):
        n = slow.pick()
        slow.record(n, 1.0 if n == 1 else 5.0)
    assert slow.choice == 0  # one counted pair decides nothing: a single sample may be load
    for _ in range(4):
        n = slow.pick()
        slow.record(n, 1.0 if n == 1 else 5.0)
    assert slow.choice == 1  # a clear (3x) loser decides after two counted pairs


def test_thread_tuner_does_not_count_the_switch(monkeypatch):
    """The first compute after switching counts pays for waking or starting threads; a steady
    run never does, so it is not a sample: threads that are slow only then still win."""
    monkeypatch.setattr(threads, "_override", None)
    t = threads.ThreadTuner(2)
    last = None
    while not t.choice:
        n = t.pick()
        switched = n != last
        last = n
        t.record(n, (1.0 if n == 1 else 0.7) + (5.0 if switched and n == 2 else 0.0))
    assert t.choice == 2
    assert all(x == 0.7 for x in t.times_many)


def test_thread_tuner_measures_again_after_a_while(monkeypatch):
    """A choice made under a burst of load is re-measured: every _RETUNE_EVERY computes the tuner
    alternates again, and the new median decides."""
    monkeypatch.setattr(threads, "_override", None)
    t = threads.ThreadTuner(2)
    speed = {1: 1.0, 2: 0.5}  # at first 2 threads are faster

    def run(n_computes):
        for _ in range(n_computes):
            n = t.pick()
            t.record(n, speed[n])

    run(threads._BLOCK * 2 * threads._TRIALS)
    assert t.choice == 2
    speed[2] = 1.6  # the load changed: now 1 thread is faster
    run(threads._RETUNE_EVERY - 1)
    assert t.choice == 2 and t.pick() == 2  # not yet
    run(1)
    assert t.choice == 0  # measuring again
    run(threads._BLOCK * 2 * threads._TRIALS)
    assert t.choice == 1


def test_thread_tuner_only_for_heavy_cpu_graphs_and_obeys_the_override(monkeypatch):
    monkeypatch.setattr(threads, "MAX_THREADS", 2)
    assert threads.ThreadTuner.for_work(threads.TRY_THREADS_WORK - 1) is None
    assert threads.ThreadTuner.for_work(threads.TRY_THREADS_WORK, "cuda") is None
    # BLAS-accelerated graphs try its threads only for heavier nodes
    assert threads.ThreadTuner.for_work(threads.TRY_THREADS_WORK, accelerated=True) is None
    assert threads.ThreadTuner.for_work(threads.TRY_BLAS_THREADS_WORK, accelerated=True) is not None
    t = threads.ThreadTuner.for_work(threads.TRY_THREADS_WORK)
    assert t is not None and t.many == 2
    monkeypatch.setattr(threads, "_override", 3)
    assert t.pick() == 3
    t.record(3, 1.0)
    assert t.choice == 0 and not t.times_many and not t.times_one


def test_threads_go_to_the_accelerator_or_the_cpu_never_both(monkeypatch):
    from ggmlgrad.runtime import executor as ex_mod
    calls = []
    monkeypatch.setattr(ex_mod.lib, "backend_cpu_set_n_threads", lambda b, n: calls.append(("cpu", n)))
    monkeypatch.setattr(ex_mod, "_use_pool", lambda b, n: calls.append(("pool", n)))
    ex = ex_mod.Executor.__new__(ex_mod.Executor)
    ex.cpu_backend, ex.threads, ex._thread_config = 1, 0, (0, 0)
    ex.thread_setters = [(2, lambda b, n: calls.append(("blas", n)))]
    ex.set_threads(2, True)
    assert calls == [("pool", 1), ("cpu", 1), ("blas", 2)]
    calls.clear()
    ex.set_threads(2, False)   # a graph with no accelerator node: the CPU gets the threads
    assert calls == [("pool", 2), ("cpu", 2), ("blas", 1)]
    calls.clear()
    ex.set_threads(2, False)   # unchanged: no ggml call
    assert calls == []
    ex.set_threads(2)          # unknown: assume the accelerator does the heavy work
    assert calls == [("pool", 1), ("cpu", 1), ("blas", 2)]
    calls.clear()
    ex.thread_setters = []     # no accelerator: the CPU gets them
    ex.set_threads(2)
    assert calls == [("pool", 2), ("cpu", 2)]


def _cpu_chain(x):
    """CPU-only ops (a BLAS backend would take matmuls, and then the CPU runs on one thread)."""
    return ((x * x - x).relu() + x.tanh()).sum(axis=0)


def test_cpu_threadpools_persist_per_thread_count_and_give_numpy_values(monkeypatch):
    from ggmlgrad.runtime import executor as ex_mod
    monkeypatch.setattr(threads, "THREAD_LIMIT", 2)  # two threads even on a one-core machine
    x64 = np.linspace(-1, 1, 128 * 128).reshape(128, 128)
    expected = (np.maximum(x64 * x64 - x64, 0) + np.tanh(x64)).sum(axis=0)
    x = gg.tensor(x64.astype(np.float32))
    pools = {}
    try:
        for n in (1, 2, 1, 2):
            gg.set_num_threads(n)
            np.testing.assert_allclose(_cpu_chain(x).numpy(), expected, rtol=1e-5, atol=1e-5)
            cpu = ex_mod.executor_for(gg.get_device()).cpu_backend
            pool = ex_mod._POOLS.get((cpu, n))
            if pool is None:  # a ggml without the threadpool API computes with disposable pools
                assert not hasattr(ex_mod.lib, "threadpool_new")
                continue
            assert pools.setdefault(n, pool) == pool   # created once, then reused
    finally:
        gg.set_num_threads(None)
    if hasattr(ex_mod.lib, "threadpool_new"):
        assert len(pools) == 2 and pools[1] != pools[2]


_FORK_CHILD = """
import os, signal, sys, numpy as np, ggmlgrad as gg
gg.runtime.threads.THREAD_LIMIT = 2  # two threads even on a one-core machine
gg.set_num_threads(2)
x = gg.tensor(np.full((256, 256), 2, dtype=np.float32))
assert float((x * x).sum()) == 4.0 * 256 * 256         # the parent's 2-thread pool exists now
pid = os.fork()
if pid == 0:
    signal.alarm(20)   # a child stuck waiting for workers dies instead of spinning on after the test
    ok = float((x * x + 1).sum()) == 5.0 * 256 * 256   # the child has no pool workers: it must not wait for them
    os._exit(0 if ok else 3)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def test_a_forked_child_computes_with_threads():
    r = subprocess.run([sys.executable, "-c", _FORK_CHILD], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr[-2000:]


def test_captures_and_drains_on_two_python_threads_compute_one_at_a_time(monkeypatch):
    """A capture replay on one Python thread and graph drains on another share the backends and
    their threadpools: both must finish (no hang) with NumPy's values."""
    import threading
    x64 = np.linspace(-2, 2, 64 * 32).reshape(64, 32)
    w64 = np.linspace(-1, 1, 32 * 16).reshape(32, 16)
    expected = np.tanh(x64 @ w64)
    w = gg.tensor(w64.astype(np.float32))
    f = gg.capture(lambda x: (x @ w).tanh())
    f(x64.astype(np.float32))  # recorded here: replays are what run concurrently
    errors = []

    def replay():
        try:
            for _ in range(300):
                np.testing.assert_allclose(f(x64.astype(np.float32)), expected, rtol=1e-4, atol=1e-5)
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    def drain():
        try:
            x = gg.tensor(x64.astype(np.float32), device=w.device)   # a new thread starts on the CPU
            for _ in range(300):
                with gg.graph_mode(True):
                    y = (x @ w).tanh()
                np.testing.assert_allclose(y.numpy(), expected, rtol=1e-4, atol=1e-5)
        except BaseException as e:
            errors.append(e)

    workers = [threading.Thread(target=replay, daemon=True), threading.Thread(target=drain, daemon=True)]
    monkeypatch.setattr(threads, "THREAD_LIMIT", 2)
    gg.set_num_threads(2)  # both computes want the same two-thread CPU pool
    try:
        for t in workers:
            t.start()
        for t in workers:
            t.join(timeout=60)
    finally:
        gg.set_num_threads(None)
    assert not any(t.is_alive() for t in workers), "a compute hung"
    assert not errors, errors[0]


def test_a_first_compute_gives_its_threads_to_the_backend_with_the_work(monkeypatch):
    """An unplanned compute splits its graph before choosing: on a BLAS build, a CPU-only graph's
    threads go to the CPU (they once went to BLAS, which had no node), a matmul's to BLAS."""
    from ggmlgrad.runtime import executor as ex_mod
    monkeypatch.setattr(threads, "THREAD_LIMIT", 2)
    ex = ex_mod.executor_for(gg.get_device())
    rng = np.random.default_rng(7)
    x64 = rng.standard_normal((37, 53))             # shapes no other test uses: no cached plan
    a64, w64 = rng.standard_normal((96, 784)), rng.standard_normal((784, 200))
    try:
        gg.set_num_threads(2)
        with gg.graph_mode(False):
            got = ((gg.tensor(x64.astype(np.float32)) * 3.0).tanh() + 1.0).numpy()
            assert ex._thread_config[0] == 2                       # the CPU had the work
            np.testing.assert_allclose(got, np.tanh(x64 * 3.0) + 1.0, rtol=1e-5, atol=1e-6)
            got = (gg.tensor(a64.astype(np.float32)) @ gg.tensor(w64.astype(np.float32))).numpy()
            assert ex._thread_config == ((1, 2) if ex.thread_setters else (2, 2))
            np.testing.assert_allclose(got, a64 @ w64, rtol=1e-4, atol=1e-3)
    finally:
        gg.set_num_threads(None)


def test_thread_tuner_skips_trials_while_the_cores_are_busy(monkeypatch):
    """With the load average leaving under ``many`` free cores, no trial: one thread, until the next
    measurement is due, which looks at the load again (counting the threads the graph ran on)."""
    monkeypatch.setattr(threads, "_override", None)
    seen = []
    free = {"cores": 1.2}

    def fake_free(own=1.0):
        seen.append(own)
        return free["cores"] + own - 1.0
    monkeypatch.setattr(threads, "free_cores", fake_free)
    t = threads.ThreadTuner(2)
    assert t.choice == 1 and t.pick() == 1 and seen == [1]
    for _ in range(threads._RETUNE_EVERY):
        t.record(t.pick(), 1.0)
    assert t.choice == 1 and not t.times_many  # still busy at the next look: no trial again
    free["cores"] = 2.0
    for _ in range(threads._RETUNE_EVERY):
        t.record(t.pick(), 1.0)
    assert t.choice == 0 and t.pick() == 1  # the machine is free: measuring
    while not t.choice:
        n = t.pick()
        t.record(n, 0.5 if n == 2 else 1.0)
    assert t.choice == 2
    for _ in range(threads._RETUNE_EVERY):
        t.record(t.pick(), 0.5)
    assert seen[-1] == 2  # the load average counts this graph's own two threads: added back


def test_thread_tuner_waits_longer_each_time_one_thread_wins(monkeypatch):
    monkeypatch.setattr(threads, "_override", None)
    t = threads.ThreadTuner(2)

    def trial(speed_many):
        while not t.choice:
            n = t.pick()
            t.record(n, speed_many if n == 2 else 1.0)

    def computes_until_next_trial():
        k = 0
        while t.choice:
            t.record(t.pick(), 1.0)
            k += 1
        return k
    trial(1.5)
    assert t.choice == 1 and computes_until_next_trial() == 2 * threads._RETUNE_EVERY
    trial(1.5)
    assert computes_until_next_trial() == 4 * threads._RETUNE_EVERY
    trial(0.5)  # more threads win: back to measuring every _RETUNE_EVERY computes
    assert t.choice == 2 and computes_until_next_trial() == threads._RETUNE_EVERY
    for _ in range(8):
        trial(1.5)
        computes_until_next_trial()
    trial(1.5)
    assert computes_until_next_trial() == threads._RETUNE_BACKOFF_MAX * threads._RETUNE_EVERY
