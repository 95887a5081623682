"""``python -m ggmlgrad bench --quick``: every workload validated and timed, absent peers reported
as absent, a contender whose values differ never timed, and the table, JSON and plots written."""
from __future__ import annotations

import importlib
import json

import numpy as np
import pytest
import torch  # noqa: F401  (the reference peer: CI installs it; the bench must find it)

bench = importlib.import_module("ggmlgrad.bench")
W = importlib.import_module("ggmlgrad.bench.workloads")
P = importlib.import_module("ggmlgrad.bench.peers")


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    assert bench.main(["--quick", "--out", str(out)]) == 0
    with open(out / "bench.json", encoding="utf-8") as f:
        return out, json.load(f)


def test_quick_run_times_every_contender_that_is_there(quick_run):
    out, payload = quick_run
    rows = {r["workload"]: r for r in payload["workloads"]}
    per_op = [r for r in payload["workloads"] if r["group"] == "per-op"]
    assert len(per_op) == 8 and any("buf[i] = x" in r["workload"] for r in per_op)
    for r in per_op:
        for who in ("gg eager", "torch"):
            assert r["results"][who]["median_us"] > 0, (r["workload"], who)
    step = rows["step 4-32-32-2 b32 tanh"]["results"]
    for who in ("gg eager", "gg graph", "gg capture", "torch"):
        assert step[who]["median_us"] > 0, who
    jax_there = P.try_import("jax") is not None
    assert ("median_us" in step["jax jit"]) == jax_there
    if not jax_there:
        assert step["jax jit"]["status"] == "absent"
    every = payload["workloads"] + payload["sweeps"]["width"] + payload["sweeps"]["batch"]
    bad = [(r["workload"], k, v) for r in every for k, v in r["results"].items()
           if v.get("status") in ("invalid", "error")]
    assert not bad
    assert [p["x"] for p in payload["sweeps"]["width"]] == [32, 128]
    s = payload["per_op_summary"]
    assert s["ops"] == 8 and 0 < s["median_ratio"] <= s["max_ratio"]
    assert payload["meta"]["versions"]["torch"].startswith("2.")


def test_quick_run_writes_plots_when_matplotlib_is_there(quick_run):
    out, payload = quick_run
    if P.try_import("matplotlib") is None:
        assert payload["plots"] == []
    else:
        assert sorted(payload["plots"]) == ["bars.png", "sweep_batch.png", "sweep_width.png"]
        for name in payload["plots"]:
            assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_absent_peers_are_reported_absent(monkeypatch):
    monkeypatch.setattr(bench, "peers", lambda threads=None: {"torch": None, "jax": None})
    payload = bench.run(quick=True, only={"forward"}, log=lambda m: None)
    (row,) = payload["workloads"]
    assert row["results"]["torch"]["status"] == "absent" and row["results"]["jax jit"]["status"] == "absent"
    assert all(row["results"][m]["median_us"] > 0 for m in P.GG_MODES)


def test_a_contender_that_disagrees_is_not_timed():
    good = P.Step(lambda: None, lambda: [np.ones(3, np.float32)])
    off = P.Step(lambda: None, lambda: [np.ones(3, np.float32) * 1.01])
    bad = W._validate_steps({"torch": good, "gg eager": off, "gg graph": good}, "torch")
    assert set(bad) == {"gg eager"} and bad["gg eager"]["status"] == "invalid"
