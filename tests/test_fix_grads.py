"""Regressions for silent wrong gradients found by the op-program fuzzer (fuzz_programs.py)."""
import numpy as np
import pytest

import ggmlgrad as gg

T = np.array([[0.3, -1.2, 0.7, 0.05], [1.1, 0.2, -0.5, -2.0], [0.4, 0.9, -0.1, 1.3]], np.float32)
W = np.array([[0.5, -0.3, 0.9, 0.2], [0.1, 0.4, -0.7, 1.1], [-0.6, 0.8, 0.3, -0.2]], np.float32)


def _softmax64(x, axis):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def _softmax_plus_t_grad64(axis):
    """d/dt sum(w * (softmax(t) + t)) in float64: w + y * (w - sum(w * y))."""
    w, y = W.astype(np.float64), _softmax64(T.astype(np.float64), axis)
    return y * (w - (w * y).sum(axis, keepdims=True)) + w


def _grad(mode, axis):
    def step(t, w):
        t.requires_grad_()
        (w * (t.softmax(axis) + t)).sum().backward()
        return t.grad
    if mode == "capture":
        cap = gg.capture(step)
        cap(T + 1, W)                           # records (on other values)
        return np.asarray(cap(T, W))          # replays
    with gg.graph_mode(mode != "eager", check=mode == "check"):
        return step(gg.tensor(T), gg.tensor(W)).numpy()


@pytest.mark.parametrize("axis", [1, 0, -1])
@pytest.mark.parametrize("mode", ["eager", "graph", "check", "capture"])
def test_softmax_grad_when_its_input_feeds_another_op(mode, axis):
    # graph mode ran ggml_soft_max_ext_back in place on the softmax output (off by O(1))
    np.testing.assert_allclose(_grad(mode, axis), _softmax_plus_t_grad64(axis), rtol=1e-5, atol=1e-6)


def test_softmax_grad_matches_finite_differences_and_torch():
    eps = 1e-3
    t64 = T.astype(np.float64)

    def f(x):
        return (W * (_softmax64(x, 1) + np.exp(x))).sum()
    fd = np.zeros_like(t64)
    for i in np.ndindex(t64.shape):
        d = np.zeros_like(t64)
        d[i] = eps
        fd[i] = (f(t64 + d) - f(t64 - d)) / (2 * eps)
    with gg.graph_mode(True):
        t = gg.tensor(T, requires_grad=True)
        (gg.tensor(W) * (t.softmax(1) + t.exp())).sum().backward()
        got = t.grad.numpy()
    np.testing.assert_allclose(got, fd, rtol=1e-4, atol=1e-5)
    torch = pytest.importorskip("torch")
    tt = torch.tensor(t64, requires_grad=True)
    (torch.tensor(W, dtype=torch.float64) * (tt.softmax(1) + tt.exp())).sum().backward()
    np.testing.assert_allclose(got, tt.grad.numpy(), rtol=1e-5, atol=1e-6)
