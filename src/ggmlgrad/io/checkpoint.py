"""save/load dispatch by extension, atomic writes, and the two file formats."""
from __future__ import annotations

import json
import math
import os
import re
import tempfile
import zlib
from typing import Callable

import numpy as np

from .._ggml import array_address
from ..engine import dtypes
from ..engine.dtypes import to_bool_storage
from ..tensor import Tensor
from . import gguf_file, safetensors_file, torch_format
from .errors import MAX_DIMS, CheckpointError, Entry, FileBytes
from .tree import Leaf, flatten, leaf_table, storage_np_dtype, unflatten

_META_KEY = "ggmlgrad"          # safetensors metadata key / GGUF key prefix
_GGUF_KEY = "ggmlgrad.state"
_CRC_KEY = "ggmlgrad.crc32"     # CRC-32 of the metadata JSON: a flipped byte in it is an error, not a changed value
_VERSION = 1


def _fmt(path) -> str:
    p = os.fspath(path)
    if p.endswith(".safetensors"):
        return "safetensors"
    if p.endswith(".gguf"):
        return "gguf"
    return "torch"          # torch.save's zip format, whatever the name (.pt, .pth, .bin, .ckpt, ...)


def _is_file_object(f) -> bool:
    return hasattr(f, "write") or hasattr(f, "read")


def save(obj, path) -> None:
    """Write a state dict (or any nest of tensors, numbers, strings, lists, tuples and dicts) to
    ``path``, atomically: ``.safetensors`` or ``.gguf`` by the extension, PyTorch's own zip format
    (``torch.load(path, weights_only=True)`` reads it) for any other name (``.pt``, ``.pth``, ...)
    and for a binary file object. NumPy arrays go into ``.safetensors``/``.gguf`` only.

    >>> import os, tempfile, ggmlgrad as gg
    >>> p = os.path.join(tempfile.mkdtemp(), "w.gguf")
    >>> gg.save({"w": gg.ones(2, dtype=gg.bfloat16)}, p)
    >>> gg.load(p)["w"].dtype
    ggmlgrad.bfloat16
    """
    if _is_file_object(path):
        torch_format.write(obj, path)
        return
    fmt = _fmt(path)
    if fmt == "torch":
        def write_torch(tmp: str) -> None:
            with open(tmp, "wb") as f:
                torch_format.write(obj, f)
        _atomic_write(os.fspath(path), write_torch)
        return
    skeleton, leaves = flatten(obj)
    meta = json.dumps({"version": _VERSION, "skeleton": skeleton, "tensors": leaf_table(leaves)},
                      separators=(",", ":"), allow_nan=False)
    writer = _write_safetensors if fmt == "safetensors" else _write_gguf
    _atomic_write(os.fspath(path), lambda tmp: writer(tmp, leaves, meta))


