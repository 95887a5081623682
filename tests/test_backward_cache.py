"""Graph mode replays a backward pass whose tape and queue match an earlier one (tensor/tape.py).

The replay must queue exactly the ops the gradient rules would: every test compares against
NumPy float64 or against the rules run every time (the cache switched off), and counts replays.
"""
from __future__ import annotations

import numpy as np
import pytest

import ggmlgrad as gg
from ggmlgrad.tensor import tape


@pytest.fixture
def cache():
    """The backward cache, emptied, over an empty queue; restored (enabled) afterwards."""
    with gg.graph_mode(False):  # drains what earlier tests left queued (GGMLGRAD_GRAPH=1)
        pass
    c = tape._BACKWARD
    c.clear()
    c.enabled = True
    c.hits = c.misses_in_row = c.paused = 0
    yield c
    c.clear()
    c.enabled = True
    c.misses_in_row = c.paused = 0


def _params(seed=0, sizes=(5, 16, 3)):
    rng = np.random.default_rng(seed)
    out = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        out.append(gg.tensor((rng.standard_normal((a, b)) * 0.5).astype(np.float32), requires_grad=True))
        out.append(gg.tensor((rng.standard_normal(b) * 0.1).astype(np.float32), requires_grad=True))
    return out


def _loss(x, y, params):
    w1, b1, w2, b2 = params
    h = (x @ w1 + b1).relu()
    out = (h @ w2 + b2).tanh()
    return ((out - y) * (out - y)).mean()


def _numpy_grads(x, y, w1, b1, w2, b2):
    """Hand-derived float64 gradients of _loss."""
    x, y, w1, b1, w2, b2 = (np.asarray(a, np.float64) for a in (x, y, w1, b1, w2, b2))
    hp = x @ w1 + b1
    h = np.maximum(hp, 0)
    out = np.tanh(h @ w2 + b2)
    d_o = 2 * (out - y) / out.size * (1 - out ** 2)
    dh = (d_o @ w2.T) * (hp > 0)
    return [x.T @ dh, dh.sum(0), h.T @ d_o, d_o.sum(0)]


def _data(seed=1, n=8):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 5)).astype(np.float32), rng.standard_normal((n, 3)).astype(np.float32)


def test_training_loop_replays_backward_and_matches_numpy(cache):
    xa, ya = _data()
    x, y = gg.tensor(xa), gg.tensor(ya)
    params = _params()
    opt = gg.optim.SGD(params, lr=0.1)
    for step in range(5):
        before = [p.detach().numpy().astype(np.float64) for p in params]
        with gg.graph_mode(True):
            opt.zero_grad()
            _loss(x, y, params).backward()
            grads = [p.grad.numpy() for p in params]
            opt.step()
        for g, want in zip(grads, _numpy_grads(xa, ya, *before)):
            np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-6)
        assert cache.hits == step  # recorded on the first step, replayed on every later one
    assert len(cache.entries) >= 1


def _run(case, steps: int, enabled: bool):
    tape._BACKWARD.enabled = enabled
    try:
        return case(steps)
    finally:
        tape._BACKWARD.enabled = True


def _residual_shared_weight(steps):
    """A weight used twice (gradients from two paths add), a broadcast bias, retain_grad."""
    rng = np.random.default_rng(4)
    w = gg.tensor(rng.standard_normal((6, 6)).astype(np.float32) * 0.3, requires_grad=True)
    b = gg.tensor(rng.standard_normal((1, 6)).astype(np.float32), requires_grad=True)
    x = gg.tensor(rng.standard_normal((4, 6)).astype(np.float32))
    seen = []
    for _ in range(steps):
        w.grad = b.grad = None
        with gg.graph_mode(True):
            h = (x @ w + b).relu()
            h.retain_grad()
            out = (h @ w + x).sigmoid().sum()
            out.backward()
            seen.append([w.grad.numpy(), b.grad.numpy(), h.grad.numpy()])
        with gg.no_grad():
            w.copy_(w - 0.05 * w.grad)
    return seen


def _matmul_precision_f32(steps):
    params = _params(7)
    x, y = (gg.tensor(a) for a in _data(8))
    seen = []
    for _ in range(steps):
        for p in params:
            p.grad = None
        with gg.graph_mode(True), gg.local_mode(matmul_precision="f32"):
            _loss(x, y, params).backward()
            seen.append([p.grad.numpy() for p in params])
    return seen


def _float16_weight_used_twice(steps):
    """A float16 leaf reached by two paths: its gradients add in float32 (cast ops in the rules)."""
    rng = np.random.default_rng(9)
    w = gg.tensor(rng.standard_normal((4, 4)).astype(np.float32)).to("float16")
    w.requires_grad_(True)
    x = gg.tensor(rng.standard_normal((3, 4)).astype(np.float32))
    seen = []
    for _ in range(steps):
        w.grad = None
        with gg.graph_mode(True):
            wf = w.float()
            ((x @ wf).tanh().sum() + (x @ wf.T).sum()).backward()
            seen.append([w.grad.numpy().astype(np.float32)])
    return seen


@pytest.mark.parametrize("case", [_residual_shared_weight, _matmul_precision_f32, _float16_weight_used_twice])
def test_replayed_backward_equals_the_rules_run_every_time(cache, case):
    cached = _run(case, 4, True)
    assert cache.hits >= 2
    hits = cache.hits
    fresh = _run(case, 4, False)
    assert cache.hits == hits
    for a, b in zip(cached, fresh):
        for ga, gb in zip(a, b):
            np.testing.assert_array_equal(ga, gb)


