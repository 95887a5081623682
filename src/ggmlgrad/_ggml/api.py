"""ctypes signatures for the ggml functions ggmlgrad calls.

Pointers travel as Python ints (``c_void_p``). Signatures are written as short
type codes so the table stays readable: p=pointer, i=int, l=int64, f=float,
z=size_t, b=bool, s=char*, v=void, P=struct ggml_init_params by value.
"""
from __future__ import annotations

import ctypes
from types import SimpleNamespace

import numpy as np

from .loader import GGMLLibraryError, LibraryInfo, load
from . import consts


class InitParams(ctypes.Structure):
    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p), ("no_alloc", ctypes.c_bool)]


class TensorStruct(ctypes.Structure):
    """Mirror of ``struct ggml_tensor`` (ggml 0.20): read shapes, write data pointers."""
    _fields_ = [
        ("type", ctypes.c_int),
        ("buffer", ctypes.c_void_p),
        ("ne", ctypes.c_int64 * 4),
        ("nb", ctypes.c_size_t * 4),
        ("op", ctypes.c_int),
        ("op_params", ctypes.c_int32 * 16),
        ("flags", ctypes.c_int32),
        ("src", ctypes.c_void_p * 10),
        ("view_src", ctypes.c_void_p),
        ("view_offs", ctypes.c_size_t),
        ("data", ctypes.c_void_p),
        ("name", ctypes.c_char * 64),
        ("extra", ctypes.c_void_p),
        ("padding", ctypes.c_char * 8),
    ]


_T = {"p": ctypes.c_void_p, "i": ctypes.c_int, "l": ctypes.c_int64, "f": ctypes.c_float,
      "z": ctypes.c_size_t, "b": ctypes.c_bool, "s": ctypes.c_char_p, "v": None, "P": InitParams}

