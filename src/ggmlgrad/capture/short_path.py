"""The short path of a captured function's call: the last call's recording replayed for arguments
of its signature, without making the signature key (see ``Captured.__call__``)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..engine import modes
from ..nn.module import WATCH
from ..runtime import devices, resolve_device
from ..runtime.faults import ARMED as _FAULTS
from ..tensor import Tensor

if TYPE_CHECKING:
    from .api import _Recording


class ShortPath:
    """Mixin of :class:`~ggmlgrad.capture.api.Captured`: what its ``__call__`` checks and runs when
    the call repeats the last call's signature. ``_fast`` holds that recording while it may."""

    def _fast_stale(self, rec: "_Recording") -> str | None:
        """:meth:`_stale` of the short path's recording, whose ``WATCH.epoch`` check _same_as_last made."""
        return rec.stale()

    def _same_as_last(self, args: tuple) -> bool:
        """Whether ``args`` (positional only) give the last call's signature key, without making it:
        the same types, shapes, dtypes and device, the same precision, and no module changed
        (``WATCH.epoch``, which also moves on ``train()``/``eval()``)."""
        sig, dev, precision, epoch = self._fast_sig[:4]
        if len(args) != len(sig) or WATCH.epoch != epoch or modes.precision() != precision \
                or self._fast_sig[4:] != self._extra_key():
            return False
        first = None
        for a, (t, shape, dtype) in zip(args, sig):
            if type(a) is not t or a.shape != shape:
                return False
            if t is Tensor:
                if a.dtype is not dtype:
                    return False
                if first is None:
                    first = a
            elif a.dtype != dtype:
                return False
        return (first.device if first is not None else self._home_device()).name == dev

    def _home_device(self):
        """The device a call without tensor arguments (NumPy arrays only) records on: where the
        tensors the function reads live (a module's parameters, its closure), when that is one
        device; else the current default device. ``gg.capture(model)`` on a model moved to
        ``vulkan:0`` then uploads its NumPy inputs there. With only the CPU, no search."""
        default = resolve_device(None)
        if len(devices()) == 1:
            return default
        from .api import _owners  # api defines Captured on this mixin
        found = {t.device for t in _owners(self.fn)}
        return found.pop() if len(found) == 1 else default

    def _remember_fast(self, key: tuple, args: tuple, rec: "_Recording") -> None:
        """Let the next call with ``args``' signature take __call__'s short path, when ``rec`` needs
        nothing but staging, one compute and the read of its outputs (``_run`` without its branches)."""
        self._fast = None
        if not self._flat_args or rec.writes is not None or rec.index_checks \
                or rec.host_outputs is None or _FAULTS or len(rec.graphs) != 1:
            return
        sig = tuple((type(a), a.shape, a.dtype) for a in args)
        self._fast_sig = (sig, key[2], key[3], WATCH.epoch) + self._extra_key()
        self._fast = rec
