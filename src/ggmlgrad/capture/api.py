"""``gg.capture`` and ``gg.capture_step``: record once per signature, replay as upload → compute(s) → download.

>>> import numpy as np, ggmlgrad as gg
>>> w = gg.tensor(np.ones((3, 2), np.float32))
>>> @gg.capture
... def f(x):
...     return (x @ w).relu()
>>> f(np.ones((4, 3), np.float32)).tolist()[0]   # records, then computes
[3.0, 3.0]
>>> f(np.full((4, 3), 2.0, np.float32)).tolist()[0]   # replays: 1 upload, 1 compute, 1 download
[6.0, 6.0]
"""
from __future__ import annotations

import functools
import inspect
import logging
import os
import threading
import weakref
from collections import OrderedDict
from typing import Callable

import numpy as np

from .._ggml import host_copy, lib
from .._ggml.nodes import host_view
from ..engine import COMPUTED, COUNTERS, ENGINE, CaptureError, bfloat16, context, dtypes, float32, int32, modes
from ..engine.checks import verify_replay
from ..runtime import Device, StridedAlias
from ..runtime.faults import ARMED as _FAULTS
from ..tensor import Tensor, no_grad
from ..nn.module import WATCH, Module
from .recording import Download, Recorder, ReplayGraph, fill_noise, put_arg, unpack
from .short_path import ShortPath
from .state import Structure, observing, training_flag, watch
from .step_update import StepUpdate, check_norm, clip_grads, finite_norm, loss_and_grads

log = logging.getLogger("ggmlgrad.capture")

_ARRAY = "array"
_CONST = "const"


# ---------------------------------------------------------------------------- argument trees
def _describe(x) -> tuple:
    """Signature entry for one argument leaf."""
    if isinstance(x, np.ndarray):
        return (_ARRAY, x.shape, _slot_dtype(x.dtype).name)
    if isinstance(x, Tensor):
        return (_ARRAY, x.shape, x.dtype.name)
    if isinstance(x, (bool, int, float, str, type(None), np.generic)) and not isinstance(x, np.ndarray):
        return (_CONST, type(x).__name__, x if not isinstance(x, np.generic) else x.item())
    if isinstance(x, (tuple, list)):
        return (type(x).__name__, tuple(_describe(v) for v in x))
    if isinstance(x, dict):
        return ("dict", tuple((k, _describe(v)) for k, v in x.items()))
    # Any other object (a module, a config): a constant of the recording, by identity.
    return ("object", type(x).__name__, id(x))


_DT = {np.dtype(np.float32): "float32", np.dtype(np.int32): "int32", np.dtype(np.float64): "float32",
       np.dtype(np.int64): "int32"}


def _slot_dtype(np_dtype: np.dtype):
    if np_dtype == np.float16:
        return dtypes.float16
    if np_dtype.kind in "iu":
        return int32
    if np_dtype.kind == "b":
        return dtypes.bool_   # as gg.tensor(a) gives: a mask stays a mask (float32 0/1 storage)
    if np_dtype.kind == "f":
        return float32
    raise TypeError(f"capture: unsupported array dtype {np_dtype}")


def _leaves(x, out: list) -> None:
    """Array leaves in signature order."""
    if isinstance(x, (np.ndarray, Tensor)):
        out.append(x)
    elif isinstance(x, (tuple, list)):
        for v in x:
            _leaves(v, out)
    elif isinstance(x, dict):
        for v in x.values():
            _leaves(v, out)


def _rebuild(x, tensors):
    """``x`` with every array leaf replaced by the next tensor from ``tensors``."""
    if isinstance(x, (np.ndarray, Tensor)):
        return next(tensors)
    if isinstance(x, tuple):
        return tuple(_rebuild(v, tensors) for v in x)
    if isinstance(x, list):
        return [_rebuild(v, tensors) for v in x]
    if isinstance(x, dict):
        return {k: _rebuild(v, tensors) for k, v in x.items()}
    return x


def _leaf_names(x, prefix: str, out: list) -> None:
    if isinstance(x, (np.ndarray, Tensor)):
        out.append(prefix)
    elif isinstance(x, (tuple, list)):
        for i, v in enumerate(x):
            _leaf_names(v, f"{prefix}[{i}]", out)
    elif isinstance(x, dict):
        for k, v in x.items():
            _leaf_names(v, f"{prefix}[{k!r}]", out)


