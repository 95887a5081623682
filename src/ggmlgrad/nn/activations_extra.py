"""Activation and dropout modules over ``functional_act``: ``PReLU`` (learnable), ``Mish``, ``Hardtanh``,
``ReLU6``, ``Hardswish``, ``Hardsigmoid``, ``LogSigmoid``, ``GLU``, ``Softsign``, ``Tanhshrink``,
``Dropout1d``, ``Dropout2d``, ``AlphaDropout``, with torch's constructor arguments and ``repr``.

>>> import ggmlgrad as gg
>>> gg.nn.Hardtanh(-2.0, 2.0)(gg.tensor([-3.0, 1.0, 3.0])).tolist()
[-2.0, 1.0, 2.0]
"""
from __future__ import annotations

from ..tensor import Tensor
from ..tensor.creation import full
from . import functional as F
from .layers import _float32_only, _positive_int
from .module import Module, Parameter


class PReLU(Module):
    """x where x > 0, else ``weight * x`` with a learnable ``weight`` of ``num_parameters`` values
    (1, or one per channel: axis 1 of the input), initialised to ``init``.

    >>> import ggmlgrad as gg
    >>> gg.nn.PReLU(3)
    PReLU(num_parameters=3)
    """

    def __init__(self, num_parameters: int = 1, init: float = 0.25, device=None, dtype=None) -> None:
        super().__init__()
        _float32_only("PReLU", dtype)
        self.num_parameters = _positive_int("PReLU", "num_parameters", num_parameters)
        self.init = float(init)
        self.weight = Parameter(full((self.num_parameters,), self.init, device=device))

    def reset_parameters(self) -> None:
        self.weight.data.fill_(self.init)

    def forward(self, input: Tensor) -> Tensor:
        return F.prelu(input, self.weight)

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"


class _Inplace(Module):
    """An activation with torch's ``inplace`` flag (True raises: ggmlgrad makes new tensors)."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = bool(inplace)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class Hardtanh(Module):
    """``F.hardtanh``: clamp to [min_val, max_val] (gradient 0 at the bounds, as torch).

    >>> import ggmlgrad as gg
    >>> gg.nn.Hardtanh()
    Hardtanh(min_val=-1.0, max_val=1.0)
    """

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False,
                 min_value: float | None = None, max_value: float | None = None) -> None:
        super().__init__()
        # min_value / max_value: torch's deprecated spellings, which win when given.
        self.min_val = float(min_value if min_value is not None else min_val)
        self.max_val = float(max_value if max_value is not None else max_val)
        self.inplace = bool(inplace)
        if self.max_val <= self.min_val:
            raise ValueError(f"Hardtanh: max_val ({self.max_val}) must be greater than min_val ({self.min_val})")

    def forward(self, input: Tensor) -> Tensor:
        return F.hardtanh(input, self.min_val, self.max_val, self.inplace)

    def extra_repr(self) -> str:
        return f"min_val={self.min_val}, max_val={self.max_val}" + (", inplace=True" if self.inplace else "")


class ReLU6(Hardtanh):
    """``F.relu6``: ``min(max(x, 0), 6)``.

    >>> import ggmlgrad as gg
    >>> gg.nn.ReLU6()(gg.tensor([7.0])).tolist()
    [6.0]
    """

    def __init__(self, inplace: bool = False) -> None:
        super().__init__(0.0, 6.0, inplace)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class Hardswish(_Inplace):
    """``F.hardswish``: ``x * relu6(x + 3) / 6``.

    >>> import ggmlgrad as gg
    >>> gg.nn.Hardswish()(gg.tensor([-4.0, 4.0])).tolist()
    [-0.0, 4.0]
    """

    def forward(self, input: Tensor) -> Tensor:
        return F.hardswish(input, self.inplace)


class Hardsigmoid(_Inplace):
    """``F.hardsigmoid``: ``relu6(x + 3) / 6``.

    >>> import ggmlgrad as gg
    >>> gg.nn.Hardsigmoid()(gg.tensor([0.0, 4.0])).tolist()
    [0.5, 1.0]
    """

    def forward(self, input: Tensor) -> Tensor:
        return F.hardsigmoid(input, self.inplace)


class Mish(_Inplace):
    """``F.mish``: ``x * tanh(softplus(x))``.

    >>> import ggmlgrad as gg
    >>> gg.nn.Mish()(gg.tensor([0.0])).tolist()
    [0.0]
    """

    def forward(self, input: Tensor) -> Tensor:
        return F.mish(input, self.inplace)


class LogSigmoid(Module):
    """``F.logsigmoid``: ``log(sigmoid(x))``.

    >>> import ggmlgrad as gg
    >>> round(gg.nn.LogSigmoid()(gg.tensor([0.0])).item(), 4)
    -0.6931
    """

    def forward(self, input: Tensor) -> Tensor:
        return F.logsigmoid(input)


class Softsign(Module):
    """``F.softsign``: ``x / (1 + |x|)``.

    >>> import ggmlgrad as gg
    >>> gg.nn.Softsign()(gg.tensor([1.0])).tolist()
    [0.5]
    """

    def forward(self, input: Tensor) -> Tensor:
        return F.softsign(input)


class Tanhshrink(Module):
    """``F.tanhshrink``: ``x - tanh(x)``.

    >>> import ggmlgrad as gg
    >>> gg.nn.Tanhshrink()(gg.tensor([0.0])).tolist()
    [0.0]
    """

    def forward(self, input: Tensor) -> Tensor:
        return F.tanhshrink(input)


class GLU(Module):
    """``F.glu``: the first half of ``dim`` times the sigmoid of the second.

    >>> import ggmlgrad as gg
    >>> gg.nn.GLU()
    GLU(dim=-1)
    """

    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input: Tensor) -> Tensor:
        return F.glu(input, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class _DropoutNd(Module):
    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p!r}")
        self.p = float(p)
        self.inplace = bool(inplace)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


class Dropout1d(_DropoutNd):
    """Zero whole channels of (N, C, L) / (C, L) in training (``F.dropout1d``).

    >>> import ggmlgrad as gg
    >>> gg.nn.Dropout1d(0.2)
    Dropout1d(p=0.2, inplace=False)
    """

    def forward(self, input: Tensor) -> Tensor:
        return F.dropout1d(input, self.p, self.training, self.inplace)


class Dropout2d(_DropoutNd):
    """Zero whole channels of (N, C, H, W) / (C, H, W) in training (``F.dropout2d``).

    >>> import ggmlgrad as gg
    >>> gg.nn.Dropout2d(0.5).eval()(gg.ones(1, 2, 2, 2)).sum().item()
    8.0
    """

    def forward(self, input: Tensor) -> Tensor:
        return F.dropout2d(input, self.p, self.training, self.inplace)


class AlphaDropout(_DropoutNd):
    """Dropout for SELU networks, keeping zero mean and unit variance (``F.alpha_dropout``).

    >>> import ggmlgrad as gg
    >>> gg.nn.AlphaDropout(0.2)
    AlphaDropout(p=0.2, inplace=False)
    """

    def forward(self, input: Tensor) -> Tensor:
        return F.alpha_dropout(input, self.p, self.training, self.inplace)

