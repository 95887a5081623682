"""floor_divide and remainder with torch's float32 semantics (its fmod-based div_floor_floating):
right when the float32 quotient a / b rounds up to an integer (-1.9946 // -0.39892), at ±0,
±inf and NaN, and exact for int32. References: NumPy float64 (exact for float32 operands while
|a / b| < 2**23), Python's divmod for the special values, torch where installed. Each runs in
eager, graph and check mode."""
from __future__ import annotations

import math

import numpy as np
import pytest

import ggmlgrad as gg

MODES = {"eager": dict(on=False), "graph": dict(on=True), "check": dict(on=True, check=True)}


def _pairs(seed: int, n: int = 4000) -> tuple[np.ndarray, np.ndarray]:
    """Random float32 pairs, half of them with a quotient one float32 step away from an integer."""
    rng = np.random.default_rng(seed)
    b = (rng.standard_normal(n) * np.exp(rng.uniform(-6, 6, n))).astype(np.float32)
    k = rng.integers(-3000, 3000, n).astype(np.float32)
    near = (k * b).astype(np.float32)
    near = np.nextafter(near, np.where(rng.integers(0, 2, n) == 1, np.inf, -np.inf).astype(np.float32))
    free = (rng.standard_normal(n) * np.exp(rng.uniform(-6, 6, n))).astype(np.float32)
    a = np.concatenate([near, free]).astype(np.float32)
    b = np.concatenate([b, b])
    keep = np.abs(a.astype(np.float64) / b) < 2.0 ** 23     # the exact range
    return a[keep], b[keep]


def _run(fn, a, b, mode):
    with gg.graph_mode(**MODES[mode]):
        ta, tb = (gg.tensor(a) if isinstance(a, np.ndarray) else a), (gg.tensor(b) if isinstance(b, np.ndarray) else b)
        return fn(ta, tb).numpy()


def _float64_reference(a, b):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    q = np.floor(a64 / b64)
    return q, (a64 - q * b64).astype(np.float32)    # a - q*b is exact in float64, rounded once


