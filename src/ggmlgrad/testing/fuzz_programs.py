"""Op-program fuzzer: random programs of 1-30 ops checked in every execution mode against NumPy float64
and, where torch is installed, against torch.

A program is a list of op applications over a growing set of live tensors (inputs and earlier
results). Inputs have random shapes (0-d, size-1, empty, broadcastable and mismatched), dtypes
(float32, int32, and float16/bfloat16 by cast), and values (NaN, +-Inf, huge, denormal, negative
under log and sqrt); ops get random axes, shapes and index tensors, valid and invalid. The ops come
from the OpInfo table (``ggmlgrad.testing.opinfo*``): every entry with one or two array arguments is
fuzzed automatically; the entries listed in ``_PARAM_OPS`` get argument generators.

Each program runs in eager mode, graph mode, check mode and inside ``gg.capture`` (recorded on other
input values, then replayed), with or without ``backward()``. The rule:

- the NumPy float64 reference raises (the op is invalid for its inputs) → every mode raises a
  ValueError/TypeError/IndexError/RuntimeError (subclasses included), the same type in all modes;
- the reference gives values → every mode gives values within float32 tolerance of the reference
  applied to that mode's own operands (NaN positions equal, Inf signs equal), op by op, so rounding
  never compounds along a program; gradients agree across modes and with central finite differences
  of the float64 reference where the program is smooth at the sample.

Documented exceptions to "values": ops on int32 or half-precision operands and results beyond 4-D
may raise a clear error instead (ggmlgrad computes in float32, up to 4-D), and a capture may refuse
an op that must read values on the host (CaptureError). Bug classes still open are listed in
``KNOWN_OPEN`` and skipped, each with its reason, so they can be deleted when fixed.

torch is the second oracle (``testing/fuzz_torch.py``; on where ``import torch`` works, off with
``GGMLGRAD_FUZZ_TORCH=0``): every program also runs in torch (CPU; float32 inputs, int32 ones as
int64) and each mode must agree with it on every step's value (float32 tolerance; a step that differs
is rerun in torch on ggmlgrad's own operands, so float32 rounding compounded along the program is told
apart from a wrong op), the gradients, the result dtypes (torch's int64 read as int32, float64 as
float32: the dtype rule), ``requires_grad`` of every result, and the error class (ggmlgrad's exception
an instance of torch's class). A disagreement is either a documented limit (``fuzz_torch.TORCH_LIMITS``,
``fuzz_torch.EXTENSIONS``, ``fuzz_torch.TORCH_KNOWN_OPEN``), counted per mode in the summary, or a
MISMATCH, which fails the program.

Run it (``--examples`` counts programs; each runs in every mode given; the summary gives the runs per
mode, how often each KNOWN_OPEN class was hit, and per mode the torch comparison's classes)::

    python scripts/fuzz_programs.py --seed 0 --examples 25000       # long run, crash-tolerant child processes
    python -m ggmlgrad.testing.fuzz_programs --seed 0 --examples 2000   # one process (a crash ends it)
    python -m ggmlgrad.testing.fuzz_programs --seed 0 --only 1234 --snippet   # one example, as a script

>>> from ggmlgrad.testing.fuzz_programs import generate, check_program
>>> check_program(generate(seed=0, index=3), modes=("eager", "graph")).ok
True
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import sys
import time
import warnings
from typing import Any, Callable

import numpy as np

import ggmlgrad as gg
from ggmlgrad.ops import op as _op
from .opinfo import OpInfo, all_opinfos

MODES = ("eager", "graph", "check", "capture")
ALLOWED_ERRORS = (ValueError, TypeError, IndexError, RuntimeError)

# Bug classes still open, skipped by the fuzzer (and counted: the summary says how often each hid a
# problem). Keys are checked by _known_open(); delete an entry once its fix is merged.
KNOWN_OPEN: dict[str, str] = {
    "int_overflow": "int32 results outside int32's range (int ops compute in float32 and cast back): the "
                    "cast gives -2**31 where torch's integer ops wrap around (documented in the README's "
                    "dtype rule); the float64 reference gives the true value",
    "deferred_check_order": "a value check that graph mode and capture defer to the sync point (an int32 "
                            "division by zero, an index range) raises after a later op's own TypeError there, "
                            "before it in eager and check mode: both raise, with different types",
    "remainder_special": "remainder/floor_divide/fmod with |a / b| >= 2**23 (float32 quotients no longer exact): the "
                         "remainder is a - q*b rounded (torch: an exact fmod), floor_divide may differ by an ulp",
}


# How often each KNOWN_OPEN class (and capture's documented CaptureError refusal) hid a problem in this process.
HITS: dict[str, int] = {}


def _hit(key: str) -> str:
    if key:
        HITS[key] = HITS.get(key, 0) + 1
    return key


def _skip_mode(prog: "Program", mode: str, ref_vals: list) -> str:
    """The KNOWN_OPEN key that keeps ``mode`` from running ``prog`` ('' if none; no mode is skipped now)."""
    return ""




def _known_open(name: str, operands: list, params: tuple) -> str:
    """The KNOWN_OPEN key of a value mismatch of op ``name`` ('' if it is a new one)."""
    if name.startswith("pow") and all(np.array_equal(v, np.round(v)) for v in operands):
        return "int_overflow"
    if any(np.any(np.asarray(v) == -2.0 ** 31) for v in operands):
        return "int_overflow"       # an earlier int32 overflow's -2**31 (abs/neg of it wrap in torch too)
    if name.removesuffix("_nonfinite") in ("remainder", "floor_divide", "fmod") and len(operands) >= 2:
        with np.errstate(all="ignore"):
            a, b = (np.asarray(v, np.float64) for v in operands[:2])
            if (np.isfinite(a) & (b != 0) & (np.abs(a) >= 2.0 ** 23 * np.abs(b))).any():
                return "remainder_special"
    return ""


def _known_crash(name: str, operands: list, out: np.ndarray) -> str:
    """The KNOWN_OPEN key of an op application that aborts the process: never generated ('' if none;
    none is known now)."""
    return ""

_F32_MAX = float(np.finfo(np.float32).max)
_EPS32 = float(np.finfo(np.float32).eps)

# ------------------------------------------------------------------------------------------ values
# Special values mixed into inputs: NaN, infinities, huge, denormal, signed zeros, tiny.
SPECIALS = (math.nan, math.inf, -math.inf, 3e38, -3e38, 1e30, -1e30, 1e-40, -1e-40, 0.0, -0.0, 1e-30, 70000.0, -2.5)
SCALARS = (0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 3.0, -2.5, 1e-3, 1e30, -1e30, math.inf, -math.inf, math.nan, 1e-40)
_DIMS = (1, 2, 3, 4, 1, 2, 3, 0)


def _rand_shape(rng: np.random.Generator, max_ndim: int = 4) -> tuple:
    nd = int(rng.integers(0, max_ndim + 1))
    shape = tuple(int(rng.choice(_DIMS)) for _ in range(nd))
    while int(np.prod(shape, dtype=np.int64)) > 48:
        shape = shape[1:]
    return shape


def _rand_values(rng: np.random.Generator, shape: tuple, special_p: float) -> np.ndarray:
    x = rng.standard_normal(shape) * rng.choice([1.0, 1.0, 3.0, 0.1])
    if special_p > 0 and x.size:
        mask = rng.random(shape) < special_p
        x = np.where(mask, rng.choice(SPECIALS, size=shape), x)
    return np.asarray(x, dtype=np.float32)


def _related_shape(rng: np.random.Generator, shape: tuple) -> tuple:
    """A shape that broadcasts with ``shape`` (same, dims set to 1, leading dims dropped) or, rarely, not."""
    r = rng.random()
    if r < 0.35:
        return shape
    if r < 0.6:
        return tuple(1 if rng.random() < 0.5 else d for d in shape)
    if r < 0.8:
        return shape[int(rng.integers(0, len(shape) + 1)):]
    if r < 0.9 and len(shape) < 4:
        return (int(rng.choice((1, 2))),) + shape
    return _rand_shape(rng)


# ------------------------------------------------------------------------------------------ ops
@dataclasses.dataclass
class FuzzOp:
    """One fuzzable op: operand kinds, argument generator, ggmlgrad call and float64 reference."""
    name: str
    operands: tuple                         # per tensor operand: "x" any live, "rel" related to the first, "idx:<kind>"
    call: Callable[..., Any]                # (*tensors, *params) -> Tensor
    ref: Callable[..., np.ndarray]          # (*float64 arrays, *params) -> array; raises where torch raises
    params: Callable[[np.random.Generator, list], tuple] = lambda rng, xs: ()
    grad: bool = True                       # finite differences meaningful (OpInfo.grad)
    atol: float = 1e-5
    rtol: float = 1e-4
    reducing: bool = False                  # sums many terms: tolerance grows with input magnitude
    half_out: str | None = None             # "float16"/"bfloat16": the result is stored in that dtype


def _opinfo_map() -> dict[str, OpInfo]:
    return {o.name: o for o in all_opinfos()}


def _sig(o: OpInfo, rng: np.random.Generator) -> set:
    out = set()
    for s in o.samples(rng):
        if s.kwargs:
            out.add(("kwargs",))
            continue
        out.add(tuple("A" if isinstance(a, np.ndarray) else "p" for a in s.args))
    return out


# OpInfo entries not fuzzed automatically: internal ops of capture and Buffer (not user API), and
# references that are constants for their sample rather than functions of the input.
_AUTO_SKIP = {"capture_copy", "capture_grad_norm", "capture_clip_scale", "buffer_rows", "logsumexp_inf",
              "cmp_half_storage", "where_int_cond", "buffer_gather", "buffer_gather_clamped",
              "expand", "unflatten", "repeat",
              "take", "repeat_interleave_tensor"}   # their second array is an index (an int32 tensor only)


def _zero_d_axis(ref: Callable) -> Callable:
    """torch accepts dim 0 / -1 on a 0-d tensor (as if it had one element); NumPy does not."""
    def wrapped(a, axis, *rest):
        if a.ndim == 0 and axis is not None:
            axes = axis if isinstance(axis, tuple) else (axis,)
            if all(x in (0, -1) for x in axes) and len(axes) == 1:
                return np.asarray(ref(a.reshape(1), 0 if not isinstance(axis, tuple) else (0,), *rest)).reshape(())
        return ref(a, axis, *rest)
    return wrapped


def _check_axis(axis, nd: int, allow_none=True, allow_tuple=True) -> None:
    """Raise like torch for a bad dim: IndexError out of range, ValueError/TypeError otherwise."""
    if axis is None:
        if not allow_none:
            raise TypeError("dim None")
        return
    axes = axis if isinstance(axis, tuple) else (axis,)
    if isinstance(axis, tuple) and not allow_tuple:
        raise TypeError("tuple dim")
    n = max(nd, 1)
    for a in axes:
        if not -n <= a < n:
            raise IndexError(f"dim {a} out of range for {nd}-d")
    if len({a % n for a in axes}) != len(axes):
        raise ValueError("duplicate dims")


def _gen_axis(rng, nd: int, allow_none=True, allow_tuple=True):
    r = rng.random()
    n = max(nd, 1)
    if allow_none and r < 0.15:
        return None
    if r < 0.25:
        return int(rng.choice((n, -n - 1, n + 1)))               # out of range
    if allow_tuple and r < 0.45 and nd >= 1:
        k = int(rng.integers(1, nd + 1))
        axes = tuple(int(a) - (nd if rng.random() < 0.3 else 0) for a in rng.permutation(nd)[:k])
        if rng.random() < 0.1:
            axes = axes + axes[:1]                                 # duplicate: invalid
        return axes
    return int(rng.integers(-n, n))


def _lse(a, axis=None, keepdim=False):
    """torch.logsumexp: an infinite max passes through (inf, -inf); an empty reduction is -inf."""
    m = np.max(a, axis=axis, keepdims=True, initial=-np.inf)
    ms = np.where(np.isinf(m), 0.0, m)
    with np.errstate(all="ignore"):
        r = np.log(np.sum(np.exp(a - ms), axis=axis, keepdims=True)) + ms
    return r if keepdim else (np.squeeze(r, axis=axis) if axis is not None else r.reshape(()))


def _softmax(a, axis):
    m = np.max(a, axis=axis, keepdims=True, initial=-np.inf)
    e = np.exp(a - m)
    return e / e.sum(axis=axis, keepdims=True)


def _log_softmax(a, axis):
    z = a - np.max(a, axis=axis, keepdims=True, initial=-np.inf)
    return z - np.log(np.sum(np.exp(z), axis=axis, keepdims=True))


def _reduce_ref(fn):
    """A reduction reference with torch's dim checks and NumPy's tuple-axis spelling."""
    def ref(a, axis, keepdim):
        _check_axis(axis, a.ndim)
        return fn(a, axis, keepdim)
    return _zero_d_axis(ref)


def _extreme_ref(npfn):
    def ref(a, axis, keepdim):
        _check_axis(axis, a.ndim)
        ax = axis if axis is not None else tuple(range(a.ndim))
        if any(a.shape[x] == 0 for x in (ax if isinstance(ax, tuple) else (ax,))) or (a.size == 0 and axis is None):
            raise IndexError("reduction over an empty dim")
        return npfn(a, axis=axis, keepdims=keepdim)
    return _zero_d_axis(ref)


def _argmax_ref(a, axis, keepdim):
    _check_axis(axis, a.ndim, allow_tuple=False)
    if axis is None:
        if a.size == 0:
            raise IndexError("argmax of an empty tensor")
        r = np.argmax(a)
        return np.asarray(r).reshape((1,) * a.ndim if keepdim else ())
    if a.ndim == 0:
        return np.asarray(0.0)
    if a.shape[axis] == 0:
        raise IndexError("argmax over an empty dim")
    return np.argmax(a, axis=axis, keepdims=keepdim)


def _var_ref(a, axis, keepdim, ddof=1):
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.var(a, axis=axis, ddof=ddof, keepdims=keepdim)


def _std_ref(a, axis, keepdim):
    return np.sqrt(_var_ref(a, axis, keepdim))


def _mean_ref(a, axis, keepdim):
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.mean(a, axis=axis, keepdims=keepdim)


def _dim_ref(fn):
    """Ops taking one int dim (softmax, max(dim)): torch range checks, 0-d as one element."""
    def ref(a, d, *rest):
        _check_axis(d, a.ndim, allow_none=False, allow_tuple=False)
        if a.ndim == 0:
            return np.asarray(fn(a.reshape(1), 0, *rest)).reshape(())
        return fn(a, d, *rest)
    return ref


def _max_dim_values(a, d, kd):
    if a.shape[d] == 0:
        raise IndexError("max over an empty dim")
    return np.max(a, axis=d, keepdims=kd)


def _min_dim_ref(a, d):
    if a.shape[d] == 0:
        raise IndexError("min over an empty dim")
    return np.min(a, axis=d) + np.argmin(a, axis=d)


def _squeeze_ref(a, d):
    if d is None:
        return np.squeeze(a)
    _check_axis(d, a.ndim)
    if a.ndim == 0:
        return a
    axes = tuple(x % a.ndim for x in (d if isinstance(d, tuple) else (d,)))
    return np.squeeze(a, axis=tuple(x for x in axes if a.shape[x] == 1))


def _unsqueeze_ref(a, d):
    if not -a.ndim - 1 <= d <= a.ndim:
        raise IndexError("unsqueeze dim out of range")
    return np.expand_dims(a, d)


def _transpose_ref(a, d0, d1):
    _check_axis(d0, a.ndim, allow_none=False)
    _check_axis(d1, a.ndim, allow_none=False)
    return a if a.ndim == 0 else np.swapaxes(a, d0, d1)


def _movedim_ref(a, s, d):
    _check_axis(s, a.ndim, allow_none=False)
    _check_axis(d, a.ndim, allow_none=False)
    if a.ndim == 0:
        raise ValueError("movedim of a 0-d tensor (ggmlgrad refuses; torch allows)")
    return np.moveaxis(a, s, d)


def _flatten_ref(a, s, e):
    _check_axis(s, a.ndim, allow_none=False)
    _check_axis(e, a.ndim, allow_none=False)
    if a.ndim == 0:
        return a.reshape(1)
    s, e = s % a.ndim, e % a.ndim
    if s > e:
        raise ValueError("flatten: start_dim after end_dim")
    return a.reshape(a.shape[:s] + (int(np.prod(a.shape[s:e + 1], dtype=np.int64)),) + a.shape[e + 1:])


def _narrow_ref(a, d, s, n):
    _check_axis(d, a.ndim, allow_none=False)
    if a.ndim == 0:
        raise IndexError("narrow of a 0-d tensor")
    size = a.shape[d]
    if not -size <= s <= size:
        raise IndexError("narrow start out of range")
    s = s % size if s < 0 else s
    if n < 0 or s + n > size:
        raise ValueError("narrow length out of range")
    return np.take(a, range(s, s + n), d)


def _reshape_ref(a, s):
    if sum(1 for d in s if d == -1) > 1 or any(d < -1 for d in s):
        raise ValueError("bad reshape")
    if -1 in s and a.size == 0:
        raise ValueError("reshape of an empty tensor with -1")
    return a.reshape(s)


def _permute_ref(a, p):
    if len(p) != a.ndim:
        raise ValueError("permute: wrong number of dims")
    _check_axis(tuple(p) if p else None, a.ndim)
    return np.transpose(a, p)


def _broadcast_ref(a, s):
    if len(s) < a.ndim:
        raise ValueError("broadcast_to: fewer dims")
    lead = len(s) - a.ndim
    if any(d == -1 for d in s[:lead]):
        raise ValueError("broadcast_to: -1 in a new leading dim")
    shape = tuple(d if d != -1 else a.shape[i - lead] for i, d in enumerate(s))
    if any(d < 0 for d in shape):
        raise ValueError("broadcast_to: negative size")
    return np.broadcast_to(a, shape).copy()


def _tile_ref(a, reps):
    if any(r < 0 for r in reps):
        raise ValueError("tile: negative repeat")
    return np.tile(a, reps)


def _chunk_ref(a, c, d):
    from .opinfo_shape import _np_chunk, _split_weighted
    _check_axis(d, a.ndim, allow_none=False)
    if c <= 0 or a.ndim == 0:
        raise ValueError("chunk: bad count or 0-d")
    return np.concatenate(_split_weighted(_np_chunk(a, c, d)), axis=d)


def _getitem_ref(a, key):
    for k in key if isinstance(key, tuple) else (key,):
        if isinstance(k, slice) and k.step is not None and k.step <= 0:
            raise ValueError("step must be positive (torch)")
    return np.array(a[key])


def _getitem_list_ref(a, lst):
    return np.array(a[lst])


def _cat_ref(*args):
    *xs, d = args
    if any(x.ndim == 0 for x in xs):
        raise ValueError("cat of a 0-d tensor")
    _check_axis(d, xs[0].ndim, allow_none=False)
    return np.concatenate(xs, axis=d)


def _stack_ref(*args):
    *xs, d = args
    if not -xs[0].ndim - 1 <= d <= xs[0].ndim:
        raise IndexError("stack dim out of range")
    return np.stack(xs, axis=d)


def _index_check(idx, n, allow_negative):
    """Out-of-range indices raise IndexError; negative ones too where torch refuses them."""
    lo = -n if allow_negative else 0
    if idx.size and (idx.min() < lo or idx.max() >= n):
        raise IndexError(f"index out of range for size {n}")


def _index_select_ref(a, d, i):
    _check_axis(d, a.ndim, allow_none=False)
    if a.ndim == 0:
        raise ValueError("index_select of a 0-d tensor (ggmlgrad refuses; torch allows)")
    if i.ndim > 1:
        raise IndexError("index_select: index must be 0-d or 1-d")
    n = a.shape[d] if a.ndim else 1
    _index_check(i, n, allow_negative=False)
    return np.take(a.reshape(a.shape or (1,)), i.astype(np.int64).reshape(-1), axis=d).reshape(
        a.shape[:d % max(a.ndim, 1)] + (i.size,) + a.shape[d % max(a.ndim, 1) + 1:] if a.ndim else (i.size,) if i.ndim else ())


def _gather_ref(a, d, i):
    _check_axis(d, a.ndim, allow_none=False)
    if i.ndim != a.ndim:
        raise ValueError("gather: index ndim differs")
    if a.ndim == 0:
        raise ValueError("gather from a 0-d tensor (ggmlgrad refuses; torch allows)")
    dd = d % a.ndim
    if any(i.shape[k] > a.shape[k] for k in range(a.ndim) if k != dd):
        raise ValueError("gather: index larger than input")
    _index_check(i, a.shape[dd], allow_negative=False)
    if i.size == 0:
        return np.zeros(i.shape)
    src = a[tuple(slice(0, i.shape[k]) if k != dd else slice(None) for k in range(a.ndim))]
    return np.take_along_axis(src, i.astype(np.int64), axis=dd)


def _embedding_ref(w, i):
    if w.ndim != 2:
        raise ValueError("embedding: weight must be 2-d")
    _index_check(i, w.shape[0], allow_negative=False)
    return w[i.astype(np.int64)]


def _getitem_tensor_ref(a, i):
    if a.ndim < 2:
        raise IndexError("too many indices")
    _index_check(i, a.shape[1], allow_negative=True)
    return a[1:, i.astype(np.int64)]


def _one_hot_ref(i, c):
    if c <= 0:
        raise ValueError("num_classes must be positive")
    _index_check(i, c, allow_negative=False)
    return (i[..., None] == np.arange(c)).astype(np.int64)    # torch: int64 (int32 here)


def _cross_entropy_ref(x, t):
    """torch.nn.functional.cross_entropy with class indices: classes on dim 1 ((C,) for one sample),
    ignore_index -100 left out of the mean, any other index outside [0, C) an IndexError."""
    if x.ndim == 0:
        raise ValueError("cross_entropy of a 0-d input")
    z = x[None] if x.ndim == 1 else np.moveaxis(x, 1, -1)
    tt = t.reshape(1) if x.ndim == 1 else t
    if tt.shape != z.shape[:-1] or (x.ndim == 1 and t.ndim != 0):
        raise ValueError("cross_entropy: target shape")
    c = z.shape[-1]
    keep = tt != -100
    if ((tt[keep] < 0) | (tt[keep] >= c)).any():
        raise IndexError("cross_entropy: target out of range")
    if x.size == 0:
        raise ValueError("cross_entropy of an empty input")
    lse = _lse(z, -1)
    picked = np.take_along_axis(z, np.where(keep, tt, 0).astype(np.int64)[..., None], -1)[..., 0]
    with np.errstate(all="ignore"):
        return np.sum(np.where(keep, lse - picked, 0.0)) / np.sum(keep)


def _matmul_ref(a, b):
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError("matmul of a 0-d tensor")
    return np.matmul(a, b)


def _linear_ref(x, w, b):
    """ggmlgrad's linear wants a bias of exactly (out_features,) (stricter than torch's broadcasting)."""
    if w.ndim != 2 or b.shape != w.shape[:1]:
        raise ValueError("linear: weight 2-d, bias (out_features,) (ggmlgrad refuses; torch allows a 1-d weight "
                         "and a broadcasting bias)")
    return x @ w.T + b


def _round_bf16(a: np.ndarray) -> np.ndarray:
    """Round float32 values to bfloat16 (nearest even), NaN kept NaN."""
    f = np.asarray(a, dtype=np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    r = u.astype(np.uint32).view(np.float32).astype(np.float64)
    return np.where(np.isnan(f), np.nan, r)


def _to_half_ref(a):
    with np.errstate(all="ignore"):
        return np.asarray(a, dtype=np.float32).astype(np.float16).astype(np.float64)


def _scalar_ops() -> list[FuzzOp]:
    """x (op) c with a random Python scalar, c from values that include NaN, Inf and signed zeros."""
    def p(rng, xs):
        return (float(rng.choice(SCALARS)),)

    def f32(r):
        """torch casts a Python scalar to the tensor's float32 first (1e30 > float32(1e30) is False)."""
        def g(a, c):
            with np.errstate(all="ignore"):
                return r(a, float(np.float32(c)))
        return g

    def ignore(f):
        def g(*a):
            with np.errstate(all="ignore"):
                return f(*a)
        return g
    table = [("add_c", lambda t, c: t + c, lambda a, c: a + c),
             ("rsub_c", lambda t, c: c - t, lambda a, c: c - a),
             ("mul_c", lambda t, c: t * c, lambda a, c: a * c),
             ("div_c", lambda t, c: t / c, lambda a, c: a / c),
             # torch's c / x is x.reciprocal() * c: the reciprocal rounds (and overflows) in float32
             ("rdiv_c", lambda t, c: c / t, lambda a, c: (1.0 / np.asarray(a, np.float32)).astype(np.float64) * c),
             ("pow_c", lambda t, c: t ** c, lambda a, c: np.power(a, c)),
             ("gt_c", lambda t, c: t > c, lambda a, c: (a > c).astype(np.float64)),
             ("eq_c", lambda t, c: t == c, lambda a, c: (a == c).astype(np.float64)),
             ("clamp_min_c", lambda t, c: t.clamp(min=c), lambda a, c: np.where(np.isnan(a), a, np.maximum(a, c))),
             ("maximum_c", lambda t, c: gg.maximum(t, c), lambda a, c: np.maximum(a, c))]
    return [FuzzOp(n, ("x",), f, ignore(f32(r)), p, grad=n not in ("gt_c", "eq_c")) for n, f, r in table]


