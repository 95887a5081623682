"""Host paths of an RL rollout (issue 21, CleanRL's ppo.py): ``Categorical.sample()`` in eager mode
draws its Gumbel noise and takes the argmax with NumPy. Compared with the ops' path (graph mode, or
the host path switched off): the same generator draws, the same indices bit for bit (ties: the first
maximum; NaN: the first NaN, torch's argmax), the same shapes and dtype; counters show what ran."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import ggmlgrad as gg
from ggmlgrad.distributions import Categorical
from ggmlgrad.tensor import random as gg_random

categorical_mod = __import__("ggmlgrad.distributions.categorical", fromlist=["x"])


@pytest.fixture
def eager():
    with gg.graph_mode(False):
        yield


def _ops_path(monkeypatch):
    monkeypatch.setattr(categorical_mod, "gumbel_argmax_on_host", lambda *a: None)


LOGITS = [np.array([0.3, -1.0, 2.0], np.float32),
          np.random.default_rng(0).standard_normal((4, 2)).astype(np.float32),
          np.random.default_rng(1).standard_normal((2, 3, 5)).astype(np.float32) * 4]


def _samples(sample_shape=()):
    out = []
    for lg in LOGITS:
        gg.manual_seed(3)
        d = Categorical(logits=gg.tensor(lg))
        gg.reset_counters()
        s = d.sample(sample_shape)
        out.append((s.shape, s.dtype, s.numpy().copy(), gg.counters()["computes"], gg.counters()["uploads"]))
        out[-1] += (gg_random.generator().random(),)   # the generator's state after the draw
    return out


@pytest.mark.parametrize("sample_shape", [(), (3,)])
def test_host_sample_matches_the_ops_draw_for_draw(monkeypatch, eager, sample_shape):
    fast = _samples(sample_shape)
    with gg.graph_mode(True):
        graph = _samples(sample_shape)
    _ops_path(monkeypatch)
    ops = _samples(sample_shape)
    for f, o, g in zip(fast, ops, graph):
        assert f[0] == o[0] == g[0] and f[1] is o[1] is g[1] is gg.int32
        np.testing.assert_array_equal(f[2], o[2])
        np.testing.assert_array_equal(f[2], g[2])
        assert f[5] == o[5] == g[5]                 # the generator consumed alike
        assert f[3] == 0 and f[4] == 1              # no compute; one upload (the indices)
        assert o[3] == 2 and o[4] == 1              # the ops: the noise's upload, add and argmax


def test_host_sample_ties_and_nan_pick_what_the_argmax_op_picks(monkeypatch, eager):
    # Crafted noise (the generator's draw replaced alike on both paths): equal sums, a NaN, -inf logits.
    noise = np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 1.0], [0.0, np.nan, np.nan], [-0.0, 0.0, 0.0]], np.float32)
    logits = np.array([[1.0, 1.0, 0.5], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0], [-np.inf, -np.inf, -np.inf]],
                      np.float32)
    monkeypatch.setattr(gg_random.NoiseRequest, "sample", lambda self: noise.copy())
    lt = gg.tensor(logits)
    d = Categorical(logits=lt)
    fast = d.sample().numpy().tolist()
    with pytest.MonkeyPatch.context() as m:
        m.setattr(categorical_mod, "gumbel_argmax_on_host", lambda *a: None)
        ops = d.sample().numpy().tolist()
    # torch's argmax on the same sums (the normalised logits plus the noise)
    expect = torch.argmax(torch.from_numpy(d.logits.numpy() + noise), dim=-1).tolist()
    assert fast == ops == expect
    assert fast[:3] == [0, 0, 1]


def test_host_sample_is_not_taken_in_capture_or_with_a_noise_hook_or_a_view(eager):
    lt = gg.tensor(np.zeros((2, 3), np.float32))
    d = Categorical(logits=lt)
    seen = []
    prev = gg.distributions.set_noise_hook(lambda req: seen.append(req) or gg.tensor(
        np.array([[0.0, 5.0, 0.0], [0.0, 0.0, 5.0]], np.float32)))
    try:
        assert d.sample().tolist() == [1, 2]        # the hook's noise, through the ops
    finally:
        gg.distributions.set_noise_hook(prev)
    assert len(seen) == 1
    # A logits view that is not memory of its own (a row of a buffer) takes the ops, with the same draw.
    buf = gg.tensor(np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32))
    row = buf[1]
    gg.manual_seed(5)
    a = gg_random.gumbel_argmax_on_host(row, (4,))
    gg.manual_seed(5)
    b = Categorical(logits=row).sample()
    gg.manual_seed(5)
    c = Categorical(logits=gg.tensor(row.numpy().copy())).sample()
    assert a is None and b.item() == c.item()


# ---------------------------------------------------------------------------- clip_grad_norm_
utils_mod = __import__("ggmlgrad.nn.utils", fromlist=["x"])


def _grads_case(rng, shapes, special=None):
    params = [gg.tensor(np.zeros(s, np.float32), requires_grad=True) for s in shapes]
    grads = [(rng.standard_normal(s) * 10.0 ** rng.uniform(-4, 4, s)).astype(np.float32) for s in shapes]
    if special is not None:
        grads[0].reshape(-1)[0] = special
    for p, g in zip(params, grads):
        p.grad = gg.tensor(g)
    return params


@pytest.mark.parametrize("special", [None, np.inf, np.nan, 3e38])
def test_clip_grad_norm_on_the_host_gives_the_ops_bits(monkeypatch, eager, special):
    shapes = [(64, 4), (64,), (64, 64), (1, 64), (1,), (3, 5, 2)]
    results = {}
    for path in ("host", "ops"):
        rng = np.random.default_rng(4)
        out = []
        with monkeypatch.context() as m:
            if path == "ops":
                m.setattr(utils_mod, "_clip_l2_on_host", lambda *a: None)
            for max_norm in (0.5, 1e9, 0.0):
                params = _grads_case(rng, shapes, special)
                params[1].grad = None                       # a parameter without a gradient stays so
                gg.reset_counters()
                total = gg.nn.utils.clip_grad_norm_(params, max_norm)
                out.append((gg.counters()["computes"], total.shape, total.dtype, total.numpy().copy(),
                            [None if p.grad is None else p.grad.numpy().copy() for p in params]))
        results[path] = out
    for h, o in zip(results["host"], results["ops"]):
        assert h[0] == 2 and o[0] > 20                      # the host path: sum(square(g)) of the 64x64 one
        assert h[1] == o[1] == () and h[2] is o[2] is gg.float32
        assert _same_bits(h[3], o[3])
        for a, b in zip(h[4], o[4]):
            assert (a is None) == (b is None) and (a is None or _same_bits(a, b))


def _same_bits(a, b) -> bool:
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    both_nan = np.isnan(a) & np.isnan(b)
    return a.shape == b.shape and bool(np.all(both_nan | (a.view(np.uint32) == b.view(np.uint32))))


def test_clip_grad_norm_on_the_host_matches_torch_and_keeps_other_paths(eager):
    rng = np.random.default_rng(5)
    gs = [rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal(3).astype(np.float32)]
    ours = [gg.tensor(np.zeros_like(g), requires_grad=True) for g in gs]
    theirs = [torch.zeros(g.shape, requires_grad=True) for g in gs]
    for p, q, g in zip(ours, theirs, gs):
        p.grad, q.grad = gg.tensor(g), torch.from_numpy(g.copy())
    n1 = gg.nn.utils.clip_grad_norm_(ours, 0.5)
    n2 = torch.nn.utils.clip_grad_norm_(theirs, 0.5)
    np.testing.assert_allclose(n1.item(), n2.item(), rtol=1e-6)
    for p, q in zip(ours, theirs):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-6, atol=1e-8)
    # graph mode, another norm, error_if_nonfinite: the ops (computes counted), same values as before
    for kw in ({"norm_type": 1.0}, {"error_if_nonfinite": True}):
        p = gg.tensor(np.zeros(3, np.float32), requires_grad=True)
        p.grad = gg.tensor(np.array([3.0, 4.0, 0.0], np.float32))
        gg.reset_counters()
        gg.nn.utils.clip_grad_norm_([p], 1.0, **kw)
        assert gg.counters()["computes"] > 0
    with gg.graph_mode(True):
        p = gg.tensor(np.zeros(2, np.float32), requires_grad=True)
        p.grad = gg.tensor(np.array([3.0, 4.0], np.float32))
        n = gg.nn.utils.clip_grad_norm_([p], 1.0)
        assert n.is_pending
        assert p.grad.tolist() == pytest.approx([0.6, 0.8], rel=1e-6) and n.item() == 5.0


# ---------------------------------------------------------------------------- per-step conversions
@pytest.mark.parametrize("data", [np.arange(6, dtype=np.float32).reshape(2, 3), np.array([0.1, -2.5e30, 3.0]),
                                  np.array([True, False, True]), np.array([[1, -2], [3, 2**31 - 1]], np.int64),
                                  np.float32(2.5) * np.ones((2, 1, 2, 1), np.float32)])
def test_tensor_constructor_from_an_array_matches_torch(data):
    ours, theirs = gg.Tensor(data), torch.Tensor(data)
    assert ours.dtype is gg.float32 and theirs.dtype == torch.float32
    assert ours.shape == tuple(theirs.shape)
    assert np.array_equal(ours.numpy(), theirs.numpy(), equal_nan=True)
    data_copy = data.copy()
    data[...] = 0                        # a copy, never a view of the array
    assert np.array_equal(ours.numpy(), data_copy.astype(np.float32))
    assert gg.Tensor(data_copy, device="cpu").device is ours.device
    assert gg.Tensor(data_copy).tolist() == gg.FloatTensor(data_copy.tolist()).tolist()   # the general path


def test_to_cpu_and_cpu_return_the_tensor_itself_as_torch(eager):
    x = gg.tensor(np.ones(3, np.float32))
    t = torch.ones(3)
    assert (x.to("cpu") is x) == (t.to("cpu") is t) is True
    assert (x.cpu() is x) == (t.cpu() is t) is True
    assert x.to("cpu:0") is x and x.to(device="cpu") is x
    dev, tdev = gg.device("cpu"), torch.device("cpu")   # CleanRL's ``device = torch.device(...)``
    assert (x.to(dev) is x) == (t.to(tdev) is t) is True
    assert x.to(gg.device("cpu", 0)) is x
    with pytest.raises(RuntimeError, match="not available"):   # (DeviceError: a RuntimeError, as torch's)
        x.to(gg.device("cuda", 3))
    assert x.to("float16").dtype is gg.float16 and x.to("cpu", ) is x
    with pytest.raises(Exception) as ours:
        x.to("nonsense")
    assert "nonsense" in str(ours.value)


# ---------------------------------------------------------------------------- reshape views in the root's memory
def test_view_reshape_flatten_of_a_host_root_lie_in_its_memory_as_torchs(eager):
    from ggmlgrad.runtime import SliceAlias
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    for make, tmake in [(lambda x: x.view(-1), lambda t: t.view(-1)), (lambda x: x.reshape(3, -1, 2), lambda t: t.reshape(3, -1, 2)),
                        (lambda x: x.view((2, 12)), lambda t: t.view((2, 12))), (lambda x: x.flatten(), lambda t: t.flatten()),
                        (lambda x: x.reshape(24), lambda t: t.reshape(24))]:
        x, t = gg.tensor(base.copy()), torch.from_numpy(base.copy())
        gg.reset_counters()
        v, tv = make(x), tmake(t)
        assert gg.counters()["computes"] == 0 and type(v._storage) is SliceAlias and v._storage.parent is x._storage
        assert v.shape == tuple(tv.shape) and v.stride() == tv.stride() and v.is_contiguous()
        assert v.storage_offset() == tv.storage_offset() == 0
        np.testing.assert_array_equal(v.numpy(), tv.numpy())
        x[1] = np.full(6, -3.0, np.float32)                 # writes to the root show in the view ...
        v.view(-1)[0] = 7.0                                  # ... and writes through the view in the root
        t[1] = -3.0
        tv.view(-1)[0] = 7.0
        np.testing.assert_array_equal(v.numpy(), tv.numpy())
        np.testing.assert_array_equal(x.numpy(), t.numpy())
        assert x._version == v._version == t._version == tv._version


def test_reshape_alias_keeps_the_ops_errors_and_autograd(eager):
    x = gg.tensor(np.arange(6, dtype=np.float32))
    t = torch.arange(6.0)
    for shape in [(-1, -1), (4, -1), (5,), (2.0, 3), (0, -1)]:
        with pytest.raises(Exception) as ours:
            x.view(*shape)
        with pytest.raises(Exception):
            t.view(*shape)
        assert "view" in str(ours.value) or "reshape" in str(ours.value) or "shape" in str(ours.value)
    w = gg.tensor(np.arange(6, dtype=np.float32), requires_grad=True)
    y = w.view(2, 3)                                         # on the tape: the op's view, gradient flows
    assert y.grad_fn is not None
    (y * y).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), 2 * np.arange(6, dtype=np.float32))
    with gg.no_grad():
        z = w.view(3, 2)
    assert not z.requires_grad and z.tolist() == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]
    with gg.graph_mode(True):
        g = x.view(3, 2)
    assert g.tolist() == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]


def test_minibatch_rows_of_a_reshape_view_are_gathered_on_the_host(eager):
    obs = gg.tensor(np.random.default_rng(3).standard_normal((8, 2, 3)).astype(np.float32))
    b = obs.reshape((-1, 3))
    idx = np.array([5, 0, 15, 7])
    gg.reset_counters()
    rows = b[idx]
    assert gg.counters()["computes"] == 0
    np.testing.assert_array_equal(rows.numpy(), obs.numpy().reshape(-1, 3)[idx])
    obs[0] = np.zeros((2, 3), np.float32)                    # the rollout's next write: seen by the view
    np.testing.assert_array_equal(b[idx].numpy()[1], np.zeros(3, np.float32))


# ---------------------------------------------------------------------------- index checks of few targets
def test_first_bad_of_few_values_is_the_one_the_long_path_finds():
    from ggmlgrad.engine import checks
    rng = np.random.default_rng(7)
    for n in (1, 3, 16, 17, 40):
        for _ in range(30):
            v = rng.integers(-3, 6, n).astype(np.int32)
            ignore = int(rng.choice([-1, -3, 5])) if rng.random() < 0.5 else None
            flat = v.reshape(-1)
            mask = ((flat < 0) | (flat > 4)) & ((flat != ignore) if ignore is not None else True)
            hits = np.flatnonzero(mask)
            expect = int(flat[hits[0]]) if hits.size else None
            assert checks.first_bad(v, 0, 4, ignore) == expect


def test_categorical_log_prob_still_refuses_bad_targets_in_every_mode():
    d = Categorical(logits=gg.zeros(3, 2))
    for graph in (False, True):
        with gg.graph_mode(graph), pytest.raises(IndexError, match="out of bounds"):
            d.log_prob(gg.tensor(np.array([0, 2, 1], np.int32), dtype=gg.int32)).tolist()
        with gg.graph_mode(graph), pytest.raises(IndexError, match="out of bounds"):
            d.log_prob(gg.tensor(np.array([-1, 0, 1], np.int32), dtype=gg.int32)).tolist()


@pytest.mark.parametrize("data", [np.array([1.0, 0.1, -3.3e-39, 1e30]), np.array([[True, False]]), np.zeros((2, 0))])
def test_tensor_of_a_float64_or_bool_array_matches_torch_and_the_list_path(data):
    ours = gg.tensor(data)
    theirs = torch.tensor(data)
    expect = gg.float32 if data.dtype.kind == "f" else gg.bool
    assert ours.dtype is expect and ours.shape == tuple(theirs.shape)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy().astype(ours.numpy().dtype))
    assert np.array_equal(ours.numpy(), gg.tensor(data.tolist()).numpy() if data.size else ours.numpy())
    f = gg.tensor(data, dtype=gg.float32)
    np.testing.assert_array_equal(f.numpy(), data.astype(np.float32))
    assert gg.tensor(data, requires_grad=data.dtype.kind == "f").requires_grad == (data.dtype.kind == "f")


# ---------------------------------------------------------------------------- c - x in one op
def test_scalar_minus_tensor_is_one_op_with_the_bits_of_neg_then_add(eager):
    from ggmlgrad.ops import op
    rng = np.random.default_rng(9)
    x = np.concatenate([rng.standard_normal(50) * 10.0 ** rng.uniform(-30, 30, 50),
                        [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, 3.4e38, -3.4e38, 1e-45]]).astype(np.float32)
    t = gg.tensor(x)
    for c in (0.0, -0.0, 1.0, 0.99, -2.5, 3.4e38, np.inf, 1e-40):
        gg.reset_counters()
        ours = (c - t).numpy()
        assert gg.counters()["computes"] == 1
        two_ops = op.add_scalar(op.neg(t), c=float(c)).numpy()
        assert _same_bits(ours, two_ops), c
        np.testing.assert_array_equal(ours, (torch.tensor(c) - torch.from_numpy(x)).numpy())
        with gg.graph_mode(True):
            g = (c - t)
        assert _same_bits(g.numpy(), ours)
    # gradient: d(c - x)/dx = -1
    w = gg.tensor(np.array([1.0, -2.0], np.float32), requires_grad=True)
    (1.0 - w).sum().backward()
    assert w.grad.tolist() == [-1.0, -1.0]
    # int32 and bool keep their own routes and dtypes (torch's promotion)
    assert (5 - gg.tensor([1, 2])).dtype is gg.int32 and (5 - gg.tensor([1, 2])).tolist() == [4, 3]
    assert (1.0 - gg.tensor([1, 2])).tolist() == [0.0, -1.0]


def test_log_prob_of_its_own_sample_skips_the_range_read_and_gives_the_same_values():
    lg = np.random.default_rng(11).standard_normal((4, 3)).astype(np.float32)
    for graph in (False, True):
        with gg.graph_mode(graph):
            d = Categorical(logits=gg.tensor(lg))
            a = d.sample()
            a.tolist()
            before = gg.counters()["downloads"]
            lp = d.log_prob(a).numpy()
            assert gg.counters()["downloads"] - before == 1                 # the result's read only
            copy = gg.tensor(a.numpy().copy(), dtype=gg.int32)          # another tensor: checked
            before = gg.counters()["downloads"]
            lp2 = d.log_prob(copy).numpy()
            assert gg.counters()["downloads"] - before == (2 if not graph else 2)
            np.testing.assert_array_equal(lp, lp2)
            expect = torch.distributions.Categorical(logits=torch.from_numpy(lg)).log_prob(
                torch.from_numpy(a.numpy().astype(np.int64))).numpy()
            np.testing.assert_allclose(lp, expect, rtol=1e-6, atol=1e-6)
    with gg.graph_mode(False):
        d = Categorical(logits=gg.tensor(lg))
        a = d.sample()
        a[0] = 7                                                        # written in place since: checked again
        with pytest.raises(IndexError, match="out of bounds"):
            d.log_prob(a)
