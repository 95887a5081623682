"""torch parity of issue 22's math ops and of torch's type promotion, on the same inputs.

1. Every OpInfo row with a ``torch_fn`` (testing/opinfo_extra_math.py: the new ops, and int32/bool
   samples of the existing ones) runs on torch and on ggmlgrad with the same arrays: the result dtype
   must be torch's under ggmlgrad's dtype rule (int64 → int32, float64 → float32) and the values equal
   (NaN where torch has NaN, signs of zeros included).
2. Snippets run on torch and on ggmlgrad in eager mode, graph mode and inside ``gg.capture``: the
   same values, or errors of corresponding types (torch's RuntimeError is ggmlgrad's ValueError or
   RuntimeError, its IndexError a ValueError or IndexError, its NotImplementedError for an integer
   dtype a TypeError).
"""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import ggmlgrad as gg
from ggmlgrad.testing.opinfo import all_opinfos, input_arrays, tensor_indices, with_tensors

from conftest import requested_test_device

_DTYPES = {torch.float32: "float32", torch.float64: "float32", torch.int64: "int32", torch.int32: "int32",
           torch.bool: "bool"}


def _rows():
    for info in all_opinfos():
        if info.torch_fn is None:
            continue
        rng = np.random.default_rng(abs(hash(info.name)) % 2**32)
        for i, s in enumerate(info.samples(rng)):
            yield pytest.param(info, s, id=f"{info.name}-{i}")


def _same_values(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> None:
    assert got.shape == want.shape, f"shape {got.shape} != torch's {want.shape}"
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True)
    zeros = (want == 0) & (got == 0)
    assert np.array_equal(np.signbit(got[zeros]), np.signbit(want[zeros])), "signs of zeros differ from torch's"


@pytest.mark.parametrize("info,sample", list(_rows()))
def test_opinfo_rows_match_torch_dtype_and_values(info, sample):
    arrays = input_arrays(sample)
    want = info.torch_fn(*with_tensors(sample, [torch.from_numpy(a.copy()) for a in arrays]), **sample.kwargs)
    got = info.fn(*with_tensors(sample, [gg.tensor(a, dtype=gg.int32 if a.dtype.kind == "i" else None)
                                         for a in arrays]), **sample.kwargs)
    assert got.dtype.name == _DTYPES[want.dtype], f"{info.name}: dtype {got.dtype.name}, torch {want.dtype}"
    _same_values(got.numpy(), want.numpy(), max(info.rtol, 1e-5), max(info.atol, 1e-6))
    assert tensor_indices(sample)      # every row has tensor operands


# ---------------------------------------------------------------------- snippets in every mode
# The largest |x| the test device's sin/cos reduce exactly: the CPU's libm all floats; lavapipe's
# Vulkan kernels drift from 1e8 (sin(1e8): 0.930898, torch 0.931639) and give +-1 from 1e9 (README
# "GPU"), so a device run takes -1e7 where the CPU takes -1e30 (test_device_subset.py pins the range).
_TRIG_MAX = -1e30 if not requested_test_device() or requested_test_device() == "cpu" else -1e7


def _arrays() -> dict:
    r = np.random.default_rng(0)
    f = lambda *s: r.standard_normal(s).astype(np.float32)   # noqa: E731
    ties = np.round(f(4, 6) * 2)
    ties[0, 1], ties[2, 3], ties[3, 0] = np.nan, np.inf, np.nan
    return {"x": f(3, 4), "y": f(3, 4), "z": f(3, 4), "w": f(3, 4), "i": r.integers(-3, 4, (3, 4)).astype(np.int32),
            "s": np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5, -2.5, 0.5, 1e-30, -1e30], np.float32),
            "s_trig": np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5, -2.5, 0.5, 1e-30, _TRIG_MAX], np.float32),
            "m25": f(2, 5), "m23": f(2, 3), "m35": f(3, 5), "b225": f(2, 2, 5), "b223": f(2, 2, 3), "b235": f(2, 3, 5),
            "c43": f(4, 3), "c53": f(5, 3), "c24": f(2, 4), "ties": ties}


ARRAYS = _arrays()
NAMES = sorted(ARRAYS)

