"""Replayed forwards of built-in modules (Linear, the activations, a Sequential of them).

A policy called on a small batch at every environment step spends most of its time recording
ops in Python. A built-in layer's forward is pure ops on its argument and its parameters, so a
call identical to an earlier one (same module state, argument shape/dtype/device, graph mode and
matmul precision, no autograd recording needed) appends the earlier call's records again as one
segment, one queued record (:mod:`..engine.forward`); in eager mode that segment is computed at
once, by the cached plan of its earlier replays (one compute instead of one per op). The values
and errors are those of running the layers: their internals are not observable. Check mode,
capture recordings and autograd always run the layers themselves.
"""
from __future__ import annotations

import threading

from ..engine import ENGINE, context
from ..engine import forward as fwd
from ..tensor import Tensor
from ..tensor.grad_mode import _enabled
from .module import REPLAYED, WATCH

class _Depth(threading.local):
    depth = 0  # > 0 inside a call that runs its layers for a reason that holds for all of them


_local = _Depth()


class _Entry:
    """One module's cached segment for one call key, and what it depends on: the module tree's
    attribute dicts (by identity), its parameters, the global module epoch."""

    __slots__ = ("epoch", "sizes", "publics", "params", "seg", "out_shape", "out_dtype", "fails", "plan")

    def __init__(self, m) -> None:
        mods = list(m.modules())
        for sm in mods:
            sm.__dict__.setdefault("_replay_cache", {})  # before the snapshot: it is one of the dict's values
        self.epoch = WATCH.epoch
        # Per module: its dict and the dict's size, and its public attributes (a patched forward, an
        # activation's slope); the private ones are the stores and the training flag (epoch above).
        self.sizes = tuple((sm.__dict__, len(sm.__dict__)) for sm in mods)
        self.publics = tuple((sm.__dict__, k, v) for sm in mods for k, v in sm.__dict__.items()
                             if not k.startswith("_"))
        self.params = tuple(m.parameters())
        self.seg = None
        self.out_shape = self.out_dtype = None
        self.plan = None  # eager mode: a weak reference to the plan a replay was computed with
        # A tree with a module that is not built-in (or a missing child) never records a segment.
        self.fails = 0 if all(type(sm) in REPLAYED and None not in sm._modules.values() for sm in mods) else 99

    def current(self) -> bool:
        """Whether nothing the segment depends on changed since it was recorded."""
        if self.epoch != WATCH.epoch:
            return False
        for d, n in self.sizes:
            if len(d) != n:
                return False
        for d, k, v in self.publics:
            if d.get(k) is not v:
                return False
        return True


def _needs_tape(entry: _Entry) -> bool:
    for p in entry.params:
        if p.requires_grad:
            return True
    return False


def call(m, x):
    """``m(x)`` for a module of a type in ``module.REPLAYED``: a replayed segment when the call is
    identical to a recorded one, else the module's forward (recorded as a segment when it can be)."""
    if _local.depth or not isinstance(x, Tensor):
        return m.forward(x)
    c = context.current()
    grad = _enabled.get()
    if c.module_observer is not None or c.observer is not None or c.check or (grad and x.requires_grad):
        return _plain(m, x)
    key = (x.shape, x.dtype, x.device, c.graph, c.precision)
    cache = m.__dict__.get("_replay_cache")
    entry = cache.get(key) if cache is not None else None
    if entry is not None and grad and _needs_tape(entry):
        return _plain(m, x)
    if entry is None or not entry.current():
        entry = _Entry(m)
        m.__dict__["_replay_cache"][key] = entry
        if grad and _needs_tape(entry):
            return _plain(m, x)
    seg = entry.seg
    if seg is not None:
        e = ENGINE.current
        with e.lock:
            if fwd.appendable(e, c) and fwd.resolvable(e, seg, x):
                out = Tensor._blank(entry.out_shape, entry.out_dtype, x.device)
                if c.graph:
                    fwd.replay(e, seg, x, out)
                    return out
                # Eager: the queue is empty; the plan of an earlier replay computes it directly.
                if entry.plan is not None and fwd.compute_alone(e, c, seg, entry.plan, x, out):
                    return out
                e.last_plan = None
                fwd.replay(e, seg, x, out)
                e.drain("eager")
                entry.plan = fwd.plan_of_last_drain(e)
                return out
        return m.forward(x)
    if entry.fails >= 3:
        return m.forward(x)
    return _record(m, x, c, entry)


def _plain(m, x):
    """``m.forward(x)`` with the modules inside running their layers too (capture, check mode,
    autograd: what made ``m`` run its layers holds for them), without asking each again."""
    _local.depth += 1
    try:
        return m.forward(x)
    finally:
        _local.depth -= 1


def _record(m, x, c, entry: _Entry):
    """Run ``m.forward(x)`` recording lazily (in eager mode too, then computed by one drain) and
    keep its records as ``entry``'s segment."""
    e = ENGINE.current
    with e.lock:
        mark = fwd.mark(e, c)
        if mark is None:
            return m.forward(x)
        token = None if c.graph else context.push(graph_set=True)
        _local.depth += 1
        try:
            out = m.forward(x)
            seg = fwd.take(e, mark, x, out, {id(p) for p in entry.params})
        finally:
            _local.depth -= 1
            fwd.end(e, mark)
            if token is not None:
                context.pop(token)
                if len(e):
                    e.drain("eager")  # what the call queued is computed before it returns, as in eager mode
        if seg is None:
            entry.fails += 1
        else:
            entry.seg = seg
            entry.out_shape, entry.out_dtype = seg.records[seg.out][2], seg.records[seg.out][3]
        return out


def register(*types) -> None:
    """Let calls of these exact module types replay (their forward must be pure ops on the argument
    and the module's parameters, reading no other state than attributes of the module tree)."""
    for t in types:
        REPLAYED[t] = call
