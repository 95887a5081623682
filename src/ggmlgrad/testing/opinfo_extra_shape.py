"""OpInfo entries for issue 22's shape, scatter and indexing ops: flip, roll, tril/triu (iota), diagonal, diag,
trace, outer, kron, tensordot, mm, bmm, einsum, meshgrid, take, repeat_interleave, the scatter family
(scatter, scatter_add, scatter_reduce, index_add, index_copy, index_fill, masked_fill) and indexing with
several index tensors.

References are NumPy float64 written independently of the ops (loops over the index for the scatters,
with torch's CPU rule for repeated indices: the last write wins); gradients are checked against
finite differences of them. Index arguments are int arrays (int32 tensors) in ``nondiff``.
"""
from __future__ import annotations

import itertools

import numpy as np

import ggmlgrad as gg
from ggmlgrad.ops import op
from .opinfo import OpInfo, Sample, bad, errors, register


_SPECIAL = np.array([[np.nan, np.inf, -1.0], [-np.inf, -0.0, np.nan]])


def _n(rng, *shape):
    return rng.standard_normal(shape)


def _i(*vals):
    return np.array(vals, dtype=np.int32)


# ---------------------------------------------------------------- NumPy references of the scatters
def _scatter_ref(x, dim, index, src, reduce=None, include_self=True):
    """torch.scatter / scatter_reduce by loops over the index, in order (float64)."""
    integral = np.asarray(x).dtype.kind in "iu"
    out = np.array(x, dtype=np.float64, copy=True)
    dim %= out.ndim
    writes: dict = {}
    for pos in itertools.product(*(range(k) for k in index.shape)):
        tgt = list(pos)
        tgt[dim] = int(index[pos])
        v = src[pos] if isinstance(src, np.ndarray) else float(src)
        writes.setdefault(tuple(tgt), []).append(v)
    for tgt, vals in writes.items():
        if reduce is None:
            out[tgt] = vals[-1]
            continue
        pool = ([out[tgt]] if include_self else []) + list(vals)
        out[tgt] = {"sum": np.sum, "prod": np.prod, "mean": np.mean, "amax": np.max, "amin": np.min}[reduce](pool)
        if reduce == "mean" and integral:   # torch floors an integer mean
            out[tgt] = np.floor(out[tgt])
    return out


def _index_ref(kind, x, dim, index, source=None, value=None, alpha=1.0):
    out = np.array(x, dtype=np.float64, copy=True)
    om = np.moveaxis(out, dim, 0)
    sm = np.moveaxis(source, dim, 0) if source is not None else None
    for j, i in enumerate(np.asarray(index).reshape(-1)):
        if kind == "add":
            om[i] += alpha * sm[j]
        elif kind == "copy":
            om[i] = sm[j]
        else:
            om[i] = value
    return out


def _nd(a, nd: int, name: str):
    """``a`` when it has ``nd`` dimensions, else torch's error (the references raise where torch raises)."""
    if np.ndim(a) != nd:
        raise RuntimeError(f"{name}: expected {nd} dimensions, got {np.ndim(a)}")
    return a


def _mm_ref(a, b, nd: int):
    """torch.mm (nd 2) / torch.bmm (nd 3): no broadcasting."""
    _nd(a, nd, "mm"), _nd(b, nd, "mm")
    if a.shape[-1] != b.shape[-2] or a.shape[:-2] != b.shape[:-2]:
        raise RuntimeError(f"mm: shapes {a.shape} and {b.shape} cannot be multiplied")
    return np.matmul(a, b)


def _put_ref(x, i, j, v):
    out = np.array(x, dtype=np.float64, copy=True)
    np.add.at(out, (i.astype(np.int64), j.astype(np.int64)), np.broadcast_to(v, np.broadcast_shapes(i.shape, j.shape)))
    return out


def _diag_ref(v, k):
    return np.diag(v, k).copy()


def _repeat_ref(a, r, dim):
    if dim is None:
        return np.repeat(a.reshape(-1), r)
    return np.repeat(a, r, axis=dim)


def _meshgrid_ref(a, b, indexing):
    x, y = np.meshgrid(a, b, indexing=indexing)
    return x + 2.0 * y


