"""Elementwise arithmetic with NumPy broadcasting, unary math, comparisons, where."""
from __future__ import annotations

import math

from .._ggml import consts, lib
from ..engine import DType, float32, int32
from ..engine.dtypes import bool_
from . import decl, fast_math
from .build import expand, is_view
from .registry import define, float_compute, op, promote_types, same_device, same_float
from .shapes import broadcast_shapes, numel
from ..engine.errors import DTypeError


# ---------------------------------------------------------------- binary
def _infer_binary(name, check_dtypes=None, out_dtype=float32):
    """Validation of a broadcasting binary op; float32 operands unless ``check_dtypes`` says otherwise."""
    def infer(a, b):
        # The common case first (two float32 tensors of one shape on one device, every check passes):
        # the checks below, with no call (this runs on every binary op).
        if (check_dtypes is None and a.device is b.device and a.dtype is float32 and b.dtype is float32
                and a.shape == b.shape and type(a.shape) is tuple and len(a.shape) <= 4):
            return a.shape, out_dtype
        same_device(name, a, b)
        (check_dtypes or same_float)(name, a, b)
        return broadcast_shapes(name, a.shape, b.shape), out_dtype
    return infer


def _infer_promoting_binary(name):
    """A broadcasting binary op torch keeps integral (maximum, minimum): :func:`.registry.promote_types`."""
    def infer(a, b):
        same_device(name, a, b)
        return broadcast_shapes(name, a.shape, b.shape), promote_types(name, a, b)
    return infer


def full_rows(ctx, node, shape: tuple, s: tuple):
    """A one-element ``node`` (NumPy ``shape``) broadcast against ``s``, as one whole row of ``s``.

    ggml's CPU binary ops run a vectorised loop per row when the broadcast operand has whole rows,
    and a loop with a modulo per element otherwise: x (512x512) * a scalar tensor took 410 µs,
    x * x 48 µs; with the scalar repeated to one row (512 elements), 56 µs. Only for one element:
    ggml's repeat along the first axis is itself a per-element loop, so a column gains nothing.
    """
    if numel(shape) != 1 or len(s) < 2 or s[-1] == 1 or numel(s) == s[-1]:
        return node
    return expand(ctx, node, shape, (1,) * (len(s) - 1) + (s[-1],))


def _binary_builder(fn, commutative: bool):
    def forward(ctx, nodes, inputs, out):
        na, nb = nodes
        a, b = inputs
        s = out.shape
        if a.shape == s:
            return fn(ctx, na, full_rows(ctx, nb, b.shape, s))
        if commutative and b.shape == s:
            return fn(ctx, nb, full_rows(ctx, na, a.shape, s))
        return fn(ctx, expand(ctx, na, a.shape, s), full_rows(ctx, nb, b.shape, s))
    return forward


define("add", saves=(), elementwise=True, infer=_infer_binary("add"),
       backward=lambda g, n: (g, g))(_binary_builder(lib.add, True))
define("sub", saves=(), elementwise=True, infer=_infer_binary("sub"),
       backward=lambda g, n: (g, op.neg(g)))(_binary_builder(lib.sub, False))
define("mul", saves=((0, 1), (1, 0)), elementwise=True, infer=_infer_binary("mul"),
       backward=lambda g, n: (op.mul(g, n.inputs[1]), op.mul(g, n.inputs[0])))(_binary_builder(lib.mul, True))


def _div_backward(g, n):
    a, b = n.inputs
    ga = op.div(g, b)
    gb = op.neg(op.div(op.mul(ga, a), b)) if b.requires_grad else None
    return ga, gb


define("div", saves=(1, (0, 1)), elementwise=True, infer=_infer_binary("div"), backward=_div_backward)(_binary_builder(lib.div, False))


# ---------------------------------------------------------------- scalar forms (no upload: constants are op params)
def infer_unary(name):
    """Validation of a float-only elementwise op whose parameters (if any) are real numbers: the dtype
    policy of the unary math ops (torch's promotion: int32 and bool inputs compute in float32 and give
    float32; float16/bfloat16 are refused with a TypeError naming the op). Declare the op with
    ``promotes=True`` (its builder then sees float32 nodes)."""
    return _infer_unary(name, float_compute)


def infer_integral(name, bool_result=None):
    """Validation of a unary op torch keeps integral (abs, neg, floor, ceil, ...): float32 → float32,
    int32 → int32 (computed in float32: exact below 2**24), bool → ``bool_result`` (a dtype) or, when
    None, a DTypeError (TypeError and RuntimeError; torch raises RuntimeError). Declare the op with ``promotes=True``."""
    def infer(a, **params):
        d = promote_types(name, a)
        if d is bool_:
            if bool_result is None:
                raise DTypeError(f"{name}: not implemented for bool tensors (as in torch); cast with .int() or .float()")
            d = bool_result
        return a.shape, d
    return infer


def _infer_unary(name, policy=same_float):
    def infer(a, **params):
        policy(name, a)
        for k, v in params.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise TypeError(f"{name}: `{k}` must be a real number, got {v!r}")
        return a.shape, float32
    return infer


@define("scale", saves=(), elementwise=True, infer=_infer_unary("scale"), backward=lambda g, n: op.scale(g, c=n.params["c"]))
def _scale(ctx, nodes, inputs, out, c):
    """x * c (IEEE signed zeros on every device: _ggml/api.py's lib.scale)"""
    return lib.scale(ctx, nodes[0], float(c))


