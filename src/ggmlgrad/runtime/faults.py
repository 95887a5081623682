"""Test seam: make the next operation of one stage fail, as a real failure there would.

Stages and where they fire:

- ``alloc``: a drain about to allocate its results and intermediates, a cached plan or a capture
  recording about to allocate its graph (default error: MemoryError);
- ``upload``: a host→device write (``Storage.write``, a capture replay's input upload);
- ``compute``: a graph compute (a drain, a cached plan, a capture replay's graphs);
- ``download``: a device→host read (``Storage.read``: reading a value, a capture replay's outputs).

Sites test :data:`ARMED` first (one dict truth test), so an unused seam costs nothing.

>>> from ggmlgrad.runtime import faults
>>> faults.fail_next("compute", skip=1)   # the second graph compute from now raises RuntimeError
>>> faults.clear()
"""
from __future__ import annotations

STAGES = ("alloc", "upload", "compute", "download")

ARMED: dict[str, list] = {}   # stage → [hits still to let through, message, exception type]


def fail_next(stage: str, message: str | None = None, error: type[BaseException] | None = None,
              skip: int = 0) -> None:
    """Make the ``skip+1``-th operation of ``stage`` from now raise ``error(message)``."""
    if stage not in STAGES:
        raise ValueError(f"fail_next(): stage must be one of {STAGES}, got {stage!r}")
    if error is None:
        error = MemoryError if stage == "alloc" else RuntimeError
    ARMED[stage] = [skip, message or f"injected {stage} failure", error]


def clear() -> None:
    """Disarm every stage."""
    ARMED.clear()


def hit(stage: str) -> None:
    """Count one operation of ``stage``; raise its armed failure when its turn has come."""
    f = ARMED.get(stage)
    if f is None:
        return
    if f[0] > 0:
        f[0] -= 1
        return
    del ARMED[stage]
    raise f[2](f[1])
