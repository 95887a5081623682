"""ggml backend devices as Python objects.

The CPU device is always present. GPU devices appear when the loaded ggml was
built with CUDA/Vulkan/Metal/... . An accelerator such as BLAS is not a user
device: it joins the CPU device's scheduler so matmuls run there.
"""
from __future__ import annotations

import contextvars
from functools import cached_property

from .._ggml import backend_dev_memory, consts, lib

_GPU_KIND = {"cuda": "cuda", "vulkan": "vulkan", "metal": "metal", "mtl": "metal", "sycl": "sycl",
             "opencl": "opencl", "cann": "cann", "webgpu": "webgpu", "rocm": "cuda", "hip": "cuda",
             "musa": "cuda"}


class DeviceError(ValueError, RuntimeError):
    """A device string that names no device, or a device the loaded ggml does not have (torch raises
    RuntimeError for both; ValueError kept for code written against earlier ggmlgrad)."""


class _DeviceMeta(type):
    def __instancecheck__(cls, obj) -> bool:
        # ``isinstance(t.device, gg.device)`` holds, as ``isinstance(t.device, torch.device)`` does
        return type.__instancecheck__(cls, obj) or isinstance(obj, Device)


class device(metaclass=_DeviceMeta):   # noqa: N801  (torch's name)
    """torch.device: a device type and an optional index, resolved to a ggml device where it is used.

    ``gg.device("cpu")``, ``gg.device("cuda", 0)``, ``gg.device("cuda:0")``; ``.type``, ``.index``;
    accepted wherever a device is (``t.to(dev)``, ``gg.tensor(..., device=dev)``, ``model.to(dev)``).
    Like torch, constructing a device the loaded ggml lacks is allowed; using it raises
    :class:`DeviceError` (a ``RuntimeError``). ``"mps"`` names ggml's Metal device. A block
    ``with gg.device("cpu"):`` makes it the default device for new tensors.

    >>> import ggmlgrad as gg
    >>> d = gg.device("cpu"); d.type, d.index, str(gg.device("cuda", 1))
    ('cpu', None, 'cuda:1')
    >>> gg.zeros(2, device=d).device == d
    True
    """

    __slots__ = ("_type", "_index", "_prev")

    def __init__(self, type, index: "int | None" = None):  # noqa: A002  (torch's argument name)
        if isinstance(type, device):
            if index is not None:
                raise DeviceError("device(): an index cannot be given with a device")
            type, index = type.type, type.index
        elif isinstance(type, int) and not isinstance(type, bool) and index is None:
            gpu = next((d for d in _DEVICES if d.kind != "cpu"), None)   # torch: the current accelerator
            if gpu is None:
                raise DeviceError("device(): Cannot access accelerator device when none is available.")
            type, index = gpu.kind, type
        if not isinstance(type, str):
            raise TypeError(f"device(): expected a str, a device or an int, got {type!r}")
        kind, sep, idx = type.strip().partition(":")
        if sep:
            if index is not None:
                raise DeviceError(f"device(): {type!r} has an index and index={index!r} was given too")
            if not idx.isdigit():
                raise DeviceError(f"Invalid device string: {type!r}")
            index = int(idx)
        if not kind or not kind.replace("_", "").isalnum() or kind != kind.lower():
            raise DeviceError(f"Invalid device string: {type!r}")
        if index is not None and (isinstance(index, bool) or not isinstance(index, int) or index < 0):
            raise DeviceError(f"device(): the index must be a non-negative int, got {index!r}")
        self._type, self._index, self._prev = kind, index, []

    @property
    def type(self) -> str:
        return self._type

    @property
    def index(self) -> "int | None":
        return self._index

    def __repr__(self) -> str:
        return f"device(type='{self._type}')" if self._index is None else \
            f"device(type='{self._type}', index={self._index})"

    def __str__(self) -> str:
        return self._type if self._index is None else f"{self._type}:{self._index}"

    def __eq__(self, other) -> bool:
        if isinstance(other, str):
            try:
                other = device(other)
            except (DeviceError, TypeError):
                return False
        return isinstance(other, device) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self) -> int:
        return hash((self._type, self._index))

    def __enter__(self) -> "device":
        self._prev.append(set_device(self))
        return self

    def __exit__(self, *exc) -> None:
        set_device(self._prev.pop())


