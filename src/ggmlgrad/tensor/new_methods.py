"""Tensor methods of torch's convenience spellings: ``type()`` and the ``new_*`` factories (same
device, and dtype unless given), thin front ends over ``creation.py``. ``legacy.py`` has the
function forms (``empty``, ``*_like``, ``FloatTensor``, ...).

``type()`` names the storage honestly, under ggmlgrad's own prefix: ``"ggmlgrad.FloatTensor"``,
``"ggmlgrad.IntTensor"`` (an int64 spelling too, by the dtype rule); torch's strings
(``"torch.LongTensor"``) are accepted as arguments.

>>> import ggmlgrad as gg
>>> x = gg.zeros(2, dtype=gg.int32)
>>> x.new_zeros(2, 3).dtype, x.type(), x.float().type(), x.type("torch.FloatTensor").dtype
(ggmlgrad.int32, 'ggmlgrad.IntTensor', 'ggmlgrad.FloatTensor', ggmlgrad.float32)
"""
from __future__ import annotations

from ..engine import DType, dtypes, float32, int32

# storage dtype -> torch's legacy type name (without its prefix)
TYPE_NAMES = {dtypes.float32: "FloatTensor", dtypes.float16: "HalfTensor", dtypes.bfloat16: "BFloat16Tensor",
              dtypes.int32: "IntTensor", dtypes.bool_: "BoolTensor"}
# every legacy name accepted (the wider ones by the dtype rule)
NAME_DTYPES = {"FloatTensor": float32, "DoubleTensor": float32, "HalfTensor": dtypes.float16,
               "BFloat16Tensor": dtypes.bfloat16, "IntTensor": int32, "LongTensor": int32,
               "ShortTensor": int32, "BoolTensor": dtypes.bool_}


def _creation():
    from . import creation   # creation.py imports tensor.py, which imports this module
    return creation


def type_name(t) -> str:
    """``t.type()``'s string: ``ggmlgrad.FloatTensor`` (``ggmlgrad.cuda.FloatTensor`` on a CUDA device)."""
    where = "ggmlgrad.cuda." if t.device.type == "cuda" else "ggmlgrad."
    return where + TYPE_NAMES[t.dtype]


def dtype_of_type(spec) -> DType:
    """A dtype from ``t.type(spec)``'s argument: a dtype, a legacy class or a type string."""
    d = getattr(spec, "_dtype", None)
    if isinstance(spec, type) and isinstance(d, DType):     # a legacy class: gg.LongTensor
        return d
    if isinstance(spec, str):
        prefix, _, name = spec.rpartition(".")
        if prefix in ("torch", "ggmlgrad", "torch.cuda", "ggmlgrad.cuda") and name in NAME_DTYPES:
            return NAME_DTYPES[name]
    return dtypes.from_any(spec)


def like(t, dtype, device) -> dict:
    """dtype and device keywords: ``t``'s unless given."""
    return {"dtype": t.dtype if dtype is None else dtype, "device": t.device if device is None else device}


_LEGACY: dict = {}   # FloatTensor, once imported (TypeMethods.__new__ runs per ``gg.Tensor(obs)``)


class TypeMethods:
    """Tensor methods: ``type()`` and the ``new_*`` factories."""

    __slots__ = ()

    def __new__(cls, *args, **kwargs):
        """``gg.Tensor(data)`` / ``gg.Tensor(2, 3)``: torch's legacy constructor, a float32 tensor (a copy
        of ``data``, or zeros of those sizes) as ``gg.FloatTensor``; ``gg.tensor(data)`` infers the dtype.
        (Tensors are made inside ggmlgrad with ``Tensor._blank``, which does not come here.)"""
        if cls.__name__ != "Tensor" or cls.__module__ != "ggmlgrad.tensor.tensor":
            raise TypeError(f"use gg.tensor(data) or a factory such as gg.zeros(shape) to make a {cls.__name__}")
        ft = _LEGACY.get("FloatTensor")
        if ft is None:
            from .legacy import FloatTensor as ft   # legacy.py imports tensor.py, which imports this module
            _LEGACY["FloatTensor"] = ft
        return ft(*args, **kwargs)

    def type(self, dtype=None, non_blocking: bool = False, **kwargs):
        """Without an argument, the type string (``"ggmlgrad.FloatTensor"``); with a dtype, a type
        string (``"torch.LongTensor"`` too) or a legacy class (``gg.LongTensor``), ``self`` converted."""
        if dtype is None:
            return type_name(self)
        return self.to(dtype_of_type(dtype))

    def new_tensor(self, data, dtype=None, device=None, requires_grad: bool = False):
        """A copy of ``data`` with this tensor's dtype and device unless given."""
        from .tensor import tensor   # tensor.py imports this module
        return tensor(data, **like(self, dtype, device), requires_grad=requires_grad)

    def new_zeros(self, *size, dtype=None, device=None, requires_grad: bool = False):
        """Zeros of ``size`` (``new_zeros(2, 3)`` or ``new_zeros((2, 3))``)."""
        return _creation().zeros(*size, **like(self, dtype, device), requires_grad=requires_grad)

    def new_ones(self, *size, dtype=None, device=None, requires_grad: bool = False):
        return _creation().ones(*size, **like(self, dtype, device), requires_grad=requires_grad)

    def new_empty(self, *size, dtype=None, device=None, requires_grad: bool = False):
        """Uninitialised in torch; zeros here (one of the values torch could give)."""
        return _creation().zeros(*size, **like(self, dtype, device), requires_grad=requires_grad)

    def new_full(self, size, fill_value, dtype=None, device=None, requires_grad: bool = False):
        return _creation().full(size, fill_value, **like(self, dtype, device), requires_grad=requires_grad)
