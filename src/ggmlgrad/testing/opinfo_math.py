"""OpInfo entries for comparisons, clamp/maximum/minimum/where, max/min/arg-reductions, var/std,
logsumexp, and the activation family (leaky_relu, gelu, silu, softplus, elu, softmax, log_softmax).

Gradient samples keep away from kinks and ties (finite differences are meaningless there);
ties and infinities are checked in tests/test_math_ops.py.
"""
from __future__ import annotations

import math

import numpy as np

import ggmlgrad as gg
from .opinfo import OpInfo, Sample, bad, errors, rand_shapes_binary, register


# ---------------------------------------------------------------- sample makers
def _distinct(rng, shape, gap=0.05):
    """Random values whose pairwise gaps exceed ``gap`` (no ties, so max/argmax are smooth)."""
    n = int(np.prod(shape)) if shape else 1
    vals = (np.arange(n) * gap * 3 + rng.uniform(0, gap, n)) - n * gap * 1.5
    return rng.permutation(vals).reshape(shape)


def _away(rng, shape, points=(0.0,), gap=0.1):
    x = rng.standard_normal(shape) * 1.5
    for p in points:
        x = np.where(np.abs(x - p) < gap, p + np.sign(x - p + 1e-12) * (gap + 0.05), x)
    return x


def _pairs_distinct(rng):
    """Broadcasting shape pairs with |a - b| > 0.05 everywhere (smooth for maximum/minimum)."""
    out = []
    for sa, sb in rand_shapes_binary(rng):
        while True:
            a, b = rng.standard_normal(sa), rng.standard_normal(sb)
            if np.all(np.abs(np.subtract(a, b)) > 0.05):
                break
        out.append(Sample((a, b)))
    return out


def _cmp_samples(rng):
    out = []
    for sa, sb in rand_shapes_binary(rng):
        a = np.round(rng.standard_normal(sa) * 2) / 2      # half-integers: many exact ties
        b = np.round(rng.standard_normal(sb) * 2) / 2
        out.append(Sample((a, b)))
    ints = Sample((rng.integers(-3, 3, (3, 4)).astype(np.int32), rng.integers(-3, 3, (4,)).astype(np.int32)))
    mixed = Sample((rng.integers(-2, 2, (2, 3)).astype(np.int32), np.round(rng.standard_normal((2, 3)))))
    inf = Sample((np.array([np.inf, -np.inf, np.inf, 1.0, -np.inf]), np.array([np.inf, -np.inf, 1.0, np.inf, 0.0])))
    return out + [ints, mixed, inf]


def _cmp_scalar_samples(rng):
    x = np.round(rng.standard_normal((3, 4)) * 2) / 2
    return [Sample((x, 0.5)), Sample((x, -1)), Sample((np.array(0.5), 0.5)), Sample((rng.standard_normal((2, 1, 3)), 0.0)),
            Sample((np.array([np.inf, -np.inf, 2.0]), 2.0)), Sample((rng.integers(-2, 3, (5,)).astype(np.int32), 1))]


def _reduce_axes_samples(rng, shape=(3, 4, 5), axes=(None, 0, 1, -1, (0, 2), (-1, -2)), values=None):
    make = values or (lambda s: _distinct(rng, s))
    out = [Sample((make(shape), ax, kd)) for ax in axes for kd in (False, True)]
    out += [Sample((make(()), None, False)), Sample((make((1,)), 0, True)), Sample((make((2, 1, 3, 2)), (1, 3), False))]
    return out


def _act_samples(rng, kinks=(0.0,), scale=1.5):
    return [Sample((_away(rng, s, kinks) * scale / 1.5,)) for s in [(3, 4), (), (1,), (2, 3, 4), (2, 1, 3, 2)]]


# ---------------------------------------------------------------- NumPy references
def _np_softmax(x, axis):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _np_lse(x, axis=None, keepdim=False):
    m = np.max(x, axis=axis, keepdims=True)
    r = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return r if keepdim else (np.squeeze(r, axis=axis) if axis is not None else r.reshape(()))


def _np_erf(x):
    return np.vectorize(math.erf)(x) if np.ndim(x) else np.asarray(math.erf(float(x)))


def _np_gelu(x, approximate="none"):
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + _np_erf(x / np.sqrt(2)))


