"""More elementwise math, torch's names and results: tan, log1p, expm1, erf, log2, log10, rsqrt,
ceil, trunc, round, frac, nan_to_num, atan2, hypot, logaddexp.

ggml has kernels for tan's sin/cos, ceil, trunc and log; it has none for erf or atan, and its
expm1 is ``expf(x) - 1`` (inaccurate near 0) and its round rounds halves away from zero (torch:
to even). Those are composed in the graph from ggml's vectorised ops, accurate to a few float32
ulp (erf: 2e-7 absolute, a polynomial fitted in float64; atan: 2e-8 relative before rounding).
NaN and ±inf give torch's results: the binary ops compute on finite stand-ins and restore the
infinities and NaN at the end. One op builder may make at most 96 ggml tensors (the engine's room
per op; tests/test_math_extra.py measures them), which is why these are written node-frugally.
"""
from __future__ import annotations

import math

from .._ggml import lib
from ..engine import float32
from .decl import expose
from .elementwise import (FLT_MAX, _cmp_from_diff, _signbit01, branch_parts, full_node, infer_integral,
                          infer_unary, is_number01, nan_or_zero, select_node)
from .registry import define, float_compute, op, same_device
from .shapes import broadcast_shapes
from ..engine.errors import DTypeError

_MATH = ("method", "function")


def _unary_op(name, backward, doc, example, infer=None, save_output=False, saves=(0,)):
    """Declare a float-only (or, with ``infer``, integral) unary op: int32/bool inputs promote."""
    return define(name, saves=saves, elementwise=True, infer=infer or infer_unary(name), promotes=True,
                  save_output=save_output, backward=backward,
                  expose=expose(name, *_MATH, doc=doc, example=example))


def _zero_grad(g, n):
    """Piecewise-constant ops: a zero gradient, as torch (not None: the input gets zeros; zeros even
    where the incoming gradient is NaN or Inf, which g * 0 would pass on)."""
    return op.fill_like(g, c=0.0)


# ---------------------------------------------------------------- small node helpers
def _eq01(ctx, x, c: float):
    """1.0 where x == c (NaN: 0), else 0.0."""
    return _cmp_from_diff(ctx, lib.scale_bias(ctx, x, 1.0, -c), x, "eq")


def _isnan01(ctx, x):
    return lib.scale_bias(ctx, is_number01(ctx, x), -1.0, 1.0)


def _horner(ctx, u, coeffs):
    """sum(coeffs[k] * u**k) in float32, highest power first."""
    r = lib.scale_bias(ctx, u, coeffs[-1], coeffs[-2])
    for c in reversed(coeffs[:-2]):
        r = lib.scale_bias(ctx, lib.mul(ctx, r, u), 1.0, c)
    return r


def _finite(ctx, x):
    """x with ±inf as ±FLT_MAX (ggml_clamp works in place: on a copy). NaN becomes a bound: the
    callers add NaN back with nan_or_zero."""
    return lib.clamp(ctx, lib.dup(ctx, x), -FLT_MAX, FLT_MAX)


def _posinf01(ctx, x):
    return lib.step(ctx, lib.scale_bias(ctx, x, 1.0, -FLT_MAX))


def _neginf01(ctx, x):
    return lib.step(ctx, lib.scale_bias(ctx, x, -1.0, -FLT_MAX))


def _blow_up(ctx, r, flag01):
    """r where flag01 is 0, r / 0 (±inf by r's sign) where it is 1: an infinite result of a
    computation done on finite stand-ins, in two nodes."""
    return lib.div(ctx, r, lib.sqrt(ctx, lib.scale_bias(ctx, flag01, -1.0, 1.0)))


