"""Transformer blocks, MultiheadAttention's add_bias_kv / add_zero_attn and F.scaled_dot_product_attention.

References: NumPy float64 attention, float64 finite differences (gg.gradcheck), and torch (same
weights through .safetensors with a strict load: torch's parameter names) for outputs and
parameter gradients; graph mode runs a layer's forward and backward as one compute, capture_step
replays a training step as eager runs it.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import ggmlgrad as gg
from ggmlgrad import nn
from ggmlgrad.nn import functional as F
from torch_transfer import grads_close, transfer

RNG = np.random.default_rng(0)
# torch warns about its own fast paths (nested tensors, oneDNN projections): not ours
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _np(t):
    return t.detach().numpy()


def _softmax(z):
    z = z - z.max(-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(-1, keepdims=True)


# ---------------------------------------------------------------- scaled_dot_product_attention
MASKS = ["none", "bool_np", "bool_tensor", "float", "causal"]


@pytest.mark.parametrize("mask_kind", MASKS)
@pytest.mark.parametrize("run", ["eager", "graph", "check", "capture"])
def test_sdpa_values_against_numpy_and_grads_against_torch(mask_kind, run):
    q, k, v = (RNG.standard_normal((2, 3, 4, 8)).astype(np.float32) for _ in range(3))
    k, v = k[:, :, :3], v[:, :, :3]   # S = 3 keys for L = 4 queries
    allowed = RNG.random((4, 3)) > 0.3
    allowed[:, 0] = True                # every query attends somewhere
    fmask = RNG.standard_normal((4, 3)).astype(np.float32)
    scale = 0.3
    scores = np.einsum("bhld,bhsd->bhls", q.astype(np.float64), k.astype(np.float64)) * scale
    if mask_kind.startswith("bool"):
        scores = np.where(allowed, scores, -np.inf)
    elif mask_kind == "float":
        scores = scores + fmask
    elif mask_kind == "causal":
        scores = np.where(np.tril(np.ones((4, 3), bool)), scores, -np.inf)
    want = _softmax(scores) @ v.astype(np.float64)

    def fn(qt, kt, vt, *m):
        kwargs = {"is_causal": mask_kind == "causal", "scale": scale}
        if m:
            kwargs["attn_mask"] = m[0]
        return F.scaled_dot_product_attention(qt, kt, vt, **kwargs)

    extra = {"bool_np": [], "bool_tensor": [allowed], "float": [fmask]}.get(mask_kind, [])
    if mask_kind == "bool_np":
        fn_run = lambda qt, kt, vt: fn(qt, kt, vt, allowed)  # noqa: E731
    else:
        fn_run = fn
    if run == "capture" and mask_kind == "bool_np":
        # a NumPy mask made inside a captured function would be frozen into the recording: refused
        with pytest.raises(gg.CaptureError, match="upload"):
            gg.capture(fn_run)(q, k, v)
        got = gg.capture(fn)(q, k, v, allowed)   # passed as an argument instead: a bool tensor input
    elif run == "capture":
        got = gg.capture(fn_run)(q, k, v, *extra)
    else:
        with gg.graph_mode(run != "eager", check=run == "check"):
            got = _np(fn_run(gg.tensor(q), gg.tensor(k), gg.tensor(v), *[gg.tensor(e) for e in extra]))
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-4)   # flash attention's float16 accumulation

    # gradients against torch
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    tmask = {"bool_np": torch.tensor(allowed), "bool_tensor": torch.tensor(allowed),
             "float": torch.tensor(fmask)}.get(mask_kind)
    tout = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=tmask,
                                                            is_causal=mask_kind == "causal", scale=scale)
    w = RNG.standard_normal(tout.shape).astype(np.float32)
    (tout * torch.tensor(w)).sum().backward()
    gq, gk, gv = (gg.tensor(a, requires_grad=True) for a in (q, k, v))
    out = fn_run(gq, gk, gv, *[gg.tensor(e) for e in extra])
    (out * gg.tensor(w)).sum().backward()
    for a, b in ((gq, tq), (gk, tk), (gv, tv)):
        np.testing.assert_allclose(_np(a.grad), b.grad.numpy(), rtol=1e-3, atol=1e-4)


def test_sdpa_3d_inputs_default_scale_and_errors():
    q = RNG.standard_normal((2, 5, 4)).astype(np.float32)
    got = F.scaled_dot_product_attention(gg.tensor(q), gg.tensor(q), gg.tensor(q))
    want = torch.nn.functional.scaled_dot_product_attention(*(torch.tensor(q),) * 3)
    np.testing.assert_allclose(_np(got), want.numpy(), rtol=2e-3, atol=2e-4)
    with pytest.raises(ValueError, match="attn_mask or is_causal"):
        F.scaled_dot_product_attention(gg.tensor(q), gg.tensor(q), gg.tensor(q), attn_mask=np.ones((5, 5), bool),
                                       is_causal=True)


# ---------------------------------------------------------------- MultiheadAttention extras
@pytest.mark.parametrize("kw", [dict(add_bias_kv=True), dict(add_zero_attn=True),
                                dict(add_bias_kv=True, add_zero_attn=True, batch_first=True)])
@pytest.mark.parametrize("need_weights", [True, False])
def test_mha_bias_kv_and_zero_attn_match_torch(kw, need_weights, tmp_path):
    torch.manual_seed(0)
    t, g = torch.nn.MultiheadAttention(8, 2, **kw), nn.MultiheadAttention(8, 2, **kw)
    transfer(t, g, tmp_path)
    assert ("bias_k" in dict(g.named_parameters())) == kw.get("add_bias_kv", False)
    bf = kw.get("batch_first", False)
    q = RNG.standard_normal((3, 5, 8) if bf else (5, 3, 8)).astype(np.float32)
    kv = RNG.standard_normal((3, 4, 8) if bf else (4, 3, 8)).astype(np.float32)
    kpm = np.zeros((3, 4), bool)
    kpm[0, 2:] = True
    am = np.triu(np.ones((5, 4), bool), 1)
    to, tw = t(torch.tensor(q), torch.tensor(kv), torch.tensor(kv), key_padding_mask=torch.tensor(kpm),
               attn_mask=torch.tensor(am), need_weights=need_weights)
    go, gw = g(gg.tensor(q), gg.tensor(kv), gg.tensor(kv), key_padding_mask=kpm, attn_mask=am,
               need_weights=need_weights)
    np.testing.assert_allclose(_np(go), _np(to), rtol=1e-3, atol=1e-5)
    if need_weights:
        np.testing.assert_allclose(_np(gw), _np(tw), rtol=1e-4, atol=1e-6)
    to.square().sum().backward()
    go.square().sum().backward()
    grads_close(t, g, rtol=2e-3, atol=1e-4)


# ---------------------------------------------------------------- layers against torch
def _pair(cls, kwargs, tmp_path):
    torch.manual_seed(0)
    t = getattr(torch.nn, cls)(**kwargs)
    g = getattr(nn, cls)(**kwargs)
    transfer(t, g, tmp_path)
    return t, g


ENC = [dict(), dict(norm_first=True, activation="gelu", batch_first=True),
       dict(activation=torch.nn.functional.silu), dict(bias=False, layer_norm_eps=1e-3)]


@pytest.mark.parametrize("kw", ENC, ids=["post-relu", "pre-gelu-bf", "silu", "nobias"])
@pytest.mark.parametrize("masks", ["none", "bool", "float", "causal"])
def test_encoder_layer_matches_torch(kw, masks, tmp_path):
    kw = dict(kw)
    g_kw = dict(kw)
    if kw.get("activation") is torch.nn.functional.silu:
        g_kw["activation"] = F.silu
    base = dict(d_model=8, nhead=2, dim_feedforward=16, dropout=0.0)
    torch.manual_seed(0)
    t = torch.nn.TransformerEncoderLayer(**base, **kw)
    g = nn.TransformerEncoderLayer(**base, **g_kw)
    transfer(t, g, tmp_path)
    bf = kw.get("batch_first", False)
    x = RNG.standard_normal((3, 5, 8) if bf else (5, 3, 8)).astype(np.float32)
    kpm = np.zeros((3, 5), bool)
    kpm[2, 3:] = True
    targs, gargs = {}, {}
    if masks == "bool":
        targs = dict(src_key_padding_mask=torch.tensor(kpm), src_mask=torch.tensor(np.triu(np.ones((5, 5), bool), 1)))
        gargs = dict(src_key_padding_mask=kpm, src_mask=np.triu(np.ones((5, 5), bool), 1))
    elif masks == "float":
        fm = RNG.standard_normal((5, 5)).astype(np.float32)
        targs, gargs = dict(src_mask=torch.tensor(fm)), dict(src_mask=gg.tensor(fm))
    elif masks == "causal":
        cm = torch.nn.Transformer.generate_square_subsequent_mask(5)
        targs = dict(src_mask=cm, is_causal=True)
        gargs = dict(src_mask=nn.Transformer.generate_square_subsequent_mask(5), is_causal=True)
    to = t(torch.tensor(x), **targs)
    go = g(gg.tensor(x), **gargs)
    np.testing.assert_allclose(_np(go), _np(to), rtol=1e-3, atol=2e-4)
    w = RNG.standard_normal(x.shape).astype(np.float32)
    (to * torch.tensor(w)).sum().backward()
    (go * gg.tensor(w)).sum().backward()
    grads_close(t, g, rtol=5e-3, atol=2e-4)


@pytest.mark.parametrize("kw", [dict(), dict(norm_first=True, batch_first=True, activation="gelu")])
def test_decoder_layer_and_transformer_match_torch(kw, tmp_path):
    base = dict(d_model=8, nhead=2, dim_feedforward=16, dropout=0.0)
    t, g = _pair("TransformerDecoderLayer", dict(base, **kw), tmp_path)
    bf = kw.get("batch_first", False)
    tgt = RNG.standard_normal((2, 4, 8) if bf else (4, 2, 8)).astype(np.float32)
    mem = RNG.standard_normal((2, 6, 8) if bf else (6, 2, 8)).astype(np.float32)
    mkpm = np.zeros((2, 6), bool)
    mkpm[1, 4:] = True
    cm = torch.nn.Transformer.generate_square_subsequent_mask(4)
    to = t(torch.tensor(tgt), torch.tensor(mem), tgt_mask=cm, memory_key_padding_mask=torch.tensor(mkpm),
           tgt_is_causal=True)
    go = g(gg.tensor(tgt), gg.tensor(mem), tgt_mask=nn.Transformer.generate_square_subsequent_mask(4),
           memory_key_padding_mask=mkpm, tgt_is_causal=True)
    np.testing.assert_allclose(_np(go), _np(to), rtol=1e-3, atol=2e-4)
    to.square().sum().backward()
    go.square().sum().backward()
    grads_close(t, g, rtol=5e-3, atol=2e-4)

    full = dict(d_model=8, nhead=2, num_encoder_layers=2, num_decoder_layers=1, dim_feedforward=16, dropout=0.0)
    tt, gt = _pair("Transformer", dict(full, **kw), tmp_path)
    src = RNG.standard_normal((2, 5, 8) if bf else (5, 2, 8)).astype(np.float32)
    skpm = np.zeros((2, 5), bool)
    skpm[0, 3:] = True
    to = tt(torch.tensor(src), torch.tensor(tgt), tgt_mask=cm, src_key_padding_mask=torch.tensor(skpm),
            memory_key_padding_mask=torch.tensor(skpm))
    go = gt(gg.tensor(src), gg.tensor(tgt), tgt_mask=nn.Transformer.generate_square_subsequent_mask(4),
            src_key_padding_mask=skpm, memory_key_padding_mask=skpm)
    np.testing.assert_allclose(_np(go), _np(to), rtol=1e-3, atol=2e-4)
    to.sum().backward()
    go.sum().backward()
    grads_close(tt, gt, rtol=5e-3, atol=2e-4)


def test_generate_square_subsequent_mask_and_parameter_names():
    np.testing.assert_array_equal(_np(nn.Transformer.generate_square_subsequent_mask(4)),
                                  torch.nn.Transformer.generate_square_subsequent_mask(4).numpy())
    g = nn.Transformer(d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=4)
    t = torch.nn.Transformer(d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=4)
    assert [n for n, _ in g.named_parameters()] == [n for n, _ in t.named_parameters()]
    with pytest.raises(RuntimeError, match="relu/gelu"):
        nn.TransformerEncoderLayer(8, 2, activation="tanh")


def test_encoder_layer_gradients_against_finite_differences():
    gg.manual_seed(0)
    layer = nn.TransformerEncoderLayer(4, 2, dim_feedforward=6, dropout=0.0, activation="gelu", norm_first=True)
    x = gg.tensor(RNG.standard_normal((3, 2, 4)).astype(np.float32), requires_grad=True)
    assert gg.gradcheck(lambda t: layer(t), [x])


# ---------------------------------------------------------------- graph mode, capture, dropout
def test_encoder_layer_forward_and_backward_are_one_compute_in_graph_mode():
    layer = nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, dropout=0.1, batch_first=True)
    x = gg.tensor(RNG.standard_normal((2, 6, 16)).astype(np.float32))
    with gg.graph_mode(True):
        gg.reset_counters()
        out = layer(x, is_causal=True)
        loss = out.square().mean()
        loss.backward()
        loss.item()
        layer.linear1.weight.grad.numpy()
        assert gg.counters()["computes"] == 1


def test_capture_step_of_a_transformer_training_step_matches_eager():
    def build():
        gg.manual_seed(5)
        enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True), 2)
        head = nn.Linear(8, 3)
        return enc, head, gg.optim.AdamW(list(enc.parameters()) + list(head.parameters()), lr=1e-2)

    def loss_fn(enc, head, xb, yb):
        return F.cross_entropy(head(enc(xb, is_causal=True)[:, -1]), yb)

    xs = RNG.standard_normal((3, 4, 5, 8)).astype(np.float32)
    ys = RNG.integers(0, 3, (3, 4)).astype(np.int32)
    enc, head, opt = build()
    eager = []
    for xb, yb in zip(xs, ys):
        opt.zero_grad()
        loss = loss_fn(enc, head, gg.tensor(xb), gg.tensor(yb))
        loss.backward()
        opt.step()
        eager.append(loss.item())
    enc2, head2, opt2 = build()
    step = gg.capture_step(lambda xb, yb: loss_fn(enc2, head2, xb, yb), opt2)
    captured = [float(step(xb, yb)) for xb, yb in zip(xs, ys)]
    np.testing.assert_allclose(captured, eager, rtol=1e-4)
    gg.reset_counters()
    step(xs[0], ys[0])
    assert gg.counters()["computes"] <= 2


def test_dropout_is_active_only_in_training():
    gg.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.5)
    x = gg.tensor(RNG.standard_normal((4, 2, 8)).astype(np.float32))
    layer.eval()
    a, b = _np(layer(x)), _np(layer(x))
    np.testing.assert_array_equal(a, b)
    layer.train()
    assert not np.allclose(_np(layer(x)), a)


@pytest.mark.parametrize("module", ["ggmlgrad.nn.transformer"])
def test_docstring_examples(module):
    import doctest
    import importlib
    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0


def test_sdpa_grouped_query_attention_matches_torch():
    q = RNG.standard_normal((2, 4, 5, 8)).astype(np.float32)
    k, v = (RNG.standard_normal((2, 2, 6, 8)).astype(np.float32) for _ in range(2))
    want = torch.nn.functional.scaled_dot_product_attention(*map(torch.tensor, (q, k, v)), enable_gqa=True)
    got = F.scaled_dot_product_attention(gg.tensor(q), gg.tensor(k), gg.tensor(v), enable_gqa=True)
    np.testing.assert_allclose(_np(got), want.numpy(), rtol=2e-3, atol=2e-4)
    with pytest.raises(ValueError, match="multiple"):
        F.scaled_dot_product_attention(gg.tensor(q), gg.tensor(k[:, :1].repeat(3, 1)), gg.tensor(v[:, :1].repeat(3, 1)),
                                       enable_gqa=True)


@pytest.mark.parametrize("run", ["graph", "capture"])
def test_encoder_and_decoder_layers_in_graph_mode_and_capture_match_torch(run, tmp_path):
    base = dict(d_model=8, nhead=2, dim_feedforward=16, dropout=0.0, batch_first=True)
    te, ge = _pair("TransformerEncoderLayer", dict(base, norm_first=True), tmp_path)
    td, gd = _pair("TransformerDecoderLayer", dict(base, activation="gelu"), tmp_path)
    src = RNG.standard_normal((2, 5, 8)).astype(np.float32)
    tgt = RNG.standard_normal((2, 4, 8)).astype(np.float32)
    kpm = np.zeros((2, 5), bool)
    kpm[1, 3:] = True
    tmem = te(torch.tensor(src), src_key_padding_mask=torch.tensor(kpm))
    tout = td(torch.tensor(tgt), tmem, tgt_mask=torch.nn.Transformer.generate_square_subsequent_mask(4),
              memory_key_padding_mask=torch.tensor(kpm), tgt_is_causal=True)

    def fn(s, t, m):
        mem = ge(s, src_key_padding_mask=m)
        return mem, gd(t, mem, memory_key_padding_mask=m, tgt_is_causal=True)

    if run == "capture":
        mem, out = gg.capture(fn)(src, tgt, kpm)
    else:
        with gg.graph_mode(True):
            mem, out = (_np(t) for t in fn(gg.tensor(src), gg.tensor(tgt), gg.tensor(kpm)))
    np.testing.assert_allclose(mem, _np(tmem), rtol=1e-3, atol=2e-4)
    np.testing.assert_allclose(out, _np(tout), rtol=1e-3, atol=2e-4)
