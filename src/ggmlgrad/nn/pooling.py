"""Pooling, padding and resampling layers with torch's constructor arguments and ``repr``:
MaxPool1d/2d, AvgPool1d/2d, AdaptiveAvgPool1d/2d, AdaptiveMaxPool1d/2d, ZeroPad1d/2d,
ConstantPad1d/2d, ReflectionPad1d/2d, ReplicationPad1d/2d, CircularPad1d/2d, Upsample,
PixelShuffle, PixelUnshuffle, Unflatten, Fold and Unfold.

>>> import ggmlgrad as gg
>>> gg.nn.MaxPool2d(2)
MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)
>>> gg.nn.MaxPool2d(2)(gg.ones(1, 3, 8, 8)).shape
(1, 3, 4, 4)
"""
from __future__ import annotations

import math

from ..tensor import Tensor
from . import conv_functional as CF
from .module import Module


class _MaxPoolNd(Module):
    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices: bool = False,
                 ceil_mode: bool = False) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if (stride is not None) else kernel_size
        self.padding, self.dilation = padding, dilation
        self.return_indices, self.ceil_mode = return_indices, ceil_mode

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class MaxPool2d(_MaxPoolNd):
    """``F.max_pool2d`` as a module (``return_indices=True``: (values, int32 indices))."""

    def forward(self, input: Tensor):
        return CF.max_pool2d(input, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode,
                             self.return_indices)


class MaxPool1d(_MaxPoolNd):
    """``F.max_pool1d`` as a module.

    >>> import ggmlgrad as gg
    >>> gg.nn.MaxPool1d(2)(gg.tensor([[[1.0, 3.0, 2.0, 0.0]]])).tolist()
    [[[3.0, 2.0]]]
    """

    def forward(self, input: Tensor):
        return CF.max_pool1d(input, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode,
                             self.return_indices)


class _AvgPoolNd(Module):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if (stride is not None) else kernel_size
        self.padding, self.ceil_mode, self.count_include_pad = padding, ceil_mode, count_include_pad

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool2d(_AvgPoolNd):
    """``F.avg_pool2d`` as a module.

    >>> import ggmlgrad as gg
    >>> gg.nn.AvgPool2d(2)
    AvgPool2d(kernel_size=2, stride=2, padding=0)
    """

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False, count_include_pad: bool = True,
                 divisor_override: int | None = None) -> None:
        super().__init__(kernel_size, stride, padding, ceil_mode, count_include_pad)
        self.divisor_override = divisor_override

    def forward(self, input: Tensor) -> Tensor:
        return CF.avg_pool2d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                             self.count_include_pad, self.divisor_override)


class AvgPool1d(_AvgPoolNd):
    """``F.avg_pool1d`` as a module.

    >>> import ggmlgrad as gg
    >>> gg.nn.AvgPool1d(2)(gg.tensor([[[1.0, 3.0, 2.0, 0.0]]])).tolist()
    [[[2.0, 1.0]]]
    """

    def forward(self, input: Tensor) -> Tensor:
        return CF.avg_pool1d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                             self.count_include_pad)

    def extra_repr(self) -> str:
        one = lambda v: (v,) if isinstance(v, int) else tuple(v)   # noqa: E731  (torch shows 1-tuples)
        return f"kernel_size={one(self.kernel_size)}, stride={one(self.stride)}, padding={one(self.padding)}"


class _Adaptive(Module):
    def __init__(self, output_size, return_indices: bool = False) -> None:
        super().__init__()
        self.output_size = output_size
        self.return_indices = return_indices

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveAvgPool2d(_Adaptive):
    """``F.adaptive_avg_pool2d`` as a module.

    >>> import ggmlgrad as gg
    >>> gg.nn.AdaptiveAvgPool2d((1, 1))(gg.ones(2, 3, 5, 7)).shape
    (2, 3, 1, 1)
    """

    def __init__(self, output_size) -> None:
        super().__init__(output_size)

    def forward(self, input: Tensor) -> Tensor:
        return CF.adaptive_avg_pool2d(input, self.output_size)