# name: "RESULT:ARGS"
_BASE = {
    "ggml_version": "s:", "ggml_commit": "s:",
    "ggml_tensor_overhead": "z:", "ggml_graph_overhead_custom": "z:zb",
    "ggml_init": "p:P", "ggml_free": "v:p", "ggml_reset": "v:p", "ggml_used_mem": "z:p",
    "ggml_new_tensor": "p:piip", "ggml_new_tensor_1d": "p:pil", "ggml_new_tensor_2d": "p:pill",
    "ggml_new_tensor_3d": "p:pilll", "ggml_new_tensor_4d": "p:pillll",
    "ggml_set_name": "p:ps", "ggml_set_output": "v:p", "ggml_set_input": "v:p",
    "ggml_nbytes": "z:p", "ggml_nelements": "l:p", "ggml_type_size": "z:i", "ggml_is_contiguous": "b:p",
    "ggml_new_graph_custom": "p:pzb", "ggml_build_forward_expand": "v:pp", "ggml_graph_n_nodes": "i:p",
    "ggml_graph_node": "p:pi", "ggml_graph_clear": "v:p", "ggml_graph_reset": "v:p",
    "ggml_op_name": "s:i", "ggml_op_desc": "s:p",
    # unary and binary
    **{f"ggml_{n}": "p:pp" for n in (
        "dup", "sqr", "sqrt", "log", "exp", "abs", "neg", "sgn", "step", "tanh", "relu", "sigmoid",
        "gelu", "gelu_erf", "gelu_quick", "silu", "softplus", "elu", "expm1", "sin", "cos", "floor",
        "sum", "sum_rows", "mean", "argmax", "cont", "transpose", "soft_max", "cumsum")},
    **{f"ggml_{n}": "p:ppp" for n in (
        "add", "sub", "mul", "div", "mul_mat", "out_prod", "repeat", "repeat_back", "cpy",
        "get_rows", "silu_back", "count_equal", "reshape")},
    "ggml_leaky_relu": "p:ppfb", "ggml_scale": "p:ppf", "ggml_scale_bias": "p:ppff",
    "ggml_clamp": "p:ppff", "ggml_cast": "p:ppi", "ggml_concat": "p:pppi",
    "ggml_repeat_4d": "p:ppllll",
    "ggml_cont_4d": "p:ppllll",
    "ggml_reshape_1d": "p:ppl", "ggml_reshape_2d": "p:ppll", "ggml_reshape_3d": "p:pplll",
    "ggml_reshape_4d": "p:ppllll",
    "ggml_view_1d": "p:pplz", "ggml_view_2d": "p:ppllzz", "ggml_view_3d": "p:pplllzzz",
    "ggml_view_4d": "p:ppllllzzzz",
    "ggml_permute": "p:ppiiii", "ggml_get_rows_back": "p:pppp", "ggml_set_rows": "p:pppp",
    "ggml_acc": "p:pppzzzz", "ggml_set": "p:pppzzzz",
    "ggml_soft_max_ext": "p:pppff", "ggml_soft_max_ext_back": "p:pppff",
    "ggml_norm": "p:ppf", "ggml_rms_norm": "p:ppf",
    "ggml_mul_mat_set_prec": "v:pi", "ggml_flash_attn_ext_set_prec": "v:pi",
    "ggml_pool_1d": "p:ppiiii", "ggml_fill": "p:ppf", "ggml_arange": "p:pfff",
    "ggml_pad": "p:ppiiii", "ggml_diag_mask_inf": "p:ppi", "ggml_diag_mask_zero": "p:ppi",
    # convolution, pooling, padding (ops/conv.py, ops/pool.py)
    "ggml_im2col": "p:pppiiiiiibi", "ggml_im2col_back": "p:ppppiiiiiib", "ggml_pad_ext": "p:ppiiiiiiii",
    "ggml_conv_2d_direct": "p:pppiiiiii", "ggml_pool_2d": "p:ppiiiiiff", "ggml_pool_2d_back": "p:pppiiiiiff",
    "ggml_argsort": "p:ppi", "ggml_top_k": "p:ppi",
    "ggml_roll": "p:ppiiii", "ggml_tri": "p:ppi",
    **{f"ggml_{n}": "p:pp" for n in ("ceil", "round", "trunc")},   # ops/math_extra.py
    "ggml_flash_attn_ext": "p:pppppfff", "ggml_flash_attn_back": "p:ppppppb",
    "ggml_opt_step_adamw": "p:pppppp", "ggml_opt_step_sgd": "p:pppp", "ggml_set_param": "v:p",
    "ggml_cross_entropy_loss": "p:ppp", "ggml_cross_entropy_loss_back": "p:pppp",
    "ggml_log_set": "v:pp", "ggml_map_custom1": "p:pppip", "ggml_map_custom2": "p:ppppip",
    # backend core (lives in ggml-base)
    "ggml_backend_buft_alloc_buffer": "p:pz", "ggml_backend_buft_name": "s:p",
    "ggml_backend_buft_get_alignment": "z:p", "ggml_backend_buft_is_host": "b:p",
    "ggml_backend_buffer_free": "v:p", "ggml_backend_buffer_get_base": "p:p",
    "ggml_backend_buffer_get_size": "z:p", "ggml_backend_buffer_set_usage": "v:pi",
    "ggml_backend_buffer_clear": "v:pi", "ggml_backend_buffer_is_host": "b:p",
    "ggml_backend_tensor_alloc": "i:ppp", "ggml_backend_tensor_set": "v:ppzz",
    "ggml_backend_tensor_get": "v:ppzz", "ggml_backend_tensor_memset": "v:pizz",
    "ggml_backend_tensor_copy": "v:pp", "ggml_backend_view_init": "i:p",
    "ggml_backend_name": "s:p", "ggml_backend_free": "v:p", "ggml_backend_synchronize": "v:p",
    "ggml_backend_graph_compute": "i:pp", "ggml_backend_get_device": "p:p",
    "ggml_backend_supports_op": "b:pp",
    "ggml_backend_dev_name": "s:p", "ggml_backend_dev_description": "s:p",
    "ggml_backend_dev_type": "i:p", "ggml_backend_dev_init": "p:ps",
    "ggml_backend_dev_buffer_type": "p:p", "ggml_backend_dev_memory": "v:ppp",
    "ggml_backend_dev_backend_reg": "p:p", "ggml_backend_reg_name": "s:p",
    "ggml_backend_reg_get_proc_address": "p:ps",
    "ggml_backend_sched_new": "p:ppizbb", "ggml_backend_sched_free": "v:p",
    "ggml_backend_sched_reset": "v:p", "ggml_backend_sched_alloc_graph": "b:pp", "ggml_backend_sched_reserve": "b:pp",
    "ggml_backend_sched_graph_compute": "i:pp", "ggml_backend_sched_get_n_splits": "i:p",
    "ggml_backend_sched_get_tensor_backend": "p:pp", "ggml_backend_sched_synchronize": "v:p",
    "ggml_backend_cpu_buffer_type": "p:", "ggml_backend_cpu_buffer_from_ptr": "p:pz",
}
_REGISTRY = {
    "ggml_backend_dev_count": "z:", "ggml_backend_dev_get": "p:z",
    "ggml_backend_reg_count": "z:", "ggml_backend_reg_get": "p:z",
    "ggml_backend_load": "p:s", "ggml_backend_load_all_from_path": "v:s",
}
_CPU = {"ggml_backend_cpu_set_n_threads": "v:pi", "ggml_backend_cpu_init": "p:"}
_THREADPOOL_BASE = {"ggml_threadpool_params_init": "v:pi"}
_THREADPOOL_CPU = {"ggml_threadpool_new": "p:p", "ggml_threadpool_free": "v:p", "ggml_backend_cpu_set_threadpool": "v:pp"}
_CPU_FEATURES = {"ggml_cpu_has_avx512": "i:", "ggml_cpu_has_avx2": "i:", "ggml_cpu_has_avx": "i:"}
# Size-only graph allocation (a graph's need is measured before anything is allocated).
_GALLOCR = {"ggml_gallocr_new": "p:p", "ggml_gallocr_free": "v:p", "ggml_gallocr_reserve_n_size": "v:ppppp"}


