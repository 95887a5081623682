"""Runs a bad-input battery script in a subprocess, so a ggml abort is a test failure, not a dead pytest.

The script prints ``CALL graph name`` before each call (naming the culprit if the process dies)
and finally ``RESULTS <json list of [graph, name, outcome]>``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")


def run_battery(script: str, timeout: float = 240) -> list:
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=timeout)
    last = [ln for ln in r.stdout.splitlines() if ln.startswith("CALL")][-1:]
    assert r.returncode == 0, f"battery died (exit {r.returncode}) during {last}:\n{r.stderr[-3000:]}"
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULTS ")]
    assert line, r.stdout[-2000:]
    return json.loads(line[0][len("RESULTS "):])


def failures(results: list) -> list[str]:
    return [f"{'graph' if g else 'eager'}: {name}: {got}" for g, name, got in results if got != "ok"]
