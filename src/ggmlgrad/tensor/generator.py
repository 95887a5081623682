"""``gg.Generator``: a seedable random stream object with torch's interface, for the ``generator=``
arguments of samplers, ``random_split`` and ``DataLoader``.

Op-level random functions (``gg.randn``, dropout, sampling) draw from the process-wide generator that
``gg.manual_seed`` seeds, like torch's default generator; a :class:`Generator` is a separate stream.

>>> import ggmlgrad as gg
>>> g = gg.Generator().manual_seed(0)
>>> int(g.rng.integers(0, 100)) == int(gg.Generator().manual_seed(0).rng.integers(0, 100))
True
"""
from __future__ import annotations

import numpy as np

from ..runtime import resolve_device


class Generator:
    """A random stream: ``manual_seed(seed)`` (returns self, as torch's), ``seed()``,
    ``initial_seed()``, ``get_state()``/``set_state()``; ``rng`` is its NumPy generator."""

    def __init__(self, device="cpu"):
        self.device = resolve_device(device)
        self.seed()

    def manual_seed(self, seed: int) -> "Generator":
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise TypeError(f"Generator.manual_seed: seed must be an int, got {type(seed).__name__}")
        self._initial = int(seed) % 2**64
        self.rng = np.random.default_rng(self._initial)
        return self

    def seed(self) -> int:
        """Reseed from fresh OS entropy and return the new seed."""
        self.manual_seed(int(np.random.SeedSequence().generate_state(1, np.uint64)[0]))
        return self._initial

    def initial_seed(self) -> int:
        return self._initial

    def get_state(self) -> dict:
        return {"initial_seed": self._initial, "state": self.rng.bit_generator.state}

    def set_state(self, state: dict) -> "Generator":
        self._initial = int(state["initial_seed"])
        self.rng = np.random.default_rng(self._initial)
        self.rng.bit_generator.state = state["state"]
        return self


def numpy_rng(generator) -> np.random.Generator:
    """The NumPy stream behind a ``generator=`` argument: a :class:`Generator`, a NumPy generator, an
    int seed, or ``None`` (a stream seeded from the process-wide generator, so ``gg.manual_seed``
    makes runs reproducible, as torch's default generator does)."""
    if generator is None:
        from .creation import generator as default
        return np.random.default_rng(int(default().integers(0, 2**63 - 1)))
    if isinstance(generator, Generator):
        return generator.rng
    if isinstance(generator, np.random.Generator):
        return generator
    if isinstance(generator, (int, np.integer)) and not isinstance(generator, bool):
        return np.random.default_rng(int(generator))
    raise TypeError(f"generator must be a gg.Generator, a numpy Generator, an int seed or None, "
                    f"got {type(generator).__name__}")
