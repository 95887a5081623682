"""The one trace cache (engine/trace_cache.py): op plans, graph plans and backward segments are
entries of ONE object, keyed on record sequences in one format, under one eviction policy and one
staleness rule.

References: NumPy float64 for values; the cache's own entries, keys and budgets, and
``gg.counters()``, for "which plan ran".
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

import ggmlgrad as gg
from ggmlgrad.engine import ENGINE, context
from ggmlgrad.engine.plans import OpPlan, Plan, SegmentPlan
from ggmlgrad.engine.trace_cache import GRAPH, OP, SEGMENT, TRACE, TraceCache
from ggmlgrad.tensor import call_plans, tape

rng = np.random.default_rng(21)


@pytest.fixture
def cache():
    """A fresh trace cache as the current context's (earlier tests may have left the shared one
    full or thrashed), eager mode, call plans on, backward segments on."""
    fresh = TraceCache()
    token = context.push(trace_cache=fresh)
    old = tape._BACKWARD.enabled
    tape._BACKWARD.enabled = True
    tape._BACKWARD.paused = tape._BACKWARD.misses_in_row = 0
    call_plans.clear()
    try:
        with gg.graph_mode(False), call_plans.switched(True):
            yield fresh
    finally:
        context.pop(token)
        tape._BACKWARD.enabled = old
        call_plans.clear()


def _arr(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def _keys(cache, kind):
    return [k for k in cache.plans if k[0] == kind]


def _train_step(w, xa):
    """One graph-mode step: loss and w's gradient (w.grad fresh, so the backward is cached)."""
    w.grad = None
    with gg.graph_mode(True):
        loss = ((gg.tensor(xa) @ w).tanh() ** 2).mean()
        mark = ENGINE.lazy_mark()   # where backward starts: the records queued so far
        loss.backward()
        return loss.item(), w.grad.numpy().copy(), mark


def _reference(wa, xa):
    t = np.tanh(xa.astype(np.float64) @ wa)
    return (t ** 2).mean(), xa.T.astype(np.float64) @ (2 * t * (1 - t * t) / t.size)


def test_one_cache_holds_op_plans_graph_plans_and_segments_under_record_sequence_keys(cache):
    wa = _arr(5, 3)
    w = gg.tensor(wa, requires_grad=True)
    c0 = gg.counters()["computes"]
    for i in range(4):
        xa = _arr(4, 5)
        loss, grad, mark = _train_step(w, xa)
        want_loss, want_grad = _reference(wa, xa)
        np.testing.assert_allclose(loss, want_loss, rtol=1e-5)
        np.testing.assert_allclose(grad, want_grad, rtol=1e-4, atol=1e-6)
    assert gg.counters()["computes"] - c0 == 4           # one compute per step
    a, b = _arr(2, 3), _arr(2, 3)
    for _ in range(3):                                     # eager: the op plan is made on the 2nd use
        np.testing.assert_allclose((gg.tensor(a) - gg.tensor(b)).numpy(), a.astype(np.float64) - b, rtol=1e-6)

    (gkey,), (skey,), (okey,) = _keys(cache, GRAPH), _keys(cache, SEGMENT), _keys(cache, OP)
    assert type(cache.plans[gkey]) is Plan and type(cache.plans[skey]) is SegmentPlan
    assert type(cache.plans[okey]) is OpPlan
    assert cache.graph.misses == cache.segment.misses == cache.op.misses == 1   # each made once, found again
    assert tape._BACKWARD.hits >= 2
    # One key format: (kind, device, record sequence, kind's part). The segment's key starts with
    # the records queued before backward; the step's graph key with the same records (then backward's).
    device = mark.key[1]
    assert mark.key[0] == SEGMENT and skey[:len(mark.key)] == mark.key
    assert gkey[:len(mark.key)] == (GRAPH, *mark.key[1:]) and len(gkey) > len(mark.key)
    assert okey[1] == device


