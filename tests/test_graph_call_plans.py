"""Graph-mode call plans (engine/graph_call_plans.py, tensor/call_plans.py; issue 21, recording cost).

A repeated graph-mode call of a planned entry point appends its learned records again, without the
front end or the ops' inference. These tests check that this changes nothing observable:

1. every OpInfo sample, called four times on the same tensors in graph mode, leaves the queue in
   the same state after each call (records, plan key, leaves, labels, work, length) and drains to
   bit-for-bit the same values, with the same computes, as with call plans off; and plans do run;
2. a plan is not used where the ordinary recording would record something else: check mode, a
   capture, a hold, a view argument, an argument of another epoch or with a failed value, another
   device queued; the key's parts (shape, dtype, scalar, precision, grad) select their own plan;
3. what the queue's inputs are at replay time is resolved anew: pending arguments, leaves first seen,
   a queue without a plan key; threads record their own queues.
"""
from __future__ import annotations

import threading
import warnings

import numpy as np
import pytest

import ggmlgrad as gg
from ggmlgrad.engine import ENGINE, graph_call_plans
from ggmlgrad.engine.plans import freeze_params
from ggmlgrad.engine.records import set_phase, reset_phase
from ggmlgrad.tensor import call_plans
from ggmlgrad.testing.opinfo import all_opinfos, input_arrays, sample_tensors, with_tensors


@pytest.fixture(autouse=True)
def fresh_plans():
    call_plans.clear()
    old = call_plans.set_enabled(True)
    yield
    call_plans.set_enabled(old)
    ENGINE.discard()


plans = call_plans.switched


def hits() -> int:
    return gg.counters()["graph_call_plan_hits"]


def _flat(out) -> list:
    if isinstance(out, (tuple, list)):
        return [v for o in out for v in _flat(o)]
    return [out]


def _queue_state(tensors: list) -> tuple:
    """The queue as the drain sees it: records (inputs as queue indices or argument positions),
    plan key (leaves as argument positions), labels, work, length."""
    q = ENGINE.queue
    where = {id(t): i for i, t in enumerate(tensors)}

    def name(x):
        return ("arg", where.get(id(x), "other")) if not isinstance(x, int) else x

    records = []
    for rec in q.lazy:
        build, params, shape, dtype, prec, ref = rec[:6]
        try:
            fp = freeze_params(params) if params else ()
        except TypeError:
            fp = "unhashable"
        alive = ref is not None and ref() is not None
        records.append((build, repr(fp), shape, dtype, prec, ref is None, alive, tuple(name(x) for x in rec[6:])))
    sig = None if q._sig is None else repr(q._sig)   # (repr: a NaN parameter equals no other NaN)
    leaves = tuple(name(x) for x in q._sig_leaves)
    return (tuple(records), sig, leaves, tuple(q.labels), q.work, q.max_work, len(q), len(q.roots), q.bare,
            q.device)


def _counts() -> tuple:
    c = gg.counters()
    return sum(c["drains_by_reason"].values()), c["computes"], c["uploads"], c["downloads"], c["failed_drains"]


def _four_calls(info, sample, arrays, requires_grad: bool = False) -> tuple:
    """Call the sample four times in graph mode on the same tensors: the queue after each call,
    then the drained values (bytes) and the engine's counts for the drain; with ``requires_grad``
    the differentiable inputs require grad and the gradients of the outputs' sum come last."""
    tensors = sample_tensors(sample, arrays, requires_grad)
    args = with_tensors(sample, tensors)
    gg.manual_seed(1234)
    states, outs = [], []
    with gg.graph_mode(True):
        for _ in range(4):
            try:
                out = info.fn(*args, **sample.kwargs)
            except Exception as e:
                states.append(("error", type(e).__name__, str(e)))
                continue
            outs.append(out)
            states.append(_queue_state(tensors))
        grads = []
        if requires_grad:
            taped = [o for out in outs for o in _flat(out) if isinstance(o, gg.Tensor) and o.grad_fn is not None]
            try:
                if taped:
                    sum(o.sum() for o in taped).backward()
                grads = [None if t.grad is None else np.asarray(t.grad.numpy()).tobytes() for t in tensors]
            except Exception as e:
                grads = [("error", type(e).__name__, str(e))]
        before = _counts()
        values = []
        for out in outs:
            for v in _flat(out):
                if isinstance(v, gg.Tensor):
                    values.append((v.dtype.name, v.shape, v.requires_grad, v.grad_fn is not None,
                                   np.asarray(v.detach().numpy()).tobytes()))
                else:
                    values.append(("value", repr(v)))
        drained = tuple(b - a for a, b in zip(before, _counts()))
    return states, values, drained, grads


