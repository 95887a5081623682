"""Autograd (issue 2 item 6): recording, backward, accumulation, no_grad, detach,
broadcast reduction, version counters, gradcheck, and a 200-step MLP against NumPy."""
from __future__ import annotations

import numpy as np
import pytest

import ggmlgrad as gg

MODES = pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])


def _t(a, rg=True):
    return gg.tensor(np.asarray(a, dtype=np.float32), requires_grad=rg)


# ---------------------------------------------------------------------------- recording
def test_recording_starts_when_an_input_requires_grad():
    a, b = _t([1.0, 2.0]), _t([3.0, 4.0], rg=False)
    c = a * b
    assert c.requires_grad and c.grad_fn is not None and not c.is_leaf
    assert a.is_leaf and a.grad_fn is None
    d = b * 2
    assert not d.requires_grad and d.grad_fn is None
    assert "mul" in repr(c.grad_fn)


@MODES
def test_backward_scalar_and_explicit_gradient(graph):
    with gg.graph_mode(graph):
        x = _t([[1.0, 2.0], [3.0, 4.0]])
        (x * x).sum().backward()
        assert x.grad.tolist() == [[2.0, 4.0], [6.0, 8.0]]
        x.grad = None
        y = x * 3
        y.backward(gg.tensor([[1.0, 0.0], [2.0, -1.0]]))
        assert x.grad.tolist() == [[3.0, 0.0], [6.0, -3.0]]
        with pytest.raises(RuntimeError, match="scalar"):
            y.backward()
        with pytest.raises(ValueError, match="shape"):
            y.backward(gg.ones(3))
        with pytest.raises(RuntimeError, match="does not require grad"):
            gg.ones(2).sum().backward()


@MODES
def test_grad_accumulates_and_resets(graph):
    with gg.graph_mode(graph):
        x = _t([1.0, 2.0, 3.0])
        for _ in range(3):
            (x * x).sum().backward()
        assert x.grad.tolist() == [6.0, 12.0, 18.0]
        x.grad = None
        (x * 2).sum().backward()
        assert x.grad.tolist() == [2.0, 2.0, 2.0]


@MODES
def test_same_tensor_used_twice_sums_both_paths(graph):
    with gg.graph_mode(graph):
        x = _t([1.0, -2.0])
        y = x * x + x * 3 + x  # three uses of x, two of x*x's inputs
        y.sum().backward()
        assert x.grad.tolist() == [2 * 1 + 3 + 1, 2 * -2 + 3 + 1]


def test_no_grad_context_decorator_and_enable_grad():
    x = _t([1.0, 2.0])
    with gg.no_grad():
        assert not gg.is_grad_enabled()
        y = x * 2
        with gg.enable_grad():
            z = x * 2
    assert gg.is_grad_enabled()
    assert not y.requires_grad and y.grad_fn is None
    assert z.requires_grad

    @gg.no_grad()
    def f(t):
        return t * t

    assert not f(x).requires_grad and gg.is_grad_enabled()
    with gg.set_grad_enabled(False):
        assert not (x * 1).requires_grad
    assert gg.is_grad_enabled()
    with pytest.raises(TypeError):
        gg.set_grad_enabled("no")


@MODES
def test_detach_and_requires_grad_(graph):
    with gg.graph_mode(graph):
        x = _t([1.0, 2.0])
        y = x * 3
        d = y.detach()
        assert not d.requires_grad and d.grad_fn is None
        assert d.tolist() == [3.0, 6.0]
        (y * d).sum().backward()  # d is a constant: dy/dx * d only
        assert x.grad.tolist() == [9.0, 18.0]
    w = gg.ones(2)
    assert w.requires_grad_() is w and w.requires_grad
    with pytest.raises(TypeError):
        gg.tensor([1, 2]).requires_grad_(True)  # int tensors cannot require grad
    with pytest.raises(TypeError):
        w.requires_grad_("yes")
    with pytest.raises(RuntimeError, match="non-leaf"):
        (w * 2).requires_grad_(False)


@MODES
def test_retain_grad_and_retain_graph(graph):
    with gg.graph_mode(graph):
        x = _t([1.0, 2.0])
        h = x * 3
        h.retain_grad()
        loss = (h * h).sum()
        loss.backward(retain_graph=True)
        assert h.grad.tolist() == [6.0, 12.0]
        loss.backward()
        assert x.grad.tolist() == [36.0, 72.0]
        loss2 = (x * x).sum()
        loss2.backward()
        with pytest.raises(RuntimeError, match="second time"):
            loss2.backward()
        # A new graph over a freed one: its gradient reaches the freed node, which raises.
        y = x * x
        y.sum().backward()
        with pytest.raises(RuntimeError, match=r"second time \(mul\)"):
            (y * 2).sum().backward()


