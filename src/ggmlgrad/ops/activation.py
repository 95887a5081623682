"""Activations and softmax family."""
from __future__ import annotations

import warnings

from .._ggml import SIMD_FLOATS, consts, lib, node_nb, node_ne
from ..engine import float32
from ..engine.flat import FlatNode
from . import fast_math
from .build import SavedNode, expand, merged_op, permute, reshape, saved_node
from .decl import expose
from .elementwise import infer_integral, branch_parts, is_number01, nan_or_zero, select_node
from .reduce import axis_of, logsumexp_parts, sum_kept
from .registry import define, float_compute, op, same_device, same_float
from .shapes import norm_axis
from ..engine.errors import ShapeError

#: The surfaces of an activation: ``x.relu()``, ``gg.relu(x)``, ``F.relu(input)``.
_ACT = ("method", "function", "nn.functional")


def _infer_act(name):
    def infer(a, **params):
        same_float(name, a)
        return a.shape, float32
    return infer


def _infer_promoting(name):
    """tanh and sigmoid: torch computes an int32 or bool input in float32 (declared ``promotes=True``)."""
    def infer(a):
        return a.shape, float_compute(name, a)
    return infer


def _infer_grad_pair(name):
    def infer(g, x, **params):
        same_float(name, g, x)
        if g.shape != x.shape:
            raise ValueError(f"{name}: gradient {g.shape} and input {x.shape} differ")
        return x.shape, float32
    return infer


@define("relu", saves=(), elementwise=True, infer=infer_integral("relu"), save_output=True, promotes=True,
        backward=lambda g, n: op.relu_backward(g, n.output),
        expose=expose("relu", *_ACT, module="ReLU", doc="max(x, 0) elementwise (NaN stays NaN, as torch).",
                      example=">>> gg.relu(gg.tensor([-1.0, 2.0])).tolist()\n[0.0, 2.0]"))
def _relu(ctx, nodes, inputs, out):
    """max(x, 0) with NaN kept (torch). ggml_relu is ``x > 0 ? x : 0`` and drops NaN: divide by
    [x is a number] (exact: /1, and 0/0 = NaN). Cheap vectorised nodes: elu(x) * step(x) was as
    exact but its expm1 made it 10x slower than ggml_relu; this costs ~1.3x on 16k elements."""
    x = nodes[0]
    if fast_math.ACTIVE:
        return fast_math.relu(ctx, x)
    return lib.div(ctx, lib.relu(ctx, x), is_number01(ctx, x))


@define("step", elementwise=True, infer=_infer_act("step"), differentiable=False)
def _step(ctx, nodes, inputs, out):
    """1 where x > 0 else 0."""
    return lib.step(ctx, nodes[0])


def _same_rows(a: int, b: int) -> bool:
    """Same shape and unit stride along rows in both nodes (what a two-input kernel reads)."""
    return node_ne(a) == node_ne(b) and node_nb(a)[0] == node_nb(b)[0] == 4


@define("relu_backward", elementwise=True, infer=_infer_grad_pair("relu_backward"), differentiable=False)
def _relu_backward(ctx, nodes, inputs, out):
    """g where relu's output y is not 0 (torch: y <= 0 ? 0 : g, so a NaN y passes g), else 0.
    For y >= 0 or NaN: [y != 0] = step(y) + [y is NaN] = step(y) - step(y + 1) + 1."""
    g, y = nodes
    if fast_math.ACTIVE and _same_rows(g, y):
        return fast_math.relu_grad(ctx, g, y)
    nan01 = lib.scale_bias(ctx, lib.step(ctx, lib.scale_bias(ctx, y, 1.0, 1.0)), -1.0, 1.0)   # y >= 0: no abs needed
    return lib.mul(ctx, g, lib.add(ctx, lib.step(ctx, y), nan01))


