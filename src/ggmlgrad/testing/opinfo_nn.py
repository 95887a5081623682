"""OpInfo entries for the nn ops (ops/nn_ops.py): layer norm, masked softmax (ops/activation.py), attention, fused losses, one-hot."""
from __future__ import annotations

import numpy as np

from ..ops import op
from .opinfo import OpInfo, Sample, bad, errors, register


def _softmax(z):
    z = z - np.max(z, axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def _causal(shape):
    return np.triu(np.full(shape[-2:], -np.inf), 1)


def ref_layer_norm(x, eps=1e-5):
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps)


def ref_masked_softmax(x, mask=None, scale=1.0, causal=False):
    z = x * scale
    if mask is not None:
        z = z + mask
    if causal:
        z = z + _causal(z.shape)
    return _softmax(z)


def ref_attention(q, k, v, mask=None, scale=1.0, causal=False, flash=None):
    return ref_masked_softmax(q @ np.swapaxes(k, -1, -2), mask, scale, causal) @ v


def ref_sce(x, q):
    z = x - x.max(-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    return -(q * logp).sum(-1)


def ref_bce(x, y, pw=None):
    logsig_neg = -np.logaddexp(0, x)        # log sigmoid(-x)
    logsig = -np.logaddexp(0, -x)           # log sigmoid(x)
    pos = 1.0 if pw is None else pw
    return -(pos * y * logsig + (1 - y) * logsig_neg)


def _mask(rng, shape, p=0.3):
    m = np.where(rng.random(shape) < p, -np.inf, 0.0)
    m[..., 0] = 0.0  # no fully masked row
    return m


def _ln_samples(r):
    return [Sample((r.standard_normal(s),), {"eps": 1e-5}) for s in [(4, 6), (2, 3, 5), (7,), (2, 2, 2, 3)]]


def _sm_samples(r):
    return [Sample((r.standard_normal((3, 5)),), {"scale": 1.0}),
            Sample((r.standard_normal((2, 4, 4)),), {"scale": 0.5, "causal": True}),
            Sample((r.standard_normal((2, 3, 4, 6)), _mask(r, (2, 1, 1, 6))), {"scale": 0.7}, nondiff=(1,)),
            Sample((r.standard_normal((2, 3, 4, 6)), _mask(r, (4, 6))), {"scale": 1.0, "causal": True}, nondiff=(1,)),
            Sample((r.standard_normal((2, 3, 4)), r.standard_normal((1, 4))), {"scale": 0.8}),      # learnable bias
            Sample((r.standard_normal((2, 3, 4)), r.standard_normal((3, 4))), {"scale": 1.0, "causal": True})]


def _att_samples(r):
    b, h, lq, s, d = 2, 2, 3, 4, 5
    q, k, v = r.standard_normal((b, h, lq, d)), r.standard_normal((b, h, s, d)), r.standard_normal((b, h, s, 3))
    kq = r.standard_normal((b, h, s, d))
    return [Sample((q, k, v), {"scale": 0.4}),
            Sample((q, k, v), {"scale": 0.4, "causal": True}),
            Sample((q, k, v, _mask(r, (b, 1, 1, s))), {"scale": 0.4, "flash": True}, nondiff=(3,)),
            Sample((q, k, v, _mask(r, (lq, s))), {"scale": 1.0, "causal": True, "flash": True}, nondiff=(3,)),
            Sample((q, k, v, _mask(r, (lq, s))), {"scale": 1.0, "causal": True}, nondiff=(3,)),
            Sample((kq, k, v), {"scale": 0.3, "causal": True}),
            Sample((q, k, v, r.standard_normal((1, h, lq, s))), {"scale": 0.5})]                 # learnable bias


def _sce_samples(r):
    out = []
    for shape in [(4, 5), (2, 3, 4), (6,)]:
        q = r.random(shape)
        q = q / q.sum(-1, keepdims=True)
        out.append(Sample((3 * r.standard_normal(shape), q), nondiff=(1,)))
    q = r.random((3, 4))
    q[1] = 0.0  # an ignored row: zero loss and gradient
    out.append(Sample((r.standard_normal((3, 4)), q), nondiff=(1,)))
    return out


def _sce_unit_samples(r):
    """Targets whose rows sum to 1 or 0: one-hot, label-smoothed, and ignored (zero) rows."""
    eye = np.eye(5)
    smooth = eye[[1, 4, 0]] * 0.9 + 0.1 / 5
    q = eye[[2, 0, 3, 3]]
    q[2] = 0.0  # an ignored row: zero loss and gradient
    return [Sample((3 * r.standard_normal((3, 5)), smooth), nondiff=(1,)),
            Sample((r.standard_normal((4, 5)), q), nondiff=(1,)),
            Sample((r.standard_normal((2, 3, 5)), eye[[[0, 1, 2], [4, 4, 1]]]), nondiff=(1,))]


def _bce_samples(r):
    return [Sample((3 * r.standard_normal((4, 3)), r.random((4, 3))), nondiff=(1,)),
            Sample((r.standard_normal((5,)), (r.random(5) < 0.5).astype(np.float64)), nondiff=(1,)),
            Sample((r.standard_normal((4, 3)), r.random((4, 3)), r.random(3) * 3), nondiff=(1, 2))]


def _one_hot_samples(r):
    return [Sample((np.array([0, 3, 1, 3, 2], np.int32),), {"num_classes": 4}),
            Sample((np.array([[0, -100], [2, 1]], np.int32),), {"num_classes": 3, "ignore_index": -100}),
            Sample((np.array([0, 1, 2, 1], np.int32),), {"num_classes": 3, "ignore_index": 1})]


def _sce_index_samples(r):
    return [Sample((3 * r.standard_normal((6, 5)), np.array([0, 4, 2, 2, 1, 3], np.int32)), nondiff=(1,)),
            Sample((3 * r.standard_normal((2, 3, 4)), np.array([[0, 3, -100], [1, 1, 2]], np.int32)),
                   {"ignore_index": -100}, nondiff=(1,)),
            Sample((3 * r.standard_normal((5, 3)), np.array([0, 1, 2, 1, 0], np.int32)), {"ignore_index": 1},
                   nondiff=(1,)),
            Sample((3 * r.standard_normal((4,)), np.array(2, np.int32)), nondiff=(1,))]


def ref_sce_index(x, idx, ignore_index=None):
    c = x.shape[-1]
    q = ref_one_hot(idx, c, ignore_index)
    return ref_sce(x, q).sum() / q.sum()


def ref_one_hot(idx, num_classes, ignore_index=None):
    idx = np.asarray(idx)
    out = (idx[..., None] == np.arange(num_classes)).astype(np.float64)
    if ignore_index is not None:
        out[idx == ignore_index] = 0.0
    return out


register(
    OpInfo("layer_norm", ("layer_norm",), lambda x, eps: op.layer_norm(x, eps=eps), ref_layer_norm, _ln_samples,
           atol=2e-5),
    OpInfo("softmax_masked", ("softmax", "softmax_backward"), lambda x, *m, **p: op.softmax(x, *m, **p),
           ref_masked_softmax, _sm_samples),
    OpInfo("attention", ("attention",), lambda *a, **p: op.attention(*a, **p), ref_attention, _att_samples,
           atol=2e-5),
    OpInfo("softmax_cross_entropy", ("softmax_cross_entropy", "softmax_cross_entropy_backward"),
           op.softmax_cross_entropy, ref_sce, _sce_samples, atol=2e-5),
    OpInfo("softmax_cross_entropy_mean", ("softmax_cross_entropy_mean", "softmax_cross_entropy_backward"),
           op.softmax_cross_entropy_mean, lambda x, q: ref_sce(x, q).sum() / q.sum(), _sce_samples, atol=2e-5),
    OpInfo("softmax_cross_entropy_mean_unit_rows", ("softmax_cross_entropy_mean", "softmax_cross_entropy_backward"),
           lambda x, q: op.softmax_cross_entropy_mean(x, q, unit_rows=True),
           lambda x, q: ref_sce(x, q).sum() / q.sum(), _sce_unit_samples, atol=2e-5),
    OpInfo("bce_with_logits", ("bce_with_logits",), op.bce_with_logits, ref_bce, _bce_samples),
    OpInfo("one_hot", ("one_hot",), lambda i, **p: op.one_hot(i, **p), ref_one_hot, _one_hot_samples, grad=False),
    OpInfo("softmax_cross_entropy_index_mean",
           ("softmax_cross_entropy_index_mean", "softmax_cross_entropy_index_backward"),
           lambda x, i, **p: op.softmax_cross_entropy_index_mean(x, i, **p), ref_sce_index, _sce_index_samples,
           atol=2e-5),
)


# ---------------------------------------------------------------- error inputs (raised before ggml, in every mode)
def _ones(*s, dtype=np.float64):
    return np.ones(s, dtype)


def _i32(*v):
    return np.array(v, np.int32)


_F23, V, T = _ones(2, 3), ValueError, TypeError
_ATT = ("attention",)

errors("layer_norm", bad(T, "layer_norm", _i32(1, 2), 1e-5), bad(V, "layer_norm", np.array(1.0), 1e-5),
       bad(V, "layer_norm", _F23, -1.0))
errors("softmax_masked", bad(V, "softmax", _F23, _ones(2, 4)), bad(V, "softmax", _ones(2, 3, 4), _ones(3, 3, 4)),
       bad(V, "softmax", _ones(3), causal=True), bad(V, "softmax", _F23, _ones(2, 3), axis=0),
       bad(T, "softmax", _F23, causal=1), bad(T, "softmax", _F23, scale="2"))
errors("attention", *[bad(V, "attention", *a, scale=1.0) for a in [
    (_ones(2, 3, 4), _ones(2, 3, 4), _ones(2, 3, 4)), (_ones(1, 1, 2, 4), _ones(1, 1, 3, 5), _ones(1, 1, 3, 4)),
    (_ones(1, 2, 2, 4), _ones(1, 1, 3, 4), _ones(1, 1, 3, 4)), (_ones(1, 1, 2, 4), _ones(1, 1, 3, 4), _ones(1, 1, 2, 4)),
    (_ones(1, 1, 2, 4), _ones(1, 1, 3, 4), _ones(1, 1, 3, 4), _ones(2, 2)),
    (_ones(1, 1, 0, 4), _ones(1, 1, 3, 4), _ones(1, 1, 3, 4)), (_ones(1, 1, 2, 4), _ones(1, 1, 0, 4), _ones(1, 1, 0, 4))]])
errors("one_hot", bad(T, "one_hot", _ones(3), num_classes=3), bad(V, "one_hot", _i32(0), num_classes=0),
       bad(V, "one_hot", np.zeros(0, np.int32), num_classes=3))
errors("softmax_cross_entropy", bad(V, "softmax_cross_entropy", _F23, _ones(2, 4)),
       bad(V, "softmax_cross_entropy", _ones(0, 3), _ones(0, 3)))
errors("softmax_cross_entropy_mean", bad(T, "unit_rows", _F23, _F23, fn=lambda x, q: op.softmax_cross_entropy_mean(x, q, unit_rows=1)),
       bad(T, "unit_rows", _ones(2), _F23, _F23, fn=lambda g, x, q: op.softmax_cross_entropy_backward(g, x, q, unit_rows=True)),
       bad(V, "gradient", _ones(2), _F23, _F23,
           fn=lambda g, x, q: op.softmax_cross_entropy_backward(g, x, q, mean=True, unit_rows=True)))
errors("softmax_cross_entropy_index_mean", bad(T, "int32", _F23, _ones(2)), bad(V, "targets", _ones(3, 4), _i32(0, 1)),
       bad(T, "float32", _i32(0, 1, 2), _i32(0, 1, 2)), bad(T, "ignore_index", _ones(3, 4), _i32(0, 1, 2), ignore_index=1.5),
       bad(V, "scalars", _ones(3), _ones(3, 4), _i32(0, 1, 2), _ones(),
           fn=lambda g, x, i, loss: op.softmax_cross_entropy_index_backward(g, x, i, loss)))
errors("bce_with_logits", bad(V, "bce_with_logits", _F23, _ones(3)), bad(V, "pos_weight", _F23, _F23, _ones(2)),
       bad(V, "bce_with_logits", _ones(0), _ones(0)))
