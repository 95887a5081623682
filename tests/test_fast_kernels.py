"""ggmlgrad's vectorised activation kernels (kernels/ggmlgrad_kernels.c) and the fast build.

The kernels are checked two ways: compiled here into a temporary library and called directly on
float32 samples spread over the whole float range (every exponent, NaN, +-Inf, the branch
points), against NumPy float64 in units of float32 ulp; and, where the fast build is active, as
ggml custom-op nodes inside graphs in every mode. The build command is checked for its
no-compiler path in a subprocess.
"""
from __future__ import annotations

import ctypes
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ggmlgrad as gg
from ggmlgrad import fastbuild
from ggmlgrad._ggml import TensorStruct
from ggmlgrad.ops import fast_math
from kernel_helpers import check_linear_in_mode, matrix_header

KERNEL_SOURCE = Path(gg.__file__).with_name("kernels") / "ggmlgrad_kernels.c"


def _np_sigmoid(x):
    return np.where(x >= 0, 1 / (1 + np.exp(-np.abs(x))), np.exp(-np.abs(x)) / (1 + np.exp(-np.abs(x))))


def _np_gelu_tanh(x):
    return x * _np_sigmoid(2 * np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))


_erfc = np.vectorize(math.erfc, otypes=[np.float64])


def _np_normal_cdf(x):
    return 0.5 * _erfc(-x / np.sqrt(2))


def _np_gelu_erf_grad(x):
    return _np_normal_cdf(x) + x * np.exp(-0.5 * x * x) / np.sqrt(2 * np.pi)


def _np_gelu_tanh_grad_terms(x):
    """(s, x s (1 - s) 2u'): the tanh-form GELU's derivative is their sum (s = sigmoid(2u)). Where x^2
    overflows float32 the second is NaN, as torch's float32 0 * Inf (and the composite's)."""
    c = np.sqrt(2 / np.pi)
    s = _np_sigmoid(2 * c * (x + 0.044715 * x ** 3))
    x2_overflows = x * x > np.finfo(np.float32).max
    return s, np.where(x2_overflows, np.nan, x * s * (1 - s) * 2 * c * (1 + 3 * 0.044715 * x * x))


REFERENCES = {"exp": np.exp, "tanh": np.tanh, "sigmoid": _np_sigmoid, "gelu_tanh": _np_gelu_tanh,
              "gelu_erf": lambda x: x * _np_normal_cdf(x), "gelu_erf_grad": _np_gelu_erf_grad,
              "elu": lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0))),
              "softplus": lambda x: np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x))),
              "relu": lambda x: np.maximum(x, 0.0), "gelu_tanh_grad": lambda x: sum(_np_gelu_tanh_grad_terms(x))}
# Max error in float32 ulp of the float64 reference. gelu_tanh's bound covers its input rounding:
# u = c (x + 0.044715 x^3) carries a float32 rounding that exp(-2u) magnifies by |2u| (up to ~200).
# gelu_erf's bound: its far left tail (x < -10) exponentiates x^2/2 near 50..90 (5 ulp for |x| < 10).
MAX_ULP = {"exp": 1.5, "tanh": 2.0, "sigmoid": 3.0, "gelu_tanh": 256.0, "gelu_erf": 10.0, "gelu_erf_grad": 12.0,
           "elu": 2.0, "softplus": 4.0, "relu": 0.0, "gelu_tanh_grad": 256.0}
# Error measured in ulps of the terms' size where a sum of terms cancels: GELU's derivative
# Phi(x) + x phi(x) crosses zero near x = -0.75, where ulps of the result itself mean nothing.
SCALE = {"gelu_erf_grad": lambda x: _np_normal_cdf(x) + np.abs(x) * np.exp(-0.5 * x * x) / np.sqrt(2 * np.pi),
         "gelu_tanh_grad": lambda x: sum(np.abs(t) for t in _np_gelu_tanh_grad_terms(x))}


def _samples() -> np.ndarray:
    rng = np.random.default_rng(1)
    bits = rng.integers(0, 2 ** 32, 400_000, dtype=np.uint64).astype(np.uint32)   # every exponent
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, 0.625, -0.625, 88.72283, 88.7229, -103.97, -104.0,
               1e-38, -1e-45, 9.0, -9.0, 20.0, -20.0, 44.0, -44.0]
    return np.concatenate([bits.view(np.float32), np.linspace(-40, 40, 80_001, dtype=np.float32),
                           np.array(special, np.float32)])


def _ulp_error(y: np.ndarray, ref64: np.ndarray, scale64: np.ndarray | None = None) -> float:
    """Largest |y - ref| in ulps of the float32-rounded reference (or of ``scale64``), over
    normal-range results."""
    ref32 = ref64.astype(np.float32)
    assert np.array_equal(np.isnan(y), np.isnan(ref32)), "NaN positions differ"
    inf = np.isinf(ref32)
    np.testing.assert_array_equal(y[inf], ref32[inf])
    ok = np.isfinite(ref32) & (np.abs(ref32) >= np.finfo(np.float32).tiny)
    tiny = np.isfinite(ref32) & ~ok
    assert np.all(np.abs(y[tiny].astype(np.float64) - ref64[tiny]) <= 2 * np.finfo(np.float32).tiny)
    size = np.abs(ref32[ok]) if scale64 is None else np.maximum(np.abs(ref32[ok]), scale64[ok].astype(np.float32))
    ulp = np.spacing(size).astype(np.float64)
    return float(np.max(np.abs(y[ok].astype(np.float64) - ref64[ok]) / ulp))


