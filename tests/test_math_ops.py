"""Math ops beyond the OpInfo table: tie-breaking of max/argmax and their gradients, infinities
in where/softmax/logsumexp, torch-style return values, no uploads for scalar operands, and the
whole forward+backward of the math ops as one graph in graph mode."""
from __future__ import annotations

import numpy as np
import pytest

import ggmlgrad as gg

MODES = pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])


def _t(x, **kw):
    return gg.tensor(np.asarray(x, dtype=np.float32), **kw)


@MODES
def test_amax_gradient_is_shared_between_ties(graph):
    with gg.graph_mode(graph):
        x = _t([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0], [5.0, -1.0, 0.0]], requires_grad=True)
        x.amax(dim=1).sum().backward()
        expected = [[0, 0.5, 0.5], [1 / 3, 1 / 3, 1 / 3], [1, 0, 0]]
        np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-6)
        y = _t([[4.0, -2.0], [4.0, 1.0]], requires_grad=True)
        (y.max() * 3.0).backward()                         # all-reduce: two tied maxima share 3
        np.testing.assert_allclose(y.grad.numpy(), [[1.5, 0], [1.5, 0]], rtol=1e-6)
        z = _t([[-4.0, 2.0], [-4.0, 1.0]], requires_grad=True)
        z.amin(dim=(0, 1)).backward()
        np.testing.assert_allclose(z.grad.numpy(), [[0.5, 0], [0.5, 0]], rtol=1e-6)


@MODES
def test_maximum_minimum_split_ties_evenly(graph):
    with gg.graph_mode(graph):
        a = _t([1.0, 2.0, 3.0], requires_grad=True)
        b = _t([1.0, 5.0, 0.0], requires_grad=True)
        (gg.maximum(a, b) * _t([2.0, 3.0, 4.0])).sum().backward()
        np.testing.assert_allclose(a.grad.numpy(), [1.0, 0.0, 4.0])
        np.testing.assert_allclose(b.grad.numpy(), [1.0, 3.0, 0.0])
        a.grad = b.grad = None
        gg.minimum(a, b).sum().backward()
        np.testing.assert_allclose(a.grad.numpy(), [0.5, 1.0, 0.0])
        np.testing.assert_allclose(b.grad.numpy(), [0.5, 0.0, 1.0])


@MODES
def test_maximum_with_infinities(graph):
    with gg.graph_mode(graph):
        a = _t([np.inf, -np.inf, 1.0, -np.inf])
        b = _t([np.inf, -np.inf, np.inf, 2.0])
        np.testing.assert_array_equal(gg.maximum(a, b).numpy(), np.maximum(a.numpy(), b.numpy()))
        np.testing.assert_array_equal(gg.minimum(a, b).numpy(), np.minimum(a.numpy(), b.numpy()))


@MODES
def test_clamp_gradient_inclusive_at_bounds(graph):
    with gg.graph_mode(graph):
        x = _t([-2.0, -1.0, 0.0, 1.0, 2.0], requires_grad=True)
        x.clamp(-1.0, 1.0).sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), [0, 1, 1, 1, 0])     # torch: min <= x <= max
        y = _t([0.5, 3.0], requires_grad=True)
        y.clamp(min=2.0, max=1.0).sum().backward()                           # min > max: all max, no grad
        np.testing.assert_array_equal(y.grad.numpy(), [0, 0])


@MODES
def test_clamp_does_not_modify_its_input(graph):
    with gg.graph_mode(graph):
        x = _t([-3.0, 0.5, 3.0])
        y = x.clamp(-1, 1)
        z = x * 2.0                      # queued after clamp: must see the original x
        np.testing.assert_array_equal(y.numpy(), [-1, 0.5, 1])
        np.testing.assert_array_equal(z.numpy(), [-6, 1, 6])
        np.testing.assert_array_equal(x.numpy(), [-3, 0.5, 3])


@MODES
def test_where_unselected_infinities_do_not_leak(graph):
    with gg.graph_mode(graph):
        cond = _t([1.0, 0.0, 1.0, 0.0])
        a = _t([1.0, np.inf, np.nan, -np.inf], requires_grad=True)
        b = _t([np.nan, 2.0, 3.0, 4.0], requires_grad=True)
        out = gg.where(cond, a, b)
        got = out.detach().numpy().copy()
        assert got[0] == 1.0 and got[1] == 2.0 and np.isnan(got[2]) and got[3] == 4.0
        out.sum().backward()
        np.testing.assert_array_equal(a.grad.numpy(), [1, 0, 1, 0])
        np.testing.assert_array_equal(b.grad.numpy(), [0, 1, 0, 1])
        masked = gg.where(_t([[1.0, 0.0]]), _t([[0.5, 0.5]]), float("-inf"))     # masked_fill idiom
        np.testing.assert_array_equal(masked.softmax(-1).numpy(), [[1.0, 0.0]])


