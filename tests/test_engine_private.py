"""The engine's state is its own (issue 11): code outside ``engine/`` uses its public methods only,
and no layer patches another at run time.

- no ``ENGINE._x`` and no read of the queue's state (``ENGINE.roots``, ``.effects``, ``.lazy`` ...)
  outside ``src/ggmlgrad/engine/`` (nor in benchmarks/ and examples/); no ``_private`` name imported
  from the engine;
- no assignment into, or ``setattr`` on, a module or class imported from another package;
- the public replacements behave: ``active_observer()``, ``has_queued()``/``drain_if_queued()``,
  the module-read observer pushed with the execution context, ``register_dispatch``, and
  ``user_site`` skipping contextlib's frames.
Each scan has a self-test on synthetic source, so it can fail.
"""
from __future__ import annotations

import ast
import importlib
import threading
from pathlib import Path
from types import MethodType

import numpy as np
import pytest

import ggmlgrad as gg
from ggmlgrad.engine import ENGINE, context

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "src" / "ggmlgrad"
ENGINE_DIR = PKG / "engine"

# Data attributes of the engine that code outside it may read (``with ENGINE.lock:``).
PUBLIC_DATA = {"lock"}


def _internal_names() -> set[str]:
    """The engine's own state: every data attribute of a live Engine (its parts among them) but the
    public ones, and the removed ``guard`` (read the context's observer with ``active_observer()``).
    The parts' entry points the engine exposes are bound methods, not state."""
    e = ENGINE.current
    data = {k for k, v in vars(e).items() if not isinstance(v, MethodType)}
    data |= {k for k, v in vars(type(e)).items() if isinstance(v, property)}  # the parts' state, read through
    assert {"queue", "builder", "executor", "drainer"} <= data  # the scan sees the parts
    return (data - PUBLIC_DATA) | {"guard"}


def _is_engine(node: ast.AST) -> bool:
    return (isinstance(node, ast.Name) and node.id == "ENGINE") or \
        (isinstance(node, ast.Attribute) and node.attr == "ENGINE")


def _engine_module(node: ast.ImportFrom, path: Path) -> bool:
    """Whether ``from X import ...`` imports from ggmlgrad.engine (absolute or relative)."""
    mod = node.module or ""
    if node.level == 0:
        return mod == "ggmlgrad.engine" or mod.startswith("ggmlgrad.engine.")
    try:
        base = path.resolve().parents[node.level - 1]
    except IndexError:
        return False
    target = base.joinpath(*mod.split(".")) if mod else base
    return target == ENGINE_DIR or ENGINE_DIR in target.parents