# ---------------------------------------------------------------- samples
def _scatter_samples(r):
    return [Sample((_n(r, 3, 5), 1, _i(0, 2, 2, 4, 1, 1, 1, 0, 4, 3, 2, 1).reshape(3, 4), _n(r, 3, 4)), nondiff=(2,)),
            Sample((_n(r, 4, 3), 0, _i(0, 3, 1, 2, 2, 0).reshape(2, 3), _n(r, 3, 3)), nondiff=(2,)),
            Sample((_n(r, 2, 3, 4), -1, r.integers(0, 4, (2, 2, 3)).astype(np.int32), _n(r, 2, 3, 3)), nondiff=(2,)),
            Sample((np.arange(12).reshape(3, 4), 1, _i(0, 3, 3).reshape(3, 1), np.arange(3).reshape(3, 1) + 50),
                   nondiff=(2,))]


def _reduce_samples(r):
    out = []
    for red, inc in itertools.product(("sum", "prod", "mean", "amax", "amin"), (True, False)):
        out.append(Sample((_n(r, 3, 4), 1, _i(0, 2, 2, 0, 1, 1, 3, 3, 2).reshape(3, 3), _n(r, 3, 3), red, inc),
                          nondiff=(2,)))
    out.append(Sample((np.arange(-4, 8).reshape(3, 4), 0, _i(1, 1, 0, 2).reshape(1, 4),
                       np.array([[3, -5, 7, 2]]), "mean", False), nondiff=(2,)))
    out.append(Sample((np.arange(-4, 8).reshape(3, 4), 0, _i(1, 1, 0, 2).reshape(1, 4),
                       np.array([[3, -5, 7, 2]]), "prod", True), nondiff=(2,)))
    return out


def _einsum_samples(r):
    return [Sample(("ij,jk->ik", _n(r, 2, 3), _n(r, 3, 4))), Sample(("bij,bjk->bik", _n(r, 2, 2, 3), _n(r, 2, 3, 2))),
            Sample(("ii->i", _n(r, 3, 3))), Sample(("ii", _n(r, 3, 3))), Sample(("i,j->ij", _n(r, 2), _n(r, 3))),
            Sample(("...ij->...ji", _n(r, 2, 3, 4))), Sample(("ij,jk", _n(r, 2, 3), _n(r, 3, 2))),
            Sample(("bhqd,bhkd->bhqk", _n(r, 1, 2, 3, 2), _n(r, 1, 2, 2, 2))),
            Sample(("ij,jk,kl->il", _n(r, 2, 3), _n(r, 3, 2), _n(r, 2, 2))), Sample(("iij->j", _n(r, 2, 2, 3))),
            Sample(("ij,kj->ik", _n(r, 1, 3), _n(r, 2, 3))), Sample(("ij,ij->", _n(r, 2, 3), _n(r, 2, 3)))]


def _take_rows(a, i, j):
    return a[i, j]


