"""Regression tests for what the fuzzer's torch oracle found (testing/fuzz_torch.py), each checked against
torch itself in eager and graph mode: ggmlgrad's error is an instance of the class torch raises, and pow's
gradients at a zero base are torch's."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import ggmlgrad as gg
from ggmlgrad.testing.fuzz_torch import error_base


def _raised(fn, *args):
    try:
        fn(*args)
    except Exception as e:          # noqa: BLE001 -- the class is the result
        return type(e)
    return None


_F23 = np.ones((2, 3), np.float32)
# (ggmlgrad call, torch call, arguments as arrays): torch raises RuntimeError (or its NotImplementedError) or
# IndexError for each
CASES = {
    "reshape_two_minus_ones": (lambda x: x.reshape(3, -1, -1), lambda x: x.reshape(3, -1, -1), [_F23]),
    "cat_0d": (lambda x: gg.cat([x, x]), lambda x: torch.cat([x, x]), [np.float32(1.0)]),
    "embedding_1d_weight": (lambda w, i: gg.nn.functional.embedding(i, w), lambda w, i: torch.nn.functional.embedding(i, w),
                            [np.ones(4, np.float32), np.array([0, 1], np.int32)]),
    "tile_negative": (lambda x: gg.tile(x, (1, -1)), lambda x: torch.tile(x, (1, -1)), [_F23]),
    "frac_bool": (lambda x: gg.frac(x > 0), lambda x: torch.frac(x > 0), [_F23]),
    "ceil_bool": (lambda x: gg.ceil(x > 0), lambda x: torch.ceil(x > 0), [_F23]),
    "abs_bool": (lambda x: abs(x > 0), lambda x: abs(x > 0), [_F23]),
    "permute_dim_out_of_range": (lambda x: x.permute(1), lambda x: x.permute(1), [np.ones(3, np.float32)]),
    "permute_dim_out_of_range_2d": (lambda x: x.permute(0, 2), lambda x: x.permute(0, 2), [_F23]),
    "logaddexp_int": (lambda a: gg.logaddexp(a, a), lambda a: torch.logaddexp(a, a), [np.array([1, 2], np.int32)]),
}


def _tensor(lib, a):
    if lib is torch:
        return torch.from_numpy(np.asarray(a).astype(np.int64) if np.asarray(a).dtype.kind == "i" else np.asarray(a))
    return gg.tensor(np.asarray(a))


@pytest.mark.parametrize("graph", [False, True])
@pytest.mark.parametrize("case", sorted(CASES))
def test_error_is_an_instance_of_torchs_class(case, graph):
    g_call, t_call, arrays = CASES[case]
    t_err = _raised(t_call, *[_tensor(torch, a) for a in arrays])
    assert t_err is not None and error_base(t_err) in (RuntimeError, IndexError), t_err
    with gg.graph_mode(graph):
        g_err = _raised(lambda: g_call(*[_tensor(gg, a) for a in arrays]).numpy())
    assert g_err is not None and issubclass(g_err, error_base(t_err)), (case, g_err, t_err)
    assert issubclass(g_err, (ValueError, TypeError, IndexError)), g_err      # and the Python class it always was


def test_one_hot_zero_classes_is_a_runtime_error_as_torch():
    i = np.array([0, 1], np.int32)
    assert _raised(torch.nn.functional.one_hot, torch.from_numpy(i.astype(np.int64)), 0) is RuntimeError
    err = _raised(gg.nn.functional.one_hot, gg.tensor(i), 0)
    assert issubclass(err, RuntimeError) and issubclass(err, ValueError)


@pytest.mark.parametrize("graph", [False, True])
def test_pow_gradients_at_a_zero_base_are_torchs(graph):
    a = np.array([0.0, 0.0, 0.0, 2.0, -2.0, 0.0, 1.5, 0.0], np.float32)
    b = np.array([0.3, 0.0, -1.0, 3.0, 2.0, 2.0, -0.5, 1.0], np.float32)
    ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    (ta ** tb).sum().backward()
    with gg.graph_mode(graph):
        x, y = gg.tensor(a, requires_grad=True), gg.tensor(b, requires_grad=True)
        (x ** y).sum().backward()
        gx, gy = x.grad.numpy(), y.grad.numpy()
    np.testing.assert_allclose(gx, ta.grad.numpy(), rtol=1e-5)      # inf, -inf, 0 where torch has them
    np.testing.assert_allclose(gy, tb.grad.numpy(), rtol=1e-5)      # 0 (not NaN) at a == 0, b >= 0
    assert not np.isnan(gy[[0, 1, 5, 7]]).any()


def test_pow_gradients_broadcast_as_torchs():
    a, b = np.array([[0.0], [2.0]], np.float32), np.array([0.5, 0.0, 2.0], np.float32)
    ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    (ta ** tb).sum().backward()
    x, y = gg.tensor(a, requires_grad=True), gg.tensor(b, requires_grad=True)
    (x ** y).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), ta.grad.numpy(), rtol=1e-5)
    np.testing.assert_allclose(y.grad.numpy(), tb.grad.numpy(), rtol=1e-5)


@pytest.mark.parametrize("graph", [False, True])
@pytest.mark.parametrize("fn", ["trunc", "ceil", "round", "pow0"])
def test_piecewise_constant_gradients_are_zeros_even_under_a_nan_gradient(fn, graph):
    # torch gives zeros (not g * 0, which is NaN where g is NaN or Inf)
    call = {"trunc": lambda m, x: m.trunc(x), "ceil": lambda m, x: m.ceil(x), "round": lambda m, x: m.round(x),
            "pow0": lambda m, x: x ** 0}[fn]
    a = np.array([-1.5, 0.0, 2.25], np.float32)
    tx = torch.tensor(a, requires_grad=True)
    (call(torch, tx) * torch.tensor([np.nan, np.inf, 1.0])).sum().backward()
    with gg.graph_mode(graph):
        x = gg.tensor(a, requires_grad=True)
        (call(gg, x) * gg.tensor([np.nan, np.inf, 1.0])).sum().backward()
        got = x.grad.numpy()
    np.testing.assert_array_equal(got, tx.grad.numpy())
    assert not np.isnan(got).any()


@pytest.mark.parametrize("graph", [False, True])
def test_min_and_max_keep_torchs_signed_zeros(graph):
    # amin was -max(-x) + 0.0: min([0.0, 3.0]) came out -0.0, so 1 / min was -inf (torch: +inf)
    for v in ([0.0, 3.0], [-0.0, 3.0], [-0.0, -3.0], [0.0, -3.0], [2.0, -1.0]):
        t = torch.tensor(v)
        with gg.graph_mode(graph):
            x = gg.tensor(v)
            got = [x.min().numpy(), x.max().numpy(), x.amin(0).numpy(), x.amax(0).numpy()]
        want = [t.min().numpy(), t.max().numpy(), t.amin(0).numpy(), t.amax(0).numpy()]
        for g, w in zip(got, want):
            assert g == w and np.signbit(g) == np.signbit(w), (v, got, want)
    mask = gg.tensor([1.0, -1.0]) > 0
    assert (gg.tensor([1.0]) / mask.min()).tolist() == [float("inf")]


# ---- fixed after the oracle's 20,000-program run (each was a silent difference from torch)
@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_bool_base_to_a_negative_integer_power_raises_as_torch(mode):
    with gg.graph_mode(mode == "graph"):
        with pytest.raises(RuntimeError, match="negative integer powers"):
            gg.tensor([True, False]) ** -2
    with pytest.raises(RuntimeError, match="negative integer powers"):
        torch.tensor([True, False]) ** -2
    np.testing.assert_array_equal((gg.tensor([True, False]) ** 2).numpy(), (torch.tensor([True, False]) ** 2).numpy())


@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_where_float_condition_selects_as_its_bool_and_takes_no_gradient(mode):
    cond = np.array([np.nan, 0.0, -2.0], np.float32)
    a, b = np.array([1.0, 2.0, 3.0], np.float32), np.array([7.0, 8.0, 9.0], np.float32)
    with gg.graph_mode(mode == "graph"):
        c = gg.tensor(cond, requires_grad=True)
        x = gg.tensor(a, requires_grad=True)
        got = gg.where(c, x, gg.tensor(b))
        assert got.requires_grad          # through x
        assert not gg.where(c, gg.tensor(a), gg.tensor(b)).requires_grad   # not through the condition
        got.sum().backward()
    tc = torch.tensor(cond)
    want = torch.where(tc.bool(), torch.tensor(a), torch.tensor(b))   # NaN.bool() is True
    np.testing.assert_array_equal(got.detach().numpy(), want.numpy())
    np.testing.assert_array_equal(x.grad.numpy(), tc.bool().float().numpy())
    assert c.grad is None


def test_softmax_without_dim_warns_which_axis_it_uses():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    with pytest.warns(UserWarning, match="last axis"):
        got = gg.nn.functional.softmax(gg.tensor(x))
    np.testing.assert_allclose(got.numpy(), torch.softmax(torch.tensor(x), dim=-1).numpy(), rtol=1e-6)
    with pytest.warns(UserWarning, match="last axis"):
        gg.nn.functional.log_softmax(gg.tensor(x))


_INT = np.array([1, 2], np.int32)
# ggmlgrad's refusal is an instance of torch's class (torch's NotImplementedError is a RuntimeError)
REFUSALS = {
    "activation_of_int": (lambda x: gg.nn.functional.gelu(x), lambda x: torch.nn.functional.gelu(x), [_INT]),
    "frac_of_int": (lambda x: x.frac(), lambda x: x.frac(), [_INT]),
    "prelu_2d_weight": (lambda x, w: gg.nn.functional.prelu(x, w), lambda x, w: torch.nn.functional.prelu(x, w),
                        [_F23, np.ones((1, 1), np.float32)]),
    "chunk_0d": (lambda x: x.chunk(2), lambda x: x.chunk(2), [np.float32(1.0)]),
}


@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_refusals_are_instances_of_torchs_class(name):
    gfn, tfn, arrays = REFUSALS[name]
    want = _raised(tfn, *[torch.from_numpy(np.asarray(a)) for a in arrays])
    assert want is not None
    got = _raised(gfn, *[gg.tensor(np.asarray(a)) for a in arrays])
    assert got is not None and issubclass(got, error_base(want)), (got, want)