def load(path, device=None, *, map_location=None, weights_only: bool = True, mmap=None):
    """Read a file written by :func:`save` (the same nest, tensors on ``device``). A file from
    another tool comes back as a flat ``{name: Tensor}`` dict (float32/float16/bfloat16/int32;
    float64 and int64 are narrowed to float32 and int32). A PyTorch checkpoint (``torch.save``'s
    zip format, whatever its name, or a binary file object) is read without torch, as
    ``torch.load(weights_only=True)`` does: only tensors, storages, dtypes and containers are
    rebuilt, and a pickle asking for anything else raises :class:`~ggmlgrad.io.torch_format.UnsafeCheckpointError`
    naming it (``weights_only=False`` is accepted and reads the same way; a full pickled model
    cannot be loaded: save its ``state_dict()``). ``map_location`` (torch's name) is a device
    (a dict or function is not supported).

    Every header, size, offset, dtype and shape is validated against the file before any tensor
    is made, and each tensor's checksum as it is read: a truncated or corrupt file, a dtype
    ggmlgrad cannot hold or a tensor of more than 4 dimensions raises :class:`CheckpointError`
    naming the file (and the tensor) and returns nothing, so ``model.load_state_dict(gg.load(path))``
    changes nothing.

    >>> import os, tempfile, ggmlgrad as gg
    >>> p = os.path.join(tempfile.mkdtemp(), "bad.gguf")
    >>> _ = open(p, "wb").write(b"GGUF")
    >>> try:
    ...     gg.load(p)
    ... except gg.io.CheckpointError as e:
    ...     print(str(e).split(": ", 1)[1])
    not a valid GGUF file: truncated in the version (needs 4 bytes at offset 4, the file has 4)
    """
    device = _map_location(device, map_location)
    if _is_file_object(path):
        return _load_file_object(path, device)
    p = os.fspath(path)
    fmt = _fmt(p)
    if not os.path.exists(p):
        raise FileNotFoundError(f"gg.load: no such file: {p!r}")
    where = f"gg.load({p!r})"
    with open(p, "rb") as f:
        magic = f.read(4)
        f.seek(0)
        if magic == torch_format.ZIP_MAGIC:
            return torch_format.read(f, device, where)
        if magic == b"GGUF" and fmt != "gguf":
            fmt = "gguf"
        elif fmt == "torch":
            raise CheckpointError(f"{where}: neither a torch zip checkpoint, a .safetensors nor a .gguf file "
                                  f"(torch's legacy pre-1.6 format is not read: re-save it with a current torch)")
        src = FileBytes(f, where, "safetensors file" if fmt == "safetensors" else "GGUF file")
        meta, entries = _read_safetensors(src, where) if fmt == "safetensors" else _read_gguf(src, where)
        if meta is None:
            return _foreign(src, entries, device, where)
        table, skeleton = _parsed_meta(meta, where)
        by_name = {e.name: e for e in entries}
        leaves = _Leaves(src, dict(_checked_spec(spec, by_name, where) for spec in table), where)
        try:
            return unflatten(skeleton, table, leaves, device, where)
        except (KeyError, TypeError, ValueError, AttributeError, RecursionError) as e:
            if isinstance(e, CheckpointError):
                raise
            raise CheckpointError(f"{where}: the ggmlgrad metadata is corrupt ({e})") from None


def _map_location(device, map_location):
    if map_location is None:
        return device
    if device is not None:
        raise TypeError("gg.load: give device= or map_location=, not both")
    if isinstance(map_location, dict) or callable(map_location):
        raise TypeError("gg.load: map_location as a dict or function is not supported; give a device "
                        "(\"cpu\", gg.device(...))")
    return map_location


def _load_file_object(f, device):
    """A binary file object: a torch zip checkpoint read in place; a safetensors or GGUF file through
    a temporary copy (their readers work on real files)."""
    where = f"gg.load({getattr(f, 'name', type(f).__name__)!r})"
    start = f.tell() if hasattr(f, "tell") else 0
    magic = f.read(4)
    f.seek(start)
    if magic == torch_format.ZIP_MAGIC:
        return torch_format.read(f, device, where)
    suffix = ".gguf" if magic == b"GGUF" else ".safetensors"
    fd, tmp = tempfile.mkstemp(suffix=suffix)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(f.read())
        return load(tmp, device)
    finally:
        os.unlink(tmp)


def _parsed_meta(meta: str, where: str) -> tuple[list, object]:
    """(tensor table, skeleton) of the ggmlgrad metadata JSON."""
    try:
        info = json.loads(meta)
        table, skeleton, version = info["tensors"], info["skeleton"], info.get("version")
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
        raise CheckpointError(f"{where}: the ggmlgrad metadata is corrupt ({e})") from None
    if not isinstance(version, int) or isinstance(version, bool) or version > _VERSION:
        raise CheckpointError(f"{where}: written by a newer ggmlgrad (format version {version!r})")
    if not isinstance(table, list):
        raise CheckpointError(f"{where}: the ggmlgrad metadata is corrupt (no tensor table)")
    return table, skeleton


_TENSOR_DTYPES = ("float32", "float16", "bfloat16", "int32", "bool")


