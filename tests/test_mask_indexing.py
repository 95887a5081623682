"""Issue 12's remaining gaps against torch: boolean-mask indexing (read, write, gradients),
masked_select / nonzero / argwhere, cat/stack of mixed dtypes, numpy() of a tensor that requires
grad, writes into float16 tensors and views, and from_numpy of float64/int64.

Values are checked against NumPy (float64 where it computes), gradients against finite differences
and NumPy's scatter, semantics against torch where it is installed; each in eager, graph and check
mode, and inside gg.capture where it applies."""
from __future__ import annotations

import contextlib

import numpy as np
import pytest

import ggmlgrad as gg

MODES = ("eager", "graph", "check")


def _mode(mode: str):
    if mode == "eager":
        return gg.graph_mode(False)
    return gg.graph_mode(True, check=(mode == "check"))


@pytest.fixture(params=MODES)
def mode(request):
    with _mode(request.param):
        yield request.param


A = np.random.default_rng(12).standard_normal((3, 4)).astype(np.float32)

# (name, key for gg given the tensor, key for NumPy given the array): NumPy's rules are torch's here
READ_KEYS = {
    "full": (lambda x: x > 0, lambda a: a > 0),
    "rows": (lambda x: x[:, 0] > 0, lambda a: a[:, 0] > 0),
    "columns": (lambda x: (slice(None), x[0] > 0), lambda a: (slice(None), a[0] > 0)),
    "ellipsis": (lambda x: (Ellipsis, x[0] > 0), lambda a: (Ellipsis, a[0] > 0)),
    "none_slice": (lambda x: (None, x[:, 0] > 0, slice(1, None)), lambda a: (None, a[:, 0] > 0, slice(1, None))),
    "int_then_mask": (lambda x: (1, x[1] > 0), lambda a: (1, a[1] > 0)),
    "empty": (lambda x: x > 100, lambda a: a > 100),
    "list": (lambda x: [True, False, True], lambda a: [True, False, True]),
    "array": (lambda x: np.array([[True, False, False, True]] * 3), lambda a: np.array([[True, False, False, True]] * 3)),
    "zero_d": (lambda x: gg.tensor(True), lambda a: np.array(True)),
}


@pytest.mark.parametrize("name", sorted(READ_KEYS))
def test_mask_read_matches_numpy(mode, name):
    gkey, nkey = READ_KEYS[name]
    x = gg.tensor(A)
    y = x[gkey(x)]
    want = A[nkey(A)]
    assert y.shape == want.shape and y.dtype is gg.float32
    np.testing.assert_array_equal(y.numpy(), want)


def test_mask_read_of_int_and_bool_tensors_keeps_the_dtype(mode):
    i = gg.tensor(np.arange(6).reshape(2, 3))
    b = gg.tensor(A > 0)
    assert i[i > 2].dtype is gg.int32 and i[i > 2].tolist() == [3, 4, 5]
    assert b[b].dtype is gg.bool and b[b].numpy().all() and b[b].shape == (int((A > 0).sum()),)


def test_mask_read_gradient_scatters_back(mode):
    m = A > 0
    x = gg.tensor(A, requires_grad=True)
    w = np.arange(1.0, m.sum() + 1)
    (x[x > 0] * gg.tensor(w)).sum().backward()
    want = np.zeros_like(A, dtype=np.float64)
    want[m] = w                                    # d/dx of sum(x[m] * w): w at the selected places
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-6)
    x = gg.tensor(A, requires_grad=True)
    y = x * 2
    y.retain_grad()                                # a retained grad sees the gather's contribution
    (y[y > 0] ** 2).sum().backward()
    np.testing.assert_allclose(y.grad.numpy(), np.where(m, 2 * (2 * A.astype(np.float64)), 0), rtol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), np.where(m, 8 * A.astype(np.float64), 0), rtol=1e-6)
    mask = gg.tensor(m)
    assert gg.gradcheck(lambda t: (t[:, mask[0]] ** 2).sum() + t[mask].exp().sum(),
                        [gg.tensor(A, requires_grad=True)])


def test_mask_read_in_graph_mode_is_a_sync_point():
    with gg.graph_mode(True):
        x = gg.tensor(A)
        m = (x * 2) > 0                               # pending
        gg.reset_counters()
        y = x[m]
        assert gg.counters()["computes"] == 1         # the mask was read (one drain, like .item())
        np.testing.assert_array_equal(y.numpy(), A[A > 0])