# ---------------------------------------------------------------------------- output trees
class _OutSpec:
    """Structure of what the function returned; leaves are output indices."""

    def __init__(self, value, tensors: list):
        self.tree = self._flatten(value, tensors)
        # A function returning one tensor: its output is the result as is (no tree walk per replay).
        self.single = self.tree[1] if self.tree[0] == "T" else None

    def _flatten(self, x, tensors):
        if isinstance(x, Tensor):
            tensors.append(x)
            return ("T", len(tensors) - 1)
        if isinstance(x, tuple) and hasattr(x, "_fields"):
            return ("namedtuple", (type(x), [self._flatten(v, tensors) for v in x]))
        if isinstance(x, tuple):
            return ("tuple", [self._flatten(v, tensors) for v in x])
        if isinstance(x, list):
            return ("list", [self._flatten(v, tensors) for v in x])
        if isinstance(x, dict):
            return ("dict", [(k, self._flatten(v, tensors)) for k, v in x.items()])
        if isinstance(x, (bool, int, float, str, type(None))):
            return ("C", x)
        raise TypeError(f"capture: the captured function returned {type(x).__name__}; return tensors, Python "
                        f"constants, or tuples/lists/dicts of them")

    def build(self, arrays: list):
        if self.single is not None:
            return arrays[self.single]
        return self._build(self.tree, arrays)

    def _build(self, node, arrays):
        kind, v = node
        if kind == "T":
            return arrays[v]
        if kind == "tuple":
            return tuple(self._build(c, arrays) for c in v)
        if kind == "namedtuple":
            return v[0](*(self._build(c, arrays) for c in v[1]))
        if kind == "list":
            return [self._build(c, arrays) for c in v]
        if kind == "dict":
            return {k: self._build(c, arrays) for k, c in v}
        return v


# ---------------------------------------------------------------------------- recordings
class _Recording:
    """What replay needs: the graphs, the packed inputs, the outputs' places, and what to watch."""

    def __init__(self, key, recorder: Recorder, inputs, graphs, downloads_at, dl_bytes, block, out_spec,
                 n_user_outputs: int):
        self.key = key
        self.inputs = inputs
        self.graphs = graphs
        self.block = block
        self.dl_bytes = dl_bytes
        self.download = Download(block, dl_bytes)
        self.out_spec = out_spec
        self.n_user_outputs = n_user_outputs
        self.arg_slots = inputs.args
        self.noise_slots = inputs.noise
        self.refs = recorder.refs
        # (start, stop, np dtype, shape) per downloaded output; bfloat16 ones go through unpack()
        self.out_layout = [(off, off + t.nbytes, t.dtype.np_dtype, t.shape, t) for off, t in downloads_at]
        self._plain = all(t.dtype is not bfloat16 and not t.dtype.is_bool for _, t in downloads_at)
        self.index_checks = recorder.index_checks  # verified on every replay's download (engine/checks.py)
        self.writes = recorder.replay_writes  # in-place writes' checks and effects (capture/writes.py), or None
        # In host memory the outputs are read as one NumPy copy each of typed views made here, the
        # replay's download (no ctypes call, no byte buffer to slice, view and reshape per replay).
        self.host_outputs = None
        if dl_bytes and block.device.is_host and self._plain and not self.index_checks:
            raw = host_view(block, dl_bytes)
            self.host_outputs = [raw[a:b].view(dt).reshape(shape) for a, b, dt, shape, _ in self.out_layout]

    def read_outputs(self) -> list:
        """Download (once) and return every output as a fresh array, for a recording without index checks."""
        views = self.host_outputs
        if views is None or _FAULTS:
            return self.outputs(self.download())
        COUNTERS.downloads["capture"] += 1
        COUNTERS.download_bytes["capture"] += self.dl_bytes
        return [v.copy() for v in views]

    def stale(self) -> str | None:
        """Why this recording can no longer be replayed (a referenced tensor replaced), or None."""
        if self.writes is not None:
            why = self.writes.stale()
            if why is not None:
                return why
        for ref, storage, shape in self.refs:
            t = ref()
            if t is None:
                return f"a tensor the recording reads (shape {shape}) was freed or replaced"
            if t._storage is not storage:
                return f"a tensor the recording reads (shape {shape}) was replaced (its memory changed)"
        return None

    def stage_args(self, leaves: list) -> None:
        copied = copied_bytes = written = 0
        for slot, v in zip(self.arg_slots, leaves):
            t = type(v)
            binding = slot.binding  # host memory, no in-place writes: a tensor argument is read where it lies
            if t is Tensor and v._status == COMPUTED and v.dtype is slot.dtype:
                storage = v._storage
                if storage.device.is_host and not _FAULTS and type(storage) is not StridedAlias:
                    if binding is not None:
                        binding.bind(storage.data, storage.buffer)
                        continue
                    # put_arg's copy of a computed host tensor, without its four calls down to the memmove
                    nbytes = slot.nbytes
                    host_copy(slot.host.addr, storage.data, nbytes)
                    copied += 1
                    copied_bytes += nbytes
                    continue
            if binding is not None:
                binding.bind_home()
            if t is np.ndarray:
                np.copyto(slot.view, v, casting="unsafe")
                written += slot.nbytes
            else:
                put_arg(slot, v)
        if copied:
            COUNTERS.downloads["capture input"] += copied
            COUNTERS.download_bytes["capture input"] += copied_bytes
        if written:
            self.inputs.written_bytes += written
        if self.noise_slots:
            fill_noise(self.noise_slots)

    def outputs(self, raw: np.ndarray) -> list:
        if self._plain:
            return [raw[a:b].view(dt).reshape(shape) for a, b, dt, shape, _ in self.out_layout]
        return [unpack(raw, a, t) for a, _, _, _, t in self.out_layout]

    def free(self) -> None:
        for g in self.graphs:
            g.free()
        self.graphs = []
        self.refs = []