def _declare(cdll: ctypes.CDLL, table: dict[str, str], ns: SimpleNamespace, optional: bool = False) -> None:
    for name, sig in table.items():
        res, args = sig.split(":")
        try:
            fn = getattr(cdll, name)
        except AttributeError:
            if optional:
                continue
            raise GGMLLibraryError(f"ggmlgrad: the loaded ggml lacks {name}; it needs ggml "
                                   f"{consts.SUPPORTED_VERSION_PREFIX}x") from None
        fn.restype = _T[res]
        fn.argtypes = [_T[c] for c in args]
        setattr(ns, name[5:] if name.startswith("ggml_") else name, fn)


def _build() -> tuple[SimpleNamespace, LibraryInfo]:
    base, cpu, reg, info = load()
    ns = SimpleNamespace()
    # Version first: a different ggml may have another struct layout, and reading it would crash.
    base.ggml_version.restype = ctypes.c_char_p
    version = base.ggml_version().decode()
    if not version.startswith(consts.SUPPORTED_VERSION_PREFIX):
        raise GGMLLibraryError(
            f"ggmlgrad: {info.directory} holds ggml {version}, but this ggmlgrad is written for ggml "
            f"{consts.SUPPORTED_VERSION_PREFIX}x (libggml-python==0.20.2.post1). Install that, or point "
            f"GGMLGRAD_GGML_LIB at a ggml {consts.SUPPORTED_VERSION_PREFIX}x build.")
    _declare(base, _BASE, ns)
    _declare(reg, _REGISTRY, ns)
    _declare(cpu, _CPU, ns)
    _declare(cpu, _CPU_FEATURES, ns, optional=True)
    _declare(base, _THREADPOOL_BASE, ns, optional=True)
    _declare(cpu, _THREADPOOL_CPU, ns, optional=True)
    _declare(base, _GALLOCR, ns, optional=True)
    ns.scale = _ieee_scale(ns.scale_bias)
    return ns, info


