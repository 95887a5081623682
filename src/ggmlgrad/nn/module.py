"""``Module`` and ``Parameter``: the PyTorch-style container for layers and their state."""
from __future__ import annotations

import collections
import copy
from typing import Any, Callable, Iterator

import numpy as np

from ..engine import ENGINE, PENDING, DType, bfloat16, dtypes, float16, float32, share_value
from ..engine.context import current as _context
from ..runtime import resolve_device
from ..tensor import Tensor, no_grad
from ..tensor.call_plans import register_tensor_type
from ..tensor.tensor import _from_numpy
from ..tensor.views import share_memory
from ..tensor.autograd_api import RemovableHandle
from . import hooks, module_state, traversal
from .module_state import IncompatibleKeys  # noqa: F401  (imported from here)


_MISSING = object()


class _Watch:
    """What capture follows in modules (SPEC §4, §6): ``epoch`` moves on every ``train()``/``eval()``
    and every assignment of a parameter, buffer, submodule or tensor attribute. While a recording
    runs, its execution context's ``module_observer`` hears which modules it called or read
    (``saw``) and which training flags it read (``read_mode``). A replay compares one int; it looks
    closer only after the epoch moved."""

    __slots__ = ("epoch",)

    def __init__(self) -> None:
        self.epoch = 0


WATCH = _Watch()

# Built-in module types whose forward is pure ops on one argument and their parameters → the call
# that may replay their recorded records (nn/replay.py registers them).
REPLAYED: dict = {}


class Parameter(Tensor):
    """A tensor that a :class:`Module` registers as a learnable parameter (``requires_grad=True``).

    It shares storage with the tensor it wraps.

    >>> import ggmlgrad as gg
    >>> p = gg.nn.Parameter(gg.zeros(2))
    >>> isinstance(p, gg.Tensor), p.requires_grad
    (True, True)
    """

    def __new__(cls, data: Tensor | None = None, requires_grad: bool = True):
        if data is None:
            data = _from_numpy(np.zeros((0,), np.float32), dtypes.float32, resolve_device(None), False)
        if not isinstance(data, Tensor):
            raise TypeError(f"Parameter: expected a Tensor, got {type(data).__name__}")
        if data._status == PENDING:
            ENGINE.drain("parameter")  # a parameter owns computed storage
        if "_view" in data.__dict__:
            share_memory(data)  # a view's memory is its base's, as in torch (not a copy of it)
        p = object.__new__(cls)  # not cls._blank: that calls cls.__new__ (this method) again
        p._init_array(data.shape, data.dtype, data.device)
        p.requires_grad, p.grad, p.grad_fn, p._version, p._retains_grad = False, None, None, 0, False
        share_value(p, data)
        p._vcell = data._vcell  # same memory, same version counter: writes through `data` are seen
        if requires_grad:
            p.requires_grad_(True)
        return p

    def __init__(self, data=None, requires_grad: bool = True):
        pass  # everything happens in __new__ (Tensor.__init__ refuses direct construction)

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()

    __str__ = __repr__

    def __deepcopy__(self, memo):
        if id(self) not in memo:
            memo[id(self)] = _copy_tensor(self)
        return memo[id(self)]


def _is_tensor(x) -> bool:
    return isinstance(x, Tensor)


register_tensor_type(Parameter)   # a parameter is an op input like any tensor (eager call plans)


