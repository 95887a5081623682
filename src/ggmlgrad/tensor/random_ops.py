"""Random ops: ``randperm``, ``multinomial``, ``bernoulli``, ``normal``, ``rand_like``/``randn_like``/``randint_like``
and the in-place ``normal_``, ``uniform_``, ``bernoulli_``, ``exponential_``, as torch's.

Every draw comes from the seeded generator (``gg.manual_seed``) through ``tensor/random.py``'s
:func:`noise` (uniform, normal or Gumbel noise as a tensor); the rest is ops on the device: a
Bernoulli draw is ``u < p``, a normal one ``mean + std * z``, multinomial the Gumbel-max trick
(``argmax(log p + g)``; without replacement, the ``num_samples`` largest keys of one draw, picked
one after the other). So inside ``gg.capture`` the noise is an input refilled on every replay and
these ops draw anew each time. ``randperm`` is a host permutation (an upload: a ``CaptureError``
while recording).

Values torch refuses (a probability outside [0, 1], a negative std, a distribution with a
negative, NaN or inf entry or a zero sum) are checked on the device and raise ``RuntimeError`` as
torch does: at the call in eager mode, at the sync point in graph mode and capture (the index
check machinery of ``ops/indexing.py``).

>>> import ggmlgrad as gg
>>> gg.manual_seed(0)
>>> sorted(gg.randperm(4).tolist())
[0, 1, 2, 3]
>>> gg.bernoulli(gg.tensor([0.0, 1.0])).tolist()
[0.0, 1.0]
"""
from __future__ import annotations

import math

import numpy as np

from ..engine import float32, int32
from ..engine import dtypes
from ..ops import op
from ..ops.decl import public
from ..ops.indexing import check_values
from .creation import _make, _shape, generator
from .grad_mode import no_grad
from .random import noise
from .shape_extra import _check_tensor, _float
from .tensor import Tensor


# ---------------------------------------------------------------- helpers
def _target(dtype, default):
    return dtypes.from_any(dtype) if dtype is not None else default


def _finish(value: Tensor, dtype, requires_grad: bool) -> Tensor:
    """A float32 draw in ``dtype``, a leaf (requires_grad as asked)."""
    out = value if dtype is float32 else op.cast(value, dtype=dtype)
    if requires_grad:
        out.requires_grad_(True)
    return out


def _refuse_device(opname: str, bad: Tensor, message: str) -> None:
    """Raise ``message`` (torch's RuntimeError) where the float32 0/1 tensor ``bad`` holds a 1: at once in
    eager mode, after the compute in graph mode and capture (a one-value check node)."""
    flag = op.cast(op.compare_scalar(op.amax(op.reshape(bad, shape=(bad.numel_,)), axis=0), kind="gt", c=0.0),
                   dtype=int32)
    check_values(opname, op.reshape(flag, shape=(1,)), 0, 0, message.replace("{", "{{").replace("}", "}}"))


def _outside(x: Tensor, lo: float, hi: float) -> Tensor:
    """float32 1 where ``x`` is NaN or outside [lo, hi], else 0."""
    inside = op.mul(op.cast(op.compare_scalar(x, kind="ge", c=lo), dtype=float32),
                    op.cast(op.compare_scalar(x, kind="le", c=hi), dtype=float32))
    return op.add_scalar(op.scale(inside, c=-1.0), c=1.0)


