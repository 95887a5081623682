"""Cached single-op plans (the eager fast path): reuse across calls must never reuse values.

Each test compares against NumPy float64 on inputs that change between calls of the same op
signature, so a plan that kept a stale pointer (a leaf, a view of a leaf, the output) fails.
"""
import numpy as np
import pytest

import ggmlgrad as gg
from ggmlgrad.tensor import call_plans
from ggmlgrad.engine.trace_cache import TRACE

rng = np.random.default_rng(7)


@pytest.fixture(autouse=True)
def eager():
    # Fresh caches: earlier tests (the whole suite under GGMLGRAD_GRAPH=1 makes thousands of
    # distinct graphs) may have left a cache full or pausing its builds after thrashing.
    TRACE.clear()
    with gg.graph_mode(False):
        yield


def _arr(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def test_same_signature_reuses_one_plan_and_fresh_values():
    before = TRACE.op.misses
    for _ in range(5):
        a, b = _arr(6, 5), _arr(6, 5)
        r = gg.tensor(a) + gg.tensor(b)
        np.testing.assert_allclose(r.numpy(), a.astype(np.float64) + b, rtol=1e-6)
    assert TRACE.op.misses - before <= 1  # built once (or already built by an earlier test)


def test_results_do_not_share_memory():
    a, b = _arr(4, 4), _arr(4, 4)
    ta, tb = gg.tensor(a), gg.tensor(b)
    r1 = ta * tb
    r2 = ta * ta
    np.testing.assert_allclose(r1.numpy(), a.astype(np.float64) * b, rtol=1e-6)
    np.testing.assert_allclose(r2.numpy(), a.astype(np.float64) * a, rtol=1e-6)


@pytest.mark.parametrize("case", ["matmul_T", "slice_step", "broadcast", "permute_sum"])
def test_views_of_inputs_are_rebound(case):
    for _ in range(3):
        a, b = _arr(7, 9), _arr(9, 4)
        ta, tb = gg.tensor(a), gg.tensor(b)
        if case == "matmul_T":
            got = tb.T @ ta.T
            want = b.T.astype(np.float64) @ a.T
        elif case == "slice_step":
            got, want = ta[1::2, ::3], a[1::2, ::3]
        elif case == "broadcast":
            c = _arr(9)
            got, want = ta + gg.tensor(c), a.astype(np.float64) + c
        else:
            got, want = ta.permute(1, 0).sum(axis=1), a.T.astype(np.float64).sum(axis=1)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)


def test_signed_zero_and_int_float_params_are_distinct_plans():
    x = gg.tensor(np.array([1.0, -2.0], np.float32))
    pos = (x * 0.0).numpy()
    neg = (x * -0.0).numpy()
    np.testing.assert_array_equal(np.signbit(pos), np.signbit(np.array([1.0, -2.0]) * 0.0))
    np.testing.assert_array_equal(np.signbit(neg), np.signbit(np.array([1.0, -2.0]) * -0.0))


def test_params_change_the_result():
    a = _arr(3, 4)
    t = gg.tensor(a)
    for lo in (-0.5, 0.0, 0.25):
        np.testing.assert_allclose(t.clamp(min=lo).numpy(), np.maximum(a, lo), rtol=1e-6)
    for axis in (0, 1):
        np.testing.assert_allclose(t.sum(axis=axis).numpy(), a.astype(np.float64).sum(axis=axis), rtol=1e-5)


def test_one_compute_per_eager_op():
    a, b = gg.tensor(_arr(8, 8)), gg.tensor(_arr(8, 8))
    a + b  # the plan exists
    gg.reset_counters()
    for _ in range(4):
        a + b
    assert gg.counters()["computes"] == 4


def test_eviction_keeps_results_correct():
    from ggmlgrad.engine import context
    from ggmlgrad.engine.trace_cache import TraceCache
    cache = TraceCache(op=3)
    token = context.push(trace_cache=cache)
    try:
        for n in [k for k in range(2, 8) for _ in range(2)]:  # (a plan is made on its key's second use)
            a, b = _arr(n, 3), _arr(n, 3)
            np.testing.assert_allclose((gg.tensor(a) - gg.tensor(b)).numpy(), a.astype(np.float64) - b, rtol=1e-6)
        assert len(cache.plans) == 3 and cache.removed == 3 and cache.op.misses == 6
        for n in [k for k in range(2, 8) for _ in range(2)]:  # again, after evictions: rebuilt plans are right too
            a, b = _arr(n, 3), _arr(n, 3)
            np.testing.assert_allclose((gg.tensor(a) - gg.tensor(b)).numpy(), a.astype(np.float64) - b, rtol=1e-6)
    finally:
        context.pop(token)