@pytest.fixture(scope="module")
def kernel_lib(tmp_path_factory):
    cc = fastbuild.find_compilers()
    if cc is None:
        pytest.skip("no C compiler to build the kernels with")
    header = _ggml_header_dir()
    out = tmp_path_factory.mktemp("kernels") / "libgk.so"
    _, flags = fastbuild.cpu_flags()
    subprocess.run([cc[0], *fastbuild.KERNEL_CFLAGS, *flags, f"-I{header}", str(KERNEL_SOURCE), "-o", str(out),
                    "-lm"], check=True)
    return ctypes.CDLL(str(out))


def test_kernels_give_the_same_bits_without_the_avx512_clones(kernel_lib, tmp_path):
    """The library picks an AVX-512 copy of every loop where the CPU has it (GK_VEC); a build without
    the copies (the AVX2 code other CPUs run) must give the same bits for every kernel."""
    header = _ggml_header_dir()
    out = tmp_path / "libgk_noclones.so"
    _, flags = fastbuild.cpu_flags()
    subprocess.run([fastbuild.find_compilers()[0], *fastbuild.KERNEL_CFLAGS, *flags, "-DGK_NO_CLONES",
                    f"-I{header}", str(KERNEL_SOURCE), "-o", str(out), "-lm"], check=True)
    plain = ctypes.CDLL(str(out))
    x = _samples()
    g = np.random.default_rng(5).standard_normal(x.size).astype(np.float32)
    for name in sorted(REFERENCES):
        a, b = _call(kernel_lib, name, x, nth=2), _call(plain, name, x, nth=2)
        np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32), err_msg=name)
    for name in ["relu_grad", "tanh_backward", "gelu_erf_backward", "gelu_tanh_backward"]:
        a, b = _call2(kernel_lib, name, g, x, nth=2), _call2(plain, name, g, x, nth=2)
        np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32), err_msg=name)
    rng = np.random.default_rng(6)
    for kernel, (k, n, rows) in [("matmul_small_k", (7, 70, 9)), ("matmul_small_k", (20, 5, 3)),
                                 ("matvec_rows", (300, 37, 3)), ("matvec_rows", (28, 5, 2))]:
        xm, wm = rng.standard_normal((rows, k)).astype(np.float32), rng.standard_normal((n, k)).astype(np.float32)
        ys = []
        for lib_ in (kernel_lib, plain):
            y = np.zeros((rows, n), np.float32)
            d, hw, hx = matrix_header(y), matrix_header(wm), matrix_header(xm)
            d.src[0], d.src[1] = ctypes.addressof(hw), ctypes.addressof(hx)
            getattr(lib_, f"ggmlgrad_{kernel}")(ctypes.byref(d), 0, 1, None)
            ys.append(y)
        np.testing.assert_array_equal(ys[0].view(np.uint32), ys[1].view(np.uint32), err_msg=kernel)
    for width in (8, 40, 300):         # log_softmax: column-wise (short), block and row-wise (long) passes
        xl = (rng.standard_normal((70, width)) * 5).astype(np.float32)
        ys = []
        for lib_ in (kernel_lib, plain):
            y, out = np.zeros_like(xl), np.zeros_like(xl)
            hx, hy, ho = _rows_header(xl), _rows_header(y), _rows_header(out)
            lib_.ggmlgrad_log_softmax_rows(ctypes.byref(hy), ctypes.byref(hx), 0, 1, None)
            lib_.ggmlgrad_log_softmax_rows_backward(ctypes.byref(ho), ctypes.byref(hx), ctypes.byref(hy), 0, 1, None)
            ys.append(np.concatenate([y, out]))
        np.testing.assert_array_equal(ys[0].view(np.uint32), ys[1].view(np.uint32), err_msg=f"log_softmax {width}")
    xb, bb = rng.standard_normal((37, 24)).astype(np.float32), rng.standard_normal(24).astype(np.float32)
    a, b = (_add_rows(lib_, xb, bb, nth=2) for lib_ in (kernel_lib, plain))
    np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32), err_msg="add_rows")
    xs = rng.standard_normal((37, 133)).astype(np.float32)
    a, b = (_column_sums(lib_, xs, 133, nth=2) for lib_ in (kernel_lib, plain))
    np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32), err_msg="column_sum")


def _ggml_header_dir() -> Path:
    import libggml
    return Path(next(iter(libggml.__path__))) / "include"


def _header(a: np.ndarray):
    """A ggml tensor header over a 1-D contiguous float32 array (the kernels read ne, nb, data)."""
    t = TensorStruct()
    t.ne[0], t.ne[1], t.ne[2], t.ne[3] = a.size, 1, 1, 1
    t.nb[0] = 4
    t.nb[1] = t.nb[2] = t.nb[3] = 4 * a.size
    t.data = a.ctypes.data
    return t


