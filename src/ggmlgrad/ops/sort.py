"""argsort along one dimension with torch's order: ggml's argsort kernel, made stable and NaN-safe.

ggml's argsort is ``std::sort`` per row with ``<`` (or ``>``): not stable, and NaN breaks its strict
weak order (undefined behaviour). So the sort runs twice on float32 keys:

1. NaN is replaced by +inf and the row is argsorted (ascending or descending);
2. along the sorted row, equal neighbours (+inf == +inf) form groups numbered by a cumsum; the
   second key ``(2 * group + nan_last) * n + original_index`` is distinct per element, and its
   ascending argsort puts ties in their original order (stable) and NaN after +inf (ascending) or
   before it (descending): torch's rule that NaN is larger than everything.

The second key is exact in float32 while ``(2n + 2) * n < 2**24`` (rows up to 2896): longer rows
keep the group order (NaN placement) but not the order of ties, and ``stable=True`` raises there.
"""
from __future__ import annotations

import math

from .._ggml import consts, lib
from ..engine import int32
from .build import zeros_node
from .elementwise import _cmp_from_diff, branch_parts, is_number01, scalar_parts, select_node
from .indexing import _zeros_like_shape
from .registry import define, promote_types
from .scan import as_rows, check_dim, from_rows
from .shapes import numel

#: The longest row whose sort is stable (its second key is exact in float32).
STABLE_ROW = 2896
_ASC, _DESC = 0, 1   # enum ggml_sort_order


def _infer_argsort(x, dim=-1, descending=False, stable=False):
    promote_types("argsort", x)
    axis = check_dim("argsort", dim, x.ndim)
    for k, v in (("descending", descending), ("stable", stable)):
        if not isinstance(v, bool):
            raise TypeError(f"argsort: {k} must be a bool, got {v!r}")
    n = x.shape[axis] if x.ndim else 1
    if stable and n > STABLE_ROW:
        raise ValueError(f"argsort: stable=True is supported for rows up to {STABLE_ROW} elements, got "
                         f"{n} (dimension {dim} of {tuple(x.shape)}); pass stable=False (ties then take any order)")
    return x.shape, int32


def _take(ctx, mat, idx, n: int, rows: int):
    """mat[r, idx[r, j]] for each row r (ggml get_rows with the rows as batches), as [n, rows]."""
    return lib.reshape_2d(ctx, lib.get_rows(ctx, lib.reshape_3d(ctx, mat, 1, n, rows), idx), n, rows)


def _group_numbers(ctx, vs, n: int, rows: int):
    """0, 0, 1, 1, 1, 2, ... along each sorted row: a new number where a value differs from the one
    before it (inf == inf; the keys hold no NaN)."""
    prev = lib.cont(ctx, lib.view_2d(ctx, vs, n - 1, rows, n * 4, 0))
    cur = lib.cont(ctx, lib.view_2d(ctx, vs, n - 1, rows, n * 4, 4))
    same = _cmp_from_diff(ctx, lib.sub(ctx, cur, prev), lib.add(ctx, cur, prev), "eq")
    starts = lib.concat(ctx, zeros_node(ctx, (rows, 1)), lib.scale_bias(ctx, same, -1.0, 1.0), 0)
    return lib.cumsum(ctx, starts)


@define("argsort", infer=_infer_argsort, differentiable=False,
        doc="indices sorting ``x`` along ``dim`` (torch.argsort; see the module docstring)")
def _argsort(ctx, nodes, inputs, out, dim=-1, descending=False, stable=False):
    x = inputs[0]
    if numel(x.shape) == 0:
        return _zeros_like_shape(ctx, out.shape, out.dtype, nodes[0])
    node = nodes[0] if x.dtype is not int32 else lib.cast(ctx, nodes[0], consts.TYPE_F32)
    axis = check_dim("argsort", dim, x.ndim) if x.ndim else 0
    mat, n, rows = as_rows(ctx, node, x.shape, axis)
    nan01 = lib.scale_bias(ctx, is_number01(ctx, mat), -1.0, 1.0)
    key = select_node(ctx, nan01, scalar_parts(ctx, mat, math.inf), branch_parts(ctx, mat))
    idx = lib.argsort(ctx, key, _DESC if descending else _ASC)
    if n > 1:
        gid = _group_numbers(ctx, _take(ctx, key, idx, n, rows), n, rows)
        nan_sorted = _take(ctx, nan01, idx, n, rows)
        last = nan_sorted if not descending else lib.scale_bias(ctx, nan_sorted, -1.0, 1.0)
        key2 = lib.add(ctx, lib.scale(ctx, gid, 2.0), last)
        idx_f = lib.cast(ctx, idx, consts.TYPE_F32)
        if (2 * n + 2) * n < 2 ** 24:
            key2 = lib.add(ctx, lib.scale(ctx, key2, float(n)), idx_f)
        order = lib.argsort(ctx, key2, _ASC)
        idx = lib.cast(ctx, _take(ctx, idx_f, order, n, rows), consts.TYPE_I32)
    return from_rows(ctx, idx, x.shape, axis)


