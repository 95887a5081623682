"""``gg.backends.mps``: whether Apple's GPU (ggml's Metal backend) is there."""
from __future__ import annotations

from ..runtime import devices


def is_available() -> bool:
    """True where the loaded ggml has a Metal device."""
    return any(d.kind == "metal" for d in devices())


def is_built() -> bool:
    """The same as :func:`is_available`: ggml's Metal backend is there or not."""
    return is_available()
