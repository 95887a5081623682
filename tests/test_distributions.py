"""gg.distributions against NumPy float64: log_prob, entropy, gradients, sampling statistics, batch shapes,
seeding and the noise hook; eager and graph mode."""
from __future__ import annotations

import math

import numpy as np
import pytest

import ggmlgrad as gg
from ggmlgrad.distributions import Categorical, Normal, NoiseRequest, draw_noise, set_noise_hook


def f64(a):
    return np.asarray(a, dtype=np.float32).astype(np.float64)


def np_log_softmax(z):
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


# ---------------------------------------------------------------- Categorical
def test_categorical_logits_log_prob_entropy_and_grads(graph):
    rng = np.random.default_rng(0)
    logits = 2 * rng.standard_normal((4, 5))
    lt = gg.tensor(logits.astype(np.float32), requires_grad=True)
    d = Categorical(logits=lt)
    assert d.batch_shape == (4,) and d.event_shape == ()
    value = np.array([0, 4, 2, 2], np.int32)
    lp = d.log_prob(gg.tensor(value))
    logp = np_log_softmax(f64(logits))
    np.testing.assert_allclose(lp.detach().numpy(), logp[np.arange(4), value], atol=1e-5)
    ent = d.entropy()
    np.testing.assert_allclose(ent.detach().numpy(), -(np.exp(logp) * logp).sum(-1), atol=1e-5)
    np.testing.assert_allclose(d.probs.detach().numpy(), np.exp(logp), atol=1e-6)
    (lp.sum() + ent.sum()).backward()
    p = np.exp(logp)
    onehot = np.eye(5)[value]
    # d/dz sum log p[v] = onehot - p;  d/dz H = -p * (logp + H)
    h = -(p * logp).sum(-1, keepdims=True)
    np.testing.assert_allclose(lt.grad.numpy(), onehot - p - p * (logp + h), atol=1e-5)


def test_categorical_masked_logits_give_finite_log_prob_entropy_and_grads(graph):
    """-inf logits (masked actions) have probability 0: log_prob of an allowed action, the
    entropy and their gradients stay finite (0 * log 0 = 0), as in torch."""
    logits = np.array([[0.5, -np.inf, 1.0], [-np.inf, -np.inf, 2.0], [0.3, -1.0, -np.inf]])
    lt = gg.tensor(logits.astype(np.float32), requires_grad=True)
    d = Categorical(logits=lt)
    value = np.array([2, 2, 0], np.int32)
    lp, ent = d.log_prob(gg.tensor(value)), d.entropy()
    with np.errstate(invalid="ignore"):  # 0 * -inf where masked, replaced by 0
        logp = np_log_softmax(f64(logits))
        p = np.exp(logp)
        plogp = np.where(p > 0, p * logp, 0.0)
    np.testing.assert_allclose(lp.detach().numpy(), logp[np.arange(3), value], atol=1e-6)
    np.testing.assert_allclose(ent.detach().numpy(), -plogp.sum(-1), atol=1e-6)
    (lp.sum() + ent.sum()).backward()
    h = -plogp.sum(-1, keepdims=True)
    with np.errstate(invalid="ignore"):
        want = np.eye(3)[value] - p - np.where(p > 0, p * (logp + h), 0.0)
    np.testing.assert_allclose(lt.grad.numpy(), want, atol=1e-5)


def test_categorical_probs_and_zero_probability(graph):
    probs = np.array([[0.2, 0.3, 0.5], [0.0, 1.0, 3.0]])     # unnormalised rows are normalised
    d = Categorical(probs=gg.tensor(probs.astype(np.float32)))
    p = probs / probs.sum(-1, keepdims=True)
    np.testing.assert_allclose(d.probs.numpy(), p, atol=1e-6)
    ent = d.entropy().numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        ref = -np.where(p > 0, p * np.log(p), 0.0).sum(-1)
    np.testing.assert_allclose(ent, ref, atol=1e-6)           # 0 * log 0 = 0, not NaN
    np.testing.assert_allclose(d.log_prob(gg.tensor([2, 1])).numpy(), np.log([0.5, 0.25]), atol=1e-6)