@define("add_scalar", saves=(), elementwise=True, infer=_infer_unary("add_scalar"), backward=lambda g, n: g)
def _add_scalar(ctx, nodes, inputs, out, c):
    """x + c. ggml's scale_bias skips a zero bias, but x + 0.0 turns -0.0 into 0.0 (IEEE, torch):
    +0.0 is added as a tensor (x + -0.0 is x, so scale_bias is exact there)."""
    c = float(c)
    if c == 0.0 and math.copysign(1.0, c) > 0:
        return lib.add(ctx, nodes[0], lib.fill(ctx, nodes[0], 0.0))
    return lib.scale_bias(ctx, nodes[0], 1.0, c)


@define("rsub_scalar", saves=(), elementwise=True, infer=_infer_unary("rsub_scalar"), backward=lambda g, n: op.neg(g))
def _rsub_scalar(ctx, nodes, inputs, out, c):
    """c - x in one op (``1.0 - done`` per step: one compute, and a call plan, where neg then
    add_scalar made two). The bits of (-x) + c: scale_bias(x, -1, c) negates exactly and rounds the
    sum once; c = +0.0 is added as a tensor (scale_bias skips a zero bias, and -x + 0.0 turns -0.0
    into 0.0, IEEE and torch), as add_scalar does."""
    c = float(c)
    if c == 0.0 and math.copysign(1.0, c) > 0:
        return lib.add(ctx, lib.neg(ctx, nodes[0]), lib.fill(ctx, nodes[0], 0.0))
    return lib.scale_bias(ctx, nodes[0], -1.0, c)


@define("rdiv_scalar", saves=(0,), elementwise=True, infer=_infer_unary("rdiv_scalar"), save_output=True,
        backward=lambda g, n: op.neg(op.div(op.mul(g, n.output), n.inputs[0])))
def _rdiv_scalar(ctx, nodes, inputs, out, c):
    """c / x"""
    return lib.div(ctx, lib.fill(ctx, nodes[0], float(c)), nodes[0])


# c / x is reciprocal(x) * c, as torch builds it: the backward reads reciprocal's own output, which
# no user can write in place, so writes to x or to c / x after the op leave backward valid (torch).
@define("reciprocal", saves=(), elementwise=True, infer=infer_unary("reciprocal"), save_output=True, promotes=True,
        backward=lambda g, n: op.mul(op.neg(g), op.mul(n.output, n.output)),
        expose=decl.expose("reciprocal", "method", "function", doc="1 / x elementwise.",
                           example=">>> gg.reciprocal(gg.tensor([2.0, -4.0])).tolist()\n[0.5, -0.25]"))
def _reciprocal(ctx, nodes, inputs, out):
    """1 / x"""
    return lib.div(ctx, lib.fill(ctx, nodes[0], 1.0), nodes[0])


@define("fill_like", elementwise=True, infer=lambda a, c: (a.shape, a.dtype if a.dtype.is_float else float32), differentiable=False)
def _fill_like(ctx, nodes, inputs, out, c):
    """A tensor of ``a``'s shape filled with ``c`` (built on the device: no upload); float16/bfloat16
    inputs give a result of their own dtype, int32 inputs a float32 one."""
    n = nodes[0]
    if inputs[0].dtype is not float32:
        n = lib.cast(ctx, n, consts.TYPE_F32)
    r = lib.fill(ctx, n, float(c))
    return r if out.dtype is float32 else lib.cast(ctx, r, out.dtype.ggml_type)


# ---------------------------------------------------------------- unary math
def _unary(name, fn, backward, save_output=False, expose=None, saves=None, infer=None):
    define(name, infer=infer or infer_unary(name), backward=backward, save_output=save_output, elementwise=True,
           saves=saves, expose=expose, promotes=True)(lambda ctx, nodes, inputs, out: fn(ctx, nodes[0]))


_MATH = ("method", "function")
_unary("neg", lib.neg, lambda g, n: op.neg(g), saves=(), infer=infer_integral("neg"), expose=decl.expose(
    "neg", *_MATH, doc="-x elementwise.", example=">>> gg.neg(gg.tensor([1.0, -2.0])).tolist()\n[-1.0, 2.0]"))
_unary("exp", fast_math.exp, lambda g, n: op.mul(g, n.output), save_output=True, saves=(), expose=decl.expose(
    "exp", *_MATH, doc="e**x elementwise.", example=">>> gg.exp(gg.tensor([0.0])).tolist()\n[1.0]"))
_unary("log", lib.log, lambda g, n: op.div(g, n.inputs[0]), saves=(0,), expose=decl.expose(
    "log", *_MATH, doc="Natural logarithm elementwise (-inf at 0, NaN below, as torch).",
    example=">>> gg.log(gg.tensor([1.0])).tolist()\n[0.0]"))
_unary("sqrt", lib.sqrt, lambda g, n: op.div(op.scale(g, c=0.5), n.output), save_output=True, saves=(), expose=decl.expose(
    "sqrt", *_MATH, doc="Square root elementwise (NaN below 0, as torch).",
    example=">>> gg.sqrt(gg.tensor([4.0])).tolist()\n[2.0]"))
_unary("abs", lib.abs, lambda g, n: op.mul(g, op.sign(n.inputs[0])), saves=(0,), infer=infer_integral("abs"),
       expose=decl.expose(
    "abs", *_MATH, doc="|x| elementwise (gradient sign(x): 0 at 0, as torch).",
    example=">>> gg.abs(gg.tensor([-1.5])).tolist()\n[1.5]", dunder=("__abs__",)))
