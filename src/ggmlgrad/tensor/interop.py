"""Zero-copy interop on host devices: ``from_numpy``, ``as_tensor``, ``Tensor.numpy()``, DLPack.

The aliasing rule (as torch's): a tensor from ``gg.from_numpy(a)`` / ``gg.from_dlpack(x)`` and an
array from ``t.numpy()`` share memory with their source, so a write through either side shows
in the other. Each keeps the memory alive. In-place ops on the tensor (``add_``, ``t[i] = v``,
``copy_``, optimizer steps) write that memory; an op that gives the tensor other memory
(``t.data = u``, ``module.to(device)``) ends the sharing, as in torch.

Graph mode: ``t.numpy()`` computes the queue first, so the array holds the value. A queued op
reads shared memory when the queue computes, so a write through NumPy after an op was queued on
the tensor is seen by that op (eager mode: not): read the result (or ``gg.graph_mode(False)``)
before writing through NumPy.

Only memory that ggmlgrad can use as it is can be shared: C-contiguous float32, float16 and
int32 data. Other dtypes (float64, int64, bool, ...) raise TypeError in ``from_numpy`` and
``from_dlpack`` (torch would share them; ggmlgrad stores them differently): copy with
``gg.tensor``. ``t.numpy()`` of a bool or bfloat16 tensor, or of a tensor on a GPU, is a copy.
"""
from __future__ import annotations

import warnings

import numpy as np

from .._ggml import array_address, dlpack
from .._ggml.host_memory import owning_array
from ..engine import COMPUTED, ENGINE, FAILED, active_observer, DType, PendingError, bfloat16, download, dtypes, float16, float32, int32
from ..engine.context import current as _current
from ..engine.counters import COUNTERS
from ..engine.queue import no_value_message
from ..ops.shapes import check_ndim
from ..runtime import HostStorage, SliceAlias, Storage, StridedAlias, cpu_device, resolve_device
from .views import Family, record_of, share_memory

_TENSOR = None  # (Tensor, tensor) of tensor.py (which imports this module), found once: see _tensor_names


def _tensor_names() -> tuple:
    """tensor.py's ``(Tensor, tensor)``. The first call imports them; later ones read the global (a
    function-level import costs ~0.6 µs on every call: ``as_tensor(obs)`` runs per step)."""
    global _TENSOR
    if _TENSOR is None:
        from .tensor import Tensor, tensor
        _TENSOR = (Tensor, tensor)
    return _TENSOR

# dtypes whose storage NumPy can view as it is, and their DLPack (code, bits)
_SHAREABLE_NP = {np.dtype(np.float32): float32, np.dtype(np.float16): float16, np.dtype(np.int32): int32}
_DL_CODES = {float32: (dlpack.CODE_FLOAT, 32), float16: (dlpack.CODE_FLOAT, 16),
             bfloat16: (dlpack.CODE_BFLOAT, 16), int32: (dlpack.CODE_INT, 32)}
_DL_DTYPES = {v: k for k, v in _DL_CODES.items()}
_DL_DEVICE_CODES = {"cpu": 1, "cuda": 2, "opencl": 4, "vulkan": 7, "metal": 8, "sycl": 14, "webgpu": 15}


# ---------------------------------------------------------------------- host memory → tensor
def _wrap_host(addr: int, shape: tuple, dtype: DType, owner, site: str):
    """A computed CPU tensor whose storage is the host memory at ``addr`` (kept alive by ``owner``)."""
    Tensor = (_TENSOR or _tensor_names())[0]
    check_ndim(site, shape)
    dev = cpu_device()
    t = Tensor._blank(shape, dtype, dev)
    nbytes = t.nbytes
    t._storage = HostStorage(dev, addr, nbytes, owner) if nbytes else Storage(dev, 1)
    t._status = COMPUTED
    share_memory(t)  # its source writes this memory: views of it must live in it
    return t


def _share_error(site: str, what: str, hint: str, wide: str | None = None) -> TypeError:
    """``wide``: "float64" or "int64", whose memory the dtype rule (float64 means float32, int64 means
    int32: 4-byte storage) makes impossible to share: the message names the rule."""
    rule = "" if wide is None else (
        f" By ggmlgrad's dtype rule {wide} means {_NARROW[wide]} (stored in 4 bytes), so {wide} memory cannot be "
        f"shared without a copy (README, Limitations).")
    return TypeError(f"{site}: cannot share memory of {what}: ggmlgrad shares only C-contiguous float32, float16 "
                     f"and int32 data.{rule} {hint}")


