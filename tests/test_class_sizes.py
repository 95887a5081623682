"""No class in src/ggmlgrad over ``MAX_CLASS_LINES`` lines (issue 11): big classes split by job into mixins."""
from __future__ import annotations

import ast
import pathlib

import ggmlgrad

MAX_CLASS_LINES = 320
SRC = pathlib.Path(ggmlgrad.__file__).parent


def long_classes(source: str, limit: int = MAX_CLASS_LINES) -> list[tuple[str, int]]:
    """``(name, lines)`` of every class (nested ones too) in ``source`` longer than ``limit`` lines."""
    return [(n.name, n.end_lineno - n.lineno + 1) for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.ClassDef) and n.end_lineno - n.lineno + 1 > limit]


def test_the_check_finds_a_long_class_and_passes_a_short_one():
    body = "".join(f"    def m{i}(self):\n        return {i}\n" for i in range(200))   # 401 lines
    long_src = "class Big:\n" + body + "\nclass Small:\n    pass\n"
    assert long_classes(long_src) == [("Big", 401)]
    nested = "class Outer:\n    class Inner:\n" + "".join("    " + line + "\n" for line in body.splitlines())
    assert [name for name, _ in long_classes(nested)] == ["Outer", "Inner"]
    assert long_classes("class Small:\n    pass\n") == []


def test_no_class_in_the_package_is_over_the_limit():
    files = sorted(SRC.rglob("*.py"))
    assert len(files) > 20, SRC   # the package really was scanned
    too_long = [(str(p.relative_to(SRC)), name, n)
                for p in files for name, n in long_classes(p.read_text(encoding="utf-8"))]
    assert not too_long, f"classes over {MAX_CLASS_LINES} lines (split them by job into mixins): {too_long}"
