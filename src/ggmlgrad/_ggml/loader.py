"""Finding and loading the ggml shared libraries.

Search order: the directory in ``GGMLGRAD_GGML_LIB`` (a user's own ggml built
with CUDA/Vulkan/Metal), then the fast build that ``python -m ggmlgrad build``
left in this environment (unless ``GGMLGRAD_BUILD=prebuilt``), then the
``libggml-python`` wheel (``lib64/*.so`` on Linux, ``lib/*.dylib`` on macOS,
``bin/*.dll`` on Windows).
"""
from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import importlib.util
import json
import os
import sys
import warnings
from pathlib import Path

# An abort inside ggml would otherwise try to attach a debugger for a backtrace.
os.environ.setdefault("GGML_NO_BACKTRACE", "1")
# ggml 0.20.2's Vulkan backend reorders a graph's nodes for concurrency ("graph optimize") and fuses
# runs of nodes into one shader. On ggmlgrad's graphs each crashed lavapipe inside a command buffer
# (tests/test_device_subset.py: a graph-mode training step after an eager one; the op table's pow
# samples in sequence), and with both off they ran. ggml reads these when it initialises a device,
# so they are set before the libraries load; a user's own setting of either variable is kept.
os.environ.setdefault("GGML_VK_DISABLE_GRAPH_OPTIMIZE", "1")
os.environ.setdefault("GGML_VK_DISABLE_FUSION", "1")


PINNED_GGML = "0.20.2.post1"      # the libggml-python version pyproject.toml pins
FAST_STAMP = "BUILD.json"          # written by the fast build last: its presence means complete


def fast_build_dir() -> Path:
    """Where ``python -m ggmlgrad build`` installs ggml for this Python environment."""
    return Path(sys.prefix) / "share" / "ggmlgrad" / f"ggml-{PINNED_GGML}"


def accel_dir() -> Path:
    """Where ``python -m ggmlgrad build`` (``--accel``) puts the executor's compiled accelerator for
    this Python environment (see ``_ggml/accel.py``): beside the fast build, not inside it (it does
    not depend on which ggml is loaded)."""
    return Path(sys.prefix) / "share" / "ggmlgrad" / "accel"


def accel_path() -> Path:
    """The accelerator's file for this interpreter (its extension suffix names the Python ABI)."""
    import sysconfig
    return accel_dir() / ("_accel" + (sysconfig.get_config_var("EXT_SUFFIX") or ".so"))


def gpu_build_dir(backends: "list[str] | tuple[str, ...]") -> Path:
    """Where ``python -m ggmlgrad build --vulkan`` (``--cuda``, ...) installs: beside the CPU fast
    build, not over it; ``GGMLGRAD_GGML_LIB=<this>/lib`` selects it."""
    return fast_build_dir().with_name(f"ggml-{PINNED_GGML}-{'-'.join(sorted(backends))}")


def kernels_library(directory: str | Path) -> Path | None:
    """ggmlgrad's vectorised activation kernels if the fast build put them beside the loaded ggml."""
    d = Path(directory)
    for name in ("libggmlgrad-kernels.so", "libggmlgrad-kernels.dylib", "ggmlgrad-kernels.dll"):
        if (d / name).exists():
            return d / name
    return None


# The fast build's OpenBLAS (scipy-openblas32, a DYNAMIC_ARCH build private to ggml: its symbols
# carry a scipy_ prefix) picks its kernels for the CPU when it loads, unless OPENBLAS_CORETYPE names
# a kernel set. That variable is usually set for NumPy's and SciPy's own OpenBLAS (this project's
# machines set OPENBLAS_CORETYPE=Haswell): applied to ggml's, it held an AVX-512 CPU (AMD EPYC,
# Zen 5) to AVX2 kernels, and a 784-256-10 Adam step took 1020 µs instead of 550 µs with the
# SkylakeX (AVX-512) kernels OpenBLAS picks there itself (benchmarks/README.md, 2026-12-01).
# So ggml's OpenBLAS follows GGMLGRAD_OPENBLAS_CORETYPE only; unset, its own detection.
OPENBLAS_CORETYPE_VAR = "GGMLGRAD_OPENBLAS_CORETYPE"