def private_uses(source: str, path: Path, internal: set[str]) -> list[str]:
    """Uses of the engine's private or internal state in ``source``: "line: what"."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and _is_engine(node.value):
            if node.attr.startswith("_") or node.attr in internal:
                out.append((node.lineno, node.col_offset, f"ENGINE.{node.attr}"))
        elif isinstance(node, ast.ImportFrom) and _engine_module(node, path):
            out += [(node.lineno, 0, f"import {a.name}") for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")]
    return [f"{line}: {what}" for line, _, what in sorted(out)]


def _sources(*, outside_engine: bool = True):
    for top in (PKG, ROOT / "benchmarks", ROOT / "examples"):
        for path in sorted(top.rglob("*.py")):
            if outside_engine and ENGINE_DIR in path.parents:
                continue
            yield path


def test_nothing_outside_the_engine_touches_its_state():
    internal = _internal_names()
    found = {str(p.relative_to(ROOT)): v for p in _sources()
             if (v := private_uses(p.read_text(), p, internal))}
    assert found == {}, f"use the engine's public methods instead: {found}"


def test_the_private_use_scan_sees_violations():
    internal = _internal_names()
    assert {"roots", "effects", "lazy", "labels", "ctx_list", "guard"} <= internal and "lock" not in internal
    here = PKG / "capture" / "synthetic.py"
    bad = ("from ..engine import ENGINE\nfrom ..engine.records import _phase_label\nimport ggmlgrad as gg\n"
           "ENGINE._discard()\nif ENGINE.roots or ENGINE.effects: pass\nx = gg.engine.ENGINE.lazy\n"
           "y = ENGINE.guard\n")
    assert private_uses(bad, here, internal) == ["2: import _phase_label", "4: ENGINE._discard",
                                                 "5: ENGINE.roots", "5: ENGINE.effects", "6: ENGINE.lazy",
                                                 "7: ENGINE.guard"]
    good = ("from ..engine import ENGINE, active_observer\nfrom ..ops.x import _y\n"
            "with ENGINE.lock:\n    ENGINE.drain_if_queued('capture')\nENGINE.discard()\n")
    assert private_uses(good, here, internal) == []


# ---------------------------------------------------------------------- no run-time patching of another package
def _package_of(path: Path) -> str:
    rel = path.relative_to(PKG).parts
    return rel[0] if len(rel) > 1 else ""


def _imported(tree: ast.Module, path: Path) -> dict[str, tuple[str, str]]:
    """Names imported from another ggmlgrad package: name → (module, attribute or "")."""
    own = _package_of(path)
    here = ".".join(("ggmlgrad",) + path.relative_to(PKG).with_suffix("").parts[:-1])
    out = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or node.level == 0:
            continue
        base = here.rsplit(".", node.level - 1)[0] if node.level > 1 else here
        mod = f"{base}.{node.module}" if node.module else base
        parts = mod.split(".")
        if len(parts) < 2 or parts[1] == own:
            continue
        for a in node.names:
            out[a.asname or a.name] = (mod, a.name)
    return out


def _is_module_or_class(mod: str, name: str) -> bool:
    m = importlib.import_module(mod)
    obj = getattr(m, name, None)
    if obj is None:
        try:
            obj = importlib.import_module(f"{mod}.{name}")
        except ImportError:
            return False
    return isinstance(obj, type) or type(obj).__name__ == "module"


def cross_package_patches(source: str, path: Path, is_patchable=_is_module_or_class) -> list[str]:
    """Assignments into (or setattr on) a module or class imported from another package."""
    tree = ast.parse(source)
    imported = _imported(tree, path)
    out = []
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            targets = [t.value for t in targets if isinstance(t, ast.Attribute)]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr"):
            targets = node.args[:1]
        for t in targets:
            if isinstance(t, ast.Name) and t.id in imported and is_patchable(*imported[t.id]):
                out.append((node.lineno, f"{node.lineno}: {t.id}"))
    return [what for _, what in sorted(out)]


def test_no_layer_patches_another_at_run_time():
    found = {}
    for path in _sources():
        if PKG in path.parents:
            v = cross_package_patches(path.read_text(), path)
            if v:
                found[str(path.relative_to(ROOT))] = v
    assert found == {}, f"join layers through a registration function of the lower one: {found}"


def test_the_patch_scan_sees_violations():
    here = PKG / "tensor" / "synthetic.py"
    bad = ("from ..ops.registry import _Dispatcher\nfrom ..ops import registry\nfrom . import tape\n"
           "_Dispatcher.apply = staticmethod(tape.apply)\nsetattr(registry, 'x', 1)\ntape.y = 2\n")
    assert cross_package_patches(bad, here) == ["4: _Dispatcher", "5: registry"]
    # A shared object's field (not a module or class) may be written: capture moves WATCH.epoch.
    assert cross_package_patches("from ..nn.module import WATCH\nWATCH.epoch += 1\n", PKG / "capture" / "s.py") == []


def test_register_dispatch_routes_op_calls():
    from ggmlgrad.ops.registry import op, register_dispatch
    from ggmlgrad.tensor import tape
    calls = []

    def counting(opdef, inputs, params):
        calls.append(opdef.name)
        return tape.apply(opdef, inputs, params)

    a, b = gg.tensor([1.0, 2.0]), gg.tensor([3.0, 5.0])
    register_dispatch(counting)
    try:
        out = op.add(a, b)
    finally:
        register_dispatch(tape.apply)
    assert calls == ["add"]
    np.testing.assert_allclose(out.numpy(), np.array([4.0, 7.0]))
    op.add(a, b)
    assert calls == ["add"]  # the earlier entry point is not cached


# ---------------------------------------------------------------------- the public replacements
def test_active_observer_is_the_recordings_inside_a_captured_function_only():
    seen = []

    @gg.capture
    def f(x):
        seen.append(gg.engine.active_observer())
        return x * 2.0

    assert gg.engine.active_observer() is None
    np.testing.assert_allclose(np.asarray(f(gg.ones(2))), [2.0, 2.0])
    assert seen and isinstance(seen[0], gg.engine.Observer) and gg.engine.active_observer() is None


def test_has_queued_and_drain_if_queued():
    before = dict(gg.counters()["drains_by_reason"])
    with gg.graph_mode(True):
        assert not ENGINE.has_queued() and ENGINE.drain_if_queued("test_reason") is False
        y = gg.tensor([1.0, 2.0]) * 3.0
        assert ENGINE.has_queued() and len(ENGINE) > 0
        assert ENGINE.drain_if_queued("test_reason") is True
        assert not ENGINE.has_queued() and ENGINE.drain_if_queued("test_reason") is False
    after = gg.counters()["drains_by_reason"]
    assert after.get("test_reason", 0) - before.get("test_reason", 0) == 1  # one drain, not three
    np.testing.assert_allclose(y.numpy(), [3.0, 6.0])


def test_module_observer_is_pushed_with_the_context_and_per_thread():
    from ggmlgrad.capture.state import observing
    m, other = gg.nn.Dropout(0.5), gg.nn.Dropout(0.5)
    assert context.current().module_observer is None
    box = {}
    with observing() as obs:
        assert context.current().module_observer is obs
        _ = m.training
        t = threading.Thread(target=lambda: box.update(ctx=context.current().module_observer, f=other.training))
        t.start()
        t.join()
    assert context.current().module_observer is None
    assert [mod for mod, _ in obs.live_modes()] == [m]  # the other thread's read is not this recording's
    assert box["ctx"] is None


def test_capture_error_from_a_with_block_names_the_users_line():
    # ENGINE.exclusive is a contextlib context manager: its drain runs under contextlib's __enter__.
    @gg.capture
    def f(x):
        y = x * 2.0
        with ENGINE.exclusive("inplace"):  # the line the error must name
            pass
        return y

    line = next(i for i, text in enumerate(Path(__file__).read_text().splitlines(), 1)
                if "with ENGINE.exclusive" in text and "must name" in text)
    with pytest.raises(gg.CaptureError) as info:
        f(gg.ones(3))
    msg = str(info.value)
    assert "contextlib" not in msg and f"{__file__}:{line} " in msg
