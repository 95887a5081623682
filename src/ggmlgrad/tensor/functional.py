"""Function forms of the ops: ``gg.exp(x)``, ``gg.matmul(a, b)``, ``gg.sum(x, axis=1)``, ..."""
from __future__ import annotations

from ..engine.dtypes import double, float64, int64, long
from ..ops import op
from .tensor import Tensor, _keepdim, floor_divide, remainder, add, as_tensor, binary_extreme, clamp, compare, div, mul, pow, sub, where

__all__ = ["add", "sub", "mul", "div", "pow", "floor_divide", "remainder", "floor", "matmul", "exp", "log", "sqrt", "abs", "neg", "square",
           "sum", "mean", "reshape", "permute", "transpose", "relu", "tanh", "sigmoid", "linear", "sign",
           # comparisons, selection
           "lt", "le", "gt", "ge", "eq", "ne", "clamp", "clip", "maximum", "minimum", "where",
           # reductions
           "max", "min", "amax", "amin", "argmax", "argmin", "var", "std", "logsumexp",
           # activations
           "leaky_relu", "gelu", "silu", "softplus", "elu", "softmax", "log_softmax",
           # torch's wider dtype names: the same dtype objects as float32 / int32 (engine/dtypes.py)
           "float64", "double", "int64", "long"]


def matmul(a, b) -> Tensor:
    """NumPy ``@`` semantics: 1-D, 2-D and batched with broadcast batch dims."""
    a = as_tensor(a)
    return op.matmul(a, as_tensor(b, device=a.device))


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``x @ weight.T + bias`` (weight is (out_features, in_features), as in PyTorch)."""
    return op.linear(x, weight, bias) if bias is not None else op.linear(x, weight)


def exp(x: Tensor) -> Tensor:
    return op.exp(x)


def log(x: Tensor) -> Tensor:
    return op.log(x)


def sqrt(x: Tensor) -> Tensor:
    return op.sqrt(x)


def abs(x: Tensor) -> Tensor:  # noqa: A001
    return op.abs(x)


def neg(x: Tensor) -> Tensor:
    return op.neg(x)


def sign(x: Tensor) -> Tensor:
    return op.sign(x)


def square(x: Tensor) -> Tensor:
    return op.square(x)


def sum(x: Tensor, axis=None, keepdim: bool = False, dim=None, *, keepdims=None) -> Tensor:  # noqa: A001
    """Sum over all or given axes; ``keepdims`` is NumPy's spelling of ``keepdim``.

    >>> import ggmlgrad as gg
    >>> gg.sum(gg.ones(2, 3), axis=0, keepdims=True).shape
    (1, 3)
    """
    return x.sum(axis=axis, keepdim=_keepdim(keepdim, keepdims), dim=dim)


def mean(x: Tensor, axis=None, keepdim: bool = False, dim=None, *, keepdims=None) -> Tensor:
    return x.mean(axis=axis, keepdim=_keepdim(keepdim, keepdims), dim=dim)


def reshape(x: Tensor, shape) -> Tensor:
    return x.reshape(shape)


def permute(x: Tensor, axes) -> Tensor:
    return x.permute(axes)


def transpose(x: Tensor, dim0: int = -2, dim1: int = -1) -> Tensor:
    axes = list(range(x.ndim))
    axes[dim0], axes[dim1] = axes[dim1], axes[dim0]
    return x.permute(axes)


def relu(x: Tensor) -> Tensor:
    return op.relu(x)


def tanh(x: Tensor) -> Tensor:
    return op.tanh(x)


def sigmoid(x: Tensor) -> Tensor:
    return op.sigmoid(x)


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


def amax(x: Tensor, dim=None, keepdim: bool = False, *, axis=None, keepdims=None) -> Tensor:
    """Max over all or given axes (values only); ties share the gradient evenly."""
    return x.amax(dim, _keepdim(keepdim, keepdims), axis=axis)


def amin(x: Tensor, dim=None, keepdim: bool = False, *, axis=None, keepdims=None) -> Tensor:
    return x.amin(dim, _keepdim(keepdim, keepdims), axis=axis)


def argmax(x: Tensor, dim=None, keepdim: bool = False, *, axis=None, keepdims=None) -> Tensor:
    """int32 index of the first maximum along ``dim`` (flattened when None)."""
    return x.argmax(dim, _keepdim(keepdim, keepdims), axis=axis)


def argmin(x: Tensor, dim=None, keepdim: bool = False, *, axis=None, keepdims=None) -> Tensor:
    return x.argmin(dim, _keepdim(keepdim, keepdims), axis=axis)


def var(x: Tensor, dim=None, *, correction=None, keepdim: bool = False, unbiased=None, axis=None,
        keepdims=None) -> Tensor:
    """Variance over all or given axes; ``correction`` defaults to 1 (torch.var)."""
    return x.var(dim, correction=correction, keepdim=_keepdim(keepdim, keepdims), unbiased=unbiased,
                 axis=axis)


def std(x: Tensor, dim=None, *, correction=None, keepdim: bool = False, unbiased=None, axis=None,
        keepdims=None) -> Tensor:
    return x.std(dim, correction=correction, keepdim=_keepdim(keepdim, keepdims), unbiased=unbiased,
                 axis=axis)


def logsumexp(x: Tensor, dim=None, keepdim: bool = False, *, axis=None, keepdims=None) -> Tensor:
    """log(sum(exp(x))) over all or given axes, computed stably."""
    return x.logsumexp(dim, _keepdim(keepdim, keepdims), axis=axis)


# ---------------------------------------------------------------------- activations
def leaky_relu(x: Tensor, negative_slope: float = 0.01) -> Tensor:
    return op.leaky_relu(x, negative_slope=negative_slope)


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """GELU, exact (erf) or ``approximate="tanh"``, as torch.nn.functional.gelu."""
    return op.gelu(x, approximate=approximate)


def silu(x: Tensor) -> Tensor:
    return op.silu(x)


def softplus(x: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    return op.softplus(x, beta=beta, threshold=threshold)


def elu(x: Tensor, alpha: float = 1.0) -> Tensor:
    return op.elu(x, alpha=alpha)


def softmax(x: Tensor, dim: int | None = None, *, axis=None) -> Tensor:
    """Softmax along any axis (default the last).

    >>> import ggmlgrad as gg
    >>> gg.softmax(gg.tensor([[0.0, 0.0]]), dim=1).tolist()
    [[0.5, 0.5]]
    """
    return x.softmax(dim, axis=axis)


def log_softmax(x: Tensor, dim: int | None = None, *, axis=None) -> Tensor:
    """x - logsumexp(x) along any axis (stable)."""
    return x.log_softmax(dim, axis=axis)


def floor(x: Tensor) -> Tensor:
    """Round toward -inf (no gradient flows through it)."""
    return op.floor(x)
