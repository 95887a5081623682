"""OpInfo entries for shape and indexing ops: squeeze/unsqueeze/flatten, broadcast_to, transpose,
cat/stack/split/chunk, basic indexing (slice), index_select, gather, embedding, and their backward ops.

Index arguments are int arrays (int32 tensors on the ggmlgrad side) listed in ``nondiff``;
several samples repeat indices so gradients must accumulate.
"""
from __future__ import annotations

import numpy as np

import ggmlgrad as gg
from ggmlgrad.ops import op
from .opinfo import OpInfo, Sample, bad, errors, register


def _n(rng, *shape):
    return rng.standard_normal(shape)


# ---------------------------------------------------------------- NumPy references
def _np_scatter_rows(g, idx, shape, axis):
    """Zeros of ``shape``; g's slices along ``axis`` added at ``idx`` (repeats accumulate)."""
    out = np.zeros(shape)
    gm = np.moveaxis(g, axis, 0)
    om = np.moveaxis(out, axis, 0)      # a view: writes land in `out`
    np.add.at(om, np.asarray(idx).reshape(-1), gm)
    return out


def _np_gather_backward(g, idx, shape, axis):
    out = np.zeros(shape)
    grids = list(np.indices(idx.shape))
    grids[axis] = idx
    np.add.at(out, tuple(grids), g)
    return out


def _np_slice_backward(g, shape, start, stop, step):
    out = np.zeros(shape)
    key = tuple(slice(b, e, s) for b, e, s in zip(start, stop, step))
    out[key] = g.reshape(out[key].shape)
    return out


def _np_slice_scatter(x, src, dim, start, end, step):
    out = x.copy()
    key = tuple(slice(start, end, step) if i == dim % x.ndim else slice(None) for i in range(x.ndim))
    out[key] = src
    return out


def _np_slice_fill(x, start, stop, step, c):
    out = x.copy()
    out[tuple(slice(b, e, s) for b, e, s in zip(start, stop, step))] = c
    return out


def _split_weighted(pieces):
    return [p * float(i + 1) for i, p in enumerate(pieces)]


def _np_split(a, s, d):
    n = a.shape[d]
    if isinstance(s, int):
        cuts = list(range(s, n, s))
    else:
        cuts = list(np.cumsum(s)[:-1])
    return np.split(a, cuts, axis=d)