SNIPPETS = {
    # values
    "unary_specials": lambda m, t: [m.tan(t.s_trig)] + [f(t.s) for f in (m.rsqrt, m.log2, m.log10, m.log1p, m.expm1, m.erf,
                                                      m.ceil, m.trunc, m.round, m.frac, m.nan_to_num)],
    "binary_specials": lambda m, t: [f(t.s[:, None], t.s) for f in (m.atan2, m.hypot, m.logaddexp)]
    + [m.fmod(t.s[:8, None], t.s[:8])],      # fmod(-1e30, 1e-30): |a / b| >= 2**23 is not exact (README)
    "arctan2_alias": lambda m, t: m.arctan2(t.x, t.y),
    "round_decimals": lambda m, t: m.round(t.x * 100, decimals=-1) + m.round(t.x, decimals=3),
    "nan_to_num_args": lambda m, t: t.s.nan_to_num(nan=-1.0, posinf=7.0),
    "lerp": lambda m, t: m.lerp(t.x, t.y, 0.75) + t.x.lerp(t.z, t.w),
    "addcmul_addcdiv": lambda m, t: m.addcmul(t.x, t.y, t.z, value=-0.5) + m.addcdiv(t.x, t.y, t.z.abs() + 1, value=2),
    "addmm_baddbmm": lambda m, t: [m.addmm(t.m25, t.m23, t.m35, beta=0.5, alpha=2), m.baddbmm(t.b225, t.b223, t.b235, beta=0)],
    "cumsum_cumprod": lambda m, t: [m.cumsum(t.x, dim=1), t.x.cumprod(0), m.cumsum(t.i, 0), t.i.cumprod(1)],
    "prod": lambda m, t: [m.prod(t.x), t.x.prod(1, keepdim=True), m.prod(t.i, 0)],
    "norms": lambda m, t: [m.norm(t.x), t.x.norm(1, dim=0), m.linalg.vector_norm(t.x, float("inf"), (0, 1)),
                           m.linalg.norm(t.x, "fro"), m.linalg.norm(t.x, -1), m.dist(t.x, t.y, 3)],
    "cdist": lambda m, t: m.cdist(t.c43, t.c53, p=1.0),
    "sort": lambda m, t: list(m.sort(t.x, dim=0, descending=True)) + [m.argsort(t.x, dim=1)],
    "sort_ties_nan": lambda m, t: list(m.sort(t.ties, stable=True)) + list(t.ties.sort(dim=0, descending=True, stable=True)),
    "topk": lambda m, t: list(m.topk(t.x, 2, dim=1)) + list(t.x.topk(3, dim=0, largest=False)),
    "median_kthvalue": lambda m, t: [m.median(t.x), *m.median(t.x, 1), *m.kthvalue(t.x, 2, 0, True)],
    "median_nan": lambda m, t: [m.median(t.ties), *m.median(t.ties, 1)],
    "any_all": lambda m, t: [m.any(t.x > 1), m.all(t.x > -3, 1), m.any(t.i, 0)],
    "promotion": lambda m, t: [m.sqrt(t.i.abs()), m.exp(t.x > 0), m.where(t.x > 0, t.i, 0.5), m.maximum(t.i, t.x),
                               m.clamp(t.i, -1, 1), m.clamp(t.i, min=0.5), m.sigmoid(t.i), m.logsumexp(t.i, 1),
                               m.abs(t.i), m.floor(t.i), m.where(t.x > 0, t.i, 2), m.minimum(t.i > 0, t.x > 0)],
    # errors
    "err_topk_k": lambda m, t: m.topk(t.x, 5, dim=1),
    "err_kthvalue_k": lambda m, t: m.kthvalue(t.x, 0),
    "err_sort_dim": lambda m, t: m.sort(t.x, dim=2),
    "err_cumsum_dim": lambda m, t: m.cumsum(t.x, dim=-3),
    "err_addmm_shapes": lambda m, t: m.addmm(t.m25, t.m23, t.m23),
    "err_cdist_cols": lambda m, t: m.cdist(t.c43, t.c24),
    "err_frac_int": lambda m, t: m.frac(t.i),
    "err_lerp_int": lambda m, t: m.lerp(t.i, t.i, 0.5),
    "err_hypot_int": lambda m, t: m.hypot(t.i, t.i),
    "err_fmod_int_zero": lambda m, t: m.fmod(t.i, 0),
    "err_norm_int": lambda m, t: m.linalg.vector_norm(t.i),
    "err_abs_bool": lambda m, t: m.abs(t.x > 0),
    "err_softmax_int": lambda m, t: m.softmax(t.i, 0),
    "err_median_dim": lambda m, t: m.median(t.x, 2),
    "matmul_int": lambda m, t: [t.i @ t.i.T, m.matmul(t.i[0], t.i.T)],
    "err_matmul_mixed": lambda m, t: t.i @ t.x.T,
}
#: torch's error type → the ggmlgrad error types that correspond (see the module docstring).
_ERRORS = {RuntimeError: (ValueError, RuntimeError), IndexError: (ValueError, IndexError), TypeError: (TypeError,),
           NotImplementedError: (TypeError, NotImplementedError), ValueError: (ValueError,)}