def _call(lib, name: str, x: np.ndarray, nth: int) -> np.ndarray:
    """Run kernel ``name`` over a 1-D contiguous x, split across ``nth`` simulated threads."""
    y = np.full_like(x, 7.0)

    a, d = _header(x), _header(y)
    fn = getattr(lib, f"ggmlgrad_{name}")
    for i in range(nth):
        fn(ctypes.byref(d), ctypes.byref(a), i, nth, None)
    return y


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_kernel_ulp_error_over_the_float_range(kernel_lib, name):
    x = _samples()
    y = _call(kernel_lib, name, x, nth=3)
    with np.errstate(all="ignore"):
        x64 = x.astype(np.float64)
        err = _ulp_error(y, REFERENCES[name](x64), SCALE[name](x64) if name in SCALE else None)
    assert err <= MAX_ULP[name], f"{name}: {err:.2f} ulp"


def test_relu_grad_kernel_passes_g_where_torch_does(kernel_lib):
    y = np.array([0.0, -0.0, 2.0, np.nan, np.inf, 1e-40] * 3, np.float32)     # relu outputs
    g = np.arange(y.size, dtype=np.float32) + 1
    out = np.full_like(g, 7.0)

    def header(a):
        t = TensorStruct()
        t.ne[0], t.ne[1], t.ne[2], t.ne[3] = 6, 3, 1, 1
        t.nb[0], t.nb[1], t.nb[2], t.nb[3] = 4, 24, 72, 72
        t.data = a.ctypes.data
        return t
    hd, hg, hy = header(out), header(g), header(y)
    for i in range(2):
        kernel_lib.ggmlgrad_relu_grad(ctypes.byref(hd), ctypes.byref(hg), ctypes.byref(hy), i, 2, None)
    np.testing.assert_array_equal(out, np.where((y > 0) | np.isnan(y), g, 0.0))


def _call2(lib, name: str, g: np.ndarray, x: np.ndarray, nth: int) -> np.ndarray:
    """Run two-input kernel ``name`` over 1-D contiguous g and x, split across ``nth`` threads."""
    out = np.full_like(x, 7.0)

    hd, hg, hx = _header(out), _header(g), _header(x)
    for i in range(nth):
        getattr(lib, f"ggmlgrad_{name}")(ctypes.byref(hd), ctypes.byref(hg), ctypes.byref(hx), i, nth, None)
    return out


# Fused backward kernel -> (the derivative it multiplies g by, as a float64 reference of x; the
# bound of that derivative's kernel in ulp, with its SCALE)
BACKWARDS = {"gelu_erf_backward": "gelu_erf_grad", "gelu_tanh_backward": "gelu_tanh_grad"}


@pytest.mark.parametrize("name", sorted(BACKWARDS))
def test_fused_backward_kernel_is_g_times_the_derivative(kernel_lib, name):
    x = _samples()
    rng = np.random.default_rng(2)
    g = rng.standard_normal(x.size).astype(np.float32)
    g[:7] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, 1e-30]
    out = _call2(kernel_lib, name, g, x, nth=3)
    with np.errstate(all="ignore"):
        x64, g64 = x.astype(np.float64), g.astype(np.float64)
        d = REFERENCES[BACKWARDS[name]](x64)
        # an infinite g takes the derivative rounded to float32: times one that underflows it is NaN
        d = np.where(np.isinf(g64), d.astype(np.float32), d)
        # a derivative near or below float32's normal range has an absolute error (see _ulp_error),
        # which g carries into a normal product: measure against |g| times 4x that range's bottom there
        scale = np.abs(g64) * np.maximum(SCALE[BACKWARDS[name]](x64), 4 * np.finfo(np.float32).tiny)
        err = _ulp_error(out, g64 * d, scale)
    # the derivative's own bound, plus the product's rounding
    assert err <= MAX_ULP[BACKWARDS[name]] + 1, f"{name}: {err:.2f} ulp"


def test_tanh_backward_kernel_is_g_times_one_minus_y_squared(kernel_lib):
    y = np.concatenate([np.tanh(_samples()), np.array([np.nan, 1.0, -1.0, 0.0, np.inf], np.float32)])
    g = np.random.default_rng(3).standard_normal(y.size).astype(np.float32)
    g[-3:] = [np.inf, np.nan, -0.0]
    out = _call2(kernel_lib, "tanh_backward", g, y, nth=2)
    with np.errstate(all="ignore"):
        y64, g64 = y.astype(np.float64), g.astype(np.float64)
        # in ulps of |g| (|1 - y^2| + y^2): 1 - y^2 may cancel, as it does in torch's float32
        err = _ulp_error(out, g64 * (1 - y64 * y64), np.abs(g64) * (np.abs(1 - y64 * y64) + y64 * y64))
    assert err <= 1.0, f"tanh_backward: {err:.2f} ulp"


def _rows_header(a: np.ndarray) -> TensorStruct:
    t = TensorStruct()
    t.ne[0], t.ne[1], t.ne[2], t.ne[3] = a.shape[1], a.shape[0], 1, 1
    t.nb[0], t.nb[1] = 4, 4 * a.shape[1]
    t.nb[2] = t.nb[3] = 4 * a.size
    t.data = a.ctypes.data
    return t


def _np_log_softmax_rows(x64):
    """(x - m) - log(sum(exp(x - m))) per row; NaN rows where the row holds NaN or its max is infinite."""
    m = np.max(np.where(np.isnan(x64), -np.inf, x64), axis=1, keepdims=True)
    with np.errstate(all="ignore"):
        y = (x64 - m) - np.log(np.sum(np.exp(x64 - m), axis=1, keepdims=True))
    bad = np.isnan(x64).any(axis=1) | np.isinf(m[:, 0])
    y[bad] = np.nan
    return y


