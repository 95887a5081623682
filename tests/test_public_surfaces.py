"""One declaration per public name (issue 11): every public ``Tensor`` method and operator, ``gg.*``
function and ``gg.nn.functional`` entry that reaches an op is generated from a declaration: an op's
``expose`` (ops/decl.py) or a front end's ``public()``; nothing forwards to an op by hand."""
from __future__ import annotations

import doctest
import inspect
import operator

import numpy as np
import pytest

import ggmlgrad as gg
import ggmlgrad.nn.functional as F
from ggmlgrad.engine import Array
from ggmlgrad.ops.decl import PUBLIC, public
from ggmlgrad.tensor import surfaces
from ggmlgrad.tensor.conversion import ConversionMethods
from ggmlgrad.tensor.inplace import InplaceMethods
from ggmlgrad.tensor.new_methods import TypeMethods

# Tensor API that is not an op front end: autograd, memory layout, sizes (written in tensor.py).
TENSOR_API = {"backward", "detach", "requires_grad_", "retain_grad", "register_hook", "contiguous", "is_contiguous", "stride",
              "storage_offset", "data_ptr", "numel", "size", "dim", "__len__", "__init__", "__hash__", "_blank"}
# Mixins of hand-written Tensor methods that are not op forwards: in-place writes (each a Tensor._write
# with version/alias/capture checks), host conversions and device/dtype moves.
NON_OP_MIXINS = (InplaceMethods, ConversionMethods, TypeMethods)   # TypeMethods: torch's new_*/type()
# gg.* functions that are not op front ends: creation, modes, devices, capture, io, grad modes, interop.
GG_API_MODULES = ("ggmlgrad.engine", "ggmlgrad.runtime", "ggmlgrad.capture", "ggmlgrad.io", "ggmlgrad.info",
                  "ggmlgrad.tensor.creation", "ggmlgrad.tensor.interop", "ggmlgrad.tensor.grad_mode",
                  "ggmlgrad.tensor.gradcheck", "ggmlgrad.tensor.tensor:tensor", "ggmlgrad:pending",
                  "ggmlgrad.tensor.legacy", "ggmlgrad.tensor.printing")


def _generated(fn) -> bool:
    """Written out by tensor/surfaces.py from an op's expose (its code's file is ``<surface ...>``)."""
    code = getattr(fn, "__code__", None)
    return code is not None and "<surface " in code.co_filename


def _declared(kind: str, name: str, fn) -> bool:
    return surfaces.INSTALLED.get((kind, name)) is fn or _generated(fn)


def test_every_public_tensor_method_comes_from_a_declaration():
    allowed = set(TENSOR_API)
    for mixin in NON_OP_MIXINS:
        allowed |= set(vars(mixin))
    by_hand = []
    for cls in gg.Tensor.__mro__:
        if cls in (object, Array) or cls in NON_OP_MIXINS:
            continue   # object; Array (the engine's base: shape, dtype, device)
        for name, value in vars(cls).items():
            fn = value.fget if isinstance(value, property) else value
            if not callable(fn) or (name.startswith("_") and not name.endswith("__")) or name in allowed:
                continue
            if isinstance(value, property) and name in ("T", "mT", "is_leaf", "is_pending", "_version"):
                continue   # attribute-like properties (T and mT are permute views)
            if not _declared("method", name, value):
                by_hand.append(f"{cls.__name__}.{name}")
    assert by_hand == [], f"hand-written Tensor methods (declare them: ops/decl.py public/expose): {by_hand}"


def test_every_gg_and_functional_entry_comes_from_a_declaration():
    by_hand = []
    for name, fn in vars(gg).items():
        if name.startswith("_") or inspect.ismodule(fn) or inspect.isclass(fn) or not callable(fn):
            continue
        where = f"{fn.__module__}:{fn.__name__}"
        if any(where.startswith(m) for m in GG_API_MODULES) or not fn.__module__.startswith("ggmlgrad"):
            continue
        if not _declared("function", name, fn):
            by_hand.append(f"gg.{name} ({where})")
    for name in F.__all__:
        if not _declared("functional", name, getattr(F, name)):
            by_hand.append(f"F.{name}")
    assert by_hand == [], f"hand-written public functions (declare them: ops/decl.py public/expose): {by_hand}"


def test_the_checks_see_a_hand_written_method_and_function():
    def shout(self):
        return self
    gg.Tensor.shout = shout
    try:
        with pytest.raises(AssertionError, match="Tensor.shout"):
            test_every_public_tensor_method_comes_from_a_declaration()
    finally:
        del gg.Tensor.shout
    gg.shout = shout
    shout.__module__ = "ggmlgrad.tensor.functional"
    try:
        with pytest.raises(AssertionError, match="gg.shout"):
            test_every_gg_and_functional_entry_comes_from_a_declaration()
    finally:
        del gg.shout