@define("tanh_backward", elementwise=True, infer=_infer_grad_pair("tanh_backward"), differentiable=False)
def _tanh_backward(ctx, nodes, inputs, out):
    """g * (1 - y^2) from tanh's output y: one node with the kernels (four before: fewer nodes to run)."""
    g, y = nodes
    if fast_math.ACTIVE and _same_rows(g, y):
        return fast_math.tanh_backward(ctx, g, y)
    return lib.mul(ctx, g, lib.scale_bias(ctx, lib.sqr(ctx, y), -1.0, 1.0))


@define("tanh", saves=(), elementwise=True, infer=_infer_promoting("tanh"), save_output=True, promotes=True,
        backward=lambda g, n: op.tanh_backward(g, n.output),
        expose=expose("tanh", *_ACT, module="Tanh", doc="Hyperbolic tangent elementwise.",
                      example=">>> gg.tanh(gg.tensor([0.0])).tolist()\n[0.0]"))
def _tanh(ctx, nodes, inputs, out):
    return fast_math.tanh(ctx, nodes[0])


@define("sigmoid", saves=(), elementwise=True, infer=_infer_promoting("sigmoid"), save_output=True, promotes=True,
        backward=lambda g, n: op.mul(g, op.mul(n.output, op.add_scalar(op.neg(n.output), c=1.0))),
        expose=expose("sigmoid", *_ACT, module="Sigmoid", doc="1 / (1 + exp(-x)) elementwise.",
                      example=">>> gg.sigmoid(gg.tensor([0.0])).tolist()\n[0.5]"))
def _sigmoid(ctx, nodes, inputs, out):
    return fast_math.sigmoid(ctx, nodes[0])


def _number(name, key, v, positive=False):
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"{name}: `{key}` must be a real number, got {v!r}")
    if positive and not v > 0:
        raise ValueError(f"{name}: `{key}` must be > 0, got {v!r}")


# ---------------------------------------------------------------- leaky_relu, elu
def _infer_leaky(a, negative_slope=0.01):
    same_float("leaky_relu", a)
    _number("leaky_relu", "negative_slope", negative_slope)
    return a.shape, float32


def _leaky_backward(g, n):
    return op.leaky_relu_backward(g, n.inputs[0], **n.params)


@define("leaky_relu_backward", elementwise=True, infer=_infer_grad_pair("leaky_relu_backward"), differentiable=False)
def _leaky_relu_backward(ctx, nodes, inputs, out, negative_slope=0.01):
    """g * (1 where x > 0 else slope); x == 0 takes the slope, as torch."""
    g, x = nodes
    s = float(negative_slope)
    return lib.mul(ctx, g, lib.scale_bias(ctx, lib.step(ctx, x), 1.0 - s, s))


@define("leaky_relu", saves=(0,), elementwise=True, infer=_infer_leaky, backward=_leaky_backward,
        expose=expose("leaky_relu", *_ACT, module="LeakyReLU", doc="x where x > 0, else negative_slope * x (NaN stays NaN).",
                      example=">>> gg.leaky_relu(gg.tensor([-2.0, 3.0]), 0.5).tolist()\n[-1.0, 3.0]"))
def _leaky_relu(ctx, nodes, inputs, out, negative_slope=0.01):
    """x if x > 0 else slope * x. ggml_leaky_relu drops NaN (0 for NaN): put it back as relu does."""
    x, s = nodes[0], float(negative_slope)
    if s == 0.0:
        return _relu(ctx, nodes, inputs, out)
    return lib.div(ctx, lib.leaky_relu(ctx, x, s, False), is_number01(ctx, x))


def _infer_elu(a, alpha=1.0):
    same_float("elu", a)
    _number("elu", "alpha", alpha)
    return a.shape, float32


def _elu_backward(g, n):
    return op.elu_backward(g, n.inputs[0], **n.params)


