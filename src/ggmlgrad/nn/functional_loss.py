"""Losses and distances of ``gg.nn.functional``: ``kl_div``, ``cosine_embedding_loss``,
``margin_ranking_loss``, ``triplet_margin_loss``, ``poisson_nll_loss``, ``gaussian_nll_loss``,
``cosine_similarity``, ``pairwise_distance``, with torch's argument names, defaults and eps rules
(the legacy ``size_average``/``reduce`` arguments map to ``reduction`` as in torch).

>>> import ggmlgrad as gg, ggmlgrad.nn.functional as F
>>> F.margin_ranking_loss(gg.tensor([1.0, 0.0]), gg.tensor([0.0, 1.0]), gg.tensor([1.0, 1.0])).item()
0.5
"""
from __future__ import annotations

import math

import numpy as np

from ..engine import COMPUTED, active_observer, download, int32
from ..ops import op
from ..ops.decl import public as _public
from ..ops.indexing import check_values
from ..tensor import Tensor, as_tensor, no_grad
from ..tensor.tensor import where
from .functional import _check_reduction, _reduce


def legacy_reduction(size_average, reduce, reduction: str) -> str:
    """torch's mapping of the deprecated ``size_average``/``reduce`` onto ``reduction``."""
    if size_average is None and reduce is None:
        return reduction
    size_average = True if size_average is None else bool(size_average)
    reduce = True if reduce is None else bool(reduce)
    return "none" if not reduce else ("mean" if size_average else "sum")


def _float(fn: str, name: str, x, like: Tensor | None = None) -> Tensor:
    """``x`` as a float32 tensor (an int/bool tensor or array is converted, as torch promotes)."""
    t = x if isinstance(x, Tensor) else as_tensor(np.asarray(x, dtype=np.float32),
                                                  device=like.device if like is not None else None)
    if not t.dtype.is_float:
        t = t.float()
    return t


def _input(fn: str, x) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{fn}: input must be a Tensor, got {type(x).__name__}")
    return _float(fn, "input", x)


def _safe_sqrt(s: Tensor) -> Tensor:
    """sqrt(s) whose gradient at s = 0 is 0 (torch's norm backward), not 0 * inf = NaN."""
    zero = s == 0.0
    return where(zero, 0.0, op.sqrt(where(zero, 1.0, s)))


def _vector_norm(x: Tensor, p: float, dim: int, keepdim: bool) -> Tensor:
    """The p-norm of ``x`` along ``dim`` with torch's values and gradients (0 where the norm is 0)."""
    if p == 2.0:
        return _safe_sqrt(op.square(x).sum(axis=dim, keepdim=keepdim))
    a = op.abs(x)
    if p == math.inf:
        return a.amax(dim, keepdim=keepdim)
    if p == 0.0:
        with no_grad():
            return (a != 0.0).float().sum(axis=dim, keepdim=keepdim)
    if p == 1.0:
        return a.sum(axis=dim, keepdim=keepdim)
    s = (a ** p).sum(axis=dim, keepdim=keepdim)
    zero = s == 0.0
    return where(zero, 0.0, where(zero, 1.0, s) ** (1.0 / p))


def _norm_degree(fn: str, p) -> float:
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not p >= 0:
        raise ValueError(f"{fn}: p must be a non-negative number (or inf), got {p!r}")
    return float(p)


