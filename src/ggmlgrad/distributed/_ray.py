"""The one place ``gg.distributed`` imports Ray: lazily, so ``import ggmlgrad`` never needs it."""
from __future__ import annotations


def ray_module():
    """The ``ray`` module, or an ImportError that says how to install it."""
    try:
        import ray
    except ImportError as e:   # pragma: no cover - exercised only where ray is absent
        raise ImportError("gg.distributed needs Ray: pip install 'ggmlgrad[distributed]' (ray>=2.40)") from e
    return ray


def worker_setup(num_threads: int | None) -> None:
    """Run first in every actor: fix the ggml thread count (several workers share the cores)."""
    if num_threads is not None:
        from ..runtime import set_num_threads
        set_num_threads(num_threads)
