"""OpInfo entries of issue 22's math: the new elementwise ops (tan ... logaddexp, fmod, lerp, the
fused add-products), the scans, products, norms and sorts, and int32/bool samples (torch's type
promotion) for the new ops and the existing ones torch accepts them for.

Every row's call is written once for both libraries (``m`` is ``ggmlgrad`` or ``torch``): ``fn`` and
``torch_fn`` are that call; tests/test_ops.py checks values against the NumPy float64 reference and
gradients against finite differences, tests/test_torch_parity_math.py the result dtype and values
against torch on the same samples.
"""
from __future__ import annotations

import math
import re

import numpy as np

import ggmlgrad as gg
from .opinfo import OpInfo, Sample, bad, errors, quiet, rand_shapes_binary, register
from .opinfo_nonfinite import SPECIAL, unary_specials

FLT_MAX = float(np.finfo(np.float32).max)
_SHAPES = [(3, 4), (), (1,), (2, 3, 4), (2, 1, 3, 2)]


def _torch():
    import torch
    return torch


# Entries the op-program fuzzer (testing/fuzz_programs.py) must not feed random operands: their samples
# are of one dtype on purpose (int32, bool, mixed), or their results are indices, or their references
# hold only for the sample's values, or (products) float32 overflow in a different order than NumPy's
# float64 (1e30 * 1e30 * 0 is NaN in float32, as in torch; 0 in float64). The composites of fuzzed ops
# (norms, medians) and second spellings (methods, large-value rows) are left out to keep the fuzzer's
# fixed-seed run short: the kernels they are made of are fuzzed.
_NOT_FUZZED = re.compile(r".*_(int|bool|mixed|int_scalar|int_bounds|int_float_bounds|method|large)$|median_indices|"
                         r"topk_indices|fmod_scalar|cdist_zero_distance|cumsum_bool|sort_long_row|prod|prod_all|"
                         r"cumprod|cumprod_long|norm_.*|linalg_norm_.*|median_all|arctan2_method")


def row(name, covers, call, ref, samples, **kw) -> OpInfo:
    """An entry whose call ``call(m, *args, **kwargs)`` runs on ggmlgrad and on torch alike."""
    return OpInfo(name, covers, lambda *a, **k: call(gg, *a, **k), ref, samples,
                  torch_fn=lambda *a, **k: call(_torch(), *a, **k), fuzz=not _NOT_FUZZED.fullmatch(name), **kw)


def _unary(make):
    return lambda r: [Sample((make(r, s),)) for s in _SHAPES]


def _ints(r, lo=-4, hi=5):
    return [Sample((r.integers(lo, hi, s).astype(np.int32),)) for s in [(3, 4), (), (2, 3, 1)]]


def _bools(r):
    """0/1 int32 samples: the calls turn them into bool tensors with ``a != 0`` (NumPy: bool arrays)."""
    return [Sample((r.integers(0, 2, s).astype(np.int32),)) for s in [(3, 4), (5,)]]


def _away_from_integers(r, s, scale=3.0):
    x = r.standard_normal(s) * scale
    f = x - np.floor(x)
    return np.floor(x) + np.clip(f, 0.1, 0.9)


def _away_from_halves(r, s):
    x = _away_from_integers(r, s)
    f = x - np.floor(x)
    return np.where(np.abs(f - 0.5) < 0.1, np.floor(x) + 0.3, x)


def _np_erf(x):
    return np.vectorize(math.erf, otypes=[float])(x) if np.ndim(x) else np.asarray(math.erf(float(x)))


def _np_round(x, decimals=0):
    """torch's round with decimals: x * 10**d rounded (halves to even), divided back (float64 here)."""
    if decimals >= 0:
        return np.round(x * 10.0 ** decimals) / 10.0 ** decimals
    return np.round(x / 10.0 ** -decimals) * 10.0 ** -decimals


# ---------------------------------------------------------------- unary float ops: float, int32 and bool inputs
_UNARY = [
    # name, covers, NumPy reference, float samples
    ("tan", ("tan",), np.tan, _unary(lambda r, s: r.uniform(-1.3, 1.3, s))),
    ("rsqrt", ("rsqrt",), lambda a: 1 / np.sqrt(a), _unary(lambda r, s: r.uniform(0.2, 3.0, s))),
    ("log2", ("log2",), np.log2, _unary(lambda r, s: r.uniform(0.2, 5.0, s))),
    ("log10", ("log10",), np.log10, _unary(lambda r, s: r.uniform(0.2, 5.0, s))),
    ("log1p", ("log1p",), np.log1p, lambda r: _unary(lambda r, s: r.uniform(-0.8, 3.0, s))(r)
     + [Sample((np.array([1e-7, -3e-6, 1e-4, 0.0, 2e-3, -0.5]),))]),
    ("expm1", ("expm1",), np.expm1, lambda r: _unary(lambda r, s: r.standard_normal(s) * 2)(r)
     + [Sample((np.array([1e-7, -3e-6, 1e-4, 0.0, -20.0, 10.0]),))]),
    ("erf", ("erf",), _np_erf, lambda r: _unary(lambda r, s: r.standard_normal(s) * 1.5)(r)
     + [Sample((np.array([0.0, 0.5, -0.99, 1.01, -2.0, 3.9, -4.5, 1e-5]),))]),
]
for _name, _covers, _ref, _samples in _UNARY:
    register(
        row(_name, _covers, (lambda n: lambda m, a: getattr(m, n)(a))(_name), _ref, _samples, nonfinite=unary_specials),
        row(f"{_name}_method", _covers, (lambda n: lambda m, a: getattr(a, n)())(_name), _ref, lambda r, s=_samples: s(r)[:1]),
        row(f"{_name}_int", _covers, (lambda n: lambda m, a: getattr(m, n)(a))(_name), _ref,
            lambda r: _ints(r, 1, 4), grad=False),
        row(f"{_name}_bool", _covers, (lambda n: lambda m, a: getattr(m, n)(a != 0))(_name),
            quiet((lambda f: lambda a: f((a != 0).astype(np.float64)))(_ref)), _bools, grad=False),
    )

