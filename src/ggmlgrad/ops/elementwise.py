"""Elementwise arithmetic with NumPy broadcasting, unary math, comparisons, where."""
from __future__ import annotations

from .._ggml import lib
from ..engine import float32
from .build import expand
from .registry import define, op, same_device, same_float
from .shapes import broadcast_shapes, numel


# ---------------------------------------------------------------- binary
def _infer_binary(name):
    def infer(a, b):
        same_device(name, a, b)
        same_float(name, a, b)
        return broadcast_shapes(name, a.shape, b.shape), float32
    return infer


def _binary_builder(fn, commutative: bool):
    def forward(ctx, nodes, inputs, out):
        na, nb = nodes
        a, b = inputs
        s = out.shape
        if a.shape == s:
            return fn(ctx, na, nb)
        if commutative and b.shape == s:
            return fn(ctx, nb, na)
        return fn(ctx, expand(ctx, na, a.shape, s), nb)
    return forward


def _work_binary(a, b):
    return float(numel(broadcast_shapes("", a.shape, b.shape)))


define("add", infer=_infer_binary("add"), work=_work_binary,
       backward=lambda g, n: (g, g))(_binary_builder(lib.add, True))
define("sub", infer=_infer_binary("sub"), work=_work_binary,
       backward=lambda g, n: (g, op.neg(g)))(_binary_builder(lib.sub, False))
define("mul", infer=_infer_binary("mul"), work=_work_binary,
       backward=lambda g, n: (op.mul(g, n.inputs[1]), op.mul(g, n.inputs[0])))(_binary_builder(lib.mul, True))


def _div_backward(g, n):
    a, b = n.inputs
    ga = op.div(g, b)
    gb = op.neg(op.div(op.mul(ga, a), b)) if b.requires_grad else None
    return ga, gb


define("div", infer=_infer_binary("div"), work=_work_binary, backward=_div_backward)(_binary_builder(lib.div, False))


# ---------------------------------------------------------------- scalar forms (no upload: constants are op params)
def _infer_unary(name):
    def infer(a, **params):
        same_float(name, a)
        for k, v in params.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise TypeError(f"{name}: `{k}` must be a real number, got {v!r}")
        return a.shape, float32
    return infer


@define("scale", infer=_infer_unary("scale"), backward=lambda g, n: op.scale(g, c=n.params["c"]))
def _scale(ctx, nodes, inputs, out, c):
    """x * c"""
    return lib.scale(ctx, nodes[0], float(c))


@define("add_scalar", infer=_infer_unary("add_scalar"), backward=lambda g, n: g)
def _add_scalar(ctx, nodes, inputs, out, c):
    """x + c"""
    return lib.scale_bias(ctx, nodes[0], 1.0, float(c))


@define("rdiv_scalar", infer=_infer_unary("rdiv_scalar"), save_output=True,
        backward=lambda g, n: op.neg(op.div(op.mul(g, n.output), n.inputs[0])))
def _rdiv_scalar(ctx, nodes, inputs, out, c):
    """c / x"""
    return lib.div(ctx, lib.fill(ctx, nodes[0], float(c)), nodes[0])


@define("fill_like", infer=lambda a, c: (a.shape, a.dtype if a.dtype.is_float else float32), differentiable=False)
def _fill_like(ctx, nodes, inputs, out, c):
    """A tensor of ``a``'s shape filled with ``c`` (built on the device: no upload)."""
    n = nodes[0]
    if inputs[0].dtype is not float32:
        n = lib.cast(ctx, n, 0)
    return lib.fill(ctx, n, float(c))


# ---------------------------------------------------------------- unary math
def _unary(name, fn, backward, save_output=False):
    define(name, infer=_infer_unary(name), backward=backward, save_output=save_output)(
        lambda ctx, nodes, inputs, out: fn(ctx, nodes[0]))


_unary("neg", lib.neg, lambda g, n: op.neg(g))
_unary("exp", lib.exp, lambda g, n: op.mul(g, n.output), save_output=True)
_unary("log", lib.log, lambda g, n: op.div(g, n.inputs[0]))
_unary("sqrt", lib.sqrt, lambda g, n: op.div(op.scale(g, c=0.5), n.output), save_output=True)
_unary("abs", lib.abs, lambda g, n: op.mul(g, op.sign(n.inputs[0])))
_unary("sign", lib.sgn, lambda g, n: None)
_unary("square", lib.sqr, lambda g, n: op.mul(op.scale(g, c=2.0), n.inputs[0]))
_unary("clone", lib.cont, lambda g, n: g)


@define("pow_scalar", infer=_infer_unary("pow_scalar"),
        backward=lambda g, n: op.mul(op.scale(g, c=n.params["p"]), op.pow_scalar(n.inputs[0], p=n.params["p"] - 1)))
def _pow_scalar(ctx, nodes, inputs, out, p):
    """x ** p (p a Python number). Integer p keeps NumPy's sign rules for negative x."""
    x = nodes[0]
    p = float(p)
    if p == 0:
        return lib.fill(ctx, x, 1.0)
    if p == 1:
        return lib.cont(ctx, x)
    if p == 2:
        return lib.sqr(ctx, x)
    if p == 0.5:
        return lib.sqrt(ctx, x)
    if p == 3:
        return lib.mul(ctx, lib.sqr(ctx, x), x)
    if p == -1:
        return lib.div(ctx, lib.fill(ctx, x, 1.0), x)
    if p.is_integer():
        mag = lib.exp(ctx, lib.scale(ctx, lib.log(ctx, lib.abs(ctx, x)), p))
        return lib.mul(ctx, mag, lib.sgn(ctx, x)) if int(p) % 2 else mag
    return lib.exp(ctx, lib.scale(ctx, lib.log(ctx, x), p))


def _pow_backward(g, n):
    a, b = n.inputs
    out = n.output
    ga = op.mul(g, op.mul(b, op.div(out, a))) if a.requires_grad else None
    gb = op.mul(g, op.mul(out, op.log(a))) if b.requires_grad else None
    return ga, gb


@define("pow", infer=_infer_binary("pow"), backward=_pow_backward, save_output=True, work=_work_binary)
def _pow(ctx, nodes, inputs, out):
    """a ** b for tensors (a > 0 for real results)."""
    na, nb = nodes
    a, b = inputs
    na = expand(ctx, na, a.shape, out.shape)
    return lib.exp(ctx, lib.mul(ctx, lib.log(ctx, na), nb))



def _infer_cast(a, dtype):
    return a.shape, dtype


def _cast_backward(g, n):
    return op.cast(g, dtype=n.inputs[0].dtype) if n.inputs[0].dtype.is_float else None


@define("cast", infer=_infer_cast, backward=_cast_backward)
def _cast(ctx, nodes, inputs, out, dtype):
    """Convert to another dtype (float32 ↔ float16/bfloat16/int32)."""
    return lib.cast(ctx, nodes[0], dtype.ggml_type)
