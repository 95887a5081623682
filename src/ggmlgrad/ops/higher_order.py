"""Derivatives of the fused gradient ops, for ``backward(create_graph=True)`` / ``autograd.grad``.

Most gradient rules are written with differentiable ops, so a pass that records them on the tape
(create_graph) gives second derivatives for free. A few rules call a fused gradient kernel
(``tanh_backward``, ``outer_grad``, ...), declared ``differentiable=False`` because no forward
program calls them. This table gives those kernels a gradient rule of their own, written with
ops again, so they can be differentiated once more (third derivatives and beyond work too).

- ``DOUBLE_BACKWARD[name](gg, node)``: the input gradients of the fused op ``name`` given ``gg``,
  the gradient of its output; ``node.inputs`` and ``node.params`` as for any rule. A rule with an
  ``accepts(params)`` attribute covers only the parameters it accepts (gelu: the exact form).
- ``ZERO_GRADIENT``: ops whose output is piecewise constant in its inputs (comparisons, masks,
  fills): their derivative is zero almost everywhere, as in torch, so they record nothing.

Any other non-differentiable op met by a create_graph pass raises, naming the op whose rule used it.

>>> from ggmlgrad.ops.higher_order import DOUBLE_BACKWARD
>>> "tanh_backward" in DOUBLE_BACKWARD
True
"""
from __future__ import annotations

import contextvars

from .registry import op

# True while the autograd layer runs a create_graph pass: a rule that normally emits a fused gradient
# node can compose the same gradient from differentiable ops instead (ops/rnn_cell.py does).
CREATE_GRAPH: contextvars.ContextVar = contextvars.ContextVar("ggmlgrad_create_graph_pass", default=False)

ZERO_GRADIENT = frozenset({"fill_like", "lt", "le", "gt", "ge", "eq", "ne", "compare_scalar", "argmax", "argmin",
                           "step", "index_check", "one_hot"})


def _kept_sum(t, axis):
    return op.sum(t, axis=axis, keepdim=True)


def _relu_bw(gg, n):
    # g * [y != 0]: linear in g, piecewise constant in y
    return op.relu_backward(gg, n.inputs[1]), None


def _leaky_bw(gg, n):
    return op.leaky_relu_backward(gg, n.inputs[1], **n.params), None


def _clamp_bw(gg, n):
    return op.clamp_backward(gg, n.inputs[1], **n.params), None


def _minmax_bw(gg, n):
    return op.minmax_backward(gg, n.inputs[1], n.inputs[2], **n.params), None, None


def _tanh_bw(gg, n):
    # g * (1 - y^2): d/dy = -2 g y
    g, y = n.inputs
    return op.tanh_backward(gg, y), op.mul(op.mul(gg, g), op.scale(y, c=-2.0))


def _elu_bw(gg, n):
    # x <= 0: elu'(x) = alpha * exp(x) = elu''(x); x > 0: elu'' = 0
    g, x = n.inputs
    d1 = op.elu_backward(op.fill_like(x, c=1.0), x, **n.params)
    return op.elu_backward(gg, x, **n.params), op.mul(op.mul(gg, g), op.sub(d1, op.step(x)))


def _silu_bw(gg, n):
    # silu'' = s (1 - s) (2 + x (1 - 2 s)), s = sigmoid(x)
    g, x = n.inputs
    s = op.sigmoid(x)
    one_minus = op.add_scalar(op.neg(s), c=1.0)
    inner = op.add_scalar(op.mul(x, op.add_scalar(op.scale(s, c=-2.0), c=1.0)), c=2.0)
    return op.silu_backward(gg, x), op.mul(op.mul(gg, g), op.mul(op.mul(s, one_minus), inner))


def _softplus_bw(gg, n):
    # softplus' = sigmoid(beta x) below the threshold (1 above): '' = beta s (1 - s) below it
    g, x = n.inputs
    beta = float(n.params.get("beta", 1.0))
    threshold = float(n.params.get("threshold", 20.0))
    bx = op.scale(x, c=beta)
    s = op.sigmoid(bx)
    below = op.step(op.add_scalar(op.neg(bx), c=threshold))
    d2 = op.mul(op.scale(op.mul(s, op.add_scalar(op.neg(s), c=1.0)), c=beta), below)
    return op.softplus_backward(gg, x, **n.params), op.mul(op.mul(gg, g), d2)


def _softmax_bw(gg, n):
    # dz = y (g - sum(g y)): linear in g (the same map for gg); d/dy = gg g - gg sum(g y) - g sum(gg y)
    g, y = n.inputs
    axis = n.params.get("axis", -1)
    a = _kept_sum(op.mul(g, y), axis)
    b = _kept_sum(op.mul(gg, y), axis)
    dy = op.sub(op.sub(op.mul(gg, g), op.mul(gg, a)), op.mul(g, b))
    return op.softmax_backward(gg, y, axis=axis), dy


def _log_softmax_bw(gg, n):
    # dz = g - exp(y) sum(g): d/dg = gg - sum(gg exp(y)); d/dy = -gg exp(y) sum(g)
    g, y = n.inputs
    axis = n.params.get("axis", -1)
    p = op.exp(y)
    dg = op.sub(gg, _kept_sum(op.mul(gg, p), axis))
    dy = op.neg(op.mul(op.mul(gg, p), _kept_sum(g, axis)))
    return dg, dy


def _outer_grad_bw(gg, n):
    # outer_grad(x, g) = g^T x, (out, in): d/dx = g gg, d/dg = x gg^T
    x, g = n.inputs
    return (op.matmul(g, gg) if x.requires_grad else None,
            op.linear(x, gg) if g.requires_grad else None)


def _gelu_bw(gg, n):
    # exact GELU: gelu'' = phi(x) (2 - x^2), phi the standard normal density; the tanh form has no rule
    g, x = n.inputs
    phi = op.scale(op.exp(op.scale(op.square(x), c=-0.5)), c=0.3989422804014327)
    d2 = op.mul(phi, op.add_scalar(op.neg(op.square(x)), c=2.0))
    return op.gelu_backward(gg, x, **n.params), op.mul(op.mul(gg, g), d2)


_gelu_bw.accepts = lambda params: params.get("approximate", "none") == "none"   # the tanh form: no rule

DOUBLE_BACKWARD = {
    "gelu_backward": _gelu_bw,
    "relu_backward": _relu_bw,
    "leaky_relu_backward": _leaky_bw,
    "clamp_backward": _clamp_bw,
    "minmax_backward": _minmax_bw,
    "tanh_backward": _tanh_bw,
    "elu_backward": _elu_bw,
    "silu_backward": _silu_bw,
    "softplus_backward": _softplus_bw,
    "softmax_backward": _softmax_bw,
    "log_softmax_backward": _log_softmax_bw,
    "outer_grad": _outer_grad_bw,
}
