"""``gg.nn.functional`` (import as ``F``): layer functions and losses, all built from graph ops.

Nothing here reads values back to the host, with one exception shared with the
indexing ops: in eager mode integer class targets (and ``one_hot`` classes) are
checked against the number of classes (a counted download); in graph mode and
inside a capture a one-value check node is verified after the compute instead.
A target outside ``[0, C)`` that is not ``ignore_index`` is an ``IndexError``
naming the function and the value in every mode (see ``ops/indexing.py``).

Differences from PyTorch (documented):
- masks: a NumPy bool array or an int32 tensor is a *boolean* mask; a float
  tensor is an *additive* mask (ggmlgrad has no bool dtype);
- targets of ``cross_entropy`` get no gradient (those of
  ``binary_cross_entropy_with_logits`` do, as torch's);
- ``one_hot`` returns float32 (PyTorch: int64).

Attention: ``scaled_dot_product_attention`` (and ``MultiheadAttention`` with
``need_weights=False``) runs its forward on ggml's ``flash_attn_ext`` when the
mask is absent or boolean (its 0/-inf form is exact in the kernel's float16
mask); float masks and returned attention weights use matmul + fused masked
softmax. The backward is always composed from matmuls and the softmax
gradient (``ggml_flash_attn_back`` takes no mask and is marked unfinished in
ggml 0.20). ``ggmlgrad.ops.nn_ops.FLASH_ATTENTION = False`` turns flash off.

>>> import ggmlgrad as gg
>>> import ggmlgrad.nn.functional as F
>>> logits = gg.tensor([[2.0, 0.0, -1.0]], requires_grad=True)
>>> loss = F.cross_entropy(logits, gg.tensor([0]))
>>> round(loss.item(), 4)
0.1698
"""
from __future__ import annotations

import math

import numpy as np

from ..engine import COMPUTED, ENGINE, active_observer, download, float32, int32
from ..engine.errors import DTypeError, ShapeError
from ..ops import nn_ops, op
from ..ops.indexing import check_values
from ..ops.registry import same_float
from ..tensor import Tensor, as_tensor, is_grad_enabled, no_grad, tensor
from ..ops.decl import public as _public
from ..tensor.surfaces import functional_entries, install_functions as _install_functions
from ..distributions.noise import draw_noise
from . import conv_functional as _conv_functional  # noqa: F401  (conv, pooling, pad, interpolate: public())

# linear (tensor/functional.py) and relu, tanh, sigmoid, gelu, silu, leaky_relu, softplus, elu, softmax,
# log_softmax (generated from the op declarations: every op whose declaration exposes "nn.functional",
# see ops/decl.py); the composites below declare their names with ops/decl.py's public().
_GENERATED = functional_entries()
globals().update(_GENERATED)
__all__ = sorted(_GENERATED)

_REDUCTIONS = ("none", "mean", "sum")


# ---------------------------------------------------------------- dropout, normalisation, embedding
@_public(functional="dropout")
def dropout(input: Tensor, p: float = 0.5, training: bool = True) -> Tensor:
    """Zero each element with probability ``p`` and scale the rest by 1/(1-p); identity when not training.

    The mask comes from :func:`ggmlgrad.distributions.noise.draw_noise` (seeded generator), as a tensor.

    >>> import ggmlgrad as gg
    >>> import ggmlgrad.nn.functional as F
    >>> F.dropout(gg.ones(3), p=0.5, training=False).tolist()
    [1.0, 1.0, 1.0]
    """
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: probability must be in [0, 1], got {p!r}")
    if not training or p == 0.0:
        return input
    if p == 1.0:
        return input * 0.0
    mask = draw_noise("dropout_mask", input.shape, device=input.device, p=float(p))
    return input * mask