_unary("sign", lib.sgn, lambda g, n: None, saves=(), infer=infer_integral("sign", bool_), expose=decl.expose(
    "sign", *_MATH, doc="-1, 0 or 1 by the sign of x (0 for NaN, as torch); no gradient flows.",
    example=">>> gg.sign(gg.tensor([-3.0, 0.0, 2.0])).tolist()\n[-1.0, 0.0, 1.0]"))
_unary("floor", lib.floor, lambda g, n: None, saves=(), infer=infer_integral("floor"), expose=decl.expose(   # piecewise constant: no gradient, as in torch
    "floor", *_MATH, doc="Round toward -inf (no gradient flows through it).",
    example=">>> gg.floor(gg.tensor([1.5, -1.5])).tolist()\n[1.0, -2.0]"))
_unary("square", lib.sqr, lambda g, n: op.mul(op.scale(g, c=2.0), n.inputs[0]), saves=(0,),
       infer=infer_integral("square", int32), expose=decl.expose(
    "square", *_MATH, doc="x * x elementwise.", example=">>> gg.square(gg.tensor([3.0])).tolist()\n[9.0]"))
def _infer_clone(a):
    """Any dtype (bool, int32, the half types too): a copy keeps its source's dtype, as in torch."""
    return a.shape, a.dtype


define("clone", saves=(), infer=_infer_clone, backward=lambda g, n: g, elementwise=True, expose=decl.expose(
    "clone", "method", doc="A copy with its own memory (same dtype); gradients flow back to the original.",
    example=">>> x = gg.tensor([1.0]); x.clone().tolist()\n[1.0]"))(lambda ctx, nodes, inputs, out: lib.cont(ctx, nodes[0]))


def _pow_scalar_backward(g, n):
    p = float(n.params["p"])
    if p == 0:
        return op.fill_like(g, c=0.0)       # d/dx x**0 = 0, as torch: zeros even where g is NaN or Inf
    if p == 1:
        return g
    return op.mul(op.scale(g, c=p), op.pow_scalar(n.inputs[0], p=p - 1))


def _int_power(ctx, x, k: int):
    """x**k for an integer k >= 1 by repeated squaring (exact sign, zero and inf handling)."""
    result, base = None, x
    while k:
        if k & 1:
            result = base if result is None else lib.mul(ctx, result, base)
        k >>= 1
        if k:
            base = lib.sqr(ctx, base)
    return result


def _eq_const(ctx, x, c: float):
    """1.0 where x == c (IEEE: NaN never equal), else 0.0."""
    return _cmp_from_diff(ctx, lib.scale_bias(ctx, x, 1.0, -c), x, "eq")


def _signbit01(ctx, x):
    """1.0 where x is negative, -0.0 and -inf included (x + 1/x < 0: 1/-0 = -inf), else 0.0 (NaN: 0)."""
    return lib.step(ctx, lib.neg(ctx, lib.add(ctx, x, lib.div(ctx, lib.fill(ctx, x, 1.0), x))))


def _negative_finite01(ctx, x):
    """1.0 where -inf < x < 0, else 0.0: a real power of such an x with a non-integer exponent is NaN."""
    return lib.sub(ctx, lib.step(ctx, lib.neg(ctx, x)), lib.step(ctx, lib.scale_bias(ctx, x, -1.0, -FLT_MAX)))


def _nan_where(ctx, flag01):
    """NaN where ``flag01`` is 1, else 0: sqrt(-1) or sqrt(-0)."""
    return lib.sqrt(ctx, lib.scale(ctx, flag01, -1.0))


def _pow_magnitude(ctx, x, p):
    """exp(p * log|x|) with C's pow rules for the magnitude: the product is 0 (the result 1) where
    |x| == 1 or p == 0, whatever the other side (inf, NaN). ``p`` a node or a Python float."""
    la = lib.log(ctx, lib.abs(ctx, x))
    if isinstance(p, float):
        if p == 0:
            return lib.fill(ctx, x, 1.0)
        prod = lib.scale(ctx, la, p)
        trivial = _eq_const(ctx, la, 0.0)
    else:
        prod = lib.mul(ctx, la, p)
        e1, e2 = _eq_const(ctx, la, 0.0), _eq_const(ctx, p, 0.0)
        trivial = lib.sub(ctx, lib.add(ctx, e1, e2), lib.mul(ctx, e1, e2))      # e1 or e2
    zero = scalar_parts(ctx, trivial, 0.0)
    return fast_math.exp(ctx, select_node(ctx, trivial, zero, branch_parts(ctx, prod)))


def _pow_general(ctx, x, p):
    """x ** p with C pow (= torch) semantics for any sign, zero, inf and NaN: the magnitude from
    exp(p log|x|), the sign -1 for negative x (-0, -inf too) and odd integer p, NaN for finite
    negative x and non-integer p. ``p`` a node (same shape as x) or a Python float."""
    mag = _pow_magnitude(ctx, x, p)
    if isinstance(p, float):
        is_int = p.is_integer() or math.isinf(p)
        odd = p.is_integer() and abs(p) < 2 ** 53 and int(p) % 2 == 1
        r = lib.mul(ctx, mag, lib.scale_bias(ctx, _signbit01(ctx, x), -2.0, 1.0)) if odd else mag
        return r if is_int else lib.add(ctx, r, _nan_where(ctx, _negative_finite01(ctx, x)))
    fl = lib.floor(ctx, p)
    is_int = _cmp_from_diff(ctx, lib.sub(ctx, fl, p), lib.add(ctx, fl, p), "eq")     # inf counts
    half = lib.scale(ctx, p, 0.5)
    odd = _eq_const(ctx, lib.sub(ctx, half, lib.floor(ctx, half)), 0.5)
    sign = lib.scale_bias(ctx, lib.mul(ctx, _signbit01(ctx, x), odd), -2.0, 1.0)
    nan_part = _nan_where(ctx, lib.mul(ctx, _negative_finite01(ctx, x), lib.scale_bias(ctx, is_int, -1.0, 1.0)))
    return lib.add(ctx, lib.mul(ctx, mag, sign), nan_part)