def _with_sign_of(ctx, r, x):
    """|r| with the sign bit of x (for results whose sign is x's, -0.0 included; NaN stays NaN)."""
    return lib.mul(ctx, lib.abs(ctx, r), lib.scale_bias(ctx, _signbit01(ctx, x), -2.0, 1.0))


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
def _log1p_node(ctx, x):
    """log(1 + x) accurate for small x: log(u) * x / (u - 1) with u = 1 + x rounded (the rounding
    error of u cancels); x itself where u == 1 or x is +inf (log1p(-0.0) is -0.0)."""
    u = lib.scale_bias(ctx, x, 1.0, 1.0)
    d = lib.scale_bias(ctx, u, 1.0, -1.0)
    r = lib.mul(ctx, lib.log(ctx, u), lib.div(ctx, x, d))
    use_x = lib.add(ctx, _eq01(ctx, d, 0.0), _eq01(ctx, x, math.inf))      # log1p(-inf) is NaN: log(-inf)
    return select_node(ctx, use_x, branch_parts(ctx, x), branch_parts(ctx, r), signed_zeros=True)


# On a GPU device, log and exp are the device's (GLSL on Vulkan: lavapipe's log is off by up to
# 1.6e-7 absolute near 1, its exp by 6.8e-7 relative), and the cancellation tricks above divide by
# values near 0: log1p(-3.9e-8) came out -6.7e-8, expm1(-1.05e-10) -6.0e-11. There, below
# _SERIES_BELOW in magnitude, the Taylor series (degree 6: truncation below |x|^6 / 7 = 1.5e-12 relative)
# gives both, using only products and sums. The CPU's libm-accurate kernels keep the formulas above.
_SERIES_BELOW = 2.0 ** -6
_LOG1P_SERIES = (1.0, -1.0 / 2, 1.0 / 3, -1.0 / 4, 1.0 / 5, -1.0 / 6)
_EXPM1_SERIES = (1.0, 1.0 / 2, 1.0 / 6, 1.0 / 24, 1.0 / 120, 1.0 / 720)


def _series(ctx, x, coefs):
    """x * (c0 + x * (c1 + ... x * c_last)) by Horner's rule."""
    t = lib.scale(ctx, x, coefs[-1])
    for c in reversed(coefs[1:-1]):
        t = lib.mul(ctx, x, lib.scale_bias(ctx, t, 1.0, c))
    return lib.mul(ctx, x, lib.scale_bias(ctx, t, 1.0, coefs[0]))


def _small_by_series(ctx, x, general, coefs, device):
    """``general`` (the formula for every x), or on a device other than the host the series of
    ``coefs`` where |x| < _SERIES_BELOW: general * (1 - small) + series * small, with the series of x
    clamped to that range (finite: an inf or NaN of ``general`` passes through * 1, the series' * 0
    adds a zero; general is finite where small, and x = -0.0 gives -0.0 + -0.0). NaN is not small."""
    if device.is_host:
        return general
    small = lib.step(ctx, lib.scale_bias(ctx, lib.abs(ctx, x), -1.0, _SERIES_BELOW))
    xs = lib.clamp(ctx, lib.dup(ctx, x), -_SERIES_BELOW, _SERIES_BELOW)
    return lib.add(ctx, lib.mul(ctx, general, lib.scale_bias(ctx, small, -1.0, 1.0)),
                   lib.mul(ctx, _series(ctx, xs, coefs), small))


@_unary_op("log1p", lambda g, n: op.div(g, op.add_scalar(n.inputs[0], c=1.0)),
           doc="log(1 + x) elementwise, accurate for small x (-inf at -1, NaN below).",
           example=">>> gg.log1p(gg.tensor([0.0])).tolist()\n[0.0]")
def _log1p(ctx, nodes, inputs, out):
    return _small_by_series(ctx, nodes[0], _log1p_node(ctx, nodes[0]), _LOG1P_SERIES, inputs[0].device)


@_unary_op("expm1", lambda g, n: op.mul(g, op.add_scalar(n.output, c=1.0)), save_output=True, saves=(),
           doc="exp(x) - 1 elementwise, accurate for small x (ggml's expm1 is expf(x) - 1: not used).",
           example=">>> gg.expm1(gg.tensor([0.0])).tolist()\n[0.0]")
