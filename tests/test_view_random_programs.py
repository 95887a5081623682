"""Random programs over one shared base: views of views (rows, columns, steps, transposes,
permutes, unsqueeze/squeeze, reshape, chunk, narrow, expand, unfold, detach, ``.data``), writes
through NumPy (the base's array and views' arrays), in-place ops through any view, and reads of
every view, in eager and graph mode. The reference is NumPy running the same program on its own
views of the same kind (the same aliasing rules as torch; ``reshape`` of a non-contiguous view
copies in both). Graph mode reads a new view once (a queued copy reads memory when it computes:
documented in the README).
"""
from __future__ import annotations

import random

import numpy as np
import pytest

import ggmlgrad as gg


def _makers(shape: tuple) -> list:
    """(name, ggmlgrad maker, NumPy maker, read only) of the views valid for ``shape``."""
    nd = len(shape)
    out = []
    if nd >= 1 and shape[0] > 1:
        out += [("row", lambda t: t[1], lambda a: a[1], False),
                ("slice", lambda t: t[1:], lambda a: a[1:], False),
                ("narrow", lambda t: t.narrow(0, 0, 1), lambda a: a[0:1], False)]
    if nd >= 2 and shape[1] > 1:
        out += [("col", lambda t: t[:, 1], lambda a: a[:, 1], False),
                ("step", lambda t: t[:, ::2], lambda a: a[:, ::2], False)]
    if nd >= 2:
        out += [("T", lambda t: t.transpose(0, 1), lambda a: a.swapaxes(0, 1), False)]
    if nd == 3:
        out += [("perm", lambda t: t.permute(2, 0, 1), lambda a: a.transpose(2, 0, 1), False)]
    if nd <= 3:
        out += [("unsqueeze", lambda t: t.unsqueeze(0), lambda a: a[None], False),
                ("expand", lambda t: t.expand(2, *t.shape), lambda a: np.broadcast_to(a, (2,) + a.shape), True)]
    if nd >= 1:
        out += [("reshape", lambda t: t.reshape(-1), lambda a: a.reshape(-1), False),
                ("chunk", lambda t: t.chunk(2, dim=nd - 1)[0], lambda a: a[..., :(a.shape[-1] + 1) // 2], False),
                ("detach", lambda t: t.detach(), lambda a: a, False),
                ("data", lambda t: t.data, lambda a: a, False)]
    if 1 in shape:
        out += [("squeeze", lambda t: t.squeeze(), lambda a: a.squeeze(), False)]
    if 2 <= nd <= 3 and shape[-1] >= 2:
        out += [("unfold", lambda t: t.unfold(nd - 1, 2, 1),
                 lambda a: np.lib.stride_tricks.sliding_window_view(a, 2, axis=nd - 1), True)]
    return out


def _run(seed: int, graph: bool, shared_from_start: bool) -> None:
    rng = random.Random(seed)
    ref = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    with gg.graph_mode(graph):
        g = gg.from_numpy(ref.copy()) if shared_from_start else gg.tensor(ref)
        pairs = [(g, ref, "base", False)]
        done = []
        for _ in range(25):
            r = rng.random()
            gv, nv, name, read_only = pairs[rng.randrange(len(pairs))]
            if r < 0.35 and len(pairs) < 12:
                n, fg, fn, ro = rng.choice(_makers(nv.shape))
                pairs.append((fg(gv), fn(nv), f"{name}.{n}", read_only or ro))
                if graph:
                    pairs[-1][0].sum().item()
            elif r < 0.5:
                idx, val = tuple(rng.randrange(s) for s in ref.shape), float(rng.randint(-50, 50))
                g.numpy()[idx] = val
                ref[idx] = val
                done.append(f"base[{idx}] = {val} through NumPy")
            elif r < 0.65 and not read_only:
                kind, c = rng.choice(["add", "mul", "fill"]), float(rng.randint(1, 3))
                with gg.no_grad():
                    getattr(gv, kind + "_")(c)
                if kind == "add":
                    nv += c
                elif kind == "mul":
                    nv *= c
                else:
                    nv[...] = c
                done.append(f"{name}.{kind}_({c})")
            elif r < 0.8 and not read_only and gv.numel():
                at = np.unravel_index(rng.randrange(gv.numel()), nv.shape)
                val = float(rng.randint(-50, 50))
                gv.numpy()[at] = val
                nv[at] = val
                done.append(f"{name}[{at}] = {val} through its NumPy view")
            else:
                for gv2, nv2, name2, _ in pairs:
                    np.testing.assert_array_equal((gv2 * 2.0 + 1.0).numpy(), nv2 * 2.0 + 1.0,
                                                  err_msg=f"{name2} after {done}")
        for gv2, nv2, name2, _ in pairs:
            np.testing.assert_array_equal(gv2.numpy(), nv2, err_msg=f"{name2} at the end, after {done}")


@pytest.mark.parametrize("seed", range(24))
@pytest.mark.parametrize("graph", [False, True])
def test_random_view_programs_match_numpy(seed, graph):
    _run(seed, graph, shared_from_start=seed % 2 == 0)
