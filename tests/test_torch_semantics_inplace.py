"""PyTorch semantics (issue 12): in-place operators, ``.data``, dtype spellings, small divergences.

Every scenario is one snippet written against a library namespace (``gg`` or ``torch``). It runs
in ggmlgrad in eager, graph and check mode against an explicit NumPy float64 reference (value or
error type), and, where torch is installed, in torch too: same values, same error types.
"""
from __future__ import annotations

import collections

import numpy as np
import pytest

import ggmlgrad as gg
from ggmlgrad.engine import dtypes

MODES = {"eager": dict(on=False), "graph": dict(on=True, check=False), "check": dict(on=True, check=True)}


@pytest.fixture(params=list(MODES))
def mode(request):
    """eager, graph and check mode (the same program must give the same values and errors)."""
    m = MODES[request.param]
    with gg.graph_mode(m["on"], check=m.get("check")):
        yield request.param


def _np(x):
    """A snippet's result as NumPy (tensors of either library, tuples, bools, numbers)."""
    if isinstance(x, (tuple, list)):
        return tuple(_np(v) for v in x)
    if isinstance(x, gg.Tensor):
        return x.numpy().astype(np.float64)
    if type(x).__module__.startswith("torch"):
        return x.detach().double().numpy()
    return np.asarray(x, dtype=np.float64)


def _outcome(snippet, lib):
    try:
        return ("value", _np(snippet(lib)))
    except Exception as e:  # noqa: BLE001  (the error type is the result)
        return ("raises", type(e))


def _assert_same(got, want, what: str) -> None:
    assert got[0] == want[0], f"{what}: {got} vs {want}"
    if got[0] == "raises":
        assert issubclass(got[1], want[1]) or issubclass(want[1], got[1]), f"{what}: {got[1]} vs {want[1]}"
        return
    g, w = got[1], want[1]
    if not isinstance(w, tuple):
        g, w = (g,), (w,)
    assert len(g) == len(w), what
    for a, b in zip(g, w):
        assert np.shape(a) == np.shape(b), f"{what}: shape {np.shape(a)} vs {np.shape(b)}"
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5, err_msg=what)


# ---------------------------------------------------------------------------- the snippets
A = np.array([[-7.0, 5.5, 3.0], [4.0, -2.5, 9.0]])
B = np.array([2.0, -3.0, 4.0])
POS = np.abs(A) + 0.5
OPS = {"+=": (lambda a, b: a.__iadd__(b), np.add), "-=": (lambda a, b: a.__isub__(b), np.subtract),
       "*=": (lambda a, b: a.__imul__(b), np.multiply), "/=": (lambda a, b: a.__itruediv__(b), np.divide),
       "**=": (lambda a, b: a.__ipow__(b), np.power), "//=": (lambda a, b: a.__ifloordiv__(b), np.floor_divide),
       "%=": (lambda a, b: a.__imod__(b), np.mod)}


def _f32(lib, x, **kw):
    return lib.tensor(np.asarray(x, np.float32), **kw)


def _i32(lib, x):
    return lib.tensor(np.asarray(x, np.int32))


def _inplace_op(sym: str, operand: str):
    apply, _ = OPS[sym]

    def snippet(lib):
        a = _f32(lib, POS if sym == "**=" else A)
        alias = a.detach()          # shares a's memory: sees the write
        same = a
        b = {"tensor": _f32(lib, B if sym != "**=" else np.abs(B)), "scalar": 2.0, "int": 3}[operand]
        out = apply(a, b)
        if out is not same:
            raise AssertionError("in-place operator returned another tensor")
        return a, alias

    base = POS if sym == "**=" else A
    other = {"tensor": B if sym != "**=" else np.abs(B), "scalar": 2.0, "int": 3}[operand]
    r = OPS[sym][1](base, other)
    return snippet, (r, r)


def _sgd_by_hand(lib):
    p = _f32(lib, [1.0, -2.0, 3.0], requires_grad=True)
    (p * p).sum().backward()
    with lib.no_grad():
        p -= 0.1 * p.grad
        p *= 2
    return p.detach()


