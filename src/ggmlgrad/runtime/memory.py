"""Device memory: one ggml backend buffer per storage, recycled through a caching pool.

A ``Storage`` owns a contiguous block on a device. Its lifetime follows Python
references: when the last holder (a tensor, a queued node's keep-alive list, a
recording) lets go, the block goes back to the pool for reuse instead of being
freed, so a training loop does not malloc per op and memory stays flat.
"""
from __future__ import annotations

import math
import os
import threading
from sys import getrefcount

import numpy as np

from .._ggml import ScratchTensor, array_address, consts, host_bytes, host_copy, init_leaf_header, lib, new_context
from .device import Device
from .faults import ARMED as _FAULTS, hit as _fault
from .placement import free_buffer

_MAX_CACHED_BYTES = int(os.environ.get("GGMLGRAD_POOL_BYTES", str(1 << 30)))

# Device work of every thread, one call at a time, on a device that is not the host: a transfer or
# a buffer allocation on one Python thread while another thread's graph computed gave wrong values
# (a training loss of -0.07 for 0.96) and crashes on lavapipe (tests/test_thread_isolation.py on
# vulkan:0): ggml-vulkan's copies and compute submissions share the device's queue and staging
# buffer. Computes and plan allocations take it inside runtime.executor.COMPUTE_LOCK; transfers and
# allocations alone. Re-entrant: a compute's bind allocates and uploads. Host memory never takes it.
DEVICE_LOCK = threading.RLock()


def _size_class(nbytes: int) -> int:
    n = max(nbytes, 64)
    if n <= (1 << 20):
        return (n + 255) & ~255
    # Above 1 MiB: eight classes per power of two bound the waste to 12.5%.
    step = 1 << (n.bit_length() - 4)
    return (n + step - 1) // step * step


class _Pool:
    def __init__(self) -> None:
        self.free: dict[tuple[int, int], list[tuple[int, int]]] = {}
        self.cached_bytes = 0
        self.live_bytes = 0
        self.live_count = 0
        # Re-entrant: a garbage collection triggered by an allocation inside take()/give()
        # can run Storage.__del__ → give() on this same thread (a plain Lock deadlocks).
        self.lock = threading.RLock()

    def take(self, device: Device, nbytes: int) -> tuple[int, int, int]:
        size = _size_class(nbytes)
        key = (device.dev_ptr, size)
        with self.lock:
            lst = self.free.get(key)
            if lst:
                buf, data = lst.pop()
                self.cached_bytes -= size
                self.live_bytes += size
                self.live_count += 1
                return buf, data, size
        buf = _alloc_buffer(device, size)
        if not buf:
            self.trim(0)
            buf = _alloc_buffer(device, size)
            if not buf:
                raise MemoryError(f"ggmlgrad: could not allocate {size} bytes on {device.name}")
        with self.lock:
            self.live_bytes += size
            self.live_count += 1
        return buf, lib.backend_buffer_get_base(buf), size

    def give(self, dev_ptr: int, buf: int, data: int, size: int) -> None:
        with self.lock:
            self.live_bytes -= size
            self.live_count -= 1
            if self.cached_bytes + size > _MAX_CACHED_BYTES:
                free_buffer(dev_ptr, buf)
                _SYNTHETIC_BASES.pop(buf, None)
                return
            lst = self.free.get((dev_ptr, size))
            if lst is None:
                lst = self.free[(dev_ptr, size)] = []
            lst.append((buf, data))
            self.cached_bytes += size

    def trim(self, keep_bytes: int = 0) -> None:
        with self.lock:
            for key in list(self.free):
                lst = self.free[key]
                while lst and self.cached_bytes > keep_bytes:
                    buf, _ = lst.pop()
                    free_buffer(key[0], buf)
                    _SYNTHETIC_BASES.pop(buf, None)
                    self.cached_bytes -= key[1]
                if not lst:
                    del self.free[key]


def _alloc_buffer(device: Device, size: int) -> int:
    if device.is_host:
        return lib.backend_buft_alloc_buffer(device.buffer_type, size)
    with DEVICE_LOCK:
        return lib.backend_buft_alloc_buffer(device.buffer_type, size)


_POOL = _Pool()


