"""torch parity for issue 22's shape, scatter, indexing and random ops: the same snippet runs in torch and in
ggmlgrad (eager, graph mode, and gg.capture where the snippet is capturable) and must give the same values,
the same dtypes (torch's int64 is ggmlgrad's int32) and, for bad input, an exception of torch's type."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import ggmlgrad as gg

R = np.random.default_rng(1234)
F34 = R.standard_normal((3, 4)).astype(np.float32)
F33 = R.standard_normal((3, 3)).astype(np.float32)
F234 = R.standard_normal((2, 3, 4)).astype(np.float32)
V3 = R.standard_normal(3).astype(np.float32)
V4 = R.standard_normal(4).astype(np.float32)
I34 = np.arange(12, dtype=np.int32).reshape(3, 4) - 5
IDX = np.array([[0, 2, 2, 3], [1, 1, 0, 0], [3, 2, 1, 0]], np.int32)     # scatter along dim 1 of (3, 4)
ROWS, COLS = np.array([0, 2, 2], np.int32), np.array([1, -1, 3], np.int32)

# name -> (snippet(m, *tensors), input arrays, capturable)
SNIPPETS = {
    "flip": (lambda m, x: m.flip(x, dims=(0, 1)), [F34], True),
    "flip_method": (lambda m, x: x.flip(-1), [F234], True),
    "flip_int": (lambda m, x: m.flip(x, dims=[1]), [I34], True),
    "fliplr": (lambda m, x: m.fliplr(x), [F34], True),
    "roll": (lambda m, x: m.roll(x, shifts=(1, -2), dims=(0, 1)), [F34], True),
    "roll_flat": (lambda m, x: m.roll(x, 5), [F34], True),
    "roll_int": (lambda m, x: x.roll(1, 0), [I34], True),
    "tril": (lambda m, x: m.tril(x, diagonal=1), [F34], True),
    "triu_neg": (lambda m, x: x.triu(-1), [F234], True),
    "tril_square": (lambda m, x: m.tril(x, -1), [F33], True),
    "triu_square_nonfinite": (lambda m, x: m.triu(x), [np.array([[1, np.nan], [np.inf, -np.inf]], np.float32)], True),
    "tril_int": (lambda m, x: m.tril(x), [I34], True),
    "diag_vec": (lambda m, v: m.diag(v, 1), [V3], True),
    "diag_mat": (lambda m, x: m.diag(x, -1), [F34], True),
    "diagonal": (lambda m, x: m.diagonal(x, offset=1, dim1=2, dim2=0), [F234], True),
    "diagonal_method": (lambda m, x: x.diagonal(-1), [F34], True),
    "trace": (lambda m, x: m.trace(x), [F33], True),
    "trace_f16": (lambda m, x: m.trace(x), [F33.astype(np.float16)], True),
    "masked_fill_f16": (lambda m, x: x.masked_fill(x > 0, 1.5), [F34.astype(np.float16)], True),
    "roll_f16": (lambda m, x: m.roll(x, 2, 1), [F34.astype(np.float16)], True),
    "diagonal_bool": (lambda m, x: (x > 0).diagonal(1), [F34], True),
    "scatter_bool": (lambda m, x, i: (x > 0).scatter(1, i, x < 0), [F34, IDX], True),
    "einsum_int": (lambda m, a: m.einsum("ij,kj->ik", a, a), [I34], True),
    "diag_int": (lambda m, x: m.diag(x[0], -1), [I34], True),
    "kron_int": (lambda m, a: m.kron(a, a[:2, :2]), [I34], True),
    "take_bool": (lambda m, x, i: m.take(x > 0, i), [F34, np.array([1, 5, -1], np.int32)], True),
    "repeat_interleave_bool": (lambda m, x: (x > 0).repeat_interleave(2, dim=0), [F34], True),
    "index_two_int": (lambda m, x, i, j: x[i, j], [I34, ROWS, COLS], True),
    "meshgrid_int": (lambda m, a: m.stack(m.meshgrid(a[0], a[1], indexing="xy")), [I34], True),
    "outer_int": (lambda m, a: m.outer(a[0], a[1]), [I34], True),
    "mm_int": (lambda m, a: m.mm(a, a.T), [I34], True),
    "tensordot_int": (lambda m, a: m.tensordot(a, a, dims=([0], [0])), [I34], True),
    "trace_int": (lambda m, x: m.trace(x), [I34], False),   # torch: int64 (here int32), summed on the host
    "outer": (lambda m, a, b: m.outer(a, b), [V3, V4], True),
    "kron": (lambda m, a, b: m.kron(a, b), [F33, V3], True),
    "tensordot": (lambda m, a, b: m.tensordot(a, b, dims=([1, 2], [0, 1])), [F234, F34], True),
    "mm": (lambda m, a, b: m.mm(a, b.T), [F34, F34], True),
    "bmm": (lambda m, a: m.bmm(a, a.transpose(1, 2)), [F234], True),
    "einsum_matmul": (lambda m, a, b: m.einsum("ij,kj->ik", a, b), [F34, F34], True),
    "einsum_batch": (lambda m, a: m.einsum("bij,bkj->bik", a, a), [F234], True),
    "einsum_trace": (lambda m, a: m.einsum("ii", a), [F33], True),
    "einsum_diag": (lambda m, a: m.einsum("ii->i", a), [F33], True),
    "einsum_ellipsis": (lambda m, a: m.einsum("...ij->...j", a), [F234], True),
    "einsum_implicit": (lambda m, a, b: m.einsum("ij,j", a, b), [F34, V4], True),
    "einsum_list": (lambda m, a, b: m.einsum("i,j->ij", [a, b]), [V3, V4], True),
    "meshgrid_ij": (lambda m, a, b: m.stack(m.meshgrid(a, b, indexing="ij")), [V3, V4], True),
    "meshgrid_xy": (lambda m, a, b: m.stack(m.meshgrid(a, b, indexing="xy")), [V3, V4], True),
    "expand_as": (lambda m, v, x: v.expand_as(x), [V4, F34], True),
    "take": (lambda m, x, i: m.take(x, i), [F34, np.array([[0, -1], [5, 11]], np.int32)], True),
    "repeat_interleave": (lambda m, x: x.repeat_interleave(2, dim=1), [F34], True),
    "repeat_interleave_flat": (lambda m, x: m.repeat_interleave(x, 3), [F34], True),
    "repeat_interleave_tensor": (lambda m, x, r: m.repeat_interleave(x, r, dim=0),
                                 [F34, np.array([1, 0, 2], np.int32)], False),
    "repeat_interleave_counts": (lambda m, r: m.repeat_interleave(r), [np.array([2, 0, 1], np.int32)], False),
    "scatter": (lambda m, x, i, s: x.scatter(1, i, s), [F34, np.array([[3, 0], [1, 2], [0, 1]], np.int32),
                                                          F34[:, :2].copy()], True),
    "scatter_value": (lambda m, x, i: m.scatter(x, 1, i, 2.5), [F34, IDX], True),
    "scatter_add": (lambda m, x, i, s: m.scatter_add(x, 1, i, s), [F34, IDX, F34 * 2], True),
    "scatter_add_int": (lambda m, x, i: x.scatter_add(1, i, x), [I34, IDX], True),
    "scatter_reduce_amax": (lambda m, x, i, s: x.scatter_reduce(1, i, s, "amax"), [F34, IDX, F34 * 3], True),
    "scatter_reduce_amin_noself": (lambda m, x, i, s: x.scatter_reduce(1, i, s, "amin", include_self=False),
                                   [F34, IDX, F34 * 3], True),
    "scatter_reduce_mean": (lambda m, x, i, s: x.scatter_reduce(1, i, s, "mean"), [F34, IDX, F34 * 3], True),
    "scatter_reduce_prod": (lambda m, x, i, s: x.scatter_reduce(1, i, s, "prod", include_self=False),
                            [F34, IDX, F34 * 3], True),
    "scatter_reduce_mean_int": (lambda m, x, i: x.scatter_reduce(1, i, x * 3, "mean", include_self=False),
                                [I34, IDX], True),
    "index_add": (lambda m, x, i, s: x.index_add(0, i, s, alpha=-2), [F34, np.array([2, 0, 2], np.int32), F34], True),
    "index_copy": (lambda m, x, i, s: x.index_copy(1, i, s), [F34, np.array([3, 0], np.int32), F34[:, :2].copy()],
                   True),
    "index_fill": (lambda m, x, i: x.index_fill(1, i, -1.0), [F34, np.array([3, 0], np.int32)], True),
    "index_fill_int": (lambda m, x, i: x.index_fill(0, i, 7), [I34, np.array([1], np.int32)], True),
    "masked_fill_broadcast": (lambda m, x: x.masked_fill(x[:, :1] > 0, 0.5), [F34], True),
    "masked_fill_grow": (lambda m, x: m.masked_fill(x, (x > 0).unsqueeze(0), 0.5), [F34], True),
    "index_two": (lambda m, x, i, j: x[i, j], [F34, ROWS, COLS], True),
    "index_slice_between": (lambda m, x, i, j: x[i, :, j], [F234, np.array([0, 1], np.int32),
                                                            np.array([3, 0], np.int32)], True),
    "index_int_then_tensors": (lambda m, x, i: x[0, :, i], [F234, np.array([1, 3], np.int32)], True),
    "index_broadcast": (lambda m, x, i, j: x[:, i.reshape(2, 1), j], [F234, np.array([0, 2], np.int32),
                                                                      np.array([1, 2, 3], np.int32)], True),
    "index_none_between": (lambda m, x, i: x[i, None, i], [F234, np.array([1, 0], np.int32)], True),
    "index_put_accumulate": (lambda m, x, i, j: x.clone().index_put_((i, j), x[0, :3] * 2, accumulate=True),
                             [F34, np.array([0, 0, 2], np.int32), np.array([1, 1, -1], np.int32)], True),
    "index_put": (lambda m, x, i: m.index_put(x, (i,), x[:1] + 1), [F34, np.array([2, 0], np.int32)], True),
    "index_put_int": (lambda m, x, i: m.index_put(x, (i,), x[0], accumulate=True), [I34, np.array([1, 1], np.int32)],
                      True),
    "take_along_dim": (lambda m, x, i: m.take_along_dim(x, i, dim=1), [F234, np.array([[[0], [2], [1]]], np.int32)],
                       True),
    "take_along_dim_flat": (lambda m, x, i: m.take_along_dim(x, i), [F34, np.array([11, 0, 3], np.int32)], True),
    "index_lists": (lambda m, x: x[[0, 2], [1, 3]], [F34], False),   # lists are host data (an upload)
}

# name -> (snippet, input arrays): bad input, the same exception type as torch's
BAD = {
    "flip_dim": (lambda m, x: m.flip(x, dims=(2,)), [F34]),
    "flip_repeat": (lambda m, x: m.flip(x, dims=(0, 0)), [F34]),
    "roll_align": (lambda m, x: m.roll(x, (1, 2), (0,)), [F34]),
    "tril_1d": (lambda m, v: m.tril(v), [V3]),
    "diagonal_same": (lambda m, x: m.diagonal(x, 0, 1, 1), [F34]),
    "diag_3d": (lambda m, x: m.diag(x), [F234]),
    "trace_3d": (lambda m, x: m.trace(x), [F234]),
    "mm_shapes": (lambda m, a: m.mm(a, a), [F34]),
    "mm_vector": (lambda m, a, v: m.mm(a, v), [F34, V4]),
    "bmm_batch": (lambda m, a, b: m.bmm(a, b), [F234, np.ones((3, 4, 2), np.float32)]),
    "outer_2d": (lambda m, a: m.outer(a, a), [F34]),
    "tensordot_mismatch": (lambda m, a, b: m.tensordot(a, b, dims=1), [F34, F34]),
    "einsum_operands": (lambda m, a: m.einsum("ij,jk->ik", a), [F34]),
    "einsum_subscripts": (lambda m, a: m.einsum("ijk->i", a), [F34]),
    "einsum_output": (lambda m, a: m.einsum("ij->k", a), [F34]),
    "einsum_sizes": (lambda m, a, b: m.einsum("ij,ij->i", a, b), [F34, F33]),
    "meshgrid_indexing": (lambda m, a: m.meshgrid(a, a, indexing="yx"), [V3]),
    "meshgrid_2d": (lambda m, a: m.meshgrid(a, indexing="ij"), [F34]),
    "take_range": (lambda m, x, i: m.take(x, i), [F34, np.array([12], np.int32)]),
    "repeat_interleave_negative": (lambda m, x: x.repeat_interleave(-1), [F34]),
    "scatter_range": (lambda m, x, i: x.scatter(1, i, 1.0), [F34, np.array([[4]], np.int32)]),
    "scatter_negative": (lambda m, x, i: x.scatter(1, i, 1.0), [F34, np.array([[-1]], np.int32)]),
    "scatter_dims": (lambda m, x, i: x.scatter(1, i, 1.0), [F34, np.array([0], np.int32)]),
    "scatter_add_range": (lambda m, x, i: x.scatter_add(0, i, x), [F34, np.array([[0, 3, 0, 0]], np.int32)]),
    "scatter_reduce_kind": (lambda m, x, i: x.scatter_reduce(1, i, x, "maximum"), [F34, IDX]),
    "scatter_reduce_range": (lambda m, x, i: x.scatter_reduce(1, i, x, "amax"), [F34, IDX + 1]),
    "index_add_range": (lambda m, x, i: x.index_add(0, i, x[:1]), [F34, np.array([3], np.int32)]),
    "index_add_shape": (lambda m, x, i: x.index_add(0, i, x), [F34, np.array([0], np.int32)]),
    "index_copy_range": (lambda m, x, i: x.index_copy(1, i, x[:, :1]), [F34, np.array([-1], np.int32)]),
    "index_fill_range": (lambda m, x, i: x.index_fill(0, i, 1.0), [F34, np.array([5], np.int32)]),
    "index_two_range": (lambda m, x, i, j: x[i, j], [F34, np.array([0, 3], np.int32), np.array([0, 1], np.int32)]),
    "index_two_broadcast": (lambda m, x, i, j: x[i, j], [F34, np.array([0, 1], np.int32),
                                                         np.array([0, 1, 2], np.int32)]),
    "take_along_dim_dims": (lambda m, x, i: m.take_along_dim(x, i, dim=0), [F34, np.array([1], np.int32)]),
    "index_put_range": (lambda m, x, i: x.index_put_((i,), x[0, 0], accumulate=True), [F34, np.array([3], np.int32)]),
    "masked_fill_shape": (lambda m, x: x.masked_fill(m.ones(3, dtype=m.bool), 1.0), [F34]),
    "masked_fill__grow": (lambda m, x: x.clone().masked_fill_(m.ones(1, 3, 4, dtype=m.bool), 1.0), [F34]),
    "multinomial_samples": (lambda m, p: m.multinomial(p, 5), [np.abs(V4)]),
    "multinomial_zero": (lambda m, p: m.multinomial(p, 0), [np.abs(V4)]),
    "multinomial_negative": (lambda m, p: m.multinomial(p, 1), [V4 * 0 - 1]),
    "multinomial_3d": (lambda m, p: m.multinomial(p, 1), [np.abs(F234)]),
    "bernoulli_range": (lambda m, p: m.bernoulli(p), [np.abs(V4) + 1.5]),
    "normal_std": (lambda m, s: m.normal(m.zeros(4), s), [V4 * 0 - 1]),
}


def _torch_inputs(arrays):
    return [torch.tensor(a.astype(np.int64)) if a.dtype.kind == "i" else torch.tensor(a) for a in arrays]


def _gg_inputs(arrays):
    return [gg.tensor(a, dtype=gg.int32) if a.dtype.kind == "i" else gg.tensor(a) for a in arrays]


_DTYPES = {torch.float32: gg.float32, torch.int64: gg.int32, torch.bool: gg.bool, torch.float16: gg.float16}


def _check(got, want, name, mode):
    assert got.dtype is _DTYPES[want.dtype], f"{name} ({mode}): dtype {got.dtype} vs torch {want.dtype}"
    g, w = np.asarray(got.detach().numpy() if isinstance(got, gg.Tensor) else got), want.detach().numpy()
    assert g.shape == w.shape, f"{name} ({mode}): shape {g.shape} vs torch {w.shape}"
    np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=1e-5, atol=1e-5,
                               err_msg=f"{name} ({mode})")


@pytest.mark.parametrize("name", sorted(SNIPPETS))
@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_values_and_dtypes_match_torch(name, mode):
    fn, arrays, _ = SNIPPETS[name]
    want = fn(torch, *_torch_inputs(arrays))
    with gg.graph_mode(mode == "graph"):
        got = fn(gg, *_gg_inputs(arrays))
        _check(got, want, name, mode)


@pytest.mark.parametrize("name", sorted(k for k, v in SNIPPETS.items() if v[2]))
def test_values_match_torch_in_capture(name):
    fn, arrays, _ = SNIPPETS[name]
    want = fn(torch, *_torch_inputs(arrays))
    captured = gg.capture(lambda *ts: fn(gg, *ts))
    for _ in range(2):   # record, then replay
        got = captured(*arrays)
    _check(gg.tensor(got, dtype=_DTYPES[want.dtype]), want, name, "capture")


@pytest.mark.parametrize("name", sorted(k for k, v in SNIPPETS.items() if not v[2]))
def test_host_reading_snippets_refuse_capture(name):
    fn, arrays, _ = SNIPPETS[name]
    with pytest.raises(gg.CaptureError):
        gg.capture(lambda *ts: fn(gg, *ts))(*arrays)


@pytest.mark.parametrize("name", sorted(BAD))
@pytest.mark.parametrize("mode", ["eager", "graph", "capture"])
def test_errors_match_torch(name, mode):
    fn, arrays = BAD[name]
    with pytest.raises(Exception) as want:
        fn(torch, *_torch_inputs(arrays))
    expected = type(want.value)
    with pytest.raises(expected):
        if mode == "capture":
            gg.capture(lambda *ts: fn(gg, *ts))(*arrays)
        else:
            with gg.graph_mode(mode == "graph"):
                out = fn(gg, *_gg_inputs(arrays))
                for t in out if isinstance(out, tuple) else (out,):
                    t.numpy()


# ---------------------------------------------------------------- gradients against torch's
GRADS = {
    "flip": (lambda m, x: m.flip(x, dims=(0,)) * 2, [F34]),
    "roll": (lambda m, x: m.roll(x, (1, 1), (0, 1)) ** 2, [F34]),
    "tril": (lambda m, x: m.tril(x, -1) * x, [F34]),
    "diagonal": (lambda m, x: x.diagonal(1, 0, 2) ** 2, [F234]),
    "diag": (lambda m, v: m.diag(v, -1) ** 2, [V3]),
    "trace": (lambda m, x: m.trace(x * x), [F33]),
    "kron": (lambda m, a, b: m.kron(a, b), [F33, V3]),
    "tensordot": (lambda m, a, b: m.tensordot(a, b, dims=([1, 2], [0, 1])), [F234, F34]),
    "einsum": (lambda m, a, b: m.einsum("bij,jk->bik", a, b), [F234, F34.T.copy()]),
    "einsum_trace": (lambda m, a: m.einsum("ii", a) * m.einsum("ij,ij->", a, a), [F33]),
    "repeat_interleave": (lambda m, x: x.repeat_interleave(3, dim=0) ** 2, [F34]),
    "scatter_add": (lambda m, x, s: x.scatter_add(1, m.tensor(IDX.astype(np.int64) if m is torch else IDX), s),
                    [F34, F34 * 2]),
    "scatter_reduce_amax": (lambda m, x, s: x.scatter_reduce(1, m.tensor(IDX.astype(np.int64) if m is torch else IDX),
                                                             s, "amax"), [F34, F34 * 3]),
    "scatter_reduce_prod": (lambda m, x, s: x.scatter_reduce(1, m.tensor(IDX.astype(np.int64) if m is torch else IDX),
                                                             s, "prod"), [F34, F34 * 3]),
    "index_add": (lambda m, x, s: x.index_add(0, m.tensor([2, 0, 2]), s, alpha=2.0), [F34, F34]),
    "index_two": (lambda m, x: x[m.tensor([0, 2, 2]), m.tensor([1, -1, 1])] ** 2, [F34]),
    "masked_fill_": (lambda m, x: (x * 2).masked_fill_(x > 0, 0.0), [F34]),
    "scatter_": (lambda m, x, s: (x * 1).scatter_(1, m.tensor([[3, 0], [1, 2], [0, 1]]), s), [F34, F34[:, :2].copy()]),
    "index_add_": (lambda m, x, s: (x * 1).index_add_(1, m.tensor([3, 1]), s), [F34, F34[:, :2].copy()]),
}


@pytest.mark.parametrize("name", sorted(GRADS))
@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_gradients_match_torch(name, mode):
    fn, arrays = GRADS[name]
    w = np.random.default_rng(7).standard_normal
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    out = fn(torch, *ts)
    weight = w(tuple(out.shape)).astype(np.float32)
    (out * torch.tensor(weight)).sum().backward()
    with gg.graph_mode(mode == "graph"):
        gs = [gg.tensor(a, requires_grad=True) for a in arrays]
        (fn(gg, *gs) * gg.tensor(weight)).sum().backward()
        for k, (g, t) in enumerate(zip(gs, ts)):
            np.testing.assert_allclose(g.grad.numpy(), t.grad.numpy(), rtol=1e-4, atol=1e-5,
                                       err_msg=f"{name} ({mode}): gradient of input {k}")


# ---------------------------------------------------------------- writes: views, in place, x[i, j] = v
def test_diagonal_is_a_view_that_writes_through():
    for m in (torch, gg):
        x = m.zeros(3, 4)
        d = x.diagonal(1)
        d.fill_(2.0)
        x[0, 1] = 5.0
        assert d.tolist() == [5.0, 2.0, 2.0]
        assert x.tolist()[1][2] == 2.0
    assert gg.zeros(3, 4).diagonal(-1).stride() == torch.zeros(3, 4).diagonal(-1).stride()
    assert gg.zeros(2, 3, 4).diagonal(1, 0, 2).storage_offset() == torch.zeros(2, 3, 4).diagonal(1, 0, 2).storage_offset()


@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_index_writes_match_torch(mode):
    rows, cols = [0, 1], [1, -1]
    want = torch.tensor(F234)
    want[torch.tensor([0, 1]), :, torch.tensor([3, 0])] = -1.0
    want[torch.tensor(rows), torch.tensor(cols)] += torch.tensor([[1.0, 2.0, 3.0, 4.0]]).T[:2, :1]
    with gg.graph_mode(mode == "graph"):
        got = gg.tensor(F234)
        got[gg.tensor([0, 1]), :, gg.tensor([3, 0])] = -1.0
        got[gg.tensor(rows), gg.tensor(cols)] += gg.tensor([[1.0, 2.0, 3.0, 4.0]]).T[:2, :1]
        np.testing.assert_allclose(got.numpy(), want.numpy())


@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_index_write_gradients_match_torch(mode):
    def run(m, a, v):
        x = a * 1.0
        x[m.tensor([0, 2]), m.tensor([1, 3])] = v
        x[m.tensor([1, 1]), m.tensor([0, 2])] += v * 2
        return (x * x).sum()
    ta, tv = torch.tensor(F34, requires_grad=True), torch.tensor(V3[:2].copy(), requires_grad=True)
    run(torch, ta, tv).backward()
    with gg.graph_mode(mode == "graph"):
        ga, gv = gg.tensor(F34, requires_grad=True), gg.tensor(V3[:2].copy(), requires_grad=True)
        run(gg, ga, gv).backward()
        np.testing.assert_allclose(ga.grad.numpy(), ta.grad.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(gv.grad.numpy(), tv.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_in_place_scatters_match_torch_and_bump_the_version():
    ops = [lambda x, m, i: x.scatter_(1, i, x * 2), lambda x, m, i: x.scatter_add_(1, i, x.clone()),
           lambda x, m, i: x.scatter_reduce_(1, i, x + 1, "amin", include_self=False),
           lambda x, m, i: x.index_add_(0, i[0, :3] % 3, x[:3].clone()),
           lambda x, m, i: x.index_copy_(0, i[1, :2] % 3, x[:2].clone()),
           lambda x, m, i: x.index_fill_(1, i[2], 0.25)]
    for k, f in enumerate(ops):
        t = torch.tensor(F34)
        f(t, torch, torch.tensor(IDX.astype(np.int64)))
        g = gg.tensor(F34)
        v0 = g._version
        assert f(g, gg, gg.tensor(IDX)) is g
        assert g._version > v0
        np.testing.assert_allclose(g.numpy(), t.numpy(), rtol=1e-6, err_msg=f"in-place op {k}")


def test_in_place_scatter_on_a_leaf_that_requires_grad_raises_like_torch():
    for m, idx in ((torch, torch.tensor(IDX.astype(np.int64))), (gg, gg.tensor(IDX))):
        x = m.tensor(F34, requires_grad=True)
        with pytest.raises(RuntimeError, match="leaf"):
            x.scatter_add_(1, idx, x.detach())


@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_in_place_scatters_through_views_reach_the_base_like_torch(mode):
    def run(m):
        x = m.zeros(3, 4)
        x[1:].scatter_(1, m.tensor([[0, 3], [1, 1]]), m.ones(2, 2) * 5)
        x.T.index_fill_(0, m.tensor([2]), 7.0)
        x.diagonal().index_add_(0, m.tensor([0, 0]), m.ones(2))
        x[:, 1].masked_fill_(m.tensor([True, False, True]), -3.0)
        return x
    want = run(torch)
    with gg.graph_mode(mode == "graph"):
        assert run(gg).tolist() == want.tolist()


def _write_program(m, x, i, j, v):
    y = x * 1.0
    y[i, :, j] = v                       # repeated (i, j) pairs: the last write wins (torch's CPU result)
    y[j % 2, i] += 10.0
    y[:, i] = y[:, i] * 2
    y[i[:1], None, i[:1]] = -1.0
    return y


WRITE_INPUTS = [F234, np.array([0, 1, 0], np.int32), np.array([3, 0, 3], np.int32),
                np.arange(9, dtype=np.float32).reshape(3, 3)]


def test_index_tensor_writes_match_torch_in_every_mode():
    want = _write_program(torch, *_torch_inputs(WRITE_INPUTS)).numpy()
    for mode in ("eager", "graph"):
        with gg.graph_mode(mode == "graph"):
            np.testing.assert_allclose(_write_program(gg, *_gg_inputs(WRITE_INPUTS)).numpy(), want, err_msg=mode)
    captured = gg.capture(lambda *ts: _write_program(gg, *ts))
    for _ in range(2):
        np.testing.assert_allclose(captured(*WRITE_INPUTS), want, err_msg="capture")


def test_index_tensor_write_gradients_match_torch_in_capture():
    # No repeated positions here: with them torch gives every repeated write the gradient (its documented
    # "undefined" case), ggmlgrad only the write that stays (the derivative of the values it returns).
    def loss(m, x, i, j, v):
        y = x * 1.0
        y[i, :, j] = v
        y[j % 2, i] += 10.0 * y[j % 2, i]
        return (y ** 2).sum()
    inputs = [F234, np.array([0, 1, 0], np.int32), np.array([3, 0, 2], np.int32), WRITE_INPUTS[3]]
    tx, ti, tj, tv = _torch_inputs(inputs)
    tx.requires_grad_(True), tv.requires_grad_(True)
    loss(torch, tx, ti, tj, tv).backward()

    def step(x, i, j, v):
        x.requires_grad_(True), v.requires_grad_(True)
        loss(gg, x, i, j, v).backward()
        return x.grad, v.grad
    captured = gg.capture(step)
    for _ in range(2):
        gx, gv = captured(*inputs)
    np.testing.assert_allclose(gx, tx.grad.numpy(), rtol=1e-5)
    np.testing.assert_allclose(gv, tv.grad.numpy(), rtol=1e-5)


@pytest.mark.parametrize("mode", ["eager", "graph", "capture"])
def test_index_tensor_write_out_of_range_raises_index_error(mode):
    def write(x, i):
        x[i, i] = 1.0
        return x * 1
    args = (F34, np.array([0, 3], np.int32))
    with pytest.raises(IndexError):
        if mode == "capture":
            gg.capture(write)(*args)
        else:
            with gg.graph_mode(mode == "graph"):
                write(gg.tensor(F34), gg.tensor(args[1])).numpy()


def test_many_index_writes_go_through_the_host_with_the_same_result():
    n = 3000                                             # above the device path's write count
    rng = np.random.default_rng(3)
    i = rng.integers(0, 50, n).astype(np.int32)
    v = rng.standard_normal(n).astype(np.float32)
    t = torch.zeros(50)
    t[torch.tensor(i.astype(np.int64))] = torch.tensor(v)
    g = gg.zeros(50)
    g[gg.tensor(i)] = gg.tensor(v)
    np.testing.assert_allclose(g.numpy(), t.numpy())
