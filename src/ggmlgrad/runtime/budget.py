"""Memory checks before allocating: a tensor or a graph that cannot fit raises a clear MemoryError.

ggml cannot be left to find out: when its graph allocator fails to allocate a buffer, ggml 0.20
goes on to place the graph's tensors in the buffer it does not have and the process dies
(``ggml_gallocr_alloc_graph`` after a failed ``ggml_gallocr_reserve_n``). So:

- an op whose result alone is larger than the device's memory raises at its call
  (:func:`check_tensor`, called by the engine only for results of more than :data:`HUGE_NUMEL`
  elements, so an ordinary op pays one integer comparison);
- before a graph's intermediates are allocated, a size-only pass of ggml's own allocator measures
  what it would allocate (:func:`check_graph`); more than the device has free raises.

:func:`set_memory_limit` caps what ggmlgrad assumes a device has (tests, shared machines).
"""
from __future__ import annotations

import sys
import threading

from .._ggml import lib, size_cell
from .device import Device
from .memory import _POOL
from .placement import check_placement

_HUGE_DEFAULT = 1 << 26
HUGE_NUMEL = _HUGE_DEFAULT  # results with more elements are checked against the device's memory
_MAX_ITEMSIZE = 4           # a result of more than n bytes has more than n // 4 elements
_QUICK_BYTES = 32 << 20     # a graph needing less is not compared with free memory (no query)

_limit: int | None = None
_capacity: dict[int, int] = {}   # dev_ptr → total bytes (device memory, plus swap for host memory)
_pricers: dict[int, "_Pricer"] = {}  # dev_ptr → the size-only allocator of its buffer type
_lock = threading.Lock()


def set_memory_limit(nbytes: int | None) -> int | None:
    """Assume every device has at most ``nbytes`` of memory (None: what the device reports).
    Returns the previous limit.

    >>> from ggmlgrad.runtime.budget import set_memory_limit
    >>> previous = set_memory_limit(1 << 30)   # graphs needing more than 1 GiB raise MemoryError
    >>> _ = set_memory_limit(previous)
    """
    global _limit, HUGE_NUMEL
    if nbytes is not None and (not isinstance(nbytes, int) or isinstance(nbytes, bool) or nbytes <= 0):
        raise ValueError(f"set_memory_limit(): expected a positive number of bytes or None, got {nbytes!r}")
    previous, _limit = _limit, nbytes
    HUGE_NUMEL = _HUGE_DEFAULT if nbytes is None else min(_HUGE_DEFAULT, nbytes // _MAX_ITEMSIZE)
    return previous


def memory_limit() -> int | None:
    """The limit set by :func:`set_memory_limit`, or None."""
    return _limit


def fmt_bytes(n: int) -> str:
    """``n`` bytes for a message (``"40.0 GiB"``)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024
    return f"{n} B"


def _meminfo() -> dict[str, int]:
    """/proc/meminfo in bytes (Linux); empty elsewhere."""
    out: dict[str, int] = {}
    if not sys.platform.startswith("linux"):
        return out
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                key, _, rest = line.partition(":")
                parts = rest.split()
                if parts:
                    out[key] = int(parts[0]) * (1024 if len(parts) > 1 else 1)
    except (OSError, ValueError):
        return {}
    return out


def capacity(device: Device) -> int:
    """The most memory a tensor or graph could ever have on ``device`` (host memory counts swap)."""
    cap = _capacity.get(device.dev_ptr)
    if cap is None:
        free, total = device.memory()
        cap = total or free or (1 << 62)  # a device that reports nothing is not limited here
        if device.is_host:
            cap += _meminfo().get("SwapTotal", 0)
        _capacity[device.dev_ptr] = cap
    return cap if _limit is None else min(cap, _limit)


def available(device: Device) -> int:
    """Bytes a new allocation on ``device`` can get now (blocks cached by the pool count: they are
    freed on demand)."""
    free, _total = device.memory()
    if device.is_host:
        info = _meminfo()  # ggml reports all of the machine's memory as free on Linux
        if "MemAvailable" in info:
            free = min(free, info["MemAvailable"] + info.get("SwapFree", 0))
    free += _POOL.cached_bytes
    return free if _limit is None else min(free, _limit)


def check_tensor(device: Device, nbytes: int, what: str) -> None:
    """Raise MemoryError when ``nbytes`` (``what``, for the message) exceeds ``device``'s memory."""
    cap = capacity(device)
    if nbytes > cap:
        raise MemoryError(f"ggmlgrad: {what} needs {fmt_bytes(nbytes)}, more than the {fmt_bytes(cap)} of "
                          f"memory of device {device.name}; nothing was allocated")


class _Pricer:
    """A size-only ggml graph allocator for one buffer type (it never allocates)."""

    def __init__(self, buft: int):
        self.galloc = lib.gallocr_new(buft)
        self.cell, self.addr = size_cell()
        self.fn = lib.gallocr_reserve_n_size


def _pricer(device: Device) -> _Pricer | None:
    pricer = _pricers.get(device.dev_ptr)
    if pricer is None and hasattr(lib, "gallocr_reserve_n_size"):  # else a ggml without the API: no check
        with _lock:
            pricer = _pricers.get(device.dev_ptr) or _Pricer(device.buffer_type)
            if pricer.galloc:
                _pricers[device.dev_ptr] = pricer
    return pricer if pricer is not None and pricer.galloc else None


def graph_need(device: Device, graph: int) -> int:
    """Bytes ggml's allocator would allocate for ``graph``'s tensors that have no memory yet (the
    caller holds ``executor.COMPUTE_LOCK``, which also guards the allocator measuring it)."""
    pricer = _pricers.get(device.dev_ptr) or _pricer(device)
    if pricer is None:
        return 0
    pricer.fn(pricer.galloc, graph, None, None, pricer.addr)
    return pricer.cell.value


def check_graph(device: Device, graph: int, extra: int = 0, what: str = "the graph") -> None:
    """Raise MemoryError when ``graph``'s intermediates (plus ``extra`` bytes of host memory just
    allocated for its results, which the OS counts only once written) do not fit in ``device``'s
    free memory. Called before ggml allocates them, holding ``executor.COMPUTE_LOCK``. On a device
    that is not the host, first a RuntimeError when a node placed in its memory is an op it lacks
    (:func:`.placement.check_placement`: ggml would abort)."""
    check_placement(device, graph)
    need = graph_need(device, graph)
    if device.is_host:
        need += extra
    if need <= _QUICK_BYTES and (_limit is None or need <= _limit):
        return
    free = available(device)
    if need > free:
        raise MemoryError(f"ggmlgrad: {what} needs {fmt_bytes(need)} of memory for its intermediate results, "
                          f"more than the {fmt_bytes(free)} available on device {device.name}; nothing was "
                          f"computed")
    if need > free - _POOL.cached_bytes:
        _POOL.trim(0)  # the pool's cached blocks are what makes it fit: give them back first
