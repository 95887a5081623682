"""The execution context: everything that decides how an op runs, in one object per context.

An :class:`ExecContext` holds the modes (graph mode, check mode, matmul precision), the active
observer (a capture recording's, see :mod:`.observer`), the observer of module reads (a capture
recording's, told by ``nn.Module`` which modules and training flags it read), the active recorder,
the one noise source
(see ``tensor/random.py``), and the counters and the trace cache the drains use (every plan they
replay, :mod:`.trace_cache`). It lives in one
``contextvars.ContextVar``: threads and asyncio tasks each see their own, and a capture
recording *pushes* a context (:func:`push`) and pops it on exit (:func:`pop`), restoring every
setting at once, instead of patching module globals.

Contexts are never changed in place: a change makes a new one (:meth:`ExecContext.replace`) and
sets it, so a context object another task still holds never changes under it. The default
context holds the process-wide counters and trace cache (``GGMLGRAD_GRAPH=1`` /
``GGMLGRAD_GRAPH_CHECK=1`` apply where nothing set graph or check mode; read once per process).

>>> import ggmlgrad as gg
>>> from ggmlgrad.engine import context
>>> token = context.push(graph_set=True)
>>> gg.graph_mode()
True
>>> context.pop(token)
>>> gg.graph_mode()
False
"""
from __future__ import annotations

import contextvars
import os

from .counters import COUNTERS
from .trace_cache import TRACE

_env_cache: dict[str, bool] = {}


def env_flag(name: str) -> bool:
    """An on/off environment variable, read once per process."""
    v = _env_cache.get(name)
    if v is None:
        v = _env_cache[name] = os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")
    return v


class ExecContext:
    """One context's settings (read them as attributes; change them with :func:`update`/:func:`push`).

    ``graph_set``/``check_set`` are the explicit settings (None: the environment decides);
    ``graph``/``check`` are the resolved values the engine reads on every op.
    """

    __slots__ = ("graph_set", "check_set", "graph", "check", "precision", "observer", "module_observer",
                 "recorder", "noise", "counters", "trace_cache", "_with_modes")

    def __init__(self, graph_set: bool | None = None, check_set: bool | None = None, precision: str = "default",
                 observer=None, module_observer=None, recorder=None, noise=None, counters=COUNTERS,
                 trace_cache=TRACE) -> None:
        self.graph_set = graph_set
        self.check_set = check_set
        self.graph = env_flag("GGMLGRAD_GRAPH") if graph_set is None else graph_set
        self.check = env_flag("GGMLGRAD_GRAPH_CHECK") if check_set is None else check_set
        self.precision = precision
        self.observer = observer      # an observer.Observer, or None
        # Hears module reads (``saw(module)``, ``read_mode(module, flag)``; capture/state.py), or None
        self.module_observer = module_observer
        self.recorder = recorder      # the capture recorder whose context this is, or None
        self.noise = noise            # callable(NoiseRequest) -> Tensor | None, or None: ordinary draws
        self.counters = counters
        self.trace_cache = trace_cache  # every plan the drains replay (engine/trace_cache.py)
        self._with_modes: dict = {}  # (graph_set, check_set) -> the copy with_modes made (see there)

    def _copy(self) -> "ExecContext":
        new = _blank(ExecContext)  # attribute by attribute: modes change on every graph_mode block
        new.graph_set, new.check_set, new.graph, new.check = self.graph_set, self.check_set, self.graph, self.check
        new.precision, new.observer, new.recorder, new.noise = self.precision, self.observer, self.recorder, self.noise
        new.module_observer = self.module_observer
        new.counters, new.trace_cache = self.counters, self.trace_cache
        new._with_modes = {}
        return new

    def with_modes(self, graph_set: bool | None, check_set: bool | None) -> "ExecContext":
        """A copy with graph and check mode set (None: the environment decides).

        Made once per context and pair of settings, then reused: contexts never change once made,
        and a ``with gg.graph_mode(True)`` around every training step would copy one each time."""
        key = (graph_set, check_set)
        new = self._with_modes.get(key)
        if new is not None:
            return new
        new = self._copy()
        new.graph_set, new.check_set = graph_set, check_set
        new.graph = env_flag("GGMLGRAD_GRAPH") if graph_set is None else graph_set
        new.check = env_flag("GGMLGRAD_GRAPH_CHECK") if check_set is None else check_set
        if len(self._with_modes) < 9:  # 3 x 3 settings at most
            self._with_modes[key] = new
        return new

    def replace(self, **changes) -> "ExecContext":
        """A copy with ``changes`` (names of :class:`ExecContext`'s arguments)."""
        new = self._copy()
        for name, value in changes.items():
            if name not in _ARGS:
                raise TypeError(f"ExecContext.replace: unknown setting {name!r}")
            setattr(new, name, value)
        if "graph_set" in changes or "check_set" in changes:
            return new.with_modes(new.graph_set, new.check_set)
        return new

    def __repr__(self) -> str:
        return (f"ExecContext(graph={self.graph}, check={self.check}, precision={self.precision!r}, "
                f"observer={self.observer!r}, noise={self.noise!r})")


_blank = object.__new__
_ARGS = ("graph_set", "check_set", "precision", "observer", "module_observer", "recorder", "noise", "counters",
         "trace_cache")

# Threads and tasks that set nothing share the default (never changed in place, so safe to share).
DEFAULT = ExecContext()
_CTX: contextvars.ContextVar[ExecContext] = contextvars.ContextVar("ggmlgrad_context", default=DEFAULT)

# The calling thread's / task's execution context. The ContextVar's own get: every op calls it.
current = _CTX.get


def update(**changes) -> None:
    """Change settings of the current context (graph mode, precision...) until changed again."""
    _CTX.set(current().replace(**changes))


def set_modes(graph_set: bool | None, check_set: bool | None) -> contextvars.Token:
    """Set graph and check mode of the current context (None: the environment decides); the token
    can undo exactly this change while nothing else changed the context (:func:`undo`)."""
    return _CTX.set(current().with_modes(graph_set, check_set))


def undo(token: contextvars.Token, expected: ExecContext) -> bool:
    """Go back to the context before ``token``'s change if the current one is still ``expected``
    (the context that change made); False, changing nothing, otherwise."""
    if _CTX.get() is not expected:
        return False
    try:
        _CTX.reset(token)
    except (ValueError, RuntimeError):  # made in another task's context, or already undone
        return False
    return True


def push(**changes) -> contextvars.Token:
    """Enter a context that differs from the current one by ``changes``; :func:`pop` its token to
    restore the previous context exactly (modes, observers, recorder, noise source)."""
    return _CTX.set(current().replace(**changes))


def pop(token: contextvars.Token) -> None:
    """Leave the context :func:`push` entered (every setting it changed comes back)."""
    _CTX.reset(token)
