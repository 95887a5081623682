"""More elementwise math, torch's names and results: tan, log1p, expm1, erf, log2, log10, rsqrt,
ceil, trunc, round, frac, nan_to_num, atan2, hypot, logaddexp.

ggml has kernels for tan's sin/cos, ceil, trunc and log; it has none for erf or atan, and its
expm1 is ``expf(x) - 1`` (inaccurate near 0) and its round rounds halves away from zero (torch:
to even). Those are composed in the graph from ggml's vectorised ops, accurate to a few float32
ulp (erf: 2e-7 absolute, a polynomial fitted in float64; atan: 1e-9 relative before rounding).
NaN and ±inf give torch's results (select_node keeps an inf/NaN of a branch not taken out).
"""
from __future__ import annotations

import math

from .._ggml import lib
from ..engine import float32
from .decl import expose
from .elementwise import (FLT_MAX, _cmp_from_diff, _signbit01, branch_parts, full_node, infer_integral,
                          infer_unary, is_number01, nan_or_zero, scalar_parts, select_node)
from .registry import define, float_compute, op, same_device
from .shapes import broadcast_shapes

_MATH = ("method", "function")


def _unary_op(name, backward, doc, example, infer=None, save_output=False, saves=(0,)):
    """Declare a float-only (or, with ``infer``, integral) unary op: int32/bool inputs promote."""
    return define(name, saves=saves, elementwise=True, infer=infer or infer_unary(name), promotes=True,
                  save_output=save_output, backward=backward,
                  expose=expose(name, *_MATH, doc=doc, example=example))


def _zero_grad(g, n):
    """Piecewise-constant ops: a zero gradient, as torch (not None: the input gets zeros)."""
    return op.scale(g, c=0.0)


# ---------------------------------------------------------------- small node helpers
def _eq01(ctx, x, c: float):
    """1.0 where x == c (NaN: 0), else 0.0."""
    return _cmp_from_diff(ctx, lib.scale_bias(ctx, x, 1.0, -c), x, "eq")


def _isinf01(ctx, x):
    return lib.step(ctx, lib.scale_bias(ctx, lib.abs(ctx, x), 1.0, -FLT_MAX))


def _isnan01(ctx, x):
    return lib.scale_bias(ctx, is_number01(ctx, x), -1.0, 1.0)


def _pick(ctx, cond01, a, b):
    """a where cond01 else b, for finite a and b (exact: a*1 + b*0)."""
    return select_node(ctx, cond01, (a, None), (b, None))


def _horner(ctx, u, coeffs):
    """sum(coeffs[k] * u**k) in float32, highest power first."""
    r = lib.scale_bias(ctx, u, coeffs[-1], coeffs[-2])
    for c in reversed(coeffs[:-2]):
        r = lib.scale_bias(ctx, lib.mul(ctx, r, u), 1.0, c)
    return r


# ---------------------------------------------------------------- tan, rsqrt, log2, log10
@_unary_op("tan", lambda g, n: op.mul(g, op.add_scalar(op.square(n.output), c=1.0)), save_output=True, saves=(),
           doc="Tangent of x (radians), elementwise (sin(x) / cos(x)).",
           example=">>> gg.tan(gg.tensor([0.0])).tolist()\n[0.0]")
def _tan(ctx, nodes, inputs, out):
    x = nodes[0]
    return lib.div(ctx, lib.sin(ctx, x), lib.cos(ctx, x))


@_unary_op("rsqrt", lambda g, n: op.mul(op.scale(g, c=-0.5), op.mul(n.output, op.square(n.output))),
           save_output=True, saves=(), doc="1 / sqrt(x) elementwise (inf at 0, -inf at -0, NaN below 0, as torch).",
           example=">>> gg.rsqrt(gg.tensor([4.0])).tolist()\n[0.5]")
def _rsqrt(ctx, nodes, inputs, out):
    x = nodes[0]
    return lib.div(ctx, lib.fill(ctx, x, 1.0), lib.sqrt(ctx, x))


_LN2, _LN10 = math.log(2.0), math.log(10.0)


