"""The per-op shortcuts of issue 21 keep their contracts: a call plan hit releases its thread's
engine lock on every exit (taken with acquire/release, not ``with``), the counters are Counters
that count as before, and ``ENGINE.current`` is each thread's own engine."""
from __future__ import annotations

import threading
from collections import Counter

import numpy as np
import pytest

import ggmlgrad as gg
from ggmlgrad.engine import ENGINE
from ggmlgrad.engine import executor as executor_mod
from ggmlgrad.engine.context import current
from ggmlgrad.tensor import call_plans


@pytest.fixture(autouse=True)
def eager_with_plans():
    old = call_plans.set_enabled(True)
    with gg.graph_mode(False):
        yield
    call_plans.set_enabled(old)


def _free_elsewhere(lock) -> bool:
    """Whether another thread can take ``lock`` now (an RLock this thread still held would refuse)."""
    got = []

    def take():
        ok = lock.acquire(blocking=False)
        got.append(ok)
        if ok:
            lock.release()
    t = threading.Thread(target=take)
    t.start()
    t.join()
    return got[0]


def _hits() -> int:
    return gg.counters()["call_plan_hits"]


def test_a_hit_leaves_the_engine_lock_free_on_success_and_on_failure(monkeypatch):
    x = gg.tensor(np.arange(4, dtype=np.float32))
    lock = ENGINE.lock
    for _ in range(4):
        y = x * 3.0
    h = _hits()
    y = x * 3.0
    assert _hits() == h + 1 and _free_elsewhere(lock)
    np.testing.assert_array_equal(y.numpy(), np.arange(4) * 3.0)
    monkeypatch.setattr(executor_mod, "_graph_compute", lambda sched, graph: 1)   # a failure status
    with pytest.raises(gg.GraphError, match="status 1"):
        x * 3.0
    assert _hits() == h + 2 and _free_elsewhere(lock)
    monkeypatch.undo()
    np.testing.assert_array_equal((x * 3.0).numpy(), np.arange(4) * 3.0)   # the thread's engine still works
    assert _free_elsewhere(lock)


def test_a_row_write_leaves_both_locks_free():
    buf = gg.zeros(4, 2)
    row = gg.tensor(np.array([1.0, 2.0], np.float32))
    buf[1] = row
    buf[2] = np.array([3.0, 4.0], np.float32)
    np.testing.assert_array_equal(buf.numpy(), [[0, 0], [1, 2], [3, 4], [0, 0]])
    assert buf._version == 2
    assert _free_elsewhere(ENGINE.lock) and _free_elsewhere(executor_mod.COMPUTE_LOCK)


def test_counters_are_counters_that_count_from_zero():
    c = current().counters
    assert isinstance(c.computes, Counter) and isinstance(c.drains, Counter)
    gg.reset_counters()
    x = gg.tensor([1.0, 2.0])
    for _ in range(5):
        x + 1.0
    snap = gg.counters()
    assert snap["computes"] == 5 and snap["drains_by_reason"] == {"eager": 5}
    assert c.computes["never counted"] == 0 and "never counted" not in c.computes   # Counter's missing key
    assert (c.computes + Counter(eager=1))["eager"] == 6


def test_engine_current_is_each_threads_own_engine():
    mine = ENGINE.current
    assert ENGINE.current is mine
    seen = []

    def work():
        e = ENGINE.current
        y = gg.tensor([1.0]) + 1.0
        seen.append((e, ENGINE.current, y.tolist()))
    t = threading.Thread(target=work)
    t.start()
    t.join()
    theirs, again, value = seen[0]
    assert theirs is again and theirs is not mine and value == [2.0]
    assert ENGINE.current is mine
