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


_FRESH_PROCESS_GRAD = r'''
import numpy as np, ggmlgrad as gg
x7 = np.array([[-0.15, 0.0085, -0.17], [-1.7, 1.85, 1.17], [0.79, -0.85, -0.64]], np.float32)
i6 = np.array([[0.5, 0.73], [1.17, -1.15]], np.float32)
w8 = np.full((3, 2, 2, 2), 0.3, np.float32)
def run():
    c = gg.tensor(np.array(2.97, np.float32), requires_grad=True)
    x = gg.tensor(x7, requires_grad=True)
    a = gg.broadcast_to(gg.tensor(i6), (3, 2, -1, 2))
    s8 = gg.where(c, a, -2.0) + gg.where(c, 3.0, a)
    loss = (c.sum() * 0.5 + x.sum() * 0.5 + (s8 * gg.tensor(w8)).sum()
            + (x.var((-2, 1)) * gg.tensor(np.array(0.47, np.float32))).sum())
    loss.backward()
    return x.grad.numpy()
import json
print(json.dumps([run().tolist(), run().tolist()]))
'''


def test_eager_grad_of_the_first_run_in_a_fresh_process():
    # The shared eager scheduler kept the previous one-off graph's memory layout when node and leaf
    # counts matched, so the first backward here overlapped a live intermediate (fixed in runtime/executor.py).
    import json
    import os
    import subprocess
    import sys
    src = os.path.dirname(os.path.dirname(gg.__file__))
    env = dict(os.environ, PYTHONPATH=src, GGML_NO_BACKTRACE="1")
    out = subprocess.run([sys.executable, "-c", _FRESH_PROCESS_GRAD], capture_output=True, text=True,
                         env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    first, second = (np.array(g) for g in json.loads(out.stdout.strip().splitlines()[-1]))
    x = np.array([[-0.15, 0.0085, -0.17], [-1.7, 1.85, 1.17], [0.79, -0.85, -0.64]], np.float32).astype(np.float64)
    expected = 0.5 + 0.47 * 2 * (x - x.mean()) / (x.size - 1)     # d/dx of x.sum()/2 + 0.47 * var (unbiased)
    np.testing.assert_allclose(first, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(second, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fn, ref", [
    (lambda x: (x.detach() * 2).sum(), lambda x: (x * 2).sum()),
    (lambda x: x.detach(), lambda x: x),
    (lambda x: (x.detach().detach().reshape(2, 3) * 2).sum(axis=1), lambda x: (x.reshape(2, 3) * 2).sum(axis=1)),
    (lambda x: (x.detach()[1:] * x[1:]).sum(), lambda x: (x[1:] * x[1:]).sum()),
])
def test_capture_of_a_detached_input_reads_the_input(fn, ref):
    # the alias was bound to the input slot's placeholder memory (garbage, e.g. -inf), not the input
    cap = gg.capture(fn)
    for x in (np.ones(6, np.float32), np.arange(6, dtype=np.float32) - 2.5, np.full(6, 3.0, np.float32)):
        expected = ref(x.astype(np.float64))
        np.testing.assert_allclose(np.asarray(cap(x)), expected, rtol=1e-6)
        np.testing.assert_allclose(fn(gg.tensor(x)).numpy(), expected, rtol=1e-6)   # eager agrees


def test_capture_of_a_detached_input_with_grad():
    def step(x, w):
        w.requires_grad_()
        loss = (w * x.detach()).sum() + (w * x).sum()
        loss.backward()
        return loss, w.grad
    cap = gg.capture(step)
    w = np.array([0.5, -1.0, 2.0], np.float32)
    for x in (np.ones(3, np.float32), np.array([1.5, -2.0, 0.25], np.float32)):
        loss, g = cap(x, w)
        np.testing.assert_allclose(np.asarray(loss), 2 * (w.astype(np.float64) * x).sum(), rtol=1e-6)
        np.testing.assert_allclose(np.asarray(g), 2 * x.astype(np.float64), rtol=1e-6)
