"""save/load dispatch by extension, atomic writes, and the two file formats."""
from __future__ import annotations

import json
import os
import tempfile
import zlib
from typing import Callable

import numpy as np

from ..engine import dtypes
from ..tensor import Tensor
from .tree import Leaf, flatten, leaf_table, storage_np_dtype, unflatten

_META_KEY = "ggmlgrad"          # safetensors metadata key / GGUF key prefix
_GGUF_KEY = "ggmlgrad.state"
_VERSION = 1


class CheckpointError(ValueError):
    """A checkpoint file that cannot be read: truncated, corrupt, or not in the expected format."""


def _fmt(path) -> str:
    p = os.fspath(path)
    if p.endswith(".safetensors"):
        return "safetensors"
    if p.endswith(".gguf"):
        return "gguf"
    raise ValueError(f"gg.save/gg.load: cannot tell the format of {p!r} from its extension; "
                     f"use .safetensors or .gguf")


def save(obj, path) -> None:
    """Write a state dict (or any nest of tensors, arrays, numbers, strings, lists, tuples and dicts)
    to ``path`` (``.safetensors`` or ``.gguf``), atomically.

    >>> import os, tempfile, ggmlgrad as gg
    >>> p = os.path.join(tempfile.mkdtemp(), "w.gguf")
    >>> gg.save({"w": gg.ones(2, dtype=gg.bfloat16)}, p)
    >>> gg.load(p)["w"].dtype
    ggmlgrad.bfloat16
    """
    fmt = _fmt(path)
    skeleton, leaves = flatten(obj)
    meta = json.dumps({"version": _VERSION, "skeleton": skeleton, "tensors": leaf_table(leaves)},
                      separators=(",", ":"), allow_nan=False)
    writer = _write_safetensors if fmt == "safetensors" else _write_gguf
    _atomic_write(os.fspath(path), lambda tmp: writer(tmp, leaves, meta))


def load(path, device=None):
    """Read a file written by :func:`save` (the same nest, tensors on ``device``). A file from
    another tool comes back as a flat ``{name: Tensor}`` dict (float32/float16/bfloat16/int32;
    float64 and int64 are narrowed to float32 and int32)."""
    p = os.fspath(path)
    fmt = _fmt(p)
    if not os.path.exists(p):
        raise FileNotFoundError(f"gg.load: no such file: {p!r}")
    where = f"gg.load({p!r})"
    reader = _read_safetensors if fmt == "safetensors" else _read_gguf
    meta, arrays = reader(p, where)
    if meta is None:
        return _foreign(arrays, device, where)
    try:
        info = json.loads(meta)
        table, skeleton = info["tensors"], info["skeleton"]
    except (ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"{where}: the ggmlgrad metadata is corrupt ({e})") from None
    if not isinstance(info.get("version"), int) or info["version"] > _VERSION:
        raise CheckpointError(f"{where}: written by a newer ggmlgrad (format version {info.get('version')!r})")
    checked = {}
    for spec in table:
        try:
            name, dt, shape = spec["name"], spec["dtype"], tuple(spec["shape"])
            np_dt = storage_np_dtype(dt)
        except (KeyError, TypeError):
            raise CheckpointError(f"{where}: the ggmlgrad metadata is corrupt (tensor entry {spec!r})") from None
        n = int(np.prod(shape, dtype=np.int64))
        if n == 0:
            checked[name] = np.zeros(shape, np_dt)
            continue
        raw = arrays.get(name)
        if raw is None:
            raise CheckpointError(f"{where}: tensor {name!r} listed in the metadata is missing from the file")
        raw = np.ascontiguousarray(raw)
        if raw.nbytes != n * np_dt.itemsize:
            raise CheckpointError(f"{where}: tensor {name!r} has {raw.nbytes} bytes, expected "
                                  f"{n * np_dt.itemsize} for {dt} {list(shape)} (truncated or corrupt file)")
        raw = raw.reshape(-1).view(np.uint8).view(np_dt).reshape(shape)
        if zlib.crc32(raw.tobytes()) != spec.get("crc32"):
            raise CheckpointError(f"{where}: tensor {name!r} is corrupt (checksum mismatch)")
        checked[name] = raw
    try:
        return unflatten(skeleton, table, checked, device, where)
    except (KeyError, TypeError, ValueError) as e:
        if isinstance(e, CheckpointError):
            raise
        raise CheckpointError(f"{where}: the ggmlgrad metadata is corrupt ({e})") from None


# ---------------------------------------------------------------------- atomic writes
def _atomic_write(path: str, write: Callable[[str], None]) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _foreign(arrays: dict, device, where: str) -> dict:
    out = {}
    for name, (dt, raw) in arrays.items():
        if dt in ("float64",):
            raw, dt = raw.astype(np.float32), "float32"
        elif dt in ("int64",):
            if raw.size and (raw.max() > 2**31 - 1 or raw.min() < -2**31):
                raise CheckpointError(f"{where}: int64 tensor {name!r} does not fit in int32")
            raw, dt = raw.astype(np.int32), "int32"
        if dt not in ("float32", "float16", "bfloat16", "int32"):
            raise CheckpointError(f"{where}: tensor {name!r} has dtype {dt}, which ggmlgrad cannot hold")
        from ..engine import new_from_host
        from .tree import _device
        t = Tensor._blank(tuple(raw.shape), dtypes.from_any(dt), _device(device))
        out[name] = new_from_host(t, np.ascontiguousarray(raw), "load()")
    return out


