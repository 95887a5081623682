"""examples/cnn_digits.py runs as a user runs it: its --quick mode trains the two-block CNN (Conv2d,
BatchNorm2d, ReLU, MaxPool2d) with capture_step and in graph mode, saves and reloads the best
checkpoint, and learns (the full 15-epoch run reaches >= 97% test accuracy; see its docstring)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.parametrize("mode", ["capture", "graph"])
def test_cnn_digits_quick_learns_and_reloads_its_best_checkpoint(mode, tmp_path):
    pytest.importorskip("sklearn")
    env = dict(os.environ, PYTHONPATH=str(EXAMPLES.parent / "src"))
    ckpt = tmp_path / "best.safetensors"
    r = subprocess.run([sys.executable, str(EXAMPLES / "cnn_digits.py"), "--quick", "--no-progress", "--mode", mode,
                        "--checkpoint", str(ckpt)], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    epochs = re.findall(r"epoch\s+(\d+)/3\s+loss ([\d.]+)\s+val accuracy ([\d.]+)", r.stdout)
    assert [int(e[0]) for e in epochs] == [1, 2, 3], r.stdout
    losses = [float(e[1]) for e in epochs]
    assert losses[-1] < 0.6 * losses[0], r.stdout                       # it learns
    test_acc = float(re.search(r"test accuracy of the best checkpoint ([\d.]+)", r.stdout).group(1))
    best_val = float(re.search(r"best val accuracy ([\d.]+)", r.stdout).group(1))
    assert best_val == max(float(e[2]) for e in epochs)
    assert test_acc > 0.85, r.stdout
    assert ckpt.exists() and ckpt.stat().st_size > 10_000              # the best checkpoint was written