# ---------------------------------------------------------------- writes
def _write_cases():
    def scalar(t, lib):
        t[t > 0] = 0.5
    def int_scalar(t, lib):
        t[t < 0] = 7
    def rows_tensor(t, lib):
        t[t[:, 0] > 0] = lib([1.0, 2.0, 3.0, 4.0])
    def per_element(t, lib):
        m = t > 0
        t[m] = lib(np.arange(float((A > 0).sum())))
    def iadd(t, lib):
        t[t > 0] += 1
    def columns(t, lib):
        t[:, t[0] > 0] = -1.0
    def index_list(t, lib):
        t[[0, 2]] = lib([[1.0], [2.0]])
    def through_view(t, lib):
        v = t[1]
        v[v > 0] = 9.0                                # reaches the base
    return {f.__name__: f for f in (scalar, int_scalar, rows_tensor, per_element, iadd, columns, index_list,
                                    through_view)}


WRITES = _write_cases()


@pytest.mark.parametrize("name", sorted(WRITES))
def test_mask_write_matches_numpy(mode, name):
    x = gg.tensor(A)
    a = A.astype(np.float64)
    WRITES[name](x, gg.tensor)
    WRITES[name](a, np.array)
    np.testing.assert_allclose(x.numpy(), a, rtol=1e-6)


def test_mask_write_into_int_bool_and_float16(mode):
    i = gg.tensor(np.arange(6).reshape(2, 3))
    i[i > 2] = 2.7                                     # the value is cast (truncated), as torch
    assert i.dtype is gg.int32 and i.tolist() == [[0, 1, 2], [2, 2, 2]]
    b = gg.tensor(A > 0)
    b[b] = False
    assert b.dtype is gg.bool and not b.numpy().any()
    h = gg.tensor(A).half()
    h[h.float() > 0] = gg.tensor([1 / 3])
    want = A.astype(np.float16)
    want[want > 0] = np.float16(1 / 3)
    assert h.dtype is gg.float16
    np.testing.assert_array_equal(h.numpy(), want)


def test_mask_write_gradients_match_numpy(mode):
    m = (2 * A)[:, 0] > 0
    v0 = np.array([0.5, -1.0, 2.0, 1.5], np.float32)
    x, v = gg.tensor(A, requires_grad=True), gg.tensor(v0, requires_grad=True)
    y = x * 2
    y[y[:, 0] > 0] = v * 3                             # rows replaced by a broadcast value
    (y * y).sum().backward()
    y64 = 2 * A.astype(np.float64)
    y64[m] = 3 * v0
    np.testing.assert_allclose(y.detach().numpy(), y64, rtol=1e-6)
    gx = 2 * 2 * y64 * ~m[:, None]                     # replaced rows pass no gradient to x
    gv = (2 * y64[m] * 3).sum(0)                       # each replaced row feeds v (broadcast: summed)
    np.testing.assert_allclose(x.grad.numpy(), gx, rtol=1e-5)
    np.testing.assert_allclose(v.grad.numpy(), gv, rtol=1e-5)


def test_mask_write_gradients_match_torch(mode):
    torch = pytest.importorskip("torch")
    got = []
    for lib, mk in ((gg, lambda a: gg.tensor(a, requires_grad=True)),
                    (torch, lambda a: torch.tensor(a, requires_grad=True))):
        x, v = mk(A), mk(A[0])
        y = x * 3                                      # (exp would save its output: both refuse the write)
        y[y > 1.5] = 0.25
        y[:, y[0] < 1] += v[:1] * 2
        (y * y).sum().backward()
        got.append((y.detach().numpy(), x.grad.numpy(), v.grad.numpy()))
    for g, t in zip(*got):
        np.testing.assert_allclose(g, t, rtol=1e-5, atol=1e-6)


MASK_ERRORS = {
    "mask_shape": (lambda x: x[gg.tensor([True, False])], IndexError, "boolean index"),
    "mask_after_int": (lambda x: x[0, gg.tensor([True, False, True])], IndexError, "boolean index"),
    "value_shape": (lambda x: x.__setitem__(x > 0, gg.ones(2)), RuntimeError, "shape mismatch"),
    "leaf": (lambda x: x.requires_grad_().__setitem__(x > 0, 1.0), RuntimeError, "leaf"),
    "index_range": (lambda x: x.__setitem__([0, 3], 1.0), IndexError, "out of bounds"),
    "masked_select_dtype": (lambda x: gg.masked_select(x, x), RuntimeError, "BoolTensor"),
}


@pytest.mark.parametrize("name", sorted(MASK_ERRORS))
def test_mask_errors_are_the_same_in_every_mode(name):
    fn, exc, text = MASK_ERRORS[name]
    for m in MODES:
        with _mode(m), pytest.raises(exc, match=text):
            fn(gg.tensor(A))