# ---------------------------------------------------------------------------- broadcast reduction
_BCAST = [((3, 1), (1, 4)), ((4,), (3, 4)), ((1,), (2, 3)), ((2, 1, 3), (4, 1)), ((), (2, 2)), ((2, 3, 1, 2), (3, 4, 1))]


@MODES
@pytest.mark.parametrize("name", ["add", "sub", "mul", "div"])
@pytest.mark.parametrize("sa,sb", _BCAST, ids=[f"{a}x{b}" for a, b in _BCAST])
def test_broadcast_gradients_reduce_to_input_shapes(graph, name, sa, sb):
    rng = np.random.default_rng(len(sa) * 10 + len(sb))
    a = rng.uniform(0.5, 1.5, sa)
    b = rng.uniform(0.5, 1.5, sb)
    fn = {"add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y,
          "div": lambda x, y: x / y}[name]
    with gg.graph_mode(graph):
        ta, tb = _t(a), _t(b)
        out = fn(ta, tb)
        gout = rng.standard_normal(out.shape)
        out.backward(gg.tensor(gout.astype(np.float32)))
        assert ta.grad.shape == sa and tb.grad.shape == sb
        assert gg.gradcheck(fn, [a, b])
    # closed forms
    g = gout
    full = np.broadcast_shapes(sa, sb)

    def red(x, shape):
        x = np.broadcast_to(x, full)
        lead = len(full) - len(shape)
        x = x.sum(axis=tuple(range(lead))) if lead else x
        return x.sum(axis=tuple(i for i, s in enumerate(shape) if s == 1), keepdims=True).reshape(shape)

    a32, b32 = a.astype(np.float32).astype(np.float64), b.astype(np.float32).astype(np.float64)
    ga = {"add": g, "sub": g, "mul": g * b32, "div": g / b32}[name]
    gb = {"add": g, "sub": -g, "mul": g * a32, "div": -g * a32 / b32 ** 2}[name]
    np.testing.assert_allclose(ta.grad.numpy(), red(ga, sa), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(tb.grad.numpy(), red(gb, sb), rtol=1e-5, atol=1e-5)


@MODES
def test_gradcheck_composites(graph):
    rng = np.random.default_rng(1)
    A, B, c = rng.standard_normal((3, 4)), rng.standard_normal((4, 2)), rng.uniform(0.5, 2, (2,))
    with gg.graph_mode(graph):
        assert gg.gradcheck(lambda a, b, v: ((a @ b).tanh() * v).sum() / (v * v).sum(), [A, B, c])
        assert gg.gradcheck(lambda a: (a.sigmoid() * a).mean(axis=0), [A])
        assert gg.gradcheck(lambda a, b: ((a @ b) ** 2).sqrt().log(), [A, B + 3.0])
        assert gg.gradcheck(lambda a: a.permute(1, 0).reshape(2, 6).exp() * 0.1, [A])
        assert gg.gradcheck(lambda a: (a, a * 2), [A])  # tuple outputs


def test_gradcheck_detects_a_wrong_gradient_and_validates_arguments():
    A = np.random.default_rng(2).standard_normal((2, 3))
    with pytest.raises(gg.GradcheckError, match=r"input 0 \(shape \(2, 3\)\): 6 of 6 elements differ"):
        gg.gradcheck(lambda a: a * a.detach(), [A])  # true gradient is 2a, backward gives a
    assert gg.gradcheck(lambda a: a * a.detach(), [A], raise_exception=False) is False
    with pytest.raises(ValueError, match="eps"):
        gg.gradcheck(lambda a: a, [A], eps=0)
    with pytest.raises(ValueError, match="requires grad"):
        gg.gradcheck(lambda a: a, [gg.tensor(A)])
    x = gg.tensor(A.astype(np.float32), requires_grad=True)
    gg.gradcheck(lambda a: (a * a).sum(), [x])
    assert x.grad is None  # the user's tensors are not touched


# ---------------------------------------------------------------------------- version counter
@MODES
def test_inplace_change_of_a_saved_input_raises_naming_the_op(graph):
    with gg.graph_mode(graph):
        a = _t([1.0, 2.0])
        b = gg.tensor([3.0, 4.0])
        c = a * b
        v0 = b._version
        b.add_(gg.ones(2))
        assert b._version == v0 + 1
        with pytest.raises(RuntimeError, match=r"mul backward: input 1 .*modified in place"):
            c.sum().backward()


@MODES
def test_inplace_change_of_a_saved_output_raises(graph):
    with gg.graph_mode(graph):
        x = _t([0.5, 1.0])
        y = x.exp()
        with gg.no_grad():
            y.mul_(2)
        with pytest.raises(RuntimeError, match=r"exp backward: its output .*modified in place"):
            y.sum().backward()


@MODES
def test_version_counter_counts_every_inplace_op(graph):
    with gg.graph_mode(graph):
        t = gg.zeros(3)
        ops = [lambda: t.copy_(np.ones(3)), lambda: t.copy_(gg.ones(3)), lambda: t.add_(gg.ones(3)),
               lambda: t.sub_(gg.ones(3)), lambda: t.mul_(gg.ones(3) * 2), lambda: t.div_(gg.ones(3) * 2),
               lambda: t.fill_(4.0), lambda: t.zero_()]
        for i, f in enumerate(ops):
            assert f() is t
            assert t._version == i + 1
        assert t.tolist() == [0.0, 0.0, 0.0]


def test_inplace_on_leaf_requiring_grad_is_refused_outside_no_grad():
    w = _t([1.0, 2.0])
    with pytest.raises(RuntimeError, match="in-place"):
        w.add_(gg.ones(2))
    with pytest.raises(RuntimeError, match="in-place"):
        w.copy_(np.zeros(2))
    assert w.tolist() == [1.0, 2.0] and w._version == 0
    with gg.no_grad():
        w.sub_(gg.ones(2))
    assert w.tolist() == [0.0, 1.0]


# ---------------------------------------------------------------------------- MLP vs NumPy, 200 SGD steps
def _numpy_mlp(x, y, params, lr, steps):
    w1, b1, w2, b2 = [p.astype(np.float64) for p in params]
    losses = []
    n = x.shape[0] * y.shape[1]
    for _ in range(steps):
        z = x @ w1 + b1
        h = np.maximum(z, 0)
        out = h @ w2 + b2
        d = out - y
        losses.append((d * d).sum() / n)
        g_out = 2 * d / n
        g_w2, g_b2 = h.T @ g_out, g_out.sum(0)
        g_h = g_out @ w2.T * (z > 0)
        g_w1, g_b1 = x.T @ g_h, g_h.sum(0)
        w1, b1, w2, b2 = w1 - lr * g_w1, b1 - lr * g_b1, w2 - lr * g_w2, b2 - lr * g_b2
    return losses


@MODES
def test_mlp_200_sgd_steps_match_numpy(graph):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 4)).astype(np.float32)
    y = rng.standard_normal((16, 3)).astype(np.float32)
    init = [rng.standard_normal((4, 8)) * 0.5, np.full(8, 0.1), rng.standard_normal((8, 3)) * 0.5, np.zeros(3)]
    init = [p.astype(np.float32) for p in init]
    ref = _numpy_mlp(x.astype(np.float64), y.astype(np.float64), init, 0.05, 200)
    params = [gg.tensor(p, requires_grad=True) for p in init]
    xt, yt = gg.tensor(x), gg.tensor(y)
    losses = []
    with gg.graph_mode(graph):
        for _ in range(200):
            w1, b1, w2, b2 = params
            out = (xt @ w1 + b1).relu() @ w2 + b2
            loss = ((out - yt) ** 2).mean()
            for p in params:
                p.grad = None
            loss.backward()
            with gg.no_grad():
                for p in params:
                    p.sub_(p.grad * 0.05)
            losses.append(loss.item())
    assert ref[-1] < 0.5 * ref[0]  # the reference actually trains
    np.testing.assert_allclose(losses, ref, rtol=1e-5)


