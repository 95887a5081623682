"""Module.to's call forms and dtypes, float()/double()/half(), get_buffer and get_submodule, against torch."""
from __future__ import annotations

import pytest
import torch

import ggmlgrad as gg


def _pair():
    t = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.BatchNorm1d(3))
    g = gg.nn.Sequential(gg.nn.Linear(2, 3), _GgWithBuffer())
    return t, g


class _GgWithBuffer(gg.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("running_mean", gg.zeros(3))


def test_to_forms_keep_the_same_parameters():
    m = gg.nn.Linear(2, 2)
    w = m.weight
    for call in (lambda: m.to("cpu"), lambda: m.to(gg.float32), lambda: m.to("cpu", gg.float64),
                 lambda: m.to(device="cpu", dtype=gg.float32, non_blocking=True), lambda: m.to(gg.zeros(1)),
                 lambda: m.float(), lambda: m.double(), lambda: m.cpu()):
        assert call() is m and m.weight is w and w.dtype is gg.float32


def test_to_refusals_as_torch_where_torch_refuses():
    tm, gm = torch.nn.Linear(2, 2), gg.nn.Linear(2, 2)
    with pytest.raises(TypeError):
        tm.to(torch.int32)
    with pytest.raises(TypeError):
        gm.to(gg.int32)
    with pytest.raises(NotImplementedError, match="float32"):
        gm.half()
    with pytest.raises(NotImplementedError, match="float32"):
        gm.to(gg.bfloat16)
    assert gm.weight.dtype is gg.float32      # nothing changed


def test_get_buffer_and_get_submodule_as_torch():
    t, g = _pair()
    assert tuple(t.get_buffer("1.running_mean").shape) == g.get_buffer("1.running_mean").shape
    assert type(t.get_submodule("0")).__name__ == type(g.get_submodule("0")).__name__ == "Linear"
    for target in ("1.nothing", "0.weight"):
        with pytest.raises(AttributeError):
            t.get_buffer(target)
        with pytest.raises(AttributeError):
            g.get_buffer(target)
    with pytest.raises(AttributeError):
        t.get_submodule("5")
    with pytest.raises(AttributeError):
        g.get_submodule("5")


def test_registering_a_name_the_class_already_has_is_refused_as_torch():
    for mod, tensor in ((torch.nn, torch.zeros(1)), (gg.nn, gg.zeros(1))):
        m = mod.Linear(1, 1)
        with pytest.raises(KeyError, match="already exists"):
            m.register_buffer("half", tensor)
        with pytest.raises(KeyError, match="already exists"):
            m.register_buffer("train", tensor)
