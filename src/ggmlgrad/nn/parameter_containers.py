"""``ParameterList`` and ``ParameterDict``: parameters held in a list or a dict, registered on the
module so ``parameters()``, ``state_dict()`` (keys ``"0"``, ``"1"``, ... or the dict's keys) and the
optimizers see them, as torch's. A plain tensor put in is wrapped in a ``Parameter`` (torch 2.x).

>>> import ggmlgrad as gg
>>> pl = gg.nn.ParameterList([gg.nn.Parameter(gg.ones(2)), gg.zeros(3)])
>>> [n for n, _ in pl.named_parameters()], pl[1].requires_grad
(['0', '1'], True)
"""
from __future__ import annotations

from typing import Any, Iterable, Iterator, Mapping

from ..tensor import Tensor
from .module import Module, Parameter


def _as_parameter(value: Any) -> Any:
    """Tensors become parameters (sharing memory); other values are kept as they are (torch)."""
    if isinstance(value, Tensor) and not isinstance(value, Parameter):
        return Parameter(value)
    return value


class ParameterList(Module):
    """A list of parameters, registered under the names ``"0"``, ``"1"``, ...

    >>> import ggmlgrad as gg
    >>> pl = gg.nn.ParameterList()
    >>> pl.append(gg.nn.Parameter(gg.ones(4)))
    ParameterList(  (0): Parameter containing: [float32 of size (4,)])
    """

    def __init__(self, values: Iterable | None = None) -> None:
        super().__init__()
        self._size = 0
        if values is not None:
            self.extend(values)

    def _index(self, idx: int) -> int:
        if isinstance(idx, bool) or not isinstance(idx, int):
            raise TypeError(f"ParameterList indices must be integers, not {type(idx).__name__}")
        if not -self._size <= idx < self._size:
            raise IndexError(f"index {idx} is out of range")
        return idx % self._size

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return ParameterList([self[i] for i in range(self._size)[idx]])
        return getattr(self, str(self._index(idx)))

    def __setitem__(self, idx: int, value: Any) -> None:
        setattr(self, str(self._index(idx)), _as_parameter(value))

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator:
        return iter(self[i] for i in range(self._size))

    def __iadd__(self, values: Iterable) -> "ParameterList":
        return self.extend(values)

    def append(self, value: Any) -> "ParameterList":
        """Add ``value`` at the end (a tensor becomes a Parameter)."""
        self._size += 1
        setattr(self, str(self._size - 1), _as_parameter(value))
        return self

    def extend(self, values: Iterable) -> "ParameterList":
        """Append every value of ``values``."""
        if isinstance(values, (Tensor, str)) or not hasattr(values, "__iter__"):
            raise TypeError(f"ParameterList.extend should be called with an iterable, but got "
                            f"{type(values).__name__}")
        for v in values:
            self.append(v)
        return self

    def extra_repr(self) -> str:
        return "\n".join(f"  ({i}): {_describe(self[i])}" for i in range(self._size))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.extra_repr()})"


class ParameterDict(Module):
    """An ordered dict of parameters, registered under their keys (strings).

    >>> import ggmlgrad as gg
    >>> pd = gg.nn.ParameterDict({"scale": gg.nn.Parameter(gg.ones(1))})
    >>> list(pd.keys()), "scale" in pd
    (['scale'], True)
    """

    def __init__(self, parameters: Mapping | Iterable | None = None) -> None:
        super().__init__()
        self._keys: dict[str, None] = {}
        if parameters is not None:
            self.update(parameters)

    @staticmethod
    def _key(key) -> str:
        if not isinstance(key, str):
            raise TypeError(f"ParameterDict keys must be strings, got {type(key).__name__}")
        return key

    def __getitem__(self, key: str):
        if key not in self._keys:
            raise KeyError(key)
        return getattr(self, key)

    def __setitem__(self, key: str, value: Any) -> None:
        self._keys[self._key(key)] = None
        setattr(self, key, _as_parameter(value))

    def __delitem__(self, key: str) -> None:
        del self._keys[key]
        delattr(self, key)

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._keys))

    def __contains__(self, key) -> bool:
        return key in self._keys

    def keys(self):
        return list(self._keys)

    def values(self):
        return [self[k] for k in self._keys]

    def items(self):
        return [(k, self[k]) for k in self._keys]

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self._keys else default

    def pop(self, key: str) -> Any:
        v = self[key]
        del self[key]
        return v

    def clear(self) -> None:
        for k in list(self._keys):
            del self[k]

    def update(self, parameters: Mapping | Iterable) -> None:
        """Add or replace entries from a mapping or an iterable of (key, value) pairs."""
        items = parameters.items() if isinstance(parameters, Mapping) or hasattr(parameters, "items") \
            else parameters
        for k, v in items:
            self[k] = v

    def extra_repr(self) -> str:
        return "\n".join(f"  ({k}): {_describe(v)}" for k, v in self.items())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.extra_repr()})"


def _describe(v: Any) -> str:
    if isinstance(v, Tensor):
        kind = "Parameter containing" if isinstance(v, Parameter) else "Tensor"
        return f"{kind}: [{v.dtype.name} of size {tuple(v.shape)}]"
    return repr(v)
