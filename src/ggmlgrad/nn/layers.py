"""Basic layers: Linear, Embedding, LayerNorm, Dropout, Flatten, Identity and activation modules (most
generated from the op declarations, see ``_activation_module``)."""
from __future__ import annotations

import math

import numpy as np

from ..engine import dtypes, float32
from ..tensor import Tensor
from ..tensor import no_grad
from ..tensor.bool_ops import as_float
from ..tensor.creation import generator, zeros
from ..ops import op
from ..ops.decl import public_parameters
from ..ops.registry import REGISTRY
from ..tensor.surfaces import compile_function
from . import functional as F
from . import init
from . import replay
from .module import Module, Parameter


def _float32_only(cls: str, dtype) -> None:
    """Parameters compute in float32; another dtype is refused rather than silently ignored."""
    if dtype is not None and dtypes.from_any(dtype) is not float32:
        raise NotImplementedError(f"{cls}: parameters are float32 (got dtype={dtype!r}); store a float16/bfloat16 "
                                  f"copy with gg.save if you need one")


def _positive_int(cls: str, name: str, v) -> int:
    """A positive Python or NumPy integer (torch accepts both), as an int."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v <= 0:
        raise ValueError(f"{cls}: {name} must be a positive int, got {v!r}")
    return int(v)


class Linear(Module):
    """``y = x @ weight.T + bias`` with weight (out_features, in_features), PyTorch's default init.

    >>> import ggmlgrad as gg
    >>> gg.nn.Linear(3, 2)
    Linear(in_features=3, out_features=2, bias=True)
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None) -> None:
        super().__init__()
        _float32_only("Linear", dtype)
        self.in_features = _positive_int("Linear", "in_features", in_features)
        self.out_features = _positive_int("Linear", "out_features", out_features)
        self.weight = Parameter(zeros(out_features, in_features, device=device))
        if bias:
            self.bias = Parameter(zeros(out_features, device=device))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # kaiming_uniform_(a=sqrt(5)) gives U(-1/sqrt(fan_in), 1/sqrt(fan_in)), as torch.nn.Linear.
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1.0 / math.sqrt(self.in_features)
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input: Tensor) -> Tensor:
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Identity(Module):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__()

    def forward(self, input: Tensor) -> Tensor:
        return input


class Flatten(Module):
    """Flatten axes ``start_dim``..``end_dim`` into one (default: all but the batch axis)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, input: Tensor) -> Tensor:
        nd = input.ndim
        s, e = self.start_dim % max(nd, 1), self.end_dim % max(nd, 1)
        if nd == 0 or s >= e:
            return input
        shape = tuple(input.shape[:s]) + (math.prod(input.shape[s:e + 1]),) + tuple(input.shape[e + 1:])
        return input.reshape(shape)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Embedding(Module):
    """A lookup table: ``weight[idx]``; weight ~ N(0, 1) as PyTorch; ``padding_idx`` row starts at 0
    and gets no gradient."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 device=None, dtype=None) -> None:
        super().__init__()
        _float32_only("Embedding", dtype)
        self.num_embeddings = _positive_int("Embedding", "num_embeddings", num_embeddings)
        self.embedding_dim = _positive_int("Embedding", "embedding_dim", embedding_dim)
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ValueError(f"Embedding: padding_idx {padding_idx} is out of range for {num_embeddings} rows")
            padding_idx %= num_embeddings
        self.padding_idx = padding_idx
        self.weight = Parameter(zeros(num_embeddings, embedding_dim, device=device))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        w = generator().standard_normal(self.weight.shape)
        if self.padding_idx is not None:
            w[self.padding_idx] = 0.0
        with no_grad():
            self.weight.copy_(w.astype("float32"))

    def forward(self, input) -> Tensor:
        out = F.embedding(input, self.weight)
        if self.padding_idx is not None and self.weight.requires_grad:
            # Rows looked up at padding_idx carry no gradient: multiply by a 0/1 keep-mask of the indices.
            keep = _not_padding(F._index(input), self.padding_idx)
            out = out * keep + (out * (-keep + 1.0)).detach()
        return out

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        return s + (f", padding_idx={self.padding_idx}" if self.padding_idx is not None else "")


def _not_padding(idx: Tensor, padding_idx: int) -> Tensor:
    """(..., 1) float: 1.0 where idx != padding_idx (a graph op on the int32 indices)."""
    keep = as_float(op.compare_scalar(idx, kind="ne", c=float(padding_idx)))   # bool → its float 0/1
    return keep.reshape(tuple(idx.shape) + (1,))


class LayerNorm(Module):
    """Normalise over the trailing ``normalized_shape`` axes; learnable weight (ones) and bias (zeros)."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 device=None, dtype=None) -> None:
        super().__init__()
        _float32_only("LayerNorm", dtype)
        ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        for s in ns:
            _positive_int("LayerNorm", "normalized_shape entries", s)
        self.normalized_shape = ns
        self.eps = float(eps)
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(zeros(*ns, device=device))
            init.ones_(self.weight)
            if bias:
                self.bias = Parameter(zeros(*ns, device=device))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, input: Tensor) -> Tensor:
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class Dropout(Module):
    """Zero elements with probability ``p`` during training (scaled by 1/(1-p)); identity in eval mode."""

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
            raise ValueError(f"Dropout: probability must be in [0, 1], got {p!r}")
        self.p = float(p)

    def forward(self, input: Tensor) -> Tensor:
        return F.dropout(input, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace=False"


# ---------------------------------------------------------------- activation modules
def _activation_module(opdef) -> type:
    """The module of an activation declared with ``module=`` (ops/decl.py): its constructor keeps the
    op's public arguments as attributes (shown by ``repr``), its forward is the ``F`` entry."""
    e = opdef.expose
    params = [p for p in public_parameters(opdef.forward, e.args) if p.kind is p.POSITIONAL_OR_KEYWORD]
    names = [p.name for p in params]
    defaults = {f"_default_{p.name}": p.default for p in params}
    init_source = (f"def __init__(self{''.join(f', {n}=_default_{n}' for n in names)}):\n"
                   f"    _Module.__init__(self)\n" + "".join(f"    self.{n} = {n}\n" for n in names))
    forward_source = f"def forward(self, input):\n    return _fn(input{''.join(f', self.{n}' for n in names)})\n"
    namespace = {"__module__": __name__, "__qualname__": e.module,
                 "__doc__": f"Module form of ``F.{e.functional}``. {e.doc}",
                 "__init__": compile_function(init_source, "__init__", {"_Module": Module, **defaults},
                                              f"module {e.module}.__init__"),
                 "forward": compile_function(forward_source, "forward", {"_fn": getattr(F, e.functional)},
                                             f"module {e.module}.forward")}
    if names:
        namespace["extra_repr"] = lambda self: ", ".join(f"{n}={getattr(self, n)!r}" for n in names)
    return type(e.module, (Module,), namespace)


# ReLU, Tanh, Sigmoid, SiLU, GELU, LeakyReLU, Softplus, ELU: generated from the op declarations.
_GENERATED = {d.expose.module: _activation_module(d) for d in REGISTRY.values()
              if d.expose is not None and d.expose.module}
globals().update(_GENERATED)


# Softmax and LogSoftmax keep ``dim=-1`` as their default (F.softmax's is None: the last axis too).
class Softmax(Module):
    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input: Tensor) -> Tensor:
        return F.softmax(input, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Module):
    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input: Tensor) -> Tensor:
        return F.log_softmax(input, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


_ = float32


# Pure forwards: an identical call replays its recorded records (nn/replay.py).
replay.register(Linear, Softmax, LogSoftmax, *_GENERATED.values())