# Existing float-only ops: int32 and bool inputs compute in float32 (torch's promotion).
_PROMOTED = [("sqrt", np.sqrt, 0, 9), ("exp", np.exp, -3, 4), ("log", np.log, 1, 9), ("sin", np.sin, -4, 5),
             ("cos", np.cos, -4, 5), ("tanh", np.tanh, -4, 5), ("sigmoid", lambda a: 1 / (1 + np.exp(-a)), -4, 5),
             ("reciprocal", lambda a: 1.0 / a, 1, 9)]
register(*[
    r for _name, _ref, lo, hi in _PROMOTED for r in (
        row(f"{_name}_int", (_name,), (lambda n: lambda m, a: getattr(m, n)(a))(_name), _ref,
            (lambda lo, hi: lambda r: _ints(r, lo, hi))(lo, hi), grad=False),
        row(f"{_name}_bool", (_name,), (lambda n: lambda m, a: getattr(m, n)(a != 0))(_name),
            quiet((lambda f: lambda a: f((a != 0).astype(np.float64)))(_ref)), _bools, grad=False))
])

# Existing ops torch keeps integral: int32 stays int32 (bool where torch accepts it).
_INTEGRAL = [("abs", np.abs), ("neg", np.negative), ("sign", np.sign), ("square", np.square), ("floor", np.floor),
             ("relu", lambda a: np.maximum(a, 0)), ("ceil", np.ceil), ("trunc", np.trunc), ("round", np.round)]
register(*[
    row(f"{_name}_int", (_name,), (lambda n: lambda m, a: getattr(m, n)(a))(_name), _ref, _ints, grad=False,
        atol=0, rtol=0)
    for _name, _ref in _INTEGRAL
])
register(
    row("sign_bool", ("sign",), lambda m, a: m.sign(a != 0), lambda a: (a != 0).astype(np.float64), _bools, grad=False),
    row("square_bool", ("square",), lambda m, a: m.square(a != 0), lambda a: (a != 0).astype(np.float64), _bools,
        grad=False),
)

# ---------------------------------------------------------------- rounding, frac, nan_to_num
_HALVES = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, -0.4, 0.49999997, 2 ** 23 + 1.0, -(2 ** 22) - 0.5, 1e30])
register(
    row("ceil", ("ceil",), lambda m, a: m.ceil(a), np.ceil, _unary(_away_from_integers), nonfinite=unary_specials),
    row("trunc", ("trunc",), lambda m, a: a.trunc(), np.trunc, _unary(_away_from_integers), nonfinite=unary_specials),
    row("round", ("round",), lambda m, a: m.round(a), np.round, lambda r: _unary(_away_from_halves)(r),
        nonfinite=lambda r: unary_specials(r) + [Sample((_HALVES,))]),
    row("round_decimals", ("round",), lambda m, a, d: m.round(a, decimals=d), _np_round,
        lambda r: [Sample((np.round(r.standard_normal((3, 4)) * 100) / 100 + 0.0013, 2)),
                   Sample((np.round(r.standard_normal((5,)) * 300) + 2.0, -1))], grad=False, rtol=1e-6),
    row("frac", ("frac",), lambda m, a: m.frac(a), lambda a: a - np.trunc(a), _unary(_away_from_integers),
        nonfinite=unary_specials),
    row("nan_to_num", ("nan_to_num",), lambda m, a: m.nan_to_num(a), lambda a: np.nan_to_num(a, posinf=FLT_MAX, neginf=-FLT_MAX),
        _unary(lambda r, s: r.standard_normal(s)), nonfinite=unary_specials),
    row("nan_to_num_values", ("nan_to_num",), lambda m, a: a.nan_to_num(nan=1.5, posinf=2.0, neginf=-0.0),
        lambda a: np.nan_to_num(a, nan=1.5, posinf=2.0, neginf=-0.0), lambda r: unary_specials(r)[:2], grad=False),
    row("nan_to_num_int", ("nan_to_num",), lambda m, a: m.nan_to_num(a), lambda a: a, _ints, grad=False),
    row("nan_to_num_bool", ("nan_to_num",), lambda m, a: m.nan_to_num(a != 0), lambda a: (a != 0) * 1.0, _bools,
        grad=False),
)