# ---------------------------------------------------------------- distances
@_public(functional="pairwise_distance", function="pairwise_distance")
def pairwise_distance(x1: Tensor, x2: Tensor, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> Tensor:
    """``||x1 - x2 + eps||_p`` along the last axis (torch: eps is added to the difference).

    >>> import ggmlgrad as gg, ggmlgrad.nn.functional as F
    >>> round(F.pairwise_distance(gg.tensor([[3.0, 0.0]]), gg.tensor([[0.0, 4.0]]), eps=0.0).item(), 4)
    5.0
    """
    fn = "pairwise_distance"
    x1, x2 = _input(fn, x1), _float(fn, "x2", x2)
    p = _norm_degree(fn, p)
    if x1.ndim == 0 and x2.ndim == 0:
        raise RuntimeError(f"{fn}: inputs must have at least 1 dimension")
    try:
        np.broadcast_shapes(tuple(x1.shape), tuple(x2.shape))
    except ValueError:
        raise RuntimeError(f"{fn}: the shapes {list(x1.shape)} and {list(x2.shape)} do not broadcast") from None
    return _vector_norm(x1 - x2 + float(eps), p, -1, bool(keepdim))


@_public(functional="cosine_similarity", function="cosine_similarity")
def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """``sum(x1 / max(||x1||, eps) * x2 / max(||x2||, eps))`` along ``dim`` of the broadcast shape.

    As torch, each norm is raised to ``eps`` on its own and that raise carries no gradient.

    >>> import ggmlgrad as gg, ggmlgrad.nn.functional as F
    >>> F.cosine_similarity(gg.tensor([[1.0, 0.0]]), gg.tensor([[2.0, 0.0]])).tolist()
    [1.0]
    """
    fn = "cosine_similarity"
    x1, x2 = _input(fn, x1), _float(fn, "x2", x2)
    try:
        shape = np.broadcast_shapes(tuple(x1.shape), tuple(x2.shape))
    except ValueError:
        raise RuntimeError(f"{fn}: the shapes {list(x1.shape)} and {list(x2.shape)} do not broadcast") from None
    nd = max(len(shape), 1)
    if isinstance(dim, bool) or not isinstance(dim, int) or not -nd <= dim < nd:
        raise IndexError(f"{fn}: dim {dim!r} is out of range for {len(shape)} dimensions")
    if len(shape) == 0:
        x1, x2 = x1.reshape(1), x2.reshape(1)
        shape = (1,)
    x1 = x1 if tuple(x1.shape) == shape else x1.expand(*shape)
    x2 = x2 if tuple(x2.shape) == shape else x2.expand(*shape)

    def unit(x: Tensor) -> Tensor:
        n = _vector_norm(x, 2.0, dim, True)
        return x / (n + (op.clamp(n, lo=float(eps)) - n).detach())
    return (unit(x1) * unit(x2)).sum(axis=dim)


# ---------------------------------------------------------------- losses
@_public(functional="kl_div")  # torch.kl_div: another signature
def kl_div(input: Tensor, target, size_average=None, reduce=None, reduction: str = "mean",
           log_target: bool = False) -> Tensor:
    """KL divergence of ``target`` from the log-probabilities ``input``: pointwise
    ``target * (log(target) - input)`` (0 where target is 0), or ``exp(t) * (t - input)`` with
    ``log_target``. ``reduction="batchmean"`` divides the sum by the batch size (the mathematically
    correct KL); ``"mean"`` averages over every element, as torch.

    >>> import ggmlgrad as gg, ggmlgrad.nn.functional as F
    >>> round(F.kl_div(gg.tensor([0.5, 0.5]).log(), gg.tensor([0.5, 0.5]), reduction="sum").item(), 6)
    0.0
    """
    fn = "kl_div"
    reduction = legacy_reduction(size_average, reduce, reduction)
    if reduction != "batchmean":
        _check_reduction(fn, reduction)
    input = _input(fn, input)
    t = _float(fn, "target", target, input)
    if log_target:
        loss = op.exp(t) * (t - input)
    else:
        loss = t * op.log(where(t == 0.0, 1.0, t)) - t * input     # xlogy(t, t): 0 at t = 0
    if reduction == "batchmean":
        total = loss.sum()
        return total / float(input.shape[0]) if input.ndim else total
    return _reduce(loss, reduction)


def _same_ndim(fn: str, *xs) -> None:
    if len({x.ndim for x in xs}) != 1:
        raise RuntimeError(f"{fn}: All input tensors should have same dimension but got sizes: "
                           + ", ".join(str(list(x.shape)) for x in xs))


@_public(functional="margin_ranking_loss")  # torch.margin_ranking_loss: another signature
def margin_ranking_loss(input1: Tensor, input2: Tensor, target, margin: float = 0.0, size_average=None,
                        reduce=None, reduction: str = "mean") -> Tensor:
    """``max(0, -target * (input1 - input2) + margin)``; target is 1 or -1.

    >>> import ggmlgrad as gg, ggmlgrad.nn.functional as F
    >>> F.margin_ranking_loss(gg.tensor([1.0]), gg.tensor([2.0]), gg.tensor([1.0]), reduction="sum").item()
    1.0
    """
    fn = "margin_ranking_loss"
    reduction = legacy_reduction(size_average, reduce, reduction)
    _check_reduction(fn, reduction)
    input1, input2 = _input(fn, input1), _float(fn, "input2", input2)
    target = _float(fn, "target", target, input1)
    _same_ndim(fn, input1, input2, target)
    return _reduce(op.clamp(-target * (input1 - input2) + float(margin), lo=0.0), reduction)


@_public(functional="cosine_embedding_loss")  # torch.cosine_embedding_loss: another signature
def cosine_embedding_loss(input1: Tensor, input2: Tensor, target, margin: float = 0.0, size_average=None,
                          reduce=None, reduction: str = "mean") -> Tensor:
    """``1 - cos(x1, x2)`` where target is 1, ``max(0, cos(x1, x2) - margin)`` where it is -1
    (cos along the last axis, each squared norm plus 1e-12, as torch).

    >>> import ggmlgrad as gg, ggmlgrad.nn.functional as F
    >>> F.cosine_embedding_loss(gg.tensor([[1.0, 0.0]]), gg.tensor([[0.0, 1.0]]), gg.tensor([1])).item()
    1.0
    """
    fn = "cosine_embedding_loss"
    reduction = legacy_reduction(size_average, reduce, reduction)
    _check_reduction(fn, reduction)
    input1, input2 = _input(fn, input1), _float(fn, "input2", input2)
    target = _float(fn, "target", target, input1)
    if input1.ndim not in (1, 2) or tuple(input1.shape) != tuple(input2.shape):
        raise RuntimeError(f"{fn}: expected 1D or 2D inputs of the same shape, got {list(input1.shape)} and "
                           f"{list(input2.shape)}")
    if target.ndim != input1.ndim - 1:
        raise RuntimeError(f"{fn}: {target.ndim}D target tensor expects {target.ndim + 1}D input tensors, but "
                           f"found inputs with sizes {list(input1.shape)} and {list(input2.shape)}.")
    prod = (input1 * input2).sum(axis=-1)
    mag1 = op.square(input1).sum(axis=-1) + 1e-12
    mag2 = op.square(input2).sum(axis=-1) + 1e-12
    cos = prod / op.sqrt(mag1 * mag2)
    pos = where(target == 1.0, -cos + 1.0, 0.0)
    neg = where(target == -1.0, op.clamp(cos - float(margin), lo=0.0), 0.0)
    return _reduce(pos + neg, reduction)


@_public(functional="triplet_margin_loss")  # torch.triplet_margin_loss: another signature
def triplet_margin_loss(anchor: Tensor, positive: Tensor, negative: Tensor, margin: float = 1.0, p: float = 2,
                        eps: float = 1e-6, swap: bool = False, size_average=None, reduce=None,
                        reduction: str = "mean") -> Tensor:
    """``max(0, margin + d(a, p) - d(a, n))`` with ``d`` = :func:`pairwise_distance` (p, eps);
    ``swap`` uses ``min(d(a, n), d(p, n))`` as the negative distance.

    >>> import ggmlgrad as gg, ggmlgrad.nn.functional as F
    >>> a = gg.tensor([[0.0, 0.0]])
    >>> F.triplet_margin_loss(a, a, gg.tensor([[3.0, 4.0]]), eps=0.0).item()
    0.0
    """
    fn = "triplet_margin_loss"
    reduction = legacy_reduction(size_average, reduce, reduction)
    _check_reduction(fn, reduction)
    a, pos, neg = _input(fn, anchor), _float(fn, "positive", positive), _float(fn, "negative", negative)
    if not (a.ndim == pos.ndim == neg.ndim):
        raise RuntimeError(f"{fn}: The anchor, positive, and negative tensors are expected to have the same number "
                           f"of dimensions, but got: anchor {a.ndim}D, positive {pos.ndim}D, and negative "
                           f"{neg.ndim}D inputs")
    d_pos = pairwise_distance(a, pos, p, eps)
    d_neg = pairwise_distance(a, neg, p, eps)
    if swap:
        d_neg = op.minimum(d_neg, pairwise_distance(pos, neg, p, eps))
    return _reduce(op.clamp(d_pos - d_neg + float(margin), lo=0.0), reduction)


@_public(functional="poisson_nll_loss")  # torch.poisson_nll_loss: another signature
def poisson_nll_loss(input: Tensor, target, log_input: bool = True, full: bool = False, size_average=None,
                     eps: float = 1e-8, reduce=None, reduction: str = "mean") -> Tensor:
    """Poisson negative log likelihood: ``exp(input) - target * input`` (``log_input``), else
    ``input - target * log(input + eps)``; ``full`` adds Stirling's term where target > 1.

    >>> import ggmlgrad as gg, ggmlgrad.nn.functional as F
    >>> F.poisson_nll_loss(gg.tensor([0.0]), gg.tensor([1.0])).item()
    1.0
    """
    fn = "poisson_nll_loss"
    reduction = legacy_reduction(size_average, reduce, reduction)
    _check_reduction(fn, reduction)
    input = _input(fn, input)
    t = _float(fn, "target", target, input)
    if log_input:
        loss = op.exp(input) - t * input
    else:
        loss = input - t * op.log(input + float(eps))
    if full:
        big = t > 1.0
        ts = where(big, t, 2.0)   # the term's logs read only targets > 1 (no -inf * 0 in the gradient)
        stirling = ts * op.log(ts) - ts + op.log(ts * (2.0 * math.pi)) * 0.5
        loss = loss + where(big, stirling, 0.0)
    return _reduce(loss, reduction)


def _check_nonnegative(fn: str, var: Tensor) -> None:
    """torch's ``ValueError("var has negative entry/entries")``: read now when ``var`` is computed
    (eager mode, a graph-mode leaf); a pending ``var`` (graph mode) or a capture recording queues a
    check verified after the compute (an IndexError/RuntimeError at the sync point, as the other
    value checks)."""
    if var.numel() == 0:
        return
    if active_observer() is None and var._status == COMPUTED:
        if (download(var, f"{fn} var check") < 0).any():
            raise ValueError("var has negative entry/entries")
        return
    with no_grad():
        flag = op.cast(var < 0.0, dtype=int32)
    check_values(fn, flag, 0, 0, f"{fn}: var has negative entry/entries")


@_public(functional="gaussian_nll_loss")
def gaussian_nll_loss(input: Tensor, target, var, full: bool = False, eps: float = 1e-6,
                      reduction: str = "mean") -> Tensor:
    """Gaussian negative log likelihood ``0.5 * (log(var) + (input - target)^2 / var)`` (+ 0.5 log 2 pi
    with ``full``). ``var`` has the input's shape, or one axis fewer (the last), or one axis of size 1,
    or is a float; it is raised to ``eps`` without gradient, as torch.

    >>> import ggmlgrad as gg, ggmlgrad.nn.functional as F
    >>> F.gaussian_nll_loss(gg.tensor([1.0]), gg.tensor([1.0]), gg.tensor([1.0])).item()
    0.0
    """
    fn = "gaussian_nll_loss"
    input = _input(fn, input)
    t = _float(fn, "target", target, input)
    if isinstance(var, (int, float)) and not isinstance(var, bool):
        if var < 0:
            raise ValueError("var has negative entry/entries")
        var = op.fill_like(input, c=float(var))
    var = _float(fn, "var", var, input)
    _check_nonnegative(fn, var)
    vs, xs = tuple(var.shape), tuple(input.shape)
    if vs != xs:
        if xs[:-1] == vs:
            var = var.reshape(vs + (1,))
        elif not (len(xs) == len(vs) and sum(b for a, b in zip(xs, vs) if a != b) == 1):
            raise ValueError("var is of incorrect size")
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"{reduction} is not valid")
    var = var + (op.clamp(var, lo=float(eps)) - var).detach()   # the raise carries no gradient (torch)
    loss = (op.log(var) + op.square(input - t) / var) * 0.5
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction)
