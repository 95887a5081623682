"""Training checkpoints for a driver that may restart: model, optimizer and iteration in one file.

Written with ``gg.save`` (atomic: a crash mid-save leaves the previous checkpoint), read with
``gg.load`` (validated: a damaged file raises ``CheckpointError`` and changes nothing).
"""
from __future__ import annotations

import os

from ..io import load, save

__all__ = ["save_checkpoint", "load_checkpoint"]


def save_checkpoint(path: str | os.PathLike, model, optimizer, iteration: int) -> None:
    """Save ``model`` and ``optimizer`` state and the next ``iteration`` to ``path`` (.safetensors/.gguf).

    >>> import os, tempfile, ggmlgrad as gg
    >>> m = gg.nn.Linear(2, 1); opt = gg.optim.Adam(m.parameters())
    >>> p = os.path.join(tempfile.mkdtemp(), "ckpt.safetensors")
    >>> save_checkpoint(p, m, opt, iteration=5)
    >>> load_checkpoint(p, gg.nn.Linear(2, 1), gg.optim.Adam(gg.nn.Linear(2, 1).parameters()))
    5
    """
    if not isinstance(iteration, int) or iteration < 0:
        raise ValueError(f"save_checkpoint: iteration must be a non-negative int, got {iteration!r}")
    save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "iteration": iteration}, path)


def load_checkpoint(path: str | os.PathLike, model, optimizer) -> int:
    """Restore ``model`` and ``optimizer`` from :func:`save_checkpoint`'s file; returns its iteration."""
    state = load(path)
    if not isinstance(state, dict) or not {"model", "optimizer", "iteration"} <= set(state):
        raise ValueError(f"load_checkpoint: {os.fspath(path)!r} is not a checkpoint from save_checkpoint")
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return int(state["iteration"])