def test_opinfo_samples_record_the_same_queue_with_and_without_call_plans():
    start = hits()
    planned, runs = set(), 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for info in all_opinfos():
            if not info.capturable:
                continue
            rng = np.random.default_rng(abs(hash(info.name)) % 2**32)
            for sample in info.samples(rng)[:2]:
                arrays = input_arrays(sample)
                for requires_grad in (False, True):
                    if requires_grad and not info.grad:
                        continue
                    call_plans.clear()
                    with plans(False):
                        off = _four_calls(info, sample, arrays, requires_grad)
                    h = hits()
                    with plans(True):
                        on = _four_calls(info, sample, arrays, requires_grad)
                    assert on == off, (f"{info.name} (requires_grad={requires_grad}): graph-mode call plans "
                                       f"changed the queue, the values or the gradients")
                    runs += 1
                    if hits() > h:
                        planned.add((info.name, requires_grad))
    assert runs > 500 and hits() - start > 500, (runs, hits() - start)
    for name in ("add", "scalar_mul", "matmul", "sum_all", "mean_axis", "relu", "softmax", "cmp_lt", "clamp_both",
                 "where", "linear", "logaddexp", "exp"):
        assert (name, False) in planned, (name, sorted(planned))
    for name in ("add", "matmul", "sum_all", "relu", "softmax", "linear", "exp"):   # taped calls: op-call plans
        assert (name, True) in planned, (name, sorted(planned))


def _a_plus_b_twice():
    """Learn ``a + b`` in graph mode (two calls); the tensors."""
    a, b = gg.ones(3, 4), gg.full((3, 4), 2.0)
    with gg.graph_mode(True):
        for _ in range(3):
            a + b
        ENGINE.discard()
    return a, b


def test_a_repeated_call_is_recorded_by_its_plan_and_computes_the_same():
    a, b = _a_plus_b_twice()
    h = hits()
    with gg.graph_mode(True):
        outs = [a * 3.0 + b for _ in range(5)]
        assert hits() - h >= 6   # the mul and the add of the last calls at least
    for o in outs:
        np.testing.assert_array_equal(o.numpy(), np.full((3, 4), 5.0, np.float32))


def test_composite_front_end_replays_all_its_records():
    x = gg.tensor(np.linspace(-3, 3, 12).reshape(3, 4))
    lo, hi = gg.tensor(np.full((3, 4), -1.0)), gg.tensor(np.linspace(0, 2, 12).reshape(3, 4))
    with gg.graph_mode(True):
        first = gg.clamp(x, lo, hi)
        n = len(ENGINE)
        assert n > 1   # a composite: several records
        gg.clamp(x, lo, hi)
        h = hits()
        outs = [gg.clamp(x, lo, hi) for _ in range(3)]
        assert hits() - h == 3 and len(ENGINE) == 5 * n   # one plan per call, all its records
    ref = np.minimum(np.maximum(np.linspace(-3, 3, 12), -1.0), np.linspace(0, 2, 12)).reshape(3, 4)
    for o in [first] + outs:
        np.testing.assert_allclose(o.numpy(), ref, rtol=1e-6)


