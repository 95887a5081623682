"""Random noise for dropout and sampling, drawn from the seeded generator: the one noise entry point.

Every draw is a :class:`NoiseRequest` passed to :func:`draw` (``noise(kind, shape)`` and
``ggmlgrad.distributions.draw_noise`` both build one). Outside a capture it uploads a fresh draw.
Inside a capture recording the execution context's noise source (:mod:`ggmlgrad.engine.context`,
pushed by the recording) returns an INPUT of the recording instead, which every replay refills
from the same generator, so replays draw fresh noise and a fixed seed (``gg.manual_seed``)
reproduces the run — captured or not, the generator is consumed in the same order with the same
draws.

>>> import ggmlgrad as gg
>>> from ggmlgrad.tensor.random import noise
>>> gg.manual_seed(0); a = noise("uniform", (2, 3)).numpy()
>>> gg.manual_seed(0); bool((a == noise("uniform", (2, 3)).numpy()).all())
True
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from ..engine import float32
from ..engine.context import current, update
from ..runtime import Device, resolve_device
from .creation import _shape, generator
from .tensor import Tensor, _from_numpy

KINDS = ("uniform", "normal", "gumbel")
REQUEST_KINDS = KINDS + ("dropout_mask",)
_TINY64 = np.finfo(np.float64).tiny


@dataclasses.dataclass(frozen=True)
class NoiseRequest:
    """What to draw: ``kind`` (one of REQUEST_KINDS), ``shape``, ``device`` and ``params`` (``p`` for
    dropout)."""
    kind: str
    shape: tuple
    device: Device
    params: tuple = ()  # sorted (name, value) pairs: hashable, part of a capture signature

    def sample(self) -> np.ndarray:
        """A fresh float32 array from the seeded generator (host side)."""
        a = np.empty(self.shape, np.float32)
        self.fill(a)
        return a

    def fill(self, out: np.ndarray) -> None:
        """Fill the float32 array ``out`` (of ``shape``) with a fresh draw (a capture input's refill)."""
        rng = generator()
        if self.kind in KINDS:
            draw_into(self.kind, out, rng)
        elif self.kind == "dropout_mask":
            keep = 1.0 - dict(self.params)["p"]
            out[...] = (rng.random(self.shape) < keep).astype(np.float32) * np.float32(1.0 / keep)
        else:
            raise ValueError(f"draw_noise: unknown kind {self.kind!r} (expected one of {REQUEST_KINDS})")


def draw(req: NoiseRequest) -> Tensor:
    """The tensor for ``req``: from the context's noise source (a capture recording's input), or a
    fresh upload of ``req.sample()``."""
    source = current().noise
    if source is not None:
        t = source(req)
        if t is not None:
            return t
    return _from_numpy(req.sample(), float32, req.device, False)


def set_noise_source(source: Callable[[NoiseRequest], Tensor | None] | None):
    """Install ``source`` as this context's noise source (None: ordinary draws); returns the previous one.

    The source gets each :class:`NoiseRequest` and returns a float32 tensor of ``request.shape`` (or
    None to draw as usual).
    """
    prev = current().noise
    update(noise=source)
    return prev


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
    return draw(NoiseRequest(kind, shape, dev))