# ---------------------------------------------------------------------------- device addresses
# torch's data_ptr() of a CUDA tensor is its device address: distinct live allocations never share
# one. ggml-cuda's buffers report their device pointers, but ggml-vulkan's report one made-up base
# (0x1000) for every buffer (its kernels take offsets into each buffer's own VkBuffer). On such a
# device each buffer gets a synthetic base of its own, from an address range no two live buffers
# share, for data_ptr() only (ggml keeps its own addresses); a freed buffer's entry goes.
_SYNTHETIC_BASES: dict[int, int] = {}     # ggml buffer -> its synthetic base
_SHARED_BASE: dict[int, bool] = {}        # dev_ptr -> whether that device reports one base for all buffers
_next_synthetic = [1 << 44]                # 16 TiB: above user-space heap addresses of the host
_SYNTHETIC_ALIGN = 1 << 16


def _reports_one_base(device: Device) -> bool:
    """Whether two live buffers of ``device`` report the same base address (ggml-vulkan)."""
    a, b = _alloc_buffer(device, 256), _alloc_buffer(device, 256)
    try:
        return bool(a and b) and lib.backend_buffer_get_base(a) == lib.backend_buffer_get_base(b)
    finally:
        for buf in (a, b):
            if buf:
                free_buffer(device.dev_ptr, buf)


def device_address(storage) -> int:
    """The address torch's ``data_ptr()`` reports for ``storage``'s first byte: on the host and on a
    device whose buffers have addresses of their own (CUDA), ggml's; on a device whose buffers all
    report one base (Vulkan), a synthetic address unique among live buffers (see above)."""
    device = storage.device
    if device.is_host:
        return storage.data
    shared = _SHARED_BASE.get(device.dev_ptr)
    if shared is None:
        shared = _SHARED_BASE[device.dev_ptr] = _reports_one_base(device)
    if not shared:
        return storage.data
    buf = storage.buffer
    with _POOL.lock:
        base = _SYNTHETIC_BASES.get(buf)
        if base is None:
            base = _SYNTHETIC_BASES[buf] = _next_synthetic[0]
            span = lib.backend_buffer_get_size(buf) + _SYNTHETIC_ALIGN   # a gap: ends never touch
            _next_synthetic[0] += (span + _SYNTHETIC_ALIGN - 1) // _SYNTHETIC_ALIGN * _SYNTHETIC_ALIGN
    return base + (storage.data - lib.backend_buffer_get_base(buf))


class _LeafHeaders:
    """ggml tensor headers that outlive graphs: one per storage, recycled with it.

    A computed tensor enters every graph as a leaf aliasing its memory. Making that leaf anew in
    each graph cost two ggml calls (~2.6 µs) per tensor per graph; a storage keeps its header
    instead. Headers are carved from ggml contexts of fixed size (contexts cannot free single
    tensors), and return to the free list when their storage is released.
    """

    PER_CONTEXT = 1024

    def __init__(self) -> None:
        self.free: list[int] = []
        self.contexts: list[int] = []

    def take(self) -> int:
        if not self.free:
            ctx = new_context(self.PER_CONTEXT * lib.tensor_overhead())
            if not ctx:
                raise MemoryError("ggmlgrad: ggml_init failed for leaf headers")
            self.contexts.append(ctx)
            self.free.extend(lib.new_tensor_1d(ctx, consts.TYPE_I8, 1) for _ in range(self.PER_CONTEXT))
        return self.free.pop()

    def give(self, ptr: int) -> None:
        self.free.append(ptr)


_HEADERS = _LeafHeaders()


