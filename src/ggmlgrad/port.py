"""``python -m ggmlgrad port SCRIPT.py [-o OUT | --diff]``: read a PyTorch script without running it,
rewrite its torch imports to ggmlgrad's, and list each torch name it uses that ggmlgrad lacks.

The imports keep the script's own names, so its body is unchanged: ``import torch`` becomes
``import ggmlgrad as torch``, ``import torch.nn as nn`` becomes ``import ggmlgrad.nn as nn``,
``from torch.utils.data import DataLoader`` becomes ``from ggmlgrad.utils.data import DataLoader``.
Every name reached from those imports (``torch.nn.Conv2d``, ``F.relu``, ``nn.init.xavier_uniform_``)
is resolved against the real ggmlgrad package, with its line. Where torch is installed, method calls
whose name is a ``torch.Tensor`` method that ``ggmlgrad.Tensor`` lacks (``x.cuda()``) are noted as
possible tensor methods, apart from the missing names (the checker cannot know the object's type). An import of a torch module
that ggmlgrad lacks (``import torch.onnx``) is left as it is and warned about: it would bind the
name ``torch`` to real PyTorch.

>>> from ggmlgrad.port import check_source
>>> r = check_source("import torch\\nx = torch.zeros(2)\\ny = torch.fft.rfft(x)\\n")
>>> [(m.line, m.name) for m in r.missing]
[(3, 'torch.fft')]
>>> print(r.ported.splitlines()[0])
import ggmlgrad as torch
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import difflib
import importlib
import sys
from typing import Any

_MISSING = object()


@dataclasses.dataclass(frozen=True)
class Missing:
    """A torch name the script uses that ggmlgrad lacks (``kind``: "name", "import", "module" or
    "method" for a possible tensor method)."""
    line: int
    name: str
    kind: str = "name"
    note: str = ""


@dataclasses.dataclass
class Report:
    """What :func:`check_source` found: the missing names, warnings and the ported source."""
    missing: list[Missing]
    warnings: list[tuple[int, str]]
    ported: str
    maybe_methods: list[Missing] = dataclasses.field(default_factory=list)   # possible tensor methods


def _gg_path(torch_path: str) -> str:
    return "ggmlgrad" + torch_path[len("torch"):]


def _resolve(path: str) -> Any:
    """The ggmlgrad object for a dotted torch path (``torch.nn.Linear``), or ``_MISSING``."""
    parts = path.split(".")
    if parts[0] != "torch":
        return _MISSING
    obj: Any = importlib.import_module("ggmlgrad")
    name = "ggmlgrad"
    for p in parts[1:]:
        nxt = getattr(obj, p, _MISSING)
        if nxt is _MISSING and isinstance(obj, type(sys)):
            try:
                nxt = importlib.import_module(f"{name}.{p}")
            except ImportError:
                nxt = _MISSING
        if nxt is _MISSING:
            return _MISSING
        obj, name = nxt, f"{name}.{p}"
    return obj


def _is_module_path(path: str) -> bool:
    return isinstance(_resolve(path), type(sys))


def _root_name(node: ast.AST) -> str | None:
    """The name an expression such as ``np.array(x).reshape(2)`` starts from (None if none)."""
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _chain(node: ast.AST) -> tuple[str, list[str]] | None:
    """``a.b.c`` → ("a", ["b", "c"]); None when the chain does not start at a plain name."""
    attrs = []
    while isinstance(node, ast.Attribute):
        attrs.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return node.id, list(reversed(attrs))
    return None


class _Checker(ast.NodeVisitor):
    def __init__(self, tensor_methods: set[str]):
        self.aliases: dict[str, str] = {}       # local name -> torch dotted path
        self.missing: list[Missing] = []
        self.warnings: list[tuple[int, str]] = []
        self.edits: list[tuple[ast.stmt, str | None]] = []   # import statement -> new text (None: keep)
        self.tensor_methods = tensor_methods
        self.other_modules: set[str] = set()       # names bound by imports of other packages (np, math)
        self._seen: set[tuple[int, str]] = set()

    def _miss(self, line: int, name: str, kind: str = "name", note: str = "") -> None:
        if (line, name) not in self._seen:
            self._seen.add((line, name))
            self.missing.append(Missing(line, name, kind, note))

    # ---------------------------------------------------------------- imports
    def visit_Import(self, node: ast.Import) -> None:
        """Imports are read in a first pass (:meth:`read_import`)."""

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        """Imports are read in a first pass (:meth:`read_import_from`)."""

    def read_import(self, node: ast.Import) -> None:
        parts, keep = [], False
        for a in node.names:
            if a.name != "torch" and not a.name.startswith("torch."):
                parts.append(a.name + (f" as {a.asname}" if a.asname else ""))
                self.other_modules.add(a.asname or a.name.partition(".")[0])
                continue
            if not _is_module_path(a.name):
                keep = True
                self._miss(node.lineno, a.name, "import")
                self.warnings.append((node.lineno, f"`import {a.name}`: ggmlgrad has no such module; left as it "
                                                   f"is, it binds `{a.asname or 'torch'}` to real PyTorch"))
                continue
            if a.asname:
                self.aliases[a.asname] = a.name
                parts.append(f"{_gg_path(a.name)} as {a.asname}")
            else:
                self.aliases["torch"] = "torch"
                if a.name != "torch":
                    parts.append(_gg_path(a.name))         # the submodule loaded, as `import torch.x` does
                parts.append("ggmlgrad as torch")
        self.edits.append((node, None if keep else "import " + ", ".join(dict.fromkeys(parts))))

    def read_import_from(self, node: ast.ImportFrom) -> None:
        mod = node.module or ""
        if node.level or (mod != "torch" and not mod.startswith("torch.")):
            return
        if not _is_module_path(mod):
            self._miss(node.lineno, mod, "import")
            self.edits.append((node, None))
            return
        for a in node.names:
            if a.name == "*":
                self.warnings.append((node.lineno, f"`from {mod} import *`: names cannot be checked"))
                continue
            full = f"{mod}.{a.name}"
            if _resolve(full) is _MISSING:
                self._miss(node.lineno, full, "name")
            self.aliases[a.asname or a.name] = full
        names = ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in node.names)
        self.edits.append((node, f"from {_gg_path(mod)} import {names}"))

    # ---------------------------------------------------------------- uses
    def visit_Attribute(self, node: ast.Attribute) -> None:
        c = _chain(node)
        if c is not None and c[0] in self.aliases:
            base = self.aliases[c[0]]
            path = base
            for attr in c[1]:
                nxt = f"{path}.{attr}"
                if _resolve(nxt) is _MISSING:
                    self._miss(node.lineno, nxt)
                    break
                path = nxt
            return          # the chain is checked: do not visit its inner attributes again
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr in self.tensor_methods:
            c = _chain(f)      # torch.nn.X.y(): a name chain, checked by visit_Attribute
            if (c is None or c[0] not in self.aliases) and _root_name(f.value) not in self.other_modules:
                # (np.array(...).prod() is NumPy's)
                self._miss(node.lineno, f"Tensor.{f.attr}", "method", "if the object is a tensor")
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        v = node.value
        if isinstance(v, str) and v.startswith("torch.") and v.endswith("Tensor") and v.count(".") <= 2:
            self.warnings.append((node.lineno, f"the string {v!r}: Tensor.type() here names the storage as "
                                               f"'ggmlgrad.{v.rpartition('.')[2]}'-style strings; a comparison "
                                               f"with {v!r} is False"))


def _tensor_methods_missing() -> set[str]:
    """torch.Tensor's public methods that ggmlgrad.Tensor lacks (empty without torch installed)."""
    try:
        import torch
    except ImportError:
        return set()
    import ggmlgrad as gg
    return {n for n in dir(torch.Tensor) if not n.startswith("_") and not hasattr(gg.Tensor, n)
            and callable(getattr(torch.Tensor, n, None))}


