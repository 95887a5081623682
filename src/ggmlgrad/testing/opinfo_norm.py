"""OpInfo entries for the normalisation, activation and loss functions of issue 22 (ops/norm_ops.py,
nn/functional_norm.py, nn/functional_act.py, nn/functional_loss.py): NumPy float64 references,
checked with finite-difference gradients in eager, graph, check mode and capture."""
from __future__ import annotations

import math

import numpy as np

from ..ops import op
from .opinfo import OpInfo, Sample, bad, errors, register


def _F():
    import ggmlgrad.nn.functional as F   # the toolkit layer, imported when a test calls an entry
    return F


# ---------------------------------------------------------------- references
def _channel(v, ndim):
    return v.reshape((-1,) + (1,) * (ndim - 2))


def _affine(y, w, b):
    if w is not None:
        y = y * _channel(w, y.ndim)
    if b is not None:
        y = y + _channel(b, y.ndim)
    return y


def ref_batch_norm(x, w=None, b=None, eps=1e-5):
    axes = (0,) + tuple(range(2, x.ndim))
    mu, var = x.mean(axes, keepdims=True), x.var(axes, keepdims=True)
    return _affine((x - mu) / np.sqrt(var + eps), w, b)


def ref_bn_stats(x, eps):
    return np.stack([x.mean((0, 2)), x.var((0, 2))])


def ref_channel_affine(x, *wb, has_weight=True, has_bias=True):
    w = wb[0] if has_weight else None
    b = wb[-1] if has_bias else None
    return _affine(x, w, b)


def ref_batch_norm_eval(x, rm, rv, w, b, eps=1e-5):
    return _affine((x - _channel(rm, x.ndim)) / np.sqrt(_channel(rv, x.ndim) + eps), w, b)


def ref_instance_norm(x, w=None, b=None, eps=1e-5):
    axes = tuple(range(2, x.ndim))
    mu, var = x.mean(axes, keepdims=True), x.var(axes, keepdims=True)
    return _affine((x - mu) / np.sqrt(var + eps), w, b)


def ref_group_norm(x, num_groups, w=None, b=None, eps=1e-5):
    n = x.shape[0]
    g = x.reshape(n, num_groups, -1)
    y = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + eps)).reshape(x.shape)
    return _affine(y, w, b)


def ref_rms_rows(x, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)


def ref_rms_norm(x, w=None, normalized_shape=None, eps=None):
    k = len(normalized_shape)
    eps = float(np.finfo(np.float32).eps) if eps is None else eps
    axes = tuple(range(x.ndim - k, x.ndim))
    y = x / np.sqrt((x * x).mean(axes, keepdims=True) + eps)
    return y * w if w is not None else y


def ref_layer_norm(x, w, b, normalized_shape, eps=1e-5):
    axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    y = (x - x.mean(axes, keepdims=True)) / np.sqrt(x.var(axes, keepdims=True) + eps)
    return y * w + b


def _softplus(x):
    return np.logaddexp(0.0, x)


ACTIVATIONS = {
    "hardtanh": (lambda x: np.clip(x, -1.0, 1.0)),
    "relu6": (lambda x: np.clip(x, 0.0, 6.0)),
    "hardsigmoid": (lambda x: np.clip(x / 6.0 + 0.5, 0.0, 1.0)),
    "hardswish": (lambda x: x * np.clip(x + 3.0, 0.0, 6.0) / 6.0),
    "mish": (lambda x: x * np.tanh(_softplus(x))),
    "logsigmoid": (lambda x: -_softplus(-x)),
    "softsign": (lambda x: x / (1.0 + np.abs(x))),
    "tanhshrink": (lambda x: x - np.tanh(x)),
}


def ref_prelu(x, w):
    if w.ndim > 1 or w.size not in (1, x.shape[1] if x.ndim >= 2 else 1):
        raise ValueError("prelu: weight must have 1 element or one per channel")   # torch's rule
    wb = w.reshape((-1,) + (1,) * (x.ndim - 2)) if x.ndim >= 2 else w.reshape(()) if w.size == 1 else w
    return np.where(x > 0, x, x * wb)


