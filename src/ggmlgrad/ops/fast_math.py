"""exp, tanh, sigmoid, GELU, ELU and softplus nodes: ggmlgrad's vectorised kernels where built, else ggml's.

ggml's CPU kernels for these call libm once per element (tanh about 40x a ReLU); the fast build's
kernels (:mod:`.._ggml.kernels`) run them at SIMD speed with NaN/Inf as torch. They are CPU code,
so a ggml with a GPU device keeps ggml's own nodes (a custom op would pull the graph to the CPU).
"""
from __future__ import annotations

from .._ggml import lib
from .._ggml.kernels import KERNELS, custom_binary, custom_unary
from ..runtime import devices


def _use_kernels() -> bool:
    return bool(KERNELS) and all(d.kind == "cpu" for d in devices())


ACTIVE = _use_kernels()


def exp(ctx: int, x: int) -> int:
    return custom_unary(ctx, x, "exp") if ACTIVE else lib.exp(ctx, x)


def tanh(ctx: int, x: int) -> int:
    return custom_unary(ctx, x, "tanh") if ACTIVE else lib.tanh(ctx, x)


def sigmoid(ctx: int, x: int) -> int:
    return custom_unary(ctx, x, "sigmoid") if ACTIVE else lib.sigmoid(ctx, x)


def elu(ctx: int, x: int) -> int:
    """ELU with alpha 1."""
    return custom_unary(ctx, x, "elu") if ACTIVE else lib.elu(ctx, x)


def softplus(ctx: int, x: int) -> int:
    """log(1 + exp(x)) (ggml's own switches to x above 20, where the two agree in float32)."""
    return custom_unary(ctx, x, "softplus") if ACTIVE else lib.softplus(ctx, x)


def relu(ctx: int, x: int) -> int:
    """max(x, 0) keeping NaN, one node; kernels only (ggml's relu turns NaN into 0)."""
    return custom_unary(ctx, x, "relu")


def relu_grad(ctx: int, g: int, y: int) -> int:
    """g where relu's output y is not <= 0 (NaN passes g), one node; kernels only. g and y must have
    the same shape with contiguous rows."""
    return custom_binary(ctx, g, y, "relu_grad")


def gelu_tanh(ctx: int, x: int) -> int:
    """GELU's tanh approximation, x * sigmoid(2 sqrt(2/pi) (x + 0.044715 x^3)); kernels only."""
    return custom_unary(ctx, x, "gelu_tanh")


def gelu_erf(ctx: int, x: int) -> int:
    return custom_unary(ctx, x, "gelu_erf") if ACTIVE else lib.gelu_erf(ctx, x)


def gelu_erf_grad(ctx: int, x: int) -> int:
    """d/dx of x Phi(x), i.e. Phi(x) + x phi(x); kernels only."""
    return custom_unary(ctx, x, "gelu_erf_grad")


def tanh_backward(ctx: int, g: int, y: int) -> int:
    """g * (1 - y^2) from tanh's output y, one node; kernels only (same-shape g and y, contiguous rows)."""
    return custom_binary(ctx, g, y, "tanh_backward")


def gelu_erf_backward(ctx: int, g: int, x: int) -> int:
    """g * (Phi(x) + x phi(x)), the exact GELU's backward in one node; kernels only (as tanh_backward)."""
    return custom_binary(ctx, g, x, "gelu_erf_backward")


def gelu_tanh_backward(ctx: int, g: int, x: int) -> int:
    """g times the tanh-form GELU's derivative at x, one node; kernels only (as tanh_backward)."""
    return custom_binary(ctx, g, x, "gelu_tanh_backward")