@_unary_op("log2", lambda g, n: op.div(op.scale(g, c=1.0 / _LN2), n.inputs[0]),
           doc="Base-2 logarithm elementwise (log(x) / ln 2: within 2 ulp).",
           example=">>> gg.log2(gg.tensor([0.5])).tolist()\n[-1.0]")
def _log2(ctx, nodes, inputs, out):
    return lib.scale(ctx, lib.log(ctx, nodes[0]), 1.0 / _LN2)


@_unary_op("log10", lambda g, n: op.div(op.scale(g, c=1.0 / _LN10), n.inputs[0]),
           doc="Base-10 logarithm elementwise (log(x) / ln 10: within 2 ulp).",
           example=">>> gg.log10(gg.tensor([1.0])).tolist()\n[0.0]")
def _log10(ctx, nodes, inputs, out):
    return lib.scale(ctx, lib.log(ctx, nodes[0]), 1.0 / _LN10)


# ---------------------------------------------------------------- log1p, expm1 (accurate near 0)
def log1p_node(ctx, x):
    """log(1 + x) accurate for small x: log(u) * x / (u - 1) with u = 1 + x rounded (the rounding
    error of u cancels); x itself where u == 1 or x is ±inf (log1p(-0.0) is -0.0)."""
    u = lib.scale_bias(ctx, x, 1.0, 1.0)
    d = lib.scale_bias(ctx, u, 1.0, -1.0)
    r = lib.mul(ctx, lib.log(ctx, u), lib.div(ctx, x, d))
    use_x = lib.add(ctx, _eq01(ctx, d, 0.0), _eq01(ctx, x, math.inf))      # log1p(-inf) is NaN: log(-inf)
    return select_node(ctx, use_x, branch_parts(ctx, x), branch_parts(ctx, r), signed_zeros=True)


@_unary_op("log1p", lambda g, n: op.div(g, op.add_scalar(n.inputs[0], c=1.0)),
           doc="log(1 + x) elementwise, accurate for small x (-inf at -1, NaN below).",
           example=">>> gg.log1p(gg.tensor([0.0])).tolist()\n[0.0]")
def _log1p(ctx, nodes, inputs, out):
    return log1p_node(ctx, nodes[0])


@_unary_op("expm1", lambda g, n: op.mul(g, op.add_scalar(n.output, c=1.0)), save_output=True, saves=(),
           doc="exp(x) - 1 elementwise, accurate for small x (ggml's expm1 is expf(x) - 1: not used).",
           example=">>> gg.expm1(gg.tensor([0.0])).tolist()\n[0.0]")
def _expm1(ctx, nodes, inputs, out):
    """Kahan's expm1: (u - 1) * x / log(u) with u = exp(x) rounded; x where u == 1, u itself where it
    is +inf (overflow), -1 where u == 0 (x below about -104, and -inf)."""
    x = nodes[0]
    u = lib.exp(ctx, x)
    um1 = lib.scale_bias(ctx, u, 1.0, -1.0)
    r = lib.mul(ctx, um1, lib.div(ctx, x, lib.log(ctx, u)))        # (u - 1) * x would overflow first
    r = select_node(ctx, _eq01(ctx, u, 1.0), branch_parts(ctx, x), branch_parts(ctx, r), signed_zeros=True)
    r = select_node(ctx, _eq01(ctx, u, math.inf), scalar_parts(ctx, u, math.inf), branch_parts(ctx, r),
                    signed_zeros=True, const_signs=(0.0, None))
    return select_node(ctx, _eq01(ctx, u, 0.0), scalar_parts(ctx, u, -1.0), branch_parts(ctx, r), signed_zeros=True,
                       const_signs=(1.0, None))


