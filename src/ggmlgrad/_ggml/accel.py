"""The optional compiled accelerator of the executor's hot path (``_accel.c``, a CPython extension).

``python -m ggmlgrad build`` (or only this part: ``python -m ggmlgrad build --accel``) compiles
``_accel.c`` with the C compiler and the running Python's headers into :func:`accel_path`
(``<sys.prefix>/share/ggmlgrad/accel/``, beside the fast ggml build). When that file is present and
``GGMLGRAD_ACCEL`` is not ``0``, :data:`ACCEL` is the loaded module (``GGMLGRAD_ACCEL=<file>``
loads that file instead: one built elsewhere), else None and the pure-Python path runs
(``_ggml/nodes.py``'s :class:`~.nodes.PointerTable` and ctypes' call of ggml's compute).
:data:`STATUS` says which, and why (``gg.info()["executor_accelerator"]``).

What the module has: ``PointerTable`` (the Python table's twin: same methods, same stores) whose
``compute_planned`` is a cached plan's whole run in one call (the compute lock, the executor's
thread setting checked, an op plan's result memory chosen, the rebinding, ggml's scheduler compute
with the GIL released, the status check); ``ComputeLock`` (``threading.Lock``'s twin, taken by that
call without a Python call: the runtime's ``COMPUTE_LOCK`` when the module loads); ``graph_compute``
(ggml's compute without ctypes, for the other plans); ``graph_append`` (a graph-mode call plan's one
record appended to the queue, its result made, in one call: ``engine/graph_call_plans.py``; optional,
so a build without it still loads and that plan takes the Python path). It links against no ggml: the address of
``ggml_backend_sched_graph_compute`` and the offsets of ``ggml_tensor``'s fields come from the
library loaded here (:func:`activate`), so a ggml of one's own (``GGMLGRAD_GGML_LIB``) works too.

>>> from ggmlgrad._ggml import accel
>>> accel.STATUS.split(":")[0] in ("active", "disabled", "not built", "not loaded")
True
"""
from __future__ import annotations

import ctypes
import importlib.machinery
import importlib.util
import os
from pathlib import Path
from types import ModuleType

from .api import TensorStruct, lib
from .loader import accel_path

ABI = 5  # _accel.c's ACCEL_ABI: a library of another ABI is not used (rebuild it)
MODULE_NAME = "ggmlgrad._ggml._accel"
SOURCE = Path(__file__).with_name("_accel.c")
_NAMES = ("configure", "graph_compute", "planned_runs", "PointerTable", "ComputeLock", "POINTER_SIZE")


def disabled() -> bool:
    """Whether ``GGMLGRAD_ACCEL=0`` asks for the pure-Python path."""
    return os.environ.get("GGMLGRAD_ACCEL", "").strip() == "0"


def chosen_path() -> Path:
    """The accelerator file to load: ``GGMLGRAD_ACCEL`` when it names a file (one built elsewhere,
    e.g. by a test), else the build's :func:`accel_path`."""
    value = os.environ.get("GGMLGRAD_ACCEL", "").strip()
    return Path(value) if value not in ("", "0", "1") else accel_path()


def load_from(path: str | Path) -> ModuleType:
    """Load and check the accelerator at ``path`` (ImportError when it is not usable here); not
    activated: see :func:`activate`."""
    loader = importlib.machinery.ExtensionFileLoader(MODULE_NAME, str(path))
    spec = importlib.util.spec_from_file_location(MODULE_NAME, str(path), loader=loader)
    if spec is None:
        raise ImportError(f"ggmlgrad accelerator: cannot load {path}")
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    if getattr(mod, "ABI", None) != ABI:
        raise ImportError(f"ggmlgrad accelerator: {path} has ABI {getattr(mod, 'ABI', None)}, this ggmlgrad "
                          f"needs {ABI}; rebuild it with `python -m ggmlgrad build --accel`")
    missing = [n for n in _NAMES if not hasattr(mod, n)]
    if missing:
        raise ImportError(f"ggmlgrad accelerator: {path} lacks {', '.join(missing)}; rebuild it with "
                          "`python -m ggmlgrad build --accel`")
    if mod.POINTER_SIZE != ctypes.sizeof(ctypes.c_void_p):
        raise ImportError(f"ggmlgrad accelerator: {path} was built for {mod.POINTER_SIZE}-byte pointers")
    return mod


def activate(mod: ModuleType, storage: type, array: type, failed: type, spare_bytes: int,
             compute: int | None = None) -> None:
    """Point ``mod`` at the loaded ggml (its compute function, ``ggml_tensor``'s field offsets) and
    at the engine's ``storage`` class (new results' memory; its ``data``/``buffer`` slots are read
    directly), ``array`` class (an op input: its ``_storage`` slot), ``failed`` exception (a failure
    status) and ``spare_bytes`` (results up to this size are kept for reuse, as ``OpPlan.bind`` does).
    ``compute``: the address of another function of ggml_backend_sched_graph_compute's signature
    (a test's, reporting a failure status); default ggml's own."""
    if compute is None:
        compute = ctypes.cast(lib.backend_sched_graph_compute, ctypes.c_void_p).value
    mod.configure(compute, TensorStruct.data.offset, TensorStruct.buffer.offset, storage, failed, spare_bytes, array)


def _find() -> tuple[ModuleType | None, str]:
    if disabled():
        return None, "disabled: GGMLGRAD_ACCEL=0 (the pure-Python path)"
    path = chosen_path()
    if not path.exists():
        return None, f"not built: no {path} (`python -m ggmlgrad build --accel` builds it)"
    try:
        return load_from(path), f"active: {path}"
    except ImportError as e:
        return None, f"not loaded: {e}"


ACCEL, STATUS = _find()
