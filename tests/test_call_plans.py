"""Eager call plans (tensor/call_plans.py, engine/call_plans.py; issue 21, per-op cost).

A repeated eager call of a planned entry point (``a + b``, ``x.sum()``, ``x @ w``...) runs its op
plan straight from its signature. These tests check that this changes nothing observable:

1. every OpInfo sample, called three times on the same tensors in eager mode, gives bit-for-bit
   the same values, dtypes, ``requires_grad``, drains/computes/transfers per call and gradients
   with call plans on as with them off (and call plans do run: the hit counter moves);
2. a cached call is not used when anything in its key or in the state it depends on changes
   (shape, dtype, scalar value, sign and type, aliasing of the arguments, requires_grad, grad
   mode, graph mode, check mode, capture, matmul precision, the op plan cache, an armed fault);
3. errors: a bad call raises the same error every time, and a compute failure on a hit takes the
   drain's failure route (a GraphError naming the op; the session stays usable).
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import ggmlgrad as gg
from ggmlgrad.engine import ENGINE
from ggmlgrad.engine import executor as executor_mod
from ggmlgrad.engine.trace_cache import OP, TRACE
from ggmlgrad.runtime import faults
from ggmlgrad.tensor import call_plans
from ggmlgrad.testing.opinfo import all_opinfos, input_arrays, sample_tensors, with_tensors


@pytest.fixture(autouse=True)
def fresh_op_plans():
    """Call plans run op plans: start from a cache that makes them (earlier tests in the suite may
    have left it thrashed, which pauses new plans for a while), and no call plans."""
    TRACE.clear()
    call_plans.clear()
    old = call_plans.set_enabled(True)   # (on by default; GGMLGRAD_CALL_PLANS=0 turns them off)
    yield
    call_plans.set_enabled(old)


plans = call_plans.switched


def hits() -> int:
    return gg.counters()["call_plan_hits"]


def _counts() -> tuple:
    c = gg.counters()
    return sum(c["drains_by_reason"].values()), c["computes"], c["uploads"], c["downloads"], c["failed_drains"]


def _flat(out) -> list:
    """The tensors (and other values) of a result, in order."""
    if isinstance(out, (tuple, list)):
        return [v for o in out for v in _flat(o)]
    return [out]


def _describe(out) -> list:
    """What a result shows: per tensor its dtype, shape, requires_grad, whether it has a grad_fn,
    and its bytes (bit-for-bit); other values as they are."""
    desc = []
    for v in _flat(out):
        if isinstance(v, gg.Tensor):
            a = v.detach().numpy()
            desc.append((v.dtype.name, v.shape, v.requires_grad, v.grad_fn is not None, np.asarray(a).tobytes()))
        else:
            desc.append(("value", repr(v)))
    return desc


def _three_calls(info, sample, arrays, requires_grad: bool) -> list:
    """Call the sample three times on the same tensors (eager); per call what it showed and what
    the engine counted."""
    tensors = sample_tensors(sample, arrays, requires_grad)
    args = with_tensors(sample, tensors)
    gg.manual_seed(1234)   # random ops draw the same numbers in both runs
    seen = []
    out = None
    for _ in range(3):
        before = _counts()
        try:
            out = info.fn(*args, **sample.kwargs)
        except Exception as e:   # the same error both ways
            seen.append(("error", type(e).__name__, str(e)))
            continue
        after = _counts()
        seen.append((_describe(out), tuple(b - a for a, b in zip(before, after))))
    grads = []
    if requires_grad:   # the backward pass, whose rules call planned entry points (with grad off)
        outs = [o for o in _flat(out) if isinstance(o, gg.Tensor) and o.grad_fn is not None]
        try:
            if outs:
                sum(o.sum() for o in outs).backward()
            grads = [_describe(t.grad) if t.grad is not None else None for t in tensors]
        except Exception as e:
            grads = [("error", type(e).__name__, str(e))]
    return seen, grads


def _samples():
    for info in all_opinfos():   # (NaN/inf samples too: NaN scalars and -0.0 are keys)
        rng = np.random.default_rng(abs(hash(info.name)) % 2**32)
        for s in info.samples(rng):
            yield info, s


def test_opinfo_samples_are_the_same_with_and_without_call_plans():
    start = hits()
    planned = set()
    runs = 0
    with gg.graph_mode(False), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for info, sample in _samples():
            arrays = input_arrays(sample)
            TRACE.clear()   # this test makes more op signatures than the cache holds: never a thrashed cache
            for requires_grad in (False, True):
                if requires_grad and not info.grad:
                    continue
                with plans(False):
                    off = _three_calls(info, sample, arrays, requires_grad)
                h = hits()
                with plans(True):
                    on = _three_calls(info, sample, arrays, requires_grad)
                assert on == off, f"{info.name} (requires_grad={requires_grad}): call plans changed the result"
                runs += 1
                if hits() > h and not requires_grad:
                    planned.add(info.name)
    # call plans did run, for the arithmetic, matmul, reductions and activations at least
    assert runs > 2000 and hits() - start > 1000, (runs, hits() - start)
    for name in ("add", "scalar_mul", "matmul", "mm", "sum_all", "mean_axis", "amax", "relu", "gelu", "softmax",
                 "cmp_lt", "clamp_both", "where", "linear"):
        assert name in planned, (name, sorted(planned))


# ---------------------------------------------------------------------- 2. what a plan depends on
def _repeat(fn, n: int = 3):
    """Call ``fn`` n times; (last result, call plan hits during the calls)."""
    h = hits()
    out = None
    for _ in range(n):
        out = fn()
    return out, hits() - h


@pytest.fixture
def on():
    with plans(True), gg.graph_mode(False):
        yield


def test_a_repeated_call_runs_its_plan_and_counts_like_the_ordinary_path(on):
    a = gg.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    b = gg.tensor(np.ones((2, 3), np.float32))
    _repeat(lambda: a + b)
    gg.reset_counters()
    out, n = _repeat(lambda: a + b, 4)
    assert n == 4
    c = gg.counters()
    assert c["computes"] == 4 and c["drains_by_reason"] == {"eager": 4} and c["computes_by_site"] == {"eager": 4}
    assert c["uploads"] == 0 and c["downloads"] == 0
    np.testing.assert_array_equal(out.numpy(), np.arange(6, dtype=np.float32).reshape(2, 3) + 1)
    assert type(out) is gg.Tensor and not out.requires_grad and out.grad_fn is None and out.is_leaf


def test_shape_and_dtype_are_part_of_the_key(on):
    _repeat(lambda: gg.ones(2, 3) * 2.0)
    x = gg.tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    out, n = _repeat(lambda: x * 2.0)
    np.testing.assert_array_equal(out.numpy(), np.arange(12, dtype=np.float32).reshape(3, 4) * 2)
    assert n == 1   # a new shape learns first (second call), runs its plan on the third
    i = gg.tensor(np.arange(12, dtype=np.int32).reshape(3, 4))
    out, n = _repeat(lambda: i * 2)
    assert out.dtype is gg.int32 and out.tolist() == (np.arange(12).reshape(3, 4) * 2).tolist()
    h = gg.tensor(np.arange(12, dtype=np.float16).reshape(3, 4))   # a storage dtype: arithmetic refuses it
    for _ in range(3):
        with pytest.raises(gg.DTypeError, match="scale"):
            h * 2.0


def test_scalar_value_sign_and_type_are_part_of_the_key(on):
    x = gg.tensor([1.0, -2.0, 3.0])
    _repeat(lambda: x * 2.0)
    out, n = _repeat(lambda: x * 3.0)                  # another value
    assert out.tolist() == [3.0, -6.0, 9.0]
    zero, _ = _repeat(lambda: x * 0.0)
    neg_zero, n = _repeat(lambda: x * -0.0)            # equal to 0.0, another sign
    assert np.signbit(zero.numpy()).tolist() == [False, True, False]
    assert np.signbit(neg_zero.numpy()).tolist() == [True, False, True]
    inf, _ = _repeat(lambda: x / 0.0)
    ninf, _ = _repeat(lambda: x / -0.0)
    assert inf.numpy().tolist() == [np.inf, -np.inf, np.inf] and ninf.numpy().tolist() == [-np.inf, np.inf, -np.inf]
    i = gg.tensor([1, 2, 3])
    as_int, _ = _repeat(lambda: i + 1)                 # int32 stays int32
    as_float, _ = _repeat(lambda: i + 1.0)             # 1.0 == 1, but promotes to float32
    as_bool, _ = _repeat(lambda: i + True)
    with plans(False):
        bool_ref = i + True
    assert as_int.dtype is gg.int32 and as_float.dtype is gg.float32 and as_bool.dtype is bool_ref.dtype
    assert as_int.tolist() == [2, 3, 4] and as_float.tolist() == [2.0, 3.0, 4.0] and as_bool.tolist() == [2, 3, 4]
    m, _ = _repeat(lambda: gg.maximum(i, 2))
    mf, _ = _repeat(lambda: gg.maximum(i, 2.0))
    assert m.dtype is gg.int32 and mf.dtype is gg.float32


def test_argument_identities_are_part_of_the_key(on):
    a = gg.tensor([1.0, 2.0])
    b = gg.tensor([10.0, 20.0])
    _, n = _repeat(lambda: a + a, 4)
    assert n == 2
    out, n = _repeat(lambda: a + b)   # same shapes and dtypes as a + a: its own plan, its own inputs
    assert out.tolist() == [11.0, 22.0]
    out, _ = _repeat(lambda: b + a)
    assert out.tolist() == [11.0, 22.0]
    out, _ = _repeat(lambda: b - a)
    assert out.tolist() == [9.0, 18.0]
    out, _ = _repeat(lambda: a - a)
    assert out.tolist() == [0.0, 0.0]
    out, _ = _repeat(lambda: b - a)
    assert out.tolist() == [9.0, 18.0]


def test_new_values_in_the_same_tensors_and_new_tensors_are_read(on):
    x = gg.tensor([1.0, 2.0])
    _repeat(lambda: x.exp())
    x.copy_(gg.tensor([0.0, 1.0]))   # in place: the plan reads the tensor's memory as it is now
    assert x.exp().tolist() == pytest.approx([1.0, np.e])
    for v in (3.0, -4.0):
        y, n = _repeat(lambda: gg.tensor([v, v]).exp(), 1)
        assert n == 1 and y.tolist() == pytest.approx([np.exp(v)] * 2)


def test_requires_grad_and_grad_mode(on):
    x = gg.tensor([1.0, 2.0])
    _repeat(lambda: x * x)
    w = gg.tensor([1.0, 2.0], requires_grad=True)
    out, n = _repeat(lambda: w * w)                   # on the tape: never a call plan
    assert n == 0 and out.requires_grad and out.grad_fn is not None
    out.sum().backward()
    assert w.grad.tolist() == [2.0, 4.0]
    with gg.no_grad():
        out, n = _repeat(lambda: w * w)   # (its op plan is x * x's: learned at once)
        assert n == 2 and not out.requires_grad and out.grad_fn is None
    out, n = _repeat(lambda: w * w)                   # grad mode back on: the tape again
    assert n == 0 and out.requires_grad and out.grad_fn is not None
    with gg.no_grad():
        _, n = _repeat(lambda: w * w)
        assert n == 3


def test_graph_check_and_capture_modes_do_not_use_plans(on):
    x = gg.tensor([1.0, 4.0])
    _repeat(lambda: x.sqrt())
    with gg.graph_mode(True):
        out, n = _repeat(lambda: x.sqrt())
        assert n == 0 and gg.pending(out)
        assert out.tolist() == [1.0, 2.0]
    with gg.graph_mode(True, check=True):
        gg.reset_counters()
        out, n = _repeat(lambda: x.sqrt())
        assert n == 0 and gg.counters()["drains_by_reason"] == {"check": 3}
    _, n = _repeat(lambda: x.sqrt())
    assert n == 3
    captured = gg.capture(lambda t: t.sqrt() * 2.0)
    h = hits()
    for v in ([1.0, 4.0], [9.0, 16.0]):
        assert captured(np.array(v, np.float32)).tolist() == [2.0 * np.sqrt(e) for e in v]
    assert hits() == h


def test_matmul_precision_is_part_of_the_state(on):
    rng = np.random.default_rng(0)
    a = gg.tensor(rng.standard_normal((8, 8)).astype(np.float32))
    _, n = _repeat(lambda: a @ a)
    assert n == 1
    old = gg.matmul_precision()
    gg.matmul_precision("f32" if old != "f32" else "default")
    try:
        _, n = _repeat(lambda: a @ a, 2)
        assert n == 0   # learned again under the other precision
        _, n = _repeat(lambda: a @ a)
        assert n == 3
    finally:
        gg.matmul_precision(old)
    _, n = _repeat(lambda: a @ a)
    assert n == 3


def test_a_queue_a_hold_or_a_pending_input_takes_the_ordinary_path(on):
    x = gg.tensor([1.0, 2.0])
    _repeat(lambda: x + 1.0)
    with gg.graph_mode(True):
        p = x * 3.0                                 # pending in the queue
    _, n = _repeat(lambda: x + 1.0, 1)              # (leaving graph mode computed it)
    assert n == 1
    ENGINE.hold()
    try:
        out, n = _repeat(lambda: x + 1.0, 1)        # held: queued, not computed
        assert n == 0 and gg.pending(out)
    finally:
        ENGINE.release()
    gg.reset_counters()
    out2, n = _repeat(lambda: x + 1.0, 1)           # eager with a queue: the ordinary drain computes both
    assert n == 0 and not gg.pending(out) and gg.counters()["computes"] == 1
    assert out.tolist() == [2.0, 3.0] and out2.tolist() == [2.0, 3.0]
    _, n = _repeat(lambda: x + 1.0, 1)
    assert n == 1


def test_a_strided_view_input_takes_the_ordinary_path(on):
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    a = gg.tensor(base)
    b = gg.tensor(base.T.copy())
    _repeat(lambda: b + 1.0)                        # the (4, 3) call's plan
    shared = a.numpy()                              # a's memory is shared with NumPy from now on
    v = a.T                                         # so this view reads it where it lies, strided
    assert type(v._storage).__name__ == "StridedAlias"
    out, n = _repeat(lambda: v + 1.0)
    assert n == 0
    np.testing.assert_array_equal(out.numpy(), base.T + 1)
    shared[0, 1] = 100.0                            # seen through the view
    out, n = _repeat(lambda: v + 1.0, 1)
    assert n == 0 and out.numpy()[1, 0] == 101.0
    _, n = _repeat(lambda: b + 1.0)
    assert n == 3


def test_a_changed_op_plan_cache_is_learned_again(on):
    x = gg.tensor([1.0, 2.0])
    _repeat(lambda: x - 0.5)
    TRACE.clear(OP)                   # frees the plan the call plan ran: it must not run it again
    out, n = _repeat(lambda: x - 0.5, 2)   # (the op plan is made again on its second use)
    assert n == 0 and out.tolist() == [0.5, 1.5]
    _, n = _repeat(lambda: x - 0.5)
    assert n == 3


def test_kill_switch():
    x = gg.tensor([1.0, 2.0])
    with gg.graph_mode(False):
        with plans(False):
            out, n = _repeat(lambda: x * 5.0, 5)
            assert n == 0 and out.tolist() == [5.0, 10.0] and not call_plans.enabled()
        with plans(True):
            out, n = _repeat(lambda: x * 5.0, 5)
            assert n >= 3 and out.tolist() == [5.0, 10.0]


def test_the_environment_switch_turns_them_off():
    import subprocess
    import sys
    code = ("import ggmlgrad as gg\nx = gg.tensor([1.0, 2.0])\nfor _ in range(5):\n    y = x * 2.0\n"
            "print(gg.counters()['call_plan_hits'], y.tolist())")
    for env, expect in (("0", "0 [2.0, 4.0]"), ("1", "3 [2.0, 4.0]")):
        import os
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                             env={**os.environ, "GGMLGRAD_CALL_PLANS": env, "GGMLGRAD_GRAPH": "0"})
        assert out.stdout.strip() == expect, out.stderr


# ---------------------------------------------------------------------- 3. errors
def test_bad_input_raises_the_same_error_every_time(on):
    a, b = gg.ones(2, 3), gg.ones(4, 5)
    msgs = set()
    for _ in range(4):
        with pytest.raises(ValueError) as e:
            a @ b
        msgs.add(str(e.value))
    assert len(msgs) == 1 and "matmul" in msgs.pop()
    good = gg.ones(3, 2)
    _repeat(lambda: a @ good)
    for _ in range(3):
        with pytest.raises(ValueError, match="matmul"):
            a @ b
    with pytest.raises(ValueError, match="clamp"):
        gg.clamp(a)
    for _ in range(3):
        with pytest.raises(ValueError, match="clamp"):
            gg.clamp(a)
    x = gg.tensor([[1.0, 2.0]])
    _repeat(lambda: x.sum(dim=1))
    for _ in range(3):
        with pytest.raises(TypeError, match="axis or dim"):
            x.sum(axis=0, dim=1)


def test_softmax_without_dim_warns_on_every_call(on):
    x = gg.tensor([[1.0, 2.0]])
    _repeat(lambda: x.softmax(dim=-1))
    for _ in range(4):
        with pytest.warns(UserWarning, match="without dim"):
            out = x.softmax()
    assert out.numpy().sum() == pytest.approx(1.0)


def test_a_failed_compute_on_a_hit_fails_like_the_drain(on, monkeypatch):
    x = gg.tensor([1.0, 2.0])
    _repeat(lambda: x * 7.0)
    h = hits()
    faults.fail_next("compute")      # an armed fault: the ordinary path (where it fires)
    try:
        with pytest.raises(gg.GraphError, match="scale"):
            x * 7.0
    finally:
        faults.clear()
    assert hits() == h
    _, n = _repeat(lambda: x * 7.0, 1)
    assert n == 1
    # ggml reports a failure status on the plan's own compute: the hit's failure route
    monkeypatch.setattr(executor_mod, "_graph_compute", lambda sched, graph: 1)
    failed = gg.counters()["failed_drains"]
    with pytest.raises(gg.GraphError, match=r"scale x1 failed.*status 1") as e:
        x * 7.0
    assert "test_call_plans.py" in str(e.value)   # the call's own line is the site, as for the drain
    assert gg.counters()["failed_drains"] == failed + 1 and hits() == h + 2
    monkeypatch.undo()
    out, _ = _repeat(lambda: x * 7.0, 1)
    assert out.tolist() == [7.0, 14.0]    # the session stays usable


def test_every_hit_computes_through_the_drains_run(on, monkeypatch):
    x = gg.tensor([1.0, 2.0])
    _repeat(lambda: x + 1.0)
    callers = []
    real = ENGINE.current.drainer.run

    def spy(*a, **k):
        callers.append(a[0])
        return real(*a, **k)
    monkeypatch.setattr(ENGINE.current.drainer, "run", spy)
    _, n = _repeat(lambda: x + 1.0)
    assert n == 3 and len(callers) == 3


# ---------------------------------------------------------------------- what learning refuses
@pytest.fixture
def declare():
    """Declare probe front ends with call plans (withdrawn afterwards); returns their gg.* functions."""
    from ggmlgrad.ops.decl import PUBLIC, public
    from ggmlgrad.tensor import surfaces
    before = len(PUBLIC)
    made = []

    def make(fn):
        public(function=fn.__name__, call_plan=True)(fn)
        ns = {}
        surfaces.install_functions(ns, "function")
        made.append(fn.__name__)
        return ns[fn.__name__]
    yield make
    del PUBLIC[before:]
    for name in made:
        surfaces.INSTALLED.pop(("function", name), None)


def test_learning_refuses_calls_that_did_more_than_one_op(on, declare):
    def probe_item_scale(input, other):
        return input * other.item()          # a host read decides the op's parameter
    def probe_two_ops(input):
        return (input * 2.0) + 1.0
    def probe_made_input(input):
        return input.detach() * 2.0          # the op's input is not the argument
    def probe_view_result(input):
        return (input * 2.0).reshape(-1)     # the result is not the op's own
    def probe_in_place(input):
        input.add_(1.0)                      # writes its argument
        return input * 2.0
    def planned(name: str) -> tuple:
        return call_plans.stats()[name]   # (plans, signatures marked as not planned)
    item_scale = declare(probe_item_scale)
    x = gg.tensor([1.0, 2.0])
    for v in (2.0, 3.0, 4.0, 5.0):
        assert item_scale(x, gg.tensor(v)).tolist() == [v, 2 * v]
    assert planned("probe_item_scale") == (0, 1)
    for fn, expect in ((probe_two_ops, [3.0, 5.0]), (probe_made_input, [2.0, 4.0]), (probe_view_result, [2.0, 4.0])):
        probe = declare(fn)
        for _ in range(4):
            assert probe(x).tolist() == expect, fn.__name__
        assert planned(fn.__name__) == (0, 1), fn.__name__
    in_place = declare(probe_in_place)
    y = gg.tensor([0.0, 0.0])
    for k in range(1, 5):
        assert in_place(y).tolist() == [2.0 * k] * 2 and y.tolist() == [k] * 2
    assert planned("probe_in_place") == (0, 1)


def test_a_call_that_did_one_op_on_its_arguments_is_learned(on, declare):
    def probe_one_op(input, other, scale=1.0):
        return gg.add(input, other) if scale == 1.0 else input * scale
    planned = declare(probe_one_op)
    TRACE.clear()   # (so the op plans are made on the calls below: second use)
    a, b = gg.tensor([1.0, 2.0]), gg.tensor([3.0, 4.0])
    out, n = _repeat(lambda: planned(a, b))
    assert n == 1 and out.tolist() == [4.0, 6.0]
    out, n = _repeat(lambda: planned(b, a))              # the same signature: its arguments by position
    assert n == 3 and out.tolist() == [4.0, 6.0]
    out, n = _repeat(lambda: planned(a, b, scale=3.0))   # another value of a plain argument: its own plan
    assert n == 1 and out.tolist() == [3.0, 6.0]
    out, n = _repeat(lambda: planned(b, a, 3.0))         # the same value positionally is the same key
    assert n == 3 and out.tolist() == [9.0, 12.0]
    assert call_plans.stats()["probe_one_op"] == (2, 0)


def test_nan_scalars_are_never_looked_up(on):
    x = gg.tensor([1.0, 2.0])
    for _ in range(5):
        out = x * float("nan")
    assert np.isnan(out.numpy()).all()
    assert call_plans.stats()["mul"][1] >= 1   # its signature is marked: the ordinary path, no learning


def test_planned_entry_points_keep_their_signatures_docs_and_names():
    import inspect
    import pickle
    import ggmlgrad.nn.functional as F
    from ggmlgrad.tensor.tensor import add
    assert gg.Tensor.__add__ is gg.add and gg.add.__wrapped__ is add and gg.add.__doc__ == add.__doc__
    assert str(inspect.signature(gg.add)) == "(input, other)"
    assert str(inspect.signature(gg.Tensor.clamp)) == str(inspect.signature(gg.Tensor.clamp.__wrapped__))
    assert str(inspect.signature(gg.Tensor.sum)) == "(self, axis=None, keepdim=False, dim=None, *, keepdims=None)"
    for fn in (gg.add, gg.Tensor.__neg__, gg.Tensor.lt, gg.lt, F.linear, gg.mm, gg.Tensor.sum, gg.relu):
        assert pickle.loads(pickle.dumps(fn)) is fn, fn


def test_threads_are_chosen_as_the_drain_chooses_them(on, monkeypatch):
    from ggmlgrad.engine import drain as drain_mod
    from ggmlgrad.runtime import threads as threads_mod
    monkeypatch.setattr(threads_mod, "MIN_WORK_FOR_THREADS", 50)   # a 100-element op counts as heavy

    def pick(total, node):
        o = threads_mod._override
        return o if o is not None else (1 if node < threads_mod.MIN_WORK_FOR_THREADS else 2)
    monkeypatch.setattr(threads_mod, "choose_threads", pick)
    monkeypatch.setattr(drain_mod, "choose_threads", pick)
    d = ENGINE.current.drainer
    real = d.run
    seen = []

    def spy(plan, counters, reason, threads, *a):
        seen.append(threads)
        return real(plan, counters, reason, threads, *a)
    monkeypatch.setattr(d, "run", spy)
    old = threads_mod._override
    try:
        for shape, expect in (((4, 4), 1), ((10, 10), 2)):
            for override in (None, 1):
                threads_mod.set_num_threads(override)
                x = gg.ones(*shape)
                seen.clear()
                _, n = _repeat(lambda: x + 1.0, 5)
                assert n >= 3 and seen == [override or expect] * 5, (shape, override, seen)
    finally:
        threads_mod.set_num_threads(old)


def test_the_modules_examples():
    import doctest
    from ggmlgrad.engine import call_plans as engine_call_plans
    for module in (call_plans, engine_call_plans):
        result = doctest.testmod(module)
        assert result.failed == 0
    assert doctest.testmod(call_plans).attempted >= 5


def test_threads_share_call_plans_and_each_computes_its_own(on):
    import threading
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal((6, 5)).astype(np.float32) for _ in range(4)]
    errors = []

    def work(k: int) -> None:
        try:
            with gg.graph_mode(False):
                x, y = gg.tensor(arrays[k]), gg.tensor(arrays[(k + 1) % 4])
                for _ in range(200):
                    z = x * y + 0.5
                    np.testing.assert_array_equal(z.numpy(), arrays[k] * arrays[(k + 1) % 4] + np.float32(0.5))
        except BaseException as e:   # pragma: no cover - reported below
            errors.append(e)
    h = hits()
    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    # 4 threads x 200 x 2 calls: alone ~1,580 are hits; in CI's full fast-build run 839 were (the threads'
    # learnings and stale checks race on a loaded machine), so this asserts plans serve every thread
    assert hits() - h > 400


def test_a_signature_that_failed_to_learn_tries_again_later(on, monkeypatch):
    x = gg.tensor([1.0, 2.0, 3.0])
    monkeypatch.setattr(TRACE, "want", lambda key: False)   # a cache that makes no plans (thrashing)
    for _ in range(call_plans.ATTEMPTS):
        out, n = _repeat(lambda: x * 9.0, 1)
        assert n == 0 and out.tolist() == [9.0, 18.0, 27.0]
    (entry,) = [e for e in gg.Tensor.__mul__.__globals__["_E"].entries.values()]
    assert type(entry) is call_plans.Retry and entry.wait == call_plans.RETRY_FIRST
    learned = []
    real_begin = gg.Tensor.__mul__.__globals__["_begin"]
    monkeypatch.setitem(gg.Tensor.__mul__.__globals__, "_begin", lambda args: learned.append(1) or real_begin(args))
    _, n = _repeat(lambda: x * 9.0, call_plans.RETRY_FIRST - 1)
    assert n == 0 and learned == []                   # waiting: the ordinary path, no learning
    _repeat(lambda: x * 9.0, 1)
    assert learned == [1]                             # one try, failed again: twice the wait
    (entry,) = [e for e in gg.Tensor.__mul__.__globals__["_E"].entries.values()]
    assert entry.wait == 2 * call_plans.RETRY_FIRST
    monkeypatch.undo()                                # plans are made again
    out, n = _repeat(lambda: x * 9.0, 2 * call_plans.RETRY_FIRST + 3)
    assert n >= 1 and out.tolist() == [9.0, 18.0, 27.0]


def test_a_hits_result_has_the_fields_of_the_ordinary_result(on):
    fields = ("shape", "dtype", "device", "numel_", "_node", "_epoch", "_status", "_leaf", "_leaf_epoch", "_error",
              "requires_grad", "grad", "grad_fn", "_retains_grad")
    x = gg.tensor([[1.0, -2.0], [3.0, 4.0]])
    with plans(False):
        ordinary = [x.relu() for _ in range(3)][-1]   # (the last one computed by its op plan)
    h = hits()
    planned = [x.relu() for _ in range(3)][-1]
    assert hits() > h
    for f in fields:
        assert getattr(planned, f) == getattr(ordinary, f), f
    assert planned._vcell == ordinary._vcell == [0] and planned._vcell is not ordinary._vcell
    assert type(planned._storage) is type(ordinary._storage) and planned._storage.nbytes == ordinary._storage.nbytes
    assert vars(planned) == vars(ordinary) == {}
    np.testing.assert_array_equal(planned.numpy(), ordinary.numpy())
