"""gg.nn modules: registration, state dicts (round trip and refusals), repr, every layer's forward and
gradients against NumPy float64 references, init; key tests in eager and graph mode."""
from __future__ import annotations

import collections
import math

import numpy as np
import pytest

import ggmlgrad as gg
import ggmlgrad.nn as nn


def f32(a):
    return np.asarray(a, dtype=np.float32)


def t(a, grad=False):
    return gg.tensor(f32(a), requires_grad=grad)


def numeric_grad(fn, x, weight, eps=1e-6):
    """d sum(fn(x) * weight) / dx (float64 central differences); ``x`` is modified and restored."""
    g = np.zeros_like(x)
    flat, gflat = x.reshape(-1), g.reshape(-1)
    for k in range(flat.size):
        orig = flat[k]
        flat[k] = orig + eps
        hi = np.sum(fn() * weight)
        flat[k] = orig - eps
        lo = np.sum(fn() * weight)
        flat[k] = orig
        gflat[k] = (hi - lo) / (2 * eps)
    return g


def params64(module):
    return {k: v.numpy().astype(np.float64) for k, v in module.state_dict().items()}


def np_softmax(z):
    z = z - z.max(-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(-1, keepdims=True)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(3, 4)
        self.act = nn.ReLU()
        self.block = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
        self.head = nn.Linear(4, 2, bias=False)
        self.register_buffer("running", gg.zeros(4))
        self.register_buffer("scratch", gg.ones(2), persistent=False)

    def forward(self, x):
        return self.head(self.block(self.act(self.fc1(x))) + self.running)


# ---------------------------------------------------------------- Module basics
def test_registration_and_traversal():
    m = MLP()
    names = [n for n, _ in m.named_parameters()]
    assert names == ["fc1.weight", "fc1.bias", "block.0.weight", "block.0.bias", "head.weight"]
    assert all(isinstance(p, gg.Tensor) and isinstance(p, nn.Parameter) and p.requires_grad for p in m.parameters())
    assert [n for n, _ in m.named_children()] == ["fc1", "act", "block", "head"]
    assert [n for n, _ in m.named_modules()] == ["", "fc1", "act", "block", "block.0", "block.1", "head"]
    assert [n for n, _ in m.named_buffers()] == ["running", "scratch"]
    assert "scratch" not in m.state_dict()
    assert m.head.bias is None
    with pytest.raises(AttributeError):
        m.nothing
    m.fc1 = nn.Linear(3, 4)  # replacing a submodule keeps a single registration
    assert [n for n, _ in m.named_children()] == ["fc1", "act", "block", "head"]
    with pytest.raises(TypeError):
        m.fc1.weight = gg.ones(4, 3)  # a plain tensor cannot replace a Parameter


def test_state_dict_order_matches_pytorch():
    # PyTorch: a module's own parameters, then its own persistent buffers, then its children's, recursively.
    assert list(MLP().state_dict()) == ["running", "fc1.weight", "fc1.bias", "block.0.weight", "block.0.bias",
                                        "head.weight"]


def test_shared_parameter_listed_once():
    lin = nn.Linear(2, 2)
    seq = nn.Sequential(lin, nn.ReLU(), lin)
    assert len(list(seq.parameters())) == 2
    assert list(seq.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"]


def test_train_eval_propagate():
    m = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5))
    assert m.training and m[1].training
    m.eval()
    assert not m.training and not m[1].training
    m.train()
    assert m[1].training


def test_zero_grad_and_requires_grad():
    m = nn.Linear(3, 2)
    m(gg.ones(4, 3)).sum().backward()
    assert m.weight.grad is not None
    m.zero_grad(set_to_none=False)
    np.testing.assert_array_equal(m.weight.grad.numpy(), np.zeros((2, 3)))
    m.zero_grad()
    assert m.weight.grad is None and m.bias.grad is None
    m.requires_grad_(False)
    assert not any(p.requires_grad for p in m.parameters())


def test_to_device_keeps_parameter_identity():
    m = nn.Linear(2, 2)
    w = m.weight
    before = w.detach().numpy().copy()
    assert m.to("cpu") is m and m.weight is w
    np.testing.assert_array_equal(m.weight.detach().numpy(), before)