def test_data_dependent_shapes_are_a_capture_error_and_the_session_goes_on():
    mask_fns = {"getitem": lambda x: x[x > 0].sum(), "masked_select": lambda x: gg.masked_select(x, x > 0),
                "nonzero": lambda x: gg.nonzero(x), "argwhere": lambda x: x.argwhere(),
                "mask_input": lambda x, m: x[m]}
    for name, fn in mask_fns.items():
        f = gg.capture(fn)
        args = (A, gg.tensor(A > 0)) if name == "mask_input" else (A,)   # (a bool array arrives as float32)
        with pytest.raises(gg.CaptureError, match="data-dependent shape"):
            f(*args)
    np.testing.assert_allclose(gg.capture(lambda x: gg.where(x > 0, x, 0.0).sum())(A),
                               np.where(A > 0, A, 0).sum(), rtol=1e-6)


# ---------------------------------------------------------------- masked_select / nonzero / argwhere
def test_masked_select_broadcasts_and_passes_gradients(mode):
    row = A[0]
    x = gg.tensor(row, requires_grad=True)
    m = A > 0                                          # (3, 4) mask over a (4,) input: broadcast
    y = gg.masked_select(x, gg.tensor(m))
    np.testing.assert_array_equal(y.detach().numpy(), np.broadcast_to(row, m.shape)[m])
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), m.sum(0))   # each use of an element adds 1
    assert x.masked_select(gg.tensor(m)).shape == (int(m.sum()),)


@pytest.mark.parametrize("shape", [(3, 4), (5,), (2, 1, 3), ()])
def test_nonzero_and_argwhere_match_numpy(mode, shape):
    a = np.round(np.random.default_rng(1).standard_normal(shape)).astype(np.float32)
    x = gg.tensor(a)
    for got in (gg.nonzero(x), gg.argwhere(x), x.nonzero(), x.argwhere()):
        assert got.dtype is gg.int32
        np.testing.assert_array_equal(got.numpy(), np.argwhere(a))
        assert got.shape == np.argwhere(a).shape
    parts = gg.nonzero(x, as_tuple=True)
    want = np.nonzero(np.atleast_1d(a))
    assert len(parts) == len(want)
    for p, w in zip(parts, want):
        np.testing.assert_array_equal(p.numpy(), w)


def test_masked_select_and_nonzero_match_torch():
    torch = pytest.importorskip("torch")
    for a in (A, np.array(2.0, np.float32), np.zeros((2, 3), np.float32)):
        t, x = torch.tensor(a), gg.tensor(a)
        assert gg.nonzero(x).shape == tuple(torch.nonzero(t).shape)
        assert [p.shape for p in gg.nonzero(x, as_tuple=True)] == [tuple(p.shape) for p in torch.nonzero(t, as_tuple=True)]
        np.testing.assert_array_equal(gg.masked_select(x, x > 0).numpy(), torch.masked_select(t, t > 0).numpy())
        np.testing.assert_array_equal(x[x > 0].numpy(), t[t > 0].numpy())


# ---------------------------------------------------------------- cat / stack of mixed dtypes
def _join_inputs():
    f = np.array([1.5, -2.0], np.float32)
    return {"bool": f > 0, "int32": np.array([3, 4], np.int32), "float32": f,
            "float16": np.array([0.5, 2.0], np.float16)}


JOINS = [("bool", "bool"), ("bool", "float32"), ("bool", "int32"), ("int32", "float32"),
         ("float16", "float32"), ("float16", "float16"), ("bool", "int32", "float32")]
# torch's result_type for these, spelled out (bool < int < float; float16 with float32 is float32)
JOIN_DTYPES = {("bool", "bool"): "bool", ("bool", "float32"): "float32", ("bool", "int32"): "int32",
               ("int32", "float32"): "float32", ("float16", "float32"): "float32",
               ("float16", "float16"): "float16", ("bool", "int32", "float32"): "float32"}


@pytest.mark.parametrize("names", JOINS, ids=["-".join(j) for j in JOINS])
def test_cat_and_stack_promote_as_torch(mode, names):
    arrays = [_join_inputs()[n] for n in names]
    ts = [gg.tensor(a) for a in arrays]
    want_dtype = JOIN_DTYPES[names]
    for fn, ref in ((gg.cat, np.concatenate), (gg.concat, np.concatenate), (gg.concatenate, np.concatenate),
                    (gg.stack, np.stack)):
        got = fn(ts)
        assert got.dtype.name == want_dtype, fn.__name__
        np.testing.assert_array_equal(got.numpy().astype(np.float64), ref([a.astype(np.float64) for a in arrays]))
    assert gg.cat([t[None] for t in ts], axis=1).shape == (1, 2 * len(ts))
    assert gg.stack(ts, axis=1).shape == (2, len(ts))


