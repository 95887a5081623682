"""Gradient recording switch (context-local)."""
from __future__ import annotations

import contextvars
import functools

_enabled: contextvars.ContextVar[bool] = contextvars.ContextVar("ggmlgrad_grad", default=True)


def is_grad_enabled() -> bool:
    return _enabled.get()


class _GradSwitch:
    _value = True

    def __enter__(self):
        self._token = _enabled.set(self._value)
        return self

    def __exit__(self, *exc) -> None:
        _enabled.reset(self._token)

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*a, **k):
            with type(self)():
                return fn(*a, **k)
        return wrapper


class no_grad(_GradSwitch):
    """Disable gradient recording (context manager and decorator).

    >>> import ggmlgrad as gg
    >>> w = gg.ones(2, requires_grad=True)
    >>> with gg.no_grad():
    ...     y = w * 2
    >>> y.requires_grad
    False
    """
    _value = False


class enable_grad(_GradSwitch):
    """Re-enable gradient recording inside a ``no_grad`` block."""
    _value = True


class set_grad_enabled(_GradSwitch):
    def __init__(self, mode: bool):
        if not isinstance(mode, bool):
            raise TypeError(f"set_grad_enabled: mode must be a bool, got {mode!r}")
        self._value = mode
        self._token = _enabled.set(mode)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        _enabled.reset(self._token)


class inference_mode:  # noqa: N801  (torch's name)
    """torch.inference_mode: no gradient recording inside (context manager and decorator, with or
    without parentheses). ``inference_mode(False)`` changes nothing. torch also marks the tensors made
    inside as inference tensors that autograd later refuses; here they are ordinary tensors that do
    not require grad (as under :class:`no_grad`).

    >>> import ggmlgrad as gg
    >>> w = gg.ones(2, requires_grad=True)
    >>> with gg.inference_mode():
    ...     y = w * 2
    >>> y.requires_grad
    False
    """

    def __new__(cls, mode=True):
        if callable(mode) and not isinstance(mode, bool):    # @gg.inference_mode without parentheses
            return cls()(mode)
        return super().__new__(cls)

    def __init__(self, mode: bool = True):
        if not isinstance(mode, bool):
            raise TypeError(f"inference_mode: mode must be a bool, got {mode!r}")
        self.mode = mode
        self._tokens: list = []

    def __enter__(self):
        self._tokens.append(_enabled.set(False) if self.mode else None)
        return self

    def __exit__(self, *exc) -> None:
        token = self._tokens.pop()
        if token is not None:
            _enabled.reset(token)

    def __call__(self, fn):
        mode = self.mode

        @functools.wraps(fn)
        def wrapper(*a, **k):
            with inference_mode(mode):
                return fn(*a, **k)
        return wrapper
