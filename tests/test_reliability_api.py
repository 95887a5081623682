"""Issue 13 (reliability), API part: size arguments, binary_cross_entropy's input range, losses over
an empty batch, NumPy arrays passed to ops and modules, creation memory, the demo's batch size,
and the paths that could make a tensor of more than 4 dimensions."""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import ggmlgrad as gg
import ggmlgrad.nn.functional as F

MODES = pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])


# ---------------------------------------------------------------------- size arguments
def _t23():
    return gg.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))


BAD_SIZES = {
    "reshape floats": lambda: _t23().reshape(2.0, 3.0),
    "reshape float tuple": lambda: _t23().reshape((3.0, 2)),
    "reshape numpy float": lambda: _t23().reshape(np.float64(2), 3),
    "reshape bool": lambda: _t23().reshape(True, 6),
    "view floats": lambda: _t23().view(2.0, 3.0),
    "expand float": lambda: _t23().expand(2.0, 3),
    "broadcast_to float": lambda: gg.broadcast_to(_t23(), (2, 3.0)),
    "permute float": lambda: _t23().permute(1.0, 0),
    "permute bool": lambda: _t23().permute(True, False),
    "repeat float": lambda: _t23().repeat(2.0, 1),
    "zeros float": lambda: gg.zeros(2.0),
    "ones bool": lambda: gg.ones(True),
    "full float size": lambda: gg.full((2.0,), 1.0),
    "eye float": lambda: gg.eye(2.0),
    "rand bool": lambda: gg.rand(True, 2),
    "randn float": lambda: gg.randn(2, 3.5),
    "randint float size": lambda: gg.randint(0, 3, (2.0,)),
    "linspace float steps": lambda: gg.linspace(0, 1, 3.0),
    "zeros string": lambda: gg.zeros("2"),
    "unflatten float": lambda: gg.ones(2, 6).unflatten(1, (3.0, -1)),
    "split float sections": lambda: gg.ones(2, 6).split([1.0, 1], 0),
    "chunk float": lambda: gg.ones(2, 6).chunk(2.0),
    "broadcast_to float scalar": lambda: gg.broadcast_to(gg.ones(1), 2.0),
    "tile float": lambda: gg.tile(gg.ones(2), 2.0),
    "zeros None": lambda: gg.zeros(None),
}


@pytest.mark.parametrize("name", list(BAD_SIZES))
def test_non_int_sizes_raise_type_error(name):
    with pytest.raises(TypeError):
        BAD_SIZES[name]()


def test_non_int_sizes_match_torch():
    torch = pytest.importorskip("torch")
    t = torch.arange(6.0).reshape(2, 3)
    torch_cases = {
        "reshape floats": lambda: t.reshape(2.0, 3.0), "view floats": lambda: t.view(2.0, 3.0),
        "expand float": lambda: t.expand(2.0, 3), "permute float": lambda: t.permute(1.0, 0),
        "zeros float": lambda: torch.zeros(2.0), "ones bool": lambda: torch.ones(True),
        "full float size": lambda: torch.full((2.0,), 1.0), "eye float": lambda: torch.eye(2.0),
        "rand bool": lambda: torch.rand(True, 2), "linspace float steps": lambda: torch.linspace(0, 1, 3.0),
        "unflatten float": lambda: torch.ones(2, 6).unflatten(1, (3.0, -1)),
        "split float sections": lambda: torch.ones(2, 6).split([1.0, 1], 0),
        "chunk float": lambda: torch.ones(2, 6).chunk(2.0),
    }
    for name, f in torch_cases.items():
        with pytest.raises(TypeError):
            f()
        with pytest.raises(TypeError):
            BAD_SIZES[name]()


def test_numpy_int_sizes_accepted_like_ints():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    n2, n3 = np.int64(2), np.int32(3)
    np.testing.assert_array_equal(_t23().reshape(n3, np.int64(2)).numpy(), a.reshape(3, 2))
    np.testing.assert_array_equal(_t23().view((n3, n2)).numpy(), a.reshape(3, 2))
    np.testing.assert_array_equal(_t23().permute(np.int64(1), 0).numpy(), a.T)
    np.testing.assert_array_equal(gg.tensor(a[:1]).expand(n2, n3).numpy(), np.broadcast_to(a[:1], (2, 3)))
    np.testing.assert_array_equal(_t23().repeat(n2, np.int64(1)).numpy(), np.tile(a, (2, 1)))
    assert gg.zeros(n2, n3).shape == (2, 3) and gg.randn(n2, n3).shape == (2, 3)
    assert gg.full((n2,), 1.5).tolist() == [1.5, 1.5] and gg.eye(n2).tolist() == [[1.0, 0.0], [0.0, 1.0]]
    assert gg.randint(0, 3, (n2, n3)).shape == (2, 3)


