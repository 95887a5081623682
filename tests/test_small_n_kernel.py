"""linear with 2 to 16 outputs (a class head) on the fast build: the matmul_small_n kernel, eight
rows of x at a time against w transposed into 8-lane vectors. The kernel is compiled here with and
without the AVX-512 clones and called directly (against float64 within the in-order summation
bound, the same bits from both builds and any thread split); the route is checked in every mode."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from ggmlgrad.ops import fast_math
from kernel_helpers import build_kernels, check_linear_in_mode, matrix_header


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    out = tmp_path_factory.mktemp("kernels")
    return [build_kernels(out), build_kernels(out, "-DGK_NO_CLONES")]


def _product(lib, w: np.ndarray, x: np.ndarray, nth: int) -> np.ndarray:
    y = np.full((x.shape[0], w.shape[0]), 7.0, np.float32)
    d, hw, hx = matrix_header(y), matrix_header(w), matrix_header(x)
    d.src[0], d.src[1] = ctypes.addressof(hw), ctypes.addressof(hx)
    for i in range(nth):
        lib.ggmlgrad_matmul_small_n(ctypes.byref(d), i, nth, None)
    return y


@pytest.mark.parametrize("k, n, b", [(64, 8, 256), (1, 2, 3), (33, 16, 17), (512, 9, 8), (5, 3, 1), (100, 12, 41)])
@pytest.mark.parametrize("padded", [False, True])
def test_matmul_small_n_kernel_against_float64_and_across_builds_and_threads(libs, k, n, b, padded):
    rng = np.random.default_rng(k * 7 + n)
    pad = 3 if padded else 0            # rows of x and w inside wider arrays
    x = rng.standard_normal((b, k + pad)).astype(np.float32)[:, :k]
    w = rng.standard_normal((n, k + pad)).astype(np.float32)[:, :k]
    w[1, 0] = np.inf
    y = _product(libs[0], w, x, 1)
    ref = x.astype(np.float64) @ w.astype(np.float64).T
    finite = np.isfinite(ref)
    np.testing.assert_array_equal(y[~finite], ref[~finite])          # +-inf (or NaN) where w holds inf
    bound = k * np.abs(x).astype(np.float64) @ np.abs(w).astype(np.float64).T * 2.0 ** -24
    assert np.all(np.abs(y[finite] - ref[finite]) <= bound[finite] + 1e-30)
    for lib, nth in [(libs[0], 3), (libs[1], 1), (libs[1], 5)]:
        np.testing.assert_array_equal(_product(lib, w, x, nth).view(np.uint32), y.view(np.uint32))


@pytest.mark.parametrize("mode", ["eager", "graph", "check", "capture"])
@pytest.mark.parametrize("n", [1, 2, 8, 16, 17])
def test_linear_with_few_outputs_in_every_mode(mode, n):
    """Values and gradients against float64; on the fast build the forward is one matmul_small_n node
    for 2..16 outputs and ggml's product otherwise (1 output: ggml's dot product is faster)."""
    rng = np.random.default_rng(n)
    x = rng.standard_normal((37, 64)).astype(np.float32)
    w = rng.standard_normal((n, 64)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    g = rng.standard_normal((37, n)).astype(np.float32)

    f = check_linear_in_mode(mode, x, w, b, g)
    if f is not None:
        from ggmlgrad._ggml import lib
        from ggmlgrad._ggml.kernels import KERNELS, custom_fun
        rec = next(iter(f._cache.values()))
        funs = [custom_fun(lib.graph_node(gr.graph, i)) for gr in rec.graphs for i in range(gr.n_nodes)]
        expect = fast_math.ACTIVE and 2 <= n <= 16
        assert (KERNELS.get("matmul_small_n", -1) in funs) == expect
