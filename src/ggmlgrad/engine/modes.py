"""Execution modes: graph mode, check mode, matmul precision.

Context-local (``contextvars``): a mode set in one thread or asyncio task is
not seen by another. ``GGMLGRAD_GRAPH=1`` / ``GGMLGRAD_GRAPH_CHECK=1`` apply
where nothing set the mode explicitly (read once, at first use in the process).
"""
from __future__ import annotations

import contextvars
import os
from typing import Callable

_graph: contextvars.ContextVar[bool | None] = contextvars.ContextVar("ggmlgrad_graph", default=None)
_check: contextvars.ContextVar[bool | None] = contextvars.ContextVar("ggmlgrad_check", default=None)
_precision: contextvars.ContextVar[str] = contextvars.ContextVar("ggmlgrad_precision", default="default")

PRECISIONS = ("default", "f32")

# The engine registers its drain here (the engine imports this module, not the reverse).
_on_graph_off: list[Callable[[], None]] = []


_env_cache: dict[str, bool] = {}


def _env_flag(name: str) -> bool:
    # Read once per process: os.environ lookups were ~19% of graph-mode op recording.
    v = _env_cache.get(name)
    if v is None:
        v = _env_cache[name] = os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")
    return v


def graph_enabled() -> bool:
    v = _graph.get()
    return _env_flag("GGMLGRAD_GRAPH") if v is None else v


def check_enabled() -> bool:
    v = _check.get()
    return _env_flag("GGMLGRAD_GRAPH_CHECK") if v is None else v


def precision() -> str:
    return _precision.get()


class ModeSetting:
    """The previous value of a mode, usable as a bool and as a context manager
    that restores it on exit (errors included)."""

    __slots__ = ("previous", "_restore")

    def __init__(self, previous, restore: Callable[[], None]):
        self.previous = previous
        self._restore = restore

    def __bool__(self) -> bool:
        return bool(self.previous)

    def __eq__(self, other) -> bool:
        return self.previous == (other.previous if isinstance(other, ModeSetting) else other)

    def __hash__(self) -> int:
        return hash(self.previous)

    def __repr__(self) -> str:
        return repr(self.previous)

    def __enter__(self):
        return self.previous

    def __exit__(self, *exc) -> None:
        self._restore()


def _validate_bool(fn: str, name: str, v, allow_none: bool) -> None:
    if v is None and allow_none:
        return
    if not isinstance(v, bool):
        raise TypeError(f"{fn}: `{name}` must be True or False{' or None' if allow_none else ''}, "
                        f"got {v!r}")


def _set_graph(on: bool) -> None:
    try:
        if not on and graph_enabled():
            for fn in _on_graph_off:
                fn()
    finally:  # the drain may raise (a failed graph, a bad index): the mode changes all the same
        _graph.set(on)


def graph_mode(on: bool | None = None, check: bool | None = None):
    """Query or set graph mode.

    ``graph_mode()`` returns the current setting. ``graph_mode(on, check=None)``
    sets it and returns the previous value, which also works as a context
    manager that restores the previous graph and check settings on exit.
    Turning graph mode off drains the queue.

    >>> import ggmlgrad as gg
    >>> with gg.graph_mode(True):
    ...     y = gg.ones(3) * 2      # queued
    >>> y.tolist()                  # leaving the block drained it
    [2.0, 2.0, 2.0]
    """
    if isinstance(on, ModeSetting):  # the value an earlier call returned: gg.graph_mode(prev)
        on = on.previous
    if on is None and check is None:
        return graph_enabled()
    _validate_bool("graph_mode()", "on", on, allow_none=True)
    _validate_bool("graph_mode()", "check", check, allow_none=True)
    prev_graph, prev_graph_raw, prev_check_raw = graph_enabled(), _graph.get(), _check.get()
    if check is not None:
        _check.set(check)
    if on is not None:
        _set_graph(on)

    def restore() -> None:
        _check.set(prev_check_raw)
        if prev_graph_raw is None:
            try:
                if graph_enabled() and not _env_flag("GGMLGRAD_GRAPH"):
                    _set_graph(False)
            finally:
                _graph.set(None)
        else:
            _set_graph(prev_graph_raw)

    return ModeSetting(prev_graph, restore)


def matmul_precision(value: str | None = None):
    """Query or set the matmul precision (``"default"`` or ``"f32"``).

    With ``"f32"`` every matmul node, forward and backward, is marked with
    ggml's F32 precision (matters on GPU backends that use half accumulators).

    >>> import ggmlgrad as gg
    >>> gg.matmul_precision()
    'default'
    """
    if isinstance(value, ModeSetting):  # the value an earlier call returned
        value = value.previous
    if value is None:
        return _precision.get()
    if value not in PRECISIONS:
        raise ValueError(f"matmul_precision(): expected one of {PRECISIONS}, got {value!r}")
    prev = _precision.get()
    _precision.set(value)
    return ModeSetting(prev, lambda: _precision.set(prev))


class local_mode:
    """Set several modes for a block, validating every argument before changing any.

    >>> import ggmlgrad as gg
    >>> with gg.local_mode(graph=True, matmul_precision="f32"):
    ...     assert gg.graph_mode() and gg.matmul_precision() == "f32"
    """

    def __init__(self, graph: bool | None = None, matmul_precision: str | None = None, check: bool | None = None):
        _validate_bool("local_mode()", "graph", graph, allow_none=True)
        _validate_bool("local_mode()", "check", check, allow_none=True)
        if matmul_precision is not None and matmul_precision not in PRECISIONS:
            raise ValueError(f"local_mode(): `matmul_precision` must be one of {PRECISIONS} or None, "
                             f"got {matmul_precision!r}")
        self.graph, self.precision, self.check = graph, matmul_precision, check
        self._settings: list[ModeSetting] = []

    def __enter__(self):
        if self.precision is not None:
            self._settings.append(matmul_precision(self.precision))
        if self.graph is not None or self.check is not None:
            self._settings.append(graph_mode(self.graph, check=self.check))
        return self

    def __exit__(self, *exc) -> None:
        while self._settings:
            self._settings.pop().__exit__(None, None, None)
