"""``python -m ggmlgrad build``: the fast ggml build, from pip packages and a C compiler only.

It builds ggml (the version ``libggml-python`` pins) from that package's sdist with code for this
CPU, llamafile sgemm and a BLAS (the ``scipy-openblas32`` wheel on Linux and Windows, Accelerate
on macOS), plus ggmlgrad's vectorised activation kernels, into this Python environment
(``<sys.prefix>/share/ggmlgrad/``). ``import ggmlgrad`` then loads it instead of the portable wheel;
``gg.info()["build"]`` says which one is active. CMake and ninja come from their PyPI packages
(the ``fast`` extra). No root, no system package manager. It also compiles the executor's optional
accelerator (``_ggml/_accel.c``, a small CPython extension built with this Python's headers, into
``<sys.prefix>/share/ggmlgrad/accel/``; skipped with a note when the headers are missing, and
``GGMLGRAD_ACCEL=0`` turns it off: ``gg.info()["executor_accelerator"]``).

    python -m ggmlgrad build              # fails with a clear message when something is missing
    python -m ggmlgrad build --optional   # no compiler: say so, keep the prebuilt wheel, exit 0
    python -m ggmlgrad build --accel      # only the executor accelerator (seconds; any ggml)
    python -m ggmlgrad build --cuda       # also the CUDA backend (needs the CUDA toolkit)
    python -m ggmlgrad build --vulkan     # also the Vulkan backend (Vulkan headers, loader, glslc)
    python -m ggmlgrad build --cuda --cuda-arch 90   # CUDA code for one architecture only (H100/H200)
    python -m ggmlgrad build --cpu avx512 --prefix /tmp/gg-avx512   # another x86 variant, elsewhere

A build with a GPU backend goes into a directory of its own (``ggml-<version>-vulkan``, ...), so the
CPU fast build stays the default; ``GGMLGRAD_GGML_LIB=<that directory>/lib`` selects it, as it
selects a ``--prefix`` build. ``--cpu`` (x86-64): ``auto`` (AVX2 code, also on AVX-512 CPUs, where
AVX-512 ggml code measured no faster: see :func:`cpu_flags`), ``avx2``, ``avx512``, ``native``.
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

from ._ggml.loader import FAST_STAMP, PINNED_GGML, accel_dir, accel_path, cpu_features, fast_build_dir, gpu_build_dir

KERNELS_SOURCE = Path(__file__).with_name("kernels") / "ggmlgrad_kernels.c"
ACCEL_SOURCE = Path(__file__).with_name("_ggml") / "_accel.c"
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


# x86-64 code variants ``--cpu`` can choose (``auto``: the one measured fastest on this CPU).
X86_BASE = ["-DGGML_NATIVE=OFF", "-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON",
            "-DGGML_BMI2=ON"]
# AVX-512 extensions ggml has a switch for, by the /proc/cpuinfo flag that says the CPU has it.
AVX512_EXTRAS = {"avx512vbmi": "-DGGML_AVX512_VBMI=ON", "avx512_vnni": "-DGGML_AVX512_VNNI=ON",
                 "avx512_bf16": "-DGGML_AVX512_BF16=ON"}
CPU_VARIANTS = ("auto", "avx2", "avx512", "native")


def cpu_flags(variant: str = "auto") -> tuple[list[str], list[str]]:
    """(ggml CMake options, kernel compiler flags) for this CPU and ``variant`` (see CPU_VARIANTS).

    ``auto`` on x86-64 with AVX2 is AVX2+FMA code, also on AVX-512 CPUs: there ggml's AVX-512 code
    was no faster on ggmlgrad's f32 graphs (the matmuls that matter run in OpenBLAS, which picks its
    own kernels at run time) and native code runs ggml's softmax in 16-lane chunks, so rows under 16
    (class logits) went scalar (15% slower steps); benchmarks/README.md has the measurements.
    ``avx512`` adds AVX-512F and the extensions this CPU has. The kernels get AVX2+FMA flags on
    every x86 variant: they carry their own AVX-512 clones, picked at run time. Elsewhere
    -march=native (ARM: NEON/SVE as the CPU has them)."""
    if variant not in CPU_VARIANTS:
        raise BuildError(f"--cpu: expected one of {', '.join(CPU_VARIANTS)}, got {variant!r}")
    machine = platform.machine().lower()
    x86_avx2 = machine in ("x86_64", "amd64") and "avx2" in cpu_features()
    if variant in ("avx2", "avx512") and not x86_avx2:
        raise BuildError(f"--cpu {variant}: this CPU ({machine}) has no AVX2; use --cpu auto or native")
    if variant == "avx512":
        have = cpu_features()
        if "avx512f" not in have:
            raise BuildError("--cpu avx512: this CPU has no AVX-512F (its /proc/cpuinfo flags)")
        extras = [opt for flag, opt in AVX512_EXTRAS.items() if flag in have]
        return X86_BASE + ["-DGGML_AVX512=ON", *extras], ["-mavx2", "-mfma"]
    if x86_avx2 and variant != "native":
        return X86_BASE + ["-DGGML_AVX512=OFF"], ["-mavx2", "-mfma"]
    return ["-DGGML_NATIVE=ON"], ["-march=native"] if sys.platform != "darwin" else ["-mcpu=native"]


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
    """Download and unpack the pinned libggml-python sdist; returns its ggml source directory.
    A source already unpacked in ``work`` (``--build-dir``) is reused, so a rebuild is incremental."""
    unpacked = next(work.glob("libggml_python-*/ggml"), None)
    if unpacked is not None:
        return unpacked
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


# ggml 0.20.2's Vulkan instance set-up always builds a VK_EXT_layer_settings structure (for its
# optional validation layer, used only when compiled with GGML_VULKAN_VALIDATE). That type needs
# Vulkan headers 1.3.261 or newer; Debian 12 and Ubuntu 22.04 ship 1.3.239/1.3.204 and the build stops.
# The patch guards the block with the headers' version: with new headers the code is unchanged; with
# old ones the instance is created without the (unused) settings. Applied to the unpacked copy only.
VULKAN_LAYER_BLOCK_START = "    VkBool32 enable_best_practice = layer_settings;\n"
VULKAN_LAYER_BLOCK_END = ("    vk::InstanceCreateInfo instance_create_info(vk::InstanceCreateFlags{}, &app_info, layers, "
                          "extensions, &layer_setting_info);\n")
VULKAN_PATCH_MARK = "// ggmlgrad build patch: VK_EXT_layer_settings"
VULKAN_OLD_HEADERS_BRANCH = (
    "#else  // " + VULKAN_PATCH_MARK[3:] + " needs Vulkan headers >= 1.3.261; without them, no settings\n"
    "    vk::InstanceCreateInfo instance_create_info(vk::InstanceCreateFlags{}, &app_info, layers, extensions);\n"
    "#endif\n")


def patch_vulkan_source(src: Path) -> bool:
    """Guard ggml-vulkan.cpp's layer-settings block by ``VK_HEADER_VERSION`` (see above).
    Returns True when it patched, False when already patched; raises when the block is not found."""
    path = src / "src" / "ggml-vulkan" / "ggml-vulkan.cpp"
    text = path.read_text()
    if VULKAN_PATCH_MARK in text:
        return False
    start = text.find(VULKAN_LAYER_BLOCK_START)
    end = text.find(VULKAN_LAYER_BLOCK_END, start)
    if start < 0 or end < 0:
        raise BuildError(f"{path}: the VK_EXT_layer_settings block to guard was not found "
                         "(another ggml version?); build with Vulkan headers >= 1.3.261 unpatched")
    end += len(VULKAN_LAYER_BLOCK_END)
    guarded = (f"#if VK_HEADER_VERSION >= 261  {VULKAN_PATCH_MARK}\n" + text[start:end]
               + VULKAN_OLD_HEADERS_BRANCH)
    path.write_text(text[:start] + guarded + text[end:])
    return True


def cuda_options() -> tuple[list[str], list[str]]:
    """(CMake options, library directories for the RPATH) that ``--cuda`` needs beyond GGML_CUDA=ON.

    cuBLAS: the toolkit's, else the ``nvidia-cublas`` wheel's (a toolkit of nvcc and the runtime
    only, as on a build machine, has no cuBLAS; ``pip install nvidia-cublas`` provides headers and
    libraries). The driver library libcuda: without it (a machine with no NVIDIA driver, where the
    build can still compile and link) ggml's CUDA memory pool is built without virtual memory
    management (GGML_CUDA_NO_VMM: its legacy pool), the one part that links libcuda directly."""
    nvcc = os.environ.get("CUDACXX") or shutil.which("nvcc")
    if not nvcc:
        raise BuildError("--cuda: nvcc not found (put the CUDA toolkit's bin on PATH or set CUDACXX)")
    root = Path(nvcc).resolve().parent.parent
    libdirs = [root / "lib64", root / "lib", root / "targets" / f"{platform.machine()}-linux" / "lib"]
    opts: list[str] = [f"-DCMAKE_CUDA_COMPILER={nvcc}"]
    rpath: list[str] = []
    if not any((d / _shared_name("cublas")).exists() for d in libdirs):
        found = _cublas_wheel()
        if found is None:
            raise BuildError(f"--cuda: the CUDA toolkit at {root} has no cuBLAS; install it (e.g. the "
                             "toolkit's cuda-libraries-dev) or `pip install nvidia-cublas` and rerun")
        lib, include = found
        opts += [f"-DCUDA_cublas_LIBRARY={_versioned(lib, 'cublas')}",
                 f"-DCUDA_cublasLt_LIBRARY={_versioned(lib, 'cublasLt')}",
                 f"-DCMAKE_CUDA_FLAGS=-I{include}"]
        rpath.append(str(lib))
        print(f"    cuBLAS from the nvidia-cublas wheel: {lib}")
    if not _has_cuda_driver() and not any((d / "stubs" / "libcuda.so").exists() for d in libdirs):
        opts.append("-DGGML_CUDA_NO_VMM=ON")
        print("    no libcuda (no NVIDIA driver here): GGML_CUDA_NO_VMM=ON, ggml's legacy CUDA memory pool")
    return opts, rpath


def _has_cuda_driver() -> bool:
    """Whether the NVIDIA driver's libcuda is installed (the dynamic linker's cache, else the usual
    directories); no ctypes here: only ggmlgrad._ggml loads libraries."""
    try:
        listing = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=30).stdout
        if "libcuda.so" in listing:
            return True
    except (OSError, subprocess.SubprocessError):
        pass
    dirs = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/lib/wsl/lib")
    return any(next(Path(d).glob("libcuda.so*"), None) is not None for d in dirs if Path(d).is_dir())


def _cublas_wheel() -> tuple[Path, Path] | None:
    """(lib, include) of an installed nvidia-cublas wheel (``nvidia/cu13`` or ``nvidia/cublas``)."""
    import importlib.util
    spec = importlib.util.find_spec("nvidia")
    for base in (spec.submodule_search_locations or []) if spec else []:
        for sub in ("cu13", "cublas"):
            lib, inc = Path(base) / sub / "lib", Path(base) / sub / "include"
            if (inc / "cublas_v2.h").exists() and next(lib.glob("libcublas.so*"), None) is not None:
                return lib, inc
    return None


def _versioned(lib: Path, name: str) -> Path:
    return next(iter(sorted(lib.glob(f"lib{name}.so*"))))


def build_ggml(src: Path, build: Path, prefix: Path, compilers: tuple[str, str], gpu: list[str],
               jobs: int, log: Path, cpu: str = "auto") -> str:
    cmake_cpu, _ = cpu_flags(cpu)
    blas, blas_defines, blas_name = blas_options()
    if "-DGGML_CUDA=ON" in gpu:
        cuda, rpath = cuda_options()
        gpu = gpu + cuda
        blas = [o + "".join(";" + d for d in rpath) if o.startswith("-DCMAKE_INSTALL_RPATH=") else o for o in blas]
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


def build_kernels(include: Path, prefix: Path, cc: str, log: Path, cpu: str = "auto") -> Path:
    """ggmlgrad's vectorised activation kernels, a ggml custom-op library beside ggml."""
    out = prefix / "lib" / ("ggmlgrad-kernels.dll" if sys.platform == "win32" else _shared_name("ggmlgrad-kernels"))
    _, flags = cpu_flags(cpu)
    # -fno-trapping-math lets gcc turn the kernels' selects into blends (FP exception flags only;
    # values, NaN and Inf are unchanged): without it no loop vectorised.
    cmd = [cc, *KERNEL_CFLAGS, *flags, f"-I{include}", str(KERNELS_SOURCE),
           "-o", str(out)]
    if sys.platform != "darwin" and sys.platform != "win32":
        cmd.append("-lm")
    _run(cmd, log, "compiling ggmlgrad's kernels")
    return out


