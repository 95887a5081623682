"""The short path of a captured function's call: the last call's recording replayed for arguments
of its signature, without making the signature key (see ``Captured.__call__``)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..engine import ENGINE, modes
from ..nn.module import WATCH
from ..runtime import resolve_device
from ..runtime.faults import ARMED as _FAULTS
from ..tensor import Tensor

if TYPE_CHECKING:
    from .api import _Recording


class ShortPath:
    """Mixin of :class:`~ggmlgrad.capture.api.Captured`: what its ``__call__`` checks and runs when
    the call repeats the last call's signature. ``_fast`` holds that recording while it may."""

    _fast_path = True  # CapturedStep's replay has its own short form (see its _replay_fast)

    def _fast_stale(self, rec: "_Recording") -> str | None:
        """:meth:`_stale` for the short path (which has compared ``WATCH.epoch`` already)."""
        return rec.stale()

    def _replay_fast(self, rec: "_Recording", args: tuple):
        """:meth:`_run` of a recording with no in-place writes or index checks and one graph."""
        ENGINE.drain_if_queued("capture")  # queued work may write what the replay reads
        rec.stage_args(args)
        rec.inputs.upload()
        rec.graphs[0].compute()
        return rec.out_spec.build(rec.read_outputs())

    def _same_as_last(self, args: tuple) -> bool:
        """Whether ``args`` (positional only) give the last call's signature key, without making it:
        the same types, shapes, dtypes and device, the same precision, and no module changed
        (``WATCH.epoch``, which also moves on ``train()``/``eval()``)."""
        sig, dev, precision, epoch = self._fast_sig[:4]
        if len(args) != len(sig) or WATCH.epoch != epoch or modes.precision() != precision:
            return False
        if len(self._fast_sig) > 4 and self._fast_sig[4:] != self._extra_key():
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
        return (first.device if first is not None else resolve_device(None)).name == dev

    def _remember_fast(self, key: tuple, args: tuple, rec: "_Recording") -> None:
        """Let the next call with ``args``' signature take __call__'s short path, when ``rec`` needs
        nothing but staging, one compute and the read of its outputs (see _run)."""
        self._fast = None
        if not self._fast_path or not self._flat_args or rec.writes is not None or rec.index_checks \
                or rec.host_outputs is None or _FAULTS or len(rec.graphs) != 1:
            return
        sig = tuple((type(a), a.shape, a.dtype) for a in args)
        self._fast_sig = (sig, key[2], key[3], WATCH.epoch) + self._extra_key()
        self._fast = rec
