"""torch's top-level names and module paths, checked against torch itself where torch has a meaning
to compare (devices, legacy constructors, new_*, *_like, type strings, inference_mode)."""
from __future__ import annotations

import builtins
import importlib
import os

import numpy as np
import pytest
import torch

import ggmlgrad as gg


# ---------------------------------------------------------------------- devices
@pytest.mark.parametrize("args", [("cpu",), ("cuda", 0), ("cuda:1",), ("cuda",), ("mps",)])
def test_device_constructor_matches_torch(args):
    g, t = gg.device(*args), torch.device(*args)
    assert (g.type, g.index, str(g), repr(g)) == (t.type, t.index, str(t), repr(t))
    assert gg.device(g) == g and hash(gg.device(*args)) == hash(g)


@pytest.mark.parametrize("bad", ["cuda:x", "Cuda", "", "cuda:-1"])
def test_bad_device_strings_raise_runtime_error_as_torch(bad):
    with pytest.raises(RuntimeError):
        torch.device(bad)
    with pytest.raises(RuntimeError):
        gg.device(bad)


def test_an_int_device_names_the_accelerator():
    if gg.accelerator.is_available():
        assert gg.device(0) == gg.device(gg.accelerator.current_accelerator().type, 0)
    else:
        with pytest.raises(RuntimeError):
            torch.device(0)
        with pytest.raises(RuntimeError, match="none is available"):
            gg.device(0)


def test_device_is_accepted_wherever_a_device_is():
    cpu = gg.device("cpu")
    x = gg.tensor([1.0, 2.0], device=cpu)
    assert x.device == cpu and isinstance(x.device, gg.device) and x.device.type == "cpu"
    assert x.device.index is None                       # torch: a CPU tensor's device has no index
    assert x.to(cpu).device == cpu and gg.zeros(2, device=cpu).device == cpu
    m = gg.nn.Linear(2, 2).to(cpu)
    assert m.weight.device == cpu
    assert gg.device("cuda") != gg.device("cuda", 0)    # as torch: an index is part of the value
    with gg.device("cpu"):
        assert gg.ones(1).device == cpu


def test_a_device_the_ggml_lacks_raises_runtime_error_where_used():
    if gg.cuda.is_available():
        pytest.skip("this ggml has CUDA")   # the CPU wheel has none; CI runs on it
    dev = gg.device("cuda")                 # constructing is allowed, as in torch
    with pytest.raises(RuntimeError, match="not available"):
        gg.zeros(2, device=dev)
    with pytest.raises(RuntimeError, match="not available"):
        gg.zeros(2).to(dev)


def test_cuda_accelerator_and_backends_follow_the_loaded_ggml():
    kinds = [d.kind for d in gg.devices()]
    assert gg.cuda.is_available() == ("cuda" in kinds)
    assert gg.cuda.device_count() == kinds.count("cuda")
    gpus = [k for k in kinds if k != "cpu"]
    assert gg.accelerator.is_available() == bool(gpus)
    assert gg.accelerator.device_count() == (gpus.count(gpus[0]) if gpus else 0)
    cur = gg.accelerator.current_accelerator()
    assert (cur is None) if not gpus else (cur == gg.device(gpus[0]))
    assert gg.backends.mps.is_available() == ("metal" in kinds)
    gg.backends.cudnn.deterministic = True
    gg.backends.cudnn.benchmark = False
    assert gg.backends.cudnn.deterministic is True and gg.backends.cudnn.benchmark is False
    assert gg.backends.cudnn.is_available() is False


# ---------------------------------------------------------------------- dtypes
def test_dtype_aliases_follow_the_dtype_rule_and_do_not_leak_builtins():
    assert gg.float is gg.float32 and gg.double is gg.float32 and gg.half is gg.float16
    assert gg.long is gg.int32 and gg.int is gg.int32
    assert builtins.float(2) == 2.0 and builtins.int("3") == 3    # only the package namespace is shadowed
    assert gg.zeros(2, dtype=gg.long).dtype is gg.int32
    assert gg.get_default_dtype() is gg.float32
    gg.set_default_dtype(gg.float64)                                 # float64 is float32: accepted
    with pytest.raises(TypeError):
        gg.set_default_dtype(gg.int32)
    with pytest.raises(TypeError):
        torch.set_default_dtype(torch.int32)


@pytest.mark.parametrize("name,data", [("FloatTensor", [1.5, 2]), ("LongTensor", [1, 2]), ("IntTensor", [3]),
                                       ("BoolTensor", [1, 0]), ("DoubleTensor", [0.25])])
def test_legacy_constructors_match_torch(name, data):
    g, t = getattr(gg, name)(data), getattr(torch, name)(data)
    np.testing.assert_array_equal(g.numpy(), t.numpy())
    assert isinstance(g, getattr(gg, name)) and not isinstance(g, gg.HalfTensor)
    assert tuple(getattr(gg, name)(2, 3).shape) == tuple(getattr(torch, name)(2, 3).shape)


