"""Function forms of the ops: ``gg.exp(x)``, ``gg.matmul(a, b)``, ``gg.sum(x, axis=1)``, ..."""
from __future__ import annotations

from ..ops import op
from .tensor import Tensor, add, as_tensor, div, mul, pow, sub

__all__ = ["add", "sub", "mul", "div", "pow", "matmul", "exp", "log", "sqrt", "abs", "neg", "square",
           "sum", "mean", "reshape", "permute", "transpose", "relu", "tanh", "sigmoid", "linear", "sign"]


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


def sum(x: Tensor, axis=None, keepdim: bool = False, dim=None) -> Tensor:  # noqa: A001
    return x.sum(axis=axis, keepdim=keepdim, dim=dim)


def mean(x: Tensor, axis=None, keepdim: bool = False, dim=None) -> Tensor:
    return x.mean(axis=axis, keepdim=keepdim, dim=dim)


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
