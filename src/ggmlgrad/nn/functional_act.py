"""Activations and channel dropouts of ``gg.nn.functional``: ``prelu``, ``mish``, ``hardtanh``, ``relu6``,
``hardswish``, ``hardsigmoid``, ``logsigmoid``, ``glu``, ``softsign``, ``tanhshrink``, ``dropout1d``,
``dropout2d``, ``alpha_dropout``.

Each is composed from graph ops. The piecewise ones select their pieces with ``where``, so their
gradients at the kinks are torch's (``hardtanh``: 0 at min_val and max_val; ``hardswish``: 0 at
-3, 1 at 3) and a NaN input gives NaN (a comparison with NaN is false: the identity piece is taken).

>>> import ggmlgrad as gg, ggmlgrad.nn.functional as F
>>> F.relu6(gg.tensor([-1.0, 3.0, 7.0])).tolist()
[0.0, 3.0, 6.0]
"""
from __future__ import annotations

from ..distributions.noise import draw_noise
from ..engine import int32
from ..engine.errors import DTypeError, ShapeError
from ..ops import op
from ..ops.decl import public as _public
from ..tensor import Tensor
from ..tensor.tensor import where


def _float_input(fn: str, input) -> None:
    if not isinstance(input, Tensor):
        raise TypeError(f"{fn}: input must be a Tensor, got {type(input).__name__}")
    if not input.dtype.is_float:
        raise DTypeError(f"{fn}: expected a float32 input, got {input.dtype.name} (cast with .float())")


def _int_to_float(input):
    """An int32 tensor as float32 (torch's promotion for these float-only functions)."""
    return input.float() if isinstance(input, Tensor) and input.dtype is int32 else input


def _no_inplace(fn: str, inplace) -> None:
    if inplace:
        raise NotImplementedError(f"{fn}: inplace=True is not supported (ggmlgrad's activations make a new "
                                  f"tensor); use the default inplace=False")


def _real(fn: str, name: str, v) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"{fn}: {name} must be a real number, got {v!r}")
    return float(v)


# ---------------------------------------------------------------- piecewise activations
@_public(functional="hardtanh")
def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> Tensor:
    """``min_val`` below ``min_val``, ``max_val`` above ``max_val``, else x; the gradient is 1 strictly
    inside and 0 at and beyond the bounds (torch).

    >>> import ggmlgrad as gg, ggmlgrad.nn.functional as F
    >>> F.hardtanh(gg.tensor([-2.0, 0.5, 2.0])).tolist()
    [-1.0, 0.5, 1.0]
    """
    _no_inplace("hardtanh", inplace)
    lo, hi = _real("hardtanh", "min_val", min_val), _real("hardtanh", "max_val", max_val)
    if lo > hi:
        raise ValueError(f"hardtanh: min_val cannot be greater than max_val (got {lo} and {hi})")
    if isinstance(input, Tensor) and input.dtype is int32:   # torch clamps integers to the bounds cast to int
        return input.clamp(int(lo), int(hi))
    _float_input("hardtanh", input)
    return where(input <= lo, lo, where(input >= hi, hi, input))


@_public(functional="relu6")
def relu6(input: Tensor, inplace: bool = False) -> Tensor:
    """``hardtanh(x, 0, 6)`` (torch: gradient 0 at 0 and at 6).

    >>> import ggmlgrad as gg, ggmlgrad.nn.functional as F
    >>> F.relu6(gg.tensor([-1.0, 8.0])).tolist()
    [0.0, 6.0]
    """
    return hardtanh(input, 0.0, 6.0, inplace)


def _with_grad(value: Tensor, surrogate: Tensor) -> Tensor:
    """``value``'s values with ``surrogate``'s gradient (torch's conventions at kinks, NaN and inf,
    where the value's own formula would differentiate differently)."""
    if not surrogate.requires_grad:
        return value
    return op.value_with_grad_of(value.detach(), surrogate)


def _strictly_inside(x: Tensor, lo: float, hi: float):
    """(lo < x < hi as a bool mask, x there and 0 elsewhere): a branch fed with the second has a
    finite gradient everywhere (no 0 * inf or 0 * NaN leaking from the branch not taken)."""
    inside = (x > lo) & (x < hi)
    return inside, where(inside, x, 0.0)


