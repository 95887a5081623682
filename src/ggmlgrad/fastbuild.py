"""``python -m ggmlgrad build``: the fast ggml build, from pip packages and a C compiler only.

It builds ggml (the version ``libggml-python`` pins) from that package's sdist with code for this
CPU, llamafile sgemm and a BLAS (the ``scipy-openblas32`` wheel on Linux and Windows, Accelerate
on macOS), plus ggmlgrad's vectorised activation kernels, into this Python environment
(``<sys.prefix>/share/ggmlgrad/``). ``import ggmlgrad`` then loads it instead of the portable wheel;
``gg.info()["build"]`` says which one is active. CMake and ninja come from their PyPI packages
(the ``fast`` extra). No root, no system package manager.

    python -m ggmlgrad build              # fails with a clear message when something is missing
    python -m ggmlgrad build --optional   # no compiler: say so, keep the prebuilt wheel, exit 0
    python -m ggmlgrad build --cuda       # also the CUDA backend (needs the CUDA toolkit)
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from ._ggml.loader import FAST_STAMP, PINNED_GGML, fast_build_dir

KERNELS_SOURCE = Path(__file__).with_name("kernels") / "ggmlgrad_kernels.c"
KERNEL_CFLAGS = ("-O3", "-fno-math-errno", "-fno-trapping-math", "-fPIC", "-shared")


class BuildError(RuntimeError):
    """A step of the fast build failed; the message says which and what to do."""


def _say(step: int, total: int, text: str) -> None:
    print(f"[{step}/{total}] {text}", flush=True)


def find_compilers() -> tuple[str, str] | None:
    """(C compiler, C++ compiler) from $CC/$CXX or PATH, or None when either is missing."""
    cc = os.environ.get("CC") or next((c for c in ("cc", "gcc", "clang") if shutil.which(c)), None)
    cxx = os.environ.get("CXX") or next((c for c in ("c++", "g++", "clang++") if shutil.which(c)), None)
    if not cc or not cxx or not shutil.which(cc) or not shutil.which(cxx):
        return None
    return cc, cxx


def cpu_flags() -> tuple[list[str], list[str]]:
    """(ggml CMake options, kernel compiler flags) for this CPU.

    x86-64 with AVX2 gets AVX2+FMA code, not -march=native: on AVX-512 CPUs native code runs
    ggml's softmax in 16-lane chunks, so rows under 16 (class logits) went scalar (measured 15%
    slower steps). Elsewhere -march=native (ARM: NEON/SVE as the CPU has them)."""
    machine = platform.machine().lower()
    if machine in ("x86_64", "amd64") and _has_avx2():
        return (["-DGGML_NATIVE=OFF", "-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON",
                 "-DGGML_BMI2=ON", "-DGGML_AVX512=OFF"], ["-mavx2", "-mfma"])
    return ["-DGGML_NATIVE=ON"], ["-march=native"] if sys.platform != "darwin" else ["-mcpu=native"]


def _has_avx2() -> bool:
    try:
        return "avx2" in Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False


def blas_options() -> tuple[list[str], str, str]:
    """(CMake options for the BLAS backend, extra C++ defines, its name). scipy-openblas32 prefixes
    every symbol with ``scipy_``: ggml-blas calls ``cblas_sgemm`` and ``openblas_set_num_threads``,
    so the build maps those two names onto the prefixed ones."""
    if sys.platform == "darwin":
        return ["-DGGML_BLAS=ON", "-DGGML_BLAS_VENDOR=Apple", "-DCMAKE_INSTALL_RPATH=@loader_path"], "", "Accelerate"
    try:
        import scipy_openblas32 as ob
    except ImportError as e:
        raise BuildError("the scipy-openblas32 package is missing: pip install \"ggmlgrad[fast]\" "
                         "(or pip install scipy-openblas32 cmake ninja)") from e
    lib = Path(ob.get_lib_dir()) / _shared_name(ob.get_library())
    defines = "-Dcblas_sgemm=scipy_cblas_sgemm -Dopenblas_set_num_threads=scipy_openblas_set_num_threads"
    return ["-DGGML_BLAS=ON", "-DGGML_BLAS_VENDOR=OpenBLAS", f"-DBLAS_LIBRARIES={lib}",
            f"-DBLAS_INCLUDE_DIRS={ob.get_include_dir()}", f"-DCMAKE_INSTALL_RPATH=$ORIGIN;{ob.get_lib_dir()}"], \
        defines, "OpenBLAS (scipy-openblas32)"


def _shared_name(stem: str) -> str:
    if sys.platform == "win32":
        return f"{stem}.lib"
    return f"lib{stem}.dylib" if sys.platform == "darwin" else f"lib{stem}.so"


def _tool(name: str) -> str:
    """cmake/ninja from their PyPI packages (the venv's bin), else PATH."""
    here = Path(sys.executable).parent / name
    if here.exists():
        return str(here)
    found = shutil.which(name)
    if not found:
        raise BuildError(f"{name} not found: pip install {name} (or pip install \"ggmlgrad[fast]\")")
    return found


def _run(cmd: list[str], log: Path, what: str, env: dict | None = None) -> None:
    with log.open("a") as f:
        f.write(f"\n$ {' '.join(cmd)}\n")
        f.flush()
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
    if r.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
        raise BuildError(f"{what} failed (exit {r.returncode}); the last lines of {log}:\n{tail}")


def fetch_sdist(work: Path, log: Path) -> Path:
    """Download and unpack the pinned libggml-python sdist; returns its ggml source directory."""
    _run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", "libggml-python",
          "--quiet", "-d", str(work), f"libggml-python=={PINNED_GGML}"], log, "downloading the ggml source")
    archive = next(work.glob("libggml_python-*.tar.gz"), None)
    if archive is None:
        raise BuildError(f"pip downloaded no libggml-python sdist into {work}")
    with tarfile.open(archive) as t:
        t.extractall(work, filter="data")
    src = next(work.glob("libggml_python-*/ggml"), None)
    if src is None:
        raise BuildError(f"{archive.name} holds no ggml/ directory")
    return src


