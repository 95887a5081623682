"""Views alias their base (issue 12, items 2 and 3): writes through a view reach the base and the
other way round; stride()/storage_offset()/is_contiguous()/data_ptr() as torch reports them;
autograd through in-place writes on views as torch computes it (or torch's error); ``.data``.

References: NumPy views (exact aliasing semantics for values, strides and offsets), finite
differences in float64 for gradients, and torch (when installed) for layouts, errors and gradients.
"""
from __future__ import annotations

import numpy as np
import pytest

import ggmlgrad as gg

BASE = (np.arange(24, dtype=np.float64).reshape(2, 3, 4) - 11.5) / 4


@pytest.fixture(params=["eager", "graph", "check"])
def mode(request):
    with gg.graph_mode(request.param != "eager", check=request.param == "check"):
        yield request.param


# name -> (view of x, in gg/torch spelling; the same view of a NumPy array, or None: NumPy has no view)
VIEWS = {
    "int": (lambda x: x[1], lambda a: a[1]),
    "int_int": (lambda x: x[1, 2], lambda a: a[1, 2]),
    "slices": (lambda x: x[:, 1:, ::2], lambda a: a[:, 1:, ::2]),
    "none_ellipsis": (lambda x: x[None, ..., 1], lambda a: a[None, ..., 1]),
    "chained_index": (lambda x: x[1][:, 1:3][0], lambda a: a[1][:, 1:3][0]),
    "view": (lambda x: x.view(6, 4), lambda a: a.reshape(6, 4)),
    "view_minus1": (lambda x: x.view(-1), lambda a: a.reshape(-1)),
    "reshape": (lambda x: x.reshape(3, 8), lambda a: a.reshape(3, 8)),
    "flatten": (lambda x: x.flatten(1), lambda a: a.reshape(2, 12)),
    "unsqueeze": (lambda x: x.unsqueeze(1), lambda a: a[:, None]),
    "squeeze": (lambda x: x[:, :1].squeeze(1), lambda a: a[:, 0]),
    "transpose": (lambda x: x.transpose(0, 2), lambda a: a.transpose(2, 1, 0)),
    "permute": (lambda x: x.permute(1, 2, 0), lambda a: a.transpose(1, 2, 0)),
    "T_of_2d": (lambda x: x[0].T, lambda a: a[0].T),
    "t": (lambda x: x[1].t(), lambda a: a[1].T),
    "mT": (lambda x: x.mT, lambda a: np.swapaxes(a, 1, 2)),
    "narrow": (lambda x: x.narrow(2, 1, 2), lambda a: a[:, :, 1:3]),
    "select": (lambda x: x.select(1, -1), lambda a: a[:, -1]),
    "split": (lambda x: x.split(2, dim=2)[1], lambda a: a[:, :, 2:4]),
    "chunk": (lambda x: x.chunk(3, dim=1)[2], lambda a: a[:, 2:3]),
    "unbind": (lambda x: x.unbind(1)[1], lambda a: a[:, 1]),
    "movedim": (lambda x: x.movedim(0, 2), lambda a: np.moveaxis(a, 0, 2)),
    "transpose_then_slice": (lambda x: x.transpose(1, 2)[:, 1:3], lambda a: a.transpose(0, 2, 1)[:, 1:3]),
    "slice_then_view": (lambda x: x[1].view(12)[3:9], lambda a: a[1].reshape(12)[3:9]),
    "view_of_transpose": (lambda x: x.transpose(0, 1).view(3, 2, 2, 2), lambda a: a.transpose(1, 0, 2).reshape(3, 2, 2, 2)),
    "function_forms": (lambda x: gg_or_torch(x).narrow(gg_or_torch(x).squeeze(gg_or_torch(x).unsqueeze(x, 0), 0),
                                                         2, 1, 2), lambda a: a[:, :, 1:3]),
    "function_split": (lambda x: gg_or_torch(x).split(gg_or_torch(x).swapaxes(x, 0, 2), 2, 0)[1],
                       lambda a: a.transpose(2, 1, 0)[2:4]),
    "empty_slice": (lambda x: x[:, 2:2, 1:], lambda a: a[:, 2:2, 1:]),
    "expand": (lambda x: x[:, :1].expand(2, 3, 4), lambda a: np.broadcast_to(a[:, :1], (2, 3, 4))),
}
WRITABLE = [k for k in VIEWS if k != "expand"]


