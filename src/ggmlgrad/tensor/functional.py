"""Function forms of the ops: ``gg.exp(x)``, ``gg.matmul(a, b)``, ``gg.sum(x, axis=1)``, ...

The one-op forms (``gg.exp``, ``gg.relu``, ``gg.softmax``, ...) are generated from the op
declarations (``tensor/surfaces.py``). The front ends written here dispatch on their arguments
before calling ops; each declares its public names once (``ops/decl.py``: :func:`public`), and
``tensor/surfaces.py`` installs it as the ``Tensor`` method/operator, ``gg.*`` function and
``gg.nn.functional`` entry it names (the arithmetic, clamp, maximum and where front ends are in
``tensor/tensor.py``; the shape ones in ``tensor/shape_methods.py`` and ``functional_shape.py``)."""
from __future__ import annotations

import operator as _operator

from ..engine.dtypes import double, float64, int64, long
from ..ops import op
from ..ops.decl import public
from ..ops.reduce import axis_of as _axis, keepdim_of as _keepdim
from .surfaces import functions, refuse_non_tensor
from .tensor import Tensor, compare, extreme

__all__ = [
    # torch's wider dtype names: the same dtype objects as float32 / int32 (engine/dtypes.py)
    "float64", "double", "int64", "long"]


@public(function="linear", functional="linear", call_plan=True)
def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``input @ weight.T + bias`` (weight is (out_features, in_features), as in PyTorch).

    >>> import ggmlgrad as gg
    >>> gg.linear(gg.ones(1, 3), gg.ones(2, 3), gg.tensor([0.5, -0.5])).tolist()
    [[3.5, 2.5]]
    """
    return op.linear(input, weight, bias) if bias is not None else op.linear(input, weight)


@public(function="reshape")
def reshape(input: Tensor, shape) -> Tensor:
    """torch.reshape: ``input.reshape(shape)`` (a view when the layout allows).

    >>> import ggmlgrad as gg
    >>> gg.reshape(gg.ones(2, 3), (3, 2)).shape
    (3, 2)
    """
    if not isinstance(input, Tensor):   # torch.reshape(ndarray) is a TypeError, not NumPy's reshape
        refuse_non_tensor("reshape", input)
    return input.reshape(shape)


@public(function="permute")
def permute(input: Tensor, axes) -> Tensor:
    """torch.permute: ``input.permute(axes)`` (a view).

    >>> import ggmlgrad as gg
    >>> gg.permute(gg.ones(2, 3, 4), (2, 0, 1)).shape
    (4, 2, 3)
    """
    if not isinstance(input, Tensor):   # torch.permute(ndarray) is a TypeError, not NumPy's permute
        refuse_non_tensor("permute", input)
    return input.permute(axes)


@public(function="transpose")
def transpose(input: Tensor, dim0: int = -2, dim1: int = -1) -> Tensor:
    """Swap dimensions ``dim0`` and ``dim1`` (by default the last two), a view.

    >>> import ggmlgrad as gg
    >>> gg.transpose(gg.ones(2, 3)).shape
    (3, 2)
    """
    if not isinstance(input, Tensor):
        refuse_non_tensor("transpose", input)
    axes = list(range(input.ndim))
    axes[dim0], axes[dim1] = axes[dim1], axes[dim0]
    return input.permute(axes)


# ---------------------------------------------------------------------- comparisons (bool results, no grad)
_SYMBOLS = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}


def _declare_comparison(kind: str) -> None:
    """``Tensor.<kind>``/``__<kind>__`` (NotImplemented for an operand it cannot compare, so Python
    tries the other operand's reflection) and ``gg.<kind>`` (a TypeError then)."""
    doc = (f"``input {_SYMBOLS[kind]} other`` elementwise as a bool tensor (no gradient). Built from "
           f"ggml's step(a - b): exact for finite values and infinities; a NaN operand gives False "
           f"(True for ne), as IEEE and torch.\n\n>>> import ggmlgrad as gg\n"
           f">>> gg.{kind}(gg.tensor([1.0, 3.0]), 2.0).tolist()\n"
           f"{[getattr(_operator, kind)(v, 2.0) for v in (1.0, 3.0)]}")

    def operator(input, other):
        return compare(input, other, kind)

    def function(input, other):
        r = compare(input, other, kind)
        if r is NotImplemented:
            raise TypeError(f"{kind}: cannot compare {type(input).__name__} with {type(other).__name__}")
        return r
    for fn in (operator, function):
        fn.__name__ = fn.__qualname__ = kind
        fn.__doc__ = doc
    public(method=kind, dunder=f"__{kind}__", call_plan=True)(operator)
    public(function=kind, call_plan=True)(function)


for _kind in _SYMBOLS:
    _declare_comparison(_kind)


# ---------------------------------------------------------------------- reductions
@public(method="max", function="max", call_plan=True)
def max(input: Tensor, dim=None, keepdim: bool = False, *, axis=None, keepdims=None):  # noqa: A001
    """torch.max: ``max(x)`` → 0-d; ``max(x, dim)`` → (values, indices); ``max(x, other)`` →
    elementwise maximum. For values over several axes use ``amax``.

    >>> import ggmlgrad as gg
    >>> gg.max(gg.tensor([[1.0, 5.0], [7.0, 2.0]]), dim=1).values.tolist()
    [5.0, 7.0]
    """
    try:
        return extreme(input, _axis(axis, dim), _keepdim(keepdim, keepdims), "max")
    except AttributeError:   # gg.max(ndarray / list): torch's TypeError
        refuse_non_tensor("max", input)
        raise


@public(method="min", function="min", call_plan=True)
def min(input: Tensor, dim=None, keepdim: bool = False, *, axis=None, keepdims=None):  # noqa: A001
    """torch.min: ``min(x)`` → 0-d; ``min(x, dim)`` → (values, indices); ``min(x, other)`` →
    elementwise minimum. For values over several axes use ``amin``.

    >>> import ggmlgrad as gg
    >>> gg.min(gg.tensor([[1.0, 5.0], [7.0, 2.0]]), dim=1).indices.tolist()
    [0, 1]
    """
    try:
        return extreme(input, _axis(axis, dim), _keepdim(keepdim, keepdims), "min")
    except AttributeError:   # gg.min(ndarray / list): torch's TypeError
        refuse_non_tensor("min", input)
        raise


@public(method="std", function="std")
def std(input: Tensor, dim=None, *, correction=None, keepdim: bool = False, unbiased=None, axis=None,
        keepdims=None) -> Tensor:
    """Standard deviation: the square root of ``var`` (same arguments; torch's default correction 1).

    >>> import ggmlgrad as gg
    >>> gg.std(gg.tensor([1.0, 3.0])).item()
    1.4142135381698608
    """
    if not isinstance(input, Tensor):
        refuse_non_tensor("std", input)
    return op.sqrt(input.var(dim, correction=correction, keepdim=_keepdim(keepdim, keepdims),
                             unbiased=unbiased, axis=axis))


# ---------------------------------------------------------------------- generated from the op declarations
# exp, log, sqrt, abs, neg, sign, square, floor, sin, cos, relu, tanh, sigmoid, silu, leaky_relu, gelu,
# softplus, elu, softmax, log_softmax, sum, mean, amax, amin, argmax, argmin, var, logsumexp, ...
# (every op whose declaration exposes a "function"; see ops/decl.py)
_GENERATED = functions()
globals().update(_GENERATED)
__all__ += sorted(_GENERATED)
