"""Boolean-mask and index-array indexing: ``x[mask]``, ``x[mask] = v``, ``x[:, mask]``, ``x[[0, 2]] = v``,
``masked_select``, ``nonzero``/``argwhere``.

A mask's result shape depends on its values, so a mask tensor is read on the host first: in graph
mode that read is a sync point (like ``.item()``); inside ``gg.capture`` it is a ``CaptureError``
(a replay cannot change its shapes). From the host values, NumPy's indexing (the same rules as
torch's for these keys) says which elements of ``x`` the key selects, as flat positions; the
device then gathers them (``index_select`` on the flattened tensor, whose backward scatter-adds
the gradient back, as torch) or writes into them (``where`` with the value gathered into place).

>>> import ggmlgrad as gg
>>> x = gg.arange(6.0).reshape(2, 3)
>>> x[x > 2].tolist()
[3.0, 4.0, 5.0]
>>> x[x > 3] = 0.0
>>> x.tolist()
[[0.0, 1.0, 2.0], [3.0, 0.0, 0.0]]
"""
from __future__ import annotations

import numpy as np

from ..engine import CaptureError, active_observer, download, float32, int32, user_site
from ..engine.dtypes import bool_
from ..ops import op
from ..ops.shapes import check_ndim
from .adv_index import host_positions
from .functional_shape import IndexRangeError
from .grad_mode import is_grad_enabled
from .tensor import Tensor, tensor

_DATA_DEPENDENT = ("its result shape depends on the values (data-dependent shape), which a replay cannot "
                   "change; use gg.where(mask, x, 0) or x.masked_fill(~mask, 0) (fixed shapes), or index "
                   "outside the captured function")


# ---------------------------------------------------------------- keys
def is_mask(k) -> bool:
    """Whether the index item ``k`` is a boolean mask (a bool tensor, bool array or list of bools)."""
    if isinstance(k, Tensor):
        return k.dtype is bool_
    if isinstance(k, np.ndarray):
        return k.dtype == np.bool_
    return isinstance(k, list) and np.asarray(k).dtype == np.bool_


def has_mask(key) -> bool:
    """Whether ``x[key]`` holds a boolean mask (cheap: a type test per key item)."""
    if isinstance(key, tuple):
        for k in key:
            if isinstance(k, (Tensor, np.ndarray, list)) and is_mask(k):
                return True
        return False
    return isinstance(key, (Tensor, np.ndarray, list)) and is_mask(key)


def _refuse_in_capture(site: str) -> None:
    if active_observer() is not None:
        raise CaptureError(f"capture: {site} at {user_site()} while recording: {_DATA_DEPENDENT}")


def host_values(k, site: str) -> np.ndarray:
    """The host value of an index item: a tensor is read (a sync point; a CaptureError in a capture)."""
    if isinstance(k, Tensor):
        _refuse_in_capture(site)
        return download(k, site)
    return np.asarray(k)


def _host_key(x: Tensor, key, check_item) -> tuple:
    """``key`` with every tensor/list/array item as a host array (masks bool, indices integers)."""
    key = key if isinstance(key, tuple) else (key,)
    out = []
    for k in key:
        if isinstance(k, slice) and k.step is not None and k.step <= 0:
            raise ValueError(f"indexing: negative or zero slice steps are not supported (got step {k.step} on "
                             f"tensor of shape {x.shape})")
        if isinstance(k, (Tensor, np.ndarray, list)):
            if not is_mask(k):
                check_item(k)
            a = host_values(k, "boolean mask indexing" if is_mask(k) else "indexing with an index tensor")
            if a.dtype != np.bool_ and a.size == 0:
                a = a.astype(np.int64)
            out.append(a)
        else:
            check_item(k)
            out.append(k)
    return tuple(out)


def positions(x: Tensor, key, check_item) -> np.ndarray:
    """The flat positions in ``x`` of the elements ``x[key]`` selects, in ``x[key]``'s shape."""
    hkey = _host_key(x, key, check_item)
    flat = np.arange(x.numel_, dtype=np.int64).reshape(x.shape)
    try:
        return np.asarray(host_positions(flat, hkey))
    except IndexError as e:  # a mask of the wrong shape, an index out of range, too many indices
        raise IndexRangeError(f"indexing: {e} (tensor of shape {x.shape})") from None