def gg_or_torch(x):
    """The module whose function forms (``lib.narrow(x, ...)``) apply to ``x``."""
    return gg if isinstance(x, gg.Tensor) else __import__("torch")


def _np_offset(v: np.ndarray, a: np.ndarray) -> int:
    return (v.__array_interface__["data"][0] - a.__array_interface__["data"][0]) // a.itemsize


@pytest.mark.parametrize("kind", WRITABLE)
def test_write_through_the_view_reaches_the_base(kind, mode):
    make, make_np = VIEWS[kind]
    x = gg.tensor(BASE)
    v = make(x)
    v.mul_(-2.0).add_(1.0)
    a = BASE.copy()
    nv = make_np(a)
    nv *= -2.0
    nv += 1.0
    np.testing.assert_allclose(x.numpy(), a, rtol=1e-6)
    np.testing.assert_allclose(v.numpy(), nv, rtol=1e-6)


@pytest.mark.parametrize("kind", list(VIEWS))
def test_write_to_the_base_reaches_the_view(kind, mode):
    make, make_np = VIEWS[kind]
    x = gg.tensor(BASE)
    v = make(x)
    x.mul_(3.0)
    x[0, 1] = 7.0
    a = BASE.copy()
    nv = make_np(a)
    a *= 3.0
    a[0, 1] = 7.0
    np.testing.assert_allclose(v.numpy(), nv, rtol=1e-6)


@pytest.mark.parametrize("kind", WRITABLE)
def test_write_through_one_view_reaches_the_others(kind, mode):
    make, make_np = VIEWS[kind]
    x = gg.tensor(BASE)
    v, flat = make(x), x.view(-1)
    a = BASE.copy()
    nv, nflat = make_np(a), a.reshape(-1)
    v.fill_(2.5)                   # a write with no operand
    nv[...] = 2.5
    flat[5:9] = -1.0               # setitem on another view
    nflat[5:9] = -1.0
    np.testing.assert_allclose(v.numpy(), nv)
    np.testing.assert_allclose(x.numpy(), a)