register(
    OpInfo("flip", ("flip",), lambda a, d: gg.flip(a, d), lambda a, d: np.flip(a, d).copy(),
           lambda r: [Sample((_n(r, 3, 4), (0,))), Sample((_n(r, 2, 3, 4), (0, 2))), Sample((_n(r, 2, 3), (-1,))),
                      Sample((np.arange(12).reshape(3, 4), (1,))), Sample((_n(r, 1, 2, 2, 3), (1, 2, 3)))],
           nonfinite=lambda r: [Sample((_SPECIAL, (0, 1)))]),
    OpInfo("fliplr_flipud", ("flip",), lambda a: a.fliplr() + a.flipud() * 2.0,
           lambda a: np.fliplr(a) + np.flipud(a) * 2.0, lambda r: [Sample((_n(r, 3, 3),))]),
    OpInfo("roll", ("roll", "slice", "concat"), lambda a, s, d: gg.roll(a, s, d),
           lambda a, s, d: np.roll(a, s, d),
           lambda r: [Sample((_n(r, 3, 4), 1, 0)), Sample((_n(r, 2, 3, 4), (1, -2), (0, 2))),
                      Sample((_n(r, 3, 4), 5, None)), Sample((_n(r, 3, 4), -7, 1)),
                      Sample((np.arange(12).reshape(3, 4), (2, 1), (1, 0)))],
           nonfinite=lambda r: [Sample((_SPECIAL, 1, 1)), Sample((_SPECIAL, 3, None))]),
    OpInfo("tril", ("iota", "where_scalar", "compare_scalar", "sub"), lambda a, k: gg.tril(a, k),
           lambda a, k: np.tril(a, k),
           lambda r: [Sample((_n(r, 3, 4), 0)), Sample((_n(r, 3, 4), 1)), Sample((_n(r, 2, 4, 3), -1)),
                      Sample((np.arange(9).reshape(3, 3) - 4, 0))],
           nonfinite=lambda r: [Sample((np.array([[1.0, np.nan], [np.inf, -np.inf]]), 0))]),
    OpInfo("tril_triu_kernel", ("tri",), lambda a, lo, k: gg.tril(a, k) if lo else gg.triu(a, k),
           lambda a, lo, k: np.tril(a, k) if lo else np.triu(a, k),
           lambda r: [Sample((_n(r, 3, 3), True, 0)), Sample((_n(r, 2, 3, 3), True, -1)), Sample((_n(r, 4, 4), False, 0)),
                      Sample((_n(r, 2, 2, 3, 3), False, 1))],
           nonfinite=lambda r: [Sample((np.array([[1.0, np.nan], [np.inf, -np.inf]]), True, -1)),
                                Sample((np.array([[1.0, np.nan], [np.inf, -np.inf]]), False, 0))]),
    OpInfo("triu", ("iota", "where_scalar", "compare_scalar", "sub"), lambda a, k: a.triu(k),
           lambda a, k: np.triu(a, k),
           lambda r: [Sample((_n(r, 3, 4), 0)), Sample((_n(r, 4, 3), 2)), Sample((_n(r, 2, 3, 3), -1))],
           nonfinite=lambda r: [Sample((np.array([[1.0, np.nan], [np.inf, -np.inf]]), 0))]),
    OpInfo("diagonal", ("slice", "reshape", "permute"), lambda a, o, d1, d2: a.diagonal(o, d1, d2),
           lambda a, o, d1, d2: np.diagonal(a, o, d1, d2).copy(),
           lambda r: [Sample((_n(r, 3, 4), 0, 0, 1)), Sample((_n(r, 3, 4), 1, 0, 1)), Sample((_n(r, 3, 4), -2, 0, 1)),
                      Sample((_n(r, 2, 3, 4), 1, 1, 2)), Sample((_n(r, 2, 3, 4), 0, 2, 0))],
           nonfinite=lambda r: [Sample((_SPECIAL, 0, 0, 1)), Sample((_SPECIAL, -1, 1, 0))]),
    OpInfo("diag", ("iota", "concat", "where_scalar"), lambda a, k: gg.diag(a, k), _diag_ref,
           lambda r: [Sample((_n(r, 3), 0)), Sample((_n(r, 3), 2)), Sample((_n(r, 2), -1)), Sample((_n(r, 3, 4), 1)),
                      Sample((np.array([3, -1]), 1))]),
    OpInfo("trace", ("slice", "sum"), lambda a: gg.trace(a), lambda a: np.array(np.trace(_nd(a, 2, "trace"))),
           lambda r: [Sample((_n(r, 3, 3),)), Sample((_n(r, 2, 4),))]),
    OpInfo("outer", ("mul",), lambda a, b: gg.outer(a, b), lambda a, b: np.outer(_nd(a, 1, "outer"), _nd(b, 1, "outer")),
           lambda r: [Sample((_n(r, 3), _n(r, 4)))]),
    OpInfo("kron", ("mul",), lambda a, b: gg.kron(a, b), np.kron,
           lambda r: [Sample((_n(r, 2, 3), _n(r, 2, 2))), Sample((_n(r, 3), _n(r, 2))), Sample((_n(r, 2), _n(r, 2, 2))),
                      Sample((_n(r, 1, 2, 1, 2), _n(r, 2, 1, 2))), Sample((_n(r), _n(r, 2))),
                      Sample((np.arange(4).reshape(2, 2), np.arange(3) - 1))]),
    OpInfo("tensordot", ("matmul", "permute"), lambda a, b, d: gg.tensordot(a, b, d),
           lambda a, b, d: np.tensordot(a, b, d),
           lambda r: [Sample((_n(r, 2, 3, 4), _n(r, 3, 4, 2), 2)), Sample((_n(r, 2, 3), _n(r, 3, 2), 1)),
                      Sample((_n(r, 2, 3, 4), _n(r, 4, 2, 3), ([1, 2], [2, 0]))), Sample((_n(r, 2), _n(r, 3), 0))]),
    OpInfo("mm", ("matmul",), lambda a, b: gg.mm(a, b), lambda a, b: _mm_ref(a, b, 2), lambda r: [Sample((_n(r, 2, 3), _n(r, 3, 4)))]),
    OpInfo("bmm", ("matmul",), lambda a, b: a.bmm(b), lambda a, b: _mm_ref(a, b, 3), lambda r: [Sample((_n(r, 2, 2, 3), _n(r, 2, 3, 4)))]),
    OpInfo("einsum", ("matmul", "sum", "permute"), lambda eq, *ops: gg.einsum(eq, *ops),
           lambda eq, *ops: np.einsum(eq, *ops), _einsum_samples),
    OpInfo("meshgrid", ("broadcast_to",), lambda a, b, ix: _combine(gg.meshgrid(a, b, indexing=ix)), _meshgrid_ref,
           lambda r: [Sample((_n(r, 2), _n(r, 3), "ij")), Sample((_n(r, 2), _n(r, 3), "xy"))]),
    OpInfo("take", ("index_select",), lambda a, i: gg.take(a, i), lambda a, i: np.take(a, i.astype(np.int64)),
           lambda r: [Sample((_n(r, 3, 4), _i(0, 11, -1, 5, 5)), nondiff=(1,)),
                      Sample((_n(r, 2, 3), _i(1, -6, 2, 2).reshape(2, 2)), nondiff=(1,))]),
    OpInfo("take_along_dim", ("gather", "broadcast_to"), lambda a, i, d: gg.take_along_dim(a, i, d),
           lambda a, i, d: np.take_along_axis(a, i.astype(np.int64), d) if d is not None else
           np.take(a.reshape(-1), i.astype(np.int64).reshape(-1)),
           lambda r: [Sample((_n(r, 3, 4), _i(0, 3, 1).reshape(3, 1), 1), nondiff=(1,)),
                      Sample((_n(r, 3, 4), _i(2, 0, 1, 1).reshape(1, 4), 0), nondiff=(1,)),
                      Sample((_n(r, 2, 3), _i(5, 0, 5), None), nondiff=(1,))]),
    OpInfo("index_put_accumulate", ("index_select_backward", "add"),
           lambda x, i, j, v: gg.index_put(x, (i, j), v, accumulate=True),
           lambda x, i, j, v: _put_ref(x, i, j, v),
           lambda r: [Sample((_n(r, 3, 4), _i(0, 0, 2), _i(1, 1, 3), _n(r, 3)), nondiff=(1, 2)),
                      Sample((_n(r, 3, 4), _i(2, 2).reshape(2, 1), _i(0, 1, -1), _n(r, 1, 3)), nondiff=(1, 2))]),
    OpInfo("repeat_interleave", ("broadcast_to", "index_select", "iota", "floor"),
           lambda a, r, d: a.repeat_interleave(r, dim=d), _repeat_ref,
           lambda r: [Sample((_n(r, 2, 3), 2, 0)), Sample((_n(r, 2, 3), 3, 1)), Sample((_n(r, 2, 3), 2, None)),
                      Sample((_n(r, 1, 2, 1, 2), 3, 2))]),
    OpInfo("repeat_interleave_tensor", ("index_select",),
           lambda a, r: gg.repeat_interleave(a, r, dim=0), lambda a, r: np.repeat(a, r.astype(np.int64), axis=0),
           lambda r: [Sample((_n(r, 3, 2), _i(2, 0, 3)), nondiff=(1,))],
           capturable=False),   # the counts are read on the host (the result's shape depends on them)
    OpInfo("scatter", ("one_hot", "amax", "gather_backward", "where"),
           lambda x, d, i, s: x.scatter(d, i, s), _scatter_ref, _scatter_samples),
    OpInfo("scatter_value", ("gather_backward", "where_scalar"), lambda x, d, i: gg.scatter(x, d, i, value=-2.5),
           lambda x, d, i: _scatter_ref(x, d, i, -2.5),
           lambda r: [Sample((_n(r, 3, 4), 1, _i(0, 3, 3, 1, 2, 2).reshape(3, 2)), nondiff=(2,))]),
    OpInfo("scatter_add", ("gather_backward", "add"), lambda x, d, i, s: gg.scatter_add(x, d, i, s),
           lambda x, d, i, s: _scatter_ref(x, d, i, s, "sum"), _scatter_samples),
    OpInfo("scatter_reduce", ("amax", "amin", "mul", "one_hot", "div"),
           lambda x, d, i, s, red, inc: x.scatter_reduce(d, i, s, red, include_self=inc),
           lambda x, d, i, s, red, inc: _scatter_ref(x, d, i, s, red, inc), _reduce_samples),
    OpInfo("index_add", ("index_select_backward",), lambda x, d, i, s: x.index_add(d, i, s, alpha=2.0),
           lambda x, d, i, s: _index_ref("add", x, d, i, s, alpha=2.0),
           lambda r: [Sample((_n(r, 4, 3), 0, _i(3, 0, 3), _n(r, 3, 3)), nondiff=(2,)),
                      Sample((_n(r, 2, 5), 1, _i(4, 1), _n(r, 2, 2)), nondiff=(2,))]),
    OpInfo("index_copy", ("one_hot",), lambda x, d, i, s: gg.index_copy(x, d, i, s),
           lambda x, d, i, s: _index_ref("copy", x, d, i, s),
           lambda r: [Sample((_n(r, 4, 3), 0, _i(3, 0, 1), _n(r, 3, 3)), nondiff=(2,)),
                      Sample((_n(r, 2, 5), 1, _i(4, 1, 4), _n(r, 2, 3)), nondiff=(2,))]),
    OpInfo("index_fill", ("index_select_backward", "where_scalar"), lambda x, d, i: x.index_fill(d, i, 7.5),
           lambda x, d, i: _index_ref("fill", x, d, i, value=7.5),
           lambda r: [Sample((_n(r, 4, 3), 0, _i(3, 0, 3)), nondiff=(2,)), Sample((_n(r, 2, 5), -1, _i(4)), nondiff=(2,))]),
    OpInfo("masked_fill_broadcast", ("where_scalar",), lambda x, m: gg.masked_fill(x, m > 0, 3.0),
           lambda x, m: np.where(m > 0, 3.0, x),
           lambda r: [Sample((_n(r, 2, 3), _n(r, 3)), nondiff=(1,)), Sample((_n(r, 2, 3), _n(r, 2, 1)), nondiff=(1,)),
                      Sample((_n(r, 2, 3), _n(r, 1, 2, 3)), nondiff=(1,))],
           fuzz=False),   # the reference models a float input: on a bool one torch fills with bool(3.0)
    OpInfo("getitem_many", ("index_select", "index_select_backward", "scale", "cast"), lambda a, *k: a[_key(k)],
           lambda a, *k: _np_key(a, k),
           lambda r: [Sample((_n(r, 3, 4), _i(0, 2, 2), _i(1, -1, 3)), nondiff=(1, 2)),
                      Sample((_n(r, 2, 3, 4), slice(None), _i(0, 2), _i(3, 1)), nondiff=(2, 3)),
                      Sample((_n(r, 2, 3, 4), _i(1, 0), slice(None), _i(-1, 0)), nondiff=(1, 3)),
                      Sample((_n(r, 2, 3, 4), 1, slice(None), _i(2, 2, 3)), nondiff=(3,)),
                      Sample((_n(r, 3, 4), _i(0, 2).reshape(2, 1), _i(1, 2, 3)), nondiff=(1, 2)),
                      Sample((_n(r, 2, 3, 2, 2), _i(1, 0), None, _i(2, 2)), nondiff=(1, 3)),
                      Sample((_n(r, 2, 3, 4), slice(None), None, _i(0, 2), _i(-1, 1)), nondiff=(3, 4))]),
)


