"""Products, norms and distances, and the boolean comparisons of whole tensors: cumprod, prod,
norm (and the ``linalg`` norms, ``ggmlgrad/linalg.py``), dist, cdist, allclose, equal.

Products are built from multiplications (a log-depth scan for cumprod, a pairwise tree for prod),
so autograd gives torch's gradients also where an element is 0 (no division by the input). The
2-norm's gradient at a zero vector is 0, as torch's (the square root is taken of 1 there).
"""
from __future__ import annotations

import math
import numbers

from ..engine import float32, int32
from ..ops import op
from ..ops.decl import public
from ..ops.scan import check_dim
from .functional_shape import cat
from .tensor import Tensor, where

__all__: list[str] = []


def _tensor(name: str, x) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{name}: expected a Tensor, got {type(x).__name__}")
    return x


def _integral(x: Tensor) -> Tensor:
    """torch multiplies bool tensors as int64 (here int32): products of int32 stay int32."""
    return op.cast(x, dtype=int32) if x.dtype.is_bool else x


def _ones_like(x: Tensor) -> Tensor:
    ones = op.fill_like(x, c=1.0)
    return ones if x.dtype is float32 else op.cast(ones, dtype=x.dtype)


@public(method="cumprod", function="cumprod")
def cumprod(input: Tensor, dim: int) -> Tensor:
    """Cumulative products along ``dim`` (a log-depth scan of multiplications: the gradient is
    torch's, zeros included). int32 and bool give int32.

    >>> import ggmlgrad as gg
    >>> gg.cumprod(gg.tensor([1.0, 2.0, 3.0]), dim=0).tolist()
    [1.0, 2.0, 6.0]
    """
    x = _integral(_tensor("cumprod", input))
    d = check_dim("cumprod", dim, x.ndim)
    if x.ndim == 0 or x.shape[d] <= 1:
        return op.clone(x)
    n, k, y = x.shape[d], 1, x
    while k < n:        # y[i] *= y[i - k]: after the step, y[i] is the product of the 2k elements ending at i
        y = y * cat([_ones_like(y.narrow(d, 0, k)), y.narrow(d, 0, n - k)], dim=d)
        k *= 2
    return y


