"""Threads and asyncio tasks: each thread has its own queue, capture guard and recorder; modes are
per thread and per task. References: NumPy float64 for values, the same run alone on one thread
(bitwise) for "the same results as running alone"."""
from __future__ import annotations

import asyncio
import gc
import threading
import weakref

import numpy as np
import pytest

import ggmlgrad as gg
from ggmlgrad.capture.recording import Recorder
from ggmlgrad.engine import ENGINE, GraphError, PendingError
from ggmlgrad.tensor import random as gg_random

_TIMEOUT = 60


def _run_threads(*targets) -> list:
    """Run each target on its own thread; returns their results (an exception is re-raised here)."""
    results: list = [None] * len(targets)
    errors: list = []
    device = gg.get_device()   # a new thread starts on the CPU (per thread, as torch's default device)

    def wrap(i, fn):
        try:
            gg.set_device(device)   # each thread runs where the test runs (GGMLGRAD_TEST_DEVICE)
            results[i] = fn()
        except BaseException as e:  # reported by the calling thread
            errors.append(e)

    ts = [threading.Thread(target=wrap, args=(i, fn), daemon=True) for i, fn in enumerate(targets)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(_TIMEOUT * 2)
    assert not any(t.is_alive() for t in ts), "a thread hung"
    if errors:
        raise errors[0]
    return results


# ---------------------------------------------------------------------------- a small model
def _data(seed: int, n: int):
    rng = np.random.default_rng(100 + seed)
    return (rng.standard_normal((n, 8, 4)).astype(np.float32), rng.standard_normal((n, 8, 2)).astype(np.float32))


def _init(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(s) * 0.4).astype(np.float32) for s in [(4, 16), (16,), (16, 2), (2,)]]


def _loss(ps, x, y):
    w1, b1, w2, b2 = ps
    return ((((x @ w1 + b1).tanh() @ w2 + b2) - y) ** 2).mean()


def _numpy_sgd(init, X, Y, lr: float) -> np.ndarray:
    """The same training in NumPy float64 with hand-written gradients."""
    w1, b1, w2, b2 = [a.astype(np.float64) for a in init]
    losses = []
    for x, y in zip(X.astype(np.float64), Y.astype(np.float64)):
        h = np.tanh(x @ w1 + b1)
        d = h @ w2 + b2 - y
        losses.append((d ** 2).mean())
        gd = 2 * d / d.size
        gw2, gb2 = h.T @ gd, gd.sum(0)
        gz = (gd @ w2.T) * (1 - h ** 2)
        gw1, gb1 = x.T @ gz, gz.sum(0)
        w1, b1, w2, b2 = w1 - lr * gw1, b1 - lr * gb1, w2 - lr * gw2, b2 - lr * gb2
    return np.array(losses)


_LR = 0.1


def _train(mode: str, seed: int, steps: int, barrier: threading.Barrier | None = None):
    """Train the model of ``seed`` on its data: ``mode`` "graph" (graph mode, a sync per step) or
    "capture" (``capture_step``). ``barrier``: wait there while recording (capture) or inside the
    first step's queue (graph), so that the threads are all in the middle of one at once."""
    X, Y = _data(seed, steps)
    ps = [gg.tensor(a, requires_grad=True) for a in _init(seed)]
    opt = gg.optim.SGD(ps, lr=_LR)
    losses = []
    if mode == "capture":
        def loss_fn(x, y):
            if barrier is not None:
                barrier.wait(_TIMEOUT)  # every thread records at the same time
            return _loss(ps, x, y)
        step = gg.capture_step(loss_fn, opt)
        for i in range(steps):
            losses.append(float(step(X[i], Y[i])))
        assert step.n_recordings == 1
    else:
        for i in range(steps):
            with gg.graph_mode(True):
                opt.zero_grad()
                loss = _loss(ps, gg.tensor(X[i]), gg.tensor(Y[i]))
                loss.backward()
                if barrier is not None and i == 0:
                    barrier.wait(_TIMEOUT)  # every thread has a forward+backward queued now
                opt.step()
            losses.append(loss.item())
    return np.array(losses), [p.detach().numpy().copy() for p in ps]


