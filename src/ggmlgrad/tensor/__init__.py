"""Layer 5: the user-facing Tensor and autograd."""
from ..ops.registry import register_dispatch
from . import tape
from .grad_mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from .tensor import Tensor, as_tensor, tensor
from . import functional, logical, shape_methods  # noqa: F401  (their front ends declare Tensor methods)
from . import shape_extra, einsum, scatter, random_ops  # noqa: F401,E402  (flip, tril, diagonal, mm, einsum, ...: issue 22)
from . import math_extra, reductions_extra, sorting  # noqa: F401  (issue 22: atan2, prod, norm, sort, ...)
from .surfaces import install_methods

register_dispatch(tape.apply)  # op.NAME(...) in backward rules records through autograd
install_methods(Tensor)  # operators, arithmetic, shape and view methods (ops/decl.py: public)