def _build_ops() -> dict[str, FuzzOp]:
    infos = _opinfo_map()
    rng = np.random.default_rng(0)
    ops: dict[str, FuzzOp] = {}

    def from_info(name, operands, ref=None, params=lambda rng, xs: (), **kw) -> None:
        o = infos[name]
        ops[name] = FuzzOp(name, operands, o.fn, ref or o.ref, params, grad=o.grad,
                           atol=max(o.atol, 1e-5), rtol=max(o.rtol, 1e-4), **kw)

    # Automatic: every entry whose samples are one or two arrays and nothing else.
    for name, o in infos.items():
        if name in _AUTO_SKIP or name in _PARAM_OPS or not o.fuzz:
            continue
        sigs = _sig(o, rng)
        if sigs == {("A",)}:
            from_info(name, ("x",), reducing=name in _REDUCING)
        elif sigs == {("A", "A")}:
            from_info(name, ("x", "rel"), reducing=name in _REDUCING)
    # References the OpInfo table does not need to get right at NaN/Inf, spelled as torch computes them.
    torch_refs = {"linear_nobias": lambda x, w: _linear_ref(x, w, np.zeros(w.shape[:1])),
                  "floor_divide": np.floor_divide,
                  "remainder": np.remainder,                               # Python's: -5 % inf == inf
                  "logsumexp_large": lambda a: _dim_ref(_lse)(a, 1),       # torch: logsumexp(inf) == inf
                  "sign": lambda a: np.where(np.isnan(a), 0.0, np.sign(a)),    # torch.sign(nan) == 0
                  "var_single_element": _zero_d_axis(lambda a, ax: np.var(a, axis=ax)),
                  "clamp_inverted": lambda a: np.where(np.isnan(a), a, -1.0)}  # NaN stays NaN
    for name, fn in torch_refs.items():
        if name in ops:
            ops[name].ref = fn
    if "var_single_element" in ops:
        ops["var_single_element"].call = lambda a, ax: a.var(ax, correction=0)
        ops["var_single_element"].params = lambda rng, xs: (0,)

    ax_kd = lambda rng, xs: (_gen_axis(rng, xs[0].ndim), bool(rng.random() < 0.5))
    ax1 = lambda rng, xs: (_gen_axis(rng, xs[0].ndim, allow_none=False, allow_tuple=False),)
    ax1_kd = lambda rng, xs: ax1(rng, xs) + (bool(rng.random() < 0.5),)
    from_info("sum_axis", ("x",), _reduce_ref(lambda a, ax, kd: np.sum(a, axis=ax, keepdims=kd)), ax_kd, reducing=True)
    from_info("mean_axis", ("x",), _reduce_ref(_mean_ref), ax_kd, reducing=True)
    from_info("amax", ("x",), _extreme_ref(np.max), ax_kd)
    from_info("amin", ("x",), _extreme_ref(np.min), ax_kd)
    from_info("var", ("x",), _reduce_ref(_var_ref), ax_kd, reducing=True)
    from_info("std", ("x",), _reduce_ref(_std_ref), ax_kd, reducing=True)
    from_info("logsumexp", ("x",), _reduce_ref(_lse), ax_kd, reducing=True)
    from_info("argmax", ("x",), _argmax_ref,
              lambda rng, xs: (_gen_axis(rng, xs[0].ndim, allow_tuple=False), bool(rng.random() < 0.5)))
    from_info("softmax", ("x",), _dim_ref(_softmax), ax1, reducing=True)
    from_info("log_softmax", ("x",), _dim_ref(_log_softmax), ax1, reducing=True)
    from_info("max_dim_values", ("x",), _dim_ref(_max_dim_values), ax1_kd)
    from_info("min_dim", ("x",), _dim_ref(_min_dim_ref), ax1)
    from_info("squeeze", ("x",), _squeeze_ref, lambda rng, xs: (_gen_axis(rng, xs[0].ndim),))
    from_info("unsqueeze", ("x",), _unsqueeze_ref, lambda rng, xs: (int(rng.integers(-xs[0].ndim - 2, xs[0].ndim + 2)),))
    two_dims = lambda rng, xs: (_gen_axis(rng, xs[0].ndim, False, False), _gen_axis(rng, xs[0].ndim, False, False))
    from_info("transpose", ("x",), _transpose_ref, two_dims)
    from_info("movedim", ("x",), _movedim_ref, two_dims)
    from_info("flatten", ("x",), _flatten_ref, two_dims)
    from_info("narrow", ("x",), _narrow_ref, _narrow_params)
    from_info("reshape", ("x",), _reshape_ref, _reshape_params)
    from_info("permute", ("x",), _permute_ref, _permute_params)
    from_info("broadcast_to", ("x",), _broadcast_ref, _broadcast_params)
    from_info("tile", ("x",), _tile_ref, lambda rng, xs: (tuple(int(rng.choice((1, 1, 2, 3, 0, -1)))
                                                                for _ in range(int(rng.integers(0, 4)))),))
    from_info("chunk", ("x",), _chunk_ref, lambda rng, xs: (int(rng.integers(-1, 5)),
                                                            _gen_axis(rng, xs[0].ndim, False, False)))
    from_info("getitem", ("x",), _getitem_ref, _getitem_params)
    from_info("getitem_list", ("x",), _getitem_list_ref, _getitem_list_params)
    from_info("cat", ("x", "cat", "cat"), _cat_ref, lambda rng, xs: (_gen_axis(rng, xs[0].ndim, False, False),))
    from_info("stack", ("x", "rel=", "rel="), _stack_ref,
              lambda rng, xs: (int(rng.integers(-xs[0].ndim - 2, xs[0].ndim + 2)),))
    from_info("where", ("x", "rel", "rel"))
    from_info("clamp_tensor_bounds", ("x", "rel", "rel"))
    from_info("linear", ("x", "linw", "linb"), _linear_ref, reducing=True)
    from_info("bce_with_logits", ("x", "rel="), _same_shape(_bce_ref))
    for name in ("softmax_cross_entropy", "softmax_cross_entropy_mean", "softmax_cross_entropy_mean_unit_rows"):
        if name in ops:
            ops[name].operands = ("x", "rel=")
            ops[name].ref = _same_shape(ops[name].ref, min_ndim=1)
    from_info("index_select", ("x", "idx:select"), _index_select_ref,
              lambda rng, xs: (_gen_axis(rng, xs[0].ndim, False, False),), )
    ops["index_select"].call = lambda a, i, d: gg.index_select(a, d, i)
    ops["index_select"].ref = lambda a, i, d: _index_select_ref(a, d, i)
    from_info("gather", ("x", "idx:gather"), None, lambda rng, xs: (_gen_axis(rng, xs[0].ndim, False, False),))
    ops["gather"].call = lambda a, i, d: gg.gather(a, d, i)
    ops["gather"].ref = lambda a, i, d: _gather_ref(a, d, i)
    from_info("embedding", ("x", "idx:rows"), _embedding_ref)
    from_info("getitem_tensor", ("x", "idx:dim1"), _getitem_tensor_ref)
    ops["one_hot"] = FuzzOp("one_hot", ("idx:classes",), lambda i, c: gg.nn.functional.one_hot(i, c), _one_hot_ref,
                            lambda rng, xs: (int(rng.integers(0, 5)),), grad=False)
    # The internal index op does not check its targets (gg.nn.functional.cross_entropy does): fuzz the user API.
    ops["cross_entropy"] = FuzzOp("cross_entropy", ("x", "idx:ce"), lambda x, t: gg.nn.functional.cross_entropy(x, t),
                                  _cross_entropy_ref, atol=2e-5, reducing=True)
    ops["layer_norm"] = FuzzOp("layer_norm", ("x",), lambda x: _op.layer_norm(x, eps=1e-5),
                               lambda x: _ln_ref(x), atol=2e-5, reducing=True)
    ops["to_half"] = FuzzOp("to_half", ("x",), lambda t: t.half(), _to_half_ref, half_out="float16")
    ops["to_bfloat16"] = FuzzOp("to_bfloat16", ("x",), lambda t: t.to("bfloat16"), _round_bf16, half_out="bfloat16")
    ops["to_float"] = FuzzOp("to_float", ("x",), lambda t: t.float(), lambda a: a)
    for o in _scalar_ops():
        ops[o.name] = o
    from_info("matmul", ("x", "mm"), _matmul_ref, reducing=True)
    return ops