@pytest.mark.parametrize("kind", list(VIEWS))
def test_layout_matches_numpy(kind):
    make, make_np = VIEWS[kind]
    x = gg.tensor(BASE.astype(np.float32))
    v = make(x)
    a = BASE.astype(np.float32)
    nv = make_np(a)
    assert v.shape == nv.shape
    empty = nv.size == 0                  # NumPy leaves an empty slice's offset out; torch (and we) count it
    assert empty or v.storage_offset() == _np_offset(nv, a)
    # NumPy's strides of size-1 dims are arbitrary: compare the others
    got = [s for s, n in zip(v.stride(), v.shape) if n > 1]
    want = [s // a.itemsize for s, n in zip(nv.strides, nv.shape) if n > 1]
    assert got == want
    assert v.is_contiguous() == nv.flags.c_contiguous
    assert v.data_ptr() - x.data_ptr() == _np_offset(nv, a) * 4 if not empty else v.data_ptr() == 0


@pytest.mark.parametrize("kind", list(VIEWS))
def test_layout_matches_torch(kind, mode):
    torch = pytest.importorskip("torch")
    make, _ = VIEWS[kind]
    x, tx = gg.tensor(BASE), torch.tensor(BASE, dtype=torch.float32)
    got, want = make(x), make(tx)
    assert got.stride() == want.stride()
    assert got.storage_offset() == want.storage_offset()
    assert got.is_contiguous() == want.is_contiguous()
    if want.numel():
        assert got.data_ptr() - x.data_ptr() == want.data_ptr() - tx.data_ptr()
    else:
        assert got.data_ptr() == want.data_ptr() == 0
    c = got.contiguous()
    assert (c is got) == want.is_contiguous()
    assert c.is_contiguous() and c.stride() == want.contiguous().stride()


def test_plain_tensors_have_the_contiguous_layout():
    x = gg.zeros(2, 3, 4)
    assert x.stride() == (12, 4, 1) and x.stride(1) == 4 and x.storage_offset() == 0 and x.is_contiguous()
    assert x.contiguous() is x
    y = x + 1
    assert y.data_ptr() != x.data_ptr()


def test_contiguous_copy_does_not_alias(mode):
    x = gg.tensor(BASE)
    c = x.transpose(0, 1).contiguous()
    c.fill_(0.0)
    np.testing.assert_allclose(x.numpy(), BASE, rtol=1e-6)


def test_reshape_copies_where_view_raises(mode):
    x = gg.tensor(BASE)
    t = x.transpose(1, 2)
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        t.view(-1)
    r = t.reshape(-1)              # a copy, as in torch: writes do not reach x
    r.fill_(0.0)
    f = t.flatten()
    f.add_(1.0)
    np.testing.assert_allclose(x.numpy(), BASE, rtol=1e-6)
    np.testing.assert_allclose(f.numpy(), BASE.transpose(0, 2, 1).reshape(-1) + 1, rtol=1e-6)
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        x.transpose(0, 1).view_as(gg.zeros(24))


def test_reshape_copies_where_view_raises_in_torch_too():
    torch = pytest.importorskip("torch")
    x = torch.tensor(BASE)
    t = x.transpose(1, 2)
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        t.view(-1)
    t.reshape(-1).fill_(0.0)
    t.flatten().add_(1.0)
    np.testing.assert_allclose(x.numpy(), BASE)


def test_expanded_view_takes_fills_and_refuses_other_writes(mode):
    for lib in _libs():
        x = _t(lib, [[1.0], [2.0]])
        e = x.expand(2, 3)
        e.fill_(4.0)
        assert _np(x).tolist() == [[4.0], [4.0]], lib.__name__
        for write in (lambda: e.add_(1.0), lambda: e.copy_(e * 0 + 1), lambda: e.__setitem__(0, 1.0)):
            with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
                write()
        assert _np(x).tolist() == [[4.0], [4.0]], lib.__name__
    x = gg.tensor([[1.0], [2.0]])
    with pytest.raises(RuntimeError, match="view of an expanded tensor"):
        x.expand(2, 3)[:, 2].fill_(5.0)       # torch writes x here: a clear error rather than a lost write
    assert x.tolist() == [[1.0], [2.0]]


def test_dead_views_do_not_pile_up():
    x = gg.zeros(3, 4)
    for i in range(200):
        v = x[i % 3]
        v.add_(1.0)
    assert len(x._vcell[1].refs) <= 16     # entries of dead views are pruned as the table grows
    counts = np.array([len(range(r, 200, 3)) for r in range(3)], np.float64)
    np.testing.assert_allclose(x.numpy(), np.broadcast_to(counts[:, None], (3, 4)))


def test_negative_steps_stay_refused():
    x = gg.tensor(BASE)
    with pytest.raises(ValueError, match="negative"):
        x[::-1]


# ---------------------------------------------------------------------------- autograd
def _libs():
    libs = [gg]
    try:
        import torch
        libs.append(torch)
    except ImportError:
        pass
    return libs


def _t(lib, a, requires_grad=False):
    if lib is gg:
        return gg.tensor(np.asarray(a, np.float32), requires_grad=requires_grad)
    import torch
    return torch.tensor(np.asarray(a, np.float32), requires_grad=requires_grad)


def _np(t):
    return t.detach().numpy() if hasattr(t, "detach") else np.asarray(t)


W = np.array([[0.5, -1.5, 2.0], [1.0, 3.0, -0.5]])
U = np.array([2.0, -1.0])


def _inplace_on_view_of_nonleaf(lib, w, u):
    b = w * 2.0
    b[0].mul_(3.0)                       # the first row scaled in place through a view
    b.T[1].add_(u)                       # the second column gets u through a transposed view
    return (b * b).sum() + b[1, 2]


def _inplace_on_view_then_view_read(lib, w, u):
    b = w * w + 1.0
    row = b[1]
    b.view(-1)[:2].copy_(u * u)          # write through one view ...
    return (row * w[0]).sum() + b.sum()  # ... read through another, taken before it


def _write_to_base_then_view_read(lib, w, u):
    b = w * 1.0
    col = b[:, 2]
    b.mul_(w)                            # the base changes: the view follows (and its gradient)
    return (col * col).sum() + (b[:, 0] * u).sum()


def _view_written_by_a_tensor_that_requires_grad(lib, w, u):
    b = lib.zeros(2, 3)                  # does not require grad: the write makes it
    b[:, 1].copy_(u * 2.0)
    b.narrow(1, 2, 1).mul_(w[:, :1])
    return (b * b).sum() + (b * w).sum()


def _augmented_assignment_on_an_index(lib, w, u):
    b = w * 2.0
    b[0] += u[0]                         # Python: tmp = b[0]; tmp += u[0]; b[0] = tmp
    b[:, 1] *= 3.0
    return (b * b).sum()


def _setitem_on_the_tape(lib, w, u):
    b = w * 1.0
    b[0, 1:] = u                         # a value that requires grad into a non-leaf
    b[1] = 3.0                           # a number into a tensor that requires grad
    z = lib.zeros(2, 3)
    z[:, 0] = u * 2.0                    # a value that requires grad into a tensor that does not
    return (b * b).sum() + (z * w).sum()


GRAD_CASES = {
    "setitem_on_the_tape": _setitem_on_the_tape,
    "augmented_assignment_on_an_index": _augmented_assignment_on_an_index,
    "inplace_on_view_of_nonleaf": _inplace_on_view_of_nonleaf,
    "inplace_on_view_then_view_read": _inplace_on_view_then_view_read,
    "write_to_base_then_view_read": _write_to_base_then_view_read,
    "view_written_by_a_tensor_that_requires_grad": _view_written_by_a_tensor_that_requires_grad,
}


def _loss(case, w, u):
    with gg.no_grad():
        return float(GRAD_CASES[case](gg, gg.tensor(w.astype(np.float32)), gg.tensor(u.astype(np.float32))).item())


def _finite_differences(case, arr, other, first: bool, eps=1e-2):
    g = np.zeros_like(arr)
    for i in np.ndindex(arr.shape):
        hi, lo = arr.copy(), arr.copy()
        hi[i] += eps
        lo[i] -= eps
        fh = _loss(case, hi, other) if first else _loss(case, other, hi)
        fl = _loss(case, lo, other) if first else _loss(case, other, lo)
        g[i] = (fh - fl) / (2 * eps)
    return g


@pytest.mark.parametrize("case", sorted(GRAD_CASES))
def test_gradients_through_inplace_views_match_finite_differences(case, mode):
    w, u = gg.tensor(W, requires_grad=True), gg.tensor(U, requires_grad=True)
    GRAD_CASES[case](gg, w, u).backward()
    np.testing.assert_allclose(w.grad.numpy(), _finite_differences(case, W, U, True), rtol=2e-2, atol=2e-2)
    np.testing.assert_allclose(u.grad.numpy(), _finite_differences(case, U, W, False), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("case", sorted(GRAD_CASES))
def test_gradients_through_inplace_views_match_torch(case, mode):
    torch = pytest.importorskip("torch")
    got = []
    for lib in (gg, torch):
        w, u = _t(lib, W, True), _t(lib, U, True)
        loss = GRAD_CASES[case](lib, w, u)
        loss.backward()
        got.append((float(loss.item()), _np(w.grad), _np(u.grad)))
    (lg, wg, ug), (lt, wt, ut) = got
    np.testing.assert_allclose(lg, lt, rtol=1e-5)
    np.testing.assert_allclose(wg, wt, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ug, ut, rtol=1e-5, atol=1e-5)


def _view_of_leaf(lib):
    w = _t(lib, W, True)
    w[0].add_(1.0)


def _view_of_leaf_reshape(lib):
    w = _t(lib, W, True)
    w.view(-1).mul_(2.0)


def _split_output(lib):
    b = _t(lib, W, True) * 1.0
    b.split(1)[0].add_(1.0)


def _unbind_output(lib):
    b = _t(lib, W, True) * 1.0
    b.unbind(1)[0].add_(1.0)


def _view_made_without_grad(lib):
    b = _t(lib, W, True) * 1.0
    with lib.no_grad():
        v = b[0]
    v.add_(1.0)


def _saved_view_then_base_write(lib):
    b = _t(lib, W, True) * 1.0
    v = b[0]
    y = (v * v).sum()                 # saves v
    b.add_(1.0)                       # bumps the shared version
    y.backward()


def _saved_base_then_view_write(lib):
    b = _t(lib, W, True).exp()        # exp saves its output
    b[1].mul_(2.0)
    b.sum().backward()


def _setitem_into_a_leaf(lib):
    w = _t(lib, W, True)
    w[0] = 1.0


ERROR_CASES = {
    "setitem_into_a_leaf": (_setitem_into_a_leaf, "leaf Variable that requires grad"),
    "view_of_leaf": (_view_of_leaf, "view of a leaf Variable"),
    "view_of_leaf_reshape": (_view_of_leaf_reshape, "view of a leaf Variable"),
    "split_output": (_split_output, "returns multiple views"),
    "unbind_output": (_unbind_output, "returns multiple views"),
    "view_made_without_grad": (_view_made_without_grad, "no_grad mode"),
    "saved_view_then_base_write": (_saved_view_then_base_write, "modified"),
    "saved_base_then_view_write": (_saved_base_then_view_write, "modified"),
}


@pytest.mark.parametrize("case", sorted(ERROR_CASES))
def test_autograd_errors_of_inplace_views(case, mode):
    fn, msg = ERROR_CASES[case]
    with pytest.raises(RuntimeError, match=msg):
        fn(gg)


@pytest.mark.parametrize("case", sorted(ERROR_CASES))
def test_torch_raises_the_same_autograd_errors(case):
    torch = pytest.importorskip("torch")
    fn, _ = ERROR_CASES[case]
    with pytest.raises(RuntimeError):
        fn(torch)


def test_split_views_are_writable_without_grad(mode):
    x = gg.tensor(BASE)
    for i, piece in enumerate(x.split(1, dim=1)):
        piece.fill_(float(i))
    for i, row in enumerate(x):     # iteration yields views (torch: unbind)
        row[0, 0] = -1.0 - i
    want = np.broadcast_to(np.arange(3.0)[None, :, None], BASE.shape).copy()
    want[:, 0, 0] = [-1.0, -2.0]
    np.testing.assert_allclose(x.numpy(), want)


def test_out_of_place_gradients_through_views_are_unchanged(mode):
    w = gg.tensor(W, requires_grad=True)
    (w[0] * 2 + w.reshape(6)[:3] + w.T[:, 0] + w.unsqueeze(0).expand(2, 2, 3)[1, 1]).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), [[4.0, 4.0, 4.0], [1.0, 1.0, 1.0]])