def ref_glu(x, dim=-1):
    a, b = np.split(x, 2, axis=dim)
    return a / (1.0 + np.exp(-b))


def _reduce(v, reduction):
    return {"none": v, "sum": v.sum(), "mean": v.mean()}[reduction]


def ref_kl_div(x, t, reduction="mean", log_target=False):
    if log_target:
        v = np.exp(t) * (t - x)
    else:
        v = np.where(t == 0, 0.0, t * np.log(np.where(t == 0, 1.0, t))) - t * x
    if reduction == "batchmean":
        return v.sum() / x.shape[0]
    return _reduce(v, reduction)


def ref_margin_ranking(a, b, y, margin=0.0, reduction="mean"):
    return _reduce(np.maximum(-y * (a - b) + margin, 0.0), reduction)


def ref_cosine_embedding(a, b, y, margin=0.0, reduction="mean"):
    cos = (a * b).sum(-1) / np.sqrt(((a * a).sum(-1) + 1e-12) * ((b * b).sum(-1) + 1e-12))
    return _reduce(np.where(y == 1, 1.0 - cos, 0.0) + np.where(y == -1, np.maximum(cos - margin, 0.0), 0.0),
                   reduction)


def _pnorm(d, p, keepdim=False):
    if p == math.inf:
        return np.abs(d).max(-1, keepdims=keepdim)
    return (np.abs(d) ** p).sum(-1, keepdims=keepdim) ** (1.0 / p)


def ref_pairwise_distance(a, b, p=2.0, eps=1e-6, keepdim=False):
    return _pnorm(a - b + eps, p, keepdim)


def ref_triplet(a, pos, neg, margin=1.0, p=2.0, eps=1e-6, swap=False, reduction="mean"):
    dp, dn = _pnorm(a - pos + eps, p), _pnorm(a - neg + eps, p)
    if swap:
        dn = np.minimum(dn, _pnorm(pos - neg + eps, p))
    return _reduce(np.maximum(margin + dp - dn, 0.0), reduction)


def ref_poisson(x, t, log_input=True, full=False, eps=1e-8, reduction="mean"):
    v = np.exp(x) - t * x if log_input else x - t * np.log(x + eps)
    if full:
        ts = np.where(t > 1, t, 2.0)
        v = v + np.where(t > 1, ts * np.log(ts) - ts + 0.5 * np.log(2 * np.pi * ts), 0.0)
    return _reduce(v, reduction)


def ref_gaussian_nll(x, t, var, full=False, eps=1e-6, reduction="mean"):
    if var.shape != x.shape and var.shape == x.shape[:-1]:
        var = var[..., None]
    var = np.maximum(var, eps)
    v = 0.5 * (np.log(var) + (x - t) ** 2 / var) + (0.5 * np.log(2 * np.pi) if full else 0.0)
    return _reduce(v, reduction)


def ref_cosine_similarity(a, b, dim=1, eps=1e-8):
    na = np.maximum(np.sqrt((a * a).sum(dim, keepdims=True)), eps)
    nb = np.maximum(np.sqrt((b * b).sum(dim, keepdims=True)), eps)
    return ((a / na) * (b / nb)).sum(dim)


def ref_normalize(x, p=2.0, dim=1, eps=1e-12):
    n = np.abs(x).max(dim, keepdims=True) if p == math.inf else (np.abs(x) ** p).sum(dim, keepdims=True) ** (1 / p)
    return x / np.maximum(n, eps)


# ---------------------------------------------------------------- samples
def _n(r, *s):
    return r.standard_normal(s)


def _pos(r, *s):
    return r.uniform(0.5, 2.0, s)


def _bn_samples(r):
    return [Sample((_n(r, 5, 3), _pos(r, 3), _n(r, 3))),
            Sample((_n(r, 3, 2, 4), _pos(r, 2), _n(r, 2)), {"eps": 1e-3}),
            Sample((_n(r, 2, 3, 3, 2), _pos(r, 3), _n(r, 3)))]