# ---------------------------------------------------------------- read: x[mask]
def _gather(x: Tensor, pos: np.ndarray) -> Tensor:
    """The elements of ``x`` at the flat positions ``pos``, in ``pos``'s shape (differentiable)."""
    check_ndim("indexing", pos.shape)
    x = _history_alias(x)
    flat = x if x.ndim == 1 else op.reshape(x, shape=(x.numel_,))
    idx = tensor(pos.reshape(-1).astype(np.int32), dtype=int32, device=x.device)
    out = op.index_select(flat, idx, axis=0)
    return out if out.shape == pos.shape else op.reshape(out, shape=pos.shape)


def _history_alias(x: Tensor) -> Tensor:
    """``x`` for a gather whose backward needs only ``x``'s shape: a non-leaf ``x`` as an alias of its
    memory with its autograd history but a version counter of its own, so a later in-place write to
    ``x`` (``x[mask] += v``) does not invalidate the gather's gradient (torch's index backward saves
    no values either). Leaves, tensors without history and tensors that retain their grad (it
    accumulates on the tensor itself) are used as they are."""
    if x.grad_fn is None or x._retains_grad or not is_grad_enabled():
        return x
    from .bool_ops import as_float
    a = as_float(x)      # a float32-tagged alias of the same memory (queued or computed)
    a.dtype = x.dtype
    a.requires_grad, a.grad_fn = True, x.grad_fn
    return a


def getitem(x: Tensor, key, check_item) -> Tensor:
    """``x[key]`` for a key holding a boolean mask (a copy, as in torch); gradients scatter back."""
    return _gather(x, positions(x, key, check_item))


# ---------------------------------------------------------------- write: x[mask] = v
def setitem(x: Tensor, key, value, check_item) -> None:
    """``x[key] = value`` for a key holding a mask or an index tensor/list: an in-place write with
    torch's rules (``value`` a number, or broadcast to ``x[key]``'s shape; differentiable)."""
    pos = positions(x, key, check_item)
    if isinstance(value, Tensor) and value.device is not x.device:
        value = value.to(device=x.device)
    scalar = not isinstance(value, Tensor) and np.ndim(value) == 0
    if not scalar:
        v = value if isinstance(value, Tensor) else tensor(np.asarray(value), device=x.device)
        try:
            ok = np.broadcast_shapes(v.shape, pos.shape) == pos.shape
        except ValueError:
            ok = False
        if not ok:
            raise RuntimeError(f"indexing: shape mismatch: value tensor of shape {list(v.shape)} cannot be "
                               f"broadcast to indexing result of shape {list(pos.shape)}")
    selected = np.zeros(x.numel_, dtype=bool)
    selected[pos.reshape(-1)] = True
    mask = tensor(selected.reshape(x.shape), device=x.device)
    if scalar:
        value = value.item() if isinstance(value, np.generic) else value
        x._inplace("__setitem__", None, lambda old, _: _fill(old, mask, value), cast_ok=True)
        return
    if pos.size == 0:
        return  # nothing selected: nothing to write (torch's index_put_ is a no-op too)
    # source[i] = the value element written at flat position i (any row where nothing is written)
    source = np.zeros(x.numel_, dtype=np.int32)
    source[pos.reshape(-1)] = np.arange(pos.size, dtype=np.int32)
    placed = _placed(v, pos.shape, source, x)
    x._inplace("__setitem__", placed, lambda old, p: _blend(old, mask, p), cast_ok=True)


def _placed(v: Tensor, shape: tuple, source: np.ndarray, x: Tensor) -> Tensor:
    """``v`` broadcast to ``shape`` and gathered to ``x``'s shape by ``source`` (differentiable)."""
    vb = v if v.shape == shape else op.broadcast_to(v if v.dtype is float32 or v.dtype is int32 else
                                                     op.cast(v, dtype=float32), shape=shape)
    flat = vb if vb.ndim == 1 else op.reshape(vb, shape=(vb.numel_,))
    idx = tensor(source, dtype=int32, device=x.device)
    out = op.index_select(flat, idx, axis=0)
    return op.reshape(out, shape=x.shape) if x.shape != out.shape else out