_NARROW = {"float64": "float32", "int64": "int32"}
_COPY_HINT = ("Copy it with gg.tensor(a) or gg.as_tensor(a) (float64 → float32, int64 → int32, bool → bool; "
              "the tensor does not share memory with the array).")


def from_numpy(a: np.ndarray):
    """A CPU tensor sharing ``a``'s memory, as ``torch.from_numpy``: writes to either show in the
    other, and the tensor keeps ``a`` alive. ``a`` must be a C-contiguous float32, float16 or int32
    array (others raise TypeError: ``gg.tensor(a)`` copies, converting float64 → float32 and
    int64 → int32).

    >>> import numpy as np, ggmlgrad as gg
    >>> a = np.zeros(3, np.float32); t = gg.from_numpy(a); a[0] = 5
    >>> t.tolist()
    [5.0, 0.0, 0.0]
    """
    if not isinstance(a, np.ndarray):
        raise TypeError(f"from_numpy: expected np.ndarray (got {type(a).__name__})")
    d = _SHAREABLE_NP.get(a.dtype)
    if d is None:
        raise _share_error("from_numpy", f"a {a.dtype} array", _COPY_HINT,
                           a.dtype.name if a.dtype.name in _NARROW else None)
    if not a.flags.c_contiguous or not a.flags.aligned:
        raise ValueError("from_numpy: ggmlgrad tensors are C-contiguous; this array is a strided (or unaligned) "
                         "view. Use gg.from_numpy(np.ascontiguousarray(a)) (a copy) or gg.tensor(a)")
    if not a.flags.writeable:
        warnings.warn("from_numpy: the given NumPy array is not writable; the tensor shares its memory, so an "
                      "in-place write to the tensor is undefined behaviour (torch warns alike)", UserWarning,
                      stacklevel=2)
    return _wrap_host(array_address(a), tuple(int(s) for s in a.shape), d, a, "from_numpy")


def as_tensor(data, dtype=None, device=None):
    """``torch.as_tensor``: ``data`` itself when it is already a tensor of that dtype and device;
    a NumPy array of a shareable dtype on a host device shares its memory (:func:`from_numpy`);
    anything else is copied (:func:`ggmlgrad.tensor`).

    >>> import numpy as np, ggmlgrad as gg
    >>> a = np.ones(2, np.float32); gg.as_tensor(a).add_(1); a.tolist()
    [2.0, 2.0]
    """
    Tensor, tensor = _TENSOR or _tensor_names()
    d = None if dtype is None else dtypes.from_any(dtype)
    if isinstance(data, Tensor):
        return data.to(device=device if device is not None else data.device, dtype=d)
    dev = resolve_device(device)
    if (isinstance(data, np.ndarray) and dev is cpu_device() and _SHAREABLE_NP.get(data.dtype) is not None
            and (d is None or d is _SHAREABLE_NP[data.dtype]) and data.flags.c_contiguous and data.flags.aligned
            and data.flags.writeable):
        return from_numpy(data)
    return tensor(data, dtype=d, device=dev)


# ---------------------------------------------------------------------- tensor → host memory
def _value_site(t, site: str) -> None:
    """Make ``t`` computed (drain the queue if it is pending), as every host read does."""
    if t._status != COMPUTED:
        if t._status != FAILED:
            ENGINE.drain("read")
        if t._status != COMPUTED:
            raise PendingError(t._error or no_value_message(t))
    observer = active_observer()
    if observer is not None:
        observer.on_download(site)


def _plain_memory(t) -> bool:
    """Whether ``t`` (computed) lives in memory of its own on a host device, or in a part of such
    memory (a view), which NumPy and DLPack consumers may view (not a capture recording's packed
    block, which replays rewrite)."""
    s = t._storage
    if type(s) is SliceAlias or type(s) is StridedAlias:
        s = s.parent
    return t.device.is_host and (type(s) is Storage or type(s) is HostStorage)


def _shared_site(t, site: str) -> None:
    """Make ``t`` computed, and its memory (its root's, for a view) shared with the caller: its
    views live in it from now on (tensor/views.py ``share_memory``)."""
    _value_site(t, site)
    if t.device.is_host:
        share_memory(t)


_NP_VIEW = {float32: "<f4", float16: "<f2", int32: "<i4"}
_NP_DTYPE = {d: np.dtype(ts) for d, ts in _NP_VIEW.items()}