def _bn_op_samples(r):
    return [Sample((_n(r, 4, 3, 5),), {"eps": 1e-5}), Sample((3 + 2 * _n(r, 1, 2, 6),), {"eps": 1e-3}),
            Sample((_n(r, 5, 3, 1),), {"eps": 1e-5})]


def _affine_samples(r):
    return [Sample((_n(r, 2, 3, 4), _n(r, 3), _n(r, 3))),
            Sample((_n(r, 3, 2, 1), _n(r, 2)), {"has_bias": False}),
            Sample((_n(r, 1, 4, 5), _n(r, 4)), {"has_weight": False})]


def _bn_eval_samples(r):
    return [Sample((_n(r, 4, 3), _n(r, 3), _pos(r, 3), _pos(r, 3), _n(r, 3))),
            Sample((_n(r, 2, 2, 3, 3), _n(r, 2), _pos(r, 2), _pos(r, 2), _n(r, 2)), {"eps": 0.1})]


def _in_samples(r):
    return [Sample((_n(r, 2, 3, 5), _pos(r, 3), _n(r, 3))), Sample((_n(r, 2, 2, 3, 3), _pos(r, 2), _n(r, 2)))]


def _gn_samples(r):
    return [Sample((_n(r, 2, 4, 3), 2, _pos(r, 4), _n(r, 4))), Sample((_n(r, 2, 6, 2, 2), 3, _pos(r, 6), _n(r, 6))),
            Sample((_n(r, 3, 4), 1, _pos(r, 4), _n(r, 4)), {"eps": 1e-2})]


def _rms_samples(r):
    return [Sample((_n(r, 3, 4), _pos(r, 4)), {"normalized_shape": (4,)}),
            Sample((_n(r, 2, 3, 4), _pos(r, 3, 4)), {"normalized_shape": (3, 4), "eps": 1e-3})]


def _rms_op_samples(r):
    return [Sample((_n(r, 3, 5),), {"eps": 1e-6}), Sample((_n(r, 2, 2, 4),), {"eps": 1e-2}),
            Sample((_n(r, 7),), {"eps": 0.0})]


def _ln_samples(r):
    return [Sample((_n(r, 2, 3, 4), _pos(r, 3, 4), _n(r, 3, 4)), {"normalized_shape": (3, 4)}),
            Sample((_n(r, 2, 2, 2, 3), _pos(r, 2, 2, 3), _n(r, 2, 2, 3)), {"normalized_shape": (2, 2, 3)})]


def _act_samples(scale):
    def samples(r):
        return [Sample((scale * _n(r, 3, 4),)), Sample((scale * _n(r, 2, 3, 2),)), Sample((scale * _n(r, 5),))]
    return samples


def _act_nonfinite(r):
    return [Sample((np.array([np.nan, np.inf, -np.inf, 0.0, -3.0, 3.0, 6.0, -1.0, 1.0]),))]


def _prelu_samples(r):
    return [Sample((_n(r, 3, 4), np.array([0.25]))), Sample((_n(r, 2, 3, 4), r.uniform(-1, 1, 3))),
            Sample((_n(r, 6), np.array([0.4])))]


def _glu_samples(r):
    return [Sample((_n(r, 3, 4),)), Sample((_n(r, 4, 3),), {"dim": 0}), Sample((_n(r, 2, 6, 2),), {"dim": 1})]


def _prob(r, *s):
    return r.random(s) * (r.random(s) > 0.25)


def _sign(r, *s):
    return np.where(r.random(s) < 0.5, -1.0, 1.0)


def _kl_samples(r):
    return [Sample((_n(r, 4, 3), _prob(r, 4, 3)), {"reduction": "batchmean"}, nondiff=(1,)),
            Sample((_n(r, 4, 3), _prob(r, 4, 3)), {"reduction": "mean"}, nondiff=(1,)),
            Sample((_n(r, 5), _n(r, 5)), {"reduction": "sum", "log_target": True}, nondiff=(1,)),
            Sample((_n(r, 2, 3), _prob(r, 2, 3)), {"reduction": "none"}, nondiff=(1,))]