def test_the_key_selects_the_plan():
    a, _ = _a_plus_b_twice()
    m = gg.ones(4, 2)
    with gg.graph_mode(True):
        for _ in range(3):
            r1, r2 = a * 2.0, a * -0.0
            r3 = gg.ones(2, 4) * 2.0
            r4 = gg.ones(3, 4, dtype=gg.int32) * 2
            r5 = a @ m
        old = gg.matmul_precision()
        gg.matmul_precision("f32")
        try:
            r6 = a @ m
            assert ENGINE.queue.lazy[-1][4] == "f32"   # the record's precision, not the learned one
        finally:
            gg.matmul_precision(old)
    np.testing.assert_array_equal(r1.numpy(), np.full((3, 4), 2.0, np.float32))
    assert np.all(np.signbit(r2.numpy()))
    np.testing.assert_array_equal(r3.numpy(), np.full((2, 4), 2.0, np.float32))
    assert r4.dtype == gg.int32 and r4.numpy().tolist() == [[2] * 4] * 3
    np.testing.assert_array_equal(r5.numpy(), np.full((3, 2), 4.0, np.float32))
    np.testing.assert_array_equal(r6.numpy(), np.full((3, 2), 4.0, np.float32))


def test_taped_calls_are_planned_per_op_and_put_on_the_tape():
    w = gg.ones(2, 2, requires_grad=True)
    with gg.graph_mode(True):
        for _ in range(3):
            y = (w * 3.0).sum()
        h = hits()
        y = (w * 3.0).sum()
        assert hits() - h == 2 and y.grad_fn is not None and y.requires_grad   # the mul's and the sum's op plans
        y.backward()
        with gg.no_grad():
            z = w * 3.0
        assert hits() - h >= 3 and not z.requires_grad and z.grad_fn is None
    np.testing.assert_array_equal(w.grad.numpy(), np.full((2, 2), 3.0, np.float32))


def test_check_mode_capture_and_holds_record_the_ordinary_way():
    a, b = _a_plus_b_twice()
    h = hits()
    with gg.graph_mode(True, check=True):
        np.testing.assert_array_equal((a + b).numpy(), np.full((3, 4), 3.0, np.float32))
    assert hits() == h
    with gg.graph_mode(True):
        ENGINE.hold()
        try:
            c = a + b
            assert hits() == h
        finally:
            ENGINE.release()
    np.testing.assert_array_equal(c.numpy(), np.full((3, 4), 3.0, np.float32))
    step = gg.capture(lambda u, v: u + v)
    for _ in range(3):
        out = step(a, b)
    np.testing.assert_array_equal(np.asarray(out), np.full((3, 4), 3.0, np.float32))


def test_view_and_strided_arguments_fall_back():
    base = gg.tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    t = base.t()   # a view (strided) argument
    with gg.graph_mode(True):
        for _ in range(3):
            out = t + 1.0
    np.testing.assert_array_equal(out.numpy(), np.arange(12, dtype=np.float32).reshape(3, 4).T + 1)


def test_pending_and_computed_arguments_are_resolved_at_each_call():
    a, b = _a_plus_b_twice()
    with gg.graph_mode(True):
        p = a + b                    # pending
        q1 = p + b                   # a pending argument and a computed one
        q2 = b + p                   # the other way round
        fresh = gg.full((3, 4), 5.0)   # a leaf the queue has not seen yet
        q3 = fresh + p
    np.testing.assert_array_equal(q1.numpy(), np.full((3, 4), 5.0, np.float32))
    np.testing.assert_array_equal(q2.numpy(), np.full((3, 4), 5.0, np.float32))
    np.testing.assert_array_equal(q3.numpy(), np.full((3, 4), 8.0, np.float32))


def test_failed_and_discarded_arguments_raise_as_before():
    a, b = _a_plus_b_twice()
    with gg.graph_mode(True):
        gone = a + b
        ENGINE.discard()
        with plans(False):
            with pytest.raises(Exception) as off:
                gone + b
        with pytest.raises(Exception) as on:
            gone + b
    assert type(on.value) is type(off.value) and str(on.value) == str(off.value)


def test_phase_label_is_the_label_of_planned_records():
    a, b = _a_plus_b_twice()
    with gg.graph_mode(True):
        token = set_phase("backward")
        try:
            a + b
        finally:
            reset_phase(token)
        assert ENGINE.queue.labels[-1] == "backward"
        ENGINE.discard()


def test_a_queue_without_a_plan_key_records_through_the_plan():
    a, b = _a_plus_b_twice()
    with gg.graph_mode(True):
        ENGINE.queue._sig = None   # (as an unhashable parameter leaves it)
        h = hits()
        outs = [a + b for _ in range(3)]
        assert hits() - h == 3 and ENGINE.queue._sig is None
    for o in outs:
        np.testing.assert_array_equal(o.numpy(), np.full((3, 4), 3.0, np.float32))