class AdaptiveAvgPool1d(_Adaptive):
    """``F.adaptive_avg_pool1d`` as a module."""

    def __init__(self, output_size) -> None:
        super().__init__(output_size)

    def forward(self, input: Tensor) -> Tensor:
        return CF.adaptive_avg_pool1d(input, self.output_size)


class AdaptiveMaxPool2d(_Adaptive):
    """``F.adaptive_max_pool2d`` as a module."""

    def forward(self, input: Tensor):
        return CF.adaptive_max_pool2d(input, self.output_size, self.return_indices)


class AdaptiveMaxPool1d(_Adaptive):
    """``F.adaptive_max_pool1d`` as a module."""

    def forward(self, input: Tensor):
        return CF.adaptive_max_pool1d(input, self.output_size, self.return_indices)


# ---------------------------------------------------------------- padding layers
class _PadNd(Module):
    _dims = 2
    _mode = "constant"

    def __init__(self, padding, value: float = 0.0) -> None:
        super().__init__()
        n = 2 * self._dims
        self.padding = CF._tuple(type(self).__name__, "padding", padding, n, -(2 ** 31))
        self.value = value

    def forward(self, input: Tensor) -> Tensor:
        if self._mode == "constant":
            return CF.pad(input, self.padding, "constant", self.value)
        return CF.pad(input, self.padding, self._mode)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class ZeroPad2d(_PadNd):
    """Zero padding (left, right, top, bottom), as ``torch.nn.ZeroPad2d``.

    >>> import ggmlgrad as gg
    >>> gg.nn.ZeroPad2d(1)(gg.ones(1, 1, 2, 2)).shape
    (1, 1, 4, 4)
    """


class ZeroPad1d(_PadNd):
    """Zero padding (left, right) of the last dimension."""
    _dims = 1


class ConstantPad2d(_PadNd):
    """Constant padding (left, right, top, bottom) with ``value``, as ``torch.nn.ConstantPad2d``."""

    def __init__(self, padding, value: float) -> None:
        super().__init__(padding, value)

    def extra_repr(self) -> str:
        return f"padding={self.padding}, value={self.value}"


class ConstantPad1d(ConstantPad2d):
    """Constant padding (left, right) of the last dimension with ``value``."""
    _dims = 1


class ReflectionPad2d(_PadNd):
    """Reflection padding (left, right, top, bottom), as ``torch.nn.ReflectionPad2d``."""
    _mode = "reflect"


class ReflectionPad1d(_PadNd):
    """Reflection padding (left, right) of the last dimension."""
    _dims, _mode = 1, "reflect"


class ReplicationPad2d(_PadNd):
    """Edge-replicating padding (left, right, top, bottom)."""
    _mode = "replicate"


class ReplicationPad1d(_PadNd):
    """Edge-replicating padding (left, right) of the last dimension."""
    _dims, _mode = 1, "replicate"


class CircularPad2d(_PadNd):
    """Circular padding (left, right, top, bottom)."""
    _mode = "circular"


class CircularPad1d(_PadNd):
    """Circular padding (left, right) of the last dimension."""
    _dims, _mode = 1, "circular"


# ---------------------------------------------------------------- resampling and reshaping layers
class Upsample(Module):
    """``F.interpolate`` as a module (nearest, linear, bilinear).

    >>> import ggmlgrad as gg
    >>> gg.nn.Upsample(scale_factor=2)
    Upsample(scale_factor=2.0, mode='nearest')
    """

    def __init__(self, size=None, scale_factor=None, mode: str = "nearest", align_corners: bool | None = None,
                 recompute_scale_factor: bool | None = None) -> None:
        super().__init__()
        self.size = size
        if isinstance(scale_factor, tuple):
            self.scale_factor = tuple(float(f) for f in scale_factor)
        else:
            self.scale_factor = float(scale_factor) if scale_factor is not None else None
        self.mode, self.align_corners, self.recompute_scale_factor = mode, align_corners, recompute_scale_factor

    def forward(self, input: Tensor) -> Tensor:
        return CF.interpolate(input, self.size, self.scale_factor, self.mode, self.align_corners,
                              recompute_scale_factor=self.recompute_scale_factor)

    def extra_repr(self) -> str:
        info = f"scale_factor={self.scale_factor!r}" if self.scale_factor is not None else f"size={self.size!r}"
        return info + f", mode={self.mode!r}"


