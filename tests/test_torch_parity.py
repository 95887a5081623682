"""PyTorch's meaning for names ggmlgrad shares with it, in eager, graph, check mode and a capture:

- selections keep the sign of a zero (where, masked_fill, clamp, maximum/minimum: torch's tie rules),
  and so does scalar arithmetic (x + 0.0 is IEEE's +0.0 at x = -0.0);
- row-picking ops (x[[0, 1]], x[index], x[mask], index_select, gather, embedding) keep float16/bfloat16;
- backward reads what torch saves: ``c / x`` (reciprocal() * c), ``max/min(dim)`` (their indices),
  ``c ** x`` and gather (their input), so an in-place write raises exactly where torch raises;
- gg.* functions refuse a NumPy array, list or number with torch's TypeError;
- nn.Sequential's item assignment, deletion, slicing, insert/pop and ``+`` as torch (also ModuleList
  ``del``/``+``, ModuleDict pop/clear);
- int32 ``//`` and ``%`` by zero raise torch's ZeroDivisionError;
- a view of a leaf that requires grad written in place inside a capture: torch's message.

References: NumPy float64 (the torch rules written out) always; torch itself where installed.
"""
from __future__ import annotations

import collections

import numpy as np
import pytest

import ggmlgrad as gg

MODES = ("eager", "graph", "check", "capture")
NAN, INF = np.nan, np.inf


def _mode(mode: str):
    return gg.graph_mode(mode != "eager", check=mode == "check")


