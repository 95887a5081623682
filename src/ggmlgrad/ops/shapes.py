"""Shape helpers shared by op definitions (pure Python, no ggml)."""
from __future__ import annotations

import math
import operator
from ..engine.errors import IndexRangeError, ShapeError


def broadcast_shapes(opname: str, *shapes: tuple) -> tuple:
    if len(shapes) == 2 and shapes[0] == shapes[1] and len(shapes[0]) <= 4:
        return tuple(shapes[0])  # the common case, on every binary op: no per-axis sets
    ndim = max(len(s) for s in shapes)
    out = []
    for i in range(ndim):
        dims = {s[len(s) - ndim + i] for s in shapes if len(s) - ndim + i >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise ShapeError(f"{opname}: shapes {' and '.join(str(tuple(s)) for s in shapes)} "
                             f"cannot be broadcast together")
        out.append(dims.pop() if dims else 1)
    if ndim > 4:
        raise ValueError(f"{opname}: result has {ndim} dimensions; ggmlgrad supports at most 4")
    return tuple(out)


def norm_axis(opname: str, axis: int, ndim: int) -> int:
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise TypeError(f"{opname}: axis must be an int, got {axis!r}")
    n = max(ndim, 1)
    if not -n <= axis < n:
        raise IndexRangeError(f"{opname}: axis {axis} is out of range for a tensor with {ndim} dimensions")
    return axis % n


def norm_axes(opname: str, axis, ndim: int) -> tuple[int, ...]:
    """None → all axes; int or sequence → sorted unique non-negative axes."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (list, tuple)):
        axes = tuple(norm_axis(opname, a, ndim) for a in axis)
        if len(set(axes)) != len(axes):
            raise ShapeError(f"{opname}: repeated axis in {axis}")
        return tuple(sorted(axes))
    return (norm_axis(opname, axis, ndim),)


def numel(shape: tuple) -> int:
    return math.prod(shape)


def check_ndim(opname: str, shape: tuple) -> None:
    if len(shape) > 4:
        raise ValueError(f"{opname}: shape {shape} has {len(shape)} dimensions; ggmlgrad supports at most 4")


def int_sizes(opname: str, sizes, what: str = "sizes") -> tuple[int, ...]:
    """``sizes`` as Python ints: ints and NumPy ints pass (as in PyTorch); floats, bools, strings
    raise TypeError naming the op (``reshape(2.0, 3.0)`` must not become ``reshape(2, 3)``)."""
    try:
        items = tuple(sizes)
    except TypeError:
        raise TypeError(f"{opname}: {what} must be a sequence of ints, got {sizes!r}") from None
    for s in items:     # the common case on every reshape: plain ints, nothing to convert
        if type(s) is not int:
            break
    else:
        return items
    out = []
    for s in items:
        if isinstance(s, bool) or type(s).__name__ == "bool_":
            raise TypeError(f"{opname}: {what} must be ints, got a bool in {items}")
        try:
            out.append(operator.index(s))
        except TypeError:
            raise TypeError(f"{opname}: {what} must be ints, got {type(s).__name__} {s!r} in {items}") from None
    return tuple(out)


def ne(shape: tuple) -> list[int]:
    """NumPy shape → ggml ne (reversed, padded to 4)."""
    r = list(reversed(shape)) or [1]
    return r + [1] * (4 - len(r))
