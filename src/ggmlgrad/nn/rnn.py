"""Recurrent layers: ``RNN``, ``LSTM``, ``GRU`` and their cells, with torch's parameter names.

Each layer and direction runs as one input projection for every time step at once (one matmul,
biases folded in), then per step one hidden matmul and the gate arithmetic, all ordinary ops.
In graph mode and inside a capture the unrolled sequence is therefore queued and computed as one
graph (with its backward), never one compute per step.

Parameters as torch: ``weight_ih_l{k}``, ``weight_hh_l{k}``, ``bias_ih_l{k}``, ``bias_hh_l{k}``,
``weight_hr_l{k}`` (LSTM ``proj_size``) and the ``_reverse`` suffix of the backward direction;
gates in torch's order (LSTM i, f, g, o; GRU r, z, n), all initialised from
U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)). A torch state dict loads as is.

Packed input (:class:`~ggmlgrad.nn.utils.rnn.PackedSequence`): each step runs on the rows still
running (their count is host data), as torch does; the output is packed again.

>>> import ggmlgrad as gg
>>> lstm = gg.nn.LSTM(4, 8, num_layers=2, batch_first=True)
>>> out, (h, c) = lstm(gg.ones(3, 5, 4))
>>> out.shape, h.shape, c.shape
((3, 5, 8), (2, 3, 8), (2, 3, 8))
"""
from __future__ import annotations

import math

import numpy as np

from ..ops import op
from ..tensor import Tensor
from ..tensor.autograd_api import Function
from ..tensor.creation import zeros
from ..tensor.grad_mode import is_grad_enabled
from ..tensor.functional_shape import cat, stack
from . import functional as F
from . import init
from .layers import _float32_only, _positive_int
from .module import Module, Parameter
from .utils.rnn import PackedSequence, filled, narrow, take

__all__ = ["RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell"]

_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


# ---------------------------------------------------------------- splitting with one gradient
class _Piece(Function):
    """One piece of :func:`split`. A plain slice's gradient is its input's shape, zero outside the
    slice: split into L pieces, that is L full-size gradients to add (O(L^2) for a sequence). The
    pieces instead leave their gradients in a shared stash, and the first piece, which every later
    one takes as an (ungraded) input so that backward reaches it last, returns them concatenated."""

    @staticmethod
    def forward(ctx, x, prev, stash, k, axis, start, stop):
        ctx.stash, ctx.k, ctx.axis = stash, k, axis
        return narrow(x, axis, start, stop)

    @staticmethod
    def backward(ctx, g):
        stash = ctx.stash
        stash["grads"][ctx.k] = g
        if ctx.k != stash["first"]:
            return None, None, None, None, None, None, None
        grads, stash["grads"] = stash["grads"], {}
        parts = []
        for k, (start, stop) in enumerate(stash["bounds"]):
            gk = grads.get(k)
            if gk is None:   # a piece no gradient reached (e.g. steps after the last one the loss reads)
                shape = list(g.shape)
                shape[ctx.axis] = stop - start
                gk = filled(g, tuple(shape), 0.0)
            parts.append(gk)
        return cat(parts, ctx.axis), None, None, None, None, None, None


def split(x: Tensor, axis: int, bounds: list, order=None) -> list:
    """``x`` cut along ``axis`` at ``bounds`` ([(start, stop), ...] covering the axis in order), with
    one concatenated gradient instead of one full-size gradient per piece. ``order``: the order in
    which the pieces are consumed (default: along the axis); the first consumed delivers the gradient."""
    if not (x.requires_grad and is_grad_enabled()) or len(bounds) == 1:
        return [narrow(x, axis, a, b) for a, b in bounds]
    order = list(range(len(bounds))) if order is None else list(order)
    stash = {"grads": {}, "bounds": bounds, "first": order[0]}
    pieces, prev = [None] * len(bounds), None
    for k in order:
        a, b = bounds[k]
        prev = pieces[k] = _Piece.apply(x, prev, stash, k, axis, a, b)
    return pieces


