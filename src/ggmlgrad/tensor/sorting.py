"""sort, argsort, topk, median and kthvalue under torch's names and arguments.

All of them sort with the ``argsort`` op (``ops/sort.py``: ggml's argsort made stable and NaN-safe,
NaN larger than everything, as torch) and take values with ``gather``, so gradients flow to the
elements picked (torch's rule). ``topk`` sorts the whole row: ggml's ``top_k`` kernel is a partial
sort whose order, ties and NaN handling are unspecified, so it is not used.
"""
from __future__ import annotations

from ..engine import float32, int32
from ..ops import op
from ..ops.decl import public
from ..ops.scan import check_dim
from .tensor import MaxMin, Tensor

__all__: list[str] = []


def _tensor(name: str, x) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{name}: expected a Tensor, got {type(x).__name__}")
    return x


def _int(name: str, what: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{name}: {what} must be an int, got {v!r}")
    return v


def _take(x: Tensor, dim: int, idx: Tensor) -> Tensor:
    """x's elements at ``idx`` along ``dim`` (gradients flow back to them); a 0-d x is itself."""
    if x.ndim == 0:
        return op.clone(x)
    return x.gather(dim, idx)


@public(method="argsort", function="argsort")
def argsort(input: Tensor, dim: int = -1, descending: bool = False, *, stable: bool = False) -> Tensor:
    """Indices (int32) that sort ``input`` along ``dim``. Ties keep their order (rows up to 2896
    elements: always stable); NaN sorts as the largest value, as torch.

    >>> import ggmlgrad as gg
    >>> gg.argsort(gg.tensor([3.0, 1.0, 2.0])).tolist()
    [1, 2, 0]
    """
    return op.argsort(_tensor("argsort", input), dim=dim, descending=descending, stable=stable)


@public(method="sort", function="sort")
def sort(input: Tensor, dim: int = -1, descending: bool = False, *, stable: bool = False) -> MaxMin:
    """``(values, indices)`` sorted along ``dim`` (torch.sort; NaN last ascending, first descending).

    >>> import ggmlgrad as gg
    >>> gg.sort(gg.tensor([3.0, 1.0, 2.0]), descending=True).values.tolist()
    [3.0, 2.0, 1.0]
    """
    idx = argsort(_tensor("sort", input), dim, descending, stable=stable)
    return MaxMin(_take(input, dim, idx), idx)


@public(method="topk", function="topk")
def topk(input: Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> MaxMin:  # noqa: A002
    """The ``k`` largest (``largest=False``: smallest) elements along ``dim`` as ``(values, indices)``,
    in sorted order (also for ``sorted=False``, which lets torch return any order). NaN counts as the
    largest value; among equal values the first ones are taken.

    >>> import ggmlgrad as gg
    >>> gg.topk(gg.tensor([1.0, 5.0, 3.0]), 2).indices.tolist()
    [1, 2]
    """
    x = _tensor("topk", input)
    _int("topk", "k", k)
    if not isinstance(sorted, bool):
        raise TypeError(f"topk: sorted must be a bool, got {sorted!r}")
    d = check_dim("topk", dim, x.ndim)
    n = x.shape[d] if x.ndim else 1
    if not 0 <= k <= n:
        raise ValueError(f"topk: k={k} is out of range for dimension {dim} of size {n} (shape {tuple(x.shape)})")
    idx = argsort(x, d if x.ndim else dim, descending=largest)
    if x.ndim:
        idx = idx.narrow(d, 0, k)
    return MaxMin(_take(x, d, idx), idx)


def _picked(name: str, x: Tensor, dim, keepdim: bool, position) -> MaxMin:
    """(values, indices) at sorted ``position`` along ``dim`` (an int or an int32 tensor with the
    dimension kept), dropping ``dim`` unless keepdim."""
    d = check_dim(name, dim, x.ndim)
    order = argsort(x, d, stable=True)
    if x.ndim == 0:
        return MaxMin(op.clone(x), order)
    if isinstance(position, int):
        idx = order.narrow(d, position, 1)
    else:
        idx = order.gather(d, position)
    values = x.gather(d, idx)
    if not keepdim:
        values, idx = values.squeeze(d), idx.squeeze(d)
    return MaxMin(values, idx)


@public(method="kthvalue", function="kthvalue")
def kthvalue(input: Tensor, k: int, dim: int = -1, keepdim: bool = False) -> MaxMin:
    """The k-th smallest element along ``dim`` (k from 1) as ``(values, indices)`` (NaN largest).

    >>> import ggmlgrad as gg
    >>> gg.kthvalue(gg.tensor([3.0, 1.0, 2.0]), 2).values.item()
    2.0
    """
    x = _tensor("kthvalue", input)
    _int("kthvalue", "k", k)
    n = x.shape[check_dim("kthvalue", dim, x.ndim)] if x.ndim else 1
    if not 1 <= k <= n:
        raise ValueError(f"kthvalue: k={k} is out of range for dimension {dim} of size {n}")
    return _picked("kthvalue", x, dim, keepdim, k - 1)


@public(method="median", function="median")
def median(input: Tensor, dim=None, keepdim: bool = False):
    """torch.median: the lower of the two middle values (no averaging). Without ``dim`` a 0-d
    tensor over all elements; with ``dim`` ``(values, indices)``. A NaN makes the median NaN (its
    index that of the first NaN), as torch; ``nanmedian`` is not provided.

    >>> import ggmlgrad as gg
    >>> gg.median(gg.tensor([4.0, 1.0, 3.0, 2.0])).item()
    2.0
    """
    x = _tensor("median", input)
    if dim is None:
        if x.numel() == 0:
            raise ValueError("median: cannot take the median of an empty tensor")
        return median(x.reshape(-1), 0).values.reshape(())
    d = check_dim("median", dim, x.ndim)
    n = x.shape[d] if x.ndim else 1
    if n == 0:
        raise ValueError(f"median: dimension {dim} of {tuple(x.shape)} is empty")
    if x.ndim == 0 or x.dtype is not float32:
        return _picked("median", x, d, keepdim, (n - 1) // 2)
    # The sorted position: the middle, or the first NaN (NaN sorts last: n - count).
    nans = x.isnan().float().sum(d, keepdim=True)
    middle = float((n - 1) // 2)
    position = op.where(nans > 0, op.add_scalar(op.neg(nans), c=float(n)), op.fill_like(nans, c=middle))
    return _picked("median", x, d, keepdim, op.cast(position, dtype=int32))
