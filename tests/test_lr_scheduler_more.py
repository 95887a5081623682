"""MultiplicativeLR and ChainedScheduler against torch's lr sequences; clip_grad_value_ against torch."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import ggmlgrad as gg


def _sequence(mod, make, steps=12, lr=0.5):
    p = [torch.zeros(1, requires_grad=True)] if mod is torch.optim else [gg.zeros(1, requires_grad=True)]
    opt = mod.SGD(p, lr=lr)
    sched = make(mod.lr_scheduler, opt)
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


MAKERS = {
    "multiplicative": lambda m, o: m.MultiplicativeLR(o, lr_lambda=lambda e: 0.9 if e % 2 else 0.8),
    "chain_const_exp": lambda m, o: m.ChainedScheduler([m.ConstantLR(o, factor=0.1, total_iters=3),
                                                        m.ExponentialLR(o, gamma=0.9)]),
    "chain_step_linear_poly": lambda m, o: m.ChainedScheduler([m.StepLR(o, step_size=3, gamma=0.5),
                                                               m.LinearLR(o, start_factor=0.2, total_iters=4),
                                                               m.PolynomialLR(o, total_iters=20, power=2.0)]),
    "chain_multistep_mult": lambda m, o: m.ChainedScheduler([m.MultiplicativeLR(o, lambda e: 0.95),
                                                             m.MultiStepLR(o, milestones=[2, 5], gamma=0.3)]),
}


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_lr_sequence_matches_torch(name):
    want = _sequence(torch.optim, MAKERS[name])
    got = _sequence(gg.optim, MAKERS[name])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)


def test_chained_refuses_schedulers_that_set_the_lr_outright():
    opt = gg.optim.SGD([gg.zeros(1, requires_grad=True)], lr=1.0)
    with pytest.raises(ValueError, match="LambdaLR"):
        gg.optim.lr_scheduler.ChainedScheduler([gg.optim.lr_scheduler.LambdaLR(opt, lambda e: 1.0)])
    with pytest.raises(ValueError, match="CosineAnnealingLR"):
        gg.optim.lr_scheduler.ChainedScheduler([gg.optim.lr_scheduler.CosineAnnealingLR(opt, 10)])
    other = gg.optim.SGD([gg.zeros(1, requires_grad=True)], lr=1.0)
    with pytest.raises(ValueError, match="same optimizer"):
        gg.optim.lr_scheduler.ChainedScheduler([gg.optim.lr_scheduler.StepLR(opt, 2),
                                                gg.optim.lr_scheduler.StepLR(other, 2)])


def test_chained_state_dict_resumes():
    def make(opt):
        s = gg.optim.lr_scheduler
        return s.ChainedScheduler([s.ConstantLR(opt, factor=0.5, total_iters=2), s.ExponentialLR(opt, gamma=0.8)])
    opt = gg.optim.SGD([gg.zeros(1, requires_grad=True)], lr=1.0)
    sched = make(opt)
    for _ in range(4):
        sched.step()
    sd = sched.state_dict()
    nxt = [(sched.step(), opt.param_groups[0]["lr"])[1] for _ in range(3)]
    opt2 = gg.optim.SGD([gg.zeros(1, requires_grad=True)], lr=1.0)
    sched2 = make(opt2)
    sched2.load_state_dict(sd)
    assert [(sched2.step(), opt2.param_groups[0]["lr"])[1] for _ in range(3)] == nxt


def test_clip_grad_value_matches_torch():
    rng = np.random.default_rng(0)
    g = (rng.standard_normal((3, 4)) * 3).astype(np.float32)
    tp = torch.zeros(3, 4, requires_grad=True)
    tp.grad = torch.tensor(g)
    torch.nn.utils.clip_grad_value_([tp], 1.5)
    gp = gg.zeros(3, 4, requires_grad=True)
    gp.grad = gg.tensor(g)
    gg.nn.utils.clip_grad_value_([gp], 1.5)
    np.testing.assert_array_equal(gp.grad.numpy(), tp.grad.numpy())
