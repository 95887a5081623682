"""The LSTM cell's pointwise part as one op: ``lstm_cell(gates, c) -> [h | c']``.

``gates`` (N, 4H) are the pre-activations in torch's order i, f, g, o (input and hidden
projections and biases already added), ``c`` (N, H) the previous cell state:

    c' = sigmoid(f) * c + sigmoid(i) * tanh(g),   h = sigmoid(o) * tanh(c'),

returned side by side as (N, 2H). One recorded op instead of about a dozen per time step (graph
mode records each op in Python), and one fused gradient node (``lstm_cell_backward``, which gives
[d gates | d c] as (N, 5H)) instead of a chain of elementwise gradients. A create_graph pass
(second derivatives) takes the same gradient written with differentiable ops instead.
"""
from __future__ import annotations

from .._ggml import lib
from ..engine import float32
from . import fast_math
from .higher_order import CREATE_GRAPH
from .registry import define, op, same_device, same_float


def _infer_cell(gates, c):
    name = "lstm_cell"
    same_device(name, gates, c)
    same_float(name, gates, c)
    if gates.ndim != 2 or c.ndim != 2 or gates.shape[1] != 4 * c.shape[1] or gates.shape[0] != c.shape[0]:
        raise ValueError(f"lstm_cell: expected gates (N, 4H) and c (N, H), got {gates.shape} and {c.shape}")
    if 0 in c.shape:
        raise ValueError(f"lstm_cell: empty input {c.shape} (the layers use the composed cell for those)")
    return (c.shape[0], 2 * c.shape[1]), float32


def _blocks(ctx, gates, n: int, h: int) -> list:
    """The four (N, H) gate blocks of a (N, 4H) node, each made contiguous (the kernels read rows)."""
    return [lib.cont(ctx, lib.view_2d(ctx, gates, h, n, 4 * h * 4, k * h * 4)) for k in range(4)]


def _activations(ctx, gates, n: int, h: int) -> tuple:
    gi, gf, gg, go = _blocks(ctx, gates, n, h)
    return (fast_math.sigmoid(ctx, gi), fast_math.sigmoid(ctx, gf), fast_math.tanh(ctx, gg),
            fast_math.sigmoid(ctx, go))


def _cell_backward(g, n):
    gates, c = n.inputs
    hid = c.shape[1]
    if CREATE_GRAPH.get():
        return _composed_backward(g, gates, c, hid)
    both = op.lstm_cell_backward(g, gates, c)
    rows = c.shape[0]
    dgates = op.slice(both, start=(0, 0), stop=(rows, 4 * hid), step=(1, 1)) if gates.requires_grad else None
    dc = op.slice(both, start=(0, 4 * hid), stop=(rows, 5 * hid), step=(1, 1)) if c.requires_grad else None
    return dgates, dc


def _cols(t, k: int, hid: int):
    return op.slice(t, start=(0, k * hid), stop=(t.shape[0], (k + 1) * hid), step=(1, 1))


def _composed_backward(g, gates, c, hid: int):
    """The same gradient from differentiable ops (second derivatives)."""
    i, f, o = (op.sigmoid(_cols(gates, k, hid)) for k in (0, 1, 3))
    gt = op.tanh(_cols(gates, 2, hid))
    c_new = op.add(op.mul(f, c), op.mul(i, gt))
    tc = op.tanh(c_new)
    dh, dcn = _cols(g, 0, hid), _cols(g, 1, hid)
    dcn = op.add(dcn, op.mul(op.mul(dh, o), op.add_scalar(op.neg(op.square(tc)), c=1.0)))

    def sig_grad(d, s):
        return op.mul(d, op.mul(s, op.add_scalar(op.neg(s), c=1.0)))
    dgates = op.concat(sig_grad(op.mul(dcn, gt), i), sig_grad(op.mul(dcn, c), f),
                       op.mul(op.mul(dcn, i), op.add_scalar(op.neg(op.square(gt)), c=1.0)),
                       sig_grad(op.mul(dh, tc), o), axis=1)
    return dgates, op.mul(dcn, f)


@define("lstm_cell", infer=_infer_cell, backward=_cell_backward,
        work=lambda gates, c: 30.0 * gates.shape[0] * c.shape[1])
def _lstm_cell(ctx, nodes, inputs, out):
    gates, c = nodes
    n, h = inputs[1].shape
    i, f, g, o = _activations(ctx, gates, n, h)
    c_new = lib.add(ctx, lib.mul(ctx, f, c), lib.mul(ctx, i, g))
    h_new = lib.mul(ctx, o, fast_math.tanh(ctx, c_new))
    return lib.concat(ctx, h_new, c_new, 0)


def _infer_cell_backward(g, gates, c):
    same_float("lstm_cell_backward", g, gates, c)
    if tuple(g.shape) != (c.shape[0], 2 * c.shape[1]):
        raise ValueError(f"lstm_cell_backward: gradient {g.shape} does not match the cell's output "
                         f"({c.shape[0]}, {2 * c.shape[1]})")
    return (c.shape[0], 5 * c.shape[1]), float32


@define("lstm_cell_backward", infer=_infer_cell_backward, differentiable=False,
        work=lambda g, gates, c: 40.0 * gates.shape[0] * c.shape[1])
def _lstm_cell_backward(ctx, nodes, inputs, out):
    """[d gates | d c] from the output gradient [dh | dc'], recomputing the activations."""
    g, gates, c = nodes
    n, h = inputs[2].shape
    i, f, gt, o = _activations(ctx, gates, n, h)
    c_new = lib.add(ctx, lib.mul(ctx, f, c), lib.mul(ctx, i, gt))
    tc = fast_math.tanh(ctx, c_new)
    dh = lib.cont(ctx, lib.view_2d(ctx, g, h, n, 2 * h * 4, 0))
    dcn = lib.cont(ctx, lib.view_2d(ctx, g, h, n, 2 * h * 4, h * 4))
    one_minus_sq = lambda t: lib.scale_bias(ctx, lib.sqr(ctx, t), -1.0, 1.0)  # noqa: E731  1 - t^2
    sig_grad = lambda s: lib.mul(ctx, s, lib.scale_bias(ctx, s, -1.0, 1.0))  # noqa: E731  s (1 - s)
    dcn = lib.add(ctx, dcn, lib.mul(ctx, lib.mul(ctx, dh, o), one_minus_sq(tc)))
    di = lib.mul(ctx, lib.mul(ctx, dcn, gt), sig_grad(i))
    df = lib.mul(ctx, lib.mul(ctx, dcn, c), sig_grad(f))
    dg = lib.mul(ctx, lib.mul(ctx, dcn, i), one_minus_sq(gt))
    do = lib.mul(ctx, lib.mul(ctx, dh, tc), sig_grad(o))
    dc = lib.mul(ctx, dcn, f)
    out_node = lib.concat(ctx, di, df, 0)
    for part in (dg, do, dc):
        out_node = lib.concat(ctx, out_node, part, 0)
    return out_node
