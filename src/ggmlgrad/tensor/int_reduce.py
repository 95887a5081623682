"""Reductions of int32 tensors, exact: computed on the host in int64 (a sync point).

ggml's CPU kernels have no int32 sum/max/argmax (they abort), and a float32 round-trip loses
integers above 2**24. So sum, amax/amin, max/min and argmax/argmin of an int32 tensor read it
(draining the queue, like ``numpy()``), reduce it with NumPy and return a computed int32 tensor.
Inside a capture this read is refused like any other. PyTorch sums integers to int64; ggmlgrad
has no int64 tensors, so a sum outside the int32 range raises instead of wrapping around.
"""
from __future__ import annotations

import numpy as np

from ..engine import download, int32
from ..ops.shapes import norm_axes, norm_axis
from .bool_ops import reduce as bool_reduce

_INT32 = np.iinfo(np.int32)
_NP = {"sum": np.sum, "amax": np.max, "amin": np.min, "argmax": np.argmax, "argmin": np.argmin}


def is_int(x) -> bool:
    """True for an int32 or bool tensor, whose reductions go through :func:`int_reduce`."""
    return x.dtype is int32 or x.dtype.is_bool


def _check(kind: str, x, axis, keepdim) -> tuple | int | None:
    if not isinstance(keepdim, bool):
        raise TypeError(f"{kind}: keepdim must be a bool, got {keepdim!r}")
    if kind in ("argmax", "argmin"):
        if axis is not None and (isinstance(axis, bool) or not isinstance(axis, int)):
            raise TypeError(f"{kind}: axis must be an int or None, got {axis!r}")
        axes = None if axis is None or not x.ndim else norm_axis(kind, axis, x.ndim)
    else:
        axes = tuple(norm_axes(kind, axis, x.ndim)) if x.ndim else None
    if not x.ndim and axis is not None:
        norm_axes(kind, axis, 1)       # a 0-d tensor takes dim 0 or -1 only (torch): IndexError otherwise
    if kind != "sum" and x.numel_ == 0:
        raise ValueError(f"{kind}: cannot reduce an empty tensor of shape {x.shape}")
    return axes


def int_reduce(kind: str, x, axis=None, keepdim: bool = False, *, bool_indices: bool = False):
    """``kind`` ("sum", "amax", "amin", "argmax", "argmin") of an int32 tensor, exactly, as torch
    (argmax: the first extreme; a flattened index when ``axis`` is None). Of a bool tensor, argmax and
    argmin raise as in torch, except for ``max(dim)``/``min(dim)``'s indices (``bool_indices``).

    >>> import ggmlgrad as gg
    >>> gg.tensor([2**24 + 1, 2**24, 3]).sum().item()
    33554435
    """
    axes = _check(kind, x, axis, keepdim)
    if x.dtype.is_bool and kind in ("argmax", "argmin") and not bool_indices:
        raise RuntimeError(f"{kind}(): does not support bool input")   # torch: not implemented for 'Bool'
    if x.dtype.is_bool:          # on the device (tensor/bool_ops.py); huge sums exactly on the host
        return bool_reduce(kind, x, axes, keepdim, lambda: _host_reduce(kind, x, axes, keepdim))
    return _host_reduce(kind, x, axes, keepdim)


def _host_reduce(kind: str, x, axes, keepdim: bool):
    from .tensor import tensor   # the tensor layer builds the result
    a = download(x, f"{kind}() of an int32 tensor").astype(np.int64)
    if kind in ("argmax", "argmin"):
        if axes is None:
            r = _NP[kind](a)
            r = np.asarray(r).reshape((1,) * a.ndim) if keepdim else np.asarray(r)
        else:
            r = _NP[kind](a, axis=axes, keepdims=keepdim)
    else:
        r = _NP[kind](a, axis=axes, keepdims=keepdim) if a.ndim else a.copy()
    r = np.asarray(r, dtype=np.int64)
    if r.size and (r.min() < _INT32.min or r.max() > _INT32.max):
        raise ValueError(f"{kind}: the result over an int32 tensor of shape {x.shape} leaves the int32 range "
                         f"(PyTorch returns int64, which ggmlgrad does not have); reduce a float copy "
                         f"(.float(), exact up to 2**24) or smaller parts")
    return tensor(r.astype(np.int32), dtype=int32)