def _expm1(ctx, nodes, inputs, out):
    """Kahan's expm1 on x clamped to [-87, 88.7] (u = exp(x) stays a finite normal number):
    (u - 1) * x / log(u), and x itself where u rounds to 1. Below -87 that is -1 to float32; above
    log(FLT_MAX) the result is +inf (r / 0); the sign is x's (expm1(-0.0) is -0.0); NaN added back."""
    x = nodes[0]
    xc = lib.clamp(ctx, lib.dup(ctx, x), -87.0, 88.7)
    u = lib.exp(ctx, xc)
    um1 = lib.scale_bias(ctx, u, 1.0, -1.0)
    one = lib.scale_bias(ctx, lib.step(ctx, lib.abs(ctx, um1)), -1.0, 1.0)        # u == 1
    r = lib.mul(ctx, um1, lib.div(ctx, xc, lib.add(ctx, lib.log(ctx, u), one)))    # 0 where u == 1
    r = lib.add(ctx, r, lib.mul(ctx, one, xc))
    r = _blow_up(ctx, r, lib.step(ctx, lib.scale_bias(ctx, x, 1.0, -88.72283935546875)))
    general = lib.sub(ctx, _with_sign_of(ctx, r, x), nan_or_zero(ctx, x))
    return _small_by_series(ctx, x, general, _EXPM1_SERIES, inputs[0].device)


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
    """Round to the nearest integer, halves to even (torch, NumPy), without ggml's round: its Vulkan
    kernel rounds 0.49999997 to 1 (floor(x + 0.5) in float32), the CPU's to 0. From x clamped to
    ±2**24 (every float32 there is an integer): t = trunc, f = |x - t| (exact), one step away from
    zero where f > 0.5 or f == 0.5 and t is odd; the result is x minus that exact correction (0
    beyond ±2**24), so ±inf and NaN pass through, with x's sign (round(-0.4) is -0.0)."""
    xc = lib.clamp(ctx, lib.dup(ctx, x), -2.0 ** 24, 2.0 ** 24)
    t = lib.trunc(ctx, xc)
    f = lib.abs(ctx, lib.sub(ctx, xc, t))
    odd = lib.sub(ctx, t, lib.scale(ctx, lib.floor(ctx, lib.scale(ctx, t, 0.5)), 2.0))      # 1 or 0
    away = lib.add(ctx, lib.step(ctx, lib.scale_bias(ctx, f, 1.0, -0.5)), lib.mul(ctx, _eq01(ctx, f, 0.5), odd))
    rc = lib.add(ctx, t, lib.mul(ctx, away, lib.sgn(ctx, xc)))
    fixed = lib.sub(ctx, x, lib.sub(ctx, xc, rc))
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
    """torch's ops with no integer kernel (frac, hypot, logaddexp): a DTypeError (TypeError and RuntimeError) unless some input is
    float32 (another int32/bool input then promotes, as torch); float16/bfloat16 refused."""
    float_compute(name, *xs)
    if not any(x.dtype is float32 for x in xs):
        kinds = ", ".join(x.dtype.name for x in xs)
        raise DTypeError(f"{name}: not implemented for {kinds} tensors (as in torch); cast with .float()")
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
    finite = op.compare_scalar(op.sub(x, x), kind="eq", c=0.0)      # x - x is NaN at ±inf and NaN
    return op.where_scalar(finite, g, c=0.0, finite=True)


@define("nan_to_num", saves=(0,), elementwise=True, infer=_infer_nan_to_num, promotes=True,
        backward=_nan_to_num_backward,
        expose=expose("nan_to_num", *_MATH, doc="NaN, +inf and -inf replaced by ``nan``, ``posinf`` and "
                      "``neginf`` (default 0, float32's largest and lowest finite values, as torch). "
                      "The gradient flows where x is finite.",
                      example=">>> gg.nan_to_num(gg.tensor([float('nan'), 1.0])).tolist()\n[0.0, 1.0]"))
