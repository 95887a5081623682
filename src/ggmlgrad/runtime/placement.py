"""Which backend runs a node, where a result lives outside the host (GPU backends lacking an op).

ggml's scheduler runs an op a GPU backend lacks on the CPU, but only for a node with no memory
yet: a node already placed in a device buffer (ggmlgrad allocates every op's result there before
the compute) must run on a backend that can use that buffer, and ggml aborts the process
(``pre-allocated tensor ... in a buffer (Vulkan0) that cannot run the operation (IM2COL_BACK)``)
when none can. So, on a device that is not the host:

- :func:`device_result`: an op builder's result node that the device cannot compute gets a
  contiguous copy (``ggml_cont``), which the device can: the copy is what is allocated, the op
  itself runs on the CPU as an ordinary intermediate and the scheduler moves its bytes;
- :func:`check_placement`: before a graph is allocated, every node already in device memory must
  be one the device can compute; otherwise a RuntimeError names the op and the device (an
  in-place write the device lacks, say), instead of ggml's abort.

On the CPU (and any host device) neither does anything: every op there has a CPU kernel.
Mesa 22.3's lavapipe (Debian 12's software Vulkan driver) also needs its Vulkan buffers kept for
the life of the process (:func:`free_sched`, :func:`free_buffer`): ggml-vulkan writes only the
descriptors a kernel uses into descriptor sets it reuses (12 bindings each), and lavapipe binds
all 12 when it runs a dispatch, reading the buffer objects behind stale descriptors. Once such a
buffer was destroyed (a scheduler freed with its plan or capture, a compute buffer outgrown), that
is a use after free in lavapipe's queue thread (valgrind), seen as heap corruption or a segfault
many graphs later. Per the Vulkan spec unused descriptors may refer to destroyed buffers, so this
is the driver's bug; on other devices buffers are freed as usual.
"""
from __future__ import annotations

from .._ggml import consts, lib, new_context, node_buffer, node_is_leaf, node_is_view
from .device import Device, devices

_KEEP_BUFFERS: set[int] = set()   # dev_ptrs (lavapipe) whose buffers are never given back
_KEPT: list[int] = []              # schedulers and buffers kept alive on those devices


def _unsupported(device: Device, node: int) -> bool:
    return not node_is_leaf(node) and not lib.backend_supports_op(device.backend, node)


def device_result(ctx: int, node: int, device: Device) -> int:
    """``node``, or (on a device that is not the host and cannot compute ``node``'s op) a contiguous
    copy of it in ``ctx`` that the device can compute, so that the result can live in device
    memory while the op itself falls back to the CPU."""
    if device.is_host or not node or not _unsupported(device, node):
        return node
    if node_is_view(node):   # a view of an unsupported node: its memory is the other node's (never allocated here)
        return node
    copy = lib.cont(ctx, node)
    return copy if not _unsupported(device, copy) else node   # check_placement names it then


def op_name(node: int) -> str:
    """ggml's name of ``node``'s op (``IM2COL_BACK``)."""
    return (lib.op_desc(node) or b"?").decode()


def check_placement(device: Device, graph: int) -> None:
    """RuntimeError, naming the op and the device, when a node of ``graph`` already placed in the
    memory of ``device`` (not the host) is an op that device cannot compute; ggml would abort."""
    if device.is_host:
        return
    for i in range(lib.graph_n_nodes(graph)):
        node = lib.graph_node(graph, i)
        buffer = node_buffer(node)
        if buffer and not lib.backend_buffer_is_host(buffer) and _unsupported(device, node):
            raise RuntimeError(f"ggmlgrad: the {device.name} backend cannot compute ggml op {op_name(node)} "
                               f"(node {i} of the graph) and its result is placed in {device.name} memory; "
                               f"run this operation on the CPU (.to('cpu')) or build ggml with a backend "
                               f"that has it")


def is_software_vulkan(device: Device) -> bool:
    """Whether ``device`` is Mesa's software Vulkan driver (lavapipe, which names itself llvmpipe)."""
    return device.kind == "vulkan" and "llvmpipe" in (device.description or "").lower()


def reserve_compute_buffer(sched: int, nbytes: int) -> None:
    """Make ``sched`` allocate its device compute buffer of about ``nbytes`` now (ggml keeps it and
    only grows it), by reserving a one-node graph that needs that much (nothing is computed).

    Why, on lavapipe only: when ggml's graph allocator outgrows a compute buffer it frees it and
    allocates a bigger one (after synchronizing the backends, as Vulkan requires); Mesa 22.3's
    lavapipe then reads the freed buffer's resource again from its queue thread (valgrind: reads of
    a block ggml_vk_create_buffer allocated from ggml_gallocr_reserve_n and lavapipe's queue thread
    freed), which corrupted the heap a few ops later. Growing the shared scheduler's buffer up front
    stops that churn for every graph that fits."""
    n = max(nbytes // 8, 1)      # a leaf and its scaled copy: two float32 tensors of nbytes / 2
    ctx = new_context(lib.tensor_overhead() * 4 + lib.graph_overhead_custom(8, False) + 1024)
    if not ctx:
        raise MemoryError("ggmlgrad: ggml_init failed for a reservation graph")
    try:
        leaf = lib.new_tensor_1d(ctx, consts.TYPE_F32, n)
        graph = lib.new_graph_custom(ctx, 8, False)
        lib.build_forward_expand(graph, lib.scale(ctx, leaf, 1.0))
        lib.backend_sched_reserve(sched, graph)
    finally:
        lib.free(ctx)


_KEEP_BUFFERS.update(d.dev_ptr for d in devices() if is_software_vulkan(d))


def free_sched(sched: int, device: Device) -> None:
    """``ggml_backend_sched_free``, except on lavapipe, whose compute buffers must outlive the
    process (see the module docstring): there the scheduler is kept (its memory stays in use)."""
    if device.dev_ptr in _KEEP_BUFFERS:
        _KEPT.append(sched)
    else:
        lib.backend_sched_free(sched)


def free_buffer(dev_ptr: int, buf: int) -> None:
    """``ggml_backend_buffer_free``, except on lavapipe (kept: see the module docstring)."""
    if dev_ptr in _KEEP_BUFFERS:
        _KEPT.append(buf)
    else:
        lib.backend_buffer_free(buf)


def addressable_in_place(storage) -> bool:
    """Whether a kernel that writes in place can address ``storage`` (a tensor's memory, maybe a view's
    region of another storage): on a device that is not the host, ggml-vulkan's fused optimizer
    kernels (``opt_step_adamw``) assert that a tensor starts at a multiple of the device's buffer
    offset alignment (16 bytes on lavapipe); a row view such as ``w[1]`` of a (2, 3) float32 tensor
    starts 12 bytes in. On the host every offset is addressable."""
    device = storage.device
    return device.is_host or getattr(storage, "offset", 0) % device.alignment == 0
