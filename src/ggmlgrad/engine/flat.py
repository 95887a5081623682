"""Nodes built in a row-merged shape (see ``ops.build.row_merged``).

ggml's CPU kernels loop over rows and call a vector routine per row, so an elementwise op over
short rows pays a per-row cost: x * y on 256 rows of 8 took 4.5 µs, on one row of 2048 0.3 µs.
An elementwise op whose inputs all have its result's shape is therefore built on merged rows;
its result is a :class:`FlatNode`, and every consumer sees it through a reshape view (a view
costs no compute). The node itself stays the op's result, so it keeps its own memory.
"""
from __future__ import annotations

from .._ggml import lib


class FlatNode(int):
    """A result node whose ggml shape is ``ne`` merged into fewer rows; an int (ggml pointer) so
    everything that only allocates, binds or computes it treats it as any node."""

    def __new__(cls, node: int, ne: tuple):
        self = super().__new__(cls, node)
        self.ne = ne
        self.view = 0
        return self

    def shaped(self, ctx: int) -> int:
        """The node in its tensor's shape: one reshape view, shared by every consumer."""
        v = self.view
        if not v:
            ne = self.ne
            v = self.view = lib.reshape_4d(ctx, self, ne[0], ne[1], ne[2], ne[3])
        return v