def test_an_eager_op_is_keyed_as_the_one_record_sequence_it_is(cache):
    """The eager op's key is the graph key of the same op queued alone, but for the kind and the
    graph key's live results (-1, record 0): distinct entries, one format."""
    a, b = _arr(3, 4), _arr(3, 4)
    ta, tb = gg.tensor(a), gg.tensor(b)
    for _ in range(2):
        (ta * tb).numpy()
    for _ in range(2):
        with gg.graph_mode(True):
            out = ta * tb
        np.testing.assert_allclose(out.numpy(), a.astype(np.float64) * b, rtol=1e-6)
    (okey,), (gkey,) = _keys(cache, OP), _keys(cache, GRAPH)
    assert gkey[-2:] == (-1, 0) and okey == (OP, *gkey[1:-2])
    assert type(cache.plans[okey]) is OpPlan and type(cache.plans[gkey]) is Plan
    assert cache.plans[okey] is not cache.plans[gkey]
    # the op's record: builder, result shape and dtype, precision, parameters, input count, then
    # each input as a new slot with its shape and dtype
    assert okey[3:] == ((3, 4), ta.dtype, "default", (), 2, -1, (3, 4), ta.dtype, -2, (3, 4), ta.dtype)


def _hits():
    return gg.counters()["call_plan_hits"]


def _calls(fn, n, want):
    """Run ``fn`` n times, checking its value each time; the call-plan hits they made."""
    h = _hits()
    for _ in range(n):
        np.testing.assert_allclose(fn().numpy(), want, rtol=1e-6)
    return _hits() - h


def test_a_removal_of_any_kind_makes_call_plans_relearn_with_the_same_values():
    """One staleness rule: any entry the cache removes (here a graph plan, then the call plan's own
    op plan) makes eager call plans check again; the calls fall back, relearn, stay right."""
    cache = TraceCache(op=2, graph=1)
    token = context.push(trace_cache=cache)
    call_plans.clear()
    try:
        with gg.graph_mode(False), call_plans.switched(True):
            xa = _arr(2, 3)
            x = gg.tensor(xa)
            want = xa.astype(np.float64) - 0.5
            assert _calls(lambda: x - 0.5, 4, want) >= 1        # learned, then run by its call plan
            removed = cache.removed
            for n in (2, 3):                                      # two graph plans: the second evicts the first
                for _ in range(2):
                    with gg.graph_mode(True):
                        y = gg.tensor(_arr(n, 2)).exp()
                    y.numpy()
            assert cache.removed == removed + 1 and len(_keys(cache, GRAPH)) == 1
            assert len(_keys(cache, OP)) == 1                     # another kind's eviction leaves op plans alone
            assert _calls(lambda: x - 0.5, 1, want) == 0          # stale: the ordinary path (relearns)
            assert _calls(lambda: x - 0.5, 3, want) >= 1          # planned again
            (op_plan,) = [p for p in cache.entries(OP) if p is not None]
            for k in (1.0, 2.0):                                  # two more op plans: x - 0.5's is evicted
                for _ in range(2):
                    (x * k).numpy()
            assert op_plan not in cache.entries(OP) and cache.op.size == 2
            assert _calls(lambda: x - 0.5, 1, want) == 0          # its op plan gone: the ordinary path
            assert _calls(lambda: x - 0.5, 6, want) >= 1          # made again, learned again
    finally:
        context.pop(token)
        call_plans.clear()


def test_each_kind_evicts_only_its_own_entries_under_one_policy(cache):
    """Budgets are per kind (a graph plan holds a step's intermediates, an op plan one op): graph
    drains cycling through more shapes than the graph budget never evict op plans."""
    cache.graph.capacity = 2
    a = gg.tensor(_arr(4, 4))
    for _ in range(2):
        (a + a).numpy()
        a.relu().numpy()
    assert cache.op.size == 2
    for _ in range(2):
        for n in (2, 3, 4, 5):
            for _ in range(2):
                with gg.graph_mode(True):
                    xa = _arr(n, 3)
                    y = gg.tensor(xa).tanh() * 2.0
                np.testing.assert_allclose(y.numpy(), np.tanh(xa.astype(np.float64)) * 2.0, rtol=1e-5)
    assert cache.graph.size == 2 == len(_keys(cache, GRAPH)) and cache.graph.misses >= 4
    assert cache.op.size == 2 == len(_keys(cache, OP))     # untouched
    assert cache.removed >= 2
    cache.clear(GRAPH)
    assert cache.graph.size == 0 and not _keys(cache, GRAPH) and len(_keys(cache, OP)) == 2
    cache.clear()
    assert not cache.plans and cache.op.size == cache.segment.size == 0


def test_threads_share_the_process_wide_cache():
    seen = []
    t = threading.Thread(target=lambda: seen.append(context.current().trace_cache))
    t.start()
    t.join()
    assert seen == [TRACE] and context.DEFAULT.trace_cache is TRACE
