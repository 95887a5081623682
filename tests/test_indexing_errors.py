"""Bad input to shape and indexing ops raises clean Python errors (never a ggml abort),
and index tensors with out-of-range values are refused in every mode (see test_index_checks.py)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ggmlgrad as gg
from ggmlgrad.ops import op

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")


def _x():
    return gg.tensor(np.arange(24, dtype=np.float32).reshape(2, 3, 4))


BAD_CALLS = {
    # name: (callable, expected exception, text the message must contain)
    "squeeze_dim": (lambda x: x.squeeze(3), IndexError, "squeeze"),
    "unsqueeze_dim": (lambda x: x.unsqueeze(-5), IndexError, "unsqueeze"),
    "unsqueeze_5d": (lambda x: x.reshape(1, 2, 3, 4).unsqueeze(0), ValueError, "at most 4"),
    "flatten_order": (lambda x: x.flatten(2, 1), ValueError, "flatten"),
    "flatten_dim": (lambda x: x.flatten(0, 3), IndexError, "flatten"),
    "transpose_dim": (lambda x: x.transpose(0, 3), IndexError, "transpose"),
    "broadcast_bad": (lambda x: gg.broadcast_to(x, (2, 5, 4)), ValueError, "broadcast_to"),
    "broadcast_fewer": (lambda x: gg.broadcast_to(x, (3, 4)), ValueError, "broadcast_to"),
    "expand_new_minus1": (lambda x: x.expand(-1, 2, 3, 4), ValueError, "broadcast_to"),
    "cat_shapes": (lambda x: gg.cat([x, gg.ones(2, 2, 4)], dim=2), ValueError, "concat"),
    "cat_dim": (lambda x: gg.cat([x, x], dim=3), ValueError, "concat"),
    "cat_empty": (lambda x: gg.cat([]), ValueError, "cat"),
    "cat_not_list": (lambda x: gg.cat(x), TypeError, "cat"),
    "concat_op_dtype": (lambda x: op.concat(x, x.to(gg.int32), axis=0), TypeError, "concat"),  # gg.cat promotes
    "cat_0d": (lambda x: gg.cat([x.sum(), x.sum()]), ValueError, "concat"),
    "stack_shapes": (lambda x: gg.stack([x, x[0]]), ValueError, "stack"),
    "stack_5d": (lambda x: gg.stack([x.reshape(1, 2, 3, 4)] * 2), ValueError, "stack"),
    "split_sections": (lambda x: gg.split(x, [1, 1], dim=1), ValueError, "split"),
    "split_size": (lambda x: gg.split(x, 0), ValueError, "split"),
    "chunk_zero": (lambda x: gg.chunk(x, 0), ValueError, "chunk"),
    "narrow_range": (lambda x: x.narrow(2, 3, 2), IndexError, "narrow"),
    "int_index": (lambda x: x[2], IndexError, "out of range"),
    "neg_int_index": (lambda x: x[:, -4], IndexError, "out of range"),
    "too_many": (lambda x: x[0, 0, 0, 0], IndexError, "too many"),
    "two_ellipsis": (lambda x: x[..., 0, ...], IndexError, "ellipsis"),
    "neg_step": (lambda x: x[::-1], ValueError, "negative"),
    "bool_mask_shape": (lambda x: x[x.sum(axis=(1, 2))[:1] > 0], IndexError, "boolean index"),
    "bool_list_shape": (lambda x: x[[True, False, True]], IndexError, "boolean index"),
    "bool_mask_range": (lambda x: x[[True, False], 5], IndexError, "out of bounds"),
    "bool_mask_neg_step": (lambda x: x[x[:, 0, 0] > 0, ::-1], ValueError, "negative"),
    "float_index": (lambda x: x[1.0], TypeError, "unsupported"),
    "list_range": (lambda x: x[[0, 2]], IndexError, "out of range"),
    "two_advanced_shapes": (lambda x: x[[0, 1], [1, 0, 1]], IndexError, "broadcast"),
    "index_float_tensor": (lambda x: gg.index_select(x, 0, gg.tensor([0.0])), TypeError, "int32"),
    "index_select_2d": (lambda x: gg.index_select(x, 0, gg.tensor([[0]])), ValueError, "1-D"),
    "index_select_dim": (lambda x: gg.index_select(x, 3, gg.tensor([0])), ValueError, "index_select"),
    "gather_ndim": (lambda x: gg.gather(x, 1, gg.tensor([[0]])), ValueError, "gather"),
    "gather_bigger": (lambda x: gg.gather(x, 1, gg.zeros(3, 3, 4, dtype=gg.int32)), ValueError, "gather"),
    "gather_dim": (lambda x: gg.gather(x, -4, gg.zeros(2, 3, 4, dtype=gg.int32)), IndexError, "gather"),
    "embedding_1d_weight": (lambda x: gg.embedding(x[0, 0], gg.tensor([0])), ValueError, "embedding"),
    "embedding_4d_index": (lambda x: gg.embedding(x[0], gg.zeros(1, 1, 1, 1, dtype=gg.int32)), ValueError,
                           "embedding"),
    "slice_bad_params": (lambda x: op.slice(x, start=(0, 0), stop=(1, 1), step=(1, 1)), ValueError, "slice"),
    "slice_out_of_bounds": (lambda x: op.slice(x, start=(0, 0, 0), stop=(3, 3, 4), step=(1, 1, 1)),
                            IndexError, "slice"),
    "setitem_index_range": (lambda x: x.__setitem__([0, 2], 1.0), IndexError, "out of bounds"),
    "setitem_mask_value_shape": (lambda x: x.__setitem__(x > 0, gg.ones(2)), RuntimeError, "shape mismatch"),
    "setitem_shape": (lambda x: x.__setitem__(0, gg.ones(4, 3)), ValueError, "cannot assign"),
    "setitem_range": (lambda x: x.__setitem__((0, 3), 1.0), IndexError, "out of range"),
    "setitem_neg_step": (lambda x: x.__setitem__((slice(None, None, -1),), 1.0), ValueError, "negative"),
    "setitem_requires_grad": (lambda x: x.requires_grad_().__setitem__(0, 1.0), RuntimeError, "in-place"),
    "slice_scatter_shape": (lambda x: gg.slice_scatter(x, gg.ones(2, 3, 2), dim=2, start=0, end=1),
                            ValueError, "slice_set"),
    # index VALUES out of range: only visible after a read, done in eager mode
    "index_select_value": (lambda x: gg.index_select(x, 1, gg.tensor([0, 3])), IndexError, "index_select"),
    "index_select_negative": (lambda x: gg.index_select(x, 1, gg.tensor([-1])), IndexError, "index_select"),
    "getitem_tensor_value": (lambda x: x[:, gg.tensor([-4])], IndexError, "out of range"),
    "gather_value": (lambda x: gg.gather(x, 2, gg.full((2, 3, 1), 4, dtype=gg.int32)), IndexError, "gather"),
    "embedding_value": (lambda x: gg.embedding(x[0], gg.tensor([[0, 3]])), IndexError, "embedding"),
    "embedding_negative": (lambda x: gg.embedding(x[0], gg.tensor([-1])), IndexError, "embedding"),
}


@pytest.mark.parametrize("name", sorted(BAD_CALLS))
def test_bad_call_raises(name):
    fn, exc, text = BAD_CALLS[name]
    with pytest.raises(exc) as info, gg.graph_mode(False):  # graph mode: see test_index_checks.py
        fn(_x())
    assert text.lower() in str(info.value).lower()


def test_dim_errors_are_also_value_errors():
    # PyTorch raises IndexError for a bad dim; ggmlgrad's errors are ValueErrors too.
    with pytest.raises(ValueError):
        _x().squeeze(7)


def test_out_of_range_values_in_a_subprocess_do_not_abort():
    """ggml's get_rows aborts the process on a bad row: make sure it never sees one."""
    code = textwrap.dedent("""
        import ggmlgrad as gg, numpy as np
        x = gg.tensor(np.arange(12, dtype=np.float32).reshape(3, 4), requires_grad=True)
        calls = {
            "index_select": lambda: gg.index_select(x, 0, gg.tensor([0, 1000000])),
            "gather": lambda: gg.gather(x, 1, gg.tensor([[0, -5]] * 3)),
            "embedding": lambda: gg.embedding(x, gg.tensor([[2**31 - 1]])),
            "getitem": lambda: x[gg.tensor([3])],
            "getitem_list": lambda: x[[0, 9]],
            "int": lambda: x[-9],
        }
        for name, fn in calls.items():
            try:
                fn()
                print(name, "NO-ERROR")
            except IndexError as e:
                print(name, "IndexError")
        # graph mode: the values are checked after the compute; forward and backward run (clamped, so
        # ggml never sees a bad row), then the drain raises IndexError and the session goes on
        for name, fn in list(calls.items())[:4]:
            with gg.graph_mode(True):
                y = fn()
                y.sum().backward()
                x.grad = None
                try:
                    y.detach().numpy()
                    print("graph", name, "NO-ERROR")
                except IndexError:
                    print("graph", name, "IndexError")
        print("after", (x * 2).sum().item())
        print("SURVIVED")
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GGMLGRAD_GRAPH")}  # eager by default
    env["PYTHONPATH"] = SRC
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, f"process died (rc {r.returncode}):\n{r.stdout}\n{r.stderr[-3000:]}"
    lines = r.stdout.splitlines()
    for name in ("index_select", "gather", "embedding", "getitem", "getitem_list", "int"):
        assert f"{name} IndexError" in lines, r.stdout
    for name in ("index_select", "gather", "embedding", "getitem"):
        assert f"graph {name} IndexError" in lines, r.stdout
    assert "after 132.0" in lines, r.stdout
    assert lines[-1] == "SURVIVED"


def test_eager_index_check_is_one_counted_read_and_graph_mode_reads_nothing():
    x = _x()
    idx = gg.tensor([0, 2])
    before = gg.counters()["downloads_by_site"].get("index_select index check", 0)
    with gg.graph_mode(False):
        gg.index_select(x, 1, idx)
    after = gg.counters()["downloads_by_site"].get("index_select index check", 0)
    assert after == before + 1
    d0 = gg.counters()["downloads"]
    with gg.graph_mode(True):
        y = gg.index_select(x, 1, idx)
        assert y.is_pending
        assert gg.counters()["downloads"] == d0
    np.testing.assert_array_equal(y.numpy(), np.arange(24, dtype=np.float32).reshape(2, 3, 4)[:, [0, 2]])


def test_graph_check_mode_refuses_bad_index_values_like_eager():
    x = _x()
    with gg.graph_mode(True, check=True):
        with pytest.raises(IndexError, match="index_select: index 5 is out of range"):
            gg.index_select(x, 1, gg.tensor([5]))
    with gg.graph_mode(True):
        y = gg.index_select(x, 1, gg.tensor([5]))   # no read possible: raised where the graph computes
        with pytest.raises(IndexError, match="index_select: index 5 is out of range"):
            y.detach().numpy()
        with pytest.raises(IndexError, match="index 5"):
            y.numpy()                                # a failed result: the same error again


def test_split_pieces_gradients_accumulate_and_graph_mode_is_one_compute():
    w = np.random.default_rng(1).standard_normal((4, 6)).astype(np.float32)
    with gg.graph_mode(True):
        x = gg.tensor(w, requires_grad=True)
        a, b, c = x.split(2, dim=1)
        loss = (a * 1.0 + b * 2.0 + c * 3.0).sum() + x[::2, 1::2].sum()
        c0 = gg.counters()["computes"]
        loss.backward()
        g = x.grad.numpy()
        assert gg.counters()["computes"] == c0 + 1
    expected = np.repeat(np.array([[1.0, 2.0, 3.0]]), 2, axis=1).repeat(4, axis=0)
    expected[::2, 1::2] += 1
    np.testing.assert_allclose(g, expected)


@pytest.mark.parametrize("graph", [False, True])
def test_setitem_matches_numpy_and_bumps_the_version(graph):
    ref = np.zeros((3, 4, 5), np.float32)
    with gg.graph_mode(graph):
        x = gg.zeros(3, 4, 5)
        v0 = x._version
        writes = [((slice(None), slice(None, None, 2)), 1.5), ((1,), np.arange(20, dtype=np.float32).reshape(4, 5)),
                  ((Ellipsis, slice(1, None, 3)), np.float32(-2.0)), ((0, 2, 4), 7),
                  ((slice(1, 3), None, 0, slice(None, None, 2)), np.ones((1, 3), np.float32) * 4)]
        for key, val in writes:
            x[key] = val
            ref[key] = val
        y = x * 1.0
    np.testing.assert_array_equal(y.numpy(), ref)
    assert x._version == v0 + len(writes)


def test_setitem_with_tensor_value_broadcasts_and_leaves_value_alone():
    x = gg.zeros(2, 3)
    v = gg.tensor([1.0, 2.0, 3.0])
    x[:] = v
    v2 = v * 1
    x[1, 1:] = v2[:2]
    np.testing.assert_array_equal(x.numpy(), [[1, 2, 3], [1, 1, 2]])
    np.testing.assert_array_equal(v.numpy(), [1, 2, 3])


EMPTY_BATTERY = r'''
import numpy as np, ggmlgrad as gg, sys
graph = sys.argv[1] == "1"
KEEP = {}  # graph mode: empty pending tensors must stay alive (engine limitation)
cases = {
 "bcast_1_to_0": lambda: gg.broadcast_to(gg.ones(1), (0,)),
 "bcast_0": lambda: gg.broadcast_to(gg.zeros(0, 1), (0, 3)),
 "bcast_int_1_to_0": lambda: gg.broadcast_to(gg.tensor([1]), (2, 0)),
 "stack_empty": lambda: gg.stack([gg.zeros(0, 3)] * 3),
 "cat_all_empty": lambda: gg.cat([gg.zeros(0, 3), gg.zeros(0, 3)]),
 "cat_empty_dim1": lambda: gg.cat([gg.zeros(0, 3), gg.zeros(0, 2)], dim=1),
 "slice_empty": lambda: gg.zeros(0, 3)[:, 1:],
 "slice_empty2": lambda: gg.ones(3, 4)[2:2, ::3],
 "getitem_none_empty": lambda: gg.ones(3, 0)[None, 1],
 "index_select_empty_idx": lambda: gg.index_select(gg.ones(3, 4), 0, gg.tensor(np.zeros(0, np.int32))),
 "index_select_empty_rest": lambda: gg.index_select(gg.ones(3, 0), 0, gg.tensor([1, 2])),
 "gather_empty": lambda: gg.gather(gg.ones(3, 4), 1, gg.tensor(np.zeros((3, 0), np.int32))),
 "embedding_empty_idx": lambda: gg.embedding(gg.ones(3, 4), gg.tensor(np.zeros((2, 0), np.int32))),
 "embedding_zero_dim": lambda: gg.embedding(gg.ones(3, 0), gg.tensor([1])),
 "tile_zero": lambda: gg.tile(gg.ones(2), (0,)),
 "tile_of_empty": lambda: gg.tile(gg.zeros(0, 2), (2, 2)),
 "split_empty": lambda: gg.cat(list(KEEP.setdefault("s", gg.split(gg.zeros(0, 4), 2, dim=1))), dim=1),
 "chunk_empty": lambda: gg.cat(list(KEEP.setdefault("c", gg.chunk(gg.zeros(2, 0), 3, dim=0))), dim=0),
 "slice_set_empty": lambda: gg.slice_scatter(gg.ones(3), gg.zeros(0), 0, 1, 1),
 "setitem_empty": lambda: (lambda x: (x.__setitem__(slice(2, 2), 5.0), x)[1])(gg.ones(3)),
 "slice_set_into_empty": lambda: gg.slice_scatter(gg.zeros(0, 2), gg.zeros(0, 1), 1, 0, 1),
 "squeeze_empty": lambda: gg.zeros(0, 1).squeeze(),
 "flatten_empty": lambda: gg.zeros(2, 0, 3).flatten(),
 "transpose_empty": lambda: gg.zeros(2, 0, 3).transpose(0, 2),
}
for name, fn in cases.items():
    print("CALL", name, flush=True)
    with gg.graph_mode(graph):
        x = None
        try:
            y = fn()
        except Exception as e:
            print("  raised", type(e).__name__, e, flush=True); continue
    print("  ok", y.shape == y.numpy().shape, 0 in y.shape, flush=True)
# gradients through empty pieces
with gg.graph_mode(graph):
    w = gg.ones(3, 4, requires_grad=True)
    parts = [w[2:2], w[:, 4:], gg.index_select(w, 0, gg.tensor(np.zeros(0, np.int32))), gg.tile(w, (0, 1)),
             gg.broadcast_to(w[:1, :1], (0, 1)), gg.gather(w, 1, gg.tensor(np.zeros((3, 0), np.int32)))]
    for p in parts:
        p.backward(gg.zeros(*p.shape))
print("grad", w.grad.numpy().sum(), w.grad.shape)
print("SURVIVED")
'''


@pytest.mark.parametrize("graph", ["0", "1"], ids=["eager", "graph"])
def test_empty_results_compute_without_aborting(graph):
    """Valid calls with empty inputs/results (0-byte tensors are where ggml's allocator asserts)."""
    env = dict(os.environ, PYTHONPATH=SRC)
    r = subprocess.run([sys.executable, "-c", EMPTY_BATTERY, graph], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, f"process died (rc {r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    lines = r.stdout.splitlines()
    calls = [ln for ln in lines if ln.startswith("CALL")]
    oks = [ln for ln in lines if ln.startswith("  ok")]
    assert len(calls) == len(oks) >= 20, r.stdout
    # the tensor's shape and its value's shape agree; all but the two writes into non-empty tensors are empty
    assert all(ln.startswith("  ok True ") for ln in oks), r.stdout
    assert sum(ln == "  ok True False" for ln in oks) == 2, r.stdout
    assert "grad 0.0 (3, 4)" in lines and lines[-1] == "SURVIVED", r.stdout


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
def test_a_five_d_index_result_is_the_same_error_whatever_the_index_values(graph):
    """The result's rank is checked before the index values (eager reads them at once, graph mode
    after the compute), so both modes raise the same ValueError; found by the op-program fuzzer."""
    x = gg.zeros(3, 2, 2, 1)
    with gg.graph_mode(graph):
        for idx in ([[0], [1], [2]], [[0], [-9], [2]]):
            with pytest.raises(ValueError, match="at most 4"):
                x[gg.tensor(np.array(idx, np.int32))]