def _run(fn, arrays, mode: str):
    """fn(*tensors) → tuple of outputs as tensors' host arrays, in ``mode`` (a capture: record, replay)."""
    if mode == "capture":
        captured = gg.capture(fn)
        for _ in range(2):
            out = captured(*arrays)
    else:
        with _mode(mode):
            out = fn(*[gg.tensor(a) for a in arrays])
    return out if isinstance(out, tuple) else (out,)


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def _same_bits(got, want):
    """Equal values (NaN where NaN) and equal sign bits on every non-NaN element."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    keep = ~np.isnan(want)
    assert np.array_equal(np.signbit(got[keep]), np.signbit(want[keep])), (got, want)


# ---------------------------------------------------------------- signed zeros in selections
X = np.array([-0.0, 0.0, -1.0, 2.0, NAN, -INF, INF, 0.0, -0.0], np.float32)
Y = np.array([0.0, -0.0, -0.0, 0.0, 1.0, 0.0, -0.0, NAN, 3.0], np.float32)


def _ref_maximum(a, b):
    """torch.maximum: NaN if either is NaN, else b where b > a, else a (a tie keeps a: -0.0 vs 0.0)."""
    return np.where(np.isnan(a) | np.isnan(b), NAN, np.where(b > a, b, a))


def _ref_minimum(a, b):
    return np.where(np.isnan(a) | np.isnan(b), NAN, np.where(b < a, b, a))


def _ref_clamp(x, lo=None, hi=None):
    """torch.clamp = min(max(x, lo), hi) with std::max/min, which keep their first argument on a tie."""
    v = x.copy()
    if lo is not None:
        v = np.where(v < lo, lo, v)
    if hi is not None:
        v = np.where(hi < v, hi, v)
    return v


SELECT_CASES = {
    "where": (lambda L, x, y: L.where(x > 1, x, y), lambda x, y: np.where(x > 1, x, y)),
    "where_swapped": (lambda L, x, y: L.where(x > 1, y, x), lambda x, y: np.where(x > 1, y, x)),
    "where_scalar_other": (lambda L, x, y: L.where(x < 1, x, 5.0), lambda x, y: np.where(x < 1, x, 5.0)),
    "where_scalar_neg_zero": (lambda L, x, y: L.where(x >= 0, -0.0, x), lambda x, y: np.where(x >= 0, -0.0, x)),
    "masked_fill_neg_zero": (lambda L, x, y: x.masked_fill(x > 1, -0.0), lambda x, y: np.where(x > 1, -0.0, x)),
    "clamp_min_zero": (lambda L, x, y: L.clamp(x, min=0.0), lambda x, y: _ref_clamp(x, lo=0.0)),
    "clamp_max_zero": (lambda L, x, y: L.clamp(x, max=0.0), lambda x, y: _ref_clamp(x, hi=0.0)),
    "clamp_min_neg_zero": (lambda L, x, y: L.clamp(x, min=-0.0), lambda x, y: _ref_clamp(x, lo=-0.0)),
    "clamp_max_neg_zero": (lambda L, x, y: L.clamp(x, max=-0.0), lambda x, y: _ref_clamp(x, hi=-0.0)),
    "clamp_both": (lambda L, x, y: L.clamp(x, -0.5, 0.5), lambda x, y: _ref_clamp(x, -0.5, 0.5)),
    "clamp_zero_and_one": (lambda L, x, y: L.clamp(x, 0.0, 1.0), lambda x, y: _ref_clamp(x, 0.0, 1.0)),
    "maximum": (lambda L, x, y: L.maximum(x, y), _ref_maximum),
    "maximum_swapped": (lambda L, x, y: L.maximum(y, x), lambda x, y: _ref_maximum(y, x)),
    "minimum": (lambda L, x, y: L.minimum(x, y), _ref_minimum),
    "minimum_swapped": (lambda L, x, y: L.minimum(y, x), lambda x, y: _ref_minimum(y, x)),
    # scalar arithmetic: IEEE zero signs (-0.0 + 0.0 is 0.0; ggml's scale_bias skips a zero bias)
    "plus_zero": (lambda L, x, y: x + 0.0, lambda x, y: x + 0.0),
    "minus_neg_zero": (lambda L, x, y: x - (-0.0), lambda x, y: x - (-0.0)),
    "zero_minus": (lambda L, x, y: 0.0 - x, lambda x, y: 0.0 - x),
    "neg_zero_minus": (lambda L, x, y: -0.0 - x, lambda x, y: -0.0 - x),
    "plus_neg_zero": (lambda L, x, y: x + (-0.0), lambda x, y: x + (-0.0)),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(SELECT_CASES))
def test_selections_keep_the_sign_of_zero(name, mode):
    fn, ref = SELECT_CASES[name]
    (got,) = _run(lambda x, y: fn(gg, x, y), (X, Y), mode)
    _same_bits(np.asarray(got), ref(X.astype(np.float64), Y.astype(np.float64)))


@pytest.mark.parametrize("name", list(SELECT_CASES))
def test_selection_rules_are_torchs(name):
    torch = pytest.importorskip("torch")
    fn, ref = SELECT_CASES[name]
    _same_bits(fn(torch, torch.tensor(X), torch.tensor(Y)).numpy(), ref(X.astype(np.float64), Y.astype(np.float64)))


# ---------------------------------------------------------------- float16/bfloat16 through row-picking ops
A = np.arange(12, dtype=np.float32).reshape(3, 4) - 4.0      # exact in float16 and bfloat16
ROWS = np.array([2, 0, 2], np.int32)
COLS = np.array([[1], [3], [1]], np.int32)
W_ROWS = np.linspace(0.5, 2.0, 12).reshape(3, 4)

# name → (gg fn(x, rows, cols), NumPy value, torch fn(x, rows, cols) or None); indices as int32 tensors
INDEX_CASES = {
    "list": (lambda x, r, c: x[[2, 0]], A[[2, 0]]),
    "tensor_index": (lambda x, r, c: x[r], A[ROWS]),
    "column_list": (lambda x, r, c: x[:, [3, 1]], A[:, [3, 1]]),
    "index_select": (lambda x, r, c: gg.index_select(x, 1, r), A[:, ROWS]),
    "gather": (lambda x, r, c: gg.gather(x, 1, c), np.take_along_axis(A, COLS, 1)),
    "embedding": (lambda x, r, c: gg.nn.functional.embedding(r, x), A[ROWS]),
}
MASK_CASES = {
    "mask": (lambda x: x[x > 1], A[A > 1]),
    "row_mask": (lambda x: x[gg.tensor([True, False, True])], A[[0, 2]]),
}


def _scatter_ref(name, w):
    """The gradient of sum(out * w) with respect to A (repeated picks add up)."""
    g = np.zeros_like(A, dtype=np.float64)
    if name in ("list",):
        np.add.at(g, [2, 0], w)
    elif name in ("tensor_index", "embedding"):
        np.add.at(g, ROWS, w)
    elif name == "column_list":
        np.add.at(g, (slice(None), [3, 1]), w)
    elif name == "index_select":
        np.add.at(g, (slice(None), ROWS), w)
    elif name == "gather":
        np.put_along_axis(g, COLS, w, 1)
    return g


# a list index is uploaded at the call, which a capture refuses (its guard): those run in the other modes
ROW_PICK_PARAMS = [(n, m) for n in INDEX_CASES for m in MODES if not (m == "capture" and "list" in n)]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name,mode", ROW_PICK_PARAMS)
def test_row_picks_keep_the_storage_dtype_and_grad_flows_back_in_it(name, mode, dtype):
    fn, want = INDEX_CASES[name]
    dt = getattr(gg, dtype)
    w = W_ROWS.ravel()[:want.size].reshape(want.shape)

    def program(x32, rows, cols, w32):
        x = x32.to(dt).detach().requires_grad_(True)
        out = fn(x, rows, cols)
        assert out.dtype is dt      # checked while tracing too: a capture records this dtype
        (out.to(gg.float32) * w32).sum().backward()
        assert x.grad.dtype is dt
        return out.detach(), x.grad

    if mode == "capture":   # results come back as NumPy arrays (float16 as float16; bfloat16 as float32)
        value, grad = _run(program, (A, ROWS, COLS, w.astype(np.float32)), mode)
        assert dtype != "float16" or value.dtype == grad.dtype == np.float16
    else:
        with _mode(mode):
            value, grad = program(gg.tensor(A), gg.tensor(ROWS), gg.tensor(COLS), gg.tensor(w.astype(np.float32)))
            value, grad = value.to(gg.float32).numpy(), grad.to(gg.float32).numpy()
    np.testing.assert_array_equal(np.asarray(value, np.float64), want)
    np.testing.assert_allclose(np.asarray(grad, np.float64), _scatter_ref(name, w), rtol=1e-2)


@pytest.mark.parametrize("mode", ["eager", "graph", "check"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int32"])
@pytest.mark.parametrize("name", list(MASK_CASES))
def test_mask_indexing_keeps_the_dtype(name, dtype, mode):
    fn, want = MASK_CASES[name]
    with _mode(mode):
        x = gg.tensor(A).to(getattr(gg, dtype))
        out = fn(x)
        assert out.dtype is x.dtype
        np.testing.assert_array_equal(out.to(gg.float32).numpy(), want)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_row_pick_dtypes_are_torchs(dtype):
    torch = pytest.importorskip("torch")
    x = torch.tensor(A).to(getattr(torch, dtype))
    rows, cols = torch.tensor(ROWS).long(), torch.tensor(COLS).long()
    for out in (x[[2, 0]], x[rows], x[x > 1], torch.index_select(x, 1, rows), torch.gather(x, 1, cols),
                torch.nn.functional.embedding(rows, x)):
        assert out.dtype is x.dtype


# ---------------------------------------------------------------- what backward reads (torch's saved tensors)
P = np.array([[0.5, -1.5, 2.0, 1.25], [-0.75, 1.0, -2.5, 0.8], [1.5, 0.6, -0.9, 2.2]], np.float32)
Q = np.array([[1.0, 2.0, 0.5, 1.5], [0.25, 1.0, 2.0, 0.75], [2.5, 1.25, 0.5, 1.0]], np.float32)
G = np.linspace(0.5, 1.5, 12).reshape(3, 4)
IDX = np.array([[0], [2], [3]], np.int32)


def _first_max_mask(a, sign):
    m = np.zeros_like(a, dtype=np.float64)
    m[np.arange(a.shape[0]), np.argmax(sign * a, 1)] = 1.0
    return m


# name → (snippet(lib, a, b, idx), inputs whose in-place write must make backward raise, NumPy grads of
# sum(out * G-shaped weight) for a and b)
SAVED_CASES = {
    "scalar_over_tensor": (lambda L, a, b, i: 2.0 / a + b, (), lambda a, b: (-2.0 / a ** 2 * G, G)),
    "reciprocal": (lambda L, a, b, i: a.reciprocal() * b, (1,), lambda a, b: (-b / a ** 2 * G, G / a)),
    "scalar_power": (lambda L, a, b, i: 2.0 ** a + b, (0,), lambda a, b: (2.0 ** a * np.log(2.0) * G, G)),
    "max_dim": (lambda L, a, b, i: (a.max(1, keepdim=True).values + b), (),
                lambda a, b: (_first_max_mask(a, 1) * G.sum(1, keepdims=True), G)),
    "min_dim": (lambda L, a, b, i: (a.min(1, keepdim=True).values + b), (),
                lambda a, b: (_first_max_mask(a, -1) * G.sum(1, keepdims=True), G)),
    "gather": (lambda L, a, b, i: L.gather(a, 1, i) + b, (0,),
               lambda a, b: (_gather_grad(G.sum(1, keepdims=True)), G)),
}


def _gather_grad(g):
    out = np.zeros((3, 4))
    np.put_along_axis(out, IDX, g, 1)
    return out


def _saved_program(lib, snippet, write):
    """leaves → non-leaf a, b → snippet → in-place write to input ``write`` (None: none) → backward;
    returns ("raise", None) or ("ok", (grad a, grad b))."""
    def run(pa, qb, idx, w):
        la, lb = pa.detach().requires_grad_(True), qb.detach().requires_grad_(True)
        a, b = la * 1.0, lb * 1.0
        out = snippet(lib, a, b, idx)
        if write is not None:
            (a, b)[write].mul_(-1.5)
        try:
            (out * w).sum().backward()
        except RuntimeError as e:
            assert "modified" in str(e) or "inplace" in str(e), e
            return "raise", None
        return "ok", (la.grad, lb.grad)
    return run


def _saved_run(name, write, mode):
    snippet, _, _ = SAVED_CASES[name]
    run = _saved_program(gg, snippet, write)
    args = (P, Q, IDX, G.astype(np.float32))
    if mode == "capture":
        def fn(*ts):
            status, grads = run(*ts)
            if status == "raise":
                raise RuntimeError("raised")
            return grads
        try:
            grads = _run(fn, args, mode)
        except RuntimeError as e:
            assert str(e) == "raised" or "modified" in str(e), e
            return "raise", None
        return "ok", [np.asarray(g, np.float64) for g in grads]
    with _mode(mode):
        status, grads = run(*[gg.tensor(v) for v in args])
    return status, None if grads is None else [g.numpy().astype(np.float64) for g in grads]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(SAVED_CASES))
def test_backward_raises_exactly_for_what_it_reads(name, mode):
    _, saves, ref = SAVED_CASES[name]
    want = ref(P.astype(np.float64), Q.astype(np.float64))
    for write in (None, 0, 1):
        status, grads = _saved_run(name, write, mode)
        assert status == ("raise" if write in saves else "ok"), (name, write, mode)
        if status == "ok":     # the gradients of the op before the write
            for g, r in zip(grads, want):
                np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", list(SAVED_CASES))
def test_saved_tensors_are_torchs(name):
    torch = pytest.importorskip("torch")
    snippet, saves, _ = SAVED_CASES[name]
    for write in (None, 0, 1):
        status, _ = _saved_program(torch, snippet, write)(torch.tensor(P), torch.tensor(Q), torch.tensor(IDX).long(),
                                                           torch.tensor(G, dtype=torch.float32))
        assert status == ("raise" if write in saves else "ok"), (name, write)


@pytest.mark.parametrize("mode", ["eager", "graph", "check"])
def test_writing_the_result_of_scalar_over_tensor_keeps_backward_valid(mode):
    """torch: c / x is reciprocal(x) * c; its backward reads reciprocal's own output, not c / x."""
    with _mode(mode):
        x = gg.tensor(P, requires_grad=True)
        y = 2.0 / x
        y.mul_(3.0)
        y.sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), -6.0 / P.astype(np.float64) ** 2, rtol=1e-6)


