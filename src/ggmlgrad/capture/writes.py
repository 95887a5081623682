"""In-place writes inside a captured function: recorded as values, made persistent at the end of each replay.

While a function records, an in-place write ``t ← v`` (``add_``, ``x[k] = v``, ``copy_``, a write
through a view, ...) computes nothing: ``v`` is a node of the graph and ``t`` is rebound to it, so a
read after the write (in program order) reads ``v`` and a read before it keeps the old value, which
is what eager mode gives. What outlives the function:

- memory of a tensor made outside it (a parameter, a buffer, a view of one, an alias such as
  ``p.data``): ``v`` is copied into that memory by a ``ggml_cpy`` node placed after every other node
  of the graph, so the copy comes after every read of the old value;
- a Tensor argument: ``v`` is downloaded with the outputs and written into the caller's tensor after
  the replay (an array argument is an input by value, as ``gg.tensor(array)`` copies: not written);
- a tensor made inside the function: nothing (it is a node like any other).

After each replay the version counters of written tensors move as eager writes move them, and live
views of written memory that the recording did not write (made after it) are re-derived. A recording
that writes memory outside the function follows the grad mode and the ``requires_grad`` of what it
wrote (torch's in-place rules depend on them): a change records again.
"""
from __future__ import annotations

import weakref

import numpy as np

from .._ggml import lib
from .._ggml.nodes import view_of, write_array
from ..engine import COMPUTED, COUNTERS, ENGINE, PENDING, CaptureError, cache_leaf, forget_leaf
from ..ops import op
from ..tensor import is_grad_enabled, no_grad
from ..tensor.inplace import _leaf_inplace_message
from ..tensor.tensor import Tensor
from ..tensor.views import record_of, refresh_views


def _leaf_view_inplace_message(name: str) -> str:
    return (f"{name}: a view of a leaf Variable that requires grad is being used in an in-place operation; "
            f"wrap it in gg.no_grad() (e.g. a manual parameter update)")


class _Target:
    """Memory that outlives the recording, written in the graph being built: its storage, the leaf
    that aliases it, the node of its current value and the input slot it is (None: external)."""

    __slots__ = ("storage", "leaf", "node", "value", "slot", "name")

    def __init__(self, storage, leaf: int, slot, name: str):
        self.storage = storage
        self.leaf = leaf
        self.node = 0
        self.value = None
        self.slot = slot
        self.name = name


