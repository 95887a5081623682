"""The queue of records and its plan key.

Graph mode appends each op as a record (builder, inputs, parameters, result shape and dtype,
precision, result stand-in) without building it, and extends the queue's record-sequence
signature as it goes: the key format of the one trace cache (:mod:`.trace_cache`). A drain whose
sequence ran before computes its cached plan (see :mod:`.drain`). An eager or check-mode op is
appended as the queue's one record and drained at once, keyed as the one-record sequence it is
(``Drainer._drain_one``).
"""
from __future__ import annotations

import contextlib
import contextvars
import os
import sys
import weakref

from ..runtime import Device, Storage, StridedAlias
from .array import COMPUTED, FAILED, PENDING, Array
from .errors import PendingError
from .local import owner_of
from .plans import freeze_params
from .trace_cache import GRAPH

# Set by autograd while it builds gradient nodes (they are labelled "backward" in errors);
# context-local, since two threads may run backward at once.
_phase_label: contextvars.ContextVar[str | None] = contextvars.ContextVar("ggmlgrad_phase", default=None)


def phase() -> str | None:
    """The label ops queued now carry in error messages instead of their own ("backward" while
    autograd builds gradients), or None."""
    return _phase_label.get()


def set_phase(label: str | None) -> contextvars.Token:
    """Label the ops queued from now on ``label``; give the token to :func:`reset_phase`."""
    return _phase_label.set(label)


def reset_phase(token: contextvars.Token) -> None:
    """End a :func:`set_phase`."""
    _phase_label.reset(token)


_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# contextlib's frames stand between a ``with`` of ours (``ENGINE.exclusive``) and its caller: skipped too
_CONTEXTLIB_FILE = contextlib.__file__


_IN_PKG: dict = {}  # code object → whether it is ggmlgrad's (a site is found on every graph-mode queue)


def user_site(skip: int = 2) -> str:
    """file:line of the innermost frame outside the ggmlgrad package (and outside contextlib, whose
    ``__enter__``/``__exit__`` run a ``with`` block's generator on the user's behalf)."""
    f = sys._getframe(skip)
    in_pkg = _IN_PKG
    while f is not None:
        code = f.f_code
        inside = in_pkg.get(code)
        if inside is None:
            if len(in_pkg) > 8192:
                in_pkg.clear()
            name = code.co_filename
            inside = in_pkg[code] = name.startswith(_PKG_DIR) or name == _CONTEXTLIB_FILE
        if not inside:
            break
        f = f.f_back
    return f"{f.f_code.co_filename}:{f.f_lineno}" if f is not None else "?"


# A lazy record is one flat tuple, ``(build, params, shape, dtype, prec, ref, *inputs)``: every
# queued op stays alive until the drain, and each live container is scanned by Python's cycle
# collector again and again while a long graph-mode queue grows (a record object, its input
# list and a roots entry per op made recording slower the longer the queue). ``shape`` is None
# for an update (record_update); ``ref`` is a weak reference to the result tensor, None for an
# update or a replayed record (whose results the replay adopts, see ``adopt_result``). An input
# is a computed tensor (or, in a queue without a plan key, a built node's pending tensor) or,
# for a result of this queue, its record's index (an int): holding the result tensor would keep
# every intermediate alive, and each live result costs an output buffer at the drain. Records
# are never changed once queued; a backward segment appends copies of them without ``ref``.
REC_BUILD, REC_PARAMS, REC_SHAPE, REC_DTYPE, REC_PREC, REC_REF, REC_INPUTS = range(7)


class _Pending:
    """What builders see of a lazy record's result (its ``index`` in the queue, ``shape``,
    ``dtype``, ``ndim``, ``device``): made when the records are built (see ``Builder``)."""

    __slots__ = ("index", "shape", "dtype", "device")

    def __init__(self, index: int, shape: tuple, dtype, device) -> None:
        self.index = index
        self.shape = shape
        self.dtype = dtype
        self.device = device

    @property
    def ndim(self) -> int:
        return len(self.shape)


# Memory a plan's leaf cannot be: none (freed or failed), or a strided view (a plan's leaves are
# contiguous); one set lookup per leaf at each planned drain.
_NO_LEAF_MEMORY = frozenset((type(None), StridedAlias))


