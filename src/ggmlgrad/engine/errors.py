"""Errors raised by the engine."""


class GraphError(RuntimeError):
    """A queued graph failed to compute; raised at the sync point that drained it."""


class GraphMemoryError(GraphError, MemoryError):
    """A queued graph did not fit in the device's memory (caught by ``except MemoryError`` too)."""


class PendingError(RuntimeError):
    """A tensor's value cannot be read: the graph that was to compute it failed."""


class CaptureError(RuntimeError):
    """Something inside a capture recording would be frozen into every replay."""