@pytest.mark.parametrize("mode", MODES)
def test_scalar_power_follows_c_pow(mode):
    """c ** x with torch's results for negative, zero, unit, infinite and NaN bases (it went through
    exp(x log c): NaN for any negative base and for 0 ** 0)."""
    e = np.array([0.0, 1.0, 3.0, -2.0, 0.5, INF, -INF, NAN, -0.0], np.float32)
    bases = (2.0, -2.0, 0.0, 1.0, -1.0, INF, -INF, NAN, 0.5, -0.5)
    outs = _run(lambda x: tuple(c ** x for c in bases), (e,), mode)
    for c, got in zip(bases, outs):
        with np.errstate(all="ignore"):
            want = np.power(np.float64(c), e.astype(np.float64))
        np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=1e-6, equal_nan=True, err_msg=str(c))


# ---------------------------------------------------------------- non-tensor arguments
NON_TENSOR_CALLS = {
    "sum": lambda L, v: L.sum(v), "mean": lambda L, v: L.mean(v), "amax": lambda L, v: L.amax(v),
    "argmax": lambda L, v: L.argmax(v), "max": lambda L, v: L.max(v), "min": lambda L, v: L.min(v),
    "std": lambda L, v: L.std(v), "var": lambda L, v: L.var(v), "exp": lambda L, v: L.exp(v),
    "relu": lambda L, v: L.relu(v), "logsumexp": lambda L, v: L.logsumexp(v, 0),
    "softmax": lambda L, v: L.softmax(v, 0), "reshape": lambda L, v: L.reshape(v, (3,)),
    "permute": lambda L, v: L.permute(v, (0,)), "transpose": lambda L, v: L.transpose(v, 0, 0),
    "isnan": lambda L, v: L.isnan(v), "isinf": lambda L, v: L.isinf(v), "isfinite": lambda L, v: L.isfinite(v),
}
NON_TENSORS = {"ndarray": np.array([1.0, -2.0, 3.0], np.float32), "list": [1.0, -2.0, 3.0], "float": 1.5}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", list(NON_TENSORS))
@pytest.mark.parametrize("name", list(NON_TENSOR_CALLS))
def test_functions_refuse_non_tensors_with_a_type_error(name, kind, mode):
    call = NON_TENSOR_CALLS[name]
    v = NON_TENSORS[kind]
    if mode == "capture":
        captured = gg.capture(lambda x: call(gg, v) + x)
        with pytest.raises(TypeError, match=name):
            captured(np.ones(3, np.float32))
        return
    with _mode(mode), pytest.raises(TypeError, match=name):
        call(gg, v)