def test_negative_sizes_still_value_errors():
    for f in (lambda: gg.zeros(-1), lambda: _t23().reshape(-2, -3), lambda: gg.eye(-1)):
        with pytest.raises(ValueError):
            f()


# ---------------------------------------------------------------------- binary_cross_entropy
@MODES
@pytest.mark.parametrize("bad", [1.5, -0.25, float("nan")], ids=["above", "below", "nan"])
def test_bce_input_outside_unit_interval_raises(graph, bad):
    with gg.graph_mode(graph):
        x = gg.tensor([0.5, bad, 0.25])
        with pytest.raises(RuntimeError, match="between 0 and 1"):
            F.binary_cross_entropy(x, gg.tensor([1.0, 0.0, 1.0]))
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError, match="between 0 and 1"):
        torch.nn.functional.binary_cross_entropy(torch.tensor([0.5, bad, 0.25]), torch.tensor([1.0, 0.0, 1.0]))


@MODES
def test_bce_values_in_range_match_numpy(graph):
    p = np.array([0.0, 1e-3, 0.3, 0.9, 1.0], np.float32)
    y = np.array([0.0, 1.0, 1.0, 0.0, 1.0], np.float32)
    with np.errstate(divide="ignore"):
        logp, log1mp = np.maximum(np.log(p.astype(np.float64)), -100), np.maximum(np.log1p(-p.astype(np.float64)), -100)
    expect = -(y * logp + (1 - y) * log1mp)
    with gg.graph_mode(graph):
        got = F.binary_cross_entropy(gg.tensor(p), gg.tensor(y), reduction="none").numpy()
    np.testing.assert_allclose(got, expect, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("bad", [1.5, -0.25, float("nan")], ids=["above", "below", "nan"])
def test_bce_pending_input_raises_at_the_sync_point_and_in_captures(bad):
    """A graph-mode input not computed yet, a capture and a captured step's update: same RuntimeError."""
    with gg.graph_mode(True):
        p = gg.tensor([0.5, 0.25, 0.75]) + gg.tensor([0.0, bad, 0.0]) - gg.tensor([0.0, 0.25, 0.0])
        loss = F.binary_cross_entropy(p, gg.tensor([1.0, 0.0, 1.0]))
        with pytest.raises(RuntimeError, match="between 0 and 1"):
            loss.item()
    f = gg.capture(lambda x, y: F.binary_cross_entropy(x * 1.0, y))
    ok = np.array([0.5, 0.25, 0.75], np.float32)
    y = np.array([1.0, 0.0, 1.0], np.float32)
    first = f(ok, y)
    with pytest.raises(RuntimeError, match="between 0 and 1"):
        f(np.array([0.5, bad, 0.75], np.float32), y)
    assert f(ok, y) == first
    w = gg.tensor([1.0, 1.0, 1.0], requires_grad=True)
    opt = gg.optim.Adam([w], lr=0.1)
    step = gg.capture_step(lambda x, t: F.binary_cross_entropy(w * x, t), opt)
    step(ok, y)
    before = w.detach().numpy().copy()
    with pytest.raises(RuntimeError, match="between 0 and 1"):
        step(np.array([0.5, bad, 0.75], np.float32), y)
    np.testing.assert_array_equal(w.detach().numpy(), before)       # the update did not run


def test_bce_check_adds_no_transfer_in_graph_mode():
    with gg.graph_mode(True):
        p = gg.sigmoid(gg.tensor([0.3, -2.0]))
        before = gg.counters()
        loss = F.binary_cross_entropy(p, gg.tensor([1.0, 0.0]))
        after = gg.counters()
        assert loss.is_pending
        assert (after["downloads"], after["computes"]) == (before["downloads"], before["computes"])


# ---------------------------------------------------------------------- empty batches
def _empty_targets(kind: str, spatial: tuple = ()):
    if kind == "index":
        return gg.zeros(0, *spatial, dtype=gg.int32)
    return gg.zeros(0, 3, *spatial)


@MODES
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("kind", ["index", "probs"])
@pytest.mark.parametrize("extra", [{}, {"label_smoothing": 0.1}, {"weight": [1.0, 2.0, 3.0]}],
                         ids=["plain", "smoothing", "weight"])
def test_cross_entropy_of_an_empty_batch(graph, reduction, kind, extra):
    """PyTorch: mean → nan, sum → 0, none → empty (N,); the gradient is empty of the input's shape."""
    with gg.graph_mode(graph):
        x = gg.zeros(0, 3, requires_grad=True)
        kw = dict(extra)
        if "weight" in kw:
            kw["weight"] = gg.tensor(kw["weight"])
        loss = F.cross_entropy(x, _empty_targets(kind), reduction=reduction, **kw)
        loss.sum().backward()
        value = loss.detach().numpy().copy()
    if reduction == "mean":
        assert value.shape == () and np.isnan(value)
    elif reduction == "sum":
        assert value.shape == () and value == 0.0
    else:
        assert value.shape == (0,)
    assert x.grad.shape == (0, 3)


def test_cross_entropy_empty_batch_matches_torch():
    torch = pytest.importorskip("torch")
    for reduction in ("mean", "sum", "none"):
        ref = torch.nn.functional.cross_entropy(torch.zeros(0, 3), torch.zeros(0, dtype=torch.long), reduction=reduction)
        got = F.cross_entropy(gg.zeros(0, 3), gg.zeros(0, dtype=gg.int32), reduction=reduction).numpy()
        assert got.shape == tuple(ref.shape)
        np.testing.assert_array_equal(got, ref.numpy())


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_loss_and_spatial_empty_batches(reduction):
    got = F.nll_loss(gg.zeros(0, 3), gg.zeros(0, dtype=gg.int32), reduction=reduction).numpy()
    spatial = F.cross_entropy(gg.zeros(2, 3, 0), gg.zeros(2, 0, dtype=gg.int32), reduction=reduction).numpy()
    for v, shape in ((got, (0,)), (spatial, (2, 0))):
        if reduction == "mean":
            assert np.isnan(v)
        elif reduction == "sum":
            assert v == 0.0
        else:
            assert v.shape == shape


def test_empty_batch_with_wrong_target_shape_raises():
    with pytest.raises(ValueError, match="target shape"):
        F.cross_entropy(gg.zeros(0, 3), gg.zeros(2, dtype=gg.int32))


# ---------------------------------------------------------------------- NumPy arrays into ops and modules
NUMPY_INPUT = {
    "Linear": lambda a: gg.nn.Linear(3, 2)(a),
    "LayerNorm": lambda a: gg.nn.LayerNorm(3)(a),
    "ReLU module": lambda a: gg.nn.ReLU()(a),
    "relu": lambda a: gg.relu(a),
    "exp": lambda a: gg.exp(a),
    "F.linear weight": lambda a: F.linear(gg.ones(4, 3), a[:2]),
}


@pytest.mark.parametrize("name", list(NUMPY_INPUT))
def test_numpy_array_into_op_or_module_is_a_clear_type_error(name):
    a = np.ones((4, 3), np.float32)
    with pytest.raises(TypeError, match=r"expected a Tensor, got numpy\.ndarray.*gg\.tensor"):
        NUMPY_INPUT[name](a)


def test_numpy_array_into_module_torch_raises_type_error_too():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError):
        torch.nn.Linear(3, 2)(np.ones((4, 3), np.float32))