def _infer_value_with_grad_of(value, like):
    same_float("value_with_grad_of", value, like)
    if value.shape != like.shape:
        raise ValueError(f"value_with_grad_of: shapes {value.shape} and {like.shape} differ")
    return value.shape, float32


# value's values with like's gradient (remainder: exact values, torch's gradient of a - q*b)
@define("value_with_grad_of", saves=(), elementwise=True, infer=_infer_value_with_grad_of,
        backward=lambda g, n: (None, g))
def _value_with_grad_of(ctx, nodes, inputs, out):
    return lib.cont(ctx, nodes[0])


@define("pow_scalar", saves=(0,), elementwise=True, infer=_infer_unary("pow_scalar"), backward=_pow_scalar_backward)
def _pow_scalar(ctx, nodes, inputs, out, p):
    """x ** p (p a Python number), as torch: integer p (|p| <= 64) multiplies (exact signs, zeros
    and infs); p = ±0.5 is sqrt / rsqrt (NaN at -inf, as torch); other p go through :func:`_pow_general`."""
    x = nodes[0]
    p = float(p)
    if p == 0:
        return lib.fill(ctx, x, 1.0)
    if p == 1:
        return lib.cont(ctx, x)
    if p == 0.5:
        return lib.sqrt(ctx, x)
    if p == -0.5:                       # torch's rsqrt: NaN at -inf, -inf at -0 (C pow: 0 and +inf)
        return lib.div(ctx, lib.fill(ctx, x, 1.0), lib.sqrt(ctx, x))
    if p.is_integer() and abs(p) <= 64:
        r = _int_power(ctx, x, int(abs(p)))
        if p < 0:
            return lib.div(ctx, lib.fill(ctx, x, 1.0), r)
        return lib.cont(ctx, r) if r is x else r
    return _pow_general(ctx, x, p)


def _pow_backward(g, n):
    """torch's rules: d/da = b * a ** (b - 1), 0 where b == 0; d/db = a ** b * log a, 0 where a == 0 and
    b >= 0 (b * out / a and out * log 0 would be NaN at a == 0)."""
    a, b = n.inputs
    out = n.output
    ga = gb = None
    if a.requires_grad:
        da = op.mul(b, op.pow(a, op.add_scalar(b, c=-1.0)))
        ga = op.mul(g, op.where_scalar(op.compare_scalar(b, kind="eq", c=0.0), da, c=0.0, tensor_if_true=False))
    if b.requires_grad:
        log_a = op.log(a)
        safe_log = op.where_scalar(op.compare_scalar(a, kind="eq", c=0.0), log_a, c=0.0, tensor_if_true=False)
        gb = op.where(op.compare_scalar(b, kind="ge", c=0.0), op.mul(g, op.mul(out, safe_log)),
                      op.mul(g, op.mul(out, log_a)))
    return ga, gb


def _rpow_backward(g, n):
    """g * (c ** x * log c) (torch's pow(Scalar, Tensor) rule: 0 where c == 0 and x >= 0)."""
    c, x = float(n.params["c"]), n.inputs[0]
    log_c = math.log(c) if c > 0 else (-math.inf if c == 0 else math.nan)
    grad = op.mul(g, op.scale(n.output, c=log_c))
    if c == 0:
        grad = op.where_scalar(op.compare_scalar(x, kind="ge", c=0.0), grad, c=0.0, tensor_if_true=False)
    return grad


@define("rpow_scalar", saves=(0,), elementwise=True, infer=_infer_unary("rpow_scalar"), save_output=True,
        backward=_rpow_backward)
def _rpow_scalar(ctx, nodes, inputs, out, c):
    """c ** x (c a Python number) with C pow's (torch's) results for every base: a positive base is
    exp(x log c) with log c in float64; 1 ** x is 1 (NaN too); zero, negative, inf and NaN bases
    take :func:`_pow_general`'s rules (exact signs for integer x, NaN for other x)."""
    x, c = nodes[0], float(c)
    if c == 1.0:
        return lib.fill(ctx, x, 1.0)
    if 0 < c < math.inf:
        return fast_math.exp(ctx, lib.scale(ctx, x, math.log(c)))
    return _pow_general(ctx, lib.fill(ctx, x, c), x)


@define("pow", elementwise=True, infer=_infer_binary("pow"), backward=_pow_backward, save_output=True)
def _pow(ctx, nodes, inputs, out):
    """a ** b for tensors with torch's (C pow's) results for negative bases, zeros, infs and NaN."""
    na, nb = nodes
    a, b = inputs
    return _pow_general(ctx, full_node(ctx, na, a.shape, out.shape), full_node(ctx, nb, b.shape, out.shape))



def _infer_cast(a, dtype):
    if not isinstance(dtype, DType):
        raise TypeError(f"cast: dtype must be a ggmlgrad dtype, got {dtype!r}")
    return a.shape, dtype


def _cast_backward(g, n):
    return op.cast(g, dtype=n.inputs[0].dtype) if n.inputs[0].dtype.is_float else None