@define("elu_backward", elementwise=True, infer=_infer_grad_pair("elu_backward"), differentiable=False)
def _elu_backward_op(ctx, nodes, inputs, out, alpha=1.0):
    """g * (1 where x > 0 else alpha * exp(x)); exp(min(x, 0)) so large x cannot overflow into 0 * inf.
    NaN takes the x > 0 side, as torch's ``x <= 0 ? ... : g``: pos = step(x) + [x is NaN]."""
    g, x = nodes
    pos = lib.add(ctx, lib.step(ctx, x), lib.scale_bias(ctx, is_number01(ctx, x), -1.0, 1.0))
    e = fast_math.exp(ctx, lib.neg(ctx, lib.relu(ctx, lib.neg(ctx, x))))
    neg_part = lib.mul(ctx, lib.scale_bias(ctx, pos, -float(alpha), float(alpha)), e)   # alpha*(1-pos)*e
    return lib.mul(ctx, g, lib.add(ctx, pos, neg_part))


@define("elu", saves=(0,), elementwise=True, infer=_infer_elu, backward=_elu_backward,
        expose=expose("elu", *_ACT, module="ELU", doc="x where x > 0, else alpha * (exp(x) - 1).",
                      example=">>> gg.elu(gg.tensor([0.0, 2.0])).tolist()\n[0.0, 2.0]"))
def _elu(ctx, nodes, inputs, out, alpha=1.0):
    """x if x > 0 else alpha * (exp(x) - 1): elu(x) * (x > 0 ? 1 : alpha), exact with inf and NaN."""
    e = fast_math.elu(ctx, nodes[0])
    a = float(alpha)
    if a == 1.0:
        return e
    return lib.mul(ctx, e, lib.scale_bias(ctx, lib.step(ctx, nodes[0]), 1.0 - a, a))


# ---------------------------------------------------------------- gelu, silu, softplus
_SQRT_2_OVER_PI = 0.7978845608028654
_INV_SQRT_2PI = 0.3989422804014327
_GELU_C = 0.044715


def _infer_gelu(a, approximate="none"):
    same_float("gelu", a)
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return a.shape, float32


def _gelu_tanh_inner(ctx, x):
    """sqrt(2/pi) * (x + 0.044715 x^3)"""
    return lib.scale(ctx, lib.mul(ctx, x, lib.scale_bias(ctx, lib.sqr(ctx, x), _GELU_C, 1.0)), _SQRT_2_OVER_PI)


@define("gelu", saves=(0,), elementwise=True, infer=_infer_gelu, backward=lambda g, n: op.gelu_backward(g, n.inputs[0], **n.params),
        expose=expose("gelu", *_ACT, module="GELU", doc="GELU, x * Phi(x): exact (erf) by default, ``approximate=\"tanh\"`` for the "
                      "tanh form, as torch.nn.functional.gelu.",
                      example=">>> gg.gelu(gg.tensor([0.0])).tolist()\n[0.0]"))
def _gelu(ctx, nodes, inputs, out, approximate="none"):
    """x * Phi(x) (erf form), or the tanh approximation. The tanh form is composed here because
    ggml's CPU ggml_gelu reads an fp16 lookup table (errors near 1e-3)."""
    x = nodes[0]
    # A backward may follow (graph mode's pending inputs cannot tell yet): value and derivative at once
    if fast_math.ACTIVE and getattr(inputs[0], "requires_grad", True):
        y = fast_math.gelu_with_derivative(ctx, x, approximate)
        if y:
            return y
    if approximate == "none":
        return fast_math.gelu_erf(ctx, x)
    if fast_math.ACTIVE:
        return fast_math.gelu_tanh(ctx, x)
    t = lib.tanh(ctx, _gelu_tanh_inner(ctx, x))
    return lib.mul(ctx, lib.scale(ctx, x, 0.5), lib.scale_bias(ctx, t, 1.0, 1.0))