def test_parameter_wraps_and_shares_storage():
    x = gg.tensor([1.0, 2.0])
    p = nn.Parameter(x)
    assert isinstance(p, gg.Tensor) and p.requires_grad and p.is_leaf
    np.testing.assert_array_equal(p.detach().numpy(), [1.0, 2.0])
    assert repr(p).startswith("Parameter containing:\ntensor([1., 2.]")
    assert not nn.Parameter(x, requires_grad=False).requires_grad


def test_repr_like_pytorch():
    m = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Sequential(nn.LayerNorm(4), nn.Dropout(0.1)),
                      nn.Embedding(10, 3, padding_idx=0), nn.Softmax(dim=1), nn.Flatten())
    assert repr(m) == (
        "Sequential(\n"
        "  (0): Linear(in_features=3, out_features=4, bias=True)\n"
        "  (1): ReLU()\n"
        "  (2): Sequential(\n"
        "    (0): LayerNorm((4,), eps=1e-05, elementwise_affine=True)\n"
        "    (1): Dropout(p=0.1, inplace=False)\n"
        "  )\n"
        "  (3): Embedding(10, 3, padding_idx=0)\n"
        "  (4): Softmax(dim=1)\n"
        "  (5): Flatten(start_dim=1, end_dim=-1)\n"
        ")")


# ---------------------------------------------------------------- state dicts
def test_state_dict_round_trip(graph):
    gg.manual_seed(0)
    a, b = MLP(), MLP()
    with gg.no_grad():
        a.running.copy_(np.arange(4.0))
    b.load_state_dict(a.state_dict())
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert ka == kb
        np.testing.assert_array_equal(va.numpy(), vb.numpy())
    x = t(np.random.default_rng(0).standard_normal((5, 3)))
    np.testing.assert_array_equal(a(x).detach().numpy(), b(x).detach().numpy())
    # NumPy arrays load too, and parameters stay the same objects (optimizers keep working).
    w = b.fc1.weight
    b.load_state_dict({k: v.numpy() for k, v in a.state_dict().items()})
    assert b.fc1.weight is w


def _snapshot(m):
    return {k: v.numpy().copy() for k, v in m.state_dict().items()}


@pytest.mark.parametrize("case", ["wrong_shape", "missing", "unexpected", "string_array", "float64_wrong_shape",
                                  "not_tensor"])
def test_load_state_dict_refusals_leave_model_unchanged(graph, case):
    gg.manual_seed(1)
    m = MLP()
    before = _snapshot(m)
    state = collections.OrderedDict((k, v * 0.0 + 7.0) for k, v in MLP().state_dict().items())
    if case == "wrong_shape":
        state["head.weight"] = gg.zeros(3, 4)
    elif case == "missing":
        del state["block.0.bias"]
    elif case == "unexpected":
        state["extra.weight"] = gg.zeros(1)
    elif case == "string_array":
        state["fc1.bias"] = np.array(["a"] * 4)
    elif case == "float64_wrong_shape":      # float64 casts (as torch's copy_); the shape still must match
        state["fc1.bias"] = np.zeros(5)
    else:
        state["fc1.bias"] = [0.0] * 4
    # The bad entry sits late or early in the dict: no earlier key may have been written.
    with pytest.raises(RuntimeError, match="nothing was loaded"):
        m.load_state_dict(state)
    after = _snapshot(m)
    for k in before:
        np.testing.assert_array_equal(after[k], before[k], err_msg=k)


def test_load_state_dict_non_strict_reports_keys():
    m = MLP()
    state = m.state_dict()
    del state["head.weight"]
    state["bogus"] = gg.zeros(1)
    new_bias = np.full(4, 3.0, np.float32)
    state["fc1.bias"] = gg.tensor(new_bias)
    res = m.load_state_dict(state, strict=False)
    assert res.missing_keys == ["head.weight"] and res.unexpected_keys == ["bogus"]
    np.testing.assert_array_equal(m.fc1.bias.detach().numpy(), new_bias)
    bad = dict(state, **{"fc1.bias": gg.zeros(5)})
    with pytest.raises(RuntimeError, match="shape"):
        m.load_state_dict(bad, strict=False)


