"""``x[key] = value`` and ``x[key]`` on host memory: the region is copied where it lies, no graph.

A row write into rollout storage (``buf[i] = obs``) as the write op costs a ``slice_set`` node
over the whole buffer and a copy of it back (two computes, ~60 µs for a 4x4 row of a 128x4x4
buffer). When the write op could only copy bytes (same dtype, or a float array rounded to float32
as the upload of ``gg.tensor(array)`` rounds it), NumPy copies the region in place instead: the
same bits, the same version bump and the same ordering (the queue computes first). An int32 value
into float32 is converted as the write op's cast converts it. Live views of the buffer (CleanRL's
``b_obs = obs.reshape(...)``, alive while the next rollout writes ``obs[step]``) are refreshed as
the write op refreshes them: each view with memory of its own gets its elements copied out of the
buffer (each view step only selects elements). Anything else (autograd, writing through a view,
a source in the buffer's family, capture, other dtypes, a pending value, a GPU) takes the write op.

A row write (``buf[i] = row``: an int key, a value of exactly the row's shape and dtype, no live
views) is one ``memmove`` of the row's bytes (or NumPy's copy of a C-contiguous array).

A row read (``buf[i]`` in eager mode) is a view that lies in the base's memory, as torch's: a
``SliceAlias`` of the region (nothing copied; the base's writes are seen by it, its writes reach the
base), recorded as the ``slice`` op's view would be (tensor/views.py). A region that is not one
block of the base's memory is copied with NumPy into memory of its own, as the op would copy it.

A minibatch read with a NumPy index array (``b_obs[mb_inds]`` in eager mode) gathers the rows
with NumPy into a new tensor: the copy ``index_select`` makes, without uploading the index.
"""
from __future__ import annotations

from math import prod as _prod
from weakref import ref as _weakref

import numpy as np

from .._ggml import host_bytes, host_copy
from ..engine import COMPUTED, ENGINE, context, float16, float32, host_value, int32, new_from_host
from ..runtime import HostStorage, SliceAlias, Storage, StridedAlias
from ..runtime.executor import COMPUTE_LOCK
from ..runtime.faults import ARMED as _FAULTS
from . import views
from .views import ViewRecord
from .grad_mode import _enabled
from .tensor_class import tensor_class as _tensor_class

_current = context.current
_BLANK = None  # Tensor._blank, found at first use (tensor.py imports this module)


def _blank(shape: tuple, dtype, device):
    """``Tensor._blank``; the row read reads the global itself (a call less)."""
    global _BLANK
    if _BLANK is None:
        _BLANK = _tensor_class()._blank
    return _BLANK(shape, dtype, device)

_NUMBERS = (float, int, np.floating, np.integer)
_PLAIN = (Storage, HostStorage)
_ALIASES = (SliceAlias, StridedAlias)


def try_setitem(x, key, value, rows: bool = True) -> bool:
    """Do ``x[key] = value`` on host memory and return True, or return False (nothing done) when
    the write op must do it. ``key``: ints and slices with positive steps only. ``rows=False``: the
    caller already tried :func:`row_write` (an int key)."""
    if rows and type(key) is int and _row_write(x, key, value):  # buf[i] = row: the common case, its own path
        return True
    if x.requires_grad or "_view" in x.__dict__ or x._status != COMPUTED:
        return False
    if not _basic_key(key, x.shape):
        return False
    src = _source(x, value)
    if src is None:
        return False
    cell = x._vcell
    family = cell[1].live() if len(cell) > 1 else ()
    if family and not _refreshable(x, family, src):  # live views must see the write (tensor/views.py)
        return False
    c = context.current()
    if c.recorder is not None or c.observer is not None:
        return False  # a capture recording records writes as rebindings
    engine = ENGINE.current
    with engine.lock:
        if engine._hold:
            return False
        engine.drain("inplace")  # queued nodes may read this memory: they run first, as the write op's
        dst = host_value(x)
        if type(src) is not np.ndarray:  # a tensor: its value, computed by the drain
            src = host_value(src)
        if dst is None or src is None:
            return False
        # () when every dim is indexed (NumPy gives a scalar then); a row's, read off directly
        shape = x.shape[1:] if type(key) is int else np.shape(dst[key])
        if src.shape != shape:
            lead = src.ndim - len(shape)
            if lead > 0 and not any(n != 1 for n in src.shape[:lead]):
                src = src.reshape(src.shape[lead:])  # torch drops a value's leading size-1 dims: x[t] = (1, n)
            if src.shape != shape and not _broadcasts_to(src.shape, shape):
                return False  # the write op raises its own error
        if src.dtype != dst.dtype:  # int32 into float32: the write op's cast (exact conversion, nearest)
            src = src.astype(dst.dtype)
        with COMPUTE_LOCK:  # no graph reads or writes this memory meanwhile (a replay on another thread)
            dst[key] = src
            for w in family:  # the write op's view refresh, as host copies (views.rederive)
                _refresh_view(x, w)
    x._version += 1
    return True


