"""Cross-entropy against class indices (``F.cross_entropy`` with int targets): on the fast build
one kernel node computes the mean loss and one its gradient (kernels ce_index_*); elsewhere ggml's
composed route. Both must give torch's values, including its special cases: a -inf target logit
gives +inf, a row with NaN or an infinite max gives NaN (loss and gradient), ignored rows count in
neither sum and get a 0 gradient (NaN where their softmax is NaN), no counted row gives NaN.
References: NumPy float64 (always) and torch (when installed), in eager, graph, check and capture.
"""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

import ggmlgrad as gg
from ggmlgrad.ops import fast_math
from kernel_helpers import build_kernels, matrix_header

MODES = ["eager", "graph", "check", "capture"]


def _reference(x: np.ndarray, t: np.ndarray, ignore_index: int) -> tuple[float, np.ndarray]:
    """torch's mean cross-entropy and its logits gradient, in float64 (classes on axis 1, as torch)."""
    if x.ndim > 2:
        loss, grad = _reference_last(np.moveaxis(x, 1, -1), t, ignore_index)
        return loss, np.moveaxis(grad, -1, 1)
    return _reference_last(x, t, ignore_index)


def _reference_last(x: np.ndarray, t: np.ndarray, ignore_index: int) -> tuple[float, np.ndarray]:
    c = x.shape[-1]
    x2 = x.reshape(-1, c).astype(np.float64)
    t2 = t.reshape(-1)
    with np.errstate(all="ignore"):
        m = x2.max(axis=1, keepdims=True)
        bad = np.isnan(x2).any(axis=1) | ~np.isfinite(m[:, 0])
        e = np.exp(x2 - m)
        s = e.sum(axis=1, keepdims=True)
        logp = (x2 - m) - np.log(s)
        logp[bad] = np.nan
        counted = (t2 >= 0) & (t2 < c) & (t2 != ignore_index)
        count = counted.sum()
        rows = np.nonzero(counted)[0]
        loss = -logp[rows, t2[rows]].sum() / count
        soft = e / s
        soft[bad] = np.nan
        grad = np.where(counted[:, None], soft, soft * 0.0) / max(count, 1)
        grad[rows, t2[rows]] -= 1.0 / max(count, 1)
        grad[~counted] = soft[~counted] * 0.0
    return float(loss), grad.reshape(x.shape)


def _run(mode: str, x: np.ndarray, t: np.ndarray, ignore_index: int) -> tuple[float, np.ndarray]:
    F = gg.nn.functional
    w = gg.tensor(x, requires_grad=True)

    def loss_fn(tb):
        return F.cross_entropy(w * 1.0, tb, ignore_index=ignore_index)   # a non-leaf input
    if mode == "capture":
        step = gg.capture_step(loss_fn, gg.optim.SGD([w], lr=0.0))
        step(gg.tensor(t))
        loss = step(gg.tensor(t))                        # a replay; lr 0 keeps w, .grad holds the gradient
        return float(np.asarray(loss)), w.grad.numpy()
    with gg.graph_mode(mode != "eager", check=mode == "check"):
        loss = loss_fn(gg.tensor(t))
        loss.backward()
        return float(loss.item()), w.grad.numpy()


def _cases():
    r = np.random.default_rng(11)
    out = {}
    out["256x8"] = (r.standard_normal((256, 8)).astype(np.float32) * 3, r.integers(0, 8, 256), -100)
    out["classes on axis 1"] = (r.standard_normal((3, 5, 7)).astype(np.float32), r.integers(0, 5, (3, 7)), -100)
    out["one class"] = (r.standard_normal((6, 1)).astype(np.float32), np.zeros(6, np.int64), -100)
    wide = fast_math.CE_INDEX_MAX_CLASSES
    out["widest kernel"] = (r.standard_normal((5, wide)).astype(np.float32), r.integers(0, wide, 5), -100)
    out["wider: ggml"] = (r.standard_normal((3, wide + 6)).astype(np.float32), r.integers(0, wide + 6, 3), -100)
    t = r.integers(0, 6, 40)
    t[::3] = 2
    out["ignore_index in range"] = (r.standard_normal((40, 6)).astype(np.float32), t, 2)
    x = np.array([[-np.inf, 0.0, 1.0], [1.0, 2.0, 3.0], [0.5, -np.inf, 2.0], [-1.0, 0.0, 1.0]], np.float32)
    out["-inf logits"] = (x, np.array([0, 2, 0, 1]), -100)
    x = np.array([[np.inf, 0.0, 1.0], [np.nan, 0.0, 1.0], [-np.inf, -np.inf, -np.inf], [1.0, 2.0, 3.0]],
                 np.float32)
    out["NaN rows"] = (x, np.array([1, 1, 0, 2]), -100)
    out["NaN rows ignored"] = (x, np.array([-100, -100, -100, 2]), -100)
    out["every row ignored"] = (r.standard_normal((4, 3)).astype(np.float32), np.full(4, -100), -100)
    return out


