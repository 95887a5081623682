"""Typed wrappers for the pointer work the engine and capture do on ggml nodes and host arrays.

Cached plans and capture recordings compute the same ggml graph many times over different
memory: they rebind the ``data``/``buffer`` fields of the graph's leaves, outputs and the views
of them (:class:`PointerTable`, :func:`bind_node`). Transfers copy between NumPy arrays and
device storage (:func:`write_array`, :func:`read_array`), and a replay compares its staged
inputs with what it sent (:class:`ChangedSpans`). The ctypes structures and raw addresses all
stay in this module; callers pass node handles (ints), storages and arrays (:class:`HostArray`
takes an array's address once, for copies repeated on every replay).
"""
from __future__ import annotations

import ctypes

import numpy as np

from . import api as _api
from .api import TensorStruct, host_bytes, host_equal

_DATA_OFFSET = TensorStruct.data.offset
_BUFFER_OFFSET = TensorStruct.buffer.offset
_cell = ctypes.c_void_p.from_address


def _cells(node: int) -> tuple:
    return _cell(node + _DATA_OFFSET), _cell(node + _BUFFER_OFFSET)


def view_of(node: int) -> tuple[int, int]:
    """``(source node, byte offset)`` of a view node, or ``(0, 0)`` for a node that owns its memory
    (ggml folds chains of views: the source always owns its memory)."""
    t = TensorStruct.from_address(node)
    return (t.view_src or 0, t.view_offs) if t.view_src else (0, 0)


def bind_node(node: int, data: int, buffer: int) -> None:
    """Point ``node`` at ``data`` inside backend ``buffer`` (a recording's leaf, once)."""
    d, b = _cells(node)
    d.value = data
    b.value = buffer


class LeafBinding:
    """The leaves of one recorded input (one per graph) and every view of them in ``graphs``, pointed
    at another tensor's memory per call: a replay in host memory reads a tensor argument where it
    lies instead of copying it in. Binding the memory they already point at costs a comparison."""

    __slots__ = ("cells", "views", "data", "buffer", "home")

    def __init__(self, leaves: list[int], graphs: list[tuple[int, int]], data: int, buffer: int):
        """``graphs``: ``(graph, node count)`` pairs; ``data``/``buffer``: where the leaves point now (home)."""
        leaf_set = set(leaves)
        self.cells = tuple(_cells(n) for n in leaves)
        views = []
        for graph, n_nodes in graphs:
            for i in range(n_nodes):
                node = _api.lib.graph_node(graph, i)
                src, offs = view_of(node)
                if src in leaf_set:
                    views.append((*_cells(node), offs))
        self.views = tuple(views)
        self.data, self.buffer = data, buffer
        self.home = (data, buffer)

    def bind(self, data: int, buffer: int) -> None:
        """Point the leaves (and their views) at ``data`` in backend ``buffer``."""
        if data == self.data and buffer == self.buffer:
            return
        for d, b in self.cells:
            d.value = data
            b.value = buffer
        for d, b, offs in self.views:
            d.value = data + offs
            b.value = buffer
        self.data, self.buffer = data, buffer

    def bind_home(self) -> None:
        """Point the leaves back at the recording's own input memory."""
        self.bind(*self.home)


