"""An optimizer's state dicts: snapshots of groups and state, and a validated, all-or-nothing restore
(functions of an optimizer; ``Optimizer``'s methods of the same names call them)."""
from __future__ import annotations

import copy
import math

import numpy as np

from ..engine import ENGINE, float32, graph_mode
from ..engine.plans import Exact
from ..ops import op
from ..ops.registry import write
from ..tensor import Tensor, no_grad
from ..tensor.tensor import _refuse_while_recording as refuse_while_recording


def state_dict(opt) -> dict:
    """``Optimizer.state_dict()``: ``{"state": {index: {"step": int, name: Tensor}}, "param_groups": [{..., "params": [index]}]}``.

    Tensors are device snapshots (clones), so later steps do not change a saved dict.
    """
    index = {id(p): i for i, p in enumerate(opt.flat_params())}
    groups = []
    for g in opt.param_groups:
        d = {k: copy.deepcopy(v) for k, v in g.items() if k != "params"}
        d["params"] = [index[id(p)] for p in g["params"]]
        groups.append(d)
    state = {}
    with no_grad(), graph_mode(True):    # all snapshots in one graph, even in eager mode
        for p in opt.flat_params():
            st = opt.state[p]
            state[index[id(p)]] = {k: (v.clone() if isinstance(v, Tensor) else copy.deepcopy(v))
                                   for k, v in st.items()}
    return {"state": state, "param_groups": groups}