def test_arrays_still_mix_with_tensors_in_operators():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal((gg.ones(2, 3) + a).numpy(), 1 + a)
    np.testing.assert_array_equal((gg.ones(3, 2) @ a).numpy(), np.ones((3, 2)) @ a)


# ---------------------------------------------------------------------- creation memory
ABSURD = (2**20, 2**20, 2**12)    # 2**52 elements: 16 PiB of float32


@pytest.mark.parametrize("make", [
    lambda: gg.zeros(*ABSURD), lambda: gg.ones(*ABSURD), lambda: gg.full(ABSURD, 2.0), lambda: gg.rand(*ABSURD),
    lambda: gg.randn(*ABSURD), lambda: gg.randint(0, 5, ABSURD), lambda: gg.eye(2**27, 2**27),
    lambda: gg.zeros(*ABSURD, dtype=gg.float16), lambda: gg.arange(0.0, 1e17), lambda: gg.linspace(0, 1, 2**55),
], ids=["zeros", "ones", "full", "rand", "randn", "randint", "eye", "zeros-f16", "arange", "linspace"])
def test_absurd_sizes_refused_before_allocating(make):
    with pytest.raises(MemoryError, match=r"needs .* GiB .*this machine has"):
        make()


@pytest.mark.parametrize("make", [lambda n: gg.full((n, n), 0.5), lambda n: gg.eye(n), lambda n: gg.randn(n, n),
                                  lambda n: gg.rand(n, n), lambda n: gg.zeros(n, n), lambda n: gg.ones(n, n)],
                         ids=["full", "eye", "randn", "rand", "zeros", "ones"])
def test_creation_builds_in_float32_not_float64(make):
    """Host memory peaks at about the float32 array (a float64 first would take 2x, then 3x with the cast)."""
    n = 1024
    f32 = n * n * 4
    tracemalloc.start()
    try:
        t = make(n)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert t.dtype is gg.float32 and t.shape == (n, n)
    assert peak < 1.5 * f32, f"peak host allocation {peak} bytes for a {f32}-byte tensor"