def _same_shape(ref, min_ndim=0):
    """Losses take input and target of one shape (no broadcasting, as torch)."""
    def wrapped(x, y):
        if x.shape != y.shape or x.ndim < min_ndim:
            raise ValueError("input and target shapes differ")
        return ref(x, y)
    return wrapped


def _bce_ref(x, y):
    """torch's binary_cross_entropy_with_logits formula (it decides the Inf/NaN cases)."""
    m = np.maximum(-x, 0.0)
    return (1 - y) * x + m + np.log(np.exp(-m) + np.exp(-x - m))


def _ln_ref(x):
    from .opinfo_nn import ref_layer_norm
    if x.ndim == 0:
        raise ValueError("layer_norm of a 0-d tensor")
    if x.size == 0:
        return x.copy()
    with np.errstate(all="ignore"):
        return ref_layer_norm(x)


# Entries handled by _build_ops with argument generators (not by the automatic one/two-array rule).
_PARAM_OPS = {"sum_axis", "mean_axis", "amax", "amin", "var", "std", "logsumexp", "argmax", "softmax", "log_softmax",
              "max_dim_values", "min_dim", "squeeze", "unsqueeze", "transpose", "movedim", "flatten", "narrow",
              "reshape", "permute", "broadcast_to", "tile", "chunk", "getitem", "getitem_list", "cat", "stack",
              "where", "clamp_tensor_bounds", "linear", "bce_with_logits", "index_select", "gather", "embedding",
              "getitem_tensor", "softmax_cross_entropy_index_mean", "matmul"}
