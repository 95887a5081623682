"""Errors raised by the engine."""


class GraphError(RuntimeError):
    """A queued graph failed to compute; raised at the sync point that drained it."""


class GraphMemoryError(GraphError, MemoryError):
    """A queued graph did not fit in the device's memory (caught by ``except MemoryError`` too)."""


class IndexValueError(IndexError, RuntimeError):
    """An index or class value out of range (an ``IndexError``; a ``RuntimeError`` too, as PyTorch
    raises for ``gather`` and ``one_hot``). The same error in eager mode, graph mode and capture."""


class IndexErrorText(str):
    """A failed tensor's error text whose read raises an ``IndexError`` (see :class:`PendingError`)."""


class PendingError(RuntimeError):
    """A tensor's value cannot be read: the graph that was to compute it failed."""

    def __new__(cls, *args):
        # A tensor failed by an index check (engine/checks.py) raises as an IndexError when read.
        if cls is PendingError and args and type(args[0]) is IndexErrorText:
            cls = PendingIndexError
        return super().__new__(cls, *args)


class PendingIndexError(PendingError, IndexError):
    """Reading a tensor whose graph was failed by an out-of-range index value."""


class CaptureError(RuntimeError):
    """Something inside a capture recording would be frozen into every replay."""


# torch raises RuntimeError where Python code would raise ValueError or TypeError: these classes are
# both, so ``except RuntimeError`` in a ported program and ``except ValueError`` in ggmlgrad code catch them.
class ShapeError(ValueError, RuntimeError):
    """Shapes that do not fit an op (torch: RuntimeError)."""


class DTypeError(TypeError, RuntimeError):
    """A dtype an op refuses (torch: RuntimeError, or NotImplementedError for a missing kernel)."""


class IndexRangeError(IndexError, ValueError):
    """A dimension or index out of range: an ``IndexError`` as in PyTorch, and a ``ValueError``
    like every other bad-argument error of ggmlgrad ops (``except`` either one)."""