@pytest.mark.parametrize("width", [1, 2, 7, 8, 16, 17, 33, 300])
def test_log_softmax_rows_kernels_against_float64(kernel_lib, width):
    """Rows up to 16 wide run column-wise passes over blocks of 64 rows (200 rows over 3 and 2 threads:
    whole and partial blocks), longer ones row by row (from 256 the backward's exps too)."""
    rng = np.random.default_rng(width)
    x = (rng.standard_normal((200, width)) * 20).astype(np.float32)
    x[1, 0], x[2, -1], x[3, 0], x[4] = np.nan, np.inf, -np.inf, -np.inf       # NaN rows and a -inf entry
    x[5] += 1e30 if width > 1 else 0.0
    y = np.full_like(x, 7.0)
    hx, hy = _rows_header(x), _rows_header(y)
    for i in range(3):
        kernel_lib.ggmlgrad_log_softmax_rows(ctypes.byref(hy), ctypes.byref(hx), i, 3, None)
    ref = _np_log_softmax_rows(x.astype(np.float64))
    np.testing.assert_array_equal(np.isnan(y), np.isnan(ref))
    np.testing.assert_array_equal(y[np.isinf(ref)], ref[np.isinf(ref)])
    ok = np.isfinite(ref)
    m = np.max(np.where(np.isnan(x), -np.inf, x), axis=1, keepdims=True).astype(np.float64)
    # the roundings of x - m, of the log-sum and of the result
    with np.errstate(invalid="ignore"):
        tol = (np.spacing(np.abs(x - m).astype(np.float32)) + np.spacing(np.abs(ref).astype(np.float32))
               + 2 * np.spacing(np.float32(np.log(width) + 1))).astype(np.float64)
    assert np.all(np.abs(y[ok] - ref[ok]) <= tol[ok])
    # backward: g - exp(y) * sum(g) per row, from the forward's own output
    g = rng.standard_normal(x.shape).astype(np.float32)
    g[6, 0] = np.inf
    out = np.full_like(x, 7.0)
    hg, ho = _rows_header(g), _rows_header(out)
    for i in range(2):
        kernel_lib.ggmlgrad_log_softmax_rows_backward(ctypes.byref(ho), ctypes.byref(hg), ctypes.byref(hy), i, 2, None)
    with np.errstate(all="ignore"):
        y64, g64 = y.astype(np.float64), g.astype(np.float64)
        p32 = np.exp(y64).astype(np.float32).astype(np.float64)   # the softmax in float32: 0 * inf is NaN
        gref = g64 - p32 * g64.sum(axis=1, keepdims=True)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(gref))
    fin = np.isfinite(gref)
    scale = np.abs(g64) + np.exp(y64) * np.abs(g64).sum(axis=1, keepdims=True)
    assert np.all(np.abs(out[fin] - gref[fin]) <= 4 * np.spacing(scale.astype(np.float32))[fin])


def test_kernel_keeps_signed_zero_and_covers_every_element(kernel_lib):
    x = np.array([-0.0, 0.0] * 17, np.float32)      # 34 elements over 5 threads: uneven slices
    y = _call(kernel_lib, "tanh", x, nth=5)
    np.testing.assert_array_equal(np.signbit(y), np.signbit(x))
    z = _call(kernel_lib, "exp", np.zeros(1001, np.float32), nth=4)
    np.testing.assert_array_equal(z, np.ones(1001, np.float32))


def test_kernel_reads_strided_rows(kernel_lib):
    base = np.arange(24, dtype=np.float32).reshape(4, 6) / 10 - 1
    y = np.zeros((4, 3), np.float32)
    a, d = TensorStruct(), TensorStruct()
    for t, ne0, nb1, arr in ((a, 3, 24, base), (d, 3, 12, y)):
        t.ne[0], t.ne[1], t.ne[2], t.ne[3] = ne0, 4, 1, 1
        t.nb[0], t.nb[1], t.nb[2], t.nb[3] = 8 if t is a else 4, nb1, nb1 * 4, nb1 * 4
        t.data = arr.ctypes.data
    kernel_lib.ggmlgrad_tanh(ctypes.byref(d), ctypes.byref(a), 0, 1, None)   # every other column
    np.testing.assert_allclose(y, np.tanh(base[:, ::2].astype(np.float64)), rtol=3e-7)


needs_kernels = pytest.mark.skipif(not fast_math.ACTIVE, reason="runs on the fast build (python -m ggmlgrad build)")


@needs_kernels
@pytest.mark.parametrize("mode", ["eager", "graph", "check", "capture"])
def test_activations_use_the_kernels_in_every_mode(mode):
    x = np.concatenate([np.linspace(-12, 12, 253), [np.nan, np.inf, -np.inf]]).astype(np.float32).reshape(4, 64)
    F = gg.nn.functional
    fns = {"tanh": gg.tanh, "sigmoid": gg.sigmoid, "exp": gg.exp,
           "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"), "gelu_erf": F.gelu, "elu": F.elu,
           "softplus": lambda t: F.softplus(t, threshold=1e30)}

    def run(xb):
        return [f(gg.as_tensor(xb)) for f in fns.values()]
    if mode == "capture":
        outs = gg.capture(run)(x)
    else:
        with gg.graph_mode(mode != "eager", check=mode == "check"):
            outs = [t.numpy() for t in run(x)]
    for name, y in zip(fns, outs):
        with np.errstate(all="ignore"):
            ref = REFERENCES[name](x.astype(np.float64)).astype(np.float32)
        rtol = 2e-5 if name == "gelu_tanh" else 4e-6      # gelu_tanh: see MAX_ULP
        np.testing.assert_allclose(y, ref, rtol=rtol, atol=1e-37, err_msg=name)