def _mr_samples(r):
    return [Sample((_n(r, 6), _n(r, 6), _sign(r, 6)), {"margin": 0.3}, nondiff=(2,)),
            Sample((_n(r, 4), _n(r, 4), _sign(r, 4)), {"reduction": "none"}, nondiff=(2,))]


def _ce_samples(r):
    return [Sample((_n(r, 5, 4), _n(r, 5, 4), _sign(r, 5)), {"margin": 0.2}, nondiff=(2,)),
            Sample((_n(r, 4), _n(r, 4), np.array(-1.0)), {"reduction": "sum"}, nondiff=(2,))]


def _triplet_samples(r):
    return [Sample((_n(r, 4, 5), _n(r, 4, 5), _n(r, 4, 5))),
            Sample((_n(r, 3, 4), _n(r, 3, 4), _n(r, 3, 4)), {"p": 1.0, "swap": True, "margin": 2.0}),
            Sample((_n(r, 3, 4), _n(r, 3, 4), _n(r, 3, 4)), {"p": 3.0, "reduction": "none", "margin": 1.5})]


def _pd_samples(r):
    return [Sample((_n(r, 4, 5), _n(r, 4, 5))), Sample((_n(r, 3, 4), _n(r, 4)), {"p": 1.0, "keepdim": True}),
            Sample((_n(r, 2, 3, 4), _n(r, 2, 3, 4)), {"p": math.inf}), Sample((_n(r, 3, 4), _n(r, 3, 4)), {"p": 3.0})]


def _cs_samples(r):
    return [Sample((_n(r, 4, 5), _n(r, 4, 5))), Sample((_n(r, 3, 4), _n(r, 4)), {"dim": -1}),
            Sample((_n(r, 2, 3, 4), _n(r, 2, 3, 4)), {"dim": 0, "eps": 1e-3})]


def _poisson_samples(r):
    t = r.poisson(2.0, (4, 3)).astype(np.float64)
    return [Sample((_n(r, 4, 3), t), nondiff=(1,)),
            Sample((_pos(r, 4, 3), t), {"log_input": False, "full": True, "reduction": "sum"}, nondiff=(1,))]


def _gauss_samples(r):
    return [Sample((_n(r, 4, 3), _n(r, 4, 3), _pos(r, 4, 3)), nondiff=(1,)),
            Sample((_n(r, 4, 3), _n(r, 4, 3), _pos(r, 4)), {"full": True, "reduction": "sum"}, nondiff=(1,)),
            Sample((_n(r, 4, 3), _n(r, 4, 3), _pos(r, 4, 1)), {"reduction": "none"}, nondiff=(1,))]


def _normalize_samples(r):
    return [Sample((_n(r, 3, 4),)), Sample((_n(r, 2, 3, 4),), {"dim": -1, "p": 1.0}),
            Sample((_n(r, 3, 4),), {"p": math.inf})]


# ---------------------------------------------------------------- entries
def _act_entry(name):
    return OpInfo(f"F.{name}", ("where_scalar",), lambda x: getattr(_F(), name)(x), ACTIVATIONS[name],
                  _act_samples(4.0 if name in ("relu6", "hardswish", "hardsigmoid") else 1.0),
                  nonfinite=_act_nonfinite, atol=2e-5)