# Replaced by the user API that checks its arguments (gg.nn.functional.cross_entropy).
_REPLACED = {"softmax_cross_entropy_index_mean": "cross_entropy"}
_REDUCING = {"sum_all", "max_all", "min_all", "matmul", "linear_nobias", "softmax_method", "var_unbiased_false",
             "var_single_element", "logsumexp_large", "softmax_large", "log_softmax_extreme",
             "softmax_cross_entropy", "softmax_cross_entropy_mean", "softmax_cross_entropy_mean_unit_rows",
             "max_ties_forward"}


def _narrow_params(rng, xs):
    nd = xs[0].ndim
    d = _gen_axis(rng, nd, False, False)
    size = xs[0].shape[d] if nd and -nd <= d < nd else 2
    s = int(rng.integers(-size - 1, size + 2))
    n = int(rng.integers(-1, size + 2))
    return d, s, n


def _reshape_params(rng, xs):
    shape = xs[0].shape
    n = int(np.prod(shape, dtype=np.int64))
    r = rng.random()
    if r < 0.15:
        return (tuple(int(rng.choice(_DIMS)) for _ in range(int(rng.integers(0, 4)))),)     # likely wrong size
    dims = []
    rest = n
    while rest > 1 and len(dims) < 4:
        f = [k for k in range(2, rest + 1) if rest % k == 0]
        k = int(rng.choice(f))
        dims.append(k)
        rest //= k
    if n == 0:
        dims = [0] + ([int(rng.choice((1, 2)))] if rng.random() < 0.5 else [])
    if rng.random() < 0.3:
        dims.insert(int(rng.integers(0, len(dims) + 1)), 1)
    dims = [int(x) for x in rng.permutation(dims)] if dims else []
    if dims and rng.random() < 0.4:
        dims[int(rng.integers(0, len(dims)))] = -1
    if rng.random() < 0.05:
        dims = dims + [-1, -1]
    return (tuple(dims),)


def _permute_params(rng, xs):
    nd = xs[0].ndim
    p = [int(x) for x in rng.permutation(nd)]
    r = rng.random()
    if r < 0.1 and nd:
        p[0] = p[-1] if nd > 1 else nd                                # duplicate or out of range
    elif r < 0.15:
        p = p + [0]
    elif r < 0.4 and nd:
        p = [x - nd if rng.random() < 0.5 else x for x in p]
    return (tuple(p),)


def _broadcast_params(rng, xs):
    shape = xs[0].shape
    r = rng.random()
    new = tuple(int(rng.choice((1, 2, 3))) for _ in range(int(rng.integers(0, 3))))
    body = tuple(int(rng.choice((2, 3))) if d == 1 and rng.random() < 0.6 else
                 (-1 if rng.random() < 0.2 else d) for d in shape)
    if r < 0.15:
        body = tuple(d + 1 for d in shape)                             # mismatched
    out = new + body
    return (out[-4:] if rng.random() < 0.9 else out,)


def _getitem_params(rng, xs):
    nd = xs[0].ndim
    key = []
    for k in range(int(rng.integers(0, nd + 2))):
        size = xs[0].shape[k] if k < nd else 1
        r = rng.random()
        if r < 0.3:
            key.append(int(rng.integers(-size - 1, size + 1)))
        elif r < 0.75:
            lo = int(rng.integers(-size - 1, size + 1)) if rng.random() < 0.6 else None
            hi = int(rng.integers(-size - 1, size + 2)) if rng.random() < 0.6 else None
            st = int(rng.choice((1, 1, 2, 3, -1))) if rng.random() < 0.5 else None
            key.append(slice(lo, hi, st))
        elif r < 0.85:
            key.append(None)
        else:
            key.append(Ellipsis)
    if key.count(Ellipsis) > 1:
        key = [k for k in key if k is not Ellipsis]
    if len(key) == 1 and rng.random() < 0.5:
        return (key[0],)
    return (tuple(key),)