# ---------------------------------------------------------------------------- .data
def test_data_is_a_detached_alias(mode):
    p = gg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    tp = gg.tensor([0.0, 0.0, 6.0], requires_grad=True)
    d = p.data
    assert not d.requires_grad and d.grad_fn is None and d.data_ptr() == p.data_ptr()
    tau = 0.25
    tp.data.copy_(tau * p.data + (1 - tau) * tp.data)          # the soft-update idiom
    np.testing.assert_allclose(tp.detach().numpy(), [0.25, 0.5, 3.0 * 0.25 + 4.5])
    row = p[1:]                                               # a view of p (made with grad on)
    d[1:].mul_(10.0)                                          # a view of the alias: p and its view see it
    np.testing.assert_allclose(p.detach().numpy(), [1.0, 20.0, 30.0])
    np.testing.assert_allclose(row.detach().numpy(), [20.0, 30.0])
    with gg.no_grad():
        p[0] -= 1.0                                           # a manual update through a view
    np.testing.assert_allclose(p.detach().numpy(), [0.0, 20.0, 30.0])
    assert p.is_leaf and p.requires_grad


def test_data_writes_have_their_own_version_counter_as_in_torch():
    for lib in _libs():
        p = _t(lib, [1.0, 2.0], True)
        y = (p * p).sum()                 # saves p
        p.data.mul_(2.0)                  # torch's .data: not seen by the saved-tensor check
        y.backward()
        assert _np(p.grad).tolist() == [4.0, 8.0], lib.__name__