def openblas_coretype(env: "dict | os._Environ") -> str | None:
    """The OPENBLAS_CORETYPE under which the fast build's OpenBLAS loads: GGMLGRAD_OPENBLAS_CORETYPE
    when set (a kernel set such as Haswell or SkylakeX), else None (OpenBLAS detects the CPU).

    >>> openblas_coretype({"OPENBLAS_CORETYPE": "Haswell"}) is None
    True
    >>> openblas_coretype({"GGMLGRAD_OPENBLAS_CORETYPE": " Haswell "})
    'Haswell'
    """
    value = env.get(OPENBLAS_CORETYPE_VAR, "").strip()
    return value or None


@contextlib.contextmanager
def _openblas_environment():
    """OPENBLAS_CORETYPE as :func:`openblas_coretype` says while the libraries load (OpenBLAS
    reads it once, then); the user's own value is back afterwards, for every other library."""
    saved = os.environ.get("OPENBLAS_CORETYPE")
    core = openblas_coretype(os.environ)
    if core is None:
        os.environ.pop("OPENBLAS_CORETYPE", None)
    else:
        os.environ["OPENBLAS_CORETYPE"] = core
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("OPENBLAS_CORETYPE", None)
        else:
            os.environ["OPENBLAS_CORETYPE"] = saved


def openblas_core() -> str | None:
    """The kernel set the fast build's OpenBLAS (scipy-openblas32's) runs, e.g. "SkylakeX" or
    "Haswell"; None when it is not loaded (the prebuilt wheel, Accelerate, a ggml of your own)."""
    if not hasattr(os, "RTLD_NOLOAD"):
        return None  # Windows: no way to ask for a loaded library only
    try:  # RTLD_NOLOAD: only the library ggml's BLAS backend loaded, never a new one (nor NumPy's,
        # whose OpenBLAS has another name)
        blas = ctypes.CDLL("libscipy_openblas.so", mode=os.RTLD_NOLOAD | getattr(ctypes, "RTLD_GLOBAL", 0))
    except OSError:
        return None
    fn = getattr(blas, "scipy_openblas_get_corename", None)
    if fn is None:
        return None
    fn.restype = ctypes.c_char_p
    return (fn() or b"").decode() or None


class GGMLLibraryError(ImportError):
    """The ggml shared libraries are missing, incomplete or of another version."""


@dataclasses.dataclass(frozen=True)
class LibraryInfo:
    directory: str
    source: str                      # "GGMLGRAD_GGML_LIB", "fast build" or "libggml-python"
    files: tuple[str, ...]           # loaded library files, in load order
    backend_files: tuple[str, ...]   # dynamically loadable backends found beside them


def _lib_names() -> tuple[str, str, str]:
    if sys.platform == "win32":
        return "ggml-base.dll", "ggml-cpu.dll", "ggml.dll"
    ext = ".dylib" if sys.platform == "darwin" else ".so"
    return f"libggml-base{ext}", f"libggml-cpu{ext}", f"libggml{ext}"


def _wheel_dir() -> Path | None:
    spec = importlib.util.find_spec("libggml")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations)))
    for sub in ("lib64", "lib", "bin"):
        if (root / sub / _lib_names()[0]).exists():
            return root / sub
    return root


# The CPU feature each x86 ggml build switch compiles code for, by its /proc/cpuinfo flag.
_GGML_CPU_FEATURES = {"AVX": "avx", "AVX2": "avx2", "FMA": "fma", "F16C": "f16c", "BMI2": "bmi2",
                      "AVX512": "avx512f", "AVX512_VBMI": "avx512vbmi", "AVX512_VNNI": "avx512_vnni",
                      "AVX512_BF16": "avx512_bf16", "AVX_VNNI": "avx_vnni"}