def _getitem_list_params(rng, xs):
    size = xs[0].shape[0] if xs[0].ndim else 1
    lst = [int(rng.integers(-size - 1, size + 1)) for _ in range(int(rng.integers(1, 4)))]
    if rng.random() < 0.3 and xs[0].ndim >= 2:
        return ((slice(None), [int(rng.integers(-1, xs[0].shape[1] + 1))]),)
    return (lst,)


_OPS: dict[str, FuzzOp] | None = None


def fuzz_ops() -> dict[str, FuzzOp]:
    """The op table (built once from the OpInfo table)."""
    global _OPS
    if _OPS is None:
        _OPS = _build_ops()
    return _OPS


# ------------------------------------------------------------------------------------------ programs
@dataclasses.dataclass
class Step:
    op: str
    args: list          # tensor operand refs: ["i", k] input k, ["s", k] step k's result
    params: tuple


@dataclasses.dataclass
class Program:
    seed: int
    index: int
    inputs: list                     # np.ndarray (float32 / int32)
    grad_inputs: list                # input indices created with requires_grad=True
    steps: list
    backward: bool
    expect_error: bool               # the last step is invalid (its reference raised)
    weights: list = dataclasses.field(default_factory=list)   # loss weights per step (backward)

    def describe(self) -> str:
        lines = ["# inputs: " + ", ".join(f"i{k}{list(a.shape)}:{a.dtype}{'*' if k in self.grad_inputs else ''}"
                                          for k, a in enumerate(self.inputs))]
        for k, s in enumerate(self.steps):
            args = ", ".join(f"{r[0]}{r[1]}" for r in s.args)
            lines.append(f"#   s{k} = {s.op}({args}{', ' if s.params and args else ''}"
                         f"{', '.join(repr(p) for p in s.params)})")
        lines.append(f"# backward={self.backward} expect_error={self.expect_error}")
        return "\n".join(lines)


def _encode(v):
    if isinstance(v, slice):
        return {"slice": [v.start, v.stop, v.step]}
    if v is Ellipsis:
        return {"ellipsis": True}
    if isinstance(v, tuple):
        return {"tuple": [_encode(x) for x in v]}
    if isinstance(v, list):
        return [_encode(x) for x in v]
    return v


def _decode(v):
    if isinstance(v, dict):
        if "slice" in v:
            return slice(*v["slice"])
        if "ellipsis" in v:
            return Ellipsis
        return tuple(_decode(x) for x in v["tuple"])
    if isinstance(v, list):
        return [_decode(x) for x in v]
    return v


def _arr_json(a):
    return {"dtype": str(a.dtype), "shape": list(a.shape), "data": [float(x) for x in a.reshape(-1)]}


def _arr_from(d):
    return np.array(d["data"], dtype=np.float64).astype(d["dtype"]).reshape(d["shape"])


def program_to_json(p: Program) -> str:
    return json.dumps({"seed": p.seed, "index": p.index, "inputs": [_arr_json(a) for a in p.inputs],
                       "grad_inputs": p.grad_inputs, "backward": p.backward, "expect_error": p.expect_error,
                       "weights": [None if w is None else _arr_json(w) for w in p.weights],
                       "steps": [[s.op, s.args, [_encode(x) for x in s.params]] for s in p.steps]})


def program_from_json(text: str) -> Program:
    d = json.loads(text)
    return Program(d["seed"], d["index"], [_arr_from(a) for a in d["inputs"]], d["grad_inputs"],
                   [Step(o, a, tuple(_decode(x) for x in pr)) for o, a, pr in d["steps"]], d["backward"],
                   d["expect_error"], [None if w is None else _arr_from(w) for w in d["weights"]])


def _f32(a) -> np.ndarray:
    """Round a float64 reference result to float32 storage (overflow to Inf, as the library stores it)."""
    a = np.asarray(a)
    if a.dtype.kind == "b" or a.dtype.kind in "iu":
        return a.astype(np.float64)
    with np.errstate(all="ignore"):
        return a.astype(np.float32).astype(np.float64)


def apply_ref(fop: FuzzOp, vals: list, params: tuple) -> np.ndarray:
    """The op's float64 reference, rounded to its storage dtype; raises where the op is invalid."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = np.asarray(fop.ref(*vals, *params))
    if out.dtype == object:
        raise TypeError("reference produced an object array")
    return _f32(out)


class _Gen:
    """Builds one program, running the reference alongside to know every live tensor's shape and dtype."""

    def __init__(self, seed: int, index: int):
        self.rng = np.random.default_rng([seed, index])
        self.seed, self.index = seed, index
        self.special_p = float(self.rng.choice((0.0, 0.0, 0.05, 0.2)))
        # Empty tensors in one program of five.
        self.allow_empty = bool(self.rng.random() < 0.2)
        self.inputs: list = []
        self.grad_inputs: list = []
        self.vals: dict = {}           # ref -> float64 value
        self.kinds: dict = {}          # ref -> "f32" | "int" | "half"
        self.steps: list = []

    def add_input(self, arr: np.ndarray, grad_ok=True) -> tuple:
        k = len(self.inputs)
        self.inputs.append(arr)
        ref = ("i", k)
        self.vals[ref] = arr.astype(np.float64)
        self.kinds[ref] = "int" if arr.dtype.kind in "iu" else "f32"
        if grad_ok and arr.dtype == np.float32 and self.backward and self.rng.random() < 0.7:
            self.grad_inputs.append(k)
        return ref

    def shape(self, shape: tuple) -> tuple:
        return tuple(shape) if self.allow_empty else tuple(max(d, 1) for d in shape)

    def fresh(self, shape) -> tuple:
        return self.add_input(_rand_values(self.rng, self.shape(shape), self.special_p))

    def pick_live(self) -> tuple:
        live = list(self.vals)
        float_live = [r for r in live if self.kinds[r] != "int"]
        pool = float_live if (float_live and self.rng.random() < 0.9) else live
        return pool[int(self.rng.integers(0, len(pool)))]

    def operand(self, kind: str, first) -> tuple:
        rng = self.rng
        fshape = self.vals[first].shape if first is not None else ()
        if kind == "x":
            return self.pick_live() if (self.vals and rng.random() < 0.75) else self.fresh(_rand_shape(rng))
        if kind == "rel":
            if rng.random() < 0.3:
                return self.pick_live()
            return self.fresh(_related_shape(rng, fshape))
        if kind == "rel=":
            return self.fresh(fshape if rng.random() < 0.85 else _rand_shape(rng))
        if kind == "cat":
            s = list(fshape)
            if s and rng.random() < 0.7:
                s[int(rng.integers(0, len(s)))] = int(rng.choice((0, 1, 2, 3)))
            return self.fresh(tuple(s) if rng.random() < 0.9 else _rand_shape(rng))
        if kind == "mm":
            s = list(fshape)
            k = s[-1] if s else 2
            if rng.random() < 0.85:
                out = [k] if rng.random() < 0.25 else [k, int(rng.choice((1, 2, 3)))]
                if len(s) >= 3 and rng.random() < 0.5:
                    out = [s[-3]] + ([k, 2] if len(out) == 1 else out)
                return self.fresh(tuple(out))
            return self.fresh(_rand_shape(rng))
        if kind == "linw":
            k = fshape[-1] if fshape else 2
            return self.fresh((int(rng.choice((1, 2, 3))), k) if rng.random() < 0.85 else _rand_shape(rng, 2))
        if kind == "linb":
            wshape = self.vals[self._last_w].shape
            return self.fresh(wshape[:1] if wshape and rng.random() < 0.85 else _rand_shape(rng, 1))
        if kind.startswith("idx:"):
            return self.add_input(self.index_array(kind[4:], fshape), grad_ok=False)
        raise ValueError(kind)

    def index_array(self, kind: str, fshape: tuple) -> np.ndarray:
        rng = self.rng
        if kind == "select":
            n = max(fshape) if fshape else 1    # the dim is drawn later: bounds from the largest one
            shape = (int(rng.integers(0, 5)),) if rng.random() < 0.85 else _rand_shape(rng, 2)
        elif kind == "gather":
            n = max(fshape) if fshape else 1
            shape = tuple(max(1, int(rng.integers(0, d + 1))) if d else 0 for d in fshape) \
                if rng.random() < 0.85 else _rand_shape(rng)
        elif kind == "rows":
            n = fshape[0] if fshape else 1
            shape = _rand_shape(rng, 2)
        elif kind == "dim1":
            n = fshape[1] if len(fshape) > 1 else 1
            shape = _rand_shape(rng, 2)
        elif kind == "classes":
            n = 4
            shape = _rand_shape(rng, 2)
        else:                                   # cross_entropy targets, torch layout: classes on dim 1
            n = fshape[1] if len(fshape) > 1 else (fshape[0] if fshape else 1)
            shape = (fshape[:1] + fshape[2:] if len(fshape) > 1 else ()) if rng.random() < 0.9 else _rand_shape(rng, 2)
            if rng.random() < 0.15:                 # ignore_index rows
                shape = self.shape(shape)
                return np.where(rng.random(shape) < 0.5, -100, rng.integers(0, max(n, 1), size=shape)).astype(np.int32)
        r = rng.random()
        lo, hi = (0, max(n, 1)) if r < 0.7 else ((-n, max(n, 1)) if r < 0.85 else (-n - 2, n + 3))
        return rng.integers(lo, hi, size=self.shape(shape)).astype(np.int32)

    def step(self, ops: dict, names: list) -> bool:
        """Append one op; False when the program must end (its last op is invalid)."""
        rng = self.rng
        for _attempt in range(8):
            fop = ops[names[int(rng.integers(0, len(names)))]]
            n_in = len(self.inputs)
            refs = []
            for k, kind in enumerate(fop.operands):
                if kind == "linb":
                    self._last_w = refs[1]
                refs.append(self.operand(kind, refs[0] if refs else None))
            vals = [self.vals[r] for r in refs]
            params = fop.params(rng, vals)
            try:
                out = apply_ref(fop, vals, params)
                ok = True
            except Exception:
                ok = False
            if ok and _known_crash(fop.name, vals, out):
                self._drop_inputs(n_in)
                continue
            # A reference failing on an empty operand says more about NumPy than about torch: retry.
            empty = any(v.size == 0 for v in vals)
            if not ok and (empty or rng.random() < 0.75) and _attempt < 7:
                self._drop_inputs(n_in)
                continue
            if not ok and empty:
                self._drop_inputs(n_in)
                return True
            self.steps.append(Step(fop.name, [list(r) for r in refs], params))
            if not ok:
                return False
            ref = ("s", len(self.steps) - 1)
            self.vals[ref] = out
            in_kinds = {self.kinds[r] for r in refs}
            self.kinds[ref] = ("half" if fop.half_out else "int" if out.dtype.kind in "iu" else
                               "bool" if _BOOL_OUT.match(fop.name) else
                               "half" if "half" in in_kinds and fop.name != "to_float" else "f32")
            return True
        return True

    def _drop_inputs(self, n: int) -> None:
        for k in range(n, len(self.inputs)):
            self.vals.pop(("i", k), None)
            self.kinds.pop(("i", k), None)
            if k in self.grad_inputs:
                self.grad_inputs.remove(k)
        del self.inputs[n:]