# ---------------------------------------------------------------- erf (no ggml kernel)
# erf(x) = x * P(x^2) on |x| <= 1; 1 - exp(-x^2) * Q(s) above, s = (1/|x| - 0.625) / 0.375 in
# [-1, 1] for |x| in [1, 4] (erf(4) rounds to 1 in float32). Least-squares fits in float64 on
# Chebyshev points: relative errors 4e-11 (P) and 1e-9 (Q); float32 evaluation: below 2e-7 absolute.
_ERF_P = (1.1283791670822938, -0.3761263859041862, 0.11283784111142167, -0.0268655173826249,
          0.005221261272129949, -0.0008487263837968777, 0.0001128814227172389, -9.728304186067901e-06)
_ERFC_Q = (0.30595299230584044, 0.14335640792926602, -0.024243013002831316, 0.00230815232585493,
           0.00046136020536687353, -0.00034885208849976933, 0.00012022541805982447, -2.6389161183003723e-05,
           1.7711595266590653e-06, 2.12276411795645e-06, -1.819041903692417e-06, 6.176008291322923e-07)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _erf_backward(g, n):
    x = n.inputs[0]
    return op.mul(g, op.scale(op.exp(op.neg(op.square(x))), c=_TWO_OVER_SQRT_PI))


@_unary_op("erf", _erf_backward, doc="The error function elementwise (composed in the graph: within 2e-7).",
           example=">>> gg.erf(gg.tensor([0.0])).tolist()\n[0.0]")
def _erf(ctx, nodes, inputs, out):
    x = nodes[0]
    xn = lib.clamp(ctx, lib.dup(ctx, x), -1.0, 1.0)           # the inner branch stays finite everywhere
    near = lib.mul(ctx, xn, _horner(ctx, lib.sqr(ctx, xn), _ERF_P))
    # ggml_clamp works in place: clamp a copy. NaN becomes a bound (the NaN is added back below).
    ax = lib.clamp(ctx, lib.dup(ctx, lib.abs(ctx, x)), 1.0, 4.0)
    s = lib.scale_bias(ctx, lib.div(ctx, lib.fill(ctx, ax, 1.0), ax), 1.0 / 0.375, -0.625 / 0.375)
    tail = lib.mul(ctx, lib.exp(ctx, lib.neg(ctx, lib.sqr(ctx, ax))), _horner(ctx, s, _ERFC_Q))
    far = lib.mul(ctx, lib.sgn(ctx, x), lib.scale_bias(ctx, tail, -1.0, 1.0))
    inner = lib.step(ctx, lib.scale_bias(ctx, lib.abs(ctx, x), -1.0, 1.0))   # |x| < 1
    r = select_node(ctx, inner, (near, None), (far, None), signed_zeros=True)
    return lib.sub(ctx, r, nan_or_zero(ctx, x))


# ---------------------------------------------------------------- rounding
_unary_op("ceil", _zero_grad, infer=infer_integral("ceil"), saves=(),
          doc="Round toward +inf elementwise (zero gradient, as torch); int32 stays int32.",
          example=">>> gg.ceil(gg.tensor([1.5, -1.5])).tolist()\n[2.0, -1.0]")(
    lambda ctx, nodes, inputs, out: lib.ceil(ctx, nodes[0]))
_unary_op("trunc", _zero_grad, infer=infer_integral("trunc"), saves=(),
          doc="Round toward zero elementwise (zero gradient, as torch); int32 stays int32.",
          example=">>> gg.trunc(gg.tensor([1.5, -1.5])).tolist()\n[1.0, -1.0]")(
    lambda ctx, nodes, inputs, out: lib.trunc(ctx, nodes[0]))


def round_half_even(ctx, x):
    """Round to the nearest integer, halves to even (torch, NumPy): ggml's round takes halves away
    from zero; where x is exactly halfway and that result is odd, step back toward zero. The
    correction is computed on x clamped to ±2**24 (every float32 there is an integer) so ±inf and
    NaN pass through ggml's round untouched; the result has x's sign (round(-0.4) is -0.0)."""
    r = lib.round(ctx, x)
    xc = lib.clamp(ctx, lib.dup(ctx, x), -2.0 ** 24, 2.0 ** 24)
    rc = lib.round(ctx, xc)
    half = _eq01(ctx, lib.abs(ctx, lib.sub(ctx, xc, lib.trunc(ctx, xc))), 0.5)
    odd = lib.sub(ctx, rc, lib.scale(ctx, lib.floor(ctx, lib.scale(ctx, rc, 0.5)), 2.0))     # 1 or 0
    fixed = lib.sub(ctx, r, lib.mul(ctx, lib.mul(ctx, half, odd), lib.sgn(ctx, xc)))
    return lib.mul(ctx, lib.abs(ctx, fixed), lib.scale_bias(ctx, _signbit01(ctx, x), -2.0, 1.0))


