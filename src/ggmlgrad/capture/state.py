"""The module state a recording depends on: training flags it read, and the structure it read from.

A captured function follows ``train()``/``eval()`` and replaced parameters, buffers and submodules
(SPEC §4, §6). While a recording runs, :class:`Observer` hears (from ``gg.nn.Module``) every module
called or read from and every training flag read. The flags become part of the signature (a recording
per mode, so ``eval()`` then ``train()`` replays both without recording again); the structure becomes a
:class:`Structure` snapshot, compared only after ``WATCH.epoch`` moved (any ``train()``/``eval()``
or parameter/buffer/submodule assignment anywhere), so a plain replay pays one int comparison.

>>> import ggmlgrad as gg
>>> from ggmlgrad.capture.state import observing
>>> m = gg.nn.Dropout(0.5)
>>> with observing() as seen:
...     _ = m.training
>>> [(type(k).__name__, flag) for k, flag in seen.modes.values()]
[('Dropout', True)]
"""
from __future__ import annotations

import contextlib
import weakref
from typing import Iterator

from ..nn.module import WATCH, Module
from ..tensor.tensor import Tensor

_STORES = ("_parameters", "_buffers", "_modules")
_KIND = {"_parameters": "parameter", "_buffers": "buffer", "_modules": "submodule", "": "tensor attribute"}


class Observer:
    """Modules a recording touched (in first-touch order) and the training flags it read."""

    def __init__(self) -> None:
        self.modules: dict[int, Module] = {}
        self.modes: dict[int, tuple[Module, bool]] = {}

    def saw(self, module: Module) -> None:
        self.modules.setdefault(id(module), module)

    def read_mode(self, module: Module, mode: bool) -> None:
        self.modules.setdefault(id(module), module)
        self.modes.setdefault(id(module), (module, mode))


@contextlib.contextmanager
def observing() -> Iterator[Observer]:
    """Observe module reads while the body runs (a recording); the previous observer is restored."""
    obs = Observer()
    prev, WATCH.observer = WATCH.observer, obs
    try:
        yield obs
    finally:
        WATCH.observer = prev


def training_flag(ref: weakref.ref):
    """The current training flag of a watched module (None once it is gone); not observed."""
    m = ref()
    return None if m is None else m.__dict__.get("_training", True)


def _entries(m: Module) -> tuple:
    """What ``m`` holds by name: (store, name, object) for its registered and tensor attributes."""
    out = []
    for store in _STORES:
        for name, v in m.__dict__.get(store, {}).items():
            out.append((store, name, v))
    for name, v in m.__dict__.items():
        if isinstance(v, Tensor):
            out.append(("", name, v))
    return tuple(out)


class Structure:
    """Snapshot of the modules a recording touched and everything below them (by identity, weakly)."""

    def __init__(self, roots) -> None:
        seen: set[int] = set()
        self.items: list[tuple] = []
        for root in roots:
            if id(root) in seen:
                continue  # inside an earlier root's subtree: already there
            for m in root.modules():
                if id(m) in seen:
                    continue
                seen.add(id(m))
                self.items.append((weakref.ref(m), type(m).__name__,
                                   tuple((s, n, None if v is None else _ref(v)) for s, n, v in _entries(m))))

    def changed(self) -> str | None:
        """Why the structure differs from the snapshot (a replaced or removed object), or None."""
        for ref, cls, old in self.items:
            m = ref()
            if m is None:
                return f"a {cls} module the recording read was freed"
            now = _entries(m)
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
