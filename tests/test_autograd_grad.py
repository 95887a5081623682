"""gg.autograd: grad / backward(create_graph=True) second derivatives, autograd.Function, hooks.

References: NumPy float64 closed forms, central finite differences of the gradient (Hessian-vector
products), torch (same weights through .safetensors) for a WGAN-GP penalty, a custom Function and
module backward hooks; graph mode and capture give the eager values with the computes counted.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import ggmlgrad as gg
from ggmlgrad import nn
from torch_transfer import grads_close, transfer

MODES = ("eager", "graph", "check")


def _mode(mode):
    return gg.graph_mode(mode != "eager", check=mode == "check")


@pytest.mark.parametrize("mode", MODES)
def test_second_and_third_derivative_of_a_polynomial(mode):
    xs = np.array([0.5, -1.5, 2.0])
    with _mode(mode):
        x = gg.tensor(xs.astype(np.float32), requires_grad=True)
        (g,) = gg.autograd.grad((x ** 3).sum(), x, create_graph=True)
        (h,) = gg.autograd.grad(g.sum(), x, create_graph=True)
        (t,) = gg.autograd.grad(h.sum(), x)
        assert g.requires_grad and h.requires_grad and not t.requires_grad
        np.testing.assert_allclose(g.detach().numpy(), 3 * xs ** 2, rtol=1e-6)
        np.testing.assert_allclose(h.detach().numpy(), 6 * xs, rtol=1e-6)
        np.testing.assert_allclose(t.detach().numpy(), np.full(3, 6.0), rtol=1e-6)
    assert x.grad is None   # grad() writes no .grad


# Elementwise functions whose backward is a fused kernel (ops/higher_order.py) or composed:
# (gg function, f'' in NumPy float64)
_SIG = lambda x: 1.0 / (1.0 + np.exp(-x))  # noqa: E731
SECOND = {
    "tanh": (gg.tanh, lambda x: -2 * np.tanh(x) * (1 - np.tanh(x) ** 2)),
    "sigmoid": (gg.sigmoid, lambda x: _SIG(x) * (1 - _SIG(x)) * (1 - 2 * _SIG(x))),
    "elu": (nn.functional.elu, lambda x: np.where(x > 0, 0.0, np.exp(x))),
    "silu": (nn.functional.silu, lambda x: _SIG(x) * (1 - _SIG(x)) * (2 + x * (1 - 2 * _SIG(x)))),
    "softplus": (nn.functional.softplus, lambda x: _SIG(x) * (1 - _SIG(x))),
    "relu": (gg.relu, lambda x: np.zeros_like(x)),
    "leaky_relu": (lambda t: nn.functional.leaky_relu(t, 0.2), lambda x: np.zeros_like(x)),
    "exp": (gg.exp, np.exp),
    "sin": (gg.sin, lambda x: -np.sin(x)),
    "gelu": (nn.functional.gelu, lambda x: np.exp(-x * x / 2) / np.sqrt(2 * np.pi) * (2 - x * x)),
}


@pytest.mark.parametrize("name", sorted(SECOND))
def test_elementwise_second_derivatives(name):
    fn, d2 = SECOND[name]
    xs = np.array([-1.3, -0.4, 0.3, 1.1])
    x = gg.tensor(xs.astype(np.float32), requires_grad=True)
    (g,) = gg.autograd.grad(fn(x).sum(), x, create_graph=True)
    (h,) = gg.autograd.grad(g.sum(), x, allow_unused=name in ("relu", "leaky_relu"), materialize_grads=True)
    np.testing.assert_allclose(h.detach().numpy(), d2(xs), rtol=1e-4, atol=1e-5)


def _mlp_loss(params, x, y, act):
    w1, b1, w2 = params
    hid = act(x @ w1.T + b1)
    logits = hid @ w2.T
    return (nn.functional.log_softmax(logits, dim=-1) * y).sum() * -1.0   # soft-target cross-entropy


@pytest.mark.parametrize("act_name", ["tanh", "softmax_layer", "layer_norm"])
def test_hessian_vector_product_matches_finite_differences(act_name):
    rng = np.random.default_rng(0)
    acts = {"tanh": gg.tanh, "softmax_layer": lambda t: nn.functional.softmax(t, dim=-1),
            "layer_norm": lambda t: gg.tanh(nn.functional.layer_norm(t, (t.shape[-1],)))}
    act = acts[act_name]
    shapes = [(5, 3), (5,), (4, 5)]
    w0 = [rng.standard_normal(s).astype(np.float32) * 0.7 for s in shapes]
    v = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    x = gg.tensor(rng.standard_normal((6, 3)).astype(np.float32))
    y = gg.tensor(np.eye(4, dtype=np.float32)[rng.integers(0, 4, 6)])

    def grad_at(ws, create_graph=False):
        ps = [gg.tensor(w, requires_grad=True) for w in ws]
        gs = gg.autograd.grad(_mlp_loss(ps, x, y, act), ps, create_graph=create_graph)
        return ps, gs

    ps, gs = grad_at(w0, create_graph=True)
    dot = sum((g * gg.tensor(vi)).sum() for g, vi in zip(gs, v))
    hv = gg.autograd.grad(dot, ps)
    eps = 1e-2
    plus = [g.detach().numpy().astype(np.float64) for g in grad_at([w + eps * vi for w, vi in zip(w0, v)])[1]]
    minus = [g.detach().numpy().astype(np.float64) for g in grad_at([w - eps * vi for w, vi in zip(w0, v)])[1]]
    for h, p, m in zip(hv, plus, minus):
        fd = (p - m) / (2 * eps)
        np.testing.assert_allclose(h.detach().numpy(), fd, rtol=3e-2, atol=3e-3)
    assert np.abs(hv[0].detach().numpy()).max() > 1e-3   # not trivially zero


def test_backward_create_graph_accumulates_differentiable_grads():
    x = gg.tensor([1.0, 2.0], requires_grad=True)
    (x ** 3).sum().backward(create_graph=True)
    g = x.grad
    assert g.requires_grad
    np.testing.assert_allclose(g.detach().numpy(), [3.0, 12.0])
    x.grad = None
    g.sum().backward()
    np.testing.assert_allclose(x.grad.detach().numpy(), [6.0, 12.0])


def test_grad_errors_and_unused_inputs():
    x = gg.tensor([1.0, 2.0], requires_grad=True)
    z = gg.tensor([1.0], requires_grad=True)
    y = (x * x).sum()
    with pytest.raises(RuntimeError, match="not have been used"):
        gg.autograd.grad(y, [x, z], retain_graph=True)
    gx, gz = gg.autograd.grad(y, [x, z], allow_unused=True, retain_graph=True)
    assert gz is None and gx.tolist() == [2.0, 4.0]
    with pytest.raises(RuntimeError, match="does not require grad"):
        gg.autograd.grad(y, gg.tensor([1.0]))
    with pytest.raises(RuntimeError, match="scalar outputs"):
        gg.autograd.grad(x * 2, x)
    (gv,) = gg.autograd.grad(x * 2, x, grad_outputs=gg.tensor([1.0, 3.0]))
    assert gv.tolist() == [2.0, 6.0]
    # a non-leaf input gets the gradient flowing into it
    h = x * 3
    (gh,) = gg.autograd.grad((h * h).sum(), h)
    np.testing.assert_allclose(gh.detach().numpy(), [6.0, 12.0])


def test_create_graph_through_an_op_without_second_derivative_names_it():
    lin = nn.Linear(3, 2)
    out = nn.functional.gelu(lin(gg.ones(4, 3)), approximate="tanh").sum()
    with pytest.raises(RuntimeError, match="gelu.*gelu_backward"):
        gg.autograd.grad(out, lin.weight, create_graph=True)
    x = gg.tensor([[0.5, -1.0]], requires_grad=True)
    loss = gg.logsumexp(x * x, dim=1).sum()
    with pytest.raises(RuntimeError, match="logsumexp.*reduce_backward"):
        gg.autograd.grad(loss, x, create_graph=True)


# ---------------------------------------------------------------- WGAN-GP against torch
class _TorchCritic(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.LeakyReLU(0.2), torch.nn.Linear(16, 16),
                                       torch.nn.Tanh(), torch.nn.Linear(16, 1))

    def forward(self, x):
        return self.net(x)


class _Critic(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 16), nn.LeakyReLU(0.2), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 1))

    def forward(self, x):
        return self.net(x)


def _penalty_gg(critic, real, fake, alpha):
    inter = alpha * real + (1 - alpha) * fake
    inter.requires_grad_(True)
    (g,) = gg.autograd.grad(critic(inter).sum(), inter, create_graph=True)
    gp = ((g.square().sum(axis=1) + 1e-12).sqrt() - 1.0).square().mean()
    return critic(fake).mean() - critic(real).mean() + 10.0 * gp


@pytest.mark.parametrize("mode", ["eager", "graph", "check", "capture"])
def test_wgan_gp_gradient_penalty_parameter_grads_match_torch(mode, tmp_path):
    torch.manual_seed(0)
    tc = _TorchCritic()
    rng = np.random.default_rng(1)
    real, fake = (rng.standard_normal((8, 4)).astype(np.float32) for _ in range(2))
    alpha = rng.random((8, 1)).astype(np.float32)
    tr, tf, ta = (torch.tensor(a) for a in (real, fake, alpha))
    inter = (ta * tr + (1 - ta) * tf).requires_grad_(True)
    (tg,) = torch.autograd.grad(tc(inter), inter, grad_outputs=torch.ones(8, 1), create_graph=True)
    tgp = ((tg.square().sum(1) + 1e-12).sqrt() - 1).square().mean()
    tloss = tc(tf).mean() - tc(tr).mean() + 10 * tgp
    tloss.backward()

    critic = _Critic()
    transfer(tc, critic, tmp_path)
    if mode == "capture":
        opt = gg.optim.SGD(critic.parameters(), lr=0.0)
        step = gg.capture_step(lambda r, f, a: _penalty_gg(critic, r, f, a), opt)
        for _ in range(2):
            loss = step(real, fake, alpha)
        gg.reset_counters()
        loss = step(real, fake, alpha)
        assert gg.counters()["computes"] <= 2
        loss = float(loss)
    else:
        with _mode(mode):
            lv = _penalty_gg(critic, gg.tensor(real), gg.tensor(fake), gg.tensor(alpha))
            lv.backward()
            loss = lv.item()
    np.testing.assert_allclose(loss, tloss.item(), rtol=1e-4)
    grads_close(tc, critic, rtol=2e-3, atol=1e-5)


# ---------------------------------------------------------------- autograd.Function
class _GGSoftClip(gg.autograd.Function):
    """A custom op: y = tanh(x) * c with a hand-written backward."""

    @staticmethod
    def forward(ctx, x, c):
        y = gg.tanh(x)
        ctx.save_for_backward(y)
        ctx.c = c
        return y * c

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * ctx.c * (1 - y * y), None


class _TorchSoftClip(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, c):
        y = torch.tanh(x)
        ctx.save_for_backward(y)
        ctx.c = c
        return y * c

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * ctx.c * (1 - y * y), None


@pytest.mark.parametrize("mode", MODES)
def test_autograd_function_matches_torch(mode):
    xs = np.array([[-2.0, -0.3, 0.1], [0.7, 1.5, 3.0]], np.float32)
    tx = torch.tensor(xs, dtype=torch.float64, requires_grad=True)
    ty = _TorchSoftClip.apply(tx, 2.5)
    (tg,) = torch.autograd.grad((ty ** 2).sum(), tx, create_graph=True)
    (th,) = torch.autograd.grad(tg.sum(), tx)
    with _mode(mode):
        x = gg.tensor(xs, requires_grad=True)
        y = _GGSoftClip.apply(x, 2.5)
        assert y.grad_fn is not None and "_GGSoftClipBackward" in y.grad_fn.name
        (g,) = gg.autograd.grad((y ** 2).sum(), x, create_graph=True)   # backward made of ops: differentiable
        (h,) = gg.autograd.grad(g.sum(), x)
        np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-5)
        np.testing.assert_allclose(g.detach().numpy(), tg.detach().numpy(), rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(h.detach().numpy(), th.detach().numpy(), rtol=1e-3, atol=1e-5)


def test_autograd_function_several_outputs_needs_input_grad_and_errors():
    seen = {}

    class SplitScale(gg.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            seen["needs"] = ctx.needs_input_grad
            return a * 2, a * b

        @staticmethod
        def backward(ctx, ga, gab):
            return ga * 2 + gab * 3, None

    a = gg.tensor([1.0, 2.0], requires_grad=True)
    b = gg.tensor([3.0, 3.0])
    p, q = SplitScale.apply(a, b)
    (p.sum() + 10 * q.sum()).backward()
    assert seen["needs"] == (True, False)
    np.testing.assert_allclose(a.grad.detach().numpy(), [32.0, 32.0])

    class Wrong(gg.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 1

        @staticmethod
        def backward(ctx, g):
            return g.sum()

    with pytest.raises(RuntimeError, match="invalid gradient"):
        Wrong.apply(a).sum().backward()

    class Saved(gg.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            return a * 1

        @staticmethod
        def backward(ctx, g):
            (a,) = ctx.saved_tensors
            return g * a

    x = gg.tensor([1.0, 2.0], requires_grad=True)
    y = x * 1
    out = Saved.apply(y)
    with gg.no_grad():
        y.add_(1.0)
    with pytest.raises(RuntimeError, match="modified in place"):
        out.sum().backward()


# ---------------------------------------------------------------- hooks
@pytest.mark.parametrize("mode", MODES)
def test_tensor_hooks_on_leaf_and_non_leaf(mode):
    with _mode(mode):
        x = gg.tensor([1.0, 2.0], requires_grad=True)
        seen = []
        h1 = x.register_hook(lambda g: g * 10)
        mid = x * x
        h2 = mid.register_hook(lambda g: seen.append(g.shape) or g + 1)
        (mid * 3).sum().backward()
        # d/dmid = 3 (+1 by the hook) → d/dx = 4 * 2x (×10 by the leaf hook)
        np.testing.assert_allclose(x.grad.detach().numpy(), [80.0, 160.0])
        assert seen == [(2,)]
        h1.remove()
        h2.remove()
        from ggmlgrad.tensor import tape
        assert not tape.HOOKS.used   # no hook left: backward passes are cached again
        x.grad = None
        (x * x * 3).sum().backward()
        np.testing.assert_allclose(x.grad.detach().numpy(), [6.0, 12.0])
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        gg.tensor([1.0]).register_hook(lambda g: g)


def test_module_forward_hooks_and_full_backward_hook_match_torch(tmp_path):
    torch.manual_seed(0)
    tl = torch.nn.Linear(3, 2)
    gl = nn.Linear(3, 2)
    transfer(tl, gl, tmp_path)
    xs = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    got, want = {}, {}

    def tb(m, gi, go):
        want["gi"], want["go"] = gi[0].detach().numpy().copy(), go[0].detach().numpy().copy()
        return (gi[0] * 2,)

    def gb(m, gi, go):
        got["gi"], got["go"] = gi[0].detach().numpy(), go[0].detach().numpy()
        return (gi[0] * 2,)

    tl.register_forward_pre_hook(lambda m, a: (a[0] + 1,))
    tl.register_forward_hook(lambda m, a, out: out * 3)
    tl.register_full_backward_hook(tb)
    hs = [gl.register_forward_pre_hook(lambda m, a: (a[0] + 1,)), gl.register_forward_hook(lambda m, a, out: out * 3),
          gl.register_full_backward_hook(gb)]
    tx = torch.tensor(xs, requires_grad=True)
    (tl(tx) ** 2).sum().backward()
    x = gg.tensor(xs, requires_grad=True)
    y = gl(x)
    (y ** 2).sum().backward()
    np.testing.assert_allclose(y.detach().numpy(), tl(torch.tensor(xs)).detach().numpy(), rtol=1e-5)
    np.testing.assert_allclose(got["gi"], want["gi"], rtol=1e-5)
    np.testing.assert_allclose(got["go"], want["go"], rtol=1e-5)
    np.testing.assert_allclose(x.grad.detach().numpy(), tx.grad.detach().numpy(), rtol=1e-5)   # the hook's doubled grad_input
    grads_close(tl, gl, rtol=1e-5)
    for h in hs:
        h.remove()
    np.testing.assert_allclose(gl(gg.tensor(xs)).detach().numpy(), torch.nn.functional.linear(
        torch.tensor(xs), tl.weight, tl.bias).detach().numpy(), rtol=1e-5)


def test_create_graph_in_graph_mode_is_one_compute():
    w = gg.tensor(np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3), requires_grad=True)
    x = gg.tensor(np.ones((4, 3), np.float32))
    with gg.graph_mode(True):
        gg.reset_counters()
        (g,) = gg.autograd.grad(gg.tanh(x @ w.T).sum(), w, create_graph=True)
        (h,) = gg.autograd.grad((g * g).sum(), w)
        h.detach().numpy()
        assert gg.counters()["computes"] == 1
    t = torch.tensor(np.linspace(-1, 1, 6).reshape(2, 3), requires_grad=True)
    (tg,) = torch.autograd.grad(torch.tanh(torch.ones(4, 3, dtype=torch.float64) @ t.T).sum(), t, create_graph=True)
    (th,) = torch.autograd.grad((tg * tg).sum(), t)
    np.testing.assert_allclose(h.detach().numpy(), th.detach().numpy(), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("module", ["ggmlgrad.autograd", "ggmlgrad.autograd.function", "ggmlgrad.tensor.autograd_api", "ggmlgrad.nn.hooks",
                                    "ggmlgrad.ops.higher_order"])
def test_docstring_examples(module):
    import doctest
    import importlib
    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("kind", ["lstm", "gru", "encoder"])
def test_gradient_penalty_through_sequence_layers_matches_torch(kind, tmp_path):
    torch.manual_seed(0)
    if kind == "lstm":
        t, g = torch.nn.LSTM(3, 4), nn.LSTM(3, 4)
    elif kind == "gru":
        t, g = torch.nn.GRU(3, 4, num_layers=2), nn.GRU(3, 4, num_layers=2)
    else:
        t = torch.nn.TransformerEncoderLayer(4, 2, 8, dropout=0.0)
        g = nn.TransformerEncoderLayer(4, 2, 8, dropout=0.0)
    transfer(t, g, tmp_path)
    xs = np.random.default_rng(2).standard_normal((5, 2, 4 if kind == "encoder" else 3)).astype(np.float32)

    def run(mod, x, grad):
        y = mod(x)
        y = y[0] if isinstance(y, tuple) else y
        (gx,) = grad((y * y).sum(), x, create_graph=True)
        return gx, (gx * gx).sum()

    tx = torch.tensor(xs, requires_grad=True)
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel(SDPBackend.MATH):   # torch's flash attention has no double backward; its math form has
        tgx, tpen = run(t, tx, lambda o, i, create_graph: torch.autograd.grad(o, i, create_graph=create_graph))
        tpen.backward()
    gx = gg.tensor(xs, requires_grad=True)
    ggx, gpen = run(g, gx, gg.autograd.grad)
    gpen.backward()
    np.testing.assert_allclose(ggx.detach().numpy(), tgx.detach().numpy(), rtol=1e-3, atol=1e-5)
    grads_close(t, g, rtol=5e-3, atol=1e-4)


def test_autograd_backward_of_several_tensors_and_inputs_matches_torch():
    xs = np.array([0.5, -1.0, 2.0], np.float32)
    tx = torch.tensor(xs, requires_grad=True)
    ta, tb = (tx * tx).sum(), tx.sin()
    torch.autograd.backward([ta, tb], [None, torch.tensor([1.0, 2.0, 3.0])])
    x = gg.tensor(xs, requires_grad=True)
    a, b = (x * x).sum(), x.sin()
    gg.autograd.backward([a, b], [None, gg.tensor([1.0, 2.0, 3.0])])
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-6)
    # inputs=: only these leaves accumulate
    w = gg.tensor([1.0, 2.0], requires_grad=True)
    v = gg.tensor([3.0, 4.0], requires_grad=True)
    (w * v).sum().backward(inputs=[w])
    assert v.grad is None
    np.testing.assert_allclose(w.grad.numpy(), [3.0, 4.0])
    (w * v).sum().backward(inputs=[w])
    np.testing.assert_allclose(w.grad.numpy(), [6.0, 8.0])


def test_module_hooks_are_recorded_by_capture_step():
    gg.manual_seed(0)
    lin = nn.Linear(3, 1)
    ref = nn.Linear(3, 1)
    ref.load_state_dict(lin.state_dict())
    lin.register_forward_hook(lambda m, args, out: out * 2.0)
    opt = gg.optim.SGD(lin.parameters(), lr=0.1)
    ref_opt = gg.optim.SGD(ref.parameters(), lr=0.1)
    step = gg.capture_step(lambda xb: lin(xb).square().mean(), opt)
    xs = np.random.default_rng(0).standard_normal((3, 4, 3)).astype(np.float32)
    for xb in xs:
        got = float(step(xb))
        ref_opt.zero_grad()
        want = (ref(gg.tensor(xb)) * 2.0).square().mean()
        want.backward()
        ref_opt.step()
        np.testing.assert_allclose(got, want.item(), rtol=1e-5)
    np.testing.assert_allclose(lin.weight.detach().numpy(), ref.weight.detach().numpy(), rtol=1e-5)


def test_once_differentiable_backward_runs_and_refuses_a_second_derivative():
    class Square(gg.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        @gg.autograd.function.once_differentiable
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 2 * x

    x = gg.tensor([1.0, 3.0], requires_grad=True)
    (g,) = gg.autograd.grad(Square.apply(x).sum(), x)
    np.testing.assert_allclose(g.detach().numpy(), [2.0, 6.0])
    (g,) = gg.autograd.grad(Square.apply(x).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable"):
        gg.autograd.grad(g.sum(), x)


def test_full_backward_pre_hook_replaces_grad_output_as_torch(tmp_path):
    torch.manual_seed(0)
    tl, gl = torch.nn.Linear(3, 2), nn.Linear(3, 2)
    transfer(tl, gl, tmp_path)
    tl.register_full_backward_pre_hook(lambda m, go: (go[0] * 3,))
    gl.register_full_backward_pre_hook(lambda m, go: (go[0] * 3,))
    xs = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    tx, gx = torch.tensor(xs, requires_grad=True), gg.tensor(xs, requires_grad=True)
    tl(tx).square().sum().backward()
    gl(gx).square().sum().backward()
    np.testing.assert_allclose(gx.grad.detach().numpy(), tx.grad.numpy(), rtol=1e-5)
    grads_close(tl, gl, rtol=1e-5)


def test_rnn_flatten_parameters_and_all_weights():
    m = nn.LSTM(3, 4, num_layers=2, bidirectional=True)
    m.flatten_parameters()
    t = torch.nn.LSTM(3, 4, num_layers=2, bidirectional=True)
    assert [[tuple(p.shape) for p in ws] for ws in m.all_weights] == [[tuple(p.shape) for p in ws] for ws in t.all_weights]
