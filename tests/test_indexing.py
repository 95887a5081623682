"""Randomised indexing against NumPy: t[key] (forward and gradient) and t[key] = v, eager and graph mode."""
from __future__ import annotations

import numpy as np
import pytest

import ggmlgrad as gg


def _random_key(rng, shape):
    """A random NumPy basic-indexing key (ints, positive-step slices, None, at most one ...)."""
    key, dims = [], list(shape)
    use_ellipsis = rng.random() < 0.3
    ellipsis_at = rng.integers(0, len(dims) + 1) if use_ellipsis else -1
    i = 0
    while i < len(dims):
        if i == ellipsis_at:
            key.append(Ellipsis)
            i += int(rng.integers(0, len(dims) - i + 1))   # the ellipsis swallows some dims
            ellipsis_at = -1
            continue
        n = dims[i]
        r = rng.random()
        if r < 0.25:
            key.append(int(rng.integers(-n, n)))
        elif r < 0.35 and len(shape) + sum(k is None for k in key) < 4:
            key.append(None)
            continue
        else:
            start = int(rng.integers(-n - 1, n + 1)) if rng.random() < 0.6 else None
            stop = int(rng.integers(-n - 1, n + 2)) if rng.random() < 0.6 else None
            step = int(rng.integers(1, 4)) if rng.random() < 0.6 else None
            key.append(slice(start, stop, step))
        i += 1
    if ellipsis_at >= 0:
        key.append(Ellipsis)
    return tuple(key)


def _keys(seed, count):
    rng = np.random.default_rng(seed)
    shapes = [(7,), (4, 5), (3, 4, 5), (2, 3, 4, 5), (1, 6, 1)]
    out = []
    while len(out) < count:
        shape = shapes[int(rng.integers(0, len(shapes)))]
        key = _random_key(rng, shape)
        x = np.zeros(shape)
        if x[key].ndim <= 4:
            out.append((shape, key))
    return out


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
def test_random_getitem_forward_and_grad(graph):
    rng = np.random.default_rng(7)
    for shape, key in _keys(11, 60):
        a = rng.standard_normal(shape).astype(np.float32)
        with gg.graph_mode(graph):
            x = gg.tensor(a, requires_grad=True)
            y = x[key]
            w = rng.standard_normal(a[key].shape).astype(np.float32)
            y.backward(gg.tensor(w))
        np.testing.assert_array_equal(y.detach().numpy(), a[key], err_msg=f"{shape} {key}")
        expected = np.zeros(shape, np.float32)
        expected[key] += w   # basic keys never repeat a position
        np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-6, atol=1e-6, err_msg=f"{shape} {key}")


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
def test_random_setitem(graph):
    rng = np.random.default_rng(3)
    for n, (shape, key) in enumerate(_keys(5, 60)):
        a = rng.standard_normal(shape).astype(np.float32)
        ref = a.copy()
        v = rng.standard_normal(ref[key].shape).astype(np.float32)
        value = v if n % 3 else 2.5          # every third write is a Python scalar
        with gg.graph_mode(graph):
            x = gg.tensor(a)
            x[key] = value
        ref[key] = value
        np.testing.assert_array_equal(x.numpy(), ref, err_msg=f"{shape} {key}")


def test_int_index_tensor_matches_numpy_with_negative_values_and_repeats():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((5, 4, 3)).astype(np.float32)
    idx = np.array([4, -1, 0, 0, -5], np.int32)
    for key_fn in (lambda i: i, lambda i: (slice(None), i[:3] % 4), lambda i: (slice(1, None, 2), Ellipsis, i[:2] % 3)):
        x = gg.tensor(a, requires_grad=True)
        k_np = key_fn(idx)
        k_gg = tuple(gg.tensor(k) if isinstance(k, np.ndarray) else k for k in k_np) if isinstance(k_np, tuple) \
            else gg.tensor(k_np)
        y = x[k_gg]
        np.testing.assert_array_equal(y.detach().numpy(), a[k_np])
        y.sum().backward()
        expected = np.zeros_like(a)
        np.add.at(expected, k_np, 1.0)
        np.testing.assert_array_equal(x.grad.numpy(), expected)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int32"])
def test_storage_dtypes_through_shape_and_index_ops(dtype):
    """Shape ops and row-picking ops keep the dtype (torch: x16[idx] is float16)."""
    a = np.arange(24).reshape(2, 3, 4)
    x = gg.tensor(a, dtype=getattr(gg, dtype))
    idx = gg.tensor([2, 0, 2])
    keep = [(x[1, :, ::2], a[1, :, ::2]), (x[None, ..., 1], a[None, ..., 1]),
            (gg.cat([x, x], dim=1), np.concatenate([a, a], 1)), (gg.stack([x, x], dim=-1), np.stack([a, a], -1)),
            (gg.broadcast_to(x[:, :1], (2, 3, 4)), np.broadcast_to(a[:, :1], (2, 3, 4))),
            (x.split(2, dim=2)[1], a[:, :, 2:]), (x.transpose(0, 2), a.transpose(2, 1, 0))]
    for got, want in keep:
        assert got.dtype is x.dtype
        np.testing.assert_array_equal(got.to(gg.float32).numpy() if dtype != "int32" else got.numpy(), want)
    picked = [(gg.index_select(x, 1, idx), a[:, [2, 0, 2]]), (x[:, idx], a[:, [2, 0, 2]]),
              (gg.gather(x, 2, gg.tensor(np.full((2, 3, 1), 3))), a[..., 3:]),
              (gg.embedding(x[0], gg.tensor([[1, 1]])), a[0][[[1, 1]]])]
    for got, want in picked:
        assert got.dtype is x.dtype
        np.testing.assert_array_equal(got.numpy(), want)
    y = gg.tensor(a, dtype=getattr(gg, dtype)) if dtype == "int32" else None
    if y is not None:
        y[0, 1:, ::3] = 7
        b = a.copy()
        b[0, 1:, ::3] = 7
        np.testing.assert_array_equal(y.numpy(), b)


def test_shape_and_index_ops_under_capture():
    """Recorded once, replayed with new values: no index read happens while recording (clamp path)."""
    def f(x, idx):
        return ((gg.gather(x, 1, idx) * 2).sum() + x[:, ::2].sum() + gg.cat([x, x[:1]]).sum()
                + gg.embedding(x, idx[:, 0]).sum() + gg.stack(x.split(2, dim=1)[:2]).sum())

    cf = gg.capture(f)
    rng = np.random.default_rng(0)
    for _ in range(3):
        a = rng.standard_normal((4, 5)).astype(np.float32)
        i = rng.integers(0, 4, (4, 2)).astype(np.int32)
        got = cf(gg.tensor(a), gg.tensor(i)).item()
        ref = ((np.take_along_axis(a, i, 1) * 2).sum() + a[:, ::2].sum() + np.concatenate([a, a[:1]]).sum()
               + a[i[:, 0]].sum() + np.stack([a[:, :2], a[:, 2:4]]).sum())
        assert abs(got - ref) < 1e-4 * max(1.0, abs(ref))
