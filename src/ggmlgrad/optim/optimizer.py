"""The optimizer base: parameter groups, per-parameter state, state dicts, one-graph steps.

Updates are ops of kind ``"writes"`` (``sgd``, ``adam``, ``adamw_fused`` in
:mod:`ggmlgrad.ops.optim_ops`), queued through :func:`ggmlgrad.ops.registry.write` like
every in-place write. :meth:`Optimizer.step` is ``ENGINE.exclusive: upload the
hyperparameters -> queue the write ops on the current .grad -> drain -> step counters + 1``.

Capture (``gg.capture_step`` records the update once and replays it) uses ONE public
method, :meth:`Optimizer.capture_update`, which returns a :class:`CaptureUpdate`: the
hyperparameter arrays of the next step, queueing the update on given gradients and
hyperparameter tensors, and advancing the step counters after a replay.

Options that change the graph's structure rather than its inputs (momentum on or
off, nesterov, maximize, weight decay zero or not, fused or composed Adam, the
parameter set) are summarised by ``capture_update.signature()``; a recording keyed on it stays
valid while only the hyperparameter values change.

Differences from PyTorch (on purpose): state tensors (moments, momentum buffers)
are allocated when a parameter joins the optimizer, with ``step`` 0, so
``opt.state[p]`` exists before the first step; ``state_dict()`` returns device
snapshots (clones), not references to the live state, and ``step`` is an int.
"""
from __future__ import annotations

from collections.abc import Iterable, MutableMapping
from typing import Any, Callable

import numpy as np

from ..engine import COMPUTED, ENGINE, CaptureError, float32, graph_mode, new_from_host, upload_into
from ..engine.plans import Exact, freeze
from ..ops import op
from ..ops.registry import write
from ..tensor import Tensor, no_grad
from ..tensor.views import refresh_views_of
from ..tensor.grad_mode import enable_grad
from ..tensor.tensor import _refuse_while_recording as refuse_while_recording
from . import state_dict as _state_dict
from .capture_update import CaptureUpdate
from .state_dict import _zeros_f32

_HPARAM_SITE = "optimizer.hparams"
_F32 = np.dtype(np.float32)


class _State(MutableMapping):
    """``opt.state[p]`` keyed by parameter identity (tensors compare elementwise, not by identity)."""

    def __init__(self) -> None:
        self._d: dict[int, tuple[Tensor, dict]] = {}
        self.version = 0  # moves when a parameter's state dict is replaced or removed (capture caches them)

    def __getitem__(self, p: Tensor) -> dict:
        return self._d[id(p)][1]

    def __setitem__(self, p: Tensor, value: dict) -> None:
        self._d[id(p)] = (p, value)
        self.version += 1

    def __delitem__(self, p: Tensor) -> None:
        del self._d[id(p)]
        self.version += 1

    def __contains__(self, p) -> bool:
        return id(p) in self._d and self._d[id(p)][0] is p

    def __iter__(self):
        return (p for p, _ in self._d.values())

    def __len__(self) -> int:
        return len(self._d)


