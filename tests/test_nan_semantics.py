"""NaN and ±inf as PyTorch computes them, and exact int32 reductions, in every mode.

Values of every op at NaN/±inf/±0 are in the OpInfo table (opinfo_nonfinite.py, run by
tests/test_ops.py in eager, graph, check mode and a capture). Here: gradients at NaN and ±inf
against NumPy-written torch rules, the rules themselves against torch where it is installed,
the cost-free details (relu(-x) is +0, 1/relu(-x) is +inf), and int32 reductions beyond 2**24.
"""
from __future__ import annotations


import numpy as np
import pytest

import ggmlgrad as gg

NAN, INF = np.nan, np.inf
MODES = ["eager", "graph", "check"]


def _mode(mode):
    if mode == "eager":
        return gg.graph_mode(False)
    return gg.graph_mode(True, check=mode == "check")


def _grad(fn, *arrays, weight=None):
    """(value, [grads]) of fn on float32 tensors with a seed gradient ``weight`` (default ones)."""
    xs = [gg.tensor(np.asarray(a, np.float32), requires_grad=True) for a in arrays]
    out = fn(*xs)
    w = np.ones(out.shape, np.float32) if weight is None else np.asarray(weight, np.float32)
    (out * gg.tensor(w)).sum().backward()
    return out.detach().numpy().astype(np.float64), [x.grad.detach().numpy().astype(np.float64) for x in xs]


def _same(got, expected):
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7, equal_nan=True)
    assert np.array_equal(np.isnan(got), np.isnan(np.asarray(expected, np.float64)))


V = np.array([NAN, INF, -INF, 0.0, 1.0, -1.0])
G = np.arange(1.0, 7.0)                 # seed gradient: each position distinguishable