# ---------------------------------------------------------------- binary: atan2, hypot, logaddexp, fmod
def _pairs(r, b_away=0.0):
    out = []
    for sa, sb in rand_shapes_binary(r):
        a, b = r.standard_normal(sa) * 2, r.standard_normal(sb) * 2
        if b_away:
            b = np.where(np.abs(b) < b_away, b_away + 0.3, b)
        out.append(Sample((a, b)))
    return out


def _special_pairs(r):
    a, b = np.repeat(SPECIAL, SPECIAL.size), np.tile(SPECIAL, SPECIAL.size)
    return [Sample((a, b)), Sample((SPECIAL.reshape(-1, 1), SPECIAL[::-1].copy()))]


def _int_pairs(r):
    return [Sample((r.integers(-5, 6, (3, 4)).astype(np.int32), r.integers(1, 4, (4,)).astype(np.int32)))]


def _mixed_pairs(r):
    return [Sample((r.integers(-5, 6, (3, 4)).astype(np.int32), r.standard_normal((3, 4)) + 3.0)),
            Sample((r.standard_normal((2, 3)), r.integers(1, 4, (2, 3)).astype(np.int32)))]


def _np_fmod_quotients_away(r):
    """fmod's gradient for other is -trunc(a / b): finite differences need a / b away from integers."""
    out = []
    for s in _pairs(r, b_away=0.5):
        a, b = s.args
        q = a / b
        a = np.where(np.abs(q - np.round(q)) < 0.1, (np.round(q) + 0.3) * b, a)
        out.append(Sample((a, b)))
    return out


register(
    row("atan2", ("atan2",), lambda m, a, b: m.atan2(a, b), np.arctan2, _pairs, nonfinite=_special_pairs),
    row("arctan2_method", ("atan2",), lambda m, a, b: a.arctan2(b), np.arctan2, lambda r: _pairs(r)[:2]),
    row("atan2_int", ("atan2",), lambda m, a, b: m.atan2(a, b), np.arctan2, lambda r: _int_pairs(r) + _mixed_pairs(r),
        grad=False),
    row("hypot", ("hypot",), lambda m, a, b: m.hypot(a, b), np.hypot, _pairs, nonfinite=_special_pairs),
    row("hypot_large", ("hypot",), lambda m, a, b: a.hypot(b), np.hypot,
        lambda r: [Sample((np.array([3e30, 1e-30, 0.0, -2e38]), np.array([4e30, -1e-30, 0.0, 1e38])))], grad=False),
    row("hypot_mixed", ("hypot",), lambda m, a, b: m.hypot(a, b), np.hypot, _mixed_pairs, grad=False),
    row("logaddexp", ("logaddexp",), lambda m, a, b: m.logaddexp(a, b), np.logaddexp, _pairs, nonfinite=_special_pairs),
    row("logaddexp_large", ("logaddexp",), lambda m, a, b: a.logaddexp(b), np.logaddexp,
        lambda r: [Sample((np.array([1000.0, -1000.0, 50.0, 0.0]), np.array([1000.5, -1001.0, -50.0, 1e-7])))]),
    row("fmod", (), lambda m, a, b: m.fmod(a, b), np.fmod, _np_fmod_quotients_away,
        nonfinite=_special_pairs),
    row("fmod_scalar", (), lambda m, a: a.fmod(-2.5), lambda a: np.fmod(a, -2.5), _unary(_away_from_integers)),
    row("fmod_int", (), lambda m, a, b: m.fmod(a, b), np.fmod, _int_pairs, grad=False, atol=0, rtol=0),
    row("fmod_int_scalar", (), lambda m, a: m.fmod(a, -3), lambda a: np.fmod(a, -3), _ints, grad=False, atol=0, rtol=0),
)


# ---------------------------------------------------------------- lerp, addcmul, addcdiv, addmm, baddbmm
def _triples(r, positive_c=False):
    out = []
    for s1, s2, s3 in [((3, 4), (3, 4), (3, 4)), ((2, 3, 4), (4,), (3, 1)), ((), (2, 3), ()), ((5,), (1,), (5,))]:
        c = r.standard_normal(s3)
        out.append(Sample((r.standard_normal(s1), r.standard_normal(s2), np.abs(c) + 0.5 if positive_c else c)))
    return out