def test_type_strings_and_conversions():
    x = gg.zeros(2)
    assert x.type() == "ggmlgrad.FloatTensor"                # named honestly (torch: torch.FloatTensor)
    assert x.long().type() == "ggmlgrad.IntTensor"           # int64 is int32 storage
    assert x.type(gg.long).dtype is gg.int32
    assert x.type("torch.LongTensor").dtype is gg.int32
    assert x.type(gg.BoolTensor).dtype is gg.bool
    assert x.type("torch.HalfTensor").type() == "ggmlgrad.HalfTensor"
    with pytest.raises(TypeError):
        x.type("torch.ComplexFloatTensor")


# ---------------------------------------------------------------------- factories
def _same(g, t):
    assert tuple(g.shape) == tuple(t.shape)
    assert g.requires_grad == t.requires_grad
    expect = {torch.float32: gg.float32, torch.int64: gg.int32, torch.int32: gg.int32, torch.bool: gg.bool,
              torch.float16: gg.float16}[t.dtype]
    assert g.dtype is expect


@pytest.mark.parametrize("dt", ["float32", "int64", "bool"])
def test_new_methods_match_torch(dt):
    g = gg.zeros(2, 3, dtype=dt)
    t = torch.zeros(2, 3, dtype=getattr(torch, dt))
    for name, args in [("new_zeros", (4,)), ("new_ones", (2, 2)), ("new_empty", ((3,),)), ("new_full", ((2,), 1))]:
        gv, tv = getattr(g, name)(*args), getattr(t, name)(*args)
        _same(gv, tv)
        if name != "new_empty":
            np.testing.assert_array_equal(gv.numpy(), tv.numpy())
    _same(g.new_tensor([1, 0]), t.new_tensor([1, 0]))
    f = gg.zeros(2).new_zeros(3, dtype=gg.int32, requires_grad=False)
    assert f.dtype is gg.int32
    r = gg.zeros(2).new_ones(2, requires_grad=True)
    assert r.requires_grad and r.is_leaf


def test_like_functions_match_torch_shapes_and_dtypes():
    x, tx = gg.zeros(2, 3), torch.zeros(2, 3)
    for name in ("randn_like", "rand_like", "empty_like"):
        _same(getattr(gg, name)(x), getattr(torch, name)(tx))
        _same(getattr(gg, name)(x, requires_grad=True), getattr(torch, name)(tx, requires_grad=True))
    r = gg.rand_like(gg.zeros(1000)).numpy()
    assert 0.0 <= r.min() and r.max() < 1.0 and 0.4 < r.mean() < 0.6
    ri = gg.randint_like(x, 2, 5)
    _same(ri, torch.randint_like(tx, 2, 5))
    v = ri.numpy()
    assert ((v >= 2) & (v < 5)).all() and (v == np.round(v)).all()
    _same(gg.randint_like(gg.zeros(4, dtype=gg.int32), 3), torch.randint_like(torch.zeros(4, dtype=torch.int64), 3))
    gg.manual_seed(3)
    a = gg.randn_like(x).numpy()
    gg.manual_seed(3)
    assert (a == gg.randn_like(x).numpy()).all()
    with pytest.raises(RuntimeError):        # torch: NotImplementedError (a RuntimeError) for integer dtypes
        torch.randn_like(torch.zeros(2, dtype=torch.int64))
    with pytest.raises(RuntimeError):
        gg.randn_like(gg.zeros(2, dtype=gg.int64))
    _same(gg.empty(2, 3), torch.empty(2, 3))


# ---------------------------------------------------------------------- modes and printing
def test_inference_mode_as_context_and_decorator():
    w = gg.ones(2, requires_grad=True)
    with gg.inference_mode():
        assert not (w * 2).requires_grad
    with gg.inference_mode(False):
        assert (w * 2).requires_grad

    @gg.inference_mode
    def bare():
        return w * 2

    @gg.inference_mode()
    def called():
        return w * 2
    assert not bare().requires_grad and not called().requires_grad
    assert (w * 2).requires_grad and gg.is_grad_enabled()


def test_set_printoptions_changes_repr():
    x = gg.tensor([1.23456789, 2.0])
    on = "" if x.device.type == "cpu" else f", device='{x.device}'"   # torch names a device other than the CPU
    try:
        gg.set_printoptions(precision=2)
        assert repr(x) == f"tensor([1.23, 2.  ]{on})"
        gg.set_printoptions(sci_mode=True)
        assert "e+00" in repr(x)
        with pytest.raises(ValueError):
            gg.set_printoptions(profile="nope")
    finally:
        gg.set_printoptions(profile="default")
    assert repr(x) == f"tensor([1.2346, 2.    ]{on})"