class Module:
    """Base class of layers: register parameters, buffers and submodules by attribute assignment.

    What a module does beyond holding its state is written as functions of a module, which its
    methods of torch's names call: walking the tree (:mod:`.traversal`), saving and loading state
    (:mod:`.module_state`), hooks (:mod:`.hooks`), moving and copying (this file).

    >>> import ggmlgrad as gg
    >>> class Net(gg.nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.fc = gg.nn.Linear(3, 2)
    ...     def forward(self, x):
    ...         return self.fc(x).relu()
    >>> [n for n, _ in Net().named_parameters()]
    ['fc.weight', 'fc.bias']
    """

    _version = 1

    def __init__(self) -> None:
        self.__dict__["_training"] = True
        object.__setattr__(self, "_parameters", collections.OrderedDict())
        object.__setattr__(self, "_buffers", collections.OrderedDict())
        object.__setattr__(self, "_non_persistent", set())
        object.__setattr__(self, "_modules", collections.OrderedDict())

    @property
    def training(self) -> bool:
        """Training mode (``train()``/``eval()``); a capture recording notes which flags it read."""
        mode = self.__dict__.get("_training", True)
        obs = _context().module_observer
        if obs is not None:
            obs.read_mode(self, mode)
        return mode

    @training.setter
    def training(self, mode: bool) -> None:
        self.__dict__["_training"] = mode
        WATCH.epoch += 1

    # ------------------------------------------------------------------ attribute registration
    def __setattr__(self, name: str, value: Any) -> None:
        if "_parameters" not in self.__dict__:
            raise AttributeError(f"cannot assign {name!r} before Module.__init__() is called")
        params, buffers, modules = self._parameters, self._buffers, self._modules
        replaces = isinstance(value, (Tensor, Module)) or name in params or name in buffers or name in modules
        if isinstance(value, Parameter):
            _discard(self, name, keep=params)  # reassignment keeps the registration order
            params[name] = value
        elif isinstance(value, Module):
            _discard(self, name, keep=modules)
            modules[name] = value
        elif name in params or name in modules or name in buffers:
            _assign_registered(self, name, value)
        else:
            object.__setattr__(self, name, value)
        if replaces:
            WATCH.epoch += 1  # after the change: captured functions re-check what they read

    def __getattr__(self, name: str) -> Any:
        # Runs on every parameter read in forward (self.weight): one dict probe per store.
        d = self.__dict__
        for store in (d.get("_parameters"), d.get("_buffers"), d.get("_modules")):
            if store is not None:
                v = store.get(name, _MISSING)
                if v is not _MISSING:
                    obs = _context().module_observer
                    if obs is not None:
                        obs.saw(self)
                    return v
        raise AttributeError(f"'{type(self).__name__}' object has no attribute {name!r}")

    def __delattr__(self, name: str) -> None:
        for s in (self._parameters, self._buffers, self._modules):
            if name in s:
                del s[name]
                self._non_persistent.discard(name)
                WATCH.epoch += 1
                return
        object.__delattr__(self, name)
        WATCH.epoch += 1

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        """Register ``param`` (a Parameter or None) as parameter ``name``."""
        _register(self, "register_parameter", name, param, Parameter, self._parameters)

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """A tensor that is state but not a parameter (running statistics, masks); in ``state_dict`` when persistent."""
        _register(self, "register_buffer", name, tensor, Tensor, self._buffers)
        if not persistent:
            self._non_persistent.add(name)

    def add_module(self, name: str, module: "Module | None") -> None:
        """Register ``module`` (a Module or None) as submodule ``name``."""
        _register(self, "add_module", name, module, Module, self._modules)

    register_module = add_module

    # ------------------------------------------------------------------ walking the tree (nn/traversal.py)
    def named_modules(self, memo: set | None = None, prefix: str = "") -> Iterator[tuple[str, "Module"]]:
        """``(dotted name, module)`` of this module and every submodule, each once."""
        return traversal.named_modules(self, memo, prefix)

    def modules(self) -> Iterator["Module"]:
        return traversal.values(self.named_modules())

    def named_children(self) -> Iterator[tuple[str, "Module"]]:
        return traversal.named_children(self)

    def children(self) -> Iterator["Module"]:
        return traversal.values(self.named_children())

    def named_parameters(self, prefix: str = "", recurse: bool = True) -> Iterator[tuple[str, Parameter]]:
        """(name, parameter) pairs, dotted names, each parameter once (shared ones by their first name)."""
        return traversal.named_tensors(self, "_parameters", recurse, prefix)

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        return traversal.values(self.named_parameters(recurse=recurse))

    def named_buffers(self, prefix: str = "", recurse: bool = True) -> Iterator[tuple[str, Tensor]]:
        return traversal.named_tensors(self, "_buffers", recurse, prefix)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        return traversal.values(self.named_buffers(recurse=recurse))

    def get_submodule(self, target: str) -> "Module":
        """The submodule at dotted path ``target`` ("" is the module itself)."""
        return traversal.get_submodule(self, target)

    def get_parameter(self, target: str) -> Parameter:
        return traversal.get_parameter(self, target)

    def get_buffer(self, target: str) -> Tensor:
        """The buffer at dotted path ``target`` (torch's ``Module.get_buffer``)."""
        return traversal.get_buffer(self, target)

    def apply(self, fn: Callable[["Module"], None]) -> "Module":
        return traversal.apply(self, fn)

    # ------------------------------------------------------------------ state (nn/module_state.py)
    def state_dict(self, prefix: str = "", keep_vars: bool = False) -> "collections.OrderedDict[str, Tensor]":
        """Ordered name → tensor for every parameter and persistent buffer (shared storage, no copy)."""
        return module_state.state_dict(self, prefix, keep_vars)

    def load_state_dict(self, state_dict, strict: bool = True) -> IncompatibleKeys:
        """Copy values into the existing parameters and buffers, in place.

        Everything is validated first (names, shapes, dtypes); on any problem it
        raises and the model is unchanged. With ``strict=False`` missing and
        unexpected keys are allowed and returned; present keys are still checked.
        """
        return module_state.load_state_dict(self, state_dict, strict)

    # ------------------------------------------------------------------ hooks (nn/hooks.py)
    def register_forward_pre_hook(self, hook, *, prepend: bool = False, with_kwargs: bool = False) -> RemovableHandle:
        """``hook(module, args)`` (or ``(module, args, kwargs)``) before ``forward``; a returned value
        replaces the arguments (a tuple, a single value, or ``(args, kwargs)`` with kwargs)."""
        return hooks.register(self, "_forward_pre_hooks", hook, prepend, with_kwargs)

    def register_forward_hook(self, hook, *, prepend: bool = False, with_kwargs: bool = False,
                              always_call: bool = False) -> RemovableHandle:
        """``hook(module, args, output)`` (or ``(module, args, kwargs, output)``) after ``forward``;
        a returned value replaces the output."""
        return hooks.register(self, "_forward_hooks", hook, prepend, with_kwargs)

    def register_full_backward_hook(self, hook, prepend: bool = False) -> RemovableHandle:
        """``hook(module, grad_input, grad_output)`` when the gradients of the module's tensor inputs
        are computed (``grad_input`` entries are None for inputs that need no gradient); a returned
        tuple replaces ``grad_input``."""
        return hooks.register(self, "_backward_hooks", hook, prepend, False)

    def register_full_backward_pre_hook(self, hook, prepend: bool = False) -> RemovableHandle:
        """``hook(module, grad_output)`` when the gradients of the module's outputs are known, before
        those of its inputs; a returned tuple replaces ``grad_output``."""
        return hooks.register(self, "_backward_pre_hooks", hook, prepend, False)

    def register_backward_hook(self, hook) -> RemovableHandle:
        raise NotImplementedError("register_backward_hook is deprecated in torch; use register_full_backward_hook")

    # ------------------------------------------------------------------ calling
    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} has no forward()")

    def __call__(self, *args, **kwargs):
        obs = _context().module_observer
        if obs is not None:
            obs.saw(self)  # a capture recording depends on this module's structure
        if "_has_hooks" in self.__dict__:
            return hooks.call_hooked(self, args, kwargs)
        replayed = REPLAYED.get(type(self))
        if replayed is not None and len(args) == 1 and not kwargs:
            return replayed(self, args[0])
        return self.forward(*args, **kwargs)

    # ------------------------------------------------------------------ modes and grads
    def train(self, mode: bool = True) -> "Module":
        if not isinstance(mode, bool):
            raise TypeError(f"train: mode must be a bool, got {mode!r}")
        for m in self.modules():
            m.__dict__["_training"] = mode
        WATCH.epoch += 1  # captured functions re-check the flags they read
        return self

    def eval(self) -> "Module":
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> "Module":
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear every parameter's ``.grad`` (to None, or to zeros with ``set_to_none=False``)."""
        _zero_grads(self.parameters(), set_to_none)

    # ------------------------------------------------------------------ devices
    def to(self, *args, **kwargs) -> "Module":
        """Move parameters and buffers in place (the same Parameter objects, as in PyTorch):
        ``to(device)``, ``to(dtype)``, ``to(device, dtype)``, ``to(tensor)`` (its device and dtype),
        ``non_blocking=`` accepted.

        Parameters compute in float32: float32 and float64 (float32 by the dtype rule) leave them as
        they are; float16/bfloat16 raise ``NotImplementedError`` (they are storage dtypes here).

        >>> import ggmlgrad as gg
        >>> m = gg.nn.Linear(2, 2)
        >>> m.to("cpu", gg.float64) is m and m.weight.dtype is gg.float32
        True
        """
        _move_module(self, *_to_arguments(args, kwargs))
        return self

    def float(self) -> "Module":
        """float32 parameters: they already are (returns the module)."""
        return self

    def double(self) -> "Module":
        """float64 is float32 by the dtype rule: returns the module unchanged."""
        return self

    def half(self) -> "Module":
        """Refused: parameters compute in float32 (float16 is a storage dtype in ggmlgrad)."""
        return self.to(dtype=float16)

    def bfloat16(self) -> "Module":
        """Refused: parameters compute in float32 (bfloat16 is a storage dtype in ggmlgrad)."""
        return self.to(dtype=bfloat16)

    def cpu(self) -> "Module":
        return self.to("cpu")

    # ------------------------------------------------------------------ repr and copies
    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        return _module_repr(self)

    def __deepcopy__(self, memo):
        """An independent copy (own storage for every parameter and buffer), e.g. an RL target network."""
        return _deepcopy_module(self, memo)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._parameters) | set(self._buffers) | set(self._modules))


