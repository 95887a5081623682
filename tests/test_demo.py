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


@pytest.mark.parametrize("mode", ["capture", "graph", "eager"])
def test_demo_reaches_95_percent(mode):
    r = _run("demo", "--epochs", EPOCHS, "--seed", "0", "--mode", mode)
    assert r.returncode == 0, r.stdout + r.stderr
    per_epoch = re.findall(r"^epoch\s+\d+/\d+\s+loss (\S+)\s+test accuracy (\S+)\s+step (\S+) ms", r.stdout, re.M)
    assert len(per_epoch) == int(EPOCHS), r.stdout
    losses = [float(l) for l, _, _ in per_epoch]
    assert losses[-1] < losses[0] / 3, f"loss did not fall: {losses}"
    assert all(float(ms) > 0 for _, _, ms in per_epoch)
    final = re.search(r"^final test accuracy (\d\.\d+)$", r.stdout, re.M)
    assert final, r.stdout
    assert float(final.group(1)) >= 0.95, r.stdout


def test_demo_modes_agree_on_the_first_epochs():
    """Same seed, same data order: capture, graph mode and eager train the same model (to float32 noise)."""
    def losses(mode):
        r = _run("demo", "--epochs", "2", "--seed", "3", "--mode", mode)
        assert r.returncode == 0, r.stdout + r.stderr
        return [float(v) for v in re.findall(r"^epoch\s+\d+/2\s+loss (\S+)", r.stdout, re.M)]
    eager = losses("eager")
    assert len(eager) == 2
    assert losses("graph") == pytest.approx(eager, rel=1e-3)
    assert losses("capture") == pytest.approx(eager, rel=1e-3)


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