def _infer_round(a, decimals=0):
    if isinstance(decimals, bool) or not isinstance(decimals, int):
        raise TypeError(f"round: decimals must be an int, got {decimals!r}")
    shape, dtype = infer_integral("round")(a)
    if decimals != 0 and dtype is not float32:
        raise TypeError(f"round: decimals={decimals} needs a float tensor, got {a.dtype.name} (as torch)")
    return shape, dtype


@define("round", saves=(), elementwise=True, infer=_infer_round, promotes=True, backward=_zero_grad,
        expose=expose("round", *_MATH, doc="Round to ``decimals`` places, halves to even (torch.round; "
                      "decimals != 0 scales by 10**decimals as torch does). Zero gradient.",
                      example=">>> gg.round(gg.tensor([0.5, 1.5, 2.5])).tolist()\n[0.0, 2.0, 2.0]"))
def _round(ctx, nodes, inputs, out, decimals=0):
    x = nodes[0]
    if decimals == 0:
        return round_half_even(ctx, x)
    ten = float(10.0 ** abs(decimals))
    if decimals > 0:        # torch: round(x * 10**d) / 10**d, in float32
        return lib.div(ctx, round_half_even(ctx, lib.scale(ctx, x, ten)), lib.fill(ctx, x, ten))
    return lib.scale(ctx, round_half_even(ctx, lib.div(ctx, x, lib.fill(ctx, x, ten))), ten)


@_unary_op("frac", lambda g, n: g, saves=(),
           doc="x - trunc(x) elementwise (the sign of x; NaN at ±inf, as torch).",
           example=">>> gg.frac(gg.tensor([1.25, -1.25])).tolist()\n[0.25, -0.25]",
           infer=lambda a: (a.shape, _float_only("frac", a)))
def _frac(ctx, nodes, inputs, out):
    x = nodes[0]
    return lib.sub(ctx, x, lib.trunc(ctx, x))


def _float_only(name, *xs):
    """torch's ops with no integer kernel (frac, hypot, logaddexp): a TypeError unless some input is
    float32 (another int32/bool input then promotes, as torch); float16/bfloat16 refused."""
    float_compute(name, *xs)
    if not any(x.dtype is float32 for x in xs):
        kinds = ", ".join(x.dtype.name for x in xs)
        raise TypeError(f"{name}: not implemented for {kinds} tensors (as in torch); cast with .float()")
    return float32


