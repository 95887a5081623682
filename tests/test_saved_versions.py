"""Saved-tensor version checks: backward raises "modified by an inplace operation" exactly when
a tensor its rule READS was written in place after the op (torch's saved tensors), and
gradients stay right when an unread input was written (they flow to the grad_fn the input had
when the op ran, as torch's edges do). Each snippet runs in eager, graph and check mode; torch
decides which writes must raise where it is installed, the declared ``saves`` otherwise, and
NumPy float64 / finite-difference references give the values."""
from __future__ import annotations

import numpy as np
import pytest

import ggmlgrad as gg
from ggmlgrad.ops import REGISTRY
from ggmlgrad.testing.opinfo import all_opinfos, input_arrays, tensor_indices

MODES = {"eager": dict(on=False), "graph": dict(on=True), "check": dict(on=True, check=True)}
RNG = np.random.default_rng(7)
A = RNG.uniform(0.5, 1.5, (3, 4)).astype(np.float32) * np.sign(RNG.standard_normal((3, 4))).astype(np.float32)
B = RNG.uniform(0.5, 1.5, (3, 4)).astype(np.float32)
W = RNG.standard_normal((4, 4)).astype(np.float32)


def _f(lib):
    return lib.nn.functional


# name -> (snippet(lib, a, b) -> tensor, which inputs require grad, declared saves among (a, b) here)
CASES = {
    "add": (lambda L, a, b: a + b, (0, 1), ()),
    "sub": (lambda L, a, b: a - b, (0, 1), ()),
    "mul": (lambda L, a, b: a * b, (0, 1), (0, 1)),
    "mul_other_no_grad": (lambda L, a, b: a * b, (0,), (1,)),
    "mul_scalar": (lambda L, a, b: a * 3.0 + b, (0, 1), ()),
    "div": (lambda L, a, b: a / b, (0, 1), (0, 1)),
    "div_other_no_grad": (lambda L, a, b: a / b, (0,), (1,)),
    "neg": (lambda L, a, b: -a + b, (0, 1), ()),
    "exp": (lambda L, a, b: a.exp() + b, (0, 1), ()),
    "log": (lambda L, a, b: b.log() + a, (0, 1), (1,)),
    "sqrt": (lambda L, a, b: b.sqrt() + a, (0, 1), ()),
    "abs": (lambda L, a, b: a.abs() + b, (0, 1), (0,)),
    "square": (lambda L, a, b: a.square() + b, (0, 1), (0,)),
    "pow_scalar": (lambda L, a, b: a ** 3 + b, (0, 1), (0,)),
    "clamp": (lambda L, a, b: a.clamp(-0.9, 0.9) + b, (0, 1), (0,)),
    "maximum": (lambda L, a, b: L.maximum(a, b), (0, 1), (0, 1)),
    "sum_mean": (lambda L, a, b: a.sum(1) + b.mean(1), (0, 1), ()),
    "reshape_permute": (lambda L, a, b: a.reshape(4, 3).permute(1, 0) + b, (0, 1), ()),
    "slice": (lambda L, a, b: a[1:, ::2] + b[:2, 1::2], (0, 1), ()),
    "cat": (lambda L, a, b: L.cat([a, b], 0), (0, 1), ()),
    "clone_expand": (lambda L, a, b: a.clone() + b[:1].expand(3, 4), (0, 1), ()),
    "transpose_matmul": (lambda L, a, b: a.transpose(0, 1) @ b, (0, 1), (0, 1)),
    "matmul_other_no_grad": (lambda L, a, b: a @ b.transpose(0, 1), (0,), (1,)),
    "linear_bias": (lambda L, a, b: _f(L).linear(a[:, :3], b[:, :3], b[0, :3]), (0, 1), (0, 1)),
    "relu": (lambda L, a, b: L.relu(a) + b, (0, 1), ()),
    "tanh": (lambda L, a, b: L.tanh(a) + b, (0, 1), ()),
    "sigmoid": (lambda L, a, b: L.sigmoid(a) + b, (0, 1), ()),
    "softmax": (lambda L, a, b: L.softmax(a, 1) * 2.0 + b, (0, 1), ()),
    "log_softmax": (lambda L, a, b: _f(L).log_softmax(a, 1) + b, (0, 1), ()),
    "sin_cos": (lambda L, a, b: a.sin() + b.cos(), (0, 1), (0, 1)),
    "gelu_silu": (lambda L, a, b: _f(L).gelu(a) + _f(L).silu(b), (0, 1), (0, 1)),
    "amax": (lambda L, a, b: a.amax(1) + b.sum(1), (0, 1), (0,)),
    "logsumexp": (lambda L, a, b: a.logsumexp(1) + b.sum(1), (0, 1), (0,)),
    "var": (lambda L, a, b: a.var(1) + b.sum(1), (0, 1), (0,)),
    "layer_norm": (lambda L, a, b: _f(L).layer_norm(a, (4,)) + b, (0, 1), (0,)),
}


