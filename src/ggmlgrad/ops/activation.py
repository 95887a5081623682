"""Activations and softmax family."""
from __future__ import annotations

from .._ggml import lib
from ..engine import float32
from .registry import define, op, same_float


def _infer_act(name):
    def infer(a, **params):
        same_float(name, a)
        return a.shape, float32
    return infer


@define("relu", infer=_infer_act("relu"), save_output=True,
        backward=lambda g, n: op.mul(g, op.step(n.output)))
def _relu(ctx, nodes, inputs, out):
    return lib.relu(ctx, nodes[0])


@define("step", infer=_infer_act("step"), differentiable=False)
def _step(ctx, nodes, inputs, out):
    """1 where x > 0 else 0."""
    return lib.step(ctx, nodes[0])


@define("tanh", infer=_infer_act("tanh"), save_output=True,
        backward=lambda g, n: op.mul(g, op.add_scalar(op.neg(op.square(n.output)), c=1.0)))
def _tanh(ctx, nodes, inputs, out):
    return lib.tanh(ctx, nodes[0])


@define("sigmoid", infer=_infer_act("sigmoid"), save_output=True,
        backward=lambda g, n: op.mul(g, op.mul(n.output, op.add_scalar(op.neg(n.output), c=1.0))))
def _sigmoid(ctx, nodes, inputs, out):
    return lib.sigmoid(ctx, nodes[0])