register(
    OpInfo("rms_norm", ("rms_norm",), lambda x, eps: op.rms_norm(x, eps=eps), ref_rms_rows, _rms_op_samples,
           atol=2e-5),
    OpInfo("F.batch_norm_train", ("batch_norm", "batch_norm_backward"),
           lambda x, w, b, **k: _F().batch_norm(x, None, None, w, b, training=True, **k),
           ref_batch_norm, _bn_samples, atol=3e-5),
    OpInfo("batch_norm_no_affine", ("batch_norm", "batch_norm_backward"),
           lambda x, **k: op.batch_norm(x, op.batch_norm_stats(x.detach()), **k),
           lambda x, eps: ref_batch_norm(x, eps=eps), _bn_op_samples, atol=3e-5),
    OpInfo("batch_norm_stats", ("batch_norm_stats",), lambda x, eps: op.batch_norm_stats(x),
           ref_bn_stats, _bn_op_samples, grad=False, atol=3e-5),
    OpInfo("channel_affine", ("channel_affine", "channel_sum"), lambda x, *wb, **k: op.channel_affine(x, *wb, **k),
           ref_channel_affine, _affine_samples),
    OpInfo("F.batch_norm_eval", ("pow_scalar", "channel_affine"), lambda x, rm, rv, w, b, **k: _F().batch_norm(x, rm, rv, w, b, **k),
           ref_batch_norm_eval, _bn_eval_samples, atol=3e-5),
    OpInfo("F.instance_norm", ("layer_norm",), lambda x, w, b: _F().instance_norm(x, weight=w, bias=b),
           lambda x, w, b: ref_instance_norm(x, w, b), _in_samples, atol=3e-5),
    OpInfo("F.group_norm", ("layer_norm", "channel_affine", "channel_sum"), lambda x, g, w, b, **k: _F().group_norm(x, g, w, b, **k),
           ref_group_norm, _gn_samples, atol=3e-5),
    OpInfo("F.rms_norm", ("rms_norm",), lambda x, w, **k: _F().rms_norm(x, weight=w, **k),
           ref_rms_norm, _rms_samples, atol=3e-5),
    OpInfo("F.layer_norm_dims", ("layer_norm",), lambda x, w, b, **k: _F().layer_norm(x, weight=w, bias=b, **k),
           ref_layer_norm, _ln_samples, atol=3e-5),
    *[_act_entry(n) for n in ACTIVATIONS],
    OpInfo("F.prelu", ("where",), lambda x, w: _F().prelu(x, w), ref_prelu, _prelu_samples),
    OpInfo("F.glu", ("sigmoid",), lambda x, **k: _F().glu(x, **k), ref_glu, _glu_samples),
    OpInfo("F.kl_div", ("log",), lambda x, t, **k: _F().kl_div(x, t, **k), ref_kl_div, _kl_samples),
    OpInfo("F.margin_ranking_loss", ("clamp",), lambda a, b, y, **k: _F().margin_ranking_loss(a, b, y, **k),
           ref_margin_ranking, _mr_samples),
    OpInfo("F.cosine_embedding_loss", ("sqrt",), lambda a, b, y, **k: _F().cosine_embedding_loss(a, b, y, **k),
           ref_cosine_embedding, _ce_samples, atol=2e-5),
    OpInfo("F.triplet_margin_loss", ("minimum",), lambda a, pos, neg, **k: _F().triplet_margin_loss(a, pos, neg, **k),
           ref_triplet, _triplet_samples, atol=2e-5),
    OpInfo("F.pairwise_distance", ("pow",), lambda a, b, **k: _F().pairwise_distance(a, b, **k),
           ref_pairwise_distance, _pd_samples, atol=2e-5),
    OpInfo("F.cosine_similarity", ("sqrt",), lambda a, b, **k: _F().cosine_similarity(a, b, **k),
           ref_cosine_similarity, _cs_samples, atol=2e-5),
    OpInfo("F.poisson_nll_loss", ("exp",), lambda x, t, **k: _F().poisson_nll_loss(x, t, **k), ref_poisson,
           _poisson_samples, atol=3e-5),
    OpInfo("F.gaussian_nll_loss", ("log",), lambda x, t, v, **k: _F().gaussian_nll_loss(x, t, v, **k),
           ref_gaussian_nll, _gauss_samples, atol=3e-5),
    OpInfo("F.normalize", ("amax",), lambda x, **k: _F().normalize(x, **k), ref_normalize, _normalize_samples,
           atol=2e-5),
)


