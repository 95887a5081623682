"""torch as the second oracle of the op-program fuzzer (``ggmlgrad.testing.fuzz_programs``).

Every generated program also runs in torch (CPU; float32 inputs as float32, int32 inputs as int64 by
the dtype rule, half types as torch's) and each mode's outcome is compared with torch's: the values
of every step (float32 tolerance), the gradients of the program's loss, the result dtypes (torch's
int64 read as int32 and float64 as float32, the README's dtype rule), ``requires_grad`` of every
result, and the error class (ggmlgrad's exception must be an instance of the class torch raises).

Each disagreement is either one of the documented limits in ``TORCH_LIMITS`` (ggmlgrad computes in
float32 on int32 and half operands and at most 4-D, capture refuses host reads, ...), counted by
class, or a MISMATCH, which fails the program.

The torch call of a fuzzed op is its entry in ``_TORCH_CALLS`` (internal ops, and ggmlgrad spellings
torch lacks such as ``t.elu()``, written out), else the OpInfo row's ``torch_fn``, else the row's own
call with ``gg`` (and ``F``) bound to torch: the calls are written with torch's names
(``lambda a, d: a.squeeze(d)``), and a ggmlgrad public function maps to torch's of the same name. An
op with no torch call is compared with NumPy only and counted as ``no_torch_equivalent`` (none now).

>>> from ggmlgrad.testing.fuzz_torch import torch_call
>>> import torch
>>> torch_call("squeeze")(torch.zeros(1, 3), 0).shape
torch.Size([3])
"""
from __future__ import annotations

import dataclasses
import functools
import types
import warnings
from typing import Any, Callable

import numpy as np

# Documented differences from torch, by class: a disagreement of one of these kinds is counted, not failed.
TORCH_LIMITS: dict[str, str] = {
    "capture_refused": "gg.capture refuses an op that must read values on the host (CaptureError; docs/porting.md)",
    "float32_compute": "an op reading an int32, bool or float16/bfloat16 operand: ggmlgrad computes in float32 "
                       "and may raise a clear error where torch computes in the operand's dtype (README dtype rule: "
                       "half types are storage types, int32 arithmetic computes in float32)",
    "rank_over_4": "a result beyond 4-D: ggmlgrad raises ValueError (ggml's limit, README Limitations)",
    "refused_documented": "ggmlgrad refuses an argument torch accepts, documented in the fuzzer's reference "
                          "(a 0-d tensor in movedim/gather/index_select, an exact bias shape in linear, ...)",
    "internal_op": "an internal op (ggmlgrad.ops.op.*, no public torch name): torch runs its composition; the "
                   "argument checks are the op's own contract",
    "int_overflow": "an int32 result outside int32's range: ggmlgrad's int32 (torch: int64, README dtype rule)",
    "half_precision": "a value computed from float16/bfloat16 operands: ggmlgrad computes in float32, torch in "
                      "the half type (values compared at 1e-2)",
    "program_diverged": "torch's whole-program values drift from ggmlgrad's by float32 rounding compounded along "
                        "the program (each op agrees on ggmlgrad's own operands); gradients then not compared",
    "no_torch_equivalent": "an op with no torch call (compared with NumPy only)",
    "torch_backward_refused": "torch's backward raises where ggmlgrad differentiates (no derivative for "
                              "floor_divide; clamp with broadcast tensor bounds); ggmlgrad's gradients are checked "
                              "against finite differences of the float64 reference instead",
    "known_open": "a fuzz_programs.KNOWN_OPEN class (listed there with its reason)",
    "empty_reduction": "a reduction of an empty tensor: ggmlgrad may raise a clear error where torch gives 0, "
                       "-inf or NaN (the fuzzer's documented exception)",
    "grad_at_nonsmooth": "a gradient at a kink, tie or non-finite point (relu at 0, max ties, inf - inf), where "
                         "ggmlgrad's and torch's subgradient choices may differ; values agree",
}


