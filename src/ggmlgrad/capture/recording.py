"""One recording: the ggml graph(s) built by running a function once, and their replay.

Recording (see :class:`Recorder`): the queue is drained; every input becomes a fresh
tensor; a guard on the engine turns uploads, read-backs and eager computes into
``CaptureError``; the function runs in graph mode so its ops only queue nodes; then
the queue is taken over (``ENGINE.take_for_capture``) instead of computed. The
recording owns those node contexts, one packed device block for all inputs and one
for all outputs, and its own ``ggml_backend_sched`` per graph, allocated once, so a
replay is: pack inputs on the host, ONE upload of the changed span, one
``sched_graph_compute`` per graph, ONE download, copied out.
"""
from __future__ import annotations

import threading
import weakref
from typing import Any

import numpy as np

from .._ggml import host_bytes, host_equal, lib, write_ptr_field
from ..engine import (COMPUTED, ENGINE, FAILED, PENDING, COUNTERS, CaptureError, DType, bfloat16, float32,
                      modes, user_site)
from ..engine import checks as _checks
from ..engine.dtypes import bf16_to_f32, f32_to_bf16
from ..engine.plans import OwnedGraph
from ..engine.queue import _OVERHEAD
from ..ops import op
from ..runtime import Device, Storage, choose_threads, get_num_threads
from ..runtime.faults import ARMED as _FAULTS, hit as _fault
from ..tensor import no_grad
from ..tensor import random as _random
from ..tensor.creation import generator
from ..tensor.tensor import Tensor
from . import ops as _ops  # noqa: F401  (registers the capture ops)

_ALIGN = 64


