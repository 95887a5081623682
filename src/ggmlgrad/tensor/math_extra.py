"""Front ends of the binary and fused math ops under torch's names: atan2 (arctan2), hypot,
logaddexp, fmod, lerp, addcmul, addcdiv, addmm, baddbmm.

The elementwise kernels are ops (``ops/math_extra.py``); the ones here are compositions of ops,
so their gradients are the ops' own (torch's formulas) and they run in every mode alike.
"""
from __future__ import annotations

import numbers

from ..engine import float32, int32
from ..engine.errors import DTypeError
from ..ops import op
from ..ops.decl import public
from .grad_mode import is_grad_enabled, no_grad
from .tensor import Tensor, _pair, _scalar, remainder, where

__all__: list[str] = []


def _tensors(name: str, input, other) -> tuple[Tensor, Tensor]:
    """Both operands as tensors on one device (a number becomes a 0-d tensor, as torch wraps it)."""
    if not isinstance(input, Tensor) and not isinstance(other, Tensor):
        raise TypeError(f"{name}: expected a Tensor, got {type(input).__name__} and {type(other).__name__}")
    return _pair(input, other)


@public(method=("atan2", "arctan2"), function=("atan2", "arctan2"), call_plan=True)
def atan2(input: Tensor, other: Tensor) -> Tensor:
    """The angle of the point (other, input) in radians, in [-pi, pi], elementwise with broadcasting;
    signed zeros and infinities give C's (torch's) results. int32/bool inputs give float32.

    >>> import ggmlgrad as gg
    >>> round(gg.atan2(gg.tensor([1.0]), gg.tensor([-1.0])).item(), 5)
    2.35619
    """
    return op.atan2(*_tensors("atan2", input, other))


@public(method="hypot", function="hypot", call_plan=True)
def hypot(input: Tensor, other: Tensor) -> Tensor:
    """sqrt(input**2 + other**2) elementwise without overflow (inf when either side is inf).

    >>> import ggmlgrad as gg
    >>> gg.hypot(gg.tensor([3.0]), gg.tensor([4.0])).tolist()
    [5.0]
    """
    return op.hypot(*_tensors("hypot", input, other))


@public(method="logaddexp", function="logaddexp", call_plan=True)
def logaddexp(input: Tensor, other: Tensor) -> Tensor:
    """log(exp(input) + exp(other)) elementwise, computed stably.

    >>> import ggmlgrad as gg
    >>> round(gg.logaddexp(gg.tensor([1000.0]), gg.tensor([1000.0])).item(), 3)
    1000.693
    """
    return op.logaddexp(*_tensors("logaddexp", input, other))


@public(method="fmod", function="fmod")
def fmod(input: Tensor, other) -> Tensor:
    """C's fmod elementwise: ``input - trunc(input / other) * other``, exact, with the sign of
    ``input`` (``remainder`` has the sign of ``other``). int32 stays int32 (a zero divisor raises,
    as torch); the gradient is torch's (1 for input, -trunc(input / other) for other).

    >>> import ggmlgrad as gg
    >>> gg.fmod(gg.tensor([-7.0, 7.0]), 3).tolist()
    [-1.0, 1.0]
    """
    if not isinstance(input, Tensor):
        raise TypeError(f"fmod: expected a Tensor, got {type(input).__name__}")
    if not isinstance(other, Tensor) and not _scalar(other):
        raise TypeError(f"fmod: other must be a Tensor or a number, got {type(other).__name__}")
    a, b = input.detach(), other.detach() if isinstance(other, Tensor) else other
    with no_grad():
        # fmod(a, b) is remainder(|a|, |b|) with a's sign: exact, and |a| where |a| < |b| (remainder
        # with mixed signs is a + b there, and fmod = remainder - b would cancel to 0 for a huge b)
        r = remainder(a.abs(), b.abs() if isinstance(b, Tensor) else abs(b))
        negative = a < 0
        if a.dtype is float32:
            negative = negative | ((a == 0) & (a.reciprocal() < 0))      # -0.0 too
        r = where(negative, -r, r)
    if not (is_grad_enabled() and (input.requires_grad or (isinstance(other, Tensor) and other.requires_grad))):
        return r
    with no_grad():
        q = op.trunc(a / b)
    return op.value_with_grad_of(r, input - q * other)


def _float_inputs(name: str, *xs) -> None:
    """lerp/addcdiv: torch has no integer kernel: a TypeError before any op (the same in every mode)."""
    for x in xs:
        if isinstance(x, Tensor) and x.dtype is not float32:
            raise DTypeError(f"{name}: not implemented for {x.dtype.name} tensors (as in torch); cast with .float()")