# ---------------------------------------------------------------------------- own queue, own errors
def test_an_eager_thread_never_drains_or_fails_a_graph_mode_threads_queue():
    a = np.linspace(-1, 1, 12).reshape(3, 4).astype(np.float32)
    queued = threading.Event()
    eager_done = threading.Event()

    def graph_thread():
        with gg.graph_mode(True):
            y = (gg.tensor(a) * 2.0).exp()
            n = len(ENGINE)
            assert n > 0 and y.is_pending
            queued.set()
            assert eager_done.wait(_TIMEOUT)
            assert len(ENGINE) == n and y.is_pending  # the other thread's computes left it alone
            got = y.numpy()
            # now this thread's queue fails, on this thread only
            z = gg.tensor(a) + 1.0
            ENGINE.fail_next_drain("graph thread's own failure")
            with pytest.raises(GraphError, match="graph thread's own failure"):
                z.numpy()
        return got

    def eager_thread():
        assert queued.wait(_TIMEOUT)
        with gg.graph_mode(False):
            b = gg.tensor(a)
            r1 = (b - 1.0).numpy()
            ENGINE.fail_next_drain("eager thread's own failure")
            with pytest.raises(GraphError, match="eager thread's own failure"):
                b * 3.0
            r2 = (b * 3.0).tanh().numpy()  # the session stays usable
        eager_done.set()
        return r1, r2

    got, (r1, r2) = _run_threads(graph_thread, eager_thread)
    a64 = a.astype(np.float64)
    np.testing.assert_allclose(got, np.exp(2 * a64), rtol=1e-6)
    np.testing.assert_allclose(r1, a64 - 1, rtol=1e-6)
    np.testing.assert_allclose(r2, np.tanh(3 * a64), rtol=1e-6)
    assert len(ENGINE) == 0  # the main thread's queue never saw either


@pytest.mark.parametrize("mode", ["graph", "capture"])
def test_two_threads_training_their_own_models_get_the_results_of_running_alone(mode):
    steps = 12
    alone = [_train(mode, seed, steps) for seed in (0, 1)]
    barrier = threading.Barrier(2)
    both = _run_threads(lambda: _train(mode, 0, steps, barrier), lambda: _train(mode, 1, steps, barrier))
    for (l_alone, w_alone), (l_both, w_both) in zip(alone, both):
        np.testing.assert_array_equal(l_both, l_alone)
        for a, b in zip(w_both, w_alone):
            np.testing.assert_array_equal(a, b)
    for seed, (losses, _) in enumerate(both):
        X, Y = _data(seed, steps)
        np.testing.assert_allclose(losses, _numpy_sgd(_init(seed), X, Y, _LR), rtol=1e-4, atol=1e-6)
        assert losses[-1] < losses[0]


def test_three_threads_capture_steps_at_once_repeatedly():
    """Recordings on three threads at once (they meet at a barrier inside the recording): each
    thread's guard sees only its own uploads and computes."""
    steps = 25
    alone = [_train("capture", seed, steps)[0] for seed in range(3)]
    for _ in range(3):
        barrier = threading.Barrier(3)
        got = _run_threads(*[lambda s=s: _train("capture", s, steps, barrier)[0] for s in range(3)])
        for a, b in zip(got, alone):
            np.testing.assert_array_equal(a, b)
    # each recording pushed its own context on its own thread: this thread's has no noise source,
    # observer or recorder (nothing process-wide was patched)
    from ggmlgrad.engine import context
    ctx = context.current()
    assert ctx.noise is None and ctx.observer is None and ctx.recorder is None and Recorder.current is None


