"""OpInfo entries with NaN, ±inf and ±0 inputs: every math op against NumPy float64, with
PyTorch's rule where NumPy differs (``_torch_rule`` references say which).

PyTorch's rules, checked against torch 2.13 (tests/test_nan_semantics.py compares with torch
itself where it is installed): NaN propagates through relu/leaky_relu/clamp/maximum/minimum and
the max/min reductions (a reduced slice holding NaN gives NaN; argmax/argmin give the first NaN);
comparisons with NaN are false (``!=`` true); sign(NaN) = 0; x ** 0.5 is sqrt (NaN at -inf);
logsumexp is NaN with a NaN, +inf with a +inf, -inf when all are -inf; clamp with min > max
gives max, NaN stays NaN. Forward only (grad=False): finite differences mean nothing here;
the gradients at NaN are checked in tests/test_nan_semantics.py.
"""
from __future__ import annotations

import numpy as np

import ggmlgrad as gg
from .opinfo import OpInfo, Sample, register

NAN, INF = np.nan, np.inf
SPECIAL = np.array([NAN, INF, -INF, 0.0, -0.0, 1.5, -2.0, 0.5, -0.25, 7.0])


def _unary(r):
    """The specials as a row, in a 2-D block (merged-row builds) and as a 0-d NaN."""
    block = r.permutation(np.tile(SPECIAL, 3)).reshape(5, 6)
    return [Sample((SPECIAL.copy(),)), Sample((block,)), Sample((np.array(NAN),))]


#: The NaN/±inf/±0 samples of a unary elementwise op (an OpInfo row's ``nonfinite=``).
unary_specials = _unary


def _binary(r):
    """Every pair of specials, plus a broadcast pair (a column against a row)."""
    a, b = np.repeat(SPECIAL, SPECIAL.size), np.tile(SPECIAL, SPECIAL.size)
    return [Sample((a, b)), Sample((SPECIAL.reshape(-1, 1), SPECIAL[::-1].copy())),
            Sample((np.array(NAN), SPECIAL.copy()))]


def _rows(r):
    """Rows: a NaN first/middle/last, several NaNs, ±inf mixes, all -inf, all NaN, and plain numbers."""
    m = np.array([[NAN, 1.0, 2.0, 0.5], [1.0, NAN, INF, 0.0], [-INF, -INF, -INF, -INF], [INF, 1.0, INF, -1.0],
                  [1.0, 2.0, 3.0, -1.0], [INF, -INF, NAN, 0.0], [-INF, 0.0, 1.0, -INF], [3.0, NAN, NAN, 3.0],
                  [NAN, NAN, NAN, NAN], [0.5, 2.0, -1.0, NAN], [-0.0, 0.0, -0.0, 0.0]])
    return [Sample((m, 1, False)), Sample((m.T.copy(), 0, True)), Sample((m, None, False)),
            Sample((m[[0, 4]].reshape(2, 2, 2), (1, 2), False))]


# ---------------------------------------------------------------- references with torch's rules
def _torch_rule_sign(a):
    return np.where(np.isnan(a), 0.0, np.sign(a))


def _torch_rule_pow_half(a):
    """torch computes x ** 0.5 as sqrt and x ** -0.5 as rsqrt: NaN at -inf (NumPy's power: inf, 0)."""
    with np.errstate(invalid="ignore"):
        return np.sqrt(a)


def _torch_rule_lse(a, axis=None, keepdim=False):
    """torch.logsumexp: NaN if the slice holds NaN, else +inf with a +inf, -inf when all are -inf."""
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        m = np.max(a, axis=axis, keepdims=True)
        mf = np.where(np.isfinite(m), m, 0.0)
        r = np.log(np.sum(np.exp(a - mf), axis=axis, keepdims=True)) + mf
        r = np.where(np.isinf(m), m, r)
        r = np.where(np.any(np.isnan(a), axis=axis, keepdims=True), NAN, r)
    return r if keepdim else (np.squeeze(r, axis=axis) if axis is not None else r.reshape(()))


def _np_softmax(x, axis):
    with np.errstate(invalid="ignore"):
        e = np.exp(x - np.max(x, axis=axis, keepdims=True))
        return e / e.sum(axis=axis, keepdims=True)


def _np_log_softmax(x, axis):
    with np.errstate(invalid="ignore"):
        m = np.max(x, axis=axis, keepdims=True)
        return x - m - np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True))


def _np_gelu(x):
    from .opinfo_math import _np_gelu as g
    with np.errstate(invalid="ignore"):
        return g(x)


def _tuple(ax):
    return tuple(ax) if isinstance(ax, list) else ax


def _quiet(f):
    """A NumPy reference with the invalid/overflow warnings of NaN/inf arithmetic silenced."""
    def ref(*a, **k):
        with np.errstate(all="ignore"):
            return f(*a, **k)
    return ref


def _nf(name, covers, fn, ref, samples, **kw):
    return OpInfo(f"{name}_nonfinite", covers, fn, _quiet(ref), samples, grad=False, atol=1e-6, rtol=1e-5, **kw)