def build_accel(cc: str | None = None, log: Path | None = None, out: Path | None = None) -> Path:
    """The executor's compiled accelerator (``_ggml/_accel.c``, a CPython extension that links
    against no ggml) for the running Python, into ``out`` (default ``accel_path()``, where ggmlgrad
    looks; another file is loaded with ``GGMLGRAD_ACCEL=<file>``); returns the path. Needs a C
    compiler and this Python's headers (``sysconfig``'s include directory: the ``python3-dev``
    package on Debian and Ubuntu). Raises BuildError."""
    import sysconfig
    if sys.platform == "win32":
        raise BuildError("the executor accelerator is built on Linux and macOS only (the pure-Python path runs here)")
    if cc is None:
        found = find_compilers()
        cc = found[0] if found else None
        if cc is None:
            raise BuildError("no C compiler found for the executor accelerator (looked at $CC, cc, gcc, clang)")
    include = Path(sysconfig.get_paths()["include"])
    if not (include / "Python.h").exists():
        raise BuildError(f"this Python's headers are missing ({include}/Python.h; on Debian/Ubuntu: "
                         "apt install python3-dev); the pure-Python executor path stays in use")
    out = Path(out) if out is not None else accel_path()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    cmd = [cc, "-O2", "-fPIC", "-shared", "-fvisibility=hidden", f"-I{include}", str(ACCEL_SOURCE), "-o", str(tmp)]
    if sys.platform == "darwin":
        cmd[1:1] = ["-undefined", "dynamic_lookup"]
    if log is None:
        log = out.with_name("build.log")
        log.write_text("")
    _run(cmd, log, "compiling the executor accelerator")
    os.replace(tmp, out)  # a running process that mapped the old file keeps it
    return out