def _fill(old: Tensor, mask: Tensor, value) -> Tensor:
    from . import bool_ops
    if isinstance(value, (bool, np.bool_)) and not old.dtype.is_bool:
        value = int(value)
    if old.dtype.is_float and old.dtype is not float32:  # float16/bfloat16 storage: fill in float32
        return op.cast(bool_ops.masked_fill(op.cast(old, dtype=float32), mask, value), dtype=old.dtype)
    return bool_ops.masked_fill(old, mask, value)


def _blend(old: Tensor, mask: Tensor, placed: Tensor) -> Tensor:
    """``placed`` where ``mask``, else ``old``, in ``old``'s dtype (torch casts the value)."""
    from . import bool_ops
    from .tensor import where
    if old.dtype.is_bool:
        return where(mask, bool_ops.to_bool(placed), old)
    if placed.dtype is not old.dtype:
        placed = op.cast(placed, dtype=old.dtype)
    if old.dtype is float32:
        return where(mask, placed, old)
    return op.cast(where(mask, op.cast(placed, dtype=float32), op.cast(old, dtype=float32)), dtype=old.dtype)


# ---------------------------------------------------------------- functions
def masked_select(input: Tensor, mask: Tensor) -> Tensor:
    """torch.masked_select: the 1-D tensor of ``input``'s elements where the bool ``mask`` (broadcast
    with ``input``) is True. Reads the mask (a sync point in graph mode; a CaptureError in a capture).

    >>> import ggmlgrad as gg
    >>> x = gg.tensor([[1.0, -2.0], [-3.0, 4.0]])
    >>> gg.masked_select(x, x > 0).tolist()
    [1.0, 4.0]
    """
    if not isinstance(input, Tensor):
        raise TypeError(f"masked_select: expected a Tensor, got {type(input).__name__}")
    if not isinstance(mask, Tensor) or mask.dtype is not bool_:
        got = mask.dtype.name if isinstance(mask, Tensor) else type(mask).__name__
        raise RuntimeError(f"masked_select: expected BoolTensor for mask, got {got}")
    try:
        shape = np.broadcast_shapes(input.shape, mask.shape)
    except ValueError:
        raise RuntimeError(f"masked_select: the shape of the mask {list(mask.shape)} is not broadcastable to "
                           f"the input's shape {list(input.shape)}") from None
    m = np.broadcast_to(host_values(mask, "masked_select"), shape)
    x = input if input.shape == shape else op.broadcast_to(input, shape=shape)
    return _gather(x, np.arange(x.numel_, dtype=np.int64).reshape(shape)[m])


def nonzero(input: Tensor, *, as_tuple: bool = False):
    """torch.nonzero: the indices of the non-zero elements, an int32 tensor of shape (n, ndim)
    (torch: int64; the dtype rule), or with ``as_tuple=True`` one 1-D tensor per dimension.
    Reads ``input`` (a sync point in graph mode; a CaptureError in a capture).

    >>> import ggmlgrad as gg
    >>> gg.nonzero(gg.tensor([[0.0, 1.0], [2.0, 0.0]])).tolist()
    [[0, 1], [1, 0]]
    """
    if not isinstance(input, Tensor):
        raise TypeError(f"nonzero: expected a Tensor, got {type(input).__name__}")
    a = host_values(input, "nonzero")
    if as_tuple:
        hits = np.nonzero(a.reshape(1) if a.ndim == 0 else a)   # torch: a 0-d input counts as 1-d
        return tuple(tensor(h.astype(np.int32), dtype=int32, device=input.device) for h in hits)
    return tensor(np.argwhere(a).astype(np.int32), dtype=int32, device=input.device)


def argwhere(input: Tensor) -> Tensor:
    """torch.argwhere: ``nonzero(input)`` (an int32 (n, ndim) tensor of the non-zero elements' indices).

    >>> import ggmlgrad as gg
    >>> gg.argwhere(gg.tensor([0, 3, 0, 5])).tolist()
    [[1], [3]]
    """
    if not isinstance(input, Tensor):
        raise TypeError(f"argwhere: expected a Tensor, got {type(input).__name__}")
    return nonzero(input)
