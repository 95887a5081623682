"""The one place where random noise enters a computation (dropout masks, sampling noise).

Every draw goes through :func:`draw_noise`: it takes values from the seeded
generator (``gg.manual_seed``) on the host and uploads them as a tensor, so
the noise is a graph *input*, never a host constant baked into a graph.

Capture hooks this function with :func:`set_noise_hook`: while a recording is
made, the hook receives each :class:`NoiseRequest` and returns the tensor to
use (an input of the recording); at replay it calls ``request.sample()`` again
to refill that input with fresh noise from the same generator.

>>> import ggmlgrad as gg
>>> from ggmlgrad.distributions.noise import draw_noise
>>> gg.manual_seed(0)
>>> m = draw_noise("dropout_mask", (1000,), p=0.25)
>>> sorted(set(m.numpy().astype(float).round(4).tolist()))
[0.0, 1.3333]
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from ..engine import float32
from ..runtime import Device, resolve_device
from ..tensor import random as _random
from ..tensor.creation import generator
from ..tensor.tensor import Tensor, _from_numpy

KINDS = ("uniform", "normal", "gumbel", "dropout_mask")


@dataclasses.dataclass(frozen=True)
class NoiseRequest:
    """What to draw: ``kind`` (one of KINDS), ``shape``, ``device`` and ``params`` (``p`` for dropout)."""
    kind: str
    shape: tuple
    device: Device
    params: tuple = ()  # sorted (name, value) pairs: hashable, part of a capture signature

    def sample(self) -> np.ndarray:
        """A fresh float32 array from the seeded generator (host side)."""
        rng = generator()
        p = dict(self.params)
        if self.kind in _random.KINDS:
            # uniform / normal / gumbel: the one implementation in ggmlgrad.tensor.random (same stream)
            a = np.empty(self.shape, np.float32)
            _random.draw_into(self.kind, a, rng)
        elif self.kind == "dropout_mask":
            keep = 1.0 - p["p"]
            a = (rng.random(self.shape) < keep).astype(np.float32) * np.float32(1.0 / keep)
        else:
            raise ValueError(f"draw_noise: unknown kind {self.kind!r} (expected one of {KINDS})")
        return a


_hook: Callable[[NoiseRequest], Tensor] | None = None


def set_noise_hook(hook: Callable[[NoiseRequest], Tensor] | None):
    """Install ``hook`` (or None to remove it); returns the previous hook.

    The hook gets each :class:`NoiseRequest` and returns a float32 tensor of ``request.shape``.
    """
    global _hook
    prev, _hook = _hook, hook
    return prev


def draw_noise(kind: str, shape: tuple, *, device=None, **params) -> Tensor:
    """A float32 noise tensor of ``shape`` (no gradient).

    Kinds: ``uniform`` U[0, 1), ``normal`` N(0, 1), ``gumbel`` standard Gumbel,
    ``dropout_mask`` (param ``p``): 0 with probability p, else 1 / (1 - p).
    """
    if kind not in KINDS:
        raise ValueError(f"draw_noise: unknown kind {kind!r} (expected one of {KINDS})")
    if kind == "dropout_mask":
        p = params.get("p")
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:
            raise ValueError(f"draw_noise: dropout probability must be in [0, 1), got {p!r}")
    shape = tuple(int(s) for s in shape)
    req = NoiseRequest(kind, shape, resolve_device(device), tuple(sorted(params.items())))
    if _hook is not None:
        t = _hook(req)
        if t is not None:
            return t
    if kind in _random.KINDS:
        return _random.noise(kind, shape, req.device)   # capture-aware by itself, too
    return _from_numpy(req.sample(), float32, req.device, requires_grad=False)