class Storage:
    """A contiguous block of device memory (``buffer``/``data`` are ggml pointers as ints)."""

    __slots__ = ("device", "buffer", "data", "nbytes", "capacity", "leaf", "leaf_key", "host", "__weakref__")

    def __init__(self, device: Device, nbytes: int):
        self.device = device
        self.nbytes = nbytes
        self.leaf = 0
        self.leaf_key = None
        self.host = None
        # _POOL.take's hit path inlined: a storage is made on every op.
        size = ((nbytes + 255) & ~255 or 256) if nbytes <= 1048576 else _size_class(nbytes)
        pool = _POOL
        with pool.lock:
            lst = pool.free.get((device.dev_ptr, size))
            if lst:
                self.buffer, self.data = lst.pop()
                self.capacity = size
                pool.cached_bytes -= size
                pool.live_bytes += size
                pool.live_count += 1
                return
        try:
            self.buffer, self.data, self.capacity = pool.take(device, nbytes)
        except BaseException:
            self.buffer = 0  # what __del__ reads of a storage that never got memory
            raise

    def _release_leaf(self) -> None:
        """Give this storage's reused leaf header back (see :meth:`leaf_header`)."""
        if self.leaf:
            with _POOL.lock:
                _HEADERS.give(self.leaf)
                self.leaf = 0

    def __del__(self) -> None:
        buf = self.buffer
        if buf:
            self.buffer = 0
            try:
                if self.leaf:
                    self._release_leaf()
                # _POOL.give's path of a block the pool keeps, inlined: a storage goes on every op
                size = self.capacity
                pool = _POOL
                with pool.lock:
                    if pool.cached_bytes + size <= _MAX_CACHED_BYTES:
                        pool.live_bytes -= size
                        pool.live_count -= 1
                        lst = pool.free.get((self.device.dev_ptr, size))
                        if lst is None:
                            lst = pool.free[(self.device.dev_ptr, size)] = []
                        lst.append((buf, self.data))
                        pool.cached_bytes += size
                        return
                pool.give(self.device.dev_ptr, buf, self.data, size)
            except Exception:  # interpreter shutdown: the OS reclaims it
                pass

    def leaf_header(self, ggml_type: int, ne: tuple, itemsize: int) -> int:
        """This storage's persistent leaf header for a ``ne``-shaped ``ggml_type`` view of it, or 0
        when it already has one of another shape (the caller then makes a per-graph leaf)."""
        key = (ggml_type, ne)
        if self.leaf_key == key:
            return self.leaf
        if self.leaf:
            return 0
        with _POOL.lock:
            h = _HEADERS.take()
        init_leaf_header(h, ggml_type, ne, itemsize)
        lib.backend_tensor_alloc(self.buffer, h, self.data)
        self.leaf, self.leaf_key = h, key
        return h

    def host_array(self, typestr: str, shape: tuple, nbytes: int) -> np.ndarray:
        """A NumPy view (``typestr``, ``shape``, the first ``nbytes``) of this host storage's memory,
        made once per storage and layout. It does not keep the storage alive (a view that did
        would make a reference cycle, and the block would wait for the garbage collector): only
        for a caller that holds the storage, never handed to users (tensor/interop.py's views are)."""
        h = self.host
        if h is not None and h[0] == typestr and h[1] == shape:
            return h[2]
        a = host_bytes(self.data, nbytes).view(typestr).reshape(shape)
        self.host = (typestr, shape, a)
        return a

    def __reduce__(self):
        # A copied Storage would free the same device block twice.
        raise TypeError("ggmlgrad Storage cannot be copied or pickled; copy the tensor instead")

    def __copy__(self):
        return self.__reduce__()

    def __deepcopy__(self, memo):
        return self.__reduce__()

    # Raw byte movement; counting and capture guards live in the engine.
    def write(self, src_addr: int, nbytes: int, offset: int = 0) -> None:
        if _FAULTS:
            _fault("upload")
        if self.device.is_host:
            host_copy(self.data + offset, src_addr, nbytes)
        else:
            with DEVICE_LOCK:
                t = _scratch().point(self.buffer, self.data, self.nbytes)
                lib.backend_tensor_set(t, src_addr, offset, nbytes)

    def read(self, dst_addr: int, nbytes: int, offset: int = 0) -> None:
        if _FAULTS:
            _fault("download")
        if self.device.is_host:
            host_copy(dst_addr, self.data + offset, nbytes)
        else:
            with DEVICE_LOCK:
                t = _scratch().point(self.buffer, self.data, self.nbytes)
                lib.backend_tensor_get(t, dst_addr, offset, nbytes)