# ---------------------------------------------------------------------- what Module's methods call
def _discard(module: Module, name: str, keep=None) -> None:
    """Forget ``name`` in every store of ``module`` but ``keep`` (a name lives in one store)."""
    for d in (module.__dict__, module._parameters, module._buffers, module._modules):
        if d is not keep:
            d.pop(name, None)
    if keep is not module._buffers:
        module._non_persistent.discard(name)


def _assign_registered(module: Module, name: str, value) -> None:
    """``module.name = value`` for a registered name and a value that is not a Parameter or Module:
    None clears a parameter or submodule, a Tensor or None replaces a buffer, anything else is refused."""
    if name in module._parameters:
        if value is not None:
            raise TypeError(f"cannot assign {type(value).__name__} as parameter {name!r} "
                            f"(a gg.nn.Parameter or None is required)")
        module._parameters[name] = None
    elif name in module._modules:
        if value is not None:
            raise TypeError(f"cannot assign {type(value).__name__} as child module {name!r}")
        module._modules[name] = None
    else:
        if value is not None and not _is_tensor(value):
            raise TypeError(f"cannot assign {type(value).__name__} as buffer {name!r} (a Tensor or None)")
        module._buffers[name] = value


def _register(module: Module, fn: str, name: str, value, kind: type, store: dict) -> None:
    """``register_parameter``/``register_buffer``/``add_module``: check, then (re)register ``name``
    in ``store``, keeping its place when it was there (as PyTorch)."""
    if value is not None and not isinstance(value, kind):
        raise TypeError(f"{fn}: {name!r} must be a {kind.__name__} or None, got {type(value).__name__}")
    if not isinstance(name, str) or not name or "." in name:
        raise KeyError(f"{fn}: name must be a non-empty string without '.', got {name!r}")
    if hasattr(type(module), name):           # a method or property (``half``, ``train``): torch refuses too
        raise KeyError(f"attribute '{name}' already exists")
    _discard(module, name, keep=store)
    store[name] = value
    module._non_persistent.discard(name)
    WATCH.epoch += 1