@define("cast", saves=(), elementwise=True, infer=_infer_cast, backward=_cast_backward)
def _cast(ctx, nodes, inputs, out, dtype):
    """Convert to another dtype. ggml's CPU copy has no float16/bfloat16 ↔ int32 kernels (it aborts):
    those go through float32. float → int32 truncates toward zero."""
    src = inputs[0].dtype
    node = nodes[0]
    if dtype is bool_:          # non-zero (NaN too) → 1.0, as torch's .bool()
        return nonzero01(ctx, _as_f32(ctx, node, src))
    if src is bool_:
        src = float32           # its storage
    if src is not dtype and float32 not in (src, dtype) and int32 in (src, dtype):
        node = lib.cast(ctx, node, consts.TYPE_F32)
    return lib.cast(ctx, node, dtype.ggml_type)


# ---------------------------------------------------------------- selection helpers (shared with reduce/activation)
FLT_MAX = 3.4028234663852886e38


def full_node(ctx, node, shape: tuple, out_shape: tuple):
    """``node`` broadcast to ``out_shape`` as a contiguous tensor (a repeat when shapes differ)."""
    r = expand(ctx, node, shape, out_shape)
    return r if r is not node else (lib.cont(ctx, node) if is_view(node) else node)


def nonzero01(ctx, node):
    """1.0 where ``node`` is non-zero, else 0.0. NaN is non-zero (``bool(nan)`` is True, as torch's
    ``.bool()``): step(|x|) misses it (NaN > 0 is false), so the NaN indicator 1 - [|x| + 1 > 0]
    is added."""
    ax = lib.abs(ctx, node)
    nan01 = lib.scale_bias(ctx, lib.step(ctx, lib.scale_bias(ctx, ax, 1.0, 1.0)), -1.0, 1.0)
    return lib.add(ctx, lib.step(ctx, ax), nan01)


def is_number01(ctx, node):
    """1.0 where ``node`` is a number (±inf included), 0.0 where NaN: |x| + 1 > 0 fails only for NaN."""
    return lib.step(ctx, lib.scale_bias(ctx, lib.abs(ctx, node), 1.0, 1.0))


def nan_or_zero(ctx, node):
    """NaN where ``node`` is NaN, else 0 (±inf too): sqrt(number01 - 1) is sqrt(0) or sqrt(-1).
    Added to a result whose ggml kernel dropped a NaN input (MIN/MAX, ``x > 0 ? x : 0``), it
    restores it. Subtract it (r - 0 keeps a -0.0 r; r + 0 would not). Vectorised ops only (a tanh-based
    form was 20x slower)."""
    return lib.sqrt(ctx, lib.scale_bias(ctx, is_number01(ctx, node), 1.0, -1.0))


def branch_parts(ctx, x, finite: bool = False):
    """(x with ±inf/NaN replaced by finite values, code) for :func:`select_node`; code is 0 where x is
    finite, 1 where ±inf, 2 where NaN (None when x is known to be finite)."""
    if finite:
        return x, None
    xs = lib.clamp(ctx, lib.dup(ctx, x), -FLT_MAX, FLT_MAX)   # ±inf → ±FLT_MAX, NaN → a finite bound
    ax = lib.abs(ctx, x)
    nan2 = lib.scale_bias(ctx, lib.step(ctx, lib.scale_bias(ctx, ax, 1.0, 1.0)), -2.0, 2.0)   # |x|+1 > 0 unless NaN
    inf1 = lib.step(ctx, lib.scale_bias(ctx, ax, 1.0, -FLT_MAX))
    return xs, lib.add(ctx, nan2, inf1)


def scalar_parts(ctx, like, c: float):
    """:func:`branch_parts` of the constant ``c`` in ``like``'s shape (no upload)."""
    if math.isfinite(c):
        return lib.fill(ctx, like, c), None
    code = 2.0 if math.isnan(c) else 1.0
    return lib.fill(ctx, like, 0.0 if math.isnan(c) else math.copysign(FLT_MAX, c)), lib.fill(ctx, like, code)


def select_node(ctx, cond01, a_parts, b_parts, signed_zeros: bool = False, const_signs=(None, None)):
    """Elementwise ``a if cond else b``. ``cond01`` (full result shape) holds exactly 0.0/1.0;
    a and b come as :func:`branch_parts` and may be smaller (they broadcast).

    Built from finite products ``a*c + b*(1-c)``, so an inf or NaN in the branch NOT taken never
    leaks (inf*0 would be NaN); the branch taken keeps its inf/NaN: its code restores it at the
    end (t / sqrt(1 - code): /1 for finite, /0 turns ±FLT_MAX back into ±inf, /NaN gives NaN).
    Exact for finite values, except the sign of a zero (-0.0 + 0.0 is +0.0): ``signed_zeros``
    gives the result the sign of the branch taken (torch.where keeps -0.0), at a few more nodes;
    ``const_signs``: the sign bit (0.0/1.0) of a branch that is a constant (:func:`scalar_parts`), or None.
    (A ggml_get_rows gather over [b, a] pairs is exact too, but its 1-element rows and the
    interleaving concat made it ~50x slower.)
    """
    (a, ca), (b, cb) = a_parts, b_parts
    not_c = lib.scale_bias(ctx, cond01, -1.0, 1.0)
    t = lib.add(ctx, lib.mul(ctx, cond01, a), lib.mul(ctx, not_c, b))
    if signed_zeros:   # |t| with the taken branch's sign bit
        neg = _taken_signbit(ctx, (cond01, not_c), (a, b), const_signs)
        t = t if neg is None else lib.mul(ctx, lib.abs(ctx, t), lib.scale_bias(ctx, neg, -2.0, 1.0))
    codes = [lib.mul(ctx, m, k) for m, k in ((cond01, ca), (not_c, cb)) if k is not None]
    if not codes:
        return t
    code = codes[0] if len(codes) == 1 else lib.add(ctx, codes[0], codes[1])
    return lib.div(ctx, t, lib.sqrt(ctx, lib.scale_bias(ctx, code, -1.0, 1.0)))