# ---------------------------------------------------------------- error inputs (raised before ggml, in every mode)
def _ones(*s):
    return np.ones(s)


_V, _T, _R = ValueError, TypeError, RuntimeError
errors("rms_norm", bad(_V, "rms_norm", np.array(1.0), 1e-5), bad(_V, "rms_norm", _ones(2, 3), -1.0),
       bad(_T, "rms_norm", np.array([1, 2], np.int32), 1e-5))
errors("F.batch_norm_train", bad(_V, "more than 1 value per channel", _ones(1, 3), _ones(3), _ones(3)),
       bad(_R, "weight", _ones(4, 3), _ones(2), _ones(3)),
       bad(_V, "at least 2 dimensions", _ones(3), _ones(3), _ones(3)))
errors("batch_norm_no_affine", bad(_V, "(N, C, S)", _ones(4, 3), eps=1e-5),
       bad(_T, "affine inputs", _ones(2, 3, 4), _ones(2, 3), _ones(3), eps=1e-5,
           fn=lambda x, st, w, **k: op.batch_norm(x, st, w, **k)),
       bad(_V, "weight and bias", _ones(2, 3, 4), _ones(2, 3), _ones(2), eps=1e-5, has_weight=True,
           fn=lambda x, st, w, **k: op.batch_norm(x, st, w, **k)),
       bad(_V, "statistics must have shape", _ones(2, 3, 4), _ones(3, 2), eps=1e-5,
           fn=lambda x, st, **k: op.batch_norm(x, st, **k)))
errors("batch_norm_stats", bad(_V, "batch_norm_stats", _ones(2, 3), eps=0.0),
       bad(_T, "float32", np.ones((2, 3, 4), np.int32), eps=0.0))
errors("channel_affine", bad(_T, "channel_affine", _ones(2, 3, 4), _ones(3), has_bias=True),
       bad(_V, "(N, C, S)", _ones(2, 3), _ones(3), _ones(3)), bad(_V, "shape (3,)", _ones(2, 3, 4), _ones(2), _ones(3)))
errors("F.batch_norm_eval", bad(_R, "running_mean", _ones(4, 3), _ones(4), _ones(3), _ones(3), _ones(3)))
errors("F.instance_norm", bad(_V, "more than 1 spatial element", _ones(2, 3, 1), _ones(3), _ones(3)))
errors("F.group_norm", bad(_R, "divisible by num_groups", _ones(2, 3, 4), 2, _ones(3), _ones(3)),
       bad(_V, "num_groups", _ones(2, 4, 4), 0, _ones(4), _ones(4)))
errors("F.rms_norm", bad(_R, "normalized_shape", _ones(2, 3), _ones(4), normalized_shape=(4,)),
       bad(_R, "weight", _ones(2, 3), _ones(2), normalized_shape=(3,)))
errors("F.glu", bad(_R, "Halving dimension must be even", _ones(2, 3)),
       bad(IndexError, "glu", _ones(2, 4), dim=2))
errors("F.prelu", bad(_R, "Mismatch of parameter numbers", _ones(2, 3), _ones(2)))
errors("F.cosine_embedding_loss", bad(_R, "cosine_embedding_loss", _ones(2, 3), _ones(2, 3), _ones(2, 1)))
errors("F.margin_ranking_loss", bad(_R, "same dimension", _ones(3), _ones(3), _ones(3, 1)))
errors("F.triplet_margin_loss", bad(_R, "same number of dimensions", _ones(2, 3), _ones(3), _ones(2, 3)))
errors("F.gaussian_nll_loss", bad(_V, "var is of incorrect size", _ones(4, 3), _ones(4, 3), _ones(3, 3)))
errors("F.kl_div", bad(_V, "reduction", _ones(2), _ones(2), reduction="avg"))
errors("F.pairwise_distance", bad(_V, "p must be", _ones(2, 3), _ones(2, 3), p=-1.0))