@define("gelu_backward", elementwise=True, infer=_infer_grad_pair("gelu_backward"), differentiable=False)
def _gelu_backward(ctx, nodes, inputs, out, approximate="none"):
    """g * d gelu/dx in one node group."""
    g, x = nodes
    d = fast_math.gelu_saved_derivative(ctx, x, approximate, g) if fast_math.ACTIVE else 0
    if d:                                       # the forward's, in this graph
        return lib.mul(ctx, g, d)
    if fast_math.ACTIVE and _same_rows(g, x):   # one fused node: g * d(x)
        fused = fast_math.gelu_erf_backward if approximate == "none" else fast_math.gelu_tanh_backward
        return fused(ctx, g, x)
    if approximate == "none" and fast_math.ACTIVE:
        d = fast_math.gelu_erf_grad(ctx, x)
    elif approximate == "none":
        # Phi(x) = gelu(x)/x (x = 0 nudged to 1e-30, where Phi = 0.5); pdf = exp(-x^2/2)/sqrt(2 pi)
        is_zero = lib.scale_bias(ctx, lib.step(ctx, lib.abs(ctx, x)), -1e-30, 1e-30)
        xs = lib.add(ctx, x, is_zero)
        cdf = lib.div(ctx, lib.gelu_erf(ctx, xs), xs)
        pdf = lib.scale(ctx, fast_math.exp(ctx, lib.scale(ctx, lib.sqr(ctx, x), -0.5)), _INV_SQRT_2PI)
        d = lib.add(ctx, cdf, lib.mul(ctx, x, pdf))
    else:
        # 0.5(1+t) + 0.5 x (1-t^2) sqrt(2/pi)(1 + 3c x^2),  t = tanh(inner)
        t = fast_math.tanh(ctx, _gelu_tanh_inner(ctx, x))
        left = lib.scale_bias(ctx, t, 0.5, 0.5)
        sech2 = lib.scale_bias(ctx, lib.sqr(ctx, t), -1.0, 1.0)
        dinner = lib.scale_bias(ctx, lib.sqr(ctx, x), 3.0 * _GELU_C * _SQRT_2_OVER_PI, _SQRT_2_OVER_PI)
        d = lib.add(ctx, left, lib.mul(ctx, lib.scale(ctx, x, 0.5), lib.mul(ctx, sech2, dinner)))
    return lib.mul(ctx, g, d)


@define("silu", saves=(0,), elementwise=True, infer=_infer_act("silu"), backward=lambda g, n: op.silu_backward(g, n.inputs[0]),
        expose=expose("silu", *_ACT, module="SiLU", doc="x * sigmoid(x) elementwise (also called swish).",
                      example=">>> gg.silu(gg.tensor([0.0])).tolist()\n[0.0]"))
def _silu(ctx, nodes, inputs, out):
    """x * sigmoid(x)"""
    return lib.silu(ctx, nodes[0])


@define("silu_backward", elementwise=True, infer=_infer_grad_pair("silu_backward"), differentiable=False)
def _silu_backward(ctx, nodes, inputs, out):
    return lib.silu_back(ctx, nodes[0], nodes[1])   # (dy, x) -> dy * s * (1 + x (1 - s))


def _infer_softplus(a, beta=1.0, threshold=20.0):
    same_float("softplus", a)
    _number("softplus", "beta", beta, positive=True)
    _number("softplus", "threshold", threshold)
    return a.shape, float32


def _softplus_backward(g, n):
    return op.softplus_backward(g, n.inputs[0], **n.params)


@define("softplus_backward", elementwise=True, infer=_infer_grad_pair("softplus_backward"), differentiable=False)
def _softplus_backward_op(ctx, nodes, inputs, out, beta=1.0, threshold=20.0):
    """g * sigmoid(beta x), and g where beta x > threshold (there softplus is the identity)."""
    g, x = nodes
    z = lib.scale(ctx, x, float(beta)) if float(beta) != 1.0 else x
    d = fast_math.sigmoid(ctx, z)
    if float(threshold) < 20.0:
        over = lib.step(ctx, lib.scale_bias(ctx, z, 1.0, -float(threshold)))
        d = lib.add(ctx, d, lib.mul(ctx, over, lib.scale_bias(ctx, d, -1.0, 1.0)))   # d + over*(1-d)
    return lib.mul(ctx, g, d)