def _combine(grids):
    return grids[0] + grids[1] * 2.0


def _key(k):
    return tuple(k)


def _np_key(a, k):
    """torch's rule in NumPy: ints first (as basic indexing), then the index arrays."""
    k = tuple(np.asarray(v, np.int64) if isinstance(v, np.ndarray) else v for v in k)
    if any(isinstance(v, int) for v in k):
        first = tuple(slice(None) if isinstance(v, np.ndarray) else v for v in k)
        return a[first][tuple(v for v in k if not isinstance(v, int))].copy()
    return a[k].copy()


# ---------------------------------------------------------------- error inputs (every mode, before ggml)
_F = np.ones((2, 3))
RT, IE, T = RuntimeError, IndexError, TypeError

errors("flip", bad(IE, "flip", _F, (2,)), bad(RT, "multiple", _F, (0, 0)))
errors("roll", bad(RT, "align", _F, (1, 2), (0,)))
errors("tril", bad(RT, "tril", np.ones(3), 0))
errors("tril_triu_kernel", bad(ValueError, "square", np.ones((2, 3)), fn=lambda a: op.tri(a, lower=True, diagonal=0)),
       bad(ValueError, "diagonals", np.ones((3, 3)), fn=lambda a: op.tri(a, lower=True, diagonal=1)))