#: Snippets whose dtype error is torch's RuntimeError and ggmlgrad's TypeError (its rule for a wrong dtype).
_DTYPE_ERRORS = {"err_norm_int", "err_matmul_mixed"}


def _flat(out) -> list:
    if isinstance(out, (list, tuple)):
        return [x for o in out for x in _flat(o)]
    return [out]


def _inputs(m, tensors=None):
    if tensors is None:
        tensors = [m.tensor(ARRAYS[k]) if m is gg else torch.from_numpy(ARRAYS[k].copy()) for k in NAMES]
    return SimpleNamespace(**dict(zip(NAMES, tensors)))


def _torch_outcome(fn):
    try:
        return "value", [t.detach().numpy() for t in _flat(fn(torch, _inputs(torch)))]
    except Exception as e:  # noqa: BLE001  (compared below)
        return "error", type(e)


def _gg_outcome(fn, mode: str):
    try:
        if mode == "capture":
            captured = gg.capture(lambda *ts: fn(gg, _inputs(gg, ts)))
            for _ in range(2):                      # recorded, then replayed
                out = captured(*[ARRAYS[k] for k in NAMES])
            return "value", [np.asarray(v) for v in _flat(out)]
        with gg.graph_mode(mode == "graph"):
            return "value", [t.numpy() for t in _flat(fn(gg, _inputs(gg)))]
    except Exception as e:  # noqa: BLE001
        return "error", type(e)


@pytest.mark.parametrize("mode", ["eager", "graph", "capture"])
@pytest.mark.parametrize("name", sorted(SNIPPETS))
def test_snippet_matches_torch(name, mode):
    fn = SNIPPETS[name]
    want_kind, want = _torch_outcome(fn)
    got_kind, got = _gg_outcome(fn, mode)
    if want_kind == "error":
        assert got_kind == "error", f"{name}: torch raises {want.__name__}, ggmlgrad ({mode}) gave values"
        allowed = (TypeError,) if name in _DTYPE_ERRORS else _ERRORS[want]
        assert issubclass(got, allowed), f"{name}: torch raises {want.__name__}, ggmlgrad {got.__name__}"
        return
    assert got_kind == "value", f"{name}: torch gives values, ggmlgrad ({mode}) raised {got.__name__}"
    assert len(got) == len(want)
    for g, w in zip(got, want):
        _same_values(np.asarray(g), w, 2e-6, 1e-6)


@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_whole_tensor_comparisons_match_torch(mode):
    """allclose / equal return Python bools (read from the device), as torch."""
    a = np.array([1.0, np.nan, np.inf, -2.0], np.float32)
    cases = [(a, a + 1e-6), (a, a), (a, a + 1e-3), (a[:2], a[:3]), (np.zeros(0, np.float32), np.zeros(0, np.float32))]
    with gg.graph_mode(mode == "graph"):
        for x, y in cases:
            for kw in ({}, {"equal_nan": True}, {"rtol": 1e-2, "atol": 0.0}):
                if x.shape == y.shape:
                    assert gg.allclose(gg.tensor(x), gg.tensor(y), **kw) == torch.allclose(
                        torch.from_numpy(x), torch.from_numpy(y), **kw), (x, y, kw)
            assert gg.equal(gg.tensor(x), gg.tensor(y)) == torch.equal(torch.from_numpy(x), torch.from_numpy(y))


