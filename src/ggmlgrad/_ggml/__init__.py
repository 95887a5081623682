"""Layer 1: the ggml binding. The only package that imports ``ctypes``.

Everything above this layer sees plain Python ints for pointers and the
function table ``lib`` whose signatures are declared in :mod:`.api`.
"""
from .loader import GGMLLibraryError, LibraryInfo, load
from .api import lib, info as library_info, init_leaf_header, set_leaf_strides, clear_param_flag, backend_dev_memory, size_cell, backend_set_threads_fn, pointer_array, host_copy, ScratchTensor, TensorStruct, tensor_struct, InitParams, c_array_i64, c_array_ptr, array_address, write_ptr_field, node_type, node_ne, node_nb, node_is_view, node_is_op_result, node_is_leaf, node_buffer, node_name, node_src, new_context, pointer_cells, view_source, host_bytes, host_equal, SIMD_FLOATS, new_threadpool
from . import consts

__all__ = [
    "GGMLLibraryError", "LibraryInfo", "load", "lib", "init_leaf_header", "set_leaf_strides", "clear_param_flag", "backend_set_threads_fn", "pointer_array", "host_copy", "ScratchTensor", "library_info", "TensorStruct",
    "tensor_struct", "consts", "InitParams", "c_array_i64", "c_array_ptr", "array_address",
    "node_type", "node_ne", "node_nb", "node_is_view", "node_is_op_result", "node_is_leaf", "node_buffer", "node_name", "node_src", "new_context",
    "write_ptr_field", "backend_dev_memory", "size_cell", "pointer_cells", "view_source", "host_bytes", "host_equal", "SIMD_FLOATS", "new_threadpool",
]
