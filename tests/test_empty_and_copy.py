"""Empty tensors never reach ggml as nodes (a 0-byte graph tensor aborts ggml), and copying
or pickling a tensor copies its value instead of aliasing its device memory."""
from __future__ import annotations

import copy
import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ggmlgrad as gg

_EMPTY_SCRIPT = textwrap.dedent("""
    import numpy as np, ggmlgrad as gg
    for graph in (False, True):
        with gg.graph_mode(graph):
            x = gg.zeros(0, 3, requires_grad=True)
            assert ((x * 2.0) * 3.0).detach().numpy().shape == (0, 3)
            assert float(x.sum()) == 0.0
            assert x.sum(1).detach().numpy().shape == (0,)
            np.testing.assert_array_equal(x.sum(0).detach().numpy(), np.zeros(3))
            np.testing.assert_array_equal((gg.zeros(3, 0) @ gg.zeros(0, 4)).numpy(), np.zeros((3, 4)))
            (x * x).sum().backward()
            assert x.grad.shape == (0, 3)
            assert gg.cat([gg.zeros(0, 3), gg.ones(2, 3)]).numpy().sum() == 6.0
            assert np.isnan(x.mean().item())
            assert np.isnan(x.mean(0).detach().numpy()).all()
            w = gg.zeros(4, 0, requires_grad=True)
            b = gg.ones(4, requires_grad=True)
            y = gg.linear(gg.zeros(2, 0), w, b)
            np.testing.assert_array_equal(y.detach().numpy(), np.ones((2, 4)))
            y.sum().backward()
            np.testing.assert_array_equal(b.grad.numpy(), np.full(4, 2.0))
            assert w.grad.shape == (4, 0)
            for f in (lambda t: t.softmax(-1), lambda t: t.log_softmax(0), lambda t: t.relu(),
                      lambda t: t.exp(), lambda t: t.clamp(0, 1), lambda t: gg.where(t > 0, t, 1.0),
                      lambda t: gg.maximum(t, gg.zeros(1, 3)), lambda t: t.reshape(3, 0)):
                assert f(gg.zeros(0, 3)).numpy().size == 0
    print("EMPTY-OK")
""")


def test_empty_tensors_survive_every_op_in_a_subprocess():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    r = subprocess.run([sys.executable, "-c", _EMPTY_SCRIPT], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0 and "EMPTY-OK" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("graph", [False, True])
def test_deepcopy_owns_its_memory(graph):
    with gg.graph_mode(graph):
        a = gg.tensor([1.0, 2.0, 3.0], requires_grad=True)
        (a * a).sum().backward()
        b = copy.deepcopy(a)
        with gg.no_grad():
            b.add_(10.0)
        np.testing.assert_array_equal(a.detach().numpy(), [1.0, 2.0, 3.0])
        np.testing.assert_array_equal(b.detach().numpy(), [11.0, 12.0, 13.0])
        assert b.requires_grad and b.is_leaf
        np.testing.assert_array_equal(b.grad.numpy(), [2.0, 4.0, 6.0])
        assert b.grad is not a.grad
        with pytest.raises(RuntimeError, match="leaf"):
            copy.deepcopy(a * 2)


def test_pickle_round_trip_by_value():
    for dtype in ("float32", "float16", "bfloat16", "int32"):
        t = gg.tensor(np.arange(6).reshape(2, 3) - 2.5 if dtype != "int32" else np.arange(6) - 2, dtype=dtype)
        u = pickle.loads(pickle.dumps(t))
        assert u.dtype is t.dtype and u.shape == t.shape
        np.testing.assert_array_equal(u.numpy(), t.numpy())
    with pytest.raises(TypeError):
        copy.copy(gg.ones(2)._storage)


def test_parameter_shares_the_version_counter_of_its_data():
    data = gg.ones(3)
    p = gg.nn.Parameter(data)
    y = (p * p).sum()
    with gg.no_grad():
        data.mul_(3.0)  # writes p's memory through the other name
    with pytest.raises(RuntimeError, match="modified in place"):
        y.backward()


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
def test_linear_with_zero_in_features_has_gradients_in_every_mode(graph):
    """in_features 0: the output is the bias; found by the op-program fuzzer (graph mode raised)."""
    with gg.graph_mode(graph):
        x = gg.zeros(1, 4, 0, requires_grad=True)
        w = gg.zeros(3, 0, requires_grad=True)
        b = gg.tensor([1.0, 2.0, 3.0], requires_grad=True)
        y = gg.linear(x, w, b)
        (y * 2.0).sum().backward()
        np.testing.assert_array_equal(y.detach().numpy(), np.broadcast_to([1.0, 2.0, 3.0], (1, 4, 3)))
        np.testing.assert_array_equal(b.grad.numpy(), [8.0, 8.0, 8.0])
        assert x.grad.shape == (1, 4, 0) and w.grad.shape == (3, 0)