def _row_write(x, i: int, value) -> bool:
    """``x[i] = value`` for a computed root ``x`` in host memory and a ``value`` of the row's shape
    (or that shape after leading size-1 dims, which torch drops) and dtype (a computed host tensor not
    on the tape, or an array; a float array into float32 is rounded as ``gg.tensor(array)`` rounds
    it; an int32 tensor into float32 is converted as the write op's cast converts it): the row's
    bytes copied in place (the write op's bits), then the live views with memory of their own
    refreshed as :func:`try_setitem` refreshes them (CleanRL's ``b_obs = obs.reshape(...)`` is alive
    while the next rollout writes ``obs[step]``), True; or False, nothing done
    (:func:`try_setitem`'s general rules or the write op take it)."""
    shape = x.shape
    if not shape or not x.numel_ or x.requires_grad or x._status != COMPUTED or _FAULTS or "_view" in x.__dict__:
        return False
    n = shape[0]
    if not -n <= i < n:
        return False
    size = _ROW_ITEMSIZE.get(x.dtype)
    s = x._storage
    t = type(s)
    if size is None or (t is not Storage and t is not HostStorage) or not s.device.is_host:
        return False
    rest = shape[1:]
    Tensor = _tensor_class()
    cast = False  # an int32 tensor into float32: NumPy's cast (the write op's: exact, else nearest)
    if isinstance(value, Tensor):
        if value.requires_grad or value.device is not x.device or (value.shape != rest and not _drops_to(
                value.shape, rest)):
            return False
        if value.dtype is not x.dtype:
            if value.dtype is not int32 or x.dtype is not float32:
                return False
            cast = True
    elif type(value) is not np.ndarray or value.shape != rest or (
            value.dtype != x.dtype.np_dtype and not (x.dtype is float32 and value.dtype.kind == "f")):
        return False  # (a float array into float32: NumPy's cast rounds as the upload's astype does)
    cell = x._vcell
    family = cell[1].live() if len(cell) > 1 and cell[1].refs else ()
    if family and not _refreshable(x, family, value):
        return False  # (a view that cannot be refreshed on the host, or the value itself: the write op)
    c = _current()
    if c.recorder is not None or c.observer is not None:
        return False  # a capture recording records writes as rebindings
    engine = ENGINE.current
    # The locks' acquire/release rather than ``with``, whose __enter__/__exit__ lookups cost as much again
    lock = engine.lock
    lock.acquire()
    try:
        if engine._hold:
            return False
        engine.drain("inplace")  # queued nodes may read this memory: they run first, as the write op's
        if type(value) is np.ndarray or cast:
            if cast:
                value = host_value(value)  # (after the drain: its computed value; None if not plain host memory)
                if value is None:
                    return False
            COMPUTE_LOCK.acquire()  # no graph reads or writes this memory meanwhile (a replay on another thread)
            try:
                host_value(x)[i] = value.reshape(rest)
                for w in family:  # the write op's view refresh, as host copies (views.rederive)
                    _refresh_view(x, w)
            finally:
                COMPUTE_LOCK.release()
        else:
            vs = value._storage
            vt = type(vs)
            if value._status != COMPUTED or (vt is not Storage and vt is not HostStorage and vt is not SliceAlias):
                return False  # (a pending value is computed by the drain; a failed one raises in the op)
            nbytes = x.numel_ // n * size
            COMPUTE_LOCK.acquire()
            try:
                host_copy(s.data + (i % n) * nbytes, vs.data, nbytes)
                for w in family:
                    _refresh_view(x, w)
            finally:
                COMPUTE_LOCK.release()
    finally:
        lock.release()
    cell[0] += 1  # the version counter (x._version += 1)
    return True


