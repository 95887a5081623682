"""A validating ``.gguf`` reader: every count, size and offset is checked against the file length
before any tensor data is read, so a corrupt header can neither allocate huge memory nor yield
wrong values.

Layout (little-endian): magic ``GGUF``, version (2 or 3), tensor count, key/value count, the
key/value pairs, the tensor infos (name, dims innermost first, ggml type, offset), padding to the
alignment (``general.alignment``, default 32), then the tensor data at those offsets."""
from __future__ import annotations

import math
import struct

from .errors import CheckpointError, Entry, FileBytes, check_ranges

# ggml type → (dtype name or None, item size); quantized types are not listed (ggmlgrad cannot hold them)
GGML_TYPES = {0: ("float32", 4), 1: ("float16", 2), 30: ("bfloat16", 2), 26: ("int32", 4), 28: ("float64", 8),
              27: ("int64", 8), 24: ("int8", 1), 25: (None, 2)}
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
MAX_FILE_DIMS = 16          # more is certainly corrupt (ggml itself has 4)
MAX_NESTING = 8             # arrays of arrays in the metadata


class _Cursor:
    """Reads the header of the file ``src`` front to back; running out of bytes is a truncated file."""

    def __init__(self, src: FileBytes, where: str):
        self.src, self.pos, self.where = src, 0, where

    def take(self, n: int, what: str) -> bytes:
        out = self.src.read(self.pos, n, what)
        self.pos += n
        return out

    def skip(self, n: int, what: str) -> None:
        """Step over ``n`` bytes (an array we do not use) after checking they are in the file."""
        self.src.check(self.pos, n, what)
        self.pos += n

    def unpack(self, fmt: str, what: str):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what: str) -> str:
        n = self.unpack("<Q", what)
        try:
            return self.take(n, what).decode("utf-8")
        except UnicodeDecodeError:
            raise CheckpointError(f"{self.where}: not a valid GGUF file: {what} is not UTF-8 (corrupt file)") from None


def read_header(src: FileBytes, where: str) -> tuple[dict, list[Entry]]:
    """(the metadata's key/values, validated entries) of the file ``src``; no tensor data is read."""
    cur = _Cursor(src, where)
    if cur.take(4, "the magic number") != b"GGUF":
        raise CheckpointError(f"{where}: not a valid GGUF file (wrong magic number)")
    version = cur.unpack("<I", "the version")
    if version not in (2, 3):
        raise CheckpointError(f"{where}: GGUF version {version} is not supported (2 and 3 are; a big-endian "
                              f"file shows as a huge version)")
    n_tensors = cur.unpack("<Q", "the tensor count")
    n_kv = cur.unpack("<Q", "the key/value count")
    kv = {}
    for i in range(n_kv):   # each pair takes at least 13 bytes, so a huge count runs out of file quickly
        key = cur.string(f"key {i}")
        kv[key] = _value(cur, cur.unpack("<I", f"the type of {key!r}"), key, 0)
    alignment = _alignment(kv.get("general.alignment", 32), where)
    infos = [_tensor_info(cur, i) for i in range(n_tensors)]
    start = -(-cur.pos // alignment) * alignment
    entries, seen = [], set()
    for name, dims, ggml_type, offset in infos:
        if name in seen:
            raise CheckpointError(f"{where}: tensor {name!r} appears twice (corrupt file)")
        seen.add(name)
        entries.append(_entry(name, dims, ggml_type, offset, start, alignment, len(src), where))
    check_ranges(entries, where)
    return kv, entries


def _value(cur: _Cursor, vtype: int, key: str, depth: int):
    """One metadata value; arrays are skipped (returned as None) after their sizes are checked."""
    if vtype in _SCALARS:
        return cur.unpack(_SCALARS[vtype], f"the value of {key!r}")
    if vtype == _STRING:
        return cur.string(f"the value of {key!r}")
    if vtype == _ARRAY and depth < MAX_NESTING:
        item = cur.unpack("<I", f"the item type of {key!r}")
        n = cur.unpack("<Q", f"the length of {key!r}")
        if item in _SCALARS:
            cur.skip(n * struct.calcsize(_SCALARS[item]), f"the array {key!r}")
            return None
        for _ in range(n):      # strings and arrays take at least 8 bytes each: bounded by the file
            _value(cur, item, key, depth + 1)
        return None
    raise CheckpointError(f"{cur.where}: not a valid GGUF file: key {key!r} has unknown value type {vtype} "
                          f"(corrupt file)")


def _alignment(value, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0 or value & (value - 1):
        raise CheckpointError(f"{where}: not a valid GGUF file: general.alignment {value!r} is not a power "
                              f"of two (corrupt file)")
    return value


def _tensor_info(cur: _Cursor, i: int) -> tuple:
    name = cur.string(f"the name of tensor {i}")
    n_dims = cur.unpack("<I", f"the dimensions of tensor {name!r}")
    if n_dims > MAX_FILE_DIMS:
        raise CheckpointError(f"{cur.where}: tensor {name!r} declares {n_dims} dimensions (corrupt file)")
    dims = struct.unpack(f"<{n_dims}Q", cur.take(8 * n_dims, f"the shape of tensor {name!r}"))
    ggml_type = cur.unpack("<I", f"the type of tensor {name!r}")
    offset = cur.unpack("<Q", f"the offset of tensor {name!r}")
    return name, dims, ggml_type, offset


def _entry(name, dims, ggml_type, offset, start, alignment, size, where) -> Entry:
    what = f"{where}: tensor {name!r}"
    if ggml_type not in GGML_TYPES:
        raise CheckpointError(f"{what} has GGML type {ggml_type} (quantized or unknown), which ggmlgrad "
                              f"cannot hold")
    dtype, itemsize = GGML_TYPES[ggml_type]
    if offset % alignment:
        raise CheckpointError(f"{what}: offset {offset} is not a multiple of the alignment {alignment} "
                              f"(corrupt file)")
    begin = start + offset
    end = begin + math.prod(dims) * itemsize
    if end > size and end > begin:
        raise CheckpointError(f"{what}: its data (bytes {begin}..{end}) runs past the end of the file "
                              f"({size} bytes; truncated or corrupt file)")
    return Entry(name, dtype, f"GGML type {ggml_type}", tuple(reversed(dims)), begin, end)