class PointerTable:
    """The base nodes of a plan (leaves, then outputs; 0 for a leaf the graph does not use) and the
    views of them, rebound to new memory by :meth:`bind` at the cost of attribute stores for
    what moved since the last call.

    ``views``: ``(view node, base index, byte offset)`` in graph order. The optional compiled
    accelerator has a C twin (``_accel.c``'s ``PointerTable``: the same methods and stores, checked
    against this one by tests/test_accel.py) that cached plans use while it is on.
    """

    __slots__ = ("cells", "views", "bound_data", "bound_buf")

    def __init__(self, bases: list[int], views: list[tuple[int, int, int]]):
        self.cells = tuple(_cells(n) if n else None for n in bases)
        self.views = tuple((*_cells(v), base, offs) for v, base, offs in views)
        self.bound_data = [0] * len(bases)  # what bind() last wrote, per base
        self.bound_buf = [0] * len(bases)

    def bind(self, leaf_storages, out_storages) -> None:
        """Point the bases at ``leaf_storages + out_storages`` (objects with ``data`` and ``buffer``)."""
        bases = list(leaf_storages)
        bases.extend(out_storages)
        bound_data, bound_buf, cells = self.bound_data, self.bound_buf, self.cells
        moved = None
        for i, s in enumerate(bases):
            data, buf = s.data, s.buffer
            if data != bound_data[i] or buf != bound_buf[i]:
                c = cells[i]
                if c is not None:
                    c[0].value = data
                    c[1].value = buf
                bound_data[i], bound_buf[i] = data, buf
                if moved is None:
                    moved = set()
                moved.add(i)
        if moved is not None and self.views:
            for d, b, base, offs in self.views:
                if base in moved:
                    s = bases[base]
                    d.value = s.data + offs
                    b.value = s.buffer

    def bind_op(self, inputs, out) -> None:
        """:meth:`bind` for an eager op's plan: the leaves are ``inputs``' storages (arrays with a
        ``_storage``), the one output is ``out`` (a storage). No list is built: this runs per op."""
        bound_data, bound_buf, cells = self.bound_data, self.bound_buf, self.cells
        moved = None
        i = 0
        for x in inputs:
            s = x._storage
            data, buf = s.data, s.buffer
            if data != bound_data[i] or buf != bound_buf[i]:
                c = cells[i]
                if c is not None:
                    c[0].value = data
                    c[1].value = buf
                bound_data[i], bound_buf[i] = data, buf
                if moved is None:
                    moved = set()
                moved.add(i)
            i += 1
        data, buf = out.data, out.buffer
        if data != bound_data[i] or buf != bound_buf[i]:
            c = cells[i]
            c[0].value = data
            c[1].value = buf
            bound_data[i], bound_buf[i] = data, buf
            if moved is None:
                moved = set()
            moved.add(i)
        if moved is not None and self.views:
            for d, b, base, offs in self.views:
                if base in moved:
                    s = out if base == i else inputs[base]._storage
                    d.value = s.data + offs
                    b.value = s.buffer

    def unbind(self, start: int) -> None:
        """Clear the pointers of bases ``start..`` (outputs handed back unallocated)."""
        for c in self.cells[start:]:
            if c is not None:
                c[0].value = c[1].value = 0


class HostArray:
    """A C-contiguous NumPy array whose address is taken once, for repeated copies between it and
    storages (a replay's staging block, its download buffer, an input slot)."""

    __slots__ = ("array", "addr", "nbytes")

    def __init__(self, array: np.ndarray):
        if not array.flags.c_contiguous:
            raise ValueError("HostArray: the array must be C-contiguous")
        self.array = array
        self.addr = array.ctypes.data
        self.nbytes = array.nbytes

    def read_from(self, storage, offset: int = 0) -> None:
        """Fill the whole array from ``storage`` at byte ``offset``."""
        if self.nbytes:
            storage.read(self.addr, self.nbytes, offset)

    def write_span(self, storage, lo: int, hi: int) -> None:
        """Copy bytes ``lo:hi`` of the array to the same bytes of ``storage``."""
        if hi > lo:
            storage.write(self.addr + lo, hi - lo, lo)


def write_array(storage, arr: np.ndarray, offset: int = 0) -> None:
    """Copy the C-contiguous ``arr`` into ``storage`` at byte ``offset``."""
    if arr.nbytes:
        storage.write(arr.ctypes.data, arr.nbytes, offset)


def read_array(storage, arr: np.ndarray, offset: int = 0) -> None:
    """Copy ``arr.nbytes`` of ``storage`` from byte ``offset`` into the C-contiguous ``arr``."""
    if arr.nbytes:
        storage.read(arr.ctypes.data, arr.nbytes, offset)


def host_view(storage, nbytes: int) -> np.ndarray:
    """A writable uint8 view of the first ``nbytes`` of host-memory ``storage`` (kept alive by the caller)."""
    return host_bytes(storage.data, nbytes)


class ChangedSpans:
    """Compares ``new`` with ``old`` (two uint8 arrays of one size) over fixed byte spans.

    :meth:`changed` gives the byte range from the first to the last span that differs (memcmp per
    span), so one transfer sends every change.
    """

    __slots__ = ("spans", "_cmp")

    def __init__(self, new: np.ndarray, old: np.ndarray, spans: list[tuple[int, int]]):
        a_new, a_old = new.ctypes.data, old.ctypes.data
        self._cmp = _api._memcmp
        if self._cmp is None:
            self.spans = tuple((a, b, a_new + a, a_old + a, b - a) for a, b in spans if b > a)
        else:  # memcmp's arguments made once: ctypes converts Python ints on every call (~25% of it)
            self.spans = tuple((a, b, ctypes.c_void_p(a_new + a), ctypes.c_void_p(a_old + a), ctypes.c_size_t(b - a))
                               for a, b in spans if b > a)

    def changed(self) -> tuple[int, int]:
        """``(lo, hi)`` of the differing spans, or ``(-1, -1)`` when none differs."""
        lo = hi = -1
        cmp = self._cmp
        for a, b, new, old, n in self.spans:
            if (cmp(new, old, n) != 0) if cmp is not None else not host_equal(new, old, n):
                if lo < 0:
                    lo = a
                hi = b
        return lo, hi
