"""Code for the CPU that is there: the fast build's x86 variants, the loader's refusal of a build
compiled for instructions this CPU lacks, and the kernels ggml's OpenBLAS picks."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ggmlgrad import fastbuild
from ggmlgrad._ggml import loader


def test_the_avx512_variant_lists_only_extensions_the_cpu_has(monkeypatch):
    monkeypatch.setattr(fastbuild.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(fastbuild, "cpu_features", lambda: frozenset({"avx2", "fma", "avx512f", "avx512_vnni"}))
    cmake, kernel = fastbuild.cpu_flags("avx512")
    assert "-DGGML_AVX512=ON" in cmake and "-DGGML_AVX512_VNNI=ON" in cmake
    assert "-DGGML_AVX512_BF16=ON" not in cmake and "-DGGML_AVX512_VBMI=ON" not in cmake
    assert kernel == ["-mavx2", "-mfma"]  # the kernels pick their AVX-512 clones at run time
    auto, _ = fastbuild.cpu_flags()  # the measured default on AVX-512 CPUs too: AVX2 code
    assert "-DGGML_AVX512=OFF" in auto and "-DGGML_AVX2=ON" in auto
    assert fastbuild.cpu_flags("avx2")[0] == auto
    assert fastbuild.cpu_flags("native")[0] == ["-DGGML_NATIVE=ON"]
    monkeypatch.setattr(fastbuild, "cpu_features", lambda: frozenset({"avx2", "fma"}))
    with pytest.raises(fastbuild.BuildError, match="no AVX-512F"):
        fastbuild.cpu_flags("avx512")
    with pytest.raises(fastbuild.BuildError, match="expected one of"):
        fastbuild.cpu_flags("avx1024")
    monkeypatch.setattr(fastbuild.platform, "machine", lambda: "aarch64")
    with pytest.raises(fastbuild.BuildError, match="no AVX2"):
        fastbuild.cpu_flags("avx2")
    assert fastbuild.cpu_flags()[0] == ["-DGGML_NATIVE=ON"]


def test_the_build_command_takes_the_variant_and_a_prefix(capsys, monkeypatch, tmp_path):
    seen = {}
    monkeypatch.setattr(fastbuild, "build", lambda gpu, jobs, **kw: seen.update(kw))
    assert fastbuild.main(["--cpu", "avx512", "--prefix", str(tmp_path)]) == 0
    assert seen["cpu"] == "avx512" and seen["prefix"] == tmp_path
    assert fastbuild.main([]) == 0
    assert seen["cpu"] == "auto" and seen["prefix"] is None  # default: this environment's build
    with pytest.raises(SystemExit):
        fastbuild.main(["--cpu", "avx1024"])
    assert "invalid choice" in capsys.readouterr().err


def test_a_fast_build_for_instructions_this_cpu_lacks_is_not_loaded(monkeypatch, tmp_path):
    """A virtual environment copied to another machine: its fast build's code would stop with
    SIGILL there, so the loader takes the prebuilt wheel instead, with a warning."""
    fast = tmp_path / "ggml-fast"
    (fast / "lib").mkdir(parents=True)
    (fast / loader.FAST_STAMP).write_text(json.dumps({"cpu": ["-DGGML_AVX2=ON", "-DGGML_AVX512=ON",
                                                              "-DGGML_AVX512=OFF"]}))
    monkeypatch.setattr(loader, "fast_build_dir", lambda: fast)
    monkeypatch.delenv("GGMLGRAD_GGML_LIB", raising=False)
    monkeypatch.delenv("GGMLGRAD_BUILD", raising=False)
    monkeypatch.setattr(loader, "cpu_features", lambda: frozenset({"avx", "avx2", "fma"}))
    with pytest.warns(RuntimeWarning, match="compiled for AVX512, which this CPU lacks"):
        directory, source = loader.find_library_dir()
    assert source == "libggml-python" and directory != fast / "lib"
    monkeypatch.setattr(loader, "cpu_features", lambda: frozenset({"avx", "avx2", "fma", "avx512f"}))
    assert loader.find_library_dir() == (fast / "lib", "fast build")
    # nothing to tell (no /proc/cpuinfo) or an old stamp without the list: trusted as before
    monkeypatch.setattr(loader, "cpu_features", lambda: frozenset())
    assert loader.find_library_dir() == (fast / "lib", "fast build")
    (fast / loader.FAST_STAMP).write_text("{not json")
    monkeypatch.setattr(loader, "cpu_features", lambda: frozenset({"avx2"}))
    assert loader.find_library_dir() == (fast / "lib", "fast build")


def test_missing_cpu_features_reads_the_stamps_switches():
    stamp = {"cpu": ["-DGGML_NATIVE=OFF", "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_AVX512=ON",
                     "-DGGML_AVX512_BF16=ON"]}
    assert loader.missing_cpu_features(stamp, {"avx2", "fma", "avx512f", "avx512_bf16"}) == []
    assert loader.missing_cpu_features(stamp, {"avx2", "avx512f"}) == ["FMA", "AVX512_BF16"]
    assert loader.missing_cpu_features({"cpu": ["-DGGML_NATIVE=ON"]}, {"sse2"}) == []


def test_openblas_coretype_is_ggmlgrads_own_setting():
    assert loader.openblas_coretype({"OPENBLAS_CORETYPE": "Haswell"}) is None
    assert loader.openblas_coretype({"GGMLGRAD_OPENBLAS_CORETYPE": "SkylakeX", "OPENBLAS_CORETYPE": "Haswell"}) \
        == "SkylakeX"
    assert loader.openblas_coretype({"GGMLGRAD_OPENBLAS_CORETYPE": "  "}) is None


_REPORT = ("import os, json, ggmlgrad as gg; i = gg.info(); "
           "print(json.dumps([i['blas_kernels'], os.environ.get('OPENBLAS_CORETYPE')]))")


def _kernels(**env_changes) -> tuple:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "GGMLGRAD_OPENBLAS_CORETYPE")}
    env.update(env_changes, GGML_NO_BACKTRACE="1")
    r = subprocess.run([sys.executable, "-c", _REPORT], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    return tuple(json.loads(r.stdout.strip().splitlines()[-1]))


def test_ggmls_openblas_picks_its_kernels_for_this_cpu_not_numpys_setting():
    """OPENBLAS_CORETYPE in the environment (set for NumPy's OpenBLAS; this project's machines pin
    Haswell) does not reach ggml's own OpenBLAS, and is still there for every other library;
    GGMLGRAD_OPENBLAS_CORETYPE chooses ggml's. On a build without OpenBLAS (the prebuilt wheel)
    there is no kernel set to report and nothing changes."""
    own, unset = _kernels()
    assert unset is None
    pinned, kept = _kernels(OPENBLAS_CORETYPE="Haswell")
    assert kept == "Haswell"      # the user's variable is back for the libraries loaded later
    assert pinned == own          # ... but ggml's OpenBLAS chose for the CPU
    if own is None:
        return  # no OpenBLAS loaded: the prebuilt wheel (or Accelerate)
    assert isinstance(own, str) and own
    if "avx2" in loader.cpu_features():
        chosen, kept = _kernels(GGMLGRAD_OPENBLAS_CORETYPE="Haswell", OPENBLAS_CORETYPE="SkylakeX")
        assert (chosen, kept) == ("Haswell", "SkylakeX")