# ---------------------------------------------------------------- nan_to_num
def _infer_nan_to_num(a, nan=0.0, posinf=None, neginf=None):
    for k, v in (("nan", nan), ("posinf", posinf), ("neginf", neginf)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise TypeError(f"nan_to_num: `{k}` must be a real number or None, got {v!r}")
    shape, dtype = infer_integral("nan_to_num", a.dtype)(a)
    return shape, dtype


def _nan_to_num_backward(g, n):
    x = n.inputs[0]
    return op.where_scalar(op.isfinite(x), g, c=0.0, finite=True)


@define("nan_to_num", saves=(0,), elementwise=True, infer=_infer_nan_to_num, promotes=True,
        backward=_nan_to_num_backward,
        expose=expose("nan_to_num", *_MATH, doc="NaN, +inf and -inf replaced by ``nan``, ``posinf`` and "
                      "``neginf`` (default 0, float32's largest and lowest finite values, as torch). "
                      "The gradient flows where x is finite.",
                      example=">>> gg.nan_to_num(gg.tensor([float('nan'), 1.0])).tolist()\n[0.0, 1.0]"))
def _nan_to_num(ctx, nodes, inputs, out, nan=0.0, posinf=None, neginf=None):
    x = nodes[0]
    pos = FLT_MAX if posinf is None else float(posinf)
    neg = -FLT_MAX if neginf is None else float(neginf)
    inf = _isinf01(ctx, x)
    negative = lib.step(ctx, lib.neg(ctx, x))
    r = select_node(ctx, _isnan01(ctx, x), scalar_parts(ctx, x, float(nan)), branch_parts(ctx, x), signed_zeros=True,
                    const_signs=(_sign_bit(nan), None))
    r = select_node(ctx, lib.mul(ctx, inf, negative), scalar_parts(ctx, x, neg), branch_parts(ctx, r),
                    signed_zeros=True, const_signs=(_sign_bit(neg), None))
    return select_node(ctx, lib.sub(ctx, inf, lib.mul(ctx, inf, negative)), scalar_parts(ctx, x, pos),
                       branch_parts(ctx, r), signed_zeros=True, const_signs=(_sign_bit(pos), None))


def _sign_bit(c: float) -> float:
    return 1.0 if math.copysign(1.0, float(c)) < 0 and not math.isnan(float(c)) else 0.0


# ---------------------------------------------------------------- atan2, hypot, logaddexp (binary)
def _infer_float_binary(name):
    def infer(a, b):
        same_device(name, a, b)
        return broadcast_shapes(name, a.shape, b.shape), float_compute(name, a, b)
    return infer


def _both(ctx, nodes, inputs, out):
    """Both operands broadcast to the result's shape (contiguous)."""
    return [full_node(ctx, n, x.shape, out.shape) for n, x in zip(nodes, inputs)]


# atan(z) = z * A(z^2) on |z| <= tan(pi/8) (least squares in float64: relative error 6e-10)
_ATAN_A = (0.9999999993919114, -0.3333330748683568, 0.19998210438853845, -0.1423997622842328,
           0.10572764340845951, -0.06033111830929623)
_TAN_PI_8 = math.tan(math.pi / 8)


def _atan01(ctx, t):
    """atan(t) for t in [0, 1]: above tan(pi/8), pi/4 + atan((t - 1) / (t + 1))."""
    near = lib.mul(ctx, t, _horner(ctx, lib.sqr(ctx, t), _ATAN_A))
    z = lib.div(ctx, lib.scale_bias(ctx, t, 1.0, -1.0), lib.scale_bias(ctx, t, 1.0, 1.0))
    far = lib.scale_bias(ctx, lib.mul(ctx, z, _horner(ctx, lib.sqr(ctx, z), _ATAN_A)), 1.0, math.pi / 4)
    return _pick(ctx, lib.step(ctx, lib.scale_bias(ctx, t, 1.0, -_TAN_PI_8)), far, near)


def _atan2_backward(g, n):
    y, x = n.inputs
    r2 = op.add(op.square(y), op.square(x))
    gy = op.div(op.mul(g, x), r2) if y.requires_grad else None
    gx = op.neg(op.div(op.mul(g, y), r2)) if x.requires_grad else None
    return gy, gx


@define("atan2", saves=(0, 1), elementwise=True, infer=_infer_float_binary("atan2"), promotes=True,
        backward=_atan2_backward, doc="atan2(input, other); public as gg.atan2 / arctan2 (tensor/math_extra.py)")
def _atan2(ctx, nodes, inputs, out):
    y, x = _both(ctx, nodes, inputs, out)
    ay, ax = lib.abs(ctx, y), lib.abs(ctx, x)
    steep = lib.step(ctx, lib.sub(ctx, ay, ax))                       # |y| > |x|
    lo = select_node(ctx, steep, branch_parts(ctx, ax), branch_parts(ctx, ay))
    hi = select_node(ctx, steep, branch_parts(ctx, ay), branch_parts(ctx, ax))
    t = lib.div(ctx, lo, hi)                       # NaN for 0/0 and inf/inf (and NaN inputs: added back)
    both_inf = lib.mul(ctx, _isinf01(ctx, x), _isinf01(ctx, y))
    t = select_node(ctx, _isnan01(ctx, t), (both_inf, None), branch_parts(ctx, t))
    a = _atan01(ctx, t)
    a = _pick(ctx, steep, lib.scale_bias(ctx, a, -1.0, math.pi / 2), a)
    a = _pick(ctx, _signbit01(ctx, x), lib.scale_bias(ctx, a, -1.0, math.pi), a)
    a = lib.mul(ctx, a, lib.scale_bias(ctx, _signbit01(ctx, y), -2.0, 1.0))
    return lib.sub(ctx, lib.sub(ctx, a, nan_or_zero(ctx, x)), nan_or_zero(ctx, y))


def _hypot_backward(g, n):
    a, b = n.inputs
    ga = op.div(op.mul(g, a), n.output) if a.requires_grad else None
    gb = op.div(op.mul(g, b), n.output) if b.requires_grad else None
    return ga, gb


@define("hypot", saves=(0, 1), elementwise=True, promotes=True, infer=lambda a, b: (_infer_float_binary("hypot")(a, b)[0],
                                                                      _float_only("hypot", a, b)),
        save_output=True, backward=_hypot_backward, doc="hypot(input, other) (tensor/math_extra.py: gg.hypot)")
def _hypot(ctx, nodes, inputs, out):
    a, b = _both(ctx, nodes, inputs, out)
    aa, ab = lib.abs(ctx, a), lib.abs(ctx, b)
    steep = lib.step(ctx, lib.sub(ctx, ab, aa))
    lo = select_node(ctx, steep, branch_parts(ctx, aa), branch_parts(ctx, ab))
    hi = select_node(ctx, steep, branch_parts(ctx, ab), branch_parts(ctx, aa))
    t = lib.div(ctx, lo, hi)
    t = select_node(ctx, _isnan01(ctx, t), scalar_parts(ctx, t, 0.0), branch_parts(ctx, t))   # 0/0, inf/inf
    r = lib.mul(ctx, hi, lib.sqrt(ctx, lib.scale_bias(ctx, lib.sqr(ctx, t), 1.0, 1.0)))
    r = lib.sub(ctx, lib.sub(ctx, r, nan_or_zero(ctx, a)), nan_or_zero(ctx, b))     # NaN unless a side is inf
    any_inf = lib.sub(ctx, lib.add(ctx, _isinf01(ctx, a), _isinf01(ctx, b)),
                      lib.mul(ctx, _isinf01(ctx, a), _isinf01(ctx, b)))
    return select_node(ctx, any_inf, scalar_parts(ctx, r, math.inf), branch_parts(ctx, r))


def _logaddexp_backward(g, n):
    a, b = n.inputs
    ga = op.mul(g, op.exp(op.sub(a, n.output))) if a.requires_grad else None
    gb = op.mul(g, op.exp(op.sub(b, n.output))) if b.requires_grad else None
    return ga, gb


@define("logaddexp", saves=(0, 1), elementwise=True, save_output=True, promotes=True, backward=_logaddexp_backward,
        infer=lambda a, b: (_infer_float_binary("logaddexp")(a, b)[0], _float_only("logaddexp", a, b)),
        doc="logaddexp(input, other) (tensor/math_extra.py: gg.logaddexp)")
def _logaddexp(ctx, nodes, inputs, out):
    a, b = _both(ctx, nodes, inputs, out)
    d = lib.sub(ctx, a, b)
    m = select_node(ctx, lib.step(ctx, lib.neg(ctx, d)), branch_parts(ctx, b), branch_parts(ctx, a))
    r = lib.add(ctx, m, log1p_node(ctx, lib.exp(ctx, lib.neg(ctx, lib.abs(ctx, d)))))
    same = _cmp_from_diff(ctx, d, lib.add(ctx, a, b), "eq")              # inf == inf too
    return select_node(ctx, same, branch_parts(ctx, lib.scale_bias(ctx, a, 1.0, _LN2)), branch_parts(ctx, r))
