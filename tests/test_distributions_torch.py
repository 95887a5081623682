"""torch.distributions parity: log_prob, entropy, mean, variance and their parameter gradients,
kl_divergence, sample shapes, rsample gradients (Gamma's against torch's own implicit gradient),
sample statistics, and sampling inside gg.capture."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.distributions as TD

import ggmlgrad as gg
import ggmlgrad.distributions as GD
from ggmlgrad.distributions.transforms import AffineTransform, SigmoidTransform, TanhTransform

R = np.random.default_rng(0)


def _pos(*shape, lo=0.5, hi=3.0):
    return R.uniform(lo, hi, shape).astype(np.float32)


def _real(*shape):
    return R.standard_normal(shape).astype(np.float32)


def _prob(*shape):
    return R.uniform(0.1, 0.9, shape).astype(np.float32)


def _tril(k):
    a = np.tril(R.standard_normal((k, k)) * 0.3).astype(np.float32)
    a[np.arange(k), np.arange(k)] = R.uniform(0.5, 1.5, k)
    return a


def _spd(k):
    a = R.standard_normal((k, k)).astype(np.float32)
    return (a @ a.T + k * np.eye(k)).astype(np.float32)


def _simplex(*shape):
    v = R.uniform(0.1, 1.0, shape)
    return (v / v.sum(-1, keepdims=True)).astype(np.float32)


# name -> (params, value, make(module, *params), which params get gradients)
CASES = {
    "bernoulli_probs": ([_prob(4)], (R.random(4) < 0.5).astype(np.float32), lambda D, p: D.Bernoulli(probs=p)),
    "bernoulli_logits": ([_real(2, 3)], (R.random((2, 3)) < 0.5).astype(np.float32), lambda D, l: D.Bernoulli(logits=l)),
    "uniform": ([_real(5) - 2.0, _real(5) * 0 + 3.0], R.uniform(-1, 0.9, 5).astype(np.float32),
                lambda D, a, b: D.Uniform(a, a + b)),
    "laplace": ([_real(3, 2), _pos(3, 2)], _real(3, 2), lambda D, m, s: D.Laplace(m, s)),
    "normal": ([_real(4), _pos(4)], _real(4), lambda D, m, s: D.Normal(m, s)),
    "gamma": ([_pos(6, lo=0.3, hi=8.0), _pos(6)], _pos(6, lo=0.1, hi=4.0), lambda D, a, b: D.Gamma(a, b)),
    "beta": ([_pos(5), _pos(5)], _prob(5), lambda D, a, b: D.Beta(a, b)),
    "dirichlet": ([_pos(2, 4)], _simplex(2, 4), lambda D, a: D.Dirichlet(a)),
    "independent_normal": ([_real(3, 4), _pos(3, 4)], _real(3, 4), lambda D, m, s: D.Independent(D.Normal(m, s), 1)),
    "one_hot": ([_real(3, 4)], np.eye(4, dtype=np.float32)[[1, 3, 0]], lambda D, l: D.OneHotCategorical(logits=l)),
    "mvn_scale_tril": ([_real(3), _tril(3)], _real(3), lambda D, m, L: D.MultivariateNormal(m, scale_tril=L)),
    "mvn_covariance": ([_real(2, 3), _spd(3)], _real(2, 3), lambda D, m, S: D.MultivariateNormal(m, covariance_matrix=S)),
    "tanh_normal": ([_real(4), _pos(4)], np.tanh(_real(4)).astype(np.float32),
                    lambda D, m, s: D.TransformedDistribution(D.Normal(m, s), [_T(D).TanhTransform()])),
    "sigmoid_affine_normal": ([_real(3), _pos(3)], R.uniform(0.6, 2.4, 3).astype(np.float32),
                              lambda D, m, s: D.TransformedDistribution(
                                  D.Normal(m, s), [_T(D).SigmoidTransform(), _T(D).AffineTransform(0.5, 2.0)])),
}


def _T(D):
    return D.transforms


def _pair(name):
    params, value, make = CASES[name]
    tp = [torch.tensor(p, requires_grad=True) for p in params]
    gp = [gg.tensor(p, requires_grad=True) for p in params]
    return make(TD, *tp), tp, make(GD, *gp), gp, value


def _check(g, t, tol=2e-5):
    np.testing.assert_allclose(np.asarray(g.detach().numpy(), np.float64), t.detach().numpy().astype(np.float64),
                               rtol=tol * 10, atol=tol)


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_log_prob_entropy_moments_and_gradients_match_torch(name, graph):
    td, tp, gd, gp, value = _pair(name)
    with gg.graph_mode(graph):
        glp = gd.log_prob(gg.tensor(value))
        tlp = td.log_prob(torch.tensor(value))
        _check(glp, tlp)
        total_g, total_t = glp.sum(), tlp.sum()
        if not name.startswith(("tanh", "sigmoid")):
            _check(gd.entropy(), td.entropy())
            _check(gd.mean, td.mean)
            _check(gd.variance, td.variance)
            total_g, total_t = total_g + gd.entropy().sum(), total_t + td.entropy().sum()
        assert gd.batch_shape == tuple(td.batch_shape) and gd.event_shape == tuple(td.event_shape)
        total_g.backward()
        total_t.backward()
        for g, t in zip(gp, tp):
            _check(g.grad, t.grad, tol=1e-4)


@pytest.mark.parametrize("name", sorted(CASES))
def test_sample_shapes_and_dtypes_match_torch(name):
    td, _, gd, _, _ = _pair(name)
    for shape in [(), (5,)]:
        gs, ts = gd.sample(shape), td.sample(shape)
        assert gs.shape == tuple(ts.shape)
        assert gs.dtype is gg.float32 and ts.dtype == torch.float32
        if getattr(td, "has_rsample", False):
            assert gd.has_rsample
            assert gd.rsample(shape).shape == tuple(ts.shape)


def _log_prob_in_capture(name):
    _, _, gd, _, value = _pair(name)
    f = gg.capture(lambda v: gd.log_prob(v))
    f(value)
    return f(value), gd.log_prob(gg.tensor(value)).detach().numpy()


@pytest.mark.parametrize("name", sorted(CASES))
def test_log_prob_in_capture_matches_eager(name):
    got, want = _log_prob_in_capture(name)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


KL_PAIRS = ["normal", "bernoulli_probs", "uniform", "laplace", "gamma", "beta", "dirichlet", "one_hot",
            "mvn_scale_tril", "mvn_covariance", "independent_normal"]


@pytest.mark.parametrize("name", KL_PAIRS)
def test_kl_divergence_matches_torch(name):
    params, _, make = CASES[name]
    q_params = [p * 0.8 + 0.3 if p.ndim < 2 or name.startswith("mvn") is False else p for p in params]
    if name.startswith("mvn"):
        q_params = [params[0] + 0.5, params[1] if name == "mvn_covariance" else _tril(params[1].shape[-1])]
    if name == "uniform":
        q_params = [params[0] - 0.5, params[1] + 1.0]          # q's support contains p's
    tp = [torch.tensor(p, requires_grad=True) for p in params]
    gp = [gg.tensor(p, requires_grad=True) for p in params]
    tkl = TD.kl_divergence(make(TD, *tp), make(TD, *[torch.tensor(q) for q in q_params]))
    gkl = GD.kl_divergence(make(GD, *gp), make(GD, *[gg.tensor(q) for q in q_params]))
    _check(gkl, tkl, tol=5e-5)
    tkl.sum().backward()
    gkl.sum().backward()
    for g, t in zip(gp, tp):
        _check(g.grad, t.grad, tol=2e-4)


def test_kl_unregistered_pair_raises_as_torch():
    with pytest.raises(NotImplementedError):
        TD.kl_divergence(TD.Gamma(torch.ones(1), torch.ones(1)), TD.Laplace(torch.zeros(1), torch.ones(1)))
    with pytest.raises(NotImplementedError):
        GD.kl_divergence(GD.Gamma(gg.ones(1), gg.ones(1)), GD.Laplace(gg.zeros(1), gg.ones(1)))


def test_gamma_rsample_gradient_is_torchs_implicit_gradient():
    alpha = np.array([0.3, 1.0, 2.5, 9.0, 40.0], np.float32)
    a = gg.tensor(alpha, requires_grad=True)
    gg.manual_seed(3)
    x = GD.Gamma(a, gg.ones(5)).rsample()
    x.sum().backward()
    want = torch._standard_gamma_grad(torch.tensor(alpha), torch.tensor(x.detach().numpy()))
    np.testing.assert_allclose(a.grad.numpy(), want.numpy(), rtol=2e-3, atol=1e-6)


def test_beta_and_dirichlet_rsample_gradients_are_unbiased():
    # d/da E[X] for X ~ Beta(a, b) is b / (a + b)^2: the mean of the pathwise gradients must match it
    a = gg.tensor(np.full(20000, 2.0, np.float32), requires_grad=True)
    gg.manual_seed(0)
    GD.Beta(a, gg.full((20000,), 3.0)).rsample().sum().backward()
    assert abs(float(a.grad.numpy().mean()) - 3.0 / 25.0) < 0.004
    c = gg.tensor(np.tile(np.array([[1.0, 2.0, 3.0]], np.float32), (5000, 1)), requires_grad=True)
    GD.Dirichlet(c).rsample()[:, 0].sum().backward()
    # d/dc0 E[X0] = (c1 + c2) / c0sum^2 = 5/36; d/dc1 E[X0] = -c0 / c0sum^2 = -1/36
    g = c.grad.numpy().mean(0)
    assert abs(g[0] - 5 / 36) < 0.01 and abs(g[1] + 1 / 36) < 0.01


@pytest.mark.parametrize("name", ["bernoulli_probs", "uniform", "laplace", "gamma", "beta", "mvn_covariance"])
def test_sample_moments(name):
    _, _, gd, _, _ = _pair(name)
    gg.manual_seed(1)
    s = gd.sample((10000,)).numpy().astype(np.float64)
    mean, var = gd.mean.detach().numpy(), gd.variance.detach().numpy()
    assert np.all(np.abs(s.mean(0) - mean) < 5 * np.sqrt(var / 10000) + 1e-6)
    assert np.all(np.abs(s.var(0) - var) < 0.1 * var + 1e-6)


def test_sampling_inside_capture_draws_anew_and_follows_the_seed():
    ones, zeros, eye = gg.ones(3), gg.zeros(3), gg.eye(3)

    def draw(loc):
        d = GD.Independent(GD.Laplace(loc, ones), 1)
        return d.rsample() + GD.Uniform(zeros, ones).sample() + GD.MultivariateNormal(loc, scale_tril=eye).rsample()
    loc = np.zeros(3, np.float32)
    gg.manual_seed(5)
    eager = [draw(gg.tensor(loc)).numpy() for _ in range(3)]
    f = gg.capture(draw)
    gg.manual_seed(5)
    captured = [f(loc) for _ in range(3)]
    np.testing.assert_allclose(captured, eager, rtol=1e-6, atol=1e-6)
    assert not np.allclose(captured[1], captured[2])


def test_gamma_family_samples_inside_capture_as_in_eager():
    ones, conc = gg.ones(2), gg.tensor([0.4, 3.0])
    draw = lambda a: (GD.Gamma(a, ones).sample((3,)), GD.Beta(a, conc).sample(),   # noqa: E731
                      GD.Dirichlet(a.unsqueeze(0) + conc).sample())
    alpha = np.array([0.6, 2.5], np.float32)
    gg.manual_seed(7)
    eager = [[t.numpy() for t in draw(gg.tensor(alpha))] for _ in range(3)]
    f = gg.capture(draw)
    gg.manual_seed(7)
    captured = [f(alpha) for _ in range(3)]
    for e, c in zip(eager, captured):
        for x, y in zip(e, c):
            np.testing.assert_allclose(y, x, rtol=1e-6, atol=1e-7)
    assert not np.allclose(captured[1][0], captured[2][0])
    a = gg.tensor(alpha, requires_grad=True)                  # rsample's gradient is computed on the host
    step = gg.capture_step(lambda x: (GD.Gamma(a, ones).rsample() * x).sum(), gg.optim.SGD([a], lr=0.1))
    with pytest.raises(gg.CaptureError):
        step(np.ones(2, np.float32))


def test_squashed_gaussian_as_sac_uses_it():
    mu = gg.tensor(_real(4, 2), requires_grad=True)
    std = gg.tensor(_pos(4, 2), requires_grad=True)
    d = GD.TransformedDistribution(GD.Normal(mu, std), [TanhTransform(cache_size=1)])
    gg.manual_seed(0)
    y = d.rsample()
    lp = d.log_prob(y).sum(-1)
    # the same sample in torch: recover x from the cache, log_prob of the pre-tanh value
    x = torch.tensor(np.arctanh(np.clip(y.detach().numpy().astype(np.float64), -1 + 1e-7, 1 - 1e-7)).astype(np.float32))
    tmu, tstd = torch.tensor(mu.detach().numpy()), torch.tensor(std.detach().numpy())
    want = (TD.Normal(tmu, tstd).log_prob(x) - 2.0 * (np.log(2.0) - x - torch.nn.functional.softplus(-2.0 * x))).sum(-1)
    np.testing.assert_allclose(lp.detach().numpy(), want.numpy(), rtol=1e-3, atol=1e-3)
    lp.sum().backward()
    assert mu.grad is not None and std.grad is not None and np.all(np.isfinite(mu.grad.numpy()))
    assert isinstance(AffineTransform(0.0, 1.0), GD.transforms.Transform) and SigmoidTransform()(gg.zeros(1)).item() == 0.5


@pytest.mark.parametrize("module", ["distributions", "distributions.special", "distributions.bernoulli",
                                    "distributions.uniform", "distributions.laplace", "distributions.gamma",
                                    "distributions.independent", "distributions.one_hot_categorical",
                                    "distributions.multivariate_normal", "distributions.transformed_distribution",
                                    "distributions.kl"])
def test_docstring_examples_run(module):
    import doctest
    import importlib
    result = doctest.testmod(importlib.import_module(f"ggmlgrad.{module}"), extraglobs={"gg": gg})
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
@pytest.mark.parametrize("with_pos_weight", [False, True])
def test_bce_with_logits_differentiates_the_target_as_torch(graph, with_pos_weight):
    x = _real(3, 2)
    t = _prob(3, 2)
    pw = _pos(2)
    ta, tb = torch.tensor(x, requires_grad=True), torch.tensor(t, requires_grad=True)
    kw_t = dict(pos_weight=torch.tensor(pw)) if with_pos_weight else {}
    torch.nn.functional.binary_cross_entropy_with_logits(ta, tb, **kw_t).backward()
    with gg.graph_mode(graph):
        ga, gb = gg.tensor(x, requires_grad=True), gg.tensor(t, requires_grad=True)
        kw_g = dict(pos_weight=gg.tensor(pw)) if with_pos_weight else {}
        gg.nn.functional.binary_cross_entropy_with_logits(ga, gb, **kw_g).backward()
        _check(ga.grad, ta.grad)
        _check(gb.grad, tb.grad)
    with pytest.raises(RuntimeError, match="pos_weight"):
        torch.nn.functional.binary_cross_entropy_with_logits(ta, tb, pos_weight=torch.tensor(pw, requires_grad=True))
    with pytest.raises(RuntimeError, match="pos_weight"):
        gg.nn.functional.binary_cross_entropy_with_logits(ga, gb, pos_weight=gg.tensor(pw, requires_grad=True))


def test_values_outside_the_support_as_torch_without_validation():
    t = TD.Uniform(torch.zeros(2), torch.ones(2), validate_args=False).log_prob(torch.tensor([0.5, 2.0]))
    g = GD.Uniform(gg.zeros(2), gg.ones(2)).log_prob(gg.tensor([0.5, 2.0]))
    np.testing.assert_array_equal(g.numpy(), t.numpy())
    with pytest.raises(NotImplementedError, match="validate_args"):
        GD.Normal(gg.zeros(1), gg.ones(1), validate_args=True)


def _mk(name, lib):
    T = torch if lib is TD else gg
    D = lib
    t = lambda a: T.tensor(np.asarray(a, np.float32))   # noqa: E731
    return {
        "beta": lambda: D.Beta(t([2.0, 0.7]), t([3.0, 1.5])),
        "gamma": lambda: D.Gamma(t([2.0, 0.7]), t([1.5, 3.0])),
        "normal": lambda: D.Normal(t([0.3, -1.0]), t([1.2, 0.6])),
        "laplace": lambda: D.Laplace(t([0.3, -1.0]), t([1.2, 0.6])),
        "uniform01": lambda: D.Uniform(t([0.1, 0.2]), t([0.7, 0.9])),
        "uniform_wide": lambda: D.Uniform(t([-1.0, 0.0]), t([2.0, 3.0])),
        "tanh_normal": lambda: D.TransformedDistribution(D.Normal(t([0.3, -1.0]), t([1.2, 0.6])),
                                                         [D.transforms.TanhTransform()]),
        "tanh_normal2": lambda: D.TransformedDistribution(D.Normal(t([0.0, 0.5]), t([1.0, 2.0])),
                                                          [D.transforms.TanhTransform()]),
    }[name]()


CROSS_KL = [("beta", "gamma"), ("beta", "normal"), ("beta", "uniform01"), ("beta", "uniform_wide"),
            ("gamma", "normal"), ("gamma", "beta"), ("gamma", "uniform01"), ("laplace", "normal"),
            ("laplace", "beta"), ("laplace", "gamma"), ("laplace", "uniform01"), ("normal", "laplace"),
            ("normal", "beta"), ("normal", "gamma"), ("normal", "uniform01"), ("uniform01", "beta"),
            ("uniform_wide", "beta"), ("uniform01", "gamma"), ("uniform_wide", "gamma"), ("uniform01", "normal"),
            ("tanh_normal", "tanh_normal2")]


@pytest.mark.parametrize("p_name,q_name", CROSS_KL)
def test_kl_divergence_between_families_matches_torch(p_name, q_name):
    want = TD.kl_divergence(_mk(p_name, TD), _mk(q_name, TD))
    got = GD.kl_divergence(_mk(p_name, GD), _mk(q_name, GD))
    w, g = want.numpy().astype(np.float64), got.numpy().astype(np.float64)
    assert np.array_equal(np.isinf(w), np.isinf(g)), (w, g)
    np.testing.assert_allclose(g[np.isfinite(w)], w[np.isfinite(w)], rtol=2e-5, atol=2e-5)
