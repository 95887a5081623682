"""torch.bool semantics: arithmetic type promotion with bools, logical and bitwise operators,
reductions of bool tensors, isnan/isinf/isfinite.

A bool tensor is stored as float32 0.0/1.0 (engine/dtypes.py says why). So a bool operand enters a
float op as a float32 *alias* of its memory (no node, no copy): ``(x > 0) * y`` is the comparison
and one multiplication. A float op's result that is exactly 0/1 becomes bool by retagging its dtype.

Promotion as torch's: bool < integer < float, and a Python number counts only when its category is
higher than every tensor's (``mask + 1`` is an integer tensor, ``mask * 2.5`` float32, ``mask + True``
bool). int64 results are int32 here (the dtype rule).
"""
from __future__ import annotations

import numbers

import numpy as np

from ..engine import ENGINE, PENDING, Array, float32, int32
from ..engine.dtypes import bool_
from ..ops import op
from ..ops.registry import _non_tensor
from ..engine.errors import DTypeError

from .tensor_class import tensor_class as _tensor_class


_BOOL, _INT, _FLOAT = 0, 1, 2
_SUB_MESSAGE = ("Subtraction, the `-` operator, with a bool tensor is not supported. If you are trying to invert a "
                "mask, use the `~` or `logical_not()` operator instead.")


def is_bool(x) -> bool:
    return getattr(x, "dtype", None) is bool_


def as_float(t):
    """A float32 name for bool tensor ``t``'s 0/1 memory (an op input only: never handed to the user,
    whose in-place write through it would change ``t``)."""
    Tensor = _tensor_class()
    f = Tensor._blank(t.shape, float32, t.device)
    if t._status == PENDING:
        ENGINE.alias_pending(f, t)     # the same queued node: the drain gives both the same memory
    else:
        f._storage, f._status, f._error = t._storage, t._status, t._error
    return f


def retag_bool(r):
    """Mark a fresh op result whose values are exactly 0.0/1.0 as bool (same float32 storage)."""
    r.dtype = bool_
    return r


def _category(x) -> int | None:
    """bool / integer / float for a tensor or a Python (NumPy) number; None for anything else."""
    d = getattr(x, "dtype", None)
    Tensor = _tensor_class()
    if isinstance(x, Tensor):
        return _BOOL if d is bool_ else _INT if d is int32 else _FLOAT
    if isinstance(x, (bool, np.bool_)):
        return _BOOL
    if isinstance(x, (numbers.Integral, np.integer)):
        return _INT
    if isinstance(x, (numbers.Real, np.floating)):
        return _FLOAT
    return None


def result_category(a, b) -> int:
    """torch's promotion of two operands (at least one a tensor): tensors decide, unless a number
    is of a higher category than every tensor."""
    Tensor = _tensor_class()
    ts = [_category(x) for x in (a, b) if isinstance(x, Tensor)]
    ns = [c for c in (_category(x) for x in (a, b) if not isinstance(x, Tensor)) if c is not None]
    top = max(ts)
    return max([top] + [c for c in ns if c > top])


def _operand(x):
    """A bool tensor as its float32 alias; a bool number as 0/1; others unchanged."""
    if is_bool(x):
        return as_float(x)
    if isinstance(x, (bool, np.bool_)):
        return int(x)
    return x


def arithmetic(name: str, a, b, compute):
    """``a <name> b`` where an operand is a bool tensor, with torch's result dtype. ``compute`` is
    the operator's int/float implementation (tensor.py's add, mul, ...)."""
    if name == "sub":
        raise RuntimeError(_SUB_MESSAGE)
    cat = result_category(a, b)
    if cat == _BOOL and name in ("floor_divide", "remainder", "pow"):
        raise NotImplementedError(f'"{name}" is not implemented for \'Bool\' (torch neither); cast with .int() or .float()')
    r = compute(_operand(a), _operand(b))
    if name == "div":                         # true division: float, whatever the operands
        return r
    if cat == _BOOL:                          # mul: 0/1 as it is; add: 0/1/2, non-zero is True
        return retag_bool(r) if name == "mul" else op.cast(r, dtype=bool_)
    if cat == _INT and r.dtype is not int32:
        return op.cast(r, dtype=int32)
    return r


def negate(t):
    raise RuntimeError("Negation, the `-` operator, on a bool tensor is not supported. If you are trying to invert "
                       "a mask, use the `~` or `logical_not()` operator instead.")


