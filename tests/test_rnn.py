"""Recurrent layers (nn.RNN/LSTM/GRU, the cells) and packed sequences.

References: a NumPy float64 LSTM/GRU/RNN written from the equations, float64 finite differences
(gg.gradcheck), and torch (same weights through .safetensors, strict load: torch's parameter
names) for outputs, final states and parameter gradients; graph mode computes a whole unrolled
sequence with its backward as one graph, capture_step replays a training step as eager runs it.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.nn.utils import rnn as trnn

import ggmlgrad as gg
from ggmlgrad import nn
from ggmlgrad.nn.utils import rnn as grnn
from torch_transfer import grads_close, transfer

RNG = np.random.default_rng(0)
# torch warns about its own fast paths (nested tensors, oneDNN projections): not ours
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _np(t):
    return t.detach().numpy()


def _sig(x):
    return 1.0 / (1.0 + np.exp(-x))


def _numpy_rnn(mode, x, p, h0=None, c0=None):
    """One layer, one direction, time-major x (L, N, In), float64 from the torch equations."""
    w_ih, w_hh, b_ih, b_hh = (p[k].astype(np.float64) for k in ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0",
                                                                  "bias_hh_l0"))
    hid = w_hh.shape[1]
    n = x.shape[1]
    h = np.zeros((n, hid)) if h0 is None else h0.astype(np.float64)
    c = np.zeros((n, hid)) if c0 is None else c0.astype(np.float64)
    outs = []
    for xt in x.astype(np.float64):
        gi, gh = xt @ w_ih.T + b_ih, h @ w_hh.T + b_hh
        if mode == "LSTM":
            i, f, g, o = np.split(gi + gh, 4, axis=1)
            c = _sig(f) * c + _sig(i) * np.tanh(g)
            h = _sig(o) * np.tanh(c)
        elif mode == "GRU":
            r = _sig(gi[:, :hid] + gh[:, :hid])
            z = _sig(gi[:, hid:2 * hid] + gh[:, hid:2 * hid])
            nn_ = np.tanh(gi[:, 2 * hid:] + r * gh[:, 2 * hid:])
            h = (1 - z) * nn_ + z * h
        elif mode == "RNN_RELU":
            h = np.maximum(gi + gh, 0)
        else:
            h = np.tanh(gi + gh)
        outs.append(h)
    return np.stack(outs), h, c


def _make(mode, i, h):
    if mode == "LSTM":
        return nn.LSTM(i, h)
    if mode == "GRU":
        return nn.GRU(i, h)
    return nn.RNN(i, h, nonlinearity="relu" if mode == "RNN_RELU" else "tanh")


def _params(m):
    return {k: _np(v) for k, v in m.named_parameters()}


@pytest.mark.parametrize("mode", ["LSTM", "GRU", "RNN_TANH", "RNN_RELU"])
@pytest.mark.parametrize("run", ["eager", "graph", "check", "capture"])
def test_values_against_numpy(mode, run):
    m = _make(mode, 3, 4)
    x = RNG.standard_normal((5, 2, 3)).astype(np.float32)
    h0 = RNG.standard_normal((1, 2, 4)).astype(np.float32)
    c0 = RNG.standard_normal((1, 2, 4)).astype(np.float32)
    want_out, want_h, want_c = _numpy_rnn(mode, x, _params(m), h0[0], c0[0])

    def fn(xt, ht, ct):
        out, hn = m(xt, (ht, ct) if mode == "LSTM" else ht)
        return (out,) + (hn if mode == "LSTM" else (hn,))

    if run == "capture":
        got = gg.capture(fn)(x, h0, c0)
    else:
        with gg.graph_mode(run != "eager", check=run == "check"):
            got = [_np(t) for t in fn(gg.tensor(x), gg.tensor(h0), gg.tensor(c0))]
    np.testing.assert_allclose(got[0], want_out, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1][0], want_h, rtol=1e-5, atol=1e-6)
    if mode == "LSTM":
        np.testing.assert_allclose(got[2][0], want_c, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["LSTM", "GRU", "RNN_TANH"])
def test_gradients_against_finite_differences(mode):
    m = _make(mode, 2, 3)
    x = gg.tensor(RNG.standard_normal((3, 2, 2)).astype(np.float32), requires_grad=True)
    h0 = gg.tensor(RNG.standard_normal((1, 2, 3)).astype(np.float32) * 0.5, requires_grad=True)
    w_hh = gg.tensor(_np(m.weight_hh_l0), requires_grad=True)

    def f(xt, ht, wv):
        # the recurrent weight as an input: the unrolled steps' gradients add up through it
        m._parameters["weight_hh_l0"] = wv
        return m(xt, (ht, ht * 0.5) if mode == "LSTM" else ht)[0]

    assert gg.gradcheck(f, [x, h0, w_hh])


def _torch_pair(cls, kwargs, tmp_path):
    torch.manual_seed(0)
    t = getattr(torch.nn, cls)(**kwargs)
    g = getattr(nn, cls)(**kwargs)
    transfer(t, g, tmp_path)
    return t, g


LAYERS = [
    ("RNN", dict(input_size=3, hidden_size=4, num_layers=2, nonlinearity="relu")),
    ("RNN", dict(input_size=3, hidden_size=4, bidirectional=True, batch_first=True)),
    ("LSTM", dict(input_size=3, hidden_size=4, num_layers=2, bidirectional=True)),
    ("LSTM", dict(input_size=3, hidden_size=5, proj_size=2, batch_first=True, num_layers=2)),
    ("LSTM", dict(input_size=3, hidden_size=4, bias=False)),
    ("GRU", dict(input_size=3, hidden_size=4, num_layers=2, bidirectional=True, batch_first=True)),
]


@pytest.mark.parametrize("cls,kwargs", LAYERS, ids=[f"{c}-{i}" for i, (c, _) in enumerate(LAYERS)])
@pytest.mark.parametrize("with_state", [False, True])
def test_torch_parity_outputs_states_and_parameter_grads(cls, kwargs, with_state, tmp_path):
    t, g = _torch_pair(cls, kwargs, tmp_path)
    bf = kwargs.get("batch_first", False)
    x = RNG.standard_normal((2, 5, 3) if bf else (5, 2, 3)).astype(np.float32)
    dirs = 2 if kwargs.get("bidirectional") else 1
    lead = kwargs.get("num_layers", 1) * dirs
    hsz = kwargs.get("proj_size") or kwargs["hidden_size"]
    h0 = RNG.standard_normal((lead, 2, hsz)).astype(np.float32)
    c0 = RNG.standard_normal((lead, 2, kwargs["hidden_size"])).astype(np.float32)
    hx_t = hx_g = None
    if with_state:
        hx_t = (torch.tensor(h0), torch.tensor(c0)) if cls == "LSTM" else torch.tensor(h0)
        hx_g = (gg.tensor(h0), gg.tensor(c0)) if cls == "LSTM" else gg.tensor(h0)
    to, th = t(torch.tensor(x), hx_t)
    go, gh = g(gg.tensor(x), hx_g)
    ths, ghs = (th, gh) if cls == "LSTM" else ((th,), (gh,))
    np.testing.assert_allclose(_np(go), _np(to), rtol=1e-4, atol=1e-5)
    for a, b in zip(ghs, ths):
        np.testing.assert_allclose(_np(a), _np(b), rtol=1e-4, atol=1e-5)
    w = RNG.standard_normal(to.shape).astype(np.float32)
    ((to * torch.tensor(w)).sum() + sum(s.square().sum() for s in ths)).backward()
    ((go * gg.tensor(w)).sum() + sum(s.square().sum() for s in ghs)).backward()
    grads_close(t, g, rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("cls", ["RNNCell", "LSTMCell", "GRUCell"])
@pytest.mark.parametrize("with_state", [False, True])
def test_cells_match_torch(cls, with_state, tmp_path):
    t, g = _torch_pair(cls, dict(input_size=3, hidden_size=4), tmp_path)
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    h = RNG.standard_normal((2, 4)).astype(np.float32)
    c = RNG.standard_normal((2, 4)).astype(np.float32)
    hx_t = hx_g = None
    if with_state:
        hx_t = (torch.tensor(h), torch.tensor(c)) if cls == "LSTMCell" else torch.tensor(h)
        hx_g = (gg.tensor(h), gg.tensor(c)) if cls == "LSTMCell" else gg.tensor(h)
    to, go = t(torch.tensor(x), hx_t), g(gg.tensor(x), hx_g)
    to, go = (to, go) if cls == "LSTMCell" else ((to,), (go,))
    for a, b in zip(go, to):
        np.testing.assert_allclose(_np(a), _np(b), rtol=1e-5, atol=1e-6)
    sum((s * (k + 1)).sum() for k, s in enumerate(to)).backward()
    sum((s * (k + 1)).sum() for k, s in enumerate(go)).backward()
    grads_close(t, g, rtol=1e-4)
    # unbatched (1-D input)
    u = g(gg.tensor(x[0]))
    ut = t(torch.tensor(x[0]))
    np.testing.assert_allclose(_np(u[0] if cls == "LSTMCell" else u), _np(ut[0] if cls == "LSTMCell" else ut),
                               rtol=1e-5, atol=1e-6)


def test_unbatched_input_matches_torch(tmp_path):
    t, g = _torch_pair("LSTM", dict(input_size=3, hidden_size=4, num_layers=2), tmp_path)
    x = RNG.standard_normal((6, 3)).astype(np.float32)
    to, (th, tc) = t(torch.tensor(x))
    go, (gh, gc) = g(gg.tensor(x))
    assert go.shape == (6, 4) and gh.shape == (2, 4)
    for a, b in ((go, to), (gh, th), (gc, tc)):
        np.testing.assert_allclose(_np(a), _np(b), rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- packed sequences
def test_pack_pad_utilities_match_torch():
    x = RNG.standard_normal((5, 3, 2)).astype(np.float32)
    lengths = [2, 5, 3]
    for bf in (False, True):
        xi = x.transpose(1, 0, 2).copy() if bf else x
        tp = trnn.pack_padded_sequence(torch.tensor(xi), lengths, batch_first=bf, enforce_sorted=False)
        gp = grnn.pack_padded_sequence(gg.tensor(xi), lengths, batch_first=bf, enforce_sorted=False)
        np.testing.assert_array_equal(_np(gp.data), tp.data.numpy())
        np.testing.assert_array_equal(gp.batch_sizes, tp.batch_sizes.numpy())
        np.testing.assert_array_equal(gp.sorted_indices, tp.sorted_indices.numpy())
        np.testing.assert_array_equal(gp.unsorted_indices, tp.unsorted_indices.numpy())
        ty, tl = trnn.pad_packed_sequence(tp, batch_first=bf, padding_value=-2.0, total_length=6)
        gy, gl = grnn.pad_packed_sequence(gp, batch_first=bf, padding_value=-2.0, total_length=6)
        np.testing.assert_array_equal(_np(gy), ty.numpy())
        np.testing.assert_array_equal(gl, tl.numpy())
    seqs = [RNG.standard_normal((n, 2)).astype(np.float32) for n in (3, 1, 4)]
    for side in ("right", "left"):
        want = trnn.pad_sequence([torch.tensor(s) for s in seqs], batch_first=True, padding_value=7.0,
                                 padding_side=side)
        got = grnn.pad_sequence([gg.tensor(s) for s in seqs], batch_first=True, padding_value=7.0, padding_side=side)
        np.testing.assert_array_equal(_np(got), want.numpy())
    with pytest.raises(RuntimeError, match="sorted in decreasing order"):
        grnn.pack_padded_sequence(gg.tensor(x), lengths)
    with pytest.raises(RuntimeError, match="greater than 0"):
        grnn.pack_padded_sequence(gg.tensor(x), [0, 2, 1])
    back = grnn.unpack_sequence(grnn.pack_sequence([gg.tensor(s) for s in seqs], enforce_sorted=False))
    for a, b in zip(back, seqs):
        np.testing.assert_array_equal(_np(a), b)


@pytest.mark.parametrize("cls,kwargs", [("LSTM", dict(num_layers=2, bidirectional=True)),
                                        ("GRU", dict(bidirectional=True, batch_first=True)),
                                        ("RNN", dict(num_layers=2))])
def test_packed_input_matches_torch_with_grads(cls, kwargs, tmp_path):
    t, g = _torch_pair(cls, dict(input_size=3, hidden_size=4, **kwargs), tmp_path)
    bf = kwargs.get("batch_first", False)
    x = RNG.standard_normal((3, 6, 3) if bf else (6, 3, 3)).astype(np.float32)
    lengths = [4, 6, 2]
    tp = trnn.pack_padded_sequence(torch.tensor(x), lengths, batch_first=bf, enforce_sorted=False)
    gp = grnn.pack_padded_sequence(gg.tensor(x), lengths, batch_first=bf, enforce_sorted=False)
    with gg.graph_mode(True):
        to, th = t(tp)
        go, gh = g(gp)
        ths, ghs = (th, gh) if cls == "LSTM" else ((th,), (gh,))
        assert isinstance(go, grnn.PackedSequence)
        np.testing.assert_allclose(_np(go.data), _np(to.data), rtol=1e-4, atol=1e-5)
        for a, b in zip(ghs, ths):
            np.testing.assert_allclose(_np(a), _np(b), rtol=1e-4, atol=1e-5)
        tpad, _ = trnn.pad_packed_sequence(to, batch_first=bf)
        gpad, _ = grnn.pad_packed_sequence(go, batch_first=bf)
        (tpad.square().sum() + ths[0].sum()).backward()
        (gpad.square().sum() + ghs[0].sum()).backward()
        grads_close(t, g, rtol=1e-3, atol=1e-5)


# ---------------------------------------------------------------- one graph, capture, dropout, errors
def test_graph_mode_runs_the_unrolled_sequence_and_its_backward_as_one_compute():
    m = nn.LSTM(8, 16, num_layers=2)
    x = gg.tensor(RNG.standard_normal((12, 4, 8)).astype(np.float32))
    with gg.graph_mode(True):
        gg.reset_counters()
        out, (h, c) = m(x)
        loss = out.square().mean() + h.sum()
        loss.backward()
        loss.item()
        m.weight_hh_l0.grad.numpy()
        assert gg.counters()["computes"] == 1


def test_capture_step_of_an_lstm_classifier_matches_eager_steps():
    def build():
        gg.manual_seed(3)
        lstm, head = nn.LSTM(3, 8, batch_first=True), nn.Linear(8, 2)
        return lstm, head, gg.optim.Adam(list(lstm.parameters()) + list(head.parameters()), lr=1e-2)

    def loss_fn(lstm, head, xb, yb):
        out, (h, _) = lstm(xb)
        return nn.functional.cross_entropy(head(h[-1]), yb)

    xs = RNG.standard_normal((3, 4, 5, 3)).astype(np.float32)
    ys = RNG.integers(0, 2, (3, 4)).astype(np.int32)
    lstm, head, opt = build()
    eager = []
    for xb, yb in zip(xs, ys):
        opt.zero_grad()
        loss = loss_fn(lstm, head, gg.tensor(xb), gg.tensor(yb))
        loss.backward()
        opt.step()
        eager.append(loss.item())
    lstm2, head2, opt2 = build()
    step = gg.capture_step(lambda xb, yb: loss_fn(lstm2, head2, xb, yb), opt2)
    captured = [float(step(xb, yb)) for xb, yb in zip(xs, ys)]
    np.testing.assert_allclose(captured, eager, rtol=1e-5)
    np.testing.assert_allclose(_np(lstm2.weight_hh_l0), _np(lstm.weight_hh_l0), rtol=1e-5, atol=1e-6)
    gg.reset_counters()
    step(xs[0], ys[0])
    assert gg.counters()["computes"] <= 2


def test_dropout_between_layers_only_in_training():
    gg.manual_seed(0)
    m = nn.GRU(3, 4, num_layers=2, dropout=0.5)
    ref = nn.GRU(3, 4, num_layers=2)
    ref.load_state_dict(m.state_dict())
    x = gg.tensor(RNG.standard_normal((4, 2, 3)).astype(np.float32))
    m.eval()
    np.testing.assert_allclose(_np(m(x)[0]), _np(ref(x)[0]), rtol=1e-6)
    m.train()
    assert not np.allclose(_np(m(x)[0]), _np(ref(x)[0]))


def test_bad_input_raises_clear_errors():
    m = nn.LSTM(3, 4)
    with pytest.raises(ValueError, match="input_size"):
        m(gg.ones(5, 2, 2))
    with pytest.raises(RuntimeError, match="Expected hidden size"):
        m(gg.ones(5, 2, 3), (gg.ones(1, 3, 4), gg.ones(1, 2, 4)))
    with pytest.raises(ValueError, match="2D or 3D"):
        m(gg.ones(5))
    with pytest.raises(ValueError, match="proj_size"):
        nn.GRU(3, 4, proj_size=2)
    with pytest.raises(ValueError, match="nonlinearity"):
        nn.RNN(3, 4, nonlinearity="gelu")
    with pytest.raises(ValueError, match="input_size"):
        nn.LSTMCell(3, 4)(gg.ones(2, 5))


def test_parameter_names_and_init_range():
    m = nn.LSTM(3, 5, num_layers=2, bidirectional=True, proj_size=2)
    t = torch.nn.LSTM(3, 5, num_layers=2, bidirectional=True, proj_size=2)
    assert [n for n, _ in m.named_parameters()] == [n for n, _ in t.named_parameters()]
    for (n, p), (_, q) in zip(m.named_parameters(), t.named_parameters()):
        assert p.shape == tuple(q.shape), n
        assert np.abs(_np(p)).max() <= 1 / np.sqrt(5) + 1e-7


@pytest.mark.parametrize("module", ["ggmlgrad.nn.rnn", "ggmlgrad.nn.utils.rnn"])
def test_docstring_examples(module):
    import doctest
    import importlib
    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0


def test_gradients_when_the_loss_reads_some_steps_and_backward_runs_twice(tmp_path):
    # the per-step pieces of the input projection deliver one concatenated gradient: steps no
    # gradient reaches count as zeros, and a retained graph gives the same gradient again
    t, g = _torch_pair("LSTM", dict(input_size=3, hidden_size=4, bidirectional=True), tmp_path)
    x = RNG.standard_normal((6, 2, 3)).astype(np.float32)
    to, _ = t(torch.tensor(x))
    go, _ = g(gg.tensor(x))
    (to[1].sum() + to[3].square().sum()).backward(retain_graph=True)
    (to[1].sum() + to[3].square().sum()).backward()
    loss = go[1].sum() + go[3].square().sum()
    loss.backward(retain_graph=True)
    loss.backward()
    grads_close(t, g, rtol=1e-3, atol=1e-5)


def test_empty_sequence_raises_and_empty_batch_works():
    with pytest.raises(RuntimeError, match="sequence length to be larger than 0"):
        nn.LSTM(3, 4)(gg.zeros(0, 2, 3))
    out, h = nn.GRU(3, 4)(gg.zeros(5, 0, 3))
    assert out.shape == (5, 0, 4) and h.shape == (1, 0, 4)
    h, c = nn.LSTMCell(3, 4)(gg.zeros(0, 3))
    assert h.shape == c.shape == (0, 4)


@pytest.mark.parametrize("cls,kwargs", [("LSTM", dict(proj_size=2, bidirectional=True, num_layers=2)),
                                        ("GRU", dict(bidirectional=True, num_layers=2))])
def test_packed_input_with_initial_states_matches_torch(cls, kwargs, tmp_path):
    t, g = _torch_pair(cls, dict(input_size=3, hidden_size=4, **kwargs), tmp_path)
    x = RNG.standard_normal((6, 3, 3)).astype(np.float32)
    lengths = [4, 6, 2]
    lead = kwargs["num_layers"] * 2
    h0 = RNG.standard_normal((lead, 3, kwargs.get("proj_size", 4))).astype(np.float32)
    c0 = RNG.standard_normal((lead, 3, 4)).astype(np.float32)
    thx = (torch.tensor(h0), torch.tensor(c0)) if cls == "LSTM" else torch.tensor(h0)
    ghx = (gg.tensor(h0), gg.tensor(c0)) if cls == "LSTM" else gg.tensor(h0)
    to, th = t(trnn.pack_padded_sequence(torch.tensor(x), lengths, enforce_sorted=False), thx)
    go, gh = g(grnn.pack_padded_sequence(gg.tensor(x), lengths, enforce_sorted=False), ghx)
    ths, ghs = (th, gh) if cls == "LSTM" else ((th,), (gh,))
    np.testing.assert_allclose(_np(go.data), _np(to.data), rtol=1e-4, atol=1e-5)
    for a, b in zip(ghs, ths):
        np.testing.assert_allclose(_np(a), _np(b), rtol=1e-4, atol=1e-5)
    (to.data.square().sum() + sum(s.sum() for s in ths)).backward()
    (go.data.square().sum() + sum(s.sum() for s in ghs)).backward()
    grads_close(t, g, rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("trial", range(10))
def test_random_configurations_match_torch(trial):
    """Random layer options x packed or padded x initial state x mode: outputs, states, input and
    parameter gradients against torch (weights copied through load_state_dict)."""
    rng = np.random.default_rng(100 + trial)
    cls = ["LSTM", "GRU", "RNN"][trial % 3]
    kw = dict(num_layers=int(rng.integers(1, 3)), bias=bool(rng.integers(2)), batch_first=bool(rng.integers(2)),
              bidirectional=bool(rng.integers(2)))
    if cls == "LSTM" and rng.random() < 0.5:
        kw["proj_size"] = 2
    torch.manual_seed(trial)
    t = getattr(torch.nn, cls)(3, 4, **kw)
    g = getattr(nn, cls)(3, 4, **kw)
    g.load_state_dict({k: gg.tensor(v.detach().numpy()) for k, v in t.state_dict().items()})
    steps, n = int(rng.integers(1, 5)), int(rng.integers(1, 4))
    x = rng.standard_normal((n, steps, 3) if kw["batch_first"] else (steps, n, 3)).astype(np.float32)
    lead = kw["num_layers"] * (2 if kw["bidirectional"] else 1)
    h0 = rng.standard_normal((lead, n, kw.get("proj_size", 4))).astype(np.float32)
    c0 = rng.standard_normal((lead, n, 4)).astype(np.float32)
    thx = ghx = None
    if rng.random() < 0.5:
        thx = (torch.tensor(h0), torch.tensor(c0)) if cls == "LSTM" else torch.tensor(h0)
        ghx = (gg.tensor(h0), gg.tensor(c0)) if cls == "LSTM" else gg.tensor(h0)
    tx, gx = torch.tensor(x, requires_grad=True), gg.tensor(x, requires_grad=True)
    packed = rng.random() < 0.5
    if packed:
        lens = [int(v) for v in rng.integers(1, steps + 1, n)]
        ti = trnn.pack_padded_sequence(tx, lens, batch_first=kw["batch_first"], enforce_sorted=False)
        gi = grnn.pack_padded_sequence(gx, lens, batch_first=kw["batch_first"], enforce_sorted=False)
    else:
        ti, gi = tx, gx
    with gg.graph_mode(bool(trial % 2)):
        to, th = t(ti, thx)
        go, gh = g(gi, ghx)
        tod, god = (to.data, go.data) if packed else (to, go)
        ths, ghs = (th, gh) if cls == "LSTM" else ((th,), (gh,))
        (tod.square().sum() + sum(s.sum() for s in ths)).backward()
        (god.square().sum() + sum(s.sum() for s in ghs)).backward()
        np.testing.assert_allclose(_np(god), _np(tod), rtol=1e-4, atol=1e-5)
        for a, b in zip(ghs, ths):
            np.testing.assert_allclose(_np(a), _np(b), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(_np(gx.grad), tx.grad.numpy(), rtol=1e-3, atol=1e-5)
        grads_close(t, g, rtol=1e-3, atol=1e-5)


def test_packed_sequences_inside_capture_match_eager():
    gg.manual_seed(0)
    m = nn.LSTM(3, 4, bidirectional=True)
    x = RNG.standard_normal((5, 3, 3)).astype(np.float32)
    lengths = [2, 5, 4]   # host constants: part of the recording

    def fn(xt):
        out, (h, _) = m(grnn.pack_padded_sequence(xt, lengths, enforce_sorted=False))
        padded, _ = grnn.pad_packed_sequence(out, batch_first=True)
        return padded, h

    want = [_np(t) for t in fn(gg.tensor(x))]
    captured = gg.capture(fn)
    for _ in range(2):
        got = captured(x)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    gg.reset_counters()
    captured(x)
    assert gg.counters()["computes"] == 1


def test_packed_sequence_helpers():
    p = grnn.pack_padded_sequence(gg.tensor(RNG.standard_normal((3, 2, 2)).astype(np.float32)), [3, 1])
    assert p.to("cpu").data is p.data and p.cpu().batch_sizes is p.batch_sizes
    np.testing.assert_array_equal(p.lengths(), [3, 1])
    perm = [2, 0, 1]
    np.testing.assert_array_equal(grnn.invert_permutation(perm), trnn.invert_permutation(torch.tensor(perm)).numpy())
    assert grnn.invert_permutation(None) is None