@MODES
def test_inplace_write_through_a_detached_alias_is_caught(graph):
    """detach() shares memory, so it shares the version counter: writing through the alias
    must not silently corrupt a gradient (PyTorch raises here too)."""
    with gg.graph_mode(graph):
        a = _t([1.0, 2.0])
        x = a.exp()
        alias = x.detach()
        alias.mul_(gg.tensor([2.0, 2.0]))
        assert x._version == alias._version == 1
        with pytest.raises(RuntimeError, match="exp backward: its output .*modified in place"):
            x.sum().backward()
        b = _t([1.0, 2.0])
        w = gg.tensor([3.0, 4.0])
        y = b * w
        w.detach().add_(gg.ones(2))
        with pytest.raises(RuntimeError, match="mul backward: input 1"):
            y.sum().backward()
        # a copy is not an alias: writing it is fine
        c = gg.tensor([3.0, 4.0])
        z = b * c
        gg.tensor(c).add_(gg.ones(2))
        z.sum().backward()
        assert b.grad.tolist() == [3.0, 4.0]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("graph", [False, True])
def test_storage_dtype_leaf_used_twice_accumulates_its_gradient(dtype, graph):
    with gg.graph_mode(graph):
        w = gg.tensor([0.5, -1.5, 2.0], dtype=dtype, requires_grad=True)
        wf = w.float()
        loss = (wf * wf).sum() + (w.float() * 3.0).sum()   # two paths into w
        loss.backward()
        assert w.grad.dtype.name == dtype
        w32 = w.float().detach().numpy().astype(np.float64)
        np.testing.assert_allclose(w.grad.float().numpy(), 2 * w32 + 3.0, rtol=1e-2)
        loss2 = (w.float() * 2.0).sum()
        loss2.backward()                                    # accumulates into the existing grad
        np.testing.assert_allclose(w.grad.float().numpy(), 2 * w32 + 5.0, rtol=1e-2)
