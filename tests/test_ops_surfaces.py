"""The public surfaces generated from the op declarations (ops/decl.py, tensor/surfaces.py):
``Tensor`` methods, ``gg.*`` functions and ``gg.nn.functional`` entries."""
from __future__ import annotations

import dataclasses
import doctest
import inspect

import numpy as np
import pytest

import ggmlgrad as gg
import ggmlgrad.nn.functional as F
from ggmlgrad.tensor import functional as tf
from ggmlgrad.ops.decl import Expose, expose
from ggmlgrad.ops.registry import REGISTRY
from ggmlgrad.tensor import surfaces

# The public signatures before the redesign (hand-written then): generation must keep them.
SIGNATURES = {
    (gg.Tensor, "gelu"): "(self, approximate='none')",
    (gg.Tensor, "softplus"): "(self, beta=1.0, threshold=20.0)",
    (gg.Tensor, "leaky_relu"): "(self, negative_slope=0.01)",
    (gg.Tensor, "elu"): "(self, alpha=1.0)",
    (gg.Tensor, "softmax"): "(self, dim=None, *, axis=None)",
    (gg.Tensor, "log_softmax"): "(self, dim=None, *, axis=None)",
    (gg.Tensor, "exp"): "(self)",
    (gg.Tensor, "clone"): "(self)",
    (gg, "relu"): "(x)",
    (gg, "gelu"): "(x, approximate='none')",
    (gg, "softmax"): "(x, dim=None, *, axis=None)",
    (gg, "floor"): "(x)",
    (gg.Tensor, "sum"): "(self, axis=None, keepdim=False, dim=None, *, keepdims=None)",
    (gg.Tensor, "amax"): "(self, dim=None, keepdim=False, *, axis=None, keepdims=None)",
    (gg, "mean"): "(x, axis=None, keepdim=False, dim=None, *, keepdims=None)",
    (gg, "argmin"): "(x, dim=None, keepdim=False, *, axis=None, keepdims=None)",
    (gg, "var"): "(x, dim=None, *, correction=None, keepdim=False, unbiased=None, axis=None, keepdims=None)",
    (F, "relu"): "(input)",
    (F, "leaky_relu"): "(input, negative_slope=0.01)",
    (F, "softplus"): "(input, beta=1.0, threshold=20.0)",
}


def _exposed():
    return [(d, kind, name) for d in REGISTRY.values() if d.expose is not None for kind, name in d.expose.names().items()]


def _where(kind):
    return {"method": gg.Tensor, "function": gg, "functional": F}[kind]


@pytest.mark.parametrize("owner,name", list(SIGNATURES))
def test_public_signatures_are_kept(owner, name):
    assert str(inspect.signature(getattr(owner, name))) == SIGNATURES[(owner, name)]


def test_every_declared_surface_is_generated_and_exported():
    assert len(_exposed()) >= 45
    for opdef, kind, name in _exposed():
        fn = getattr(_where(kind), name)
        assert fn.__code__.co_filename.endswith(f"<surface {kind} {name}>"), (opdef.name, kind)
        if kind == "function":
            assert name in gg.__dict__ and name in tf.__all__
        if kind == "functional":
            assert name in F.__all__


def test_generated_surfaces_call_apply_directly():
    """No wrapper layer on the hot path: the generated code calls the autograd layer's apply itself."""
    for opdef, kind, name in _exposed():
        fn = getattr(_where(kind), name)
        assert "_apply" in fn.__code__.co_names and "op" not in fn.__code__.co_names, name
        assert not fn.__code__.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS), name


def test_generated_docstrings_run_as_doctests():
    seen = set()
    for opdef, kind, name in _exposed():
        if opdef.name in seen:
            continue
        seen.add(opdef.name)
        fn = getattr(_where(kind), name)
        assert ">>>" in fn.__doc__, f"{opdef.name}: its declaration gives no example"
        parser, runner = doctest.DocTestParser(), doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
        runner.run(parser.get_doctest(fn.__doc__, {}, name, None, 0))
        assert runner.failures == 0, f"{opdef.name}: its example fails"