def generate(seed: int, index: int) -> Program:
    """Program number ``index`` of the stream ``seed`` (deterministic)."""
    ops = fuzz_ops()
    names = sorted(ops)
    g = _Gen(seed, index)
    rng = g.rng
    g.backward = bool(rng.random() < 0.5)
    for _ in range(int(rng.integers(1, 4))):
        shape = _rand_shape(rng)
        if rng.random() < 0.12:
            g.add_input(rng.integers(-3, 6, size=g.shape(shape)).astype(np.int32), grad_ok=False)
        else:
            g.fresh(shape)
    n_steps = int(rng.integers(1, 31))
    ok = True
    while len(g.steps) < n_steps and ok:
        ok = g.step(ops, names)
    weights = [rng.standard_normal(g.vals[("s", k)].shape).astype(np.float32) if ("s", k) in g.vals else None
               for k in range(len(g.steps))] if g.backward else []
    return Program(seed, index, g.inputs, sorted(g.grad_inputs), g.steps, g.backward, not ok, weights)


# ------------------------------------------------------------------------------------------ running
@dataclasses.dataclass
class Outcome:
    kind: str                                   # "value" | "error"
    values: list = dataclasses.field(default_factory=list)     # per step: float64 array
    dtypes: list = dataclasses.field(default_factory=list)
    grads: list = dataclasses.field(default_factory=list)      # per grad input: float64 array or None
    terms: list = dataclasses.field(default_factory=list)      # steps in the loss
    error: str = ""                             # exception type name
    message: str = ""
    error_type: type | None = None
    requires_grad: list = dataclasses.field(default_factory=list)
    step: int = -1                              # the step that raised (len(steps): backward, +1: the read)


# The step _body is at (for the torch oracle's error classification).
_PROGRESS = [0]


def _resolve(ref, xs, outs):
    return xs[ref[1]] if ref[0] == "i" else outs[ref[1]]


def _body(prog: Program, xs: list, ws: list, terms: list):
    """The program on ggmlgrad tensors: every step's result, then the gradients of the weighted loss."""
    ops = fuzz_ops()
    outs = []
    for k, s in enumerate(prog.steps):
        fop = ops[s.op]
        _PROGRESS[0] = k
        outs.append(fop.call(*[_resolve(r, xs, outs) for r in s.args], *s.params))
    grads = []
    _PROGRESS[0] = len(prog.steps)
    if prog.backward:
        loss = None
        for k in prog.grad_inputs:
            term = xs[k].sum() * 0.5
            loss = term if loss is None else loss + term
        for k, t in enumerate(outs):
            if t.requires_grad and t.dtype == gg.float32:
                term = (t * ws[k]).sum() if ws[k] is not None else t.sum()
                loss = term if loss is None else loss + term
                terms.append(k)
        if loss is not None:
            loss.backward()
        grads = [xs[k].grad for k in prog.grad_inputs]
    _PROGRESS[0] = len(prog.steps) + 1
    return outs, grads


def _read(t) -> np.ndarray | None:
    if t is None:
        return None
    a = t.detach().numpy() if hasattr(t, "detach") else np.asarray(t)
    return np.asarray(a).astype(np.float64)


def _other_inputs(prog: Program) -> list:
    """Inputs of the same signature with other values, for the capture's recording call."""
    rng = np.random.default_rng([prog.seed, prog.index, 7])
    out = []
    for a in prog.inputs:
        if a.dtype == np.float32:
            with np.errstate(all="ignore"):
                out.append(np.asarray(a * np.float32(rng.choice((0.5, -1.0, 2.0))), dtype=np.float32))
        else:
            out.append(a)            # index values decide validity: keep them
    return out


def run_mode(prog: Program, mode: str) -> Outcome:
    """Run the program in one mode; any exception becomes an "error" outcome."""
    terms: list = []
    _PROGRESS[0] = 0
    rg: list = []
    try:
        if mode == "capture":
            vals, grads = _run_capture(prog, terms)
            dtypes = ["?"] * len(vals)
        else:
            graph = mode in ("graph", "check")
            with gg.graph_mode(graph, check=(mode == "check")):     # explicit: GGMLGRAD_GRAPH=1 must not leak in
                xs = [gg.tensor(a, requires_grad=(k in prog.grad_inputs)) for k, a in enumerate(prog.inputs)]
                ws = [gg.tensor(w) if w is not None else None for w in prog.weights]
                outs, gts = _body(prog, xs, ws, terms)
            vals = [_read(t) for t in outs]
            grads = [_read(g) for g in gts]
            dtypes = [t.dtype.name for t in outs]
            rg = [bool(t.requires_grad) for t in outs]
        return Outcome("value", vals, dtypes, grads, terms, requires_grad=rg)
    except Exception as e:           # noqa: BLE001 -- classified by the caller
        return Outcome("error", error=type(e).__name__, message=f"{type(e).__name__}: {e}"[:400], error_type=type(e),
                       step=_PROGRESS[0])


def _run_capture(prog: Program, terms: list):
    n_in = len(prog.inputs)

    def fn(*args):
        xs = list(args[:n_in])
        for k in prog.grad_inputs:
            xs[k].requires_grad_()
        ws = list(args[n_in:])
        terms.clear()
        outs, grads = _body(prog, xs, ws + [None] * (len(prog.steps) - len(ws)), terms)
        return tuple(outs) + tuple(grads)
    cap = gg.capture(fn)
    wargs = [w for w in prog.weights]
    ws = [w if w is not None else np.zeros(1, np.float32) for w in wargs]
    cap(*_other_inputs(prog), *ws)                 # records
    res = cap(*prog.inputs, *ws)                   # replays with the program's inputs
    res = res if isinstance(res, tuple) else (res,)
    vals = [_read(r) for r in res[:len(prog.steps)]]
    grads = [_read(r) for r in res[len(prog.steps):]]
    return vals, grads


# ------------------------------------------------------------------------------------------ checking
@dataclasses.dataclass
class Report:
    ok: bool
    problems: list
    outcomes: dict
    skipped: str = ""


