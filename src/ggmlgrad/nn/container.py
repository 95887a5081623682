"""Containers: Sequential, ModuleList, ModuleDict."""
from __future__ import annotations

import collections
from typing import Iterable, Iterator, Mapping

from ..engine.context import current as _context
from . import replay
from .module import WATCH, Module


class Sequential(Module):
    """Modules applied in order; built from modules or an OrderedDict of named modules.

    >>> import ggmlgrad as gg
    >>> net = gg.nn.Sequential(gg.nn.Linear(2, 3), gg.nn.ReLU())
    >>> net(gg.ones(4, 2)).shape
    (4, 3)
    """

    def __init__(self, *modules) -> None:
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], collections.OrderedDict):
            for name, m in modules[0].items():
                self.add_module(name, m)
        else:
            for i, m in enumerate(modules):
                self.add_module(str(i), m)

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x

    def __len__(self) -> int:
        return len(_read(self))

    def __iter__(self) -> Iterator[Module]:
        return iter(_read(self).values())

    def __getitem__(self, idx):
        if isinstance(idx, slice):   # a Sequential of the same class keeping the names (torch)
            return self.__class__(collections.OrderedDict(list(_read(self).items())[idx]))
        keys = list(_read(self))
        return self._modules[keys[_norm_index(idx, len(keys))]]

    def __setitem__(self, idx: int, module: Module) -> None:
        """Replace the module at position ``idx`` under its name (torch: ``setattr(self, key, module)``)."""
        if not isinstance(module, Module):
            raise TypeError(f"Sequential: cannot assign {type(module).__name__!r} as a child module (Module expected)")
        keys = list(self._modules)
        self.add_module(keys[_norm_index(idx, len(keys))], module)

    def __delitem__(self, idx) -> None:
        """Delete the module(s) at ``idx`` (an int or a slice); the rest are renumbered "0", "1", ... (torch)."""
        keys = list(self._modules)
        dead = keys[idx] if isinstance(idx, slice) else [keys[_norm_index(idx, len(keys))]]
        _renumber(self, [m for k, m in self._modules.items() if k not in set(dead)])

    def append(self, module: Module) -> "Sequential":
        self.add_module(str(len(self._modules)), module)
        return self

    def extend(self, modules: Iterable[Module]) -> "Sequential":
        for m in modules:
            self.append(m)
        return self

    def insert(self, index: int, module: Module) -> "Sequential":
        n = len(self._modules)
        if isinstance(index, bool) or not isinstance(index, int):
            raise TypeError(f"insert: index must be an int, got {index!r}")
        if not -n <= index <= n:   # torch refuses; list.insert would clamp silently
            raise IndexError(f"Index out of range: {index}")
        _renumber(self, _insert_list(list(self._modules.values()), index, module))
        return self

    def pop(self, index=-1) -> Module:
        """Remove and return the module(s) at ``index`` (a slice gives a Sequential), as torch."""
        m = self[index]
        del self[index]
        return m

    def __add__(self, other) -> "Sequential":
        if not isinstance(other, Sequential):
            raise ValueError(f"add operator supports only objects of Sequential class, but {type(other)} is given.")
        return Sequential(*self, *other)

    def __iadd__(self, other) -> "Sequential":
        if not isinstance(other, Sequential):
            raise ValueError(f"add operator supports only objects of Sequential class, but {type(other)} is given.")
        return self.extend(list(other))


replay.register(Sequential)  # replayed when every module in it is (nn/replay.py)


def _read(container: Module) -> "collections.OrderedDict[str, Module]":
    """The container's modules; a capture recording that reads them depends on its structure."""
    obs = _context().module_observer
    if obs is not None:
        obs.saw(container)
    return container._modules


def _norm_index(idx: int, n: int) -> int:
    if isinstance(idx, bool) or not isinstance(idx, int):
        raise TypeError(f"index must be an int, got {idx!r}")
    if not -n <= idx < n:
        raise IndexError(f"index {idx} is out of range for {n} modules")
    return idx % n


def _insert_list(mods: list, index: int, module: Module) -> list:
    if not isinstance(module, Module):
        raise TypeError(f"insert: expected a Module, got {type(module).__name__}")
    mods.insert(index, module)
    return mods


def _renumber(container: Module, mods: list) -> None:
    """Re-register ``mods`` as "0", "1", ... (list semantics after insert/pop, as PyTorch)."""
    container._modules.clear()
    for i, m in enumerate(mods):
        container._modules[str(i)] = m
    WATCH.epoch += 1  # captured functions re-check the submodules they read


class ModuleList(Module):
    """A list of modules whose parameters are registered (``for`` over it in your forward)."""

    def __init__(self, modules: Iterable[Module] | None = None) -> None:
        super().__init__()
        for m in modules or ():
            self.append(m)

    def append(self, module: Module) -> "ModuleList":
        self.add_module(str(len(self._modules)), module)
        return self

    def extend(self, modules: Iterable[Module]) -> "ModuleList":
        for m in modules:
            self.append(m)
        return self

    def __len__(self) -> int:
        return len(_read(self))

    def __iter__(self) -> Iterator[Module]:
        return iter(_read(self).values())

    def __getitem__(self, idx):
        mods = list(_read(self).values())
        if isinstance(idx, slice):
            return ModuleList(mods[idx])
        return mods[_norm_index(idx, len(mods))]

    def __setitem__(self, idx: int, module: Module) -> None:
        self.add_module(str(_norm_index(idx, len(self._modules))), module)

    def __delitem__(self, idx) -> None:
        """Delete the module(s) at ``idx`` (an int or a slice); the rest are renumbered (torch)."""
        mods = list(self._modules.values())
        del mods[idx if isinstance(idx, slice) else _norm_index(idx, len(mods))]
        _renumber(self, mods)

    def insert(self, index: int, module: Module) -> None:
        _renumber(self, _insert_list(list(self._modules.values()), index, module))

    def __add__(self, other: Iterable[Module]) -> "ModuleList":
        return ModuleList(list(self) + list(other))

    def __iadd__(self, modules: Iterable[Module]) -> "ModuleList":
        return self.extend(modules)

    def pop(self, index: int = -1) -> Module:
        mods = list(self._modules.values())
        m = mods.pop(_norm_index(index, len(mods)))
        _renumber(self, mods)
        return m


class ModuleDict(Module):
    """An ordered mapping name → module whose parameters are registered."""

    def __init__(self, modules: Mapping[str, Module] | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.update(modules)

    def update(self, modules) -> None:
        items = modules.items() if hasattr(modules, "items") else modules
        for k, m in items:
            self[k] = m

    def __getitem__(self, key: str) -> Module:
        return _read(self)[key]

    def __setitem__(self, key: str, module: Module) -> None:
        self.add_module(key, module)

    def __delitem__(self, key: str) -> None:
        del self._modules[key]
        WATCH.epoch += 1

    def pop(self, key: str) -> Module:
        """Remove ``key`` and return its module (torch)."""
        m = self[key]
        del self[key]
        return m

    def clear(self) -> None:
        """Remove every module (torch)."""
        self._modules.clear()
        WATCH.epoch += 1

    def __contains__(self, key: str) -> bool:
        return key in _read(self)

    def __len__(self) -> int:
        return len(_read(self))

    def __iter__(self) -> Iterator[str]:
        return iter(_read(self))

    def keys(self):
        return _read(self).keys()

    def values(self):
        return _read(self).values()

    def items(self):
        return _read(self).items()