@pytest.fixture
def probe():
    """A new front end declared on every surface, withdrawn afterwards."""
    def probe_fn(input, other, *, scale=1.0):
        """input - other, scaled (a probe).

        >>> 1
        1
        """
        return gg.sub(input, other) * scale
    before = len(PUBLIC)
    public(method=("probe_m", "probe_alias"), function="probe_f", functional="probe_nf",
           dunder="__probe__", reflected="__rprobe__")(probe_fn)
    yield probe_fn
    del PUBLIC[before:]
    for name in ("probe_m", "probe_alias", "__probe__", "__rprobe__"):
        if name in vars(gg.Tensor):
            delattr(gg.Tensor, name)
    for key in [k for k in surfaces.INSTALLED if k[1].startswith(("probe", "__probe", "__rprobe"))]:
        del surfaces.INSTALLED[key]


def test_a_declaration_produces_all_its_surfaces(probe):
    surfaces.install_methods(gg.Tensor)
    gg_ns, f_ns = {}, {}
    assert surfaces.install_functions(gg_ns, "function") and surfaces.install_functions(f_ns, "functional")
    assert gg.Tensor.probe_m is probe and gg.Tensor.probe_alias is probe and gg.Tensor.__probe__ is probe
    assert gg_ns["probe_f"] is probe and f_ns["probe_nf"] is probe
    x = gg.tensor([5.0, 7.0])
    np.testing.assert_array_equal(x.probe_m(1.0, scale=2.0).numpy(), [8.0, 12.0])
    np.testing.assert_array_equal(x.__rprobe__(1.0).numpy(), [-4.0, -6.0])        # probe(1.0, x)
    assert str(inspect.signature(gg.Tensor.__rprobe__)) == "(self, input, *, scale=1.0)"
    assert gg.Tensor.__rprobe__.__doc__ == probe.__doc__


def test_a_method_whose_tensor_is_not_the_first_parameter_is_rebound():
    def pick(condition, input, other):
        """condition ? input : other.

        >>> 1
        1
        """
        return gg.where(condition, input, other)
    before = len(PUBLIC)
    public(method="probe_pick", self_at=1)(pick)
    try:
        surfaces.install_methods(gg.Tensor)
        x = gg.tensor([1.0, 2.0])
        np.testing.assert_array_equal(x.probe_pick(gg.tensor([True, False]), 9.0).numpy(), [1.0, 9.0])
        assert str(inspect.signature(gg.Tensor.probe_pick)) == "(self, condition, other)"
    finally:
        del PUBLIC[before:]
        del gg.Tensor.probe_pick
        del surfaces.INSTALLED["method", "probe_pick"]


def test_a_name_declared_twice_is_an_error(probe):
    before = len(PUBLIC)
    public(function="probe_f")(lambda a: a)   # probe_f is the probe's
    try:
        with pytest.raises(RuntimeError, match="probe_f.*declared twice"):
            surfaces.public_surfaces("function")
    finally:
        del PUBLIC[before:]
    public(function="relu")(lambda a: a)      # gg.relu comes from the relu op's expose
    try:
        with pytest.raises(RuntimeError, match="relu.*declared twice"):
            surfaces.public_surfaces("function")
    finally:
        del PUBLIC[before:]


def test_a_declared_method_that_is_also_written_by_hand_is_an_error(probe):
    class Mixin:
        def probe_m(self):
            return self

    class T(Mixin):
        pass
    with pytest.raises(RuntimeError, match="probe_m.*also written in .*Mixin"):
        surfaces.install_methods(T)
    with pytest.raises(RuntimeError, match="probe_f.*bound by hand"):
        surfaces.install_functions({"probe_f": len}, "function")


def test_declared_front_ends_have_docstrings_whose_examples_run():
    for p in PUBLIC:
        if p.fn.__module__ == "ggmlgrad.tensor.bool_ops" or p.fn.__name__ in ("getitem", "setitem", "_iter"):
            continue   # another helper's code this session (indexing: examples in shape_methods' module doc)
        doc = p.fn.__doc__ or ""
        assert ">>>" in doc, f"{p.fn.__module__}.{p.fn.__qualname__}: no example in its docstring"
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
        runner.run(doctest.DocTestParser().get_doctest(doc, {}, p.fn.__qualname__, None, 0))
        assert runner.failures == 0, p.fn.__qualname__


# ---------------------------------------------------------------------- the operators, against NumPy float64
_BINARY = {"__add__": operator.add, "__sub__": operator.sub, "__mul__": operator.mul, "__truediv__": operator.truediv,
           "__pow__": operator.pow, "__floordiv__": operator.floordiv, "__mod__": operator.mod,
           "__lt__": operator.lt, "__le__": operator.le, "__gt__": operator.gt, "__ge__": operator.ge,
           "__eq__": operator.eq, "__ne__": operator.ne}


def test_every_binary_operator_is_declared_with_its_reflection():
    names = {n for p in PUBLIC for n in p.dunder + p.reflected}
    for dunder in _BINARY:
        assert dunder in names, dunder
        if not dunder.startswith(("__l", "__g", "__eq", "__ne")):
            assert "__r" + dunder[2:] in names, dunder
    assert {"__matmul__", "__rmatmul__", "__neg__", "__pos__"} <= names
    assert gg.Tensor.__abs__.__code__.co_filename.endswith("<surface method __abs__>")