# ---------------------------------------------------------------- layers: forward and gradients
def test_linear_forward_backward(graph):
    gg.manual_seed(2)
    lin = nn.Linear(3, 4)
    p = params64(lin)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 5, 3))
    xt = t(x, grad=True)
    out = lin(xt)
    x64 = f32(x).astype(np.float64)
    np.testing.assert_allclose(out.detach().numpy(), x64 @ p["weight"].T + p["bias"], atol=1e-5)
    g = rng.standard_normal((2, 5, 4))
    (out * t(g)).sum().backward()
    g64 = f32(g).astype(np.float64)
    np.testing.assert_allclose(xt.grad.numpy(), g64 @ p["weight"], atol=1e-5)
    np.testing.assert_allclose(lin.weight.grad.numpy(), np.einsum("blo,bli->oi", g64, x64), atol=1e-4)
    np.testing.assert_allclose(lin.bias.grad.numpy(), g64.sum((0, 1)), atol=1e-4)


def test_linear_default_init_matches_pytorch_bounds():
    gg.manual_seed(3)
    lin = nn.Linear(50, 400)
    w, b = lin.weight.detach().numpy().copy(), lin.bias.detach().numpy().copy()
    bound = 1 / math.sqrt(50)
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.95 * bound
    assert abs(w.std() - bound / math.sqrt(3)) < 0.01 * bound * 3
    assert np.abs(b).max() <= bound


def test_embedding_repeated_indices_accumulate(graph):
    gg.manual_seed(4)
    emb = nn.Embedding(5, 3)
    w = emb.weight.detach().numpy().copy()
    idx = np.array([[1, 3, 1], [4, 1, 0]], np.int32)
    out = emb(gg.tensor(idx, dtype=gg.int32))
    np.testing.assert_array_equal(out.detach().numpy(), w[idx])
    g = np.random.default_rng(1).standard_normal((2, 3, 3))
    (out * t(g)).sum().backward()
    expected = np.zeros((5, 3))
    np.add.at(expected, idx.reshape(-1), f32(g).astype(np.float64).reshape(-1, 3))
    np.testing.assert_allclose(emb.weight.grad.numpy(), expected, atol=1e-6)


def test_embedding_padding_idx(graph):
    gg.manual_seed(5)
    emb = nn.Embedding(4, 2, padding_idx=2)
    w = emb.weight.detach().numpy().copy()
    np.testing.assert_array_equal(w[2], [0.0, 0.0])
    idx = gg.tensor([2, 1, 2, 0], dtype=gg.int32)
    out = emb(idx)
    np.testing.assert_array_equal(out.detach().numpy(), w[[2, 1, 2, 0]])
    out.sum().backward()
    np.testing.assert_array_equal(emb.weight.grad.numpy(), [[1, 1], [1, 1], [0, 0], [0, 0]])


def test_embedding_initialised_standard_normal():
    gg.manual_seed(6)
    w = nn.Embedding(1000, 20).weight.detach().numpy().copy()
    assert abs(w.mean()) < 0.02 and abs(w.std() - 1.0) < 0.02


def test_layernorm_module(graph):
    ln = nn.LayerNorm((2, 3), eps=1e-4)
    rng = np.random.default_rng(7)
    with gg.no_grad():
        ln.weight.copy_(rng.standard_normal((2, 3)))
        ln.bias.copy_(rng.standard_normal((2, 3)))
    p = params64(ln)
    x = rng.standard_normal((4, 2, 3))
    x64 = f32(x).astype(np.float64)

    def ref():
        mu = x64.mean((1, 2), keepdims=True)
        var = x64.var((1, 2), keepdims=True)
        return (x64 - mu) / np.sqrt(var + 1e-4) * p["weight"] + p["bias"]
    xt = t(x, grad=True)
    out = ln(xt)
    np.testing.assert_allclose(out.detach().numpy(), ref(), atol=3e-5)
    g = rng.standard_normal(x.shape)
    g64 = f32(g).astype(np.float64)
    (out * t(g)).sum().backward()
    np.testing.assert_allclose(xt.grad.numpy(), numeric_grad(ref, x64, g64), atol=1e-3, rtol=1e-2)
    np.testing.assert_allclose(ln.weight.grad.numpy(), numeric_grad(ref, p["weight"], g64), atol=1e-3, rtol=1e-2)
    np.testing.assert_allclose(ln.bias.grad.numpy(), g64.sum(0), atol=1e-4)
    plain = nn.LayerNorm(3, elementwise_affine=False)
    assert list(plain.parameters()) == []


def test_dropout_module_train_and_eval(graph):
    gg.manual_seed(8)
    d = nn.Dropout(0.25)
    x = gg.ones(100, 100)
    y = d(x).numpy()
    assert abs((y == 0).mean() - 0.25) < 0.02
    np.testing.assert_allclose(y[y != 0], 1 / 0.75, rtol=1e-6)
    d.eval()
    assert d(x) is x


