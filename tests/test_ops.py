"""Table-driven op tests: every OpInfo's forward against NumPy float64 and its gradients
against central finite differences of the float64 reference, in eager mode, graph mode and
inside gg.capture (recorded once, replayed: forward and backward in one captured function)."""
from __future__ import annotations

import numpy as np
import pytest

import ggmlgrad as gg
from conftest import device_tolerances
from ggmlgrad.ops import REGISTRY
from ggmlgrad.testing.opinfo import (INTERNAL_OPS, all_opinfos, input_arrays, numeric_grad, tensor_indices,
                                     with_tensors)

OPINFOS = all_opinfos()


def _cases():
    for info in OPINFOS:
        rng = np.random.default_rng(abs(hash(info.name)) % 2**32)
        for i, s in enumerate(info.samples(rng)):
            yield pytest.param(info, s, id=f"{info.name}-{i}")


def _to_gg(sample, requires_grad):
    idx = tensor_indices(sample)
    targs = []
    for i, (a, arr) in enumerate(zip(sample.args, _arrays_at(sample))):
        if arr is None:
            targs.append(a)
        elif arr.dtype.kind == "i":
            targs.append(gg.tensor(arr, dtype=gg.int32))
        else:
            targs.append(gg.tensor(arr, requires_grad=requires_grad and i not in sample.nondiff))
    return targs, idx


def _arrays_at(sample):
    """Per argument: the array its tensor is made from, or None for a plain argument."""
    out = [None] * len(sample.args)
    for i, a in zip(tensor_indices(sample), input_arrays(sample)):
        out[i] = a
    return out


def _ref_inputs(sample):
    # The reference sees exactly the float32-rounded values ggmlgrad sees, in float64.
    return [np.asarray(a, dtype=np.float32).astype(np.float64) if isinstance(a, np.ndarray) and np.asarray(a).dtype.kind == "f"
            else a for a in sample.args]


def _diff_inputs(info, sample, idx):
    if not info.grad:
        return []
    return [i for i in idx if i not in sample.nondiff and np.asarray(sample.args[i]).dtype.kind == "f"]


def _run_eager_or_graph(info, sample, graph, weight, diff):
    """(output, {input index: gradient}) computed in eager or graph mode."""
    with gg.graph_mode(graph):
        args, _ = _to_gg(sample, requires_grad=bool(diff))
        out = info.fn(*args, **sample.kwargs)
        got = out.detach().numpy().astype(np.float64)
        if not diff:
            return got, {}
        (out * gg.tensor(weight.astype(np.float32))).sum().backward()
        for i in diff:
            assert args[i].grad is not None, f"{info.name}: input {i} got no gradient"
        return got, {i: args[i].grad.numpy() for i in diff}


def _run_captured(info, sample, weight, diff):
    """(output, gradients) from a gg.capture of forward + backward, replayed after the recording
    (the second call must not reuse the first one's values: the inputs are uploaded again)."""
    idx = tensor_indices(sample)

    def fn(w, *tensors):
        for i, t in zip(idx, tensors):
            if i in diff:
                t.requires_grad_(True)
        out = info.fn(*with_tensors(sample, tensors), **sample.kwargs)
        if not diff:
            return out
        (out * w).sum().backward()
        return (out,) + tuple(t.grad for i, t in zip(idx, tensors) if i in diff)

    captured = gg.capture(fn)
    arrays = input_arrays(sample)
    if not info.capturable:   # computed on the host (int32 reductions): a capture refuses the read
        with pytest.raises(gg.CaptureError):
            captured(weight.astype(np.float32), *arrays)
        return None
    for _ in range(2):
        res = captured(weight.astype(np.float32), *arrays)
    if not diff:
        return np.asarray(res, dtype=np.float64), {}
    return np.asarray(res[0], dtype=np.float64), dict(zip(diff, res[1:]))


@pytest.mark.parametrize("info,sample", list(_cases()))
@pytest.mark.parametrize("mode", ["eager", "graph", "capture"])
def test_forward_and_grad(info, sample, mode):
    ref_args = _ref_inputs(sample)
    expected = np.asarray(info.ref(*ref_args, **sample.kwargs), dtype=np.float64)
    idx = tensor_indices(sample)
    diff = _diff_inputs(info, sample, idx)
    weight = np.random.default_rng(0).standard_normal(expected.shape)
    if mode == "capture":
        res = _run_captured(info, sample, weight, diff)
        if res is None:
            return
    else:
        res = _run_eager_or_graph(info, sample, mode == "graph", weight, diff)
    got, grads = res
    assert got.shape == expected.shape, f"{info.name}: shape {got.shape} != {expected.shape}"
    atol, rtol, grad_atol, grad_rtol = device_tolerances(info)   # the OpInfo's, but per op on a device
    np.testing.assert_allclose(got, expected, atol=atol, rtol=rtol)
    for i in diff:
        numeric = numeric_grad(lambda *a: info.ref(*a, **sample.kwargs), ref_args, i, weight, info.fd_eps)
        np.testing.assert_allclose(grads[i], numeric, atol=grad_atol, rtol=grad_rtol,
                                   err_msg=f"{info.name}: gradient of input {i} ({mode})")


def _mode_cases():
    """Forward in check mode: each entry's first sample and every non-finite one."""
    for info in OPINFOS:
        rng = np.random.default_rng(abs(hash(info.name)) % 2**32)
        for i, s in enumerate(info.samples(rng)):
            if i == 0 or info.name.endswith("_nonfinite"):
                yield pytest.param(info, s, id=f"{info.name}-{i}")


def _expected(info, sample):
    return np.asarray(info.ref(*_ref_inputs(sample), **sample.kwargs), dtype=np.float64)


@pytest.mark.parametrize("info,sample", list(_mode_cases()))
def test_forward_check_mode(info, sample):
    with gg.graph_mode(True, check=True):
        args, _ = _to_gg(sample, requires_grad=False)
        got = info.fn(*args, **sample.kwargs).numpy().astype(np.float64)
    atol, rtol = device_tolerances(info)[:2]
    np.testing.assert_allclose(got, _expected(info, sample), atol=atol, rtol=rtol)


def test_every_registered_op_is_covered():
    covered = {c for info in OPINFOS for c in info.covers} | set(INTERNAL_OPS)
    missing = sorted(set(REGISTRY) - covered)
    assert not missing, f"ops without an OpInfo entry: {missing}"
    unknown = sorted(covered - set(REGISTRY))
    assert not unknown, f"OpInfo entries name unknown ops: {unknown}"