@public(method="lerp", function="lerp")
def lerp(input: Tensor, end: Tensor, weight) -> Tensor:
    """input + weight * (end - input), ``weight`` a number or a tensor (broadcasting), with torch's
    two-sided formula (``end - (end - input) * (1 - weight)`` where |weight| >= 0.5: exact at 1).

    >>> import ggmlgrad as gg
    >>> gg.lerp(gg.tensor([0.0, 10.0]), gg.tensor([10.0, 20.0]), 0.5).tolist()
    [5.0, 15.0]
    """
    _float_inputs("lerp", input, end, weight)
    if not isinstance(end, Tensor):
        raise TypeError(f"lerp: end must be a Tensor, got {type(end).__name__}")
    d = end - input
    if _scalar(weight):
        w = float(weight)
        return input + d * w if abs(w) < 0.5 else end - d * (1.0 - w)
    if not isinstance(weight, Tensor):
        raise TypeError(f"lerp: weight must be a number or a Tensor, got {type(weight).__name__}")
    return where(weight.abs() < 0.5, input + d * weight, end - d * (1 - weight))


def _value(name: str, value) -> float | int:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name}: value must be a number, got {value!r}")
    return value


@public(method="addcmul", function="addcmul")
def addcmul(input: Tensor, tensor1: Tensor, tensor2: Tensor, *, value=1) -> Tensor:
    """input + value * tensor1 * tensor2 (broadcasting).

    >>> import ggmlgrad as gg
    >>> gg.addcmul(gg.tensor([1.0]), gg.tensor([2.0]), gg.tensor([3.0]), value=0.5).tolist()
    [4.0]
    """
    v = _value("addcmul", value)
    prod = tensor1 * tensor2
    return input + (prod if v == 1 else prod * v)


@public(method="addcdiv", function="addcdiv")
def addcdiv(input: Tensor, tensor1: Tensor, tensor2: Tensor, *, value=1) -> Tensor:
    """input + value * tensor1 / tensor2 (broadcasting; integer tensor1 and tensor2 raise, as torch).

    >>> import ggmlgrad as gg
    >>> gg.addcdiv(gg.tensor([1.0]), gg.tensor([2.0]), gg.tensor([4.0]), value=2).tolist()
    [2.0]
    """
    v = _value("addcdiv", value)
    if all(isinstance(t, Tensor) and t.dtype is not float32 for t in (tensor1, tensor2)):
        raise TypeError("addcdiv: integer division with addcdiv is not supported (as torch); cast with .float()")
    q = tensor1 / tensor2
    return input + (q if v == 1 else q * v)


def _scaled_product(name: str, input: Tensor, a: Tensor, b: Tensor, beta, alpha, ndim: int) -> Tensor:
    """beta * input + alpha * (a @ b) with torch's checks; beta == 0 ignores input (NaN too)."""
    for t, what in ((a, "first"), (b, "second")):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name}: expected Tensors, got {type(t).__name__}")
        if t.ndim != ndim:
            raise ValueError(f"{name}: the {what} matrix must be {ndim}-D, got shape {tuple(t.shape)}")
    if ndim == 3 and a.shape[0] != b.shape[0]:
        raise ValueError(f"{name}: batch sizes differ: {tuple(a.shape)} and {tuple(b.shape)}")
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"{name}: shapes {tuple(a.shape)} and {tuple(b.shape)} cannot be multiplied")
    if a.dtype is int32 or b.dtype is int32:
        raise TypeError(f"{name}: integer matrices are not supported; cast with .float()")
    beta, alpha = _value(name, beta), _value(name, alpha)
    p = op.matmul(a, b)
    p = p if alpha == 1 else p * alpha
    out_shape = p.shape
    if not isinstance(input, Tensor):
        raise TypeError(f"{name}: input must be a Tensor, got {type(input).__name__}")
    try:
        input.broadcast_to(out_shape) if tuple(input.shape) != tuple(out_shape) else None
    except (ValueError, RuntimeError):
        raise ValueError(f"{name}: input of shape {tuple(input.shape)} does not broadcast to {tuple(out_shape)}") from None
    if beta == 0:
        return p
    return p + (input if beta == 1 else input * beta)


@public(method="addmm", function="addmm")
def addmm(input: Tensor, mat1: Tensor, mat2: Tensor, *, beta=1, alpha=1) -> Tensor:
    """beta * input + alpha * (mat1 @ mat2) for 2-D mat1, mat2; input broadcasts to the product.

    >>> import ggmlgrad as gg
    >>> gg.addmm(gg.zeros(2, 2), gg.ones(2, 3), gg.ones(3, 2), alpha=0.5).tolist()
    [[1.5, 1.5], [1.5, 1.5]]
    """
    return _scaled_product("addmm", input, mat1, mat2, beta, alpha, 2)


@public(method="baddbmm", function="baddbmm")
def baddbmm(input: Tensor, batch1: Tensor, batch2: Tensor, *, beta=1, alpha=1) -> Tensor:
    """beta * input + alpha * (batch1 @ batch2) for 3-D batches of matrices.

    >>> import ggmlgrad as gg
    >>> gg.baddbmm(gg.ones(1, 2, 2), gg.ones(1, 2, 3), gg.ones(1, 3, 2), beta=0).tolist()
    [[[3.0, 3.0], [3.0, 3.0]]]
    """
    return _scaled_product("baddbmm", input, batch1, batch2, beta, alpha, 3)
