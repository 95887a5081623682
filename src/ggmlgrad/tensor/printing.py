"""torch.set_printoptions: how tensors print (their ``repr``), through ``np.array2string``."""
from __future__ import annotations

import sys

_PRINT: dict = {}
_PROFILES = {"default": {"precision": 4, "threshold": 1000, "edgeitems": 3, "linewidth": 80},
             "short": {"precision": 2, "threshold": 1000, "edgeitems": 2, "linewidth": 80},
             "full": {"precision": 4, "threshold": sys.maxsize, "edgeitems": 3, "linewidth": 80}}


def set_printoptions(precision: int | None = None, threshold: float | None = None, edgeitems: int | None = None,
                     linewidth: int | None = None, profile: str | None = None, sci_mode: bool | None = None) -> None:
    """torch.set_printoptions: how tensors print (``repr``). ``profile`` is ``"default"``, ``"short"``
    or ``"full"``; ``sci_mode`` True forces scientific notation, False suppresses it.

    >>> import ggmlgrad as gg
    >>> gg.set_printoptions(precision=2); print(gg.tensor([1.23456]))
    tensor([1.23])
    >>> gg.set_printoptions(profile="default")
    """
    if profile is not None:
        if profile not in _PROFILES:
            raise ValueError(f"set_printoptions: profile must be one of {sorted(_PROFILES)}, got {profile!r}")
        _PRINT.clear()
        _PRINT.update(_PROFILES[profile])
    for k, v in (("precision", precision), ("threshold", threshold), ("edgeitems", edgeitems),
                 ("linewidth", linewidth)):
        if v is not None:
            _PRINT[k] = v
    if sci_mode is not None:
        _PRINT["sci_mode"] = bool(sci_mode)


def print_options() -> dict:
    """Keyword arguments for ``np.array2string`` from :func:`set_printoptions`."""
    opts = {k: v for k, v in _PRINT.items() if k in ("precision", "threshold", "edgeitems")}
    if "linewidth" in _PRINT:
        opts["max_line_width"] = _PRINT["linewidth"]
    if _PRINT.get("sci_mode") is True:
        p = _PRINT.get("precision", 4)
        opts["formatter"] = {"float_kind": lambda x: f"{x:.{p}e}"}
    elif _PRINT.get("sci_mode") is False:
        opts["suppress_small"] = True
    return opts