# (name, fn, input, expected value, expected gradient): torch 2.13's results, written out.
# relu/leaky_relu/elu pass g at NaN (torch's "result <= 0 ? 0 : g" is false for NaN);
# clamp gives 0 at NaN (NaN is not inside [lo, hi]); abs uses sign(NaN) = 0.
GRAD_RULES = [
    ("relu", gg.relu, V, [NAN, INF, 0, 0, 1, 0], [1, 2, 0, 0, 5, 0]),
    ("leaky_relu", lambda x: gg.leaky_relu(x, 0.01), V, [NAN, INF, -INF, 0, 1, -0.01],
     [0.01, 2, 0.03, 0.04, 5, 0.06]),
    ("elu", gg.elu, V, [NAN, INF, -1, 0, 1, np.expm1(-1.0)], [1, 2, 0, 4, 5, 6 * np.exp(-1.0)]),
    ("elu_alpha", lambda x: gg.elu(x, 0.3), V, [NAN, INF, -0.3, 0, 1, 0.3 * np.expm1(-1.0)],
     [1, 2, 0, 4 * 0.3, 5, 6 * 0.3 * np.exp(-1.0)]),
    ("clamp", lambda x: x.clamp(-0.5, 0.5), V, [NAN, 0.5, -0.5, 0, 0.5, -0.5], [0, 0, 0, 4, 0, 0]),
    ("clamp_min", lambda x: x.clamp(min=0.0), V, [NAN, INF, 0, 0, 1, 0], [0, 2, 0, 4, 5, 0]),
    ("clamp_inverted", lambda x: x.clamp(1.0, -1.0), V, [NAN, -1, -1, -1, -1, -1], [0] * 6),
    ("abs", abs, V, [NAN, INF, INF, 0, 1, 1], [0, 2, -3, 0, 5, -6]),
    ("sqrt", lambda x: x.sqrt(), V, [NAN, INF, NAN, 0, 1, NAN], [NAN, 0, NAN, INF, 2.5, NAN]),
    ("log", lambda x: x.log(), V, [NAN, INF, NAN, -INF, 0, NAN], [NAN, 0, -0.0, INF, 5, -6]),
    ("tanh", gg.tanh, V, [NAN, 1, -1, 0, np.tanh(1), -np.tanh(1)],
     [NAN, 0, 0, 4, 5 / np.cosh(1) ** 2, 6 / np.cosh(1) ** 2]),
    ("softplus", gg.softplus, V, [NAN, INF, 0, np.log(2), np.log1p(np.e), np.log1p(np.exp(-1))],
     [NAN, 2, 0, 2, 5 / (1 + np.exp(-1)), 6 / (1 + np.e)]),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name,fn,x,value,grad", GRAD_RULES, ids=[r[0] for r in GRAD_RULES])
def test_gradient_at_nan_and_inf(name, fn, x, value, grad, mode):
    with _mode(mode):
        got, (g,) = _grad(fn, x, weight=G)
    _same(got, value)
    _same(g, grad)


# Pairs: a NaN on either side, both NaN, a tie, ±inf ties, a strict winner.
A = np.array([NAN, 1.0, NAN, 2.0, INF, INF, 3.0])
B = np.array([1.0, NAN, NAN, 2.0, INF, 1.0, -INF])


@pytest.mark.parametrize("mode", MODES)
def test_maximum_minimum_gradient_rules(mode):
    """torch: the larger side takes g, a tie splits it 0.5/0.5 (inf == inf too), a NaN gives g to both."""
    with _mode(mode):
        vmax, (ga, gb) = _grad(gg.maximum, A, B, weight=G[:1].repeat(7))
        vmin, (ha, hb) = _grad(gg.minimum, A, B)
    _same(vmax, [NAN, NAN, NAN, 2, INF, INF, 3])
    _same(ga, [1, 1, 1, 0.5, 0.5, 1, 1])
    _same(gb, [1, 1, 1, 0.5, 0.5, 0, 0])
    _same(vmin, [NAN, NAN, NAN, 2, INF, 1, -INF])
    _same(ha, [1, 1, 1, 0.5, 0.5, 0, 0])
    _same(hb, [1, 1, 1, 0.5, 0.5, 1, 1])


ROWS = np.array([[1.0, NAN, 3.0, NAN], [1.0, INF, 3.0, INF], [-INF, -INF, -INF, -INF], [1.0, 2.0, 3.0, -INF]])


@pytest.mark.parametrize("mode", MODES)
def test_reduction_gradients_with_nan(mode):
    """amax: a NaN maximum matches nothing (NaN gradients); max(): the NaNs share it (torch's
    evenly_distribute_backward); max(dim): all to the first NaN; logsumexp: NaN with a NaN."""
    with _mode(mode):
        rows = [_grad(lambda x: x.amax(), r)[1][0] for r in ROWS]
        alls = [_grad(lambda x: x.max(), r)[1][0] for r in ROWS]
        v, (gd,) = _grad(lambda x: x.max(1).values, ROWS)
        i = gg.tensor(ROWS.astype(np.float32)).max(1).indices.numpy()
        lv, (gl,) = _grad(lambda x: x.logsumexp(1), ROWS)
    _same(rows[0], [NAN] * 4)
    _same(rows[1], [0, 0.5, 0, 0.5])
    _same(rows[2], [0.25] * 4)
    _same(rows[3], [0, 0, 1, 0])
    _same(alls[0], [0, 0.5, 0, 0.5])
    for got, want in zip(alls[1:], rows[1:]):
        _same(got, want)
    _same(v, [NAN, INF, -INF, 3])
    assert i.tolist() == [1, 1, 0, 2]
    _same(gd, [[0, 1, 0, 0], [0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 1, 0]])
    _same(lv, [NAN, INF, -INF, np.log(np.exp([1.0, 2, 3]).sum())])
    _same(gl[0], [NAN] * 4)
    _same(gl[1], [0, NAN, 0, NAN])
    _same(gl[2], [NAN] * 4)


@pytest.mark.parametrize("mode", MODES)
def test_relu_zero_is_positive_zero(mode):
    """relu(-2) is +0 as in torch, so 1 / relu(x) is +inf there (a -0 would give -inf)."""
    with _mode(mode):
        x = gg.tensor([-2.0, -0.0, -np.inf, 4.0])
        y = gg.relu(x)
        inv = (1.0 / y).numpy()
    assert not np.signbit(y.numpy()[:3]).any()
    assert inv.tolist() == [INF, INF, INF, 0.25]


@pytest.mark.parametrize("mode", MODES)
def test_nan_comparisons(mode):
    """Every comparison with NaN is False except != (True); inf == inf; where(nan != nan, ...) keeps NaN."""
    with _mode(mode):
        x = gg.tensor([NAN, INF, 1.0, NAN])
        y = gg.tensor([NAN, INF, NAN, 2.0])
        got = {k: getattr(x, k)(y).numpy().tolist() for k in ("lt", "le", "gt", "ge", "eq", "ne")}
        scalar = {k: getattr(x, k)(float("nan")).numpy().tolist() for k in ("le", "eq", "ne")}
        kept = gg.where(x != x, x, 0.0).numpy()
    assert got == {"lt": [0, 0, 0, 0], "le": [0, 1, 0, 0], "gt": [0, 0, 0, 0], "ge": [0, 1, 0, 0],
                   "eq": [0, 1, 0, 0], "ne": [1, 0, 1, 1]}
    assert scalar == {"le": [0] * 4, "eq": [0] * 4, "ne": [1] * 4}
    assert np.isnan(kept[[0, 3]]).all() and kept[[1, 2]].tolist() == [0, 0]


def test_nan_in_a_training_step_is_not_hidden():
    """A NaN weight in the first layer of a ReLU MLP reaches the loss (relu used to turn it into 0)."""
    gg.manual_seed(0)
    model = gg.nn.Sequential(gg.nn.Linear(3, 4), gg.nn.ReLU(), gg.nn.Linear(4, 2))
    with gg.no_grad():
        w = model[0].weight.detach().numpy().copy()
        w[0, 0] = NAN
        model[0].weight.copy_(gg.tensor(w))
    loss = model(gg.ones(2, 3)).sum()
    assert np.isnan(loss.item())


# ---------------------------------------------------------------- int32 reductions
BIG = np.array([[2 ** 24 + 1, 2 ** 24, -(2 ** 26) - 3], [7, 2 ** 24 + 1, -(2 ** 26) - 1]], np.int32)


@pytest.mark.parametrize("mode", MODES)
def test_int_reductions_are_exact(mode):
    """Values above 2**24 (float32 would round them to their neighbours): exact, int32 results."""
    with _mode(mode):
        x = gg.tensor(BIG)
        res = {"sum": x.sum(), "sum0": x.sum(0), "sum1k": x.sum(1, keepdim=True), "max": x.max(),
               "min": gg.min(x), "amax0": x.amax(0), "amin1": x.amin(dim=1), "argmax": x.argmax(),
               "argmin1": x.argmin(1), "argmax0k": x.argmax(0, keepdim=True)}
        mv, mi = x.max(1)
        nv, ni = gg.min(x, dim=0, keepdim=True)
    a = BIG.astype(np.int64)
    want = {"sum": a.sum(), "sum0": a.sum(0), "sum1k": a.sum(1, keepdims=True), "max": a.max(), "min": a.min(),
            "amax0": a.max(0), "amin1": a.min(1), "argmax": a.argmax(), "argmin1": a.argmin(1),
            "argmax0k": a.argmax(0, keepdims=True)}
    for k, t in res.items():
        assert t.dtype is gg.int32, k
        np.testing.assert_array_equal(t.numpy(), want[k], err_msg=k)
    np.testing.assert_array_equal(mv.numpy(), a.max(1))
    np.testing.assert_array_equal(mi.numpy(), a.argmax(1))
    np.testing.assert_array_equal(nv.numpy(), a.min(0, keepdims=True))
    np.testing.assert_array_equal(ni.numpy(), a.argmin(0, keepdims=True))


def test_int_argmax_takes_the_first_of_ties():
    x = gg.tensor(np.array([[3, 9, 9, 1], [2 ** 30, 2 ** 30 + 1, 2 ** 30 + 1, 5]], np.int32))
    assert x.argmax(1).tolist() == [1, 1]
    assert x.argmin(1).tolist() == [3, 3]


def test_int_sum_outside_int32_raises_and_mean_raises_like_torch():
    with pytest.raises(ValueError, match="sum.*int32 range"):
        gg.tensor(np.array([2 ** 31 - 1, 1], np.int32)).sum()
    with pytest.raises(TypeError, match=r"mean\(\): could not infer output dtype"):
        gg.tensor([1, 2, 3]).mean()
    assert gg.tensor(np.zeros((0, 3), np.int32)).sum(0).tolist() == [0, 0, 0]


def test_int_reduction_in_graph_mode_drains_once():
    """On the host: the queue the int tensor depends on drains (one compute), then NumPy reduces."""
    with gg.graph_mode(True):
        x = gg.tensor(np.arange(12, dtype=np.int32).reshape(3, 4))
        y = gg.tensor(np.ones((3, 4), np.float32)) * 2       # pending, unrelated work
        gg.reset_counters()
        s = x.sum(1)
        assert gg.counters()["computes"] <= 1
        assert s.tolist() == [6, 22, 38]
        assert y.numpy().sum() == 24


def test_int_reduction_inside_a_capture_is_refused():
    """A host read while recording would freeze the value into every replay: a clear CaptureError."""
    f = gg.capture(lambda x: x.sum())
    with pytest.raises(gg.CaptureError, match="capture"):
        f(np.arange(4, dtype=np.int32))


# ---------------------------------------------------------------- the rules against torch itself
def _torch_cases(torch):
    F = torch.nn.functional
    return [
        ("relu", gg.relu, torch.relu), ("leaky_relu", gg.leaky_relu, F.leaky_relu),
        ("elu_alpha", lambda x: x.elu(alpha=0.3), lambda x: F.elu(x, 0.3)),
        ("clamp", lambda x: x.clamp(-0.5, 0.7), lambda x: x.clamp(-0.5, 0.7)),
        ("clamp_inverted", lambda x: x.clamp(1.0, -1.0), lambda x: x.clamp(1.0, -1.0)),
        ("sign", gg.sign, torch.sign), ("abs", abs, torch.abs), ("sqrt", lambda x: x.sqrt(), torch.sqrt),
        ("log", lambda x: x.log(), torch.log), ("softplus", gg.softplus, F.softplus),
        ("silu", lambda x: x.silu(), F.silu), ("sigmoid", gg.sigmoid, torch.sigmoid),
        ("pow_frac", lambda x: x ** 1.7, lambda x: x ** 1.7), ("pow_neg_half", lambda x: x ** -0.5, lambda x: x ** -0.5),
        ("pow_3", lambda x: x ** 3, lambda x: x ** 3), ("pow_big", lambda x: x ** 67, lambda x: x ** 67),
        ("amax", lambda x: x.amax(1), lambda x: x.amax(1)), ("amin", lambda x: x.amin(0), lambda x: x.amin(0)),
        ("argmax", lambda x: x.argmax(1).float(), lambda x: x.argmax(1).float()),
        ("argmin", lambda x: x.argmin(0).float(), lambda x: x.argmin(0).float()),
        ("logsumexp", lambda x: x.logsumexp(1), lambda x: x.logsumexp(1)),
        ("softmax", lambda x: x.softmax(1), lambda x: x.softmax(1)),
        ("log_softmax", lambda x: x.log_softmax(1), lambda x: x.log_softmax(1)),
        ("ne_self", lambda x: x != x, lambda x: (x != x).float()),
        ("ge_scalar", lambda x: x >= 0.5, lambda x: (x >= 0.5).float()),
    ]


def test_nonfinite_values_match_torch():
    torch = pytest.importorskip("torch")
    x = np.array([[NAN, INF, -INF, 0.0], [-0.0, 1.5, -2.0, 0.5], [-INF, -INF, -INF, -INF], [INF, 1.0, NAN, -1.0]],
                 np.float32)
    for name, ours, theirs in _torch_cases(torch):
        got = np.asarray(ours(gg.tensor(x)).numpy(), np.float64)
        want = theirs(torch.tensor(x)).numpy().astype(np.float64)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7, equal_nan=True, err_msg=name)