def _verify_accel() -> str:
    """Load ggmlgrad in a fresh interpreter and return its accelerator status line."""
    code = "from ggmlgrad._ggml import accel; print(accel.STATUS)"
    env = {k: v for k, v in os.environ.items() if k != "GGMLGRAD_ACCEL"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if r.returncode != 0 or not r.stdout.startswith("active"):
        raise BuildError(f"the executor accelerator was built but does not load: {(r.stdout + r.stderr)[-2000:]}")
    return r.stdout.strip()


def build(gpu: list[str], jobs: int, keep: bool = False, build_dir: Path | None = None, cpu: str = "auto",
          prefix: Path | None = None) -> Path:
    """Build everything into the fast-build directory (or, with a GPU backend, that backend's own
    directory; or ``prefix``, selected with GGMLGRAD_GGML_LIB=<prefix>/lib); returns it.
    ``build_dir`` keeps the source and objects there for incremental rebuilds. ``cpu``: the x86
    code variant (CPU_VARIANTS). Raises BuildError."""
    compilers = find_compilers()
    if compilers is None:
        raise BuildError("no C/C++ compiler found (looked at $CC/$CXX, cc, gcc, clang, c++, g++, clang++); "
                         "install one (e.g. build-essential, Xcode command line tools) and rerun")
    total = 5
    backends = [_GPU_FLAGS[f] for f in gpu if f in _GPU_FLAGS]
    cpu_flags(cpu)  # an unusable --cpu fails before anything is downloaded
    own_dir = prefix is not None
    if prefix is None:
        prefix = gpu_build_dir(backends) if backends else fast_build_dir()
    prefix = Path(prefix).resolve()
    if build_dir is not None:
        build_dir.mkdir(parents=True, exist_ok=True)
        work, keep = build_dir.resolve(), True
    else:
        work = Path(tempfile.mkdtemp(prefix="ggmlgrad-build-"))
    log = work / "build.log"
    start = time.perf_counter()
    try:
        _say(1, total, f"downloading libggml-python=={PINNED_GGML} source (log: {log})")
        src = fetch_sdist(work, log)
        if "vulkan" in backends and patch_vulkan_source(src):
            print("    patched ggml-vulkan.cpp: VK_EXT_layer_settings only with Vulkan headers >= 1.3.261")
        staging = work / "install"
        _say(2, total, f"configuring and compiling ggml with {jobs} jobs (a few minutes"
                       f"{'; the GPU backends take much longer' if backends else ''})")
        blas_name = build_ggml(src, work / "build", staging, compilers, gpu, jobs, log, cpu)
        _say(3, total, "compiling ggmlgrad's vectorised activation kernels and the executor accelerator")
        build_kernels(src / "include", staging, compilers[0], log, cpu)
        try:  # optional: without Python's headers the pure-Python executor path runs
            print(f"    executor accelerator: {build_accel(compilers[0], log)}")
        except BuildError as e:
            print(f"    executor accelerator skipped: {e}")
        _say(4, total, f"installing into {prefix}")
        if own_dir:  # a directory the user named: replace only what a build puts there
            shutil.rmtree(prefix / "lib", ignore_errors=True)
            (prefix / FAST_STAMP).unlink(missing_ok=True)
        elif prefix.exists():
            shutil.rmtree(prefix)
        prefix.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(staging / "lib", prefix / "lib", symlinks=True)
        stamp = {"ggml": PINNED_GGML, "blas": blas_name, "cpu": cpu_flags(cpu)[0], "cpu_variant": cpu, "gpu": gpu,
                 "seconds": round(time.perf_counter() - start, 1)}
        (prefix / FAST_STAMP).write_text(json.dumps(stamp, indent=2))
        _say(5, total, "checking that ggmlgrad loads it")
        _verify(prefix, selected=bool(backends) or own_dir)
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"fast build ready in {time.perf_counter() - start:.0f} s: {prefix}")
    if backends or own_dir:
        print(f"select it with:  export GGMLGRAD_GGML_LIB={prefix / 'lib'}")
    if backends:
        print("(lavapipe, Mesa's software Vulkan device, is listed only with GGML_VK_VISIBLE_DEVICES=0)")
    return prefix