def _leaf_requires_grad(lib):
    p = _f32(lib, [1.0, 2.0], requires_grad=True)
    p += 1
    return p


def _nonleaf_inplace_grad(lib):
    x = _f32(lib, [1.0, 2.0, 3.0], requires_grad=True)
    w = _f32(lib, [2.0, -1.0, 0.5], requires_grad=True)
    y = x * 3
    y *= w
    y -= x
    y.sum().backward()
    return x.grad, w.grad, y.detach()


def _buffer_takes_grad(lib):
    w = _f32(lib, [1.0, -2.0, 3.0], requires_grad=True)
    buf = lib.zeros(3)
    buf += w * 2
    (buf * buf).sum().backward()
    return w.grad, buf.requires_grad, buf.is_leaf


def _saved_input_modified(lib):
    x = _f32(lib, [1.0, 2.0], requires_grad=True)
    y = x * 2
    z = y * y
    y += 1
    z.sum().backward()
    return x.grad


def _saved_output_modified(lib):
    x = _f32(lib, [1.0, 2.0], requires_grad=True)
    y = x.exp()
    y += 1
    y.sum().backward()
    return x.grad


def _pow_inplace_grad(lib):
    x = _f32(lib, [1.0, 2.0, 0.5], requires_grad=True)
    w = _f32(lib, [2.0, 1.5, 3.0], requires_grad=True)
    y = x * 3
    y **= w
    y.sum().backward()
    return x.grad, w.grad


def _shape_would_grow(lib):
    a = _f32(lib, [1.0, 2.0, 3.0])
    a += _f32(lib, np.ones((2, 3)))
    return a


def _int_plus_float(lib):
    i = _i32(lib, [1, 2, 3])
    i += 1.5
    return i


def _int_plus_float_tensor(lib):
    i = _i32(lib, [1, 2, 3])
    i += _f32(lib, [1.0, 1.0, 1.0])
    return i


def _int_true_div(lib):
    i = _i32(lib, [2, 4, 6])
    i /= 2
    return i


def _int_closed_ops(lib):
    i = _i32(lib, [1, -2, 3])
    i *= 3
    i += _i32(lib, [1, 1, 1])
    i **= 2
    i //= 4
    i %= 5
    return i


def _float_plus_int(lib):
    f = _f32(lib, [0.5, 1.5, 2.5])
    f += _i32(lib, [1, 2, 3])
    return f


def _int_negative_power(lib):
    return _i32(lib, [1, 2]) ** -1


def _imatmul_rebinds(lib):
    a = lib.ones(2, 3)
    b = a
    a @= _f32(lib, np.arange(6.0).reshape(3, 2))
    return a, b


def _add_sub_alpha(lib):
    a = _f32(lib, A)
    a.add_(_f32(lib, B), alpha=2)
    a.sub_(1.0, alpha=0.5)
    return a


def _copy_passes_grad(lib):
    w = _f32(lib, [1.0, -2.0, 3.0], requires_grad=True)
    buf = lib.zeros(2, 3)
    buf.copy_(w)
    (buf * 3).sum().backward()
    return w.grad, buf.detach()


def _data_is_an_alias(lib):
    p = _f32(lib, [1.0, 2.0], requires_grad=True)
    d = p.data
    d.mul_(2)
    d += 1
    return p.detach(), d.requires_grad, p.requires_grad


def _soft_update(lib):
    p = _f32(lib, [1.0, 2.0, 3.0], requires_grad=True)
    tp = _f32(lib, [0.0, 0.0, 6.0], requires_grad=True)
    tau = 0.25
    tp.data.copy_(tau * p.data + (1 - tau) * tp.data)
    return tp.detach()


def _data_setter_shares(lib):
    a = lib.zeros(3)
    b = lib.ones(3)
    a.data = b
    b.add_(1)
    return a