class PixelShuffle(Module):
    """``F.pixel_shuffle`` as a module.

    >>> import ggmlgrad as gg
    >>> gg.nn.PixelShuffle(2)(gg.ones(1, 8, 3, 3)).shape
    (1, 2, 6, 6)
    """

    def __init__(self, upscale_factor: int) -> None:
        super().__init__()
        self.upscale_factor = upscale_factor

    def forward(self, input: Tensor) -> Tensor:
        return CF.pixel_shuffle(input, self.upscale_factor)

    def extra_repr(self) -> str:
        return f"upscale_factor={self.upscale_factor}"


class PixelUnshuffle(Module):
    """``F.pixel_unshuffle`` as a module."""

    def __init__(self, downscale_factor: int) -> None:
        super().__init__()
        self.downscale_factor = downscale_factor

    def forward(self, input: Tensor) -> Tensor:
        return CF.pixel_unshuffle(input, self.downscale_factor)

    def extra_repr(self) -> str:
        return f"downscale_factor={self.downscale_factor}"


class Unflatten(Module):
    """Expand dimension ``dim`` into ``unflattened_size`` (one entry may be -1), as ``torch.nn.Unflatten``.

    >>> import ggmlgrad as gg
    >>> gg.nn.Unflatten(1, (2, 3))(gg.ones(4, 6)).shape
    (4, 2, 3)
    """

    def __init__(self, dim: int, unflattened_size) -> None:
        super().__init__()
        if isinstance(dim, bool) or not isinstance(dim, int):
            raise TypeError(f"Unflatten: dim must be an int, got {dim!r}")
        sizes = tuple(unflattened_size) if isinstance(unflattened_size, (tuple, list)) else None
        if not sizes or any(isinstance(s, bool) or not isinstance(s, int) for s in sizes):
            raise TypeError(f"Unflatten: unflattened_size must be a tuple of ints, got {unflattened_size!r}")
        self.dim, self.unflattened_size = dim, sizes

    def forward(self, input: Tensor) -> Tensor:
        nd = input.ndim
        if not -nd <= self.dim < nd:
            raise IndexError(f"Unflatten: dim {self.dim} is out of range for an input of {nd} dimensions")
        d = self.dim % nd
        sizes = self.unflattened_size
        known = math.prod(s for s in sizes if s != -1)
        if sizes.count(-1) > 1 or (-1 not in sizes and known != input.shape[d]) or (
                -1 in sizes and (known == 0 or input.shape[d] % known)):
            raise ValueError(f"Unflatten: unflattened_size {sizes} does not match dimension {d} of size "
                             f"{input.shape[d]} (input {input.shape})")
        return input.reshape(tuple(input.shape[:d]) + sizes + tuple(input.shape[d + 1:]))

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"


class Unfold(Module):
    """``F.unfold`` as a module."""

    def __init__(self, kernel_size, dilation=1, padding=0, stride=1) -> None:
        super().__init__()
        self.kernel_size, self.dilation, self.padding, self.stride = kernel_size, dilation, padding, stride

    def forward(self, input: Tensor) -> Tensor:
        return CF.unfold(input, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, dilation={self.dilation}, padding={self.padding}, "
                f"stride={self.stride}")


class Fold(Module):
    """``F.fold`` as a module."""

    def __init__(self, output_size, kernel_size, dilation=1, padding=0, stride=1) -> None:
        super().__init__()
        self.output_size, self.kernel_size = output_size, kernel_size
        self.dilation, self.padding, self.stride = dilation, padding, stride

    def forward(self, input: Tensor) -> Tensor:
        return CF.fold(input, self.output_size, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self) -> str:
        return (f"output_size={self.output_size}, kernel_size={self.kernel_size}, dilation={self.dilation}, "
                f"padding={self.padding}, stride={self.stride}")
