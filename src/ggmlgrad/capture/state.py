"""The module state a recording depends on: training flags it read, and the structure it read from.

A captured function follows ``train()``/``eval()`` and replaced parameters, buffers and submodules
(SPEC §4, §6). While a recording runs, :class:`Observer` (the execution context's ``module_observer``,
see :func:`observing`) hears from ``gg.nn.Module`` every module called or read from and every training
flag read. The flags become part of the signature (a recording
per mode, so ``eval()`` then ``train()`` replays both without recording again); the structure becomes a
:class:`Structure` snapshot, compared only after ``WATCH.epoch`` moved (any ``train()``/``eval()``
or parameter/buffer/submodule assignment anywhere), so a plain replay pays one int comparison.

>>> import ggmlgrad as gg
>>> from ggmlgrad.capture.state import observing
>>> m = gg.nn.Dropout(0.5)
>>> with observing() as seen:
...     _ = m.training
>>> [(type(k).__name__, flag) for k, flag in seen.live_modes()]
[('Dropout', True)]
"""
from __future__ import annotations

import contextlib
import weakref
from typing import Iterator

from ..engine import context
from ..nn.module import WATCH, Module
from ..tensor.tensor import Tensor

_STORES = ("_parameters", "_buffers", "_modules")
_KIND = {"_parameters": "parameter", "_buffers": "buffer", "_modules": "submodule", "": "tensor attribute"}


class Observer:
    """Modules a recording touched (in first-touch order) and the training flags it read, held weakly:
    a module the function built for itself is gone when the recording ends, and is not followed."""

    def __init__(self) -> None:
        self.modules: dict[int, weakref.ref] = {}
        self.modes: dict[int, tuple[weakref.ref, bool]] = {}

    def saw(self, module: Module) -> None:
        if id(module) not in self.modules:
            self.modules[id(module)] = weakref.ref(module)

    def read_mode(self, module: Module, mode: bool) -> None:
        self.saw(module)
        if id(module) not in self.modes:
            self.modes[id(module)] = (self.modules[id(module)], mode)

    def live_modules(self) -> list[Module]:
        return [m for m in (r() for r in self.modules.values()) if m is not None]

    def live_modes(self) -> list[tuple[Module, bool]]:
        return [(m, mode) for m, mode in ((r(), mode) for r, mode in self.modes.values()) if m is not None]


@contextlib.contextmanager
def observing() -> Iterator[Observer]:
    """Observe the module reads of this thread / task while the body runs (a recording): its
    :class:`Observer` is the pushed execution context's ``module_observer``, so recordings on other
    threads or tasks neither see nor miss each other's reads."""
    obs = Observer()
    token = context.push(module_observer=obs)
    try:
        yield obs
    finally:
        context.pop(token)


def training_flag(ref: weakref.ref):
    """The current training flag of a watched module (None once it is gone); not observed."""
    m = ref()
    return None if m is None else m.__dict__.get("_training", True)


def watch(module: Module) -> weakref.ref:
    """A weak reference whose module's death moves ``WATCH.epoch`` (watchers then forget it)."""
    return weakref.ref(module, _moved)


def _moved(_ref) -> None:
    WATCH.epoch += 1


def _entries(m: Module, plain: tuple) -> tuple:
    """What ``m`` holds by name: (store, name, object) for its registered objects, then for the plain
    tensor attributes named in ``plain`` (store "")."""
    out = []
    d = m.__dict__
    for store in _STORES:
        for name, v in d.get(store, {}).items():
            out.append((store, name, v))
    for name in plain:
        out.append(("", name, d.get(name)))
    return tuple(out)


class Structure:
    """Snapshot of the modules a recording touched and everything below them (by identity, weakly).

    Plain tensor attributes count only if the recording read them (``read``: ids of the tensors it
    read): one a forward writes (``self.last = h``) must not make every later replay record again."""

    def __init__(self, roots, read: set[int] = frozenset()) -> None:
        seen: set[int] = set()
        self.items: list[tuple] = []
        for root in roots:
            if id(root) in seen:
                continue  # inside an earlier root's subtree: already there
            for m in root.modules():
                if id(m) in seen:
                    continue
                seen.add(id(m))
                plain = tuple(n for n, v in m.__dict__.items() if isinstance(v, Tensor) and id(v) in read)
                self.items.append((weakref.ref(m), type(m).__name__, plain,
                                   tuple((s, n, None if v is None else _ref(v)) for s, n, v in _entries(m, plain))))

    def changed(self) -> str | None:
        """Why the structure differs from the snapshot (a replaced or removed object), or None."""
        for ref, cls, plain, old in self.items:
            m = ref()
            if m is None:
                return f"a {cls} module the recording read was freed"
            now = _entries(m, plain)
            if len(now) == len(old) and all(s == s0 and n == n0 and (v is None if r is None else r() is v)
                                            for (s, n, v), (s0, n0, r) in zip(now, old)):
                continue
            return f"{_what_changed(cls, old, now)} (not updated in place)"
        return None


def _ref(v):
    try:
        return weakref.ref(v)
    except TypeError:  # not weak-referenceable: hold it (only plain tensors and modules are recorded)
        return lambda v=v: v


def _what_changed(cls: str, old: tuple, now: tuple) -> str:
    before = {(s, n): r for s, n, r in old}
    after = {(s, n): v for s, n, v in now}
    for (s, n), v in after.items():
        if (s, n) not in before:
            return f"{cls}: a {_KIND[s]} {n!r} was added"
        r = before[(s, n)]
        if (v is None) != (r is None) or (r is not None and r() is not v):
            return f"{cls}: the {_KIND[s]} {n!r} was replaced"
    for s, n in before:
        if (s, n) not in after:
            return f"{cls}: the {_KIND[s]} {n!r} was removed"
    return f"{cls}: its parameters, buffers or submodules were reordered"