def _data_setter_new_shape(lib):
    a = lib.zeros(3)
    a.data = _f32(lib, np.arange(4.0).reshape(2, 2))
    return a


def _data_setter_int_for_grad(lib):
    p = _f32(lib, [1.0, 2.0], requires_grad=True)
    p.data = _i32(lib, [1, 2])
    return p


def _dtype_spellings(lib):
    t = _f32(lib, [1.7, -2.2])
    x = lib.tensor(np.array([3, 4]), dtype=lib.int64)
    return t.long(), t.double(), x, x.dtype == lib.int64, t.long().dtype == lib.int64


LOGITS = np.array([[0.5, -1.0, 2.0, 0.0], [1.0, 1.0, -0.5, 3.0], [-2.0, 0.5, 0.5, 1.0]])
TARGET = np.array([2, 0, 3], np.int64)


def _log_softmax_np(x):
    m = x.max(axis=1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True))


def _int64_targets(lib):
    F = lib.nn.functional
    logits = _f32(lib, LOGITS)
    target = lib.tensor(TARGET, dtype=lib.int64)
    w = _f32(lib, np.arange(12.0).reshape(4, 3))
    return (F.cross_entropy(logits, target), F.nll_loss(F.log_softmax(logits, dim=1), target),
            lib.gather(logits, 1, target.reshape(3, 1)), F.embedding(target, w))


def _int64_targets_np():
    ls = _log_softmax_np(LOGITS)
    nll = -ls[np.arange(3), TARGET].mean()
    return (nll, nll, LOGITS[np.arange(3), TARGET].reshape(3, 1), np.arange(12.0).reshape(4, 3)[TARGET])


def _load_state_dict_casts(lib):
    m = lib.nn.Linear(2, 3)
    m.load_state_dict({"weight": lib.tensor(np.arange(6.0).reshape(3, 2), dtype=lib.float64),
                       "bias": lib.tensor(np.array([0.5, 1.5, -2.0]), dtype=lib.float16)})
    return m.weight.detach(), m.bias.detach(), m.weight.dtype == lib.float32


def _load_state_dict_bad_shape(lib):
    m = lib.nn.Linear(2, 3)
    m.load_state_dict({"weight": lib.zeros(2, 3, dtype=lib.float64), "bias": lib.zeros(3)})
    return m.weight


def _dataset_rows(lib):
    data = lib.utils.data if hasattr(lib, "utils") else lib.data
    ds = data.TensorDataset(_f32(lib, np.arange(6.0).reshape(3, 2)), lib.tensor(np.array([4, 5, 6])))
    x, y = ds[1]
    (xb, yb), = list(data.DataLoader(ds, batch_size=3))
    return x, y, xb, yb, isinstance(x, lib.Tensor) and isinstance(y, lib.Tensor)


def _named_params_sgd(lib):
    lib.manual_seed(0)
    m = lib.nn.Linear(2, 1)
    with lib.no_grad():
        m.weight.copy_(_f32(lib, [[1.0, -1.0]]))
        m.bias.fill_(0.5)
    opt = lib.optim.SGD(m.named_parameters(), lr=0.1, momentum=0.9)
    for _ in range(2):
        opt.zero_grad()
        (m(_f32(lib, [[1.0, 2.0], [3.0, -1.0]])) ** 2).sum().backward()
        opt.step()
    sd = opt.state_dict()
    names = sd["param_groups"][0]["param_names"] == ["weight", "bias"]
    return m.weight.detach(), m.bias.detach(), names, sd["param_groups"][0]["params"] == [0, 1]


def _named_params_sgd_np():
    w, b, buf_w, buf_b = np.array([1.0, -1.0]), 0.5, None, None
    x = np.array([[1.0, 2.0], [3.0, -1.0]])
    for step in range(2):
        out = x @ w + b
        gw, gb = (2 * out) @ x, (2 * out).sum()
        buf_w = gw if step == 0 else 0.9 * buf_w + gw
        buf_b = gb if step == 0 else 0.9 * buf_b + gb
        w, b = w - 0.1 * buf_w, b - 0.1 * buf_b
    return w.reshape(1, 2), np.array([b]), 1.0, 1.0