def test_a_changed_tape_is_not_replayed(cache):
    xa, ya = _data()
    x, y = gg.tensor(xa), gg.tensor(ya)
    params = _params()
    want = _numpy_grads(xa, ya, *[p.detach().numpy().copy() for p in params])
    for _ in range(3):  # recorded, then replayed
        for p in params:
            p.grad = None
        with gg.graph_mode(True):
            _loss(x, y, params).backward()
    hits = cache.hits
    # The same queue, but b1 no longer requires grad: its gradient must not appear.
    params[1].requires_grad_(False)
    for p in params:
        p.grad = None
    with gg.graph_mode(True):
        _loss(x, y, params).backward()
        assert params[1].grad is None
        np.testing.assert_allclose(params[0].grad.numpy(), want[0], rtol=1e-4, atol=1e-6)
    params[1].requires_grad_(True)
    # Another root over the same forward: twice the loss, twice the gradients.
    for p in params:
        p.grad = None
    with gg.graph_mode(True):
        (_loss(x, y, params) * 2.0).backward()
        for p, g in zip(params, want):
            np.testing.assert_allclose(p.grad.numpy(), 2 * g, rtol=1e-4, atol=1e-6)
    assert cache.hits == hits  # neither was a replay


def test_gradients_accumulate_without_zero_grad(cache):
    xa, ya = _data()
    x, y = gg.tensor(xa), gg.tensor(ya)
    params = _params()
    want = _numpy_grads(xa, ya, *[p.detach().numpy().copy() for p in params])
    with gg.graph_mode(True):
        for _ in range(3):
            _loss(x, y, params).backward()
        for p, g in zip(params, want):
            np.testing.assert_allclose(p.grad.numpy(), 3 * g, rtol=1e-4, atol=1e-5)


def test_retain_graph_and_second_backward_after_a_replay(cache):
    xa, ya = _data()
    x, y = gg.tensor(xa), gg.tensor(ya)
    params = _params()
    want = _numpy_grads(xa, ya, *[p.detach().numpy().copy() for p in params])
    for _ in range(3):
        for p in params:
            p.grad = None
        with gg.graph_mode(True):
            loss = _loss(x, y, params)
            loss.backward(retain_graph=True)
            loss.backward()  # accumulates: 2x
            for p, g in zip(params, want):
                np.testing.assert_allclose(p.grad.numpy(), 2 * g, rtol=1e-4, atol=1e-5)
    assert cache.hits >= 1
    for p in params:
        p.grad = None
    with gg.graph_mode(True):
        loss = _loss(x, y, params)
        loss.backward()  # a replay, which frees the graph like the rules do
        with pytest.raises(RuntimeError, match="second time"):
            loss.backward()


def test_inplace_change_of_a_saved_tensor_still_raises(cache):
    xa, ya = _data()
    x, y = gg.tensor(xa), gg.tensor(ya)
    params = _params()
    for _ in range(3):
        for p in params:
            p.grad = None
        with gg.graph_mode(True):
            _loss(x, y, params).backward()
    with gg.graph_mode(True):
        loss = _loss(x, y, params)
        with gg.no_grad():
            x.mul_(2.0)  # x was saved for matmul's backward
        with pytest.raises(RuntimeError, match="modified in place"):
            loss.backward()


def test_two_batch_sizes_keep_two_entries(cache):
    params = _params()
    data = [_data(1, 8), _data(2, 16)]
    for _ in range(3):
        for xa, ya in data:
            want = _numpy_grads(xa, ya, *[p.detach().numpy().copy() for p in params])
            for p in params:
                p.grad = None
            with gg.graph_mode(True):
                _loss(gg.tensor(xa), gg.tensor(ya), params).backward()
                for p, g in zip(params, want):
                    np.testing.assert_allclose(p.grad.numpy(), g, rtol=1e-4, atol=1e-6)
    assert len(cache.entries) == 2 and cache.hits >= 2


def test_keying_pauses_when_backward_passes_never_repeat(cache, monkeypatch):
    """A graph that changes every step never hits: after MISSES_BEFORE_PAUSE misses in a row the
    cache stops keying for PAUSE calls (gradients stay right), then tries again."""
    keyed = []
    real_key = cache.key
    monkeypatch.setattr(cache, "key", lambda *a: keyed.append(1) or real_key(*a))
    x = gg.tensor(np.arange(1.0, 5.0, dtype=np.float32), requires_grad=True)
    n_calls = cache.MISSES_BEFORE_PAUSE + 5
    for k in range(n_calls):
        x.grad = None
        with gg.graph_mode(True):
            y = x
            for _ in range(k + 1):  # a longer chain every call: never the same backward
                y = y * 1.5
            y.sum().backward()
            np.testing.assert_allclose(x.grad.numpy(), np.full(4, 1.5 ** (k + 1)), rtol=1e-6)
    assert len(keyed) == cache.MISSES_BEFORE_PAUSE and cache.hits == 0
    assert cache.paused == cache.PAUSE - 5
    # A repeating backward still replays once the pause is over.
    cache.paused = 0
    xa, ya = _data()
    params = _params()
    for _ in range(3):
        for p in params:
            p.grad = None
        with gg.graph_mode(True):
            _loss(gg.tensor(xa), gg.tensor(ya), params).backward()
            params[0].grad.numpy()  # a sync point: the next step starts from an empty queue
    assert cache.hits >= 1
