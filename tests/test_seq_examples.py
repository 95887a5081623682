"""The sequence examples run as a user runs them: --quick in capture mode reaches its goal, and
graph mode trains the same model to the same losses (one short epoch)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
ENV = dict(os.environ, PYTHONPATH=str(EXAMPLES.parent / "src"))


def _run(*args: str) -> str:
    r = subprocess.run([sys.executable, *args, "--no-progress"], capture_output=True, text=True, env=ENV, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_lstm_classifier_quick_reaches_95_percent():
    out = _run(str(EXAMPLES / "lstm_classifier.py"), "--quick")
    acc = float(out.split("final test accuracy ")[1].split()[0])
    assert acc >= 0.95, out


def test_lstm_classifier_graph_mode_trains_as_capture():
    args = (str(EXAMPLES / "lstm_classifier.py"), "--epochs", "1", "--train-size", "256")
    got = [[float(v) for v in re.search(r"loss (\S+)  test accuracy (\S+)", _run(*args, "--mode", m)).groups()]
           for m in ("capture", "graph")]
    (loss_c, acc_c), (loss_g, acc_g) = got
    assert abs(loss_c - loss_g) <= 1e-3 * abs(loss_g) and abs(acc_c - acc_g) <= 0.01, got


def test_char_transformer_quick_learns_and_samples():
    out = _run(str(EXAMPLES / "char_transformer.py"), "--quick")
    val, unigram = (float(v) for v in re.search(r"held-out loss (\S+) vs unigram baseline (\S+)", out).groups())
    assert val < 0.6 * unigram, out
    sample = out.split("sample (prompt|generated):\n")[1]
    assert "|" in sample and len(sample.split("|")[1].strip()) >= 150


def test_char_transformer_graph_mode_trains_as_capture():
    args = (str(EXAMPLES / "char_transformer.py"), "--steps", "3")
    firsts = [re.search(r"train loss (\S+)  held-out loss (\S+)", _run(*args, "--mode", m)).groups()
              for m in ("capture", "graph")]
    close = [abs(float(a) - float(b)) <= 2e-3 * abs(float(b)) for a, b in zip(*firsts)]
    assert all(close), firsts
