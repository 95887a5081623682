"""examples/sac_pendulum.py as a user runs it: the quick run learns (capture), and graph mode and
eager mode compute the same run as capture (same seed, same evaluation return to the printed digit)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _run(*args: str) -> str:
    env = dict(os.environ, PYTHONPATH=str(EXAMPLES.parent / "src"))
    r = subprocess.run([sys.executable, str(EXAMPLES / "sac_pendulum.py"), "--no-progress", *args],
                       capture_output=True, text=True, env=env, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def _evaluation(out: str) -> float:
    return float(re.search(r"evaluation: mean return (-?[\d.]+)", out).group(1))


def test_sac_quick_learns_with_capture():
    out = _run("--quick")
    first, last = (float(v) for v in re.search(r"random-action episodes (-?[\d.]+) -> evaluation (-?[\d.]+)",
                                               out).groups())
    assert last > first + 200 and last > -400


def test_sac_graph_and_eager_modes_compute_the_capture_run():
    runs = {mode: _evaluation(_run("--quick", "--steps", "1150", "--mode", mode))
            for mode in ("capture", "graph", "eager")}
    assert runs["graph"] == runs["capture"] == runs["eager"], runs