def _nan_to_num(ctx, nodes, inputs, out, nan=0.0, posinf=None, neginf=None):
    """x * keep + the replacements' flags times their values, on finite stand-ins (a replacement
    value that is itself inf or NaN is restored by :func:`_blow_up` / a NaN term); a zero keeps
    x's sign (adding +0 terms would turn -0.0 into +0.0)."""
    x = nodes[0]
    values = (float(nan), FLT_MAX if posinf is None else float(posinf), -FLT_MAX if neginf is None else float(neginf))
    flags = (_isnan01(ctx, x), _posinf01(ctx, x), _neginf01(ctx, x))
    keep = lib.scale_bias(ctx, lib.add(ctx, lib.add(ctx, flags[0], flags[1]), flags[2]), -1.0, 1.0)
    r = lib.mul(ctx, keep, _finite(ctx, x))                          # NaN's and inf's stand-ins * 0: 0
    blow, nan_terms = None, None
    for flag, v in zip(flags, values):
        if math.isnan(v):
            nan_terms = flag if nan_terms is None else lib.add(ctx, nan_terms, flag)
            continue
        r = lib.add(ctx, r, lib.scale(ctx, flag, math.copysign(FLT_MAX, v) if math.isinf(v) else v))
        if math.isinf(v):
            blow = flag if blow is None else lib.add(ctx, blow, flag)
    if blow is not None:
        r = _blow_up(ctx, r, blow)
    if nan_terms is not None:
        r = lib.add(ctx, r, lib.sqrt(ctx, lib.neg(ctx, nan_terms)))          # sqrt(-1) = NaN, sqrt(-0) = -0
    zero = lib.scale_bias(ctx, lib.step(ctx, lib.abs(ctx, x)), -1.0, 1.0)   # x is ±0 (NaN too: keep is 0 there)
    r = lib.add(ctx, r, lib.fill(ctx, r, 0.0))                              # r + 0.0: every zero is +0.0 ...
    minus = lib.mul(ctx, lib.mul(ctx, zero, keep), _signbit01(ctx, x))      # ... and -0.0 where x is -0.0
    for flag, v in zip(flags, values):                                      # or the replacement is -0.0
        if v == 0 and math.copysign(1.0, v) < 0:
            minus = lib.add(ctx, minus, flag)
    return lib.mul(ctx, r, lib.scale_bias(ctx, minus, -2.0, 1.0))


# ---------------------------------------------------------------- atan2, hypot, logaddexp (binary)
def _infer_float_binary(name):
    def infer(a, b):
        same_device(name, a, b)
        return broadcast_shapes(name, a.shape, b.shape), float_compute(name, a, b)
    return infer


def _both(ctx, nodes, inputs, out):
    """Both operands broadcast to the result's shape (contiguous)."""
    return [full_node(ctx, n, x.shape, out.shape) for n, x in zip(nodes, inputs)]


# atan(z) = z * A(z^2) on |z| <= tan(pi/8) (least squares in float64: relative error 2e-8)
_ATAN_A = (0.9999999818668752, -0.33332796803807446, 0.1997440019116681, -0.13851428437596475, 0.07984796420632144)
_TAN_PI_8 = math.tan(math.pi / 8)


def _atan01(ctx, t):
    """atan(t) for t in [0, 1]: above tan(pi/8) as pi/4 + atan((t - 1) / (t + 1)), one polynomial."""
    far = lib.step(ctx, lib.scale_bias(ctx, t, 1.0, -_TAN_PI_8))
    z = _pick(ctx, far, lib.div(ctx, lib.scale_bias(ctx, t, 1.0, -1.0), lib.scale_bias(ctx, t, 1.0, 1.0)), t)
    return lib.add(ctx, lib.mul(ctx, z, _horner(ctx, lib.sqr(ctx, z), _ATAN_A)), lib.scale(ctx, far, math.pi / 4))


