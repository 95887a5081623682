"""Random noise for dropout and sampling, drawn from the seeded generator.

``noise(kind, shape)`` is the one place layers get randomness from. Outside a
capture it uploads a fresh draw. Inside a capture recording it returns an INPUT of
the recording instead, which every replay refills from the same generator, so
replays draw fresh noise and a fixed seed (``gg.manual_seed``) reproduces the run —
captured or not, the generator is consumed in the same order with the same draws.

>>> import ggmlgrad as gg
>>> from ggmlgrad.tensor.random import noise
>>> gg.manual_seed(0); a = noise("uniform", (2, 3)).numpy()
>>> gg.manual_seed(0); bool((a == noise("uniform", (2, 3)).numpy()).all())
True
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..engine import float32
from ..runtime import Device, resolve_device
from .creation import _shape, generator
from .tensor import Tensor, _from_numpy

KINDS = ("uniform", "normal", "gumbel")
_TINY64 = np.finfo(np.float64).tiny

# Set by capture while a recording is active: (kind, shape, device) -> recording input Tensor.
_capture_source: Callable[[str, tuple, Device], Tensor] | None = None


def draw_into(kind: str, out: np.ndarray, rng: np.random.Generator | None = None) -> None:
    """Fill the float32 array ``out`` with ``kind`` noise from ``rng`` (default: the seeded generator)."""
    rng = generator() if rng is None else rng
    if kind == "uniform":
        rng.random(out=out, dtype=np.float32)           # [0, 1)
    elif kind == "normal":
        rng.standard_normal(out=out, dtype=np.float32)
    elif kind == "gumbel":
        # -log(-log(u)), u drawn in float64 and kept inside (0, 1): never log(0)
        u = rng.random(out.shape)
        np.clip(u, _TINY64, 1.0 - 1e-12, out=u)
        out[...] = -np.log(-np.log(u))
    else:
        raise ValueError(f"noise: kind must be one of {KINDS}, got {kind!r}")


def noise(kind: str, shape, device=None) -> Tensor:
    """A float32 tensor of ``kind`` noise (``"uniform"`` [0,1), ``"normal"``, ``"gumbel"``).

    Inside ``gg.capture``/``gg.capture_step`` the tensor is an input of the recording,
    refilled from the generator on every replay.
    """
    if kind not in KINDS:
        raise ValueError(f"noise: kind must be one of {KINDS}, got {kind!r}")
    shape = _shape((shape,) if isinstance(shape, (int, np.integer)) else tuple(shape))
    dev = resolve_device(device)
    if _capture_source is not None:
        return _capture_source(kind, shape, dev)
    arr = np.empty(shape, np.float32)
    draw_into(kind, arr)
    return _from_numpy(arr, float32, dev, False)