@needs_kernels
@pytest.mark.parametrize("mode", ["eager", "graph", "capture"])
def test_fused_backward_nodes_give_the_derivatives_with_nan_and_inf(mode):
    x = np.concatenate([np.linspace(-12, 12, 61), [np.nan, np.inf, -np.inf]]).astype(np.float32).reshape(1, 64)
    F = gg.nn.functional
    fns = {"tanh": gg.tanh, "gelu_erf_grad": F.gelu, "gelu_tanh_grad": lambda t: F.gelu(t, approximate="tanh")}

    def grads(*xs):                      # one input per function: its own leaf and gradient
        out = []
        for f, xb in zip(fns.values(), xs):
            t = gg.as_tensor(xb).requires_grad_()
            f(t).sum().backward()
            out.append(t.grad)
        return out
    if mode == "capture":
        got = gg.capture(grads)(*(gg.tensor(x) for _ in fns))
    else:
        with gg.graph_mode(mode == "graph"):
            got = [g.numpy() for g in grads(*(x for _ in fns))]
    with np.errstate(all="ignore"):
        x64 = x.astype(np.float64)
        # 1 - y^2 of the forward's float32 y, as torch (near |y| = 1 one ulp of y is all of it)
        y32 = gg.tanh(gg.tensor(x)).numpy().astype(np.float64)
        refs = {"tanh": 1 - y32 * y32, "gelu_erf_grad": _np_gelu_erf_grad(x64),
                "gelu_tanh_grad": REFERENCES["gelu_tanh_grad"](x64)}
    for (name, ref), g in zip(refs.items(), got):
        np.testing.assert_allclose(g, ref.astype(np.float32), rtol=2e-5, atol=1e-37, err_msg=name)


def _np_gelu_tanh_grad(x):
    return sum(_np_gelu_tanh_grad_terms(x))


@needs_kernels
@pytest.mark.parametrize("mode", ["eager", "graph", "check", "capture"])
def test_gelu_backward_reuses_the_forwards_derivative_only_for_its_own_input(mode):
    # GELU of a computed node: in graph mode and capture the forward saves its derivative for the
    # backward (in eager each op is its own graph: recomputed). One node used by both GELU forms,
    # a slice and a transposed view of it: each backward must take its own input's derivative.
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((6, 64)) * 3).astype(np.float32)
    x[0, :4] = [np.nan, np.inf, -np.inf, 0.0]
    w = [rng.standard_normal(s).astype(np.float32) for s in ((6, 64), (6, 64), (6, 32), (64, 6))]
    F = gg.nn.functional

    def grad(xb, *ws):
        t = gg.as_tensor(xb).requires_grad_()
        h = t * 1.0
        terms = (F.gelu(h), F.gelu(h, approximate="tanh"), F.gelu(h[:, :32]), F.gelu(h.T))
        sum((a * b).sum() for a, b in zip(terms, ws)).backward()
        return t.grad
    if mode == "capture":
        got = gg.capture(grad)(gg.tensor(x), *(gg.tensor(a) for a in w))
    else:
        with gg.graph_mode(mode != "eager", check=mode == "check"):
            got = grad(x, *w).numpy()
    with np.errstate(all="ignore"):
        x64 = x.astype(np.float64)
        ref = w[0] * _np_gelu_erf_grad(x64) + w[1] * _np_gelu_tanh_grad(x64) + (w[3] * _np_gelu_erf_grad(x64).T).T
        ref[:, :32] += w[2] * _np_gelu_erf_grad(x64[:, :32])
    np.testing.assert_allclose(got, ref.astype(np.float32), rtol=2e-5, atol=1e-5)


@needs_kernels
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_values_are_the_same_with_and_without_the_saved_derivative(approximate):
    x = np.concatenate([np.linspace(-15, 15, 253), [np.nan, np.inf, -np.inf]]).astype(np.float32).reshape(4, 64)

    def f(xb):
        t = gg.as_tensor(xb).requires_grad_()
        return gg.nn.functional.gelu(t * 1.0, approximate=approximate)
    eager = f(x).detach().numpy()              # its own graph: the plain kernel
    captured = gg.capture(f)(gg.tensor(x))     # value and derivative in one node
    np.testing.assert_array_equal(captured, eager)


@needs_kernels
def test_captured_gelu_step_runs_no_second_gelu_pass():
    from ggmlgrad._ggml import lib
    from ggmlgrad._ggml.kernels import KERNELS, custom_fun
    w = gg.randn(8, 8, requires_grad=True)
    x = gg.randn(4, 8)

    def loss(xb):
        return gg.nn.functional.gelu(xb @ w).sum()
    step = gg.capture_step(loss, gg.optim.SGD([w], lr=0.1))
    step(x)
    rec = next(iter(step._cache.values()))
    funs = [custom_fun(lib.graph_node(g.graph, i)) for g in rec.graphs for i in range(g.n_nodes)]
    assert KERNELS["gelu_erf_parts"] in funs
    assert not {KERNELS["gelu_erf"], KERNELS["gelu_erf_backward"], KERNELS["gelu_erf_grad"]} & set(funs)


