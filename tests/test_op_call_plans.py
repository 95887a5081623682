"""Call plans of op calls (``op.<name>(...)`` from composites, losses, layers and distributions;
``call_plans.planned_apply``, reached from ``tape.apply`` in eager mode; issue 21, per-op cost).

A repeated eager op call runs its op plan from its signature (the op, its inputs' shapes, dtypes
and devices, its parameters). These tests check that it is used where it may be (a hit counter
moves), never where the tape or a key difference needs the ordinary path, and that it changes no
value, dtype, gradient or counter.
"""
from __future__ import annotations


import numpy as np
import pytest

import ggmlgrad as gg
from ggmlgrad.engine.trace_cache import TRACE
from ggmlgrad.ops.registry import op
from ggmlgrad.tensor import call_plans


plans = call_plans.switched


@pytest.fixture(autouse=True)
def fresh_plans():
    TRACE.clear()
    call_plans.clear()
    # (the suite also runs with GGMLGRAD_GRAPH=1; GGMLGRAD_CALL_PLANS=0 turns them off by default)
    with gg.graph_mode(False), plans(True):
        yield


def hits() -> int:
    return gg.counters()["call_plan_hits"]


def counts() -> tuple:
    c = gg.counters()
    return sum(c["drains_by_reason"].values()), c["computes"], c["uploads"], c["downloads"]


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_a_repeated_op_call_runs_its_plan_with_the_same_bits_and_counters():
    x = gg.tensor(rand(3, 5))
    got = {}
    for on in (False, True):
        with plans(on):
            h0, c0 = hits(), counts()
            outs = [op.exp(x).numpy() for _ in range(6)]
            got[on] = (outs, hits() - h0, tuple(b - a for a, b in zip(c0, counts())))
    for o in got[True][0] + got[False][0]:
        np.testing.assert_array_equal(o, got[False][0][0])   # bit for bit, on and off
    np.testing.assert_allclose(got[True][0][-1], np.exp(x.numpy().astype(np.float64)), rtol=2e-7)
    assert got[False][1] == 0
    assert got[True][1] >= 3            # learned on an early call, then hits
    assert got[True][2] == got[False][2]   # same drains, computes, transfers


def test_parameters_are_part_of_the_key():
    x = gg.tensor(np.array([1.0, -2.0, 0.0], np.float32))
    for c in (2.0, -0.0, 0.0, 2, -3.5, 2.0):
        for _ in range(4):
            y = op.scale(x, c=float(c))
            np.testing.assert_array_equal(y.numpy(), x.numpy() * np.float32(c))
            # the sign of a zero product follows the scalar's sign
            np.testing.assert_array_equal(np.signbit(y.numpy()), np.signbit(x.numpy() * np.float32(c)))
    assert hits() > 0


def test_shapes_and_dtypes_are_part_of_the_key():
    for shape in ((4,), (2, 2), (4,), (3, 1)):
        a, b = rand(*shape, seed=1), rand(*shape, seed=2)
        for _ in range(3):
            y = op.add(gg.tensor(a), gg.tensor(b))
            assert y.shape == shape
            np.testing.assert_array_equal(y.numpy(), a + b)


def test_under_no_grad_parameters_that_require_grad_still_plan():
    lin = gg.nn.Linear(4, 3)
    x = gg.tensor(rand(2, 4))
    with gg.no_grad():
        ref = lin(x).numpy()
        h0 = hits()
        for _ in range(5):
            y = gg.nn.functional.softmax(lin(x) * 2.0, dim=-1)   # op calls inside the front ends
            assert not y.requires_grad and y.grad_fn is None
        assert hits() > h0
    e = np.exp(2 * ref - (2 * ref).max(-1, keepdims=True))
    np.testing.assert_allclose(y.numpy(), e / e.sum(-1, keepdims=True), rtol=1e-6)


def test_a_call_the_tape_records_is_never_planned():
    w = gg.tensor(rand(3), requires_grad=True)
    for _ in range(4):
        with gg.no_grad():
            op.exp(w)                    # planned (no tape)
    for _ in range(3):
        h0 = hits()
        y = op.exp(w)
        assert hits() == h0               # the ordinary path: the tape needs its node
        assert y.requires_grad and y.grad_fn is not None
        y.sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), 3 * np.exp(w.detach().numpy()), rtol=1e-6)


def test_graph_mode_and_capture_take_the_ordinary_path():
    x = gg.tensor(rand(4))
    for _ in range(4):
        op.exp(x)
    h0 = hits()
    with gg.graph_mode(True):
        ys = [op.exp(x) for _ in range(3)]
    eager = op.exp(x).numpy()
    for y in ys:
        np.testing.assert_array_equal(y.numpy(), eager)
    step = gg.capture(lambda t: op.exp(t))
    for _ in range(3):
        np.testing.assert_array_equal(np.asarray(step(x)), eager)
    assert hits() == h0 + 1   # only the eager reference above


def test_gradients_of_a_composite_are_the_same_with_and_without_op_call_plans():
    xs = rand(6, 4, seed=3)
    grads = {}
    for on in (False, True):
        with plans(on):
            for _ in range(3):
                x = gg.tensor(xs, requires_grad=True)
                loss = gg.nn.functional.mse_loss(x.tanh() * 3.0, gg.tensor(np.ones((6, 4), np.float32)))
                loss.backward()
            grads[on] = (loss.item(), x.grad.numpy())
    assert grads[True][0] == grads[False][0]
    np.testing.assert_array_equal(grads[True][1], grads[False][1])


def test_a_non_tensor_input_raises_the_ordinary_error():
    for _ in range(3):
        with pytest.raises(TypeError, match="expected a Tensor"):
            op.exp(np.ones(3, np.float32))


def test_an_error_of_the_ordinary_path_runs_it_once(monkeypatch):
    from ggmlgrad.ops.registry import REGISTRY
    opdef = REGISTRY["exp"]
    calls = []

    def failing_infer(*args, **kwargs):
        calls.append(1)
        raise TypeError("exp: refused by the test")

    monkeypatch.setattr(opdef, "infer", failing_infer)
    for x in (gg.tensor(rand(3)), gg.tensor(rand(3), requires_grad=True)):   # keyed, and taped
        calls.clear()
        with pytest.raises(TypeError, match="refused by the test"):
            op.exp(x)
        assert len(calls) == 1
