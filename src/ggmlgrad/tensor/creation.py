"""Tensor factories and the seeded generator."""
from __future__ import annotations

import math
import os

import numpy as np

from ..engine import DType, bfloat16, dtypes, float32, int32
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


def _shape(args, opname: str = "shape") -> tuple:
    """Sizes given as ``f(2, 3)`` or ``f((2, 3))``: ints or NumPy ints (TypeError for floats and
    bools, as in PyTorch; ValueError for negatives or more than 4 dimensions)."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = tuple(args[0])
    shape = tuple(args)
    for s in shape:
        if isinstance(s, (bool, np.bool_)) or not isinstance(s, (int, np.integer)):
            raise TypeError(f"{opname}: size must be ints, got {type(s).__name__} {s!r} in {shape}")
        if s < 0:
            raise ValueError(f"{opname}: size must be non-negative, got {shape}")
    if len(shape) > 4:
        raise ValueError(f"{opname}: shape {shape} has {len(shape)} dimensions; ggmlgrad supports at most 4")
    return tuple(int(s) for s in shape)


def _target(dtype) -> DType:
    return dtypes.from_any(dtype) if dtype is not None else float32


def _host_dtype(d: DType) -> np.dtype:
    """The NumPy dtype to build a ``d`` tensor's values in (bfloat16 goes through float32)."""
    return np.dtype(np.float32) if d is bfloat16 else d.np_dtype


def _check_memory(opname: str, shape: tuple, d: DType) -> None:
    """Refuse a size no machine here can hold, before NumPy tries (and fails with its own message)."""
    need = math.prod(shape) * max(d.itemsize, _host_dtype(d).itemsize)
    have = _physical_memory()
    if need > have:
        raise MemoryError(f"{opname}: a {d.name} tensor of shape {shape} needs {_gib(need)} GiB of host memory; "
                          f"this machine has {_gib(have)} GiB")


def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):   # not POSIX: only refuse what no 64-bit address space holds
        return 1 << 48


def _gib(n: int) -> str:
    return f"{n / 2**30:.3g}"


_RANDOM = None  # random.py's (recorded_constant, recorded_draw), found once: see _random_hooks


def _random_hooks() -> tuple:
    """random.py's capture hooks ``(recorded_constant, recorded_draw)``. The first call imports them
    (random.py imports this module); later ones read the global: a function-level import costs
    ~0.6 µs on every ``gg.zeros``/``gg.randn``."""
    global _RANDOM
    if _RANDOM is None:
        from .random import recorded_constant, recorded_draw
        _RANDOM = (recorded_constant, recorded_draw)
    return _RANDOM


def _make(arr, d: DType, device, requires_grad) -> Tensor:
    dev = resolve_device(device)
    if not requires_grad:
        t = (_RANDOM or _random_hooks())[0](np.asarray(arr), d, dev)   # inside gg.capture: a recorded constant, not an upload
        if t is not None:
            return t
    return _from_numpy(arr, d, dev, requires_grad)


def _recorded_draw(kind: str, sizes: tuple, d: DType, device, requires_grad: bool, **params):
    """Inside gg.capture, a draw refilled from the generator on every replay (None elsewhere)."""
    if requires_grad or d is not (int32 if kind == "randint" else float32):
        return None
    return (_RANDOM or _random_hooks())[1](kind, sizes, device, **params)


def _filled(opname: str, shape: tuple, dtype, fill) -> tuple[np.ndarray, DType]:
    d = _target(dtype)
    _check_memory(opname, shape, d)
    return np.full(shape, fill, _host_dtype(d)), d


