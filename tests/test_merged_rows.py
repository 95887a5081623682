"""Elementwise ops on merged rows (ops.build.row_merged, engine.flat.FlatNode).

An elementwise op over short rows is built on rows of up to 8192 elements; its result node has
the merged shape and consumers see it through a reshape view. Values and gradients must be what
the unmerged ops give: NumPy float64 references, in eager mode, graph mode (cached plans too)
and captures.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import ggmlgrad as gg
from ggmlgrad._ggml import InitParams, TensorStruct, consts, lib
from ggmlgrad.engine.flat import FlatNode
from ggmlgrad.ops.build import merged_shape
from ggmlgrad.ops.registry import REGISTRY


@pytest.mark.parametrize("shape, merged", [
    ((256, 8), (1, 2048)),
    ((3, 5), (1, 15)),
    ((2, 3, 4), (1, 24)),
    ((4096, 4), (2, 8192)),     # rows stay at most 8192 long: threads split rows
    ((8193, 1), (3, 2731)),     # the longest row that divides the element count
    ((7, 2000), None),          # long rows already amortise the per-row cost
    ((64,), None),              # one row
    ((5, 1), (1, 5)),
])
def test_merged_shape(shape, merged):
    assert merged_shape(shape) == merged


def test_an_elementwise_builder_returns_a_merged_node():
    ctx = lib.init(InitParams(1 << 16, None, True))
    try:
        a = lib.new_tensor_2d(ctx, consts.TYPE_F32, 8, 256)
        b = lib.new_tensor_2d(ctx, consts.TYPE_F32, 8, 256)
        spec = SimpleNamespace(shape=(256, 8), dtype=gg.float32, device=None, ndim=2)
        node = REGISTRY["mul"].forward(ctx, [a, b], [spec, spec], spec)
        assert type(node) is FlatNode
        assert list(TensorStruct.from_address(node).ne) == [2048, 1, 1, 1]
        assert list(TensorStruct.from_address(node.shaped(ctx)).ne) == [8, 256, 1, 1]
        # broadcasting calls build as written
        c = lib.new_tensor_2d(ctx, consts.TYPE_F32, 8, 1)
        bias = SimpleNamespace(shape=(1, 8), dtype=gg.float32, device=None, ndim=2)
        plain = REGISTRY["add"].forward(ctx, [a, c], [spec, bias], spec)
        assert type(plain) is not FlatNode
    finally:
        lib.free(ctx)


def _chain(x, w, t):
    """Merged elementwise results feeding matmul, reductions along both axes, a transpose and
    a broadcast: each consumer reads the merged node through its reshape view."""
    h = (x * 2.0 + x.tanh()).relu()           # merged: scale, tanh, add, relu
    m = gg.where(h > 0.5, h, h * h)           # merged compare / where
    z = m @ w
    return ((z - t).square().sum(axis=1) + m.sum(axis=0).sum() + m.T.sum(axis=0).mean()).sum()


def _chain_numpy(x, w, t):
    h = np.maximum(x * 2.0 + np.tanh(x), 0)
    m = np.where(h > 0.5, h, h * h)
    z = m @ w
    return (((z - t) ** 2).sum(axis=1) + m.sum(axis=0).sum() + m.T.sum(axis=0).mean()).sum()


def _chain_grads_numpy(x, w, t):
    pre = x * 2.0 + np.tanh(x)
    h = np.maximum(pre, 0)
    m = np.where(h > 0.5, h, h * h)
    z = m @ w
    n = x.shape[0]
    gz = 2 * (z - t)
    gm = gz @ w.T + n + 1.0           # the two scalar terms are broadcast over n rows, then summed
    gw = m.T @ gz
    gh = gm * np.where(h > 0.5, 1.0, 2 * h)
    gpre = gh * (pre > 0)
    gx = gpre * (2.0 + 1 - np.tanh(x) ** 2)
    return gx, gw


def _data(rows=64, cols=8, seed=0):
    r = np.random.default_rng(seed)
    return (r.standard_normal((rows, cols)), r.standard_normal((cols, 3)) * 0.5, r.standard_normal((rows, 3)))


@pytest.mark.parametrize("rows, cols", [(64, 8), (3, 5), (4096, 3)])
def test_values_and_gradients_match_numpy(graph, rows, cols):
    x64, w64, t64 = _data(rows, cols)
    for _ in range(3):  # graph mode: the third drain runs the cached plan
        x = gg.tensor(x64.astype(np.float32), requires_grad=True)
        w = gg.tensor(w64.astype(np.float32), requires_grad=True)
        loss = _chain(x, w, gg.tensor(t64.astype(np.float32)))
        loss.backward()
        ref = _chain_numpy(x64, w64, t64)
        np.testing.assert_allclose(loss.item(), ref, rtol=1e-5)
        gx, gw = _chain_grads_numpy(x64, w64, t64)
        np.testing.assert_allclose(x.grad.numpy(), gx, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(w.grad.numpy(), gw, rtol=1e-4, atol=1e-3)


def test_capture_replays_merged_nodes():
    x64, w64, t64 = _data(256, 8)
    w = gg.tensor(w64.astype(np.float32))
    f = gg.capture(lambda x, t: (_chain(x, w, t), (x * x).relu()))
    for seed in (1, 2, 3):
        xs, _, ts = _data(256, 8, seed)
        loss, sq = f(xs.astype(np.float32), ts.astype(np.float32))
        np.testing.assert_allclose(loss, _chain_numpy(xs, w64, ts), rtol=1e-5)
        np.testing.assert_allclose(sq, np.maximum(xs * xs, 0), rtol=1e-6)


@pytest.mark.parametrize("cols", [3, 40])   # 3: exp on merged rows; 40: ggml_soft_max (any SIMD width)
def test_log_softmax_gradient_on_narrow_and_wide_rows(graph, cols):
    r = np.random.default_rng(3)
    x64 = r.standard_normal((32, cols)) * 3
    q64 = r.standard_normal((32, cols))
    x = gg.tensor(x64.astype(np.float32), requires_grad=True)
    (gg.log_softmax(x, axis=-1) * gg.tensor(q64.astype(np.float32))).sum().backward()
    p = np.exp(x64 - x64.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    expected = q64 - p * q64.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(256, 8), (7, 13), (5,)])
def test_scalar_gradient_spread_over_a_tensor(graph, shape):
    r = np.random.default_rng(4)
    x64 = r.standard_normal(shape)
    q64 = r.standard_normal(shape)
    x = gg.tensor(x64.astype(np.float32), requires_grad=True)
    (x.sum() * 3.0 * (x * gg.tensor(q64.astype(np.float32))).mean()).backward()
    s, mq = x64.sum(), (x64 * q64).mean()
    expected = 3.0 * mq + 3.0 * s * q64 / x64.size
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-4, atol=1e-4)


def _softmax_nodes_of_forward_and_backward() -> int:
    """How many SOFT_MAX nodes a log_softmax forward and its backward build into one graph."""
    from ggmlgrad.ops.registry import REGISTRY
    ctx = lib.init(InitParams(1 << 20, None, True))
    try:
        spec = SimpleNamespace(shape=(16, 40), dtype=gg.float32, device=None, ndim=2)
        x = lib.new_tensor_2d(ctx, consts.TYPE_F32, 40, 16)
        g = lib.new_tensor_2d(ctx, consts.TYPE_F32, 40, 16)
        y = REGISTRY["log_softmax"].forward(ctx, [x], [spec], spec, axis=-1)
        d = REGISTRY["log_softmax_backward"].forward(ctx, [g, y], [spec, spec], spec, axis=-1)
        graph = lib.new_graph_custom(ctx, 256, False)
        lib.build_forward_expand(graph, d)
        return sum(lib.op_desc(lib.graph_node(graph, i)) == b"SOFT_MAX" for i in range(lib.graph_n_nodes(graph)))
    finally:
        lib.free(ctx)


def test_log_softmax_backward_reuses_the_forward_softmax_in_the_same_graph(graph, monkeypatch):
    from ggmlgrad.ops import activation, fast_math
    monkeypatch.setattr(fast_math, "ACTIVE", False)   # the composite's structure (kernels: one node each way)
    r = np.random.default_rng(5)
    x64, q64 = r.standard_normal((16, 40)) * 4, r.standard_normal((16, 40))
    p = np.exp(x64 - x64.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    expected = q64 - p * q64.sum(axis=1, keepdims=True)
    for reuse in (True, False):
        if not reuse:
            monkeypatch.setattr(activation, "saved_node", lambda node, name: 0)
        x = gg.tensor(x64.astype(np.float32), requires_grad=True)
        (gg.log_softmax(x, axis=-1) * gg.tensor(q64.astype(np.float32))).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-5, atol=1e-5)
        assert _softmax_nodes_of_forward_and_backward() == (1 if reuse else 2)


@pytest.mark.parametrize("n, d_in, d_out", [(256, 16, 8), (3, 4, 5), (64, 8, 200)])
def test_linear_bias_added_on_merged_rows(graph, n, d_in, d_out):
    """linear's bias joins its output on merged rows for narrow outputs (< 128 wide): values and
    gradients of a two-layer chain against NumPy."""
    r = np.random.default_rng(6)
    x64, w64, b64 = r.standard_normal((n, d_in)), r.standard_normal((d_out, d_in)), r.standard_normal(d_out)
    v64 = r.standard_normal((3, d_out))
    x = gg.tensor(x64.astype(np.float32), requires_grad=True)
    w = gg.tensor(w64.astype(np.float32), requires_grad=True)
    b = gg.tensor(b64.astype(np.float32), requires_grad=True)
    v = gg.tensor(v64.astype(np.float32))
    h = gg.linear(x, w, b)
    out = gg.linear(h.relu(), v)
    (out * out).sum().backward()
    h64 = x64 @ w64.T + b64
    out64 = np.maximum(h64, 0) @ v64.T
    np.testing.assert_allclose(h.detach().numpy(), h64, rtol=1e-4, atol=1e-4)
    gh = (2 * out64 @ v64) * (h64 > 0)
    np.testing.assert_allclose(b.grad.numpy(), gh.sum(0), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(w.grad.numpy(), gh.T @ x64, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(x.grad.numpy(), gh @ w64, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("rows, row", [(10007, 1), (3 * 2731, 1), (1000, 12), (97, 100), (6, 1000)])
def test_merged_rows_are_the_longest_that_divide(rows, row):
    m = merged_shape((rows, row))
    n = rows * row
    best = max((k for k in range(1, min(rows, 8192 // row) + 1) if rows % k == 0), default=1)
    assert m == ((rows // best, row * best) if best > 1 and row < 1024 else None)
    if m is not None:
        assert m[0] * m[1] == n