register(
    row("lerp_scalar", (), lambda m, a, b, w: m.lerp(a, b, w), lambda a, b, w: a + w * (b - a),
        lambda r: [Sample((r.standard_normal(s), r.standard_normal(t), w)) for (s, t), w in
                   zip([((3, 4), (3, 4)), ((2, 3), (3,)), ((), (4,))], (0.25, 0.75, -1.5))]),
    row("lerp_tensor", (), lambda m, a, b, w: a.lerp(b, w), lambda a, b, w: a + w * (b - a),
        lambda r: [Sample((r.standard_normal((3, 4)), r.standard_normal((3, 4)), _away(r, (3, 4), 0.5))),
                   Sample((r.standard_normal((2, 3)), r.standard_normal((3,)), _away(r, (2, 1), 0.5)))]),
    row("addcmul", (), lambda m, a, b, c: m.addcmul(a, b, c, value=0.5), lambda a, b, c: a + 0.5 * b * c, _triples),
    row("addcmul_method", (), lambda m, a, b, c: a.addcmul(b, c), lambda a, b, c: a + b * c, lambda r: _triples(r)[:1]),
    row("addcdiv", (), lambda m, a, b, c: m.addcdiv(a, b, c, value=-2), lambda a, b, c: a - 2 * b / c,
        lambda r: _triples(r, positive_c=True)),
    row("addcmul_int", (), lambda m, a, b, c: m.addcmul(a, b, c, value=2), lambda a, b, c: a + 2 * b * c,
        lambda r: [Sample(tuple(r.integers(-3, 4, (2, 3)).astype(np.int32) for _ in range(3)))], grad=False),
    row("addmm", (), lambda m, a, b, c: m.addmm(a, b, c, beta=0.5, alpha=-2.0), lambda a, b, c: 0.5 * a - 2.0 * b @ c,
        lambda r: [Sample((r.standard_normal(s), r.standard_normal((3, 4)), r.standard_normal((4, 2))))
                   for s in [(3, 2), (2,), ()]]),
    row("addmm_beta0", (), lambda m, a, b, c: a.addmm(b, c, beta=0), lambda a, b, c: b @ c,
        lambda r: [Sample((np.full((2, 2), np.nan), r.standard_normal((2, 3)), r.standard_normal((3, 2))), nondiff=(0,))]),
    row("baddbmm", (), lambda m, a, b, c: m.baddbmm(a, b, c, alpha=0.5), lambda a, b, c: a + 0.5 * b @ c,
        lambda r: [Sample((r.standard_normal(s), r.standard_normal((2, 3, 4)), r.standard_normal((2, 4, 5))))
                   for s in [(2, 3, 5), (1, 5)]]),
)


def _away(r, s, point, gap=0.1):
    x = r.uniform(-1.0, 2.0, s)
    return np.where(np.abs(x - point) < gap, point + gap + 0.05, x)


# ---------------------------------------------------------------- cumsum, cumprod, prod
def _with_zeros(r, s):
    x = r.standard_normal(s)
    flat = x.reshape(-1)
    if flat.size > 2:
        flat[r.choice(flat.size, 2, replace=False)] = 0.0
    return x


def _dims(make, shapes=((3, 4), (2, 3, 4), (5,))):
    def samples(r):
        out = [Sample((make(r, s), d)) for s in shapes for d in range(-1, len(s))]
        return out + [Sample((make(r, ()), 0))]
    return samples


def _np_cumprod(a, d):
    return np.cumprod(a, axis=d) if np.ndim(a) else a


def _np_prod(a, d=None, keepdim=False):
    return np.prod(a, axis=d, keepdims=keepdim) if np.ndim(a) or d is None else a


register(
    row("cumsum", ("cumsum",), lambda m, a, d: m.cumsum(a, dim=d), lambda a, d: np.cumsum(a, axis=d) if np.ndim(a) else a,
        _dims(lambda r, s: r.standard_normal(s))),
    row("cumsum_method_int", ("cumsum",), lambda m, a: a.cumsum(0), lambda a: np.cumsum(a, 0) if np.ndim(a) else a,
        lambda r: _ints(r)[::2], grad=False, atol=0, rtol=0),
    row("cumsum_bool", ("cumsum",), lambda m, a: (a != 0).cumsum(-1), lambda a: np.cumsum(a != 0, -1), _bools,
        grad=False, atol=0, rtol=0),
    row("cumprod", (), lambda m, a, d: m.cumprod(a, dim=d), _np_cumprod, _dims(_with_zeros),
        nonfinite=lambda r: [Sample((SPECIAL.copy(), 0)), Sample((SPECIAL[::-1].reshape(2, 5).copy(), 1))]),
    row("cumprod_long", (), lambda m, a: a.cumprod(1), lambda a: np.cumprod(a, 1),
        lambda r: [Sample((r.uniform(0.8, 1.2, (2, 13)),))]),
    row("cumprod_int", (), lambda m, a: m.cumprod(a, 0), lambda a: np.cumprod(a, 0), lambda r: _ints(r, -2, 3)[::2],
        grad=False, atol=0, rtol=0),
    row("prod", (), lambda m, a, d, k: m.prod(a, d, keepdim=k), _np_prod,
        lambda r: [Sample((_with_zeros(r, s), d, k)) for s in [(3, 4), (2, 3, 5)] for d in (0, -1) for k in (False, True)]
        + [Sample((r.standard_normal((3, 7)), 1, False)), Sample((np.array([[0.0, 0.0, 2.0], [1.0, 0.0, 3.0]]), 1, False))]),
    row("prod_all", (), lambda m, a: a.prod(), np.prod,
        lambda r: [Sample((r.standard_normal(s),)) for s in [(3, 4), (), (5,)]] + [Sample((_with_zeros(r, (2, 3)),))],
        nonfinite=lambda r: [Sample((SPECIAL.copy(),)), Sample((SPECIAL[3:].copy(),))]),
    row("prod_int", (), lambda m, a: m.prod(a, 1), lambda a: np.prod(a, 1), lambda r: _ints(r, -3, 4)[:1], grad=False,
        atol=0, rtol=0),
    row("prod_bool", (), lambda m, a: (a != 0).prod(), lambda a: np.prod(a != 0) * 1.0, _bools, grad=False),
)