def _ieee_scale(scale_bias):
    """``lib.scale(ctx, x, s)``: ggml_scale_bias(x, s, -0.0) instead of ggml_scale. ggml_scale sets a
    +0.0 bias, which GPU backends' scale kernels add (Vulkan, CUDA: x * s + bias), turning every
    product of -0.0 (-2.0 * 0.0, -0.0 * s) into +0.0; adding -0.0 leaves every float as it is, so
    x * s keeps IEEE's (torch's) signed zeros on every device. The CPU kernel skips a zero bias
    (-0.0 == 0.0) and runs the plain product, as before."""
    def scale(ctx: int, x: int, s: float) -> int:
        return scale_bias(ctx, x, s, -0.0)
    return scale


lib, info = _build()


class _ThreadpoolParams(ctypes.Structure):
    """Mirror of ``struct ggml_threadpool_params`` (ggml 0.20, GGML_MAX_N_THREADS = 512)."""
    _fields_ = [("cpumask", ctypes.c_bool * 512), ("n_threads", ctypes.c_int), ("prio", ctypes.c_int),
                ("poll", ctypes.c_uint32), ("strict_cpu", ctypes.c_bool), ("paused", ctypes.c_bool),
                ("_spare", ctypes.c_char * 64)]   # room should a build's struct be larger: ggml fills it


def new_threadpool(n_threads: int) -> int:
    """A persistent ggml CPU threadpool of ``n_threads`` (0 when this ggml lacks the API). Its
    workers sleep between graphs instead of spinning (poll 0): on a small machine a spinning
    worker takes the core that Python, or another framework, needs."""
    if not hasattr(lib, "threadpool_new"):
        return 0
    params = _ThreadpoolParams()
    lib.threadpool_params_init(ctypes.addressof(params), n_threads)
    params.poll = 0
    return lib.threadpool_new(ctypes.addressof(params)) or 0


def _simd_floats() -> int:
    """float32 lanes of the widest vectors the loaded CPU backend was built for (4: SSE, NEON...)."""
    for name, lanes in (("cpu_has_avx512", 16), ("cpu_has_avx2", 8), ("cpu_has_avx", 8)):
        fn = getattr(lib, name, None)
        if fn is not None and fn():
            return lanes
    return 4


SIMD_FLOATS = _simd_floats()


def tensor_struct(ptr: int) -> TensorStruct:
    """A view of the ``ggml_tensor`` at ``ptr`` (no copy)."""
    return TensorStruct.from_address(ptr)


_DATA_OFFSET = TensorStruct.data.offset
_BUFFER_OFFSET = TensorStruct.buffer.offset


def write_ptr_field(tensor_ptr: int, field: str, value: int) -> None:
    """Overwrite ``tensor->data`` or ``tensor->buffer`` (capture rebinds leaves this way)."""
    off = _DATA_OFFSET if field == "data" else _BUFFER_OFFSET
    ctypes.c_void_p.from_address(tensor_ptr + off).value = value


def pointer_cells(tensor_ptr: int) -> tuple[ctypes.c_void_p, ctypes.c_void_p]:
    """Writable views of ``tensor->data`` and ``tensor->buffer``: ``cell.value = ptr`` rebinds the
    tensor at the cost of one attribute store (cached plans rebind their leaves on every call)."""
    return (ctypes.c_void_p.from_address(tensor_ptr + _DATA_OFFSET),
            ctypes.c_void_p.from_address(tensor_ptr + _BUFFER_OFFSET))


def view_source(tensor_ptr: int) -> tuple[int, int]:
    """``(view_src, view_offs)`` of a tensor; view_src is 0 for a tensor that owns its memory
    (ggml folds chains of views, so view_src is always the tensor that owns the memory)."""
    t = TensorStruct.from_address(tensor_ptr)
    return t.view_src or 0, t.view_offs