def _checked_spec(spec, by_name: dict, where: str) -> tuple[str, tuple]:
    """(name, (NumPy storage dtype, shape, file entry or None when empty, crc)) of one entry of the
    ggmlgrad tensor table, checked against the file's entries; no data is read yet."""
    try:
        name, dt, kind, shape = spec["name"], spec["dtype"], spec["kind"], spec["shape"]
        np_dt = storage_np_dtype(dt)
        if not isinstance(name, str) or kind not in ("tensor", "ndarray") or not isinstance(shape, list):
            raise TypeError
        if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape):
            raise TypeError
    except (KeyError, TypeError):
        raise CheckpointError(f"{where}: the ggmlgrad metadata is corrupt (tensor entry {spec!r})") from None
    shape = tuple(shape)
    if kind == "tensor":
        _check_tensor_shape(name, dt, shape, where)
        if dt not in _TENSOR_DTYPES:
            raise CheckpointError(f"{where}: tensor {name!r} has dtype {dt}, which ggmlgrad cannot hold")
    n = math.prod(shape)
    if n == 0:
        if len(shape) > 32:    # NumPy's own limit
            raise CheckpointError(f"{where}: tensor {name!r} has an impossible shape {list(shape)}")
        return name, (np_dt, shape, None, spec.get("crc32"))
    e = by_name.get(name)
    if e is None:
        raise CheckpointError(f"{where}: tensor {name!r} listed in the metadata is missing from the file")
    if e.end - e.begin != n * np_dt.itemsize:
        raise CheckpointError(f"{where}: tensor {name!r} has {e.end - e.begin} bytes, expected "
                              f"{n * np_dt.itemsize} for {dt} {list(shape)} (truncated or corrupt file)")
    return name, (np_dt, shape, e, spec.get("crc32"))


class _Leaves:
    """name → checked host array, read from the file when ``unflatten`` asks for it (one tensor in
    host memory at a time: each is uploaded before the next is read)."""

    def __init__(self, src: FileBytes, specs: dict, where: str):
        self.src, self.specs, self.where = src, specs, where

    def __getitem__(self, name: str) -> np.ndarray:
        np_dt, shape, e, crc = self.specs[name]
        if e is None:
            return np.zeros(shape, np_dt)
        raw = self.src.values(Entry(e.name, None, e.code, (math.prod(shape),), e.begin, e.end), np_dt)
        if zlib.crc32(raw) != crc:
            raise CheckpointError(f"{self.where}: tensor {name!r} is corrupt (checksum mismatch)")
        return raw.reshape(shape)


def _check_tensor_shape(name: str, dtype: str, shape: tuple, where: str) -> None:
    if len(shape) > MAX_DIMS:
        raise CheckpointError(f"{where}: tensor {name!r} ({dtype} {list(shape)}) has {len(shape)} dimensions; "
                              f"ggmlgrad tensors have at most {MAX_DIMS} (reshape it before saving)")


# ---------------------------------------------------------------------- atomic writes
_TMP_SUFFIX = ".tmp"


def _tmp_prefix(path: str) -> str:
    """Temporary files of a save to ``path``: ``.<name>.<pid>.<random>.tmp`` next to it."""
    return "." + os.path.basename(path) + "."


def _atomic_write(path: str, write: Callable[[str], None]) -> None:
    """Write to a temporary file, fsync it, rename it over ``path`` (atomic), fsync the folder.
    An interrupted save leaves the previous file as it was; a killed one leaves its temporary
    file, which the next save to the same path removes."""
    folder = os.path.dirname(os.path.abspath(path))
    _remove_stale_temporaries(folder, _tmp_prefix(path))
    fd, tmp = tempfile.mkstemp(prefix=f"{_tmp_prefix(path)}{os.getpid()}.", suffix=_TMP_SUFFIX, dir=folder)
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
    _fsync_folder(folder)


