"""Walking a module tree: submodules, parameters and buffers by dotted name, and ``apply``."""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterator

if TYPE_CHECKING:
    from ..tensor import Tensor
    from .module import Module, Parameter


class TraversalMethods:
    """Yields a module's submodules, parameters and buffers (dotted names, each once) and applies functions to them."""

    def named_modules(self, memo: set | None = None, prefix: str = "") -> Iterator[tuple[str, "Module"]]:
        memo = set() if memo is None else memo
        if id(self) in memo:
            return
        memo.add(id(self))
        yield prefix, self
        for name, m in self._modules.items():
            if m is not None:
                yield from m.named_modules(memo, f"{prefix}.{name}" if prefix else name)

    def modules(self) -> Iterator["Module"]:
        for _, m in self.named_modules():
            yield m

    def named_children(self) -> Iterator[tuple[str, "Module"]]:
        seen = set()
        for name, m in self._modules.items():
            if m is not None and id(m) not in seen:
                seen.add(id(m))
                yield name, m

    def children(self) -> Iterator["Module"]:
        for _, m in self.named_children():
            yield m

    def _named(self, store: str, recurse: bool, prefix: str = ""):
        seen: set[int] = set()
        mods = self.named_modules(prefix=prefix) if recurse else [(prefix, self)]
        for mp, m in mods:
            for name, t in getattr(m, store).items():
                if t is None or id(t) in seen:
                    continue
                seen.add(id(t))
                yield (f"{mp}.{name}" if mp else name), t

    def named_parameters(self, prefix: str = "", recurse: bool = True) -> Iterator[tuple[str, Parameter]]:
        """(name, parameter) pairs, dotted names, each parameter once (shared ones by their first name)."""
        return self._named("_parameters", recurse, prefix)

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix: str = "", recurse: bool = True) -> Iterator[tuple[str, Tensor]]:
        return self._named("_buffers", recurse, prefix)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def get_submodule(self, target: str) -> "Module":
        """The submodule at dotted path ``target`` ("" is the module itself)."""
        m = self
        for part in target.split(".") if target else ():
            child = m._modules.get(part)
            if child is None:
                raise AttributeError(f"{type(m).__name__} has no submodule {part!r} (looking up {target!r})")
            m = child
        return m

    def get_parameter(self, target: str) -> Parameter:
        mod, _, name = target.rpartition(".")
        p = self.get_submodule(mod)._parameters.get(name)
        if p is None:
            raise AttributeError(f"no parameter {target!r}")
        return p

    def get_buffer(self, target: str) -> Tensor:
        """The buffer at dotted path ``target`` (torch's ``Module.get_buffer``)."""
        mod, _, name = target.rpartition(".")
        owner = self.get_submodule(mod)
        if name not in owner._buffers:
            raise AttributeError(f"{type(owner).__name__} has no attribute `{name}`")
        b = owner._buffers[name]
        if b is None:
            raise AttributeError(f"`{name}` is not a buffer")
        return b

    def apply(self, fn: Callable[["Module"], None]) -> "Module":
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self