def _verify(prefix: Path, selected: bool = False) -> None:
    """Load the new build in a fresh interpreter: the default one, or (``selected``, a GPU build
    in its own directory) through GGMLGRAD_GGML_LIB; prints the devices it lists."""
    code = ("import ggmlgrad as gg, json; i = gg.info(); "
            "print(json.dumps([i['build'], i['library_dir'], [d.name for d in gg.devices()], "
            "i['executor_accelerator']]))")
    env = {k: v for k, v in os.environ.items() if k != "GGMLGRAD_GGML_LIB"}
    if selected:
        env["GGMLGRAD_GGML_LIB"] = str(prefix / "lib")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise BuildError(f"the fast build was installed into {prefix} but ggmlgrad failed to load it:\n"
                         f"{r.stderr[-2000:]}\nremove {prefix} to go back to the prebuilt wheel")
    print("    ggmlgrad loads:", r.stdout.strip())


_GPU_FLAGS = {"-DGGML_CUDA=ON": "cuda", "-DGGML_VULKAN=ON": "vulkan", "-DGGML_METAL=ON": "metal"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ggmlgrad build", description=__doc__.split("\n\n")[0])
    p.add_argument("--optional", action="store_true",
                   help="without a compiler, keep the prebuilt wheel and exit 0 (for set-up scripts)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="parallel compile jobs")
    p.add_argument("--keep", action="store_true", help="keep the build directory and log")
    p.add_argument("--build-dir", type=Path, default=None,
                   help="build in this directory and keep it (a rerun recompiles only what changed)")
    for name, flag in (("cuda", "-DGGML_CUDA=ON"), ("vulkan", "-DGGML_VULKAN=ON"), ("metal", "-DGGML_METAL=ON")):
        p.add_argument(f"--{name}", action="append_const", const=flag, dest="gpu",
                       help=f"also build ggml's {name.upper() if name != 'metal' else 'Metal'} backend "
                            f"(needs that toolkit installed)")
    p.add_argument("--cuda-arch", metavar="ARCHS",
                   help="with --cuda: CMAKE_CUDA_ARCHITECTURES, e.g. 90 for an H100/H200 (default: ggml's "
                        "list of architectures, a much longer build)")
    p.add_argument("--cpu", choices=CPU_VARIANTS, default="auto",
                   help="x86-64 code for ggml: avx2, avx512 (AVX-512F and the extensions this CPU has), "
                        "native (-march=native), or auto (default: the variant measured fastest, AVX2)")
    p.add_argument("--prefix", type=Path, default=None,
                   help="install here instead of this environment (select it with GGMLGRAD_GGML_LIB=PREFIX/lib)")
    p.add_argument("--accel", action="store_true",
                   help="build only the executor's compiled accelerator (a small CPython extension, seconds; "
                        "the full build makes it too); GGMLGRAD_ACCEL=0 turns it off")
    p.add_argument("--remove", action="store_true",
                   help="delete the fast build and the accelerator (back to the prebuilt wheel)")
    args = p.parse_args(argv)
    if args.cuda_arch:
        if "-DGGML_CUDA=ON" not in (args.gpu or []):
            p.error("--cuda-arch needs --cuda")
        if not all(a.strip().isalnum() or a.strip() in ("native", "all", "all-major")
                   for a in args.cuda_arch.replace(";", ",").split(",")):
            p.error(f"--cuda-arch: expected architectures such as 90 or 86,90, got {args.cuda_arch!r}")
        args.gpu.append("-DCMAKE_CUDA_ARCHITECTURES=" + args.cuda_arch.replace(",", ";"))
    if args.remove:
        shutil.rmtree(fast_build_dir(), ignore_errors=True)
        shutil.rmtree(accel_dir(), ignore_errors=True)
        print(f"removed {fast_build_dir()} and {accel_dir()}; ggmlgrad uses the prebuilt libggml-python wheel "
              "and the pure-Python executor path")
        return 0
    if args.accel:
        try:
            print(f"executor accelerator built: {build_accel()}")
            print(f"    ggmlgrad loads it: {_verify_accel()}")
        except BuildError as e:
            if args.optional:
                print(f"ggmlgrad build --accel: {e}")
                return 0
            print(f"ggmlgrad build --accel: {e}", file=sys.stderr)
            return 1
        return 0
    if args.optional and find_compilers() is None:
        print("ggmlgrad build: no C compiler found; staying on the prebuilt wheel (slower matmuls). "
              "Install a compiler and run `python -m ggmlgrad build` for the fast build.")
        return 0
    try:
        build(args.gpu or [], max(1, args.jobs), keep=args.keep, build_dir=args.build_dir, cpu=args.cpu,
              prefix=args.prefix)
    except BuildError as e:
        print(f"ggmlgrad build: {e}", file=sys.stderr)
        return 1
    return 0
