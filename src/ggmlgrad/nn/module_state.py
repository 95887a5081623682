"""A module's state dict: ``state_dict()`` and the validated, all-or-nothing ``load_state_dict()``
(functions of a module; ``Module``'s methods of the same names call them)."""
from __future__ import annotations

import collections
from typing import NamedTuple

import numpy as np

from ..engine import COMPUTED, ENGINE
from ..engine.plans import Exact
from ..ops.registry import write
from ..tensor import Tensor, no_grad
from ..tensor.tensor import _from_numpy, _refuse_while_recording
from ..tensor.views import refresh_views_of


class IncompatibleKeys(NamedTuple):
    missing_keys: list
    unexpected_keys: list


def state_dict(module, prefix: str = "", keep_vars: bool = False) -> "collections.OrderedDict[str, Tensor]":
    """Ordered name → tensor for every parameter and persistent buffer (shared storage, no copy)."""
    out: collections.OrderedDict[str, Tensor] = collections.OrderedDict()
    _save_state(module, out, prefix.rstrip("."), keep_vars)
    return out


def _save_state(module, out, prefix: str, keep_vars: bool) -> None:
    # Like PyTorch: no de-duplication here, so a module shared twice is saved under both names.
    def key(name):
        return f"{prefix}.{name}" if prefix else name
    for name, p in module._parameters.items():
        if p is not None:
            out[key(name)] = p if keep_vars else p.detach()
    for name, b in module._buffers.items():
        if b is not None and name not in module._non_persistent:
            out[key(name)] = b if keep_vars else b.detach()
    for name, m in module._modules.items():
        if m is not None:
            _save_state(m, out, key(name), keep_vars)


def load_state_dict(module, state_dict, strict: bool = True) -> IncompatibleKeys:
    """Copy values into the existing parameters and buffers of ``module``, in place.

    Everything is validated first (names, shapes, dtypes); on any problem it
    raises and the model is unchanged. With ``strict=False`` missing and
    unexpected keys are allowed and returned; present keys are still checked.
    """
    _refuse_while_recording("load_state_dict")  # an in-place write: never frozen into a replay
    if not hasattr(state_dict, "keys"):
        raise TypeError(f"load_state_dict: expected a mapping, got {type(state_dict).__name__}")
    targets = module.state_dict(keep_vars=True)
    missing = [k for k in targets if k not in state_dict]
    unexpected = [k for k in state_dict if k not in targets]
    errors = []
    if strict:
        if missing:
            errors.append(f"missing keys: {missing}")
        if unexpected:
            errors.append(f"unexpected keys: {unexpected}")
    plan = []
    for name, target in targets.items():
        if name not in state_dict:
            continue
        value = state_dict[name]
        problem = _check_value(name, target, value)
        if problem:
            errors.append(problem)
        else:
            plan.append((target, value))
    if errors:
        raise RuntimeError(f"load_state_dict for {type(module).__name__}: nothing was loaded:\n  "
                           + "\n  ".join(errors))
    _write_all(plan)
    return IncompatibleKeys(missing, unexpected)


def _check_value(name: str, target: Tensor, value) -> str | None:
    """Why ``value`` cannot be loaded into ``target`` (None when it can). As torch's ``copy_``,
    any float or integer value casts to a float target (float64 → float32 included); an
    integer target takes integers only (in int32's range: no float truncation, no wrapping)."""
    if isinstance(value, Tensor):
        shape, is_float = tuple(value.shape), value.dtype.is_float
    elif isinstance(value, np.ndarray):
        if value.dtype == object or value.dtype.kind not in "biuf":
            return f"{name}: NumPy dtype {value.dtype} cannot be loaded"
        shape, is_float = tuple(value.shape), value.dtype.kind == "f"
    else:
        return f"{name}: expected a Tensor or NumPy array, got {type(value).__name__}"
    if shape != tuple(target.shape):
        return f"{name}: shape {shape} does not match the model's {tuple(target.shape)}"
    if is_float and not target.dtype.is_float:
        return f"{name}: a float value cannot be loaded into the model's {target.dtype.name} tensor"
    if isinstance(value, np.ndarray) and not target.dtype.is_float and value.size \
            and (value.max() > 2**31 - 1 or value.min() < -2**31):
        return f"{name}: integer values do not fit in the model's int32 tensor"
    return None


def _write_all(plan) -> None:
    """Copy validated values into their targets with ONE ``load_state_dict`` write op (one graph
    compute, after a drain, so no queued read can see a half-loaded model). Tensor values are
    cast to the target's dtype on the device, NumPy arrays on the host as they upload (torch's
    copy_ rules either way)."""
    pairs: list[Tensor] = []
    for t, v in plan:
        if not isinstance(v, Tensor):
            v = _from_numpy(np.asarray(v), t.dtype, t.device, False)
        elif v.device is not t.device:
            v = v.to(device=t.device)
        if v._storage is not t._storage or v._status != COMPUTED:   # loading a tensor into itself: nothing
            pairs += (t, v)
    if not pairs:
        return
    with no_grad(), ENGINE.exclusive("load_state_dict"):
        write("load_state_dict", tuple(pairs), Exact(((2, ()),) * (len(pairs) // 2)))
    for t in pairs[::2]:
        t._version += 1
    refresh_views_of(pairs[::2])  # live views of the targets show the new values
