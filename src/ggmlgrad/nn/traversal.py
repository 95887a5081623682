"""Walking a module tree: submodules, parameters and buffers by dotted name, and ``apply``.

Functions of a module, not a mixin: ``Module``'s public methods of the same names call them. Where
the walk recurses it calls the child's method, so a subclass that overrides ``named_modules`` (as in
torch) is still walked its way.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterator

if TYPE_CHECKING:
    from ..tensor import Tensor
    from .module import Module, Parameter


def named_modules(module: "Module", memo: set | None, prefix: str) -> Iterator[tuple[str, "Module"]]:
    """``(dotted name, module)`` of ``module`` and every submodule, each once (``memo``: ids seen)."""
    memo = set() if memo is None else memo
    if id(module) in memo:
        return
    memo.add(id(module))
    yield prefix, module
    for name, m in module._modules.items():
        if m is not None:
            yield from m.named_modules(memo, f"{prefix}.{name}" if prefix else name)


def named_children(module: "Module") -> Iterator[tuple[str, "Module"]]:
    """``(name, child)`` of the direct submodules, each once."""
    seen = set()
    for name, m in module._modules.items():
        if m is not None and id(m) not in seen:
            seen.add(id(m))
            yield name, m


def named_tensors(module: "Module", store: str, recurse: bool, prefix: str = "") -> Iterator[tuple[str, "Tensor"]]:
    """``(dotted name, tensor)`` of one store (``"_parameters"`` or ``"_buffers"``) of the tree, each
    tensor once (a shared one by its first name)."""
    seen: set[int] = set()
    mods = module.named_modules(prefix=prefix) if recurse else [(prefix, module)]
    for mp, m in mods:
        for name, t in getattr(m, store).items():
            if t is None or id(t) in seen:
                continue
            seen.add(id(t))
            yield (f"{mp}.{name}" if mp else name), t


def values(pairs: Iterator[tuple[str, object]]) -> Iterator:
    """The second items of ``(name, value)`` pairs: ``parameters()`` from ``named_parameters()``."""
    for _, v in pairs:
        yield v


def get_submodule(module: "Module", target: str) -> "Module":
    """The submodule at dotted path ``target`` ("" is the module itself)."""
    m = module
    for part in target.split(".") if target else ():
        child = m._modules.get(part)
        if child is None:
            raise AttributeError(f"{type(m).__name__} has no submodule {part!r} (looking up {target!r})")
        m = child
    return m


def get_parameter(module: "Module", target: str) -> "Parameter":
    """The parameter at dotted path ``target``."""
    mod, _, name = target.rpartition(".")
    p = module.get_submodule(mod)._parameters.get(name)
    if p is None:
        raise AttributeError(f"no parameter {target!r}")
    return p


def get_buffer(module: "Module", target: str) -> "Tensor":
    """The buffer at dotted path ``target`` (torch's ``Module.get_buffer``)."""
    mod, _, name = target.rpartition(".")
    owner = module.get_submodule(mod)
    if name not in owner._buffers:
        raise AttributeError(f"{type(owner).__name__} has no attribute `{name}`")
    b = owner._buffers[name]
    if b is None:
        raise AttributeError(f"`{name}` is not a buffer")
    return b


def apply(module: "Module", fn: Callable[["Module"], None]) -> "Module":
    """``fn`` on every submodule (children first, then ``module``); returns ``module``."""
    for m in module.children():
        m.apply(fn)
    fn(module)
    return module