@pytest.mark.parametrize("name,ref", [
    ("ReLU", lambda x: np.maximum(x, 0)), ("Tanh", np.tanh), ("Sigmoid", lambda x: 1 / (1 + np.exp(-x))),
    ("SiLU", lambda x: x / (1 + np.exp(-x))), ("LeakyReLU", lambda x: np.where(x > 0, x, 0.01 * x)),
    ("Softmax", lambda x: np_softmax(x)), ("LogSoftmax", lambda x: np.log(np_softmax(x))),
    ("GELU", lambda x: 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))),
    ("Identity", lambda x: x), ("Softplus", lambda x: np.logaddexp(0, x)),
])
def test_activation_modules(graph, name, ref):
    x = np.random.default_rng(9).standard_normal((3, 4))
    x = np.where(np.abs(x) < 0.05, 0.2, x)
    x64 = f32(x).astype(np.float64)
    xt = t(x, grad=True)
    out = getattr(nn, name)()(xt)
    np.testing.assert_allclose(out.detach().numpy(), ref(x64), atol=1e-4)
    g = np.random.default_rng(10).standard_normal((3, 4))
    (out * t(g)).sum().backward()
    np.testing.assert_allclose(xt.grad.numpy(), numeric_grad(lambda: ref(x64), x64, f32(g).astype(np.float64)),
                               atol=2e-3, rtol=1e-2)


def test_flatten_and_containers():
    x = gg.ones(2, 3, 4)
    assert nn.Flatten()(x).shape == (2, 12)
    assert nn.Flatten(0, 1)(x).shape == (6, 4)
    ml = nn.ModuleList([nn.Linear(2, 2), nn.ReLU()])
    ml.append(nn.Tanh())
    assert len(ml) == 3 and isinstance(ml[-1], nn.Tanh) and len(list(ml.parameters())) == 2
    md = nn.ModuleDict({"a": nn.Linear(2, 3), "b": nn.ReLU()})
    assert list(md.keys()) == ["a", "b"] and "a" in md
    assert [n for n, _ in md.named_parameters()] == ["a.weight", "a.bias"]
    seq = nn.Sequential(collections.OrderedDict([("fc", nn.Linear(2, 2)), ("act", nn.ReLU())]))
    assert isinstance(seq[1], nn.ReLU) and isinstance(seq[:1], nn.Sequential) and len(seq[:1]) == 1
    assert [n for n, _ in seq.named_parameters()] == ["fc.weight", "fc.bias"]
    with pytest.raises(IndexError):
        seq[5]


# ---------------------------------------------------------------- MultiheadAttention
def np_mha(p, q, k, v, h, add_mask=None, causal=False):
    e = q.shape[-1]
    d = e // h
    w, b = p["in_proj_weight"], p["in_proj_bias"]
    qp, kp, vp = (x @ w[i * e:(i + 1) * e].T + b[i * e:(i + 1) * e] for i, x in enumerate((q, k, v)))

    def heads(x):
        return x.reshape(x.shape[0], x.shape[1], h, d).transpose(0, 2, 1, 3)
    s = heads(qp) @ heads(kp).transpose(0, 1, 3, 2) / math.sqrt(d)
    if add_mask is not None:
        s = s + add_mask
    if causal:
        s = s + np.triu(np.full(s.shape[-2:], -np.inf), 1)
    a = np_softmax(s)
    o = (a @ heads(vp)).transpose(0, 2, 1, 3).reshape(q.shape[0], q.shape[1], e)
    return o @ p["out_proj.weight"].T + p["out_proj.bias"], a.mean(1)


def _mha_setup(seed=11, e=4, h=2, b=2, lq=3, s=4):
    gg.manual_seed(seed)
    mha = nn.MultiheadAttention(e, h, batch_first=True)
    with gg.no_grad():
        mha.in_proj_bias.copy_(np.random.default_rng(seed).standard_normal(3 * e) * 0.5)
        mha.out_proj.bias.copy_(np.random.default_rng(seed + 1).standard_normal(e) * 0.5)
    rng = np.random.default_rng(seed + 2)
    q, k, v = rng.standard_normal((b, lq, e)), rng.standard_normal((b, s, e)), rng.standard_normal((b, s, e))
    return mha, [f32(a).astype(np.float64) for a in (q, k, v)]