@MODES
def test_max_dim_returns_values_and_indices(graph):
    with gg.graph_mode(graph):
        x = _t([[1.0, 7.0, 7.0], [9.0, 0.0, 9.0]])
        r = x.max(dim=1)
        values, indices = r
        np.testing.assert_array_equal(values.numpy(), [7, 9])
        np.testing.assert_array_equal(r.indices.numpy(), [1, 0])      # first occurrence, as torch/NumPy
        assert r.indices.dtype is gg.int32 and r.values is values
        m = gg.min(x, 0, keepdim=True)
        assert m.values.shape == (1, 3) and m.indices.tolist() == [[0, 1, 0]]
        assert gg.max(x, _t([5.0, 5.0, 5.0])).tolist() == [[5, 7, 7], [9, 5, 9]]
        assert x.max().item() == 9.0 and x.min().item() == 0.0
        with pytest.raises(TypeError, match="amax"):
            x.max(dim=(0, 1))


@MODES
def test_max_dim_gradient_goes_to_the_returned_index(graph):
    # torch: max(dim) values route the gradient to the index returned (the first extreme);
    # amax shares it between ties.
    with gg.graph_mode(graph):
        x = _t([[1.0, 7.0, 7.0], [9.0, 0.0, 9.0]], requires_grad=True)
        (x.max(dim=1).values * _t([2.0, 3.0])).sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), [[0, 2, 0], [3, 0, 0]])
        x.grad = None
        x.min(0, keepdim=True).values.sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), [[1, 0, 1], [0, 1, 0]])
        y = _t([[[2.0, 2.0], [1.0, 2.0]]], requires_grad=True)          # reduce a middle axis of 3-d
        gg.max(y, 1).values.sum().backward()
        np.testing.assert_array_equal(y.grad.numpy(), [[[1, 1], [0, 0]]])


@MODES
def test_argmax_ties_large_rows_and_ints(graph):
    rng = np.random.default_rng(3)
    with gg.graph_mode(graph):
        a = rng.integers(0, 4, (5, 300)).astype(np.float32)          # many ties per row
        t = gg.tensor(a)
        np.testing.assert_array_equal(t.argmax(1).numpy(), np.argmax(a, 1))
        np.testing.assert_array_equal(t.argmin(0).numpy(), np.argmin(a, 0))
        np.testing.assert_array_equal(t.argmax(axis=1, keepdim=True).numpy(), np.argmax(a, 1)[:, None])
        assert t.argmax().item() == int(np.argmax(a))
        i = gg.tensor(a.astype(np.int32))
        np.testing.assert_array_equal(gg.argmax(i, dim=0).numpy(), np.argmax(a, 0))


@MODES
def test_comparisons_are_bool_masks_without_grad(graph):
    with gg.graph_mode(graph):
        x = _t([1.0, 2.0, 3.0], requires_grad=True)
        m = x > 1.5
        assert m.dtype is gg.bool and not m.requires_grad and m.grad_fn is None    # torch.bool
        assert m.tolist() == [0, 1, 1]
        assert (x == x).tolist() == [1, 1, 1] and (x != 2).tolist() == [1, 0, 1]
        assert (x == None) is False and (x != "a") is True  # noqa: E711  (falls back to identity)
        assert (np.float32(2.0) <= x).tolist() == [0, 1, 1]
        assert (x < np.array([2.0, 2.0, 2.0])).tolist() == [1, 0, 0]
        # a mask times a tensor keeps the tensor's gradient
        (x * (x > 1.5)).sum().backward()
        assert x.grad.tolist() == [0, 1, 1]


def test_scalar_operands_are_not_uploaded():
    x = _t(np.linspace(-2, 2, 12).reshape(3, 4))
    gg.graph_mode(False)
    before = gg.counters()["uploads"]
    outs = [x < 0.5, 1.0 >= x, x == 0, x.clamp(-1, 1), gg.maximum(x, 0.0), gg.where(x > 0, x, 0.0),
            gg.where(x > 0, -1.0, 2.0), x.softplus(beta=2.0, threshold=1.0), x.leaky_relu(0.1)]
    for o in outs:
        o.numpy()
    assert gg.counters()["uploads"] == before