def test_pow_pairs_match_torch():
    torch = pytest.importorskip("torch")
    s = np.array([NAN, INF, -INF, 0.0, -0.0, 1.0, -1.0, 1.5, -2.0, 0.5, 3.0, -3.0, 1.7], np.float32)
    a, b = np.repeat(s, s.size), np.tile(s, s.size)
    got = (gg.tensor(a) ** gg.tensor(b)).numpy()
    want = (torch.tensor(a) ** torch.tensor(b)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6, equal_nan=True)
    assert np.array_equal(np.signbit(got[~np.isnan(got)]), np.signbit(want[~np.isnan(want)]))


def test_gradient_rules_match_torch():
    torch = pytest.importorskip("torch")
    torch_fns = {"relu": torch.relu, "leaky_relu": torch.nn.functional.leaky_relu, "elu": torch.nn.functional.elu,
                 "elu_alpha": lambda x: torch.nn.functional.elu(x, 0.3),
                 "clamp": lambda x: x.clamp(-0.5, 0.5), "clamp_min": lambda x: x.clamp(min=0.0),
                 "clamp_inverted": lambda x: x.clamp(1.0, -1.0), "abs": torch.abs, "sqrt": torch.sqrt,
                 "log": torch.log, "tanh": torch.tanh, "softplus": torch.nn.functional.softplus}
    for name, _, x, value, grad in GRAD_RULES:
        t = torch.tensor(x, dtype=torch.float32, requires_grad=True)
        y = torch_fns[name](t)
        y.backward(torch.tensor(G, dtype=torch.float32))
        _same(y.detach().numpy().astype(np.float64), value)
        _same(t.grad.numpy().astype(np.float64), grad)
    a = torch.tensor(A, dtype=torch.float32, requires_grad=True)
    b = torch.tensor(B, dtype=torch.float32, requires_grad=True)
    torch.maximum(a, b).sum().backward()
    _same(a.grad.numpy(), [1, 1, 1, 0.5, 0.5, 1, 1])
    _same(b.grad.numpy(), [1, 1, 1, 0.5, 0.5, 0, 0])
    r = torch.tensor(ROWS[0], dtype=torch.float32, requires_grad=True)
    r.max().backward()
    _same(r.grad.numpy(), [0, 0.5, 0, 0.5])
    r.grad = None
    r.amax().backward()
    _same(r.grad.numpy(), [NAN] * 4)


