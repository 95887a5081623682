"""The one place where random noise enters a computation (dropout masks, sampling noise).

Every draw goes through :func:`draw_noise`: it takes values from the seeded
generator (``gg.manual_seed``) on the host and uploads them as a tensor, so
the noise is a graph *input*, never a host constant baked into a graph. It builds a
:class:`NoiseRequest` and hands it to ``ggmlgrad.tensor.random.draw``, the one noise
entry point (``gg`` noise of the other layers goes there too).

A capture recording installs the execution context's noise source: it receives each
:class:`NoiseRequest` and returns the tensor to use (an input of the recording); at replay
the request refills that input with fresh noise from the same generator.
:func:`set_noise_hook` installs such a source by hand.

>>> import ggmlgrad as gg
>>> from ggmlgrad.distributions.noise import draw_noise
>>> gg.manual_seed(0)
>>> m = draw_noise("dropout_mask", (1000,), p=0.25)
>>> sorted(set(m.numpy().astype(float).round(4).tolist()))
[0.0, 1.3333]
"""
from __future__ import annotations

from typing import Callable

from ..tensor import random as _random
from ..tensor.random import NoiseRequest
from ..runtime import resolve_device
from ..tensor.tensor import Tensor

KINDS = _random.REQUEST_KINDS

__all__ = ["KINDS", "NoiseRequest", "draw_noise", "set_noise_hook"]


def set_noise_hook(hook: Callable[[NoiseRequest], Tensor] | None):
    """Install ``hook`` (or None to remove it) as this context's noise source; returns the previous one.

    The hook gets each :class:`NoiseRequest` and returns a float32 tensor of ``request.shape``.
    """
    return _random.set_noise_source(hook)


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
    return _random.draw(NoiseRequest(kind, shape, resolve_device(device), tuple(sorted(params.items()))))
