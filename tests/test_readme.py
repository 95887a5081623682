"""README.md stays true: every ```python block runs, and the set-up commands are the ones CI runs."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
PY_BLOCKS = re.findall(r"```python\n(.*?)```", README, re.S)


def test_readme_has_python_examples():
    assert len(PY_BLOCKS) >= 4


@pytest.mark.parametrize("index", range(len(PY_BLOCKS)))
def test_readme_python_block_runs(index):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", PY_BLOCKS[index]], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, f"README python block {index} failed:\n{PY_BLOCKS[index]}\n{r.stderr}"


def test_readme_graph_mode_example_prints_what_it_says():
    block = next(b for b in PY_BLOCKS if "graph_mode(True)" in b and "pending" in b)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    r = subprocess.run([sys.executable, "-c", block], capture_output=True, text=True, env=env, timeout=120)
    assert r.stdout.split() == ["True", "1"], r.stdout + r.stderr


def test_readme_capture_example_prints_what_it_says():
    block = next(b for b in PY_BLOCKS if "capture_step" in b)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    r = subprocess.run([sys.executable, "-c", block], capture_output=True, text=True, env=env, timeout=120)
    assert r.stdout.split() == ["2", "1", "1"], r.stdout + r.stderr


def test_setup_is_exactly_two_commands_and_ci_runs_the_test_one():
    setup = README.split("## Set up", 1)[1]
    commands = re.search(r"```bash\n(.*?)```", setup, re.S).group(1).strip().splitlines()
    assert commands == ['pip install -e ".[examples,fast,io]" && python -m ggmlgrad build --optional && python -m ggmlgrad demo',
                        'pip install -e ".[test]" && python -m pytest']
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert commands[1] in ci.splitlines()
    assert os.access(ROOT / ".ci" / "run", os.X_OK)