@pytest.mark.parametrize("kind", list(NON_TENSORS))
@pytest.mark.parametrize("name", list(NON_TENSOR_CALLS))
def test_torch_refuses_them_too(name, kind):
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError):
        NON_TENSOR_CALLS[name](torch, NON_TENSORS[kind])


# ---------------------------------------------------------------- nn.Sequential as a list of modules
def _lin(nn, n):
    return nn.Linear(1, n)


def _structure(nn):
    """Every Sequential operation's outcome: keys, widths (out_features) or the exception class."""
    out = []

    def rec(f):
        try:
            out.append(f())
        except Exception as e:     # noqa: BLE001 - the class is the outcome compared
            out.append(type(e).__name__.replace("AssertionError", "TypeError"))

    def shape(m):
        return [(k, v.weight.shape[0]) for k, v in m._modules.items()]
    s = nn.Sequential(_lin(nn, 1), _lin(nn, 2), _lin(nn, 3))
    rec(lambda: (s.__setitem__(1, _lin(nn, 9)), shape(s))[1])
    rec(lambda: (s.__setitem__(-1, _lin(nn, 8)), shape(s))[1])
    rec(lambda: s.__setitem__(5, _lin(nn, 8)))
    rec(lambda: s.__setitem__(0, 3))
    rec(lambda: (type(s[1:]).__name__, shape(s[1:])))
    rec(lambda: (s.__delitem__(0), shape(s))[1])
    rec(lambda: s.__delitem__(7))
    rec(lambda: (s.append(_lin(nn, 4)), shape(s))[1])
    rec(lambda: (s.insert(1, _lin(nn, 5)), shape(s))[1])
    rec(lambda: (s.insert(-1, _lin(nn, 6)), shape(s))[1])
    rec(lambda: s.insert(10, _lin(nn, 6)))
    rec(lambda: s.insert(0, 3))
    rec(lambda: (s.extend([_lin(nn, 7)]), shape(s))[1])
    rec(lambda: (s.__delitem__(slice(0, 2)), shape(s))[1])
    rec(lambda: s.pop(0).weight.shape[0])
    rec(lambda: shape(s))
    rec(lambda: shape(s + nn.Sequential(_lin(nn, 11))))
    rec(lambda: s + 3)
    t = nn.Sequential(collections.OrderedDict([("a", _lin(nn, 1)), ("b", _lin(nn, 2)), ("c", _lin(nn, 3))]))
    rec(lambda: shape(t[1:]))
    rec(lambda: (t.__setitem__(0, _lin(nn, 4)), shape(t))[1])
    rec(lambda: (t.__delitem__(1), shape(t))[1])
    s2 = nn.Sequential(_lin(nn, 1))
    s2 += nn.Sequential(_lin(nn, 2))
    rec(lambda: shape(s2))
    ml = nn.ModuleList([_lin(nn, 1), _lin(nn, 2), _lin(nn, 3)])
    rec(lambda: (ml.__delitem__(1), shape(ml))[1])
    rec(lambda: (ml.__delitem__(slice(0, 1)), shape(ml))[1])
    rec(lambda: (type(ml + [_lin(nn, 5)]).__name__, shape(ml + [_lin(nn, 5)])))
    ml += [_lin(nn, 6)]
    rec(lambda: shape(ml))
    md = nn.ModuleDict({"p": _lin(nn, 1), "q": _lin(nn, 2)})
    rec(lambda: (md.pop("p").weight.shape[0], shape(md)))
    rec(lambda: md.pop("zz"))
    rec(lambda: (md.clear(), len(md))[1])
    return out


