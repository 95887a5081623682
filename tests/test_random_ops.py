"""Random ops of issue 22 (randperm, multinomial, bernoulli, normal, *_like, normal_/uniform_/bernoulli_/exponential_):
shapes and dtypes as torch's, distributions checked statistically, and the seeded generator.

Every draw is seeded (gg.manual_seed), so each check is deterministic: it cannot flake. The tolerances are
still set at 6 standard errors or more, so a correct sampler passes for any seed; a wrong one (a shifted
mean, a wrong scale, a skipped category) fails by far more.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import ggmlgrad as gg

N = 20000


def _se(var: float, n: int = N) -> float:
    return 6.0 * np.sqrt(var / n)


@pytest.fixture(autouse=True)
def _seed():
    gg.manual_seed(1234)


def test_shapes_and_dtypes_match_torch():
    x = gg.zeros(2, 3)
    cases = [
        (gg.randperm(5), torch.randperm(5)), (gg.rand_like(x), torch.rand_like(torch.zeros(2, 3))),
        (gg.randn_like(x, dtype=gg.float16), torch.randn_like(torch.zeros(2, 3), dtype=torch.float16)),
        (gg.randint_like(x, 3), torch.randint_like(torch.zeros(2, 3), 3)),
        (gg.randint_like(gg.zeros(4, dtype=gg.int32), 1, 9), torch.randint_like(torch.zeros(4, dtype=torch.int64), 1, 9)),
        (gg.bernoulli(gg.full((2, 2), 0.5)), torch.bernoulli(torch.full((2, 2), 0.5))),
        (gg.normal(gg.zeros(2, 1), gg.ones(3)), torch.normal(torch.zeros(2, 1), torch.ones(3))),
        (gg.normal(0.0, 1.0, size=(4,)), torch.normal(0.0, 1.0, size=(4,))),
        (gg.normal(gg.zeros(3), 2.0), torch.normal(torch.zeros(3), 2.0)),
        (gg.multinomial(gg.ones(4), 2), torch.multinomial(torch.ones(4), 2)),
        (gg.multinomial(gg.ones(3, 4), 6, replacement=True), torch.multinomial(torch.ones(3, 4), 6, replacement=True)),
    ]
    names = {torch.float32: gg.float32, torch.float16: gg.float16, torch.int64: gg.int32}
    for k, (g, t) in enumerate(cases):
        assert g.shape == tuple(t.shape), k
        assert g.dtype is names[t.dtype], (k, g.dtype, t.dtype)


def test_seed_reproduces_every_op():
    def draw():
        p = gg.tensor([0.2, 0.5, 0.3])
        return np.concatenate([gg.randperm(6).numpy(), gg.rand_like(p).numpy(), gg.randn_like(p).numpy(),
                               gg.randint_like(p, 5).numpy(), gg.bernoulli(p).numpy(), gg.normal(p, 1.0).numpy(),
                               gg.multinomial(p, 2).numpy(), gg.zeros(3).normal_().numpy(),
                               gg.zeros(3).uniform_().numpy(), gg.zeros(3).exponential_().numpy()])
    gg.manual_seed(7)
    a = draw()
    gg.manual_seed(7)
    assert np.array_equal(a, draw())
    assert not np.array_equal(a, draw())


def test_randperm_is_a_permutation():
    for n in (0, 1, 7, 1000):
        p = gg.randperm(n)
        assert sorted(p.tolist()) == list(range(n))
    firsts = np.array([gg.randperm(4).tolist()[0] for _ in range(2000)])
    assert np.all(np.abs(np.bincount(firsts, minlength=4) / 2000 - 0.25) < _se(0.25 * 0.75, 2000))


def test_uniform_normal_exponential_moments():
    u = gg.zeros(N).uniform_(-2.0, 3.0).numpy()
    assert u.min() >= -2.0 and u.max() < 3.0
    assert abs(u.mean() - 0.5) < _se(25 / 12)
    z = gg.zeros(N).normal_(1.5, 0.5).numpy()
    assert abs(z.mean() - 1.5) < _se(0.25) and abs(z.std() - 0.5) < 0.02
    e = gg.zeros(N).exponential_(4.0).numpy()
    assert e.min() >= 0 and abs(e.mean() - 0.25) < _se(1 / 16)
    r = gg.rand_like(gg.zeros(N)).numpy()
    assert r.min() >= 0 and r.max() < 1 and abs(r.mean() - 0.5) < _se(1 / 12)
    n = gg.randn_like(gg.zeros(N)).numpy()
    assert abs(n.mean()) < _se(1.0) and abs(n.std() - 1.0) < 0.03


def test_normal_forms_use_mean_and_std():
    m = gg.tensor([-5.0, 0.0, 10.0]).reshape(3, 1)
    s = gg.tensor([0.1, 1.0, 3.0]).reshape(3, 1)
    v = gg.normal(gg.broadcast_to(m, (3, N // 4)), gg.broadcast_to(s, (3, N // 4))).numpy()
    for row, (mu, sd) in enumerate(((-5.0, 0.1), (0.0, 1.0), (10.0, 3.0))):
        assert abs(v[row].mean() - mu) < _se(sd * sd, N // 4)
        assert abs(v[row].std() - sd) < 0.06 * sd
    w = gg.normal(3.0, gg.full((N,), 2.0)).numpy()
    assert abs(w.mean() - 3.0) < _se(4.0)
    assert gg.normal(2.0, 0.0, size=(3,)).tolist() == [2.0, 2.0, 2.0]


def test_normal_gives_mean_and_std_a_zero_gradient_like_torch():
    m, s = gg.zeros(3, requires_grad=True), gg.ones(3, requires_grad=True)
    y = gg.normal(m, s)
    assert y.requires_grad
    y.sum().backward()
    assert m.grad.tolist() == [0.0] * 3 and s.grad.tolist() == [0.0] * 3


def test_bernoulli_frequencies():
    p = np.array([0.0, 0.1, 0.5, 0.9, 1.0], np.float32)
    draws = gg.bernoulli(gg.broadcast_to(gg.tensor(p).reshape(5, 1), (5, N // 5)).contiguous()).numpy()
    assert set(np.unique(draws)) <= {0.0, 1.0}
    freq = draws.mean(axis=1)
    assert freq[0] == 0.0 and freq[4] == 1.0
    assert np.all(np.abs(freq - p) <= np.array([_se(q * (1 - q) + 1e-9, N // 5) for q in p]))
    b = gg.zeros(N).bernoulli_(0.3).numpy()
    assert abs(b.mean() - 0.3) < _se(0.21)
    c = gg.zeros(N).bernoulli_(gg.full((N,), 0.7)).numpy()
    assert abs(c.mean() - 0.7) < _se(0.21)
    assert abs(gg.bernoulli(gg.zeros(N), 0.25).numpy().mean() - 0.25) < _se(0.1875)


def test_randint_like_covers_its_range_uniformly():
    v = gg.randint_like(gg.zeros(N, dtype=gg.int32), -3, 4).numpy()
    assert v.min() == -3 and v.max() == 3
    freq = np.bincount(v + 3) / N
    assert np.all(np.abs(freq - 1 / 7) < _se(1 / 7 * 6 / 7))


def test_multinomial_with_replacement_follows_the_weights():
    w = np.array([[1.0, 0.0, 3.0, 6.0], [5.0, 5.0, 0.0, 0.0]], np.float32)     # need not sum to 1
    s = gg.multinomial(gg.tensor(w), N // 2, replacement=True).numpy()
    for row in range(2):
        p = w[row] / w[row].sum()
        freq = np.bincount(s[row], minlength=4) / (N // 2)
        assert np.all(np.abs(freq - p) <= np.array([_se(q * (1 - q) + 1e-9, N // 2) for q in p])), (row, freq)


def test_multinomial_without_replacement():
    w = gg.tensor([0.1, 0.0, 0.6, 0.3])
    firsts = []
    for _ in range(1500):
        s = gg.multinomial(w, 4).tolist()
        assert sorted(s) == [0, 1, 2, 3]
        assert s[-1] == 1                       # the zero weight comes last, as torch's
        firsts.append(s[0])
    freq = np.bincount(firsts, minlength=4) / 1500
    assert np.all(np.abs(freq - [0.1, 0.0, 0.6, 0.3]) < _se(0.25, 1500))


def test_random_ops_draw_anew_on_every_capture_replay():
    f = gg.capture(lambda p: (gg.bernoulli(p), gg.multinomial(p + 0.1, 3, replacement=True), gg.rand_like(p),
                              gg.normal(p, 1.0)))
    p = np.full(64, 0.5, np.float32)
    a, b = f(p), f(p)
    for x, y in zip(a, b):
        assert x.shape == y.shape and not np.array_equal(x, y)
    assert set(np.unique(a[0])) <= {0.0, 1.0} and a[1].max() < 64


def test_in_place_draws_inside_capture_write_the_argument():
    def step(x):
        x.uniform_(2.0, 3.0)
        return x * 1
    f = gg.capture(step)
    a = f(np.zeros(16, np.float32))
    b = f(np.zeros(16, np.float32))
    assert a.min() >= 2.0 and a.max() < 3.0 and not np.array_equal(a, b)


@pytest.mark.parametrize("call", [
    lambda: gg.zeros(2, dtype=gg.int32).normal_(), lambda: gg.zeros(2).normal_(0.0, -1.0),
    lambda: gg.zeros(2).uniform_(3.0, 2.0), lambda: gg.zeros(2).bernoulli_(1.5), lambda: gg.zeros(2).exponential_(0.0),
    lambda: gg.randint_like(gg.zeros(2), 3, 3), lambda: gg.randperm(-1), lambda: gg.multinomial(gg.zeros(3), 1),
    lambda: gg.multinomial(gg.tensor([1.0, float("nan")]), 1), lambda: gg.normal(gg.zeros(2), gg.tensor([1.0, -1.0])),
])
@pytest.mark.parametrize("graph", [False, True])
def test_bad_arguments_raise_runtime_error_like_torch(call, graph):
    with gg.graph_mode(graph):
        with pytest.raises(RuntimeError):
            out = call()
            out.numpy()


def test_in_place_draw_on_a_leaf_that_requires_grad_raises():
    with pytest.raises(RuntimeError, match="leaf"):
        gg.zeros(2, requires_grad=True).normal_()
    with gg.no_grad():
        w = gg.zeros(3, requires_grad=True)
        w.uniform_(-1.0, 1.0)
    assert w.requires_grad and all(-1 <= v < 1 for v in w.tolist())