@pytest.mark.parametrize("masks", ["none", "key_padding", "attn_mask_bool", "causal", "all"])
def test_mha_forward_and_gradients(graph, flash, masks):
    mha, (q, k, v) = _mha_setup(lq=4)
    b, lq, s = 2, 4, 4
    p = params64(mha)
    rng = np.random.default_rng(3)
    kpm = np.zeros((b, s), bool)
    kpm[0, 3] = kpm[1, 1] = True                   # True = padding (ignored)
    am = rng.random((lq, s)) < 0.3
    am[:, 0] = False                               # True = not allowed; keep key 0 open
    kwargs, add = {}, np.zeros((b, 1, lq, s))
    causal = masks in ("causal", "all")
    if masks in ("key_padding", "all"):
        kwargs["key_padding_mask"] = kpm
        add = add + np.where(kpm, -np.inf, 0.0)[:, None, None, :]
    if masks in ("attn_mask_bool", "all"):
        kwargs["attn_mask"] = am
        add = add + np.where(am, -np.inf, 0.0)
    if causal:
        kwargs["is_causal"] = True
    qt, kt, vt = t(q, grad=True), t(k, grad=True), t(v, grad=True)
    for need_weights in (False, True):
        out, w = mha(qt, kt, vt, need_weights=need_weights, **kwargs)
        ref_out, ref_w = np_mha(p, q, k, v, 2, add, causal)
        np.testing.assert_allclose(out.detach().numpy(), ref_out, atol=3e-5)
        if need_weights:
            np.testing.assert_allclose(w.detach().numpy(), ref_w, atol=3e-5)
        else:
            assert w is None
    g = rng.standard_normal(ref_out.shape)
    (out * t(g)).sum().backward()
    for name, x in (("query", q), ("key", k), ("value", v)):
        tens = {"query": qt, "key": kt, "value": vt}[name]
        num = numeric_grad(lambda: np_mha(p, q, k, v, 2, add, causal)[0], x, g)
        np.testing.assert_allclose(tens.grad.numpy(), num, atol=2e-3, rtol=1e-2, err_msg=name)
    for name in ("in_proj_weight", "out_proj.weight"):
        num = numeric_grad(lambda: np_mha(p, q, k, v, 2, add, causal)[0], p[name], g)
        got = dict(mha.named_parameters())[name].grad.numpy()
        np.testing.assert_allclose(got, num, atol=2e-3, rtol=1e-2, err_msg=name)


def test_mha_seq_first_and_unbatched_and_float_mask(graph):
    mha, (q, k, v) = _mha_setup()
    p = params64(mha)
    seq_first = nn.MultiheadAttention(4, 2)          # batch_first=False, PyTorch's default
    seq_first.load_state_dict(mha.state_dict())
    out, w = seq_first(t(q.transpose(1, 0, 2)), t(k.transpose(1, 0, 2)), t(v.transpose(1, 0, 2)))
    ref_out, ref_w = np_mha(p, q, k, v, 2)
    np.testing.assert_allclose(out.detach().numpy(), ref_out.transpose(1, 0, 2), atol=3e-5)
    np.testing.assert_allclose(w.detach().numpy(), ref_w, atol=3e-5)
    out1, w1 = mha(t(q[0]), t(k[0]), t(v[0]))
    np.testing.assert_allclose(out1.detach().numpy(), ref_out[0], atol=3e-5)
    assert w1.shape == (3, 4)
    bias = np.random.default_rng(4).standard_normal((2 * 2, 3, 4))  # (B*H, L, S) float mask: added
    out2, _ = mha(t(q), t(k), t(v), attn_mask=t(bias), need_weights=False)
    add = f32(bias).astype(np.float64).reshape(2, 2, 3, 4)
    np.testing.assert_allclose(out2.detach().numpy(), np_mha(p, q, k, v, 2, add)[0], atol=3e-5)
    _, wh = mha(t(q), t(k), t(v), average_attn_weights=False)
    assert wh.shape == (2, 2, 3, 4)


