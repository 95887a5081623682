"""``gg.accelerator``: torch.accelerator's queries over the loaded ggml's GPU devices.

An accelerator here is a GPU backend device of ggml (CUDA, Vulkan, Metal, ...); BLAS, which
speeds up the CPU's matmuls, is not one.

>>> import ggmlgrad as gg
>>> gg.accelerator.is_available() == (gg.accelerator.device_count() > 0)
True
"""
from __future__ import annotations

from .runtime import device, devices


def _gpus() -> list:
    return [d for d in devices() if d.kind != "cpu"]


def is_available() -> bool:
    """True where the loaded ggml has a GPU device."""
    return bool(_gpus())


def device_count() -> int:
    """How many devices of the current accelerator's kind there are (0 without one)."""
    gpus = _gpus()
    return sum(1 for d in gpus if d.kind == gpus[0].kind) if gpus else 0


def current_accelerator(check_available: bool = False) -> "device | None":
    """``gg.device("cuda")`` (or ``"vulkan"``, ``"metal"``) of the first GPU device, else None."""
    gpus = _gpus()
    return device(gpus[0].kind) if gpus else None
