"""Creation and random ops inside gg.capture / gg.capture_step: creation ops from Python numbers and
recorded shapes are recorded constants (no per-call upload, no CaptureError); rand/randn/randint and
their *_like forms draw anew on every replay from the generator eager mode uses, so a seeded run gives
the same numbers captured or not."""
from __future__ import annotations

import numpy as np
import pytest

import ggmlgrad as gg


def _positions(x):
    t = x.shape[1]
    pos = gg.arange(0, t)                                   # int32, from the recorded shape
    causal = gg.ones(t, t).triu(1) if hasattr(gg.Tensor, "triu") else gg.ones(t, t)
    return (x + pos.float(), gg.zeros_like(x) + 1.5, gg.full((2,), 7), gg.eye(t), gg.linspace(0.0, 1.0, t),
            gg.full_like(x, 2.0), gg.ones(t, dtype=gg.bool), causal, gg.empty_like(x), x.new_ones(t))


@pytest.mark.parametrize("shape", [(2, 3), (1, 5)])
def test_creation_ops_inside_capture_are_recorded_constants(shape):
    f = gg.capture(_positions)
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    expect = _positions(gg.tensor(x))
    for _ in range(3):
        got = f(x)
        for e, g in zip(expect, got):
            assert g.dtype == e.numpy().dtype
            np.testing.assert_array_equal(g, e.numpy())
    gg.reset_counters()
    f(x)
    c = gg.counters()
    assert (c["computes"], c["uploads"]) == (1, 1)           # the argument; the constants stay in place


def test_two_signatures_record_their_own_constants():
    f = gg.capture(lambda x: x + gg.arange(0, x.shape[-1]).float())
    np.testing.assert_array_equal(f(np.zeros((1, 3), np.float32)), [[0.0, 1.0, 2.0]])
    np.testing.assert_array_equal(f(np.zeros((1, 5), np.float32)), [[0.0, 1.0, 2.0, 3.0, 4.0]])
    np.testing.assert_array_equal(f(np.ones((1, 3), np.float32)), [[1.0, 2.0, 3.0]])


def _draws(x):
    return (gg.randn(2, 3), gg.rand(*x.shape), gg.randint(0, 10, (4,)), gg.randn_like(x), gg.rand_like(x),
            gg.randint_like(x, 3, 9), x * gg.randn(*x.shape))


@pytest.mark.parametrize("graph", [False, True])
def test_random_ops_draw_anew_each_replay_with_eager_modes_numbers(graph):
    x = np.ones((2, 3), np.float32)
    gg.manual_seed(123)
    with gg.graph_mode(graph):
        eager = [[t.numpy() for t in _draws(gg.tensor(x))] for _ in range(3)]
    gg.manual_seed(123)
    f = gg.capture(_draws)
    captured = [f(x) for _ in range(3)]
    for e_call, c_call in zip(eager, captured):
        for e, c in zip(e_call, c_call):
            assert e.dtype == c.dtype
            np.testing.assert_array_equal(c, e)
    assert not np.array_equal(captured[0][0], captured[1][0])      # fresh numbers per replay
    r = captured[0][2]
    assert r.dtype == np.int32 and ((r >= 0) & (r < 10)).all()


def test_reparameterisation_in_capture_step_matches_eager_training():
    def run(captured: bool) -> np.ndarray:
        gg.manual_seed(7)
        mu = gg.tensor([0.5, -0.5], requires_grad=True)
        log_std = gg.tensor([0.0, 0.0], requires_grad=True)
        opt = gg.optim.Adam([mu, log_std], lr=0.05)

        def loss_fn(target):
            z = mu + log_std.exp() * gg.randn_like(mu)         # a VAE's reparameterisation
            return ((z - target) ** 2).mean()
        step = gg.capture_step(loss_fn, opt) if captured else None
        target = np.array([1.0, 2.0], np.float32)
        for _ in range(5):
            if captured:
                step(target)
            else:
                opt.zero_grad()
                loss_fn(gg.tensor(target)).backward()
                opt.step()
        return np.concatenate([mu.detach().numpy(), log_std.detach().numpy()])
    np.testing.assert_allclose(run(True), run(False), rtol=1e-5, atol=1e-6)


def test_host_data_and_grad_requiring_constants_are_still_refused():
    with pytest.raises(gg.CaptureError, match="upload"):
        gg.capture(lambda x: x + gg.tensor([1.0, 2.0]))(np.zeros(2, np.float32))
    with pytest.raises(gg.CaptureError, match="upload"):
        gg.capture(lambda x: x + gg.zeros(2, requires_grad=True))(np.zeros(2, np.float32))
    with pytest.raises(ValueError, match="int32"):                  # eager mode's error, not a CaptureError
        gg.capture(lambda x: x + gg.full((2,), 2**40))(np.zeros(2, np.float32))