@define("softplus", saves=(0,), elementwise=True, infer=_infer_softplus, backward=_softplus_backward,
        expose=expose("softplus", *_ACT, module="Softplus", doc="log(1 + exp(beta x)) / beta, and x where beta x > threshold "
                      "(torch.nn.functional.softplus).",
                      example=">>> round(gg.softplus(gg.tensor([0.0])).item(), 4)\n0.6931"))
def _softplus(ctx, nodes, inputs, out, beta=1.0, threshold=20.0):
    """log(1 + exp(beta x)) / beta, and x where beta x > threshold (torch.nn.functional.softplus).
    ggml's own switch to the identity is at 20; thresholds above it differ by < 3e-9."""
    x = nodes[0]
    beta = float(beta)
    z = lib.scale(ctx, x, beta) if beta != 1.0 else x
    sp = fast_math.softplus(ctx, z)
    if beta != 1.0:
        sp = lib.scale(ctx, sp, 1.0 / beta)
    if float(threshold) < 20.0:
        over = lib.step(ctx, lib.scale_bias(ctx, z, 1.0, -float(threshold)))
        sp = select_node(ctx, over, branch_parts(ctx, x), branch_parts(ctx, sp))
    return sp


# ---------------------------------------------------------------- softmax family along any axis
def dim_args(dim=None, *, axis=None) -> dict:
    """The public ``dim`` of softmax/log_softmax (torch; default the last axis), or NumPy's ``axis``."""
    if axis is not None:
        dim = axis_of(axis, dim)
    if dim is None:
        # torch's implicit dim (deprecated there, with a warning) is 0 for 0-, 1- and 3-D inputs and 1
        # otherwise: on 3-D and 4-D inputs it is not the last axis, so say which axis this is.
        warnings.warn("softmax/log_softmax without dim: ggmlgrad uses the last axis, where torch's deprecated "
                      "implicit choice is dim 0 for 3-D inputs and dim 1 for 4-D ones; pass dim=", UserWarning,
                      stacklevel=3)
        return {"axis": -1}
    return {"axis": dim}


def _real(name: str, key: str, v) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"{name}: `{key}` must be a real number, got {v!r}")
    return float(v)


def check_mask(name: str, mask, target: tuple) -> None:
    """A mask must match ``target`` in its last two axes (rows may be 1) and be 1 or equal elsewhere."""
    same_float(name, mask)
    if mask.ndim > len(target):
        raise ShapeError(f"{name}: mask {mask.shape} has more dimensions than the scores {target}")
    m = (1,) * (len(target) - mask.ndim) + tuple(mask.shape)
    ok = m[-1] == target[-1] and (len(target) < 2 or m[-2] in (1, target[-2]))
    ok = ok and all(a in (1, b) for a, b in zip(m[:-2], target[:-2]))
    if not ok:
        raise ShapeError(f"{name}: mask of shape {mask.shape} does not broadcast to the scores {target} "
                         f"(last axis must match; other axes 1 or equal)")


def mask_node(ctx, node, mask_shape: tuple, target: tuple, ggml_type: int = consts.TYPE_F32) -> int:
    """The mask as ggml wants it: padded to the target's ndim, rows expanded, contiguous, of ``ggml_type``."""
    m = (1,) * (len(target) - len(mask_shape)) + tuple(mask_shape)
    node = reshape(ctx, node, m)
    if len(m) >= 2 and m[-2] != target[-2]:
        full = m[:-2] + target[-2:]
        node = expand(ctx, node, m, full)
    else:
        node = lib.cont(ctx, node)
    if ggml_type != consts.TYPE_F32:
        node = lib.cast(ctx, node, ggml_type)
    return node