class _HostView:
    """What a NumPy view of a tensor's memory hangs on: keeps the storage alive."""

    __slots__ = ("storage", "__array_interface__")

    def __init__(self, storage, shape: tuple, typestr: str):
        self.storage = storage
        strides = storage.strides if type(storage) is StridedAlias else None
        self.__array_interface__ = {"data": (storage.data, False), "shape": shape, "typestr": typestr,
                                    "strides": strides, "version": 3}


def host_view(t, site: str) -> np.ndarray | None:
    """A NumPy array viewing ``t``'s memory (computed first), or None when it cannot be viewed."""
    if t.dtype not in _NP_VIEW or not t.device.is_host:
        return None
    _shared_site(t, site)
    if not _plain_memory(t):
        return None
    COUNTERS.downloads[site] += 1
    if not t.numel_:
        return np.empty(t.shape, dtype=_NP_VIEW[t.dtype])
    a = np.asarray(_HostView(t._storage, t.shape, _NP_VIEW[t.dtype]))
    if record_of(t) is not None and type(t._storage) not in (SliceAlias, StridedAlias):
        # a view whose base is not memory of its own keeps its value apart (tensor/views.py
        # ``settle``): a write through this array would not reach the base, so NumPy refuses it
        a.flags.writeable = False
    return a


def numpy(t, force: bool = False) -> np.ndarray:
    """``t.numpy()``: a view of a host tensor's memory (float32, float16, int32), a copy otherwise.

    A tensor that requires grad raises as in torch (a write through the array would bypass
    autograd): use ``t.detach().numpy()``, or ``force=True`` (torch's ``force``) for a view."""
    if t.requires_grad and not force:
        raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.")
    s = t._storage
    st = type(s)
    if t._status == COMPUTED and t.numel_ and s.device.is_host and _current().observer is None and (
            ((st is Storage or st is HostStorage) and "_view" not in t.__dict__)
            or (st is SliceAlias and type(s.parent) in (Storage, HostStorage))):
        # A computed tensor in host memory of its own (``(x * 2).numpy()``) or in a contiguous part of its
        # root's (``buf[i].numpy()``): host_view's steps for it, inline
        nd = _NP_DTYPE.get(t.dtype)
        if nd is not None:
            cell = t._vcell
            if len(cell) < 2:
                cell.append(Family(shared=True))  # (share_memory: no views to settle yet)
            elif not cell[1].shared:
                share_memory(t)
            COUNTERS.downloads["numpy()"] += 1
            return owning_array(s.data, t.numel_ * nd.itemsize, t.shape, nd, s)
    a = host_view(t, "numpy()")
    return a if a is not None else download(t, "numpy()")


def array(t, dtype=None, copy=None) -> np.ndarray:
    """NumPy 2's ``__array__``: ``copy=None`` a view where possible (as :func:`numpy`), ``copy=True``
    always a new array, ``copy=False`` a view or ValueError."""
    if copy is not True:
        a = None if t.requires_grad else host_view(t, "__array__")
        if a is not None and (dtype is None or np.dtype(dtype) == a.dtype):
            return a
        if copy is False:
            raise ValueError(f"Tensor.__array__: a {t.dtype.name} tensor on {t.device.name} cannot be viewed by "
                             f"NumPy{'' if dtype is None else f' as {np.dtype(dtype)}'} without a copy "
                             f"(copy=False); use np.asarray(t) or t.numpy()")
    a = np.asarray(download(t, "__array__"))  # a 0-d bool download is a NumPy scalar: NumPy wants an array
    return a if dtype is None else a.astype(dtype, copy=False)


# ---------------------------------------------------------------------- DLPack
def dlpack_device(t) -> tuple[int, int]:
    """``(device_type, device_id)`` of DLPack: ``(1, 0)`` (kDLCPU) for host memory."""
    if t.device.is_host:
        return (dlpack.KDL_CPU, 0)
    return (_DL_DEVICE_CODES.get(t.device.kind, 12), t.device.index)