class Optimizer:
    """Base class. Subclasses define ``_validate_group``, ``_state_tensor_keys``,
    ``_group_hparams`` and ``_update_rule`` (the write op that updates a parameter).

    >>> import ggmlgrad as gg
    >>> w = gg.tensor([1.0, 2.0], requires_grad=True)
    >>> opt = gg.optim.SGD([w], lr=0.1)
    >>> for _ in range(2):           # gradient accumulation: two backward() per step
    ...     (w * w).sum().backward()
    >>> opt.step(); opt.zero_grad()
    >>> [round(x, 4) for x in w.tolist()]
    [0.6, 1.2]
    """

    _FLOPS_PER_ELEMENT = 10    # rough cost of one element's update, for the CPU thread policy

    #: names of the per-parameter state tensors (subclasses; may depend on the group)
    def _state_tensor_keys(self, group: dict) -> tuple[str, ...]:
        raise NotImplementedError

    def __init__(self, params: Iterable, defaults: dict):
        if isinstance(params, Tensor):
            raise TypeError("optimizer params must be an iterable of Tensors or dicts, got a Tensor "
                            "(wrap it in a list)")
        self.defaults = dict(defaults)
        self.param_groups: list[dict] = []
        self.state = _State()
        # Hyperparameter tensors by (group, position), rewritten each step: the update that read
        # them last has run (step() drains before queuing), and a new tensor costs 3x the write.
        self._hparam_tensors: dict[tuple[int, int], Tensor] = {}
        self._layouts: dict[tuple, tuple] = {}  # see _update_layout
        groups = list(params)
        if not groups:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        with graph_mode(True):   # the state's zero fills run as one graph (left pending until needed)
            for g in groups:
                self.add_param_group(g)

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for i, g in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            for k in sorted(g):
                if k != "params":
                    lines.append(f"    {k}: {g[k]}")
        return "\n".join(lines) + "\n)"

    # ------------------------------------------------------------------ groups
    def flat_params(self) -> list[Tensor]:
        """All parameters of all groups, in group order (the order :meth:`CaptureUpdate.queue`'s grads follow)."""
        return [p for g in self.param_groups for p in g["params"]]

    def add_param_group(self, param_group: dict) -> None:
        """Add a group (``{"params": [...], "lr": ...}``); unset options take the defaults.

        ``params`` may hold ``(name, tensor)`` pairs (``model.named_parameters()``, as torch 2.x):
        the names are kept in the group's ``"param_names"`` (and in ``state_dict()``).

        >>> import ggmlgrad as gg
        >>> opt = gg.optim.SGD(gg.nn.Linear(2, 1).named_parameters(), lr=0.1)
        >>> opt.param_groups[0]["param_names"]
        ['weight', 'bias']
        """
        if not isinstance(param_group, dict):
            raise TypeError(f"add_param_group: expected a dict, got {type(param_group).__name__}")
        params = param_group.get("params")
        if isinstance(params, Tensor):
            params = [params]
        elif isinstance(params, set):
            raise TypeError("optimizer parameters must be an ordered collection (a set's order changes between runs)")
        else:
            params = list(params) if params is not None else []
        if not params:
            raise ValueError("add_param_group: the group has no parameters")
        params, names = _split_names(params)
        seen = {id(p) for p in self.flat_params()}
        for i, p in enumerate(params):
            if not isinstance(p, Tensor):
                raise TypeError(f"optimizer can only optimize Tensors, got {type(p).__name__} at position {i}")
            if not p.dtype.is_float:
                raise TypeError(f"optimizer can only optimize float tensors, got {p.dtype.name} (shape {p.shape})")
            if not p.is_leaf:
                raise ValueError(f"can't optimize a non-leaf Tensor (shape {p.shape}); use .detach().requires_grad_()")
            if id(p) in seen:
                raise ValueError(f"some parameters appear in more than one parameter group (shape {p.shape})")
            seen.add(id(p))
        group = {k: v for k, v in param_group.items() if k != "params"}
        if names is not None:
            group["param_names"] = names
        for k, v in self.defaults.items():
            group.setdefault(k, v)
        self._validate_group(group)
        for p in params:
            self._validate_param(p, group)
        group["params"] = params
        self.param_groups.append(group)
        with no_grad():
            for p in params:
                self.state[p] = self._fresh_state(p, group)

    def _validate_param(self, p: Tensor, group: dict) -> None:
        """Hook: refuse a parameter the group's options cannot update (before anything changes)."""

    def _fresh_state(self, p: Tensor, group: dict) -> dict:
        st: dict[str, Any] = {"step": 0}
        for key in self._state_tensor_keys(group):
            st[key] = _zeros_f32(p)
        return st

    def _validate_group(self, group: dict) -> None:
        lr = group.get("lr")
        if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not lr >= 0:
            raise ValueError(f"Invalid learning rate: {lr!r}")

    # ------------------------------------------------------------------ state dicts (optim/state_dict.py)
    def state_dict(self) -> dict:
        """``{"state": {index: {"step": int, name: Tensor}}, "param_groups": [{..., "params": [index]}]}``.

        Tensors are device snapshots (clones), so later steps do not change a saved dict.
        """
        return _state_dict.state_dict(self)

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore groups' options, step counters and state tensors (bit-exact for float32 state).

        Everything is validated before anything is written: a refused dict leaves the
        optimizer unchanged. State tensors are written in place (one graph compute).
        """
        _state_dict.load_state_dict(self, state_dict)

    # ------------------------------------------------------------------ capture (optim/capture_update.py)
    def capture_update(self) -> CaptureUpdate:
        """The optimizer's side of a captured training step (what ``gg.capture_step`` uses).

        Creates any state the current options need (a momentum buffer turned on since the last
        step), so call it outside a recording. See :class:`CaptureUpdate`.

        >>> import ggmlgrad as gg
        >>> w = gg.tensor([1.0, 2.0], requires_grad=True)
        >>> opt = gg.optim.SGD([w], lr=0.5)
        >>> upd = opt.capture_update()
        >>> [a.tolist() for a in upd.hparams()]        # lr, weight decay, momentum, first-step damping
        [[0.5, 0.0, 0.0, 1.0]]
        """
        return CaptureUpdate(self)

    _stepped_by = None  # the CaptureUpdate whose replay advanced step counts last (None: an uncaptured step)

    def _advance_params(self, params: list[Tensor]) -> None:
        states = self.state._d
        for p in params:
            states[id(p)][1]["step"] += 1
        self._stepped_by = None

    # ------------------------------------------------------------------ grads
    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop the gradients (``set_to_none``) or replace them by zeros (a graph op, no upload)."""
        if set_to_none:
            for group in self.param_groups:
                for p in group["params"]:
                    p.grad = None
            return
        with no_grad():
            for p in self.flat_params():
                if p.grad is not None:
                    p.grad = op.fill_like(p.grad, c=0.0)

    # ------------------------------------------------------------------ stepping
    def step(self, closure: Callable[[], Any] | None = None):
        """One update of every parameter that has a gradient: ONE graph compute for all of them.

        The queue is drained first (pending gradients compute), then the update runs
        as its own graph. ``closure`` (re-evaluates the loss, as in PyTorch) is optional.
        """
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        params = self.flat_params()
        grads = [p.grad for p in params]
        self._before_step()
        try:
            with ENGINE.exclusive("optimizer"):
                hparams = self._upload_hparams(self._step_hparams(params, grads))
                updated = self._queue_update_each(params, grads, hparams)
        except CaptureError:
            refuse_while_recording(f"{type(self).__name__}.step")  # the user's line, not the drain's
            raise
        self._advance_params(updated)
        refresh_views_of(updated)  # views of a parameter (w[0], w.T) show the update, as in torch
        return loss

    def _before_step(self) -> None:
        """Hook: create state that a group option now needs (e.g. a momentum buffer)."""

    def _step_hparams(self, params, grads) -> list[dict[int, np.ndarray]]:
        """Per group: next-step value → hparams array. Parameters of a group normally share a
        step count; one that missed updates (no gradient) gets its own bias corrections."""
        out = []
        i = 0
        states = self.state._d  # by id: _State.__getitem__ per parameter is a Python call each step
        for group in self.param_groups:
            by_step: dict[int, np.ndarray] = {}
            for p in group["params"]:
                if grads[i] is not None:
                    t = states[id(p)][1]["step"] + 1
                    if t not in by_step:
                        by_step[t] = self._group_hparams(group, t)
                i += 1
            out.append(by_step)
        return out

    def _upload_hparams(self, per_group: list[dict[int, np.ndarray]]) -> list[dict[int, Tensor]]:
        cache = self._hparam_tensors
        out = []
        for gi, (group, by_step) in enumerate(zip(self.param_groups, per_group)):
            like = group["params"][0]
            tensors = {}
            for k, (t, values) in enumerate(by_step.items()):
                h = cache.get((gi, k))
                if h is None or h.shape != values.shape or h.device is not like.device or h._status != COMPUTED:
                    h = cache[(gi, k)] = _hparam_tensor(values, like)
                else:
                    if values.dtype is not _F32 or not values.flags.c_contiguous:  # `is`: ~70 ns, `!=` ~250
                        values = np.ascontiguousarray(values, dtype=np.float32)
                    upload_into(h, values, _HPARAM_SITE)
                tensors[t] = h
            out.append(tensors)
        return out

    def _queue_update_each(self, params, grads, hparams: list) -> tuple[Tensor, ...]:
        """Queue every parameter's update: ONE write op per update rule (a step of an MLP is one or
        two records, not one per parameter: the queue's per-record cost is paid every step)."""
        layout, updated = self._update_layout(params, grads)
        states = self.state._d
        # A group whose parameters share a step count (the usual case) has one hparams tensor.
        hparams = [next(iter(h.values())) if type(h) is dict and len(h) == 1 else h for h in hparams]
        for opname, entries, parts, work in layout:
            inputs: list = []
            for i, gi, keys, tensors in entries:
                p = params[i]
                st = states[id(p)][1]
                hp = hparams[gi]
                inputs += (p, grads[i], hp[st["step"] + 1] if type(hp) is dict else hp)
                if tensors is None:
                    for k in keys:
                        inputs.append(st[k])
                else:
                    inputs += tensors
            write(opname, tuple(inputs), parts, work)
        return updated

    def _update_layout(self, params, grads) -> tuple:
        """(per write op: (op name, [(param index, group index, state keys, None or the state
        tensors themselves)], parts, work); the parameters that have a gradient).

        The layout depends only on which parameters (and dtypes) have gradients and on each
        group's ``_group_structure`` (the options ``_update_rule`` reads), so it is kept per
        that key: making it calls ``_update_rule`` for every parameter, about 2 us each, on
        every step. An optimizer without its own ``_group_structure`` makes it every step."""
        cacheable = type(self)._group_structure is not Optimizer._group_structure
        if cacheable:
            key = (tuple([(id(p), p.dtype, p.shape) for p in params]), tuple([g is None for g in grads]),
                   tuple([(len(g["params"]), self._group_structure(g)) for g in self.param_groups]))
            layout = self._layouts.get(key)
            if layout is not None:
                return layout
        batches: dict = {}  # write op name -> [entries, parts, work]
        i = 0
        for gi, group in enumerate(self.param_groups):
            keys_of_group = self._state_tensor_keys(group)
            for p in group["params"]:
                g = grads[i]
                i += 1
                if g is None:
                    continue
                st = self.state[p]
                opname, state_tensors, options = self._update_rule(p, group, st)
                _check_state_shapes(self, p, state_tensors)
                if p.numel_ == 0:
                    continue   # nothing to write (and ggml cannot allocate a 0-byte update in a recorded graph)
                keys = tuple(k for k in keys_of_group if k in st)
                tensors = None
                if len(keys) != len(state_tensors) or any(st[k] is not t for k, t in zip(keys, state_tensors)):
                    cacheable = False  # state tensors that are not the group's keys, in order
                    tensors = tuple(state_tensors)
                batch = batches.get(opname)
                if batch is None:
                    batch = batches[opname] = [[], [], 0.0]
                batch[0].append((i - 1, gi, keys, tensors))
                n_inputs = 3 + len(state_tensors)
                items = tuple(options.items())
                # Exact: bools key as they are; other values also go in frozen (type and sign exact)
                batch[1].append((n_inputs, items) if all(type(v) is bool for _, v in items)
                                else (n_inputs, items, tuple([(k, freeze(v)) for k, v in items])))
                batch[2] += self._FLOPS_PER_ELEMENT * p.numel_  # lets big updates use threads
        layout = (tuple((opname, tuple(entries), Exact(parts), work)
                        for opname, (entries, parts, work) in batches.items()),
                  tuple([p for p, g in zip(params, grads) if g is not None]))
        if cacheable:
            if len(self._layouts) >= 8:
                self._layouts.clear()
            self._layouts[key] = layout
        return layout

    # ------------------------------------------------------------------ subclass hooks
    def _group_structure(self, group: dict) -> tuple:
        """What of ``group`` shapes the update graph (part of the capture signature)."""
        return ()

    def _group_hparams(self, group: dict, step: int) -> np.ndarray:
        raise NotImplementedError

    def _hparams_key(self, group: dict) -> tuple | None:
        """Every group value ``_group_hparams`` reads besides the step, as a tuple of numbers (None or
        anything else: not known, so capture computes the hyperparameters on each replay)."""
        return None

    def _hparams_rows(self, group: dict, first_step: int, n: int) -> np.ndarray:
        """``_group_hparams`` of steps ``first_step .. first_step + n - 1``, one row each (float32)."""
        return np.stack([np.asarray(self._group_hparams(group, first_step + i), np.float32) for i in range(n)])

    def _update_rule(self, p: Tensor, group: dict, state: dict) -> tuple:
        """``(write op name, state_tensors, options)``: the registered write op (kind ``"writes"``)
        that updates ``p``, its target group being ``(p, grad, hparams, *state_tensors)``, and its
        keyword options (hashable values: they key the cached plan that replays the update)."""
        raise NotImplementedError


