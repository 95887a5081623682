"""``gg.einsum``: torch's Einstein summation, lowered to diagonals, sums, permutes, reshapes and matmuls.

The equation is parsed as torch parses it (letters ``a-zA-Z``, one ``...`` per operand, an explicit
``->`` output or the implicit one: the ellipsis dims, then the letters used once, in alphabetical
order). Each operand first loses its repeated letters (``ii`` → its diagonal) and the letters no
other operand or the output uses (summed). The operands are then joined left to right, each pair
by one batched matmul: letters both share and still needed are the batch, letters both share and
no longer needed are contracted, the rest stay free. Dimensions of size 1 broadcast against the
same letter's size elsewhere, as torch allows. Every step is an ordinary op, so gradients and all
modes come for free; an intermediate of more than 4 dimensions is a clear ``ValueError``.

>>> import ggmlgrad as gg
>>> a, b = gg.ones(2, 3), gg.ones(3, 4)
>>> gg.einsum("ij,jk->ik", a, b).shape, gg.einsum("ii", gg.eye(3)).item()
((2, 4), 3.0)
"""
from __future__ import annotations

import numpy as np

from ..engine import float32, int32
from ..ops import op
from ..ops.decl import public
from .shape_extra import _float, diagonal
from .tensor import Tensor, matmul

_LETTERS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _parse_term(term: str, where: str) -> list:
    """A term's labels: letters, and ``"..."`` for its ellipsis."""
    labels, i = [], 0
    while i < len(term):
        if term.startswith("...", i):
            if "..." in labels:
                raise RuntimeError(f"einsum(): found more than one ellipsis ('...') in {where}")
            labels.append("...")
            i += 3
        elif term[i] in _LETTERS:
            labels.append(term[i])
            i += 1
        else:
            raise RuntimeError(f"einsum(): invalid subscript given at index {i} in the equation string, subscripts "
                               f"must be in [a-zA-Z] ({where}: {term!r})")
    return labels


def _expand_ellipsis(labels: list, ndim: int, n_ell: int, k: int) -> list:
    """``labels`` with ``...`` replaced by this operand's ellipsis labels (the last ``n`` of ``n_ell``)."""
    if "..." not in labels:
        if len(labels) != ndim:
            raise RuntimeError(f"einsum(): the number of subscripts in the equation ({len(labels)}) does not match "
                               f"the number of dimensions ({ndim}) for operand {k} and no ellipsis was given")
        return labels
    n = ndim - (len(labels) - 1)
    if n < 0:
        raise RuntimeError(f"einsum(): the number of subscripts in the equation ({len(labels) - 1}) is more than the "
                           f"number of dimensions ({ndim}) for operand {k}")
    i = labels.index("...")
    return labels[:i] + [("...", j) for j in range(n_ell - n, n_ell)] + labels[i + 1:]


def _parse(equation: str, operands: tuple):
    eq = equation.replace(" ", "")
    if eq.count("->") > 1:
        raise RuntimeError("einsum(): more than one '->' found in the equation")
    lhs, arrow, rhs = eq.partition("->")
    terms = [_parse_term(t, f"operand {k}") for k, t in enumerate(lhs.split(","))]
    if len(terms) != len(operands):
        more = "more" if len(operands) > len(terms) else "fewer"
        raise RuntimeError(f"einsum(): {more} operands were provided than specified in the equation")
    n_ell = max([t.ndim - (len(lab) - 1) for t, lab in zip(operands, terms) if "..." in lab] or [0])
    inputs = [_expand_ellipsis(lab, t.ndim, n_ell, k) for k, (t, lab) in enumerate(zip(operands, terms))]
    ell = [("...", j) for j in range(n_ell)]
    if arrow:
        out = _parse_term(rhs, "the output")
        for lab in out:
            if lab != "..." and not any(lab in t for t in inputs):
                raise RuntimeError(f"einsum(): output subscript {lab} does not appear in the equation for any input "
                                   f"operand")
            if lab != "..." and out.count(lab) > 1:
                raise RuntimeError(f"einsum(): output subscript {lab} appears more than once in the output")
        if "..." in out:
            i = out.index("...")
            out = out[:i] + ell + out[i + 1:]
    else:
        counts: dict = {}
        for t in inputs:
            for lab in t:
                if not isinstance(lab, tuple):
                    counts[lab] = counts.get(lab, 0) + 1
        out = ell + sorted(lab for lab, c in counts.items() if c == 1)
    return inputs, out


def _sizes(inputs: list, operands: tuple) -> dict:
    """Each label's size; 1 broadcasts against any size (torch's rule)."""
    sizes: dict = {}
    for k, (labels, t) in enumerate(zip(inputs, operands)):
        for lab, n in zip(labels, t.shape):
            m = sizes.get(lab, 1)
            if m != 1 and n != 1 and m != n:
                name = "ellipsis dimension" if isinstance(lab, tuple) else f"subscript {lab}"
                raise RuntimeError(f"einsum(): operands do not broadcast: {name} has size {m} and {n} (operand {k}, "
                                   f"shape {t.shape})")
            sizes[lab] = max(m, n) if m != 1 else n
    return sizes