def load_state_dict(opt, state_dict: dict) -> None:
    """``Optimizer.load_state_dict()``: Restore groups' options, step counters and state tensors (bit-exact for float32 state).

    Everything is validated before anything is written: a refused dict leaves the
    optimizer unchanged. State tensors are written in place (one graph compute).
    """
    name = f"{type(opt).__name__}.load_state_dict"
    refuse_while_recording(name)
    if not isinstance(state_dict, dict) or "state" not in state_dict or "param_groups" not in state_dict:
        raise ValueError(f"{name}: expected a dict with 'state' and 'param_groups'")
    groups_in = state_dict["param_groups"]
    if len(groups_in) != len(opt.param_groups):
        raise ValueError(f"{name}: the state dict has {len(groups_in)} parameter groups, "
                         f"the optimizer has {len(opt.param_groups)}")
    new_groups = []
    id_to_param: dict[int, Tensor] = {}
    for gi, (mine, theirs) in enumerate(zip(opt.param_groups, groups_in)):
        if not isinstance(theirs, dict) or "params" not in theirs:
            raise ValueError(f"{name}: parameter group {gi} is not a dict with 'params'")
        if len(theirs["params"]) != len(mine["params"]):
            raise ValueError(f"{name}: parameter group {gi} has {len(theirs['params'])} parameters in the "
                             f"state dict and {len(mine['params'])} in the optimizer")
        g = {}
        for k, v in theirs.items():
            if k == "params":
                continue
            if isinstance(mine.get(k), tuple) and isinstance(v, list):
                v = tuple(v)
            g[k] = copy.deepcopy(v)
        for k, v in mine.items():   # options the saved group lacks keep their current values
            if k != "params" and k not in g:
                g[k] = copy.deepcopy(v)
        try:
            opt._validate_group(g)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{name}: parameter group {gi}: {e}") from None
        new_groups.append(g)
        for p, idx in zip(mine["params"], theirs["params"]):
            id_to_param[int(idx)] = p
    states_in = state_dict["state"]
    if not isinstance(states_in, dict):
        raise ValueError(f"{name}: 'state' must be a dict keyed by parameter index")
    planned: list[tuple[Tensor, dict, dict]] = []   # (param, new host values, {key: source tensor})
    group_of = {id(p): g for g, mine in zip(new_groups, opt.param_groups) for p in mine["params"]}
    for key, st in states_in.items():
        try:
            idx = int(key)
        except (TypeError, ValueError):
            raise ValueError(f"{name}: state key {key!r} is not a parameter index") from None
        if idx not in id_to_param:
            raise ValueError(f"{name}: state for parameter index {idx}, which no group lists")
        p = id_to_param[idx]
        planned.append((p, *_check_state_entry(opt, name, idx, p, st, group_of[id(p)])))
    with_state = {id(p) for p, _, _ in planned}
    # Validated: now write. Tensors first (one exclusive graph), then host values.
    uploads = []
    for p, _, tensors in planned:
        for k, src in tensors.items():
            uploads.append((p, k, src))
    fresh = {}
    with no_grad(), graph_mode(True):
        for p in opt.flat_params():
            if id(p) not in with_state:
                fresh[id(p)] = opt._fresh_state(p, group_of[id(p)])
        for p, _, tensors in planned:   # a state key the new options need but the live state lacks
            st = opt.state[p]
            for k in tensors:
                if k not in st:
                    st[k] = _zeros_f32(p)
    pairs: list[Tensor] = []
    for p, k, src in uploads:
        dst = opt.state[p][k]
        if src is not dst:
            pairs += (dst, src if src.device is dst.device else src.to(device=dst.device))
    if pairs:
        with ENGINE.exclusive("load_state_dict"):
            write("load_state_dict", tuple(pairs), Exact(((2, ()),) * (len(pairs) // 2)))
    for p, host, tensors in planned:
        st = opt.state[p]
        for k in list(st):
            if k != "step" and k not in tensors:
                del st[k]
        st.update(host)
    for p in opt.flat_params():
        if id(p) in fresh:
            opt.state[p] = fresh[id(p)]
    for mine, g in zip(opt.param_groups, new_groups):
        params = mine["params"]
        mine.clear()
        mine.update(g)
        mine["params"] = params

def _check_state_entry(opt, name: str, idx: int, p: Tensor, st, group: dict) -> tuple[dict, dict]:
    if not isinstance(st, dict):
        raise ValueError(f"{name}: state of parameter {idx} is not a dict")
    host, tensors = {}, {}
    step = st.get("step", 0)
    if isinstance(step, Tensor):
        step = step.item()
    if isinstance(step, np.ndarray):
        step = step.item()
    if isinstance(step, bool) or not isinstance(step, (int, float, np.integer, np.floating)) \
            or float(step) != math.floor(float(step)) or step < 0:
        raise ValueError(f"{name}: parameter {idx}: 'step' must be a non-negative integer, got {step!r}")
    host["step"] = int(step)
    for k in opt._state_tensor_keys(group):
        if k not in st:
            raise ValueError(f"{name}: parameter {idx}: missing state {k!r}")
        v = st[k]
        if isinstance(v, np.ndarray):
            if v.dtype.kind != "f":
                raise ValueError(f"{name}: parameter {idx}: state {k!r} has dtype {v.dtype}; expected float")
            v = _host_tensor(v, p)
        if not isinstance(v, Tensor):
            raise ValueError(f"{name}: parameter {idx}: state {k!r} must be a Tensor or array, "
                             f"got {type(v).__name__}")
        if v.shape != p.shape:
            raise ValueError(f"{name}: parameter {idx}: state {k!r} has shape {v.shape}, "
                             f"the parameter has shape {p.shape}")
        if not v.dtype.is_float:
            raise ValueError(f"{name}: parameter {idx}: state {k!r} has dtype {v.dtype.name}; expected float")
        tensors[k] = v
    return host, tensors


def _zeros_f32(p: Tensor) -> Tensor:
    """A float32 zero tensor shaped like ``p``, made on the device (a graph op, no upload)."""
    z = op.fill_like(p, c=0.0)
    return z if z.dtype is float32 else op.cast(z, dtype=float32)


def _host_tensor(arr: np.ndarray, like: Tensor) -> Tensor:
    from ..tensor import tensor
    return tensor(np.ascontiguousarray(arr, dtype=np.float32), device=like.device)