# ---------------------------------------------------------------- norms and distances
def _np_vnorm(a, p=2, dim=None, keepdim=False):
    ax = tuple(dim) if isinstance(dim, (list, tuple)) else dim
    x = np.abs(a)
    if p == math.inf:
        return np.max(x, axis=ax, keepdims=keepdim)
    if p == -math.inf:
        return np.min(x, axis=ax, keepdims=keepdim)
    if p == 0:
        return np.sum(x != 0, axis=ax, keepdims=keepdim).astype(np.float64)
    with np.errstate(all="ignore"):
        s = np.sum(x ** p, axis=ax, keepdims=keepdim)
        s = np.where(s > FLT_MAX, np.inf, s)        # the sum of powers overflows float32 (torch: inf too)
        return s ** (1.0 / p)


def _distinct(r, s):
    n = int(np.prod(s)) if s else 1
    return r.permutation(np.linspace(-2.0, 2.3, n) + r.uniform(0, 0.01, n)).reshape(s)


def _np_cdist(a, b, p=2.0):
    return _np_vnorm(a[..., :, None, :] - b[..., None, :, :], p, -1)


def _np_matrix_norm(a, o):
    if o == "fro":
        return np.sqrt(np.sum(a * a))
    return np.linalg.norm(a, o)


register(*[
    row(f"vector_norm_{p}", (), (lambda p: lambda m, a, d, k: m.linalg.vector_norm(a, p, d, k))(p),
        (lambda p: lambda a, d, k: _np_vnorm(a, p, d, k))(p),
        (lambda p: lambda r: [Sample((_distinct(r, s) if abs(p) == math.inf else r.standard_normal(s), d, k))
                              for s, d in [((3, 4), 1), ((3, 4), None), ((2, 3, 4), (0, 2)), ((5,), 0)] for k in (False, True)])(p),
        grad=p != 0)
    for p in (2, 1, 3, 0.5, math.inf, -math.inf, 0)
], row("norm_fro", (), lambda m, a: a.norm(), _np_vnorm,
       lambda r: [Sample((r.standard_normal(s),)) for s in [(3, 4), (2, 3, 4), ()]]),
   row("norm_p_dim", (), lambda m, a: m.norm(a, 3, 1, True), lambda a: _np_vnorm(a, 3, 1, True),
       lambda r: [Sample((r.standard_normal((3, 4)),))]),
   row("norm_zero_grad", (), lambda m, a: m.norm(a, dim=1) + m.linalg.vector_norm(a, 3, 1),
       lambda a: _np_vnorm(a, 2, 1) + _np_vnorm(a, 3, 1),
       lambda r: [Sample((np.zeros((2, 3)),))], grad=False),
   row("linalg_norm_vector", (), lambda m, a: m.linalg.norm(a), _np_vnorm,
       lambda r: [Sample((r.standard_normal(s),)) for s in [(4,), (3, 4), (2, 3, 2)]]),
   row("linalg_norm_matrix", (), lambda m, a, o: m.linalg.norm(a, o), _np_matrix_norm,
       lambda r: [Sample((_distinct(r, (3, 4)), o)) for o in ("fro", math.inf, -math.inf, 1, -1)]),
   row("linalg_norm_dims", (), lambda m, a: m.linalg.norm(a, 1, dim=(2, 0), keepdim=True),
       lambda a: np.max(np.sum(np.abs(a), axis=2, keepdims=True), axis=0, keepdims=True),
       lambda r: [Sample((_distinct(r, (3, 2, 4)),))]),
   row("dist", (), lambda m, a, b, p: m.dist(a, b, p), lambda a, b, p: _np_vnorm(a - b, p),
       lambda r: [Sample((r.standard_normal((3, 4)), r.standard_normal(s), p)) for s, p in [((3, 4), 2), ((4,), 1), ((1, 4), 3)]]),
   row("cdist", (), lambda m, a, b, p: m.cdist(a, b, p), _np_cdist,
       lambda r: [Sample((r.standard_normal(s1), r.standard_normal(s2), p)) for (s1, s2), p in
                  [(((4, 3), (5, 3)), 2.0), (((2, 3, 2), (2, 4, 2)), 1.0), (((3, 2), (2, 2)), 3.0)]]),
   row("cdist_zero_distance", (), lambda m, a: m.cdist(a, a), lambda a: _np_cdist(a, a),
       lambda r: [Sample((r.standard_normal((3, 2)),))], grad=False),
)


# ---------------------------------------------------------------- sort, argsort, topk, median, kthvalue
def _np_argsort(a, d=-1, descending=False):
    """Stable, NaN largest (torch): ascending NaN last, descending NaN first."""
    if not np.ndim(a):
        return np.zeros((), np.int64)
    a = np.moveaxis(a, d, -1)
    nan = np.isnan(a)
    key = np.where(nan, 0.0, a)
    out = np.empty(a.shape, np.int64)
    for i in np.ndindex(*a.shape[:-1]):
        idx = np.arange(a.shape[-1])
        if descending:
            out[i] = np.lexsort((idx, -key[i], ~nan[i]))
        else:
            out[i] = np.lexsort((idx, key[i], nan[i]))
    return np.moveaxis(out, -1, d)