def _pick(ctx, cond01, a, b):
    """a where cond01 else b, for finite a and b: b + c * (a - b) would round; a*c + b*(1-c) is exact."""
    return lib.add(ctx, lib.mul(ctx, cond01, a), lib.mul(ctx, lib.scale_bias(ctx, cond01, -1.0, 1.0), b))


def _abs_pair(ctx, a, b):
    """(|a|, |b|) as finite stand-ins: when either is ±inf, 1 for the infinite ones and 0 for the
    others (the angle of (inf, 5) is that of (1, 0); of (inf, inf) that of (1, 1))."""
    aa, ab = lib.abs(ctx, a), lib.abs(ctx, b)
    ia, ib = _posinf01(ctx, aa), _posinf01(ctx, ab)
    anyinf = lib.sub(ctx, lib.add(ctx, ia, ib), lib.mul(ctx, ia, ib))
    return (_pick(ctx, anyinf, ia, _finite(ctx, aa)), _pick(ctx, anyinf, ib, _finite(ctx, ab)), anyinf)


def _min_max(ctx, a, b):
    """(min, max) of finite a, b >= 0, exactly."""
    b_larger = lib.step(ctx, lib.sub(ctx, b, a))
    return _pick(ctx, b_larger, a, b), _pick(ctx, b_larger, b, a), b_larger


def _atan2_backward(g, n):
    y, x = n.inputs
    r2 = op.add(op.square(y), op.square(x))
    gy = op.div(op.mul(g, x), r2) if y.requires_grad else None
    gx = op.neg(op.div(op.mul(g, y), r2)) if x.requires_grad else None
    return gy, gx


@define("atan2", saves=(0, 1), elementwise=True, infer=_infer_float_binary("atan2"), promotes=True,
        backward=_atan2_backward, doc="atan2(input, other); public as gg.atan2 / arctan2 (tensor/math_extra.py)")
def _atan2(ctx, nodes, inputs, out):
    """The angle from |y|, |x| (finite stand-ins, :func:`_abs_pair`): atan(min / max) in [0, pi/4],
    reflected to pi/2 - a where |y| > |x|, to pi - a where x's sign bit is set (-0.0 too), negated
    where y's is; NaN in, NaN out. (Kept under the 96 nodes an op builder may make.)"""
    y, x = _both(ctx, nodes, inputs, out)
    ax, ay, _ = _abs_pair(ctx, x, y)
    lo, hi, steep = _min_max(ctx, ax, ay)
    hi = lib.add(ctx, hi, lib.scale_bias(ctx, lib.step(ctx, hi), -1.0, 1.0))       # 0 / 0 → 0 / 1
    a = _atan01(ctx, lib.div(ctx, lo, hi))
    # the reflections a -> c - a as a + flag * (c - 2a): two roundings (< 1.2e-7), three nodes each
    a = lib.add(ctx, a, lib.mul(ctx, steep, lib.scale_bias(ctx, a, -2.0, math.pi / 2)))
    a = lib.add(ctx, a, lib.mul(ctx, _signbit01(ctx, x), lib.scale_bias(ctx, a, -2.0, math.pi)))
    a = lib.mul(ctx, a, lib.scale_bias(ctx, _signbit01(ctx, y), -2.0, 1.0))
    return lib.sub(ctx, a, nan_or_zero(ctx, lib.add(ctx, lib.abs(ctx, x), lib.abs(ctx, y))))   # NaN if either is


def _hypot_backward(g, n):
    a, b = n.inputs
    ga = op.div(op.mul(g, a), n.output) if a.requires_grad else None
    gb = op.div(op.mul(g, b), n.output) if b.requires_grad else None
    return ga, gb


