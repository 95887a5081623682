"""ggmlgrad: PyTorch-style autograd and neural networks on ggml, with graph mode and capture.

>>> import ggmlgrad as gg
>>> x = gg.tensor([1.0, 2.0, 3.0], requires_grad=True)
>>> y = (x * x).sum()
>>> y.backward()
>>> x.grad.tolist()
[2.0, 4.0, 6.0]
"""
from __future__ import annotations

__version__ = "0.1.0"

from .engine import (CaptureError, GraphError, GraphMemoryError, PendingError, bfloat16, counters, float16, float32, graph_mode,
                     int32, local_mode, matmul_precision, queue_length, reset_counters)
from .engine import DType as dtype  # noqa: N813  (torch-style `gg.dtype`)
from .runtime import Device, devices, get_device, set_device, set_num_threads, get_num_threads
from .runtime.budget import set_memory_limit
from .tensor import Tensor, enable_grad, is_grad_enabled, no_grad, set_grad_enabled, tensor
from .tensor.interop import as_tensor, from_dlpack, from_numpy
from .tensor.mask_index import argwhere, masked_select, nonzero
from .tensor.bool_ops import isfinite, isinf, isnan, logical_and, logical_not, logical_or, logical_xor
from .tensor.generator import Generator
from .tensor.creation import (arange, eye, full, full_like, linspace, manual_seed, ones, ones_like, rand, randint,
                              randn, zeros, zeros_like)
from .tensor.functional import *  # noqa: F401,F403  (the ops' generated function forms, dtype names)
from .info import info
from . import data  # noqa: E402  (toolkit: gg.data)
from .io import save, load  # noqa: E402  (toolkit: gg.save / gg.load)
from . import optim  # noqa: E402  (toolkit: gg.optim)
from .capture import Buffer, capture, capture_step
from .tensor.gradcheck import GradcheckError, gradcheck
from . import distributions, nn  # noqa: E402  (toolkit: gg.nn, gg.distributions)
from . import autograd, utils  # noqa: E402  (toolkit: gg.autograd, gg.utils.checkpoint)
from . import linalg  # noqa: E402  (toolkit: gg.linalg)


def pending(t: Tensor) -> bool:
    """True while ``t``'s node is queued and not computed (graph mode)."""
    return t.is_pending


# gg.add, gg.cat, gg.max, gg.squeeze, ...: every front end that declares a "function" name
# (ops/decl.py: public), installed last so declarations in every layer are in.
from .tensor.surfaces import install_functions as _install_functions, install_methods as _install_methods  # noqa: E402
_install_methods(Tensor)
_install_functions(globals(), "function")

from .engine.dtypes import bool_ as bool  # noqa: E402,A001  (torch's name; last: it shadows the builtin here)