def test_join_dtypes_are_torchs():
    torch = pytest.importorskip("torch")
    td = {"bool": torch.bool, "int32": torch.int32, "float32": torch.float32, "float16": torch.float16}
    for names, want in JOIN_DTYPES.items():
        tt = [torch.tensor(_join_inputs()[n]).to(td[n]) for n in names]
        assert torch.cat(tt).dtype == td[want] and torch.stack(tt).dtype == td[want], names


# ---------------------------------------------------------------- numpy() of a tensor that requires grad
def test_numpy_of_a_tensor_that_requires_grad_raises_as_torch(mode):
    p = gg.tensor(A, requires_grad=True)
    y = p * 2
    for t in (p, y):
        with pytest.raises(RuntimeError, match=r"Can't call numpy\(\) on Tensor that requires grad\. Use "
                                               r"tensor\.detach\(\)\.numpy\(\) instead\."):
            t.numpy()
    np.testing.assert_array_equal(y.detach().numpy(), 2 * A)
    np.testing.assert_array_equal(p.numpy(force=True), A)
    with gg.no_grad():
        np.testing.assert_array_equal((p * 3).numpy(), 3 * A)   # no_grad results do not require grad


def test_numpy_rule_is_torchs():
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError, match="Can't call numpy"):
        torch.ones(2, requires_grad=True).numpy()


def test_modules_optimizers_io_and_data_read_parameters(tmp_path):
    model = gg.nn.Linear(3, 2)
    opt = gg.optim.Adam(model.parameters(), lr=0.1)
    step = gg.capture_step(lambda xb: (model(xb) ** 2).mean(), opt)
    step(A[:, :3])
    gg.save(model.state_dict(), str(tmp_path / "m.safetensors"))
    loaded = gg.load(str(tmp_path / "m.safetensors"))
    np.testing.assert_array_equal(loaded["weight"].numpy(), model.weight.detach().numpy())
    ds = gg.data.TensorDataset(model.weight, gg.tensor([0, 1]))      # a tensor that requires grad
    (xb, yb), = list(gg.data.DataLoader(ds, batch_size=2))
    np.testing.assert_array_equal(xb.numpy(), model.weight.detach().numpy())


# ---------------------------------------------------------------- float16 writes
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_writes_into_half_tensors_and_their_views(mode, dtype):
    d = getattr(gg, dtype)
    x = gg.tensor(A).to(d)
    ref = gg.tensor(A).to(d).float().numpy().astype(np.float64)   # the stored values
    rnd = lambda v: gg.tensor(np.asarray(v, np.float32)).to(d).float().numpy()   # noqa: E731  storage rounding
    v = x[1]
    v[1] = 2.1
    ref[1, 1] = rnd(2.1)
    x[0, ::2] = 1 / 7
    ref[0, ::2] = rnd(1 / 7)
    x.T[3] = gg.tensor([0.3, 0.6, 0.9]).to(d)
    ref[:, 3] = rnd([0.3, 0.6, 0.9])
    x[:, 1:3].copy_(gg.tensor([[5.0, 6.0]]).to(d))
    ref[:, 1:3] = [5.0, 6.0]
    v.fill_(-0.125)
    ref[1] = -0.125
    assert x.dtype is d
    np.testing.assert_array_equal(x.float().numpy(), ref)
    np.testing.assert_array_equal(v.float().numpy(), ref[1])
    if dtype == "float16":                           # NumPy's own float16 rounding agrees
        np.testing.assert_array_equal(rnd([2.1, 1 / 7, 0.3]), np.array([2.1, 1 / 7, 0.3], np.float16))


def test_half_writes_match_torch():
    torch = pytest.importorskip("torch")
    for d, td in ((gg.float16, torch.float16), (gg.bfloat16, torch.bfloat16)):
        x, t = gg.tensor(A).to(d), torch.tensor(A).to(td)
        for obj in (x, t):
            row = obj[2]
            row[::3] = 1 / 3
            obj[0] = 2.2
        np.testing.assert_array_equal(x.float().numpy(), t.float().numpy())


# ---------------------------------------------------------------- from_numpy of float64 / int64
@pytest.mark.parametrize("dt,narrow", [(np.float64, "float32"), (np.int64, "int32")])
def test_from_numpy_of_wide_dtypes_names_the_rule_and_the_copy(dt, narrow):
    a = np.arange(3).astype(dt)
    with pytest.raises(TypeError) as info:
        gg.from_numpy(a)
    msg = str(info.value)
    assert f"{np.dtype(dt).name} means {narrow}" in msg and "gg.tensor(a)" in msg and "gg.as_tensor(a)" in msg
    t = gg.as_tensor(a)                               # the copying alternatives
    assert t.dtype.name == narrow and t.tolist() == a.tolist()
    a[0] = 7
    assert t.tolist()[0] == 0 and gg.tensor(a).tolist()[0] == 7
