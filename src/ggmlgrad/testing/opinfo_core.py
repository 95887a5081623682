"""OpInfo entries for the core arithmetic, reductions, reshape/permute, matmul and basic activations."""
from __future__ import annotations

import numpy as np

import ggmlgrad as gg
from .opinfo import INTERNAL_OPS, OpInfo, Sample, bad, errors, rand_shapes_binary, register
from .opinfo_nonfinite import unary_specials


def _op():
    from ..ops import op
    return op


def _binary_samples(rng, positive_b=False):
    out = []
    for sa, sb in rand_shapes_binary(rng):
        a = rng.standard_normal(sa)
        b = rng.standard_normal(sb)
        if positive_b:
            b = np.abs(b) + 0.5
        out.append(Sample((a, b)))
    return out


def _unary_samples(rng, positive=False, away_from_zero=False):
    out = []
    for s in [(3, 4), (), (1,), (2, 3, 4), (2, 1, 3, 2)]:
        x = rng.standard_normal(s)
        if positive:
            x = np.abs(x) + 0.3
        if away_from_zero:
            x = np.where(np.abs(x) < 0.2, 0.5, x)
        out.append(Sample((x,)))
    return out


register(
    OpInfo("add", ("add",), lambda a, b: a + b, lambda a, b: a + b, _binary_samples),
    OpInfo("sub", ("sub",), lambda a, b: a - b, lambda a, b: a - b, _binary_samples),
    OpInfo("mul", ("mul",), lambda a, b: a * b, lambda a, b: a * b, _binary_samples),
    OpInfo("div", ("div",), lambda a, b: a / b, lambda a, b: a / b, lambda r: _binary_samples(r, positive_b=True)),
    OpInfo("pow", ("pow",), lambda a, b: a ** b, lambda a, b: a ** b,
           lambda r: [Sample((np.abs(r.standard_normal((3, 4))) + 0.5, r.standard_normal((3, 4)))),
                      Sample((np.abs(r.standard_normal((2, 3))) + 0.5, r.standard_normal((3,))))]),
    OpInfo("scalar_mul", ("scale",), lambda a: a * 2.5, lambda a: a * 2.5, _unary_samples),
    OpInfo("scalar_rmul_div", ("scale",), lambda a: 3.0 * a / 4.0, lambda a: 3.0 * a / 4.0, _unary_samples),
    OpInfo("scalar_add", ("add_scalar",), lambda a: a + 1.5, lambda a: a + 1.5, _unary_samples),
    OpInfo("scalar_rsub", ("rsub_scalar",), lambda a: 2.0 - a, lambda a: 2.0 - a, _unary_samples),
    OpInfo("scalar_rsub_zero", ("rsub_scalar",), lambda a: 0.0 - a, lambda a: 0.0 - a,
           lambda r: _unary_samples(r) + [Sample((np.array([0.0, -0.0, 1.5, -np.inf, np.inf, np.nan]),))],
           grad=False),
    OpInfo("scalar_rdiv", ("reciprocal", "scale"), lambda a: 2.0 / a, lambda a: 2.0 / a,
           lambda r: _unary_samples(r, positive=True)),
    OpInfo("reciprocal", ("reciprocal",), lambda a: a.reciprocal(), lambda a: 1.0 / a,
           lambda r: _unary_samples(r, positive=True)),
    # the c / x op the internal callers use (clip_grad_norm: max_norm / norm in one rounding)
    OpInfo("rdiv_scalar", ("rdiv_scalar",), lambda a: _op().rdiv_scalar(a, c=2.0), lambda a: 2.0 / a,
           lambda r: _unary_samples(r, positive=True)),
    OpInfo("scalar_rpow", ("rpow_scalar",), lambda a: 2.5 ** a, lambda a: 2.5 ** a, _unary_samples),
    OpInfo("scalar_rpow_negative_base", ("rpow_scalar",), lambda a: (-2.0) ** a, lambda a: (-2.0) ** a,
           lambda r: [Sample((np.array([[0.0, 1.0, 2.0, -3.0], [4.0, -1.0, 5.0, 0.0]]),))], grad=False),
    OpInfo("neg", ("neg",), lambda a: -a, lambda a: -a, _unary_samples),
    OpInfo("exp", ("exp",), lambda a: a.exp(), np.exp, _unary_samples),
    OpInfo("log", ("log",), lambda a: a.log(), np.log, lambda r: _unary_samples(r, positive=True)),
    OpInfo("sqrt", ("sqrt",), lambda a: a.sqrt(), np.sqrt, lambda r: _unary_samples(r, positive=True)),
    OpInfo("abs", ("abs",), lambda a: abs(a), np.abs, lambda r: _unary_samples(r, away_from_zero=True)),
    OpInfo("sign", ("sign",), gg.sign, np.sign, lambda r: _unary_samples(r, away_from_zero=True), grad=False),
    OpInfo("floor", ("floor",), gg.floor, np.floor, lambda r: _unary_samples(r, away_from_zero=True), grad=False),
    OpInfo("floor_divide", ("floor", "div"), lambda a, b: a // b, lambda a, b: np.floor(a / b),
           lambda r: [Sample((r.standard_normal((3, 4)) * 5, np.abs(r.standard_normal((4,))) + 0.7))], grad=False),
    OpInfo("remainder", ("floor", "value_with_grad_of"), lambda a, b: a % b, lambda a, b: a - np.floor(a / b) * b,
           lambda r: [Sample((r.standard_normal((3, 4)) * 5, np.abs(r.standard_normal((4,))) + 0.7))]),
    OpInfo("square", ("square",), lambda a: a.square(), np.square, _unary_samples),
    OpInfo("clone", ("clone",), lambda a: a.clone(), lambda a: a.copy(), _unary_samples),
    OpInfo("pow_int", ("pow_scalar",), lambda a: a ** 3, lambda a: a ** 3, _unary_samples),
    OpInfo("pow_int_even", ("pow_scalar",), lambda a: a ** 4, lambda a: a ** 4, _unary_samples),
    OpInfo("pow_frac", ("pow_scalar",), lambda a: a ** 1.7, lambda a: a ** 1.7,
           lambda r: _unary_samples(r, positive=True)),
    OpInfo("pow_neg", ("pow_scalar",), lambda a: a ** -2, lambda a: a ** -2.0,
           lambda r: _unary_samples(r, positive=True)),
    OpInfo("sum_all", ("sum",), lambda a: a.sum(), lambda a: np.sum(a), _unary_samples),
    OpInfo("sum_axis", ("sum",), lambda a, axis, keepdim: a.sum(axis=axis, keepdim=keepdim),
           lambda a, axis, keepdim: np.sum(a, axis=axis, keepdims=keepdim),
           lambda r: [Sample((r.standard_normal((3, 4, 5)), ax, kd)) for ax in (0, 1, 2, -1, (0, 2), (1, 2))
                      for kd in (False, True)]),
    OpInfo("mean_axis", ("mean",), lambda a, axis, keepdim: a.mean(axis=axis, keepdim=keepdim),
           lambda a, axis, keepdim: np.mean(a, axis=axis, keepdims=keepdim),
           lambda r: [Sample((r.standard_normal((3, 4, 5)), ax, kd)) for ax in (None, 0, 2, (0, 1))
                      for kd in (False, True)] + [Sample((r.standard_normal(()), None, False))]),
    OpInfo("reshape", ("reshape",), lambda a, s: a.reshape(s), lambda a, s: a.reshape(s),
           lambda r: [Sample((r.standard_normal((3, 4)), (2, 6))), Sample((r.standard_normal((2, 3, 4)), (-1,))),
                      Sample((r.standard_normal(()), (1, 1)))]),
    OpInfo("permute", ("permute",), lambda a, p: a.permute(p), lambda a, p: np.transpose(a, p),
           lambda r: [Sample((r.standard_normal((2, 3, 4)), (2, 0, 1))), Sample((r.standard_normal((3, 4)), (1, 0))),
                      Sample((r.standard_normal((2, 3, 4, 5)), (3, 1, 0, 2)))]),
    OpInfo("matmul", ("matmul", "transpose_last", "sum_to_shape"), gg.matmul, np.matmul,
           lambda r: [Sample((r.standard_normal(a), r.standard_normal(b))) for a, b in
                      [((3, 4), (4, 5)), ((4,), (4, 3)), ((3, 4), (4,)), ((4,), (4,)), ((2, 3, 4), (4, 5)),
                       ((2, 3, 4), (2, 4, 5)), ((3, 4), (2, 4, 5)), ((2, 1, 3, 4), (3, 4, 2))]]),
    OpInfo("linear", ("linear", "outer_grad"), gg.linear, lambda x, w, b: x @ w.T + b,
           lambda r: [Sample((r.standard_normal((5, 3)), r.standard_normal((4, 3)), r.standard_normal((4,)))),
                      Sample((r.standard_normal((2, 5, 3)), r.standard_normal((4, 3)), r.standard_normal((4,))))]),
    OpInfo("linear_nobias", ("linear",), lambda x, w: gg.linear(x, w), lambda x, w: x @ w.T,
           lambda r: [Sample((r.standard_normal((5, 3)), r.standard_normal((4, 3))))]),
    OpInfo("relu", ("relu", "relu_backward"), gg.relu, lambda a: np.maximum(a, 0), lambda r: _unary_samples(r, away_from_zero=True)),
    OpInfo("tanh", ("tanh", "tanh_backward"), gg.tanh, np.tanh, _unary_samples),
    OpInfo("sigmoid", ("sigmoid",), gg.sigmoid, lambda a: 1 / (1 + np.exp(-a)), _unary_samples),
    OpInfo("sin", ("sin", "cos"), lambda a: a.sin(), np.sin, lambda r: _unary_samples(r) + [Sample((r.uniform(-9, 9, (4, 5)),))],
           nonfinite=unary_specials, error_inputs=(bad(TypeError, "sin", np.ones(3, np.float16)),)),
    OpInfo("cos", ("cos", "sin"), gg.cos, np.cos, lambda r: _unary_samples(r) + [Sample((r.uniform(-9, 9, (4, 5)),))],
           nonfinite=unary_specials, error_inputs=(bad(TypeError, "cos", np.ones(3, np.float16)),)),
)

