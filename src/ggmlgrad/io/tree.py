"""Nested state dicts ↔ (JSON skeleton, named host arrays)."""
from __future__ import annotations

import math
import zlib

import numpy as np

from ..engine import ENGINE, DType, bfloat16, dtypes, new_from_host
from ..engine.dtypes import to_bool_storage
from ..tensor import Tensor

MAX_NAME = 63           # GGUF (ggml) tensor names are at most 63 bytes


class Leaf:
    """A tensor or array on its way to or from a file: storage dtype name, shape, raw host bits."""

    __slots__ = ("name", "kind", "dtype", "shape", "bits")

    def __init__(self, name: str, kind: str, dtype: str, shape: tuple, bits: np.ndarray):
        self.name, self.kind, self.dtype, self.shape, self.bits = name, kind, dtype, shape, bits


def tensor_bits(t: Tensor) -> np.ndarray:
    """The exact stored bits of ``t`` (bfloat16 as uint16 patterns)."""
    a = t.detach().numpy()
    if t.dtype is bfloat16:
        return (np.ascontiguousarray(a, np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return np.ascontiguousarray(a)


_NP_KINDS = {np.dtype(np.float32): "float32", np.dtype(np.float16): "float16", np.dtype(np.int32): "int32",
             np.dtype(np.float64): "float64", np.dtype(np.int64): "int64", np.dtype(np.uint8): "uint8",
             np.dtype(np.bool_): "bool", np.dtype(np.uint16): "uint16", np.dtype(np.int8): "int8"}


def flatten(obj) -> tuple[object, list[Leaf]]:
    """(JSON-able skeleton, leaves). Tensors and arrays become ``{"__tensor__": i}`` / ``{"__ndarray__": i}``."""
    leaves: list[Leaf] = []
    used: set[str] = set()

    def name_for(path: str) -> str:
        n = path if path and len(path.encode()) <= MAX_NAME else f"tensor.{len(leaves)}"
        while n in used:
            n = f"{n}#"
        used.add(n)
        return n

    def enc(x, path: str):
        if isinstance(x, Tensor):
            leaves.append(Leaf(name_for(path), "tensor", x.dtype.name, tuple(x.shape), tensor_bits(x)))
            return {"__tensor__": len(leaves) - 1}
        if isinstance(x, np.ndarray):
            if x.dtype not in _NP_KINDS:
                raise TypeError(f"gg.save: array at {path or '<root>'} has unsupported dtype {x.dtype}")
            leaves.append(Leaf(name_for(path), "ndarray", _NP_KINDS[x.dtype], tuple(x.shape),
                               np.ascontiguousarray(x)))
            return {"__ndarray__": len(leaves) - 1}
        if isinstance(x, dict):
            items = []
            for k, v in x.items():
                if isinstance(k, bool) or not isinstance(k, (str, int, np.integer)):
                    raise TypeError(f"gg.save: dict key {k!r} at {path or '<root>'} must be a str or an int")
                k = int(k) if isinstance(k, np.integer) else k
                items.append([k, enc(v, f"{path}.{k}" if path else str(k))])
            return {"__dict__": items}
        if isinstance(x, tuple):
            return {"__tuple__": [enc(v, f"{path}.{i}") for i, v in enumerate(x)]}
        if isinstance(x, list):
            return [enc(v, f"{path}.{i}") for i, v in enumerate(x)]
        if isinstance(x, DType):
            return {"__dtype__": x.name}
        if isinstance(x, float) and not math.isfinite(x):
            return {"__float__": repr(x)}
        if x is None or isinstance(x, (bool, int, float, str)):
            return x
        if isinstance(x, np.generic):
            return enc(x.item(), path)
        hint = " (save its .state_dict())" if hasattr(x, "state_dict") else ""
        raise TypeError(f"gg.save: cannot save a {type(x).__name__} (at {path or '<root>'}){hint}; state dicts "
                        f"may hold tensors, arrays, numbers, strings, None, lists, tuples and dicts")

    return enc(obj, ""), leaves


def leaf_table(leaves: list[Leaf]) -> list[dict]:
    return [{"name": l.name, "kind": l.kind, "dtype": l.dtype, "shape": list(l.shape),
             "crc32": zlib.crc32(l.bits.tobytes())} for l in leaves]


def unflatten(skeleton, table: list[dict], arrays: dict[str, np.ndarray], device, where: str):
    """Rebuild the object; ``arrays`` maps leaf names to raw host arrays (already checked)."""
    made: dict[int, object] = {}

    def leaf(i: int):
        if i in made:
            return made[i]
        if not isinstance(i, int) or not 0 <= i < len(table):
            raise ValueError(f"{where}: metadata refers to tensor {i!r}, which the file does not list")
        spec = table[i]
        raw = arrays[spec["name"]]
        if spec["kind"] == "ndarray":
            out = np.array(raw)         # a writable copy, not a view of the file's bytes
        else:
            dt = dtypes.from_any(spec["dtype"])
            t = Tensor._blank(tuple(spec["shape"]), dt, _device(device))
            out = new_from_host(t, to_bool_storage(raw) if dt.is_bool else np.ascontiguousarray(raw), "load()")
        made[i] = out
        return out

    def dec(x):
        if isinstance(x, list):
            return [dec(v) for v in x]
        if isinstance(x, dict):
            if "__tensor__" in x:
                return leaf(x["__tensor__"])
            if "__ndarray__" in x:
                return leaf(x["__ndarray__"])
            if "__dict__" in x:
                return {k: dec(v) for k, v in x["__dict__"]}
            if "__tuple__" in x:
                return tuple(dec(v) for v in x["__tuple__"])
            if "__dtype__" in x:
                return dtypes.from_any(x["__dtype__"])
            if "__float__" in x:
                return float(x["__float__"])
            raise ValueError(f"{where}: unknown entry in the metadata: {sorted(x)}")
        return x

    return dec(skeleton)


def _device(device):
    from ..runtime import resolve_device
    return resolve_device(device)


def storage_np_dtype(dtype_name: str) -> np.dtype:
    """NumPy dtype of the raw bits of a leaf with this dtype name."""
    if dtype_name == "bfloat16":
        return np.dtype(np.uint16)
    if dtype_name in ("float32", "float16", "int32"):
        return dtypes.from_any(dtype_name).np_dtype
    return np.dtype({"float64": np.float64, "int64": np.int64, "uint8": np.uint8, "bool": np.bool_,
                     "uint16": np.uint16, "int8": np.int8}[dtype_name])


_ = ENGINE