def _taken_signbit(ctx, masks, values, const_signs):
    """Sum over the branches of mask * signbit(value): the taken branch's sign bit (None: always 0)."""
    terms = []
    for m, v, k in zip(masks, values, const_signs):
        if k is None:
            terms.append(lib.mul(ctx, m, _signbit01(ctx, v)))
        elif k:
            terms.append(m)          # a negative constant (-0.0 included): its mask
    if not terms:
        return None
    return terms[0] if len(terms) == 1 else lib.add(ctx, terms[0], terms[1])


# ---------------------------------------------------------------- comparisons (bool results: float 0/1 storage, no grad)
#: The dtype every comparison returns (the lt/le/gt/ge/eq/ne ops and compare_scalar): their one dtype policy.
COMPARISON_DTYPE = bool_  # torch.bool, stored as float32 0/1
_CMP_KINDS = ("lt", "le", "gt", "ge", "eq", "ne")
_CMP_FLIP = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq", "ne": "ne"}


def _as_f32(ctx, node, dtype):
    return node if dtype.ggml_type == consts.TYPE_F32 else lib.cast(ctx, node, consts.TYPE_F32)   # bool is f32 0/1


def _check_cmp_dtype(name, *xs):
    """Comparisons and conditions read any dtype (compared in float32; int32 exact below 2^24)."""
    for x in xs:
        if not isinstance(x.dtype, DType):
            raise DTypeError(f"{name}: unsupported dtype {x.dtype!r}")


def _cmp_from_diff(ctx, d, s, kind: str):
    """0/1 from d = a - b and s = a + b, with IEEE semantics: any comparison with NaN is false
    (``ne`` true), inf == inf. step() of NaN is 0, so gt/lt need only d; equality is "neither
    greater nor less" (|d| > 0 fails for d = 0 and for inf - inf) unless a or b is NaN, which
    makes s NaN (s is NaN for inf + -inf too, but then |d| = inf already says unequal)."""
    if kind == "gt":
        return lib.step(ctx, d)
    if kind == "lt":
        return lib.step(ctx, lib.neg(ctx, d))
    eq = lib.mul(ctx, lib.scale_bias(ctx, lib.step(ctx, lib.abs(ctx, d)), -1.0, 1.0), is_number01(ctx, s))
    if kind == "eq":
        return eq
    if kind == "ne":
        return lib.scale_bias(ctx, eq, -1.0, 1.0)
    return lib.add(ctx, lib.step(ctx, d if kind == "ge" else lib.neg(ctx, d)), eq)   # ge / le


def _infer_cmp(name):
    return _infer_binary(name, check_dtypes=_check_cmp_dtype, out_dtype=COMPARISON_DTYPE)


def _cmp_builder(kind):
    def forward(ctx, nodes, inputs, out):
        a, b = inputs
        na, nb = _as_f32(ctx, nodes[0], a.dtype), _as_f32(ctx, nodes[1], b.dtype)
        s = out.shape
        k = kind
        if a.shape != s and b.shape == s:      # ggml broadcasts only its second operand
            na, nb, k = nb, na, _CMP_FLIP[kind]
            a, b = b, a
        fa = expand(ctx, na, a.shape, s)
        d = lib.sub(ctx, fa, nb)
        total = lib.add(ctx, fa, nb) if k not in ("gt", "lt") else None
        return _cmp_from_diff(ctx, d, total, k)
    return forward


for _kind in _CMP_KINDS:
    define(_kind, infer=_infer_cmp(_kind), differentiable=False, elementwise=True,
           doc=f"elementwise a {_kind} b as bool (no gradient)")(_cmp_builder(_kind))


def _infer_cmp_scalar(a, kind, c):
    _check_cmp_dtype("compare_scalar", a)
    if kind not in _CMP_KINDS:
        raise ValueError(f"compare_scalar: kind must be one of {_CMP_KINDS}, got {kind!r}")
    if isinstance(c, bool) or not isinstance(c, (int, float)):
        raise TypeError(f"compare_scalar: the scalar must be a real number, got {c!r}")
    return a.shape, COMPARISON_DTYPE


@define("compare_scalar", elementwise=True, infer=_infer_cmp_scalar, differentiable=False)
def _compare_scalar(ctx, nodes, inputs, out, kind, c):
    """x <kind> c for a Python number c (an op parameter: nothing is uploaded)."""
    x = _as_f32(ctx, nodes[0], inputs[0].dtype)
    c = float(c)
    total = x if math.isfinite(c) else lib.scale_bias(ctx, x, 1.0, c)   # NaN-ness of x + c
    return _cmp_from_diff(ctx, lib.scale_bias(ctx, x, 1.0, -c), total, kind)