# Differences from torch still open, skipped by the torch comparison and counted (with the ops that hit them in
# OPEN_OPS); delete an entry once it is fixed.
TORCH_KNOWN_OPEN: dict[str, str] = {
    "plain_value_error": "ggmlgrad raises a plain ValueError where torch raises RuntimeError or IndexError (a check not "
                         "spelled ShapeError, which is both): cross_entropy without a class dim (nn/functional.py), "
                         "where torch fails indexing dim 1 (IndexError)",
    "plain_type_error": "a dtype refusal raised as a plain TypeError where torch raises RuntimeError (its "
                        "NotImplementedError 'not implemented for Long'); docs/porting.md says dtype refusals are "
                        "DTypeError (TypeError and RuntimeError); the F.* activations' float32 check and "
                        "frac/hypot/logaddexp are DTypeError now, a refusal still plain is counted here",
    "narrow_error_class": "narrow with two faults (start and length, or dim and length): ggmlgrad reports the "
                          "out-of-range start or dim (IndexError), torch the negative length first (RuntimeError); "
                          "and narrow of a 0-d tensor raises an unworded IndexError('tuple index out of range')",
    "index_check_on_empty": "an index list out of range on an empty dim: ggmlgrad raises IndexError, torch "
                            "checks nothing when the result is empty",
    "check_order": "a call with a dim out of range and another fault (shapes that differ in gg.stack, a bool "
                   "input of log_softmax, a 0-d embedding weight, a 0-d tensor in gg.cat): one library reports the "
                   "dim (IndexError), the other the other fault (RuntimeError, ShapeError or DTypeError)",
    "gather_0d_index": "torch.gather takes a 0-d index with a 1-d input (a 0-d result); ggmlgrad's gather wants "
                       "an index of the input's rank (ShapeError)",
    "torch_overflow": "torch gives Inf/NaN where ggmlgrad gives the float64 value (within the op's tolerance) on "
                      "operands beyond 1e18 or non-finite: torch's float32 formula overflows or meets inf * 0 "
                      "(gelu(inf) NaN, leaky_relu(-inf, 0.0) NaN, hardswish(3e38) Inf, layer_norm of a row of "
                      "1e30s NaN); open: whether ggmlgrad should give torch's NaN/Inf there",
}
OPEN_OPS: dict[str, set] = {}


def _torch():
    import torch
    return torch


class _TorchAsGG:
    """``gg`` seen as torch by a rebound OpInfo call: ``gg.cat`` is ``torch.cat``, ``gg.nn.functional`` is
    ``torch.nn.functional``."""

    def __getattr__(self, name: str):
        torch = _torch()
        if name == "nn":
            return torch.nn
        if name in ("where", "maximum"):          # ggmlgrad's extensions, counted (EXTENSIONS)
            return {"where": _where, "maximum": _maximum}[name]
        return getattr(torch, name)


_F_NAMES = {"elu", "gelu", "softplus", "leaky_relu", "linear", "silu", "hardtanh", "relu6", "mish",
            "hardsigmoid", "hardswish", "logsigmoid", "softsign", "tanhshrink", "one_hot", "cross_entropy"}
_NOT_REBINDABLE = {"op", "_op", "apply", "_split_weighted_gg"}


def _public_torch(fn) -> Callable | None:
    """torch's function of the same name as a ggmlgrad public function (gg.cos, gg.where, F.elu, ...)."""
    torch = _torch()
    name = getattr(fn, "__name__", "")
    if name in _F_NAMES and hasattr(torch.nn.functional, name):
        return getattr(torch.nn.functional, name)
    return getattr(torch, name, None)


def _rebind(fn) -> Callable | None:
    """``fn`` with ``gg`` and ``_F()`` bound to torch: the same call on torch tensors (None if it uses
    ggmlgrad's internal ops)."""
    if fn is abs:
        return abs
    mod = getattr(fn, "__module__", "") or ""
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    if not mod.startswith("ggmlgrad.testing"):
        return _public_torch(fn)
    if set(code.co_names) & _NOT_REBINDABLE:
        return None
    torch = _torch()
    glb = dict(fn.__globals__, gg=_TorchAsGG(), _F=lambda: torch.nn.functional)
    cells = None
    if fn.__closure__:
        cells = []
        for c in fn.__closure__:
            v = c.cell_contents
            if callable(v) and getattr(v, "__module__", "").startswith("ggmlgrad"):
                v = _rebind(v)
                if v is None:
                    return None
            cells.append(types.CellType(v))
        cells = tuple(cells)
    return types.FunctionType(code, glb, fn.__name__, fn.__defaults__, cells)