# ---------------------------------------------------------------------- module paths
@pytest.mark.parametrize("path,name,target", [
    ("ggmlgrad.utils.data", "DataLoader", "data.DataLoader"),
    ("ggmlgrad.utils.data", "TensorDataset", "data.TensorDataset"),
    ("ggmlgrad.utils.data.dataloader", "DataLoader", "data.DataLoader"),
    ("ggmlgrad.utils.data.dataset", "Dataset", "data.Dataset"),
    ("ggmlgrad.distributions.categorical", "Categorical", "distributions.Categorical"),
    ("ggmlgrad.distributions.normal", "Normal", "distributions.Normal"),
    ("ggmlgrad.nn.utils", "clip_grad_norm_", "nn.utils.clip_grad_norm_"),
    ("ggmlgrad.nn.utils.clip_grad", "clip_grad_norm_", "nn.utils.clip_grad_norm_"),
    ("ggmlgrad.nn.init", "kaiming_uniform_", "nn.init.kaiming_uniform_"),
    ("ggmlgrad.optim.lr_scheduler", "StepLR", "optim.lr_scheduler.StepLR"),
])
def test_torch_module_paths_are_aliases(path, name, target):
    obj = getattr(importlib.import_module(path), name)
    ref = gg
    for part in target.split("."):
        ref = getattr(ref, part)
    assert obj is ref


def test_summary_writer_writes_tensorboard_events(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from ggmlgrad.utils.tensorboard import SummaryWriter
    with SummaryWriter(str(tmp_path)) as w:
        for step in range(3):
            w.add_scalar("loss", gg.tensor(1.0 / (step + 1)), step)
        w.add_scalars("pair", {"a": 1.0, "b": 2.0}, 0)
        w.add_histogram("weights", gg.tensor([0.0, 1.0, 1.0, 2.0]), 0)
        w.add_text("note", "hello", 0)
        w.flush()
    acc = EventAccumulator(str(tmp_path), size_guidance={"tensors": 0}).Reload()
    assert [(e.step, round(e.value, 6)) for e in acc.Scalars("loss")] == [(0, 1.0), (1, 0.5), (2, 0.333333)]
    h = acc.Histograms("weights")[0].histogram_value
    assert (h.num, h.min, h.max, h.sum) == (4, 0.0, 2.0, 4.0)
    assert acc.Tensors("note/text_summary")[0].tensor_proto.string_val == [b"hello"]
    sub = EventAccumulator(os.path.join(str(tmp_path), "pair_b")).Reload()
    assert sub.Scalars("pair")[0].value == 2.0


@pytest.mark.parametrize("module", ["ggmlgrad.runtime.device", "ggmlgrad.tensor.legacy", "ggmlgrad.tensor.new_methods",
                                    "ggmlgrad.tensor.printing", "ggmlgrad.tensor.grad_mode", "ggmlgrad.cuda",
                                    "ggmlgrad.accelerator", "ggmlgrad.backends", "ggmlgrad.utils.data",
                                    "ggmlgrad.utils.tensorboard"])
def test_docstring_examples_run(module):
    import doctest
    result = doctest.testmod(importlib.import_module(module))
    assert result.failed == 0 and (result.attempted > 0 or module == "ggmlgrad.tensor.grad_mode")


def test_tensor_class_as_torchs_legacy_float_constructor():
    a = np.arange(6, dtype=np.int64).reshape(2, 3)
    for args in [(a,), ([1, 2],), (2, 3), ()]:
        g, t = gg.Tensor(*args), torch.Tensor(*args)
        assert g.dtype is gg.float32 and tuple(g.shape) == tuple(t.shape) and isinstance(g, gg.Tensor)
        if args and not isinstance(args[0], int):
            np.testing.assert_array_equal(g.numpy(), t.numpy())
    assert isinstance(gg.nn.Parameter(gg.ones(2)), gg.Tensor)


@pytest.mark.parametrize("graph", [False, True])
def test_setitem_drops_a_values_leading_size_one_dims_as_torch(graph):
    # cleanrl's PPO: advantages[t] = (1, n) value into a (n,) row
    t = torch.zeros(3, 4)
    t[1] = torch.arange(4.0).reshape(1, 4)
    with gg.graph_mode(graph):
        g = gg.zeros(3, 4)
        g[1] = gg.arange(4.0).reshape(1, 4)
        g[2] = np.ones((1, 1, 4), np.float32)
        np.testing.assert_array_equal(g.numpy()[:2], t.numpy()[:2])
        assert g.numpy()[2].tolist() == [1.0] * 4
        with pytest.raises(RuntimeError):
            torch.zeros(3, 4)[1] = torch.ones(2, 4)
        with pytest.raises(RuntimeError):
            g[1] = gg.ones(2, 4)