_CMP = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "eq": np.equal,
        "ne": np.not_equal}
_OPS = {"lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
        "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b}
_SCALARS = (0.5, 0.0, float("inf"), float("-inf"), float("nan"))

register(
    # ---- arithmetic
    _nf("add", ("add",), lambda a, b: a + b, lambda a, b: a + b, _binary),
    _nf("sub", ("sub",), lambda a, b: a - b, lambda a, b: a - b, _binary),
    _nf("mul", ("mul",), lambda a, b: a * b, lambda a, b: a * b, _binary),
    _nf("div", ("div",), lambda a, b: a / b, lambda a, b: a / b, _binary),
    _nf("pow", ("pow",), lambda a, b: a ** b, np.power, _binary),
    _nf("scalar_ops", ("scale", "add_scalar", "reciprocal"), lambda a: a * 2.5 + (1.5 - a) + 2.0 / a,
        lambda a: a * 2.5 + (1.5 - a) + 2.0 / a, _unary),
    _nf("scale_by_inf", ("scale",), lambda a: a * float("inf"), lambda a: a * INF, _unary),
    # ---- unary math
    *[_nf(n, (n,), f, ref, _unary) for n, f, ref in [
        ("neg", lambda a: -a, np.negative), ("exp", lambda a: a.exp(), np.exp), ("log", lambda a: a.log(), np.log),
        ("sqrt", lambda a: a.sqrt(), np.sqrt), ("abs", abs, np.abs), ("sign", gg.sign, _torch_rule_sign),
        ("floor", gg.floor, np.floor), ("square", lambda a: a.square(), np.square), ("clone", lambda a: a.clone(), np.copy)]],
    *[_nf(f"pow_scalar_{k}", ("pow_scalar",), (lambda p: lambda a: a ** p)(p), (lambda p: lambda a: np.power(a, p))(p), _unary)
      for k, p in [("3", 3), ("4", 4), ("neg2", -2), ("0", 0), ("1", 1), ("frac", 1.7), ("negfrac", -0.3)]],
    # |p| > 64 takes exp(p log|x|): the float32 result overflows to inf where float64 does not
    *[_nf(f"pow_scalar_{k}", ("pow_scalar",), (lambda p: lambda a: a ** p)(p),
          (lambda p: lambda a: np.power(a, p).astype(np.float32))(p), _unary)
      for k, p in [("big_odd", 67), ("big_even", 66), ("big_neg_odd", -67), ("big_frac", 66.5)]],
    _nf("pow_scalar_half", ("pow_scalar",), lambda a: a ** 0.5, _torch_rule_pow_half, _unary),
    _nf("pow_scalar_neg_half", ("pow_scalar",), lambda a: a ** -0.5, lambda a: 1.0 / _torch_rule_pow_half(a), _unary),
    # ---- activations
    _nf("relu", ("relu",), gg.relu, lambda a: np.maximum(a, 0.0), _unary),
    _nf("leaky_relu", ("leaky_relu",), lambda a: gg.leaky_relu(a, 0.2), lambda a: np.where(a > 0, a, 0.2 * a), _unary),
    _nf("leaky_relu_zero_slope", ("leaky_relu",), lambda a: gg.leaky_relu(a, 0.0), lambda a: np.maximum(a, 0.0), _unary),
    _nf("tanh", ("tanh",), gg.tanh, np.tanh, _unary),
    _nf("sigmoid", ("sigmoid",), gg.sigmoid, lambda a: 1 / (1 + np.exp(-a)), _unary),
    _nf("elu", ("elu",), gg.elu, lambda a: np.where(a > 0, a, np.expm1(np.minimum(a, 0))), _unary),
    _nf("elu_alpha", ("elu",), lambda a: a.elu(alpha=0.3), lambda a: np.where(a > 0, a, 0.3 * np.expm1(np.minimum(a, 0))),
        _unary),
    _nf("gelu", ("gelu",), gg.gelu, _np_gelu, _unary),
    _nf("silu", ("silu",), lambda a: a.silu(), lambda a: a / (1 + np.exp(-a)), _unary),
    _nf("softplus", ("softplus",), gg.softplus, lambda a: np.logaddexp(0.0, a), _unary),
    _nf("softplus_threshold", ("softplus",), lambda a: a.softplus(beta=2.0, threshold=3.0),
        lambda a: np.where(2 * a > 3.0, a, np.logaddexp(0.0, 2 * a) / 2), _unary),
    # ---- comparisons, clamp, maximum/minimum, where
    *[_nf(f"cmp_{k}", (k,), _OPS[k], (lambda f: lambda a, b: f(a, b).astype(np.float64))(_CMP[k]), _binary)
      for k in _CMP],
    *[_nf(f"cmp_scalar_{k}", ("compare_scalar",), (lambda f: lambda a: sum(f(a, c) * 2.0 ** i for i, c in enumerate(_SCALARS)))(_OPS[k]),
          (lambda f: lambda a: sum(f(a, c) * 2.0 ** i for i, c in enumerate(_SCALARS)))(_CMP[k]), _unary)
      for k in _CMP],
    _nf("clamp", ("clamp",), lambda a: a.clamp(-0.5, 0.7), lambda a: np.clip(a, -0.5, 0.7), _unary),
    _nf("clamp_min", ("clamp",), lambda a: a.clamp(min=0.2), lambda a: np.maximum(a, 0.2), _unary),
    _nf("clamp_max", ("clamp",), lambda a: a.clamp(max=-0.3), lambda a: np.minimum(a, -0.3), _unary),
    _nf("clamp_inverted", ("clamp",), lambda a: a.clamp(1.0, -1.0), lambda a: np.where(np.isnan(a), NAN, -1.0), _unary),
    _nf("clamp_nan_bound", ("clamp",), lambda a: a.clamp(min=float("nan")) + a.clamp(max=float("nan")),
        lambda a: np.full_like(a, NAN), _unary),
    _nf("clamp_inf_bounds", ("clamp",), lambda a: a.clamp(float("-inf"), float("inf")), np.copy, _unary),
    _nf("clamp_tensor_bounds", ("maximum", "minimum"), lambda a, b: gg.clamp(a, b, b + 1.0),
        lambda a, b: np.minimum(np.maximum(a, b), b + 1.0), _binary),
    _nf("maximum", ("maximum",), gg.maximum, np.maximum, _binary),
    _nf("minimum", ("minimum",), gg.minimum, np.minimum, _binary),
    _nf("where", ("where",), lambda a, b: gg.where(a > b, a, b) + gg.where(b != b, a, b),
        lambda a, b: np.where(a > b, a, b) + np.where(b != b, a, b), _binary),
    _nf("where_scalar", ("where_scalar",), lambda a, b: gg.where(a > b, a, float("nan")) + gg.where(a > b, 1.0, b),
        lambda a, b: np.where(a > b, a, NAN) + np.where(a > b, 1.0, b), _binary),
    # ---- reductions
    _nf("sum", ("sum",), lambda a, ax, kd: a.sum(ax, kd), lambda a, ax, kd: np.sum(a, axis=_tuple(ax), keepdims=kd), _rows),
    _nf("mean", ("mean",), lambda a, ax, kd: a.mean(ax, kd), lambda a, ax, kd: np.mean(a, axis=_tuple(ax), keepdims=kd), _rows),
    _nf("amax", ("amax",), lambda a, ax, kd: a.amax(ax, kd), lambda a, ax, kd: np.max(a, axis=_tuple(ax), keepdims=kd), _rows),
    _nf("amin", ("amin",), lambda a, ax, kd: a.amin(ax, kd), lambda a, ax, kd: np.min(a, axis=_tuple(ax), keepdims=kd), _rows),
    _nf("var", ("var",), lambda a, ax, kd: a.var(ax, keepdim=kd), lambda a, ax, kd: np.var(a, axis=_tuple(ax), ddof=1, keepdims=kd),
        _rows),
    _nf("logsumexp", ("logsumexp",), lambda a, ax, kd: a.logsumexp(ax, kd), _torch_rule_lse, _rows),
    _nf("max_dim", ("extreme_dim", "argmax"), lambda a, ax, kd: a.max(ax, kd)[0] + a.max(ax, kd)[1].float() * 0.5,
        lambda a, ax, kd: np.max(a, axis=ax, keepdims=kd) + np.argmax(a, axis=ax, keepdims=kd) * 0.5,
        lambda r: [s for s in _rows(r) if isinstance(s.args[1], int)]),
    _nf("min_dim", ("extreme_dim", "argmin"), lambda a, ax, kd: a.min(ax, kd)[0] + a.min(ax, kd)[1].float() * 0.5,
        lambda a, ax, kd: np.min(a, axis=ax, keepdims=kd) + np.argmin(a, axis=ax, keepdims=kd) * 0.5,
        lambda r: [s for s in _rows(r) if isinstance(s.args[1], int)]),
    _nf("argmax", ("argmax",), lambda a, ax, kd: a.argmax(ax, kd), lambda a, ax, kd: np.argmax(a, axis=ax, keepdims=kd),
        lambda r: [s for s in _rows(r) if not isinstance(s.args[1], tuple)]),
    _nf("argmin", ("argmin",), lambda a, ax, kd: a.argmin(ax, kd), lambda a, ax, kd: np.argmin(a, axis=ax, keepdims=kd),
        lambda r: [s for s in _rows(r) if not isinstance(s.args[1], tuple)]),
    _nf("softmax", ("softmax",), lambda a, ax, kd: a.softmax(ax if ax is not None else -1),
        lambda a, ax, kd: _np_softmax(a, ax if ax is not None else -1), lambda r: _rows(r)[:3]),
    _nf("log_softmax", ("log_softmax",), lambda a, ax, kd: a.log_softmax(ax if ax is not None else -1),
        lambda a, ax, kd: _np_log_softmax(a, ax if ax is not None else -1), lambda r: _rows(r)[:3]),
)