def _same_shape(name: str):
    def check(x, y):
        if x.shape != y.shape:
            raise ValueError(f"{name}: input and target shapes differ")
    return check


def _sce(x, q):
    _same_shape("softmax_cross_entropy")(x, q)
    if x.ndim == 0 or x.numel() == 0:
        raise ValueError("softmax_cross_entropy: empty or 0-d input")
    return -(q * _torch().log_softmax(x, -1)).sum(-1)


def _lstm_cell(g, c):
    if g.ndim != 2 or c.ndim != 2 or tuple(g.shape) != (c.shape[0], 4 * c.shape[1]) or 0 in c.shape:
        raise ValueError("lstm_cell: expected gates (N, 4H) and c (N, H)")
    torch = _torch()
    i, f, gg_, o = g.chunk(4, -1)
    c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(gg_)
    return torch.cat([torch.sigmoid(o) * torch.tanh(c_new), c_new], -1)


def _layer_norm(x):
    if x.ndim == 0:
        raise ValueError("layer_norm of a 0-d tensor")
    return _torch().nn.functional.layer_norm(x, x.shape[-1:], eps=1e-5)


def _bce(x, y, pos_weight=None):
    _same_shape("bce_with_logits")(x, y)
    if x.numel() == 0:
        raise ValueError("bce_with_logits of an empty input")
    return _torch().nn.functional.binary_cross_entropy_with_logits(x, y, reduction="none", pos_weight=pos_weight)


# ggmlgrad spellings torch lacks (documented in their docstrings), and how many times each was used in this
# process: torch runs the documented meaning, and the summary counts them as "extension:<name>".
EXTENSIONS: dict[str, str] = {
    "where_nonbool_condition": "gg.where takes a float or int condition as non-zero (NaN counts as true, as "
                               "NumPy; gg.where's docstring says false); torch.where "
                               "wants a bool condition (RuntimeError)",
    "maximum_scalar": "gg.maximum(t, 2.0) takes a number; torch.maximum wants a tensor (TypeError)",
    "dim_none": "t.squeeze(None) and t.logsumexp(None) reduce over every dim; torch wants a dim (TypeError)",
    "softmax_default_dim": "t.softmax() without a dim is the last axis (documented); torch's Tensor.softmax wants a "
                           "dim, and F.softmax without one picks a legacy dim (0 or 1) with a deprecation warning",
}
EXT_HITS: list = []


def _where(c, a, b):
    torch = _torch()
    if isinstance(c, torch.Tensor) and c.dtype != torch.bool:
        EXT_HITS.append("where_nonbool_condition")
        c = c != 0
    return torch.where(c, a, b)


def _maximum(t, c):
    torch = _torch()
    if not isinstance(c, torch.Tensor):
        EXT_HITS.append("maximum_scalar")
        c = torch.tensor(c)
    return torch.maximum(t, c)


def _dim_none(method: str):
    def call(a, d, *rest):
        if d is None:
            EXT_HITS.append("dim_none")
            return getattr(a, method)(*((tuple(range(a.ndim)),) + rest if rest else ()))
        return getattr(a, method)(d, *rest)
    return call


def _f():
    return _torch().nn.functional


def _softmax_default(a):
    EXT_HITS.append("softmax_default_dim")
    return _f().softmax(a, dim=0) + _f().softmax(a, dim=-1)