def test_categorical_log_prob_broadcasts_sample_shape(graph):
    d = Categorical(logits=gg.zeros(3, 4))
    values = gg.tensor(np.array([[0, 1, 2], [3, 3, 3]], np.int32))   # (2, 3) against batch (3,)
    lp = d.log_prob(values)
    assert lp.shape == (2, 3)
    np.testing.assert_allclose(lp.numpy(), np.full((2, 3), -math.log(4)), atol=1e-6)


def test_categorical_sample_statistics_and_shapes(graph):
    gg.manual_seed(0)
    p = np.array([0.1, 0.2, 0.3, 0.4])
    d = Categorical(probs=gg.tensor(np.tile(p, (2, 1)).astype(np.float32)))
    s = d.sample((5000,))
    assert s.shape == (5000, 2) and s.dtype is gg.int32 and not s.requires_grad
    counts = np.bincount(s.numpy().reshape(-1), minlength=4) / 10000
    np.testing.assert_allclose(counts, p, atol=0.015)      # sd <= 0.005
    assert d.sample().shape == (2,)


def test_categorical_sample_is_seeded_and_has_no_gradient():
    lt = gg.tensor(np.zeros((3, 5), np.float32), requires_grad=True)
    gg.manual_seed(1)
    a = Categorical(logits=lt).sample((4,))
    gg.manual_seed(1)
    b = Categorical(logits=lt).sample((4,))
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert not a.requires_grad


def test_categorical_argument_errors():
    with pytest.raises(ValueError, match="exactly one"):
        Categorical()
    with pytest.raises(ValueError, match="exactly one"):
        Categorical(probs=gg.ones(2), logits=gg.ones(2))
    with pytest.raises(TypeError):
        Categorical(logits=gg.zeros(2)).log_prob(gg.tensor([0.5]))


# ---------------------------------------------------------------- Normal
def test_normal_log_prob_entropy_and_grads(graph):
    rng = np.random.default_rng(2)
    loc, scale, x = rng.standard_normal((3, 2)), np.abs(rng.standard_normal(2)) + 0.5, rng.standard_normal((3, 2))
    lt = gg.tensor(loc.astype(np.float32), requires_grad=True)
    st = gg.tensor(scale.astype(np.float32), requires_grad=True)
    d = Normal(lt, st)
    assert d.batch_shape == (3, 2)
    lp = d.log_prob(gg.tensor(x.astype(np.float32)))
    mu, sg, xx = f64(loc), f64(scale), f64(x)
    ref = -((xx - mu) ** 2) / (2 * sg ** 2) - np.log(sg) - 0.5 * math.log(2 * math.pi)
    np.testing.assert_allclose(lp.detach().numpy(), ref, atol=1e-5)
    ent = d.entropy()
    assert ent.shape == (3, 2)
    np.testing.assert_allclose(ent.detach().numpy(), np.broadcast_to(0.5 + 0.5 * math.log(2 * math.pi) + np.log(sg), (3, 2)),
                               atol=1e-6)
    lp.sum().backward()
    np.testing.assert_allclose(lt.grad.numpy(), (xx - mu) / sg ** 2, atol=1e-5)
    np.testing.assert_allclose(st.grad.numpy(), ((xx - mu) ** 2 / sg ** 3 - 1 / sg).sum(0), atol=1e-4)
    np.testing.assert_allclose(d.mean.detach().numpy(), mu, atol=0)
    np.testing.assert_allclose(d.stddev.detach().numpy(), np.broadcast_to(sg, (3, 2)), atol=0)
    np.testing.assert_allclose(d.variance.detach().numpy(), np.broadcast_to(sg ** 2, (3, 2)), atol=1e-6)


def test_normal_rsample_reparameterised(graph):
    gg.manual_seed(3)
    lt = gg.tensor(np.array([1.0, -2.0], np.float32), requires_grad=True)
    st = gg.tensor(np.array([0.5, 2.0], np.float32), requires_grad=True)
    s = Normal(lt, st).rsample((4,))
    assert s.shape == (4, 2) and s.requires_grad
    s.sum().backward()
    eps = (s.detach().numpy().copy() - np.array([1.0, -2.0])) / np.array([0.5, 2.0])
    np.testing.assert_allclose(lt.grad.numpy(), [4.0, 4.0], atol=1e-6)      # d/dloc = 1 per sample
    np.testing.assert_allclose(st.grad.numpy(), eps.sum(0), atol=1e-5)      # d/dscale = eps