@_public(functional="layer_norm")
def layer_norm(input: Tensor, normalized_shape, weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5) -> Tensor:
    """Normalise over the trailing ``normalized_shape`` axes, then ``* weight + bias``.

    >>> import ggmlgrad as gg
    >>> import ggmlgrad.nn.functional as F
    >>> [round(v, 3) for v in F.layer_norm(gg.tensor([1.0, 3.0]), 2).tolist()]
    [-1.0, 1.0]
    """
    ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if not ns or tuple(input.shape[len(input.shape) - len(ns):]) != ns:
        raise ShapeError(f"layer_norm: normalized_shape {ns} does not match the trailing axes of {input.shape}")
    x = input
    if len(ns) > 1:
        x = x.reshape(tuple(input.shape[:-len(ns)]) + (math.prod(ns),))
    y = op.layer_norm(x, eps=float(eps))
    if len(ns) > 1:
        y = y.reshape(input.shape)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


@_public(functional="normalize")
def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
    """``x / max(||x||_p, eps)`` along ``dim`` (default 1, as torch).

    >>> import ggmlgrad as gg
    >>> import ggmlgrad.nn.functional as F
    >>> [round(v, 4) for v in F.normalize(gg.tensor([3.0, 4.0]), dim=0).tolist()]
    [0.6, 0.8]
    """
    norm = _functional_loss._vector_norm(input, float(p), dim, True)   # p = inf too; gradient 0 at a zero norm
    return input / op.clamp(norm, lo=eps)


@_public(functional="embedding")
def embedding(input: Tensor, weight: Tensor) -> Tensor:
    """Rows of ``weight`` picked by the int32 ``input`` indices (gradients of repeated rows add up).

    >>> import ggmlgrad as gg
    >>> import ggmlgrad.nn.functional as F
    >>> F.embedding(gg.tensor([2, 0]), gg.eye(3)).tolist()
    [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]
    """
    return op.embedding(weight, _index(input))


@_public(functional="one_hot")
def one_hot(tensor_: Tensor, num_classes: int = -1) -> Tensor:
    """One-hot rows as int32 (torch: int64, which is int32 here by the dtype rule; ``.float()`` for
    arithmetic, or multiply: int32 * float32 is float32, as in torch).

    ``num_classes=-1`` infers ``max + 1`` from the data: a host read (a sync point in graph mode, as
    ``.item()``; inside ``gg.capture`` a ``CaptureError``: pass ``num_classes``).

    >>> import ggmlgrad as gg
    >>> import ggmlgrad.nn.functional as F
    >>> F.one_hot(gg.tensor([0, 2]), 3).tolist(), F.one_hot(gg.tensor([1])).dtype
    ([[1, 0, 0], [0, 0, 1]], ggmlgrad.int32)
    """
    idx = _index(tensor_)
    if num_classes == -1:
        if not idx.numel_:
            raise ShapeError("one_hot: cannot infer the number of classes from an empty tensor; pass num_classes")
        num_classes = int(download(idx, "one_hot num_classes").max()) + 1
    if not isinstance(num_classes, bool) and isinstance(num_classes, int) and num_classes >= 1:
        check_values("one_hot", idx, 0, num_classes - 1,
                     f"one_hot: class {{}} is out of range for num_classes={num_classes} (class values must "
                     f"be in [0, {num_classes - 1}])")
    return op.cast(op.one_hot(idx, num_classes=num_classes), dtype=int32)


def _index(x) -> Tensor:
    if isinstance(x, Tensor):
        if x.dtype is not int32:
            raise DTypeError(f"expected an int32 index tensor, got {x.dtype.name}")
        return x
    arr = np.asarray(x)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"expected integer indices, got {arr.dtype}")
    return tensor(arr.astype(np.int32), dtype=int32)


