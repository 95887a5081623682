"""The op table on a non-CPU device (tests/test_device_subset.py's device): each op's first sample,
forward and gradients, in eager mode, graph mode and capture, against NumPy float64, with the
tolerances of tests/test_device_subset.py (per op, only where a device's arithmetic differs).
A file of its own: on lavapipe it hit a heap corruption (see README "GPU"), which ends the process.
"""
from __future__ import annotations

import numpy as np
import pytest

import test_ops as table
from ggmlgrad.testing.opinfo import all_opinfos, numeric_grad, tensor_indices
from test_device_subset import DEVICE, WHY_ABSENT, _tolerances, on_device  # noqa: F401  (fixture)

pytestmark = pytest.mark.skipif(DEVICE is None, reason=WHY_ABSENT or "no device")


def _first_samples():
    for info in all_opinfos():
        rng = np.random.default_rng(abs(hash(info.name)) % 2**32)
        sample = next(iter(info.samples(rng)), None)
        if sample is not None:
            yield pytest.param(info, sample, id=info.name)


@pytest.mark.parametrize("info,sample", list(_first_samples()))
@pytest.mark.parametrize("mode", ["eager", "graph", "capture"])
def test_op_table_on_device(info, sample, mode):
    ref_args = table._ref_inputs(sample)
    expected = np.asarray(info.ref(*ref_args, **sample.kwargs), dtype=np.float64)
    diff = table._diff_inputs(info, sample, tensor_indices(sample))
    weight = np.random.default_rng(0).standard_normal(expected.shape)
    if mode == "capture":
        res = table._run_captured(info, sample, weight, diff)
        if res is None:   # computed on the host: the capture refused it, as on the CPU
            return
    else:
        res = table._run_eager_or_graph(info, sample, mode == "graph", weight, diff)
    got, grads = res
    atol, rtol, grad_atol, grad_rtol = _tolerances(info)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, atol=atol, rtol=rtol, err_msg=f"{info.name} on {DEVICE} ({mode})")
    for i in diff:
        numeric = numeric_grad(lambda *a: info.ref(*a, **sample.kwargs), ref_args, i, weight, info.fd_eps)
        np.testing.assert_allclose(grads[i], numeric, atol=grad_atol, rtol=grad_rtol,
                                   err_msg=f"{info.name} on {DEVICE}: gradient of input {i} ({mode})")