# The fuzzer's own ops, the internal ones and ggmlgrad's method spellings torch lacks (``t.elu()``),
# written out for torch (public ops need no entry here).
_TORCH_CALLS: dict[str, Callable[..., Any]] = {
    "to_bfloat16": lambda t: t.to(_torch().bfloat16),
    "rdiv_scalar": lambda a: 2.0 / a,
    "layer_norm": _layer_norm,
    "bce_with_logits": _bce,
    "softmax_cross_entropy": _sce,
    "softmax_cross_entropy_mean": lambda x, q: _sce(x, q).sum() / q.sum(),
    "softmax_cross_entropy_mean_unit_rows": lambda x, q: _sce(x, q).sum() / q.sum(),
    "lstm_cell": _lstm_cell,
    "lstm_cell_nonfinite": _lstm_cell,
    "elu_alpha": lambda a: _f().elu(a, alpha=0.3),
    "elu_alpha_nonfinite": lambda a: _f().elu(a, alpha=0.3),
    "gelu_tanh": lambda a: _f().gelu(a, approximate="tanh"),
    "leaky_relu_slope": lambda a: _f().leaky_relu(a, 0.2),
    "leaky_relu_nonfinite": lambda a: _f().leaky_relu(a, 0.2),
    "leaky_relu_zero_slope_nonfinite": lambda a: _f().leaky_relu(a, 0.0),
    "linear_nobias": lambda x, w: _f().linear(x, w),
    "silu": lambda a: _f().silu(a),
    "silu_nonfinite": lambda a: _f().silu(a),
    "softplus_threshold_nonfinite": lambda a: _f().softplus(a, beta=2.0, threshold=3.0),
    "softmax_method": _softmax_default,
    "logsumexp": _dim_none("logsumexp"),
    "squeeze": _dim_none("squeeze"),
    "where": _where,
    "where_scalars": lambda c, a: _where(c, a, -2.0) + _where(c, 3.0, a),
    "maximum_c": _maximum,
    "maximum_scalar": lambda a: _maximum(a, 0.25),
    "chunk": lambda a, c, d: _torch().cat([p * float(i + 1) for i, p in enumerate(a.chunk(c, d))], dim=d),
}
# Ops whose ggmlgrad call is an internal op (torch runs the composition above): their argument checks are
# ggmlgrad's own contract, so a refusal that torch's composition does not share is "internal_op".
INTERNAL = {"rdiv_scalar", "layer_norm", "bce_with_logits", "softmax_cross_entropy", "softmax_cross_entropy_mean",
            "softmax_cross_entropy_mean_unit_rows", "lstm_cell", "lstm_cell_nonfinite"}


@functools.lru_cache(maxsize=None)
def torch_call(name: str) -> Callable | None:
    """The torch call of fuzzed op ``name`` (None: no torch equivalent)."""
    from .fuzz_programs import fuzz_ops, _opinfo_map
    if name in _TORCH_CALLS:
        return _TORCH_CALLS[name]
    info = _opinfo_map().get(name)
    fop = fuzz_ops()[name]
    if info is not None and info.torch_fn is not None and fop.call is info.fn:
        return info.torch_fn
    return _rebind(fop.call)


# ------------------------------------------------------------------------------------------ running
@dataclasses.dataclass
class TorchOutcome:
    kind: str                                            # "value" | "error"
    values: list = dataclasses.field(default_factory=list)     # per step: float64 array
    dtypes: list = dataclasses.field(default_factory=list)     # per step: ggmlgrad's name for torch's dtype
    requires_grad: list = dataclasses.field(default_factory=list)
    grads: list = dataclasses.field(default_factory=list)
    terms: list = dataclasses.field(default_factory=list)
    step: int = -1                                       # the step that raised (len(steps): backward)
    error_type: type | None = None
    message: str = ""


_DTYPE_RULE = {"int64": "int32", "float64": "float32", "int32": "int32", "float32": "float32", "bool": "bool",
               "float16": "float16", "bfloat16": "bfloat16"}


def gg_dtype_name(t) -> str:
    """torch's dtype as ggmlgrad names it by the dtype rule (int64 → int32, float64 → float32)."""
    name = str(t.dtype).removeprefix("torch.")
    return _DTYPE_RULE.get(name, name)


def to_torch(a: np.ndarray, requires_grad: bool = False):
    """A torch tensor of the program's input: float32 stays, int32 becomes int64 (torch's index dtype)."""
    torch = _torch()
    if a.dtype.kind in "iu":
        return torch.from_numpy(a.astype(np.int64))
    t = torch.from_numpy(np.array(a, dtype=np.float32))
    return t.requires_grad_(requires_grad)


