"""Tensor factories and the seeded generator."""
from __future__ import annotations

import numpy as np

from ..engine import dtypes, float32, int32
from ..runtime import resolve_device
from .tensor import Tensor, _from_numpy

_rng = np.random.default_rng()


def manual_seed(seed: int) -> None:
    """Seed the generator behind rand/randn/randint, init, dropout and sampling.

    >>> import ggmlgrad as gg
    >>> gg.manual_seed(0); a = gg.rand(3).tolist(); gg.manual_seed(0)
    >>> a == gg.rand(3).tolist()
    True
    """
    global _rng
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"manual_seed: expected an int, got {seed!r}")
    _rng = np.random.default_rng(int(seed))


def generator() -> np.random.Generator:
    return _rng


def _shape(args) -> tuple:
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = tuple(args[0])
    shape = tuple(args)
    for s in shape:
        if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 0:
            raise ValueError(f"shape must be non-negative ints, got {shape}")
    if len(shape) > 4:
        raise ValueError(f"shape {shape} has {len(shape)} dimensions; ggmlgrad supports at most 4")
    return tuple(int(s) for s in shape)


def _make(arr, dtype, device, requires_grad) -> Tensor:
    d = dtypes.from_any(dtype) if dtype is not None else float32
    return _from_numpy(arr, d, resolve_device(device), requires_grad)


def zeros(*shape, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """>>> import ggmlgrad as gg; gg.zeros(2, 3).shape
    (2, 3)
    """
    return _make(np.zeros(_shape(shape), np.float32), dtype, device, requires_grad)


def ones(*shape, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return _make(np.ones(_shape(shape), np.float32), dtype, device, requires_grad)


def full(shape, fill_value: float, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return _make(np.full(_shape((shape,) if isinstance(shape, int) else shape), fill_value, np.float64),
                 dtype, device, requires_grad)


def zeros_like(t: Tensor, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return zeros(t.shape, dtype=dtype or t.dtype, device=device or t.device, requires_grad=requires_grad)


def ones_like(t: Tensor, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return ones(t.shape, dtype=dtype or t.dtype, device=device or t.device, requires_grad=requires_grad)


def full_like(t: Tensor, fill_value: float, dtype=None, device=None) -> Tensor:
    return full(t.shape, fill_value, dtype=dtype or t.dtype, device=device or t.device)


def arange(start, end=None, step=1, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """Like ``numpy.arange``; int32 when all arguments are ints, else float32."""
    if end is None:
        start, end = 0, start
    if step == 0:
        raise ValueError("arange: step must be non-zero")
    arr = np.arange(start, end, step)
    if dtype is None:
        dtype = int32 if arr.dtype.kind in "iu" else float32
    return _make(arr, dtype, device, requires_grad)


def linspace(start: float, end: float, steps: int, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"linspace: steps must be a non-negative int, got {steps!r}")
    return _make(np.linspace(start, end, steps), dtype, device, requires_grad)


def eye(n: int, m: int | None = None, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return _make(np.eye(n, m), dtype, device, requires_grad)


def rand(*shape, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """Uniform [0, 1) from the seeded generator."""
    return _make(_rng.random(_shape(shape)), dtype, device, requires_grad)


def randn(*shape, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """Standard normal from the seeded generator."""
    return _make(_rng.standard_normal(_shape(shape)), dtype, device, requires_grad)


def randint(low: int, high: int | None = None, size=(), dtype=None, device=None) -> Tensor:
    """Integers in [low, high) (int32)."""
    if high is None:
        low, high = 0, low
    if high <= low:
        raise ValueError(f"randint: empty range [{low}, {high})")
    return _make(_rng.integers(low, high, size=_shape(size)), dtype or int32, device, False)
