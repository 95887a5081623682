"""Host ↔ device transfers, counted by site and told to the context's observer (capture)."""
from __future__ import annotations

import numpy as np

from .._ggml.nodes import host_view, read_array, write_array
from ..runtime import Device, HostStorage, Storage
from ..runtime.memory import upload_storage
from ..runtime.faults import ARMED as _FAULTS
from .array import Array, COMPUTED, FAILED
from .context import current
from .dtypes import DType, bf16_to_f32, bfloat16, f32_to_bf16, float16, float32, int32, to_bool_storage
from .errors import PendingError
from .queue import ENGINE, no_value_message


def host_array(data: np.ndarray, dtype: DType) -> np.ndarray:
    """``data`` converted to the bytes ``dtype`` stores, C-contiguous."""
    if dtype is bfloat16:
        return f32_to_bf16(np.asarray(data, dtype=np.float32))
    if dtype.is_bool:
        return to_bool_storage(data)
    return np.ascontiguousarray(data, dtype=dtype.np_dtype)


def upload_into(a: Array, data: np.ndarray, site: str) -> None:
    """Write host ``data`` (already in ``a``'s storage dtype) into ``a``'s storage."""
    c = current()
    if c.observer is not None:
        c.observer.on_upload(site)
    n = data.nbytes
    s = a._storage
    if n and type(s) is Storage and s.device.is_host and not _FAULTS:
        _write_pooled_host(s, data)
    else:
        write_array(s, data)
    counters = c.counters
    counters.uploads[site] += 1
    counters.upload_bytes[site] += n


_BYTES: dict[int, np.ndarray] = {}  # address of a pooled host block → a uint8 NumPy view of it


_TYPED: dict[tuple, np.ndarray] = {}  # (address, shape, dtype) → a view of a pooled host block as that array


def _write_pooled_host(s: Storage, data: np.ndarray) -> None:
    """Copy the C-contiguous ``data`` into host storage ``s`` with NumPy (taking an array's address
    through ctypes costs more than a small copy). Blocks are recycled, so their views are kept; a view
    is only used while a storage owns its address, and never past that storage's size."""
    n = data.nbytes
    key = (s.data, data.shape, data.dtype)
    t = _TYPED.get(key)
    if t is not None and n <= s.capacity:  # an observation's shape again (gg.tensor(obs) per step): one copy
        t[...] = data
        return
    v = _BYTES.get(s.data)
    if v is None or len(v) < n:
        if len(_BYTES) >= 4096:
            _BYTES.clear()
        v = _BYTES[s.data] = host_view(s, s.capacity)
    v[:n] = data.reshape(-1).view(np.uint8)
    if n and n <= 4096:  # small arrays (observations, rows) come again in the same shape
        if len(_TYPED) >= 4096:
            _TYPED.clear()
        _TYPED[key] = v[:n].view(data.dtype).reshape(data.shape)


def new_from_host(a: Array, data: np.ndarray, site: str) -> Array:
    """Give the freshly initialised ``a`` a storage holding ``data``."""
    if len(a.shape) > 4:    # the last gate before ggml, whose tensors have 4 dims (it asserts on more)
        raise ValueError(f"{site}: shape {a.shape} has {len(a.shape)} dimensions; ggmlgrad supports at most 4")
    a._storage = upload_storage(a.device, a.numel_ * a.dtype.itemsize or 1)  # (the last upload's, once dropped)
    a._status = COMPUTED
    upload_into(a, data, site)
    return a


def download(a: Array, site: str) -> np.ndarray:
    """A NumPy copy of ``a``'s value (drains the queue when ``a`` is pending)."""
    if a._status != COMPUTED:
        if a._status != FAILED:
            ENGINE.drain("read")
        if a._status != COMPUTED:  # failed, or pending in a queue that no longer exists
            raise PendingError(a._error or no_value_message(a))
    c = current()
    if c.observer is not None:
        c.observer.on_download(site)
    out = np.empty(a.shape, dtype=a.dtype.np_dtype)
    n = out.nbytes
    read_array(a._storage, out)
    c.counters.downloads[site] += 1
    c.counters.download_bytes[site] += n
    if a.dtype is bfloat16:
        return bf16_to_f32(out)
    if a.dtype.is_bool:
        return out != 0   # float32 0/1 storage → np.bool_
    return out


_TYPESTR = {float32: "<f4", int32: "<i4", float16: "<f2"}  # dtypes whose storage NumPy reads as it is


def host_value(a: Array) -> np.ndarray | None:
    """A NumPy view of the computed ``a``'s memory when that is host memory of its own (a
    ``Storage`` or ``HostStorage`` of a float32, float16 or int32 tensor with elements); None
    otherwise (pending, failed, a view's alias, a GPU, bool/bfloat16 storage, a fault armed).

    The host path of small reads and writes (``item()``, ``x[i] = v``): NumPy on the memory
    itself, no graph. The view does not keep the memory alive: only for a caller that holds
    ``a`` while it uses it, never handed out."""
    s = a._storage
    t = type(s)
    if (t is not Storage and t is not HostStorage) or a._status != COMPUTED or _FAULTS or not a.numel_:
        return None
    ts = _TYPESTR.get(a.dtype)
    if ts is None or not s.device.is_host:
        return None
    return s.host_array(ts, a.shape, a.numel_ * a.dtype.itemsize)


def count_download(site: str, nbytes: int) -> bool:
    """Count a host read of ``nbytes`` at ``site`` as :func:`download` does; False (nothing
    counted) while an observer (a capture recording) watches reads: it must see them."""
    c = current()
    if c.observer is not None:
        return False
    counters = c.counters
    counters.downloads[site] += 1
    counters.download_bytes[site] += nbytes
    return True


_ = Device