def to_dlpack(t, stream=None, max_version=None, dl_device=None, copy=None):
    """``t.__dlpack__(...)`` (array API / NumPy 2): a capsule over ``t``'s host memory, versioned
    when the consumer passes ``max_version >= (1, 0)``. ``copy=True`` exports a copy;
    ``copy=False`` raises BufferError when sharing is impossible (a bool tensor)."""
    if t.requires_grad:
        raise RuntimeError("Can't export a tensor that requires grad to DLPack; use tensor.detach()")
    if stream is not None and stream != -1:
        raise BufferError(f"__dlpack__: stream must be None for a CPU tensor, got {stream!r}")
    if dl_device is not None and tuple(dl_device) != (dlpack.KDL_CPU, 0):
        raise BufferError(f"__dlpack__: can export only to the CPU (kDLCPU, 0), not {tuple(dl_device)}")
    if not t.device.is_host:
        raise BufferError(f"__dlpack__: only host tensors can be exported; this one is on {t.device.name} "
                          f"(use t.cpu())")
    versioned = max_version is not None and tuple(max_version)[0] >= 1
    code = _DL_CODES.get(t.dtype)
    if code is not None:
        src = t.detach().clone() if copy is True else t    # a copy keeps the dtype (bfloat16 bits too)
        _shared_site(src, "__dlpack__")
        if _plain_memory(src):
            s = src._storage
            strides = None if type(s) is not StridedAlias else tuple(b // s.itemsize for b in s.strides)
            return dlpack.export_capsule(s.data if src.numel_ else 0, src.shape, *code, s, versioned,
                                         copied=copy is True, strides=strides)
    if copy is False:
        raise BufferError(f"__dlpack__: a {t.dtype.name} tensor cannot be exported without a copy (copy=False)")
    a = download(t, "__dlpack__")
    return dlpack.export_capsule(array_address(a) if a.size else 0, a.shape, *_np_code(a.dtype), a, versioned,
                                 copied=True)


def _np_code(nd: np.dtype) -> tuple[int, int]:
    kind = {"f": dlpack.CODE_FLOAT, "i": dlpack.CODE_INT, "u": dlpack.CODE_UINT, "b": dlpack.CODE_BOOL}[nd.kind]
    return kind, nd.itemsize * 8


def from_dlpack(x):
    """``torch.from_dlpack`` / ``np.from_dlpack``: a CPU tensor sharing the memory of ``x`` (an
    object with ``__dlpack__``, e.g. a NumPy array or a torch CPU tensor, or a DLPack capsule).
    C-contiguous float32, float16, bfloat16 and int32 data only (TypeError otherwise: copy with
    ``gg.tensor(np.from_dlpack(x))``).

    >>> import numpy as np, ggmlgrad as gg
    >>> a = np.arange(3, dtype=np.float32); gg.from_dlpack(a).mul_(2); a.tolist()
    [0.0, 2.0, 4.0]
    """
    Tensor = (_TENSOR or _tensor_names())[0]
    if isinstance(x, Tensor):
        return x.detach()
    if hasattr(x, "__dlpack__"):
        if hasattr(x, "__dlpack_device__"):
            dev = tuple(x.__dlpack_device__())
            if int(dev[0]) != dlpack.KDL_CPU:
                raise BufferError(f"from_dlpack: only CPU memory (kDLCPU) can be shared, got device {dev}")
        try:
            capsule = x.__dlpack__(max_version=dlpack.VERSION)
        except TypeError:          # a producer older than the array API 2023 standard
            capsule = x.__dlpack__()
    else:
        capsule = x
    imp = dlpack.import_capsule(capsule)
    if imp.device_type != dlpack.KDL_CPU:
        raise BufferError(f"from_dlpack: only CPU memory (kDLCPU) can be shared, got device type {imp.device_type}")
    d = _DL_DTYPES.get((imp.code, imp.bits)) if imp.lanes == 1 else None
    if d is None:
        wide = {(dlpack.CODE_FLOAT, 64): "float64", (dlpack.CODE_INT, 64): "int64"}.get((imp.code, imp.bits))
        raise _share_error("from_dlpack", f"DLPack dtype (code {imp.code}, {imp.bits} bits, {imp.lanes} lanes)",
                           "Copy it with gg.tensor(np.from_dlpack(x)).", wide if imp.lanes == 1 else None)
    if not imp.contiguous:
        raise ValueError("from_dlpack: ggmlgrad tensors are C-contiguous; this one is strided. Make it contiguous "
                         "first (x.contiguous() in torch, np.ascontiguousarray in NumPy)")
    if imp.read_only:
        warnings.warn("from_dlpack: the producer marked this memory read-only; the tensor shares it, so an in-place "
                      "write to the tensor is undefined behaviour", UserWarning, stacklevel=2)
    return _wrap_host(imp.data, imp.shape, d, imp, "from_dlpack")