def test_int_reduction_dtypes_follow_torch():
    torch = pytest.importorskip("torch")
    t = torch.tensor(BIG)
    assert not t.sum().dtype.is_floating_point and t.max().dtype == torch.int32
    assert int(t.sum()) == gg.tensor(BIG).sum().item()
    with pytest.raises(RuntimeError, match="could not infer output dtype"):
        t.mean()


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
def test_where_takes_a_nan_condition_as_true(graph):
    """bool(nan) is True (torch's .bool()), so where(nan, a, b) is a; found by the op-program fuzzer."""
    c = np.array([np.nan, 0.0, -0.0, 2.0, -np.inf], np.float32)
    with gg.graph_mode(graph):
        got = gg.where(gg.tensor(c), gg.tensor(np.ones(5, np.float32)), gg.tensor(np.zeros(5, np.float32)))
        np.testing.assert_array_equal(got.numpy(), [1.0, 0.0, 0.0, 1.0, 1.0])
    torch = pytest.importorskip("torch")
    tc = torch.tensor(c).bool()
    np.testing.assert_array_equal(torch.where(tc, 1.0, 0.0).numpy(), [1.0, 0.0, 0.0, 1.0, 1.0])


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
def test_division_by_a_subnormal_scalar_is_not_inf(graph):
    """x / c scaled by 1/c, which overflows float32 for a subnormal c (found by the fuzzer)."""
    x = np.array([2.5e-40, 1e-39, -3e-39, 0.0], np.float32)
    with gg.graph_mode(graph):
        got = (gg.tensor(x) / 1e-40).numpy()
    np.testing.assert_allclose(got, x.astype(np.float64) / np.float32(1e-40).astype(np.float64), rtol=1e-5)