def _remove_stale_temporaries(folder: str, prefix: str) -> None:
    """Delete temporary files of earlier saves to the same path whose process is gone (killed
    mid-write); a save still running in another live process keeps its file."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    ours = re.compile(re.escape(prefix) + r"(\d+)\.[A-Za-z0-9_]+" + re.escape(_TMP_SUFFIX))
    for name in names:
        m = ours.fullmatch(name)    # exactly <prefix><pid>.<random>.tmp: never another target's file
        if m and not _process_alive(int(m.group(1))):
            try:
                os.unlink(os.path.join(folder, name))
            except OSError:
                pass


def _process_alive(pid: int) -> bool:
    if pid == os.getpid() or os.name == "nt":   # Windows' os.kill(pid, 0) sends CTRL_C: never probe there
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError, OverflowError):
        return True     # someone else's process, or we cannot tell: keep its file
    return True


def _fsync_folder(folder: str) -> None:
    """Make the rename itself durable (POSIX; a no-op where folders cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _foreign(src: FileBytes, entries: list, device, where: str) -> dict:
    """A file from another tool: every tensor's dtype and shape checked first, then each read and
    made in turn (float64/int64 narrowed)."""
    for e in entries:
        if e.dtype is None or e.dtype not in _TENSOR_DTYPES + ("float64", "int64"):
            raise CheckpointError(f"{where}: tensor {e.name!r} has dtype {e.dtype or e.code}, which ggmlgrad "
                                  f"cannot hold")
        _check_tensor_shape(e.name, e.dtype, e.shape, where)
    from ..engine import new_from_host
    from .tree import _device
    out = {}
    for e in entries:
        dt, raw = _narrowed(e.name, e.dtype, src.values(e, storage_np_dtype(e.dtype)), where)
        t = Tensor._blank(tuple(raw.shape), dtypes.from_any(dt), _device(device))
        out[e.name] = new_from_host(t, to_bool_storage(raw) if t.dtype.is_bool else raw, "load()")
    return out


def _narrowed(name: str, dt: str, raw: np.ndarray, where: str) -> tuple[str, np.ndarray]:
    if dt == "float64":
        return "float32", raw.astype(np.float32)
    if dt == "int64":
        if raw.size and (raw.max() > 2**31 - 1 or raw.min() < -2**31):
            raise CheckpointError(f"{where}: int64 tensor {name!r} does not fit in int32")
        return "int32", raw.astype(np.int32)
    return dt, raw


# ---------------------------------------------------------------------- safetensors
_ST_NAMES = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16", "int32": "int32",
             "float64": "float64", "int64": "int64", "uint8": "uint8", "bool": "bool", "uint16": "uint16",
             "int8": "int8"}


def _write_safetensors(tmp: str, leaves: list[Leaf], meta: str) -> None:
    import safetensors
    specs = {}
    for l in leaves:
        bits = np.ascontiguousarray(l.bits)
        specs[l.name] = safetensors.TensorSpec(dtype=_ST_NAMES[l.dtype], shape=tuple(l.shape),
                                               data_ptr=array_address(bits), data_len=bits.nbytes)
    safetensors.serialize_file(specs, tmp, metadata={_META_KEY: meta, _CRC_KEY: str(_crc(meta))})
    del leaves  # the arrays stay alive until here


def _read_safetensors(src: FileBytes, where: str):
    """(the ggmlgrad metadata or None for a foreign file, validated entries)."""
    meta, entries = safetensors_file.read_header(src, where)
    return _verified(meta.get(_META_KEY), meta.get(_CRC_KEY), where), entries


def _crc(meta: str) -> int:
    return zlib.crc32(meta.encode("utf-8"))


def _verified(meta, crc, where: str):
    """The metadata, checked against its CRC-32 (files written before the CRC existed have none)."""
    if meta is None and crc is not None:   # our file, whose metadata key was damaged
        raise CheckpointError(f"{where}: the ggmlgrad metadata is missing (corrupt file)")
    if meta is not None and crc is not None and str(crc) != str(_crc(meta)):
        raise CheckpointError(f"{where}: the ggmlgrad metadata is corrupt (checksum mismatch)")
    return meta


# ---------------------------------------------------------------------- GGUF
def _write_gguf(tmp: str, leaves: list[Leaf], meta: str) -> None:
    from gguf import GGMLQuantizationType as Q
    from gguf import GGUFWriter
    w = GGUFWriter(tmp, "ggmlgrad")
    w.add_string(_GGUF_KEY, meta)
    w.add_uint32(_CRC_KEY, _crc(meta))
    for l in leaves:
        if int(np.prod(l.shape, dtype=np.int64)) == 0:
            continue   # ggml has no empty tensors; the metadata carries the shape
        shape = tuple(l.shape) or (1,)
        if len(shape) > MAX_DIMS:   # an ndarray leaf: ggml files hold at most 4 dims; the metadata has its shape
            shape = (int(np.prod(shape)),)
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


def _read_gguf(src: FileBytes, where: str):
    """(the ggmlgrad metadata or None for a foreign file, validated entries)."""
    kv, entries = gguf_file.read_header(src, where)
    meta = kv.get(_GGUF_KEY)
    if meta is not None and not isinstance(meta, str):
        raise CheckpointError(f"{where}: the ggmlgrad metadata is corrupt (key {_GGUF_KEY!r} is not a string)")
    return _verified(meta, kv.get(_CRC_KEY), where), entries