@needs_kernels
def test_tanh_network_gradients_match_finite_differences():
    x = gg.randn(3, 5, requires_grad=True)
    F = gg.nn.functional
    assert gg.gradcheck(lambda t: (gg.tanh(t) * gg.sigmoid(t) + gg.exp(t * 0.1)).sum(), [x])
    assert gg.gradcheck(lambda t: (F.gelu(t) + F.elu(t) * F.softplus(t) + F.gelu(t, approximate="tanh")).sum(), [x])


def _run_product_kernel(kernel, y, w, x, nth: int) -> None:
    """``y = x @ w^T`` by a product kernel, each of ``nth`` threads' slices in turn."""
    d, hw, hx = matrix_header(y), matrix_header(w), matrix_header(x)
    d.src[0], d.src[1] = ctypes.addressof(hw), ctypes.addressof(hx)
    for i in range(nth):
        kernel(ctypes.byref(d), i, nth, None)


@pytest.mark.parametrize("k, n, b, nth", [(1, 3, 5, 1), (4, 32, 32, 3), (7, 130, 9, 2), (15, 64, 4, 5),
                                           (16, 65, 3, 1), (20, 5, 6, 2)])
@pytest.mark.parametrize("strided", [False, True])
def test_matmul_small_k_kernel_against_float64(kernel_lib, k, n, b, nth, strided):
    """x @ w^T over threads' row slices, column blocks of 64, K up to the kernel's block (16) and the
    plain loop beyond it; strided operands (views of larger arrays, w transposed)."""
    rng = np.random.default_rng(k * 100 + n)
    if strided:
        x = rng.standard_normal((b, 2 * k)).astype(np.float32)[:, ::2]
        w = np.ascontiguousarray(rng.standard_normal((k, n)).astype(np.float32)).T
    else:
        x = rng.standard_normal((b, k)).astype(np.float32)
        w = rng.standard_normal((n, k)).astype(np.float32)
    x[0, 0] = np.nan if b > 1 else x[0, 0]
    y = np.full((b, n), 7.0, np.float32)
    _run_product_kernel(kernel_lib.ggmlgrad_matmul_small_k, y, w, x, nth)
    ref = x.astype(np.float64) @ w.astype(np.float64).T
    np.testing.assert_array_equal(np.isnan(y), np.isnan(ref))
    ok = ~np.isnan(ref)
    # float32 products summed in order: K roundings of at most the running sum of |terms|
    bound = k * np.abs(x).astype(np.float64) @ np.abs(w).astype(np.float64).T * 2.0 ** -24
    assert np.all(np.abs(y[ok] - ref[ok]) <= bound[ok] + 1e-30)


@pytest.mark.parametrize("k, n, b, nth", [(16, 4, 1, 1), (17, 5, 2, 3), (784, 256, 1, 2), (33, 9, 4, 4),
                                           (100, 3, 3, 1)])
@pytest.mark.parametrize("padded", [False, True])
def test_matvec_rows_kernel_against_float64(kernel_lib, k, n, b, nth, padded):
    """x @ w^T for a few rows of x: four rows of w at a time (and the 1..3 left), 16-lane blocks of K
    and the tail, threads' slices of the outputs; rows of w and x inside wider arrays (padded)."""
    rng = np.random.default_rng(k + n)
    pad = 5 if padded else 0
    x = rng.standard_normal((b, k + pad)).astype(np.float32)[:, :k]
    w = rng.standard_normal((n, k + pad)).astype(np.float32)[:, :k]
    w[0, -1] = np.inf
    y = np.full((b, n), 7.0, np.float32)
    _run_product_kernel(kernel_lib.ggmlgrad_matvec_rows, y, w, x, nth)
    ref = x.astype(np.float64) @ w.astype(np.float64).T
    np.testing.assert_array_equal(y[:, 0], ref[:, 0])          # +-inf where w holds inf
    bound = k * np.abs(x).astype(np.float64) @ np.abs(w[1:]).astype(np.float64).T * 2.0 ** -24
    assert np.all(np.abs(y[:, 1:] - ref[:, 1:]) <= bound)


@needs_kernels
@pytest.mark.parametrize("mode", ["eager", "graph", "check", "capture"])
@pytest.mark.parametrize("k, lead", [(1, (6, 3)), (4, (6, 3)), (15, (6, 3)), (40, (1,)), (40, (2, 2)), (300, ())])
def test_linear_with_a_small_inner_size_in_every_mode(mode, k, lead):
    """linear with K < 16 runs the matmul_small_k kernel, with at most 4 rows of x matvec_rows (one
    node, no mul_mat); values against float64, gradients of x, w and b against float64 through the
    backward (which uses ggml's products)."""
    rng = np.random.default_rng(k)
    x = rng.standard_normal(lead + (k,)).astype(np.float32)
    w = rng.standard_normal((70, k)).astype(np.float32)
    b = rng.standard_normal(70).astype(np.float32)
    g = rng.standard_normal(lead + (70,)).astype(np.float32)

    check_linear_in_mode(mode, x, w, b, g)


@needs_kernels
@pytest.mark.parametrize("shape, kernel", [((8, 4), "matmul_small_k"), ((1, 784), "matvec_rows"),
                                           ((4, 64), "matvec_rows"), ((5, 64), None)])