def test_data_setter_detaches_old_views(mode):
    x = gg.tensor([1.0, 2.0, 3.0])
    v = x[1:]
    x.data = gg.tensor([7.0, 8.0, 9.0])
    x.add_(1.0)
    np.testing.assert_allclose(v.numpy(), [2.0, 3.0])          # torch: the view keeps the old storage
    np.testing.assert_allclose(x.numpy(), [8.0, 9.0, 10.0])


def test_detached_view_is_the_same_view(mode):
    x = gg.tensor(BASE)
    d = x[0].detach()
    d.fill_(7.0)
    want = BASE.copy()
    want[0] = 7.0
    np.testing.assert_allclose(x.numpy(), want)
    x.zero_()
    assert d.numpy().tolist() == np.zeros((3, 4)).tolist()


def test_copy_from_host_through_a_view(mode):
    x = gg.tensor(BASE)
    v = x[:, 1]
    x.T[2].copy_(np.ones((3, 2)))            # a host array into a view
    x.copy_(np.full(BASE.shape, 2.0))        # a host array into the base: its views follow
    np.testing.assert_allclose(v.numpy(), np.full((2, 4), 2.0))


# ---------------------------------------------------------------------------- capture
def test_capture_reads_views_and_refuses_writes_through_them():
    @gg.capture
    def read(x):
        return x.T[1] * 2 + x.view(-1)[:2].sum()

    for k in range(2):
        a = (np.arange(6.0, dtype=np.float32).reshape(2, 3) + k)
        np.testing.assert_allclose(np.asarray(read(a)), a.T[1] * 2 + a.reshape(-1)[:2].sum())

    base = gg.tensor([1.0, 2.0, 3.0])

    @gg.capture
    def write(x):
        base[1:].add_(x)                     # a write through a view, recorded: the base follows per call
        return base * 1

    for k in range(1, 3):
        np.testing.assert_array_equal(write(np.ones(2, np.float32)), [1.0, 2.0 + k, 3.0 + k])
    assert base.tolist() == [1.0, 4.0, 5.0]


