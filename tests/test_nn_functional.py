"""gg.nn.functional against NumPy float64 references: forward values and gradients (finite differences),
in eager and graph mode."""
from __future__ import annotations

import math

import numpy as np
import pytest

import ggmlgrad as gg
import ggmlgrad.nn.functional as F
from ggmlgrad.testing.opinfo import numeric_grad


def f32(a):
    return np.asarray(a, dtype=np.float32)


def t(a, grad=False):
    return gg.tensor(f32(a), requires_grad=grad)


def check(fn, ref, arrays, diff=None, atol=1e-5, rtol=1e-4, gatol=1e-3, grtol=1e-2, seed=0):
    """Forward of fn(tensors) vs ref(float64 arrays), and gradients of inputs ``diff`` vs finite differences."""
    rng = np.random.default_rng(seed)
    arrays = [f32(a).astype(np.float64) for a in arrays]
    diff = range(len(arrays)) if diff is None else diff
    ts = [t(a, grad=i in diff) for i, a in enumerate(arrays)]
    out = fn(*ts)
    expected = np.asarray(ref(*arrays), dtype=np.float64)
    np.testing.assert_allclose(out.detach().numpy(), expected, atol=atol, rtol=rtol)
    w = rng.standard_normal(expected.shape)
    (out * t(w)).sum().backward()
    for i in diff:
        assert ts[i].grad is not None, f"input {i} got no gradient"
        np.testing.assert_allclose(ts[i].grad.numpy(), numeric_grad(ref, arrays, i, w), atol=gatol, rtol=grtol,
                                   err_msg=f"gradient of input {i}")


def np_softmax(z, axis=-1):
    z = z - np.max(z, axis=axis, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True)


def np_log_softmax(z, axis=-1):
    z = z - np.max(z, axis=axis, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=axis, keepdims=True))


# ---------------------------------------------------------------- layer norm, softmax
def test_layer_norm_affine(graph):
    rng = np.random.default_rng(1)
    x, w, b = rng.standard_normal((3, 4, 5)), rng.standard_normal(5), rng.standard_normal(5)

    def ref(x, w, b):
        return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * w + b
    check(lambda x, w, b: F.layer_norm(x, (5,), w, b), ref, [x, w, b], atol=3e-5)


def test_layer_norm_multi_axis(graph):
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((2, 3, 4)), rng.standard_normal((3, 4))

    def ref(x, w):
        mu = x.mean(axis=(1, 2), keepdims=True)
        var = x.var(axis=(1, 2), keepdims=True)
        return (x - mu) / np.sqrt(var + 1e-3) * w
    check(lambda x, w: F.layer_norm(x, (3, 4), w, eps=1e-3), ref, [x, w], atol=3e-5)


def test_layer_norm_rejects_wrong_shape():
    with pytest.raises(ValueError, match="normalized_shape"):
        F.layer_norm(gg.ones(2, 3), (4,))


@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_softmax_and_log_softmax_any_dim(graph, dim):
    rng = np.random.default_rng(3)
    x = 3 * rng.standard_normal((3, 4, 5))
    check(lambda x: F.softmax(x, dim), lambda x: np_softmax(x, dim), [x])
    check(lambda x: F.log_softmax(x, dim), lambda x: np_log_softmax(x, dim), [x], atol=2e-5)


def test_log_softmax_no_underflow():
    x = t([[0.0, -200.0, 200.0]])
    np.testing.assert_allclose(F.log_softmax(x).numpy(), [[-200.0, -400.0, 0.0]], rtol=1e-6)


# ---------------------------------------------------------------- activations
@pytest.mark.parametrize("name", ["relu", "tanh", "sigmoid", "silu", "gelu", "gelu_tanh", "leaky_relu", "softplus",
                                  "softplus_beta", "elu", "elu_alpha"])