EXPECTED_STRUCTURE = [
    [("0", 1), ("1", 9), ("2", 3)], [("0", 1), ("1", 9), ("2", 8)], "IndexError", "TypeError",
    ("Sequential", [("1", 9), ("2", 8)]), [("0", 9), ("1", 8)], "IndexError",
    [("0", 9), ("1", 8), ("2", 4)], [("0", 9), ("1", 5), ("2", 8), ("3", 4)],
    [("0", 9), ("1", 5), ("2", 8), ("3", 6), ("4", 4)], "IndexError", "TypeError",
    [("0", 9), ("1", 5), ("2", 8), ("3", 6), ("4", 4), ("5", 7)],
    [("0", 8), ("1", 6), ("2", 4), ("3", 7)], 8, [("0", 6), ("1", 4), ("2", 7)],
    [("0", 6), ("1", 4), ("2", 7), ("3", 11)], "ValueError",
    [("b", 2), ("c", 3)], [("a", 4), ("b", 2), ("c", 3)], [("0", 4), ("1", 3)],
    [("0", 1), ("1", 2)], [("0", 1), ("1", 3)], [("0", 3)],
    ("ModuleList", [("0", 3), ("1", 5)]), [("0", 3), ("1", 6)], (1, [("q", 2)]), "KeyError", 0,
]