def zeros(*shape, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A tensor of zeros (float32 unless ``dtype`` says otherwise).

    >>> import ggmlgrad as gg; gg.zeros(2, 3).shape
    (2, 3)
    """
    arr, d = _filled("zeros", _shape(shape, "zeros"), dtype, 0)
    return _make(arr, d, device, requires_grad)


def ones(*shape, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A tensor of ones (float32 unless ``dtype`` says otherwise).

    >>> import ggmlgrad as gg; gg.ones(2, dtype=gg.int32).tolist()
    [1, 1]
    """
    arr, d = _filled("ones", _shape(shape, "ones"), dtype, 1)
    return _make(arr, d, device, requires_grad)


def full(shape, fill_value: float, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A tensor of ``shape`` filled with ``fill_value``, built directly in its dtype: as torch, the
    fill value's kind when ``dtype`` is not given (bool, int32 for an int — torch's int64 — else float32).

    >>> import ggmlgrad as gg; gg.full((2,), 1.5).tolist(), gg.full((2,), 2).dtype
    ([1.5, 1.5], ggmlgrad.int32)
    """
    if isinstance(fill_value, (str, bytes)) or not hasattr(fill_value, "__float__"):
        raise TypeError(f"full: fill_value must be a number, got {fill_value!r}")
    if dtype is None and isinstance(fill_value, (bool, np.bool_)):
        dtype = dtypes.bool_            # torch.full((2,), True) is a bool tensor
    elif dtype is None and isinstance(fill_value, (int, np.integer)):
        dtype = int32                   # torch.full((2,), 2) is int64: int32 here (the dtype rule)
    if not isinstance(fill_value, (int, np.integer)):
        fill_value = float(fill_value)      # bools, NumPy scalars, 0-d tensors
    sizes = _shape((shape,) if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool) else shape, "full")
    d = _target(dtype)
    if d is int32 and not (math.isfinite(fill_value) and -2**31 <= fill_value <= 2**31 - 1):
        raise ValueError(f"full: fill_value {fill_value!r} does not fit in int32")
    arr, d = _filled("full", sizes, d, fill_value)
    return _make(arr, d, device, requires_grad)


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
    _check_memory("arange", (max(0, math.ceil((end - start) / step)),), float32)
    arr = np.arange(start, end, step)
    if dtype is None:
        dtype = int32 if arr.dtype.kind in "iu" else float32
    return _make(arr, _target(dtype), device, requires_grad)


def linspace(start: float, end: float, steps: int, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    if isinstance(steps, (bool, np.bool_)) or not isinstance(steps, (int, np.integer)):
        raise TypeError(f"linspace: steps must be an int, got {steps!r}")
    if steps < 0:
        raise ValueError(f"linspace: steps must be non-negative, got {steps!r}")
    d = _target(dtype)
    _check_memory("linspace", (int(steps),), d)
    return _make(np.linspace(start, end, int(steps)), d, device, requires_grad)


def eye(n: int, m: int | None = None, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """The identity matrix (``n`` x ``m``), built directly in its dtype.

    >>> import ggmlgrad as gg; gg.eye(2).tolist()
    [[1.0, 0.0], [0.0, 1.0]]
    """
    shape = _shape((n, n if m is None else m), "eye")
    d = _target(dtype)
    _check_memory("eye", shape, d)
    return _make(np.eye(*shape, dtype=_host_dtype(d)), d, device, requires_grad)


def rand(*shape, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """Uniform [0, 1) from the seeded generator (drawn in float32). Inside ``gg.capture`` a new draw
    on every replay, from the same generator: a seeded run gives eager mode's numbers."""
    sizes, d = _shape(shape, "rand"), _target(dtype)
    _check_memory("rand", sizes, d)
    t = _recorded_draw("uniform", sizes, d, device, requires_grad)
    if t is not None:
        return t
    return _from_numpy(_rng.random(sizes, dtype=np.float32), d, resolve_device(device), requires_grad)


def randn(*shape, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """Standard normal from the seeded generator (drawn in float32). Inside ``gg.capture`` a new draw
    on every replay, from the same generator: a seeded run gives eager mode's numbers."""
    sizes, d = _shape(shape, "randn"), _target(dtype)
    _check_memory("randn", sizes, d)
    t = _recorded_draw("normal", sizes, d, device, requires_grad)
    if t is not None:
        return t
    return _from_numpy(_rng.standard_normal(sizes, dtype=np.float32), d, resolve_device(device), requires_grad)


def randint(low: int, high: int | None = None, size=(), dtype=None, device=None) -> Tensor:
    """Integers in [low, high) (int32); inside ``gg.capture`` drawn anew on every replay (as rand)."""
    if high is None:
        low, high = 0, low
    if high <= low:
        raise ValueError(f"randint: empty range [{low}, {high})")
    sizes = _shape((size,) if isinstance(size, (int, np.integer)) and not isinstance(size, bool) else size, "randint")
    d = _target(dtype or int32)
    _check_memory("randint", sizes, d)
    t = _recorded_draw("randint", sizes, d, device, False, low=int(low), high=int(high))
    if t is not None:
        return t
    return _from_numpy(_rng.integers(low, high, size=sizes, dtype=np.int64 if d is not int32 else np.int32), d,
                       resolve_device(device), False)