def _infer_softmax(x, *mask, axis=-1, scale=1.0, causal=False):
    same_float("softmax", x)
    ax = norm_axis("softmax", axis, x.ndim)
    if mask or causal is not False or scale != 1.0:     # plain softmax skips the masking checks (per op)
        _check_masking(x, mask, ax, axis, scale, causal)
    return x.shape, float32


def _check_masking(x, mask, ax: int, axis, scale, causal) -> None:
    _real("softmax", "scale", scale)
    if not isinstance(causal, bool):
        raise TypeError(f"softmax: causal must be a bool, got {causal!r}")
    if len(mask) > 1:
        raise TypeError("softmax: at most one mask")
    if (mask or causal) and ax != max(x.ndim, 1) - 1:
        raise ValueError(f"softmax: a mask and causal masking apply along the last axis only, got axis={axis}")
    if causal and x.ndim < 2:
        raise ValueError(f"softmax: causal masking needs at least 2 dimensions, got {x.shape}")
    if mask and x.ndim == 0:
        raise ValueError("softmax: a masked input must have at least 1 dimension")
    if mask:
        same_device("softmax", x, mask[0])
        check_mask("softmax", mask[0], x.shape)


def _softmax_work(x, *mask, axis=-1, scale=1.0, causal=False) -> float:
    return 5.0 * x.numel_


def _log_softmax_infer(a, axis=-1):
    same_float("log_softmax", a)
    norm_axis("log_softmax", axis, a.ndim)
    return a.shape, float32


def _swap_last(ndim: int, axis: int) -> tuple:
    perm = list(range(ndim))
    perm[axis], perm[-1] = perm[-1], perm[axis]
    return tuple(perm)


def _along_last(ctx, node, shape, axis, fn):
    """Apply a row-wise ggml builder ``fn`` along ``axis`` (moved last and back: a swap is its own inverse)."""
    nd = len(shape)
    axis = axis % max(nd, 1)
    if nd <= 1 or axis == nd - 1:
        return fn(node)
    perm = _swap_last(nd, axis)
    r = fn(lib.cont(ctx, permute(ctx, node, perm)))
    return lib.cont(ctx, permute(ctx, r, perm))


def _softmax_backward_rule(g, n):
    """z = x * scale + mask (+ -inf above the diagonal when causal), y = softmax(z):
    dz = y * (g - sum(g * y)) along the axis (one op), dx = scale * dz, dmask = dz (a learnable
    float mask, e.g. a position bias, gets its gradient; autograd sums its broadcast axes)."""
    p = n.params
    dz = op.softmax_backward(g, n.output, axis=p.get("axis", -1))
    scale = p.get("scale", 1.0)
    gx = op.scale(dz, c=scale) if scale != 1.0 else dz
    if len(n.inputs) == 1:
        return (gx,)
    return gx, (dz if n.inputs[1].requires_grad else None)


@define("softmax", saves=(), infer=_infer_softmax, save_output=True, backward=_softmax_backward_rule,
        work=_softmax_work,
        expose=expose("softmax", *_ACT, args=dim_args,
                      doc="Softmax along ``dim`` (default the last axis), stable (ggml's fused soft_max).",
                      example=">>> gg.softmax(gg.tensor([[0.0, 0.0]]), dim=1).tolist()\n[[0.5, 0.5]]"))
def _softmax(ctx, nodes, inputs, out, axis=-1, scale=1.0, causal=False):
    """softmax(x * scale + mask) along ``axis``; ``causal`` masks columns j > i (top-left aligned).
    An optional second input is an additive float mask (last axis only, like ``causal``)."""
    x = nodes[0]
    scale = float(scale)
    if len(nodes) == 1 and not causal:
        return _along_last(ctx, x, inputs[0].shape, axis, lambda v: lib.soft_max_ext(ctx, v, None, scale, 0.0)
                           if scale != 1.0 else lib.soft_max(ctx, v))
    if causal:
        x = lib.diag_mask_inf(ctx, x, 0)
    mask = mask_node(ctx, nodes[1], inputs[1].shape, inputs[0].shape) if len(nodes) > 1 else None
    return lib.soft_max_ext(ctx, x, mask, scale, 0.0)