# ---------------------------------------------------------------------- helpers
def _check_state_shapes(opt: Optimizer, p: Tensor, state_tensors) -> None:
    """A parameter whose value was replaced by one of another shape (``p.data = t``) no longer fits
    its state: refuse before ggml sees mismatched shapes."""
    for t in state_tensors:
        if t.shape != p.shape:
            raise RuntimeError(f"{type(opt).__name__}.step: a parameter now has shape {p.shape} but its "
                               f"optimizer state has shape {t.shape} (was its .data replaced?); make a new "
                               f"optimizer for the new parameters")


def _split_names(params: list) -> tuple[list, list | None]:
    """``[(name, tensor), ...]`` → (tensors, names); plain tensors → (tensors, None). Torch's rule:
    all named or none."""
    named = [isinstance(p, tuple) for p in params]
    if not any(named):
        return params, None
    if not all(named):
        raise ValueError("all optimizer params should be with/without names. Some param names are missing")
    for i, p in enumerate(params):
        if len(p) != 2 or not isinstance(p[0], str):
            raise TypeError(f"optimizer: a named parameter must be a (str, Tensor) pair, got {p!r:.60} at position {i}")
    return [p[1] for p in params], [p[0] for p in params]



def _hparam_tensor(values: np.ndarray, like: Tensor) -> Tensor:
    arr = np.ascontiguousarray(values, dtype=np.float32)
    t = Tensor._blank(arr.shape, float32, like.device)
    return new_from_host(t, arr, _HPARAM_SITE)