# ---------------------------------------------------------------------- logical / bitwise
def to_bool(x, like=None):
    """``x`` as a bool tensor (non-zero → True; a bool tensor as it is)."""
    if not isinstance(x, _tensor_class()):
        from .tensor import as_tensor
        x = as_tensor(x if not isinstance(x, (bool, np.bool_)) else float(x),
                      device=like.device if like is not None else None)
    return x if x.dtype is bool_ else op.cast(x, dtype=bool_)


def logical_not(x):
    """torch.logical_not: True where ``x`` is zero, for any dtype.

    >>> import ggmlgrad as gg
    >>> gg.logical_not(gg.tensor([0.0, 2.0])).tolist()
    [True, False]
    """
    Tensor = _tensor_class()
    if not isinstance(x, Tensor):
        raise TypeError(f"logical_not: expected a Tensor, got {type(x).__name__}")
    return op.compare_scalar(x, kind="eq", c=0.0)      # NaN is non-zero: False, as torch


def logical_and(a, b):
    """torch.logical_and: ``a`` and ``b`` both non-zero (any dtypes; broadcasting).

    >>> import ggmlgrad as gg
    >>> gg.logical_and(gg.tensor([1.0, 0.0, 2.0]), gg.tensor([True, True, False])).tolist()
    [True, False, False]
    """
    a, b = _bool_pair("logical_and", a, b)
    return retag_bool(as_float(a) * as_float(b))


def logical_or(a, b):
    """torch.logical_or: ``a`` or ``b`` non-zero."""
    a, b = _bool_pair("logical_or", a, b)
    return op.compare_scalar(as_float(a) + as_float(b), kind="ne", c=0.0)


def logical_xor(a, b):
    """torch.logical_xor: exactly one of ``a``, ``b`` non-zero."""
    a, b = _bool_pair("logical_xor", a, b)
    return op.ne(a, b)


def _bool_pair(name: str, a, b):
    Tensor = _tensor_class()
    like = a if isinstance(a, Tensor) else b
    if not isinstance(like, Tensor):
        raise TypeError(f"{name}: expected at least one Tensor")
    return to_bool(a, like), to_bool(b, like)


_BITWISE = {"and": logical_and, "or": logical_or, "xor": logical_xor}


def bitwise(kind: str, a, b):
    """``a & b``, ``a | b``, ``a ^ b``: logical on bools (a bool number counts as bool), as torch.
    Integer tensors: torch computes bitwise; ggmlgrad has no bitwise integer kernels (TypeError);
    float tensors: an error in torch too."""
    cats = [_category(x) for x in (a, b)]
    if None in cats:
        return NotImplemented
    if max(cats) == _BOOL:
        return _BITWISE[kind](a, b)
    if _FLOAT in cats:
        raise RuntimeError(f'"bitwise_{kind}_cpu" not implemented for \'Float\' (bitwise operators take bool or '
                           f'integer tensors)')
    raise DTypeError(f"bitwise_{kind}: bitwise operators on int32 tensors are not supported by ggmlgrad (no "
                    f"integer bit kernels); use bool tensors (e.g. (x != 0) {'&|^'['and or xor'.split().index(kind)]} ...)")


def invert(x):
    """``~x``: logical not of a bool tensor (integer tensors: TypeError, see :func:`bitwise`)."""
    if x.dtype is bool_:
        return op.compare_scalar(x, kind="eq", c=0.0)
    if x.dtype is int32:
        raise DTypeError("bitwise_not: ~ on int32 tensors is not supported by ggmlgrad (no integer bit kernels); "
                        "use it on bool tensors, or -x - 1")
    raise TypeError("~ (operator.invert) is only implemented on integer and Boolean-type tensors")


# ---------------------------------------------------------------------- isnan / isinf / isfinite
def isnan(x):
    """torch.isnan: True where ``x`` is NaN (bool).

    >>> import ggmlgrad as gg
    >>> gg.isnan(gg.tensor([1.0, float("nan")])).tolist()
    [False, True]
    """
    _tensor_only("isnan", x)
    return op.ne(x, x)


def isinf(x):
    """torch.isinf: True where ``x`` is +inf or -inf (never for integer and bool tensors)."""
    _tensor_only("isinf", x)
    if not x.dtype.is_float:
        return op.ne(x, x)
    return op.compare_scalar(op.abs(_float(x)), kind="eq", c=float("inf"))


