"""Function forms of the ops: ``gg.exp(x)``, ``gg.matmul(a, b)``, ``gg.sum(x, axis=1)``, ...

The one-op forms (``gg.exp``, ``gg.relu``, ``gg.softmax``, ...) are generated from the op
declarations (``tensor/surfaces.py``); the functions written here are composites that dispatch
on their arguments (scalars, int32 tensors, tensor bounds) before calling ops."""
from __future__ import annotations

from ..engine.dtypes import double, float64, int64, long
from ..ops import op
from .surfaces import functions
from .tensor import Tensor, _keepdim, floor_divide, remainder, add, as_tensor, binary_extreme, clamp, compare, div, mul, pow, sub, where

__all__ = ["add", "sub", "mul", "div", "pow", "floor_divide", "remainder", "matmul",
           "reshape", "permute", "transpose", "linear",
           # comparisons, selection
           "lt", "le", "gt", "ge", "eq", "ne", "clamp", "clip", "maximum", "minimum", "where",
           # reductions
           "max", "min", "std",
           # torch's wider dtype names: the same dtype objects as float32 / int32 (engine/dtypes.py)
           "float64", "double", "int64", "long"]


def matmul(a, b) -> Tensor:
    """NumPy ``@`` semantics: 1-D, 2-D and batched with broadcast batch dims."""
    a = as_tensor(a)
    return op.matmul(a, as_tensor(b, device=a.device))


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``x @ weight.T + bias`` (weight is (out_features, in_features), as in PyTorch)."""
    return op.linear(x, weight, bias) if bias is not None else op.linear(x, weight)


def reshape(x: Tensor, shape) -> Tensor:
    return x.reshape(shape)


def permute(x: Tensor, axes) -> Tensor:
    return x.permute(axes)


def transpose(x: Tensor, dim0: int = -2, dim1: int = -1) -> Tensor:
    axes = list(range(x.ndim))
    axes[dim0], axes[dim1] = axes[dim1], axes[dim0]
    return x.permute(axes)


# ---------------------------------------------------------------------- comparisons (float32 0/1, no grad)
def lt(a, b) -> Tensor:
    """``a < b`` elementwise as a bool tensor (no gradient). Built from ggml's step(a - b): exact for
    finite values and infinities; a NaN operand gives False (True for ne), as IEEE and torch.

    >>> import ggmlgrad as gg
    >>> gg.lt(gg.tensor([1.0, 3.0]), 2.0).tolist()
    [True, False]
    """
    return _compare(a, b, "lt")


def le(a, b) -> Tensor:
    return _compare(a, b, "le")


def gt(a, b) -> Tensor:
    return _compare(a, b, "gt")


def ge(a, b) -> Tensor:
    return _compare(a, b, "ge")


def eq(a, b) -> Tensor:
    return _compare(a, b, "eq")


def ne(a, b) -> Tensor:
    return _compare(a, b, "ne")


def _compare(a, b, kind: str) -> Tensor:
    r = compare(a, b, kind)
    if r is NotImplemented:
        raise TypeError(f"{kind}: cannot compare {type(a).__name__} with {type(b).__name__}")
    return r


clip = clamp


def maximum(a, b) -> Tensor:
    """Elementwise max with broadcasting; equal values share the gradient 0.5/0.5 and a NaN on
    either side propagates (torch)."""
    return binary_extreme(a, b, "maximum")


def minimum(a, b) -> Tensor:
    return binary_extreme(a, b, "minimum")


# ---------------------------------------------------------------------- reductions
def max(x: Tensor, dim=None, keepdim: bool = False, *, axis=None, keepdims=None):  # noqa: A001
    """torch.max: ``max(x)`` → 0-d; ``max(x, dim)`` → (values, indices); ``max(x, other)`` → maximum.

    >>> import ggmlgrad as gg
    >>> gg.max(gg.tensor([[1.0, 5.0], [7.0, 2.0]]), dim=1).values.tolist()
    [5.0, 7.0]
    """
    return x.max(dim, _keepdim(keepdim, keepdims), axis=axis)


def min(x: Tensor, dim=None, keepdim: bool = False, *, axis=None, keepdims=None):  # noqa: A001
    return x.min(dim, _keepdim(keepdim, keepdims), axis=axis)


def std(x: Tensor, dim=None, *, correction=None, keepdim: bool = False, unbiased=None, axis=None,
        keepdims=None) -> Tensor:
    return x.std(dim, correction=correction, keepdim=_keepdim(keepdim, keepdims), unbiased=unbiased,
                 axis=axis)


# ---------------------------------------------------------------------- generated from the op declarations
# exp, log, sqrt, abs, neg, sign, square, floor, sin, cos, relu, tanh, sigmoid, silu, leaky_relu, gelu,
# softplus, elu, softmax, log_softmax, sum, mean, amax, amin, argmax, argmin, var, logsumexp, ...
# (every op whose declaration exposes a "function"; see ops/decl.py)
_GENERATED = functions()
globals().update(_GENERATED)
__all__ += sorted(_GENERATED)
