"""OpInfo: how the test-suite exercises each registered op.

Each entry names the registry ops it covers, a call on ggmlgrad tensors, an
independent NumPy float64 reference, sample inputs, optional NaN/±inf samples
(forward only) and optional error inputs. ``tests/test_ops.py`` iterates over
``all_opinfos()``: forward values against the reference and gradients against
central finite differences of the reference (float64), in eager mode, graph
mode and inside ``gg.capture``, and checks that every op in the registry is
covered. ``tests/test_ops_errors.py`` runs every error input in the three modes
(in a subprocess: a ggml abort must fail the test, not kill pytest).

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
class ErrorInput:
    """A bad call: its arguments, the exception it must raise in every mode before anything
    reaches ggml, and a fragment its message must contain (the op's name, at least)."""
    sample: Sample
    error: type | tuple
    match: str
    fn: Callable[..., Any] | None = None        # the call, when not the entry's own (other params)


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
    nonfinite: Callable[[np.random.Generator], list] | None = None        # NaN/±inf samples: forward only
    error_inputs: tuple = ()                                              # ErrorInput, ...
    # The same call on torch tensors (same arguments, torch for gg): tests/test_torch_parity_math.py
    # checks the result dtype (torch's int64 → int32, float64 → float32) and values on every sample.
    torch_fn: Callable[..., Any] | None = None
    fuzz: bool = True                           # False: dtype- or value-specific samples, not fuzzed automatically


OPINFOS: list[OpInfo] = []
# Registry ops exercised only inside other ops' forward/backward (each names where it is covered).
INTERNAL_OPS: dict[str, str] = {}


def register(*infos: OpInfo) -> None:
    OPINFOS.extend(infos)


def all_opinfos() -> list[OpInfo]:
    """Every entry, with each entry's NaN/±inf samples as an entry of their own (``<name>_nonfinite``,
    forward only, NumPy's invalid-value warnings silenced)."""
    from . import __path__ as pkg_path
    for m in pkgutil.iter_modules(pkg_path):
        if m.name.startswith("opinfo_"):
            importlib.import_module(f"{__package__}.{m.name}")
    out = []
    for info in OPINFOS:
        out.append(info)
        if info.nonfinite is not None:
            out.append(dataclasses.replace(info, name=f"{info.name}_nonfinite", ref=quiet(info.ref),
                                           samples=info.nonfinite, nonfinite=None, error_inputs=(),
                                           grad=False, atol=min(info.atol, 1e-6), rtol=min(info.rtol, 1e-5)))
    return out


def quiet(ref: Callable) -> Callable:
    """A NumPy reference with the invalid/overflow warnings of NaN/inf arithmetic silenced."""
    def run(*a, **k):
        with np.errstate(all="ignore"):
            return ref(*a, **k)
    return run


def bad(error: type | tuple, match: str, *args, fn: Callable | None = None, **kwargs) -> ErrorInput:
    """An error input: ``fn`` (default: the entry's own call) on ``args``/``kwargs`` raises ``error``
    with ``match`` in its message. Arrays become tensors (int → int32, float16 stays float16)."""
    return ErrorInput(Sample(args, kwargs), error, match, fn)


def errors(name: str, *inputs: ErrorInput) -> None:
    """Give the registered entry ``name`` its error inputs (for tables whose rows are one-liners)."""
    info = next((i for i in OPINFOS if i.name == name), None)
    if info is None:
        raise KeyError(f"errors: no OpInfo entry named {name!r}")
    info.error_inputs = tuple(info.error_inputs) + inputs


def error_cases() -> list[tuple[OpInfo, ErrorInput]]:
    """(entry, error input) for every error input of every entry."""
    return [(info, e) for info in all_opinfos() for e in info.error_inputs]


def numeric_grad(ref: Callable, args: list, i: int, weight, eps: float = 1e-6) -> np.ndarray:
    """d sum(ref(*args) * weight) / d args[i] by central differences in float64 (the gradient
    reference of the op tables and the functional tests).

    >>> round(float(numeric_grad(lambda x: x * x, [np.array([3.0])], 0, 1.0)[0]), 6)
    6.0
    """
    x = np.array(args[i], dtype=np.float64)
    grad = np.zeros_like(x)
    flat, gflat = x.reshape(-1), grad.reshape(-1)
    for k in range(flat.size):
        orig = flat[k]
        vals = []
        for d in (eps, -eps):
            flat[k] = orig + d
            a = list(args)
            a[i] = x
            vals.append(np.sum(np.asarray(ref(*a)) * weight))
        flat[k] = orig
        gflat[k] = (vals[0] - vals[1]) / (2 * eps)
    return grad


def tensor_indices(sample: Sample) -> tuple:
    """Which of the sample's arguments become tensors (default: every ndarray)."""
    if sample.tensor_args is not None:
        return sample.tensor_args
    return tuple(i for i, a in enumerate(sample.args) if isinstance(a, np.ndarray))


def input_arrays(sample: Sample) -> list[np.ndarray]:
    """The sample's tensor arguments as the arrays a tensor is made from (int → int32, float16 stays,
    other floats float32)."""
    arrays = [np.asarray(sample.args[i]) for i in tensor_indices(sample)]
    return [a.astype(np.int32) if a.dtype.kind in "iub" else a if a.dtype == np.float16 else a.astype(np.float32)
            for a in arrays]


def with_tensors(sample: Sample, tensors) -> list:
    """The sample's arguments with its tensor arguments replaced by ``tensors``, in order."""
    args = list(sample.args)
    for i, t in zip(tensor_indices(sample), tensors):
        args[i] = t
    return args


def sample_tensors(sample: Sample, arrays: list, requires_grad: bool = False) -> list:
    """Tensors of ``arrays`` (the sample's :func:`input_arrays`): int arrays as int32; with
    ``requires_grad`` the float ones the sample differentiates require grad."""
    import ggmlgrad as gg
    tensors = []
    for i, a in zip(tensor_indices(sample), arrays):
        t = gg.tensor(a, dtype=gg.int32) if a.dtype.kind == "i" else gg.tensor(a)
        if requires_grad and t.dtype.is_float and i not in sample.nondiff:
            t.requires_grad_(True)
        tensors.append(t)
    return tensors


def run_error_input(info: OpInfo, e: ErrorInput, mode: str) -> str:
    """Call ``info.fn`` on the error input in ``mode`` ("eager", "graph" or "capture"): "ok" when it
    raises ``e.error`` with ``e.match`` in its message, else what happened. Anything accepted is
    read back, so a graph that ggml would abort in is computed (and the caller's process dies)."""
    import ggmlgrad as gg

    fn = e.fn or info.fn

    def call(*tensors):
        return fn(*with_tensors(e.sample, tensors), **e.sample.kwargs)

    arrays = input_arrays(e.sample)
    try:
        if mode == "capture":
            gg.capture(call)(*arrays)
        else:
            with gg.graph_mode(mode == "graph"):
                tensors = [gg.tensor(a, dtype=gg.int32 if a.dtype.kind == "i" else None) for a in arrays]
                out = call(*tensors)
                if isinstance(out, gg.Tensor):
                    out.detach().numpy()
        return "no exception"
    except e.error as err:
        return "ok" if e.match.lower() in str(err).lower() else f"message lacks {e.match!r}: {err}"
    except gg.CaptureError as err:   # an entry computed on the host: a capture refuses it whole
        return "ok" if mode == "capture" and not info.capturable else f"CaptureError: {err}"
    except Exception as err:   # noqa: BLE001  (the report names it)
        return f"{type(err).__name__}: {err}"


def rand_shapes_binary(rng: np.random.Generator) -> list[tuple[tuple, tuple]]:
    """Shape pairs covering equal shapes, broadcasting both ways, size-1 and 0-d."""
    return [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((3, 1), (1, 5)), ((), (2, 3)), ((1,), (3,)),
            ((2, 1, 3), (4, 1)), ((5,), ()), ((3, 4), ()), ((2, 3, 4), (1, 1, 1))]
