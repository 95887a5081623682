"""Table-driven op tests: every OpInfo's forward against NumPy float64 and its
gradients against central finite differences of the float64 reference."""
from __future__ import annotations

import numpy as np
import pytest

import ggmlgrad as gg
from ggmlgrad.ops import REGISTRY
from ggmlgrad.testing.opinfo import INTERNAL_OPS, all_opinfos

OPINFOS = all_opinfos()


def _cases():
    for info in OPINFOS:
        rng = np.random.default_rng(abs(hash(info.name)) % 2**32)
        for i, s in enumerate(info.samples(rng)):
            yield pytest.param(info, s, id=f"{info.name}-{i}")


def _to_gg(sample, requires_grad):
    targs = []
    idx = sample.tensor_args if sample.tensor_args is not None else tuple(
        i for i, a in enumerate(sample.args) if isinstance(a, np.ndarray))
    for i, a in enumerate(sample.args):
        if i in idx:
            a = np.asarray(a)
            if a.dtype.kind in "iub":
                targs.append(gg.tensor(a.astype(np.int32), dtype=gg.int32))
            else:
                targs.append(gg.tensor(a.astype(np.float32), requires_grad=requires_grad and i not in sample.nondiff))
        else:
            targs.append(a)
    return targs, idx


def _ref_inputs(sample):
    # The reference sees exactly the float32-rounded values ggmlgrad sees, in float64.
    return [np.asarray(a, dtype=np.float32).astype(np.float64) if isinstance(a, np.ndarray) and np.asarray(a).dtype.kind == "f"
            else a for a in sample.args]


@pytest.mark.parametrize("info,sample", list(_cases()))
@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
def test_forward_and_grad(info, sample, graph):
    rng = np.random.default_rng(0)
    with gg.graph_mode(graph):
        args, idx = _to_gg(sample, requires_grad=info.grad)
        out = info.fn(*args, **sample.kwargs)
        ref_args = _ref_inputs(sample)
        expected = np.asarray(info.ref(*ref_args, **sample.kwargs), dtype=np.float64)
        got = out.numpy().astype(np.float64)
        assert got.shape == expected.shape, f"{info.name}: shape {got.shape} != {expected.shape}"
        np.testing.assert_allclose(got, expected, atol=info.atol, rtol=info.rtol)
        if not info.grad:
            return
        diff = [i for i in idx if i not in sample.nondiff and np.asarray(sample.args[i]).dtype.kind == "f"]
        if not diff:
            return
        weight = rng.standard_normal(expected.shape)
        loss = (out * gg.tensor(weight.astype(np.float32))).sum()
        loss.backward()
        for i in diff:
            g = args[i].grad
            assert g is not None, f"{info.name}: input {i} got no gradient"
            numeric = _numeric_grad(info, ref_args, sample, i, weight)
            np.testing.assert_allclose(g.numpy(), numeric, atol=info.grad_atol, rtol=info.grad_rtol,
                                       err_msg=f"{info.name}: gradient of input {i}")


def _mode_cases():
    """Forward in check mode and in a capture: each entry's first sample and every non-finite one."""
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
    np.testing.assert_allclose(got, _expected(info, sample), atol=info.atol, rtol=info.rtol)


@pytest.mark.parametrize("info,sample", list(_mode_cases()))
def test_forward_capture(info, sample):
    """The op recorded by gg.capture and replayed (twice: the replay must not reuse stale values)."""
    idx = sample.tensor_args if sample.tensor_args is not None else tuple(
        i for i, a in enumerate(sample.args) if isinstance(a, np.ndarray))
    arrays = [np.asarray(sample.args[i]) for i in idx]
    arrays = [a.astype(np.int32) if a.dtype.kind in "iub" else a.astype(np.float32) for a in arrays]

    def fn(*tensors):
        args = list(sample.args)
        for i, t in zip(idx, tensors):
            args[i] = t
        return info.fn(*args, **sample.kwargs)

    captured = gg.capture(fn)
    expected = _expected(info, sample)
    if not info.capturable:   # computed on the host (int32 reductions): a capture refuses the read
        with pytest.raises(gg.CaptureError):
            captured(*arrays)
        return
    for _ in range(2):
        got = np.asarray(captured(*arrays), dtype=np.float64)
        np.testing.assert_allclose(got, expected, atol=info.atol, rtol=info.rtol)


def _numeric_grad(info, ref_args, sample, i, weight):
    x = np.array(ref_args[i], dtype=np.float64)
    grad = np.zeros_like(x)
    flat = x.reshape(-1)
    gflat = grad.reshape(-1)
    for k in range(flat.size):
        orig = flat[k]
        vals = []
        for d in (+info.fd_eps, -info.fd_eps):
            flat[k] = orig + d
            a = list(ref_args)
            a[i] = x
            vals.append(np.sum(np.asarray(info.ref(*a, **sample.kwargs)) * weight))
        flat[k] = orig
        gflat[k] = (vals[0] - vals[1]) / (2 * info.fd_eps)
    return grad


def test_every_registered_op_is_covered():
    covered = {c for info in OPINFOS for c in info.covers} | set(INTERNAL_OPS)
    missing = sorted(set(REGISTRY) - covered)
    assert not missing, f"ops without an OpInfo entry: {missing}"
    unknown = sorted(covered - set(REGISTRY))
    assert not unknown, f"OpInfo entries name unknown ops: {unknown}"