def _explain_default() -> bool:
    return os.environ.get("GGMLGRAD_CAPTURE_EXPLAIN", "").strip().lower() in ("1", "true", "yes", "on")


class Captured(ShortPath):
    """A function recorded once per signature and replayed (see :func:`capture`)."""

    _kind = "capture"

    def __init__(self, fn: Callable, max_recordings: int = 8, explain: bool | None = None):
        if not callable(fn):
            raise TypeError(f"capture: expected a callable, got {type(fn).__name__}")
        if isinstance(max_recordings, bool) or not isinstance(max_recordings, int) or max_recordings < 1:
            raise ValueError(f"capture: max_recordings must be a positive int, got {max_recordings!r}")
        self.fn = fn
        functools.update_wrapper(self, fn, updated=())
        self.max_recordings = max_recordings
        self.explain = _explain_default() if explain is None else bool(explain)
        self._cache: OrderedDict[tuple, _Recording] = OrderedDict()
        self._gone: dict[tuple, str] = {}     # key -> why its recording went away (for explain)
        self._last_key: tuple | None = None
        self._param_names = self._names(fn)
        self.n_recordings = 0                 # recordings made so far (for tests and diagnosis)
        # Modules whose training flag a recording read (weakly); their flags end every signature.
        self._watched: list[weakref.ref] = []
        self._watched_ids: set[int] = set()
        self._modes: tuple = ()
        self._modes_epoch = -1
        # Calls from several threads take turns: a replay stages, uploads and downloads through
        # buffers of its recording, and a recording must finish before its first replay.
        self._call_lock = threading.RLock()
        self._flat_args = False  # set by _key: the last call's arguments were all plain tensors/arrays
        self._fast: _Recording | None = None  # the last call's recording, while __call__'s short path may replay it
        self._fast_sig: tuple = ()

    @staticmethod
    def _names(fn) -> list[str]:
        try:
            return [p.name for p in inspect.signature(fn).parameters.values()
                    if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        except (TypeError, ValueError):
            return []

    # -- signature
    def _key(self, args: tuple, kwargs: dict) -> tuple:
        # One pass, plain Tensors and arrays inline (a replay's first cost; _describe for the rest).
        dev = None
        parts = []
        flat = not kwargs  # every argument a plain Tensor or array: the arguments are the leaves
        for a in args:
            t = type(a)
            if t is Tensor:
                parts.append((_ARRAY, a.shape, a.dtype.name))
                if dev is None:
                    dev = a.device
            elif t is np.ndarray:
                parts.append((_ARRAY, a.shape, _DT.get(a.dtype) or _slot_dtype(a.dtype).name))
            else:
                flat = False
                parts.append(_describe(a))
                if dev is None and isinstance(a, Tensor):
                    dev = a.device
        self._flat_args = flat  # read by _call right after (calls take turns: _call_lock)
        if dev is None:
            dev = self._home_device()
        kw = tuple((k, _describe(v)) for k, v in kwargs.items()) if kwargs else ()
        return (tuple(parts), kw, dev.name, modes.precision()) + self._extra_key() + (self._mode_key(),)

    def _extra_key(self) -> tuple:
        return ()

    def _mode_key(self) -> tuple:
        """The training flags of the watched modules (recomputed only after a train()/eval() or assignment)."""
        epoch = WATCH.epoch
        if self._modes_epoch != epoch:
            if any(r() is None for r in self._watched):
                self._forget_dead()
            self._modes = tuple(training_flag(r) for r in self._watched)
            self._modes_epoch = epoch
        return self._modes

    def _adopt(self, key: tuple, rec: "_Recording", seen) -> tuple:
        """Watch the modules whose flags ``rec``'s recording read; returns its key with their flags.

        Recordings made before a module was watched did not read its flag: their keys take its current
        value (any value would be right for them)."""
        rec.epoch = WATCH.epoch
        read = {id(t) for t in (r() for r, _, _ in rec.refs) if t is not None}
        rec.structure = Structure(seen.live_modules(), read)
        new = [(m, mode) for m, mode in seen.live_modes() if id(m) not in self._watched_ids]
        if not new:
            return key
        now = tuple(m.__dict__.get("_training", True) for m, _ in new)
        for m, _ in new:
            self._watched.append(watch(m))
            self._watched_ids.add(id(m))
        self._rekey(lambda k: k[:-1] + (k[-1] + now,))
        self._modes_epoch = -1
        rec.key = key[:-1] + (key[-1] + tuple(mode for _, mode in new),)
        return rec.key

    def _forget_dead(self) -> None:
        """Drop freed modules from the watch list and every key (recordings that read them are stale
        by their structure check)."""
        keep = [i for i, r in enumerate(self._watched) if r() is not None]
        self._watched = [self._watched[i] for i in keep]
        self._watched_ids = {id(r()) for r in self._watched}
        self._rekey(lambda k: k[:-1] + (tuple(k[-1][i] for i in keep),))

    def _rekey(self, change) -> None:
        """Rewrite every key held (cache, explain records, last key) with ``change``, order kept."""
        cache: OrderedDict = OrderedDict()
        for k, r in self._cache.items():
            k = change(k)
            if k in cache:
                cache.pop(k).free()  # two recordings told apart by a freed module: both are stale
            cache[k] = r
            r.key = k
        self._cache = cache
        self._gone = {change(k): why for k, why in self._gone.items()}
        if self._last_key is not None:
            self._last_key = change(self._last_key)

    def _arg_label(self, i: int) -> str:
        return self._param_names[i] if i < len(self._param_names) else f"args[{i}]"

    def _why(self, key: tuple) -> str:
        """Explain a new recording for ``key`` against the last one used."""
        if key in self._gone:
            return self._gone.pop(key)
        old = self._last_key
        if old is None:
            return "first call"
        diffs = []
        (pa, ka, da, pra), (pb, kb, db, prb) = old[:4], key[:4]
        if len(pa) != len(pb):
            diffs.append(f"number of positional arguments {len(pa)} → {len(pb)}")
        for i, (x, y) in enumerate(zip(pa, pb)):
            if x != y:
                diffs.append(f"argument {self._arg_label(i)!r}: {_fmt(x)} → {_fmt(y)}")
        dka, dkb = dict(ka), dict(kb)
        for k in sorted(set(dka) | set(dkb)):
            if dka.get(k) != dkb.get(k):
                diffs.append(f"keyword argument {k!r}: {_fmt(dka.get(k))} → {_fmt(dkb.get(k))}")
        if da != db:
            diffs.append(f"device {da} → {db}")
        if pra != prb:
            diffs.append(f"matmul precision {pra!r} → {prb!r}")
        if old[4:-1] != key[4:-1]:
            diffs.extend(self._extra_why(old[4:-1], key[4:-1]))
        for ref, a, b in zip(self._watched, old[-1], key[-1]):
            if a != b:
                diffs.append(f"{type(ref()).__name__ if ref() is not None else 'a freed'} module: training "
                             f"{a} → {b} (train()/eval())")
        return "; ".join(diffs) or "new signature"

    def _extra_why(self, old: tuple, new: tuple) -> list[str]:
        return ["options changed"]

    def _explain(self, msg: str) -> None:
        if self.explain:
            name = getattr(self.fn, "__qualname__", repr(self.fn))
            log.warning("ggmlgrad %s(%s) records again: %s", self._kind, name, msg)

    # -- calls
    def __call__(self, *args, **kwargs):
        with self._call_lock:
            rec = self._fast
            if rec is not None and not kwargs and self._same_as_last(args) and self._fast_stale(rec) is None:
                return self._run(rec, args)  # the last call's recording, its key neither built nor looked up
            return self._call(args, kwargs)

    def _call(self, args: tuple, kwargs: dict):
        self._fast = None
        key = self._key(args, kwargs)
        rec = self._cache.get(key)
        if rec is not None:
            why = self._stale(rec)
            if why is not None:
                self._drop(key, why)
                rec = None
            else:
                self._cache.move_to_end(key)
        if self._flat_args:
            leaves = list(args)
        else:
            leaves = []
            _leaves(args, leaves)
            if kwargs:
                _leaves(tuple(kwargs.values()), leaves)
        if rec is None:
            self._explain(self._why(key)) if (self._last_key is not None or key in self._gone) else None
            with observing() as seen:
                rec = self._record(key, args, kwargs)
            key = self._adopt(key, rec, seen)
            self._cache[key] = rec
            self.n_recordings += 1
            while len(self._cache) > self.max_recordings:
                old_key, old = self._cache.popitem(last=False)
                old.free()
                self._gone[old_key] = f"its recording was evicted from the LRU cache (max_recordings=" \
                                      f"{self.max_recordings})"
        self._last_key = key
        out = self._run(rec, leaves)
        if rec.epoch == WATCH.epoch:
            self._remember_fast(key, args, rec)
        return out

    def _stale(self, rec: _Recording) -> str | None:
        return self._replaced(rec) or rec.stale()

    @staticmethod
    def _replaced(rec: _Recording) -> str | None:
        """Why the modules ``rec`` read no longer hold what it read; compared only after WATCH.epoch moved."""
        epoch = WATCH.epoch  # read before comparing: a change made meanwhile moves it again
        if rec.epoch == epoch:
            return None
        why = rec.structure.changed()
        if why is None:
            rec.epoch = epoch
        return why

    def _drop(self, key, why: str) -> None:
        rec = self._cache.pop(key, None)
        if rec is not None:
            if rec is self._fast:
                self._fast = None
            rec.free()
        self._gone[key] = why

    def _device_of(self, args, kwargs) -> Device:
        ls: list = []
        _leaves(args, ls)
        _leaves(tuple(kwargs.values()), ls)
        for a in ls:
            if isinstance(a, Tensor):
                return a.device
        return self._home_device()

    def _make_inputs(self, rec: Recorder, args, kwargs):
        names: list[str] = []
        for i, a in enumerate(args):
            _leaf_names(a, self._arg_label(i), names)
        for k, v in kwargs.items():
            _leaf_names(v, k, names)
        leaves: list = []
        _leaves(args, leaves)
        _leaves(tuple(kwargs.values()), leaves)
        tensors = []
        for name, a in zip(names, leaves):
            if isinstance(a, Tensor):
                shape, dt = a.shape, a.dtype
            else:
                shape, dt = tuple(int(s) for s in a.shape), _slot_dtype(a.dtype)
            if len(shape) > 4:
                raise ValueError(f"capture: argument {name} has {len(shape)} dimensions; at most 4 are supported")
            tensors.append(rec.input("arg", name, shape, dt))
        it = iter(tensors)
        new_args = tuple(_rebuild(a, it) for a in args)
        new_kwargs = {k: _rebuild(v, it) for k, v in kwargs.items()}
        return new_args, new_kwargs

    def _record(self, key, args, kwargs) -> _Recording:
        device = self._device_of(args, kwargs)
        recorder = Recorder(device)
        with recorder:
            call_args, call_kwargs = self._make_inputs(recorder, args, kwargs)
            out = self.fn(*call_args, **call_kwargs)
            tensors: list[Tensor] = []
            spec = _OutSpec(out, tensors)
            _g, downloads_at, dl_bytes, block, _ = recorder.take_graph("forward", tensors, [])
            recorder.check_grads()
            recorder.resolve_refs(lambda: _owners(self.fn))
            inputs = recorder.finish()
        return _Recording(key, recorder, inputs, recorder.graphs, downloads_at, dl_bytes, block, spec, len(tensors))

    def _run(self, rec: _Recording, leaves: list):
        ENGINE.drain_if_queued("capture")  # queued work may write what the replay reads
        writes = rec.writes
        if writes is not None:
            writes.before(leaves)  # capwrite: in-place writes' checks (capture/writes.py)
        rec.stage_args(leaves)
        rec.inputs.upload()
        rec.graphs[0].compute()
        if not rec.index_checks and writes is None:
            return rec.out_spec.build(rec.read_outputs())
        raw = rec.download()
        if writes is not None:
            writes.after(leaves, raw)  # capwrite: argument write-backs, versions, views
        if rec.index_checks:
            verify_replay(rec.index_checks, raw)
        return rec.out_spec.build(rec.outputs(raw))

    # -- management
    def free(self) -> None:
        """Release every recording (device memory, graphs); the next call records again."""
        self._fast = None
        for key, rec in self._cache.items():
            rec.free()
            self._gone[key] = "captured.free() released its recording"
        self._cache.clear()

    @property
    def recordings(self) -> int:
        """How many recordings are cached now."""
        return len(self._cache)

    def __repr__(self) -> str:
        return f"<ggmlgrad {self._kind} of {getattr(self.fn, '__qualname__', self.fn)!r}: " \
               f"{len(self._cache)} recording(s)>"

    def __get__(self, obj, objtype=None):
        # Decorating a method: capture per instance is the user's job; bind like a function.
        if obj is None:
            return self
        return functools.partial(self.__call__, obj)


def _owners(fn, extra=()) -> list:
    """Tensors that may own memory the recording read through a temporary alias (``p.data``,
    ``p.detach()``): the function's closure, the globals it names, its bound ``self``, the modules
    among them and the modules the recording read (their parameters and buffers), and ``extra``."""
    found: list = list(extra)
    objs: list = [fn]  # a Module called as the function
    f = getattr(fn, "__func__", fn)
    if getattr(fn, "__self__", None) is not None:
        objs.append(fn.__self__)
        objs.extend(vars(fn.__self__).values() if hasattr(fn.__self__, "__dict__") else ())
    for cell in getattr(f, "__closure__", None) or ():
        try:
            objs.append(cell.cell_contents)
        except ValueError:  # an empty cell
            pass
    code, glob = getattr(f, "__code__", None), getattr(f, "__globals__", {})
    for name in code.co_names if code is not None else ():
        if name in glob:
            objs.append(glob[name])
    obs = context.current().module_observer
    if obs is not None:
        objs.extend(obs.live_modules())
    for o in objs:
        for v in (o if isinstance(o, (list, tuple)) else o.values() if isinstance(o, dict) else (o,)):
            if isinstance(v, Tensor):
                found.append(v)
            elif isinstance(v, Module):
                found.extend(v.parameters())
                found.extend(v.buffers())
    return found


def _fmt(d) -> str:
    if d is None:
        return "absent"
    if isinstance(d, tuple) and d and d[0] == _ARRAY:
        return f"array shape {tuple(d[1])} {d[2]}"
    if isinstance(d, tuple) and d and d[0] == _CONST:
        return f"constant {d[2]!r}"
    return repr(d)


# ---------------------------------------------------------------------------- training steps
class CapturedStep(Captured):
    """A training step (forward, backward, optional grad-norm clipping, optimizer update), captured.

    Replay: ONE upload (arguments, noise, clip limit, the optimizer's hyperparameters for this
    step), graph 1 (forward + backward + clipping), ONE download (loss outputs + grad norm),
    graph 2 (the update, in place), then the optimizer's step counters advance. On the CPU, a step
    without clipping, index checks, argument write-backs or in-place writes of the optimizer's
    parameters computes both as ONE graph (see ``_merge_graphs``; a batch norm's running statistics
    are written in it): one compute per replay instead of two.

    The optimizer's side of each recording is a :class:`~ggmlgrad.capture.step_update.StepUpdate`
    (``rec.step``); the traced pieces of a step are functions of ``capture/step_update.py``.
    """

    _kind = "capture_step"

    def __init__(self, loss_fn: Callable, optimizer, max_grad_norm: float | None = None, max_recordings: int = 8,
                 explain: bool | None = None):
        if not callable(getattr(optimizer, "capture_update", None)):
            raise TypeError(f"capture_step: the optimizer {type(optimizer).__name__} lacks capture_update() "
                            f"(use a gg.optim optimizer)")
        super().__init__(loss_fn, max_recordings, explain)
        self.optimizer = optimizer
        self.max_grad_norm = check_norm(max_grad_norm)
        self.grad_norm: float | None = None   # the last step's norm (with clipping)

    def set(self, max_grad_norm: float | None = ...) -> "CapturedStep":
        """Change options without recording again (the clip limit is an input of the recording).

        Turning clipping on or off switches to a recording with or without the clipping nodes.
        """
        if max_grad_norm is not ...:
            self.max_grad_norm = check_norm(max_grad_norm)
        return self

    def _extra_key(self) -> tuple:
        return (self.max_grad_norm is not None,)

    def _extra_why(self, old, new) -> list[str]:
        return [f"gradient clipping {'on' if new[0] else 'off'} (was {'on' if old[0] else 'off'})"]

    def _fast_stale(self, rec) -> str | None:
        return rec.step.stale() or rec.stale()   # WATCH.epoch: compared by _same_as_last

    def _stale(self, rec) -> str | None:
        return rec.step.stale() or self._replaced(rec) or rec.stale()

    def _record(self, key, args, kwargs) -> _Recording:
        device = self._device_of(args, kwargs)
        update = self.optimizer.capture_update()  # outside the recording: may create optimizer state
        params = update.params
        clip = self.max_grad_norm is not None
        saved = [p.grad for p in params]
        recorder = Recorder(device)
        try:
            with recorder:
                call_args, call_kwargs = self._make_inputs(recorder, args, kwargs)
                out, grads = loss_and_grads(self.fn, call_args, call_kwargs, params)
                grads, norm = clip_grads(recorder, grads) if clip else (grads, None)
                tensors: list[Tensor] = []
                spec = _OutSpec(out, tensors)
                n_user = len(tensors)
                downloads = tensors + ([norm] if clip else [])
                downloads_at, dl_bytes, block, grads = _take_step_graphs(recorder, downloads, grads, update, clip)
                recorder.resolve_refs(lambda: _owners(self.fn, params))
                inputs = recorder.finish()
        except BaseException:
            for p, g in zip(params, saved):
                p.grad = g
            raise
        rec = _Recording(key, recorder, inputs, recorder.graphs, downloads_at, dl_bytes, block, spec, n_user)
        rec.step = StepUpdate(update, grads, inputs.hparams, inputs.clip[0] if clip else None)
        rec.norm_index = n_user if clip else None
        return rec

    def _run(self, rec: _Recording, leaves: list):
        ENGINE.drain_if_queued("capture")
        writes = rec.writes
        if writes is not None:
            writes.before(leaves)  # capwrite: in-place writes' checks (capture/writes.py)
        rec.stage_args(leaves)
        rec.step.stage(self.max_grad_norm)
        rec.inputs.upload()
        graphs = rec.graphs
        graphs[0].compute()  # forward + backward (+ clipping); with the update when merged (_merge_graphs)
        if rec.index_checks or writes is not None:
            raw = rec.download()
            if writes is not None:
                writes.after(leaves, raw)  # capwrite: the loss function's writes happened in graph 1
            if rec.index_checks:
                verify_replay(rec.index_checks, raw, "raised by a captured step before its update: weights, "
                              "optimizer state and step counters are unchanged")
            outs = rec.outputs(raw)
        else:
            outs = rec.read_outputs()
        rec.step.give_grads()
        if rec.norm_index is not None:
            self.grad_norm = finite_norm(outs[rec.norm_index])
        if len(graphs) > 1:
            graphs[1].compute()
        rec.step.finish()
        result = rec.out_spec.build(outs[:rec.n_user_outputs])
        if rec.norm_index is not None:
            return result, outs[rec.norm_index]
        return result


def _take_step_graphs(recorder: Recorder, downloads: list, grads: list, update, clip: bool) -> tuple:
    """Close a training step's recording as two graphs: forward+backward (``downloads`` read back,
    the gradients its outputs), then ``update`` queued on those gradients and on hyperparameter
    inputs; one graph when nothing is checked between them (see :func:`_merge_graphs`).
    Returns ``(downloads_at, download bytes, output block, the gradients as graph outputs)``."""
    _g1, downloads_at, dl_bytes, block, dev_out = recorder.take_graph(
        "forward+backward", downloads, [g for g in grads if g is not None])
    it = iter(dev_out)
    grads = [next(it) if g is not None else None for g in grads]
    hps = [recorder.input("hparam", f"optimizer group {i} hyperparameters", a.shape, float32)
           for i, a in enumerate(update.hparams(grads))]
    with no_grad(), recorder.hold():
        update.queue(grads, hps)
    recorder.take_graph("optimizer update", [], [])
    if not clip and recorder.device.kind == "cpu" and not recorder.index_checks \
            and recorder.writes.merge_ok(update.params):
        _merge_graphs(recorder)  # nothing to check between the two graphs: one compute
    return downloads_at, dl_bytes, block, grads


def _merge_graphs(recorder: Recorder) -> None:
    """Make the recorder's two graphs (forward+backward, then the update) ONE graph, before they are
    allocated, for a step with nothing to verify between them (no clipping, index checks, argument
    write-backs or writes of the updated parameters: RecordedWrites.merge_ok).

    The update's nodes follow every node of the first graph and read its gradients from the output
    block they were written to; ggml's CPU and BLAS backends compute a graph's nodes (and splits) in
    order, so every read of a weight comes before its in-place update, as with two computes. Host
    devices only: an accelerator backend may reorder independent nodes, and the gradients reach the
    update through memory, not graph edges. One compute saves a graph launch (4-32-32-2 tanh step:
    ~2 µs of ~30)."""
    g1, g2 = recorder.graphs
    nodes = [lib.graph_node(g.graph, i) for g in (g1, g2) for i in range(g.n_nodes)]
    merged = ReplayGraph(recorder.device, g1.ctxs + g2.ctxs, g1.keep + g2.keep, nodes, [], g1.size + g2.size,
                         max(g1.threads, g2.threads), max(g1.max_work, g2.max_work),
                         "forward+backward+optimizer update")
    for g in (g1, g2):
        g.ctxs, g.keep = [], []  # the merged graph owns their node contexts now
        g.free()
    recorder.graphs = [merged]


# ---------------------------------------------------------------------------- public functions
def capture(fn: Callable | None = None, *, max_recordings: int = 8, explain: bool | None = None):
    """Record ``fn`` once per signature and replay it (also a decorator, with or without options).

    ``fn`` takes arrays/tensors (positional or keyword, possibly in tuples/lists/dicts) and
    returns tensors (or tuples/lists/dicts of them); a call returns the same structure as
    fresh NumPy arrays. Python-number arguments are constants of the recording (a new value
    records again). Inside ``fn``: no uploads of new host data, no host reads, no eager
    computes (``gg.CaptureError`` names the line); randomness from dropout/sampling is an
    input refilled from the seeded generator at every replay. The training flags of the
    modules ``fn`` read are part of the signature (``eval()`` replays without dropout), and
    replacing a parameter, buffer or submodule it read records again. In-place writes are
    replayed as eager mode makes them (capture/writes.py): outside tensors and views keep what
    each call writes, and a Tensor argument written in place is written back to the caller's
    tensor (an array argument is an input by value).

    >>> import numpy as np, ggmlgrad as gg
    >>> f = gg.capture(lambda x: x * 2, max_recordings=2)
    >>> f(np.ones(2, np.float32)).tolist()
    [2.0, 2.0]
    """
    if fn is None:
        return lambda f: Captured(f, max_recordings=max_recordings, explain=explain)
    return Captured(fn, max_recordings=max_recordings, explain=explain)


def capture_step(loss_fn: Callable, optimizer, max_grad_norm: float | None = None, *, max_recordings: int = 8,
                 explain: bool | None = None) -> CapturedStep:
    """A captured training step: ``loss_fn(*args)`` → backward → (clip) → ``optimizer`` update.

    Returns what ``loss_fn`` returns (as NumPy); with ``max_grad_norm`` it returns
    ``(that, grad_norm)``. A non-finite gradient norm raises before the update and changes
    nothing. Learning rates (schedulers), step counters, bias corrections and the clip limit
    are inputs: changing them never records again. Parameters' ``.grad`` hold the last
    step's (clipped) gradients. ``train()``/``eval()``, replaced parameters or submodules, a
    changed parameter set and a parameter's ``requires_grad`` are followed (records again).

    >>> import numpy as np, ggmlgrad as gg
    >>> w = gg.tensor(np.ones(2, np.float32), requires_grad=True)
    >>> opt = gg.optim.SGD([w], lr=0.5)
    >>> step = gg.capture_step(lambda x: ((w * x).sum() - 1.0) ** 2, opt)
    >>> float(step(np.ones(2, np.float32)))
    1.0
    >>> w.tolist()
    [0.0, 0.0]
    """
    return CapturedStep(loss_fn, optimizer, max_grad_norm, max_recordings=max_recordings, explain=explain)


