"""The front door: ``python -m ggmlgrad demo`` reaches >= 95% test accuracy in every mode,
and ``python -m ggmlgrad info`` prints gg.info() as JSON. Run as the user would, in a subprocess."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

SRC = str(Path(__file__).resolve().parent.parent / "src")
EPOCHS = "10"


def _run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "ggmlgrad", *args], capture_output=True, text=True,
                          env=env, timeout=timeout)


MODES = ("capture", "graph", "eager")


@pytest.fixture(scope="module")
def demo_runs() -> dict:
    """The demo run once per mode (same seed): mode -> (per-epoch (loss, accuracy, ms), final accuracy)."""
    runs = {}
    for mode in MODES:
        r = _run("demo", "--epochs", EPOCHS, "--seed", "0", "--mode", mode)
        assert r.returncode == 0, r.stdout + r.stderr
        per_epoch = re.findall(r"^epoch\s+\d+/\d+\s+loss (\S+)\s+test accuracy (\S+)\s+step (\S+) ms "
                               r"\(median of \d+, (\d+) graph computes each\)", r.stdout, re.M)
        assert len(per_epoch) == int(EPOCHS), r.stdout
        final = re.search(r"^final test accuracy (\d\.\d+)$", r.stdout, re.M)
        assert final, r.stdout
        runs[mode] = ([tuple(map(float, e)) for e in per_epoch], float(final.group(1)))
    return runs


@pytest.mark.parametrize("mode", MODES)
def test_demo_reaches_95_percent(demo_runs, mode):
    per_epoch, final = demo_runs[mode]
    losses = [loss for loss, _, _, _ in per_epoch]
    assert losses[-1] < losses[0] / 3, f"loss did not fall: {losses}"
    assert all(ms > 0 for _, _, ms, _ in per_epoch)
    assert final >= 0.95, per_epoch


def test_demo_graph_computes_per_step(demo_runs):
    """Graph mode and capture: forward+backward, then Adam (2 computes); eager: one per op (the
    MLP's forward, loss, gradient and update ops: 19 in all)."""
    last = {mode: demo_runs[mode][0][-1][3] for mode in MODES}
    assert last["capture"] == 2 and last["graph"] == 2, last
    assert last["eager"] >= 9 * last["graph"], last


def test_demo_modes_train_the_same_model(demo_runs):
    """Same seed, same data order: capture, graph mode and eager agree epoch by epoch (float32 noise)."""
    eager = [loss for loss, _, _, _ in demo_runs["eager"][0]]
    for mode in ("graph", "capture"):
        assert [loss for loss, _, _, _ in demo_runs[mode][0]] == pytest.approx(eager, rel=1e-3), mode


def test_demo_default_mode_is_capture():
    r = _run("demo", "--epochs", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "mode capture" in r.stdout.splitlines()[0]


def test_demo_rejects_bad_arguments():
    r = _run("demo", "--epochs", "0")
    assert r.returncode == 2 and "--epochs" in r.stderr
    r = _run("demo", "--mode", "warp")
    assert r.returncode == 2 and "invalid choice" in r.stderr


def test_info_prints_gg_info_as_json():
    r = _run("info")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["ggml_version"].startswith("0.20")
    assert "cpu" in info["devices"]
    assert info["build"] in ("fast (BLAS)", "prebuilt (no BLAS)")
    assert ("BLAS" in info["accelerators"]) == (info["build"] == "fast (BLAS)")