def isfinite(x):
    """torch.isfinite: True where ``x`` is neither NaN nor ±inf (always for integer and bool tensors)."""
    _tensor_only("isfinite", x)
    if not x.dtype.is_float:
        return op.eq(x, x)
    return op.compare_scalar(op.abs(_float(x)), kind="lt", c=float("inf"))


def _tensor_only(name: str, x) -> None:
    """torch's TypeError for a NumPy array, list or number (``x.dtype`` would be NumPy's, or missing)."""
    if not isinstance(x, Array):
        raise _non_tensor(name, (x,))


def _float(x):
    return x if x.dtype is float32 else op.cast(x, dtype=float32)


# ---------------------------------------------------------------------- masks
def check_mask(name: str, x, mask, grow: bool = False) -> None:
    """torch's checks of a ``masked_fill`` mask: bool, broadcasting to ``x``'s shape (``grow``: the out-of-place
    form, whose result may take the broadcast shape of both, as torch's)."""
    Tensor = _tensor_class()
    if not isinstance(mask, Tensor) or mask.dtype is not bool_:
        got = mask.dtype.name if isinstance(mask, Tensor) else type(mask).__name__
        raise RuntimeError(f"{name} only supports boolean masks, but got mask with dtype {got}")
    try:
        shape = np.broadcast_shapes(mask.shape, x.shape)
    except ValueError:
        shape = None
    if shape is None or (not grow and shape != tuple(x.shape)):
        raise RuntimeError(f"{name}: mask of shape {mask.shape} does not broadcast to the tensor's shape {x.shape}")


def masked_fill(x, mask, value):
    """torch.Tensor.masked_fill: ``value`` (a number or 0-d tensor) where ``mask`` is True."""
    from .tensor import Tensor, where
    check_mask("masked_fill", x, mask, grow=True)
    if isinstance(value, Tensor):
        if value.ndim:
            raise RuntimeError(f"masked_fill only supports a 0-dimensional value tensor, but got tensor with "
                               f"{value.ndim} dimension(s)")
        value = value if value.dtype is float32 else op.cast(value, dtype=float32)
    elif x.dtype is bool_:
        value = float(bool(value))
    if x.dtype is bool_:
        return op.cast(where(mask, value, as_float(x)), dtype=bool_)
    if x.dtype is float32:
        return where(mask, value, x)
    # int32 (exact within 2**24), float16/bfloat16 (exact): selected in float32, back in x's dtype
    return op.cast(where(mask, value, op.cast(x, dtype=float32)), dtype=x.dtype)


def empty_reduce(x, dim, value: bool):
    """any()/all() of an empty tensor: False / True (torch), in the reduced shape."""
    from .tensor import tensor
    shape = () if dim is None else tuple(n for k, n in enumerate(x.shape) if k != dim % x.ndim)
    return tensor(np.full(shape, value))


# ---------------------------------------------------------------------- reductions
_EXACT_COUNT = 1 << 24     # float32 counts of 0/1 values are exact up to here


def reduce(kind: str, x, axis, keepdim: bool, host_reduce):
    """sum / amax / amin of a bool tensor and argmax / argmin (for max(dim)'s indices), on the device (no sync point, so it
    works in graph mode and in captures): sum counts as int32 (torch: int64), amax/amin give bool."""
    f = as_float(x)
    if kind == "sum":
        if x.numel_ > _EXACT_COUNT:
            return host_reduce()
        return op.cast(op.sum(f, axis=axis, keepdim=keepdim), dtype=int32)
    if kind in ("amax", "amin"):
        return retag_bool((op.amax if kind == "amax" else op.amin)(f, axis=axis, keepdim=keepdim))
    return (op.argmax if kind == "argmax" else op.argmin)(f, axis=axis, keepdim=keepdim)



# ---------------------------------------------------------------------- joins
def promoted(ts: list) -> list:
    """``ts`` in one dtype, torch's ``result_type`` of them (cat/stack): bool < int32 < float; mixed
    float dtypes (float16/bfloat16 storage with float32) join in float32. One dtype: unchanged."""
    first = ts[0].dtype
    if all(t.dtype is first for t in ts):
        return ts
    top = max(_category(t) for t in ts)
    floats = {t.dtype for t in ts if _category(t) == _FLOAT}
    target = (bool_ if top == _BOOL else int32 if top == _INT
              else floats.pop() if len(floats) == 1 else float32)
    return [t if t.dtype is target else as_float(t) if target is float32 and t.dtype is bool_
            else op.cast(t, dtype=target) for t in ts]