def build_ggml(src: Path, build: Path, prefix: Path, compilers: tuple[str, str], gpu: list[str],
               jobs: int, log: Path) -> str:
    cmake_cpu, kernel_flags = cpu_flags()
    blas, blas_defines, blas_name = blas_options()
    # -fno-math-errno: gcc keeps sqrtf scalar otherwise (errno), so AdamW's loop never vectorised
    # (7.5x slower on 784x256). NaN/Inf semantics are unchanged (no -ffast-math).
    cflags = "-fno-math-errno"
    cmd = [_tool("cmake"), "-S", str(src), "-B", str(build), "-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={_tool('ninja')}",
           "-DCMAKE_BUILD_TYPE=Release", f"-DCMAKE_INSTALL_PREFIX={prefix}", "-DCMAKE_INSTALL_LIBDIR=lib",
           f"-DCMAKE_C_COMPILER={compilers[0]}", f"-DCMAKE_CXX_COMPILER={compilers[1]}",
           f"-DCMAKE_C_FLAGS={cflags}", f"-DCMAKE_CXX_FLAGS={cflags} {blas_defines}".strip(),
           "-DBUILD_SHARED_LIBS=ON", "-DGGML_BUILD_TESTS=OFF", "-DGGML_BUILD_EXAMPLES=OFF", "-DGGML_OPENMP=OFF",
           "-DGGML_CCACHE=OFF", "-DGGML_LLAMAFILE=ON", "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON",
           *cmake_cpu, *blas, *gpu]
    _run(cmd, log, "configuring ggml with CMake")
    _run([_tool("cmake"), "--build", str(build), "--parallel", str(jobs)], log, "compiling ggml")
    _run([_tool("cmake"), "--install", str(build)], log, "installing ggml")
    return blas_name


def build_kernels(include: Path, prefix: Path, cc: str, log: Path) -> Path:
    """ggmlgrad's vectorised activation kernels, a ggml custom-op library beside ggml."""
    out = prefix / "lib" / ("ggmlgrad-kernels.dll" if sys.platform == "win32" else _shared_name("ggmlgrad-kernels"))
    _, flags = cpu_flags()
    # -fno-trapping-math lets gcc turn the kernels' selects into blends (FP exception flags only;
    # values, NaN and Inf are unchanged): without it no loop vectorised.
    cmd = [cc, *KERNEL_CFLAGS, *flags, f"-I{include}", str(KERNELS_SOURCE),
           "-o", str(out)]
    if sys.platform != "darwin" and sys.platform != "win32":
        cmd.append("-lm")
    _run(cmd, log, "compiling ggmlgrad's kernels")
    return out


