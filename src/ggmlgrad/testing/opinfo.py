"""OpInfo: how the test-suite exercises each registered op.

Each entry names the registry ops it covers, a call on ggmlgrad tensors, an
independent NumPy float64 reference, and sample inputs. ``tests/test_ops.py``
iterates over ``all_opinfos()``: forward values against the reference and
gradients against central finite differences of the reference (float64), and
checks that every op in the registry is covered.

Add entries in the ``opinfo_*.py`` module of your area; they are collected here.
"""
from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from typing import Any, Callable

import numpy as np


@dataclasses.dataclass
class Sample:
    args: tuple                         # NumPy arrays (float → float32 tensors, int → int32) or Python values
    kwargs: dict = dataclasses.field(default_factory=dict)
    nondiff: tuple = ()                 # indices of array args not to differentiate (indices, masks)
    tensor_args: tuple | None = None    # indices of args to wrap as tensors (default: every ndarray)

    def __post_init__(self):
        # NumPy scalars from 0-d arithmetic are still arrays for our purposes.
        self.args = tuple(np.asarray(a) if isinstance(a, np.generic) else a for a in self.args)


@dataclasses.dataclass
class OpInfo:
    name: str                                   # test id
    covers: tuple                               # registry op names this entry exercises
    fn: Callable[..., Any]                      # (*tensors_or_values, **kwargs) -> Tensor
    ref: Callable[..., np.ndarray]              # (*float64 arrays_or_values, **kwargs) -> ndarray
    samples: Callable[[np.random.Generator], list]
    grad: bool = True
    atol: float = 1e-5
    rtol: float = 1e-4
    grad_atol: float = 1e-3
    grad_rtol: float = 1e-2
    fd_eps: float = 1e-6
    capturable: bool = True                     # False: the call reads or uploads host data, so gg.capture refuses it


OPINFOS: list[OpInfo] = []
# Registry ops exercised only inside other ops' forward/backward (each names where it is covered).
INTERNAL_OPS: dict[str, str] = {}


def register(*infos: OpInfo) -> None:
    OPINFOS.extend(infos)


def all_opinfos() -> list[OpInfo]:
    from . import __path__ as pkg_path
    for m in pkgutil.iter_modules(pkg_path):
        if m.name.startswith("opinfo_"):
            importlib.import_module(f"{__package__}.{m.name}")
    return OPINFOS


def rand_shapes_binary(rng: np.random.Generator) -> list[tuple[tuple, tuple]]:
    """Shape pairs covering equal shapes, broadcasting both ways, size-1 and 0-d."""
    return [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((3, 1), (1, 5)), ((), (2, 3)), ((1,), (3,)),
            ((2, 1, 3), (4, 1)), ((5,), ()), ((3, 4), ()), ((2, 3, 4), (1, 1, 1))]
