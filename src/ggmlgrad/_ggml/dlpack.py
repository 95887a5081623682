"""DLPack capsules (the C structs of dlpack.h v1.x, mirrored with ctypes): make and read them.

A producer hands out a PyCapsule named ``dltensor`` (unversioned) or ``dltensor_versioned``
holding a ``DLManagedTensor[Versioned]``; the consumer renames it ``used_...`` and later calls
the struct's ``deleter``. Only host memory (``kDLCPU``) is exchanged here. Pointers travel to the
layers above as Python ints, and ownership as plain objects (:class:`Exported`, :class:`Imported`).
"""
from __future__ import annotations

import ctypes
import threading

KDL_CPU = 1
CODE_INT, CODE_UINT, CODE_FLOAT, CODE_BFLOAT, CODE_BOOL = 0, 1, 2, 4, 6
FLAG_READ_ONLY, FLAG_IS_COPIED = 1, 2
VERSION = (1, 0)


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER),
                ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = (ctypes.c_void_p, ctypes.c_char_p)
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = (ctypes.c_void_p, ctypes.c_char_p)
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = (ctypes.py_object, ctypes.c_char_p)

# What each exported struct keeps alive, by the struct's address, until its deleter runs.
_LIVE: dict[int, tuple] = {}
_LIVE_LOCK = threading.Lock()


@_DELETER
def _release(addr) -> None:
    """The deleter of the structs we hand out: drop what kept the memory alive."""
    with _LIVE_LOCK:
        _LIVE.pop(addr, None)


# Capsules keep a pointer to their name, not a copy: the names live as long as this module.
_NAMES = {False: b"dltensor", True: b"dltensor_versioned"}
_USED_NAMES = {False: b"used_dltensor", True: b"used_dltensor_versioned"}


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _capsule_destructor(capsule) -> None:
    """A capsule nobody consumed (still named ``dltensor[_versioned]``) releases its struct itself.
    The capsule is being freed: only raw pointers are touched (no Python reference to it)."""
    for versioned, name in _NAMES.items():
        if _api.PyCapsule_IsValid(capsule, name):
            addr = _api.PyCapsule_GetPointer(capsule, name)
            if addr:
                _release(addr)
            return


def export_capsule(data: int, shape: tuple, code: int, bits: int, owner, versioned: bool,
                   read_only: bool = False, copied: bool = False, strides: tuple | None = None):
    """A capsule for the host memory at ``data`` (``shape``, element type ``code``/``bits``;
    ``strides`` in elements, None for C-contiguous); ``owner`` stays alive until the consumer
    calls the deleter."""
    ndim = len(shape)
    shape_arr = (ctypes.c_int64 * max(ndim, 1))(*shape)
    strides_arr = None if strides is None else (ctypes.c_int64 * max(ndim, 1))(*strides)
    m = DLManagedTensorVersioned() if versioned else DLManagedTensor()
    t = m.dl_tensor
    t.data = data or None
    t.device = DLDevice(KDL_CPU, 0)
    t.ndim = ndim
    t.dtype = DLDataType(code, bits, 1)
    t.shape = ctypes.cast(shape_arr, ctypes.POINTER(ctypes.c_int64))
    # NULL: compact row-major (C-contiguous)
    t.strides = None if strides_arr is None else ctypes.cast(strides_arr, ctypes.POINTER(ctypes.c_int64))
    t.byte_offset = 0
    m.manager_ctx = None
    m.deleter = _release
    if versioned:
        m.version = DLPackVersion(*VERSION)
        m.flags = (FLAG_READ_ONLY if read_only else 0) | (FLAG_IS_COPIED if copied else 0)
    addr = ctypes.addressof(m)
    with _LIVE_LOCK:
        _LIVE[addr] = (m, shape_arr, strides_arr, owner)
    return _api.PyCapsule_New(addr, _NAMES[versioned], ctypes.cast(_capsule_destructor, ctypes.c_void_p))


class Imported:
    """A consumed capsule's tensor: a host address, shape, element type and flags. Keeps the
    producer's memory alive until this object dies, then calls the producer's deleter once."""

    __slots__ = ("data", "shape", "code", "bits", "lanes", "device_type", "contiguous", "read_only",
                 "_struct", "_deleter", "__weakref__")

    def __del__(self) -> None:
        d, self._deleter = self._deleter, None
        if d:
            d(self._struct)


def _c_contiguous(shape: tuple, strides: tuple | None) -> bool:
    if strides is None:
        return True
    expect = 1
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1 and s != expect:
            return False
        expect *= n
    return True


def import_capsule(capsule) -> Imported:
    """Consume a ``dltensor``/``dltensor_versioned`` capsule (it is renamed ``used_...``)."""
    for versioned, name in _NAMES.items():
        if _api.PyCapsule_IsValid(ctypes.c_void_p(id(capsule)), name):
            break
    else:
        raise ValueError("from_dlpack: expected a DLPack capsule named 'dltensor' or 'dltensor_versioned' "
                         "(a capsule can be consumed only once)")
    addr = _api.PyCapsule_GetPointer(ctypes.c_void_p(id(capsule)), name)
    m = (DLManagedTensorVersioned if versioned else DLManagedTensor).from_address(addr)
    if versioned and m.version.major > VERSION[0]:
        raise BufferError(f"from_dlpack: DLPack version {m.version.major}.{m.version.minor} is newer than "
                          f"the {VERSION[0]}.x this ggmlgrad reads")
    t = m.dl_tensor
    out = Imported()
    out._deleter = None
    out.shape = tuple(int(t.shape[i]) for i in range(t.ndim))
    strides = tuple(int(t.strides[i]) for i in range(t.ndim)) if t.strides else None
    out.data = (t.data or 0) + int(t.byte_offset)
    out.code, out.bits, out.lanes = int(t.dtype.code), int(t.dtype.bits), int(t.dtype.lanes)
    out.device_type = int(t.device.device_type)
    out.contiguous = _c_contiguous(out.shape, strides)
    out.read_only = bool(versioned and m.flags & FLAG_READ_ONLY)
    # Ours from now on: the producer's deleter frees it when ``out`` dies.
    _api.PyCapsule_SetName(capsule, _USED_NAMES[versioned])
    out._struct = addr
    deleter = ctypes.cast(m.deleter, ctypes.c_void_p).value
    if deleter:
        out._deleter = _DELETER(deleter)
    return out