def test_normal_sample_statistics_seed_and_no_grad():
    lt = gg.tensor(np.array([3.0], np.float32), requires_grad=True)
    d = Normal(lt, 0.5)
    gg.manual_seed(4)
    s = d.sample((20000,))
    assert s.shape == (20000, 1) and not s.requires_grad
    v = s.numpy()
    assert abs(v.mean() - 3.0) < 0.015 and abs(v.std() - 0.5) < 0.015
    gg.manual_seed(4)
    np.testing.assert_array_equal(d.sample((20000,)).numpy(), v)


def test_normal_python_scalars_broadcast():
    d = Normal(0.0, gg.tensor(np.array([1.0, 2.0, 4.0], np.float32)))
    assert d.batch_shape == (3,)
    assert d.sample((2,)).shape == (2, 3)
    np.testing.assert_allclose(d.log_prob(0.0).numpy(), -np.log([1.0, 2.0, 4.0]) - 0.5 * math.log(2 * math.pi),
                               atol=1e-6)


# ---------------------------------------------------------------- noise helper (capture's hook)
def test_noise_kinds():
    gg.manual_seed(5)
    u = draw_noise("uniform", (10000,)).numpy()
    assert u.min() >= 0 and u.max() < 1 and abs(u.mean() - 0.5) < 0.01
    g = draw_noise("gumbel", (20000,)).numpy()
    assert np.isfinite(g).all() and abs(g.mean() - 0.5772) < 0.03
    n = draw_noise("normal", (2, 3))
    assert n.shape == (2, 3) and n.dtype is gg.float32 and not n.requires_grad
    with pytest.raises(ValueError):
        draw_noise("cauchy", (2,))
    with pytest.raises(ValueError):
        draw_noise("dropout_mask", (2,), p=1.0)


def test_noise_hook_receives_every_draw():
    seen = []

    def hook(req: NoiseRequest):
        seen.append(req)
        return gg.tensor(np.full(req.shape, 0.25, np.float32))

    prev = set_noise_hook(hook)
    try:
        x = gg.ones(3, 4)
        y = gg.nn.functional.dropout(x, 0.5)
        s = Normal(gg.zeros(2), gg.ones(2)).rsample()
        c = Categorical(logits=gg.tensor([[0.0, 0.1]])).sample()
    finally:
        assert set_noise_hook(prev) is hook
    assert [(r.kind, r.shape) for r in seen] == [("dropout_mask", (3, 4)), ("normal", (2,)), ("gumbel", (1, 2))]
    assert dict(seen[0].params) == {"p": 0.5}
    np.testing.assert_array_equal(y.numpy(), np.full((3, 4), 0.25))
    np.testing.assert_array_equal(s.numpy(), [0.25, 0.25])
    assert c.numpy().tolist() == [1]
    # A request can be re-sampled (a replay refills the recording's input this way).
    gg.manual_seed(6)
    a = seen[0].sample()
    assert a.shape == (3, 4) and set(np.unique(a)) <= {0.0, 2.0}


def test_categorical_out_of_range_value_refused_eagerly():
    d = Categorical(logits=gg.zeros(2, 3))
    with gg.graph_mode(False), pytest.raises(IndexError, match="out of bounds"):
        d.log_prob(gg.tensor([0, 3]))


def test_sampling_inside_capture_draws_fresh_noise_and_uploads_no_constants():
    """Python-number parameters are filled on the device and noise is an input of the recording."""
    @gg.capture
    def policy(mu, logits):
        a = Normal(gg.as_tensor(mu), 0.5).rsample()
        b = Categorical(logits=logits).sample((8,))
        return a, b

    mu = np.zeros(3, np.float32)
    lg = np.zeros(4, np.float32)
    gg.manual_seed(7)
    first = policy(mu, lg)
    second = policy(mu, lg)
    assert first[0].shape == (3,) and first[1].shape == (8,)
    assert not np.array_equal(first[0], second[0])
    gg.manual_seed(7)
    again = policy(mu, lg)
    np.testing.assert_array_equal(again[0], first[0])
    np.testing.assert_array_equal(again[1], first[1])