@_public(functional="hardsigmoid")
def hardsigmoid(input: Tensor, inplace: bool = False) -> Tensor:
    """``clamp(x / 6 + 1/2, 0, 1)``; gradient 1/6 strictly between -3 and 3, else 0 (NaN too: torch).

    >>> import ggmlgrad as gg, ggmlgrad.nn.functional as F
    >>> F.hardsigmoid(gg.tensor([-4.0, 0.0, 4.0])).tolist()
    [0.0, 0.5, 1.0]
    """
    _float_input("hardsigmoid", input)
    _no_inplace("hardsigmoid", inplace)
    value = op.clamp(input * (1.0 / 6.0) + 0.5, lo=0.0, hi=1.0)
    inside, xm = _strictly_inside(input, -3.0, 3.0)
    return _with_grad(value, where(inside, xm * (1.0 / 6.0), 0.0))


@_public(functional="hardswish")
def hardswish(input: Tensor, inplace: bool = False) -> Tensor:
    """``x * clamp(x + 3, 0, 6) / 6`` (so -inf gives NaN, as torch); the gradient is torch's: 0 for
    x <= -3, ``x / 3 + 1/2`` strictly between -3 and 3, 1 for x >= 3 and NaN.

    >>> import ggmlgrad as gg, ggmlgrad.nn.functional as F
    >>> F.hardswish(gg.tensor([-4.0, 0.0, 4.0])).tolist()
    [-0.0, 0.0, 4.0]
    """
    _float_input("hardswish", input)
    _no_inplace("hardswish", inplace)
    value = input * (op.clamp(input + 3.0, lo=0.0, hi=6.0) * (1.0 / 6.0))   # scaled first: no overflow at 1e38
    inside, xm = _strictly_inside(input, -3.0, 3.0)
    surrogate = where(inside, xm * (xm + 3.0) * (1.0 / 6.0), where(input <= -3.0, 0.0, input))
    return _with_grad(value, surrogate)


@_public(function="prelu", method="prelu", functional="prelu")
def prelu(input: Tensor, weight: Tensor) -> Tensor:
    """x where x > 0, else weight * x; ``weight`` has 1 element or one per channel (axis 1 of the
    input; a 1-D input has one channel). The gradient at 0 is the weight (torch).

    >>> import ggmlgrad as gg, ggmlgrad.nn.functional as F
    >>> F.prelu(gg.tensor([-2.0, 3.0]), gg.tensor([0.25])).tolist()
    [-0.5, 3.0]
    """
    _float_input("prelu", input)
    if not isinstance(weight, Tensor) or weight.ndim > 1:
        raise ShapeError("prelu: weight must be a 1-D tensor (one value, or one per channel)")
    k = weight.numel()
    c = input.shape[1] if input.ndim >= 2 else 1
    if k != 1 and k != c:
        raise RuntimeError(f"prelu: Mismatch of parameter numbers and input channel size. Found parameter numbers "
                           f"= {k} and channel size = {c}.")
    if input.ndim >= 2:
        weight = weight.reshape((k,) + (1,) * (input.ndim - 2))
    elif input.ndim == 0:
        weight = weight.reshape(())
    return where(input > 0.0, input, input * weight)


# ---------------------------------------------------------------- smooth activations
@_public(functional="mish")
def mish(input: Tensor, inplace: bool = False) -> Tensor:
    """``x * tanh(softplus(x))``.

    >>> import ggmlgrad as gg, ggmlgrad.nn.functional as F
    >>> round(F.mish(gg.tensor([1.0])).item(), 4)
    0.8651
    """
    _float_input("mish", input)
    _no_inplace("mish", inplace)
    return input * op.tanh(op.softplus(input))


@_public(functional="logsigmoid")
def logsigmoid(input: Tensor) -> Tensor:
    """``log(sigmoid(x)) = -softplus(-x)``, stable for large |x|.

    >>> import ggmlgrad as gg, ggmlgrad.nn.functional as F
    >>> round(F.logsigmoid(gg.tensor([0.0])).item(), 4)
    -0.6931
    """
    _float_input("logsigmoid", input)
    return -op.softplus(-input)


@_public(functional="softsign")
def softsign(input: Tensor) -> Tensor:
    """``x / (1 + |x|)``.

    >>> import ggmlgrad as gg, ggmlgrad.nn.functional as F
    >>> F.softsign(gg.tensor([1.0, -3.0])).tolist()
    [0.5, -0.75]
    """
    input = _int_to_float(input)
    _float_input("softsign", input)
    return input / (op.abs(input) + 1.0)


@_public(functional="tanhshrink")
def tanhshrink(input: Tensor) -> Tensor:
    """``x - tanh(x)``.

    >>> import ggmlgrad as gg, ggmlgrad.nn.functional as F
    >>> F.tanhshrink(gg.tensor([0.0])).tolist()
    [0.0]
    """
    input = _int_to_float(input)
    _float_input("tanhshrink", input)
    return input - op.tanh(input)