class RecordedWrites:
    """The recorder's side: rebinding written tensors, and what the replay must do afterwards."""

    def __init__(self, recorder) -> None:
        self.recorder = recorder
        self.live: dict[int, _Target] = {}       # id(storage) → target, in the graph being built
        self.seen: dict[int, list] = {}          # id(storage) → weakrefs of tensors that entered as leaves
        self.cells: dict[int, list] = {}         # id(version cell) → [cell, version before, target]
        self.covered: set[int] = set()           # ids of external views the graph writes
        self.writebacks: list[tuple] = []        # (input slot, offset in the download, its value tensor)
        self.grad_targets: list = []             # weakrefs of outside tensors written with grad on
        self.external_ids: set[int] = set()      # ids of outside storages written (kept alive by the graph)
        self.arg_names: dict[int, tuple] = {}    # id(slot) → (grad on at a write, op name)
        self.grad_mode = is_grad_enabled()       # the caller's, when the recording starts

    # -- while the function runs
    def write(self, target: Tensor, value: Tensor, name: str, grad_on: bool) -> None:
        """``target ← value`` (same shape and dtype): rebind ``target`` (and every alias of its memory);
        ``grad_on``: the grad mode of the in-place call (torch's rules depend on it)."""
        if target.numel_ == 0:
            return
        v = self._own_node(value)
        if target._status == PENDING:  # made by the function (a recording drains what came before)
            ENGINE.rebind_pending(target, v._node)
        elif target._status == COMPUTED:
            self._rebind_memory(target, v, name, grad_on)
        else:
            ENGINE.node_of(target)  # raises the error of a failed tensor

    @staticmethod
    def _own_node(value: Tensor) -> Tensor:
        """``value`` as a node with memory of its own (a leaf or a view of one would be overwritten by
        the final copies, which run after every read)."""
        if value._status == PENDING and not view_of(int(value._node))[0]:
            return value
        with no_grad():
            return op.capture_copy(value)

    def _rebind_memory(self, target: Tensor, v: Tensor, name: str, grad: bool) -> None:
        """Memory that outlives the function: its readers from now on read ``v``'s node."""
        rec = self.recorder
        s = target._storage
        if id(target) in rec._owned_ids:
            raise CaptureError(f"capture: {name} writes an output of an earlier graph of this recording")
        if target.requires_grad and target.grad_fn is not None and grad:
            raise CaptureError(
                f"capture: {name} writes in place a tensor made outside the captured function that is part of "
                f"an autograd graph; a recording cannot put the write on that tensor's tape. Write under "
                f"gg.no_grad(), or clone() it first")
        t = self.live.get(id(s))
        if t is None:
            leaf = ENGINE.node_of(target)  # its memory as a leaf (the reference, or the input slot)
            slot = rec._slot_of.get(id(s))
            if slot is not None and slot.tensor._storage is not s:
                slot = None
            t = self.live[id(s)] = _Target(s, leaf, slot, name)
            if slot is None:
                self.external_ids.add(id(s))
        t.value = v
        t.node = ENGINE.node_of(v)
        for a in [r() for r in self.seen.get(id(s), ())] + [target]:
            if a is not None and a._storage is s:
                forget_leaf(a)  # its cached leaf is the old value: the next read asks on_leaf again
        cell = target._vcell
        if id(cell) not in self.cells:
            self.cells[id(cell)] = [cell, cell[0], t]
        if t.slot is not None:
            g, n = self.arg_names.get(id(t.slot), (False, name))
            if grad and not g:
                g, n = True, name  # the write eager's autograd rule would name
            self.arg_names[id(t.slot)] = (g, n)
        else:
            if grad:
                self.grad_targets.append(weakref.ref(target))
            if "_view" in target.__dict__:
                self.covered.add(id(target))

    def on_leaf(self, a, leaf: int) -> int | None:
        """A computed tensor enters the graph: note it; memory written already reads its new value."""
        s = a._storage
        lst = self.seen.get(id(s))
        if lst is None:
            lst = self.seen[id(s)] = []
        lst.append(weakref.ref(a))
        t = self.live.get(id(s))
        if t is None:
            return None
        if a.shape != t.value.shape or a.dtype is not t.value.dtype:
            raise CaptureError(f"capture: a {a.dtype.name} {a.shape} alias of memory the function wrote in "
                               f"place ({t.value.dtype.name} {t.value.shape}) is not supported")
        cache_leaf(a, t.node)
        return t.node

    # -- when a graph is taken
    def close_graph(self) -> list:
        """Queue the final copies into outside memory (after every other node) and return the written
        input slots' targets (their values are downloaded). Later graphs read the memory itself."""
        live = list(self.live.values())
        self.live = {}
        self.seen = {}
        ext = [t for t in live if t.slot is None]
        if ext:
            rec = self.recorder
            with rec.hold():
                for t in ext:
                    ENGINE.queue_effect(t.node, "capture write")  # every value first: they read old memory
                for t in ext:
                    ctx = ENGINE.begin(rec.device)
                    ENGINE.queue_effect(lib.cpy(ctx, t.node, t.leaf), "capture write")
        return [t for t in live if t.slot is not None]

    def merge_ok(self, params) -> bool:
        """Whether the step's two graphs may compute as one with these writes: nothing is written back
        to an argument, nothing is written through a view, and no written memory is a parameter the
        update reads and writes (a batch norm's running statistics qualify). The writes' copies follow
        every node of the first graph and precede the update's nodes, so the order is that of two
        computes."""
        if self.writebacks or self.covered:
            return False
        if not self.external_ids:
            return True
        updated = {id(s) for p in params for s in _memories(p)}
        return not (self.external_ids & updated)

    # -- when the recording ends
    def finish(self, arg_slots: list, ref_storages: set) -> "ReplayWrites | None":
        """Undo the version bumps of outside tensors (each replay makes them) and build the replay side."""
        if not self.cells and not self.writebacks:
            return None
        bumps, arg_bumps = [], {}
        for cell, before, t in self.cells.values():
            n = cell[0] - before
            if t.slot is None:
                cell[0] = before
                if n:
                    bumps.append((cell, n))
            elif cell is t.slot.tensor._vcell:
                arg_bumps[id(t.slot)] = n
        index = {id(s): i for i, s in enumerate(arg_slots)}
        backs = []
        for slot, offset, tensor in self.writebacks:
            grad, name = self.arg_names.get(id(slot), (False, "in-place op"))
            backs.append((index[id(slot)], offset, tensor, arg_bumps.get(id(slot), 0), grad, name))
        families = [c for c, _, t in self.cells.values() if t.slot is None]
        return ReplayWrites(bumps, backs, families, self.covered, self.grad_targets, self.grad_mode,
                            self.external_ids, ref_storages)