CASES = _cases()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_cross_entropy_with_class_indices_matches_float64_and_torch(case, mode):
    x, t, ignore = CASES[case]
    t = t.astype(np.int32)
    loss, grad = _run(mode, x, t, ignore)
    ref_loss, ref_grad = _reference(x, t, ignore)
    np.testing.assert_allclose(loss, ref_loss, rtol=2e-6, atol=0, equal_nan=True)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-5, atol=1e-7, equal_nan=True)
    torch = pytest.importorskip("torch")
    xt = torch.tensor(x, requires_grad=True)
    lt = torch.nn.functional.cross_entropy(xt, torch.tensor(t).long(), ignore_index=ignore)
    lt.backward()
    np.testing.assert_allclose(loss, lt.item(), rtol=2e-6, atol=0, equal_nan=True)
    np.testing.assert_allclose(grad, xt.grad.numpy(), rtol=1e-5, atol=1e-7, equal_nan=True)


def test_the_kernels_compute_it_on_the_fast_build_and_ggml_elsewhere():
    from ggmlgrad._ggml import lib
    from ggmlgrad._ggml.kernels import KERNELS, custom_fun
    x, t, _ = CASES["256x8"]

    w = gg.tensor(x, requires_grad=True)
    step = gg.capture_step(lambda tb: gg.nn.functional.cross_entropy(w * 1.0, tb), gg.optim.SGD([w], lr=0.0))
    step(gg.tensor(t.astype(np.int32)))
    rec = next(iter(step._cache.values()))
    funs = [custom_fun(lib.graph_node(g.graph, i)) for g in rec.graphs for i in range(g.n_nodes)]
    ours = {KERNELS.get("ce_index_mean"), KERNELS.get("ce_index_backward")} - {None}
    if fast_math.ACTIVE:
        assert fast_math.CE_INDEX and len(ours) == 2 and ours <= set(funs)
    else:   # no fast build, or a ggml with a GPU device (its kernels are CPU code, fast_math.py): ggml's own
        assert not fast_math.CE_INDEX and not ours & set(funs)


def test_kernels_thread_split_and_clones_give_the_same_bits(tmp_path):
    """The backward split over 1 or 3 threads, and a build without the AVX-512 clones, give the bits
    of the single-thread clone build (the forward runs on one thread by design)."""
    libs = [build_kernels(tmp_path), build_kernels(tmp_path, "-DGK_NO_CLONES")]
    r = np.random.default_rng(4)
    x = (r.standard_normal((300, 13)) * 4).astype(np.float32)
    x[7, 3], x[9, :], x[11, 2] = np.nan, -np.inf, np.inf
    t = r.integers(0, 13, 300).astype(np.int32)
    t[::5] = 4
    g = np.array([1.7], np.float32)
    results = []
    for lib_ in libs:
        for nth in (1, 3):
            loss, grad = np.zeros(1, np.float32), np.full_like(x, 9.0)
            hx, ht, hg = matrix_header(x), matrix_header(t), matrix_header(g)
            hl, hd = matrix_header(loss), matrix_header(grad)
            hl.src[0], hl.src[1] = ctypes.addressof(hx), ctypes.addressof(ht)
            hd.src[0], hd.src[1], hd.src[2] = ctypes.addressof(hg), ctypes.addressof(hx), ctypes.addressof(ht)
            lib_.ggmlgrad_ce_index_mean(ctypes.byref(hl), 0, 1, ctypes.c_void_p(4))
            for i in range(nth):
                lib_.ggmlgrad_ce_index_backward(ctypes.byref(hd), i, nth, ctypes.c_void_p(4))
            results.append((loss.view(np.uint32).copy(), grad.view(np.uint32).copy()))
    for loss_bits, grad_bits in results[1:]:
        np.testing.assert_array_equal(loss_bits, results[0][0])
        np.testing.assert_array_equal(grad_bits, results[0][1])
    ref_loss, ref_grad = _reference(x, t, 4)
    np.testing.assert_allclose(results[0][0].view(np.float32), ref_loss, rtol=2e-6, equal_nan=True)
    np.testing.assert_allclose(results[0][1].view(np.float32), ref_grad * 1.7, rtol=1e-5, atol=1e-7, equal_nan=True)


@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_the_composed_route_picks_by_column_beyond_float32_flat_indices(monkeypatch, mode):
    """Past 2**24 elements a flat index would round: the composed route (any build; 1030 classes is
    past the kernels' bound) then gathers per row by column. Forced here on a small shape of its
    own (plans are cached by shape)."""
    from ggmlgrad.ops import nn_ops
    monkeypatch.setattr(nn_ops, "_FLAT_PICK_BELOW", 0)
    r = np.random.default_rng(21)
    x = r.standard_normal((5, 1030)).astype(np.float32)
    x[1, 3] = -np.inf
    x[2, 0] = np.nan
    t = np.array([3, 3, 7, -100, 1029], np.int32)
    loss, grad = _run(mode, x, t, -100)
    ref_loss, ref_grad = _reference(x, t, -100)
    np.testing.assert_allclose(loss, ref_loss, rtol=2e-6, equal_nan=True)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-5, atol=1e-7, equal_nan=True)
