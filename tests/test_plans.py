"""Cached single-op plans (the eager fast path): reuse across calls must never reuse values.

Each test compares against NumPy float64 on inputs that change between calls of the same op
signature, so a plan that kept a stale pointer (a leaf, a view of a leaf, the output) fails.
"""
import numpy as np
import pytest

import ggmlgrad as gg
from ggmlgrad.engine.plans import PLANS

rng = np.random.default_rng(7)


@pytest.fixture(autouse=True)
def eager():
    with gg.graph_mode(False):
        yield


def _arr(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def test_same_signature_reuses_one_plan_and_fresh_values():
    before = PLANS.misses
    for _ in range(5):
        a, b = _arr(6, 5), _arr(6, 5)
        r = gg.tensor(a) + gg.tensor(b)
        np.testing.assert_allclose(r.numpy(), a.astype(np.float64) + b, rtol=1e-6)
    assert PLANS.misses - before <= 1  # built once (or already built by an earlier test)


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


def test_eviction_keeps_results_correct(monkeypatch):
    plans: dict = {}
    monkeypatch.setattr(PLANS, "plans", plans)
    monkeypatch.setattr(PLANS, "capacity", 3)
    for n in range(2, 12):
        a, b = _arr(n, 3), _arr(n, 3)
        np.testing.assert_allclose((gg.tensor(a) - gg.tensor(b)).numpy(), a.astype(np.float64) - b, rtol=1e-6)
    assert len(plans) <= 3
    for n in range(2, 12):  # again, after evictions: rebuilt plans are right too
        a, b = _arr(n, 3), _arr(n, 3)
        np.testing.assert_allclose((gg.tensor(a) - gg.tensor(b)).numpy(), a.astype(np.float64) - b, rtol=1e-6)


def test_gradients_through_planned_ops():
    a, b = _arr(5, 3), _arr(3, 2)
    ta, tb = gg.tensor(a, requires_grad=True), gg.tensor(b, requires_grad=True)
    for _ in range(2):
        ta.grad = tb.grad = None
        (ta @ tb).relu().sum().backward()
        mask = (a.astype(np.float64) @ b) > 0
        np.testing.assert_allclose(ta.grad.numpy(), mask @ b.T, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(tb.grad.numpy(), a.T @ mask, rtol=1e-5, atol=1e-6)