def _drops_to(shape: tuple, rest: tuple) -> bool:
    """Whether ``shape`` is ``rest`` after leading size-1 dims (torch drops them: ``x[t] = v`` of (1, n))."""
    lead = len(shape) - len(rest)
    if lead <= 0 or shape[lead:] != rest:
        return False
    for n in shape[:lead]:
        if n != 1:
            return False
    return True


def _refreshable(x, family: list, src) -> bool:
    """Whether every live view of ``x`` can be refreshed on the host after a write (a computed
    view in memory of its own or in x's memory, not on the tape), and ``src`` is none of them
    (``x[0] = x[1]`` takes the write op)."""
    storage = x._storage
    for w in family:
        if w is src or w.requires_grad or w.dtype is not x.dtype or w._status != COMPUTED:
            return False
        if w._view.root._storage is not storage:
            continue  # another memory (nn.Parameter(view) shares the version cell only): not refreshed
        t = type(w._storage)
        if t not in _PLAIN and t not in _ALIASES:
            return False
    return True


def _refresh_view(x, w) -> None:
    """Copy the view ``w``'s value out of its root ``x``'s memory into ``w``'s own memory (what
    the write op's ``view refresh`` computes: each view step only selects elements)."""
    ws = w._storage
    if type(ws) not in _PLAIN or w._view.root._storage is not x._storage or not w.numel_:
        return  # a view in x's memory already sees the write
    offset, strides = w._view.layout()
    size = x.dtype.itemsize
    if strides == views.contiguous_strides(w.shape) or w.numel_ == 1:
        ws.write(x._storage.data + offset * size, w.numel_ * size)
        return
    base = host_value(x).reshape(-1)[offset:]
    host_value(w)[...] = np.lib.stride_tricks.as_strided(base, w.shape, tuple(st * size for st in strides))


def _basic_key(key, shape: tuple) -> bool:
    """Whether ``key`` is ints in range and slices with positive integer steps, at most one per dim."""
    if type(key) is not tuple:
        key = (key,)
    if not key or len(key) > len(shape):
        return False
    for k, n in zip(key, shape):
        t = type(k)
        if t is int or (isinstance(k, np.integer) and t is not np.bool_):
            if not -n <= k < n:
                return False
        elif t is slice:
            step = k.step
            if step is not None and (type(step) is not int or step <= 0):
                return False
            if not (k.start is None or type(k.start) is int) or not (k.stop is None or type(k.stop) is int):
                return False
        else:
            return False
    return True


def _source(x, value):
    """The value to copy: a same-dtype computed host tensor, or an array/number converted as the
    write op converts it (float → float32); None when only the write op can do it."""
    Tensor = _tensor_class()
    if isinstance(value, Tensor):
        if value.device is not x.device or value.requires_grad:
            return None
        if value.dtype is not x.dtype and not (value.dtype is int32 and x.dtype is float32):
            return None
        return value  # (a view's value: host_value reads it only when it has memory of its own)
    if type(value) is np.ndarray:
        kind = value.dtype.kind
        if value.dtype == x.dtype.np_dtype and x.dtype.name in ("float32", "int32"):
            return value
        if x.dtype is float32 and kind == "f":
            return value.astype(np.float32)  # gg.tensor(value, dtype=float32)'s rounding
        return None
    if x.dtype is float32 and isinstance(value, _NUMBERS) and not isinstance(value, (bool, np.bool_)):
        return np.asarray(float(value), dtype=np.float32)  # slice_set's fill=float(value), as a float32
    return None


