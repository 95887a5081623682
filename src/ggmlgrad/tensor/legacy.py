"""torch's older and convenience spellings of tensor creation as functions: ``empty``, the ``*_like``
family, the legacy ``FloatTensor``-style constructors and the default dtype (``new_methods.py`` has the
``Tensor.new_*`` and ``Tensor.type()`` methods). Each is a thin front end over ``creation.py``; the
dtype rule holds throughout (float64 spellings are float32, int64 spellings int32).

>>> import ggmlgrad as gg
>>> gg.LongTensor([1, 2]).dtype, isinstance(gg.zeros(2), gg.FloatTensor), gg.empty_like(gg.zeros(2, 3)).shape
(ggmlgrad.int32, True, (2, 3))
"""
from __future__ import annotations

import numpy as np

from ..engine import DType, dtypes, float32, int32
from . import creation
from .new_methods import like as _like
from .tensor import Tensor, tensor

# ---------------------------------------------------------------------- *_like and empty
def empty(*size, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """torch.empty: uninitialised memory there, zeros here (one of the values torch could give).

    >>> import ggmlgrad as gg; gg.empty(2, 3).shape
    (2, 3)
    """
    return creation.zeros(*size, dtype=dtype, device=device, requires_grad=requires_grad)


def empty_like(t: Tensor, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """As ``t``'s shape, dtype and device; zeros (see :func:`empty`)."""
    return creation.zeros(t.shape, **_like(t, dtype, device), requires_grad=requires_grad)


def _float_like(opname: str, t: Tensor, dtype) -> DType:
    d = t.dtype if dtype is None else dtypes.from_any(dtype)
    if not d.is_float:
        from ..engine.errors import DTypeError
        raise DTypeError(f"{opname}: random floats need a floating dtype, got {d.name} (as torch: "
                         f"\"normal_kernel_cpu\" not implemented for it); pass dtype=gg.float32")
    return d


def randn_like(t: Tensor, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """Standard normal values of ``t``'s shape (and dtype and device unless given), from the
    seeded generator.

    >>> import ggmlgrad as gg; gg.randn_like(gg.zeros(2, 3)).shape
    (2, 3)
    """
    d = _float_like("randn_like", t, dtype)
    return creation.randn(t.shape, dtype=d, device=t.device if device is None else device,
                          requires_grad=requires_grad)


def rand_like(t: Tensor, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """Uniform [0, 1) values of ``t``'s shape (and dtype and device unless given)."""
    d = _float_like("rand_like", t, dtype)
    return creation.rand(t.shape, dtype=d, device=t.device if device is None else device,
                         requires_grad=requires_grad)


def randint_like(t: Tensor, low: int, high: int | None = None, dtype=None, device=None,
                 requires_grad: bool = False) -> Tensor:
    """Integers in [low, high) (``randint_like(t, high)``: [0, high)) of ``t``'s shape, in ``t``'s
    dtype unless given (float tensors get whole-number floats, as torch's)."""
    out = creation.randint(low, high, t.shape, dtype=int32, device=t.device if device is None else device)
    d = t.dtype if dtype is None else dtypes.from_any(dtype)
    out = out if d is int32 else out.to(d)
    return out.requires_grad_(True) if requires_grad else out


# ---------------------------------------------------------------------- legacy constructors
class _LegacyMeta(type):
    def __instancecheck__(cls, obj) -> bool:
        # isinstance(t, gg.FloatTensor) holds for float32 tensors, as torch's does
        return isinstance(obj, Tensor) and obj.dtype is cls._dtype


class _LegacyTensor(metaclass=_LegacyMeta):
    """``FloatTensor(data)`` copies data; ``FloatTensor(2, 3)`` (sizes) is uninitialised in torch,
    zeros here. The result is a :class:`Tensor`."""

    _dtype: DType = float32

    def __new__(cls, *args, device=None) -> Tensor:
        if len(args) == 1 and type(args[0]) is np.ndarray:   # ``torch.Tensor(obs)`` per step: data, no sizes
            return tensor(args[0], dtype=cls._dtype, device=device)
        if not args:
            return creation.zeros(0, dtype=cls._dtype, device=device)
        if all(isinstance(a, (int, np.integer)) and not isinstance(a, bool) for a in args):
            return creation.zeros(*args, dtype=cls._dtype, device=device)
        if len(args) != 1:
            raise TypeError(f"{cls.__name__}(): expected sizes or one sequence of data, got {args!r}")
        return tensor(args[0], dtype=cls._dtype, device=device)


def _legacy(name: str, d: DType) -> type:
    return _LegacyMeta(name, (_LegacyTensor,), {"_dtype": d, "__doc__": f"torch.{name}: a {d.name} tensor "
                                                f"(by the dtype rule); see :class:`_LegacyTensor`.",
                                                "__module__": __name__})


FloatTensor = _legacy("FloatTensor", float32)
DoubleTensor = _legacy("DoubleTensor", float32)
HalfTensor = _legacy("HalfTensor", dtypes.float16)
BFloat16Tensor = _legacy("BFloat16Tensor", dtypes.bfloat16)
IntTensor = _legacy("IntTensor", int32)
LongTensor = _legacy("LongTensor", int32)
BoolTensor = _legacy("BoolTensor", dtypes.bool_)


# ---------------------------------------------------------------------- default dtype
def get_default_dtype() -> DType:
    """float32: the dtype of new float tensors (the only float compute dtype).

    >>> import ggmlgrad as gg; gg.get_default_dtype()
    ggmlgrad.float32
    """
    return float32


def set_default_dtype(d) -> None:
    """Accepts float32 and, by the dtype rule, float64 (which is float32); float16/bfloat16 defaults
    and non-float dtypes raise ``TypeError`` (torch refuses the latter too)."""
    dt = dtypes.from_any(d)
    if dt is not float32:
        raise TypeError(f"set_default_dtype: only float32 (float64 means float32 here) can be the default "
                        f"dtype, got {dt.name}")
