"""Tensor basics: creation, dtypes (f16/bf16 round trips), host reads, repr,
in-place ops and the version counter — in eager and graph mode."""
from __future__ import annotations

import numpy as np
import pytest

import ggmlgrad as gg
from ggmlgrad.engine.dtypes import bf16_to_f32

MODES = pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])


def _bf16_reference(x: np.ndarray) -> np.ndarray:
    """float32 → bfloat16 (round to nearest even) → float32, computed independently in integers."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    lower = u & 0xFFFF
    upper = u >> 16
    round_up = (lower > 0x8000) | ((lower == 0x8000) & ((upper & 1) == 1))
    upper = (upper + round_up) & 0xFFFF
    return (upper.astype(np.uint32) << 16).view(np.float32)


# ---------------------------------------------------------------------------- creation
def test_tensor_from_lists_arrays_scalars_and_tensors():
    a = gg.tensor([[1, 2], [3, 4]])
    assert a.dtype is gg.int32 and a.shape == (2, 2) and a.ndim == 2 and len(a) == 2 and a.numel() == 4
    f = gg.tensor([[1.0, 2.5]])
    assert f.dtype is gg.float32 and f.tolist() == [[1.0, 2.5]]
    assert gg.tensor(np.arange(6, dtype=np.float64).reshape(2, 3)).dtype is gg.float32
    assert gg.tensor(np.float16([1.5])).dtype is gg.float16
    assert gg.tensor(np.array([True, False])).tolist() == [1.0, 0.0]
    s = gg.tensor(3.25)
    assert s.shape == () and s.ndim == 0 and s.item() == 3.25
    with pytest.raises(TypeError):
        len(s)
    c = gg.tensor(f)
    assert c.tolist() == f.tolist() and c is not f and not c.requires_grad
    g = gg.tensor([1.0, 2.0], requires_grad=True)
    assert g.requires_grad and g.is_leaf
    assert gg.tensor([1, 2], dtype="float32").dtype is gg.float32
    assert gg.tensor([1.7, -2.2], dtype=gg.int32).tolist() == [1, -2]  # C-style truncation, like NumPy
    e = gg.tensor(np.zeros((0, 3), np.float32))
    assert e.shape == (0, 3) and e.numpy().shape == (0, 3) and e.tolist() == []


def test_factories():
    assert gg.zeros(2, 3).tolist() == [[0.0] * 3] * 2
    assert gg.zeros((2, 3)).shape == (2, 3)
    assert gg.ones(2, dtype="float16").dtype is gg.float16
    assert gg.full((2,), 7).tolist() == [7.0, 7.0]
    assert gg.arange(4).tolist() == [0, 1, 2, 3] and gg.arange(4).dtype is gg.int32
    assert gg.arange(0.0, 1.0, 0.25).tolist() == [0.0, 0.25, 0.5, 0.75]
    assert gg.linspace(0, 1, 5).tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert gg.eye(3).numpy().tolist() == np.eye(3).tolist()
    x = gg.ones(2, 2)
    assert gg.zeros_like(x).tolist() == [[0.0, 0.0], [0.0, 0.0]] and gg.ones_like(x).shape == (2, 2)
    gg.manual_seed(123)
    r1, n1, i1 = gg.rand(50).numpy(), gg.randn(3, 4).numpy(), gg.randint(0, 5, size=(100,)).numpy()
    gg.manual_seed(123)
    assert np.array_equal(r1, gg.rand(50).numpy()) and np.array_equal(n1, gg.randn(3, 4).numpy())
    assert np.array_equal(i1, gg.randint(0, 5, size=(100,)).numpy())
    assert r1.min() >= 0 and r1.max() < 1 and i1.min() >= 0 and i1.max() <= 4 and len(set(i1.tolist())) == 5
    assert gg.randint(0, 5, size=(3,)).dtype is gg.int32
    with pytest.raises(ValueError):
        gg.zeros(1, 1, 1, 1, 1)
    with pytest.raises(ValueError):
        gg.zeros(-1)
    with pytest.raises(ValueError):
        gg.randint(3, 3)
    with pytest.raises(TypeError):
        gg.manual_seed("seed")


# ---------------------------------------------------------------------------- dtypes
@MODES
@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")  # 70000 → inf on purpose
def test_float16_round_trip(graph):
    x = np.array([0.1, -2.5, 65504.0, 1e-5, 3.14159, 70000.0], np.float32)
    with gg.graph_mode(graph):
        t = gg.tensor(x).to("float16")
        assert t.dtype is gg.float16
        h = t.numpy()
        assert h.dtype == np.float16
        np.testing.assert_array_equal(h, x.astype(np.float16))  # IEEE round to nearest even, inf on overflow
        back = t.to("float32")
        assert back.dtype is gg.float32
        np.testing.assert_array_equal(back.numpy(), x.astype(np.float16).astype(np.float32))
        assert gg.tensor(x, dtype="float16").numpy().tolist() == x.astype(np.float16).tolist()


@MODES
def test_bfloat16_round_trip(graph):
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(200).astype(np.float32) * 100,
                        np.array([1.0, -0.0, 3.0e38, 1.00390625, 1.01171875], np.float32)])
    with gg.graph_mode(graph):
        t = gg.tensor(x).to(gg.bfloat16)
        assert t.dtype is gg.bfloat16
        v = t.numpy()  # bfloat16 reads back as float32 values (NumPy has no bfloat16)
        assert v.dtype == np.float32
        np.testing.assert_array_equal(v, _bf16_reference(x))
        np.testing.assert_array_equal(t.float().numpy(), _bf16_reference(x))
        direct = gg.tensor(x, dtype="bfloat16")
        np.testing.assert_array_equal(direct.numpy(), _bf16_reference(x))
    assert np.array_equal(bf16_to_f32(np.array([0x3F80], np.uint16)), np.array([1.0], np.float32))


def test_dtype_names_and_errors():
    for name, d in [("float32", gg.float32), ("f16", gg.float16), ("bf16", gg.bfloat16), ("int32", gg.int32)]:
        assert gg.zeros(1, dtype=name).dtype is d
    assert repr(gg.float32) == "ggmlgrad.float32"
    for bad in ("float8", "complex64", "", "str"):
        with pytest.raises(TypeError, match="dtype"):
            gg.zeros(1, dtype=bad)
    with pytest.raises(TypeError):
        gg.tensor(["a", "b"])
    with pytest.raises(TypeError):
        gg.tensor(np.array([1 + 2j]))
    with pytest.raises(ValueError):
        gg.tensor(np.array([2**40]))
    with pytest.raises(ValueError):
        gg.tensor([np.nan], dtype="int32")


# ---------------------------------------------------------------------------- host reads
@MODES
def test_numpy_is_a_view_and_host_reads(graph):
    with gg.graph_mode(graph):
        t = gg.tensor([[1.5, -2.0], [3.0, 4.0]]) * 1
        a = t.numpy()
        a[0, 0] = 100.0                            # a view of the tensor's memory, as torch's
        assert t.tolist() == [[100.0, -2.0], [3.0, 4.0]]
        a[0, 0] = 1.5
        assert np.asarray(t).dtype == np.float32
        assert np.asarray(t, dtype=np.float64).dtype == np.float64
        assert np.array(t).tolist() == [[1.5, -2.0], [3.0, 4.0]]
        s = (gg.tensor([2.5]) * 1)
        assert s.item() == 2.5 and float(s) == 2.5 and int(s) == 2 and bool(s) is True
        assert bool(gg.tensor([0.0]) * 1) is False
        assert f"{s:.2f}" == "2.50"
        with pytest.raises(ValueError, match="one-element"):
            t.item()
        with pytest.raises(ValueError, match="ambiguous"):
            bool(t)
        i = gg.tensor([7]) if True else None
        assert [10, 20, 30, 40, 50, 60, 70, 80][i] == 80 and int(i) == 7


def test_repr():
    on = "" if gg.get_device().type == "cpu" else f", device='{gg.get_device()}'"   # torch names a device other than the CPU
    assert repr(gg.tensor([1.0, 2.0])) == f"tensor([1., 2.]{on})"
    assert repr(gg.tensor([[1.0, 2.0]], requires_grad=True)) == f"tensor([[1., 2.]]{on}, requires_grad=True)"
    assert "dtype=int32" in repr(gg.tensor([1, 2]))
    assert "dtype=float16" in repr(gg.tensor([1.0]).half())
    assert "requires_grad=True" in repr(gg.tensor([1.0], requires_grad=True))
    assert "grad_fn=<mulBackward>" in repr(gg.tensor([1.0], requires_grad=True) * gg.tensor([2.0]))
    assert str(gg.tensor([[1.0, 2.0], [3.0, 4.0]])) == f"tensor([[1., 2.],\n        [3., 4.]]{on})"


# ---------------------------------------------------------------------------- in-place ops
@MODES
def test_inplace_ops_values(graph):
    with gg.graph_mode(graph):
        t = gg.tensor([1.0, 2.0, 3.0])
        assert t.add_(gg.tensor([1.0, 1.0, 1.0])).tolist() == [2.0, 3.0, 4.0]
        assert t.add_(gg.tensor([1.0, 1.0, 1.0]), alpha=2.0).tolist() == [4.0, 5.0, 6.0]
        assert t.sub_(gg.tensor([1.0])).tolist() == [3.0, 4.0, 5.0]  # broadcast source
        assert t.mul_(gg.tensor([2.0, 0.5, 1.0])).tolist() == [6.0, 2.0, 5.0]
        assert t.div_(gg.tensor([2.0])).tolist() == [3.0, 1.0, 2.5]
        assert t.add_(1.0).tolist() == [4.0, 2.0, 3.5]
        assert t.fill_(7).tolist() == [7.0, 7.0, 7.0]
        assert t.zero_().tolist() == [0.0, 0.0, 0.0]
        assert t.copy_([1, 2, 3]).tolist() == [1.0, 2.0, 3.0]
        assert t.copy_(5.0).tolist() == [5.0, 5.0, 5.0]  # scalar broadcast
        assert t.copy_(gg.tensor([9.0])).tolist() == [9.0, 9.0, 9.0]  # tensor broadcast
        h = gg.zeros(3, dtype="float16")
        h.copy_(gg.tensor([0.1, 0.2, 0.3]))  # converts to the destination dtype
        assert h.dtype is gg.float16
        np.testing.assert_array_equal(h.numpy(), np.array([0.1, 0.2, 0.3], np.float16))
        with pytest.raises(ValueError, match="copy_"):
            t.copy_(np.ones(4))
        with pytest.raises(TypeError, match="copy_"):
            t.copy_(["a", "b", "c"])
        assert t.tolist() == [9.0, 9.0, 9.0]  # a refused write changed nothing


@MODES
def test_inplace_keeps_storage_and_other_holders_see_it(graph):
    """An in-place op writes the tensor's own memory (the device pointer never moves)."""
    with gg.graph_mode(graph):
        t = gg.tensor([1.0, 2.0])
        storage = t._storage
        d = t.detach()  # shares the storage
        t.mul_(gg.tensor([3.0, 3.0]))
        assert t._storage is storage
        assert d.tolist() == [3.0, 6.0]