def test_threads_record_their_own_queues():
    a, b = _a_plus_b_twice()
    errors = []

    def work(k: float) -> None:
        try:
            with gg.graph_mode(True):
                outs = [a * k + b for _ in range(50)]
            for o in outs:
                np.testing.assert_array_equal(o.numpy(), np.full((3, 4), k + 2.0, np.float32))
        except Exception as e:   # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(float(k),)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_switched_off_records_the_ordinary_way():
    a, b = _a_plus_b_twice()
    with plans(False), gg.graph_mode(True):
        h = hits()
        for _ in range(4):
            a + b
        assert hits() == h
        ENGINE.discard()


def test_one_tensor_at_two_places_is_part_of_the_key():
    """A plan learned from ``t * t`` (one tensor twice) is not used for ``g * d`` (two tensors)."""
    x = gg.tensor([1.0, 2.0], requires_grad=True)
    with gg.graph_mode(True):
        with gg.no_grad():
            for _ in range(3):
                x * x   # the entry point's plan and the mul op's
        y = x * 3
        d = y.detach()
        (y * d).sum().backward()   # backward's muls: g * d and g * y, distinct tensors
    assert x.grad.tolist() == [9.0, 18.0]


def test_an_alias_of_a_pending_value_is_never_read_by_place():
    """``y * y.detach()``: two tensors of one pending value; a plan learned there must not make a
    later call with two different tensors read the first one twice."""
    a, b = gg.tensor([1.0, 2.0]), gg.tensor([3.0, 5.0])
    with gg.graph_mode(True):
        for _ in range(3):
            y = a * 1.0
            y * y.detach()
        p, q = a * 1.0, b * 1.0
        out = p * q
    assert out.tolist() == [3.0, 10.0]


@pytest.mark.skipif(graph_call_plans._COMPILED_APPEND is None,
                    reason="the compiled accelerator is not built here (`python -m ggmlgrad build`); CI's "
                           "fast-build pass builds it and runs this test")
def test_the_compiled_append_leaves_the_queue_as_the_python_path_does():
    compared = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for info in all_opinfos()[:150]:
            if not info.capturable:
                continue
            sample = info.samples(np.random.default_rng(0))[0]
            arrays = input_arrays(sample)
            call_plans.clear()
            old = graph_call_plans.use_compiled_append(False)
            try:
                python = _four_calls(info, sample, arrays)
                call_plans.clear()
                graph_call_plans.use_compiled_append(True)
                h = hits()
                compiled = _four_calls(info, sample, arrays)
            finally:
                graph_call_plans.use_compiled_append(old)
            assert compiled == python, f"{info.name}: the compiled append differs"
            compared += hits() > h
    assert compared > 50, compared


def test_a_signature_seen_once_is_not_learned():
    """A scalar that changes every call makes a new signature each time: no learning for those
    (a signature is learned at its second call), and the values are the ordinary path's."""
    a = gg.tensor([1.0, 2.0])
    with gg.graph_mode(True):
        outs = [a * float(k + 1) for k in range(6)]
        graph_tables = {name: n for name, n in call_plans.stats().items() if name.endswith("(graph mode)")}
        assert sum(planned for planned, _ in graph_tables.values()) == 0, graph_tables
        for _ in range(2):
            a * 7.0
        assert sum(planned for planned, _ in call_plans.stats().values()) > 0   # its second call learned
    for k, o in enumerate(outs):
        assert o.tolist() == [k + 1.0, 2.0 * (k + 1)]


def test_watching_a_call_that_drains_leaves_the_new_queue_its_own_work():
    """A watched call during which the queue is drained: the queue after it keeps only the work
    recorded after the drain, not the heaviest record of the queue before."""
    big, small = gg.ones(256, 256), gg.ones(2)
    with gg.graph_mode(True):
        big @ big                     # a heavy record in the queue
        heavy = ENGINE.queue.max_work
        token = graph_call_plans.begin_watching()
        ENGINE.drain("read")          # (what a host read inside the call does)
        small + small
        graph_call_plans.abort_watching(token)
        assert ENGINE.queue.max_work < heavy
        ENGINE.discard()