def node_type(tensor_ptr: int) -> int:
    """The ggml type (``GGML_TYPE_*``) of the tensor at ``tensor_ptr``."""
    return TensorStruct.from_address(tensor_ptr).type


def node_ne(tensor_ptr: int) -> tuple[int, int, int, int]:
    """The four ggml dimensions (innermost first) of the tensor at ``tensor_ptr``."""
    return tuple(TensorStruct.from_address(tensor_ptr).ne)


def node_nb(tensor_ptr: int) -> tuple[int, int, int, int]:
    """The four byte strides (innermost first) of the tensor at ``tensor_ptr``."""
    return tuple(TensorStruct.from_address(tensor_ptr).nb)


def node_is_view(tensor_ptr: int) -> bool:
    """Whether the tensor at ``tensor_ptr`` is a view of another tensor's memory."""
    return bool(TensorStruct.from_address(tensor_ptr).view_src)


def node_is_op_result(tensor_ptr: int) -> bool:
    """Whether the tensor at ``tensor_ptr`` is computed by an op (not a leaf, not a view)."""
    t = TensorStruct.from_address(tensor_ptr)
    return t.op != 0 and not t.view_src


def node_is_leaf(tensor_ptr: int) -> bool:
    """Whether the tensor at ``tensor_ptr`` is a leaf (GGML_OP_NONE: no op computes it)."""
    return TensorStruct.from_address(tensor_ptr).op == 0


def node_buffer(tensor_ptr: int) -> int:
    """The ggml backend buffer holding the memory of the tensor at ``tensor_ptr`` (its view
    source's for a view); 0 when it has no memory yet."""
    t = TensorStruct.from_address(tensor_ptr)
    if t.buffer:
        return t.buffer
    return TensorStruct.from_address(t.view_src).buffer or 0 if t.view_src else 0


def node_name(tensor_ptr: int) -> bytes:
    """The name field of the tensor at ``tensor_ptr`` (``ggml_set_name`` writes it)."""
    return TensorStruct.from_address(tensor_ptr).name


def node_src(tensor_ptr: int, i: int = 0) -> int:
    """The ``i``-th source node of the tensor at ``tensor_ptr`` (0 when there is none)."""
    return TensorStruct.from_address(tensor_ptr).src[i] or 0


def new_context(mem_size: int, no_alloc: bool = True) -> int:
    """A new ggml context of ``mem_size`` bytes (``no_alloc``: headers only, data lives in backend
    buffers); 0 when ggml cannot allocate it."""
    return lib.init(InitParams(mem_size, None, no_alloc))


def c_array_i64(values) -> ctypes.Array:
    return (ctypes.c_int64 * len(values))(*values)


def im2col_back(ctx: int, grad: int, kernel: int, image_ne, s0: int, s1: int, p0: int, p1: int, d0: int, d1: int,
                is_2d: bool = True) -> int:
    """ggml_im2col_back with the image's ``ne`` (4 ints) passed as the int64 array it takes. Its CPU
    kernel reads src[0] (``grad``) as the window gradient and src[1] (``kernel``, for its shape only)."""
    return lib.im2col_back(ctx, grad, kernel, c_array_i64(list(image_ne)), s0, s1, p0, p1, d0, d1, is_2d)


def c_array_ptr(values) -> ctypes.Array:
    return (ctypes.c_void_p * len(values))(*values)


def array_address(arr) -> int:
    """Address of a C-contiguous NumPy array's data (the one place host addresses are taken)."""
    return arr.ctypes.data


def host_bytes(addr: int, nbytes: int):
    """A writable NumPy uint8 view of ``nbytes`` of host memory at ``addr`` (the caller keeps
    the owner of that memory alive)."""
    return np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(addr))