def _np_sorted(a, d=-1, descending=False):
    return np.take_along_axis(a, _np_argsort(a, d, descending), d) if np.ndim(a) else a


def _ties(r, s):
    return np.round(r.standard_normal(s) * 1.5)


def _sort_samples(make):
    return lambda r: [Sample((make(r, s), d, desc)) for s, d in [((3, 5), 1), ((3, 5), 0), ((2, 3, 4), -2), ((6,), 0)]
                      for desc in (False, True)] + [Sample((make(r, ()), 0, False))]


def _np_median(a, d, keepdim):
    """The lower middle value along d (torch.median: no averaging)."""
    m = np.take(np.sort(a, axis=d), (a.shape[d] - 1) // 2, axis=d)
    return np.expand_dims(m, d) if keepdim else m


def _np_median_index0(a):
    """torch.median(a, 0).indices: the lower middle's index (stable), or the first NaN's."""
    order = _np_argsort(a, 0)
    nans = np.isnan(a).sum(0)
    pos = np.where(nans > 0, a.shape[0] - nans, (a.shape[0] - 1) // 2)
    return np.take_along_axis(order, pos[None], 0)[0]


_SORT_NONFINITE = lambda r: [Sample((SPECIAL.reshape(2, 5).copy(), 1, False)), Sample((SPECIAL.copy(), 0, True)),  # noqa: E731
                             Sample((np.tile(SPECIAL, 2).reshape(4, 5).T.copy(), 0, False))]
register(
    row("sort_values", ("argsort", "gather"), lambda m, a, d, desc: m.sort(a, dim=d, descending=desc).values,
        _np_sorted, _sort_samples(_distinct), nonfinite=_SORT_NONFINITE),
    row("sort_indices", ("argsort",), lambda m, a, d, desc: m.sort(a, dim=d, descending=desc, stable=True).indices,
        _np_argsort, _sort_samples(_ties), grad=False, atol=0, rtol=0, nonfinite=_SORT_NONFINITE),
    row("argsort", ("argsort",), lambda m, a, d, desc: m.argsort(a, dim=d, descending=desc, stable=True), _np_argsort,
        _sort_samples(_ties), grad=False, atol=0, rtol=0, nonfinite=_SORT_NONFINITE),
    row("argsort_method_int", ("argsort",), lambda m, a: a.argsort(stable=True), _np_argsort, _ints, grad=False,
        atol=0, rtol=0),
    row("sort_int", ("argsort",), lambda m, a: a.sort(0, descending=True).values, lambda a: _np_sorted(a, 0, True),
        lambda r: _ints(r)[:1], grad=False, atol=0, rtol=0),
    row("sort_long_row", ("argsort",), lambda m, a: m.sort(a).values, np.sort,
        lambda r: [Sample((r.standard_normal((2, 3000)),))], grad=False),
    row("topk", ("argsort", "gather"), lambda m, a, k, d, big: m.topk(a, k, d, big).values,
        lambda a, k, d, big: np.take(_np_sorted(a, d, big), range(k), axis=d),
        lambda r: [Sample((_distinct(r, s), k, d, big)) for s, k, d in [((3, 5), 2, 1), ((4, 3), 4, 0), ((6,), 1, 0),
                                                                         ((2, 3, 4), 0, -1)] for big in (True, False)]),
    row("topk_indices", ("argsort",), lambda m, a: a.topk(2).indices, lambda a: _np_argsort(a, -1, True)[..., :2],
        lambda r: [Sample((_distinct(r, (3, 5)),))], grad=False, atol=0, rtol=0,
        nonfinite=lambda r: [Sample((SPECIAL.reshape(2, 5).copy(),))]),
    row("median", ("argsort", "gather"), lambda m, a, d, k: m.median(a, d, k).values, _np_median,
        lambda r: [Sample((_distinct(r, s), d, k)) for s, d in [((3, 4), 1), ((3, 5), 0), ((2, 3, 4), -1)]
                   for k in (False, True)]),
    row("median_indices", ("argsort",), lambda m, a: m.median(a, 0).indices, _np_median_index0, lambda r: [Sample((_ties(r, (4, 3)),))],
        grad=False, atol=0, rtol=0, nonfinite=lambda r: [Sample((np.array([[1.0, np.nan], [np.nan, 2.0], [0.5, 3.0]]),))]),
    row("median_all", (), lambda m, a: a.median(),
        lambda a: np.nan if np.isnan(a).any() else np.sort(a.reshape(-1))[(a.size - 1) // 2],
        lambda r: [Sample((_distinct(r, s),)) for s in [(3, 4), (5,), ()]],
        nonfinite=lambda r: [Sample((SPECIAL.copy(),))]),
    row("kthvalue", (), lambda m, a, k, d: m.kthvalue(a, k, d).values + m.kthvalue(a, k, d).indices,
        lambda a, k, d: np.take(np.sort(a, axis=d), k - 1, axis=d) + np.take(np.argsort(a, axis=d, kind="stable"), k - 1, axis=d),
        lambda r: [Sample((_distinct(r, s), k, d)) for s, k, d in [((3, 5), 2, 1), ((4, 3), 4, 0), ((5,), 1, 0)]]),
    row("median_int", (), lambda m, a: m.median(a, 1).values, lambda a: np.sort(a, 1)[:, (a.shape[1] - 1) // 2],
        lambda r: _ints(r)[:1], grad=False, atol=0, rtol=0),
)


# ---------------------------------------------------------------- int32/bool inputs of existing mixed-dtype ops
register(
    row("clamp_int_bounds", ("clamp",), lambda m, a: m.clamp(a, -1, 2), lambda a: np.clip(a, -1, 2), _ints, grad=False,
        atol=0, rtol=0),
    row("clamp_int_float_bounds", ("clamp",), lambda m, a: a.clamp(min=-0.5), lambda a: np.maximum(a, -0.5), _ints,
        grad=False),
    row("clamp_bool", ("clamp",), lambda m, a: m.clamp(a != 0, 0, 0), lambda a: np.zeros_like(a), _bools, grad=False),
    row("maximum_int", ("maximum",), lambda m, a, b: m.maximum(a, b), np.maximum, _int_pairs, grad=False, atol=0, rtol=0),
    row("minimum_mixed", ("minimum", "minmax_backward"), lambda m, a, b: m.minimum(a, b), np.minimum, _mixed_pairs),
    row("maximum_bool", ("maximum",), lambda m, a: m.maximum(a != 0, a == 1), lambda a: ((a != 0) | (a == 1)) * 1.0,
        _bools, grad=False),
    row("where_int", ("where",), lambda m, c, a, b: m.where(c != 0, a, b), lambda c, a, b: np.where(c != 0, a, b),
        lambda r: [Sample((_bools(r)[0].args[0], *_int_pairs(r)[0].args))], grad=False, atol=0, rtol=0),
    row("where_mixed", ("where",), lambda m, c, a, b: m.where(c != 0, a, b), lambda c, a, b: np.where(c != 0, a, b),
        lambda r: [Sample((_bools(r)[0].args[0], *_mixed_pairs(r)[0].args), nondiff=(0,))]),
    row("where_int_scalar", ("where_scalar",), lambda m, c, a: m.where(c != 0, a, 7) + m.where(c != 0, 0.5, a),
        lambda c, a: np.where(c != 0, a, 7) + np.where(c != 0, 0.5, a),
        lambda r: [Sample((_bools(r)[0].args[0], _ints(r)[0].args[0]))], grad=False),
    row("logsumexp_int", ("logsumexp",), lambda m, a: m.logsumexp(a, 1), lambda a: np.log(np.sum(np.exp(a), 1)),
        lambda r: _ints(r)[:1], grad=False),
)


# ---------------------------------------------------------------- int32/bool inputs of the existing arithmetic and reductions
def _int_divisors(r):
    a = r.integers(-9, 10, (3, 4)).astype(np.int32)
    b = r.integers(1, 4, (3, 4)).astype(np.int32) * np.where(r.random((3, 4)) < 0.5, -1, 1).astype(np.int32)
    return [Sample((a, b))]


_ARITH = [("add", lambda m, a, b: a + b, np.add), ("sub", lambda m, a, b: m.sub(a, b), np.subtract),
          ("mul", lambda m, a, b: a * b, np.multiply), ("truediv", lambda m, a, b: a / b, np.true_divide),
          ("floor_divide", lambda m, a, b: a // b, np.floor_divide), ("remainder", lambda m, a, b: a % b, np.remainder),
          ("pow", lambda m, a, b: m.pow(a, b.abs()), lambda a, b: np.power(a, np.abs(b))),
          ("maximum_ii", lambda m, a, b: m.maximum(a, b), np.maximum),
          ("lt", lambda m, a, b: a < b, lambda a, b: (a < b) * 1.0), ("eq", lambda m, a, b: m.eq(a, b), lambda a, b: (a == b) * 1.0)]
register(*[row(f"arith_{n}_int", (), f, ref, _int_divisors, grad=False, atol=0, rtol=1e-7) for n, f, ref in _ARITH])
register(
    row("arith_scalars_int", (), lambda m, a: a * 3 + 2 - (a // 2) + a % 3 + a ** 2,
        lambda a: a * 3 + 2 - np.floor_divide(a, 2) + np.remainder(a, 3) + a ** 2, _ints, grad=False, atol=0, rtol=0),
    row("arith_float_scalars_int", (), lambda m, a: a * 0.5 + a / 2 + (a + 1.5), lambda a: a * 0.5 + a / 2 + (a + 1.5),
        _ints, grad=False),
    row("arith_bool", (), lambda m, a: (a != 0) * (a == 1) + ((a != 0) + (a == 0)) * 2 + (a != 0) * 0.5,
        lambda a: ((a != 0) & (a == 1)) + ((a != 0) | (a == 0)) * 2 + (a != 0) * 0.5, _bools, grad=False),
    row("reductions_int", (), lambda m, a: m.stack([a.sum(), a.amax(), a.amin(), a.argmax(), a.max(), a.min()]),
        lambda a: np.array([a.sum(), a.max(), a.min(), np.argmax(a), a.max(), a.min()]),
        lambda r: _ints(r)[:1], grad=False, atol=0, rtol=0, capturable=False),
    row("reductions_bool", (), lambda m, a: m.stack([(a != 0).sum(), (a != 0).sum(0).amax()]),
        lambda a: np.array([(a != 0).sum(), (a != 0).sum(0).max()]), _bools, grad=False, atol=0, rtol=0,
        capturable=False),
    row("matmul_int", ("matmul",), lambda m, a, b: m.matmul(a, b),
        lambda a, b: np.matmul(a, b),
        lambda r: [Sample((r.integers(-9, 10, sa).astype(np.int32), r.integers(-9, 10, sb).astype(np.int32)))
                   for sa, sb in [((3, 4), (4, 2)), ((4,), (4, 3)), ((2, 3, 4), (4,)), ((2, 1, 3), (3, 2))]],
        grad=False, atol=0, rtol=0),
    row("predicates_int", (), lambda m, a: m.isnan(a) | m.isinf(a) | ~m.isfinite(a) | m.logical_and(a, a > 1),
        lambda a: (a > 1) * 1.0, _ints, grad=False),
)


# ---------------------------------------------------------------- error inputs (raised before ggml, in every mode)
def _o(*s, dtype=np.float64):
    return np.ones(s, dtype)


_F23, _I23, _H23 = _o(2, 3), _o(2, 3, dtype=np.int32), _o(2, 3, dtype=np.float16)
V, T, R = ValueError, TypeError, RuntimeError
errors("tan", bad(T, "tan", _H23))
errors("erf", bad(T, "erf", _H23))
errors("round_decimals", bad(T, "round", _F23, 1.5), bad(T, "round", _I23, 1))
errors("frac", bad(T, "frac", _I23))
errors("nan_to_num", bad(T, "nan_to_num", _F23, fn=lambda a: gg.nan_to_num(a, nan="0")))
errors("atan2", bad(V, "atan2", _F23, _o(3, 2)), bad(T, "atan2", _H23, _F23))
errors("hypot", bad(T, "hypot", _I23, _I23), bad(V, "hypot", _o(2), _o(3)))
errors("logaddexp", bad(T, "logaddexp", _I23, _I23))
errors("fmod_int", bad(R, "ZeroDivisionError", _I23, np.array([1, 0, 2], np.int32)),
       bad(R, "ZeroDivisionError", _I23, fn=lambda a: gg.fmod(a, 0)))
errors("lerp_scalar", bad(T, "lerp", _I23, _I23, 0.5), bad(T, "lerp", _F23, _F23, "w"))
errors("addcdiv", bad(T, "addcdiv", _F23, _I23, _I23), bad(T, "addcdiv", _F23, _F23, _F23, fn=lambda a, b, c: gg.addcdiv(a, b, c, value=None)))
errors("addmm", bad(V, "addmm", _F23, _o(2, 3), _o(2, 3)), bad(V, "addmm", _F23, _o(3), _o(3, 2)),
       bad(V, "addmm", _o(4, 4), _o(2, 3), _o(3, 2)))
errors("baddbmm", bad(V, "baddbmm", _o(2, 3, 5), _o(2, 3, 4), _o(3, 4, 5)), bad(V, "baddbmm", _F23, _o(3, 4), _o(4, 5)))
errors("cumsum", bad(V, "cumsum", _F23, 2), bad(T, "cumsum", _F23, 0.5), bad(T, "cumsum", _H23, 0))
errors("cumprod", bad(V, "cumprod", _F23, -3))
errors("prod", bad(V, "prod", _F23, 2, False), bad(T, "keepdim", _F23, 0, 1))
errors("vector_norm_2", bad(T, "vector_norm", _I23, None, False), bad(T, "ord", _F23, fn=lambda a: gg.linalg.vector_norm(a, "fro")))
errors("linalg_norm_matrix", bad(NotImplementedError, "singular", _F23, "nuc"), bad(V, "1-D or 2-D", _o(2, 2, 2), 1),
       bad(V, "ord", _F23, 3))
errors("norm_fro", bad(NotImplementedError, "norm", _F23, fn=lambda a: a.norm("nuc")))
errors("cdist", bad(V, "columns", _o(3, 2), _o(3, 4), 2.0), bad(V, "non-negative", _o(3, 2), _o(3, 2), -1.0),
       bad(V, "2-D", _o(3), _o(3), 2.0))
errors("argsort", bad(V, "argsort", _F23, 2, False), bad(T, "argsort", _F23, 0, 1), bad(T, "argsort", _H23, 0, False),
       bad(V, "stable", _o(2, 3000), fn=lambda a: gg.argsort(a, stable=True)))
errors("topk", bad(V, "topk", _F23, 4, 1, True), bad(V, "topk", _F23, -1, 1, True), bad(T, "topk", _F23, 1.0, 1, True),
       bad(V, "topk", _F23, 1, 2, True))
errors("kthvalue", bad(V, "kthvalue", _F23, 0, 1), bad(V, "kthvalue", _F23, 4, 1))
errors("matmul_int", bad(T, "matmul", _I23, _o(3, 2)), bad(T, "matmul", _F23, _o(3, 2, dtype=np.int32)))
errors("median", bad(V, "median", _F23, 2, False), bad(V, "median", _o(0), fn=lambda a: a.median()))
