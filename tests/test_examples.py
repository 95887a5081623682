"""The examples run as a user runs them: PPO on CartPole learns in its --quick mode."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_ppo_cartpole_quick_shows_a_learning_signal():
    pytest.importorskip("gymnasium")
    env = dict(os.environ, PYTHONPATH=str(EXAMPLES.parent / "src"))
    r = subprocess.run([sys.executable, str(EXAMPLES / "ppo_cartpole.py"), "--quick", "--no-progress"],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    first, last = (float(v) for v in r.stdout.split("first episodes ")[1].split(" -> last episodes "))
    assert last > 1.5 * first
    assert "evaluation: mean return" in r.stdout and "learning" in r.stdout


def _ppo_return(mode: str) -> str:
    env = dict(os.environ, PYTHONPATH=str(EXAMPLES.parent / "src"))
    r = subprocess.run([sys.executable, str(EXAMPLES / "ppo_cartpole.py"), "--steps", "1024", "--no-progress",
                        "--mode", mode], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"mode {mode}, act mode {mode}" in r.stdout
    return r.stdout.split("evaluation: mean return ")[1].split()[0]


def test_ppo_cartpole_trains_the_same_in_every_mode():
    """--mode eager / graph / capture: the same updates and acting, so the same greedy return."""
    pytest.importorskip("gymnasium")
    returns = {mode: _ppo_return(mode) for mode in ("capture", "eager", "graph")}
    assert len(set(returns.values())) == 1, returns