def build(gpu: list[str], jobs: int, keep: bool = False) -> Path:
    """Build everything into the fast-build directory; returns it. Raises BuildError."""
    compilers = find_compilers()
    if compilers is None:
        raise BuildError("no C/C++ compiler found (looked at $CC/$CXX, cc, gcc, clang, c++, g++, clang++); "
                         "install one (e.g. build-essential, Xcode command line tools) and rerun")
    total = 5
    prefix = fast_build_dir()
    work = Path(tempfile.mkdtemp(prefix="ggmlgrad-build-"))
    log = work / "build.log"
    start = time.perf_counter()
    try:
        _say(1, total, f"downloading libggml-python=={PINNED_GGML} source (log: {log})")
        src = fetch_sdist(work, log)
        staging = work / "install"
        _say(2, total, f"configuring and compiling ggml with {jobs} jobs (a few minutes)")
        blas_name = build_ggml(src, work / "build", staging, compilers, gpu, jobs, log)
        _say(3, total, "compiling ggmlgrad's vectorised activation kernels")
        build_kernels(src / "include", staging, compilers[0], log)
        _say(4, total, f"installing into {prefix}")
        if prefix.exists():
            shutil.rmtree(prefix)
        prefix.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(staging / "lib", prefix / "lib", symlinks=True)
        stamp = {"ggml": PINNED_GGML, "blas": blas_name, "cpu": cpu_flags()[0], "gpu": gpu,
                 "seconds": round(time.perf_counter() - start, 1)}
        (prefix / FAST_STAMP).write_text(json.dumps(stamp, indent=2))
        _say(5, total, "checking that ggmlgrad loads it")
        _verify(prefix)
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"fast build ready in {time.perf_counter() - start:.0f} s: {prefix}")
    return prefix


def _verify(prefix: Path) -> None:
    code = "import ggmlgrad as gg, json; i = gg.info(); print(json.dumps([i['build'], i['library_dir']]))"
    env = {k: v for k, v in os.environ.items() if k != "GGMLGRAD_GGML_LIB"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise BuildError(f"the fast build was installed into {prefix} but ggmlgrad failed to load it:\n"
                         f"{r.stderr[-2000:]}\nremove {prefix} to go back to the prebuilt wheel")
    print("    ggmlgrad loads:", r.stdout.strip())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ggmlgrad build", description=__doc__.split("\n\n")[0])
    p.add_argument("--optional", action="store_true",
                   help="without a compiler, keep the prebuilt wheel and exit 0 (for set-up scripts)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="parallel compile jobs")
    p.add_argument("--keep", action="store_true", help="keep the build directory and log")
    for name, flag in (("cuda", "-DGGML_CUDA=ON"), ("vulkan", "-DGGML_VULKAN=ON"), ("metal", "-DGGML_METAL=ON")):
        p.add_argument(f"--{name}", action="append_const", const=flag, dest="gpu",
                       help=f"also build ggml's {name.upper() if name != 'metal' else 'Metal'} backend "
                            f"(needs that toolkit installed)")
    p.add_argument("--remove", action="store_true", help="delete the fast build (back to the prebuilt wheel)")
    args = p.parse_args(argv)
    if args.remove:
        shutil.rmtree(fast_build_dir(), ignore_errors=True)
        print(f"removed {fast_build_dir()}; ggmlgrad uses the prebuilt libggml-python wheel")
        return 0
    if args.optional and find_compilers() is None:
        print("ggmlgrad build: no C compiler found; staying on the prebuilt wheel (slower matmuls). "
              "Install a compiler and run `python -m ggmlgrad build` for the fast build.")
        return 0
    try:
        build(args.gpu or [], max(1, args.jobs), keep=args.keep)
    except BuildError as e:
        print(f"ggmlgrad build: {e}", file=sys.stderr)
        return 1
    return 0
