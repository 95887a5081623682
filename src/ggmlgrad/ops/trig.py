"""sin and cos, elementwise (ggml's kernels; C's sinf/cosf, so ±inf and NaN give NaN, as torch)."""
from __future__ import annotations

from .._ggml import lib
from .decl import expose
from .elementwise import infer_unary
from .registry import define, op

_SURFACES = ("method", "function")   # torch has no torch.nn.functional.sin / cos


@define("sin", saves=(0,), elementwise=True, infer=infer_unary("sin"), promotes=True,
        backward=lambda g, n: op.mul(g, op.cos(n.inputs[0])),
        expose=expose("sin", *_SURFACES, doc="Sine of x (radians), elementwise.",
                      example=">>> gg.sin(gg.tensor([0.0])).tolist()\n[0.0]"))
def _sin(ctx, nodes, inputs, out):
    return lib.sin(ctx, nodes[0])


@define("cos", saves=(0,), elementwise=True, infer=infer_unary("cos"), promotes=True,
        backward=lambda g, n: op.neg(op.mul(g, op.sin(n.inputs[0]))),
        expose=expose("cos", *_SURFACES, doc="Cosine of x (radians), elementwise.",
                      example=">>> gg.cos(gg.tensor([0.0])).tolist()\n[1.0]"))
def _cos(ctx, nodes, inputs, out):
    return lib.cos(ctx, nodes[0])