# ---------------------------------------------------------------- one time step (shared with the cells)
def _cols(x: Tensor, k: int, h: int) -> Tensor:
    """Gate block ``k`` (columns [k*h, (k+1)*h)) of a (N, G*h) matrix."""
    return narrow(x, x.ndim - 1, k * h, (k + 1) * h)


def rnn_step(mode: str, xw: Tensor, h: Tensor, c, w_hh: Tensor, b_hh, w_hr=None):
    """One step from ``xw`` (the input projection of this step, with b_ih, and for RNN/LSTM also
    b_hh folded in when ``b_hh`` is None): returns (h', c') (c' None except for LSTM)."""
    if mode == "GRU":
        hw = F.linear(h, w_hh, b_hh)
        if h.shape[0]:   # one op (ops/rnn_cell.py); an empty batch takes the composed form below
            return op.gru_cell(xw, hw, h), None
        hid = w_hh.shape[1]
        rz = op.sigmoid(op.add(narrow(xw, 1, 0, 2 * hid), narrow(hw, 1, 0, 2 * hid)))
        r, z = _cols(rz, 0, hid), _cols(rz, 1, hid)
        n = op.tanh(op.add(_cols(xw, 2, hid), op.mul(r, _cols(hw, 2, hid))))
        return op.add(n, op.mul(z, op.sub(h, n))), None   # (1 - z) n + z h
    gates = op.add(xw, F.linear(h, w_hh, b_hh))
    if mode == "RNN_TANH":
        return op.tanh(gates), None
    if mode == "RNN_RELU":
        return op.relu(gates), None
    hid = w_hh.shape[0] // 4
    if c.shape[0]:   # the cell's pointwise part as one op (ops/rnn_cell.py), [h | c'] side by side
        hc = op.lstm_cell(gates, c)
        h, c = narrow(hc, 1, 0, hid), narrow(hc, 1, hid, 2 * hid)
    else:            # an empty batch: the composed form (ggml kernels take no empty operands)
        s = op.sigmoid(gates)
        i, f, o = _cols(s, 0, hid), _cols(s, 1, hid), _cols(s, 3, hid)
        c = op.add(op.mul(f, c), op.mul(i, op.tanh(_cols(gates, 2, hid))))
        h = op.mul(o, op.tanh(c))
    if w_hr is not None:
        h = F.linear(h, w_hr)
    return h, c


def _first_step(mode: str, xw: Tensor, b_hh, hid: int, w_hr):
    """The step from a zero state: no hidden matmul (W_hh 0 = 0), and for LSTM no f * c."""
    if mode == "GRU":
        rz = op.sigmoid(op.add(narrow(xw, 1, 0, 2 * hid), narrow(b_hh, 0, 0, 2 * hid)) if b_hh is not None
                        else narrow(xw, 1, 0, 2 * hid))
        r, z = _cols(rz, 0, hid), _cols(rz, 1, hid)
        hn = _cols(xw, 2, hid)
        n = op.tanh(op.add(hn, op.mul(r, narrow(b_hh, 0, 2 * hid, 3 * hid))) if b_hh is not None else hn)
        return op.sub(n, op.mul(z, n)), None
    if mode == "RNN_TANH":
        return op.tanh(xw), None
    if mode == "RNN_RELU":
        return op.relu(xw), None
    s = op.sigmoid(xw)
    c = op.mul(_cols(s, 0, hid), op.tanh(_cols(xw, 2, hid)))
    h = op.mul(_cols(s, 3, hid), op.tanh(c))
    return (F.linear(h, w_hr) if w_hr is not None else h), c