def _np(t) -> np.ndarray:
    return t.detach().to(_torch().float64).numpy() if t.dtype != _torch().bool else t.detach().numpy().astype(np.float64)


def run_torch(prog) -> TorchOutcome:
    """Run ``prog`` in torch: every step's result, then the gradients of the same weighted loss as
    ``fuzz_programs._body`` (0.5 * the sum of each grad input, plus each float32 result that requires
    grad times its weight)."""
    torch = _torch()
    xs = [to_torch(a, k in prog.grad_inputs) for k, a in enumerate(prog.inputs)]
    outs = []
    for k, s in enumerate(prog.steps):
        fn = torch_call(s.op)
        args = [xs[r[1]] if r[0] == "i" else outs[r[1]] for r in s.args]
        try:
            outs.append(fn(*args, *s.params))
            if not isinstance(outs[-1], torch.Tensor):
                raise TypeError(f"torch call of {s.op} gave {type(outs[-1]).__name__}")
        except Exception as e:      # noqa: BLE001 -- classified by the caller
            return TorchOutcome("error", step=k, error_type=type(e), message=f"{type(e).__name__}: {e}"[:300])
    res = TorchOutcome("value", [_np(t) for t in outs], [gg_dtype_name(t) for t in outs],
                       [bool(t.requires_grad) for t in outs])
    if prog.backward:
        loss = None
        for k in prog.grad_inputs:
            term = xs[k].sum() * 0.5
            loss = term if loss is None else loss + term
        for k, t in enumerate(outs):
            if t.requires_grad and t.dtype == torch.float32:
                w = prog.weights[k]
                term = (t * torch.from_numpy(w)).sum() if w is not None else t.sum()
                loss = term if loss is None else loss + term
                res.terms.append(k)
        try:
            if loss is not None:
                loss.backward()
        except Exception as e:      # noqa: BLE001
            return TorchOutcome("error", step=len(prog.steps), error_type=type(e), message=f"{type(e).__name__}: {e}"[:300])
        res.grads = [None if xs[k].grad is None else xs[k].grad.double().numpy() for k in prog.grad_inputs]
    return res


def run_op(name: str, operands: list, params: tuple, dtypes: list) -> np.ndarray | None:
    """torch's result of one op on given operand values (float64 arrays stored as ``dtypes``); None if it raises."""
    torch = _torch()
    ts = []
    for v, d in zip(operands, dtypes):
        if d in ("int32", "int"):
            ts.append(torch.from_numpy(np.asarray(v).astype(np.int64)))
        elif d == "bool":
            ts.append(torch.from_numpy(np.array(np.asarray(v) != 0)))      # 0-d: an array, not np.bool_
        elif d in ("float16", "bfloat16"):
            ts.append(torch.from_numpy(np.asarray(v, np.float32)).to(getattr(torch, d)))
        else:
            ts.append(torch.from_numpy(np.asarray(v, np.float32)))
    try:
        return _np(torch_call(name)(*ts, *params))
    except Exception:               # noqa: BLE001
        return None


def error_base(t: type) -> type:
    """The torch exception class a ggmlgrad error must be an instance of: the first of IndexError,
    TypeError, ValueError, RuntimeError in its MRO (torch's NotImplementedError for an unsupported dtype
    is a RuntimeError; its own subclasses such as torch.OutOfMemoryError too)."""
    for base in t.__mro__:
        if base in (IndexError, TypeError, ValueError, RuntimeError):
            return base
    return t




# ------------------------------------------------------------------------------------------ checking
# Per mode, how many programs fell in each class (agree, a TORCH_LIMITS class, extension:<name>, MISMATCH).
COUNTS: dict[str, dict[str, int]] = {}


def _count(mode: str, classes: set) -> None:
    c = COUNTS.setdefault(mode, {})
    c["programs"] = c.get("programs", 0) + 1
    for k in sorted(classes) or ["agree"]:
        c[k] = c.get(k, 0) + 1