def host_copy(dst: int, src: int, nbytes: int) -> None:
    """memmove between two host addresses."""
    ctypes.memmove(dst, src, nbytes)


def _find_memcmp():
    try:
        f = ctypes.CDLL(None).memcmp  # the C library already in the process (Linux, macOS)
    except (OSError, AttributeError, TypeError):
        return None
    f.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
    f.restype = ctypes.c_int
    return f


_memcmp = _find_memcmp()


def host_equal(a: int, b: int, nbytes: int) -> bool:
    """Whether ``nbytes`` at two host addresses are equal (memcmp: 2-5x faster than NumPy's
    comparison of the same bytes, which also allocates)."""
    if _memcmp is not None:
        return _memcmp(a, b, nbytes) == 0
    return bool(np.array_equal(host_bytes(a, nbytes), host_bytes(b, nbytes)))


class ScratchTensor:
    """One reusable 1-D I8 tensor header that is pointed at any device memory,
    so ggml_backend_tensor_set/get can move bytes for memory that has no tensor."""

    def __init__(self) -> None:
        self.ctx = lib.init(InitParams(lib.tensor_overhead() * 2, None, True))
        self.ptr = lib.new_tensor_1d(self.ctx, consts.TYPE_I8, 1)
        self.view = TensorStruct.from_address(self.ptr)

    def point(self, buffer: int, data: int, nbytes: int) -> int:
        v = self.view
        v.buffer = buffer
        v.data = data
        v.ne[0] = nbytes
        v.nb[1] = v.nb[2] = v.nb[3] = nbytes
        return self.ptr


_SET_THREADS_T = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int)


def backend_set_threads_fn(reg: int):
    """The registry's ``ggml_backend_set_n_threads`` entry point as a callable, or None."""
    addr = lib.backend_reg_get_proc_address(reg, b"ggml_backend_set_n_threads")
    return _SET_THREADS_T(addr) if addr else None


def backend_dev_memory(dev_ptr: int) -> tuple[int, int]:
    """(free, total) bytes of a backend device, as ggml reports them."""
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    lib.backend_dev_memory(dev_ptr, ctypes.addressof(free), ctypes.addressof(total))
    return free.value, total.value


def size_cell() -> tuple[ctypes.c_size_t, int]:
    """A size_t output cell and its address (``ggml_gallocr_reserve_n_size`` writes sizes there)."""
    cell = ctypes.c_size_t()
    return cell, ctypes.addressof(cell)


def pointer_array(values):
    """A C array of pointers (kept alive by the caller) and its address."""
    arr = (ctypes.c_void_p * len(values))(*values)
    return arr, ctypes.addressof(arr)


_TENSOR_SIZE = ctypes.sizeof(TensorStruct)


def init_leaf_header(ptr: int, ggml_type: int, ne, itemsize: int) -> None:
    """Reset the ``ggml_tensor`` at ``ptr`` to a fresh, unallocated contiguous leaf of ``ne``.

    Lets the runtime keep one tensor header per storage across graphs instead of creating a new
    one per graph; the caller then gives it memory with ``ggml_backend_tensor_alloc``.
    """
    ctypes.memset(ptr, 0, _TENSOR_SIZE)
    t = TensorStruct.from_address(ptr)
    t.type = ggml_type
    stride = itemsize
    for i in range(4):
        t.ne[i] = ne[i]
        t.nb[i] = stride
        stride *= ne[i]


def set_leaf_strides(ptr: int, nb) -> None:
    """Give the unallocated leaf at ``ptr`` the byte strides ``nb`` (ggml order, innermost first):
    a strided view of memory it will be allocated on, read through ``ggml_cont``."""
    t = TensorStruct.from_address(ptr)
    for i in range(4):
        t.nb[i] = nb[i]


def clear_param_flag(ptr: int) -> None:
    """Drop GGML_TENSOR_FLAG_PARAM (set only to satisfy an op builder's assertion)."""
    t = TensorStruct.from_address(ptr)
    t.flags &= ~4