def test_linear_products_that_run_as_one_kernel_node(shape, kernel):
    w = gg.tensor(np.ones((32, shape[1]), np.float32))
    f = gg.capture(lambda x: gg.linear(x, w))
    f(np.ones(shape, np.float32))
    from ggmlgrad._ggml import lib
    from ggmlgrad._ggml.kernels import KERNELS, custom_fun
    rec = next(iter(f._cache.values()))
    nodes = [lib.graph_node(g.graph, i) for g in rec.graphs for i in range(g.n_nodes)]
    ops = [lib.op_desc(n).decode() for n in nodes]
    if kernel not in KERNELS:   # 5 rows of 64, or a kernels library built before the kernel: ggml's product
        assert "MUL_MAT" in ops
        return
    assert KERNELS[kernel] in [custom_fun(n) for n in nodes]
    assert "MUL_MAT" not in ops


def _column_sums(lib, x: np.ndarray, c: int, nth: int) -> np.ndarray:
    """The column_sum kernel over contiguous ``x`` seen as rows of ``c`` floats, ``nth`` threads' slices."""
    out = np.full(c, 7.0, np.float32)
    d, hx = _header(out), _header(x.reshape(-1))
    d.src[0] = ctypes.addressof(hx)
    for i in range(nth):
        lib.ggmlgrad_column_sum(ctypes.byref(d), i, nth, None)
    return out


def _in_order_column_sums(x2: np.ndarray) -> np.ndarray:
    """Each column summed row by row in float32 from +0 (ggml_repeat_back's order)."""
    acc = np.zeros(x2.shape[1], np.float32)
    for row in x2:
        acc += row
    return acc


@pytest.mark.parametrize("rows, c", [(256, 64), (1, 5), (3, 1), (70, 130), (9, 16), (0, 4)])
def test_column_sum_kernel_sums_rows_in_order_whatever_the_thread_count(kernel_lib, rows, c):
    rng = np.random.default_rng(rows + c)
    x = (rng.standard_normal((rows, c)) * 10).astype(np.float32)
    if rows > 2 and c > 3:
        x[:, 0] = -0.0                                  # all -0: +0, as repeat_back (0 + -0)
        x[1, 1], x[2, 2], x[0, 3], x[1, 3] = np.nan, np.inf, np.inf, -np.inf
    ref = _in_order_column_sums(x)
    for nth in (1, 2, 3, 5):
        got = _column_sums(kernel_lib, x, c, nth)
        np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32), err_msg=f"nth={nth}")
    with np.errstate(invalid="ignore"):
        ref64 = x.astype(np.float64).sum(axis=0)
    ok = np.isfinite(ref64)
    bound = rows * np.abs(x).astype(np.float64).sum(axis=0) * 2.0 ** -24
    assert np.all(np.abs(got[ok] - ref64[ok]) <= bound[ok])


def _graph_ops(cached) -> tuple[list[str], list[int]]:
    """(op names, custom kernels) of every node a captured function's recording computes."""
    from ggmlgrad._ggml import lib
    from ggmlgrad._ggml.kernels import custom_fun
    rec = next(iter(cached._cache.values()))
    nodes = [lib.graph_node(g.graph, i) for g in rec.graphs for i in range(g.n_nodes)]
    return [lib.op_desc(n).decode() for n in nodes], [custom_fun(n) for n in nodes]


@pytest.mark.parametrize("mode", ["eager", "graph", "check", "capture"])
@pytest.mark.parametrize("shape, bshape", [((256, 64), (64,)), ((2, 3, 5), (5,)), ((2, 3, 5), (1, 3, 5)),
                                           ((4, 3, 5), (3, 1))])
def test_bias_gradients_sum_the_batch_in_row_order_in_every_mode(mode, shape, bshape):
    """Leading-axis sums (a bias gradient) give the in-order float32 sums, on the column_sum kernel
    where built and ggml's repeat_back elsewhere (the same bits); other axes keep repeat_back."""
    rng = np.random.default_rng(len(shape))
    x = rng.standard_normal(shape).astype(np.float32)
    g = (rng.standard_normal(shape) * 4).astype(np.float32)
    b = rng.standard_normal(bshape).astype(np.float32)

    def run(xa, ba, ga):
        bt = gg.as_tensor(ba).requires_grad_()
        ((gg.as_tensor(xa) + bt) * gg.as_tensor(ga)).sum().backward()
        return bt.grad
    if mode == "capture":
        got = gg.capture(run)(x, b, g)
    else:
        with gg.graph_mode(mode != "eager", check=mode == "check"):
            got = run(x, b, g).numpy()
    lead = len(shape) - len(bshape)
    g2 = g.reshape((-1,) + g.shape[lead:]) if lead else g
    if bshape == (3, 1):        # a middle axis too: compare with float64
        np.testing.assert_allclose(got, g.astype(np.float64).sum(axis=(0, 2)).reshape(3, 1), rtol=1e-5, atol=1e-5)
        return
    ref = _in_order_column_sums(g2.reshape(g2.shape[0], -1)).reshape(g2.shape[1:])
    if bshape == (1, 3, 5):
        ref = ref.reshape(bshape)
    np.testing.assert_array_equal(got, ref)