def _run(lib, snippet, grads, write, mode=None):
    """('raise', None) or ('ok', [grad of each leaf]) for: leaves → non-leaf a, b → snippet →
    in-place write to input ``write`` (None: no write) → backward."""
    leaves = [lib.tensor(v, requires_grad=i in grads) for i, v in enumerate((A, B))]
    ctx = gg.graph_mode(**MODES[mode]) if lib is gg else _nullcontext()
    with ctx:
        a, b = [x * 1.0 if x.requires_grad else x.clone() for x in leaves]
        out = snippet(lib, a, b)
        if write is not None:
            (a, b)[write].mul_(-1.5)  # non-leaf (or plain) tensors: recorded on the tape, rebased
        try:
            (out * lib.tensor(np.linspace(0.5, 1.5, out.numel()).astype(np.float32).reshape(out.shape))).sum().backward()
        except RuntimeError as e:
            assert "modified in place" in str(e) or "inplace" in str(e), e
            return "raise", None
        return "ok", [None if x.grad is None else x.grad.detach().numpy().astype(np.float64) for x in leaves]


class _nullcontext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("name", list(CASES))
def test_write_after_op_raises_exactly_when_the_backward_reads_it(name, mode):
    snippet, grads, saves = CASES[name]
    status, clean = _run(gg, snippet, grads, None, mode)
    assert status == "ok"
    for write in (0, 1):
        status, got = _run(gg, snippet, grads, write, mode)
        assert status == ("raise" if write in saves else "ok"), (name, write, status)
        if status == "ok":  # an unread input was written: the gradients are those of the op before the write
            for g, c in zip(got, clean):
                assert (g is None) == (c is None)
                if g is not None:
                    np.testing.assert_allclose(g, c, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", list(CASES))
def test_same_errors_and_gradients_as_torch(name):
    torch = pytest.importorskip("torch")
    snippet, grads, _ = CASES[name]
    for write in (None, 0, 1):
        want, want_g = _run(torch, snippet, grads, write)
        got, got_g = _run(gg, snippet, grads, write, "eager")
        assert got == want, (name, write, got, want)
        if got == "ok":
            for g, w in zip(got_g, want_g):
                assert (g is None) == (w is None)
                if g is not None:
                    np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_torch_example_add_then_write_does_not_raise_and_mul_write_keeps_the_old_path():
    for mode in MODES:
        with gg.graph_mode(**MODES[mode]):
            x = gg.tensor([1.0, -2.0, 3.0], requires_grad=True)
            y = x * 2
            z = y + 1
            y.mul_(3)  # z's backward reads nothing: its gradient goes to y's grad_fn BEFORE the write
            z.sum().backward()
            np.testing.assert_allclose(x.grad.numpy(), [2.0, 2.0, 2.0])
            x.grad = None
            y2 = x * 2
            z2 = y2 * y2
            y2.add_(1)
            with pytest.raises(RuntimeError, match="modified in place"):
                z2.sum().backward()


def test_every_differentiable_op_declares_its_saved_inputs_or_keeps_the_safe_default():
    for name, opdef in REGISTRY.items():
        if opdef.backward is None or not opdef.differentiable:
            continue
        assert opdef.saved_always is None or isinstance(opdef.saved_always, frozenset), name
    assert REGISTRY["add"].saved_always == frozenset() and REGISTRY["log"].saved_always == {0}
    assert REGISTRY["mul"].saved_if == {0: (1,), 1: (0,)}
    with pytest.raises(ValueError, match="saves"):
        from ggmlgrad.ops.registry import _resolve_saves
        _resolve_saves("x", ("a",))


def _opinfo_cases():
    for info in all_opinfos():
        if info.grad:
            yield pytest.param(info, id=info.name)


@pytest.mark.parametrize("info", list(_opinfo_cases()))
def test_declared_saves_are_sound_for_every_opinfo(info):
    """A float input written in place (no grad) after the op: backward either raises, or gives
    exactly the gradients of the unwritten run (a rule reading an input it did not declare would
    see the new values). The clean gradients are checked against finite differences by test_ops."""
    sample = info.samples(np.random.default_rng(3))[0]
    idx = tensor_indices(sample)
    floats = [i for i, arr in zip(idx, input_arrays(sample)) if arr.dtype.kind == "f" and i not in sample.nondiff]
    for write in [None] + floats:
        res = _opinfo_run(info, sample, write)
        if write is None:
            clean = res
            assert clean is not None
        elif res is not None:
            for i in floats:
                np.testing.assert_allclose(res[i], clean[i], rtol=1e-5, atol=1e-6,
                                           err_msg=f"{info.name}: input {write} written, gradient of {i}")


def _opinfo_run(info, sample, write):
    arrays = dict(zip(tensor_indices(sample), input_arrays(sample)))
    args = []
    for i, a in enumerate(sample.args):
        arr = arrays.get(i)
        if arr is None:
            args.append(a)
        elif arr.dtype.kind == "i":
            args.append(gg.tensor(arr, dtype=gg.int32))
        else:
            args.append(gg.tensor(arr, requires_grad=i not in sample.nondiff))
    out = info.fn(*args, **sample.kwargs)
    if write is not None:
        with gg.no_grad():
            args[write].mul_(-1.5).add_(0.25)
    weight = gg.tensor(np.random.default_rng(0).standard_normal(out.shape).astype(np.float32))
    try:
        (out * weight).sum().backward()
    except RuntimeError as e:
        assert "modified in place" in str(e), e
        return None
    return {i: (np.zeros(args[i].shape) if args[i].grad is None else args[i].grad.numpy().astype(np.float64))
            for i in arrays if isinstance(args[i], gg.Tensor) and args[i].requires_grad}