@pytest.mark.parametrize("mode", list(MODES))
def test_random_and_near_integer_quotients_match_float64_floor(mode):
    a, b = _pairs(1)
    q_ref, r_ref = _float64_reference(a, b)
    naive = np.floor((a / b).astype(np.float32))
    assert (naive != q_ref).sum() > 100, "the sample must contain quotients that round up to an integer"
    q = _run(gg.floor_divide, a, b, mode)
    r = _run(gg.remainder, a, b, mode)
    np.testing.assert_array_equal(q, q_ref)
    nz = r_ref != 0
    np.testing.assert_array_equal(r[nz], r_ref[nz])
    np.testing.assert_array_equal(r[~nz], 0.0)
    # the operators and NumPy's float32 divmod agree as well
    np.testing.assert_array_equal(_run(lambda x, y: x // y, a, b, mode), np.floor_divide(a, b))
    np.testing.assert_array_equal(_run(lambda x, y: x % y, a, b, mode)[nz], np.remainder(a, b)[nz])


def test_the_issue_example():
    b = np.float32(-0.39892)
    for _ in range(10000):   # a just above 5 * b (a / b just below 5) that float32 division rounds up to 5
        a = np.nextafter(np.float32(5 * np.float64(b)), np.float32(np.inf))
        if a / b == 5.0 and np.float64(a) / np.float64(b) < 5:
            break
        b = np.nextafter(b, np.float32(-1))
    assert a / b == 5.0 and np.float64(a) / np.float64(b) < 5
    for mode in MODES:
        assert _run(gg.floor_divide, np.array([a]), np.array([b]), mode).tolist() == [4.0]
        r = _run(gg.remainder, np.array([a]), np.array([b]), mode)[0]
        assert r == np.float32(np.float64(a) - 4 * np.float64(b)) and (r < 0) == (b < 0)


SPECIAL_A = [math.inf, -math.inf, -1.0, 1.0, 1.0, -1.0, 0.0, -0.0, -4.0, 4.0, 3.0, math.nan, 5.0, -5.0, 0.0,
             -0.5, 0.5, 1e-45, -1e-45, -1e-40, 70000.0, 7.0, -7.0]
SPECIAL_B = [2.0, 2.0, math.inf, math.inf, -math.inf, -math.inf, math.inf, 2.0, 2.0, -2.0, 0.0, 1.0, -0.0, 0.0, 0.0,
             3.0, -3.0, 1e30, 1e30, 3.0, 3.3, math.nan, 2.5]


def _python_divmod(a: float, b: float) -> tuple[float, float]:
    """Python's float floor division and modulo, with torch's results for b == 0 and a = ±inf."""
    if b == 0:
        return (math.nan if a == 0 or math.isnan(a) else math.copysign(math.inf, a) * math.copysign(1, b)), math.nan
    if math.isinf(a) or math.isnan(a) or math.isnan(b):
        return math.nan, math.nan
    a32, b32 = float(np.float32(a)), float(np.float32(b))
    return a32 // b32, float(np.float32(a32 % b32))


@pytest.mark.parametrize("mode", list(MODES))
def test_special_values_follow_pythons_divmod(mode):
    a, b = np.array(SPECIAL_A, np.float32), np.array(SPECIAL_B, np.float32)
    q = _run(gg.floor_divide, a, b, mode)
    r = _run(gg.remainder, a, b, mode)
    want = [_python_divmod(x, y) for x, y in zip(SPECIAL_A, SPECIAL_B)]
    np.testing.assert_array_equal(q, np.array([w[0] for w in want], np.float32))
    np.testing.assert_array_equal(r, np.array([w[1] for w in want], np.float32))
    # signed zeros: a zero quotient has the sign of a / b, a zero remainder the sign of a (torch's fmod)
    with np.errstate(all="ignore"):
        zq = q == 0
        np.testing.assert_array_equal(np.signbit(q[zq]), np.signbit((a / b)[zq]))
        zr = r == 0
        np.testing.assert_array_equal(np.signbit(r[zr]), np.signbit(a[zr]))


@pytest.mark.parametrize("mode", list(MODES))
def test_int32_stays_exact(mode):
    rng = np.random.default_rng(5)
    a = rng.integers(-2 ** 22, 2 ** 22, 500).astype(np.int32)
    b = rng.integers(1, 5000, 500).astype(np.int32) * rng.choice([-1, 1], 500).astype(np.int32)
    with gg.graph_mode(**MODES[mode]):
        ta, tb = gg.tensor(a, dtype=gg.int32), gg.tensor(b, dtype=gg.int32)
        q, r = gg.floor_divide(ta, tb), gg.remainder(ta, tb)
        assert q.dtype is gg.int32 and r.dtype is gg.int32
        np.testing.assert_array_equal(q.numpy(), np.floor_divide(a, b))
        np.testing.assert_array_equal(r.numpy(), np.remainder(a, b))
        np.testing.assert_array_equal((ta % 7).numpy(), a % 7)
        np.testing.assert_array_equal((ta // -3).numpy(), a // -3)


@pytest.mark.parametrize("mode", list(MODES))
def test_scalar_operands(mode):
    a, _ = _pairs(2, 500)
    for s in (0.39892, -2.5, 3.0):
        s32 = np.float32(s)
        q_ref, r_ref = _float64_reference(a, np.full_like(a, s32))
        np.testing.assert_array_equal(_run(lambda x, y: x // y, a, float(s32), mode), q_ref)
        np.testing.assert_array_equal(_run(lambda x, y: x % y, a, float(s32), mode), r_ref + np.float32(0))
        q2, _ = _float64_reference(np.full_like(a[a != 0], s32), a[a != 0])
        np.testing.assert_array_equal(_run(lambda x, y: x // y, float(s32), a[a != 0], mode), q2)


@pytest.mark.parametrize("mode", list(MODES))
def test_remainder_gradient_is_torchs(mode):
    a = np.array([5.3, -5.3, 2.0, -0.7], np.float32)
    b = np.array([0.39892, 0.7, -1.5, 2.5], np.float32)
    with gg.graph_mode(**MODES[mode]):
        ta, tb = gg.tensor(a, requires_grad=True), gg.tensor(b, requires_grad=True)
        out = gg.remainder(ta, tb)
        (out * gg.tensor([1.0, 2.0, 3.0, 4.0])).sum().backward()
        np.testing.assert_array_equal(out.detach().numpy(), _float64_reference(a, b)[1])
        np.testing.assert_array_equal(ta.grad.numpy(), [1.0, 2.0, 3.0, 4.0])
        # d/db (a - floor(a / b) * b) = -floor(a / b), by central differences of the float64 formula
        h = 1e-6
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        fd = ((a64 - np.floor(a64 / (b64 + h)) * (b64 + h)) - (a64 - np.floor(a64 / (b64 - h)) * (b64 - h))) / (2 * h)
        np.testing.assert_allclose(tb.grad.numpy(), fd * [1.0, 2.0, 3.0, 4.0], rtol=1e-5)


def test_same_values_and_signs_as_torch():
    torch = pytest.importorskip("torch")
    a, b = _pairs(3)
    a = np.concatenate([a, np.array(SPECIAL_A, np.float32)])
    b = np.concatenate([b, np.array(SPECIAL_B, np.float32)])
    for name in ("floor_divide", "remainder"):
        for mode in MODES:
            got = _run(getattr(gg, name), a, b, mode)
            want = getattr(torch, name)(torch.tensor(a), torch.tensor(b)).numpy()
            np.testing.assert_array_equal(got, want, err_msg=f"{name} ({mode})")
            zero = want == 0
            np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(want[zero]), err_msg=f"{name} ({mode})")
    ta, tb = torch.tensor(a[:50], requires_grad=True), torch.tensor(b[:50], requires_grad=True)
    torch.remainder(ta, tb).sum().backward()
    ga, gb = gg.tensor(a[:50], requires_grad=True), gg.tensor(b[:50], requires_grad=True)
    gg.remainder(ga, gb).sum().backward()
    np.testing.assert_array_equal(ga.grad.numpy(), ta.grad.numpy())
    np.testing.assert_array_equal(gb.grad.numpy(), tb.grad.numpy())
