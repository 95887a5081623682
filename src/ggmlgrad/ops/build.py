"""Small ggml node-building helpers used by op forward builders."""
from __future__ import annotations

from .._ggml import TensorStruct, lib
from .shapes import ne as _ne


def is_view(node: int) -> bool:
    return bool(TensorStruct.from_address(node).view_src)


def materialize(ctx: int, node: int) -> int:
    """A non-view node: op outputs get storage of their own, which a view cannot."""
    return lib.cont(ctx, node) if is_view(node) else node


def owned(ctx: int, node: int, shape: tuple) -> int:
    """``node`` as an op result of ``shape`` (a tensor that owns contiguous memory).

    ``node`` must have been created by the calling builder (never one of its inputs: returning
    that would make two results share memory). When it already has ``shape``'s layout it is the
    result itself; otherwise its reshape is copied (a copy per op costs a pass over the data).
    """
    t = TensorStruct.from_address(node)
    if t.op != 0 and not t.view_src and list(t.ne) == _ne(shape) and lib.is_contiguous(node):
        return node
    return lib.cont(ctx, reshape(ctx, node, shape))


def reshape(ctx: int, node: int, shape: tuple) -> int:
    n = _ne(shape)
    return lib.reshape_4d(ctx, node, n[0], n[1], n[2], n[3])


def shape_only(ctx: int, shape: tuple, ggml_type: int = 0) -> int:
    """A data-less tensor whose only use is to carry a shape (repeat/repeat_back targets)."""
    n = _ne(shape)
    return lib.new_tensor_4d(ctx, ggml_type, n[0], n[1], n[2], n[3])


def expand(ctx: int, node: int, from_shape: tuple, to_shape: tuple) -> int:
    """Broadcast ``node`` (NumPy shape ``from_shape``) to ``to_shape``; no-op when equal."""
    if tuple(from_shape) == tuple(to_shape):
        return node
    n = _ne(to_shape)
    return lib.repeat_4d(ctx, node, n[0], n[1], n[2], n[3])


def sum_to(ctx: int, node: int, from_shape: tuple, keep_shape: tuple) -> int:
    """Sum ``node`` over the axes where ``keep_shape`` (same ndim) has 1s."""
    if tuple(from_shape) == tuple(keep_shape):
        return node
    if all(s == 1 for s in keep_shape):
        return lib.sum(ctx, node)
    return lib.repeat_back(ctx, node, shape_only(ctx, keep_shape))


def permute(ctx: int, node: int, axes: tuple) -> int:
    """NumPy-style transpose(axes) of a tensor with len(axes) dims, as a ggml view."""
    nd = len(axes)
    if nd <= 1:
        return node
    # NumPy axis i ↔ ggml dim (nd-1-i). Output axis j takes input axis axes[j]: ggml_permute
    # places source dim d at position p[d].
    p = [0, 1, 2, 3]
    for j, a in enumerate(axes):
        p[nd - 1 - a] = nd - 1 - j
    return lib.permute(ctx, node, p[0], p[1], p[2], p[3])


def zeros_node(ctx: int, shape: tuple) -> int:
    """A node of ``shape`` filled with zeros, computed on the device (no upload)."""
    return lib.fill(ctx, shape_only(ctx, shape), 0.0)