def summary() -> str:
    """One line per mode: programs compared with torch, then each class's count."""
    opened = "".join(f"\ntorch known-open {k} ops: {' '.join(sorted(v))}" for k, v in sorted(OPEN_OPS.items()))
    return opened + "\n" + "\n".join(f"torch oracle {m}: " + ", ".join(f"{k} {v}" for k, v in c.items()) for m, c in COUNTS.items())


def _reads_low_dtype(prog, k: int, kinds: dict) -> bool:
    from .fuzz_programs import fuzz_ops
    if k >= len(prog.steps):
        return False
    s = prog.steps[k]
    return any(not kind.startswith("idx:") and kinds.get(tuple(r)) in ("int", "half", "bool")
               for r, kind in zip(s.args, fuzz_ops()[s.op].operands))


def _refusal_class(prog, k: int, kinds: dict, ref_vals: list, o) -> str:
    """The documented class of ggmlgrad raising at step ``k`` where torch does not ('' if none)."""
    from .fuzz_programs import fuzz_ops, apply_ref, _step_operands, _EXTREMES
    if o.error == "CaptureError":
        return "capture_refused"
    if "at most 4" in o.message:
        return "rank_over_4"
    if o.error == "DTypeError" and any(d in o.message for d in ("int32", "float16", "bfloat16", "bool")):
        return "float32_compute"          # an operand of a low dtype the fuzzer's kinds did not track
    if k < len(prog.steps) and "0-d" in o.message and prog.steps[k].op in ("index_select", "gather", "movedim"):
        return "refused_documented"       # the 0-d refusal (torch allows) comes before the dim check
    if k >= len(prog.steps):
        return ""
    if _reads_low_dtype(prog, k, kinds):
        return "float32_compute"
    if k < len(ref_vals) and ref_vals[k] is not None and ref_vals[k].ndim > 4:
        return "rank_over_4"
    s = prog.steps[k]
    if s.op in INTERNAL:
        return "internal_op"
    vals = [v for v in ref_vals[:k]]
    try:
        operands = _step_operands(prog, s, vals)
    except Exception:       # noqa: BLE001
        return ""
    fop = fuzz_ops()[s.op]
    if (fop.reducing or s.op in _EXTREMES) and any(v.size == 0 for v in operands):
        return "empty_reduction"
    try:
        apply_ref(fop, operands, s.params)
    except Exception as e:  # noqa: BLE001
        if "ggmlgrad" in str(e):
            return "refused_documented"
    return ""


def _torch_refused(prog, t, kinds: dict) -> tuple:
    """(class, '') of torch refusing step ``t.step`` that ggmlgrad ran, or ('', MISMATCH message)."""
    if t.step == len(prog.steps):
        return "torch_backward_refused", ""
    if _reads_low_dtype(prog, t.step, kinds):
        return "float32_compute", ""
    if prog.steps[t.step].op in INTERNAL:
        return "internal_op", ""
    return "", f"gave values where torch raises {t.message} at step {t.step} ({prog.steps[t.step].op})"


def _open_error_class(prog, k: int, o, t) -> str:
    """The TORCH_KNOWN_OPEN key (or "internal_op") of an error-class difference at the step both raise ('' if
    none)."""
    if k != t.step or k >= len(prog.steps):
        return ""
    if prog.steps[k].op in INTERNAL:
        return "internal_op"
    if error_base(t.error_type) is IndexError and o.error in ("ShapeError", "DTypeError") and \
            ("Dimension out of range" in t.message or "Dimension specified as" in t.message):
        OPEN_OPS.setdefault("check_order", set()).add(prog.steps[k].op)
        return "check_order"
    if issubclass(o.error_type, IndexError) and "out of range" in o.message and \
            error_base(t.error_type) is RuntimeError:
        OPEN_OPS.setdefault("check_order", set()).add(prog.steps[k].op)
        return "check_order"                 # gg.cat of a 0-d tensor with a dim out of range
    if o.error_type is ValueError and error_base(t.error_type) is IndexError:
        OPEN_OPS.setdefault("plain_value_error", set()).add(prog.steps[k].op)
        return "plain_value_error"           # cross_entropy of a 1-d input: torch indexes dim 1
    if error_base(t.error_type) is not RuntimeError:
        return ""
    key = {ValueError: "plain_value_error", TypeError: "plain_type_error"}.get(o.error_type, "")
    if prog.steps[k].op == "narrow" and issubclass(o.error_type, IndexError):
        key = "narrow_error_class"
    if key:
        OPEN_OPS.setdefault(key, set()).add(prog.steps[k].op)
    return key