@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_gradients_at_zeros_match_torch(mode):
    """prod/cumprod with zeros, norms and cdist at a zero vector, sort/topk/median through their indices."""
    x = np.array([[0.0, 2.0, -3.0, 0.5], [1.5, 0.0, 0.0, 2.0], [0.0, 0.0, 0.0, 0.0]], np.float32)
    w = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)

    def program(m, t):
        return [m.prod(t, 1), t.prod(), m.cumprod(t, 1) * m.tensor(w), m.norm(t, dim=1), m.linalg.vector_norm(t, 3, 1),
                m.cdist(t, t), m.sort(t * m.tensor(w), 1).values[:, :2], m.topk(t + m.tensor(w), 2).values,
                m.median(t + m.tensor(w), 0).values]

    def grads(m):
        t = m.tensor(x, requires_grad=True)
        sum(o.sum() for o in program(m, t)).backward()
        return t.grad.numpy()

    with gg.graph_mode(mode == "graph"):
        got = grads(gg)
    np.testing.assert_allclose(got, grads(torch), rtol=1e-5, atol=1e-5)


def test_large_rows_sort_like_torch():
    """Rows longer than the stable limit (2896) still sort NaN and infinities as torch; values match."""
    r = np.random.default_rng(3)
    x = np.round(r.standard_normal((2, 4000)) * 3).astype(np.float32)
    x[0, 10], x[1, 7], x[1, 8] = np.nan, np.inf, -np.inf
    for desc in (False, True):
        got = gg.sort(gg.tensor(x), descending=desc).values.numpy()
        want = torch.sort(torch.from_numpy(x), descending=desc).values.numpy()
        np.testing.assert_array_equal(got, want)
        # the indices pick the values (any order among equal ones)
        idx = gg.argsort(gg.tensor(x), descending=desc).numpy()
        np.testing.assert_array_equal(np.take_along_axis(x, idx, 1), want)


def test_math_accuracy_sweeps_match_torch():
    """Dense sweeps of the composed kernels: erf, atan2 and expm1/log1p within a few float32 ulp of torch."""
    x = np.linspace(-6, 6, 40001).astype(np.float32)
    assert np.max(np.abs(gg.erf(gg.tensor(x)).numpy() - torch.erf(torch.from_numpy(x)).numpy())) < 3e-7
    small = np.concatenate([np.geomspace(1e-10, 10, 2000), -np.geomspace(1e-10, 0.9, 2000)]).astype(np.float32)
    # On a GPU device above |x| = 2**-6 the formulas use the device's log and exp: 4.7e-6 relative measured
    # on lavapipe (its log is off by 1.6e-7 absolute near 1); below, products only (1.2e-7 there).
    mid = 4e-7 if gg.get_device().is_host else 1e-5
    for f in ("log1p", "expm1"):
        got, want = getattr(gg, f)(gg.tensor(small)).numpy(), getattr(torch, f)(torch.from_numpy(small)).numpy()
        rel = np.abs(got - want) / np.abs(want)
        assert np.max(rel[np.abs(small) < 2 ** -6]) < 4e-7, f
        assert np.max(rel) < mid, f
    r = np.random.default_rng(0)
    y, z = (r.standard_normal(20000) * 10 ** r.uniform(-3, 3, 20000)).astype(np.float32), r.standard_normal(20000).astype(np.float32)
    assert np.max(np.abs(gg.atan2(gg.tensor(y), gg.tensor(z)).numpy() - torch.atan2(torch.from_numpy(y), torch.from_numpy(z)).numpy())) < 3e-7
    halves = (np.arange(-2000, 2000) / 2).astype(np.float32)
    np.testing.assert_array_equal(gg.round(gg.tensor(halves)).numpy(), torch.round(torch.from_numpy(halves)).numpy())
    assert math.isclose(gg.log2(gg.tensor([8.0])).item(), 3.0, rel_tol=2e-7)