def _zero_grads(params, set_to_none: bool) -> None:
    for p in params:
        if p.grad is None:
            continue
        if set_to_none:
            p.grad = None
        else:
            with no_grad():
                p.grad = p.grad.detach()
                p.grad.zero_()


def _move_module(module: Module, device, dtype) -> None:
    """``Module.to``: check ``dtype``, then move every parameter and buffer (and grad) to ``device``."""
    if dtype is not None:
        _check_module_dtype(dtype)
    if device is None:
        return
    dev = resolve_device(device)
    for t in list(module.parameters()) + list(module.buffers()):
        if t.device is dev:
            continue
        _move_storage(t, dev)
        if t.grad is not None:
            t.grad = t.grad.to(device=dev)


def _module_repr(module: Module) -> str:
    lines = []
    extra = module.extra_repr()
    if extra:
        lines.extend(extra.split("\n"))
    for name, m in module._modules.items():
        body = repr(m).replace("\n", "\n  ")
        lines.append(f"({name}): {body}")
    name = type(module).__name__
    if not lines:
        return f"{name}()"
    if len(lines) == 1 and not module._modules:
        return f"{name}({lines[0]})"
    return name + "(\n  " + "\n  ".join(lines) + "\n)"


def _deepcopy_module(module: Module, memo: dict) -> Module:
    for t in list(module.parameters()) + list(module.buffers()):
        if id(t) not in memo:
            memo[id(t)] = _copy_tensor(t)
    new = type(module).__new__(type(module))
    memo[id(module)] = new
    for k, v in module.__dict__.items():
        if k != "_replay_cache":  # replayable calls of the original (nn/replay.py): not the copy's
            object.__setattr__(new, k, copy.deepcopy(v, memo))
    return new


