"""ggmlgrad's vectorised activation kernels as ggml custom ops.

``python -m ggmlgrad build`` compiles ``kernels/ggmlgrad_kernels.c`` beside the fast ggml. When
that library is present (and ``GGMLGRAD_KERNELS`` is not ``0``), :data:`KERNELS` maps each kernel
name (``exp``, ``tanh``, ``sigmoid``, ``gelu_tanh``, ``gelu_erf``, ``gelu_erf_grad``, ``gelu_tanh_grad``,
``elu``, ``softplus``, ``relu``; the two-input backward kernels ``relu_grad``, ``tanh_backward``,
``gelu_erf_backward``, ``gelu_tanh_backward``; and, when the library has them, linear's products
``matmul_small_k``, ``matvec_rows`` and ``matmul_small_n``, its bias add ``add_rows``, the bias
gradient's ``column_sum``, cross-entropy against class indices ``ce_index_mean`` /
``ce_index_backward`` and Adam's update ``adamw``) to its C entry point, and :func:`custom_unary` /
:func:`custom_binary` / :func:`custom_product` (and the other ``custom_*``) put one into a graph as a
``ggml_map_custom1`` / ``ggml_map_custom2`` / ``ggml_custom_4d`` / ``ggml_custom_inplace`` node.
Without it the ops use ggml's own (scalar libm) kernels; the results agree to float32 rounding.
"""
from __future__ import annotations

import ctypes
import os

from .api import TensorStruct, info, lib
from .loader import kernels_library

KERNEL_NAMES = ("exp", "tanh", "sigmoid", "gelu_tanh", "gelu_erf", "gelu_erf_grad", "gelu_tanh_grad", "elu",
                "softplus", "relu", "relu_grad", "tanh_backward", "gelu_erf_backward", "gelu_tanh_backward",
                "gelu_erf_parts", "gelu_tanh_parts", "log_softmax_rows", "log_softmax_rows_backward")
# Kernels added since ABI 3 without changing it: used when the library has them (a library built
# before keeps every other kernel).
OPTIONAL_NAMES = ("matmul_small_k", "matvec_rows", "ce_index_mean", "ce_index_backward", "adamw",
                  "matmul_small_n", "column_sum", "add_rows")
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
        found = {n: ctypes.cast(getattr(k, f"ggmlgrad_{n}"), ctypes.c_void_p).value for n in KERNEL_NAMES}
        for n in OPTIONAL_NAMES:
            if hasattr(k, f"ggmlgrad_{n}"):
                found[n] = ctypes.cast(getattr(k, f"ggmlgrad_{n}"), ctypes.c_void_p).value
        return found
    except (OSError, AttributeError):
        return {}


KERNELS: dict[str, int] = _load()


def _custom_4d():
    """ggml_custom_4d, which api.py does not declare (only the kernels build nodes of a new shape)."""
    fn = ctypes.CDLL(info.files[0]).ggml_custom_4d    # libggml-base, already loaded: the same handle
    fn.restype = ctypes.c_void_p
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                   ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
    return fn


_CUSTOM_4D = _custom_4d() if KERNELS else None


def _custom_inplace():
    """ggml_custom_inplace (libggml-base, as ggml_custom_4d): a custom op whose result is a view of its target."""
    fn = ctypes.CDLL(info.files[0]).ggml_custom_inplace
    fn.restype = ctypes.c_void_p
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_void_p,
                   ctypes.c_int, ctypes.c_void_p]
    return fn


_CUSTOM_INPLACE = _custom_inplace() if KERNELS else None
_GGML_TYPE_F32 = 0


def custom_unary(ctx: int, node: int, name: str) -> int:
    """A graph node applying kernel ``name`` to ``node`` (same shape, contiguous float32 result)."""
    return lib.map_custom1(ctx, node, KERNELS[name], _ALL_THREADS, None)


def custom_binary(ctx: int, a: int, b: int, name: str) -> int:
    """A graph node applying two-input kernel ``name`` to same-shape ``a`` and ``b`` (rows of both
    contiguous; the result is ``a``'s shape, contiguous)."""
    return lib.map_custom2(ctx, a, b, KERNELS[name], _ALL_THREADS, None)


def custom_node(ctx: int, ne: tuple, srcs: tuple, name: str, one_thread: bool = False, userdata: int = 0) -> int:
    """A float32 node of ggml shape ``ne`` (1 to 4 sizes) computed by kernel ``name`` from ``srcs``
    (its ``dst->src``), on one thread or on every thread of the compute; ``userdata``: an integer
    the kernel reads as its last argument. The custom kernels of a new shape all go through it."""
    n = list(ne) + [1] * (4 - len(ne))
    args = (ctypes.c_void_p * len(srcs))(*srcs)
    return _CUSTOM_4D(ctx, _GGML_TYPE_F32, n[0], n[1], n[2], n[3], args, len(srcs), KERNELS[name],
                      1 if one_thread else _ALL_THREADS, ctypes.c_void_p(userdata))


def custom_parts(ctx: int, node: int, name: str) -> int:
    """A graph node of 2n floats holding [value | derivative] of kernel ``name`` over the n floats of
    ``node`` (contiguous): the ``*_parts`` kernels."""
    return custom_node(ctx, (_numel(node), 2), (node,), name)


def custom_product(ctx: int, w: int, x: int, name: str) -> int:
    """x @ w^T as one node (w: ne0 = K, ne1 = N; x: ne0 = K, ne1 = B; result N x B) by kernel ``name``
    (``matmul_small_k``, ``matvec_rows``, ``matmul_small_n``): for float32 2-D operands (see
    ops/fast_math.py)."""
    return custom_node(ctx, (TensorStruct.from_address(w).ne[1], TensorStruct.from_address(x).ne[1]), (w, x), name)


def custom_inplace(ctx: int, target: int, srcs: tuple, name: str) -> int:
    """A node computing kernel ``name`` into ``target``'s own memory (a view of it, ggml_custom_inplace),
    reading ``target`` and ``srcs`` (``dst->src`` = target, *srcs), on every thread of the compute."""
    args = (ctypes.c_void_p * len(srcs))(*srcs)
    return _CUSTOM_INPLACE(ctx, target, args, len(srcs), KERNELS[name], _ALL_THREADS, None)


def custom_fun(node: int) -> int:
    """The kernel a custom-op node runs (the first field of its op params), for recognising our nodes."""
    t = TensorStruct.from_address(node)
    return ctypes.c_void_p.from_buffer(t.op_params).value or 0


def _numel(node: int) -> int:
    ne = TensorStruct.from_address(node).ne
    return ne[0] * ne[1] * ne[2] * ne[3]
