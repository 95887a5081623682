"""The engine's observer interface: what a pushed execution context is told about.

A capture recording (``capture/recording.py``) must see every computed tensor its graph reads
(they are rebound or re-checked at replay) and must refuse uploads, read-backs and computes
(their values would be frozen into every replay). It does so by pushing an execution context
(:mod:`.context`) whose ``observer`` is an :class:`Observer`; the engine calls the observer of
the calling context, and nothing else in the engine knows about capture.

While an observer is active the engine also changes how it builds, so that the observer sees
every node: ops are built at once (no cached plans, no lazily recorded queue) and computed
tensors enter graphs through per-graph leaves (not their storage's shared header).

>>> from ggmlgrad.engine import context
>>> from ggmlgrad.engine.observer import Observer
>>> class Uploads(Observer):
...     def __init__(self):
...         self.sites = []
...     def on_upload(self, site):
...         self.sites.append(site)
>>> import ggmlgrad as gg
>>> obs = Uploads()
>>> token = context.push(observer=obs)
>>> _ = gg.tensor([1.0, 2.0])
>>> context.pop(token)
>>> obs.sites
['tensor()']
"""
from __future__ import annotations

from .context import current


class Observer:
    """Hooks the engine calls while this observer's context is active (all default to nothing).

    A hook may raise to refuse the event (a capture recording raises ``CaptureError``); the
    engine raises it at the call that caused the event, before doing anything.
    """

    def on_leaf(self, array, leaf: int) -> int | None:
        """``array`` (a computed tensor) enters the graph being built as the ggml node ``leaf``; a
        node returned instead stands for it (a recording that wrote that memory: its new value)."""

    def on_upload(self, site: str) -> None:
        """Host data is about to be written into a tensor's memory (``site``: the caller's name)."""

    def on_download(self, site: str) -> None:
        """A tensor's value is about to be read back to the host."""

    def on_drain(self, reason: str) -> None:
        """The queue is about to be computed (``reason``: "read", "eager", "inplace", ...)."""


def active_observer() -> "Observer | None":
    """The calling thread's / task's observer (a capture recording's), or None: what code outside
    the engine checks before an upload or read-back a recording must refuse, or before reading a
    tensor's value now (a recording cannot).

    >>> from ggmlgrad.engine import active_observer
    >>> active_observer() is None   # nothing is recording
    True
    """
    return current().observer