def cpu_features() -> frozenset[str]:
    """This CPU's feature flags from /proc/cpuinfo (empty where there is none: macOS, Windows)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def missing_cpu_features(stamp: dict, flags: "frozenset[str] | set[str]") -> list[str]:
    """The instruction sets a fast build's stamp (its BUILD.json) was compiled for that a CPU with
    ``flags`` lacks (its code would stop with SIGILL there: a virtual environment copied to another
    machine); [] when it runs here or nothing can be told (no /proc/cpuinfo, a native build).

    >>> missing_cpu_features({"cpu": ["-DGGML_AVX2=ON", "-DGGML_AVX512=ON"]}, {"avx", "avx2"})
    ['AVX512']
    """
    if not flags:
        return []
    wanted = [o[len("-DGGML_"):-len("=ON")] for o in stamp.get("cpu", []) if o.startswith("-DGGML_") and o.endswith("=ON")]
    return [w for w in wanted if w in _GGML_CPU_FEATURES and _GGML_CPU_FEATURES[w] not in flags]


def _fast_build_runs_here(fast: Path) -> bool:
    try:
        stamp = json.loads((fast / FAST_STAMP).read_text())
    except (OSError, ValueError):
        return True  # an old or hand-made stamp: as before, trust it
    missing = missing_cpu_features(stamp if isinstance(stamp, dict) else {}, cpu_features())
    if missing:
        warnings.warn(f"ggmlgrad: the fast build in {fast} was compiled for {', '.join(missing)}, which this "
                      "CPU lacks; using the prebuilt libggml-python wheel. Rebuild for this CPU with "
                      "`python -m ggmlgrad build`.", RuntimeWarning, stacklevel=3)
    return not missing


def find_library_dir() -> tuple[Path, str]:
    override = os.environ.get("GGMLGRAD_GGML_LIB")
    if override:
        return Path(override), "GGMLGRAD_GGML_LIB"
    fast = fast_build_dir()
    if (os.environ.get("GGMLGRAD_BUILD", "").strip().lower() != "prebuilt" and (fast / FAST_STAMP).exists()
            and _fast_build_runs_here(fast)):
        return fast / "lib", "fast build"
    d = _wheel_dir()
    if d is None:
        raise GGMLLibraryError(
            "ggmlgrad: the ggml libraries were not found. Install them with "
            "`pip install libggml-python==0.20.2.post1`, or point GGMLGRAD_GGML_LIB at a "
            "directory holding libggml-base, libggml-cpu and libggml.")
    return d, "libggml-python"


def load() -> tuple[ctypes.CDLL, ctypes.CDLL, ctypes.CDLL, LibraryInfo]:
    directory, source = find_library_dir()
    names = _lib_names()
    missing = [n for n in names if not (directory / n).exists()]
    if missing:
        raise GGMLLibraryError(
            f"ggmlgrad: {directory} (from {source}) lacks {', '.join(missing)}; it needs "
            f"{', '.join(names)}.")
    mode = getattr(ctypes, "RTLD_GLOBAL", 0)
    libs = []
    if sys.platform == "win32":
        os.add_dll_directory(str(directory))  # dependent DLLs resolve from here
    with _openblas_environment():  # libggml loads ggml's BLAS backend, which loads OpenBLAS
        for n in names:
            try:
                libs.append(ctypes.CDLL(str(directory / n), mode=mode))
            except OSError as e:
                raise GGMLLibraryError(f"ggmlgrad: could not load {directory / n}: {e}") from e
    ext = Path(names[0]).suffix
    core = set(names)
    backend_files = tuple(sorted(
        str(p) for p in directory.glob(f"*ggml-*{ext}")
        if p.name not in core and not p.name.startswith(("libggml-base", "ggml-base"))))
    info = LibraryInfo(str(directory), source, tuple(str(directory / n) for n in names), backend_files)
    return libs[0], libs[1], libs[2], info