def test_activations(graph, name):
    from math import erf
    rng = np.random.default_rng(4)
    x = rng.standard_normal((4, 5))
    x = np.where(np.abs(x) < 0.05, 0.3, x)
    verf = np.vectorize(erf)
    refs = {
        "relu": (F.relu, lambda x: np.maximum(x, 0)),
        "tanh": (F.tanh, np.tanh),
        "sigmoid": (F.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
        "silu": (F.silu, lambda x: x / (1 + np.exp(-x))),
        "gelu": (F.gelu, lambda x: 0.5 * x * (1 + verf(x / math.sqrt(2)))),
        "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"),
                      lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))),
        "leaky_relu": (lambda x: F.leaky_relu(x, 0.2), lambda x: np.where(x > 0, x, 0.2 * x)),
        "softplus": (F.softplus, lambda x: np.logaddexp(0, x)),
        "elu": (F.elu, lambda x: np.where(x > 0, x, np.expm1(x))),
        "softplus_beta": (lambda x: F.softplus(x, beta=2.0), lambda x: np.logaddexp(0, 2 * x) / 2),
        "elu_alpha": (lambda x: F.elu(x, alpha=0.5), lambda x: np.where(x > 0, x, 0.5 * np.expm1(x))),
    }
    fn, ref = refs[name]
    check(fn, ref, [x], atol=1e-4 if name == "gelu" else 1e-5, gatol=2e-3)


# ---------------------------------------------------------------- attention
def np_attention(q, k, v, add_mask=None, causal=False, scale=None):
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = q @ np.swapaxes(k, -1, -2) * scale
    if add_mask is not None:
        s = s + add_mask
    if causal:
        s = s + np.triu(np.full(s.shape[-2:], -np.inf), 1)
    return np_softmax(s) @ v


def _qkv(rng, b=2, h=2, lq=3, s=4, d=4):
    return rng.standard_normal((b, h, lq, d)), rng.standard_normal((b, h, s, d)), rng.standard_normal((b, h, s, d))


def test_sdpa_plain_and_causal(graph, flash):
    rng = np.random.default_rng(5)
    q, k, v = _qkv(rng)
    check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v), np_attention, [q, k, v], atol=2e-5)
    q2, k2, v2 = _qkv(rng, lq=4)
    check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
          lambda q, k, v: np_attention(q, k, v, causal=True), [q2, k2, v2], atol=2e-5)


def test_sdpa_bool_mask_numpy(graph, flash):
    rng = np.random.default_rng(6)
    q, k, v = _qkv(rng)
    allowed = rng.random((2, 1, 3, 4)) < 0.6
    allowed[..., 0] = True
    add = np.where(allowed, 0.0, -np.inf)
    check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=allowed),
          lambda q, k, v: np_attention(q, k, v, add), [q, k, v], atol=2e-5)


def test_sdpa_int_and_float_masks_and_scale(graph, flash):
    rng = np.random.default_rng(7)
    q, k, v = _qkv(rng)
    allowed = (rng.random((3, 4)) < 0.5).astype(np.int32)
    allowed[:, 1] = 1
    int_mask = gg.tensor(allowed, dtype=gg.int32)
    check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=int_mask, scale=0.7),
          lambda q, k, v: np_attention(q, k, v, np.where(allowed == 1, 0.0, -np.inf), scale=0.7), [q, k, v], atol=2e-5)
    bias = rng.standard_normal((2, 2, 3, 4))
    fm = t(bias)
    check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=fm),
          lambda q, k, v: np_attention(q, k, v, f32(bias).astype(np.float64)), [q, k, v], atol=2e-5)


def test_sdpa_3d_inputs(graph):
    rng = np.random.default_rng(8)
    q, k, v = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 5, 4)), rng.standard_normal((2, 5, 3))
    check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v), np_attention, [q, k, v], atol=2e-5)


def test_sdpa_refuses_causal_with_mask():
    x = gg.ones(1, 1, 2, 2)
    with pytest.raises(ValueError, match="either"):
        F.scaled_dot_product_attention(x, x, x, attn_mask=np.ones((2, 2), bool), is_causal=True)


def test_attention_forward_is_one_fused_node_in_graph_mode():
    rng = np.random.default_rng(9)
    q, k, v = (t(a) for a in _qkv(rng))
    with gg.graph_mode(True):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        assert out.is_pending
        before = gg.counters()["computes"]
        out.numpy()
        assert gg.counters()["computes"] == before + 1