def _copy_tensor(t: Tensor) -> Tensor:
    """A copy of ``t`` with storage of its own (a Parameter stays a Parameter; ``.grad`` is copied too)."""
    with no_grad():
        value = Tensor.detach(t).clone()
        grad = t.grad.detach().clone() if t.grad is not None else None
    if isinstance(t, Parameter):
        out = Parameter(value, requires_grad=t.requires_grad)
    else:
        out = value
        out.requires_grad = t.requires_grad
    out.grad = grad
    return out


def _move_storage(t: Tensor, dev) -> None:
    """Rebind ``t`` to a copy of its value on ``dev`` (object identity kept, like PyTorch's ``.data`` swap).

    An in-place change of ``t``: queued ops that read it compute first, from the old memory."""
    with ENGINE.exclusive("to(device)"):
        moved = Tensor.detach(t).to(device=dev)
    share_value(t, moved)
    t.device = dev
    t._version += 1


def _to_arguments(args: tuple, kwargs: dict) -> tuple:
    """(device, dtype) from torch's ``Module.to`` call forms."""
    kwargs = dict(kwargs)
    kwargs.pop("non_blocking", None)
    kwargs.pop("memory_format", None)
    device, dtype = kwargs.pop("device", None), kwargs.pop("dtype", None)
    if kwargs:
        raise TypeError(f"Module.to() got unexpected keyword arguments {sorted(kwargs)}")
    for a in args:
        if isinstance(a, Tensor):
            device, dtype = a.device, a.dtype
        elif isinstance(a, DType):
            dtype = a
        elif isinstance(a, bool):        # to(device, non_blocking) positional form
            continue
        elif device is None:
            device = a
        else:
            raise TypeError(f"Module.to() got an unexpected argument {a!r}")
    return device, dtype


def _check_module_dtype(dtype) -> None:
    if not isinstance(dtype, DType):
        raise TypeError(f"Module.to: dtype must be a ggmlgrad dtype, got {dtype!r}")
    if not dtype.is_float:
        raise TypeError(f"nn.Module.to only accepts floating point or complex dtypes, but got desired dtype={dtype.name}")
    if dtype is not float32:
        raise NotImplementedError(f"Module.to({dtype.name}): ggmlgrad parameters compute in float32 "
                                  f"({dtype.name} is a storage dtype); keep the module float32")