class RecordQueue:
    """One thread's queue of records: graph-mode records not built yet (``lazy``), built nodes
    (``roots``, ``effects``), what the drain needs about them (labels, work, the call site, the
    memory they keep alive) and their plan key, extended as records are appended.

    ``one`` is an eager (or check-mode) op's record, appended as it is, ``(out, label, build,
    inputs, work, params, context)``: the drain looks up its op plan before anything is built.
    The queue computes nothing: the engine's drain does (:mod:`.drain`)."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch  # unique across threads: another thread's pending tensor never matches
        self.hold = 0       # > 0: queue without draining (Engine.hold, Engine.exclusive's body)
        self.checks: list = []  # index checks of the queue, verified after its drain (checks.py; never rebound)
        self.reset()

    def reset(self) -> None:
        """Empty the queue (the drain took it, or it was discarded)."""
        self.one: tuple | None = None
        # Facts about this epoch's nodes that builders leave for later builders (fast_math's GELU
        # value-and-derivative node, by the node of its input): in Python, keyed by node address,
        # and dropped with the epoch, before its contexts are reset (a freed node's address is reused).
        self.notes: dict[int, int] = {}
        # Graph mode records ops without building them (see Builder.materialize): one flat tuple
        # each (see REC_BUILD). Their arrays' _node is -(index+1).
        self.lazy: list[tuple] = []
        self.updates = 0  # how many of them are in-place updates (record_update)
        # The plan key of the lazy records, built as they are recorded (None: not plannable). One
        # flat sequence: per op its builder, result shape and dtype, precision, parameters and
        # input count, then per input a queue index (>= 0) or -1-slot for a computed tensor,
        # followed by shape and dtype where that slot first appears. Unambiguous, since a new
        # slot is always the next number.
        self._sig: list | None = []
        self._sig_slot: dict[int, int] = {}   # id(computed input) → slot
        self._sig_leaves: list[Array] = []    # computed inputs by slot
        # (weak ref, node) of built results and of aliases and adopted results of lazy records; a
        # lazy record's own result is its ``ref`` (one object less per queued op). ``results``
        # walks both.
        self.roots: list[tuple[weakref.ref, int]] = []
        self.bare = 0  # lazy records appended without ``ref`` that are not updates (replayed)
        self.effects: list[int] = []
        self.labels: list[str] = []
        self.keep: list[Storage] = []
        self.site: str | None = None
        self.device: Device | None = None
        self.work = 0.0
        self.max_work = 0.0

    def next_epoch(self) -> int:
        """Start a new epoch with an empty queue; returns the epoch that ended."""
        epoch = self.epoch
        self.epoch = epoch + 1
        self.reset()
        return epoch

    def __len__(self) -> int:
        return len(self.roots) + len(self.lazy) - self.bare + len(self.effects) + (self.one is not None)

    def queued(self) -> bool:
        """Whether anything is queued (records, nodes or effects)."""
        return bool(self.roots or self.effects or self.lazy or self.one is not None)

    def has_results(self) -> bool:
        """Whether results, in-place writes or updates are queued (:meth:`queued` less the queue's
        one record and replayed records whose results nobody adopted)."""
        return bool(self.roots or self.effects or len(self.lazy) > self.bare)

    def results(self) -> list:
        """(weak ref, node) of every queued result: ``roots`` and the lazy records' ``ref``."""
        return pending_results(self.roots, self.lazy)

    def note(self, node: int, value: int) -> None:
        """Leave ``value`` (a node) for builders of this epoch that meet ``node`` (see ``notes``)."""
        self.notes[node] = value

    def noted(self, node: int) -> int:
        """What :meth:`note` left for ``node`` in this epoch; 0 when nothing."""
        return self.notes.get(node, 0)

    def record_lazy(self, out: Array, label: str, build, inputs, work: float, params: dict, prec: str) -> Array:
        """Graph mode: append the op without building its node (the queue is on ``out``'s device).
        The drain computes the queue with a cached plan when the same op sequence ran before, and
        builds the nodes otherwise."""
        lazy = self.lazy
        shape, dtype = out.shape, out.dtype
        sig = self._sig
        ins = None
        if sig is not None:  # sign, inlined (every graph-mode op)
            try:
                fp = freeze_params(params) if params else ()
            except TypeError:  # an unhashable parameter (e.g. a tensor): this queue gets no plan
                self._sig = None
            else:
                sig += (build, shape, dtype, prec, fp, len(inputs))
                # lazy_inputs, inlined for inputs the key has seen (every graph-mode op): a result
                # of this queue, or a leaf already given a slot; the first other input hands the
                # rest to lazy_inputs, which extends the key in the same order.
                ins = []
                epoch, slot_of = self.epoch, self._sig_slot
                try:
                    for x in inputs:
                        st = x._status
                        if st == PENDING and x._epoch == epoch and x._node < 0:
                            p = -1 - x._node
                            ins.append(p)
                            sig.append(p)
                        elif st == COMPUTED and id(x) in slot_of:
                            ins.append(x)
                            sig.append(-1 - slot_of[id(x)])
                        else:
                            ins += self.lazy_inputs(inputs[len(ins):])
                            break
                except BaseException:
                    self._sig = None  # the key has a header without its record
                    raise
        if ins is None:  # no key (or no more)
            ins = self.lazy_inputs(inputs)
        j = len(lazy)
        lazy.append((build, params, shape, dtype, prec, weakref.ref(out), *ins))
        out._node = -1 - j
        out._epoch = self.epoch
        out._status = PENDING
        self.labels.append(_phase_label.get() or label)
        w = work or out.numel_  # (never 0: Engine.record keeps empty results out of the queue)
        self.work += w
        if w > self.max_work:
            self.max_work = w
        if self.site is None:
            self.site = user_site(4)
        return out

    def record_update(self, build, inputs, params: dict, prec: str) -> None:
        """Append an update record (in-place writes into ``inputs``; see ``Engine.record_update``)."""
        self.sign(build, None, None, prec, params, len(inputs))
        self.lazy.append((build, params, None, None, prec, None, *self.lazy_inputs(inputs)))
        self.updates += 1

    def sign(self, build, shape, dtype, prec, params, n_inputs: int) -> None:
        """Extend the plan key with one record's header (its inputs follow, see lazy_inputs;
        :meth:`record_lazy` has its own copy)."""
        sig = self._sig
        if sig is None:
            return
        try:
            fp = freeze_params(params) if params else ()
        except TypeError:  # an unhashable parameter (e.g. a tensor): this queue gets no plan
            self._sig = None
            return
        sig += (build, shape, dtype, prec, fp, n_inputs)

    def lazy_inputs(self, inputs) -> list:
        """Inputs as a lazy record holds them: computed tensors themselves (their memory must
        live until the drain), lazily recorded results as their queue entry's stand-in. Extends
        the plan key with them."""
        sig = self._sig
        if sig is None:
            return self._unsigned_inputs(inputs)
        slot_of = self._sig_slot
        ins = []
        try:
            for x in inputs:
                st = x._status
                if st == COMPUTED:
                    ins.append(x)
                    s = slot_of.get(id(x))
                    if s is not None:
                        sig.append(-1 - s)
                    elif x._storage is None or not x.numel_ or type(x._storage) is StridedAlias:
                        self._sig = None  # empty memory, or a strided view (a plan's leaves are contiguous): no plan
                        ins += self._unsigned_inputs(inputs[len(ins):])
                        return ins
                    else:
                        leaves = self._sig_leaves
                        s = slot_of[id(x)] = len(leaves)
                        leaves.append(x)
                        sig += (-1 - s, x.shape, x.dtype)
                elif st == PENDING and x._epoch == self.epoch and x._node < 0:
                    p = -1 - x._node
                    ins.append(p)
                    sig.append(p)
                else:  # a built node (the ordinary drain), or a failed or discarded input
                    self._sig = None
                    ins += self._unsigned_inputs(inputs[len(ins):])
                    return ins
        except BaseException:
            self._sig = None  # the key has a header without its record
            raise
        return ins

    def _unsigned_inputs(self, inputs) -> list:
        """:meth:`lazy_inputs` of a queue that has no plan key."""
        epoch = self.epoch
        ins = []
        for x in inputs:
            st = x._status
            if st == COMPUTED:
                ins.append(x)
            elif st == PENDING and x._epoch == epoch:
                n = x._node
                ins.append(-1 - n if n < 0 else x)  # a built node: the ordinary drain
            else:
                raise_no_value(x)  # a failed or discarded input: its error, at this call
        return ins

    def plan_signature(self):
        """(key, leaf arrays, kept results by op index) of a queue of lazily recorded ops only, or
        None when it cannot be planned (a built node in the queue, an unhashable parameter). The
        key is the trace cache's (engine/trace_cache.py): the kind, the device, the record
        sequence, then ``-1`` and the indices of the records whose results are still alive."""
        sig = self._sig
        if sig is None or self.effects:
            return None
        leaves = self._sig_leaves
        for x in leaves:
            if x._status != COMPUTED or type(x._storage) in _NO_LEAF_MEMORY:
                return None  # freed or failed since it was recorded (the ordinary drain raises), or strided
        epoch = self.epoch
        kept: dict[int, list[Array]] = {}
        j = -1
        for rec in self.lazy:
            j += 1
            ref = rec[5]  # REC_REF
            if ref is None:
                continue
            a = ref()
            if a is None or a._status != PENDING or a._node != -1 - j or a._epoch != epoch:
                continue
            kept[j] = [a]
        for ref, n in self.roots:  # aliases (detach) and adopted results
            if n >= 0:
                return None
            a = ref()
            if a is None or a._status != PENDING or a._node != n or a._epoch != epoch:
                continue
            lst = kept.get(-1 - n)
            if lst is None:
                kept[-1 - n] = [a]
            else:
                lst.append(a)
        if not kept and not self.updates:
            return None
        return (GRAPH, self.device.dev_ptr, *sig, -1, *sorted(kept)), leaves, kept

    def alias_pending(self, twin: Array, base: Array) -> None:
        """Make ``twin`` another name for ``base``'s queued node (``detach()`` of a pending
        tensor): the drain gives both the same memory, as eager aliasing would."""
        if base._status != PENDING or base._epoch != self.epoch:
            raise PendingError(base._error or no_value_message(base))
        twin._node, twin._epoch, twin._status = base._node, base._epoch, PENDING
        self.roots.append((weakref.ref(twin), base._node))

    def rebind_pending(self, base: Array, node: int) -> None:
        """Make ``node`` the queued node of ``base`` and of every alias of its node (``detach()``,
        ``alias_pending``): a capture recording's in-place write of a tensor made inside it."""
        old, epoch = base._node, base._epoch
        for ref, _ in self.results():
            a = ref()
            if a is not None and a._status == PENDING and a._epoch == epoch and a._node == old:
                a._node = node
        base._node = node

    def adopt_result(self, out: Array, index: int) -> None:
        """Make ``out`` the result of lazy record ``index`` (a replayed segment's)."""
        out._node = -1 - index
        out._epoch = self.epoch
        out._status = PENDING
        self.roots.append((weakref.ref(out), -1 - index))

    def add_work(self, work: float) -> None:
        """Count flops of nodes built without a record (optimizer updates) for the thread policy."""
        self.work += work
        if work > self.max_work:
            self.max_work = work


def pending_results(roots: list, lazy: list) -> list:
    """(weak ref, node) of a queue's results: its ``roots`` and its lazy records' ``ref`` (for a
    queue the drain already took, by its old lists)."""
    out = [(rec[REC_REF], -1 - j) for j, rec in enumerate(lazy) if rec[REC_REF] is not None]
    out += roots
    return out


def raise_no_value(x: Array) -> None:
    """Raise the error of an input that has no value: failed, or pending in a queue that is gone
    (taken by a failed or interrupted drain, or another thread's)."""
    if x._status == FAILED:
        raise PendingError(x._error or "ggmlgrad: this tensor's graph failed; it has no value")
    raise PendingError(x._error or no_value_message(x))



def no_value_message(a: Array) -> str:
    """Why a pending tensor that is not in this thread's current queue has no value."""
    owner = owner_of(a._epoch)
    if owner is not None and a._status == PENDING:
        return (f"ggmlgrad: this tensor is queued in the graph-mode queue of another thread "
                f"({owner.thread_name!r}) and has no value yet; each thread computes its own queue. Read it "
                f"(e.g. .numpy()) or leave graph mode in that thread before handing it to this one.")
    return "ggmlgrad: this tensor's queued graph was discarded; it has no value"