def _named_param_groups(lib):
    m = lib.nn.Linear(2, 1)
    opt = lib.optim.SGD([{"params": list(m.named_parameters()), "lr": 0.2}], lr=0.1)
    g = opt.param_groups[0]
    return g["param_names"] == ["weight", "bias"], g["lr"], g["params"][0] is m.weight


def _named_params_mixed(lib):
    m = lib.nn.Linear(2, 1)
    return lib.optim.SGD([("weight", m.weight), m.bias], lr=0.1)


RED_X = np.array([[1.0, -2.0, 3.0], [4.0, 0.5, -6.0]])
REDUCTIONS = {
    "sum": (lambda t: t.sum(axis=0, keepdims=True), lambda a: a.sum(axis=0, keepdims=True)),
    "mean": (lambda t: t.mean(axis=1, keepdims=True), lambda a: a.mean(axis=1, keepdims=True)),
    "amax": (lambda t: t.amax(axis=0, keepdims=True), lambda a: a.max(axis=0, keepdims=True)),
    "amin": (lambda t: t.amin(axis=1, keepdims=True), lambda a: a.min(axis=1, keepdims=True)),
    "max": (lambda t: t.max(axis=1, keepdims=True).values, lambda a: a.max(axis=1, keepdims=True)),
    "min": (lambda t: t.min(axis=0, keepdims=True).values, lambda a: a.min(axis=0, keepdims=True)),
    "argmax": (lambda t: t.argmax(axis=1, keepdims=True), lambda a: a.argmax(axis=1)[:, None]),
    "argmin": (lambda t: t.argmin(axis=0, keepdims=True), lambda a: a.argmin(axis=0)[None, :]),
    "var": (lambda t: t.var(axis=1, keepdims=True), lambda a: a.var(axis=1, ddof=1, keepdims=True)),
    "std": (lambda t: t.std(axis=0, keepdims=True), lambda a: a.std(axis=0, ddof=1, keepdims=True)),
    "logsumexp": (lambda t: t.logsumexp(axis=1, keepdims=True),
                  lambda a: np.log(np.exp(a).sum(axis=1, keepdims=True))),
}


def _reduction(name: str, form: str):
    method, ref = REDUCTIONS[name]

    def snippet(lib):
        t = _f32(lib, RED_X)
        if form == "method":
            return method(t)
        fn = getattr(lib, name)
        kwargs = dict(dim=0 if name in ("sum", "amax", "min", "argmin", "std") else 1, keepdims=True)
        r = fn(t, **kwargs)
        return r.values if name in ("max", "min") else r
    return snippet, ref(RED_X)


SCENARIOS: dict = {}
for _sym in OPS:
    for _kind in ("tensor", "scalar", "int"):
        SCENARIOS[f"op {_sym} {_kind}"] = _inplace_op(_sym, _kind)