def _np_chunk(a, c, d):
    n = a.shape[d]
    size = max(-(-n // c), 1)
    return _np_split(a, size, d)


# ---------------------------------------------------------------- samples
def _unfold_ref(a, d, n, k):
    """NumPy's windows of ``a`` along ``d`` (size ``n``, step ``k``), the window axis last."""
    d %= a.ndim
    w = np.lib.stride_tricks.sliding_window_view(a, n, axis=d)
    return np.take(w, range(0, a.shape[d] - n + 1, k), axis=d)


def _squeeze_samples(r):
    return [Sample((_n(r, 1, 3, 1), None)), Sample((_n(r, 1, 3, 1), 0)), Sample((_n(r, 1, 3, 1), -1)),
            Sample((_n(r, 1, 3, 1), (0, 2))), Sample((_n(r, 1, 3, 1), 1)), Sample((_n(r), None)),
            Sample((_n(r, 2, 1, 1, 3), (-2, 1)))]


def _getitem_cases(r):
    x3 = _n(r, 3, 4, 5)
    x4 = _n(r, 2, 3, 4, 5)
    keys = [1, -1, (slice(None), 2), (Ellipsis, -2), (slice(1, None), slice(None, None, 2)),
            (slice(None), slice(None), slice(1, None, 2)), (slice(None, None, 2), slice(None), slice(0, 5, 3)),
            (None, 0, slice(1, 3)), (Ellipsis, None), (slice(None), None, 1, Ellipsis),
            (2, 3, 4), (slice(0, 0),), (slice(5, 10),), (slice(None, None, 4), 0, slice(None, None, 4)),
            (slice(-2, None), slice(-1, None))]
    out = [Sample((x3, k)) for k in keys]
    out += [Sample((x4, (1, slice(None, None, 2), Ellipsis, slice(None, None, 2)))),
            Sample((x4, (slice(None), slice(1, 3), slice(None, None, 3), slice(1, 5, 2)))),
            Sample((_n(r), Ellipsis)), Sample((_n(r), None)), Sample((_n(r, 1), 0)),
            Sample((_n(r, 7), slice(1, None, 3)))]
    return out


def _getitem_list_cases(r):
    x = _n(r, 4, 3)
    return [Sample((x, [2, 0, 2, -1])), Sample((x, (slice(None), [1, 1, 0]))),
            Sample((_n(r, 2, 4, 3), (Ellipsis, [0, -1]))), Sample((x, [[0, 1], [3, 3]])),
            Sample((_n(r, 2, 5, 3), (slice(None, None, 2), [4, 0, 4], slice(1, None))))]


def _idx(*vals):
    return np.array(vals, dtype=np.int32)


def _index_select_samples(r):
    return [Sample((_n(r, 5, 3), 0, _idx(4, 0, 4, 2)), nondiff=(2,)),
            Sample((_n(r, 5, 3), 1, _idx(2, 2, 1)), nondiff=(2,)),
            Sample((_n(r, 2, 3, 4), -1, _idx(3, 0, 3, 3, 1)), nondiff=(2,)),
            Sample((_n(r, 2, 3, 4, 2), 2, _idx(1)), nondiff=(2,)),
            Sample((_n(r, 6), 0, _idx(5, 5, 0)), nondiff=(2,)),
            Sample((_n(r, 1, 3), 0, _idx(0, 0)), nondiff=(2,))]


def _gather_samples(r):
    return [Sample((_n(r, 3, 4), 1, r.integers(0, 4, (3, 6)).astype(np.int32)), nondiff=(2,)),
            Sample((_n(r, 3, 4), 0, r.integers(0, 3, (5, 4)).astype(np.int32)), nondiff=(2,)),
            Sample((_n(r, 2, 3, 4), -1, r.integers(0, 4, (2, 3, 2)).astype(np.int32)), nondiff=(2,)),
            Sample((_n(r, 2, 3, 4), 1, r.integers(0, 3, (2, 5, 4)).astype(np.int32)), nondiff=(2,)),
            Sample((_n(r, 5), 0, _idx(4, 4, 4, 0)), nondiff=(2,)),
            Sample((_n(r, 2, 2, 3, 2), 2, r.integers(0, 3, (2, 2, 4, 2)).astype(np.int32)), nondiff=(2,))]


def _gather_smaller_samples(r):
    # PyTorch allows the index to be smaller than the input outside `dim`.
    return [Sample((_n(r, 4, 5), 1, r.integers(0, 5, (2, 3)).astype(np.int32)), nondiff=(2,)),
            Sample((_n(r, 3, 4, 2), 0, r.integers(0, 3, (2, 2, 1)).astype(np.int32)), nondiff=(2,))]


def _np_gather_smaller(x, d, idx):
    key = tuple(slice(None) if i == d else slice(0, s) for i, s in enumerate(idx.shape))
    return np.take_along_axis(x[key], idx.astype(np.int64), axis=d)


def _embedding_samples(r):
    return [Sample((_n(r, 5, 3), _idx(4, 0, 4)), nondiff=(1,)),
            Sample((_n(r, 6, 4), np.array([[1, 5, 1], [0, 1, 1]], dtype=np.int32)), nondiff=(1,)),
            Sample((_n(r, 4, 2), r.integers(0, 4, (2, 2, 3)).astype(np.int32)), nondiff=(1,)),
            Sample((_n(r, 3, 2), np.array(2, dtype=np.int32)), nondiff=(1,)),
            Sample((_n(r, 1, 5), _idx(0, 0)), nondiff=(1,))]


def _cat_samples(r):
    return [Sample((_n(r, 2, 3), _n(r, 4, 3), 0)), Sample((_n(r, 2, 3), _n(r, 2, 1), _n(r, 2, 2), 1)),
            Sample((_n(r, 2, 3, 4), _n(r, 2, 3, 1), -1)), Sample((_n(r, 1), _n(r, 1), _n(r, 3), 0)),
            Sample((_n(r, 2, 1, 3, 2), _n(r, 2, 2, 3, 2), 1)), Sample((_n(r, 2, 3), _n(r, 2, 3), -2)),
            Sample((_n(r, 3, 2), 1)), Sample((_n(r, 0, 2), _n(r, 3, 2), 0)), Sample(_many(r, 67, (1, 2)) + (0,))]


def _many(r, n, shape):
    return tuple(_n(r, *shape) for _ in range(n))


def _stack_samples(r):
    return [Sample((_n(r, 3), _n(r, 3), 0)), Sample((_n(r, 2, 3), _n(r, 2, 3), _n(r, 2, 3), -1)),
            Sample((_n(r, 2, 3), _n(r, 2, 3), 1)), Sample((_n(r), _n(r), 0)),
            Sample((_n(r, 1, 2, 2), _n(r, 1, 2, 2), 3)), Sample((_n(r, 2), 0)),
            Sample(_many(r, 70, (2,)) + (1,))]


register(
    OpInfo("squeeze", ("reshape",), lambda a, d: a.squeeze(d),
           lambda a, d: np.squeeze(a, axis=tuple(i for i in ((d,) if isinstance(d, int) else d or range(a.ndim))
                                                  if a.shape[i] == 1)) if d is not None else np.squeeze(a),
           _squeeze_samples),
    OpInfo("unsqueeze", ("reshape",), lambda a, d: gg.unsqueeze(a, d), lambda a, d: np.expand_dims(a, d),
           lambda r: [Sample((_n(r, 3, 4), 0)), Sample((_n(r, 3, 4), -1)), Sample((_n(r, 3, 4), 1)),
                      Sample((_n(r), 0)), Sample((_n(r, 2, 1, 3), -3))]),
    OpInfo("flatten", ("reshape",), lambda a, s, e: a.flatten(s, e),
           lambda a, s, e: a.reshape(-1) if a.ndim == 0 else
           a.reshape(a.shape[:s % a.ndim] + (-1,) + a.shape[e % a.ndim + 1:]),
           lambda r: [Sample((_n(r, 2, 3, 4), 1, -1)), Sample((_n(r, 2, 3, 4), 0, -1)), Sample((_n(r), 0, -1)),
                      Sample((_n(r, 2, 3, 4, 5), 1, 2)), Sample((_n(r, 2, 1, 4), -2, -1)),
                      Sample((_n(r, 3, 4), 1, 1))]),
    OpInfo("broadcast_to", ("broadcast_to", "sum_to_shape"), lambda a, s: gg.broadcast_to(a, s),
           lambda a, s: np.broadcast_to(a, tuple(d if d != -1 else a.shape[i - (len(s) - a.ndim)]
                                                 for i, d in enumerate(s))).copy(),
           lambda r: [Sample((_n(r, 3, 1), (2, 3, 4))), Sample((_n(r, 1), (5,))), Sample((_n(r), (2, 3))),
                      Sample((_n(r, 2, 1, 3), (-1, 4, 3))), Sample((_n(r, 2, 3), (2, 3))),
                      Sample((_n(r, 1, 1), (2, 1, 3, 4)))]),
    OpInfo("expand", ("broadcast_to",), lambda a: a.expand(2, -1, 4), lambda a: np.broadcast_to(a, (2, 3, 4)).copy(),
           lambda r: [Sample((_n(r, 3, 1),)), Sample((_n(r, 1, 3, 4),))]),
    OpInfo("expand_as", ("broadcast_to",), lambda a, b: a.expand_as(b), lambda a, b: np.broadcast_to(a, b.shape).copy(),
           lambda r: [Sample((_n(r, 3, 1), _n(r, 2, 3, 4)), nondiff=(1,))]),
    OpInfo("transpose", ("permute",), lambda a, d0, d1: a.transpose(d0, d1), lambda a, d0, d1: np.swapaxes(a, d0, d1),
           lambda r: [Sample((_n(r, 2, 3, 4), 0, 2)), Sample((_n(r, 2, 3, 4), -1, -2)), Sample((_n(r, 3, 4), 1, 1)),
                      Sample((_n(r, 2, 3, 4, 5), 1, 3))]),
    OpInfo("movedim", ("permute",), lambda a, s, d: a.movedim(s, d), lambda a, s, d: np.moveaxis(a, s, d),
           lambda r: [Sample((_n(r, 2, 3, 4), 0, -1)), Sample((_n(r, 2, 3, 4), 2, 0))]),
    OpInfo("cat", ("concat", "slice"), lambda *a: gg.cat(list(a[:-1]), dim=a[-1]),
           lambda *a: np.concatenate(a[:-1], axis=a[-1]), _cat_samples),
    OpInfo("stack", ("concat",), lambda *a: gg.stack(list(a[:-1]), dim=a[-1]),
           lambda *a: np.stack(a[:-1], axis=a[-1]), _stack_samples),
    OpInfo("split", ("slice", "slice_backward"),
           lambda a, s, d: gg.cat(_split_weighted(gg.split(a, s, d)), dim=d),
           lambda a, s, d: np.concatenate(_split_weighted(_np_split(a, s, d)), axis=d),
           lambda r: [Sample((_n(r, 5, 2), 2, 0)), Sample((_n(r, 2, 5), [1, 4], 1)), Sample((_n(r, 3, 4), 4, -1)),
                      Sample((_n(r, 2, 6, 2), [2, 0, 3, 1], 1)), Sample((_n(r, 3, 5), 1, 1))]),
    OpInfo("chunk", ("slice",),
           lambda a, c, d: gg.cat(_split_weighted(a.chunk(c, d)), dim=d),
           lambda a, c, d: np.concatenate(_split_weighted(_np_chunk(a, c, d)), axis=d),
           lambda r: [Sample((_n(r, 5), 3, 0)), Sample((_n(r, 2, 6), 3, -1)), Sample((_n(r, 6, 2), 4, 0)),
                      Sample((_n(r, 4, 2), 1, 0)), Sample((_n(r, 2, 3), 5, 1))]),
    OpInfo("narrow", ("slice",), lambda a, d, s, n: a.narrow(d, s, n), lambda a, d, s, n: np.take(a, range(s, s + n), d),
           lambda r: [Sample((_n(r, 5, 3), 0, 1, 3)), Sample((_n(r, 2, 5), -1, 4, 1))]),
    OpInfo("unfold", ("slice", "concat"), lambda a, d, n, k: a.unfold(d, n, k), _unfold_ref,
           lambda r: [Sample((_n(r, 3, 7), 1, 3, 2)), Sample((_n(r, 6, 2), 0, 2, 2)), Sample((_n(r, 2, 5, 3), -2, 5, 1)),
                      Sample((_n(r, 4), 0, 1, 3))]),
    OpInfo("getitem", ("slice", "slice_backward"), lambda a, k: a[k], lambda a, k: np.array(a[k]), _getitem_cases),
    OpInfo("getitem_list", ("index_select", "index_select_backward"), lambda a, k: a[k],
           lambda a, k: np.array(a[k]), _getitem_list_cases,
           capturable=False),   # a list index is host data uploaded by the call: a capture refuses it
    OpInfo("getitem_tensor", ("index_select", "slice"), lambda a, i: a[1:, i], lambda a, i: a[1:, i],
           lambda r: [Sample((_n(r, 3, 4), _idx(3, -1, 0, 3)), nondiff=(1,)),
                      Sample((_n(r, 3, 4, 2), np.array([[0, 1], [2, 2]], dtype=np.int32)), nondiff=(1,))]),
    OpInfo("slice_backward", ("slice_backward", "slice"),
           lambda g, shape, start, stop, step: op.slice_backward(g, shape=shape, start=start, stop=stop, step=step),
           _np_slice_backward,
           lambda r: [Sample((_n(r, 2, 2), (4, 5), (1, 0), (4, 5), (2, 3))), Sample((_n(r, 3), (7,), (1,), (6,), (2,))),
                      Sample((_n(r, 1, 2, 2), (2, 3, 6), (1, 0, 1), (2, 3, 6), (1, 2, 4))),
                      Sample((_n(r, 2), (3, 4), (1, 1), (2, 4), (1, 2))), Sample((_n(r), (2, 3), (1, 2), (2, 3), (1, 1)))]),
    OpInfo("index_select", ("index_select", "index_select_backward"), lambda a, d, i: gg.index_select(a, d, i),
           lambda a, d, i: np.take(a, i.astype(np.int64), axis=d), _index_select_samples),
    OpInfo("index_select_backward", ("index_select_backward", "index_select"),
           lambda g, i, shape, d: op.index_select_backward(g, i, shape=shape, axis=d),
           _np_scatter_rows,
           lambda r: [Sample((_n(r, 4, 3), _idx(1, 0, 1, 1), (2, 3), 0), nondiff=(1,)),
                      Sample((_n(r, 2, 3, 2), _idx(3, 3, 0), (2, 4, 2), 1), nondiff=(1,))]),
    OpInfo("gather", ("gather", "gather_backward"), lambda a, d, i: gg.gather(a, d, i),
           lambda a, d, i: np.take_along_axis(a, i.astype(np.int64), axis=d), _gather_samples),
    OpInfo("gather_smaller_index", ("gather", "slice"), lambda a, d, i: a.gather(d, i), _np_gather_smaller,
           _gather_smaller_samples),
    OpInfo("take_along_axis", ("gather",), lambda a, i, d: gg.take_along_axis(a, i, d),
           lambda a, i, d: np.take_along_axis(a, i.astype(np.int64), axis=d),
           lambda r: [Sample((_n(r, 3, 4), r.integers(0, 4, (3, 2)).astype(np.int32), 1), nondiff=(1,))]),
    OpInfo("gather_backward", ("gather_backward", "gather"),
           lambda g, i, shape, d: op.gather_backward(g, i, shape=shape, axis=d), _np_gather_backward,
           lambda r: [Sample((_n(r, 3, 5), r.integers(0, 2, (3, 5)).astype(np.int32), (3, 2), 1), nondiff=(1,)),
                      Sample((_n(r, 4, 2, 3), r.integers(0, 3, (4, 2, 3)).astype(np.int32), (3, 2, 3), 0),
                             nondiff=(1,))]),
    OpInfo("embedding", ("embedding", "index_select_backward"), lambda w, i: gg.embedding(w, i),
           lambda w, i: w[i.astype(np.int64)], _embedding_samples),
    OpInfo("slice_scatter", ("slice_set", "slice"), gg.slice_scatter, _np_slice_scatter,
           lambda r: [Sample((_n(r, 4, 5), _n(r, 4, 2), 1, 1, 5, 2)), Sample((_n(r, 4, 5), _n(r, 2, 5), 0, 0, None, 3)),
                      Sample((_n(r, 2, 3, 4), _n(r, 2, 3, 1), -1, 3, 4, 1)), Sample((_n(r, 6), _n(r, 2), 0, 1, None, 4)),
                      Sample((_n(r, 3, 4), _n(r, 0, 4), 0, 2, 2, 1))]),
    OpInfo("slice_set_fill", ("slice_set",),
           lambda x, b, e, s: op.slice_set(x, start=b, stop=e, step=s, fill=3.5),
           lambda x, b, e, s: _np_slice_fill(x, b, e, s, 3.5),
           lambda r: [Sample((_n(r, 3, 4, 5), (0, 1, 1), (3, 4, 5), (2, 2, 3))), Sample((_n(r, 4), (1,), (3,), (1,))),
                      Sample((_n(r), (), (), ()))]),
    OpInfo("tile", ("tile", "tile_backward"), lambda a, r: gg.tile(a, r), np.tile,
           lambda r: [Sample((_n(r, 2, 3), (2, 1))), Sample((_n(r, 3), (2, 2))), Sample((_n(r), (3,))),
                      Sample((_n(r, 1, 2), (1, 3, 2))), Sample((_n(r, 2, 1, 2), (2, 2, 2))), Sample((_n(r, 2), (1,))),
                      Sample((_n(r, 2, 2), (0, 1)))]),
    OpInfo("repeat", ("tile",), lambda a: a.repeat(2, 1, 3), lambda a: np.tile(a, (2, 1, 3)),
           lambda r: [Sample((_n(r, 2, 2),))]),
    OpInfo("tile_backward", ("tile_backward", "tile"),
           lambda g, shape, reps: op.tile_backward(g, shape=shape, reps=reps),
           lambda g, shape, reps: g.reshape(sum(([k, s] for k, s in zip(reps, (1,) * (len(reps) - len(shape)) + shape)), []))
           .sum(axis=tuple(range(0, 2 * len(reps), 2))).reshape(shape),
           lambda r: [Sample((_n(r, 4, 3), (2, 3), (2, 1))), Sample((_n(r, 2, 6), (3,), (2, 2)))]),
    OpInfo("unflatten", ("reshape",), lambda a: a.unflatten(1, (3, -1)), lambda a: a.reshape(2, 3, 4),
           lambda r: [Sample((_n(r, 2, 12),))]),
)


# ---------------------------------------------------------------- error inputs (raised before ggml, in every mode)
def _ones(*s, dtype=np.float64):
    return np.ones(s, dtype)


_F23, V, T, VI = _ones(2, 3), ValueError, TypeError, (ValueError, IndexError)

errors("unsqueeze", bad(V, "unsqueeze", _ones(2, 2, 2, 2), 0))
errors("broadcast_to", bad(V, "broadcast_to", _ones(3), (2, 4)))
errors("expand", bad(V, "broadcast", _ones(3, 1), fn=lambda a: a.expand(2, 4)))
errors("transpose", bad(VI, "transpose", _F23, 0, 2))
errors("cat", bad(V, "concat", _F23, _ones(3, 4), 1), bad(V, "non-empty", fn=lambda: gg.concat([], dim=0)))
errors("stack", bad(V, "stack", _ones(2), _ones(3), 0), bad(V, "non-empty", fn=lambda: gg.stack([])))
errors("split", bad(V, "split", _ones(5), fn=lambda a: gg.split(a, [2, 2])))
errors("chunk", bad(V, "chunk", _F23, fn=lambda a: a.chunk(0)))
errors("narrow", bad(VI, "narrow", _F23, 1, 2, 5))
errors("getitem", bad(IndexError, "index", _F23, 5), bad(IndexError, "index", _F23, -3),
       bad(IndexError, "indices", _F23, (0, 0, 0)), bad(V, "step", _F23, slice(None, None, 0)),
       bad(V, "step", _F23, slice(None, None, -1)), bad(T, "index", _F23, 0.5))
errors("getitem_tensor", bad(T, "int32", _ones(3, 4), _ones(1)))
errors("gather", bad(T, "gather", _F23, 1, _ones(2, 2)), bad(V, "gather", _F23, 1, np.array([0, 1], np.int32)))
errors("index_select", bad(T, "index_select", _F23, 0, _ones(2)))
# Index VALUES live on the device: eager mode reads and refuses them, graph mode and a capture check them
# after the compute (the graph clamps meanwhile, so ggml never aborts): an IndexError in every mode.
errors("gather", bad(IndexError, "out of", _F23, 1, np.array([[0, 3], [1, 0]], np.int32)),
       bad(IndexError, "out of", _F23, 1, np.array([[0, -1], [1, 0]], np.int32)))
errors("index_select", bad(IndexError, "out of", _F23, 0, np.array([0, 2], np.int32)))
errors("embedding", bad(IndexError, "out of", _ones(4, 3), np.array([0, 9], np.int32)))