def test_column_sum_route_is_taken_on_the_fast_build_only():
    f = gg.capture(lambda xa: gg.as_tensor(xa).sum(axis=0, keepdim=True))
    x = np.arange(64 * 8, dtype=np.float32).reshape(64, 8)
    np.testing.assert_array_equal(f(x), _in_order_column_sums(x)[None])
    ops, funs = _graph_ops(f)
    from ggmlgrad._ggml.kernels import KERNELS
    if fast_math.ACTIVE and "column_sum" in KERNELS:
        assert KERNELS["column_sum"] in funs and "REPEAT_BACK" not in ops
    else:
        assert "REPEAT_BACK" in ops


def test_column_sums_do_not_depend_on_the_thread_count():
    x = np.random.default_rng(8).standard_normal((1000, 48)).astype(np.float32)
    before = gg.get_num_threads()
    outs = []
    try:
        for n in (1, 2):
            gg.set_num_threads(n)
            outs.append(gg.tensor(x).sum(axis=0).numpy())
    finally:
        gg.set_num_threads(before)
    np.testing.assert_array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32))
    np.testing.assert_array_equal(outs[0], _in_order_column_sums(x))


def test_bias_gradient_matches_finite_differences():
    b = gg.randn(5, requires_grad=True)
    x = gg.randn(6, 5)
    assert gg.gradcheck(lambda t: gg.tanh(x + t).sum(), [b])


def _add_rows(lib, x: np.ndarray, b: np.ndarray, nth: int) -> np.ndarray:
    """The add_rows kernel: ``b`` added to each row of contiguous 2-D ``x``, ``nth`` threads' slices."""
    out = np.full_like(x, 7.0)
    d, hx, hb = matrix_header(out), matrix_header(x), _header(b)
    d.src[0], d.src[1] = ctypes.addressof(hx), ctypes.addressof(hb)
    for i in range(nth):
        lib.ggmlgrad_add_rows(ctypes.byref(d), i, nth, None)
    return out


@pytest.mark.parametrize("rows, c", [(256, 64), (256, 8), (1, 3), (5, 17), (0, 4)])
def test_add_rows_kernel_adds_the_bias_to_every_row(kernel_lib, rows, c):
    rng = np.random.default_rng(rows * c)
    x = rng.standard_normal((rows, c)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    b[0] = np.inf
    if rows > 2:
        x[1, 0], x[2, -1] = -np.inf, np.nan
    with np.errstate(invalid="ignore"):
        ref = x + b                                     # float32 additions: the same roundings
    for nth in (1, 2, 3):
        np.testing.assert_array_equal(_add_rows(kernel_lib, x, b, nth), ref, err_msg=f"nth={nth}")


@pytest.mark.parametrize("mode", ["eager", "graph", "check", "capture"])
@pytest.mark.parametrize("shape, out", [((256, 64), 64), ((256, 64), 8), ((3, 5, 7), 9), ((2, 40), 16)])
def test_linear_bias_is_the_product_plus_the_bias_in_every_mode(mode, shape, out):
    """linear(x, w, b) == linear(x, w) + b to the bit (one kernel node on the fast build, ggml's add
    elsewhere), with its gradients against float64."""
    rng = np.random.default_rng(out)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((out, shape[-1])).astype(np.float32)
    b = rng.standard_normal(out).astype(np.float32)

    def run(xa, wa, ba):
        bt = gg.as_tensor(ba).requires_grad_()
        y = gg.linear(gg.as_tensor(xa), gg.as_tensor(wa), bt)
        (y * y).sum().backward()
        return y.detach(), gg.linear(gg.as_tensor(xa), gg.as_tensor(wa)), bt.grad
    if mode == "capture":
        y, y0, gb = gg.capture(run)(x, w, b)
    else:
        with gg.graph_mode(mode != "eager", check=mode == "check"):
            y, y0, gb = (t.numpy() for t in run(x, w, b))
    np.testing.assert_array_equal(y, y0 + b)
    ref = 2 * (x.astype(np.float64) @ w.astype(np.float64).T + b)
    np.testing.assert_allclose(gb, ref.reshape(-1, out).sum(axis=0), rtol=1e-4, atol=1e-3)


def test_linear_bias_route_is_taken_on_the_fast_build_only():
    w, b = gg.randn(64, 32), gg.randn(64)
    f = gg.capture(lambda xa: gg.linear(gg.as_tensor(xa), w, b))
    x = np.ones((256, 32), np.float32)
    f(x)
    ops, funs = _graph_ops(f)
    from ggmlgrad._ggml.kernels import KERNELS
    if fast_math.ACTIVE and "add_rows" in KERNELS:
        assert KERNELS["add_rows"] in funs and "ADD" not in ops and "REPEAT" not in ops
    else:
        assert "ADD" in ops


def test_build_without_a_compiler_keeps_the_prebuilt_wheel(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("CC", "CXX")}
    env["PATH"] = str(tmp_path)               # no cc, gcc, clang anywhere
    r = subprocess.run([sys.executable, "-m", "ggmlgrad", "build", "--optional"], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "no C compiler found" in r.stdout and "python -m ggmlgrad build" in r.stdout
    r = subprocess.run([sys.executable, "-m", "ggmlgrad", "build"], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 1 and "no C/C++ compiler found" in r.stderr


def test_info_names_the_build():
    info = gg.info()
    if info["library_source"] == "fast build":
        assert info["build"].startswith("fast")
    else:
        assert info["build"].startswith(("prebuilt", "fast"))
    assert shutil.which(sys.executable)
