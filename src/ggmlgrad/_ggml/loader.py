"""Finding and loading the ggml shared libraries.

Search order: the directory in ``GGMLGRAD_GGML_LIB`` (a user's own ggml built
with CUDA/Vulkan/Metal), then the fast build that ``python -m ggmlgrad build``
left in this environment (unless ``GGMLGRAD_BUILD=prebuilt``), then the
``libggml-python`` wheel (``lib64/*.so`` on Linux, ``lib/*.dylib`` on macOS,
``bin/*.dll`` on Windows).
"""
from __future__ import annotations

import ctypes
import dataclasses
import importlib.util
import os
import sys
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


def find_library_dir() -> tuple[Path, str]:
    override = os.environ.get("GGMLGRAD_GGML_LIB")
    if override:
        return Path(override), "GGMLGRAD_GGML_LIB"
    fast = fast_build_dir()
    if os.environ.get("GGMLGRAD_BUILD", "").strip().lower() != "prebuilt" and (fast / FAST_STAMP).exists():
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