def test_sequential_item_operations():
    assert _structure(gg.nn) == EXPECTED_STRUCTURE


def test_sequential_item_operations_are_torchs():
    torch = pytest.importorskip("torch")
    assert _structure(torch.nn) == EXPECTED_STRUCTURE


def _linear_np(m, x):
    return x @ m.weight.detach().numpy().T.astype(np.float64) + m.bias.detach().numpy()


@pytest.mark.parametrize("mode", MODES)
def test_a_sequential_edited_in_place_computes_with_its_new_modules(mode):
    """Forward, parameters() and a capture follow __setitem__ / __delitem__ / insert (no stale replay)."""
    gg.manual_seed(0)
    s = gg.nn.Sequential(gg.nn.Linear(3, 3), gg.nn.Tanh(), gg.nn.Linear(3, 2))
    x = np.linspace(-1, 1, 6).reshape(2, 3).astype(np.float32)

    def ref():
        h = x.astype(np.float64)
        for m in s:
            h = np.tanh(h) if isinstance(m, gg.nn.Tanh) else _linear_np(m, h)
        return h
    captured = gg.capture(lambda t: s(t)) if mode == "capture" else None

    def check():
        if captured is not None:
            got = np.asarray(captured(x))
        else:
            with _mode(mode):
                got = s(gg.tensor(x)).detach().numpy()
        np.testing.assert_allclose(got, ref(), rtol=1e-5, atol=1e-6)
    check()
    s[2] = gg.nn.Linear(3, 4)
    assert s[2].weight is list(s.parameters())[-2]
    check()
    del s[1]
    check()
    s.insert(1, gg.nn.Tanh())
    check()


