"""ggmlgrad's vectorised activation kernels as ggml custom ops.

``python -m ggmlgrad build`` compiles ``kernels/ggmlgrad_kernels.c`` beside the fast ggml. When
that library is present (and ``GGMLGRAD_KERNELS`` is not ``0``), :data:`KERNELS` maps each kernel
name (``exp``, ``tanh``, ``sigmoid``, ``gelu_tanh``, ``gelu_erf``, ``gelu_erf_grad``, ``gelu_tanh_grad``,
``elu``, ``softplus``, ``relu``; the two-input backward kernels ``relu_grad``, ``tanh_backward``,
``gelu_erf_backward``, ``gelu_tanh_backward``) to its C entry point, and :func:`custom_unary` /
:func:`custom_binary` put one into a graph as a ``ggml_map_custom1`` / ``ggml_map_custom2`` node. Without it the ops use
ggml's own (scalar libm) kernels; the results agree to float32 rounding.
"""
from __future__ import annotations

import ctypes
import os

from .api import TensorStruct, info, lib
from .loader import kernels_library

KERNEL_NAMES = ("exp", "tanh", "sigmoid", "gelu_tanh", "gelu_erf", "gelu_erf_grad", "gelu_tanh_grad", "elu",
                "softplus", "relu", "relu_grad", "tanh_backward", "gelu_erf_backward", "gelu_tanh_backward")
_ABI = 3
_ALL_THREADS = -1      # GGML_N_TASKS_MAX: every thread of the compute takes a slice


def _load() -> dict[str, int]:
    if os.environ.get("GGMLGRAD_KERNELS", "").strip() == "0":
        return {}
    path = kernels_library(info.directory)
    if path is None:
        return {}
    try:
        k = ctypes.CDLL(str(path))
        k.ggmlgrad_kernels_abi.restype = ctypes.c_int
        k.ggmlgrad_kernels_tensor_size.restype = ctypes.c_size_t
        # A kernel built for another struct layout would read the wrong fields: use none then.
        if k.ggmlgrad_kernels_abi() != _ABI or k.ggmlgrad_kernels_tensor_size() != ctypes.sizeof(TensorStruct):
            return {}
        return {n: ctypes.cast(getattr(k, f"ggmlgrad_{n}"), ctypes.c_void_p).value for n in KERNEL_NAMES}
    except (OSError, AttributeError):
        return {}


KERNELS: dict[str, int] = _load()


def custom_unary(ctx: int, node: int, name: str) -> int:
    """A graph node applying kernel ``name`` to ``node`` (same shape, contiguous float32 result)."""
    return lib.map_custom1(ctx, node, KERNELS[name], _ALL_THREADS, None)


def custom_binary(ctx: int, a: int, b: int, name: str) -> int:
    """A graph node applying two-input kernel ``name`` to same-shape ``a`` and ``b`` (rows of both
    contiguous; the result is ``a``'s shape, contiguous)."""
    return lib.map_custom2(ctx, a, b, KERNELS[name], _ALL_THREADS, None)
