"""A tensor's value (storage, pending node, failure, cached leaf) has one owner: outside ``engine/``
and ``tensor/`` no module writes those fields; it calls the engine's transitions (``bind``,
``fail``, ``share_value``, ``forget_leaf``, ``cache_leaf`` in engine/array.py). The scan has a
self-test on synthetic source, so it can fail."""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np

import ggmlgrad as gg
from ggmlgrad.engine import COMPUTED, FAILED, bind, fail, share_value
from ggmlgrad.runtime import Storage

PKG = Path(__file__).resolve().parents[1] / "src" / "ggmlgrad"
OWNERS = (PKG / "engine", PKG / "tensor")
FIELDS = {"_storage", "_node", "_status", "_leaf", "_leaf_epoch", "_epoch", "_error"}


def value_writes(source: str) -> list[str]:
    """Writes of a value field in ``source``: assignments (plain, tuple, augmented, annotated),
    ``setattr``/``object.__setattr__`` with the field's name, and ``del``."""
    out = []

    def targets(t):
        if isinstance(t, (ast.Tuple, ast.List)):
            for e in t.elts:
                yield from targets(e)
        elif isinstance(t, ast.Starred):
            yield from targets(t.value)
        else:
            yield t
    for node in ast.walk(ast.parse(source)):
        tgts = []
        if isinstance(node, ast.Assign):
            tgts = [x for t in node.targets for x in targets(t)]
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            tgts = list(targets(node.target))
        elif isinstance(node, ast.Delete):
            tgts = [x for t in node.targets for x in targets(t)]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                "setattr", "__setattr__") and len(node.args) >= 2:
            name = node.args[1]
            if isinstance(name, ast.Constant) and name.value in FIELDS:
                out.append(f"{node.lineno}: setattr {name.value}")
        out += [f"{t.lineno}: .{t.attr}" for t in tgts if isinstance(t, ast.Attribute) and t.attr in FIELDS]
    return out


def test_the_scan_finds_every_form_of_write():
    src = ("a._storage = s\nx, b._status = 1, 2\nc._error += 'e'\nd._node: int = 0\ndel e._leaf\n"
           "setattr(f, '_leaf_epoch', -1)\nobject.__setattr__(g, '_epoch', 3)\nh.storage = 1\nk = a._storage\n")
    assert [w.split(": ")[1] for w in value_writes(src)] == [
        "._storage", "._status", "._error", "._node", "._leaf",
        "setattr _leaf_epoch", "setattr _epoch"]


def test_no_module_outside_engine_and_tensor_writes_a_value_field():
    found = {}
    for path in sorted(PKG.rglob("*.py")):
        if any(d == path.parent or d in path.parents for d in OWNERS):
            continue
        hits = value_writes(path.read_text(encoding="utf-8"))
        if hits:
            found[str(path.relative_to(PKG))] = hits
    assert found == {}, f"use the engine's transitions (engine/array.py) instead: {found}"


def test_the_transitions():
    a = gg.zeros(3)
    s = Storage(a.device, a.nbytes)
    bind(a, s)
    assert a._storage is s and a._status == COMPUTED and a._node == 0
    b = gg.ones(3)
    share_value(a, b)
    assert a.tolist() == [1.0, 1.0, 1.0] and a._storage is b._storage
    fail(a, "ggmlgrad: no value here")
    assert a._status == FAILED
    try:
        a.numpy()
    except Exception as e:
        assert "no value here" in str(e)
    else:
        raise AssertionError("a failed tensor was read")
    assert np.array_equal(b.numpy(), np.ones(3, np.float32))
