"""The engine's public pieces: the execution context (push/pop), the observer interface, the one
noise source, and the one drain route that eager and graph-mode ops share (same counters, same
failure path)."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import ggmlgrad as gg
from ggmlgrad.capture.recording import Recorder
from ggmlgrad.engine import ENGINE, GraphError, Observer, context
from ggmlgrad.engine import executor
from ggmlgrad.tensor import random as gg_random


@pytest.fixture(autouse=True)
def _explicit_eager():
    with gg.graph_mode(False):
        yield


class _Log(Observer):
    def __init__(self):
        self.events = []

    def on_leaf(self, array, leaf):
        self.events.append(("leaf", array.shape))

    def on_upload(self, site):
        self.events.append(("upload", site))

    def on_download(self, site):
        self.events.append(("download", site))

    def on_drain(self, reason):
        self.events.append(("drain", reason))


def test_an_observer_pushed_with_a_context_hears_uploads_leaves_drains_and_downloads():
    log = _Log()
    a = gg.tensor(np.ones((2, 3), np.float32))       # before the push: not heard
    token = context.push(observer=log)
    try:
        b = gg.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
        c = a + b                                      # eager: built at once (leaves), drained
        got = c.numpy()
    finally:
        context.pop(token)
    np.testing.assert_array_equal(got, 1.0 + np.arange(6).reshape(2, 3))
    assert log.events == [("upload", "tensor()"), ("leaf", (2, 3)), ("leaf", (2, 3)), ("drain", "eager"),
                          ("download", "numpy()")]
    (a * 2.0).numpy()                                  # after the pop: not heard
    assert len(log.events) == 5


def test_an_observer_can_refuse_an_event():
    class NoUploads(Observer):
        def on_upload(self, site):
            raise RuntimeError(f"refused {site}")

    token = context.push(observer=NoUploads())
    try:
        with pytest.raises(RuntimeError, match=r"refused tensor\(\)"):
            gg.tensor([1.0])
    finally:
        context.pop(token)
    assert gg.tensor([1.0]).tolist() == [1.0]


def test_push_and_pop_restore_modes_and_the_noise_source():
    seen = []

    def source(req):
        seen.append((req.kind, req.shape))
        return gg.tensor(np.full(req.shape, 0.5, np.float32))

    before = context.current()
    token = context.push(graph_set=True, check_set=True, precision="f32", noise=source)
    try:
        assert gg.graph_mode() is True and gg.matmul_precision() == "f32"
        assert gg.engine.check_enabled() is True
        assert gg_random.noise("normal", (2,)).tolist() == [0.5, 0.5]
        assert gg.distributions.draw_noise("dropout_mask", (3,), p=0.5).tolist() == [0.5] * 3
    finally:
        context.pop(token)
    assert context.current() is before
    assert gg.graph_mode() is False and gg.matmul_precision() == "default" and context.current().noise is None
    assert seen == [("normal", (2,)), ("dropout_mask", (3,))]  # one source for both entry points
    gg.manual_seed(3)
    x = gg_random.noise("uniform", (1000,)).numpy()
    assert 0.0 <= x.min() and x.max() < 1.0 and x.std() > 0.2   # ordinary draws again


def test_a_context_pushed_on_one_thread_is_not_seen_by_another():
    pushed, checked = threading.Event(), threading.Event()
    box = {}

    def other():
        assert pushed.wait(10)
        ctx = context.current()
        box["other"] = (ctx.graph, ctx.observer, ctx.noise)
        checked.set()

    t = threading.Thread(target=other)
    t.start()
    log = _Log()
    token = context.push(graph_set=True, observer=log, noise=lambda req: None)
    try:
        pushed.set()
        assert checked.wait(10)
    finally:
        context.pop(token)
    t.join()
    assert box["other"][1:] == (None, None) and box["other"][0] is context.DEFAULT.graph


def test_a_failing_recording_pops_its_context():
    before = context.current()

    @gg.capture
    def f(x):
        assert context.current().recorder is Recorder.current is not None
        assert gg.graph_mode() is True and context.current().observer is not None
        gg_random.noise("uniform", (2,))          # routed to the recording: an input, not an upload
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        f(np.ones(2, np.float32))
    assert context.current() is before
    assert Recorder.current is None and gg.engine.active_observer() is None and gg.graph_mode() is False
    assert gg_random.noise("uniform", (4,)).numpy().shape == (4,)


def _delta(before, after, key):
    b, a = before[key], after[key]
    return {k: a.get(k, 0) - b.get(k, 0) for k in set(a) | set(b) if a.get(k, 0) != b.get(k, 0)}


def test_eager_and_graph_mode_ops_go_through_the_same_drain_counters():
    x = gg.tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    y = gg.tensor(np.ones((3, 4), np.float32))
    deltas = []
    for _ in range(4):  # first uses build the op the ordinary way, later ones run its cached plan
        c0 = gg.counters()
        (x * y).numpy()
        c1 = gg.counters()
        deltas.append((_delta(c0, c1, "drains_by_reason"), _delta(c0, c1, "computes_by_site")))
    assert all(d == ({"eager": 1}, {"eager": 1}) for d in deltas), deltas
    for _ in range(3):
        c0 = gg.counters()
        with gg.graph_mode(True):
            z = x * y
        z.numpy()
        c1 = gg.counters()
        assert _delta(c0, c1, "drains_by_reason") == {"graph_mode_off": 1}
        assert _delta(c0, c1, "computes_by_site") == {"graph_mode_off": 1}
    c0 = gg.counters()
    with gg.graph_mode(True, check=True):
        (x * y).numpy()
    c1 = gg.counters()
    assert _delta(c0, c1, "drains_by_reason") == {"check": 1} and _delta(c0, c1, "computes_by_site") == {"check": 1}


def test_an_eager_failure_is_the_same_with_and_without_a_cached_plan(monkeypatch):
    # Earlier test files may leave the op-plan cache pausing its builds after thrashing
    # (engine/trace_cache.py): this test needs the plan its warm-up makes, in eager mode.
    from ggmlgrad.engine.trace_cache import TRACE
    TRACE.clear()
    with gg.graph_mode(False):
        _eager_failure_with_and_without_a_cached_plan(monkeypatch)


def _eager_failure_with_and_without_a_cached_plan(monkeypatch):
    x = gg.tensor(np.ones((5, 7), np.float32))
    for _ in range(3):
        (x - x).numpy()                      # the op plan exists from here on
    errors = []
    ENGINE.fail_next_drain("boom")           # the ordinary route (a test seam skips plans)
    with pytest.raises(GraphError) as e1:
        x - x
    errors.append(str(e1.value))
    monkeypatch.setattr(executor, "_graph_compute", lambda sched, graph: 1)  # every cached plan's compute
    failed = gg.counters()["failed_drains"]
    with pytest.raises(GraphError) as e2:
        x - x                                # the cached plan's route
    errors.append(str(e2.value))
    assert gg.counters()["failed_drains"] == failed + 1
    for msg in errors:
        assert msg.startswith("ggmlgrad: the graph of sub x1 failed:") and "test_engine_context.py" in msg
    monkeypatch.undo()
    assert (x - x).tolist() == np.zeros((5, 7)).tolist()  # the session stays usable