# ---------------------------------------------------------------------- safetensors
_ST_NAMES = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16", "int32": "int32",
             "float64": "float64", "int64": "int64", "uint8": "uint8", "bool": "bool", "uint16": "uint16",
             "int8": "int8"}
_ST_CODES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "I32": "int32", "F64": "float64",
             "I64": "int64", "U8": "uint8", "BOOL": "bool", "U16": "uint16", "I8": "int8"}


def _write_safetensors(tmp: str, leaves: list[Leaf], meta: str) -> None:
    import safetensors
    specs = {}
    for l in leaves:
        bits = np.ascontiguousarray(l.bits)
        specs[l.name] = safetensors.TensorSpec(dtype=_ST_NAMES[l.dtype], shape=tuple(l.shape),
                                               data_ptr=bits.ctypes.data, data_len=bits.nbytes)
    safetensors.serialize_file(specs, tmp, metadata={_META_KEY: meta})
    del leaves  # the arrays stay alive until here


def _read_safetensors(path: str, where: str):
    import safetensors
    with open(path, "rb") as f:
        data = f.read()
    try:
        items = safetensors.deserialize(data)
        n = int.from_bytes(data[:8], "little")
        header = json.loads(data[8:8 + n])
    except Exception as e:  # the Rust error type, JSON errors, short files
        raise CheckpointError(f"{where}: not a valid safetensors file (truncated or corrupt): {e}") from None
    meta = (header.get("__metadata__") or {}).get(_META_KEY)
    arrays = {}
    for name, d in items:
        dt = _ST_CODES.get(d["dtype"])
        if dt is None:
            if meta is None:
                raise CheckpointError(f"{where}: tensor {name!r} has dtype {d['dtype']}, which ggmlgrad cannot hold")
            continue
        raw = np.frombuffer(bytes(d["data"]), dtype=storage_np_dtype(dt)).reshape(d["shape"])
        arrays[name] = raw if meta is not None else (dt, raw)
    return meta, arrays


# ---------------------------------------------------------------------- GGUF
def _write_gguf(tmp: str, leaves: list[Leaf], meta: str) -> None:
    from gguf import GGMLQuantizationType as Q
    from gguf import GGUFWriter
    w = GGUFWriter(tmp, "ggmlgrad")
    w.add_string(_GGUF_KEY, meta)
    for l in leaves:
        if int(np.prod(l.shape, dtype=np.int64)) == 0:
            continue   # ggml has no empty tensors; the metadata carries the shape
        shape = tuple(l.shape) or (1,)
        bits = np.ascontiguousarray(l.bits).reshape(shape)
        if l.dtype in ("float32", "float16", "int32"):
            w.add_tensor(l.name, bits)
        elif l.dtype == "bfloat16":
            w.add_tensor(l.name, bits, raw_shape=shape, raw_dtype=Q.BF16)
        else:   # other NumPy dtypes (arrays in a state dict): raw bytes, typed by the metadata
            w.add_tensor(l.name, bits.reshape(-1).view(np.int8))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


_GGUF_TYPES = {0: "float32", 1: "float16", 30: "bfloat16", 26: "int32", 28: "float64", 27: "int64"}


def _read_gguf(path: str, where: str):
    from gguf import GGUFReader
    size = os.path.getsize(path)
    try:
        r = GGUFReader(path)
        meta = None
        field = r.fields.get(_GGUF_KEY)
        if field is not None:
            meta = bytes(field.parts[field.data[0]]).decode("utf-8")
        arrays = {}
        for t in r.tensors:
            if int(t.data_offset) + int(t.n_bytes) > size:
                raise CheckpointError(f"{where}: tensor {t.name!r} runs past the end of the file (truncated)")
            raw = np.asarray(t.data)
            if raw.nbytes != int(t.n_bytes):
                raise CheckpointError(f"{where}: tensor {t.name!r} is incomplete (truncated file)")
            if meta is not None:
                arrays[t.name] = np.frombuffer(raw.tobytes(), dtype=np.uint8)
                continue
            dt = _GGUF_TYPES.get(int(t.tensor_type))
            if dt is None:
                raise CheckpointError(f"{where}: tensor {t.name!r} has GGML type {t.tensor_type!r} "
                                      f"(quantized?), which ggmlgrad cannot hold")
            shape = tuple(int(s) for s in reversed(t.shape.tolist()))
            arrays[t.name] = (dt, np.frombuffer(raw.tobytes(), dtype=storage_np_dtype(dt)).reshape(shape))
    except CheckpointError:
        raise
    except Exception as e:
        raise CheckpointError(f"{where}: not a valid GGUF file (truncated or corrupt): {e}") from None
    return meta, arrays
