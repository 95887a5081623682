"""Convolution layers: Conv1d, Conv2d, ConvTranspose1d, ConvTranspose2d, with torch's constructor
arguments, parameter names, weight layouts, initialisation and ``repr``, so a torch ``state_dict``
(e.g. saved as ``.safetensors``) loads into them.

>>> import ggmlgrad as gg
>>> conv = gg.nn.Conv2d(1, 4, 3, padding=1)
>>> conv
Conv2d(1, 4, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))
>>> conv(gg.ones(2, 1, 8, 8)).shape
(2, 4, 8, 8)
"""
from __future__ import annotations

import math

from ..tensor import Tensor
from ..tensor.creation import zeros
from . import conv_functional as CF
from . import init
from .layers import _float32_only
from .module import Module, Parameter

_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


def _ntuple(cls: str, key: str, v, n: int, minimum: int) -> tuple:
    return CF._tuple(cls, key, v, n, minimum)


class _ConvNd(Module):
    """What the convolution layers share: arguments, parameters, torch's init and repr."""

    _dims = 2
    _transposed = False

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
                 groups: int = 1, bias: bool = True, padding_mode: str = "zeros", output_padding=0,
                 device=None, dtype=None) -> None:
        super().__init__()
        cls, n = type(self).__name__, self._dims
        _float32_only(cls, dtype)
        for key, v in (("in_channels", in_channels), ("out_channels", out_channels), ("groups", groups)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{cls}: {key} must be a positive int, got {v!r}")
        if in_channels % groups:
            raise ValueError(f"{cls}: in_channels must be divisible by groups")
        if out_channels % groups:
            raise ValueError(f"{cls}: out_channels must be divisible by groups")
        if padding_mode not in _PADDING_MODES:
            raise ValueError(f"{cls}: padding_mode must be one of {_PADDING_MODES}, but got padding_mode="
                             f"'{padding_mode}'")
        if self._transposed and padding_mode != "zeros":
            raise ValueError(f'Only "zeros" padding mode is supported for {cls}')
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = _ntuple(cls, "kernel_size", kernel_size, n, 1)
        self.stride = _ntuple(cls, "stride", stride, n, 1)
        self.dilation = _ntuple(cls, "dilation", dilation, n, 1)
        self.output_padding = _ntuple(cls, "output_padding", output_padding, n, 0)
        if isinstance(padding, str):
            if self._transposed or padding not in ("same", "valid"):
                raise ValueError(f"{cls}: invalid padding string {padding!r}, should be one of {{'valid', 'same'}}")
            if padding == "same" and any(s != 1 for s in self.stride):
                raise ValueError(f"{cls}: padding='same' is not supported for strided convolutions")
            self.padding = padding
        else:
            self.padding = _ntuple(cls, "padding", padding, n, 0)
        self.padding_mode = padding_mode
        self.transposed = self._transposed
        shape = ((in_channels, out_channels // groups) if self._transposed
                 else (out_channels, in_channels // groups)) + self.kernel_size
        self.weight = Parameter(zeros(*shape, device=device))
        if bias:
            self.bias = Parameter(zeros(out_channels, device=device))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # torch's: kaiming_uniform_(a=sqrt(5)) = U(-1/sqrt(fan_in), 1/sqrt(fan_in)); the bias the same
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.weight.shape[1] * math.prod(self.kernel_size)
            bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
            init.uniform_(self.bias, -bound, bound)

    def _edge_padding(self) -> tuple:
        """F.pad's tuple (last dimension first) for a non-zeros padding_mode."""
        if self.padding == "valid":
            return (0, 0) * self._dims
        if self.padding == "same":
            left, right = CF.same_padding(type(self).__name__, self.kernel_size, self.dilation, self.stride)
        else:
            left = right = self.padding
        out = ()
        for i in reversed(range(self._dims)):
            out += (left[i], right[i])
        return out

    def _padded_input(self, input: Tensor):
        """(input, padding for the convolution): a non-zeros padding_mode pads first (F.pad)."""
        if self.padding_mode == "zeros":
            return input, self.padding
        return CF.pad(input, self._edge_padding(), mode=self.padding_mode), 0

    def extra_repr(self) -> str:
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0,) * self._dims:
            s += f", padding={self.padding}"
        if self.dilation != (1,) * self._dims:
            s += f", dilation={self.dilation}"
        if self.output_padding != (0,) * self._dims:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


class Conv2d(_ConvNd):
    """2-D convolution over (N, C, H, W), as ``torch.nn.Conv2d``: weight (out, in/groups, kH, kW).

    >>> import ggmlgrad as gg
    >>> gg.nn.Conv2d(4, 8, 3, groups=4, bias=False).weight.shape
    (8, 1, 3, 3)
    """

    def forward(self, input: Tensor) -> Tensor:
        x, padding = self._padded_input(input)
        return CF.conv2d(x, self.weight, self.bias, self.stride, padding, self.dilation, self.groups)


class Conv1d(_ConvNd):
    """1-D convolution over (N, C, L), as ``torch.nn.Conv1d``: weight (out, in/groups, k).

    >>> import ggmlgrad as gg
    >>> gg.nn.Conv1d(2, 3, 5, padding="same")(gg.ones(1, 2, 7)).shape
    (1, 3, 7)
    """

    _dims = 1

    def forward(self, input: Tensor) -> Tensor:
        x, padding = self._padded_input(input)
        return CF.conv1d(x, self.weight, self.bias, self.stride, padding, self.dilation, self.groups)


class _ConvTransposeNd(_ConvNd):
    _transposed = True

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, output_padding=0,
                 groups: int = 1, bias: bool = True, dilation=1, padding_mode: str = "zeros", device=None,
                 dtype=None) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, output_padding, device, dtype)

    def _output_padding(self, input: Tensor, output_size) -> tuple:
        """torch's output_size argument: the output_padding that gives that size."""
        if output_size is None:
            return self.output_padding
        n = self._dims
        size = tuple(output_size)[-n:]
        spatial = tuple(input.shape[-n:])
        extra = []
        for i in range(n):
            natural = ((spatial[i] - 1) * self.stride[i] - 2 * self.padding[i]
                       + self.dilation[i] * (self.kernel_size[i] - 1) + 1)
            extra.append(size[i] - natural)
            if not 0 <= extra[i] < max(self.stride[i], self.dilation[i]):
                raise ValueError(f"{type(self).__name__}: requested an output size of {size}, but valid sizes "
                                 f"differ from {natural} by less than the stride or dilation")
        return tuple(extra)


class ConvTranspose2d(_ConvTransposeNd):
    """Transposed 2-D convolution, as ``torch.nn.ConvTranspose2d``: weight (in, out/groups, kH, kW);
    ``forward(input, output_size=None)``.

    >>> import ggmlgrad as gg
    >>> gg.nn.ConvTranspose2d(2, 3, 3, stride=2, output_padding=1)(gg.ones(1, 2, 4, 4)).shape
    (1, 3, 10, 10)
    """

    def forward(self, input: Tensor, output_size=None) -> Tensor:
        return CF.conv_transpose2d(input, self.weight, self.bias, self.stride, self.padding,
                                   self._output_padding(input, output_size), self.groups, self.dilation)


class ConvTranspose1d(_ConvTransposeNd):
    """Transposed 1-D convolution, as ``torch.nn.ConvTranspose1d``: weight (in, out/groups, k).

    >>> import ggmlgrad as gg
    >>> gg.nn.ConvTranspose1d(2, 3, 3, stride=2)(gg.ones(1, 2, 4)).shape
    (1, 3, 9)
    """

    _dims = 1

    def forward(self, input: Tensor, output_size=None) -> Tensor:
        return CF.conv_transpose1d(input, self.weight, self.bias, self.stride, self.padding,
                                   self._output_padding(input, output_size), self.groups, self.dilation)