@MODES
def test_tensor_of_a_tensor_is_a_copy(graph):
    with gg.graph_mode(graph):
        f = gg.tensor([1.0, 2.0])
        c = gg.tensor(f)
        c.add_(gg.ones(2))
        assert f.tolist() == [1.0, 2.0] and c.tolist() == [2.0, 3.0]
        d = f.detach()  # detach() IS an alias (PyTorch semantics): same memory, same version counter
        d.add_(gg.ones(2))
        assert f.tolist() == [2.0, 3.0] and f._version == d._version == 1
        g = gg.tensor(f * 1)  # from a pending tensor
        f.zero_()
        assert g.tolist() == [2.0, 3.0]


@pytest.mark.parametrize("graph", [False, True])
def test_integer_arithmetic_stays_integer_like_torch(graph):
    a_np = np.array([-7, -3, 0, 4, 9], dtype=np.int32)
    b_np = np.array([2, 3, -4, 5, 2], dtype=np.int32)
    with gg.graph_mode(graph):
        a, b = gg.tensor(a_np), gg.tensor(b_np)
        for got, want in [(a + b, a_np + b_np), (a - 1, a_np - 1), (3 - a, 3 - a_np), (a * b, a_np * b_np),
                          (a * 2, a_np * 2), (-a, -a_np), (a // b, a_np // b_np), (a % b, a_np % b_np),
                          (a // 2, a_np // 2), (a % 3, a_np % 3), (a ** 2, a_np ** 2)]:
            assert got.dtype is gg.int32
            np.testing.assert_array_equal(got.numpy(), want)
        # true division and float operands promote to float32
        for got, want in [(a / b, a_np / b_np), (a + 0.5, a_np + 0.5), (a * gg.tensor([1.5]), a_np * 1.5)]:
            assert got.dtype is gg.float32
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)


def test_array_protocol_honours_numpy2_copy_argument():
    t = gg.tensor([1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="without a copy"):
        np.asarray(t.to("bfloat16"), copy=False)   # bfloat16 reads back as float32: a copy is needed
    with pytest.raises(ValueError, match="without a copy"):
        np.asarray(t, dtype=np.float64, copy=False)
    a = np.asarray(t, copy=False)
    b = np.array(t, copy=True, dtype=np.float64)
    c = np.array(t, copy=True)
    assert a.dtype == np.float32 and b.dtype == np.float64
    np.testing.assert_array_equal(b, [1.0, 2.0, 3.0])
    c[0] = 7.0                                     # a copy: the tensor keeps its value
    assert t.tolist() == [1.0, 2.0, 3.0]
    a[0] = 9.0                                     # a view: the tensor shows it
    assert t.tolist() == [9.0, 2.0, 3.0]