class RNNBase(Module):
    """The multi-layer, optionally bidirectional recurrent layer behind RNN, LSTM and GRU."""

    def __init__(self, mode: str, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0,
                 device=None, dtype=None) -> None:
        super().__init__()
        name = type(self).__name__
        _float32_only(name, dtype)
        self.mode = mode
        self.input_size = _positive_int(name, "input_size", input_size)
        self.hidden_size = _positive_int(name, "hidden_size", hidden_size)
        self.num_layers = _positive_int(name, "num_layers", num_layers)
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout <= 1:
            raise ValueError(f"{name}: dropout should be a number in range [0, 1], got {dropout!r}")
        if isinstance(proj_size, bool) or not isinstance(proj_size, int) or proj_size < 0:
            raise ValueError(f"{name}: proj_size should be a non-negative int, got {proj_size!r}")
        if proj_size and mode != "LSTM":
            raise ValueError(f"{name}: proj_size argument is only supported for LSTM, not RNN or GRU")
        if proj_size >= hidden_size:
            raise ValueError(f"{name}: proj_size ({proj_size}) has to be smaller than hidden_size ({hidden_size})")
        self.bias, self.batch_first, self.dropout = bool(bias), bool(batch_first), float(dropout)
        self.bidirectional, self.proj_size = bool(bidirectional), proj_size
        gate = _GATES[mode] * hidden_size
        real_hidden = proj_size or hidden_size
        for layer in range(num_layers):
            for sfx in self._suffixes():
                width = input_size if layer == 0 else real_hidden * self.num_directions
                setattr(self, f"weight_ih_l{layer}{sfx}", Parameter(zeros(gate, width, device=device)))
                setattr(self, f"weight_hh_l{layer}{sfx}", Parameter(zeros(gate, real_hidden, device=device)))
                if bias:
                    setattr(self, f"bias_ih_l{layer}{sfx}", Parameter(zeros(gate, device=device)))
                    setattr(self, f"bias_hh_l{layer}{sfx}", Parameter(zeros(gate, device=device)))
                if proj_size:
                    setattr(self, f"weight_hr_l{layer}{sfx}", Parameter(zeros(proj_size, hidden_size, device=device)))
        self.reset_parameters()

    @property
    def num_directions(self) -> int:
        return 2 if self.bidirectional else 1

    def _suffixes(self) -> tuple:
        return ("", "_reverse") if self.bidirectional else ("",)

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            init.uniform_(p, -bound, bound)

    def flatten_parameters(self) -> None:
        """A no-op, as torch's on the CPU (cuDNN's packed weight buffer does not exist here)."""

    @property
    def _flat_weights_names(self) -> list:
        return list(self._parameters)

    @property
    def all_weights(self) -> list:
        """The parameters per layer and direction: [[weight_ih, weight_hh, bias_ih, bias_hh(, weight_hr)], ...]."""
        return [[p for p in self._weights(layer, sfx) if p is not None]
                for layer in range(self.num_layers) for sfx in self._suffixes()]

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        for key, default in (("bias", True), ("batch_first", False), ("dropout", 0.0), ("bidirectional", False),
                             ("proj_size", 0)):
            if getattr(self, key) != default:
                s += f", {key}={getattr(self, key)}"
        if self.mode == "RNN_RELU":
            s += ", nonlinearity='relu'"
        return s

    # ------------------------------------------------------------------ forward
    def _weights(self, layer: int, sfx: str) -> tuple:
        get = self._parameters.get
        return (get(f"weight_ih_l{layer}{sfx}"), get(f"weight_hh_l{layer}{sfx}"), get(f"bias_ih_l{layer}{sfx}"),
                get(f"bias_hh_l{layer}{sfx}"), get(f"weight_hr_l{layer}{sfx}"))

    def _state_shapes(self, n: int) -> tuple:
        lead = self.num_layers * self.num_directions
        h = (lead, n, self.proj_size or self.hidden_size)
        return (h, (lead, n, self.hidden_size)) if self.mode == "LSTM" else (h,)

    def forward(self, input, hx=None):
        name = type(self).__name__
        packed = isinstance(input, PackedSequence)
        if packed:
            x, bs = input.data, [int(b) for b in input.batch_sizes]
            n, unbatched = bs[0], False
        else:
            if not isinstance(input, Tensor):
                raise TypeError(f"{name}: input must be a Tensor or PackedSequence, got {type(input).__name__}")
            if input.ndim not in (2, 3):
                raise ValueError(f"{name}: Expected input to be 2D or 3D, got {input.ndim}D tensor of shape {input.shape}")
            unbatched = input.ndim == 2
            x = input.reshape(input.shape[0], 1, input.shape[1]) if unbatched else input
            if self.batch_first and not unbatched:
                x = x.transpose(0, 1)
            steps, n = x.shape[0], x.shape[1]
            if steps == 0:
                raise RuntimeError(f"{name}: Expected sequence length to be larger than 0 in RNN")
            bs = [n] * steps
            x = x.reshape(steps * n, x.shape[2])
        if x.shape[-1] != self.input_size:
            raise ValueError(f"{name}: input.size(-1) must be equal to input_size. Expected {self.input_size}, "
                             f"got {x.shape[-1]}")
        states = self._initial_states(hx, n, unbatched, input if packed else None)
        out, finals = self._run_layers(x, bs, states)
        finals = [stack(f, 0) for f in finals]                      # (layers*dirs, N, H) each
        if packed and input.unsorted_indices is not None:
            finals = [take(f, input.unsorted_indices, 1) for f in finals]
        if packed:
            output = PackedSequence(out, input.batch_sizes, input.sorted_indices, input.unsorted_indices)
        else:
            output = out.reshape(len(bs), n, out.shape[-1])
            if unbatched:
                output = output.reshape(len(bs), out.shape[-1])
                finals = [f.reshape(f.shape[0], f.shape[2]) for f in finals]
            elif self.batch_first:
                output = output.transpose(0, 1)
        return (output, tuple(finals)) if self.mode == "LSTM" else (output, finals[0])

    def _initial_states(self, hx, n: int, unbatched: bool, packed):
        """Per (layer, direction): its (h0, c0) in sorted batch order, or None for zeros."""
        name = type(self).__name__
        if hx is None:
            return [None] * (self.num_layers * self.num_directions)
        parts = tuple(hx) if self.mode == "LSTM" else (hx,)
        if self.mode == "LSTM" and len(parts) != 2:
            raise ValueError(f"{name}: hx must be a tuple (h_0, c_0)")
        shapes = self._state_shapes(n)
        fixed = []
        for t, shape in zip(parts, shapes):
            if not isinstance(t, Tensor):
                raise TypeError(f"{name}: initial states must be Tensors, got {type(t).__name__}")
            if unbatched:
                if t.ndim != 2:
                    raise RuntimeError(f"{name}: For unbatched 2-D input, hx should also be 2-D but got {t.ndim}-D tensor")
                t = t.reshape(t.shape[0], 1, t.shape[1])
            if tuple(t.shape) != shape:
                raise RuntimeError(f"{name}: Expected hidden size {shape}, got {tuple(t.shape)}")
            if packed is not None and packed.sorted_indices is not None:
                t = take(t, packed.sorted_indices, 1)
            fixed.append(t)
        out = []
        for k in range(self.num_layers * self.num_directions):
            out.append(tuple(narrow(t, 0, k, k + 1).reshape(t.shape[1], t.shape[2]) for t in fixed))
        return out

    def _run_layers(self, x: Tensor, bs: list, states: list):
        finals: list = [[], []]
        for layer in range(self.num_layers):
            outs = []
            for d, sfx in enumerate(self._suffixes()):
                state = states[layer * self.num_directions + d]
                y, h, c = self._run_direction(x, bs, self._weights(layer, sfx), state, reverse=d == 1)
                outs.append(y)
                finals[0].append(h)
                finals[1].append(c)
            x = outs[0] if len(outs) == 1 else cat(outs, 1)
            if self.dropout > 0 and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, self.training)
        return x, (finals if self.mode == "LSTM" else finals[:1])

    def _run_direction(self, x: Tensor, bs: list, weights: tuple, state, reverse: bool):
        """One layer in one direction over rows ``x`` (packed or time-major flattened)."""
        w_ih, w_hh, b_ih, b_hh, w_hr = weights
        mode, hid = self.mode, self.hidden_size
        fold = b_ih is not None and mode != "GRU"   # RNN/LSTM: b_hh joins the input projection
        xw = F.linear(x, w_ih, op.add(b_ih, b_hh) if fold else b_ih)
        rec_bias = None if fold else b_hh
        starts = np.concatenate([[0], np.cumsum(bs)]).tolist()
        order = range(len(bs) - 1, -1, -1) if reverse else range(len(bs))
        h = c = None
        if state is None and len(bs) == 1:
            # one step from zeros: through the hidden matmul, so weight_hh gets its (zero) gradient as in
            # torch (with more steps the later ones give it one, and the first skips the zero matmul)
            state = (filled(xw, (bs[0], w_hh.shape[1]), 0.0), filled(xw, (bs[0], hid), 0.0))
        outs = [None] * len(bs)
        steps = split(xw, 0, [(starts[t], starts[t] + bs[t]) for t in range(len(bs))], order)
        done_h, done_c = [], []   # forward direction: rows that finished (the shortest sequences last)
        for t in order:
            b = bs[t]
            xw_t = steps[t]
            if h is not None and h.shape[0] > b:            # forward: sequences that ended keep their state
                done_h.append(narrow(h, 0, b, h.shape[0]))
                h = narrow(h, 0, 0, b)
                if c is not None:
                    done_c.append(narrow(c, 0, b, c.shape[0]))
                    c = narrow(c, 0, 0, b)
            if h is None or h.shape[0] < b:                 # first step, or reverse: sequences that start here
                h, c = self._join(mode, xw_t, h, c, state, b, hid, w_hh, rec_bias, w_hr)
            else:
                h, c = rnn_step(mode, xw_t, h, c, w_hh, rec_bias, w_hr)
            outs[t] = h
        if done_h:
            h = cat([h] + done_h[::-1], 0)
            if c is not None:
                c = cat([c] + done_c[::-1], 0)
        return cat(outs, 0) if len(outs) > 1 else outs[0], h, c

    @staticmethod
    def _join(mode, xw_t, h, c, state, b, hid, w_hh, b_hh, w_hr):
        """The step for rows [len(h), b): from their initial state (zeros: no hidden matmul), the
        rows before it from ``h``/``c``."""
        have = 0 if h is None else h.shape[0]
        new_xw = narrow(xw_t, 0, have, b)
        if state is None:
            h_new, c_new = _first_step(mode, new_xw, b_hh, hid, w_hr)
        else:
            h0 = narrow(state[0], 0, have, b)
            c0 = narrow(state[1], 0, have, b) if mode == "LSTM" else None
            h_new, c_new = rnn_step(mode, new_xw, h0, c0, w_hh, b_hh, w_hr)
        if h is None:
            return h_new, c_new
        h_old, c_old = rnn_step(mode, narrow(xw_t, 0, 0, have), h, c, w_hh, b_hh, w_hr)
        return cat([h_old, h_new], 0), (cat([c_old, c_new], 0) if c_new is not None else None)


