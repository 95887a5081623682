"""gg.optim.Adadelta against torch.optim.Adadelta: the same parameters and state after several steps,
in eager mode, graph mode and capture_step, with weight decay, maximize and a changed learning rate."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import ggmlgrad as gg


@pytest.mark.parametrize("mode", ["eager", "graph", "capture"])
@pytest.mark.parametrize("opts", [{}, {"lr": 0.5, "rho": 0.8, "eps": 1e-4, "weight_decay": 0.1},
                                  {"maximize": True}])
def test_adadelta_matches_torch(mode, opts):
    rng = np.random.default_rng(0)
    w0, b0 = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    xs = [rng.standard_normal((5, 4)).astype(np.float32) for _ in range(4)]
    w, b = gg.tensor(w0, requires_grad=True), gg.tensor(b0, requires_grad=True)
    tw, tb = torch.tensor(w0, requires_grad=True), torch.tensor(b0, requires_grad=True)
    opt, topt = gg.optim.Adadelta([w, b], **opts), torch.optim.Adadelta([tw, tb], **opts)

    def loss_fn(x):
        return ((x @ w.T + b).tanh() ** 2).mean()
    step = gg.capture_step(loss_fn, opt) if mode == "capture" else None
    for k, x in enumerate(xs):
        if k == 2:      # a scheduler-style change: no new graph, the same numbers as torch
            opt.param_groups[0]["lr"] = topt.param_groups[0]["lr"] = 0.3
        if step is not None:
            step(x)
        else:
            with gg.graph_mode(mode == "graph"):
                opt.zero_grad()
                loss_fn(gg.tensor(x)).backward()
                opt.step()
        topt.zero_grad()
        ((torch.tensor(x) @ tw.T + tb).tanh() ** 2).mean().backward()
        topt.step()
    np.testing.assert_allclose(w.detach().numpy(), tw.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b.detach().numpy(), tb.detach().numpy(), rtol=1e-5, atol=1e-6)
    st, tst = opt.state_dict()["state"][0], topt.state_dict()["state"][0]
    assert {"square_avg", "acc_delta"} <= set(st) and {"square_avg", "acc_delta"} <= set(tst)
    for key in ("square_avg", "acc_delta"):
        np.testing.assert_allclose(st[key].numpy(), tst[key].numpy(), rtol=1e-5, atol=1e-9)


def test_adadelta_refuses_bad_options_as_torch():
    w = gg.ones(2, requires_grad=True)
    for bad in ({"rho": 1.5}, {"eps": -1.0}, {"lr": -1.0}, {"weight_decay": -0.1}):
        with pytest.raises(ValueError):
            torch.optim.Adadelta([torch.ones(2, requires_grad=True)], **bad)
        with pytest.raises(ValueError):
            gg.optim.Adadelta([w], **bad)


def test_docstring_example_runs():
    import doctest

    import ggmlgrad.optim.rmsprop as mod     # Adadelta lives beside RMSprop and Adagrad
    result = doctest.testmod(mod, extraglobs={"gg": gg})
    assert result.attempted > 0 and result.failed == 0
