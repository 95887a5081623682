"""The recurrent cells' pointwise parts as one op each: ``lstm_cell(gates, c) -> [h | c']`` and
``gru_cell(xw, hw, h) -> h'`` (torch's GRU: r, z, n from the input and hidden projections).

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


# ---------------------------------------------------------------- GRU
def _infer_gru(xw, hw, h):
    name = "gru_cell"
    same_device(name, xw, hw, h)
    same_float(name, xw, hw, h)
    if (xw.ndim != 2 or hw.shape != xw.shape or h.ndim != 2 or xw.shape[1] != 3 * h.shape[1]
            or xw.shape[0] != h.shape[0]):
        raise ValueError(f"gru_cell: expected xw and hw (N, 3H) and h (N, H), got {xw.shape}, {hw.shape} and {h.shape}")
    if 0 in h.shape:
        raise ValueError(f"gru_cell: empty input {h.shape} (the layers use the composed cell for those)")
    return tuple(h.shape), float32


def _gru_parts(ctx, xw, hw, n: int, h: int) -> tuple:
    """r, z, n and the hidden part hn from the node inputs (torch's GRU: n = tanh(xn + r * hn))."""
    xs = _blocks3(ctx, xw, n, h)
    hs = _blocks3(ctx, hw, n, h)
    r = fast_math.sigmoid(ctx, lib.add(ctx, xs[0], hs[0]))
    z = fast_math.sigmoid(ctx, lib.add(ctx, xs[1], hs[1]))
    nn_ = fast_math.tanh(ctx, lib.add(ctx, xs[2], lib.mul(ctx, r, hs[2])))
    return r, z, nn_, hs[2]


def _blocks3(ctx, node, n: int, h: int) -> list:
    return [lib.cont(ctx, lib.view_2d(ctx, node, h, n, 3 * h * 4, k * h * 4)) for k in range(3)]


def _gru_backward(g, n):
    xw, hw, h = n.inputs
    hid = h.shape[1]
    if CREATE_GRAPH.get():
        return _gru_composed_backward(g, xw, hw, h, hid)
    both = op.gru_cell_backward(g, xw, hw, h)
    rows = h.shape[0]

    def part(a, b):
        return op.slice(both, start=(0, a * hid), stop=(rows, b * hid), step=(1, 1))
    return (part(0, 3) if xw.requires_grad else None, part(3, 6) if hw.requires_grad else None,
            part(6, 7) if h.requires_grad else None)


def _gru_composed_backward(g, xw, hw, h, hid: int):
    """The same gradient from differentiable ops (second derivatives)."""
    xr, xz, xn = (_cols(xw, k, hid) for k in range(3))
    hr, hz, hn = (_cols(hw, k, hid) for k in range(3))
    r, z = op.sigmoid(op.add(xr, hr)), op.sigmoid(op.add(xz, hz))
    nn_ = op.tanh(op.add(xn, op.mul(r, hn)))
    one_minus = lambda t: op.add_scalar(op.neg(t), c=1.0)  # noqa: E731
    dpre_n = op.mul(op.mul(g, one_minus(z)), one_minus(op.square(nn_)))
    dpre_r = op.mul(op.mul(dpre_n, hn), op.mul(r, one_minus(r)))
    dpre_z = op.mul(op.mul(g, op.sub(h, nn_)), op.mul(z, one_minus(z)))
    dxw = op.concat(dpre_r, dpre_z, dpre_n, axis=1)
    dhw = op.concat(dpre_r, dpre_z, op.mul(dpre_n, r), axis=1)
    return dxw, dhw, op.mul(g, z)


@define("gru_cell", infer=_infer_gru, backward=_gru_backward,
        work=lambda xw, hw, h: 25.0 * h.shape[0] * h.shape[1])
def _gru_cell(ctx, nodes, inputs, out):
    """h' = (1 - z) n + z h = n + z (h - n) from the input and hidden projections (biases included)."""
    xw, hw, h = nodes
    rows, hid = inputs[2].shape
    r, z, nn_, hn = _gru_parts(ctx, xw, hw, rows, hid)
    return lib.add(ctx, nn_, lib.mul(ctx, z, lib.sub(ctx, h, nn_)))


def _infer_gru_backward(g, xw, hw, h):
    same_float("gru_cell_backward", g, xw, hw, h)
    if tuple(g.shape) != tuple(h.shape):
        raise ValueError(f"gru_cell_backward: gradient {g.shape} does not match the cell's output {h.shape}")
    return (h.shape[0], 7 * h.shape[1]), float32


@define("gru_cell_backward", infer=_infer_gru_backward, differentiable=False,
        work=lambda g, xw, hw, h: 35.0 * h.shape[0] * h.shape[1])
def _gru_cell_backward(ctx, nodes, inputs, out):
    """[d xw | d hw | d h] (N, 7H) from the output gradient, recomputing the gates."""
    g, xw, hw, h = nodes
    rows, hid = inputs[3].shape
    r, z, nn_, hn = _gru_parts(ctx, xw, hw, rows, hid)
    one_minus = lambda t: lib.scale_bias(ctx, t, -1.0, 1.0)  # noqa: E731
    dpre_n = lib.mul(ctx, lib.mul(ctx, g, one_minus(z)), one_minus(lib.sqr(ctx, nn_)))
    dpre_r = lib.mul(ctx, lib.mul(ctx, dpre_n, hn), lib.mul(ctx, r, one_minus(r)))
    dpre_z = lib.mul(ctx, lib.mul(ctx, g, lib.sub(ctx, h, nn_)), lib.mul(ctx, z, one_minus(z)))
    out_node = dpre_r
    for part in (dpre_z, dpre_n, dpre_r, dpre_z, lib.mul(ctx, dpre_n, r), lib.mul(ctx, g, z)):
        out_node = lib.concat(ctx, out_node, part, 0)
    return out_node
