"""One recording: the ggml graph(s) built by running a function once, and their replay.

Recording (see :class:`Recorder`): the queue is drained; every input becomes a fresh
tensor; the recorder pushes an execution context (``engine.context``) whose observer turns
uploads, read-backs and eager computes into ``CaptureError`` and whose noise source makes
every noise draw an input; the function runs in graph mode so its ops only queue nodes; then
the queue is taken over (``ENGINE.take_for_capture``) instead of computed. The
recording owns those node contexts, one packed device block for all inputs and one
for all outputs, and its own ``ggml_backend_sched`` per graph, allocated once, so a
replay is: pack inputs on the host, ONE upload of the changed span, one
``sched_graph_compute`` per graph, ONE download, copied out. In-place writes of the function are
rebindings while it records, made persistent by the graph's last nodes (see :mod:`.writes`).
"""
from __future__ import annotations

import weakref
from typing import Any, Callable

import numpy as np

from .._ggml import lib
from .._ggml.nodes import ChangedSpans, HostArray, LeafBinding, bind_node, host_view
from ..engine import (COMPUTED, ENGINE, PENDING, COUNTERS, CaptureError, DType, bfloat16, float32,
                      bind, fail, modes, user_site)
from ..engine import checks as _checks, context
from ..engine.observer import Observer
from ..engine.dtypes import bf16_to_f32, f32_to_bf16
from ..engine.executor import ComputeFailed
from ..engine.plans import OwnedGraph
from ..ops import op
from ..runtime import Device, Storage, choose_threads, get_num_threads
from ..runtime.faults import ARMED as _FAULTS, hit as _fault
from ..tensor import no_grad
from ..tensor.tensor import Tensor
from . import ops as _ops  # noqa: F401  (registers the capture ops)
from .writes import RecordedWrites

_ALIGN = 64
_OVERHEAD = lib.tensor_overhead()  # bytes of one tensor header in a node context


_NOT_OUTPUT = ("ggmlgrad: this tensor was computed inside a capture recording and is not one of its outputs, "
               "so it has no value; return it from the captured function")


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
    or the clip limit. Its value is written into the host staging block before each upload (in host
    memory: into the block the graphs read, or, a tensor argument, read where it lies: ``binding``)."""

    __slots__ = ("kind", "name", "shape", "dtype", "tensor", "leaves", "offset", "nbytes", "view", "sent",
                 "noise", "host", "binding")

    def __init__(self, kind: str, name: str, shape: tuple, dtype: DType, device: Device, noise=None):
        self.kind = kind
        self.name = name
        self.shape = shape
        self.dtype = dtype
        self.noise = noise
        t = Tensor._blank(shape, dtype, device)
        bind(t, Storage(device, max(t.nbytes, 1)))  # placeholder until the packed block exists
        self.tensor = t
        self.leaves: list[int] = []
        self.offset = 0
        self.nbytes = t.nbytes
        self.view: np.ndarray | None = None
        self.host: HostArray | None = None  # the view, for copies from a tensor argument
        self.binding: LeafBinding | None = None  # host memory: the leaves, pointed at a tensor argument's memory


class _Guard(Observer):
    """The observer of a recording's context while the user's function runs."""

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
            f"host reads and eager blocks (in-place ops are recorded; the optimizer update belongs to "
            f"capture_step).")

    def on_leaf(self, a, leaf: int) -> int | None:
        return self.recorder._on_leaf(a, leaf)


class _Held:
    """``Recorder.hold()``: the engine queues without draining (undone by ``abort`` if left open)."""

    def __init__(self, recorder: "Recorder"):
        self.recorder = recorder

    def __enter__(self) -> None:
        ENGINE.hold()
        self.recorder._held += 1

    def __exit__(self, *exc) -> None:
        if self.recorder._held > 0:
            ENGINE.release()
            self.recorder._held -= 1


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

    def bind(self) -> None:
        """Nothing to point anywhere: a recording's leaves are its input slots, written in place."""

    def compute(self) -> None:
        """Compute once, through the engine's one compute call (``Drainer.run``)."""
        if self.n_nodes == 0:
            return
        try:
            ENGINE.run(self, COUNTERS, "capture", get_num_threads() or self.threads)
        except ComputeFailed as e:
            raise RuntimeError(f"capture: the recorded {self.label} graph failed to compute (ggml status {e.status})") \
                from None

    def free(self) -> None:
        super().free()
        self.keep = []