def test_views_of_parameters_follow_an_optimizer_step(mode):
    for lib in _libs():
        lin = lib.nn.Linear(3, 2)
        with lib.no_grad():
            lin.weight.copy_(_t(lib, W))
            lin.bias.zero_()
        opt = lib.optim.SGD(lin.parameters(), lr=0.5)
        row, col = lin.weight[0], lin.weight.T[2]
        lin(_t(lib, [[1.0, 2.0, 3.0]])).sum().backward()
        opt.step()
        want = W - 0.5 * np.array([[1.0, 2.0, 3.0]] * 2)
        np.testing.assert_allclose(_np(row), want[0], rtol=1e-6, err_msg=lib.__name__)
        np.testing.assert_allclose(_np(col), want[:, 2], rtol=1e-6, err_msg=lib.__name__)


def test_views_of_parameters_follow_load_state_dict(mode):
    lin = gg.nn.Linear(3, 2)
    row = lin.weight[1]
    lin.load_state_dict({"weight": gg.tensor(W), "bias": gg.zeros(2)})
    np.testing.assert_allclose(row.detach().numpy(), W[1].astype(np.float32))


def test_int_views_alias_and_copy(mode):
    x = gg.tensor(np.arange(6).reshape(2, 3), dtype=gg.int32)
    x[0].add_(5)
    x.T[2].mul_(2)
    c = x.T.contiguous()
    c.fill_(0)
    want = np.arange(6).reshape(2, 3)
    want[0] += 5
    want[:, 2] *= 2
    assert x.tolist() == want.tolist() and c.dtype is gg.int32


def test_a_write_through_a_view_is_one_compute_like_a_write_to_the_base(mode):
    x = gg.tensor(BASE)
    views_of_x = [x[0], x.T, x.view(-1)]                  # live views: each is refreshed by the write
    views_of_x[0].numpy()                                # a sync point: nothing left queued
    before = gg.counters()["computes"]
    views_of_x[0].add_(1.0)
    assert gg.counters()["computes"] - before == 1       # the write and the refreshes: one graph
    a = BASE.copy()
    a[0] += 1.0
    np.testing.assert_allclose(views_of_x[2].numpy(), a.reshape(-1), rtol=1e-6)
    np.testing.assert_allclose(views_of_x[1].numpy(), a.T, rtol=1e-6)
