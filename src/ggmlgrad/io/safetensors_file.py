"""A validating ``.safetensors`` reader: every size and offset is checked against the file length
before any tensor data is read, so a corrupt header can neither allocate huge memory nor yield
wrong values. Layout: an 8-byte little-endian header length N, N bytes of JSON, then the data."""
from __future__ import annotations

import json
import math

from .errors import CheckpointError, Entry, FileBytes, check_ranges

MAX_HEADER = 100 << 20          # the safetensors library's own limit on the JSON header
CODES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "I32": "int32", "F64": "float64",
         "I64": "int64", "U8": "uint8", "BOOL": "bool", "U16": "uint16", "I8": "int8"}
ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2, "int32": 4, "float64": 8, "int64": 8, "uint8": 1,
            "bool": 1, "uint16": 2, "int8": 1}


def read_header(src: FileBytes, where: str) -> tuple[dict, list[Entry]]:
    """(the ``__metadata__`` dict, validated entries) of the file ``src``; no tensor data is read."""
    size = len(src)
    if size < 8:
        raise CheckpointError(f"{where}: not a valid safetensors file: {size} bytes, shorter than the "
                              f"8-byte header length (truncated or corrupt)")
    n = int.from_bytes(src.read(0, 8, "the header length"), "little")
    if n > size - 8 or n > MAX_HEADER:
        raise CheckpointError(f"{where}: not a valid safetensors file: the header declares {n} bytes but the "
                              f"file has {size - 8} after the length field (truncated or corrupt)")
    try:
        header = json.loads(src.read(8, n, "the header").decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise CheckpointError(f"{where}: not a valid safetensors file: the JSON header is corrupt or "
                              f"truncated ({e})") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{where}: not a valid safetensors file: the header is not a JSON object")
    meta = header.pop("__metadata__", None)
    if meta is not None and not (isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values())):
        raise CheckpointError(f"{where}: not a valid safetensors file: __metadata__ must map strings to strings")
    start = 8 + n
    entries = [_entry(name, spec, start, size, where) for name, spec in header.items()]
    check_ranges(entries, where)
    _check_fully_indexed(entries, start, size, where)
    return meta or {}, entries


def _entry(name: str, spec, start: int, size: int, where: str) -> Entry:
    what = f"{where}: tensor {name!r}"
    if not isinstance(spec, dict):
        raise CheckpointError(f"{what}: its header entry is not an object (corrupt file)")
    code, shape, offsets = spec.get("dtype"), spec.get("shape"), spec.get("data_offsets")
    if not isinstance(shape, list) or not all(_is_count(s) for s in shape):
        raise CheckpointError(f"{what}: shape {shape!r} is not a list of non-negative ints (corrupt file)")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_count(o) for o in offsets)
            and offsets[0] <= offsets[1]):
        raise CheckpointError(f"{what}: data_offsets {offsets!r} are not two increasing non-negative ints "
                              f"(corrupt file)")
    if not isinstance(code, str):
        raise CheckpointError(f"{what}: dtype {code!r} is not a string (corrupt file)")
    dtype = CODES.get(code)
    begin, end = start + offsets[0], start + offsets[1]
    if end > size:
        raise CheckpointError(f"{what}: its data (bytes {begin}..{end}) runs past the end of the file "
                              f"({size} bytes; truncated file)")
    if dtype is not None and math.prod(shape) * ITEMSIZE[dtype] != end - begin:
        raise CheckpointError(f"{what}: {code} {shape} needs {math.prod(shape) * ITEMSIZE[dtype]} bytes but "
                              f"the file gives it {end - begin} (corrupt file)")
    return Entry(name, dtype, code, tuple(shape), begin, end)


def _is_count(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _check_fully_indexed(entries: list[Entry], start: int, size: int, where: str) -> None:
    """The format's rule: the data section is covered by the tensors, without holes or trailing bytes."""
    covered = sum(e.end - e.begin for e in entries)
    if covered != size - start:
        raise CheckpointError(f"{where}: not a valid safetensors file: its tensors cover {covered} of the "
                              f"{size - start} data bytes (truncated, padded or corrupt file)")

