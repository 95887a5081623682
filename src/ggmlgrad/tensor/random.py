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

from ..engine import dtypes, float32, host_value, int32
from ..engine.context import current, update
from ..runtime import Device, resolve_device
from ..runtime.executor import COMPUTE_LOCK
from .creation import _shape, generator
from .tensor import Tensor, _from_numpy

KINDS = ("uniform", "normal", "gumbel")
REQUEST_KINDS = KINDS + ("dropout_mask", "randint")
_TINY64 = np.finfo(np.float64).tiny


@dataclasses.dataclass(frozen=True)
class NoiseRequest:
    """What to draw: ``kind`` (one of REQUEST_KINDS), ``shape``, ``device`` and ``params`` (``p`` for
    dropout)."""
    kind: str
    shape: tuple
    device: Device
    params: tuple = ()  # sorted (name, value) pairs: hashable, part of a capture signature

    @property
    def dtype(self):
        """The draw's dtype: int32 for ``randint`` (params ``low``, ``high``), float32 for the rest."""
        return int32 if self.kind == "randint" else float32

    def sample(self) -> np.ndarray:
        """A fresh array (float32, or int32 for randint) from the seeded generator (host side)."""
        a = np.empty(self.shape, self.dtype.np_dtype)
        self.fill(a)
        return a

    def fill(self, out: np.ndarray) -> None:
        """Fill the float32 array ``out`` (of ``shape``) with a fresh draw (a capture input's refill)."""
        rng = generator()
        if self.kind in KINDS:
            draw_into(self.kind, out, rng)
        elif self.kind == "randint":    # the same draw as gg.randint's, so eager and capture agree
            p = dict(self.params)
            out[...] = rng.integers(p["low"], p["high"], size=self.shape, dtype=np.int32)
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
    return _from_numpy(req.sample(), req.dtype, req.device, False)


def gumbel_argmax_on_host(logits: Tensor, shape: tuple) -> Tensor | None:
    """``argmax(gumbel noise of shape + logits, axis=-1)`` (int32) computed on the host in eager mode,
    or None (nothing drawn) when the ops must compute it: graph or check mode, a capture, a noise
    source, ``logits`` not a computed float32 value in host memory of its own.

    The same draw from the generator as the ops' (:func:`draw`), the same float32 sum (an IEEE add
    either way) and the same index: torch's argmax, the first maximum or the first NaN, which is
    NumPy's. It spares the noise's upload and two computes; the result is uploaded as
    ``gg.tensor(indices)`` would be. ``shape`` ends with the classes and broadcasts with ``logits``."""
    c = current()
    if c.graph or c.check or c.recorder is not None or c.observer is not None or c.noise is not None:
        return None
    if logits.dtype is not float32 or not logits.device.is_host:
        return None
    req = NoiseRequest("gumbel", shape, logits.device)
    with COMPUTE_LOCK:  # as a compute reads: not while a graph on another thread writes this memory
        lv = host_value(logits)
        if lv is None:
            return None
        g = req.sample()
        g += lv  # (broadcast over the sample's leading dims; float32 + float32, rounded as ggml's add)
    return _from_numpy(np.argmax(g, axis=-1).astype(np.int32), int32, logits.device, False)


class ConstantRequest:
    """Values fixed when a capture records (``gg.arange(0, t)``, ``gg.ones(t, t)`` inside the function,
    from Python numbers and the recorded shapes, as an op's Python-number parameters are): an input of
    the recording, filled once, never a host upload per call. ``values`` are in the dtype's storage form."""

    kind = "constant"
    params = ()

    def __init__(self, values: np.ndarray, dtype, device: Device):
        self.values, self.dtype, self.device, self.shape = values, dtype, device, tuple(values.shape)
        self._filled = None

    def fill(self, out: np.ndarray) -> None:
        if self._filled is not out:         # the slot's staging view keeps what was written into it
            out[...] = self.values
            self._filled = out


def in_recording() -> bool:
    """True while a capture records on this context (its draws and constants become inputs)."""
    ctx = current()
    return ctx.recorder is not None and ctx.noise is not None


def recorded_constant(values: np.ndarray, dtype, device: Device) -> Tensor | None:
    """Inside a capture recording, a float32/int32/bool constant as an input of the recording (None
    elsewhere, or for a dtype or value a plain upload must check: the caller then uploads as usual)."""
    if not in_recording() or dtype not in (float32, int32, dtypes.bool_):
        return None
    if dtype is int32:
        if values.size and (values.dtype.kind == "f" or values.max() > 2**31 - 1 or values.min() < -2**31):
            return None
        stored = np.ascontiguousarray(values, np.int32)
    elif dtype is float32:
        stored = np.ascontiguousarray(values, np.float32)
    else:
        stored = dtypes.to_bool_storage(values)
    return draw(ConstantRequest(stored, dtype, device))


def recorded_draw(kind: str, shape: tuple, device, **params) -> Tensor | None:
    """Inside a capture recording, a random draw as an input refilled from the generator on every
    replay (None elsewhere: the caller draws as usual, the same numbers)."""
    if not in_recording():
        return None
    return draw(NoiseRequest(kind, shape, resolve_device(device), tuple(sorted(params.items()))))


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