def test_creation_values_and_dtypes():
    assert gg.full((2, 2), 3, dtype=gg.int32).tolist() == [[3, 3], [3, 3]]
    assert gg.ones(3, dtype=gg.bfloat16).tolist() == [1.0, 1.0, 1.0]
    np.testing.assert_array_equal(gg.eye(2, 3).numpy(), np.eye(2, 3))
    r = gg.rand(1000).numpy()
    assert r.dtype == np.float32 and 0.0 <= r.min() and r.max() < 1.0 and abs(r.mean() - 0.5) < 0.05
    z = gg.randn(4000).numpy()
    assert abs(z.mean()) < 0.1 and abs(z.std() - 1.0) < 0.1
    gg.manual_seed(3)
    a = gg.randn(5).tolist()
    gg.manual_seed(3)
    assert gg.randn(5).tolist() == a
    with pytest.raises(ValueError, match="int32"):
        gg.full((2,), 2.0**40, dtype=gg.int32)
    with pytest.raises(TypeError, match="fill_value"):
        gg.full((2,), "x")
    assert gg.full((2,), True).tolist() == [1.0, 1.0] and gg.full((1,), gg.tensor(2.5)).tolist() == [2.5]
    assert gg.full((2,), 7, dtype=gg.int32).tolist() == [7, 7] and gg.arange(0, 1, 0.25).tolist() == [0, 0.25, 0.5, 0.75]


# ---------------------------------------------------------------------- demo batch size
def test_demo_batch_larger_than_training_set_is_one_batch(monkeypatch):
    from ggmlgrad import demo
    rng = np.random.default_rng(0)
    x = rng.random((30, 64)).astype(np.float32)
    y = rng.integers(0, 10, 30).astype(np.int32)
    monkeypatch.setattr(demo, "load_digits_split", lambda seed: ((x[:20], y[:20]), (x[20:], y[20:])))
    lines = []
    res = demo.run_demo(epochs=1, mode="eager", batch_size=5000, hidden=8, out=lines.append)
    assert "batch 20 (asked 5000" in lines[0]
    epoch = next(line for line in lines if line.startswith("epoch"))
    assert "median of 1," in epoch               # one step: the whole training set
    assert np.isfinite(res["final_loss"])
    with pytest.raises(ValueError, match="batch_size"):
        demo.run_demo(epochs=1, mode="eager", batch_size=0, out=lines.append)


def test_demo_cli_refuses_zero_batch(capsys):
    from ggmlgrad.__main__ import main
    assert main(["demo", "--batch-size", "0"]) == 2
    assert "batch-size" in capsys.readouterr().err


# ---------------------------------------------------------------------- more than 4 dimensions
def test_no_path_makes_a_tensor_of_more_than_4_dims():
    five = np.zeros((1, 1, 1, 1, 2), np.float32)
    with pytest.raises(ValueError, match="at most 4"):
        gg.tensor(five)
    with pytest.raises(ValueError, match="at most 4"):
        gg.zeros(1, 1, 1, 1, 2)
    with pytest.raises(ValueError, match="at most 4"):
        gg.ones(2, 3).reshape(1, 1, 1, 2, 3)
    with pytest.raises(ValueError, match="at most 4"):     # the engine's last gate (used by gg.load)
        t = gg.Tensor._blank(five.shape, gg.float32, gg.get_device())
        gg.engine.new_from_host(t, five, "test")
    with pytest.raises(RuntimeError, match="size mismatch|shape"):
        gg.nn.Linear(2, 1).load_state_dict({"weight": five, "bias": np.zeros(1, np.float32)})


def test_squeeze_refuses_a_repeated_dim_as_torch():
    with pytest.raises(RuntimeError, match="multiple times"):
        gg.squeeze(gg.ones(1, 3), (0, 0))
    assert gg.squeeze(gg.ones(1, 3, 1), (0, 2)).shape == (3,)
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError, match="multiple times"):
        torch.squeeze(torch.ones(1, 3), (0, 0))


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
@pytest.mark.parametrize("loss", ["cross_entropy", "nll_loss"])
def test_a_half_input_with_a_bad_target_is_the_same_type_error_in_every_mode(graph, loss):
    """The input's dtype is checked before the targets' values (eager reads them at once, graph mode
    after the compute); found by the op-program fuzzer's 20,000-program run."""
    x = gg.tensor(np.zeros((4, 3), np.float32)).to(gg.bfloat16)
    t = gg.tensor(np.array([0, 5, 1, 2], np.int32))
    with gg.graph_mode(graph):
        with pytest.raises(TypeError, match="float32"):
            getattr(F, loss)(x, t).item()