def _tolerances(fop: FuzzOp, vals: list, exp: np.ndarray, half: bool):
    atol, rtol = fop.atol, fop.rtol
    if fop.name.startswith(("softmax_cross", "bce", "cross_entropy")) and any(
            not np.isfinite(v).all() or (v.size and np.abs(v).max() > 1e20) for v in vals):
        return None              # non-finite or huge operands: inf - inf, cancellation in fused losses; outcome only
    if half:
        atol, rtol = max(atol, 1e-2), max(rtol, 1e-2)
    slack = 0.0
    if fop.reducing:
        finite = [np.abs(v[np.isfinite(v)]) for v in vals if v.size]
        mags = [float(f.max()) if f.size else 0.0 for f in finite]
        m = math.prod(mags[:2]) if fop.name in ("matmul", "linear", "linear_nobias") and len(mags) >= 2 else \
            max(mags, default=0.0)
        k = max(1, max((v.size for v in vals), default=1) // max(exp.size, 1))
        k = max(k, vals[0].shape[-1] if vals and vals[0].ndim else 1)
        if fop.name.startswith(("var", "std")):
            m = m * m                                     # sums of squares
        if fop.name == "layer_norm":
            m = m / math.sqrt(1e-5)                       # (x - mean) / sqrt(var + eps): a near-constant row
            k = 1                                         # amplifies the mean's rounding by 1 / sqrt(eps)
        slack = 8 * _EPS32 * m * k
        if m * k > 1e36:
            return None          # float32 may overflow where float64 does not: outcome only, no values
    return atol, rtol, slack


def compare(got: np.ndarray, exp: np.ndarray, atol: float, rtol: float, slack: float = 0.0) -> str:
    """'' when close; else a description. NaN positions equal, infinities equal, finite within tolerance."""
    if got.shape != exp.shape:
        return f"shape {got.shape} != reference {exp.shape}"
    gn, en = np.isnan(got), np.isnan(exp)
    if (gn != en).any():
        i = np.argwhere(gn != en)[0]
        return f"NaN mismatch at {tuple(i)}: got {got[tuple(i)]!r}, reference {exp[tuple(i)]!r}"
    # A finite reference beyond ~1e36 may overflow inside a composite op (3 * x / 4) in float32.
    near_max = ~en & np.isfinite(exp) & (np.abs(exp) > 1e36) & np.isinf(got) & (np.sign(got) == np.sign(exp))
    got = np.where(near_max, exp, got)
    ei = np.isinf(exp) & ~en
    if (got[ei] != exp[ei]).any():
        i = np.argwhere(ei & (got != exp))[0]
        return f"Inf mismatch at {tuple(i)}: got {got[tuple(i)]!r}, reference {exp[tuple(i)]!r}"
    f = ~en & ~ei
    with np.errstate(all="ignore"):
        err = np.abs(got - exp)
        bad = f & ~(err <= atol + rtol * np.abs(exp) + slack)
    if bad.any():
        i = tuple(np.argwhere(bad)[0])
        return f"value at {i}: got {got[i]!r}, reference {exp[i]!r} (tol {atol + rtol * abs(exp[i]) + slack:.3g})"
    return ""


def _step_operands(prog: Program, step: Step, vals: list) -> list:
    return [prog.inputs[r[1]].astype(np.float64) if r[0] == "i" else vals[r[1]] for r in step.args]


# Comparisons give bool tensors (torch.bool): most float ops refuse them, as torch's do.
_BOOL_OUT = re.compile(r"(cmp_(scalar_|fn_)?(lt|le|gt|ge|eq|ne)(_nonfinite)?|eq_c|gt_c)$")


def _either_error(prog: Program, kinds: dict) -> bool:
    """True if some op reads an int32, bool or half-precision tensor (other than as an index): a clear
    error is then acceptable instead of values (ggmlgrad computes in float32)."""
    ops = fuzz_ops()
    vals: list = []
    for s in prog.steps:
        for r, kind in zip(s.args, ops[s.op].operands):
            if not kind.startswith("idx:") and kinds.get(tuple(r)) in ("int", "half", "bool"):
                return True
        operands = _step_operands(prog, s, vals)
        if (ops[s.op].reducing or s.op in _EXTREMES) and any(v.size == 0 for v in operands):
            return True         # reductions of empty tensors may refuse with a clear error (torch: 0, -inf, nan)
        try:
            vals.append(apply_ref(ops[s.op], operands, s.params))
        except Exception:
            break
    return False


_EXTREMES = {"amax", "amin", "argmax", "max_dim_values", "min_dim", "max_all", "min_all", "max_ties_forward",
             "argmax_inf", "layer_norm", "bce_with_logits", "one_hot", "softmax_cross_entropy",
             "softmax_cross_entropy_mean", "softmax_cross_entropy_mean_unit_rows", "cross_entropy"}


def _kinds(prog: Program) -> tuple[dict, list]:
    """Dtype kind of every live tensor and the float64 reference values (rounded per op)."""
    ops = fuzz_ops()
    kinds = {("i", k): ("int" if a.dtype.kind in "iu" else "f32") for k, a in enumerate(prog.inputs)}
    vals: list = []
    for k, s in enumerate(prog.steps):
        fop = ops[s.op]
        try:
            vals.append(apply_ref(fop, _step_operands(prog, s, vals), s.params))
        except Exception:
            vals.append(None)
            break
        in_k = {kinds[tuple(r)] for r in s.args}
        kinds[("s", k)] = ("half" if fop.half_out else "int" if fop.name in ("argmax", "cmp_reflected_scalar", "one_hot") else
                           "bool" if _BOOL_OUT.match(fop.name) else
                           "half" if "half" in in_k and fop.name != "to_float" else "f32")
    return kinds, vals


def _big_rank(prog: Program, vals: list) -> bool:
    return any(v is not None and v.ndim > 4 for v in vals)


def torch_available() -> bool:
    try:
        import torch  # noqa: F401
        return True
    except ImportError:
        return False


# The torch oracle (testing/fuzz_torch.py) is on where torch is installed; GGMLGRAD_FUZZ_TORCH=0 turns it off.
TORCH_ORACLE = os.environ.get("GGMLGRAD_FUZZ_TORCH", "1") != "0" and torch_available()


def check_program(prog: Program, modes=MODES, fd: bool = True, torch_oracle: bool | None = None) -> Report:
    """Run ``prog`` in each mode and check it against the reference and, where torch is installed, against
    torch (see the module docstring)."""
    kinds, ref_vals = _kinds(prog)
    either = _either_error(prog, kinds) or _big_rank(prog, ref_vals)
    problems = []
    modes = [m for m in modes if not _hit(_skip_mode(prog, m, ref_vals))]
    outcomes = {m: run_mode(prog, m) for m in modes}
    for m, o in outcomes.items():
        if o.kind == "error":
            if not issubclass(o.error_type, ALLOWED_ERRORS):
                problems.append(f"{m}: exception of a type outside ValueError/TypeError/IndexError/RuntimeError: "
                                f"{o.message}")
            elif not prog.expect_error and not either and not (m == "capture" and _hit(
                    "capture_refused (CaptureError, documented)" if o.error == "CaptureError" else "")):
                problems.append(f"{m}: raised {o.message} but the reference gives values")
        elif prog.expect_error and _hit(_known_open_error(prog, m)):
            outcomes[m] = dataclasses.replace(o, kind="known_open")
            continue
        elif prog.expect_error:
            problems.append(f"{m}: gave values but the reference raises at step {len(prog.steps) - 1} "
                            f"({prog.steps[-1].op})")
        else:
            dtypes = next((x.dtypes for x in outcomes.values() if x.kind == "value" and "?" not in x.dtypes), [])
            problems += [f"{m}: {p}" for p in _check_values(prog, o, kinds, dtypes)]
    kinds_seen = {(o.kind, o.error) for m, o in outcomes.items()
                  if not (m == "capture" and o.error == "CaptureError") and o.kind != "known_open"
}
    if len(kinds_seen) > 1 and not _hit(_deferred_check_order(outcomes)):
        problems.append("modes disagree: " + ", ".join(f"{m}={o.kind}{'(' + o.error + ')' if o.error else ''}"
                                                        for m, o in outcomes.items()))
    problems += _cross_mode_grads(prog, outcomes)
    if fd and not problems and prog.backward:
        problems += _fd_check(prog, outcomes)
    if TORCH_ORACLE if torch_oracle is None else torch_oracle:
        from .fuzz_torch import check_against_torch
        problems += check_against_torch(prog, outcomes, kinds, ref_vals)
    return Report(not problems, problems, outcomes)


def _deferred_check_order(outcomes: dict) -> str:
    """KNOWN_OPEN "deferred_check_order": every mode raised, eager and check mode a deferred check's
    IndexValueError, the others a TypeError (or capture's CaptureError)."""
    errors = {m: o.error for m, o in outcomes.items()}
    if any(o.kind != "error" for o in outcomes.values()):
        return ""
    early = {errors.get(m) for m in ("eager", "check") if m in errors}
    late = {errors.get(m) for m in ("graph", "capture") if m in errors}
    if early == {"IndexValueError"} and late and late <= {"TypeError", "DTypeError", "CaptureError"}:
        return "deferred_check_order"
    return ""


def _known_open_error(prog: Program, mode: str) -> str:
    """The KNOWN_OPEN key of values where the reference raises ('' if none; none is known now)."""
    return ""


def _check_values(prog: Program, o: Outcome, kinds: dict, dtypes: list = ()) -> list:
    """Each step against the reference on this mode's own operand values. A bool result (``dtypes``, the
    result dtypes of a mode that has them) is the truth of the reference's value, as torch's bool arithmetic
    (True + True is True)."""
    ops = fuzz_ops()
    out = []
    if len(o.values) != len(prog.steps):
        return [f"{len(o.values)} results for {len(prog.steps)} steps"]
    for k, s in enumerate(prog.steps):
        fop = ops[s.op]
        operands = _step_operands(prog, s, o.values)
        exp = apply_ref(fop, operands, s.params)
        if k < len(dtypes) and dtypes[k] == "bool":
            exp = (exp != 0).astype(np.float64)
        half = any(kinds.get(tuple(r)) == "half" for r in s.args) or kinds.get(("s", k)) == "half"
        tol = _tolerances(fop, operands, exp, half)
        if tol is None:
            continue
        msg = compare(o.values[k], exp, *tol)
        if msg and not _hit(_known_open(s.op, operands, s.params)):
            out.append(f"step s{k} {s.op}: {msg}")
            break
    return out


def _cross_mode_grads(prog: Program, outcomes: dict) -> list:
    base = outcomes.get("eager")
    if base is None or base.kind != "value" or not prog.backward:
        return []
    out = []
    for m, o in outcomes.items():
        if m == "eager" or o.kind != "value":
            continue
        if o.terms != base.terms:
            out.append(f"{m}: loss terms {o.terms} differ from eager's {base.terms}")
            continue
        for k, (g, b) in enumerate(zip(o.grads, base.grads)):
            if (g is None) != (b is None):
                out.append(f"{m}: grad of i{prog.grad_inputs[k]} is {'None' if g is None else 'set'}, eager's is not")
            elif g is not None:
                scale = float(np.max(np.abs(b[np.isfinite(b)]), initial=0.0))
                msg = compare(g, b, 1e-4 + 1e-4 * scale, 1e-3)
                if msg:
                    out.append(f"{m}: grad of i{prog.grad_inputs[k]} differs from eager's: {msg}")
    return out


def _ref_loss(prog: Program, inputs: list, terms: list) -> float:
    """The loss of _body in float64 (no per-op rounding)."""
    ops = fuzz_ops()
    vals = []
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for s in prog.steps:
            ops_in = [inputs[r[1]] if r[0] == "i" else vals[r[1]] for r in s.args]
            vals.append(np.asarray(ops[s.op].ref(*ops_in, *s.params), dtype=np.float64))
    loss = sum(0.5 * float(np.sum(inputs[k])) for k in prog.grad_inputs)
    return loss + sum(float(np.sum(vals[k] * prog.weights[k])) for k in terms)


def _fd_check(prog: Program, outcomes: dict) -> list:
    """Gradients of the eager run against central finite differences of the float64 reference.

    Only where the program is smooth at the sample: inputs without special values, every result finite
    and moderate, and the difference quotients at three step sizes agreeing (a kink of relu/abs/clamp,
    a max tie or a floor step nearby makes them disagree; there only values are compared)."""
    base = outcomes.get("eager")
    if base is None or base.kind != "value" or not prog.grad_inputs:
        return []
    ops = fuzz_ops()
    if not all(ops[s.op].grad for s in prog.steps) or any(ops[s.op].half_out for s in prog.steps):
        return []
    if any(s.op.startswith(("softmax_cross", "bce")) for s in prog.steps):
        return []               # their targets are not differentiated (OpInfo nondiff); FD would differentiate them
    inputs = [a.astype(np.float64) for a in prog.inputs]
    for a in inputs:
        if a.size and (not np.all(np.isfinite(a)) or np.abs(a).max() > 1e3 or
                       np.abs(a).min(initial=1.0) < 1e-6):       # 0 is the kink of relu, abs, sign...
            return []
    if any(v is None or not np.all(np.isfinite(v)) or (v.size and np.abs(v).max() > 1e4) for v in base.values):
        return []
    rng = np.random.default_rng([prog.seed, prog.index, 3])
    out = []
    for gi, k in enumerate(prog.grad_inputs):
        g = base.grads[gi]
        x = inputs[k]
        if g is None or x.size == 0:
            continue
        for flat in rng.permutation(x.size)[:4]:
            idx = np.unravel_index(int(flat), x.shape)
            ests, sides = [], []
            f0 = _ref_loss(prog, inputs, base.terms)
            for h in (1e-4, 1e-5, 1e-6):
                hh = h * max(1.0, abs(float(x[idx])))
                xp, xm = [a.copy() for a in inputs], [a.copy() for a in inputs]
                xp[k][idx] += hh
                xm[k][idx] -= hh
                fp, fm = _ref_loss(prog, xp, base.terms), _ref_loss(prog, xm, base.terms)
                ests.append((fp - fm) / (2 * hh))
                sides += [(fp - f0) / hh, (f0 - fm) / hh]      # one-sided: they differ at a kink on the sample
            sc = max(1.0, max(abs(e) for e in ests))
            if not all(math.isfinite(e) for e in ests + sides) or max(ests) - min(ests) > 1e-3 * sc or \
                    abs(sides[2] - sides[3]) > 1e-2 * sc:
                continue            # not smooth here (or ill-conditioned): values only
            fd = ests[1]
            if abs(float(g[idx]) - fd) > 2e-3 * sc + 2e-2 * abs(fd):
                out.append(f"gradient of i{k}{list(idx)}: got {float(g[idx])!r}, finite differences {fd!r}")
                return out
    return out


# ------------------------------------------------------------------------------------------ snippets
def snippet(prog: Program, modes=MODES) -> str:
    """A runnable script reproducing the program (its listing in comments)."""
    return (f"# ggmlgrad op-program fuzzer: seed {prog.seed}, example {prog.index}\n{prog.describe()}\n"
            f"from ggmlgrad.testing.fuzz_programs import program_from_json, check_program\n"
            f"prog = program_from_json({program_to_json(prog)!r})\n"
            f"report = check_program(prog, modes={tuple(modes)!r})\n"
            f"print('\\n'.join(report.problems) or 'ok')\n")


def minimize(prog: Program, modes) -> Program:
    """Drop the steps the first failing one does not depend on (a smaller program, still failing)."""
    rep = check_program(prog, modes)
    if rep.ok:
        return prog
    for cut in range(1, len(prog.steps) + 1):
        p = _truncate(prog, cut)
        if not check_program(p, modes).ok:
            return _ancestors_only(p, modes)
    return prog


def _truncate(prog: Program, n: int) -> Program:
    p = dataclasses.replace(prog, steps=prog.steps[:n], weights=prog.weights[:n],
                            expect_error=prog.expect_error and n == len(prog.steps))
    return p


def _ancestors_only(prog: Program, modes) -> Program:
    last = len(prog.steps) - 1
    need = {last}
    for k in range(last, -1, -1):
        if k in need:
            need |= {r[1] for r in prog.steps[k].args if r[0] == "s"}
    keep = sorted(need)
    remap = {old: new for new, old in enumerate(keep)}
    steps = [Step(prog.steps[k].op, [["s", remap[r[1]]] if r[0] == "s" else r for r in prog.steps[k].args],
                  prog.steps[k].params) for k in keep]
    p = dataclasses.replace(prog, steps=steps, weights=[prog.weights[k] for k in keep] if prog.weights else [])
    return p if not check_program(p, modes).ok else prog


# ------------------------------------------------------------------------------------------ subprocess
def run_subprocess(seed: int, examples: int, modes=MODES, timeout: float = 900.0, start: int = 0) -> tuple[bool, str]:
    """Run the fuzzer in a child process: an abort or a segfault fails it, and the output then ends
    with the program that was running, as a runnable snippet. Returns (ok, report text)."""
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        progress = os.path.join(tmp, "program.py")
        cmd = [sys.executable, "-m", "ggmlgrad.testing.fuzz_programs", "--seed", str(seed), "--examples",
               str(examples), "--start", str(start), "--modes", ",".join(modes), "--progress", progress]
        env = dict(os.environ, GGML_NO_BACKTRACE="1")
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
            rc, out = r.returncode, r.stdout + r.stderr
        except subprocess.TimeoutExpired as e:
            rc, out = "timeout", (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        if rc == 0:
            return True, out
        if rc == 1 and "FAIL seed=" in out:
            return False, out
        crashed = open(progress).read() if os.path.exists(progress) else "(no program recorded)"
        return False, f"{out[-4000:]}\nchild exited with {rc}; the program it was running:\n{crashed}"


def torch_counts(report: str, into: dict) -> dict:
    """Add the torch oracle's per-mode class counts printed in ``report`` to ``into`` ({mode: {class: n}})."""
    for m, line in re.findall(r"torch oracle (\w+): (.*)", report):
        c = into.setdefault(m, {})
        for k, v in (x.rsplit(" ", 1) for x in line.split(", ")):
            c[k] = c.get(k, 0) + int(v)
    return into


def run_many(seed: int, examples: int, modes=MODES, chunk: int = 1000, time_limit: float = 0.0,
             start: int = 0, torch_into: dict | None = None) -> tuple[int, list, dict]:
    """Run ``examples`` programs in child processes of ``chunk`` programs each; a crash ends only its chunk
    (the run goes on after the crashing program). Returns (programs run, failure reports, runs per mode);
    the torch oracle's class counts are added to ``torch_into``."""
    t0, done, failures, i, per_mode = time.time(), 0, [], start, {}
    end = start + examples
    while i < end and not (time_limit and time.time() - t0 > time_limit):
        n = min(chunk, end - i)
        ok, report = run_subprocess(seed, n, modes, timeout=max(60.0, 3.0 * n), start=i)
        for line in re.findall(r"runs per mode: (.*)", report):
            for m, c in (x.rsplit(" ", 1) for x in line.split(", ")):
                per_mode[m] = per_mode.get(m, 0) + int(c)
        if torch_into is not None:
            torch_counts(report, torch_into)
        if ok:
            done, i = done + n, i + n
            continue
        failures.append(report)
        crashed = [int(x) for x in re.findall(r"seed \d+, example (\d+)\n", report.split("child exited")[-1])] \
            if "child exited" in report else []
        if crashed:                              # go on after the program that crashed (or hung)
            done, i = done + crashed[-1] - i + 1, crashed[-1] + 1
        else:
            done, i = done + n, i + n
    return done, failures, per_mode


# ------------------------------------------------------------------------------------------ main
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--examples", type=int, default=200, help="programs; each runs in every mode given")
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--only", type=int, default=None, help="run one example")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--time-limit", type=float, default=0.0, help="stop after this many seconds (0: none)")
    ap.add_argument("--max-failures", type=int, default=20)
    ap.add_argument("--progress", default=None, help="file that holds the program being run (for crashes)")
    ap.add_argument("--snippet", action="store_true", help="print the snippet of --only")
    args = ap.parse_args(argv)
    modes = tuple(m for m in args.modes.split(",") if m)
    indices = [args.only] if args.only is not None else range(args.start, args.start + args.examples)
    t0 = time.time()
    failures, n, counts, per_mode = 0, 0, {}, {}
    for i in indices:
        if args.time_limit and time.time() - t0 > args.time_limit:
            break
        prog = generate(args.seed, i)
        if args.progress:
            with open(args.progress, "w") as f:
                f.write(snippet(prog, modes))
        if os.environ.get("GGMLGRAD_FUZZ_TEST_ABORT") == str(i):
            os.abort()                                   # lets the test suite check crash reporting
        if args.snippet:
            print(snippet(prog, modes))
        rep = check_program(prog, modes)
        for m in rep.outcomes:
            per_mode[m] = per_mode.get(m, 0) + 1
        n += 1
        key = "error" if prog.expect_error else "value"
        counts[key] = counts.get(key, 0) + 1
        if not rep.ok:
            failures += 1
            from . import fuzz_torch
            saved = {m: dict(c) for m, c in fuzz_torch.COUNTS.items()}
            small = minimize(prog, modes)
            print(f"FAIL seed={args.seed} example={i}:\n  " + "\n  ".join(check_program(small, modes).problems or
                                                                           rep.problems))
            fuzz_torch.COUNTS.clear()
            fuzz_torch.COUNTS.update(saved)            # the minimizer's reruns are not programs of the run
            print(snippet(small, modes), flush=True)
            if failures >= args.max_failures:
                break
    dt = time.time() - t0
    print("known-open classes hit (program-modes): " + (", ".join(f"{k} {v}" for k, v in sorted(HITS.items()))
                                                         or "none"))
    print("runs per mode: " + ", ".join(f"{m} {per_mode.get(m, 0)}" for m in modes))
    if TORCH_ORACLE:
        from .fuzz_torch import summary
        print(summary())
    else:
        print("torch oracle: off (torch not installed or GGMLGRAD_FUZZ_TORCH=0)")
    print(f"fuzz_programs: {n} programs x {len(modes)} modes ({','.join(modes)}), seed {args.seed}, "
          f"{counts.get('value', 0)} valid / {counts.get('error', 0)} ending in an invalid op, "
          f"{failures} failing, {dt:.1f} s", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