# ---------------------------------------------------------------- attention
def _as_additive(mask, true_means_masked: bool, device) -> Tensor:
    """A float additive mask (0 or -inf) from a bool array / int32 tensor, or a float tensor as is."""
    if isinstance(mask, Tensor):
        if mask.dtype.is_float:
            return mask if mask.dtype is float32 else mask.float()
        m = op.step(op.add_scalar(op.abs(mask.float()), c=-0.5))   # int32: nonzero = True → 1.0
        keep = (-m + 1.0) if true_means_masked else m     # 1 where attention is allowed
        return op.log(keep)                                # 0 or -inf, no 0 * inf
    arr = np.asarray(mask)
    if arr.dtype == np.bool_:
        allowed = ~arr if true_means_masked else arr
        return tensor(np.where(allowed, 0.0, -np.inf).astype(np.float32), device=device)
    return as_tensor(arr.astype(np.float32), device=device)


def _is_binary_mask(mask) -> bool:
    """True when the mask is boolean (its additive form is 0/-inf, exact in flash attention's float16)."""
    if mask is None:
        return True
    if isinstance(mask, Tensor):
        return not mask.dtype.is_float
    return np.asarray(mask).dtype == np.bool_


@_public(functional="scaled_dot_product_attention")
def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask=None,
                                 dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False, *, training: bool = True) -> Tensor:
    """softmax(Q K^T * scale + mask) V over inputs shaped (..., L, E) with at most 2 leading axes.

    ``attn_mask``: bool (True = may attend, as PyTorch) as a NumPy array or int32 tensor, or a float
    tensor added to the scores; broadcast to (batch, heads, L, S). ``is_causal`` masks j > i.
    The forward runs ggml's flash attention for no / boolean masks (float masks: matmul + softmax);
    with ``dropout_p > 0`` the weights are materialised so the dropout mask can be applied.
    ``enable_gqa``: grouped-query attention, key/value with fewer heads (dim -3) than the query, each
    shared by ``query heads / key heads`` consecutive query heads (torch's rule).

    >>> import ggmlgrad as gg
    >>> import ggmlgrad.nn.functional as F
    >>> q = gg.ones(1, 2, 4)
    >>> F.scaled_dot_product_attention(q, q, q).shape
    (1, 2, 4)
    """
    if query.ndim < 2 or query.ndim > 4:
        raise ShapeError(f"scaled_dot_product_attention: query must have 2 to 4 dimensions, got {query.shape}")
    if key.ndim != query.ndim or value.ndim != query.ndim:
        raise ShapeError(f"scaled_dot_product_attention: query, key, value need the same number of dimensions, "
                         f"got {query.shape}, {key.shape}, {value.shape}")
    if is_causal and attn_mask is not None:
        raise ValueError("scaled_dot_product_attention: pass either attn_mask or is_causal, not both (as PyTorch)")
    if enable_gqa and query.ndim >= 3 and key.shape[-3] != query.shape[-3]:
        hq, hk = query.shape[-3], key.shape[-3]
        if hk == 0 or hq % hk or value.shape[-3] != hk:
            raise ValueError(f"scaled_dot_product_attention: with enable_gqa the query heads ({hq}) must be a "
                             f"multiple of the key/value heads ({hk}, {value.shape[-3]})")
        from .utils.rnn import take   # same layer: slices + concat, no index upload
        shared = [h for h in range(hk) for _ in range(hq // hk)]
        key, value = take(key, shared, key.ndim - 3), take(value, shared, value.ndim - 3)
    e = query.shape[-1]
    sc = 1.0 / math.sqrt(e) if scale is None else float(scale)
    lead = query.shape[:-2]
    pad = (1,) * (4 - query.ndim)

    def four(t):
        return t if t.ndim == 4 else t.reshape(pad + tuple(t.shape))

    q, k, v = four(query), four(key), four(value)
    mask = ()
    if attn_mask is not None:
        m = _as_additive(attn_mask, true_means_masked=False, device=query.device)
        mask = (m,)
    exact = _is_binary_mask(attn_mask)
    if dropout_p > 0.0 and training:
        w = op.softmax(op.matmul(q, op.transpose_last(k)), *mask, scale=sc, causal=is_causal)
        out = op.matmul(dropout(w, dropout_p, True), v)
    else:
        out = op.attention(q, k, v, *mask, scale=sc, causal=is_causal, flash=exact)
    return out if query.ndim == 4 else out.reshape(tuple(lead) + tuple(out.shape[-2:]))


# ---------------------------------------------------------------- losses
def _reduce(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    if reduction == "mean":
        return loss.mean()
    raise ValueError(f"reduction must be one of {_REDUCTIONS}, got {reduction!r}")


def _check_reduction(fn: str, reduction) -> None:
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{fn}: reduction must be one of {_REDUCTIONS}, got {reduction!r}")


def _pair(fn: str, input: Tensor, target) -> tuple[Tensor, Tensor]:
    target = as_tensor(target, device=input.device)
    if target.shape != input.shape:
        raise ShapeError(f"{fn}: target shape {target.shape} must equal input shape {input.shape} "
                         f"(broadcasting is refused, as PyTorch warns it is usually a bug)")
    return input, target


@_public(functional="mse_loss")
def mse_loss(input: Tensor, target, reduction: str = "mean") -> Tensor:
    """mean((input - target)^2) (or sum / none).

    >>> import ggmlgrad as gg
    >>> import ggmlgrad.nn.functional as F
    >>> F.mse_loss(gg.tensor([1.0, 3.0]), gg.tensor([0.0, 0.0])).item()
    5.0
    """
    _check_reduction("mse_loss", reduction)
    input, target = _pair("mse_loss", input, target)
    return _reduce(op.square(input - target), reduction)


@_public(functional="l1_loss")
def l1_loss(input: Tensor, target, reduction: str = "mean") -> Tensor:
    """mean(|input - target|) (or sum / none).

    >>> import ggmlgrad as gg
    >>> import ggmlgrad.nn.functional as F
    >>> F.l1_loss(gg.tensor([1.0, -3.0]), gg.tensor([0.0, 0.0])).item()
    2.0
    """
    _check_reduction("l1_loss", reduction)
    input, target = _pair("l1_loss", input, target)
    return _reduce(op.abs(input - target), reduction)


@_public(functional="huber_loss")
def huber_loss(input: Tensor, target, reduction: str = "mean", delta: float = 1.0) -> Tensor:
    """0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta); d = input - target.

    >>> import ggmlgrad as gg
    >>> import ggmlgrad.nn.functional as F
    >>> F.huber_loss(gg.tensor([0.5, 3.0]), gg.tensor([0.0, 0.0]), reduction="sum").item()
    2.625
    """
    _check_reduction("huber_loss", reduction)
    if not delta > 0:
        raise ValueError(f"huber_loss: delta must be positive, got {delta}")
    input, target = _pair("huber_loss", input, target)
    a = op.abs(input - target)
    m = -op.relu(-a + delta) + delta            # min(|d|, delta), branch-free
    return _reduce(op.square(m) * 0.5 + (a - m) * delta, reduction)


@_public(functional="smooth_l1_loss")
def smooth_l1_loss(input: Tensor, target, reduction: str = "mean", beta: float = 1.0) -> Tensor:
    """huber_loss(delta=beta) / beta; plain L1 for beta = 0.

    >>> import ggmlgrad as gg
    >>> import ggmlgrad.nn.functional as F
    >>> F.smooth_l1_loss(gg.tensor([0.5, 3.0]), gg.tensor([0.0, 0.0]), reduction="sum", beta=1.0).item()
    2.625
    """
    _check_reduction("smooth_l1_loss", reduction)
    if beta < 0:
        raise ValueError(f"smooth_l1_loss: beta must be >= 0, got {beta}")
    if beta == 0:
        return l1_loss(input, target, reduction)
    return huber_loss(input, target, reduction, delta=beta) * (1.0 / beta)


@_public(functional="binary_cross_entropy_with_logits")
def binary_cross_entropy_with_logits(input: Tensor, target, weight: Tensor | None = None,
                                     reduction: str = "mean", pos_weight: Tensor | None = None) -> Tensor:
    """-[pos_weight * y log sigmoid(x) + (1 - y) log(1 - sigmoid(x))], stable for any |x|.

    >>> import ggmlgrad as gg
    >>> import ggmlgrad.nn.functional as F
    >>> round(F.binary_cross_entropy_with_logits(gg.tensor([0.0]), gg.tensor([1.0])).item(), 4)
    0.6931
    """
    _check_reduction("binary_cross_entropy_with_logits", reduction)
    input, target = _pair("binary_cross_entropy_with_logits", input, target)
    if isinstance(pos_weight, Tensor) and pos_weight.requires_grad and is_grad_enabled():
        raise RuntimeError("The function 'binary_cross_entropy_with_logits' is not differentiable with respect "
                           "to argument 'pos_weight'. This input cannot have requires_grad True.")
    args = (input, target) + ((as_tensor(pos_weight, device=input.device),) if pos_weight is not None else ())
    loss = op.bce_with_logits(*args)
    if weight is not None:
        loss = loss * as_tensor(weight, device=input.device)
    return _reduce(loss, reduction)


@_public(functional="binary_cross_entropy")
def binary_cross_entropy(input: Tensor, target, weight: Tensor | None = None, reduction: str = "mean") -> Tensor:
    """-[y log p + (1 - y) log(1 - p)] for probabilities p (logs clamped at -100, as PyTorch).

    An input value outside [0, 1] (or NaN) raises RuntimeError, as PyTorch, in every mode: at the
    call in eager mode, at the sync point in graph mode, and before the update in a captured step.

    >>> import ggmlgrad as gg, ggmlgrad.nn.functional as F
    >>> round(F.binary_cross_entropy(gg.tensor([0.5]), gg.tensor([1.0])).item(), 4)
    0.6931
    """
    _check_reduction("binary_cross_entropy", reduction)
    input, target = _pair("binary_cross_entropy", input, target)
    _check_probabilities("binary_cross_entropy", input)
    logp = op.clamp(op.log(input), lo=-100.0)
    log1mp = op.clamp(op.log(-input + 1.0), lo=-100.0)
    loss = -(target * logp + (-target + 1.0) * log1mp)
    if weight is not None:
        loss = loss * as_tensor(weight, device=input.device)
    return _reduce(loss, reduction)


def _check_probabilities(fn: str, input: Tensor) -> None:
    """Refuse values outside [0, 1] and NaN with a RuntimeError, as PyTorch, in every mode. A computed
    input is read now (eager mode; a graph-mode leaf): the message names the first bad value. A pending
    input (graph mode) or a capture recording queues a check of a 0/1 "bad" flag per element, verified
    after the compute like an index check (engine/checks.py): the same RuntimeError at the sync point,
    or before the optimizer update of a captured step."""
    if input.numel() == 0:
        return
    if active_observer() is None and input._status == COMPUTED:
        vals = download(input, f"{fn} input check")
        bad = vals[~((vals >= 0.0) & (vals <= 1.0))]
        if bad.size:
            raise RuntimeError(f"{fn}: all elements of input should be between 0 and 1 (found {float(bad[0]):g}; "
                               f"use binary_cross_entropy_with_logits on logits)")
        return
    with no_grad():
        inside = (input >= 0.0) * (input <= 1.0)          # NaN compares false: outside
        flag = op.cast(~inside, dtype=int32)                 # 1 where outside
    check_values(fn, flag, 0, 0, f"{fn}: all elements of input should be between 0 and 1 (or one is NaN; "
                                 f"use binary_cross_entropy_with_logits on logits)")


def _empty_batch_loss(fn: str, input: Tensor, target, reduction: str) -> Tensor | None:
    """The loss over zero samples, as PyTorch: mean → nan, sum → 0, none → empty; the gradient is an
    empty tensor of the input's shape. None when the batch is not empty (or has no classes)."""
    if input.ndim < 2 or input.numel() != 0 or input.shape[1] == 0:
        return None
    unreduced = input.shape[:1] + input.shape[2:]
    t_shape = tuple(target.shape) if isinstance(target, Tensor) else np.shape(target)
    if t_shape not in (unreduced, tuple(input.shape)):
        raise ShapeError(f"{fn}: target shape {t_shape} does not match the input {input.shape} (expected "
                         f"{unreduced} for class indices or {input.shape} for probabilities)")
    per_sample = input.sum(axis=1) * 0.0       # the unreduced loss's shape, connected to the input
    if reduction == "none":
        return per_sample
    total = per_sample.sum()
    return total * float("nan") if reduction == "mean" else total


def _class_last(input: Tensor) -> Tensor:
    """(N, C, d1, ...) → (N, d1, ..., C): PyTorch puts classes on axis 1."""
    if input.ndim <= 2:
        return input
    perm = (0,) + tuple(range(2, input.ndim)) + (1,)
    return input.permute(perm)


def _check_targets(fn: str, target: Tensor, num_classes: int, ignore_index: int | None) -> None:
    """Refuse class indices outside [0, C) other than ``ignore_index`` (an IndexError in every mode:
    read now in eager mode, checked after the compute in graph mode and capture)."""
    check_values(fn, target, 0, num_classes - 1,
                 f"{fn}: target {{}} is out of bounds for {num_classes} classes", ignore=ignore_index)


def _class_index(fn: str, logits: Tensor, target, ignore_index: int) -> Tensor:
    """Integer class targets as a checked int32 tensor of the logits' leading shape."""
    target = _index(target)
    expect = tuple(logits.shape[:-1])
    if tuple(target.shape) != expect:
        raise ShapeError(f"{fn}: target shape {target.shape} does not match the input (expected {expect})")
    _check_targets(fn, target, logits.shape[-1], ignore_index)
    return target


def _class_targets(fn: str, logits: Tensor, target, ignore_index: int):
    """One-hot targets (..., C) for integer class targets."""
    target = _class_index(fn, logits, target, ignore_index)
    return op.one_hot(target, num_classes=logits.shape[-1], ignore_index=ignore_index)


@_public(functional="cross_entropy")
def cross_entropy(input: Tensor, target, weight: Tensor | None = None, ignore_index: int = -100,
                  reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
    """Cross-entropy of logits ``input`` (N, C) / (C,) / (N, C, d...) against class indices or probabilities.

    Integer targets (int32 tensor or integer array): ``ignore_index`` rows count neither in the loss nor in
    the mean's denominator; ``weight`` (C,) rescales classes (mean divides by the summed target weights).
    Float targets of the input's shape are class probabilities. ``label_smoothing`` mixes the target with
    the uniform distribution, as PyTorch. A fused op computes the loss (stable log-softmax inside) and
    its gradient ``softmax(x) * sum(q) - q``.

    >>> import ggmlgrad as gg
    >>> import ggmlgrad.nn.functional as F
    >>> round(F.cross_entropy(gg.tensor([[0.0, 0.0]]), gg.tensor([1])).item(), 4)
    0.6931
    """
    _check_reduction("cross_entropy", reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1], got {label_smoothing}")
    if input.ndim == 0:
        raise ValueError("cross_entropy: input must have a class dimension")
    same_float("cross_entropy", input)   # before the targets' values: the same first error in every mode
    if (empty := _empty_batch_loss("cross_entropy", input, target, reduction)) is not None:
        return empty
    logits = _class_last(input)
    c = logits.shape[-1]
    is_class = (isinstance(target, Tensor) and target.dtype is int32) or (
        not isinstance(target, Tensor) and np.asarray(target).dtype.kind in "iu")
    w = as_tensor(weight, device=input.device) if weight is not None else None
    if w is not None and tuple(w.shape) != (c,):
        raise ShapeError(f"cross_entropy: weight must have shape ({c},), got {w.shape}")
    if is_class:
        if reduction == "mean" and w is None and label_smoothing == 0.0:
            # the common case as one op: no one-hot tensor of its own in the queue
            idx = _class_index("cross_entropy", logits, target, ignore_index)
            return op.softmax_cross_entropy_index_mean(logits, idx, ignore_index=ignore_index)
        oh = _class_targets("cross_entropy", logits, target, ignore_index)
        q = oh
        if label_smoothing > 0.0:
            valid = oh.sum(axis=-1, keepdim=True)                       # 0 on ignored rows
            q = oh * (1.0 - label_smoothing) + valid * (label_smoothing / c)
        if w is not None:
            q = q * w
        if reduction == "mean" and (w is None or label_smoothing == 0.0):
            # The denominator, sum of target weights over counted rows, is sum(q) here: one op.
            return op.softmax_cross_entropy_mean(logits, q, unit_rows=w is None)  # rows of q sum to 1 or 0
        loss = op.softmax_cross_entropy(logits, q)
        if reduction == "mean":
            denom = (oh * w).sum() if w is not None else oh.sum()
            return loss.sum() / denom
        return _reduce(loss, reduction)
    q = as_tensor(target, device=input.device)
    if q.dtype is not float32:
        q = q.float()
    q = _class_last(q) if input.ndim > 2 else q
    if tuple(q.shape) != tuple(logits.shape):
        raise ShapeError(f"cross_entropy: probability targets must have the input's shape {input.shape}, "
                         f"got {target.shape if hasattr(target, 'shape') else np.shape(target)}")
    if label_smoothing > 0.0:
        q = q * (1.0 - label_smoothing) + label_smoothing / c
    if w is not None:
        q = q * w
    return _reduce(op.softmax_cross_entropy(logits, q), reduction)


@_public(functional="nll_loss")
def nll_loss(input: Tensor, target, weight: Tensor | None = None, ignore_index: int = -100,
             reduction: str = "mean") -> Tensor:
    """-input[i, target[i]] (``input`` holds log-probabilities), with ``ignore_index`` and class weights.

    >>> import ggmlgrad as gg
    >>> import ggmlgrad.nn.functional as F
    >>> F.nll_loss(gg.tensor([[-1.0, -2.0]]), gg.tensor([1])).item()
    2.0
    """
    _check_reduction("nll_loss", reduction)
    if input.ndim == 0:
        raise ValueError("nll_loss: input must have a class dimension")
    same_float("nll_loss", input)        # before the targets' values: the same first error in every mode
    if (empty := _empty_batch_loss("nll_loss", input, target, reduction)) is not None:
        return empty
    logp = _class_last(input)
    c = logp.shape[-1]
    oh = _class_targets("nll_loss", logp, target, ignore_index)
    q = oh
    if weight is not None:
        w = as_tensor(weight, device=input.device)
        if tuple(w.shape) != (c,):
            raise ShapeError(f"nll_loss: weight must have shape ({c},), got {w.shape}")
        q = oh * w
    # -inf log-probabilities (masked classes) raised to float32's lowest: 0 * that is 0, not NaN.
    loss = -(op.clamp(logp, lo=nn_ops.F32_LOWEST) * q).sum(axis=-1)
    if reduction == "mean":
        return loss.sum() / q.sum()
    return _reduce(loss, reduction)


_ = nn_ops


# normalisation, activation, loss and distance composites of their own files (they declare their names
# with public() and read _reduce/_check_reduction above, so they are imported here)
from . import functional_act as _functional_act, functional_loss as _functional_loss  # noqa: E402,F401
from . import functional_norm as _functional_norm  # noqa: E402,F401

# every declared gg.nn.functional entry (these composites, linear, ...): ops/decl.py's public()
__all__ += [name for name in _install_functions(globals(), "functional") if name not in __all__]