SCENARIOS.update({
    "sgd by hand": (_sgd_by_hand, (np.array([1.0, -2.0, 3.0]) * 0.8 * 2,)),
    "leaf requires grad": (_leaf_requires_grad, RuntimeError),
    "non-leaf in place: grads flow": (
        _nonleaf_inplace_grad,
        (3 * np.array([2.0, -1.0, 0.5]) - 1, 3 * np.array([1.0, 2.0, 3.0]),
         3 * np.array([1.0, 2.0, 3.0]) * np.array([2.0, -1.0, 0.5]) - np.array([1.0, 2.0, 3.0]))),
    "buffer += param: grads flow": (_buffer_takes_grad, (8 * np.array([1.0, -2.0, 3.0]), 1.0, 0.0)),
    "saved input modified": (_saved_input_modified, RuntimeError),
    "saved output modified": (_saved_output_modified, RuntimeError),
    "pow_ grads": (_pow_inplace_grad, (
        3 * np.array([2.0, 1.5, 3.0]) * (3 * np.array([1.0, 2.0, 0.5])) ** (np.array([2.0, 1.5, 3.0]) - 1),
        (3 * np.array([1.0, 2.0, 0.5])) ** np.array([2.0, 1.5, 3.0]) * np.log(3 * np.array([1.0, 2.0, 0.5])))),
    "result shape would grow": (_shape_would_grow, RuntimeError),
    "int += float": (_int_plus_float, RuntimeError),
    "int += float tensor": (_int_plus_float_tensor, RuntimeError),
    "int /= int": (_int_true_div, RuntimeError),
    "int closed ops": (_int_closed_ops, (((np.array([1, -2, 3]) * 3 + 1) ** 2 // 4) % 5,)),
    "float += int tensor": (_float_plus_int, (np.array([1.5, 3.5, 5.5]),)),
    "int ** negative int": (_int_negative_power, RuntimeError),
    "@= rebinds (torch has no __imatmul__)": (_imatmul_rebinds, (np.ones((2, 3)) @ np.arange(6.0).reshape(3, 2),
                                                                  np.ones((2, 3)))),
    "add_/sub_ alpha": (_add_sub_alpha, (A + 2 * B - 0.5,)),
    "copy_ passes grad": (_copy_passes_grad, (np.full(3, 6.0), np.tile([1.0, -2.0, 3.0], (2, 1)))),
    ".data is an alias": (_data_is_an_alias, (np.array([3.0, 5.0]), 0.0, 1.0)),
    ".data soft update": (_soft_update, (0.25 * np.array([1.0, 2.0, 3.0]) + 0.75 * np.array([0.0, 0.0, 6.0]),)),
    ".data = t shares t's memory": (_data_setter_shares, (np.full(3, 2.0),)),
    ".data = t of another shape": (_data_setter_new_shape, (np.arange(4.0).reshape(2, 2),)),
    ".data = int tensor on a grad tensor": (_data_setter_int_for_grad, RuntimeError),
    "long/double/int64": (_dtype_spellings, (np.array([1.0, -2.0]), np.array([1.7, -2.2]), np.array([3.0, 4.0]),
                                             1.0, 1.0)),
    "int64 targets": (_int64_targets, _int64_targets_np()),
    "load_state_dict casts": (_load_state_dict_casts, (np.arange(6.0).reshape(3, 2), np.array([0.5, 1.5, -2.0]), 1.0)),
    "load_state_dict shape mismatch": (_load_state_dict_bad_shape, RuntimeError),
    "TensorDataset rows are tensors": (_dataset_rows, (np.array([2.0, 3.0]), np.array(5.0),
                                                       np.arange(6.0).reshape(3, 2), np.array([4.0, 5.0, 6.0]), 1.0)),
    "optimizer named_parameters": (_named_params_sgd, _named_params_sgd_np()),
    "param group of named pairs": (_named_param_groups, (1.0, 0.2, 1.0)),
    "named and unnamed params mixed": (_named_params_mixed, ValueError),
})


def _bool_pair(lib):
    return lib.tensor([False, True, False, True]), lib.tensor([True, True, False, False])


def _ior_through_view(lib):
    b, m = _bool_pair(lib)
    c = b[::2]                  # |= writes in place: the base changes (a rebinding would not)
    c |= m[:2]
    return b


def _iand_ixor_on_view(lib):
    b, m = _bool_pair(lib)
    c = b[1:]
    c &= m[1:]
    c ^= True
    return b


def _logical_inplace_float(lib):
    f = _f32(lib, [0.0, 2.0, 0.0, -3.0])
    _, m = _bool_pair(lib)
    f.logical_or_(m)
    return f


SCENARIOS.update({
    "|= through a view": (_ior_through_view, (np.array([1.0, 1.0, 1.0, 1.0]),)),
    "&= ^= through a view": (_iand_ixor_on_view, (np.array([0.0, 0.0, 1.0, 1.0]),)),
    "logical_or_ keeps the dtype": (_logical_inplace_float, (np.array([1.0, 1.0, 0.0, 1.0]),)),
    "bitwise_or_ method": (lambda lib: _bool_pair(lib)[0].bitwise_or_(_bool_pair(lib)[1]),
                           (np.array([1.0, 1.0, 0.0, 1.0]),)),
    "|= on float raises": (lambda lib: _f32(lib, [1.0]).__ior__(_f32(lib, [1.0])), RuntimeError),
})
for _name in REDUCTIONS:
    for _form in ("method", "function"):
        SCENARIOS[f"keepdims {_name} {_form}"] = _reduction(_name, _form)


def _expected(ref):
    if isinstance(ref, type) and issubclass(ref, BaseException):
        return ("raises", ref)
    if isinstance(ref, tuple) and len(ref) == 1:    # a snippet returning one tensor
        ref = ref[0]
    return ("value", tuple(np.asarray(r, np.float64) for r in ref) if isinstance(ref, tuple) else np.asarray(ref))


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_matches_numpy_reference(mode, name):
    snippet, ref = SCENARIOS[name]
    _assert_same(_outcome(snippet, gg), _expected(ref), f"ggmlgrad ({mode}): {name}")


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_matches_torch(name):
    torch = pytest.importorskip("torch")
    snippet, _ = SCENARIOS[name]
    _assert_same(_outcome(snippet, gg), _outcome(snippet, torch), f"ggmlgrad vs torch: {name}")


# ---------------------------------------------------------------------------- in-place: engine rules
def test_inplace_bumps_version_and_is_seen_by_aliases(mode):
    a = gg.tensor([1.0, 2.0])
    d = a.detach()
    v = a._version
    a += 1
    a *= 3
    assert a._version == d._version == v + 2
    np.testing.assert_array_equal(d.numpy(), [6.0, 9.0])


def test_graph_mode_write_is_ordered_after_queued_reads(mode):
    """A read queued before the in-place op sees the old value, a read after it the new one."""
    p = gg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    with gg.no_grad():
        before = p * 2          # queued in graph mode
        p -= 1
        after = p * 2
    np.testing.assert_array_equal(before.numpy(), [2.0, 4.0, 6.0])
    np.testing.assert_array_equal(after.numpy(), [0.0, 2.0, 4.0])


def test_inplace_refusals_change_nothing(mode):
    a = gg.tensor([1.0, 2.0, 3.0])
    with pytest.raises(RuntimeError, match="broadcast shape"):
        a += gg.ones(2, 3)
    i = gg.tensor([1, 2, 3])
    with pytest.raises(RuntimeError, match="can't be cast"):
        i += 0.5
    p = gg.tensor([1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        p -= 1.0
    assert a.tolist() == [1.0, 2.0, 3.0] and i.tolist() == [1, 2, 3] and p.tolist() == [1.0]
    assert a._version == i._version == p._version == 0


def test_inplace_inside_capture_is_recorded_and_grad_accumulation_is_refused():
    params = [gg.tensor([1.0, 2.0, 3.0], requires_grad=True)]

    @gg.capture
    def sgd_by_hand(x):
        p = params[0]
        loss = (p * x).sum()
        loss.backward()                      # eager accumulates into p.grad call after call
        with gg.no_grad():
            p -= 0.1 * p.grad
        return loss

    with pytest.raises(gg.CaptureError, match="accumulate into .grad"):
        sgd_by_hand(np.ones(3, np.float32))
    assert params[0].tolist() == [1.0, 2.0, 3.0]

    @gg.capture
    def local_update(x):
        y = x * 2
        y += 1                               # in-place writes are recorded (tests/test_capture_writes.py)
        return y

    for k in range(2):
        np.testing.assert_array_equal(local_update(np.full(3, k, np.float32)), np.full(3, 2.0 * k + 1))


def test_data_setter_refusals_and_capture_rerecord():
    p = gg.tensor([1.0, 2.0], requires_grad=True)
    (p * p).sum().backward()
    with pytest.raises(RuntimeError, match="does not match .grad"):
        p.data = gg.zeros(3)
    with pytest.raises(TypeError):
        p.data = np.zeros(2)
    y = p * p                       # saved p: a replaced value must not feed the old backward
    p.data = gg.tensor([5.0, 6.0])
    assert p.tolist() == [5.0, 6.0] and p.requires_grad and p.grad is not None
    with pytest.raises(RuntimeError, match="modified in place"):
        y.sum().backward()

    w = gg.tensor([1.0, 2.0])

    @gg.capture
    def f(x):
        return x * w

    np.testing.assert_array_equal(f(np.ones(2, np.float32)), [1.0, 2.0])
    w.data = gg.tensor([3.0, 4.0])  # new memory: the capture must follow it, never replay stale state
    np.testing.assert_array_equal(f(np.ones(2, np.float32)), [3.0, 4.0])


# ---------------------------------------------------------------------------- dtype spellings
@pytest.mark.parametrize("spelling", ["int64", "long", "i64", np.int64, np.dtype("int64"), np.uint8, gg.int64, gg.long])
def test_int64_spellings_are_int32(spelling):
    assert dtypes.from_any(spelling) is gg.int32
    assert gg.zeros(2, dtype=spelling).dtype is gg.int32


@pytest.mark.parametrize("spelling", ["float64", "double", np.float64, np.dtype("float64"), gg.float64, gg.double])
def test_float64_spellings_are_float32(spelling):
    assert dtypes.from_any(spelling) is gg.float32
    t = gg.tensor([0.1, 1e-3], dtype=spelling)
    assert t.dtype is gg.float32
    np.testing.assert_array_equal(t.numpy(), np.array([0.1, 1e-3], np.float32))   # rounded to float32


def test_float64_data_becomes_float32_and_int64_data_int32():
    assert gg.tensor(np.array([0.1])).dtype is gg.float32
    assert gg.tensor(0.1).dtype is gg.float32
    assert gg.tensor(np.array([1, 2], np.int64)).dtype is gg.int32
    assert gg.tensor([1.0]).double().dtype is gg.float32 and gg.tensor([1.5]).long().tolist() == [1]


@pytest.mark.parametrize("make", [
    lambda: gg.tensor(np.array([2**31]), dtype=gg.int64),
    lambda: gg.tensor(np.array([-2**31 - 1])),
    lambda: gg.tensor([2**40]),
    lambda: gg.zeros(2, dtype=gg.int64).copy_(np.array([1, 2**33])),
    lambda: gg.zeros(1, dtype=gg.int64).copy_(np.array([np.inf])),
])
def test_int64_values_outside_int32_raise(make):
    with pytest.raises(ValueError, match="int32"):
        make()


def test_int32_limits_are_kept_exactly():
    t = gg.tensor(np.array([2**31 - 1, -2**31], np.int64), dtype="long")
    assert t.tolist() == [2**31 - 1, -2**31]


def test_readme_states_the_dtype_rule():
    from pathlib import Path
    text = Path(__file__).resolve().parents[1].joinpath("README.md").read_text()
    limits = text[text.index("## Limitations"):]
    assert "int64" in limits and "float64" in limits and "OverflowError" not in limits


# ---------------------------------------------------------------------------- load_state_dict
class _WithCounter(gg.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = gg.nn.Linear(2, 2)
        self.register_buffer("count", gg.zeros(1, dtype=gg.int64))


def test_load_state_dict_casts_host_arrays(mode):
    m = _WithCounter()
    w = np.arange(4.0).reshape(2, 2) / 3        # float64
    m.load_state_dict({"fc.weight": w, "fc.bias": np.array([1, 2], np.int64), "count": np.array([7], np.int64)})
    np.testing.assert_allclose(m.fc.weight.detach().numpy(), w, rtol=1e-7)
    assert m.fc.bias.tolist() == [1.0, 2.0] and m.count.tolist() == [7]
    assert m.fc.weight.dtype is gg.float32 and m.count.dtype is gg.int32


@pytest.mark.parametrize("bad", [{"count": np.array([0.5])}, {"count": gg.tensor([1.0])},
                                 {"count": np.array([2**40])}, {"fc.bias": np.zeros(3)}])
def test_load_state_dict_refuses_without_writing(bad):
    m = _WithCounter()
    before = {k: v.numpy().copy() for k, v in m.state_dict().items()}
    state = collections.OrderedDict(m.state_dict())
    state["fc.weight"] = np.full((2, 2), 9.0)
    state.update(bad)
    with pytest.raises(RuntimeError, match="nothing was loaded"):
        m.load_state_dict(state)
    for k, v in m.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), before[k], err_msg=k)


# ---------------------------------------------------------------------------- optimizer, data, keepdims
def test_named_optimizer_state_dict_round_trip():
    m = gg.nn.Linear(3, 2)
    opt = gg.optim.Adam(m.named_parameters(), lr=0.01)
    (m(gg.ones(4, 3)) ** 2).sum().backward()
    opt.step()
    sd = opt.state_dict()
    assert sd["param_groups"][0]["param_names"] == ["weight", "bias"]
    opt2 = gg.optim.Adam(m.parameters(), lr=0.01)
    opt2.load_state_dict(sd)       # names are taken over, as torch does
    assert opt2.param_groups[0]["param_names"] == ["weight", "bias"]
    np.testing.assert_array_equal(opt2.state[m.weight]["exp_avg"].numpy(), opt.state[m.weight]["exp_avg"].numpy())
    with pytest.raises(TypeError, match="named parameter"):
        gg.optim.SGD([("w", m.weight, 1)], lr=0.1)


def test_dataset_rows_and_loader_batches():
    x = np.arange(12.0).reshape(6, 2)
    y = np.arange(6, dtype=np.int64)
    ds = gg.data.TensorDataset(x, y)
    xi, yi = ds[2]
    assert isinstance(xi, gg.Tensor) and xi.dtype is gg.float32 and xi.tolist() == [4.0, 5.0]
    assert isinstance(yi, gg.Tensor) and yi.dtype is gg.int64 and yi.shape == () and int(yi) == 2
    xs, ys = ds[gg.tensor([0, 5])]
    assert xs.tolist() == [[0.0, 1.0], [10.0, 11.0]] and ys.tolist() == [0, 5]
    batches = list(gg.data.DataLoader(ds, batch_size=4))
    assert [b[0].shape for b in batches] == [(4, 2), (2, 2)] and batches[1][1].tolist() == [4, 5]

    class Rows(gg.data.Dataset):      # a dataset yielding tensor rows is batched too
        def __len__(self):
            return len(ds)

        def __getitem__(self, i):
            return ds[i]

    (bx, by), = list(gg.data.DataLoader(Rows(), batch_size=6))
    np.testing.assert_array_equal(bx.numpy(), x)
    assert by.dtype is gg.int32 and by.tolist() == list(range(6))


def test_keepdim_and_keepdims_together_is_an_error():
    t = gg.ones(2, 3)
    with pytest.raises(TypeError, match="keepdim"):
        t.sum(axis=0, keepdim=True, keepdims=True)
    with pytest.raises(TypeError, match="keepdim"):
        gg.amax(t, dim=0, keepdim=True, keepdims=False)
    assert t.sum(axis=0, keepdims=False).shape == (3,)


def test_optimizer_refuses_state_of_another_shape_after_data_swap(mode):
    m = gg.nn.Linear(2, 3)
    opt = gg.optim.Adam(m.parameters(), lr=0.1)
    m(gg.ones(1, 2)).sum().backward()
    opt.step()
    opt.zero_grad()
    m.weight.data = gg.zeros(4, 2)            # torch allows the swap; the old moments no longer fit
    m.bias.data = gg.zeros(4)
    m(gg.ones(1, 2)).sum().backward()
    with pytest.raises(RuntimeError, match="optimizer state has shape"):
        opt.step()
    assert m.weight.tolist() == [[0.0, 0.0]] * 4
