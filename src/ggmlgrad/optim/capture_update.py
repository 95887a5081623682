"""The optimizer's side of a captured training step: :class:`CaptureUpdate`, the object
``Optimizer.capture_update()`` returns, which the optimizer's step counting defers to after a replay."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..tensor import Tensor

if TYPE_CHECKING:
    from .optimizer import Optimizer

_TABLE_ROWS = 256  # steps of hyperparameters computed at once (Adam: ~30 us, then a row copy per replay)


def signature(opt: "Optimizer") -> tuple:
    """Everything that shapes ``opt``'s update graph (not its input values).

    Capture calls this before recording, so state a group option now needs (a momentum
    buffer turned on after construction) is created here, outside any recording."""
    opt._before_step()
    return tuple((tuple((id(p), p.shape, p.dtype.name) for p in g["params"]), opt._group_structure(g))
                 for g in opt.param_groups)


def hparams_of_groups(opt: "Optimizer") -> list[np.ndarray]:
    """Per group, the hyperparameters of its next step (its parameters' highest step count + 1)."""
    out = []
    states = opt.state._d
    for group in opt.param_groups:
        step = max(states[id(p)][1]["step"] for p in group["params"])
        out.append(opt._group_hparams(group, step + 1))  # float32 (SGD, Adam); replays cast as they copy
    return out


class CaptureUpdate:
    """What a captured training step needs from its optimizer (see :meth:`Optimizer.capture_update`).

    A recording keeps one, and per replay calls :meth:`hparams` (the values to upload), computes
    the update that :meth:`queue` recorded, then calls :meth:`advance`:

    - ``params``: the optimizer's parameters (all groups, in order) when it was made;
    - ``signature``: the update graph's structure then (:meth:`changed` compares the current one);
    - :meth:`hparams`: one float32 array per group with every number the update reads for the
      NEXT step (lr, betas, eps, weight decay, bias corrections, SGD's first-step damping ...);
    - :meth:`queue`: queues the update write ops on ``grads`` (parallel to ``params``, None: not
      updated) and device hyperparameter tensors (one per group, shaped as :meth:`hparams`);
      uploads nothing and reads nothing back;
    - :meth:`advance`: after a successful update, the step counter of every parameter the
      queued update writes goes up by one.

    >>> import numpy as np, ggmlgrad as gg
    >>> from ggmlgrad.engine import ENGINE
    >>> w = gg.tensor([1.0, 2.0], requires_grad=True)
    >>> upd = gg.optim.SGD([w], lr=0.5).capture_update()
    >>> hps = [gg.tensor(a) for a in upd.hparams()]
    >>> with ENGINE.exclusive("optimizer"):
    ...     upd.queue([gg.tensor([2.0, 2.0])], hps)
    >>> upd.advance(); w.tolist()
    [0.0, 1.0]
    """

    def __init__(self, optimizer: Optimizer) -> None:
        self.optimizer = optimizer
        self.signature = signature(optimizer)
        self.params = optimizer.flat_params()
        self._updated: list[Tensor] = []
        # What changed() compares, in the cheapest exact form: per group the parameter ids (the
        # parameters are kept alive by self.params, so an id is not reused), shapes and dtypes,
        # and the update structure. Equal to comparing signature, without rebuilding it.
        self._quick = [(_param_signature(g["params"]), optimizer._group_structure(g)) for g in optimizer.param_groups]
        self._states_seen: tuple = (None, -1)  # (the optimizer's state mapping, its version) cached below
        self._group_states: list[list[dict]] = []
        self._updated_states: list[dict] = []
        self._tables: list = [None] * len(self._quick)  # per group: (hparams key, first step, rows)
        self._state_read: list[tuple] = []  # (parameter id, state key, tensor) that queue()'s update reads
        # Per group, the updated parameters (indices into _updated) by the step count they shared when
        # queued: one hyperparameter row per class (bias corrections follow each parameter's own step).
        self._classes: list[list[list[int]]] = []
        self._held_at = -1  # the optimizer state's version when the classes last held (see _classes_hold)

    def changed(self) -> bool:
        """Whether the parameter set or the update's structure changed since this was made, or a
        state tensor the queued update reads was replaced (``load_state_dict``)."""
        opt = self.optimizer
        opt._before_step()  # as _signature(): state a group option now needs is created here
        if self._states_seen[1] != opt.state.version or self._states_seen[0] is not opt.state:
            self._forget_states()  # let replaced state (moments) go
            if self._state_replaced():
                return True
        groups = opt.param_groups
        quick = self._quick
        if len(groups) != len(quick):
            return True
        structure = opt._group_structure
        for g, (params, struct) in zip(groups, quick):
            if _param_signature(g["params"]) != params or structure(g) != struct:
                return True
        return not self._classes_hold()

    def _classes_hold(self) -> bool:
        """Whether the parameters that shared a step count when the update was queued still do
        (steps made without some of them, e.g. while one was frozen, split a class)."""
        opt = self.optimizer
        if opt._stepped_by is self and self._held_at == opt.state.version:
            return True  # only this update's replays moved step counts since they last held: all by one
        updated = self._states()[1]
        for classes in self._classes:
            for members in classes:
                if len(members) > 1:
                    step = updated[members[0]]["step"]
                    for i in members:
                        if updated[i]["step"] != step:
                            return False
        self._held_at = opt.state.version
        return True

    def _step_classes(self, grads: list) -> list[list[tuple[int, list[int]]]]:
        """Per group, ``(step count, indices into params)`` of the parameters with a gradient, one
        entry per distinct step count (in order of first appearance)."""
        states = self.optimizer.state._d
        out = []
        i = 0
        for group in self.optimizer.param_groups:
            by_step: dict[int, list[int]] = {}
            for p in group["params"]:
                if grads[i] is not None:
                    by_step.setdefault(states[id(p)][1]["step"], []).append(i)
                i += 1
            out.append(list(by_step.items()))
        return out

    def hparams(self, grads: list | None = None) -> list[np.ndarray]:
        """One float32 array per parameter group: the hyperparameters of the next step.

        With ``grads`` (parallel to ``params``; None: not updated), a group whose updated parameters
        have different step counts (one missed steps while it had no gradient) gets one row per
        step count, a 2-D array, in :meth:`_step_classes` order; :meth:`queue` takes it so."""
        opt = self.optimizer
        if grads is None:
            return hparams_of_groups(opt)
        out = []
        bases = hparams_of_groups(opt)
        for group, classes, base in zip(opt.param_groups, self._step_classes(grads), bases):
            rows = [np.asarray(opt._group_hparams(group, step + 1), np.float32) for step, _ in classes]
            out.append(rows[0] if len(rows) == 1 else np.stack(rows) if rows else base)
        return out

    def write_hparams(self, outs: list) -> None:
        """Write :meth:`hparams` into ``outs`` (one byte memoryview per group, of a float32 array shaped
        as :meth:`hparams`), while not :meth:`changed`.

        Per group, the rows of the next steps are computed at once and kept while the group's
        hyperparameter values (``_hparams_key``: lr, betas, ... read on every call, so schedulers and
        hand edits count) stay equal to those they were computed from; a replay copies one row."""
        opt = self.optimizer
        groups = opt.param_groups
        tables = self._tables
        updated = self._states()[1]
        for gi, classes in enumerate(self._classes):
            if len(classes) != 1:
                if classes:
                    self._write_class_rows(outs[gi], groups[gi], [updated[m[0]]["step"] + 1 for m in classes])
                continue  # no parameter of the group is updated: its row is not read
            group = groups[gi]
            step = updated[classes[0][0]]["step"] + 1
            key = opt._hparams_key(group)
            table = tables[gi]
            if table is None or table[0] != key or not 0 <= step - table[1] < _TABLE_ROWS:
                table = tables[gi] = _table(opt, group, key, step)
            outs[gi][:] = table[2][step - table[1]] if table[2] is not None else \
                np.ascontiguousarray(opt._group_hparams(group, step), np.float32).tobytes()

    def _write_class_rows(self, out, group: dict, steps: list[int]) -> None:
        """One row per step class, computed (a group whose parameters' steps differ: rare)."""
        rows = np.stack([np.asarray(self.optimizer._group_hparams(group, t), np.float32) for t in steps])
        out[:] = rows.tobytes()

    def _forget_states(self) -> None:
        self._states_seen = (None, -1)
        self._group_states = []
        self._updated_states = []

    def _states(self) -> tuple[list[list[dict]], list[dict]]:
        """(per group, the parameters' state dicts; those of the updated parameters), cached
        while no state dict was replaced (``_State.version``)."""
        state = self.optimizer.state
        seen = self._states_seen
        if seen[0] is not state or seen[1] != state.version:
            d = state._d
            self._group_states = [[d[i][1] for i, _, _ in params] for params, _ in self._quick]
            self._updated_states = [d[id(p)][1] for p in self._updated]
            self._states_seen = (state, state.version)
        return self._group_states, self._updated_states

    def queue(self, grads: list, hparams: list) -> None:
        """Queue the update (inside ``ENGINE.exclusive`` or a capture recording's hold)."""
        opt = self.optimizer
        params = self.params
        if len(grads) != len(params):
            raise ValueError(f"capture_update: {len(grads)} grads for {len(params)} parameters")
        if len(hparams) != len(opt.param_groups):
            raise ValueError(f"capture_update: {len(hparams)} hyperparameter tensors for "
                             f"{len(opt.param_groups)} groups")
        self._classes = []
        if self.changed():
            raise RuntimeError("capture_update: the optimizer's parameters or options changed since "
                               "capture_update() was called; call it again")
        classes = self._step_classes(grads)
        per_step = []
        for cls, h in zip(classes, hparams):
            if len(cls) > 1:
                if tuple(h.shape[:1]) != (len(cls),):
                    raise ValueError(f"capture_update: a group with {len(cls)} step counts needs {len(cls)} "
                                     f"hyperparameter rows (hparams(grads)), got shape {h.shape}")
                h = {step + 1: h[c] for c, (step, _) in enumerate(cls)}  # each parameter reads its step's row
            per_step.append(h)
        self._updated = opt._queue_update_each(params, grads, per_step)
        pos = {id(p): k for k, p in enumerate(self._updated)}
        self._classes = [[[pos[id(params[i])] for i in members] for _, members in cls] for cls in classes]
        self._forget_states()
        states = opt.state._d
        self._state_read = [(id(p), k, v) for p in self._updated for k, v in states[id(p)][1].items()
                            if isinstance(v, Tensor)]

    def _state_replaced(self) -> bool:
        """Whether a state tensor the queued update reads is no longer in the optimizer's state
        (``load_state_dict`` gave a parameter a fresh state): the update would write the old one."""
        states = self.optimizer.state._d
        for pid, k, v in self._state_read:
            entry = states.get(pid)
            if entry is None or entry[1].get(k) is not v:
                return True
        return False

    def advance(self) -> None:
        """Count one more step for every parameter the queued update writes."""
        for st in self._states()[1]:
            st["step"] += 1
        self.optimizer._stepped_by = self


def _param_signature(params: list) -> list[tuple]:
    """(id, shape, dtype) per parameter (a list comprehension: the fastest exact form to compare)."""
    return [(id(p), p.shape, p.dtype) for p in params]


_PLAIN = frozenset((float, int, tuple))


def _plain(key) -> bool:
    """Only numbers (and tuples of them) key a table: a mutable value (a 0-d array edited in place)
    compares equal to itself, and would keep stale rows."""
    return type(key) is tuple and all(type(v) in _PLAIN and (type(v) is not tuple or _plain(v)) for v in key)


def _table(opt, group: dict, key, step: int) -> tuple:
    """(key, first step, the rows of steps first .. first + _TABLE_ROWS - 1 as bytes), or rows None
    when ``key`` cannot be trusted to see every change (each replay then computes its row)."""
    if not _plain(key):
        return (None, step, None)
    rows = np.ascontiguousarray(opt._hparams_rows(group, step, _TABLE_ROWS), np.float32)
    return (key, step, [r.tobytes() for r in rows])
