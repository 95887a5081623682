"""Parameters and gradients as ONE packed float32 array: what travels between Ray processes.

One array per model (not one object per parameter) means one ``ray.put`` and one
transfer per broadcast, whatever the number of layers.

>>> import numpy as np, ggmlgrad as gg
>>> from ggmlgrad.distributed import pack_parameters, unpack_parameters
>>> a, b = gg.nn.Linear(3, 2), gg.nn.Linear(3, 2)
>>> flat = pack_parameters(a.parameters())
>>> flat.shape, flat.dtype
((8,), dtype('float32'))
>>> unpack_parameters(flat, b.parameters())
>>> bool(np.array_equal(pack_parameters(b.parameters()), flat))
True
"""
from __future__ import annotations

from typing import Iterable

import numpy as np

from ..engine import float32, graph_mode
from ..tensor import Tensor, no_grad, tensor

__all__ = ["pack_parameters", "unpack_parameters", "pack_gradients", "unpack_gradients"]


def _float32_params(params: Iterable[Tensor], who: str) -> list[Tensor]:
    ps = list(params)
    for p in ps:
        if not isinstance(p, Tensor):
            raise TypeError(f"{who}: expected Tensors, got {type(p).__name__}")
        if p.dtype is not float32:
            raise TypeError(f"{who}: only float32 parameters can be packed, got {p.dtype.name} of shape {p.shape}")
    return ps


def _checked_flat(flat, ps: list[Tensor], who: str) -> np.ndarray:
    arr = np.asarray(flat)
    total = sum(p.numel() for p in ps)
    if arr.ndim != 1 or arr.size != total:
        raise ValueError(f"{who}: expected a 1-d array of {total} values for {len(ps)} tensors, got shape {arr.shape}")
    if arr.dtype != np.float32:
        raise TypeError(f"{who}: expected a float32 array, got {arr.dtype}")
    return arr


def _slices(ps: list[Tensor]):
    start = 0
    for p in ps:
        yield p, start, start + p.numel()
        start += p.numel()


def pack_parameters(params: Iterable[Tensor]) -> np.ndarray:
    """The values of ``params`` concatenated (row-major) into one new float32 array.

    >>> import ggmlgrad as gg
    >>> pack_parameters([gg.tensor([[1.0, 2.0]]), gg.tensor([3.0])]).tolist()
    [1.0, 2.0, 3.0]
    """
    ps = _float32_params(params, "pack_parameters")
    if not ps:
        return np.zeros(0, np.float32)
    return np.concatenate([p.detach().numpy().reshape(-1) for p in ps])


def unpack_parameters(flat: np.ndarray, params: Iterable[Tensor]) -> None:
    """Write ``flat`` (from :func:`pack_parameters`) into ``params`` in place, in one graph compute.

    In place, so captured functions and optimizers that hold the parameters see the new values.

    >>> import numpy as np, ggmlgrad as gg
    >>> w = gg.zeros(2, requires_grad=True)
    >>> unpack_parameters(np.array([5.0, 6.0], np.float32), [w]); w.tolist()
    [5.0, 6.0]
    """
    ps = _float32_params(params, "unpack_parameters")
    arr = _checked_flat(flat, ps, "unpack_parameters")
    with no_grad(), graph_mode(True):
        for p, a, b in _slices(ps):
            p.copy_(arr[a:b].reshape(p.shape))
        if ps:
            ps[0].numpy(force=True)   # a sync point: every copy computes now, as one graph


def pack_gradients(params: Iterable[Tensor]) -> np.ndarray:
    """The ``.grad`` of ``params`` as one float32 array (zeros where ``.grad`` is None).

    >>> import ggmlgrad as gg
    >>> w = gg.tensor([1.0, 2.0], requires_grad=True)
    >>> (w * w).sum().backward()
    >>> pack_gradients([w]).tolist()
    [2.0, 4.0]
    """
    ps = _float32_params(params, "pack_gradients")
    parts = [np.zeros(p.numel(), np.float32) if p.grad is None else p.grad.numpy().reshape(-1) for p in ps]
    return np.concatenate(parts) if parts else np.zeros(0, np.float32)


def unpack_gradients(flat: np.ndarray, params: Iterable[Tensor]) -> None:
    """Set each parameter's ``.grad`` to its slice of ``flat`` (new tensors, as backward makes).

    >>> import numpy as np, ggmlgrad as gg
    >>> w = gg.zeros(2, requires_grad=True)
    >>> unpack_gradients(np.array([1.0, -1.0], np.float32), [w]); w.grad.tolist()
    [1.0, -1.0]
    """
    ps = _float32_params(params, "unpack_gradients")
    arr = _checked_flat(flat, ps, "unpack_gradients")
    for p, a, b in _slices(ps):
        p.grad = tensor(arr[a:b].reshape(p.shape))
