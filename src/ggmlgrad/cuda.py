"""``gg.cuda``: torch.cuda's queries, answered from the ggml that is loaded.

``is_available()`` is True only where the loaded ggml has a CUDA device (a ggml built with
``--cuda``; see ``GGMLGRAD_GGML_LIB``). ggml computes synchronously and ggmlgrad draws every random
number from the one generator that ``gg.manual_seed`` seeds, so ``synchronize`` and
``manual_seed``/``manual_seed_all`` have nothing to do (as torch's do on a machine without CUDA).

>>> import ggmlgrad as gg
>>> gg.cuda.is_available() == any(d.kind == "cuda" for d in gg.devices())
True
"""
from __future__ import annotations

from .runtime import DeviceError, devices


def _cuda_devices() -> list:
    return [d for d in devices() if d.kind == "cuda"]


def is_available() -> bool:
    """True where the loaded ggml has a CUDA device."""
    return bool(_cuda_devices())


def device_count() -> int:
    """The number of CUDA devices of the loaded ggml (0 without a CUDA build)."""
    return len(_cuda_devices())


def current_device() -> int:
    """The index of the CUDA device in use (always 0: ggmlgrad's default device is chosen with
    ``gg.set_device``). Raises :class:`~ggmlgrad.runtime.DeviceError` without CUDA, as torch does."""
    if not is_available():
        raise DeviceError("cuda.current_device(): the loaded ggml has no CUDA device")
    return 0


def get_device_name(device=None) -> str:
    """ggml's description of a CUDA device (``device``: an index, ``"cuda:i"`` or a device)."""
    idx = device if isinstance(device, int) else (0 if device is None else (getattr(device, "index", None) or
                                                                          int(str(device).partition(":")[2] or 0)))
    found = _cuda_devices()
    if not 0 <= idx < len(found):
        raise DeviceError(f"cuda.get_device_name(): no CUDA device {idx} (the loaded ggml has {len(found)})")
    return found[idx].description


def synchronize(device=None) -> None:
    """Nothing to wait for: a ggml graph compute returns when it is done."""


def manual_seed(seed: int) -> None:
    """Accepted: ggmlgrad has no separate CUDA generator (``gg.manual_seed`` seeds every draw)."""


def manual_seed_all(seed: int) -> None:
    """Accepted: ggmlgrad has no separate CUDA generators (``gg.manual_seed`` seeds every draw)."""