def test_gradients_through_planned_ops():
    a, b = _arr(5, 3), _arr(3, 2)
    ta, tb = gg.tensor(a, requires_grad=True), gg.tensor(b, requires_grad=True)
    for _ in range(2):
        ta.grad = tb.grad = None
        (ta @ tb).relu().sum().backward()
        mask = (a.astype(np.float64) @ b) > 0
        np.testing.assert_allclose(ta.grad.numpy(), mask @ b.T, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(tb.grad.numpy(), a.T @ mask, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------- graph-mode plans
from ggmlgrad.engine import ENGINE  # noqa: E402


def _mlp_loss(x, w1, b1, w2):
    h = (x @ w1 + b1).relu()
    return ((h @ w2).tanh() ** 2).mean(), h


def test_graph_plan_replays_a_repeated_drain_with_new_values():
    """The same op sequence drained 5 times: the 2nd builds a plan, later ones replay it; every
    drain must see that call's inputs (values change each time) and give fresh outputs."""
    before = TRACE.graph.misses
    results = []
    for i in range(5):
        x, w1, b1, w2 = _arr(6, 5), _arr(5, 7), _arr(7), _arr(7, 3)
        with gg.graph_mode(True):
            tx, tw1 = gg.tensor(x), gg.tensor(w1, requires_grad=True)
            loss, h = _mlp_loss(tx, tw1, gg.tensor(b1), gg.tensor(w2))
            loss.backward()
            assert gg.pending(loss) and gg.pending(tw1.grad)
            got = (loss.item(), h.detach().numpy().copy(), tw1.grad.detach().numpy().copy())
        x64, w164 = x.astype(np.float64), w1.astype(np.float64)
        pre = x64 @ w164 + b1
        h64 = np.maximum(pre, 0)
        t = np.tanh(h64 @ w2)
        dl_dh = ((2 * t * (1 - t * t)) / t.size) @ w2.T.astype(np.float64)
        grad_w1 = x64.T @ (dl_dh * (pre > 0))
        np.testing.assert_allclose(got[0], (t ** 2).mean(), rtol=1e-5)
        np.testing.assert_allclose(got[1], h64, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got[2], grad_w1, rtol=1e-4, atol=1e-6)
        results.append(got[1])
    assert TRACE.graph.misses - before >= 1  # a plan was made
    assert not np.shares_memory(results[-1], results[-2])


def test_graph_plan_counts_one_compute_per_drain():
    a = gg.tensor(_arr(4, 4))
    for i in range(4):
        with gg.graph_mode(True):
            y = ((a * float(i + 1)).relu() + 1.0).sum()
            gg.reset_counters()
            v = y.item()
            assert gg.counters()["computes"] == 1
        np.testing.assert_allclose(v, (np.maximum(a.numpy().astype(np.float64) * (i + 1), 0) + 1).sum(), rtol=1e-5)


def test_graph_plan_keeps_only_live_results_and_aliases():
    """Dropped intermediates are not outputs; a detach() of a pending tensor shares its memory."""
    for _ in range(4):
        x = _arr(3, 3)
        with gg.graph_mode(True):
            t = gg.tensor(x)
            mid = t.exp()
            d = mid.detach()
            out = (mid * 2.0).sum(axis=0)
            del mid
            np.testing.assert_allclose(out.numpy(), (np.exp(x.astype(np.float64)) * 2).sum(axis=0), rtol=1e-5)
            np.testing.assert_allclose(d.numpy(), np.exp(x.astype(np.float64)), rtol=1e-5)


def test_graph_plan_is_keyed_by_matmul_precision_and_params():
    for prec in ("default", "f32", "default", "f32"):
        a, b = _arr(4, 5), _arr(5, 2)
        with gg.graph_mode(True), gg.matmul_precision(prec):
            y = gg.tensor(a) @ gg.tensor(b)
            assert ENGINE.lazy  # recorded, not built
            got = y.numpy()
        np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-6)
    for c in (0.5, 2.0, 0.5, 2.0, -1.0):
        a = _arr(3, 2)
        with gg.graph_mode(True):
            got = gg.tensor(a).clamp(max=c).numpy()
        np.testing.assert_allclose(got, np.minimum(a, c))


def test_graph_plan_sees_in_place_writes_between_drains():
    w = gg.tensor(_arr(3, 3))
    x = gg.tensor(_arr(3, 2))
    for i in range(4):
        new_w = _arr(3, 3)
        w.copy_(gg.tensor(new_w))
        with gg.graph_mode(True):
            got = (w @ x).numpy()
        np.testing.assert_allclose(got, new_w.astype(np.float64) @ x.numpy(), rtol=1e-5, atol=1e-6)


def test_graph_plan_failure_marks_pending_tensors_failed(monkeypatch):
    a = gg.tensor(_arr(2, 2))
    for _ in range(3):  # the plan exists after these
        with gg.graph_mode(True):
            (a.exp() + 1.0).numpy()
    from ggmlgrad.engine import executor
    monkeypatch.setattr(executor, "_graph_compute", lambda sched, graph: 1)  # ggml reports a failed compute
    with gg.graph_mode(True):
        y = a.exp() + 1.0
        with pytest.raises(gg.GraphError, match="exp x1, add_scalar x1"):
            y.numpy()
        assert gg.queue_length() == 0
        with pytest.raises(gg.PendingError, match="graph failed"):
            y.numpy()
    monkeypatch.undo()
    with gg.graph_mode(True):
        np.testing.assert_allclose((a.exp() + 1.0).numpy(), np.exp(a.numpy().astype(np.float64)) + 1, rtol=1e-6)


@pytest.mark.parametrize("graph", [False, True])
def test_optimizer_update_plan_follows_replaced_state_tensors(graph):
    """Steps replay a cached update plan; replacing a state tensor (not writing it in place) must be
    seen by the next step, since the plan rebinds every tensor it reads and writes per step."""
    w0 = _arr(3, 2)
    w = gg.tensor(w0, requires_grad=True)
    opt = gg.optim.Adam([w], lr=0.1)
    ref_w, m, v = w0.astype(np.float64), np.zeros((3, 2)), np.zeros((3, 2))
    b1, b2, eps = 0.9, 0.999, 1e-8
    for t in range(1, 7):
        if t == 5:  # fresh moments, as new tensors
            opt.state[w]["exp_avg"] = gg.zeros((3, 2))
            opt.state[w]["exp_avg_sq"] = gg.zeros((3, 2))
            m, v = np.zeros((3, 2)), np.zeros((3, 2))
        with gg.graph_mode(graph):
            opt.zero_grad()
            (w * w).sum().backward()
            opt.step()
        g = 2 * ref_w
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        ref_w = ref_w - 0.1 * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)
        np.testing.assert_allclose(w.detach().numpy(), ref_w, rtol=1e-5, atol=2e-5)  # float32 steps
        np.testing.assert_allclose(opt.state[w]["exp_avg"].numpy(), m, rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("graph", [False, True])
def test_results_never_share_memory_with_their_inputs(graph):
    """A result whose layout equals its input's (a sum over size-1 axes, a same-shape reshape)
    is still its own tensor: writing it in place leaves the input alone. (The reshape op is
    called directly: ``Tensor.reshape``'s result is torch's view, whose in-place writes raise.)"""
    from ggmlgrad.ops import op
    x = _arr(1, 4)
    with gg.graph_mode(graph):
        y = gg.tensor(x) * 2.0
        s = y.sum(axis=0, keepdim=True)
        r = op.reshape(y, shape=(1, 4))
        m = y.mean(axis=0, keepdim=True)
        s.add_(1.0)
        r.mul_(0.0)
        np.testing.assert_allclose(y.numpy(), x * 2.0, rtol=1e-6)
        np.testing.assert_allclose(s.numpy(), x * 2.0 + 1.0, rtol=1e-6)
        np.testing.assert_allclose(m.numpy(), x * 2.0, rtol=1e-6)


def test_plan_cache_builds_on_the_second_use_and_stops_building_while_thrashing():
    from ggmlgrad.engine.trace_cache import GRAPH, OP, SEGMENT, TraceCache
    c = TraceCache(op=4)                    # op plans: min_uses 2
    assert not c.want((OP, "a")) and c.want((OP, "a"))  # seen once: no plan yet; twice: make one
    healthy = TraceCache(segment=4)         # segments: min_uses 1
    for _ in range(10):                     # a working set that fits: never paused
        for k in "abc":
            if (SEGMENT, k) not in healthy.plans:
                assert healthy.want((SEGMENT, k))
                healthy.put((SEGMENT, k), None)
    assert healthy.segment.paused == 0 and healthy.segment.misses == 3
    thrash = TraceCache(segment=4)
    for k in range(3):                      # another kind's entries: neither evicted nor counted
        thrash.put((GRAPH, k), None)
    built = 0
    for _ in range(3):                      # 8 keys cycling through 4 slots
        for k in range(8):
            if (SEGMENT, k) not in thrash.plans and thrash.want((SEGMENT, k)):
                thrash.put((SEGMENT, k), None)
                built += 1
    # after one window of 4 builds that all evicted, it declines the next 16 instead of rebuilding
    assert built < 24 and thrash.segment.paused > 0
    assert thrash.graph.paused == 0 and thrash.want((GRAPH, "new")) is False  # (min_uses 2: a first use)
    assert len(thrash.entries(GRAPH)) == 3 == thrash.graph.size and thrash.segment.size == 4
    declined = thrash.segment.paused
    for _ in range(declined):
        assert not thrash.want((SEGMENT, "x"))
    assert thrash.want((SEGMENT, "x"))      # then it tries again


_ALLOCATION_FAILURE = """
import json
import numpy as np
import ggmlgrad as gg
from ggmlgrad.engine import plans

def no_memory(self):
    raise MemoryError("injected")
plans.OwnedGraph.allocate = no_memory
rng = np.random.default_rng(0)
results = []
for graph in (False, True):
    for i in range(4):
        print("CALL", graph, i, flush=True)
        a = rng.standard_normal((5, 4)).astype(np.float32)
        b = rng.standard_normal((4, 3)).astype(np.float32)
        with gg.graph_mode(graph):
            got = (gg.tensor(a) @ gg.tensor(b)).tanh().numpy()
        ok = np.allclose(got, np.tanh(a.astype(np.float64) @ b), rtol=1e-5, atol=1e-6)
        results.append([graph, f"step {i}", "ok" if ok else "wrong value"])
print("RESULTS " + json.dumps(results))
"""


def test_plan_allocation_failure_falls_back_to_the_ordinary_drain():
    """A plan that cannot allocate (device memory) must not lose the drain: its nodes are computed
    the ordinary way, in eager and graph mode alike (in a subprocess: the bug this guards against
    was a ggml abort, re-allocating the plan's output nodes)."""
    from battery import failures, run_battery
    results = run_battery(_ALLOCATION_FAILURE)
    assert len(results) == 8 and not failures(results), failures(results)


def test_a_builder_failing_while_the_queue_is_built_fails_its_tensors_cleanly(monkeypatch):
    from ggmlgrad.ops.registry import REGISTRY
    a = gg.tensor(_arr(3, 3))
    with gg.graph_mode(True):
        y = a.exp()
        monkeypatch.setattr(REGISTRY["sigmoid"], "forward", lambda *args, **kw: (_ for _ in ()).throw(
            RuntimeError("injected build failure")))
        call_plans.clear()   # (call plans keep the builders they learned: patched here, not an API)
        z = y.sigmoid()          # recorded lazily; its builder runs at the drain
        with pytest.raises(RuntimeError, match="injected build failure"):
            z.numpy()
        assert gg.queue_length() == 0
        for t in (y, z):
            with pytest.raises(gg.PendingError):
                t.numpy()
    monkeypatch.undo()
    call_plans.clear()
    with gg.graph_mode(True):  # the session keeps working
        np.testing.assert_allclose(a.exp().sigmoid().numpy(), 1 / (1 + np.exp(-np.exp(a.numpy().astype(np.float64)))),
                                   rtol=1e-5)


def test_plans_are_safe_under_concurrent_threads():
    """Two threads computing the same op signatures (one shared plan per signature, whose leaves
    are rebound per call) must each get their own values: the plan's lock serializes rebinding
    and compute."""
    import threading
    errors = []

    def work(seed: int, graph: bool):
        r = np.random.default_rng(seed)
        try:
            for _ in range(150):
                a, b = r.standard_normal((6, 5)).astype(np.float32), r.standard_normal((5, 4)).astype(np.float32)
                with gg.graph_mode(graph):
                    got = ((gg.tensor(a) @ gg.tensor(b)) * 2.0).relu().numpy()
                want = np.maximum((a.astype(np.float64) @ b) * 2.0, 0)
                if not np.allclose(got, want, rtol=1e-5, atol=1e-5):
                    errors.append(f"seed {seed}: wrong value")
                    return
        except Exception as e:  # pragma: no cover - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(s, g)) for s, g in ((1, False), (2, False), (3, True), (4, True))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_plan_keys_tell_apart_values_that_compare_equal():
    """Parameters that compare equal but differ (types, the sign of a zero) get different plan keys,
    and graph-mode plans made for one never compute the other."""
    from ggmlgrad.engine.plans import freeze_params
    keys = [freeze_params({"c": v}) for v in (1, 1.0, True, 0.0, -0.0, 2.5, float("inf"))]
    assert len(set(keys)) == len(keys)
    assert freeze_params({"c": 2.5}) == freeze_params({"c": 2.5})
    # sequences: ints take a short form, which must differ from every other element type's
    seqs = [(1, 2), (1.0, 2), (True, 2), [1, 2], (), [], ((1, 2),), ((tuple, (1, 2)),), (0.0,), (-0.0,), (0,)]
    keys = [freeze_params({"axes": v}) for v in seqs]
    assert len(set(keys)) == len(keys), keys
    assert freeze_params({"axes": (1, 2)}) == freeze_params({"axes": (1, 2)})
    x = gg.tensor(np.array([1.0, -2.0], np.float32))
    for _ in range(3):  # each signature's plan is made and used
        for c in (0.0, -0.0):
            with gg.graph_mode(True):
                y = 1.0 / (x * c)
            np.testing.assert_array_equal(y.numpy(), 1.0 / (x.numpy() * np.float32(c)))