class Device:
    """One ggml backend device (``cpu``, ``cuda:0``, ``vulkan:1``, ...); ``isinstance(d, gg.device)``
    holds, with torch's ``.type`` and ``.index`` (None for the CPU)."""

    __slots__ = ("name", "kind", "index", "dev_ptr", "description", "__dict__")

    def __init__(self, name: str, kind: str, index: int, dev_ptr: int, description: str):
        self.name, self.kind, self.index, self.dev_ptr, self.description = name, kind, index, dev_ptr, description

    @cached_property
    def backend(self) -> int:
        b = lib.backend_dev_init(self.dev_ptr, None)
        if not b:
            raise RuntimeError(f"ggmlgrad: could not initialise the ggml backend for device {self.name}")
        return b

    @cached_property
    def buffer_type(self) -> int:
        return lib.backend_dev_buffer_type(self.dev_ptr)

    @cached_property
    def alignment(self) -> int:
        return lib.backend_buft_get_alignment(self.buffer_type)

    @cached_property
    def is_host(self) -> bool:
        return bool(lib.backend_buft_is_host(self.buffer_type))

    def memory(self) -> tuple[int, int]:
        """(free, total) bytes as reported by ggml."""
        return backend_dev_memory(self.dev_ptr)

    @property
    def type(self) -> str:
        """torch's name for :attr:`kind` (``"cpu"``, ``"cuda"``, ...)."""
        return self.kind

    def __repr__(self) -> str:
        return f"device('{self.name}')"

    def __str__(self) -> str:
        return self.name

    def __eq__(self, other) -> bool:
        if isinstance(other, str):
            try:
                other = resolve_device(other)
            except ValueError:
                return False
        if isinstance(other, device):     # torch.device value: type and index as written
            return (self.kind, self.index) == (other.type, other.index)
        return isinstance(other, Device) and other.dev_ptr == self.dev_ptr

    def __hash__(self) -> int:
        return hash((self.kind, self.index))


def _enumerate() -> tuple[list[Device], list[int]]:
    """Returns (user devices, accelerator dev pointers such as BLAS)."""
    devs: list[Device] = []
    accels: list[int] = []
    counts: dict[str, int] = {}
    for i in range(lib.backend_dev_count()):
        d = lib.backend_dev_get(i)
        t = lib.backend_dev_type(d)
        raw = lib.backend_dev_name(d).decode()
        desc = (lib.backend_dev_description(d) or b"").decode(errors="replace")
        if t == consts.DEVICE_TYPE_CPU:
            devs.insert(0, Device("cpu", "cpu", None, d, desc))   # torch: the CPU device has no index
        elif t in (consts.DEVICE_TYPE_GPU, consts.DEVICE_TYPE_IGPU):
            reg = lib.backend_reg_name(lib.backend_dev_backend_reg(d)).decode().lower()
            kind = next((v for k, v in _GPU_KIND.items() if reg.startswith(k) or raw.lower().startswith(k)), reg)
            idx = counts.get(kind, 0)
            counts[kind] = idx + 1
            devs.append(Device(f"{kind}:{idx}", kind, idx, d, desc or raw))
        elif t == consts.DEVICE_TYPE_ACCEL:
            accels.append(d)
    if not devs or devs[0].kind != "cpu":
        raise RuntimeError("ggmlgrad: the loaded ggml has no CPU backend")
    return devs, accels


_DEVICES, ACCELERATORS = _enumerate()
_current: contextvars.ContextVar[Device | None] = contextvars.ContextVar("ggmlgrad_device", default=None)


def devices() -> list[Device]:
    """All devices of the loaded ggml, CPU first.

    >>> import ggmlgrad as gg
    >>> gg.devices()[0].name
    'cpu'
    """
    return list(_DEVICES)


def cpu_device() -> Device:
    return _DEVICES[0]


def accelerator_names() -> list[str]:
    return [lib.backend_dev_name(d).decode() for d in ACCELERATORS]


def resolve_device(spec: "str | Device | None") -> Device:
    """``None`` → current device; ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"auto"`` → a Device."""
    if spec is None:
        return get_device()
    if isinstance(spec, Device):
        return spec
    if isinstance(spec, device):
        kind, index = spec.type, spec.index or 0
    elif not isinstance(spec, str):
        raise TypeError(f"device: expected a str or device, got {type(spec).__name__}")
    else:
        s = spec.strip().lower()
        if s == "auto":
            return next((d for d in _DEVICES if d.kind != "cpu"), _DEVICES[0])
        kind, _, idx = s.partition(":")
        if idx and not idx.isdigit():
            raise DeviceError(f"device: bad device string {spec!r}")
        index = int(idx) if idx else 0
    kind = "metal" if kind == "mps" else kind       # torch's name for Apple's GPU
    for d in _DEVICES:
        if d.kind == kind and (d.index or 0) == index:
            return d
    avail = ", ".join(d.name for d in _DEVICES)
    raise DeviceError(f"device: {str(spec)!r} is not available in the loaded ggml (available: {avail})")


def get_device() -> Device:
    """The device new tensors go to (context-local; ``cpu`` unless set)."""
    d = _current.get()
    return d if d is not None else _DEVICES[0]


def set_device(spec: "str | Device") -> Device:
    """Set the default device for new tensors; returns the previous one.

    >>> import ggmlgrad as gg
    >>> prev = gg.set_device("cpu")
    """
    prev = get_device()
    _current.set(resolve_device(spec))
    return prev