def _broadcasts_to(src: tuple, dst: tuple) -> bool:
    try:
        return np.broadcast_shapes(src, dst) == dst
    except ValueError:
        return False


def try_getitem(x, key):
    """``x[key]`` (ints and slices with positive steps) as a view made on the host in eager mode, or
    None (nothing done) when the ``slice`` op must make it."""
    if type(key) is int:
        return _row(x, key)  # a row (buf[i]): the common case, its own path
    shape = x.shape
    if x._status != COMPUTED or not _basic_key(key, shape) or (x.requires_grad and _enabled.get()):
        return None
    c = _current()
    if c.graph or c.recorder is not None or c.observer is not None or host_value(x) is None:
        return None
    keys = key if type(key) is tuple else (key,)
    start, stop, step, out_shape = [], [], [], []
    offset, contiguous, leading = 0, True, True
    stride = x.numel_
    for d, n in enumerate(shape):  # the slice op's parameters, as tensor/shape_methods.py's _parse makes them
        stride //= n
        k = keys[d] if d < len(keys) else slice(None)
        if type(k) is slice:
            b, e, st = k.indices(n)
            ln = len(range(b, e, st))
            out_shape.append(ln)
        else:
            b = int(k) % n
            e, st, ln = b + 1, 1, 1
        start.append(b), stop.append(e), step.append(st)
        offset += b * stride
        # contiguous in x: dims of one element, then one of step 1, then whole dims
        if not leading and (b != 0 or ln != n or st != 1):
            contiguous = False
        if ln != 1 and leading:
            leading = False
            if st != 1:
                contiguous = False
    return _view_of(x, key, tuple(start), tuple(stop), tuple(step), tuple(out_shape), offset, contiguous)


def _row_parts(shape: tuple) -> tuple:
    """Per shape of x, what every row ``x[i]`` repeats: the slice op's start/stop tails and steps, the
    row's shape, strides and element count, and a table of each row's view steps and layout."""
    rest = shape[1:]
    parts = (0,) * len(rest), rest, (1,) * len(shape), views.contiguous_strides(rest), _prod(rest), {}
    if len(_ROWS) < 1024:
        _ROWS[shape] = parts
    return parts


def _row_record(parts: tuple, i: int) -> tuple:
    """(view steps, layout) of row ``i`` (made once per row of a shape: a rollout buffer's rows recur)."""
    zeros, rest, ones, strides, m, table = parts
    rec = (("slice", (i,) + zeros, (i + 1,) + rest, ones, rest),), (i * m, strides)
    if len(table) < 4096:
        table[i] = rec
    return rec


_ROWS: dict = {}  # x.shape -> _row_parts(x.shape) (a program indexes few shapes)
_ROW_ITEMSIZE = {float32: 4, float16: 2, int32: 4}  # dtypes stored as they are (host_value's): bytes per element