class RNN(RNNBase):
    """Elman RNN: h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh) (``nonlinearity="relu"``: relu).

    >>> import ggmlgrad as gg
    >>> out, h = gg.nn.RNN(3, 5, bidirectional=True)(gg.ones(7, 2, 3))
    >>> out.shape, h.shape
    ((7, 2, 10), (2, 2, 5))
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, nonlinearity: str = "tanh",
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 device=None, dtype=None, proj_size: int = 0) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"RNN: Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or 'relu'.")
        super().__init__("RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU", input_size, hidden_size, num_layers,
                         bias, batch_first, dropout, bidirectional, proj_size, device, dtype)
        self.nonlinearity = nonlinearity


class LSTM(RNNBase):
    """Long short-term memory; ``proj_size > 0`` projects h_t with ``weight_hr_l{k}`` (h has that size).

    >>> import ggmlgrad as gg
    >>> out, (h, c) = gg.nn.LSTM(3, 6, proj_size=2)(gg.ones(4, 3))   # unbatched (L, H_in)
    >>> out.shape, h.shape, c.shape
    ((4, 2), (1, 2), (1, 6))
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0,
                 device=None, dtype=None) -> None:
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         proj_size, device, dtype)


class GRU(RNNBase):
    """Gated recurrent unit (torch's equations, gates r, z, n).

    >>> import ggmlgrad as gg
    >>> out, h = gg.nn.GRU(3, 4, num_layers=2, batch_first=True)(gg.ones(2, 5, 3))
    >>> out.shape, h.shape
    ((2, 5, 4), (2, 2, 4))
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 device=None, dtype=None, proj_size: int = 0) -> None:
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         proj_size, device, dtype)


# ---------------------------------------------------------------- cells
class RNNCellBase(Module):
    """One step of RNN/LSTM/GRU: ``weight_ih``, ``weight_hh``, ``bias_ih``, ``bias_hh`` (torch's names)."""

    def __init__(self, mode: str, input_size: int, hidden_size: int, bias: bool, device=None, dtype=None) -> None:
        super().__init__()
        name = type(self).__name__
        _float32_only(name, dtype)
        self.mode = mode
        self.input_size = _positive_int(name, "input_size", input_size)
        self.hidden_size = _positive_int(name, "hidden_size", hidden_size)
        self.bias = bool(bias)
        gate = _GATES[mode] * hidden_size
        self.weight_ih = Parameter(zeros(gate, input_size, device=device))
        self.weight_hh = Parameter(zeros(gate, hidden_size, device=device))
        if bias:
            self.bias_ih = Parameter(zeros(gate, device=device))
            self.bias_hh = Parameter(zeros(gate, device=device))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            init.uniform_(p, -bound, bound)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if not self.bias:
            s += ", bias=False"
        if self.mode == "RNN_RELU":
            s += ", nonlinearity='relu'"
        return s

    def forward(self, input: Tensor, hx=None):
        name = type(self).__name__
        if not isinstance(input, Tensor) or input.ndim not in (1, 2):
            raise ValueError(f"{name}: Expected input to be 1D or 2D, got "
                             f"{getattr(input, 'ndim', type(input).__name__)}D")
        unbatched = input.ndim == 1
        x = input.reshape(1, input.shape[0]) if unbatched else input
        if x.shape[1] != self.input_size:
            raise ValueError(f"{name}: input has inconsistent input_size: got {x.shape[1]} expected {self.input_size}")
        n = x.shape[0]
        xw = F.linear(x, self.weight_ih, self.bias_ih)
        if hx is None:
            h = c = None
        else:
            parts = tuple(hx) if self.mode == "LSTM" else (hx,)
            if self.mode == "LSTM" and len(parts) != 2:
                raise ValueError(f"{name}: hx must be a tuple (h, c)")
            parts = tuple(p.reshape(1, p.shape[0]) if unbatched and p.ndim == 1 else p for p in parts)
            for p in parts:
                if tuple(p.shape) != (n, self.hidden_size):
                    raise RuntimeError(f"{name}: hidden state has shape {tuple(p.shape)}, expected "
                                       f"{(n, self.hidden_size)}")
            h, c = parts[0], (parts[1] if self.mode == "LSTM" else None)
        if h is None:   # zeros, through the hidden matmul: weight_hh gets its (zero) gradient, as in torch
            h = filled(xw, (n, self.hidden_size), 0.0)
            c = h if self.mode == "LSTM" else None
        h, c = rnn_step(self.mode, xw, h, c, self.weight_hh, self.bias_hh)
        if unbatched:
            h = h.reshape(self.hidden_size)
            c = c.reshape(self.hidden_size) if c is not None else None
        return (h, c) if self.mode == "LSTM" else h


class RNNCell(RNNCellBase):
    """h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh) (or relu).

    >>> import ggmlgrad as gg
    >>> gg.nn.RNNCell(3, 4)(gg.ones(2, 3)).shape
    (2, 4)
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh",
                 device=None, dtype=None) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"RNNCell: Unknown nonlinearity: {nonlinearity}")
        super().__init__("RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU", input_size, hidden_size, bias,
                         device, dtype)
        self.nonlinearity = nonlinearity


class LSTMCell(RNNCellBase):
    """One LSTM step: returns (h', c').

    >>> import ggmlgrad as gg
    >>> h, c = gg.nn.LSTMCell(3, 4)(gg.ones(2, 3))
    >>> h.shape, c.shape
    ((2, 4), (2, 4))
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None) -> None:
        super().__init__("LSTM", input_size, hidden_size, bias, device, dtype)


class GRUCell(RNNCellBase):
    """One GRU step.

    >>> import ggmlgrad as gg
    >>> gg.nn.GRUCell(3, 4)(gg.ones(2, 3)).shape
    (2, 4)
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None) -> None:
        super().__init__("GRU", input_size, hidden_size, bias, device, dtype)