# ---------------------------------------------------------------- dropout
def test_dropout_statistics_and_scaling(graph):
    gg.manual_seed(123)
    p = 0.3
    x = gg.ones(200, 500)
    y = F.dropout(x, p).numpy()
    kept = y != 0
    assert abs(kept.mean() - (1 - p)) < 0.006                      # 100k Bernoulli draws: sd 0.0015
    np.testing.assert_allclose(y[kept], 1 / (1 - p), rtol=1e-6)
    assert abs(y.mean() - 1.0) < 0.01


def test_dropout_gradient_is_the_mask(graph):
    gg.manual_seed(5)
    x = t(np.random.default_rng(0).standard_normal((50, 40)), grad=True)
    y = F.dropout(x, 0.5)
    y.sum().backward()
    mask = np.where(y.detach().numpy().copy() != 0, 2.0, 0.0)
    np.testing.assert_allclose(x.grad.numpy(), mask)


def test_dropout_eval_and_edge_probabilities(graph):
    x = t(np.arange(6.0).reshape(2, 3))
    assert F.dropout(x, 0.5, training=False) is x
    assert F.dropout(x, 0.0) is x
    np.testing.assert_array_equal(F.dropout(x, 1.0).numpy(), np.zeros((2, 3)))
    with pytest.raises(ValueError):
        F.dropout(x, 1.5)


def test_dropout_seeded_reproducible():
    x = gg.ones(100)
    gg.manual_seed(7)
    a = F.dropout(x, 0.5).numpy()
    gg.manual_seed(7)
    b = F.dropout(x, 0.5).numpy()
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, F.dropout(x, 0.5).numpy())


# ---------------------------------------------------------------- losses
def np_cross_entropy(x, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    """PyTorch's cross_entropy semantics for (N, C) logits and class targets, in float64."""
    n, c = x.shape
    logp = np_log_softmax(x)
    w = np.ones(c) if weight is None else weight
    valid = target != ignore_index
    tt = np.where(valid, target, 0)
    nll = -w[tt] * logp[np.arange(n), tt] * valid
    loss = (1 - label_smoothing) * nll
    if label_smoothing:  # (0 * inf would be NaN for masked -inf logits)
        loss = loss + label_smoothing / c * -(w * logp).sum(-1) * valid
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / (w[tt] * valid).sum()


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_cross_entropy_class_targets(graph, reduction, smoothing):
    rng = np.random.default_rng(10)
    x = 2 * rng.standard_normal((6, 4))
    target = np.array([0, 3, -100, 1, 3, 2], np.int32)
    tg = gg.tensor(target, dtype=gg.int32)
    check(lambda x: F.cross_entropy(x, tg, reduction=reduction, label_smoothing=smoothing),
          lambda x: np_cross_entropy(x, target, reduction=reduction, label_smoothing=smoothing), [x], atol=2e-5)


def test_cross_entropy_weights_and_in_range_ignore_index(graph):
    rng = np.random.default_rng(11)
    x = rng.standard_normal((5, 3))
    target = np.array([0, 1, 2, 1, 0], np.int32)
    w = np.array([0.5, 2.0, 1.0])
    for smoothing in (0.0, 0.1):
        check(lambda x: F.cross_entropy(x, target, weight=t(w), ignore_index=1, label_smoothing=smoothing),
              lambda x: np_cross_entropy(x, target, weight=w, ignore_index=1, label_smoothing=smoothing), [x],
              atol=2e-5)


def test_cross_entropy_probability_targets(graph):
    rng = np.random.default_rng(12)
    x = rng.standard_normal((4, 5))
    q = rng.random((4, 5))
    q /= q.sum(-1, keepdims=True)
    for smoothing in (0.0, 0.3):
        def ref(x, smoothing=smoothing):
            qq = q * (1 - smoothing) + smoothing / 5
            return -(qq * np_log_softmax(x)).sum(-1).mean()
        check(lambda x: F.cross_entropy(x, t(q), label_smoothing=smoothing), ref, [x], atol=2e-5)


def test_cross_entropy_class_axis_one_and_unbatched(graph):
    rng = np.random.default_rng(13)
    x = rng.standard_normal((2, 3, 4))           # (N, C, d)
    target = rng.integers(0, 3, (2, 4)).astype(np.int32)

    def ref(x):
        flat = np.moveaxis(x, 1, -1).reshape(-1, 3)
        return np_cross_entropy(flat, target.reshape(-1))
    check(lambda x: F.cross_entropy(x, target), ref, [x], atol=2e-5)
    x1 = rng.standard_normal(4)
    check(lambda x: F.cross_entropy(x, np.array(2, np.int32)), lambda x: -np_log_softmax(x)[2], [x1], atol=2e-5)


def test_cross_entropy_large_logits_stable():
    x = t([[1000.0, -1000.0, 0.0]], grad=True)
    loss = F.cross_entropy(x, gg.tensor([1]))
    assert loss.item() == pytest.approx(2000.0, rel=1e-6)
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), [[1.0, -1.0, 0.0]], atol=1e-6)