def _diagonals(t: Tensor, labels: list, k: int) -> tuple[Tensor, list]:
    """``t`` with each repeated label reduced to its diagonal (moved last), as ``ii`` asks."""
    labels = list(labels)
    while True:
        rep = next((lab for lab in labels if labels.count(lab) > 1), None)
        if rep is None:
            return t, labels
        p = labels.index(rep)
        q = labels.index(rep, p + 1)
        if t.shape[p] != t.shape[q]:
            raise RuntimeError(f"einsum(): subscript {rep} is repeated for operand {k} but the sizes don't match, "
                               f"{t.shape[p]} != {t.shape[q]}")
        t = op.reshape(diagonal(t, 0, p, q), shape=tuple(n for i, n in enumerate(t.shape) if i not in (p, q))
                       + (t.shape[p],))
        labels = [lab for i, lab in enumerate(labels) if i not in (p, q)] + [rep]


def _sum_out(t: Tensor, labels: list, keep: set) -> tuple[Tensor, list]:
    drop = tuple(i for i, lab in enumerate(labels) if lab not in keep)
    if not drop:
        return t, labels
    return op.sum(t, axis=drop, keepdim=False), [lab for lab in labels if lab in keep]


def _arrange(t: Tensor, labels: list, order: list, sizes: dict) -> Tensor:
    """``t`` permuted to ``order`` (labels it has) and broadcast to each label's full size."""
    axes = tuple(labels.index(lab) for lab in order)
    if axes != tuple(range(len(axes))):
        t = op.permute(t, axes=axes)
    full = tuple(sizes[lab] for lab in order)
    return t if t.shape == full else op.broadcast_to(t, shape=full)


def _join(a: Tensor, la: list, b: Tensor, lb: list, later: set, sizes: dict) -> tuple[Tensor, list]:
    """Two operands joined by one batched matmul (batch × free_a × contracted @ batch × contracted × free_b)."""
    batch = [lab for lab in la if lab in lb and lab in later]
    contract = [lab for lab in la if lab in lb and lab not in later]
    fa = [lab for lab in la if lab not in lb]
    fb = [lab for lab in lb if lab not in la]
    labels = batch + fa + fb
    if len(labels) > 4:
        raise ValueError(f"einsum: an intermediate result would have {len(labels)} dimensions; ggmlgrad supports at "
                         f"most 4 (reorder the operands or contract in steps)")
    nb, nfa, nfb, nk = (int(np.prod([sizes[lab] for lab in g], dtype=np.int64)) for g in (batch, fa, fb, contract))
    am = op.reshape(_arrange(a, la, batch + fa + contract, sizes), shape=(nb, nfa, nk))
    bm = op.reshape(_arrange(b, lb, batch + contract + fb, sizes), shape=(nb, nk, nfb))
    out = matmul(am, bm)
    return op.reshape(out, shape=tuple(sizes[lab] for lab in labels)), labels


@public(function="einsum")
def einsum(equation: str, *operands) -> Tensor:
    """Einstein summation over ``operands`` as ``equation`` says (torch.einsum): ``"ij,jk->ik"`` (matmul),
    ``"bij,bjk->bik"`` (batched), ``"ii->i"`` (diagonal), ``"ii"`` (trace), ``"i,j->ij"`` (outer),
    ``"...ij->...ji"`` (ellipsis), implicit outputs (``"ij,jk"``). Computes in float32; int32 operands
    give int32 (exact within 2**24).

    >>> import ggmlgrad as gg
    >>> gg.einsum("i,i->", gg.tensor([1.0, 2.0]), gg.tensor([3.0, 4.0])).item()
    11.0
    """
    if not isinstance(equation, str):
        raise TypeError(f"einsum(): the equation must be a string, got {type(equation).__name__}")
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not operands:
        raise RuntimeError("einsum(): must provide at least one operand")
    for t in operands:
        if not isinstance(t, Tensor):
            raise TypeError(f"einsum(): expected Tensors as operands, got {type(t).__name__}")
    if any(t.dtype is not operands[0].dtype for t in operands):
        raise RuntimeError(f"einsum(): expected all operands to have the same dtype, got "
                           f"{[t.dtype.name for t in operands]}")
    dtype = operands[0].dtype
    inputs, out = _parse(equation, operands)
    sizes = _sizes(inputs, operands)
    ts = []
    for k, (t, labels) in enumerate(zip(operands, inputs)):
        t, labels = _diagonals(_float(t), labels, k)
        others = set(out).union(*(set(x) for j, x in enumerate(inputs) if j != k))
        ts.append(_sum_out(t, labels, others))
    acc, la = ts[0]
    for k in range(1, len(ts)):
        later = set(out).union(*(set(labels) for _, labels in ts[k + 1:]))
        acc, la = _join(acc, la, ts[k][0], ts[k][1], later, sizes)
    acc, la = _sum_out(acc, la, set(out))
    acc = _arrange(acc, la, out, sizes) if out else acc
    if acc is operands[0]:
        acc = op.reshape(acc, shape=acc.shape)   # a new tensor, never the operand itself
    if dtype is int32:
        return op.cast(acc, dtype=int32)
    return acc if dtype is float32 else op.cast(acc, dtype=dtype)
