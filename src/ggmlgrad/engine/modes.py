"""Execution modes: graph mode, check mode, matmul precision.

The modes live in the execution context (:mod:`.context`), which is context-local
(``contextvars``): a mode set in one thread or asyncio task is not seen by another. ``GGMLGRAD_GRAPH=1`` / ``GGMLGRAD_GRAPH_CHECK=1`` apply
where nothing set the mode explicitly (read once, at first use in the process).
"""
from __future__ import annotations

from typing import Callable

from .context import current, set_modes, undo, update

PRECISIONS = ("default", "f32")

# The engine registers its drain here (the engine imports this module, not the reverse).
_on_graph_off: list[Callable[[], None]] = []


def graph_enabled() -> bool:
    return current().graph


def check_enabled() -> bool:
    return current().check


def precision() -> str:
    return current().precision


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

    def __exit__(self, exc_type, exc, tb) -> None:
        _restore_all([self._restore], exc)


def _validate_bool(fn: str, name: str, v, allow_none: bool) -> None:
    if v is None and allow_none:
        return
    if not isinstance(v, bool):
        raise TypeError(f"{fn}: `{name}` must be True or False{' or None' if allow_none else ''}, "
                        f"got {v!r}")


def _graph_turned_off() -> None:
    """Leaving graph mode is a sync point: drain (a failure raises, the mode stays off)."""
    for fn in _on_graph_off:
        fn()


def _restore_all(restores: list[Callable[[], None]], exc: BaseException | None) -> None:
    """Run every restore, even when one raises (a drain leaving graph mode). When the block itself
    raised (``exc``), its exception propagates and a restore failure is attached to it as a note;
    otherwise the first restore failure is raised."""
    failure = None
    for restore in restores:
        try:
            restore()
        except BaseException as e:  # noqa: PERF203 (few restores)
            if failure is None:
                failure = e
    if failure is None:
        return
    if exc is None:
        raise failure
    note = f"ggmlgrad: leaving the mode block also drained the queue, which failed: {type(failure).__name__}: {failure}"
    if hasattr(exc, "add_note"):
        exc.add_note(note)
    else:  # Python 3.10
        exc.__notes__ = [*getattr(exc, "__notes__", []), note]


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
    ctx = current()
    prev_graph, prev_graph_raw, prev_check_raw = ctx.graph, ctx.graph_set, ctx.check_set
    token = set_modes(prev_graph_raw if on is None else on, prev_check_raw if check is None else check)
    mine = current()
    if prev_graph and not mine.graph:  # set first: a failing drain must not leave graph mode on
        _graph_turned_off()

    def restore() -> None:
        # Every setting back first, then the drain that leaving graph mode implies.
        was_on = graph_enabled()
        if not undo(token, mine):  # something else changed the context since: set just these two
            set_modes(prev_graph_raw, prev_check_raw)
        if was_on and not graph_enabled():
            _graph_turned_off()

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
        return current().precision
    if value not in PRECISIONS:
        raise ValueError(f"matmul_precision(): expected one of {PRECISIONS}, got {value!r}")
    prev = current().precision
    update(precision=value)
    return ModeSetting(prev, lambda: update(precision=prev))


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

    def __exit__(self, exc_type, exc, tb) -> None:
        restores = [s._restore for s in reversed(self._settings)]
        self._settings = []
        _restore_all(restores, exc)