class ReplayWrites:
    """The replay's side: checks before it, write-backs, version counters and views after it."""

    def __init__(self, bumps, writebacks, families, covered, grad_targets, grad_mode: bool, external_ids,
                 ref_storages):
        self.bumps = bumps
        self.writebacks = writebacks
        self.families = families
        self.covered = covered
        self.grad_targets = grad_targets
        self.grad_mode = grad_mode
        self.external_ids = external_ids
        self.ref_storages = ref_storages

    def stale(self) -> str | None:
        """Why torch's in-place rules could decide differently now (then the function records again)."""
        if is_grad_enabled() != self.grad_mode:
            return (f"grad mode {'on' if is_grad_enabled() else 'off'} (recorded with it "
                    f"{'on' if self.grad_mode else 'off'}; the function writes in place)")
        for r in self.grad_targets:
            t = r()
            if t is not None and t.requires_grad:
                return f"a tensor {t.shape} the function writes in place requires grad now"
        return None

    def before(self, leaves: list) -> None:
        """Refuse what eager mode refuses, and arguments that alias memory the function writes."""
        count: dict[int, int] = {}
        for i, v in enumerate(leaves):
            if isinstance(v, Tensor):
                for s in _memories(v):
                    if id(s) in self.external_ids:
                        raise CaptureError(
                            f"capture: argument {i} shares memory with a tensor the captured function writes in "
                            f"place; a replay reads arguments before its writes. Pass a copy (x.clone()).")
                    count[id(s)] = count.get(id(s), 0) + 1
        for i, _, _, _, grad, name in self.writebacks:
            v = leaves[i]
            if not isinstance(v, Tensor):
                continue
            if grad and v.requires_grad:
                if v.grad_fn is None:   # through a view: torch's (and eager's) view-of-a-leaf message
                    raise RuntimeError(_leaf_view_inplace_message(name) if name == "view write"
                                       else _leaf_inplace_message(name))
                raise CaptureError(f"capture: {name} writes argument {i} in place, which is part of an autograd "
                                   f"graph; a replay cannot put the write on its tape (write under gg.no_grad())")
            for s in _memories(v):
                if count[id(s)] > 1 or id(s) in self.ref_storages:
                    raise CaptureError(
                        f"capture: argument {i}, which the captured function writes in place, shares memory "
                        f"with another argument or a tensor the function reads. Pass a copy (x.clone()).")

    def after(self, leaves: list, raw: np.ndarray) -> None:
        """Write Tensor arguments back, move version counters, re-derive views the graph did not write."""
        for i, offset, t, bump, _, _ in self.writebacks:
            v = leaves[i]
            if isinstance(v, Tensor):
                _write_back(v, raw[offset:offset + t.nbytes], t, bump)
        for cell, n in self.bumps:
            cell[0] += n
        for cell in self.families:
            if len(cell) > 1 and cell[1].refs:
                for w in cell[1].live():
                    if id(w) not in self.covered:
                        with no_grad():
                            refresh_views(w._view.root)
                        break


def _memories(v: Tensor) -> list:
    """The storages ``v``'s value lives in: its own, and its root's when it is a view."""
    rec = record_of(v)
    return [v._storage] if rec is None else [v._storage, rec.root._storage]


def _write_back(v: Tensor, raw: np.ndarray, t: Tensor, bump: int) -> None:
    """The caller's tensor ``v`` takes the argument's final value (``raw``: its bytes)."""
    if v._status != COMPUTED:
        ENGINE.drain("read")
    if "_view" in v.__dict__:  # through the view: its base and other views follow, as in eager
        from .recording import unpack
        version = v._version
        with no_grad():
            v.copy_(unpack(raw, 0, t))
        v._version = version + bump
        return
    write_array(v._storage, raw)
    COUNTERS.uploads["capture write-back"] += 1
    COUNTERS.upload_bytes["capture write-back"] += raw.nbytes
    v._version += bump
    if len(v._vcell) > 1:
        with no_grad():
            refresh_views(v)