def test_cross_entropy_out_of_range_target_refused_eagerly():
    with gg.graph_mode(False), pytest.raises(IndexError, match="out of bounds"):
        F.cross_entropy(gg.zeros(2, 3), gg.tensor([0, 3]))
    with pytest.raises(ValueError, match="target shape"):
        F.cross_entropy(gg.zeros(2, 3), gg.tensor([0, 1, 2]))


def test_nll_loss(graph):
    rng = np.random.default_rng(14)
    x = np_log_softmax(rng.standard_normal((5, 4)))
    target = np.array([1, 0, 3, -100, 2], np.int32)
    w = np.array([1.0, 2.0, 0.5, 1.5])
    for reduction in ("mean", "sum", "none"):
        def ref(x, reduction=reduction):
            valid = target != -100
            tt = np.where(valid, target, 0)
            loss = -x[np.arange(5), tt] * w[tt] * valid
            return {"none": loss, "sum": loss.sum(), "mean": loss.sum() / (w[tt] * valid).sum()}[reduction]
        check(lambda x: F.nll_loss(x, target, weight=t(w), reduction=reduction), ref, [x], atol=2e-5)


def test_bce_with_logits(graph):
    rng = np.random.default_rng(15)
    x = 4 * rng.standard_normal((4, 3))
    y = rng.random((4, 3))
    pw = np.array([0.5, 2.0, 3.0])
    wt = rng.random((4, 3))

    def ref(x, pos=None, weight=None):
        pos = 1.0 if pos is None else pos
        loss = -(pos * y * -np.logaddexp(0, -x) + (1 - y) * -np.logaddexp(0, x))
        return loss if weight is None else loss * weight
    check(lambda x: F.binary_cross_entropy_with_logits(x, t(y)), lambda x: ref(x).mean(), [x])
    check(lambda x: F.binary_cross_entropy_with_logits(x, t(y), pos_weight=t(pw), reduction="sum"),
          lambda x: ref(x, pw).sum(), [x], atol=5e-5)
    check(lambda x: F.binary_cross_entropy_with_logits(x, t(y), weight=t(wt), reduction="none"),
          lambda x: ref(x, None, f32(wt).astype(np.float64)), [x])


def test_bce_with_logits_extremes_and_zero():
    x = t([100.0, -100.0, 0.0], grad=True)
    y = t([0.0, 1.0, 1.0])
    loss = F.binary_cross_entropy_with_logits(x, y, reduction="none")
    np.testing.assert_allclose(loss.detach().numpy(), [100.0, 100.0, math.log(2)], rtol=1e-6)
    loss.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0, -1.0, -0.5], atol=1e-6)  # sigmoid(x) - y, also at x = 0


def test_regression_losses(graph):
    rng = np.random.default_rng(16)
    a, b = 2 * rng.standard_normal((5, 3)), 2 * rng.standard_normal((5, 3))
    bt = t(b)
    b64 = f32(b).astype(np.float64)

    def huber(x, delta):
        d = np.abs(x - b64)
        return np.where(d < delta, 0.5 * d ** 2, delta * (d - 0.5 * delta))
    check(lambda x: F.mse_loss(x, bt), lambda x: ((x - b64) ** 2).mean(), [a])
    check(lambda x: F.mse_loss(x, bt, reduction="sum"), lambda x: ((x - b64) ** 2).sum(), [a], atol=1e-4)
    check(lambda x: F.l1_loss(x, bt, reduction="none"), lambda x: np.abs(x - b64), [a])
    check(lambda x: F.huber_loss(x, bt, delta=1.5), lambda x: huber(x, 1.5).mean(), [a])
    check(lambda x: F.smooth_l1_loss(x, bt, beta=0.5, reduction="sum"), lambda x: huber(x, 0.5).sum() / 0.5, [a],
          atol=1e-4)
    check(lambda x: F.smooth_l1_loss(x, bt, beta=0.0), lambda x: np.abs(x - b64).mean(), [a])