# ---------------------------------------------------------------- clamp, maximum/minimum, where
def _infer_clamp(a, lo=None, hi=None):
    d = promote_types("clamp", a)
    if lo is None and hi is None:
        raise ValueError("clamp: at least one of min and max must be given")
    for k, v in (("min", lo), ("max", hi)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise TypeError(f"clamp: `{k}` must be a real number or None, got {v!r}")
    if d is not float32:   # torch: an int32/bool input with integer bounds stays integral, float bounds give float32
        d = int32 if all(v is None or isinstance(v, int) for v in (lo, hi)) else float32
    return a.shape, d


def _clamp_backward(g, n):
    return op.clamp_backward(g, n.inputs[0], **n.params)


def _infer_clamp_backward(g, x, lo=None, hi=None):
    same_float("clamp_backward", g, x)
    if g.shape != x.shape:
        raise ValueError(f"clamp_backward: gradient {g.shape} and input {x.shape} differ")
    return x.shape, float32


@define("clamp_backward", elementwise=True, infer=_infer_clamp_backward, differentiable=False)
def _clamp_backward_op(ctx, nodes, inputs, out, lo=None, hi=None):
    """g where lo <= x <= hi (torch.clamp's inclusive rule), else 0; lo > hi or x NaN: 0 (torch)."""
    g, x = nodes
    if lo is not None and hi is not None and not lo <= hi:
        return lib.scale(ctx, g, 0.0)
    outside = None      # x < lo or x > hi (exclusive when lo <= hi); NaN is neither
    if lo is not None:
        outside = lib.step(ctx, lib.scale_bias(ctx, x, -1.0, float(lo)))
    if hi is not None:
        above = lib.step(ctx, lib.scale_bias(ctx, x, 1.0, -float(hi)))
        outside = above if outside is None else lib.add(ctx, outside, above)
    inside = lib.mul(ctx, lib.scale_bias(ctx, outside, -1.0, 1.0), is_number01(ctx, x))
    return lib.mul(ctx, g, inside)


@define("clamp", saves=(0,), elementwise=True, infer=_infer_clamp, backward=_clamp_backward, promotes=True)
def _clamp(ctx, nodes, inputs, out, lo=None, hi=None):
    """min(max(x, lo), hi) like torch.clamp (lo > hi gives hi everywhere); gradient flows where
    lo <= x <= hi. NaN stays NaN and a NaN bound gives NaN everywhere, as in torch (ggml's
    MIN/MAX turn a NaN into the bound: the NaN is added back)."""
    x = nodes[0]
    bounds = [float(v) for v in (lo, hi) if v is not None]
    if any(math.isnan(v) for v in bounds):
        return lib.fill(ctx, x, float("nan"))
    if lo is not None and hi is not None and lo > hi:
        return lib.sub(ctx, lib.fill(ctx, x, float(hi)), nan_or_zero(ctx, x))
    lo_f = -float("inf") if lo is None else float(lo)
    hi_f = float("inf") if hi is None else float(hi)
    # ggml_clamp works in place and returns a view: clamp a private copy; the sub makes a real tensor.
    r = lib.sub(ctx, lib.clamp(ctx, lib.dup(ctx, x), lo_f, hi_f), nan_or_zero(ctx, x))
    return _keep_zero_sign(ctx, x, r, lo_f, hi_f) if 0.0 in (lo_f, hi_f) else r


def _keep_zero_sign(ctx, x, r, lo: float, hi: float):
    """clamp with a zero bound: ggml gives a ±0 input the bound (its sign), torch keeps the input
    (clamp(-0.0, min=0.0) is -0.0). Flip r where x is a zero whose sign differs from that bound's."""
    bound = lo if lo == 0.0 else hi                      # ggml's MAX(MIN(x, hi), lo): lo wins a double tie
    zero01 = lib.scale_bias(ctx, lib.step(ctx, lib.abs(ctx, x)), -1.0, 1.0)       # 1 at ±0 (and NaN: r is NaN)
    neg01 = lib.step(ctx, lib.neg(ctx, lib.div(ctx, lib.fill(ctx, x, 1.0), x)))   # 1/-0 = -inf
    differs = neg01 if math.copysign(1.0, bound) > 0 else lib.scale_bias(ctx, neg01, -1.0, 1.0)
    return lib.mul(ctx, r, lib.scale_bias(ctx, lib.mul(ctx, zero01, differs), -2.0, 1.0))


def minmax_node(ctx, a, b, fa=None, take_a_when: str = "gt"):
    """torch.maximum (``"gt"``) or torch.minimum (``"lt"``) of F32 nodes, exactly (a selection, not
    arithmetic), NaN in either propagating; ``fa``: ``a`` already broadcast to the result's shape."""
    d = lib.sub(ctx, a if fa is None else fa, b)          # a - b
    if take_a_when == "gt":
        d = lib.neg(ctx, d)                              # b - a (exact)
    # 1 unless b wins strictly: ties take a (torch: maximum(-0.0, 0.0) is -0.0), NaN in (a - b) too
    c = lib.scale_bias(ctx, lib.step(ctx, d), -1.0, 1.0)
    r = select_node(ctx, c, branch_parts(ctx, a), branch_parts(ctx, b), signed_zeros=True)
    return lib.sub(ctx, r, nan_or_zero(ctx, b))          # a NaN b propagates too (torch)


def _minmax_builder(take_a_when):
    def forward(ctx, nodes, inputs, out):
        a = inputs[0]
        fa = full_node(ctx, nodes[0], a.shape, out.shape)
        return minmax_node(ctx, nodes[0], nodes[1], fa, take_a_when)
    return forward


def _minmax_backward(sign):
    # torch.maximum: the larger input takes g, ties split it 0.5/0.5, and with a NaN both take g.
    def backward(g, n):
        a, b = n.inputs
        ga = op.minmax_backward(g, a, b, sign=sign) if a.requires_grad else None
        gb = op.minmax_backward(g, b, a, sign=sign) if b.requires_grad else None
        return ga, gb
    return backward


def _infer_minmax_backward(g, a, b, sign):
    float_compute("minmax_backward", g, a, b)   # the other operand may be int32 or bool (torch's promotion)
    if broadcast_shapes("minmax_backward", a.shape, b.shape) != g.shape:
        raise ValueError(f"minmax_backward: gradient {g.shape} does not match {a.shape} and {b.shape}")
    return g.shape, float32


@define("minmax_backward", elementwise=True, infer=_infer_minmax_backward, differentiable=False, promotes=True)
def _minmax_backward_op(ctx, nodes, inputs, out, sign):
    """g * (1 - [a loses] - 0.5 [a == b]): a's share of maximum's (sign 1) / minimum's (-1) gradient.
    Comparisons with NaN are false, so a NaN pair gives g to both (torch)."""
    g, na, nb = nodes
    a = inputs[1]
    fa = full_node(ctx, na, a.shape, out.shape)
    d = lib.sub(ctx, fa, nb)                                         # a - b
    loses = lib.step(ctx, lib.neg(ctx, d) if sign > 0 else d)
    eq = _cmp_from_diff(ctx, d, lib.add(ctx, fa, nb), "eq")
    w = lib.sub(ctx, lib.scale_bias(ctx, loses, -1.0, 1.0), lib.scale(ctx, eq, 0.5))
    return lib.mul(ctx, g, w)


define("maximum", saves=(0, 1), elementwise=True, infer=_infer_promoting_binary("maximum"), backward=_minmax_backward(1.0),
       promotes=True,
       doc="elementwise max with broadcasting; equal values share the gradient 0.5/0.5")(_minmax_builder("gt"))
define("minimum", saves=(0, 1), elementwise=True, infer=_infer_promoting_binary("minimum"), backward=_minmax_backward(-1.0),
       promotes=True,
       doc="elementwise min with broadcasting; equal values share the gradient 0.5/0.5")(_minmax_builder("lt"))


def _infer_where(cond, a, b, finite=False):
    same_device("where", cond, a, b)
    _check_cmp_dtype("where", cond)
    d = promote_types("where", a, b)      # torch: where(c, int32, float32) is float32
    shape = broadcast_shapes("where", cond.shape, a.shape, b.shape)
    return shape, float32 if d is bool_ else d     # two bools: the front end keeps bool


def _where_backward(g, n):
    cond, a, b = n.inputs
    ga = op.where_scalar(cond, g, c=0.0, finite=True) if a.requires_grad else None
    gb = op.where_scalar(cond, g, c=0.0, tensor_if_true=False, finite=True) if b.requires_grad else None
    return None, ga, gb


def _cond01(ctx, node, cond, shape):
    if cond.dtype is bool_:     # already exactly 0/1
        return full_node(ctx, node, cond.shape, shape)
    return nonzero01(ctx, full_node(ctx, _as_f32(ctx, node, cond.dtype), cond.shape, shape))


@define("where", saves=(0,), elementwise=True, infer=_infer_where, backward=_where_backward, promotes=True)
def _where(ctx, nodes, inputs, out, finite=False):
    """a where cond is non-zero, else b (broadcasting all three). An inf or NaN in the branch not
    taken never leaks into the result (see select_node); ``finite=True`` (internal) skips that care."""
    cond = inputs[0]
    c = _cond01(ctx, nodes[0], cond, out.shape)
    return select_node(ctx, c, branch_parts(ctx, nodes[1], finite), branch_parts(ctx, nodes[2], finite),
                       signed_zeros=not finite)


def _infer_where_scalar(cond, x, c, tensor_if_true=True, finite=False):
    same_device("where", cond, x)
    _check_cmp_dtype("where", cond)
    d = promote_types("where", x)
    if isinstance(c, bool) or not isinstance(c, (int, float)):
        raise TypeError(f"where: the scalar branch must be a real number, got {c!r}")
    shape = broadcast_shapes("where", cond.shape, x.shape)
    # torch: an int32/bool tensor with an integer scalar stays integral, a float scalar gives float32
    return shape, int32 if d is not float32 and isinstance(c, int) else float32


def _where_scalar_backward(g, n):
    cond = n.inputs[0]
    side = n.params.get("tensor_if_true", True)
    return None, op.where_scalar(cond, g, c=0.0, tensor_if_true=side, finite=True)


@define("where_scalar", saves=(0,), elementwise=True, infer=_infer_where_scalar, backward=_where_scalar_backward,
        promotes=True)
def _where_scalar(ctx, nodes, inputs, out, c, tensor_if_true=True, finite=False):
    """where(cond, x, c) (or where(cond, c, x) with tensor_if_true=False) for a Python number c:
    the constant is built on the device, and only the tensor branch needs the inf/NaN care."""
    cond = inputs[0]
    c01 = _cond01(ctx, nodes[0], cond, out.shape)
    tensor = branch_parts(ctx, nodes[1], finite)
    const = scalar_parts(ctx, c01, float(c))
    k = 1.0 if math.copysign(1.0, float(c)) < 0 and not math.isnan(c) else 0.0   # the constant's sign bit
    parts, signs = ((tensor, const), (None, k)) if tensor_if_true else ((const, tensor), (k, None))
    return select_node(ctx, c01, *parts, signed_zeros=not finite, const_signs=signs)
