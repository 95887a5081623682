"""The layer rule of SPEC §1, checked on the source: imports point downward only.

_ggml -> runtime -> engine -> ops -> tensor -> toolkit (nn, optim, data, io, capture,
distributions, ...) -> the package root -> the applications (demo, __main__, the testing tables).
A module may import its own layer or a lower one, never a higher one; only ``_ggml``
imports ``ctypes``. Every import statement counts, including ones inside functions
(a lazy import upward is still an upward dependency).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = "ggmlgrad"
SRC = Path(__file__).resolve().parent.parent / "src" / PKG

# first component under ggmlgrad -> layer number (higher may import lower)
LAYERS: dict[str, int] = {
    "_ggml": 0,
    "runtime": 1,
    "engine": 2,
    "ops": 3,
    "tensor": 4,        # Tensor, the tape (autograd) and the functional surface
    # toolkit (layer 6 of SPEC §1); its packages may use one another
    "nn": 5, "optim": 5, "data": 5, "io": 5, "capture": 5, "distributions": 5, "info": 5, "autograd": 5,
    "utils": 5, "cuda": 5, "accelerator": 5, "backends": 5,     # torch's module paths (torch.utils.data, ...)
    "distributed": 5, "linalg": 5,
    "__init__": 6,      # the package root: `import ggmlgrad` — only applications may import it
    # applications of the library, never imported by it: the demo, the CLI, the test tables
    "demo": 7, "__main__": 7, "testing": 7, "fastbuild": 7, "bench": 7, "port": 7,
}
ROOT_LEVEL = LAYERS["__init__"]


def _modules() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py") if "__pycache__" not in p.parts)


def _dotted(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _layer_of(dotted: str) -> int | None:
    parts = dotted.split(".")
    if parts[0] != PKG:
        return None                      # not ours: stdlib / third party
    if len(parts) == 1:
        return ROOT_LEVEL
    return LAYERS.get(parts[1], -1)      # -1: unknown -> reported


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute dotted target) for every import in the file."""
    me = _dotted(path)
    package = me if _is_package(path) else me.rpartition(".")[0]
    return _imports_in(path.read_text(encoding="utf-8"), package)


def _imports_in(source: str, package: str) -> list[tuple[int, str]]:
    tree = ast.parse(source)
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            if node.module == "__future__":
                continue
            for a in node.names:
                # `from . import nn` imports the submodule ggmlgrad.nn, not the package root
                cand = f"{base}.{a.name}"
                sub = SRC.parent / Path(*cand.split("."))
                if sub.is_dir() or sub.with_suffix(".py").is_file():
                    out.append((node.lineno, cand))
                else:
                    out.append((node.lineno, base))
    return out


def _module_layer(path: Path) -> int:
    rel = path.relative_to(SRC)
    first = rel.parts[0]
    if len(rel.parts) == 1:
        first = rel.stem
    return LAYERS.get(first, -1)


def test_every_module_has_a_layer():
    unknown = sorted(str(p.relative_to(SRC)) for p in _modules() if _module_layer(p) < 0)
    assert not unknown, f"modules not in the layer table of {Path(__file__).name}: {unknown}"


def test_layer_table_names_only_real_modules():
    """Every entry of the table is a package or module of the source tree (no stale names)."""
    real = {p.name for p in SRC.iterdir() if (p / "__init__.py").is_file()}
    real |= {p.stem for p in SRC.glob("*.py")}
    assert sorted(set(LAYERS) - real) == []


def test_imports_point_downward():
    violations = []
    for path in _modules():
        mine = _module_layer(path)
        for line, target in _imports(path):
            theirs = _layer_of(target)
            if theirs is None:
                continue
            if theirs < 0 or theirs > mine:
                violations.append(f"{path.relative_to(SRC.parent)}:{line} (layer {mine}) imports "
                                  f"{target} (layer {theirs if theirs >= 0 else 'unknown'})")
    assert not violations, "upward imports:\n" + "\n".join(violations)


def test_only_ggml_binding_imports_ctypes():
    offenders = []
    for path in _modules():
        if path.relative_to(SRC).parts[0] == "_ggml":
            continue
        for line, target in _imports(path):
            if target.split(".")[0] in ("ctypes", "_ctypes"):
                offenders.append(f"{path.relative_to(SRC.parent)}:{line}")
    assert not offenders, f"ctypes imported outside ggmlgrad._ggml: {offenders}"


# The ggml boundary (issue 11 item 5): struct mirrors, raw field access and host addresses of NumPy
# arrays stay in the binding, which offers typed functions (node_ne, node_type, array_address, ...).
_BINDING_ONLY_NAMES = {"TensorStruct", "tensor_struct", "InitParams", "write_ptr_field", "pointer_cells",
                       "c_array_i64", "c_array_ptr"}
_BINDING_ONLY_ATTRIBUTES = {"ctypes", "from_address", "addressof"}


def _boundary_uses(source: str) -> list[tuple[int, str]]:
    """(line, what) for each use of a binding-only name or attribute in ``source``."""
    uses = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name) and node.id in _BINDING_ONLY_NAMES:
            uses.append((node.lineno, node.id))
        elif isinstance(node, ast.alias) and node.name in _BINDING_ONLY_NAMES:
            uses.append((getattr(node, "lineno", 0), node.name))
        elif isinstance(node, ast.Attribute) and node.attr in _BINDING_ONLY_ATTRIBUTES | _BINDING_ONLY_NAMES:
            uses.append((node.lineno, "." + node.attr))
    return uses


def test_ggml_structs_and_addresses_stay_in_the_binding():
    offenders = []
    for path in _modules():
        if path.relative_to(SRC).parts[0] == "_ggml":
            continue
        for line, what in _boundary_uses(path.read_text(encoding="utf-8")):
            offenders.append(f"{path.relative_to(SRC.parent)}:{line} {what}")
    assert not offenders, "ggml structs or host addresses outside ggmlgrad._ggml:\n" + "\n".join(offenders)


def test_the_boundary_checker_sees_violations():
    src = ("from .._ggml import TensorStruct\n"
           "t = TensorStruct.from_address(p)\n"
           "a = arr.ctypes.data\n")
    found = {what for _, what in _boundary_uses(src)}
    assert found == {"TensorStruct", ".from_address", ".ctypes"}


def test_the_checker_sees_violations():
    """The checker itself can fail: upward and ctypes imports in a synthetic runtime module."""
    src = "from ..tensor import Tensor\nimport ctypes\nfrom .. import nn\n"
    targets = [t for _, t in _imports_in(src, "ggmlgrad.runtime")]
    assert targets == ["ggmlgrad.tensor", "ctypes", "ggmlgrad.nn"]
    assert _layer_of("ggmlgrad.tensor") > LAYERS["runtime"]
    assert _layer_of("ggmlgrad.nn") > LAYERS["runtime"]
    assert _layer_of("ggmlgrad") == ROOT_LEVEL


@pytest.mark.parametrize("target,expected", [("numpy", None), ("ggmlgrad._ggml.api", 0),
                                             ("ggmlgrad.engine.queue", 2), ("ggmlgrad", ROOT_LEVEL)])
def test_layer_lookup(target, expected):
    assert _layer_of(target) == expected
