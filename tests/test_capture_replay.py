"""The captured replay path's shortcuts (capture/api.py): tensor arguments copied straight into the
staging block, outputs read through typed views of the output block. Replays must give what eager
gives, with changed inputs and hyperparameters, and hand out arrays the caller owns."""
from __future__ import annotations

import numpy as np
import pytest

import ggmlgrad as gg


def _params(seed=0, sizes=(4, 16, 3)):
    r = np.random.default_rng(seed)
    out = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        out.append(r.uniform(-0.5, 0.5, (b, a)).astype(np.float32))
        out.append(r.uniform(-0.5, 0.5, b).astype(np.float32))
    return out


def _loss(ps, x, y):
    h = gg.tanh(gg.linear(x, ps[0], ps[1]))
    logits = gg.linear(h, ps[2], ps[3])
    return -(gg.log_softmax(logits, axis=-1) * y).sum() * (1.0 / x.shape[0])


def _batches(n, seed=1, batch=8):
    r = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        x = r.standard_normal((batch, 4)).astype(np.float32)
        y = np.eye(3, dtype=np.float32)[r.integers(0, 3, batch)]
        out.append((x, y))
    return out


def _train(captured: bool, batches, lrs, as_tensors: bool):
    ps = [gg.tensor(a, requires_grad=True) for a in _params()]
    opt = gg.optim.Adam(ps, lr=lrs[0])
    step = gg.capture_step(lambda x, y: _loss(ps, x, y), opt) if captured else None
    losses = []
    for (x, y), lr in zip(batches, lrs):
        opt.param_groups[0]["lr"] = lr  # a hyperparameter change: an input of the recording
        if captured:
            args = (gg.tensor(x), gg.tensor(y)) if as_tensors else (x, y)
            losses.append(float(step(*args)))
        else:
            opt.zero_grad()
            loss = _loss(ps, gg.tensor(x), gg.tensor(y))
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return losses, [p.detach().numpy().copy() for p in ps], step


@pytest.mark.parametrize("as_tensors", [True, False], ids=["tensor-args", "numpy-args"])
def test_captured_steps_with_new_inputs_and_learning_rates_match_eager(as_tensors):
    batches = _batches(6)
    lrs = [1e-2, 1e-2, 5e-2, 5e-3, 5e-3, 2e-2]
    eager_losses, eager_params, _ = _train(False, batches, lrs, as_tensors)
    cap_losses, cap_params, step = _train(True, batches, lrs, as_tensors)
    assert step.n_recordings == 1  # new values and learning rates replay, never record again
    np.testing.assert_allclose(cap_losses, eager_losses, rtol=1e-5, atol=1e-6)
    for a, b in zip(cap_params, eager_params):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_captured_forward_matches_numpy_float64_for_tensor_arguments_changed_in_place():
    w, b, w2, b2 = (a.astype(np.float64) for a in _params())
    ps = [gg.tensor(a) for a in _params()]
    f = gg.capture(lambda x: gg.linear(gg.tanh(gg.linear(x, ps[0], ps[1])), ps[2], ps[3]))
    xt = gg.tensor(np.zeros((5, 4), np.float32))
    r = np.random.default_rng(7)
    for _ in range(3):
        x = r.standard_normal((5, 4)).astype(np.float32)
        xt.copy_(gg.tensor(x))  # the same argument tensor, new values
        want = np.tanh(x.astype(np.float64) @ w.T + b) @ w2.T + b2
        np.testing.assert_allclose(f(xt), want, rtol=1e-5, atol=1e-5)
    assert f.n_recordings == 1


def test_a_tensor_argument_still_queued_in_graph_mode_is_computed_before_the_replay():
    f = gg.capture(lambda x: x * 2.0)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    f(gg.tensor(x))
    with gg.graph_mode(True):
        pending = gg.tensor(x) + 1.0  # queued, not computed
        out = f(pending)
    np.testing.assert_array_equal(out, (x.astype(np.float64) + 1.0) * 2.0)


def test_a_tensor_argument_of_another_dtype_is_converted_as_before():
    f = gg.capture(lambda x: x * 2.0)
    f(np.ones((2, 2), np.float32))  # records a float32 input
    # A float64 array takes the float32 slot (cast as it is copied); a float32 tensor copies bytes.
    np.testing.assert_array_equal(f(np.full((2, 2), 1.5)), np.full((2, 2), 3.0))
    np.testing.assert_array_equal(f(gg.tensor(np.full((2, 2), 2.5, np.float32))), np.full((2, 2), 5.0))
    assert f.n_recordings == 1


def test_replay_outputs_are_fresh_arrays_the_caller_owns():
    f = gg.capture(lambda x: (x + 1.0, (x * x).sum()))
    a1, s1 = f(np.ones(4, np.float32))
    a1_copy = a1.copy()
    a1[...] = -7.0  # writing a result must not reach the recording's memory
    a2, s2 = f(np.full(4, 2.0, np.float32))
    np.testing.assert_array_equal(a2, np.full(4, 3.0))
    assert float(s2) == 16.0 and float(s1) == 4.0  # the first call's results kept their values
    assert not np.shares_memory(a1, a2)
    a3, _ = f(np.ones(4, np.float32))
    np.testing.assert_array_equal(a3, a1_copy)
    assert a3.flags.writeable and a3.flags.owndata


def test_a_replay_downloads_once_and_reads_tensor_arguments_in_place():
    f = gg.capture(lambda x, y: (x * y).sum())
    x, y = gg.tensor(np.ones((3, 3), np.float32)), gg.tensor(np.full((3, 3), 2.0, np.float32))
    f(x, y)
    before = gg.counters()
    assert float(f(x, y)) == 18.0
    after = gg.counters()
    assert after["computes"] - before["computes"] == 1
    assert after["downloads_by_site"]["capture"] - before["downloads_by_site"]["capture"] == 1
    # host memory: the graph reads both arguments where they lie (no copy in, no upload)
    assert after["downloads_by_site"].get("capture input", 0) == before["downloads_by_site"].get("capture input", 0)
    assert after["uploads"] == before["uploads"]