def test_same_values_on_every_surface():
    x = gg.tensor(np.array([[-1.5, 0.25, 2.0]], np.float32))
    for a, b, c in [(x.gelu(approximate="tanh"), gg.gelu(x, "tanh"), F.gelu(x, "tanh")),
                    (x.softmax(0), gg.softmax(x, axis=0), F.softmax(x, dim=0)),
                    (x.softplus(2.0, 1.0), gg.softplus(x, beta=2.0, threshold=1.0), F.softplus(x, 2.0, 1.0))]:
        np.testing.assert_array_equal(a.numpy(), b.numpy())
        np.testing.assert_array_equal(a.numpy(), c.numpy())


def test_activation_modules_are_generated_like_the_hand_written_ones():
    """nn.GELU & co.: the op's public arguments as constructor arguments and attributes, PyTorch's repr."""
    for d in REGISTRY.values():
        if d.expose is not None and d.expose.module:
            assert getattr(gg.nn, d.expose.module).forward.__code__.co_filename.endswith(
                f"<module {d.expose.module}.forward>")
    assert str(inspect.signature(gg.nn.Softplus)) == "(beta=1.0, threshold=20.0)"
    assert repr(gg.nn.Sequential(gg.nn.GELU("tanh"), gg.nn.LeakyReLU(0.2), gg.nn.ReLU())) == (
        "Sequential(\n  (0): GELU(approximate='tanh')\n  (1): LeakyReLU(negative_slope=0.2)\n  (2): ReLU()\n)")
    x = gg.tensor(np.array([-2.0, 0.5, 3.0], np.float32))
    np.testing.assert_array_equal(gg.nn.ELU(alpha=0.3)(x).numpy(), F.elu(x, 0.3).numpy())
    np.testing.assert_array_equal(gg.nn.Softplus(2.0, 1.0)(x).numpy(), F.softplus(x, 2.0, 1.0).numpy())


def test_int32_reductions_follow_the_declared_host_policy():
    """sum/amax/argmax of int32 are exact (on the host), beyond float32's 2**24; float tensors use the op."""
    big = np.array([[2 ** 24 + 1, 3], [2 ** 24, 2 ** 24 + 3]], np.int32)
    x = gg.tensor(big)
    assert x.sum().item() == int(big.astype(np.int64).sum())
    assert gg.amax(x, dim=0).tolist() == big.max(0).tolist()
    assert x.argmax(1, keepdims=True).tolist() == big.argmax(1)[:, None].tolist()
    assert gg.sum(gg.tensor(big.astype(np.float32)), axis=[0, 1]).dtype is gg.float32


def test_a_declaration_is_all_a_new_surface_needs():
    """An Expose on an op is enough for make_surface to write its function (here: ``scale`` as ``times``)."""
    opdef = dataclasses.replace(REGISTRY["scale"], expose=Expose(function="times", doc="x * c.",
                                                                   example=">>> 1\n1"))
    times = surfaces.make_surface(opdef, "function", "times")
    assert str(inspect.signature(times)) == "(x, c)"
    assert times(gg.tensor([1.0, 2.0]), 3.0).tolist() == [3.0, 6.0]
    assert times.__doc__.startswith("x * c.")


def test_two_ops_exposing_one_name_is_an_error():
    fake = dataclasses.replace(REGISTRY["exp"], name="exp_again")
    REGISTRY["exp_again"] = fake
    try:
        with pytest.raises(RuntimeError, match="both expose"):
            surfaces.surfaces("function")
    finally:
        del REGISTRY["exp_again"]


def test_expose_refuses_unknown_surfaces():
    with pytest.raises(ValueError, match="unknown surfaces"):
        expose("relu", "module")