def _np_softplus(x, beta=1.0, threshold=20.0):
    z = beta * x
    return np.where(z > threshold, x, np.logaddexp(0.0, z) / beta)


def _np_elu(x, alpha=1.0):
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0)))


def _tuple_axes(ax):
    return tuple(ax) if isinstance(ax, list) else ax


_CMP = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "eq": np.equal,
        "ne": np.not_equal}
_OPS = {"lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
        "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b}

register(*[
    OpInfo(f"cmp_{k}", (k,), _OPS[k], (lambda f: lambda a, b: f(a, b).astype(np.float64))(_CMP[k]),
           _cmp_samples, grad=False, atol=0, rtol=0)
    for k in _CMP
], *[
    OpInfo(f"cmp_scalar_{k}", ("compare_scalar",), (lambda f: lambda a, c: f(a, c))(_OPS[k]),
           (lambda f: lambda a, c: f(a, c).astype(np.float64))(_CMP[k]), _cmp_scalar_samples, grad=False, atol=0, rtol=0)
    for k in _CMP
], *[
    OpInfo(f"cmp_fn_{k}", (k,), getattr(gg, k), (lambda f: lambda a, b: f(a, b).astype(np.float64))(_CMP[k]),
           lambda r: _cmp_samples(r)[:3], grad=False, atol=0, rtol=0)
    for k in _CMP
])

register(
    OpInfo("cmp_half_storage", ("lt", "compare_scalar", "where"),
           lambda a, b: (a.half() < b) + (a.to("bfloat16") >= 0.5) * 2 + gg.where(b.half(), a, -a) * 4,
           lambda a, b: (a.astype(np.float16) < b) + (a >= 0.5) * 2.0 + np.where(b.astype(np.float16) != 0, a, -a) * 4,
           lambda r: [Sample((np.round(r.standard_normal((3, 4)) * 2) / 2, np.round(r.standard_normal((4,)))))], grad=False),
    OpInfo("cmp_reflected_scalar", ("compare_scalar",), lambda a: (2.0 > a) + (0.5 <= a) * 2 + (1 == a) * 4,
           lambda a: (2.0 > a) + (0.5 <= a) * 2.0 + (1 == a) * 4.0,
           lambda r: [Sample((np.round(r.standard_normal((4, 5)) * 2) / 2,))], grad=False),
    # ---- clamp
    OpInfo("clamp_both", ("clamp", "clamp_backward"), lambda a: a.clamp(-0.5, 0.7), lambda a: np.clip(a, -0.5, 0.7),
           lambda r: _act_samples(r, kinks=(-0.5, 0.7))),
    OpInfo("clamp_min", ("clamp",), lambda a: gg.clamp(a, min=0.2), lambda a: np.maximum(a, 0.2),
           lambda r: _act_samples(r, kinks=(0.2,))),
    OpInfo("clamp_max", ("clamp",), lambda a: a.clip(max=-0.3), lambda a: np.minimum(a, -0.3),
           lambda r: _act_samples(r, kinks=(-0.3,))),
    OpInfo("clamp_inverted", ("clamp",), lambda a: a.clamp(1.0, -1.0), lambda a: np.full_like(a, -1.0),
           lambda r: _act_samples(r)),
    OpInfo("clamp_tensor_bounds", ("maximum", "minimum"), lambda a, lo, hi: gg.clamp(a, lo, hi),
           lambda a, lo, hi: np.minimum(np.maximum(a, lo), hi),
           lambda r: [Sample((_away(r, (3, 4), (-0.4, 0.6)), np.full((4,), -0.4), np.full((3, 1), 0.6)))]),
    # ---- maximum / minimum / where
    OpInfo("maximum", ("maximum", "minmax_backward"), gg.maximum, np.maximum, _pairs_distinct),
    OpInfo("minimum", ("minimum", "minmax_backward"), lambda a, b: a.minimum(b), np.minimum, _pairs_distinct),
    OpInfo("maximum_ties", ("maximum",), gg.maximum, np.maximum,
           lambda r: [Sample((np.array([1.0, 2.0, -3.0, 0.5]), np.array([1.0, 1.0, -3.0, 2.0])))], grad=False),
    OpInfo("maximum_scalar", ("clamp",), lambda a: gg.maximum(a, 0.25), lambda a: np.maximum(a, 0.25),
           lambda r: _act_samples(r, kinks=(0.25,))),
    OpInfo("where", ("where",), gg.where, lambda c, a, b: np.where(c != 0, a, b),
           lambda r: [Sample(((r.standard_normal(sc) > 0).astype(np.float64), r.standard_normal(sa), r.standard_normal(sb)),
                             nondiff=(0,))
                      for sc, sa, sb in [((3, 4), (3, 4), (3, 4)), ((3, 1), (1, 4), (4,)), ((), (2, 3), (2, 3)),
                                         ((2, 3, 4), (3, 4), ()), ((1,), (5,), (1,)), ((2, 1, 3, 1), (4, 1, 1), (3, 2))]]),
    OpInfo("where_int_cond", ("where",), lambda c, a, b: gg.where(c, a, b), lambda c, a, b: np.where(c != 0, a, b),
           lambda r: [Sample((r.integers(0, 3, (3, 4)).astype(np.int32), r.standard_normal((3, 4)), r.standard_normal((4,))))]),
    OpInfo("where_scalars", ("where_scalar",), lambda c, a: gg.where(c, a, -2.0) + gg.where(c, 3.0, a),
           lambda c, a: np.where(c != 0, a, -2.0) + np.where(c != 0, 3.0, a),
           lambda r: [Sample(((r.standard_normal((3, 4)) > 0).astype(np.float64), r.standard_normal((3, 4))), nondiff=(0,)),
                      Sample(((r.standard_normal((4,)) > 0).astype(np.float64), r.standard_normal((2, 4))), nondiff=(0,))]),
    OpInfo("where_method", ("where",), lambda a, c, b: a.where(c, b), lambda a, c, b: np.where(c != 0, a, b),
           lambda r: [Sample((r.standard_normal((2, 3)), (r.standard_normal((2, 3)) > 0).astype(np.float64),
                              r.standard_normal((3,))), nondiff=(1,))]),
    OpInfo("where_inf_unselected", ("where",), gg.where, lambda c, a, b: np.where(c != 0, a, b),
           lambda r: [Sample((np.array([1.0, 0.0, 1.0, 0.0, 1.0, 0.0]), np.array([1.0, np.inf, -np.inf, np.nan, np.nan, 3e38]),
                              np.array([np.inf, 2.0, np.nan, -np.inf, 0.0, -3e38])))], grad=False),
    OpInfo("where_scalar_nonfinite", ("where_scalar",),
           lambda c, a: gg.where(c, a, float("-inf")) + gg.where(c, 1.0, a) * 0 + gg.where(c, float("nan"), 2.0),
           lambda c, a: np.where(c != 0, a, -np.inf) + np.where(c != 0, 1.0, a) * 0 + np.where(c != 0, np.nan, 2.0),
           lambda r: [Sample((np.array([1.0, 0.0, 1.0, 0.0]), np.array([np.inf, -np.inf, -3.0, np.nan])))], grad=False),
    OpInfo("where_broadcast_nonfinite", ("where",), gg.where, lambda c, a, b: np.where(c != 0, a, b),
           lambda r: [Sample((np.array([[1.0], [0.0]]), np.array([np.inf, -1.0, np.nan]), np.array([[2.0], [-np.inf]])))],
           grad=False),
    # ---- max/min reductions
    OpInfo("amax", ("amax", "reduce_backward"), lambda a, ax, kd: a.amax(ax, kd), lambda a, ax, kd: np.max(a, axis=_tuple_axes(ax), keepdims=kd),
           _reduce_axes_samples),
    OpInfo("amin", ("amin",), lambda a, ax, kd: gg.amin(a, ax, kd), lambda a, ax, kd: np.min(a, axis=_tuple_axes(ax), keepdims=kd),
           _reduce_axes_samples),
    OpInfo("max_all", ("amax",), lambda a: a.max(), np.max, lambda r: [Sample((_distinct(r, s),)) for s in [(3, 4), (), (5,)]]),
    OpInfo("min_all", ("amin",), lambda a: gg.min(a), np.min, lambda r: [Sample((_distinct(r, s),)) for s in [(3, 4), (2, 2, 2)]]),
    OpInfo("max_dim_values", ("extreme_dim", "gather_backward"), lambda a, d, kd: a.max(d, kd).values, lambda a, d, kd: np.max(a, axis=d, keepdims=kd),
           lambda r: [Sample((_distinct(r, (3, 4, 2)), d, kd)) for d in (0, 1, -1) for kd in (False, True)]
           + [Sample((_distinct(r, ()), 0, False)), Sample((_distinct(r, (2, 3, 2, 2)), 2, True))]),
    OpInfo("max_dim_indices", ("argmax",), lambda a, d: a.max(dim=d).indices, lambda a, d: np.argmax(a, axis=d),
           lambda r: [Sample((_distinct(r, (3, 4)), d)) for d in (0, 1)], grad=False, atol=0, rtol=0),
    OpInfo("min_dim", ("extreme_dim", "gather_backward", "argmin"), lambda a, d: gg.min(a, dim=d)[0] + gg.min(a, dim=d)[1].float(),
           lambda a, d: np.min(a, axis=d) + np.argmin(a, axis=d),
           lambda r: [Sample((_distinct(r, (3, 4)), d)) for d in (0, -1)]),
    OpInfo("max_ties_forward", ("amax", "amin"), lambda a: a.amax(1) * 10 + a.amin(0).sum(),
           lambda a: np.max(a, 1) * 10 + np.min(a, 0).sum(),
           lambda r: [Sample((np.array([[1.0, 3.0, 3.0], [-np.inf, -np.inf, -np.inf], [2.0, 2.0, -1.0]]),))], grad=False),
    OpInfo("max_binary", ("maximum", "minimum"), lambda a, b: gg.max(a, b) - gg.min(a, b),
           lambda a, b: np.maximum(a, b) - np.minimum(a, b), lambda r: _pairs_distinct(r)[:3]),
    # ---- argmax / argmin (first occurrence on ties, like NumPy)
    OpInfo("argmax", ("argmax",), lambda a, ax, kd: a.argmax(ax, kd),
           lambda a, ax, kd: np.argmax(a, axis=ax, keepdims=kd) if ax is not None or not kd
           else np.argmax(a).reshape((1,) * a.ndim),
           lambda r: [Sample((np.round(r.standard_normal(s)), ax, kd)) for s, ax in
                      [((3, 4, 5), 0), ((3, 4, 5), 1), ((3, 4, 5), -1), ((3, 4), None), ((7,), 0), ((), None),
                       ((2, 3, 4, 5), 2), ((4, 1), 1)] for kd in (False, True)],
           grad=False, atol=0, rtol=0),
    OpInfo("argmin", ("argmin",), lambda a, ax: gg.argmin(a, dim=ax), lambda a, ax: np.argmin(a, axis=ax),
           lambda r: [Sample((np.round(r.standard_normal(s)), ax)) for s, ax in
                      [((3, 4, 5), 0), ((3, 4, 5), -1), ((3, 4), None), ((2, 3, 4, 5), 1)]],
           grad=False, atol=0, rtol=0),
    OpInfo("argmax_inf", ("argmax", "argmin"), lambda a: a.argmax(1).float() * 10 + a.argmin(1).float(),
           lambda a: np.argmax(a, 1) * 10 + np.argmin(a, 1),
           lambda r: [Sample((np.array([[-np.inf, -np.inf, -np.inf], [1.0, np.inf, np.inf], [-np.inf, 0.0, -np.inf]]),))],
           grad=False, atol=0, rtol=0),
    # ---- var / std
    OpInfo("var", ("var", "reduce_backward"), lambda a, ax, kd: a.var(ax, keepdim=kd), lambda a, ax, kd: np.var(a, axis=_tuple_axes(ax), ddof=1, keepdims=kd),
           lambda r: _reduce_axes_samples(r, axes=(None, 0, -1, (0, 2)), values=r.standard_normal)[:-3]
           + [Sample((r.standard_normal((2, 1, 3, 2)), (1, 3), False)), Sample((r.standard_normal((4, 2)), 1, True))],
           rtol=1e-4, atol=1e-5),
    OpInfo("var_correction", ("var",), lambda a, ax, c: gg.var(a, dim=ax, correction=c),
           lambda a, ax, c: np.var(a, axis=ax, ddof=c),
           lambda r: [Sample((r.standard_normal((4, 5)), ax, c)) for ax in (0, 1, None) for c in (0, 1, 2)]),
    OpInfo("var_unbiased_false", ("var",), lambda a: a.var(1, unbiased=False, keepdim=True),
           lambda a: np.var(a, axis=1, keepdims=True), lambda r: [Sample((r.standard_normal((3, 6)),))]),
    OpInfo("std", ("var", "sqrt"), lambda a, ax, kd: a.std(ax, keepdim=kd), lambda a, ax, kd: np.std(a, axis=ax, ddof=1, keepdims=kd),
           lambda r: [Sample((r.standard_normal((3, 4, 5)), ax, kd)) for ax in (None, 0, -1, (0, 1)) for kd in (False, True)]),
    OpInfo("var_single_element", ("var",), lambda a: a.var(0, correction=0), lambda a: np.var(a, axis=0),
           lambda r: [Sample((r.standard_normal((1, 3)),))]),
    # ---- logsumexp
    OpInfo("logsumexp", ("logsumexp", "reduce_backward"), lambda a, ax, kd: a.logsumexp(ax, kd),
           lambda a, ax, kd: _np_lse(a, _tuple_axes(ax), kd),
           lambda r: _reduce_axes_samples(r, values=lambda s: r.standard_normal(s) * 3)),
    OpInfo("logsumexp_large", ("logsumexp",), lambda a: gg.logsumexp(a, dim=1), lambda a: _np_lse(a, 1),
           lambda r: [Sample((r.standard_normal((3, 5)) * 50 + np.array([[500.0], [-500.0], [0.0]]),))], rtol=1e-5),
    OpInfo("logsumexp_inf", ("logsumexp",), lambda a: a.logsumexp(1),
           lambda a: np.array([-np.inf, np.inf, np.log(np.exp(1.0) + np.exp(2.0))]),
           lambda r: [Sample((np.array([[-np.inf, -np.inf, -np.inf], [1.0, np.inf, 0.0], [1.0, -np.inf, 2.0]]),))],
           grad=False),
    # ---- activations
    OpInfo("leaky_relu", ("leaky_relu", "leaky_relu_backward"), gg.leaky_relu, lambda a: np.where(a > 0, a, 0.01 * a), _act_samples),
    OpInfo("leaky_relu_slope", ("leaky_relu",), lambda a: a.leaky_relu(0.2), lambda a: np.where(a > 0, a, 0.2 * a),
           _act_samples),
    OpInfo("gelu", ("gelu", "gelu_backward"), gg.gelu, _np_gelu,
           lambda r: _act_samples(r, kinks=()) + [Sample((np.array([0.0, -6.0, 6.0, 1e-3, -12.0]),))]),
    OpInfo("gelu_tanh", ("gelu", "gelu_backward"), lambda a: gg.gelu(a, approximate="tanh"),
           lambda a: _np_gelu(a, "tanh"), lambda r: _act_samples(r, kinks=()) + [Sample((np.array([0.0, -6.0, 6.0, 12.0]),))]),
    OpInfo("silu", ("silu", "silu_backward"), lambda a: a.silu(), lambda a: a / (1 + np.exp(-a)),
           lambda r: _act_samples(r, kinks=(), scale=3.0)),
    OpInfo("softplus", ("softplus", "softplus_backward"), gg.softplus, lambda a: np.logaddexp(0.0, a),
           lambda r: _act_samples(r, kinks=(), scale=4.0) + [Sample((np.array([-30.0, 25.0, 19.0, 0.0]),))]),
    OpInfo("softplus_beta_threshold", ("softplus", "softplus_backward"), lambda a, b, t: a.softplus(beta=b, threshold=t),
           lambda a, b, t: _np_softplus(a, b, t),
           lambda r: [Sample((_away(r, (3, 4), (1.5, 0.75, 0.5)) * 2, b, t)) for b, t in [(2.0, 3.0), (0.5, 20.0), (1.0, 1.0)]]),
    OpInfo("elu", ("elu", "elu_backward"), gg.elu, _np_elu, _act_samples),
    OpInfo("elu_alpha", ("elu", "elu_backward"), lambda a: a.elu(alpha=0.3), lambda a: _np_elu(a, 0.3),
           lambda r: _act_samples(r) + [Sample((np.array([120.0, -120.0, 0.5, -0.5]),))]),
    OpInfo("softmax", ("softmax", "softmax_backward"), lambda a, ax: gg.softmax(a, dim=ax), lambda a, ax: _np_softmax(a, ax),
           lambda r: [Sample((r.standard_normal(s) * 2, ax)) for s, ax in
                      [((3, 4), -1), ((3, 4), 0), ((2, 3, 4), 1), ((2, 3, 4), -3), ((2, 3, 2, 3), 2), ((5,), 0),
                       ((), -1), ((4, 1), 1), ((1, 4), 0)]]),
    OpInfo("softmax_method", ("softmax", "softmax_backward"), lambda a: a.softmax(axis=0) + a.softmax(),
           lambda a: _np_softmax(a, 0) + _np_softmax(a, -1), lambda r: [Sample((r.standard_normal((3, 5)),))]),
    OpInfo("softmax_large", ("softmax",), lambda a: a.softmax(1), lambda a: _np_softmax(a, 1),
           lambda r: [Sample((np.array([[1000.0, 999.0, -1000.0], [-1e30, 0.0, 1.0]]),))], grad=False),
    OpInfo("log_softmax", ("log_softmax", "log_softmax_backward"), lambda a, ax: a.log_softmax(ax), lambda a, ax: a - _np_lse(a, ax, True),
           lambda r: [Sample((r.standard_normal(s) * 3, ax)) for s, ax in
                      [((3, 4), -1), ((3, 4), 0), ((2, 3, 4), 1), ((2, 3, 2, 3), -4), ((5,), 0), ((), 0), ((4, 1), 1)]]),
    OpInfo("log_softmax_extreme", ("log_softmax",), lambda a: gg.log_softmax(a, dim=1), lambda a: a - _np_lse(a, 1, True),
           lambda r: [Sample((np.array([[200.0, 0.0, -200.0], [1e4, 1e4 + 1, 1e4 - 1]]),))], grad=False, rtol=1e-5),
)



# ---------------------------------------------------------------- int32 reductions (exact, on the host)
def _int_samples(rng):
    """int32 values around and above 2**24 (float32 would round them) with ties, and small ones."""
    big = (rng.integers(-3, 4, (3, 4)) + 2 ** 24 + rng.integers(-1, 2, (3, 4)) * 2 ** 26).astype(np.int32)
    small = rng.integers(-2, 3, (2, 3, 4)).astype(np.int32)
    return [Sample((big, ax, kd)) for ax in (None, 0, 1) for kd in (False, True)] + [
        Sample((small, ax, False)) for ax in (None, 1, -1)] + [Sample((np.array(7, np.int32), None, False))]


def _int_axes(f):
    return lambda a, ax, kd: f(a, axis=ax, keepdims=kd) if ax is not None or not kd else f(a).reshape((1,) * a.ndim)


register(*[
    OpInfo(f"{name}_int", (), (lambda m: lambda a, ax, kd: getattr(a, m)(ax, kd))(name),
           _int_axes((lambda f: lambda a, **k: np.asarray(f(a.astype(np.int64), **k), np.float64))(f)),
           _int_samples, grad=False, atol=0, rtol=0, capturable=False)
    for name, f in [("sum", np.sum), ("amax", np.max), ("amin", np.min), ("argmax", np.argmax), ("argmin", np.argmin)]
], *[
    OpInfo(f"{name}_dim_int", (), (lambda m: lambda a, d, kd: getattr(a, m)(d, kd)[0] * 10 + getattr(a, m)(d, kd)[1])(name),
           (lambda f, g: lambda a, d, kd: f(a.astype(np.int64), axis=d, keepdims=kd) * 10 + g(a, axis=d, keepdims=kd))(f, g),
           lambda r: [s for s in _int_samples(r) if s.args[1] is not None and s.args[0].max() < 2 ** 20],
           grad=False, atol=0, rtol=0, capturable=False)
    for name, f, g in [("max", np.max, np.argmax), ("min", np.min, np.argmin)]
], *[OpInfo(f"{name}_all_int", (), (lambda m: lambda a: getattr(a, m)())(name), (lambda f: lambda a: np.float64(f(a)))(f),
            lambda r: [Sample((_int_samples(r)[0].args[0],))], grad=False, atol=0, rtol=0, capturable=False)
      for name, f in [("max", np.max), ("min", np.min)]])


# ---------------------------------------------------------------- error inputs (raised before ggml, in every mode)
def _ones(*s, dtype=np.float64):
    return np.ones(s, dtype)


_F23, _F34 = _ones(2, 3), _ones(3, 4)
_I23, _H23 = _ones(2, 3, dtype=np.int32), _ones(2, 3, dtype=np.float16)
V, T = ValueError, TypeError

errors("cmp_lt", bad(V, "lt", _F23, _F34))
errors("cmp_fn_eq", bad(V, "eq", _ones(2), _ones(3)), bad(T, "eq", None, _F23))
errors("cmp_fn_ge", bad(T, "ge", _F23, "x"))
errors("clamp_both", bad(V, "clamp", _F23, fn=lambda a: a.clamp()),
       bad(T, "clamp", _F23, fn=lambda a: gg.ops.op.clamp(a, lo="0")),
       bad(T, "clamp", _H23, fn=lambda a: a.clamp(0, 1)))
errors("clamp_tensor_bounds", bad(V, "maximum", _F23, _ones(4), fn=lambda a, b: a.clamp(min=b)))
errors("maximum", bad(V, "maximum", _F23, _F34), bad(V, "maximum", _ones(2), _ones(3)))
errors("minimum", bad(T, "minimum", _H23, _F23))
errors("where", bad(V, "where", _F23, _ones(4, 3), 0.0), bad(V, "where", _F23, _F23, _ones(4, 3)),
       bad(T, "where", _F23, _H23, _F23), bad(T, "where", _F23, _F23, _H23), bad(T, "where", 1.0, 2.0, 3.0))
errors("amax", bad(V, "amax", _F23, 2, False), bad(V, "amax", _F23, (1, -1), False),
       bad(V, "amax", _ones(2, 0), 1, False))
errors("amax_int", bad(V, "amax", _I23, 2, False))
errors("amin_int", bad(V, "amin", _ones(2, 0, dtype=np.int32), 1, False))
errors("argmax_int", bad(T, "argmax", _I23, (0, 1), False))
errors("sum_int", bad(V, "sum", np.array([2 ** 31 - 1, 1], np.int32), None, False), bad(T, "sum", _I23, 0, 1))
errors("max_dim_values", bad(T, "amax", _F23, (0, 1), False), bad(T, "max", _F23, 0.5, False))
errors("min_dim", bad(V, "min", _F23, -3))
errors("amin", bad(V, "amin", _F23, (0, 2), False))
errors("argmax", bad(V, "argmax", _F23, 5, False), bad(V, "argmax", _F23, 3, False),
       bad(T, "argmax", _F23, (0, 1), False), bad(T, "argmax", _H23, None, False), bad(T, "argmax", _F23, 0, 1))
errors("argmin", bad(V, "argmin", _ones(0), None))
errors("argmax", bad(V, "argmax", _ones(0), None, False))
errors("var", bad(V, "var", _F23, 3, False), bad(T, "var", _I23, None, False),
       bad(T, "var", _F23, fn=lambda a: a.var(correction=1, unbiased=False)))
errors("var_correction", bad(T, "var", _F23, None, "1"))
errors("std", bad(V, "var", _F23, (0, 2), False))
errors("logsumexp", bad(V, "logsumexp", _F23, -3, False), bad(T, "logsumexp", _H23, 0, False),
       bad(V, "logsumexp", _ones(3, 0), 1, False))
errors("softmax", bad(V, "softmax", _F23, 2), bad(V, "softmax", _F23, 5), bad(T, "softmax", _F23, 0.0),
       bad(T, "softmax", _I23, 0), bad(T, "softmax", _ones(3, dtype=np.int32), 0),
       bad(T, "axis or dim", _F23, fn=lambda a: a.softmax(0, axis=1)))
errors("log_softmax", bad(T, "log_softmax", _H23, 1), bad(V, "log_softmax", _F23, -4))
errors("leaky_relu", bad(T, "leaky_relu", _F23, None), bad(T, "leaky_relu", _F23, "a"), bad(T, "leaky_relu", _I23))
errors("gelu", bad(V, "gelu", _F23, fn=lambda a: gg.gelu(a, approximate="fast")), bad(T, "gelu", _I23))
errors("silu", bad(T, "silu", _H23))
errors("softplus", bad(V, "softplus", _F23, fn=lambda a: gg.softplus(a, beta=0)),
       bad(T, "softplus", _F23, fn=lambda a: gg.softplus(a, threshold="20")))
errors("elu", bad(T, "elu", _F23, fn=lambda a: gg.elu(a, alpha=[1.0])))
