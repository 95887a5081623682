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
from .engine.errors import DTypeError, IndexRangeError, ShapeError  # ValueError/TypeError/IndexError that are torch's classes too
from .runtime import Device, device, devices, get_device, set_device, set_num_threads, get_num_threads
from .runtime.budget import set_memory_limit
from .tensor import Tensor, enable_grad, is_grad_enabled, no_grad, set_grad_enabled, tensor
from .tensor.grad_mode import inference_mode
from .tensor.legacy import (BFloat16Tensor, BoolTensor, DoubleTensor, FloatTensor, HalfTensor, IntTensor, LongTensor,
                            empty, empty_like, get_default_dtype, set_default_dtype)
from .tensor import legacy as _legacy
from .tensor.printing import set_printoptions
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
from . import accelerator, autograd, backends, cuda, utils  # noqa: E402  (gg.autograd; torch's gg.cuda, gg.accelerator, gg.backends, gg.utils)
from . import distributed  # noqa: E402  (toolkit: gg.distributed; imports Ray only when used)
from . import linalg  # noqa: E402  (toolkit: gg.linalg)


def pending(t: Tensor) -> bool:
    """True while ``t``'s node is queued and not computed (graph mode)."""
    return t.is_pending


# gg.add, gg.cat, gg.max, gg.squeeze, ...: every front end that declares a "function" name
# (ops/decl.py: public), installed last so declarations in every layer are in.
from .tensor.surfaces import install_functions as _install_functions, install_methods as _install_methods  # noqa: E402
_install_methods(Tensor)
_install_functions(globals(), "function")
for _name in ("randn_like", "rand_like", "randint_like"):   # thin fallbacks where no op declaration gives them
    globals().setdefault(_name, getattr(_legacy, _name))

# torch's dtype names; last: `bool`, `float` and `int` shadow the builtins in this namespace only
from .engine.dtypes import bool_ as bool  # noqa: E402,A001
from .engine.dtypes import float32 as float, float16 as half, int32 as int  # noqa: E402,A001