# ---------------------------------------------------------------- factories
@public(function="randperm")
def randperm(n: int, *, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A random permutation of ``0 .. n-1`` (int32, torch's int64 by the dtype rule), from the seeded
    generator. Drawn on the host and uploaded (inside ``gg.capture`` that is a ``CaptureError``).

    >>> import ggmlgrad as gg
    >>> sorted(gg.randperm(5).tolist())
    [0, 1, 2, 3, 4]
    """
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"randperm(): argument 'n' must be int, not {type(n).__name__}")
    if n < 0:
        raise RuntimeError(f"randperm: n must be non-negative, got {n}")
    d = _target(dtype, int32)
    if d is int32 and n > 2**31:
        raise ValueError(f"randperm: n={n} does not fit int32 (int64 is stored as int32)")
    return _make(generator().permutation(int(n)), d, device, requires_grad)


def _like(opname: str, input: Tensor, dtype, device) -> tuple:
    _check_tensor(opname, input)
    return _target(dtype, input.dtype), device if device is not None else input.device


@public(function="rand_like")
def rand_like(input: Tensor, *, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """Uniform [0, 1) noise of ``input``'s shape (and dtype, unless given), from the seeded generator.

    >>> import ggmlgrad as gg
    >>> gg.rand_like(gg.zeros(2, 3)).shape
    (2, 3)
    """
    d, dev = _like("rand_like", input, dtype, device)
    if not d.is_float:
        raise RuntimeError(f"rand_like: \"check_uniform_bounds\" not implemented for '{d.name}'")
    return _finish(noise("uniform", input.shape, dev), d, requires_grad)


@public(function="randn_like")
def randn_like(input: Tensor, *, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """Standard normal noise of ``input``'s shape (and dtype, unless given), from the seeded generator.

    >>> import ggmlgrad as gg
    >>> gg.randn_like(gg.zeros(4)).shape
    (4,)
    """
    d, dev = _like("randn_like", input, dtype, device)
    if not d.is_float:
        raise RuntimeError(f"randn_like: \"normal_kernel_cpu\" not implemented for '{d.name}'")
    return _finish(noise("normal", input.shape, dev), d, requires_grad)


def _uniform_ints(shape: tuple, low: int, high: int, device) -> Tensor:
    """float32 integers uniform in [low, high) (floor of a scaled uniform draw; exact below 2**24)."""
    u = noise("uniform", shape, device)
    v = op.floor(op.add_scalar(op.scale(u, c=float(high - low)), c=float(low)))
    return op.clamp(v, lo=float(low), hi=float(high - 1))


@public(function="randint_like")
def randint_like(input: Tensor, low: int = 0, high: int | None = None, *, dtype=None, device=None,
                 requires_grad: bool = False) -> Tensor:
    """Integers uniform in ``[low, high)`` in ``input``'s shape and dtype (``randint_like(x, high)`` or
    ``randint_like(x, low, high)``, as torch), from the seeded generator.

    >>> import ggmlgrad as gg
    >>> v = gg.randint_like(gg.zeros(3, dtype=gg.int32), 5)
    >>> v.dtype is gg.int32, all(0 <= a < 5 for a in v.tolist())
    (True, True)
    """
    d, dev = _like("randint_like", input, dtype, device)
    if high is None:
        low, high = 0, low
    for name, v in (("low", low), ("high", high)):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"randint_like(): argument '{name}' must be int, not {type(v).__name__}")
    if high <= low:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}")
    if max(abs(low), abs(high)) > 2**24:
        raise ValueError(f"randint_like: bounds beyond ±2**24 are not supported (drawn in float32), got [{low}, {high})")
    if d.is_bool and (low < 0 or high > 2):
        raise RuntimeError(f"randint_like: bool tensors hold [0, 2), got [{low}, {high})")
    return _finish(_uniform_ints(input.shape, int(low), int(high), dev), d, requires_grad)


# ---------------------------------------------------------------- distributions
@public(method="bernoulli", function="bernoulli")
def bernoulli(input: Tensor, p=None) -> Tensor:
    """0/1 draws with probability ``input`` (or the number ``p``), in ``input``'s shape and dtype
    (torch.bernoulli). Probabilities outside [0, 1] raise RuntimeError. Not differentiable.

    >>> import ggmlgrad as gg
    >>> gg.bernoulli(gg.tensor([0.0, 1.0])).tolist()
    [0.0, 1.0]
    """
    _check_tensor("bernoulli", input)
    if not input.dtype.is_float:
        raise RuntimeError(f"bernoulli: \"bernoulli_tensor_cpu_p_\" not implemented for '{input.dtype.name}' "
                           f"(give float probabilities)")
    u = noise("uniform", input.shape, input.device)
    if p is None:
        prob = _float(input).detach()
        _refuse_device("bernoulli", _outside(prob, 0.0, 1.0),
                       "bernoulli: Expected p_in >= 0 && p_in <= 1 to be true, but got false")
        hit = op.lt(u, prob)
    else:
        p = _probability("bernoulli", p)
        hit = op.compare_scalar(u, kind="lt", c=p)
    return op.cast(hit, dtype=input.dtype)


def _probability(opname: str, p) -> float:
    if isinstance(p, Tensor):
        p = p.item()
    if isinstance(p, (bool, np.bool_)) or not isinstance(p, (int, float, np.integer, np.floating)):
        raise TypeError(f"{opname}: p must be a number, got {type(p).__name__}")
    if not 0 <= p <= 1:
        raise RuntimeError(f"{opname} expects p to be in [0, 1], but got p={p}")
    return float(p)


def _std_ok(std: float) -> float:
    if isinstance(std, (bool, np.bool_)) or not isinstance(std, (int, float, np.integer, np.floating)):
        raise TypeError(f"normal: std must be a number or a Tensor, got {type(std).__name__}")
    if not std >= 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
    return float(std)


@public(function="normal")
def normal(mean, std=1.0, size=None, *, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """Normal draws ``mean + std * z``: ``mean``/``std`` tensors (broadcast together) or numbers (then
    ``size`` gives the shape), as torch.normal. A tensor ``mean``/``std`` that requires grad gets a zero
    gradient, as in torch (use ``distributions.Normal.rsample`` to differentiate through the draw).

    >>> import ggmlgrad as gg
    >>> gg.normal(gg.zeros(2, 3), 1.0).shape, gg.normal(0.0, 1.0, size=(4,)).shape
    ((2, 3), (4,))
    """
    tm, ts = isinstance(mean, Tensor), isinstance(std, Tensor)
    if not tm and not ts:
        if size is None:
            raise TypeError("normal(): with a number mean and std, give size")
        shape = _shape((size,) if isinstance(size, (int, np.integer)) else tuple(size), "normal")
        z = noise("normal", shape, device)
        v = op.add_scalar(op.scale(z, c=_std_ok(std)), c=float(mean))
        return _finish(v, _target(dtype, float32), requires_grad)
    if size is not None:
        raise RuntimeError("normal(): size is only allowed with a number mean and std")
    like = mean if tm else std
    for name, t in (("mean", mean), ("std", std)):
        if isinstance(t, Tensor) and not t.dtype.is_float:
            raise RuntimeError(f"normal expects floating-point {name}, got {t.dtype.name}")
    shape = tuple(np.broadcast_shapes(mean.shape if tm else (), std.shape if ts else ()))
    with no_grad():
        m = _float(mean).detach() if tm else float(mean)
        if ts:
            s = _float(std).detach()
            _refuse_device("normal", _outside(s, 0.0, math.inf), "normal expects all elements of std >= 0.0")
        else:
            s = _std_ok(std)
        z = noise("normal", shape, like.device)
        v = op.mul(z, s) if ts else op.scale(z, c=s)
        v = op.add(v, m) if tm else op.add_scalar(v, c=m)
        v = op.broadcast_to(v, shape=shape) if v.shape != shape else v
    grads = [op.scale(op.broadcast_to(_float(t), shape=shape), c=0.0) for t in (mean, std)
             if isinstance(t, Tensor) and t.requires_grad]
    if grads:   # torch's zero gradient to mean and std: the draw's value, their (zeroed) gradient
        zero = grads[0] if len(grads) == 1 else op.add(grads[0], grads[1])
        v = op.value_with_grad_of(v, zero)
    return v if like.dtype is float32 else op.cast(v, dtype=like.dtype)


@public(method="multinomial", function="multinomial")
def multinomial(input: Tensor, num_samples: int, replacement: bool = False) -> Tensor:
    """``num_samples`` category indices per row of the non-negative weights ``input`` (1-D or 2-D; they need
    not sum to 1), with or without replacement (torch.multinomial; int32). Gumbel-max on the device:
    with replacement one draw per sample; without, the largest keys of one draw in order (zero-weight
    categories come last, as torch's).

    >>> import ggmlgrad as gg
    >>> gg.multinomial(gg.tensor([0.0, 1.0, 0.0]), 2, replacement=True).tolist()
    [1, 1]
    """
    _check_tensor("multinomial", input)
    if isinstance(num_samples, (bool, np.bool_)) or not isinstance(num_samples, (int, np.integer)):
        raise TypeError(f"multinomial(): argument 'num_samples' must be int, not {type(num_samples).__name__}")
    if input.ndim not in (1, 2):
        raise RuntimeError("multinomial: prob_dist must be 1 or 2 dim")
    if not input.dtype.is_float:
        raise RuntimeError(f"multinomial only supports floating-point dtypes for input, got: {input.dtype.name}")
    k = input.shape[-1]
    if k == 0:
        raise RuntimeError("multinomial: number of categories cannot be zero")
    if num_samples <= 0:
        raise RuntimeError("cannot sample n_sample <= 0 samples")
    if not replacement and num_samples > k:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without replacement")
    with no_grad():
        p = _float(input).detach()
        rows = p if p.ndim == 2 else op.reshape(p, shape=(1, k))
        _refuse_device("multinomial", _outside(rows, 0.0, math.inf),
                       "probability tensor contains either `inf`, `nan` or element < 0")
        _refuse_device("multinomial", op.cast(op.compare_scalar(op.sum(rows, axis=1), kind="le", c=0.0),
                                              dtype=float32),
                       "invalid multinomial distribution (sum of probabilities <= 0)")
        # zero weights: a key below every real one (log of the smallest float32 is about -104) but finite,
        # so they are picked after every positive weight and never tie with the picks masked out (-inf)
        logp = op.where_scalar(op.compare_scalar(rows, kind="gt", c=0.0), op.log(rows), c=-1e30)
        n = rows.shape[0]
        if replacement:
            keys = op.add(noise("gumbel", (n, int(num_samples), k), input.device),
                          op.reshape(logp, shape=(n, 1, k)))
            out = op.argmax(keys, axis=2)
        else:
            keys = op.add(noise("gumbel", (n, k), input.device), logp)
            picks = []
            for _ in range(int(num_samples)):
                j = op.argmax(keys, axis=1)
                picks.append(op.reshape(j, shape=(n, 1)))
                keys = op.where_scalar(op.one_hot(j, num_classes=k), keys, c=-math.inf, tensor_if_true=False)
            out = picks[0] if len(picks) == 1 else op.concat(*picks, axis=1) if len(picks) <= 32 else \
                _cat_many(picks)
    return out if input.ndim == 2 else op.reshape(out, shape=(int(num_samples),))


def _cat_many(parts: list) -> Tensor:
    from .functional_shape import cat
    return cat(parts, dim=1)


# ---------------------------------------------------------------- in place
@public(method="uniform_")
def uniform_(input: Tensor, a: float = 0.0, b: float = 1.0, **kwargs) -> Tensor:
    """Fill with uniform draws from ``[a, b)`` (torch's ``from``/``to``, also accepted as keywords).

    >>> import ggmlgrad as gg
    >>> all(2 <= v < 3 for v in gg.zeros(5).uniform_(2, 3).tolist())
    True
    """
    a, b = kwargs.pop("from", a), kwargs.pop("to", b)
    if kwargs:
        raise TypeError(f"uniform_() got an unexpected keyword argument {next(iter(kwargs))!r}")
    if not input.dtype.is_float:
        raise RuntimeError(f"uniform_: \"check_uniform_bounds\" not implemented for '{input.dtype.name}'")
    if not a <= b:
        raise RuntimeError(f"uniform_ expects to return a [from, to) range, but found from={a} > to={b}")
    return input._write("uniform_", lambda: op.add_scalar(op.scale(noise("uniform", input.shape, input.device),
                                                                   c=float(b - a)), c=float(a)))


@public(method="normal_")
def normal_(input: Tensor, mean: float = 0.0, std: float = 1.0) -> Tensor:
    """Fill with normal draws ``mean + std * z``.

    >>> import ggmlgrad as gg
    >>> gg.zeros(3).normal_(5.0, 0.0).tolist()
    [5.0, 5.0, 5.0]
    """
    if not input.dtype.is_float:
        raise RuntimeError(f"normal_: \"normal_kernel_cpu\" not implemented for '{input.dtype.name}'")
    s = _std_ok(std)
    return input._write("normal_", lambda: op.add_scalar(op.scale(noise("normal", input.shape, input.device), c=s),
                                                         c=float(mean)))


@public(method="bernoulli_")
def bernoulli_(input: Tensor, p=0.5) -> Tensor:
    """Fill with 0/1 draws of probability ``p`` (a number, or a tensor broadcast to ``input``).

    >>> import ggmlgrad as gg
    >>> gg.zeros(3).bernoulli_(1.0).tolist()
    [1.0, 1.0, 1.0]
    """
    if isinstance(p, Tensor) and p.ndim:
        prob = op.broadcast_to(_float(p).detach(), shape=input.shape) if p.shape != input.shape else \
            _float(p).detach()
        return input._write("bernoulli_", lambda: bernoulli(prob))
    q = _probability("bernoulli_", p)
    return input._write("bernoulli_", lambda: op.cast(op.compare_scalar(noise("uniform", input.shape, input.device),
                                                                        kind="lt", c=q), dtype=float32))


@public(method="exponential_")
def exponential_(input: Tensor, lambd: float = 1.0) -> Tensor:
    """Fill with exponential draws of rate ``lambd`` (``-log(1 - u) / lambd``).

    >>> import ggmlgrad as gg
    >>> min(gg.zeros(100).exponential_(2.0).tolist()) >= 0
    True
    """
    if not input.dtype.is_float:
        raise RuntimeError(f"exponential_: not implemented for '{input.dtype.name}'")
    if not lambd > 0:
        raise RuntimeError(f"exponential_ expects lambda > 0.0, but found lambda={lambd}")
    return input._write("exponential_", lambda: op.scale(op.log(op.add_scalar(op.scale(
        noise("uniform", input.shape, input.device), c=-1.0), c=1.0)), c=-1.0 / float(lambd)))