def test_a_recording_guard_and_noise_hooks_stay_on_the_recording_thread():
    """While thread A records, thread B uploads, reads back, computes eagerly and draws dropout
    noise: nothing trips A's guard, nothing of B's lands in A's recording."""
    recording = threading.Event()
    b_done = threading.Event()
    seen = {}

    def fn(x):
        seen["recorder"] = Recorder.current
        recording.set()
        assert b_done.wait(_TIMEOUT)
        return gg.nn.functional.dropout(x, 0.5, True) * 3.0

    f = gg.capture(fn)

    def thread_a():
        m1 = f(np.ones(512, np.float32))
        m2 = f(np.ones(512, np.float32))
        return m1, m2

    def thread_b():
        assert recording.wait(_TIMEOUT)
        out = {"recorder": Recorder.current, "guard": gg.engine.active_observer()}
        t = gg.tensor(np.arange(6, dtype=np.float32))                      # an upload
        out["eager"] = (t * 2.0).numpy()                                   # a compute and a download
        out["mask"] = gg.nn.functional.dropout(gg.ones(2000), 0.5, True).numpy()
        out["noise"] = gg_random.noise("uniform", (1000,)).numpy()
        b_done.set()
        return out

    (m1, m2), b = _run_threads(thread_a, thread_b)
    assert seen["recorder"] is not None and b["recorder"] is None and b["guard"] is None
    np.testing.assert_array_equal(b["eager"], np.arange(6) * 2.0)
    assert set(np.unique(b["mask"])) == {0.0, 2.0} and 0.4 < (b["mask"] == 0).mean() < 0.6
    assert b["noise"].min() >= 0 and b["noise"].max() < 1 and b["noise"].std() > 0.2
    # A's recording has exactly its own noise input, refilled at every replay
    assert set(np.unique(m1)) <= {0.0, 6.0} and 0.35 < (m1 == 0).mean() < 0.65
    assert (m1 != m2).mean() > 0.3 and f.n_recordings == 1
    assert Recorder.current is None and gg.engine.active_observer() is None


# ---------------------------------------------------------------------------- sharing
def test_a_model_shared_by_threads_for_inference_gives_each_its_values():
    init = _init(5)
    ps = [gg.tensor(a) for a in init]
    f = gg.capture(lambda x: (x @ ps[0] + ps[1]).tanh() @ ps[2] + ps[3])  # one captured function, shared

    def numpy_forward(x):
        w1, b1, w2, b2 = [a.astype(np.float64) for a in init]
        return np.tanh(x.astype(np.float64) @ w1 + b1) @ w2 + b2

    def worker(seed, how):
        rng = np.random.default_rng(seed)
        for _ in range(40):
            x = rng.standard_normal((8, 4)).astype(np.float32)
            if how == "capture":
                got = f(x)
            else:
                with gg.graph_mode(how == "graph"):
                    got = ((gg.tensor(x) @ ps[0] + ps[1]).tanh() @ ps[2] + ps[3]).detach().numpy()
            np.testing.assert_allclose(got, numpy_forward(x), rtol=1e-5, atol=1e-5)
        return True

    assert all(_run_threads(*[lambda s=s, h=h: worker(s, h) for s, h in
                              enumerate(["graph", "eager", "capture", "capture", "graph"])]))
    assert f.n_recordings == 1


def test_training_one_shared_model_with_a_lock_equals_the_serial_run():
    """Steps of one model from two threads, each step under the user's lock: the result equals
    running the same steps on one thread in the order they took the lock."""
    steps = 10
    X, Y = _data(7, 2 * steps)
    ps = [gg.tensor(a, requires_grad=True) for a in _init(7)]
    opt = gg.optim.SGD(ps, lr=_LR)
    lock = threading.Lock()
    order: list[int] = []

    def step(i):
        with gg.graph_mode(True):
            opt.zero_grad()
            loss = _loss(ps, gg.tensor(X[i]), gg.tensor(Y[i]))
            loss.backward()
            opt.step()
        return loss.item()

    def worker(offset):
        for k in range(steps):
            i = offset + 2 * k
            with lock:
                order.append(i)
                step(i)

    _run_threads(lambda: worker(0), lambda: worker(1))
    ps_ref = [gg.tensor(a, requires_grad=True) for a in _init(7)]
    opt_ref = gg.optim.SGD(ps_ref, lr=_LR)
    for i in order:
        with gg.graph_mode(True):
            opt_ref.zero_grad()
            _loss(ps_ref, gg.tensor(X[i]), gg.tensor(Y[i])).backward()
            opt_ref.step()
    for a, b in zip(ps, ps_ref):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
    assert sorted(order) == list(range(2 * steps))