@define("softmax_backward", infer=_infer_grad_pair("softmax_backward"), differentiable=False)
def _softmax_backward(ctx, nodes, inputs, out, axis=-1):
    """y * (g - sum(g * y)) along ``axis``, as torch computes it.

    Not ggml_soft_max_ext_back: ggml-alloc may run it in place on y (its src1, when y has no other
    consumer left), and its kernel copies g into the output row before it multiplies by y."""
    g, y = nodes
    shape = inputs[0].shape
    ax = axis % max(len(shape), 1)
    kept = tuple(1 if i == ax else d for i, d in enumerate(shape))
    dot = sum_kept(ctx, lib.mul(ctx, g, y), shape, kept)
    return lib.mul(ctx, lib.sub(ctx, g, dot), y)


def _log_softmax_backward(g, n):
    return op.log_softmax_backward(g, n.output, axis=n.params.get("axis", -1))


@define("log_softmax_backward", infer=_infer_grad_pair("log_softmax_backward"), differentiable=False)
def _log_softmax_backward_op(ctx, nodes, inputs, out, axis=-1):
    """g - exp(y) * sum(g) along ``axis`` (y the log_softmax output)."""
    g, y = nodes
    shape = inputs[0].shape
    if not shape:
        return lib.scale(ctx, g, 0.0)
    ax = axis % len(shape)
    if fast_math.ACTIVE and ax == len(shape) - 1 and _same_rows(g, y):   # one node
        return fast_math.log_softmax_rows_backward(ctx, g, y)
    kept = tuple(1 if i == ax else d for i, d in enumerate(shape))
    total = sum_kept(ctx, g, shape, kept)
    # exp(y) is the softmax: the forward's own when it is in this graph. Otherwise ggml_soft_max(y)
    # computes it with a vectorised exp, but only in whole SIMD chunks (16 lanes with AVX-512):
    # shorter rows run scalar, and then one exp over merged rows is faster (AVX-512 build, 256
    # rows of 8: 4.5 µs against 13.7).
    p = saved_node(y, "softmax")
    if not p:
        if ax == len(shape) - 1 and shape[-1] >= SIMD_FLOATS:
            p = lib.soft_max(ctx, y)
        else:
            p = merged_op(ctx, fast_math.exp, (y,), shape)
            if type(p) is FlatNode:
                p = p.shaped(ctx)
    return merged_op(ctx, lib.sub, (g, lib.mul(ctx, p, total)), shape)


@define("log_softmax", saves=(), infer=_log_softmax_infer, save_output=True, backward=_log_softmax_backward,
        expose=expose("log_softmax", *_ACT, args=dim_args,
                      doc="x - logsumexp(x) along ``dim`` (default the last axis), stable (never the log of an "
                      "underflowed softmax).",
                      example=">>> gg.log_softmax(gg.tensor([0.0, 0.0]), dim=0).exp().tolist()\n[0.5, 0.5]"))
def _log_softmax(ctx, nodes, inputs, out, axis=-1):
    """x - logsumexp(x) along ``axis`` (stable: never log of an underflowed softmax)."""
    a = inputs[0]
    ax = norm_axis("log_softmax", axis, a.ndim)
    if a.ndim == 0:
        return lib.scale(ctx, nodes[0], 0.0)
    if fast_math.ACTIVE and ax == a.ndim - 1 and node_nb(nodes[0])[0] == 4:
        return fast_math.log_softmax_rows(ctx, nodes[0])   # one node instead of eight
    m, logsum, p = logsumexp_parts(ctx, nodes[0], a.shape, (ax,))
    y = lib.sub(ctx, lib.sub(ctx, nodes[0], m), logsum)
    if ax != a.ndim - 1:
        return y
    return SavedNode(y, softmax=reshape(ctx, p, a.shape))   # rows of x itself: exp(y) in y's layout
