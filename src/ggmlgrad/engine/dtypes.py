"""Element types: float32 for compute, float16/bfloat16 for storage, int32 for indices, bool for masks.

One rule for the wider spellings (no double precision, no 64-bit integers on ggml):
``float64`` / ``double`` (names, NumPy types, float64 arrays) mean float32 — values are
rounded to float32 as NumPy's ``astype`` does; ``int64`` / ``long`` (and every NumPy integer or
bool type) mean int32 — a host value outside the int32 range raises ValueError instead of
wrapping. ``gg.int64 is gg.int32`` and ``gg.float64 is gg.float32``: ``t.dtype`` always names
the storage honestly.

``bool`` (torch.bool: comparisons, masks, logical ops) is stored as float32 0.0/1.0, for speed:
ggml computes comparisons as float 0/1 and multiplies masks into float tensors, so ``(x > 0) * y``
stays two float nodes with no conversion (an int8 storage would add a cast each way). Its
``np_dtype`` is that storage (float32); the host sees ``np.bool_`` (``host_np``), and every host
value entering a bool tensor is turned into 0/1 (``x != 0``: NaN is True, as torch's ``.bool()``).
"""
from __future__ import annotations

import numpy as np

from .._ggml import consts


class DType:
    __slots__ = ("name", "ggml_type", "np_dtype", "itemsize", "is_float", "is_bool", "host_np")

    def __init__(self, name: str, ggml_type: int, np_dtype, itemsize: int, is_float: bool, host_np=None):
        self.name, self.ggml_type, self.np_dtype, self.itemsize, self.is_float = name, ggml_type, np.dtype(np_dtype), itemsize, is_float
        self.is_bool = name == "bool"
        self.host_np = np.dtype(host_np if host_np is not None else np_dtype)   # what NumPy sees of it

    def __repr__(self) -> str:
        return f"ggmlgrad.{self.name}"

    def __reduce__(self):
        return (from_any, (self.name,))


float32 = DType("float32", consts.TYPE_F32, np.float32, 4, True)
float16 = DType("float16", consts.TYPE_F16, np.float16, 2, True)
# NumPy has no bfloat16: it travels as uint16 bit patterns and reads back as float32.
bfloat16 = DType("bfloat16", consts.TYPE_BF16, np.uint16, 2, True)
int32 = DType("int32", consts.TYPE_I32, np.int32, 4, False)
bool_ = DType("bool", consts.TYPE_F32, np.float32, 4, False, host_np=np.bool_)   # float32 0/1 storage

# The wider spellings are names of the same dtype objects (see the module docstring).
float64 = double = float32
int64 = long = int32

ALL = {d.name: d for d in (float32, float16, bfloat16, int32, bool_)}
_ALIASES = {"float": float32, "f32": float32, "float64": float32, "double": float32, "f64": float32,
            "half": float16, "f16": float16, "bf16": bfloat16,
            "int": int32, "i32": int32, "long": int32, "int64": int32, "i64": int32, "bool_": bool_}


def from_any(x) -> DType:
    """Accepts a DType, its name (or a wider spelling: "float64" → float32, "int64" → int32),
    or a NumPy dtype/type.

    >>> from_any("int64") is int32, from_any("float64") is float32
    (True, True)
    """
    if isinstance(x, DType):
        return x
    if isinstance(x, str):
        d = ALL.get(x) or _ALIASES.get(x)
        if d is None:
            raise TypeError(f"dtype: unknown dtype {x!r} (use float32, float16, bfloat16, int32 or bool; "
                            f"float64 and int64 are accepted and stored as float32 and int32)")
        return d
    if x is bool:
        return bool_
    try:
        nd = np.dtype(x)
    except TypeError:
        raise TypeError(f"dtype: cannot interpret {x!r} as a dtype") from None
    if nd.kind == "f":
        return float16 if nd == np.float16 else float32
    if nd.kind == "b":
        return bool_
    if nd.kind in "iu":
        return int32  # int64 / uint8: int32 storage (host values are range-checked)
    raise TypeError(f"dtype: NumPy dtype {nd} has no ggmlgrad equivalent")


def to_bool_storage(x) -> np.ndarray:
    """Host values → a bool tensor's storage: float32 1.0 where non-zero (NaN too), else 0.0."""
    return np.ascontiguousarray(np.asarray(x) != 0, dtype=np.float32)


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """Round to nearest even, as ggml does."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = u + (0x7FFF + ((u >> 16) & 1))
    out = (rounded >> 16).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        out[nan] = 0x7FC0
    return out