def _row(x, i: int):
    """``x[i]`` in eager mode for a computed tensor in host memory: a view that lies in ``x``'s memory
    (a ``SliceAlias``: nothing copied, writes on either side seen by the other, as torch's ``x[i]``), or
    None when the ``slice`` op must make it (graph mode, capture, autograd, an index out of range: the
    op's error, a strided or non-host memory)."""
    shape = x.shape
    if not shape or x._status != COMPUTED or _FAULTS:
        return None
    n = shape[0]
    if not -n <= i < n:
        return None
    grad_on = _enabled.get()
    if x.requires_grad and grad_on:
        return None
    c = _current()
    if c.graph or c.recorder is not None or c.observer is not None:
        return None
    size = _ROW_ITEMSIZE.get(x.dtype)
    s = x._storage
    t = type(s)
    if size is None or not s.device.is_host or (t is not Storage and t is not HostStorage and t is not SliceAlias):
        return None
    parts = _ROWS.get(shape) or _row_parts(shape)
    m = parts[4]
    if not m:
        return None
    if i < 0:
        i += n
    brec = x.__dict__.get("_view")
    if brec is None and t is not SliceAlias:  # x owns its memory (a root): the row is a slice of it
        steps, layout = parts[5].get(i) or _row_record(parts, i)
        out = (_BLANK or _blank)(parts[1], x.dtype, x.device)
        out._storage = SliceAlias(s, layout[0] * size, m * size)
        out._view = ViewRecord(x, steps, False, not grad_on, layout)  # views.make_view, with the layout known
        cell = x._vcell
        if len(cell) < 2:
            cell.append(views.Family())
        fam = cell[1]
        refs = fam.refs  # Family.add, inline
        refs[id(out)] = _weakref(out)
        if len(refs) >= fam.limit:
            fam.add(out)  # (prunes the dead entries)
        out._vcell = cell  # the base's version counter (torch's rule)
        return out
    zeros, rest, ones = parts[0], parts[1], parts[2]
    start, stop = (i,) + zeros, (i + 1,) + rest
    if t is SliceAlias and brec is not None:  # a contiguous view in its root's memory: the row lies there too
        out = _blank(rest, x.dtype, x.device)
        out._storage = SliceAlias(s.parent, s.offset + i * m * size, m * size)
        return views.index_view(out, x, i, start, stop, ones)
    # a view with memory of its own (kept equal to its root by every write): the row is copied out of
    # it, as the slice op would (a slice of it would miss the refreshes once x is gone)
    return _view_of(x, i, start, stop, ones, rest, i * m, True) if host_value(x) is not None else None


def _view_of(x, key, start: tuple, stop: tuple, step: tuple, out_shape: tuple, offset: int, contiguous: bool):
    """The view ``x[key]`` (the slice op's ``start/stop/step``; ``offset`` in elements of x, where the
    region starts; ``contiguous``: whether it is one block of x's memory): a part of the memory of a
    root ``x`` when contiguous (as :func:`_row`), else its value copied."""
    numel = _prod(out_shape)
    if not numel:
        return None
    out = _blank(out_shape, x.dtype, x.device)
    size = x.dtype.itemsize
    xs = x._storage
    if contiguous and "_view" not in x.__dict__:  # one block of x's own memory: no copy (torch's view)
        out._storage = SliceAlias(xs, offset * size, numel * size)
        return views.index_view(out, x, key, start, stop, step)
    s = out._storage = Storage(x.device, numel * size)
    with COMPUTE_LOCK:  # as a compute reads: not while a graph on another thread writes this memory
        if contiguous:
            s.write(xs.data + offset * size, numel * size)
        else:
            host_value(out)[...] = host_value(x)[key]
    return views.index_view(out, x, key, start, stop, step)


def try_take(x, key):
    """``x[index]`` for one integer NumPy array of in-range indices on the first axis (a minibatch's
    rows: ``b_obs[mb_inds]``) in eager mode, on host memory: NumPy gathers the rows that the
    ``index_select`` op would copy (the same bits) into a new tensor; or None (nothing done) when
    the op must do it (autograd, graph mode, capture, an index out of range: the op's error)."""
    if type(key) is not np.ndarray or key.dtype.kind not in "iu" or not key.size or x._status != COMPUTED:
        return None
    shape = x.shape
    if not shape or key.ndim + len(shape) - 1 > 4 or (x.requires_grad and _enabled.get()):
        return None
    c = context.current()
    if c.graph or c.recorder is not None or c.observer is not None:
        return None
    src = host_array_of(x)  # (a reshape view made by reshape_alias lies in its root's memory)
    if src is None:
        return None
    with COMPUTE_LOCK:  # as a compute reads: not while a graph on another thread writes this memory
        try:  # (negative indices count from the end, as the op wraps them; one outside [-n, n) raises)
            rows = src.take(key, axis=0)
        except IndexError:
            return None  # the op's error
    Tensor = _tensor_class()
    out = Tensor._blank(rows.shape, x.dtype, x.device)
    new_from_host(out, rows, "x[index]")
    return out