errors("diagonal", bad(RT, "identical", _F, 0, 1, 1), bad(IE, "diagonal", _F, 0, 0, 2))
errors("mm", bad(RT, "mm", _F, np.ones((2, 3))), bad(RT, "mm", np.ones(3), np.ones((3, 2))))
errors("bmm", bad(RT, "bmm", np.ones((2, 2, 3)), np.ones((3, 3, 2))))
errors("einsum", bad(RT, "einsum", "ij,jk->ik", _F, np.ones((2, 2))), bad(RT, "einsum", "i->i", _F),
       bad(RT, "einsum", "ij->k", _F), bad(RT, "einsum", "i#->i", _F))
errors("tensordot", bad(RT, "tensordot", _F, np.ones((2, 3)), 1))
errors("take_along_dim", bad(IE, "out of", _F, _i(0, 3).reshape(1, 2), 1))
errors("index_put_accumulate", bad(IE, "out of", _F, _i(2), _i(0), np.ones(1)))
errors("take", bad(IE, "out of", _F, _i(0, 6)), bad(IE, "out of", _F, _i(-7)))
errors("scatter", bad(IE, "out of", _F, 1, _i(0, 3).reshape(1, 2), np.ones((1, 2))),
       bad(IE, "out of", _F, 1, _i(-1, 0).reshape(1, 2), np.ones((1, 2))),
       bad(RT, "smaller", _F, 1, _i(0, 1, 0, 1, 0, 1).reshape(3, 2), np.ones((3, 2))),
       bad(RT, "dtype", _F, 1, np.ones((2, 2)), np.ones((2, 2))))
errors("scatter_add", bad(IE, "out of", _F, 0, _i(0, 2, 1).reshape(1, 3), np.ones((1, 3))))
errors("scatter_reduce", bad(RT, "reduce", _F, 1, _i(0).reshape(1, 1), np.ones((1, 1)), "maximum", True),
       bad(IE, "out of", _F, 1, _i(5).reshape(1, 1), np.ones((1, 1)), "amax", True))
errors("index_add", bad(IE, "out of", _F, 0, _i(2), np.ones((1, 3))), bad(RT, "index_add", _F, 0, _i(1), np.ones((2, 3))))
errors("index_copy", bad(IE, "out of", _F, 1, _i(-1), np.ones((2, 1))))
errors("index_fill", bad(IE, "out of", _F, 1, _i(3)))
errors("getitem_many", bad(IE, "broadcast", _F, _i(0, 1), _i(0, 1, 2)), bad(IE, "out of", _F, _i(0, 2), _i(0, 1)),
       bad(IE, "out of", _F, _i(0, 1), _i(0, -4)))
errors("masked_fill_broadcast", bad(RT, "mask", _F, np.ones(4)))