# ---------------------------------------------------------------------------- recorder
class _CurrentRecorder(type):
    """``Recorder.current`` is the active recorder of the calling thread's (or task's) execution
    context: recordings on several threads at once never see each other."""

    @property
    def current(cls) -> "Recorder | None":
        return context.current().recorder


class Recorder(metaclass=_CurrentRecorder):
    """Builds a :class:`Recording`; active (``Recorder.current``, per context) while the user's function runs."""

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
        self._token = None  # of the execution context this recorder pushed
        self._held = 0      # ENGINE.hold() calls of hold() not yet released
        self.active = False
        self.writes = RecordedWrites(self)  # in-place writes of the function (capture/writes.py)
        self.replay_writes = None           # what a replay does for them (set by finish)

    # -- lifecycle
    def __enter__(self) -> "Recorder":
        ctx = context.current()
        if ctx.observer is not None or ctx.recorder is not None:
            raise CaptureError("capture: a captured function cannot be called while another one is recording")
        ENGINE.drain("capture")
        # Graph mode (ops only queue), the guard, the noise source: one context, popped on exit.
        self._token = context.push(graph_set=True, check_set=False, observer=_Guard(self),
                                   noise=self.noise_request, recorder=self)
        self.active = True
        return self

    def pause(self) -> None:
        """Stop guarding (the recording's own first run computes and transfers)."""
        if not self.active:
            return
        self.active = False
        token, self._token = self._token, None
        context.pop(token)  # modes, observer, noise source and Recorder.current as they were
        if not modes.graph_enabled() and len(ENGINE):
            ENGINE.drain("graph_mode_off")  # as leaving graph mode would (the recording took its queue)

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()
        else:
            self.pause()

    def abort(self) -> None:
        """Undo a failed recording: drop the queue, release everything, leave the session usable."""
        while self._held > 0:
            ENGINE.release()
            self._held -= 1
        ENGINE.discard()
        self.pause()
        for g in self.graphs:
            g.free()
        self.graphs = []

    # -- inputs
    def input(self, kind: str, name: str, shape: tuple, dtype: DType, noise: str | None = None) -> Tensor:
        slot = InputSlot(kind, name, tuple(shape), dtype, self.device, noise)
        self.slots.append(slot)
        self._slot_of[id(slot.tensor._storage)] = slot
        return slot.tensor

    def noise_request(self, req) -> Tensor:
        """The recording context's noise source (``tensor.random.draw``): the request becomes an input,
        refilled by the request at every replay."""
        if req.device is not self.device:
            raise CaptureError(f"capture: noise requested on {req.device.name} inside a recording on "
                               f"{self.device.name}")
        n = sum(1 for s in self.slots if s.kind == "noise")
        # a draw (refilled from the generator per replay) or a recorded constant (filled once): req.fill
        return self.input("noise", f"noise[{n}] ({req.kind}) at {user_site(2)}", tuple(req.shape),
                          getattr(req, "dtype", float32), noise=req)

    def _on_leaf(self, a, leaf: int) -> int | None:
        # By storage, not tensor: an alias of an input (x.detach()) is the input, rebound per replay too.
        slot = self._slot_of.get(id(a._storage))
        if slot is not None and slot.tensor._storage is a._storage:
            # a bool input read as float32 0/1 (its logical ops do) is the same memory: same ggml type
            if a.shape != slot.shape or a.dtype.ggml_type != slot.dtype.ggml_type:
                raise CaptureError(f"capture: a {a.dtype.name} {a.shape} alias of the {slot.dtype.name} "
                                   f"{slot.shape} input {slot.name} is not supported")
            slot.leaves.append(leaf)
        else:
            i = id(a)
            if i not in self._owned_ids and i not in self._ref_ids:
                self._ref_ids.add(i)
                self.refs.append((weakref.ref(a), a._storage, a.shape))
        return self.writes.on_leaf(a, leaf)  # memory the function wrote: its new value's node

    def resolve_refs(self, owners: Callable[[], list]) -> None:
        """Point references whose tensor is gone (a temporary alias such as ``p.data`` or ``p.detach()``)
        at a live tensor of ``owners()`` with the same memory, so that the recording does not look stale
        at every call; references without one stay (the next call records again, as before)."""
        if all(r() is not None for r, _, _ in self.refs):
            return
        by_storage = {}
        for t in owners():
            if isinstance(t, Tensor) and t._storage is not None:
                by_storage.setdefault(id(t._storage), t)
        live = {id(s) for r, s, _ in self.refs if r() is not None}
        refs = []
        for r, s, shape in self.refs:
            if r() is None:
                owner = by_storage.get(id(s))
                if owner is not None and owner.shape == shape:
                    if id(s) in live:
                        continue  # a live reference already follows this memory
                    live.add(id(s))
                    r = weakref.ref(owner)
            refs.append((r, s, shape))
        self.refs = refs

    def check_grads(self) -> None:
        """Refuse ``.grad`` of a tensor made outside the function set by a backward inside it: eager mode
        accumulates into ``.grad`` call after call, a replay would recompute it from nothing."""
        for r, _, shape in self.refs:
            t = r()
            g = getattr(t, "grad", None)
            if g is not None and (id(g) in self._owned_ids or g._error is _NOT_OUTPUT):
                raise CaptureError(
                    f"capture: backward() inside the captured function set .grad of a tensor {shape} made outside "
                    f"it; a replay cannot accumulate into .grad as eager mode does. Use gg.capture_step(loss_fn, "
                    f"optimizer) for training steps, or make the tensor an argument of the function")

    def write(self, target: Tensor, value: Tensor, name: str, grad_on: bool) -> None:
        """``target ← value`` inside the recording (an in-place write called with grad mode ``grad_on``;
        see capture/writes.py)."""
        self.writes.write(target, value, name, grad_on)

    def hold(self):
        """Context in which the optimizer may queue in-place writes (``ENGINE.record_writes``) without a drain."""
        return _Held(self)

    # -- graphs
    def take_graph(self, label: str, downloads: list[Tensor], device_outputs: list[Tensor]) -> tuple:
        """Turn everything queued since the last take into a :class:`ReplayGraph`.

        ``downloads`` come back to the host after each replay (packed first in the output
        block); ``device_outputs`` stay on the device (e.g. gradients read by the next graph).
        Returns (graph, [(offset, tensor) for downloads], download_bytes, device_slices).
        """
        # Index checks queued in this graph are downloaded with the outputs, verified per replay.
        checks = _checks.take_pending(ENGINE)
        # A leaf output (an input or an outside tensor returned as is) needs a node of its own, made
        # before the writes close: it reads what the function left (a written value's node).
        copies: dict[int, Tensor] = {}
        for t in list(downloads) + list(device_outputs) + [c.tensor for c in checks]:
            if t._status != PENDING and id(t) not in copies:
                with no_grad():
                    copies[id(t)] = op.capture_copy(t)
        arg_writes = self.writes.close_graph()  # final copies queued; written arguments come back
        n_user_dl = len(downloads)
        n_args_dl = n_user_dl + len(arg_writes)
        downloads = list(downloads) + [w.value for w in arg_writes] + [c.tensor for c in checks]
        outs: list[Tensor] = []
        seen: dict[int, int] = {}
        by_node: dict[int, int] = {}
        order: list[int] = []
        for t in list(downloads) + list(device_outputs):
            if id(t) not in seen and t._status == PENDING:
                j = by_node.get(int(t._node))  # an alias of an output (x.detach()): the same node, one slot
                if j is not None:
                    seen[id(t)] = j
            if id(t) not in seen:
                if t._status != PENDING:
                    seen[id(t)] = len(outs)
                    outs.append(copies[id(t)])
                else:
                    seen[id(t)] = by_node[int(t._node)] = len(outs)
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
                fail(a, _NOT_OUTPUT)
        for j, t in enumerate(outs):
            bind(t, StorageSlice(block, offsets[j], t.nbytes))
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
            self.index_checks = [(offsets[order[n_args_dl + i]], c) for i, c in enumerate(checks)]
            for c in checks:
                c.tensor = None  # its value is read from the download
        for i, w in enumerate(arg_writes):
            self.writes.writebacks.append((w.slot, offsets[order[n_user_dl + i]], outs[order[n_user_dl + i]]))
        device_outs = [outs[order[i]] for i in range(n_dl, len(order))]
        return graph, downloads_at, dl_bytes, block, device_outs

    def finish(self) -> "Inputs":
        """Pack every input into one device block, point the leaves at it, allocate the graphs."""
        inputs = Inputs(self.device, self.slots)
        for slot in self.slots:
            s = StorageSlice(inputs.block, slot.offset, slot.nbytes)
            for leaf in slot.leaves:
                bind_node(leaf, s.data, s.buffer)
            placeholder = slot.tensor._storage
            bind(slot.tensor, s)
            for g in self.graphs:
                g.keep = [k for k in g.keep if k is not placeholder]
        for g in self.graphs:
            g.allocate()
        self.replay_writes = self.writes.finish(inputs.args, {id(s) for _, s, _ in self.refs})
        if inputs.host and self.replay_writes is None:  # nothing writes an argument: its memory can be read in place
            graphs = [(g.graph, g.n_nodes) for g in self.graphs]
            for slot in inputs.args:
                home = slot.tensor._storage
                slot.binding = LeafBinding(slot.leaves, graphs, home.data, home.buffer)
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
        # In host memory the inputs are written straight into the block the graphs read (comparing
        # with what was sent would cost as much as writing); elsewhere they are staged on the host,
        # compared with the last upload, and only the span that changed is sent.
        self.host = device.is_host
        if self.host:
            self.stage = host_view(self.block, max(pos, 1))
            self.stage[:] = 0
        else:
            self.stage = np.zeros(max(pos, 1), np.uint8)
            self.sent = np.zeros(max(pos, 1), np.uint8)
        self.valid = False  # nothing sent yet
        self.slots = slots
        self.written_bytes = 0  # host memory: bytes of arguments written in by this replay (the upload's count)
        # Slots start on 64-byte boundaries and padding stays zero in both copies, so each slot's
        # span up to the next boundary compares as one block of bytes (memcmp).
        spans = []
        for slot in slots:
            np_dt = slot.dtype.np_dtype
            slot.view = self.stage[slot.offset:slot.offset + slot.nbytes].view(np_dt).reshape(slot.shape)
            slot.host = HostArray(slot.view)
            spans.append((slot.offset, _align(slot.offset + slot.nbytes)))
        if not self.host:
            self._changed = ChangedSpans(self.stage, self.sent, spans)
            self._stage_bytes, self._sent_bytes = memoryview(self.stage), memoryview(self.sent)  # slice copies
            self._stage_host = HostArray(self.stage)
        self.args = [s for s in slots if s.kind == "arg"]
        self.noise = [s for s in slots if s.kind == "noise"]
        self.hparams = [s for s in slots if s.kind == "hparam"]
        self.clip = [s for s in slots if s.kind == "clip"]

    def upload(self) -> None:
        """Send the span of slots whose bytes differ from the last upload (one transfer, or none).
        In host memory the inputs are in place already: this counts the arguments written in."""
        if self.host:
            if _FAULTS:
                _fault("upload")
            n, self.written_bytes = self.written_bytes, 0
            if n:
                COUNTERS.uploads["capture"] += 1
                COUNTERS.upload_bytes["capture"] += n
            return
        lo, hi = self._changed.changed() if self.valid else (0, self.nbytes)
        if lo < 0 or hi <= lo:
            return
        if _FAULTS:
            _fault("upload")
        self._stage_host.write_span(self.block, lo, hi)
        self._sent_bytes[lo:hi] = self._stage_bytes[lo:hi]
        self.valid = True
        COUNTERS.uploads["capture"] += 1
        COUNTERS.upload_bytes["capture"] += hi - lo


def fill_noise(slots: list[InputSlot]) -> None:
    """Refill every noise input from the seeded generator, in recording order."""
    for s in slots:
        s.noise.fill(s.view)


def put_arg(slot: InputSlot, value) -> None:
    """Write one user argument (array-like or Tensor) into its staging slot."""
    if isinstance(value, Tensor):
        if value._status != COMPUTED:
            ENGINE.drain("read")
            if value._status != COMPUTED:
                raise CaptureError(f"capture: argument {slot.name} has no value (its graph failed)")
        if value.dtype is slot.dtype:
            slot.host.read_from(value._storage)
            COUNTERS.downloads["capture input"] += 1
            COUNTERS.download_bytes["capture input"] += slot.nbytes
            return
        value = value.detach().numpy()
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
        self.span = HostArray(self.buf[:nbytes])  # what one replay reads

    def __call__(self) -> np.ndarray:
        n = self.nbytes
        self.span.read_from(self.block)
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
