"""Shared pieces of the optimizers built on :mod:`ggmlgrad.ops.optim_extra`'s write ops: argument
checks with torch's messages, and hyperparameter vectors packed by layout name."""
from __future__ import annotations

import numpy as np


def check_nonneg(group: dict, *keys: str) -> None:
    """torch's ``Invalid <key> value`` for a negative (or non-number) option."""
    for k in keys:
        v = group[k]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
            raise ValueError(f"Invalid {k} value: {v!r}")


def check_betas(group: dict) -> None:
    """torch's ``Invalid beta parameter`` checks; stores the betas as a tuple."""
    betas = group["betas"]
    if not isinstance(betas, (tuple, list)) or len(betas) != 2:
        raise ValueError(f"Invalid betas: {betas!r} (expected two numbers)")
    group["betas"] = tuple(betas)
    for i, b in enumerate(betas):
        if isinstance(b, bool) or not isinstance(b, (int, float)) or not 0.0 <= b < 1.0:
            raise ValueError(f"Invalid beta parameter at index {i}: {b!r}")


def check_flags(owner: str, group: dict, *keys: str) -> None:
    """A ``TypeError`` naming ``owner`` for an option that must be a bool."""
    for k in keys:
        if not isinstance(group[k], bool):
            raise TypeError(f"{owner}: {k} must be a bool, got {group[k]!r}")


def pack(layout: tuple, **values: float) -> np.ndarray:
    """The hyperparameter vector of ``layout`` (computed in float64, rounded to float32 once)."""
    missing = set(layout) - set(values)
    if missing:
        raise KeyError(f"hyperparameters missing: {sorted(missing)}")
    return np.array([values[k] for k in layout], np.float64).astype(np.float32)