def check_source(source: str, tensor_methods: set[str] | None = None) -> Report:
    """Check and port the text of a PyTorch script (see the module docstring)."""
    tree = ast.parse(source)
    ck = _Checker(_tensor_methods_missing() if tensor_methods is None else tensor_methods)
    for node in ast.walk(tree):          # imports first: aliases are known before any use is read
        if isinstance(node, ast.Import):
            ck.read_import(node)
        elif isinstance(node, ast.ImportFrom):
            ck.read_import_from(node)
    ck.visit(tree)
    missing = sorted((m for m in ck.missing if m.kind != "method"), key=lambda m: (m.line, m.name))
    methods = sorted((m for m in ck.missing if m.kind == "method"), key=lambda m: (m.line, m.name))
    ck.warnings.sort()
    return Report(missing, ck.warnings, _apply(source, ck.edits), methods)


def _apply(source: str, edits: list) -> str:
    """The source with each torch import statement replaced by its ggmlgrad form (same lines)."""
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    out, pos = [], 0
    spans = []
    for node, text in edits:
        if text is None:
            continue
        start = offsets[node.lineno - 1] + _col(lines[node.lineno - 1], node.col_offset)
        end = offsets[node.end_lineno - 1] + _col(lines[node.end_lineno - 1], node.end_col_offset)
        spans.append((start, end, text))
    for start, end, text in sorted(spans):
        out.append(source[pos:start])
        out.append(text)
        pos = end
    out.append(source[pos:])
    return "".join(out)