def _gg_step(o, outcomes: dict) -> int:
    """The step where ggmlgrad raised: eager's or check mode's (graph mode and capture may raise at a later
    sync point, with the same type)."""
    for m in ("eager", "check"):
        e = outcomes.get(m)
        if e is not None and e.kind == "error" and e.error_type is o.error_type:
            return e.step
    return o.step


def check_against_torch(prog, outcomes: dict, kinds: dict, ref_vals: list) -> list:
    """Compare every mode's outcome with torch's; returns the MISMATCH problems (the classes are counted)."""
    from .fuzz_programs import fuzz_ops
    if any(torch_call(s.op) is None for s in prog.steps):
        for m in outcomes:
            _count(m, {"no_torch_equivalent"})
        return []
    del EXT_HITS[:]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = run_torch(prog)
    ext = {f"extension:{e}" for e in EXT_HITS}
    problems = []
    for m, o in outcomes.items():
        classes, msgs = set(ext), []
        if o.kind == "known_open":
            classes.add("known_open")
        elif o.kind == "error" and t.kind == "error":
            if m == "capture" and o.error == "CaptureError":
                classes.add("capture_refused")
            elif not issubclass(o.error_type, error_base(t.error_type)):
                k = _gg_step(o, outcomes)
                if k > t.step:              # torch refused an earlier step: that step decides
                    cls, msg = _torch_refused(prog, t, kinds)
                else:
                    cls = _refusal_class(prog, k, kinds, ref_vals, o)
                    if cls in ("", "float32_compute") and k == t.step:
                        cls = _open_error_class(prog, k, o, t) or cls
                    msg = f"raised {o.message} where torch raises {t.message} (step {t.step})"
                if cls:
                    classes.add(cls)
                else:
                    msgs.append(msg)
        elif o.kind == "error":
            k = _gg_step(o, outcomes)
            cls = _refusal_class(prog, k, kinds, ref_vals, o)
            if not cls and issubclass(o.error_type, IndexError) and k < len(prog.steps) and t.values[k].size == 0:
                cls = "index_check_on_empty"
            if not cls and k < len(prog.steps) and prog.steps[k].op == "gather" and "as many dimensions" in o.message:
                cls = "gather_0d_index"
            if cls:
                classes.add(cls)
            else:
                msgs.append(f"raised {o.message} at step {k} where torch gives values")
        elif t.kind == "error":
            cls, msg = _torch_refused(prog, t, kinds)
            if cls:
                classes.add(cls)
            else:
                msgs.append(msg)
        else:
            msgs += _compare_values(prog, o, t, kinds, m, classes)
        if msgs:
            classes.add("MISMATCH")
            problems += [f"{m} vs torch: {x}" for x in msgs]
        _count(m, classes)
    return problems