@public(method="prod", function="prod")
def prod(input: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    """The product of all elements, or along ``dim`` (a pairwise tree of multiplications: gradients
    are torch's, zeros included; an empty product is 1). int32 and bool give int32.

    >>> import ggmlgrad as gg
    >>> gg.prod(gg.tensor([[1.0, 2.0], [3.0, 4.0]]), dim=1).tolist()
    [2.0, 12.0]
    """
    x = _integral(_tensor("prod", input))
    if not isinstance(keepdim, bool):
        raise TypeError(f"prod: keepdim must be a bool, got {keepdim!r}")
    if dim is None:
        return prod(x.reshape(-1), 0).reshape(())
    d = check_dim("prod", dim, x.ndim)
    if x.ndim == 0:
        return op.clone(x)
    n = x.shape[d]
    if n == 0:      # the empty product: ones in the reduced shape
        ones = op.fill_like(x.float().sum(d, keepdim=keepdim), c=1.0)
        return ones if x.dtype is float32 else op.cast(ones, dtype=x.dtype)
    y = x
    while n > 1:
        if n % 2:
            y = cat([y, _ones_like(y.narrow(d, 0, 1))], dim=d)
            n += 1
        y = y.narrow(d, 0, n // 2) * y.narrow(d, n // 2, n // 2)
        n //= 2
    return y if keepdim else y.squeeze(d)


# ---------------------------------------------------------------------- norms
def _float(name: str, x: Tensor) -> Tensor:
    if x.dtype is not float32:
        raise TypeError(f"{name}: expected a floating point tensor, got {x.dtype.name} (as torch); cast with .float()")
    return x


def _root(s: Tensor, p: float) -> Tensor:
    """s ** (1/p), with a 0 (and a zero gradient, torch's) where s == 0."""
    zero = s == 0
    safe = where(zero, 1.0, s)
    r = safe.sqrt() if p == 2 else safe ** (1.0 / p)
    return where(zero, 0.0, r)


def _ord(name: str, ord) -> float:
    if isinstance(ord, bool) or not isinstance(ord, numbers.Real):
        raise TypeError(f"{name}: ord must be a number, got {ord!r}")
    return float(ord)


def vector_norm(x: Tensor, ord=2, dim=None, keepdim: bool = False) -> Tensor:
    """torch.linalg.vector_norm: (sum |x|**ord) ** (1/ord) over ``dim`` (all when None); ord inf /
    -inf: the largest / smallest |x|; ord 0: the count of non-zero elements.

    >>> import ggmlgrad as gg
    >>> gg.linalg.vector_norm(gg.tensor([3.0, 4.0])).item()
    5.0
    """
    x = _float("vector_norm", _tensor("vector_norm", x))
    p = _ord("vector_norm", ord)
    dim = tuple(dim) if isinstance(dim, list) else dim
    a = x.abs()
    if p == math.inf:
        return a.amax(dim, keepdim)
    if p == -math.inf:
        return a.amin(dim, keepdim)
    if p == 0:
        return (x != 0).float().sum(dim, keepdim=keepdim)
    if p == 1:
        return a.sum(dim, keepdim=keepdim)
    s = (x * x if p == 2 else _safe_power(a, p)).sum(dim, keepdim=keepdim)
    return _root(s, p)


def _safe_power(a: Tensor, p: float) -> Tensor:
    """|x| ** p with torch's zero subgradient at x == 0 (a**p's derivative is inf there for p < 1)."""
    zero = a == 0
    return where(zero, 0.0 if p > 0 else math.inf, where(zero, 1.0, a) ** p)


def _matrix_norm(x: Tensor, ord, dim: tuple, keepdim: bool) -> Tensor:
    """The matrix norms over two dims: 'fro', and the max/min absolute row or column sums (inf, 1)."""
    if ord == "fro":
        return vector_norm(x, 2, dim, keepdim)
    if ord in (2, -2, "nuc"):
        raise NotImplementedError(f"linalg.norm: ord={ord!r} needs singular values, which ggmlgrad does not compute")
    if isinstance(ord, str) or _ord("linalg.norm", ord) not in (1.0, -1.0, math.inf, -math.inf):
        raise ValueError(f"linalg.norm: ord must be 'fro', inf, -inf, 1 or -1 for a matrix norm, got {ord!r}")
    d0, d1 = (check_dim("linalg.norm", d, x.ndim) for d in dim)
    if d0 == d1:
        raise ValueError(f"linalg.norm: dims must differ, got {dim}")
    summed, over = (d1, d0) if abs(ord) == math.inf else (d0, d1)
    s = x.abs().sum(summed, keepdim=True)
    r = s.amax(over, keepdim=True) if ord > 0 else s.amin(over, keepdim=True)
    return r if keepdim else r.squeeze(max(d0, d1)).squeeze(min(d0, d1))


def linalg_norm(A: Tensor, ord=None, dim=None, keepdim: bool = False) -> Tensor:
    """torch.linalg.norm: a vector norm (1-D input, an int ``dim``, or ``ord`` None) or a matrix
    norm (2-D input or a 2-tuple ``dim``: 'fro', inf, -inf, 1, -1; 2, -2 and 'nuc' raise).

    >>> import ggmlgrad as gg
    >>> gg.linalg.norm(gg.tensor([[1.0, -2.0], [3.0, 4.0]]), ord=float("inf")).item()
    7.0
    """
    x = _float("linalg.norm", _tensor("linalg.norm", A))
    if isinstance(dim, int) and not isinstance(dim, bool):
        return vector_norm(x, 2 if ord is None else ord, dim, keepdim)
    if dim is None and ord is None:
        return vector_norm(x, 2, None, keepdim)
    if dim is None:
        if x.ndim == 1:
            return vector_norm(x, ord, None, keepdim)
        if x.ndim != 2:
            raise ValueError(f"linalg.norm: with ord and no dim the input must be 1-D or 2-D, got {tuple(x.shape)}")
        dim = (0, 1)
    dim = tuple(dim)
    if len(dim) != 2:
        raise ValueError(f"linalg.norm: dim must be an int or a pair of ints, got {dim}")
    return vector_norm(x, 2, dim, keepdim) if ord is None else _matrix_norm(x, ord, dim, keepdim)


@public(method="norm", function="norm")
def norm(input: Tensor, p="fro", dim=None, keepdim: bool = False) -> Tensor:
    """torch.norm: ``p`` 'fro' (the 2-norm of all elements, or over ``dim``) or a number (a vector
    norm over ``dim``, as linalg.vector_norm); 'nuc' raises.

    >>> import ggmlgrad as gg
    >>> gg.norm(gg.tensor([3.0, 4.0])).item()
    5.0
    """
    x = _tensor("norm", input)
    if p == "fro":
        p = 2
    elif isinstance(p, str):
        raise NotImplementedError(f"norm: p={p!r} is not supported (use 'fro' or a number)")
    return vector_norm(x, p, dim, keepdim)


@public(method="dist", function="dist")
def dist(input: Tensor, other: Tensor, p=2) -> Tensor:
    """The p-norm of ``input - other`` (broadcasting), a 0-d tensor.

    >>> import ggmlgrad as gg
    >>> gg.dist(gg.tensor([1.0, 1.0]), gg.tensor([4.0, 5.0])).item()
    5.0
    """
    _tensor("dist", input), _tensor("dist", other)
    _float("dist", input), _float("dist", other)
    return vector_norm(input - other, p)


@public(function="cdist")
def cdist(x1: Tensor, x2: Tensor, p: float = 2.0, compute_mode=None) -> Tensor:
    """Pairwise p-norm distances between the rows of x1 (..., P, M) and x2 (..., R, M): (..., P, R).
    Computed from the (P, R, M) differences (exact; ``compute_mode`` is accepted for torch's
    signature and has no effect). The gradient at a zero distance is 0, as torch.

    >>> import ggmlgrad as gg
    >>> gg.cdist(gg.tensor([[0.0, 0.0]]), gg.tensor([[3.0, 4.0], [0.0, 1.0]])).tolist()
    [[5.0, 1.0]]
    """
    for t in (x1, x2):
        _float("cdist", _tensor("cdist", t))
        if t.ndim < 2:
            raise ValueError(f"cdist: inputs must be at least 2-D, got {tuple(t.shape)}")
    if x1.shape[-1] != x2.shape[-1]:
        raise ValueError(f"cdist: x1 {tuple(x1.shape)} and x2 {tuple(x2.shape)} must have the same number of columns")
    if _ord("cdist", p) < 0:
        raise ValueError(f"cdist: p must be non-negative, got {p}")
    if max(x1.ndim, x2.ndim) > 3:
        raise ValueError(f"cdist: at most one batch dimension is supported (4-D intermediates), "
                         f"got {tuple(x1.shape)} and {tuple(x2.shape)}")
    return vector_norm(x1.unsqueeze(-2) - x2.unsqueeze(-3), p, -1)


# ---------------------------------------------------------------------- whole-tensor comparisons
def _close(a: Tensor, b: Tensor, rtol: float, atol: float, equal_nan: bool) -> Tensor:
    close = (a == b) | ((a - b).abs() <= (b.abs() * rtol + atol))
    return close | (a.isnan() & b.isnan()) if equal_nan else close


@public(function="allclose", method="allclose")
def allclose(input: Tensor, other: Tensor, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> bool:
    """True when |input - other| <= atol + rtol * |other| everywhere (equal infinities are close,
    NaN only with ``equal_nan``); a Python bool, read from the device (torch's result type).

    >>> import ggmlgrad as gg
    >>> gg.allclose(gg.tensor([1.0, 2.0]), gg.tensor([1.0, 2.0 + 1e-6]))
    True
    """
    a, b = _tensor("allclose", input), _tensor("allclose", other)
    a, b = (t if t.dtype is float32 else t.float() for t in (a, b))
    return bool(_close(a, b, float(rtol), float(atol), bool(equal_nan)).all().item())


@public(function="equal", method="equal")
def equal(input: Tensor, other: Tensor) -> bool:
    """True when both have the same shape and the same values (NaN is never equal), a Python bool.

    >>> import ggmlgrad as gg
    >>> gg.equal(gg.tensor([1.0, 2.0]), gg.tensor([1.0, 2.0]))
    True
    """
    a, b = _tensor("equal", input), _tensor("equal", other)
    if tuple(a.shape) != tuple(b.shape):
        return False
    return bool((a == b).all().item()) if a.numel() else True