class HostStorage(Storage):
    """Host memory that ggmlgrad does not own (a NumPy array, a DLPack producer's tensor), wrapped
    as a ggml CPU buffer: tensors on it share that memory (``gg.from_numpy``, ``gg.from_dlpack``).
    ``owner`` keeps the memory alive as long as this storage lives; nothing goes to the pool.

    ggml wants a buffer's base aligned to 32 bytes: the buffer starts at the aligned address at or
    below ``addr``, and the tensor's data at ``addr`` itself (ggml never writes outside a tensor).
    """

    __slots__ = ("owner",)

    _ALIGN = 32

    def __init__(self, device: Device, addr: int, nbytes: int, owner):
        if not device.is_host:
            raise ValueError(f"HostStorage: {device.name} is not a host device")
        base = addr & ~(self._ALIGN - 1)
        self.buffer = 0
        buf = lib.backend_cpu_buffer_from_ptr(base, addr - base + nbytes)
        if not buf:
            raise MemoryError("ggmlgrad: ggml could not wrap host memory as a buffer")
        self.device, self.nbytes, self.capacity = device, nbytes, 0
        self.leaf, self.leaf_key, self.host = 0, None, None
        self.buffer, self.data, self.owner = buf, addr, owner

    def __del__(self) -> None:
        buf = self.buffer
        if buf:
            self.buffer = 0
            try:
                self._release_leaf()
                lib.backend_buffer_free(buf)  # frees ggml's buffer record, not the wrapped memory
            except Exception:  # interpreter shutdown
                pass
        self.owner = None


class SliceAlias:
    """A contiguous region of another storage (``nbytes`` at byte ``offset``): the memory of a view
    that shares its base's (``x[1]``, ``x.view(-1)``); keeps the base's storage alive. Quacks like
    :class:`Storage` for the engine (``device``, ``buffer``, ``data``, ``nbytes``, ``read``/``write``)."""

    __slots__ = ("parent", "offset", "device", "buffer", "data", "nbytes", "__weakref__")

    def __init__(self, parent: Storage, offset: int, nbytes: int):
        self.parent, self.offset, self.nbytes = parent, offset, nbytes
        self.device, self.buffer, self.data = parent.device, parent.buffer, parent.data + offset

    def write(self, src_addr: int, nbytes: int, offset: int = 0) -> None:
        self.parent.write(src_addr, nbytes, self.offset + offset)

    def read(self, dst_addr: int, nbytes: int, offset: int = 0) -> None:
        self.parent.read(dst_addr, nbytes, self.offset + offset)


class StridedAlias(SliceAlias):
    """A strided region of another storage: a non-contiguous view (``x.T``, ``x[:, 1]``,
    ``expand``). ``shape`` and byte ``strides`` (torch's order, outermost first, >= 0) say where
    each element lives from ``data``; ``nbytes`` is the span from the first to past the last element.
    ``read``/``write`` gather/scatter the elements in C order (the engine's contiguous layout)."""

    __slots__ = ("shape", "strides", "itemsize")

    def __init__(self, parent: Storage, offset: int, shape: tuple, strides: tuple, itemsize: int):
        span = itemsize + sum((n - 1) * st for n, st in zip(shape, strides)) if all(shape) else 0
        super().__init__(parent, offset, span)
        self.shape, self.strides, self.itemsize = tuple(shape), tuple(strides), itemsize

    def _elements(self, raw: "np.ndarray") -> "np.ndarray":
        """The elements of ``raw`` (this region's span as bytes), as a strided array."""
        return np.lib.stride_tricks.as_strided(raw.view(f"V{self.itemsize}"), self.shape, self.strides)

    def read(self, dst_addr: int, nbytes: int, offset: int = 0) -> None:
        if offset or nbytes != self.itemsize * math.prod(self.shape):
            raise ValueError("StridedAlias.read: only whole reads (the engine reads a tensor at once)")
        if not nbytes:
            return
        raw = np.empty(self.nbytes, np.uint8)
        self.parent.read(array_address(raw), self.nbytes, self.offset)
        host_bytes(dst_addr, nbytes).view(f"V{self.itemsize}").reshape(self.shape)[...] = self._elements(raw)

    def write(self, src_addr: int, nbytes: int, offset: int = 0) -> None:
        if offset or nbytes != self.itemsize * math.prod(self.shape):
            raise ValueError("StridedAlias.write: only whole writes (the engine writes a tensor at once)")
        if not nbytes:
            return
        src = host_bytes(src_addr, nbytes).copy()
        raw = np.empty(self.nbytes, np.uint8)
        self.parent.read(array_address(raw), self.nbytes, self.offset)  # the bytes between elements stay
        self._elements(raw)[...] = src.view(f"V{self.itemsize}").reshape(self.shape)
        self.parent.write(array_address(raw), self.nbytes, self.offset)