def _compare_values(prog, o, t, kinds: dict, mode: str, classes: set) -> list:
    from .fuzz_programs import fuzz_ops, _tolerances, compare, _step_operands, _known_open, apply_ref
    ops = fuzz_ops()
    msgs, diverged = [], False
    for k, s in enumerate(prog.steps):
        fop = ops[s.op]
        operands = _step_operands(prog, s, o.values)
        half = any(kinds.get(tuple(r)) == "half" for r in s.args) or kinds.get(("s", k)) == "half"
        if mode != "capture":
            if o.dtypes[k] != t.dtypes[k]:
                msgs.append(f"step s{k} {s.op}: dtype {o.dtypes[k]}, torch {t.dtypes[k]}")
            if o.requires_grad[k] != t.requires_grad[k]:
                msgs.append(f"step s{k} {s.op}: requires_grad {o.requires_grad[k]}, torch {t.requires_grad[k]}")
        if diverged:
            continue
        tol = _tolerances(fop, operands, t.values[k], half)
        if tol is None:
            continue
        msg = compare(o.values[k], t.values[k], *tol)
        if not msg:
            continue
        dts = [("int32" if kinds.get(tuple(r)) == "int" else "bool" if kinds.get(tuple(r)) == "bool" else
                (o.dtypes[r[1]] if r[0] == "s" and mode != "capture" and kinds.get(tuple(r)) == "half" else
                 "float16" if kinds.get(tuple(r)) == "half" else "float32")) for r in s.args]
        own = run_op(s.op, operands, s.params, dts)
        if own is not None and not compare(o.values[k], own, *tol):
            classes.add("program_diverged")
            diverged = True
            continue
        if half:
            classes.add("half_precision")
            diverged = True
            continue
        if _known_open(s.op, operands, s.params) or (own is not None and _known_open(s.op, operands, s.params)):
            classes.add("known_open")
            diverged = True
            continue
        if own is not None and _torch_overflow(o.values[k], own, operands, fop, s.params, tol):
            classes.add("torch_overflow")
            OPEN_OPS.setdefault("torch_overflow", set()).add(s.op)
            diverged = True
            continue
        msgs.append(f"step s{k} {s.op}: {msg} (torch on ggmlgrad's own operands: "
                    f"{'raises' if own is None else compare(o.values[k], own, *tol) or 'agrees'})")
        diverged = True
    if prog.backward and not diverged and not msgs:
        if any(s.op in INTERNAL for s in prog.steps):
            classes.add("internal_op")          # their targets are not differentiated (torch's composition does)
        else:
            msgs += _compare_grads(prog, o, t, classes)
    return msgs


def _torch_overflow(got, own, operands, fop, params, tol) -> bool:
    """torch gives Inf/NaN where ggmlgrad gives the float64 reference's value, on operands beyond 1e30 or
    non-finite: torch's float32 intermediates overflow (gelu(inf) is NaN, hardswish(3e38) Inf)."""
    from .fuzz_programs import apply_ref, compare
    big = any(v.size and (~np.isfinite(v) | (np.abs(v) >= 1e18)).any() for v in operands)   # squares overflow
    if not big or got.shape != own.shape:
        return False
    try:
        exp = apply_ref(fop, operands, params)
    except Exception:       # noqa: BLE001
        return False
    if exp.shape != got.shape:
        return False
    differ = ~np.isfinite(own) & ~((got == own) | (np.isnan(got) & np.isnan(own)))
    rest = ~differ
    return bool(differ.any() and not compare(got[differ], exp[differ], *tol) and
                not compare(got[rest], own[rest], *tol))


def _compare_grads(prog, o, t, classes: set) -> list:
    from .fuzz_programs import compare
    if o.terms != t.terms:
        return [f"loss terms {o.terms}, torch {t.terms}"]
    out = []
    for k, (g, b) in enumerate(zip(o.grads, t.grads)):
        if (g is None) != (b is None):
            out.append(f"grad of i{prog.grad_inputs[k]} is {'None' if g is None else 'set'}, torch's is not")
        elif g is not None:
            scale = float(np.max(np.abs(b[np.isfinite(b)]), initial=0.0))
            msg = compare(g, b, 1e-4 + 1e-4 * scale, 1e-3)
            if msg:
                if _nonsmooth(prog, o):
                    classes.add("grad_at_nonsmooth")
                else:
                    out.append(f"grad of i{prog.grad_inputs[k]} differs from torch's: {msg}")
    return out


def _nonsmooth(prog, o) -> bool:
    """Not a smooth point: a special or near-zero input, a non-finite or huge value on the way, or an op
    with kinks and ties (where ggmlgrad and torch may pick different subgradients)."""
    for a in prog.inputs:
        a = np.asarray(a, np.float64)
        if a.size and (not np.all(np.isfinite(a)) or np.abs(a).max() > 1e3 or np.abs(a).min() < 1e-6):
            return True
        if a.size != np.unique(a).size:
            return True                          # ties (max, sort, clamp between equal values)
    return any(v is None or not np.all(np.isfinite(v)) or (v.size and np.abs(v).max() > 1e4) for v in o.values)