INTERNAL_OPS.update({
    "step": "boolean attention masks (tests/test_nn_functional.py sdpa masks)",
    "fill_like": "backward seeds and fill_/zero_ (tests/test_tensor.py)",
    "expand_as": "reduction backward (sum_axis, mean_axis)",
    "cast": "dtype conversion tests (tests/test_tensor.py)",
})


# ---------------------------------------------------------------- error inputs (raised before ggml, in every mode)
def _ones(*s, dtype=np.float64):
    return np.ones(s, dtype)


_F23, _I3 = _ones(2, 3), _ones(3, dtype=np.int32)
V, T = ValueError, TypeError

errors("add", bad(V, "add", _F23, _ones(3, 4)), bad(T, "tensor", _F23, "x"))
errors("sub", bad(V, "sub", _ones(2, 3, 4), _ones(3, 3, 4)))
errors("mul", bad(V, "mul", _F23, _ones(3, 2)), bad(T, "mul", _ones(3, dtype=np.float16), _ones(3)))
errors("pow", bad(V, "pow", _F23, _ones(4)))
errors("exp", bad(T, "exp", _I3.astype(np.float16)))   # int32 computes in float32 (torch); float16 is refused
errors("matmul", bad(V, "matmul", _F23, _ones(4, 5)), bad(V, "matmul", _ones(3), _ones(4)),
       bad(V, "matmul", _ones(2, 2, 3), _ones(3, 3, 4)), bad(V, "matmul", np.array(2.0), _ones(2)),
       bad(T, "matmul", _I3, _ones(3, 2)), bad(V, "matmul", _ones(0, 3), _ones(2, 4)))
errors("linear_nobias", bad(V, "linear", _ones(4, 3), _ones(5, 4)))
errors("reshape", bad(V, "reshape", _F23, (4, 2)), bad(V, "reshape", _F23, (-1, -1)),
       bad(V, "reshape", _ones(2, 2, 2, 2), (2, 2, 2, 2, 1)))
errors("permute", bad(V, "permute", _F23, (0, 0)), bad(V, "permute", _F23, (0, 1, 2)))
errors("sum_axis", bad(V, "sum", _F23, 2, False), bad(V, "sum", _F23, (0, 0), False))
errors("mean_axis", bad(V, "mean", _F23, -3, False), bad(T, "mean", _ones(2, 3, dtype=np.int32), None, False))