@pytest.mark.parametrize("dunder", sorted(_BINARY))
def test_operators_and_reflections_match_numpy(dunder):
    fn = _BINARY[dunder]
    a = np.array([[1.5, -2.0, 3.0]])
    b = np.array([[0.5], [2.0]])
    ia, ib = np.array([7, -7, 6], dtype=np.int32), np.array([2, 3, -4], dtype=np.int32)
    cases = [(a, b), (a, 2.0), (2.5, b), (ia, ib), (ia, 3), (5, ib), (np.abs(a), b), (np.abs(a), 3)]
    for x, y in cases:
        if dunder == "__pow__" and (np.any(np.asarray(x) < 0) or isinstance(y, np.ndarray) and y.dtype.kind == "i"):
            continue   # negative bases / int exponent tensors: NaN and int rules tested elsewhere
        want = fn(np.asarray(x, dtype=np.float64) if isinstance(x, np.ndarray) and x.dtype.kind == "f" else x,
                  np.asarray(y, dtype=np.float64) if isinstance(y, np.ndarray) and y.dtype.kind == "f" else y)
        tx = gg.tensor(x) if isinstance(x, np.ndarray) else x
        ty = gg.tensor(y) if isinstance(y, np.ndarray) else y
        got = fn(tx, ty)
        assert isinstance(got, gg.Tensor), (dunder, x, y)
        want = np.asarray(want)
        if want.dtype == bool:
            assert got.dtype is gg.bool
        elif all(isinstance(v, int) or getattr(v, "dtype", None) == np.int32 for v in (x, y)) and dunder != "__truediv__":
            assert got.dtype is gg.int32, (dunder, got.dtype)
        else:
            assert got.dtype is gg.float32, (dunder, got.dtype)
        np.testing.assert_allclose(got.numpy().astype(np.float64), want, rtol=1e-6, atol=1e-6, err_msg=dunder)


def test_unknown_operands_give_notimplemented_to_the_operators_and_typeerror_to_the_functions():
    x = gg.tensor([1.0])
    for kind in ("lt", "le", "gt", "ge"):
        assert getattr(x, f"__{kind}__")(object()) is NotImplemented
        with pytest.raises(TypeError, match=kind):
            getattr(gg, kind)(x, object())
    with pytest.raises(TypeError):
        x < object()   # noqa: B015  (Python tries the reflection, then raises)
    assert (x == object()) is False   # object.__eq__ decides after NotImplemented


def test_numpy_operands_reflect_to_the_tensor():
    x = gg.tensor([[1.0, 2.0]])
    a = np.array([[3.0, 5.0]])
    for fn in (operator.add, operator.sub, operator.mul, operator.truediv, operator.lt):
        got = fn(a, x)
        assert isinstance(got, gg.Tensor)
        np.testing.assert_allclose(got.numpy(), fn(a, np.array([[1.0, 2.0]])))
    got = np.ones((2, 1)) @ x
    assert isinstance(got, gg.Tensor) and got.shape == (2, 2)
    np.testing.assert_allclose(got.numpy(), np.ones((2, 1)) @ np.array([[1.0, 2.0]]))


def test_max_min_have_the_three_torch_call_forms_on_every_surface():
    x = gg.tensor([[1.0, 5.0], [7.0, 2.0]])
    n = np.array([[1.0, 5.0], [7.0, 2.0]])
    for call in (lambda *a, **k: x.max(*a, **k), lambda *a, **k: gg.max(x, *a, **k)):
        assert call().item() == n.max()
        values, indices = call(1)
        np.testing.assert_array_equal(values.numpy(), n.max(1))
        np.testing.assert_array_equal(indices.numpy(), n.argmax(1))
        np.testing.assert_array_equal(call(gg.tensor([6.0, 6.0])).numpy(), np.maximum(n, 6.0))
    assert gg.Tensor.max is gg.max and gg.Tensor.clip is gg.clamp and F.linear is gg.linear


def test_surfaces_add_no_wrapper_layer():
    """The recording hot path (``a + b``, ``x @ w``, ``x.clamp()``) calls the front end itself: a method,
    operator, gg.* or F entry IS the declared function, or for a ``call_plan`` declaration its one
    call-plan entry (tensor/call_plans.py, shared by all its surfaces, calling the function directly);
    only a reflection or a rebound method adds one call."""
    planned = 0
    for p in PUBLIC:
        direct = [("method", n) for n in p.dunder + (p.method if p.self_at == 0 else ())]
        direct += [("function", n) for n in p.function] + [("functional", n) for n in p.functional]
        for kind, name in direct:
            fn = surfaces.INSTALLED[kind, name]
            if p.call_plan:
                assert fn.__wrapped__ is p.fn and "<call plan " in fn.__code__.co_filename, (kind, name)
                assert fn.__globals__["_fn"] is p.fn, (kind, name)
                planned += 1
            else:
                assert fn is p.fn, (kind, name)
    assert planned > 10
    assert gg.Tensor.__add__ is gg.add and gg.Tensor.__matmul__ is gg.matmul and gg.Tensor.clamp is gg.clamp
