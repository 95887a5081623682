"""``gg.info()``: what ggml is loaded and how graphs will run."""
from __future__ import annotations

from ._ggml import lib, library_info
from ._ggml.accel import STATUS as ACCEL_STATUS
from ._ggml.loader import openblas_core
from .ops import fast_math
from .runtime import devices, executor_for, get_device, get_num_threads
from .runtime.device import accelerator_names
from .runtime.threads import MAX_THREADS


def info() -> dict:
    """ggml version, library path, devices, accelerators, threads, which build is active, and
    whether ggmlgrad's vectorised activation kernels and its compiled executor accelerator are in use
    (``executor_accelerator``: "active: <file>", or why not: "not built: ...", "disabled: ...").

    >>> import ggmlgrad as gg
    >>> gg.info()["ggml_version"].startswith("0.20")
    True
    """
    accels = accelerator_names()
    ex = executor_for(get_device())
    return {
        "ggml_version": lib.version().decode(),
        "ggml_commit": lib.commit().decode(),
        "library_dir": library_info.directory,
        "library_source": library_info.source,
        "devices": [d.name for d in devices()],
        "accelerators": accels,
        "build": "fast (BLAS)" if any("blas" in a.lower() for a in accels) else "prebuilt (no BLAS)",
        "blas_kernels": openblas_core(),   # OpenBLAS's kernel set (e.g. SkylakeX: AVX-512), None without it
        "vector_kernels": fast_math.ACTIVE,   # exp/tanh/sigmoid/GELU at SIMD speed (the fast build's)
        "executor_accelerator": ACCEL_STATUS,  # the compiled op-plan run (python -m ggmlgrad build --accel)
        "scheduler_backends": ex.backend_names,
        "default_device": get_device().name,
        "threads": get_num_threads() or f"auto (1..{MAX_THREADS}, chosen per graph)",
    }