@define("hypot", saves=(0, 1), elementwise=True, promotes=True, infer=lambda a, b: (_infer_float_binary("hypot")(a, b)[0],
                                                                      _float_only("hypot", a, b)),
        save_output=True, backward=_hypot_backward, doc="hypot(input, other) (tensor/math_extra.py: gg.hypot)")
def _hypot(ctx, nodes, inputs, out):
    """max * sqrt(1 + (min / max)**2) on finite stand-ins (no overflow); +inf where either side is
    ±inf (even with a NaN, as C's hypot), else NaN where either is NaN."""
    a, b = _both(ctx, nodes, inputs, out)
    fa, fb, anyinf = _abs_pair(ctx, a, b)
    lo, hi, _ = _min_max(ctx, fa, fb)
    hi_safe = lib.add(ctx, hi, lib.scale_bias(ctx, lib.step(ctx, hi), -1.0, 1.0))   # 0 / 0 → 0 / 1
    t = lib.div(ctx, lo, hi_safe)
    r = lib.mul(ctx, hi, lib.sqrt(ctx, lib.scale_bias(ctx, lib.sqr(ctx, t), 1.0, 1.0)))
    nan = lib.mul(ctx, lib.add(ctx, _isnan01(ctx, a), _isnan01(ctx, b)), lib.scale_bias(ctx, anyinf, -1.0, 1.0))
    r = lib.add(ctx, r, lib.sqrt(ctx, lib.neg(ctx, nan)))                  # sqrt(-1) = NaN, sqrt(-0) = -0
    return _blow_up(ctx, r, anyinf)                                        # 1 / 0 = inf


def _logaddexp_backward(g, n):
    a, b = n.inputs
    ga = op.mul(g, op.exp(op.sub(a, n.output))) if a.requires_grad else None
    gb = op.mul(g, op.exp(op.sub(b, n.output))) if b.requires_grad else None
    return ga, gb


@define("logaddexp", saves=(0, 1), elementwise=True, save_output=True, promotes=True, backward=_logaddexp_backward,
        infer=lambda a, b: (_infer_float_binary("logaddexp")(a, b)[0], _float_only("logaddexp", a, b)),
        doc="logaddexp(input, other) (tensor/math_extra.py: gg.logaddexp)")
def _logaddexp(ctx, nodes, inputs, out):
    """max + log1p(exp(-|a - b|)) on finite stand-ins (log1p by Kahan's trick: e is in [0, 1]);
    +inf where either is +inf, -inf where both are -inf; NaN in, NaN out."""
    a, b = _both(ctx, nodes, inputs, out)
    fa, fb = _finite(ctx, a), _finite(ctx, b)
    m = _pick(ctx, lib.step(ctx, lib.sub(ctx, fb, fa)), fb, fa)
    e = lib.exp(ctx, lib.neg(ctx, lib.abs(ctx, lib.sub(ctx, fa, fb))))
    u = lib.scale_bias(ctx, e, 1.0, 1.0)
    um1 = lib.scale_bias(ctx, u, 1.0, -1.0)
    one = lib.scale_bias(ctx, lib.step(ctx, um1), -1.0, 1.0)                       # u == 1 (e >= 0)
    l1p = lib.add(ctx, lib.mul(ctx, lib.log(ctx, u), lib.div(ctx, e, lib.add(ctx, um1, one))), lib.mul(ctx, one, e))
    r = lib.add(ctx, m, l1p)
    pa, pb = _posinf01(ctx, a), _posinf01(ctx, b)
    infinite = lib.add(ctx, lib.sub(ctx, lib.add(ctx, pa, pb), lib.mul(ctx, pa, pb)),
                       lib.mul(ctx, _neginf01(ctx, a), _neginf01(ctx, b)))
    r = _blow_up(ctx, r, infinite)
    return lib.sub(ctx, lib.sub(ctx, r, nan_or_zero(ctx, a)), nan_or_zero(ctx, b))
