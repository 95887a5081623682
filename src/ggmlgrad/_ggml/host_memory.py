"""NumPy arrays over host memory that keep the memory's owner alive (``Tensor.numpy()``'s views).

``np.asarray`` of an object with ``__array_interface__`` parses a dict per call (~0.6 µs); a ctypes
byte array placed at the address, carrying the owner, is a buffer NumPy takes as it is (~0.2 µs).
"""
from __future__ import annotations

import ctypes

import numpy as np

_BYTE_ARRAYS: dict[int, type] = {}  # nbytes -> ctypes.c_uint8 * nbytes (a program's tensors have few sizes)


def owning_array(addr: int, nbytes: int, shape: tuple, dtype: np.dtype, owner) -> np.ndarray:
    """A writable C-contiguous ``dtype`` array of ``shape`` over the ``nbytes`` at ``addr``; its base
    holds ``owner`` (what keeps that memory alive) for as long as the array or a view of it lives.

    >>> import numpy as np
    >>> src = np.arange(6, dtype=np.float32)
    >>> a = owning_array(src.ctypes.data, src.nbytes, (2, 3), np.dtype(np.float32), src)
    >>> a[1, 2] = -1.0
    >>> src[5], a.base._owner is src
    (np.float32(-1.0), True)
    """
    t = _BYTE_ARRAYS.get(nbytes)
    if t is None:
        t = ctypes.c_uint8 * nbytes
        if len(_BYTE_ARRAYS) < 4096:
            _BYTE_ARRAYS[nbytes] = t
    buf = t.from_address(addr)
    buf._owner = owner
    return np.ndarray(shape, dtype, buf)


#: ``SCALAR_AT[typestr](addr).value``: the one element at ``addr`` as a Python float/int (``item()``
#: of a float32/int32 tensor: float32 widens to a double exactly, as NumPy's ``.item()``).
SCALAR_AT = {"<f4": ctypes.c_float.from_address, "<i4": ctypes.c_int32.from_address}
