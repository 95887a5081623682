"""``gg.Buffer``: a device-resident table (replay or rollout buffer) that captured steps gather from.

Rows are written from the host (ring wrap-around) and read on the device by an index
tensor, so a captured update can sample a minibatch from device memory given only the
indices as input.

>>> import numpy as np, ggmlgrad as gg
>>> buf = gg.Buffer(shape=(4, 2))
>>> buf.write(np.arange(6, dtype=np.float32).reshape(3, 2))     # rows 0..2
>>> buf.write(np.full((2, 2), 9, np.float32))                   # rows 3, 0 (wraps)
>>> buf.gather(np.array([0, 1], np.int32)).tolist()
[[9.0, 9.0], [2.0, 3.0]]
>>> len(buf), buf.cursor
(4, 1)
"""
from __future__ import annotations

import math

import numpy as np

from ..engine import COUNTERS, ENGINE, active_observer, float32, int32, dtypes, host_array, new_from_host
from ..engine.checks import first_bad
from ..engine.errors import IndexValueError
from ..ops import op
from ..ops.indexing import check_values
from ..runtime import resolve_device
from .._ggml import array_address
from ..tensor import Tensor
from ..tensor.tensor import tensor as _tensor
from . import ops as _ops  # noqa: F401


class Buffer:
    """A ``(capacity, *row_shape)`` table in device memory.

    - ``write(rows, offset=None)``: write rows (``(n, *row_shape)`` or one row) starting at
      ``offset`` (default: the ring cursor), wrapping around; the queue is drained first,
      since queued nodes may read the table. Writes are in place: captured steps that
      gather from the buffer see them without recording again.
    - ``gather(index)``: rows ``table[index]`` as a Tensor (an int32 index vector, a Tensor
      or an array). Out-of-range indices raise ``IndexError`` in every mode: validated on
      the host when the index is there (eager), else checked after the compute (graph mode,
      and every replay of a capture, before its update; the graph clamps them meanwhile so
      ggml never sees a bad row).
    - ``read(start=0, stop=None)``: rows ``[start, stop)`` as a Tensor (a copy).

    ``len(buf)`` is the high-water mark of written rows (``capacity`` once the ring wrapped);
    ``cursor`` the next ring position. Memory follows Python references: a buffer dropped while a
    queued node reads it stays alive until that node has computed.
    """

    def __init__(self, shape, dtype=float32, device=None):
        shape = tuple(int(s) for s in ((shape,) if isinstance(shape, int) else shape))
        if not 1 <= len(shape) <= 3 or any(s < 1 for s in shape):
            raise ValueError(f"Buffer: shape must be (capacity, *row_shape) with 1 to 3 positive dimensions, "
                             f"got {shape}")
        d = dtypes.from_any(dtype)
        if d not in (float32, int32):
            raise TypeError(f"Buffer: dtype must be float32 or int32, got {d.name}")
        self.shape = shape
        self.capacity = shape[0]
        self.row_shape = shape[1:]
        self.dtype = d
        self.device = resolve_device(device)
        t = Tensor._blank(shape, d, self.device)
        new_from_host(t, np.zeros(shape, d.np_dtype), "Buffer()")
        self._table = t
        self.cursor = 0
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        return f"Buffer(shape={self.shape}, dtype={self.dtype.name}, size={self.size}, cursor={self.cursor})"

    @property
    def table(self) -> Tensor:
        """The live table tensor (aliases the buffer's memory; later writes change it)."""
        return self._table

    # ------------------------------------------------------------------ writes
    def write(self, rows, offset: int | None = None) -> None:
        arr = rows.detach().numpy() if isinstance(rows, Tensor) else np.asarray(rows)
        if arr.shape == self.row_shape:
            arr = arr.reshape((1,) + self.row_shape)
        if arr.ndim != len(self.shape) or tuple(arr.shape[1:]) != self.row_shape:
            raise ValueError(f"Buffer.write: rows of shape {arr.shape} do not fit rows of shape {self.row_shape}")
        if arr.dtype.kind not in "biuf":
            raise TypeError(f"Buffer.write: cannot write rows of dtype {arr.dtype}")
        n = arr.shape[0]
        if offset is None:
            offset = self.cursor
        if isinstance(offset, bool) or not isinstance(offset, (int, np.integer)) or not 0 <= offset < self.capacity:
            raise IndexError(f"Buffer.write: offset {offset!r} out of range for capacity {self.capacity}")
        offset = int(offset)
        if n == 0:
            return
        if n > self.capacity:  # only the last `capacity` rows survive a ring write
            offset = (offset + n - self.capacity) % self.capacity
            arr = arr[n - self.capacity:]
            n = self.capacity
        data = host_array(arr, self.dtype)
        row_bytes = math.prod(self.row_shape) * self.dtype.itemsize
        t = self._table
        with ENGINE.lock:
            ENGINE.drain("buffer_write")  # queued nodes may read the table: they compute first
            first = min(n, self.capacity - offset)
            _write_rows(t, data[:first], offset * row_bytes)
            if first < n:
                _write_rows(t, data[first:], 0)
        t._version += 1
        self.cursor = (offset + n) % self.capacity
        self.size = min(self.capacity, max(self.size, offset + n) if first == n else self.capacity)

    # ------------------------------------------------------------------ reads
    def gather(self, index) -> Tensor:
        clamp = False
        if isinstance(index, Tensor):
            idx = index
            if idx.dtype is not int32:
                raise TypeError(f"Buffer.gather: index must be int32, got {idx.dtype.name}")
            if idx.ndim != 1:
                raise ValueError(f"Buffer.gather: index must be 1-D, got shape {idx.shape}")
            # Read now (eager), or checked after the compute while the graph clamps (graph mode, capture).
            clamp = check_values("Buffer.gather", idx, 0, self.capacity - 1, _RANGE_MESSAGE.format("{}", self.capacity))
        else:
            arr = np.asarray(index)
            if arr.dtype.kind not in "iu" or arr.ndim != 1:
                raise TypeError(f"Buffer.gather: index must be a 1-D integer array, got {arr.dtype} {arr.shape}")
            _check_range(arr, self.capacity)
            idx = _tensor(arr.astype(np.int32), device=self.device)
        return op.buffer_gather(self._table, idx, clamp=clamp)

    def read(self, start: int = 0, stop: int | None = None) -> Tensor:
        stop = self.capacity if stop is None else stop
        return op.buffer_rows(self._table, start=int(start), stop=int(stop))

    def numpy(self) -> np.ndarray:
        return self._table.numpy()


_RANGE_MESSAGE = "Buffer.gather: index {} out of range for a buffer of {} rows"


def _check_range(idx: np.ndarray, capacity: int) -> None:
    bad = first_bad(idx, 0, capacity - 1)
    if bad is not None:
        raise IndexValueError(_RANGE_MESSAGE.format(bad, capacity))


def _write_rows(t: Tensor, data: np.ndarray, byte_offset: int) -> None:
    obs = active_observer()
    if obs is not None:
        obs.on_upload("Buffer.write()")
    n = data.nbytes
    t._storage.write(array_address(data), n, byte_offset)
    COUNTERS.uploads["Buffer.write()"] += 1
    COUNTERS.upload_bytes["Buffer.write()"] += n