def test_loss_argument_errors():
    with pytest.raises(ValueError, match="reduction"):
        F.mse_loss(gg.ones(2), gg.ones(2), reduction="avg")
    with pytest.raises(ValueError, match="shape"):
        F.mse_loss(gg.ones(2, 3), gg.ones(3))


def test_one_hot_and_embedding(graph):
    idx = gg.tensor([2, 0, 2], dtype=gg.int32)
    np.testing.assert_array_equal(F.one_hot(idx, 4).numpy(), np.eye(4)[[2, 0, 2]])
    w = t(np.arange(12.0).reshape(4, 3), grad=True)
    out = F.embedding(idx, w)
    np.testing.assert_array_equal(out.detach().numpy(), np.arange(12.0).reshape(4, 3)[[2, 0, 2]])
    out.sum().backward()
    np.testing.assert_array_equal(w.grad.numpy()[:, 0], [1, 0, 2, 0])


def test_losses_queue_no_transfers_in_graph_mode():
    """A loss in graph mode is graph ops only: nothing is read back before the value is asked for."""
    rng = np.random.default_rng(17)
    x = t(rng.standard_normal((8, 5)), grad=True)
    y = gg.tensor(rng.integers(0, 5, 8).astype(np.int32), dtype=gg.int32)
    with gg.graph_mode(True):
        gg.reset_counters()
        loss = F.cross_entropy(x, y, label_smoothing=0.1) + F.mse_loss(x, x * 0.5)
        loss.backward()
        c = gg.counters()
        assert c["computes"] == 0 and c["downloads"] == 0
        loss.item()
        assert gg.counters()["computes"] == 1


# ---------------------------------------------------------------- bad input never reaches ggml
_BAD_CALLS = r'''
import numpy as np, ggmlgrad as gg
import ggmlgrad.nn as nn, ggmlgrad.nn.functional as F
from ggmlgrad.ops import op
i32 = lambda a: gg.tensor(np.asarray(a, np.int32), dtype=gg.int32)
cases = {  # the nn ops' own bad inputs are their OpInfo rows' error inputs (testing/opinfo_nn.py)
    "ce target range": lambda: F.cross_entropy(gg.ones(2, 3), i32([0, 5])),
    "ce float16": lambda: F.cross_entropy(gg.ones(2, 3, dtype=gg.float16), i32([0, 1])),
    "ce target shape": lambda: F.cross_entropy(gg.ones(2, 3), i32([0, 1, 1])),
    "ce weight": lambda: F.cross_entropy(gg.ones(2, 3), i32([0, 1]), weight=gg.ones(4)),
    "nll target range": lambda: F.nll_loss(gg.ones(2, 3), i32([-1, 1])),
    "sdpa ndim": lambda: F.scaled_dot_product_attention(gg.ones(4), gg.ones(4), gg.ones(4)),
    "sdpa mask": lambda: F.scaled_dot_product_attention(gg.ones(1, 2, 4), gg.ones(1, 3, 4), gg.ones(1, 3, 4),
                                                        attn_mask=np.ones((3, 3), bool)),
    "mha embed": lambda: nn.MultiheadAttention(4, 2, batch_first=True)(gg.ones(1, 2, 5), gg.ones(1, 2, 5), gg.ones(1, 2, 5)),
    "mha attn_mask": lambda: nn.MultiheadAttention(4, 2, batch_first=True)(gg.ones(1, 2, 4), gg.ones(1, 3, 4),
                                                                          gg.ones(1, 3, 4), attn_mask=np.ones((3, 3), bool)),
    "embedding range": lambda: nn.Embedding(3, 2)(i32([0, 3])),
    "linear shape": lambda: nn.Linear(3, 2)(gg.ones(4, 2)),
    "layernorm shape": lambda: nn.LayerNorm(4)(gg.ones(2, 3)),
    "categorical value": lambda: gg.distributions.Categorical(logits=gg.ones(2, 3)).log_prob(i32([[0, 1, 2]])),
}
for graph in (False, True):
    with gg.graph_mode(graph):
        for name, fn in cases.items():
            try:
                r = fn()
                if isinstance(r, tuple):
                    r = r[0]
                r.numpy()
                print("NO ERROR", graph, name)
            except (TypeError, ValueError, IndexError, RuntimeError) as e:
                print("OK", graph, name, type(e).__name__)
print("SURVIVED")
'''


