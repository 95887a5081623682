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


class Device:
    """One ggml backend device (``cpu``, ``cuda:0``, ``vulkan:1``, ...)."""

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
        return isinstance(other, Device) and other.dev_ptr == self.dev_ptr

    def __hash__(self) -> int:
        return hash(self.dev_ptr)


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
            devs.insert(0, Device("cpu", "cpu", 0, d, desc))
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
    if not isinstance(spec, str):
        raise TypeError(f"device: expected a str or Device, got {type(spec).__name__}")
    s = spec.strip().lower()
    if s == "auto":
        return next((d for d in _DEVICES if d.kind != "cpu"), _DEVICES[0])
    kind, _, idx = s.partition(":")
    if idx and not idx.isdigit():
        raise ValueError(f"device: bad device string {spec!r}")
    index = int(idx) if idx else 0
    for d in _DEVICES:
        if d.kind == kind and d.index == index:
            return d
    avail = ", ".join(d.name for d in _DEVICES)
    raise ValueError(f"device: {spec!r} is not available in the loaded ggml (available: {avail})")


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