def _col(line: str, byte_col: int) -> int:
    """ast's column offsets count UTF-8 bytes; the string index of that column."""
    return len(line.encode("utf-8")[:byte_col].decode("utf-8", errors="ignore"))


def format_report(path: str, r: Report) -> str:
    lines = [f"{path}:{m.line}: {m.name}: not in ggmlgrad" + (f" ({m.note})" if m.note else "")
             + (" [import]" if m.kind == "import" else "") for m in r.missing]
    lines += [f"{path}:{m.line}: note: .{m.name.partition('.')[2]}() is a torch.Tensor method ggmlgrad.Tensor lacks "
              f"(if the object is a tensor)" for m in r.maybe_methods]
    lines += [f"{path}:{line}: warning: {text}" for line, text in r.warnings]
    n = len(r.missing)
    lines.append(f"{path}: {n} torch name{'s' if n != 1 else ''} missing from ggmlgrad"
                 + (f", {len(r.warnings)} warning{'s' if len(r.warnings) != 1 else ''}" if r.warnings else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """The ``port`` command; exit status 1 when a name is missing."""
    ap = argparse.ArgumentParser(prog="python -m ggmlgrad port",
                                 description="rewrite a PyTorch script's imports to ggmlgrad and list the torch "
                                             "names it uses that ggmlgrad lacks (the script is not run)")
    ap.add_argument("script")
    group = ap.add_mutually_exclusive_group()
    group.add_argument("-o", "--output", help="write the ported script here")
    group.add_argument("--diff", action="store_true", help="print the import rewrite as a unified diff")
    args = ap.parse_args(argv)
    with open(args.script, encoding="utf-8") as f:
        source = f.read()
    try:
        r = check_source(source)
    except SyntaxError as e:
        print(f"{args.script}:{e.lineno}: syntax error: {e.msg}", file=sys.stderr)
        return 2
    if args.diff:
        sys.stdout.writelines(difflib.unified_diff(source.splitlines(keepends=True), r.ported.splitlines(keepends=True),
                                                   args.script, args.script + " (ggmlgrad)"))
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(r.ported)
    print(format_report(args.script, r), file=sys.stderr if args.diff else sys.stdout)
    return 1 if r.missing else 0


if __name__ == "__main__":
    sys.exit(main())