def test_bad_input_raises_python_errors_in_a_subprocess():
    import os
    import subprocess
    import sys
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(os.path.dirname(__file__), "..", "src"), env.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, "-c", _BAD_CALLS], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0 and "SURVIVED" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]
    lines = r.stdout.splitlines()
    assert not [ln for ln in lines if ln.startswith("NO ERROR")], r.stdout
    assert sum(ln.startswith("OK") for ln in lines) == 2 * 13


def test_sdpa_learnable_float_mask_gets_gradient(graph, flash):
    """A float attn_mask that requires grad (a learned position bias) receives its gradient."""
    rng = np.random.default_rng(18)
    q, k, v = _qkv(rng)
    bias = rng.standard_normal((1, 2, 3, 4))
    check(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
          lambda q, k, v, m: np_attention(q, k, v, m), [q, k, v, bias], atol=2e-5)


def test_binary_cross_entropy_and_normalize(graph):
    rng = np.random.default_rng(19)
    p = rng.uniform(0.05, 0.95, (4, 3))
    y = rng.random((4, 3))
    y64 = f32(y).astype(np.float64)
    check(lambda p: F.binary_cross_entropy(p, t(y)), lambda p: -(y64 * np.log(p) + (1 - y64) * np.log(1 - p)).mean(),
          [p])
    x = rng.standard_normal((3, 5))
    check(lambda x: F.normalize(x, dim=1), lambda x: x / np.sqrt((x ** 2).sum(1, keepdims=True)), [x])
    edge = F.binary_cross_entropy(t([0.0, 1.0]), t([1.0, 0.0]), reduction="none").numpy()
    np.testing.assert_allclose(edge, [100.0, 100.0])    # logs clamped at -100, as PyTorch


# -inf logits mask classes (RL action masking): a masked class that is not the target costs 0,
# as in torch (which gathers the target's log-probability instead of multiplying by a one-hot).
_MASKED = np.array([[0.5, -np.inf, 1.0, 0.2], [2.0, 0.1, -np.inf, -np.inf],
                    [-np.inf, 0.3, 0.3, 1.5], [1.0, -1.0, 0.0, -np.inf]])
_MASKED_TARGET = np.array([0, 1, 3, -100], np.int32)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_with_masked_logits_is_finite(graph, reduction):
    tg = gg.tensor(_MASKED_TARGET, dtype=gg.int32)
    ref = lambda x: np_cross_entropy(x, _MASKED_TARGET, reduction=reduction)
    assert np.all(np.isfinite(ref(_MASKED)))
    check(lambda x: F.cross_entropy(x, tg, reduction=reduction), ref, [_MASKED], atol=2e-5)


def test_nll_loss_of_masked_log_softmax_is_finite(graph):
    tg = gg.tensor(_MASKED_TARGET, dtype=gg.int32)
    check(lambda x: F.nll_loss(F.log_softmax(x, dim=-1), tg),
          lambda x: np_cross_entropy(x, _MASKED_TARGET), [_MASKED], atol=2e-5)


def test_cross_entropy_keeps_nan_logits_nan(graph):
    x = _MASKED.copy()
    x[0, 2] = np.nan
    out = F.cross_entropy(t(x), gg.tensor(_MASKED_TARGET, dtype=gg.int32), reduction="none").numpy()
    assert np.isnan(out[0]) and np.all(np.isfinite(out[1:3]))
