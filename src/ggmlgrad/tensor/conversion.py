"""Host reads and conversions of a Tensor: NumPy/DLPack interop, Python scalars, repr, dtype/device, copies."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .._ggml.host_memory import SCALAR_AT
from ..engine import FAILED, COMPUTED, count_download, download, dtypes, float32, host_value, int32
from ..engine.context import current as _current
from ..ops import op
from ..runtime import HostStorage, SliceAlias, Storage, resolve_device
from ..runtime.device import device as _device_class
from ..runtime.faults import ARMED as _FAULTS
from . import interop
from .grad_mode import no_grad
from .printing import print_options
from ..engine.errors import ShapeError

if TYPE_CHECKING:
    from .tensor import Tensor

_SCALAR_AT = {float32: SCALAR_AT["<f4"], int32: SCALAR_AT["<i4"]}  # dtypes item() reads where they lie


def item(self) -> float | int:
    """The one element as a Python float or int (bool for a bool tensor); drains the queue first if
    this tensor is pending.

    >>> import ggmlgrad as gg
    >>> gg.tensor([[2.5]]).item()
    2.5
    """
    if self.numel_ != 1:
        raise ShapeError(f"item(): only one-element tensors can be converted, got shape {self.shape}")
    s = self._storage
    t = type(s)
    if (t is Storage or t is SliceAlias or t is HostStorage) and self._status == COMPUTED and not _FAULTS:
        read = _SCALAR_AT.get(self.dtype)  # float32/int32 in host memory: the element read where it lies
        if read is not None and s.device.is_host:
            c = _current()
            if c.observer is None:  # (a capture recording must see the read: count_download's rule)
                counters = c.counters
                counters.downloads["item()"] += 1
                counters.download_bytes["item()"] += 4
                return read(s.data).value
    v = host_value(self)  # plain host memory: read the element where it lies
    if v is not None and count_download("item()", v.nbytes):
        return v.item(0)
    return download(self, "item()").reshape(()).item()



# ``x.to(target)`` resolves these as devices at once (no dtype is spelled so): torch's device class and the
# device strings of a program's ``device = "cpu"``; other strings are tried as a dtype first, as before.
_DEVICE = _device_class
_DEVICE_WORDS = frozenset({"cpu", "cuda", "cuda:0", "mps", "vulkan", "vulkan:0", "metal"})


def _names_device(target) -> bool:
    """Whether ``x.to(target)`` names a device that cannot be a dtype (``x.to(device)`` per step: no
    dtype ``TypeError`` raised and caught)."""
    return type(target) is _DEVICE or (type(target) is str and target in _DEVICE_WORDS)


def _is_on(t, target) -> bool:
    """Whether ``t`` is on the device ``target`` names (resolve_device's match; a gg.device without its lookups)."""
    d = t.device
    if type(target) is _DEVICE and target._type == d.kind and (target._index or 0) == (d.index or 0):
        return True
    return resolve_device(target) is d

class ConversionMethods:
    """Turns a tensor into host values, other dtypes or devices, copies and pickles."""

    __slots__ = ()

    # ------------------------------------------------------------- host reads (sync points)
    def numpy(self, *, force: bool = False) -> np.ndarray:
        """The value as NumPy (drains the queue if this tensor is pending). A float32, float16 or int32
        tensor on a host device gives a view of its memory, as torch: writes to either side show in
        the other (tensor/interop.py has the rule); other dtypes and GPU tensors give a copy. A tensor
        that requires grad raises RuntimeError (torch's rule: use ``t.detach().numpy()``), or gives a
        view with ``force=True``."""
        return interop.numpy(self, force)

    def __array__(self, dtype=None, copy=None):
        """NumPy 2's protocol: a view of host memory where possible (as ``numpy()``); ``copy=True``
        a new array; ``copy=False`` raises ValueError when a copy cannot be avoided. A tensor that
        requires grad raises as in torch (``np.asarray(t.detach())``)."""
        if self.requires_grad:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.")
        return interop.array(self, dtype, copy)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """The DLPack protocol (host memory only; see tensor/interop.py)."""
        return interop.to_dlpack(self, stream, max_version, dl_device, copy)

    def __dlpack_device__(self) -> tuple[int, int]:
        return interop.dlpack_device(self)

    item = item  # (a module function: the class stays small)

    def tolist(self):
        return download(self, "tolist()").tolist()

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        if self.dtype is not int32:
            raise TypeError("only integer tensors can be used as an index")
        return int(self.item())

    def __bool__(self) -> bool:
        if self.numel_ != 1:
            raise ShapeError(f"the truth value of a tensor with {self.numel_} elements is ambiguous")
        return bool(self.item())

    def __repr__(self) -> str:
        if self._status == FAILED:
            return f"tensor(<failed: no value>, shape={self.shape})"
        body = np.array2string(download(self, "repr"), separator=", ", prefix="tensor(", **print_options())
        extra = []
        if self.dtype is not float32 and not self.dtype.is_bool:
            extra.append(f"dtype={self.dtype.name}")
        if self.device.kind != "cpu":
            extra.append(f"device='{self.device.name}'")
        if self.grad_fn is not None:
            extra.append(f"grad_fn=<{self.grad_fn.name}Backward>")
        elif self.requires_grad:
            extra.append("requires_grad=True")
        return "tensor(" + body + "".join(", " + e for e in extra) + ")"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        if self.numel_ == 1 and spec:
            return format(self.item(), spec)
        return repr(self)

    # ------------------------------------------------------------- dtype / device
    def to(self, target=None, dtype=None, device=None) -> "Tensor":
        """``t.to("float16")``, ``t.to(gg.int32)``, ``t.to("cpu")``, ``t.to(device=..., dtype=...)``."""
        if target is not None:
            if dtype is None and device is None and _names_device(target):
                if _is_on(self, target):
                    return self   # already there: the tensor itself, as torch's
                device = target
            else:
                try:
                    dtype = dtypes.from_any(target)
                except TypeError:
                    device = target
        t = self
        if device is not None and resolve_device(device) is not t.device:
            d = resolve_device(device)
            # Cross-device copies go through the host; no gradient flows across.
            from .tensor import _from_numpy  # tensor.py imports this module
            t = _from_numpy(download(t, "to(device)"), t.dtype, d, requires_grad=False)
        if dtype is not None:
            d = dtypes.from_any(dtype)
            if d is not t.dtype:
                t = op.cast(t, dtype=d)
                if not d.is_float and t.requires_grad:
                    t = t.detach()     # as torch: an integer or bool tensor never requires grad
        return t

    def float(self) -> "Tensor":
        return self.to(float32)

    def int(self) -> "Tensor":
        return self.to(int32)

    def long(self) -> "Tensor":
        """int64 in torch; int32 storage here (``gg.int64 is gg.int32``, see engine/dtypes.py)."""
        return self.to(int32)

    def double(self) -> "Tensor":
        """float64 in torch; float32 here (``gg.float64 is gg.float32``: no double precision)."""
        return self.to(float32)

    def bool(self) -> "Tensor":
        """torch.bool: non-zero (NaN too) → True."""
        return self.to(dtypes.bool_)

    def half(self) -> "Tensor":
        return self.to(dtypes.float16)

    def cpu(self) -> "Tensor":
        return self if self.device.name == "cpu" else self.to(device="cpu")   # (torch's: itself when there)

    def __deepcopy__(self, memo) -> "Tensor":
        """A leaf copy with its own memory (``.grad`` copied too), as ``torch`` does."""
        if self.grad_fn is not None:
            raise RuntimeError("deepcopy: only leaf tensors (created by the user, not by an op) can be "
                               "deep-copied; detach() first")
        with no_grad():
            t = self.clone()
        t.requires_grad = self.requires_grad
        memo[id(self)] = t
        if self.grad is not None:
            t.grad = self.grad.__deepcopy__(memo)
        return t

    def __reduce_ex__(self, protocol):
        """Pickle by value (the device memory itself cannot travel)."""
        if self.grad_fn is not None:
            raise RuntimeError("pickle: only leaf tensors can be pickled; detach() first")
        from .tensor import _rebuild_tensor  # tensor.py imports this module; pickles name tensor.py's
        return (_rebuild_tensor, (download(self, "pickle"), self.dtype.name, self.requires_grad))