def test_mha_state_dict_names_and_errors():
    mha = nn.MultiheadAttention(8, 2)
    assert list(mha.state_dict()) == ["in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"]
    with pytest.raises(ValueError, match="divisible"):
        nn.MultiheadAttention(6, 4)
    kv = nn.MultiheadAttention(4, 2, kdim=3, vdim=5, batch_first=True)
    assert [n for n, _ in kv.named_parameters()] == ["q_proj_weight", "k_proj_weight", "v_proj_weight",
                                                      "in_proj_bias", "out_proj.weight", "out_proj.bias"]
    out, _ = kv(gg.ones(2, 3, 4), gg.ones(2, 6, 3), gg.ones(2, 6, 5))
    assert out.shape == (2, 3, 4)
    with pytest.raises(ValueError, match="key_padding_mask"):
        mha(gg.ones(3, 2, 8), gg.ones(3, 2, 8), gg.ones(3, 2, 8), key_padding_mask=np.zeros((2, 4), bool))


def test_mha_dropout_on_weights_in_training_only():
    mha, (q, k, v) = _mha_setup()
    mha.dropout = 0.5
    gg.manual_seed(0)
    a, _ = mha(t(q), t(k), t(v), need_weights=False)
    mha.eval()
    b, _ = mha(t(q), t(k), t(v), need_weights=False)
    np.testing.assert_allclose(b.detach().numpy(), np_mha(params64(mha), q, k, v, 2)[0], atol=3e-5)
    assert not np.allclose(a.detach().numpy(), b.detach().numpy())


# ---------------------------------------------------------------- init
def test_init_functions():
    gg.manual_seed(12)
    w = gg.zeros(200, 300)
    nn.init.xavier_uniform_(w)
    a = math.sqrt(6 / 500)
    assert np.abs(w.numpy()).max() <= a + 1e-7 and np.abs(w.numpy()).max() > 0.99 * a
    nn.init.xavier_normal_(w, gain=2.0)
    assert abs(w.numpy().std() - 2 * math.sqrt(2 / 500)) < 0.003
    nn.init.kaiming_normal_(w, mode="fan_out", nonlinearity="relu")
    assert abs(w.numpy().std() - math.sqrt(2) / math.sqrt(200)) < 0.003
    nn.init.kaiming_uniform_(w, a=0.0, nonlinearity="relu")
    assert np.abs(w.numpy()).max() <= math.sqrt(6 / 300) + 1e-7
    nn.init.constant_(w, 0.5)
    assert (w.numpy() == 0.5).all()
    nn.init.zeros_(w)
    assert (w.numpy() == 0).all()
    nn.init.ones_(w)
    assert (w.numpy() == 1).all()
    nn.init.uniform_(w, -2, -1)
    assert w.numpy().min() >= -2 and w.numpy().max() <= -1
    nn.init.normal_(w, 3.0, 0.1)
    assert abs(w.numpy().mean() - 3.0) < 0.01


@pytest.mark.parametrize("shape,gain", [((6, 4), 1.0), ((3, 7), 2.0)])
def test_orthogonal(shape, gain):
    gg.manual_seed(13)
    w = nn.init.orthogonal_(gg.zeros(*shape), gain=gain).numpy().astype(np.float64)
    small = min(shape)
    gram = w.T @ w if shape[0] >= shape[1] else w @ w.T
    np.testing.assert_allclose(gram, gain ** 2 * np.eye(small), atol=1e-5)


def test_calculate_gain_and_seeded_init():
    assert nn.init.calculate_gain("relu") == pytest.approx(math.sqrt(2))
    assert nn.init.calculate_gain("tanh") == pytest.approx(5 / 3)
    assert nn.init.calculate_gain("leaky_relu", 0.2) == pytest.approx(math.sqrt(2 / 1.04))
    assert nn.init.calculate_gain("linear") == 1.0
    with pytest.raises(ValueError):
        nn.init.calculate_gain("swish")
    gg.manual_seed(14)
    a = nn.Linear(4, 4).weight.detach().numpy().copy()
    gg.manual_seed(14)
    np.testing.assert_array_equal(a, nn.Linear(4, 4).weight.detach().numpy())
    with pytest.raises(ValueError):
        nn.init.xavier_uniform_(gg.zeros(3))


# ---------------------------------------------------------------- graph mode: one compute per step
def test_training_step_is_one_graph_in_graph_mode():
    gg.manual_seed(15)
    model = nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.GELU(), nn.Dropout(0.1), nn.Linear(8, 3))
    x = t(np.random.default_rng(0).standard_normal((6, 4)))
    y = gg.tensor([0, 1, 2, 0, 1, 2], dtype=gg.int32)
    with gg.graph_mode(True):
        before = gg.counters()["computes"]
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        assert gg.counters()["computes"] == before
        grads = [p.grad.numpy() for p in model.parameters()]
        assert gg.counters()["computes"] == before + 1
    assert all(np.isfinite(g).all() for g in grads)