@_public(functional="glu")
def glu(input: Tensor, dim: int = -1) -> Tensor:
    """``a * sigmoid(b)`` where a and b are the two halves of ``input`` along ``dim``.

    >>> import ggmlgrad as gg, ggmlgrad.nn.functional as F
    >>> F.glu(gg.tensor([[2.0, 0.0]])).tolist()
    [[1.0]]
    """
    _float_input("glu", input)
    if input.ndim == 0:
        raise RuntimeError("glu does not support scalars because halving size must be even")
    if isinstance(dim, bool) or not isinstance(dim, int) or not -input.ndim <= dim < input.ndim:
        raise IndexError(f"glu: dim {dim!r} is out of range for an input of {input.ndim} dimensions")
    d = dim % input.ndim
    if input.shape[d] % 2:
        raise RuntimeError(f"Halving dimension must be even, but dimension {d} is size {input.shape[d]}")
    a, b = input.chunk(2, d)
    return a * op.sigmoid(b)


# ---------------------------------------------------------------- channel and alpha dropout
def _probability(fn: str, p) -> float:
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
        raise ValueError(f"{fn}: dropout probability has to be between 0 and 1, but got {p!r}")
    return float(p)


def _feature_dropout(fn: str, input: Tensor, p: float, training: bool, inplace: bool, lead: int) -> Tensor:
    """Zero whole channels: one mask value per (sample, channel), i.e. per the first ``lead`` axes."""
    _float_input(fn, input)
    _no_inplace(fn, inplace)
    p = _probability(fn, p)
    if not training or p == 0.0:
        return input
    if p == 1.0:
        return input * 0.0
    shape = tuple(input.shape[:lead]) + (1,) * (input.ndim - lead)
    return input * draw_noise("dropout_mask", shape, device=input.device, p=p)


@_public(functional="dropout1d")
def dropout1d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero each channel of (N, C, L) or (C, L) with probability ``p``, scaling the rest by 1/(1-p).

    >>> import ggmlgrad as gg, ggmlgrad.nn.functional as F
    >>> F.dropout1d(gg.ones(2, 3, 4), 0.5, training=False).shape
    (2, 3, 4)
    """
    if isinstance(input, Tensor) and input.ndim not in (2, 3):
        raise RuntimeError(f"dropout1d: Expected 2D or 3D input, but received a {input.ndim}D input. Note that "
                           f"dropout1d exists to provide channel-wise dropout on inputs with 1 spatial dimension")
    return _feature_dropout("dropout1d", input, p, training, inplace, input.ndim - 1)


@_public(functional="dropout2d")
def dropout2d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero each channel of (N, C, H, W) or (C, H, W) with probability ``p``, scaling the rest by 1/(1-p).

    >>> import ggmlgrad as gg, ggmlgrad.nn.functional as F
    >>> F.dropout2d(gg.ones(2, 3, 4, 4), 0.5, training=False).shape
    (2, 3, 4, 4)
    """
    if isinstance(input, Tensor) and input.ndim not in (3, 4):
        raise RuntimeError(f"dropout2d: Expected 3D or 4D input, but received a {input.ndim}D input")
    return _feature_dropout("dropout2d", input, p, training, inplace, input.ndim - 2)


#: SELU's scale * alpha: the value alpha dropout gives dropped units (negated), as torch.
_SELU_NEG = 1.7580993408473766


@_public(functional="alpha_dropout")
def alpha_dropout(input: Tensor, p: float = 0.5, training: bool = False, inplace: bool = False) -> Tensor:
    """Dropout that keeps SELU's zero mean and unit variance: dropped units take ``-1.7581``, then an
    affine map ``a x + b`` restores the moments (torch's formula). Identity when not training.

    >>> import ggmlgrad as gg, ggmlgrad.nn.functional as F
    >>> F.alpha_dropout(gg.ones(3), 0.5).tolist()
    [1.0, 1.0, 1.0]
    """
    _float_input("alpha_dropout", input)
    _no_inplace("alpha_dropout", inplace)
    p = _probability("alpha_dropout", p)
    if not training or p == 0.0:
        return input
    if p == 1.0:
        return input * 0.0
    keep = op.step(draw_noise("dropout_mask", input.shape, device=input.device, p=p))   # 0 or 1
    a = 1.0 / ((_SELU_NEG ** 2 * p + 1.0) * (1.0 - p)) ** 0.5
    b = (keep - 1.0) * (_SELU_NEG * a) + _SELU_NEG * a * p
    return input * (keep * a) + b