def _align(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN




class StorageSlice:
    """``nbytes`` at ``offset`` inside a parent Storage; keeps the parent alive.

    Quacks like :class:`~ggmlgrad.runtime.Storage` for the engine (``buffer``,
    ``data``, ``nbytes``, ``device``, ``read``/``write``), so a tensor can live in
    a recording's packed block.
    """

    __slots__ = ("parent", "offset", "device", "buffer", "data", "nbytes", "__weakref__")

    def __init__(self, parent: Storage, offset: int, nbytes: int):
        self.parent = parent
        self.offset = offset
        self.device = parent.device
        self.buffer = parent.buffer
        self.data = parent.data + offset
        self.nbytes = nbytes

    def write(self, src_addr: int, nbytes: int, offset: int = 0) -> None:
        self.parent.write(src_addr, nbytes, self.offset + offset)

    def read(self, dst_addr: int, nbytes: int, offset: int = 0) -> None:
        self.parent.read(dst_addr, nbytes, self.offset + offset)


# ---------------------------------------------------------------------------- slots
class InputSlot:
    """One input of a recording: a user argument, a noise draw, an optimizer hyperparameter array
    or the clip limit. Its value is written into the host staging block before each upload."""

    __slots__ = ("kind", "name", "shape", "dtype", "tensor", "leaves", "offset", "nbytes", "view", "sent",
                 "noise")

    def __init__(self, kind: str, name: str, shape: tuple, dtype: DType, device: Device, noise=None):
        self.kind = kind
        self.name = name
        self.shape = shape
        self.dtype = dtype
        self.noise = noise
        t = Tensor._blank(shape, dtype, device)
        t._storage = Storage(device, max(t.nbytes, 1))  # placeholder until the packed block exists
        self.tensor = t
        self.leaves: list[int] = []
        self.offset = 0
        self.nbytes = t.nbytes
        self.view: np.ndarray | None = None


class _Guard:
    """Installed on ``ENGINE.guard`` while the user's function runs."""

    def __init__(self, recorder: "Recorder"):
        self.recorder = recorder

    def on_upload(self, site: str) -> None:
        raise CaptureError(
            f"capture: a host→device upload ({site}) at {user_site(1)} happened while recording; its value "
            f"would be frozen into every replay. Pass the data as an argument of the captured function "
            f"(or create the tensor outside it); Python numbers are fine (they become op parameters).")

    def on_download(self, site: str) -> None:
        raise CaptureError(
            f"capture: a value was read back to the host ({site}) at {user_site(1)} while recording; a replay "
            f"never returns to Python, so Python control flow on tensor values cannot be captured. "
            f"Return the value as an output instead, or branch outside the captured function.")

    def on_drain(self, reason: str) -> None:
        what = {"read": "a value read back to the host (it forces a compute)",
                "eager": "an eager op (graph mode was turned off inside the function)",
                "check": "a check-mode compute", "graph_mode_off": "graph mode turned off",
                "inplace": "an in-place write (it computes the queue first)"}.get(reason, f"a compute ({reason})")
        raise CaptureError(
            f"capture: {what} at {user_site(1)} while recording; nothing may compute before the recording "
            f"ends, since that work would be frozen into every replay. Keep the captured function free of "
            f"host reads, eager blocks and in-place writes (the optimizer update belongs to capture_step).")

    def on_leaf(self, a, leaf: int) -> None:
        self.recorder._on_leaf(a, leaf)


# ---------------------------------------------------------------------------- graphs
class ReplayGraph(OwnedGraph):
    """One recorded ggml graph with its own scheduler (allocated once, computed per replay)."""

    def __init__(self, device: Device, ctx_list: list[int], keep: list, roots_nodes: list[int], effects: list[int],
                 n_tensors: int, threads: int, max_work: float, label: str):
        super().__init__(device, ctx_list, n_tensors, max_work)
        self.keep = keep
        self.threads = threads
        self.label = label
        self.expand(roots_nodes)
        self.expand(effects)

    def allocate(self) -> None:
        try:
            super().allocate()
        except MemoryError as e:
            raise MemoryError(f"capture: could not allocate the {self.label} graph's intermediates: {e}") from None

    def compute(self) -> None:  # type: ignore[override]
        if self.n_nodes == 0:
            return
        status = super().compute(get_num_threads() or self.threads)
        if status != 0:
            raise RuntimeError(f"capture: the recorded {self.label} graph failed to compute (ggml status {status})")
        COUNTERS.compute("capture", self.n_nodes)

    def free(self) -> None:
        super().free()
        self.keep = []


# ---------------------------------------------------------------------------- recorder
class _PerThreadCurrent(type):
    """``Recorder.current`` is the calling thread's active recorder: recordings on several threads
    at once never see each other (like ``ENGINE.guard``, which is per thread too)."""

    _tls = threading.local()

    @property
    def current(cls) -> "Recorder | None":
        return getattr(_PerThreadCurrent._tls, "recorder", None)

    @current.setter
    def current(cls, recorder: "Recorder | None") -> None:
        _PerThreadCurrent._tls.recorder = recorder


class Recorder(metaclass=_PerThreadCurrent):
    """Builds a :class:`Recording`; active (``Recorder.current``, per thread) while the user's function runs."""

    def __init__(self, device: Device):
        self.device = device
        self.slots: list[InputSlot] = []
        self._slot_of: dict[int, InputSlot] = {}  # id of the slot tensor's placeholder storage → slot
        self.refs: list[tuple[weakref.ref, Any, tuple]] = []
        self._ref_ids: set[int] = set()
        self._owned_ids: set[int] = set()  # tensors living in this recording's own output blocks
        self.graphs: list[ReplayGraph] = []
        self.out_blocks: list[Storage] = []
        self.index_checks: list = []  # (offset in the first graph's download, IndexCheck)
        self._settings = []
        self._prev_guard = None
        self.active = False

    # -- lifecycle
    def __enter__(self) -> "Recorder":
        if ENGINE.guard is not None or Recorder.current is not None:
            raise CaptureError("capture: a captured function cannot be called while another one is recording")
        ENGINE.drain("capture")
        self._prev_guard = ENGINE.guard
        ENGINE.guard = _Guard(self)
        _route_noise(True)
        Recorder.current = self
        self.active = True
        self._settings = [modes.graph_mode(True, check=False)]
        return self

    def pause(self) -> None:
        """Stop guarding (the recording's own first run computes and transfers)."""
        if not self.active:
            return
        self.active = False
        # Restoring graph mode would drain: the queue must be empty here (taken by the recording).
        while self._settings:
            self._settings.pop().__exit__(None, None, None)
        ENGINE.guard = self._prev_guard
        _route_noise(False)
        Recorder.current = None

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()
        else:
            self.pause()

    def abort(self) -> None:
        """Undo a failed recording: drop the queue, release everything, leave the session usable."""
        ENGINE.guard = None  # the discard below must not trip the guard
        while ENGINE._hold > 0 and getattr(self, "_held", 0) > 0:
            ENGINE._hold -= 1
            self._held -= 1
        ENGINE._discard()
        self.pause()
        ENGINE.guard = self._prev_guard
        for g in self.graphs:
            g.free()
        self.graphs = []

    # -- inputs
    def input(self, kind: str, name: str, shape: tuple, dtype: DType, noise: str | None = None) -> Tensor:
        slot = InputSlot(kind, name, tuple(shape), dtype, self.device, noise)
        self.slots.append(slot)
        self._slot_of[id(slot.tensor._storage)] = slot
        return slot.tensor

    def noise_input(self, kind: str, shape: tuple, device: Device) -> Tensor:
        if device is not self.device:
            raise CaptureError(f"capture: noise requested on {device.name} inside a recording on {self.device.name}")
        n = sum(1 for s in self.slots if s.kind == "noise")
        return self.input("noise", f"noise[{n}] ({kind}) at {user_site(2)}", shape, float32, noise=kind)

    def noise_request(self, req) -> Tensor:
        """Hook for ``ggmlgrad.distributions.noise.draw_noise``: its request's ``sample()`` refills the input."""
        if req.device is not self.device:
            raise CaptureError(f"capture: noise requested on {req.device.name} inside a recording on "
                               f"{self.device.name}")
        n = sum(1 for s in self.slots if s.kind == "noise")
        return self.input("noise", f"noise[{n}] ({req.kind}) at {user_site(2)}", tuple(req.shape), float32,
                          noise=req.sample)

    def _on_leaf(self, a, leaf: int) -> None:
        # By storage, not tensor: an alias of an input (x.detach()) is the input, rebound per replay too.
        slot = self._slot_of.get(id(a._storage))
        if slot is not None and slot.tensor._storage is a._storage:
            if a.shape != slot.shape or a.dtype is not slot.dtype:
                raise CaptureError(f"capture: a {a.dtype.name} {a.shape} alias of the {slot.dtype.name} "
                                   f"{slot.shape} input {slot.name} is not supported")
            slot.leaves.append(leaf)
            return
        i = id(a)
        if i in self._owned_ids or i in self._ref_ids:
            return
        self._ref_ids.add(i)
        self.refs.append((weakref.ref(a), a._storage, a.shape))

    def hold(self):
        """Context in which the optimizer may queue in-place writes (ENGINE.queue_write)."""
        rec = self

        class _Held:
            def __enter__(self_):
                ENGINE._hold += 1
                rec._held = getattr(rec, "_held", 0) + 1

            def __exit__(self_, *exc):
                if rec._held > 0:
                    ENGINE._hold -= 1
                    rec._held -= 1
        return _Held()

    # -- graphs
    def take_graph(self, label: str, downloads: list[Tensor], device_outputs: list[Tensor]) -> tuple:
        """Turn everything queued since the last take into a :class:`ReplayGraph`.

        ``downloads`` come back to the host after each replay (packed first in the output
        block); ``device_outputs`` stay on the device (e.g. gradients read by the next graph).
        Returns (graph, [(offset, tensor) for downloads], download_bytes, device_slices).
        """
        # Index checks queued in this graph are downloaded with the outputs, verified per replay.
        checks = _checks.take_pending(ENGINE)
        n_user_dl = len(downloads)
        downloads = list(downloads) + [c.tensor for c in checks]
        outs: list[Tensor] = []
        seen: dict[int, int] = {}
        order: list[int] = []
        for t in list(downloads) + list(device_outputs):
            if id(t) not in seen:
                if t._status != PENDING:
                    # A leaf (an input or a parameter returned as is) needs a node of its own.
                    with no_grad():
                        t2 = op.capture_copy(t)
                    seen[id(t)] = len(outs)
                    outs.append(t2)
                else:
                    seen[id(t)] = len(outs)
                    outs.append(t)
            order.append(seen[id(t)])
        n_dl = len(downloads)
        state = ENGINE.take_for_capture()
        roots, effects, ctx_list, labels, device, work, max_work, keep = state
        device = device or self.device
        # Output block: downloaded outputs first (one contiguous read), then device-only ones.
        dl_idx = sorted({order[i] for i in range(n_dl)})
        dev_idx = [j for j in range(len(outs)) if j not in set(dl_idx)]
        offsets = {}
        pos = 0
        for j in dl_idx:
            offsets[j] = pos
            pos = _align(pos + outs[j].nbytes)
        dl_bytes = pos
        for j in dev_idx:
            offsets[j] = pos
            pos = _align(pos + outs[j].nbytes)
        block = Storage(self.device, max(pos, 1))
        self.out_blocks.append(block)
        out_nodes = []
        for j, t in enumerate(outs):
            if t.numel_ == 0:
                continue  # an empty result never becomes a node (ggml cannot hold 0-byte graph tensors)
            node = t._node
            lib.backend_tensor_alloc(block.buffer, node, block.data + offsets[j])
            out_nodes.append(node)
        out_ids = {id(t) for t in outs}
        for ref, _node in roots:
            a = ref()
            if a is not None and a._status == PENDING and id(a) not in out_ids:
                a._status, a._node = FAILED, 0
                a._error = ("ggmlgrad: this tensor was computed inside a capture recording and is not one of "
                            "its outputs, so it has no value; return it from the captured function")
        for j, t in enumerate(outs):
            t._status, t._node = COMPUTED, 0
            t._storage = StorageSlice(block, offsets[j], t.nbytes)
            self._owned_ids.add(id(t))
        n_tensors = sum(lib.used_mem(c) for c in ctx_list) // _OVERHEAD + 16
        # The per-graph policy plays safe for one-off drains; a replayed graph can afford to
        # measure (ReplayGraph's ThreadTuner) when its heaviest node is large enough.
        graph = ReplayGraph(device, ctx_list, keep, out_nodes, effects, n_tensors,
                            choose_threads(work, max_work), max_work, label)
        self.graphs.append(graph)
        downloads_at = [(offsets[order[i]], outs[order[i]]) for i in range(n_user_dl)]
        if checks:
            if self.graphs[0] is not graph:  # only the first graph's outputs are downloaded
                raise CaptureError(f"capture: index checks in the {label} graph are not supported")
            self.index_checks = [(offsets[order[n_user_dl + i]], c) for i, c in enumerate(checks)]
            for c in checks:
                c.tensor = None  # its value is read from the download
        device_outs = [outs[order[i]] for i in range(n_dl, len(order))]
        return graph, downloads_at, dl_bytes, block, device_outs

    def finish(self) -> "Inputs":
        """Pack every input into one device block, point the leaves at it, allocate the graphs."""
        inputs = Inputs(self.device, self.slots)
        for slot in self.slots:
            s = StorageSlice(inputs.block, slot.offset, slot.nbytes)
            for leaf in slot.leaves:
                write_ptr_field(leaf, "data", s.data)
                write_ptr_field(leaf, "buffer", s.buffer)
            placeholder = slot.tensor._storage
            slot.tensor._storage = s
            for g in self.graphs:
                g.keep = [k for k in g.keep if k is not placeholder]
        for g in self.graphs:
            g.allocate()
        return inputs


class Inputs:
    """The packed input block (device) and its host staging twin."""

    def __init__(self, device: Device, slots: list[InputSlot]):
        pos = 0
        for slot in slots:
            slot.offset = pos
            pos = _align(pos + slot.nbytes)
        self.nbytes = pos
        self.block = Storage(device, max(pos, 1))
        self.stage = np.zeros(max(pos, 1), np.uint8)
        # In host memory the block itself is the record of what was sent: the upload is one copy
        # into it, and no second copy is kept.
        self.host = device.is_host
        self.sent = host_bytes(self.block.data, max(pos, 1)) if self.host else np.zeros(max(pos, 1), np.uint8)
        self.stage_addr = self.stage.ctypes.data
        self.valid = False  # nothing sent yet
        self.slots = slots
        # Slots start on 64-byte boundaries and padding stays zero in both copies, so each slot's
        # span up to the next boundary compares as one block of bytes (memcmp).
        sent_addr = self.sent.ctypes.data
        self._spans = []
        for slot in slots:
            np_dt = slot.dtype.np_dtype
            slot.view = self.stage[slot.offset:slot.offset + slot.nbytes].view(np_dt).reshape(slot.shape)
            a, b = slot.offset, _align(slot.offset + slot.nbytes)
            self._spans.append((a, b, self.stage_addr + a, sent_addr + a))
        self.args = [s for s in slots if s.kind == "arg"]
        self.noise = [s for s in slots if s.kind == "noise"]
        self.hparams = [s for s in slots if s.kind == "hparam"]
        self.clip = [s for s in slots if s.kind == "clip"]

    def upload(self) -> None:
        """Send the span of slots whose bytes differ from the last upload (one transfer, or none)."""
        lo = hi = -1
        stage, sent = self.stage, self.sent
        if not self.valid:
            lo, hi = 0, self.nbytes
        else:
            for a, b, new, old in self._spans:
                if b > a and not host_equal(new, old, b - a):
                    if lo < 0:
                        lo = a
                    hi = b
        if lo < 0 or hi <= lo:
            return
        if _FAULTS:
            _fault("upload")
        if not self.host:
            self.block.write(self.stage_addr + lo, hi - lo, lo)
        sent[lo:hi] = stage[lo:hi]  # in host memory, this is the upload
        self.valid = True
        COUNTERS.uploads["capture"] += 1
        COUNTERS.upload_bytes["capture"] += hi - lo


def fill_noise(slots: list[InputSlot]) -> None:
    """Refill every noise input from the seeded generator, in recording order."""
    for s in slots:
        if callable(s.noise):
            s.view[...] = s.noise()
        else:
            _random.draw_into(s.noise, s.view, generator())


# Noise drawn while recording becomes an input of the recording. The hooks that route it are
# process-wide, so while any thread records they dispatch per thread: to that thread's recorder,
# or, on a thread that is not recording, to what was there before (ordinary draws).
_ROUTE_LOCK = threading.Lock()
_route = {"active": 0, "source": None, "hook": None}


def _route_noise(on: bool) -> None:
    """Count a recording starting (True) or ending: the first installs the per-thread hooks, the last
    restores the previous ones."""
    with _ROUTE_LOCK:
        if on:
            if _route["active"] == 0:
                _route["source"] = _random._capture_source
                _random._capture_source = _thread_noise_source
                _route["hook"] = _set_dist_hook(_thread_noise_hook)
            _route["active"] += 1
        else:
            _route["active"] -= 1
            if _route["active"] == 0:
                _random._capture_source = _route["source"]
                _set_dist_hook(_route["hook"])


def _thread_noise_source(kind: str, shape: tuple, device: Device) -> Tensor:
    rec = Recorder.current
    if rec is not None:
        return rec.noise_input(kind, shape, device)
    prev = _route["source"]
    if prev is not None:
        return prev(kind, shape, device)
    arr = np.empty(shape, np.float32)  # what gg noise draws with no recording anywhere
    _random.draw_into(kind, arr)
    return _random._from_numpy(arr, float32, device, False)


def _thread_noise_hook(req):
    rec = Recorder.current
    if rec is not None:
        return rec.noise_request(req)
    prev = _route["hook"]
    return prev(req) if prev is not None else None


def _set_dist_hook(hook):
    """Install ``hook`` on the distributions' noise helper (if present); returns the previous hook."""
    try:
        from ..distributions.noise import set_noise_hook
    except ImportError:
        return None
    return set_noise_hook(hook)


def put_arg(slot: InputSlot, value) -> None:
    """Write one user argument (array-like or Tensor) into its staging slot."""
    if isinstance(value, Tensor):
        if value._status != COMPUTED:
            ENGINE.drain("read")
            if value._status != COMPUTED:
                raise CaptureError(f"capture: argument {slot.name} has no value (its graph failed)")
        if value.dtype is slot.dtype:
            value._storage.read(slot.view.ctypes.data, slot.nbytes)
            COUNTERS.downloads["capture input"] += 1
            COUNTERS.download_bytes["capture input"] += slot.nbytes
            return
        value = value.numpy()
    if slot.dtype is bfloat16:
        slot.view[...] = f32_to_bf16(np.asarray(value, np.float32)).reshape(slot.shape)
    else:
        np.copyto(slot.view, value, casting="unsafe")


class Download:
    """The one read of a replay: the downloaded outputs' span of the output block, copied out fresh."""

    def __init__(self, block: Storage, nbytes: int):
        self.block = block
        self.nbytes = nbytes
        self.buf = np.zeros(max(nbytes, 1), np.uint8)
        self.addr = self.buf.ctypes.data

    def __call__(self) -> np.ndarray:
        n = self.nbytes
        if n:
            self.block.read(self.addr, n)
        COUNTERS.downloads["capture"] += 1
        COUNTERS.download_bytes["capture"] += n
        return self.buf.copy()  # the caller owns it: the next replay reads into self.buf again


def unpack(raw: np.ndarray, offset: int, t: Tensor) -> np.ndarray:
    n = t.nbytes
    a = raw[offset:offset + n].view(t.dtype.np_dtype).reshape(t.shape)
    if t.dtype is bfloat16:
        return bf16_to_f32(a)
    if t.dtype.is_bool:
        return a != 0   # float32 0/1 storage → np.bool_
    return a