def reshape_alias(x, shape: tuple):
    """``x.view(shape)`` / ``x.reshape(shape)`` / ``x.flatten()`` in eager mode for a computed root in host
    memory: a view that lies in ``x``'s memory (a ``SliceAlias`` of all of it, as :func:`_row`'s rows:
    nothing computed or copied, writes on either side seen by the other, as torch's view), recorded as
    the ``reshape`` op's view would be; or None when the op must make it (graph mode, capture, check
    mode, autograd, a view, a shape other than ints with at most one -1 that fit: the op's error)."""
    s = x._storage
    t = type(s)
    if (t is not Storage and t is not HostStorage) or x._status != COMPUTED or _FAULTS or "_view" in x.__dict__:
        return None
    size = _ROW_ITEMSIZE.get(x.dtype)
    n = x.numel_
    if size is None or not n or not s.device.is_host:
        return None
    grad_on = _enabled.get()
    if x.requires_grad and grad_on:
        return None
    c = _current()
    if c.graph or c.check or c.recorder is not None or c.observer is not None:
        return None
    if len(shape) == 1 and type(shape[0]) is int and (shape[0] == -1 or shape[0] == n):
        new = (n,)   # x.view(-1), x.flatten(): the common case
    else:
        new = _resolved_shape(shape, n)
        if new is None:
            return None
    out = (_BLANK or _blank)(new, x.dtype, x.device)
    out._storage = SliceAlias(s, 0, n * size)
    out._view = ViewRecord(x, (("reshape", new),), False, not grad_on, (0, views.contiguous_strides(new)))
    cell = x._vcell
    if len(cell) < 2:
        cell.append(views.Family())
    fam = cell[1]
    refs = fam.refs  # Family.add, inline (as _row)
    refs[id(out)] = _weakref(out)
    if len(refs) >= fam.limit:
        fam.add(out)
    out._vcell = cell
    return out


def _resolved_shape(shape: tuple, n: int) -> tuple | None:
    """``shape`` (ints, at most one -1) with the -1 worked out for ``n`` elements, or None when it is
    anything else or does not fit (the reshape op then says what is wrong)."""
    if type(shape) is not tuple or len(shape) > 4:
        return None
    known, free = 1, None
    for i, d in enumerate(shape):
        if type(d) is not int or d < -1:
            return None
        if d == -1:
            if free is not None:
                return None
            free = i
        else:
            known *= d
    if free is not None:
        if not known or n % known:
            return None
        shape = shape[:free] + (n // known,) + shape[free + 1:]
    elif known != n:
        return None
    return shape


def host_array_of(x):
    """A NumPy view of ``x``'s value where it lies in host memory of its own or (a view made by the host
    paths) in a contiguous region of its root's; None otherwise. Only for a caller that holds ``x``."""
    v = host_value(x)
    if v is not None:
        return v
    s = x._storage
    if type(s) is not SliceAlias or type(s.parent) not in _PLAIN or x._status != COMPUTED or _FAULTS:
        return None
    ts = _TYPESTR.get(x.dtype)
    if ts is None or not s.device.is_host or not x.numel_:
        return None
    return host_bytes(s.data, x.numel_ * x.dtype.itemsize).view(ts).reshape(x.shape)


_TYPESTR = {float32: "<f4", int32: "<i4", float16: "<f2"}


# The row paths under public names: ``Tensor.__getitem__``/``__setitem__`` call them first for an int
# key (a call less than through try_getitem/try_setitem; the same rules, the same fallbacks).
row_read = _row
row_write = _row_write