def test_a_pending_tensor_handed_to_another_thread_raises_a_clear_error():
    box = {}
    handed = threading.Event()
    checked = threading.Event()

    def producer():
        gg.graph_mode(True)  # this thread only
        y = gg.tensor(np.arange(4, dtype=np.float32)) * 2.0
        box["y"] = y
        handed.set()
        assert checked.wait(_TIMEOUT)
        value = y.numpy()  # computed on its own thread
        box["gone"] = gg.tensor(np.ones(2, np.float32)) + 1.0  # never computed by this thread
        return value

    t = threading.Thread(target=lambda: box.setdefault("result", producer()), daemon=True)
    t.start()
    assert handed.wait(_TIMEOUT)
    try:
        with pytest.raises(PendingError, match="another thread .* each thread computes its own queue"):
            box["y"].numpy()
        with pytest.raises(PendingError, match="another thread"):
            box["y"] + 1.0
    finally:
        checked.set()
    t.join(_TIMEOUT)
    np.testing.assert_array_equal(box["result"], [0, 2, 4, 6])
    np.testing.assert_array_equal(box["y"].numpy(), [0, 2, 4, 6])  # computed there: readable here
    with pytest.raises(PendingError, match="ended before computing it"):
        box["gone"].numpy()


# ---------------------------------------------------------------------------- asyncio tasks
def test_modes_set_in_one_asyncio_task_are_not_seen_in_another():
    default = gg.graph_mode()

    async def main():
        set_ev, checked_ev = asyncio.Event(), asyncio.Event()
        seen = {}

        async def graph_task():
            gg.graph_mode(True, check=False)
            gg.matmul_precision("f32")
            y = gg.ones(3) * 2.0
            set_ev.set()
            await checked_ev.wait()
            seen["graph task"] = (gg.graph_mode(), gg.matmul_precision())
            return y.numpy()

        async def other_task():
            await set_ev.wait()
            seen["other task"] = (gg.graph_mode(), gg.matmul_precision())
            with gg.graph_mode(False):
                z = gg.ones(2) + 1.0
                seen["other pending"] = z.is_pending  # eager here, whatever the other task set
            checked_ev.set()

        y, _ = await asyncio.gather(graph_task(), other_task())
        return y, seen

    y, seen = asyncio.run(main())
    np.testing.assert_array_equal(y, [2, 2, 2])
    assert seen["graph task"] == (True, "f32")
    assert seen["other task"] == (default, "default")
    assert seen["other pending"] is False
    assert gg.graph_mode() == default and gg.matmul_precision() == "default"  # nothing leaked out


def test_an_evicted_plan_is_freed_only_when_no_thread_holds_it():
    """Threads share the plan cache: evicting a plan must not free it under a thread that just
    took it from the cache (its last reference frees it)."""
    from ggmlgrad.engine import context
    from ggmlgrad.engine.trace_cache import OP, TraceCache
    cache = TraceCache(op=1)   # (fresh: earlier tests may have left the shared one thrashed, pausing builds)
    token = context.push(trace_cache=cache)
    try:
        held = _evict_a_held_plan(cache, OP)
    finally:
        context.pop(token)
    gc.collect()
    assert held() is None  # and freed once nobody holds it


def _evict_a_held_plan(cache, OP):
    """Make a plan, evict it while holding it, run it; a weak reference to it once let go."""
    with gg.graph_mode(False):  # op plans are made by eager ops (GGMLGRAD_GRAPH=1 queues them)
        a = np.linspace(-1, 1, 6).reshape(2, 3).astype(np.float32)
        for _ in range(3):  # the second use makes the plan
            (gg.tensor(a) * 3.0).numpy()
        (plan,) = [p for p in cache.entries(OP) if p is not None]
        held = weakref.ref(plan)
        b = np.ones((5, 7), np.float32)
        for _ in range(3):  # another signature's plan evicts it
            (gg.tensor(b) + 1.0).numpy()
        assert plan not in cache.plans.values() and plan.sched  # evicted, still usable by its holder
        x, out = gg.tensor(a), gg.tensor(np.zeros((2, 3), np.float32))
        ENGINE.run(plan, gg.engine.COUNTERS, "eager", 1, [x], x.device, out.nbytes, out._storage)  # raises on failure
        np.testing.assert_allclose(out.numpy(), a.astype(np.float64) * 3.0, rtol=1e-6)
    return held
