"""The bool dtype (issue 12, item 5): comparisons, masks, ``where``, logical and bitwise operators,
promotion with bools, bool reductions, conversions and host round trips — torch.bool's semantics.

Each program runs in eager and graph mode against a NumPy reference; where torch is installed the
same program also runs in torch and the values, the result's dtype kind and the raised error type
must agree (``pytest.importorskip`` guards that part only)."""
from __future__ import annotations

import numpy as np
import pytest

import ggmlgrad as gg

A = [True, False, True, False]
B = [True, True, False, False]
F = [1.5, -2.0, float("nan"), 0.0]
I = [3, 0, -2, 7]

# (name, program over a module `m` (gg or torch), NumPy reference or an exception type)
PROGRAMS = [
    ("gt", lambda m: m.tensor(F) > 0.5, lambda: np.array(F) > 0.5),
    ("le_tensors", lambda m: m.tensor(F) <= m.tensor([1.5, 0.0, 0.0, 0.0]), lambda: np.array(F) <= [1.5, 0, 0, 0]),
    ("eq_int", lambda m: m.tensor(I) == 0, lambda: np.array(I) == 0),
    ("ne_nan", lambda m: m.tensor(F) != m.tensor(F), lambda: np.array(F) != np.array(F)),
    ("fn_forms", lambda m: m.ge(m.tensor(F), 0.0), lambda: np.array(F) >= 0),
    ("bool_eq_bool", lambda m: m.tensor(A) == m.tensor(B), lambda: np.array(A) == np.array(B)),
    ("and", lambda m: m.tensor(A) & m.tensor(B), lambda: np.array(A) & np.array(B)),
    ("or", lambda m: m.tensor(A) | m.tensor(B), lambda: np.array(A) | np.array(B)),
    ("xor", lambda m: m.tensor(A) ^ m.tensor(B), lambda: np.array(A) ^ np.array(B)),
    ("invert", lambda m: ~m.tensor(A), lambda: ~np.array(A)),
    ("and_py_bool", lambda m: m.tensor(A) & True, lambda: np.array(A) & True),
    ("rxor_py_bool", lambda m: True ^ m.tensor(A), lambda: True ^ np.array(A)),
    ("mask_of_mask", lambda m: (m.tensor(F) > 0) | (m.tensor(F) < -1), lambda: (np.array(F) > 0) | (np.array(F) < -1)),
    ("logical_and_any", lambda m: m.logical_and(m.tensor(F), m.tensor(I)), lambda: np.logical_and(F, I)),
    ("logical_or", lambda m: m.logical_or(m.tensor(I), m.tensor(A)), lambda: np.logical_or(I, A)),
    ("logical_xor", lambda m: m.logical_xor(m.tensor(A), m.tensor(F)), lambda: np.logical_xor(A, F)),
    ("logical_not", lambda m: m.logical_not(m.tensor(F)), lambda: np.logical_not(F)),
    ("isnan", lambda m: m.isnan(m.tensor(F + [float("inf")])), lambda: np.isnan(F + [np.inf])),
    ("isinf", lambda m: m.tensor([1.0, float("inf"), -float("inf"), float("nan")]).isinf(),
     lambda: np.isinf([1.0, np.inf, -np.inf, np.nan])),
    ("isfinite", lambda m: m.isfinite(m.tensor([1.0, float("inf"), float("nan")])),
     lambda: np.isfinite([1.0, np.inf, np.nan])),
    ("isfinite_int", lambda m: m.isfinite(m.tensor(I)), lambda: np.isfinite(I)),
    # promotion: bool < integer < float; a number counts when its category is higher
    ("bool_plus_bool", lambda m: m.tensor(A) + m.tensor(B), lambda: np.array(A) | np.array(B)),
    ("bool_times_bool", lambda m: m.tensor(A) * m.tensor(B), lambda: np.array(A) & np.array(B)),
    ("bool_plus_true", lambda m: m.tensor(A) + True, lambda: np.array(A) | True),
    ("mask_times_float", lambda m: (m.tensor(F) > 0) * m.tensor(F),
     lambda: (np.array(F) > 0) * np.array(F)),      # False * NaN is NaN (IEEE, torch)
    ("mask_times_scalar", lambda m: m.tensor(A) * 2.5, lambda: np.array(A) * 2.5),
    ("mask_plus_int_scalar", lambda m: m.tensor(A) + 1, lambda: np.array(A).astype(np.int64) + 1),
    ("int_scalar_times_mask", lambda m: 3 * m.tensor(A), lambda: 3 * np.array(A).astype(np.int64)),
    ("mask_plus_int_tensor", lambda m: m.tensor(A) + m.tensor(I), lambda: np.array(A) + np.array(I)),
    ("bool_div", lambda m: m.tensor(A) / m.tensor([True, True, True, True]), lambda: np.array(A) / 1.0),
    ("mask_pow_int", lambda m: m.tensor(A) ** 2, lambda: np.array(A).astype(np.int64) ** 2),
    ("mask_floordiv_int", lambda m: m.tensor(A) // 2, lambda: np.array(A).astype(np.int64) // 2),
    ("bool_sub_bool", lambda m: m.tensor(A) - m.tensor(B), RuntimeError),
    ("int_sub_bool", lambda m: 1 - m.tensor(A), RuntimeError),
    ("neg_bool", lambda m: -m.tensor(A), RuntimeError),
    ("bool_floordiv_bool", lambda m: m.tensor(A) // m.tensor(B), NotImplementedError),
    ("float_and", lambda m: m.tensor(F) & m.tensor(F), (RuntimeError, NotImplementedError)),
    ("float_invert", lambda m: ~m.tensor(F), TypeError),
    # reductions: sum counts (int64 in torch, int32 here), max/min stay bool
    ("sum", lambda m: m.tensor(A).sum(), lambda: np.sum(A)),
    ("sum_dim", lambda m: m.tensor([A, B]).sum(0), lambda: np.sum([A, B], axis=0)),
    ("sum_keepdim", lambda m: m.tensor([A, B]).sum(1, keepdim=True), lambda: np.sum([A, B], axis=1, keepdims=True)),
    ("count_matches", lambda m: (m.tensor(I) == m.tensor([3, 1, -2, 0])).sum(), lambda: np.sum(np.array(I) == [3, 1, -2, 0])),
    ("amax", lambda m: m.tensor(A).amax(), lambda: np.max(A)),
    ("min", lambda m: m.tensor([A, B]).min(), lambda: np.min([A, B])),
    ("any", lambda m: m.tensor(F).any(), lambda: np.any(F)),
    ("all_dim", lambda m: m.tensor([A, [True] * 4]).all(1), lambda: np.all([A, [True] * 4], axis=1)),
    ("max_dim_values", lambda m: m.tensor([A, B]).max(1).values, lambda: np.max([A, B], axis=1)),
    # integer tensors: torch's integer arithmetic and reductions (int64 there, int32 here)
    ("int_mul", lambda m: m.tensor(I) * m.tensor(I), lambda: np.array(I) * np.array(I)),
    ("int_floordiv", lambda m: m.tensor(I) // 2, lambda: np.array(I) // 2),
    ("int_remainder", lambda m: m.tensor(I) % 3, lambda: np.array(I) % 3),
    ("int_max", lambda m: m.tensor([I, I[::-1]]).max(), lambda: np.max([I, I[::-1]])),
    ("int_min_dim", lambda m: m.tensor([I, I[::-1]]).min(1).values, lambda: np.min([I, I[::-1]], axis=1)),
    ("int_argmax", lambda m: m.tensor([I, I[::-1]]).argmax(1), lambda: np.argmax([I, I[::-1]], axis=1)),
    ("int_sum", lambda m: m.tensor([I, I]).sum(0), lambda: np.sum([I, I], axis=0)),
    ("int_true_div", lambda m: m.tensor(I) / 2, lambda: np.array(I) / 2),
    # conversions
    ("float", lambda m: m.tensor(A).float(), lambda: np.array(A, np.float32)),
    ("int", lambda m: m.tensor(A).int(), lambda: np.array(A, np.int32)),
    ("bool_of_float", lambda m: m.tensor(F).bool(), lambda: np.array(F) != 0),
    ("bool_of_int", lambda m: m.tensor(I).bool(), lambda: np.array(I) != 0),
    ("to_bool", lambda m: m.tensor(F).to(m.bool), lambda: np.array(F).astype(bool)),
    ("bool_from_lists", lambda m: m.tensor(A), lambda: np.array(A)),
    ("zeros_bool", lambda m: m.zeros(3, dtype=m.bool), lambda: np.zeros(3, bool)),
    ("full_bool", lambda m: m.full((2,), 3.0, dtype=m.bool), lambda: np.full(2, True)),
    ("full_of_true", lambda m: m.full((2,), True), lambda: np.full(2, True)),
    ("where_bool_branches", lambda m: m.where(m.tensor(A), m.tensor(B), m.tensor(A)), lambda: np.where(A, B, A)),
    # masks
    ("where_bool", lambda m: m.where(m.tensor(A), m.tensor(F), 0.0), lambda: np.where(A, F, 0.0)),
    ("where_mask_of_values", lambda m: m.where(m.tensor(F) > 0, m.tensor(F), -m.tensor(F)),
     lambda: np.where(np.array(F) > 0, F, -np.array(F))),
    ("masked_fill", lambda m: m.tensor(F).masked_fill(m.tensor(A), -1.0), lambda: np.where(A, -1.0, F)),
    ("masked_fill_int", lambda m: m.tensor(I).masked_fill(m.tensor(B), 9), lambda: np.where(B, 9, I)),
    ("masked_fill_broadcast", lambda m: m.tensor([F, F]).masked_fill(m.tensor(A), 0.0),
     lambda: np.where(A, 0.0, [F, F])),
    ("masked_fill_float_mask", lambda m: m.tensor(F).masked_fill(m.tensor(F), 0.0), RuntimeError),
    ("index_bool", lambda m: m.tensor([A, B])[1], lambda: np.array(B)),
    ("reshape_bool", lambda m: m.tensor(A).reshape(2, 2), lambda: np.array(A).reshape(2, 2)),
]


def _run(program):
    try:
        return program(), None
    except Exception as e:          # noqa: BLE001  (the type is what is compared)
        return None, e


def _kind(t) -> str:
    name = str(t.dtype).split(".")[-1]
    return "bool" if name == "bool" else "int" if "int" in name else "float"


def _check_against_numpy(out, err, ref):
    if isinstance(ref, type) or isinstance(ref, tuple):
        assert err is not None and isinstance(err, ref), f"expected {ref}, got {err!r} / {out}"
        return
    assert err is None, repr(err)
    expect = np.asarray(ref())
    got = out.numpy()
    kind = "bool" if expect.dtype == np.bool_ else "int" if expect.dtype.kind in "iu" else "float"
    assert _kind(out) == kind, (out.dtype, expect.dtype)
    assert got.shape == expect.shape
    if kind == "bool":
        assert got.dtype == np.bool_
        np.testing.assert_array_equal(got, expect)
    else:
        np.testing.assert_allclose(got.astype(np.float64), expect.astype(np.float64), equal_nan=True)


@pytest.mark.parametrize("name,program,ref", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_bool_semantics_against_numpy(name, program, ref, graph):
    with gg.graph_mode(graph):
        out, err = _run(lambda: program(gg))
        if err is None:
            out.numpy()      # computed inside the mode
    _check_against_numpy(out, err, ref)


def test_bool_semantics_match_torch():
    torch = pytest.importorskip("torch")
    for name, program, _ in PROGRAMS:
        mine, my_err = _run(lambda: program(gg))
        theirs, their_err = _run(lambda: program(torch))
        if their_err is not None or my_err is not None:
            assert my_err is not None and their_err is not None, (name, my_err, their_err)
            assert type(my_err) is type(their_err) or name == "float_and", (name, my_err, their_err)
            continue
        assert _kind(mine) == _kind(theirs), (name, mine.dtype, theirs.dtype)
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy(), err_msg=name)


# ---------------------------------------------------------------------------- host round trips, printing
def test_bool_host_round_trips_and_printing():
    t = gg.tensor(np.array([True, False]))
    assert t.dtype is gg.bool and gg.bool.name == "bool"
    a = t.numpy()
    assert a.dtype == np.bool_ and a.tolist() == [True, False]
    assert t.tolist() == [True, False] and t[0].item() is True
    on = "" if t.device.type == "cpu" else f", device='{t.device}'"   # torch names a device other than the CPU
    assert repr(t) == f"tensor([ True, False]{on})"
    assert np.asarray(t).dtype == np.bool_
    assert gg.tensor([1.0, 0.0], dtype=gg.bool).tolist() == [True, False]
    assert gg.tensor([1.0], dtype="bool").dtype is gg.bool
    assert gg.dtype is type(gg.bool) and gg.float64 is gg.float32 and gg.int64 is gg.int32   # the dtype rule holds
    with pytest.raises(TypeError, match="from_numpy"):
        gg.from_numpy(np.array([True]))          # bool storage is float32 0/1: no sharing
    b = gg.tensor([True, False])
    c = b.clone()
    c[0] = False
    assert b.tolist() == [True, False] and c.tolist() == [False, False]
    b.fill_(3.0)                                  # non-zero → True
    assert b.tolist() == [True, True]
    with pytest.raises(RuntimeError, match="Bool"):
        b.add_(1)                                 # an int result cannot go into a bool tensor (torch)


def test_bool_tensors_save_load_pickle_and_deepcopy(tmp_path):
    import copy
    import pickle
    m = gg.tensor([[True, False, True]])
    for ext in ("safetensors", "gguf"):
        path = str(tmp_path / f"m.{ext}")
        gg.save({"m": m, "a": np.array([False, True])}, path)
        back = gg.load(path)
        assert back["m"].dtype is gg.bool and back["m"].tolist() == m.tolist()
        assert (back["m"] * 2.0).tolist() == [[2.0, 0.0, 2.0]]           # the storage holds 0/1
        assert back["a"].dtype == np.bool_
    for c in (pickle.loads(pickle.dumps(m)), copy.deepcopy(m)):
        assert c.dtype is gg.bool and c.tolist() == m.tolist()


def test_bool_tensors_have_no_gradient_and_masks_pass_gradients():
    x = gg.tensor([1.0, -2.0, 3.0], requires_grad=True)
    m = x > 0
    assert m.dtype is gg.bool and not m.requires_grad
    with pytest.raises(TypeError):
        m.requires_grad_(True)
    (m * x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 0.0, 1.0])
    x.grad = None
    gg.where(m, x * 2, 0.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 0.0, 2.0])


def test_mask_times_tensor_needs_no_conversion_node():
    """The storage choice: a comparison is float 0/1 already, so ``(x > 0) * y`` has fewer nodes than
    the same product with an explicit conversion, and the comparison's own nodes plus one product."""
    x, y = gg.tensor([[1.0, -1.0], [2.0, 0.0]]), gg.tensor([[3.0, 4.0], [5.0, 6.0]])
    counts = {}
    with gg.graph_mode(True):
        for name, f in {"mask": lambda: (x > 0) * y, "converted": lambda: (x > 0).float() * y,
                        "float_mask": lambda: gg.tensor([[1.0, 0.0], [1.0, 1.0]]) * y}.items():
            f().numpy()
            counts[name] = gg.engine.graph_node_counts()[-1]
    assert counts["mask"] < counts["converted"]
    np.testing.assert_array_equal(((x > 0) * y).numpy(), (x.numpy() > 0) * y.numpy())


def test_bool_sum_is_computed_on_the_device_and_captures():
    x = gg.tensor([[1.0, -2.0, 3.0], [0.5, 0.0, -1.0]])
    step = gg.capture(lambda t: ((t > 0).sum(), (t > 0).any(1)))
    for v in (x, x * -1):
        count, any_row = step(v)                  # a replay returns NumPy arrays
        ref = v.numpy() > 0
        assert count.dtype == np.int32 and count.item() == ref.sum()
        assert any_row.dtype == np.bool_ and any_row.tolist() == ref.any(1).tolist()


def test_bool_in_nn_code_keeps_its_values():
    """Library code that used comparisons as float 0/1 (Embedding's padding mask, binary cross
    entropy's range check, attention masks) gives the same values with bool comparisons."""
    emb = gg.nn.Embedding(5, 3, padding_idx=0)
    idx = gg.tensor([0, 2, 0, 4])
    emb(idx).sum().backward()
    g = emb.weight.grad.numpy()
    assert (g[0] == 0).all() and (g[2] == 2 * 0 + 1).all() and (g[4] == 1).all()
    p = gg.tensor([0.2, 0.9])
    ref = -(np.log(0.2) + np.log(1 - 0.9)) / 2
    np.testing.assert_allclose(gg.nn.functional.binary_cross_entropy(p, gg.tensor([1.0, 0.0])).item(), ref, rtol=1e-5)
    q = k = v = gg.tensor(np.random.default_rng(0).standard_normal((1, 3, 4)).astype(np.float32))
    mask = gg.tensor([[True, False, False], [True, True, False], [True, True, True]])
    out = gg.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    causal = gg.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    np.testing.assert_allclose(out.numpy(), causal.numpy(), rtol=1e-5, atol=1e-6)


def test_a_bool_mask_argument_of_a_captured_function_stays_a_mask():
    """A bool array or bool tensor argument is a bool input (as gg.tensor(a) is), and its logical
    ops, which read it as float32 0/1, work inside the recording; values match eager and NumPy."""
    def f(x, m):
        return gg.where(m, x, 0.0), m & (x > 0), ~m, m.dtype == gg.bool
    cf = gg.capture(f)
    for seed in range(3):
        rng = np.random.default_rng(seed)
        x, m = rng.standard_normal(6).astype(np.float32), rng.random(6) > 0.5
        for arg in (m, gg.tensor(m)):
            kept, both, flipped, is_bool = cf(x, arg)
            assert is_bool is True
            np.testing.assert_array_equal(kept, np.where(m, x, 0.0))
            assert both.dtype == np.bool_ and flipped.dtype == np.bool_
            np.testing.assert_array_equal(both, m & (x > 0))
            np.testing.assert_array_equal(flipped, ~m)
    assert cf.n_recordings == 1