def test_deepcopy_gives_independent_module(graph):
    """copy.deepcopy(model) (RL target networks) copies every parameter and buffer into storage of its own."""
    import copy
    gg.manual_seed(16)
    m = MLP()
    m(gg.ones(2, 3)).sum().backward()
    c = copy.deepcopy(m)
    assert [n for n, _ in c.named_parameters()] == [n for n, _ in m.named_parameters()]
    for (n, p), q in zip(m.named_parameters(), c.parameters()):
        assert isinstance(q, nn.Parameter) and q is not p and q.requires_grad
        np.testing.assert_array_equal(q.detach().numpy(), p.detach().numpy())
        np.testing.assert_array_equal(q.grad.numpy(), p.grad.numpy())
    before = _snapshot(m)
    with gg.no_grad():
        for q in c.parameters():
            q.add_(1.0)
        c.running.add_(1.0)
    for k, v in _snapshot(m).items():
        np.testing.assert_array_equal(v, before[k], err_msg=k)
    np.testing.assert_array_equal(c.running.numpy(), before["running"] + 1.0)


@pytest.mark.parametrize("graph_on", [False, True], ids=["eager", "graph"])
def test_load_state_dict_from_tensors_is_one_compute(graph_on):
    gg.manual_seed(17)
    src, dst = MLP(), MLP()
    state = src.state_dict()
    old = dst.fc1.weight.detach().numpy().copy()
    with gg.graph_mode(graph_on):
        pending = dst.fc1.weight * 2.0          # a queued read of the old weight must see the old value
        gg.reset_counters()
        dst.load_state_dict(state)
        c = gg.counters()
        assert c["computes"] == (2 if graph_on else 1) and c["uploads"] == 0   # (graph: the queued read first)
    np.testing.assert_array_equal(pending.detach().numpy(), old * 2.0)
    for k, v in dst.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), state[k].numpy(), err_msg=k)
    assert dst.fc1.weight._version > 0
    dst.load_state_dict(dst.state_dict())     # loading a model's own state is a no-op, not an error


@pytest.mark.parametrize("module", ["ggmlgrad.nn", "ggmlgrad.nn.module", "ggmlgrad.nn.functional", "ggmlgrad.nn.init",
                                    "ggmlgrad.nn.layers", "ggmlgrad.nn.container", "ggmlgrad.nn.attention",
                                    "ggmlgrad.distributions", "ggmlgrad.distributions.noise",
                                    "ggmlgrad.distributions.categorical", "ggmlgrad.distributions.normal"])
def test_docstring_examples(module):
    import doctest
    import importlib
    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0


def test_container_editing_and_lookup():
    a, b, c = nn.Linear(1, 1), nn.ReLU(), nn.Tanh()
    seq = nn.Sequential(a, c)
    seq.insert(1, b)
    assert list(seq) == [a, b, c] and list(seq._modules) == ["0", "1", "2"]
    assert seq.pop(0) is a and list(seq) == [b, c] and list(seq._modules) == ["0", "1"]
    seq.extend([a])
    assert seq[-1] is a
    ml = nn.ModuleList([a, c])
    ml.insert(0, b)
    assert list(ml) == [b, a, c] and ml.pop() is c and len(ml) == 2
    m = MLP()
    assert m.get_submodule("block.0") is m.block[0] and m.get_submodule("") is m
    assert m.get_parameter("block.0.bias") is m.block[0].bias
    with pytest.raises(AttributeError):
        m.get_submodule("block.7")
    out = m.apply(lambda mod: nn.init.zeros_(mod.weight) if isinstance(mod, nn.Linear) else None)
    assert out is m and not m.fc1.weight.detach().numpy().any()


def test_layers_refuse_non_float32_dtype():
    assert nn.Linear(2, 2, dtype=gg.float32).weight.dtype is gg.float32
    for make in (lambda: nn.Linear(2, 2, dtype=gg.float16), lambda: nn.Embedding(3, 2, dtype="bfloat16"),
                 lambda: nn.LayerNorm(3, dtype=gg.float16), lambda: nn.MultiheadAttention(4, 2, dtype=gg.float16)):
        with pytest.raises(NotImplementedError, match="float32"):
            make()