def test_graph_mode_forward_and_backward_run_as_one_compute():
    rng = np.random.default_rng(0)
    x = gg.tensor(rng.standard_normal((4, 6)).astype(np.float32), requires_grad=True)
    w = gg.tensor(rng.standard_normal((4, 6)).astype(np.float32), requires_grad=True)
    with gg.graph_mode(True):
        c0 = gg.counters()["computes"]
        h = gg.where(x > 0, gg.gelu(x), gg.silu(x)) + gg.maximum(x, w).softmax(0) + x.clamp(-0.5, 0.5)
        loss = h.log_softmax(dim=1).sum() + x.logsumexp(1).sum() + x.var(0).sum() + x.amax(1).sum() \
            + gg.softplus(w).sum() + gg.elu(w, 0.5).sum() + gg.leaky_relu(w).sum()
        loss.backward()
        assert gg.counters()["computes"] == c0
        grads = (x.grad.numpy(), w.grad.numpy())
        assert gg.counters()["computes"] == c0 + 1
    assert all(np.isfinite(g).all() for g in grads)


@MODES
def test_softmax_logsumexp_infinities(graph):
    with gg.graph_mode(graph):
        x = _t([[0.0, -np.inf, 1.0], [-np.inf, -np.inf, -np.inf], [3.0, np.inf, 0.0]])
        lse = x.logsumexp(1).numpy()
        assert np.isclose(lse[0], np.log(1 + np.e)) and lse[1] == -np.inf and lse[2] == np.inf
        ls = _t([[0.0, -np.inf, 1.0]]).log_softmax(1).numpy()
        np.testing.assert_allclose(ls, [[-np.log(1 + np.e), -np.inf, 1 - np.log(1 + np.e)]], rtol=1e-6)
        np.testing.assert_allclose(_t([[0.0, -np.inf, 1.0]]).softmax(1).numpy(),
                                   [[1 / (1 + np.e), 0.0, np.e / (1 + np.e)]], rtol=1e-6)


@MODES
def test_var_std_edge_cases(graph):
    with gg.graph_mode(graph):
        c = _t([[2.0, 2.0, 2.0]])
        assert c.std(1).tolist() == [0.0] and c.var().item() == 0.0
        one = _t([5.0])
        assert np.isnan(one.var().item())                        # N - correction = 0, as torch
        assert one.var(correction=0).item() == 0.0
        x = _t([[1.0, 2.0], [3.0, 5.0]])
        np.testing.assert_allclose(gg.std(x, dim=0, unbiased=False).numpy(), np.std(x.numpy(), 0))
        with pytest.raises(TypeError):
            x.var(correction=1, unbiased=True)


def test_function_forms_exported():
    for name in ["lt", "le", "gt", "ge", "eq", "ne", "clamp", "clip", "maximum", "minimum", "where", "max", "min",
                 "amax", "amin", "argmax", "argmin", "var", "std", "logsumexp", "softmax", "log_softmax",
                 "leaky_relu", "gelu", "silu", "softplus", "elu", "relu", "sigmoid", "tanh", "exp", "log", "sum",
                 "mean"]:
        assert callable(getattr(gg, name)), name
    x = _t([[1.0, -2.0], [0.5, 4.0]])
    np.testing.assert_allclose(gg.softmax(x, axis=0).numpy().sum(0), [1, 1], rtol=1e-6)
    assert gg.argmax(x, axis=1).tolist() == [0, 1]
    with pytest.raises(TypeError, match="either axis or dim"):
        x.sum(axis=0, dim=0)


def test_one_off_graphs_do_not_reuse_another_graphs_memory_layout():
    """Eager one-off graphs share a ggml scheduler, and ggml reuses the previous graph's memory
    layout when node/leaf counts match and sizes fit, whatever the topology: a clamp backward
    followed by a log_softmax backward of the same node count gave wrong gradients. Shapes shrink
    so every graph is a first build whose sizes fit the previous layout; NumPy is the reference."""
    from ggmlgrad.ops import op
    rng = np.random.default_rng(3)
    for n in range(9, 2, -1):
        x = rng.standard_normal((2, n)).astype(np.float32)
        w = (rng.random((2, n)) < 0.5).astype(np.float32)
        y = _t(x).log_softmax(1)
        for kw in ({"lo": -3.4e38}, {"lo": -3.4e38, "hi": 1e30}):
            g = op.clamp_backward(_t(w), y, **kw)
            got = op.log_softmax_backward(g, y).numpy()
            p = np.exp(x - x.max(1, keepdims=True))
            p /= p.sum(1, keepdims=True)
            np.testing.assert_allclose(got, w - p * w.sum(1, keepdims=True), rtol=1e-5, atol=1e-6, err_msg=f"{n} {kw}")