# ---------------------------------------------------------------- a view of a leaf written inside a capture
VIEW_OF_LEAF = "a view of a leaf Variable that requires grad is being used in an in-place operation"


def _write_through_view(x):
    x[0:2].add_(1.0)
    return x * 2.0


@pytest.mark.parametrize("mode", MODES)
def test_view_of_a_leaf_written_in_place_gets_torchs_message(mode):
    x = gg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    if mode == "capture":
        with pytest.raises(RuntimeError, match=VIEW_OF_LEAF):
            gg.capture(_write_through_view)(x)
    else:
        with _mode(mode), pytest.raises(RuntimeError, match=VIEW_OF_LEAF):
            _write_through_view(x)
    assert x.tolist() == [1.0, 2.0, 3.0]


def test_torchs_message_for_a_view_of_a_leaf():
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError, match=VIEW_OF_LEAF):
        _write_through_view(torch.tensor([1.0, 2.0, 3.0], requires_grad=True))


# ---------------------------------------------------------------- int32 // and % by zero
INT_A = np.array([7, -7, 1, 0], np.int32)
INT_DIVISION = {
    "floordiv_zero": lambda x: x // 0,
    "remainder_zero": lambda x: x % 0,
    "floordiv_tensor_with_zero": lambda x: x // (x * 0 + np.int32(1) - (x == 1).int()),   # 0 where x == 1
    "remainder_tensor_with_zero": lambda x: gg.remainder(x, x * 0 + np.int32(1) - (x == 1).int()),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(INT_DIVISION))
def test_integer_division_by_zero_raises_torchs_error(name, mode):
    """torch: RuntimeError("ZeroDivisionError"); float32 division gave -2147483648 silently."""
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        out = _run(INT_DIVISION[name], (INT_A,), mode)
        np.asarray(out[0])      # graph mode: the check runs at the sync point


@pytest.mark.parametrize("mode", MODES)
def test_integer_division_by_nonzero_tensors_is_pythons(mode):
    b = np.array([2, -3, 5, 4], np.int32)
    q, r = _run(lambda x, y: (x // y, x % y), (INT_A, b), mode)
    np.testing.assert_array_equal(np.asarray(q), INT_A.astype(np.int64) // b)
    np.testing.assert_array_equal(np.asarray(r), INT_A.astype(np.int64) % b)


@pytest.mark.parametrize("name", list(INT_DIVISION))
def test_torch_raises_for_integer_division_by_zero(name):
    torch = pytest.importorskip("torch")
    fns = {"floordiv_zero": lambda x: x // 0, "remainder_zero": lambda x: x % 0,
           "floordiv_tensor_with_zero": lambda x: x // torch.tensor([1, 1, 0, 1], dtype=torch.int32),
           "remainder_tensor_with_zero": lambda x: torch.remainder(x, torch.tensor([1, 1, 0, 1], dtype=torch.int32))}
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        fns[name](torch.tensor(INT_A))