_scratch_tensor: ScratchTensor | None = None


def _scratch() -> ScratchTensor:
    global _scratch_tensor
    if _scratch_tensor is None:
        _scratch_tensor = ScratchTensor()
    return _scratch_tensor


def allocate(device: Device, nbytes: int) -> Storage:
    return Storage(device, nbytes)


# Callables ``fn(drop) -> (count, bytes)`` over storages that only a cached plan holds, as the memory
# of its next run's result (engine/plans.py ``OpPlan``): cached memory, not live; ``drop=True`` lets them go.
_SPARE_HOLDERS: list = []


def register_spares(fn) -> None:
    """Count the storages ``fn`` reports as cached memory (see ``_SPARE_HOLDERS``)."""
    _SPARE_HOLDERS.append(fn)


# ---------------------------------------------------------------------- upload storages
# A new tensor from host data (``gg.tensor(obs)`` per environment step) takes the storage of the last
# upload of its size once nothing holds that any more (the last observation was dropped): no pool
# round trip (a storage's making and release cost ~0.9 µs). Reused only when this table is the one
# holder, as the pool reuses a block only when its storage is gone: same safety.
_UPLOAD_SPARES: dict[tuple[int, int], Storage] = {}  # (device, nbytes) → the last upload's storage
_UPLOAD_SPARE_MAX_BYTES = 1 << 12
_UPLOAD_SPARE_SIZES = 64  # distinct sizes kept at most


def _unshared_refs() -> int:
    """What ``getrefcount`` reads in :func:`upload_storage` for a storage only the caller's local holds
    (measured, not assumed: the count depends on the interpreter)."""
    d = {0: object()}
    s = d.pop(0)
    return getrefcount(s)


_UNSHARED = _unshared_refs()


def upload_storage(device: Device, nbytes: int) -> Storage:
    """A storage of ``nbytes`` for a new tensor's uploaded value: the last upload's of this size when
    nothing else holds it (small sizes), else a new one from the pool."""
    if nbytes > _UPLOAD_SPARE_MAX_BYTES:
        return Storage(device, nbytes)
    key = (device.dev_ptr, nbytes)
    s = _UPLOAD_SPARES.pop(key, None)  # (atomic: two threads never take the same one)
    if s is None or getrefcount(s) != _UNSHARED:
        s = Storage(device, nbytes)
    if len(_UPLOAD_SPARES) < _UPLOAD_SPARE_SIZES:
        _UPLOAD_SPARES[key] = s
    return s


def _upload_spares(drop: bool) -> tuple[int, int]:
    """(count, bytes) of the upload storages only :data:`_UPLOAD_SPARES` holds (cached memory, which
    the pool counts as live); ``drop``: let them go back to the pool."""
    n = b = 0
    s = None
    for key in list(_UPLOAD_SPARES):
        s = _UPLOAD_SPARES.pop(key, None)
        if s is None:
            continue
        if getrefcount(s) == _UNSHARED:
            n += 1
            b += s.capacity
            if drop:
                continue  # (dropped: back to the pool when s goes)
        _UPLOAD_SPARES.setdefault(key, s)
    del s
    return n, b


register_spares(_upload_spares)


def pool_stats() -> dict[str, int]:
    """Live and cached device bytes (for memory tests and diagnosis). Memory that a cached plan
    keeps only for its next result counts as cached."""
    n = b = 0
    for fn in _SPARE_HOLDERS:
        k, m = fn(False)
        n += k
        b += m
    return {"live_bytes": _POOL.live_bytes - b, "live_count": _POOL.live_count - n,
            "cached_bytes": _POOL.cached_bytes + b}


def empty_cache() -> None:
    """Free every cached (unused) block back to the device."""
    for fn in _SPARE_HOLDERS:
        fn(True)
    _POOL.trim(0)


_ = consts
