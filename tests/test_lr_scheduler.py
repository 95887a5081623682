"""Each scheduler's lr sequence against its closed form (and momentum cycling), plus state dicts."""
from __future__ import annotations

import math

import numpy as np
import pytest

import ggmlgrad as gg
from ggmlgrad.optim import SGD, Adam
from ggmlgrad.optim import lr_scheduler as S


def _opt(lr=0.1, groups=1, cls=SGD, **kw):
    ps = [gg.tensor([1.0], requires_grad=True) for _ in range(groups)]
    if groups == 1:
        return cls(ps, lr=lr, **kw)
    return cls([{"params": [p], "lr": lr * (i + 1)} for i, p in enumerate(ps)], lr=lr, **kw)


def _run(opt, sched, n):
    """lr seen by each of n optimizer steps (group 0), and get_last_lr() each time."""
    seen = []
    for _ in range(n):
        seen.append(opt.param_groups[0]["lr"])
        assert sched.get_last_lr()[0] == opt.param_groups[0]["lr"]
        opt.step()
        sched.step()
    return np.array(seen)


def test_step_lr():
    opt = _opt(0.1)
    got = _run(opt, S.StepLR(opt, step_size=3, gamma=0.5), 10)
    np.testing.assert_allclose(got, [0.1 * 0.5 ** (t // 3) for t in range(10)], rtol=1e-12)


def test_multistep_lr():
    opt = _opt(1.0)
    got = _run(opt, S.MultiStepLR(opt, milestones=[2, 5, 5, 7], gamma=0.1), 9)
    exp = [1.0 * 0.1 ** sum(m <= t for m in [2, 5, 5, 7]) for t in range(9)]
    np.testing.assert_allclose(got, exp, rtol=1e-12)


def test_exponential_lr():
    opt = _opt(0.2)
    got = _run(opt, S.ExponentialLR(opt, gamma=0.9), 12)
    np.testing.assert_allclose(got, [0.2 * 0.9 ** t for t in range(12)], rtol=1e-12)


def test_cosine_annealing_lr_two_groups():
    opt = _opt(0.1, groups=2)
    sched = S.CosineAnnealingLR(opt, T_max=10, eta_min=0.001)
    seen = []
    for _ in range(11):
        seen.append([g["lr"] for g in opt.param_groups])
        sched.step()
    for t, (a, b) in enumerate(seen):
        for base, got in ((0.1, a), (0.2, b)):
            assert got == pytest.approx(0.001 + (base - 0.001) * (1 + math.cos(math.pi * t / 10)) / 2, rel=1e-12)
    assert seen[-1][0] == pytest.approx(0.001)


def test_lambda_lr_per_group():
    opt = _opt(1.0, groups=2)
    sched = S.LambdaLR(opt, [lambda e: 0.5 ** e, lambda e: 1.0 / (e + 1)])
    for t in range(6):
        assert opt.param_groups[0]["lr"] == pytest.approx(0.5 ** t)
        assert opt.param_groups[1]["lr"] == pytest.approx(2.0 / (t + 1))
        sched.step()


def test_linear_lr():
    opt = _opt(0.3)
    got = _run(opt, S.LinearLR(opt, start_factor=0.25, end_factor=1.0, total_iters=4), 8)
    exp = [0.3 * (0.25 + 0.75 * min(t, 4) / 4) for t in range(8)]
    np.testing.assert_allclose(got, exp, rtol=1e-12)


def _one_cycle_ref(t, total, max_lr, pct, div, final_div, three_phase, strategy):
    initial = max_lr / div
    min_lr = initial / final_div
    ann = ((lambda a, b, p: b + (a - b) / 2 * (math.cos(math.pi * p) + 1)) if strategy == "cos"
           else (lambda a, b, p: a + (b - a) * p))
    if three_phase:
        e1, e2, e3 = pct * total - 1, 2 * pct * total - 2, total - 1
        if t <= e1:
            return ann(initial, max_lr, t / e1)
        if t <= e2:
            return ann(max_lr, initial, (t - e1) / (e2 - e1))
        return ann(initial, min_lr, (t - e2) / (e3 - e2))
    e1, e2 = pct * total - 1, total - 1
    if t <= e1:
        return ann(initial, max_lr, t / e1)
    return ann(max_lr, min_lr, (t - e1) / (e2 - e1))


@pytest.mark.parametrize("three_phase", [False, True])
@pytest.mark.parametrize("strategy", ["cos", "linear"])
def test_one_cycle_lr(three_phase, strategy):
    opt = _opt(0.1, momentum=0.9)
    sched = S.OneCycleLR(opt, max_lr=1.0, total_steps=20, pct_start=0.25, div_factor=10.0, final_div_factor=100.0,
                         three_phase=three_phase, anneal_strategy=strategy)
    got = _run(opt, sched, 20)
    exp = [_one_cycle_ref(t, 20, 1.0, 0.25, 10.0, 100.0, three_phase, strategy) for t in range(20)]
    np.testing.assert_allclose(got, exp, rtol=1e-12, atol=1e-15)
    assert got[0] == pytest.approx(0.1) and max(got) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="total_steps"):
        sched.step()
        sched.step()


def test_one_cycle_cycles_adam_beta1():
    opt = _opt(0.1, cls=Adam)
    sched = S.OneCycleLR(opt, max_lr=1.0, total_steps=10, pct_start=0.5)
    assert opt.param_groups[0]["betas"][0] == pytest.approx(0.95)     # starts at max_momentum
    for _ in range(4):
        sched.step()
    assert opt.param_groups[0]["betas"][0] == pytest.approx(0.85)     # lr peak ↔ momentum low
    assert opt.param_groups[0]["betas"][1] == 0.999


@pytest.mark.parametrize("mode", ["triangular", "triangular2", "exp_range"])
def test_cyclic_lr(mode):
    opt = _opt(0.5, momentum=0.9)
    sched = S.CyclicLR(opt, base_lr=0.01, max_lr=0.1, step_size_up=4, step_size_down=2, mode=mode, gamma=0.9)
    got, moms = [], []
    for _ in range(20):
        got.append(opt.param_groups[0]["lr"])
        moms.append(opt.param_groups[0]["momentum"])
        sched.step()
    total, ratio = 6.0, 4 / 6
    for t in range(20):
        cycle = math.floor(1 + t / total)
        x = 1 + t / total - cycle
        f = x / ratio if x <= ratio else (x - 1) / (ratio - 1)
        s = {"triangular": 1.0, "triangular2": 1 / 2 ** (cycle - 1), "exp_range": 0.9 ** t}[mode]
        assert got[t] == pytest.approx(0.01 + 0.09 * f * s, rel=1e-12, abs=1e-15)
        assert moms[t] == pytest.approx(0.9 - 0.1 * f * s, rel=1e-12)


def test_sequential_warmup_then_cosine():
    opt = _opt(1.0)
    warm = S.LinearLR(opt, start_factor=0.1, total_iters=3)
    cos = S.CosineAnnealingLR(opt, T_max=7)
    sched = S.SequentialLR(opt, [warm, cos], milestones=[3])
    got = _run(opt, sched, 10)
    exp = [0.1 + 0.9 * t / 3 for t in range(3)] + [(1 + math.cos(math.pi * t / 7)) / 2 for t in range(7)]
    np.testing.assert_allclose(got, exp, rtol=1e-12, atol=1e-15)


def test_scheduled_lr_reaches_the_update():
    w = gg.tensor([0.0], requires_grad=True)
    opt = SGD([w], lr=1.0)
    sched = S.StepLR(opt, step_size=1, gamma=0.5)
    for _ in range(3):                              # grad 1 each time: w -= 1, 0.5, 0.25
        w.sum().backward()
        opt.step()
        opt.zero_grad()
        sched.step()
    assert w.tolist() == [-1.75]


@pytest.mark.parametrize("make", [
    lambda o: S.StepLR(o, step_size=2, gamma=0.5),
    lambda o: S.CosineAnnealingLR(o, T_max=6),
    lambda o: S.OneCycleLR(o, max_lr=1.0, total_steps=12),
    lambda o: S.CyclicLR(o, base_lr=0.01, max_lr=0.1, step_size_up=3),
    lambda o: S.SequentialLR(o, [S.LinearLR(o, start_factor=0.5, total_iters=2), S.ExponentialLR(o, gamma=0.8)],
                             milestones=[2]),
], ids=["step", "cosine", "onecycle", "cyclic", "sequential"])
def test_state_dict_resume(make):
    opt = _opt(0.1, momentum=0.9)
    sched = make(opt)
    for _ in range(4):
        sched.step()
    sd, opt_sd = sched.state_dict(), opt.state_dict()
    cont = []
    for _ in range(5):
        sched.step()
        cont.append(sched.get_last_lr()[0])
    opt2 = _opt(0.1, momentum=0.9)
    opt2.load_state_dict(opt_sd)
    sched2 = make(opt2)
    sched2.load_state_dict(sd)
    resumed = []
    for _ in range(5):
        sched2.step()
        resumed.append(sched2.get_last_lr()[0])
    assert resumed == cont


def test_refusals():
    opt = _opt()
    with pytest.raises(ValueError):
        S.StepLR(opt, step_size=0)
    with pytest.raises(ValueError):
        S.SequentialLR(opt, [S.StepLR(opt, 2)], milestones=[3])
    with pytest.raises(KeyError, match="initial_lr"):
        S.StepLR(_opt(), step_size=2, last_epoch=5)
    with pytest.raises(ValueError, match="unexpected"):
        S.StepLR(opt, 2).load_state_dict({"bogus": 1})


def test_constant_lr():
    opt = _opt(0.6)
    got = _run(opt, S.ConstantLR(opt, factor=0.5, total_iters=3), 6)
    np.testing.assert_allclose(got, [0.3, 0.3, 0.3, 0.6, 0.6, 0.6], rtol=1e-12)


def test_polynomial_lr():
    opt = _opt(0.1)
    got = _run(opt, S.PolynomialLR(opt, total_iters=4, power=2.0), 7)
    np.testing.assert_allclose(got, [0.1 * (1 - min(t, 4) / 4) ** 2 for t in range(7)], rtol=1e-12, atol=1e-18)


@pytest.mark.parametrize("t_mult", [1, 2])
def test_cosine_warm_restarts(t_mult):
    opt = _opt(1.0)
    got = _run(opt, S.CosineAnnealingWarmRestarts(opt, T_0=3, T_mult=t_mult, eta_min=0.1), 21)
    # cycle boundaries by hand: T_mult=1 → every 3 epochs; T_mult=2 → 0, 3, 9, 21
    starts = [0, 3, 6, 9, 12, 15, 18] if t_mult == 1 else [0, 3, 9]
    lengths = [3] * 7 if t_mult == 1 else [3, 6, 12]
    for t in range(21):
        i = max(k for k, s0 in enumerate(starts) if s0 <= t)
        exp = 0.1 + 0.9 * (1 + math.cos(math.pi * (t - starts[i]) / lengths[i])) / 2
        assert got[t] == pytest.approx(exp, rel=1e-12)
    assert got[starts[-1]] == 1.0


def test_reduce_lr_on_plateau():
    opt = _opt(1.0, groups=2)
    sched = S.ReduceLROnPlateau(opt, patience=2, factor=0.5, cooldown=1, min_lr=[0.3, 0.0])
    losses = [5.0, 4.0, 4.0, 4.0, 4.0, 4.0, 4.0, 4.0, 4.0, 4.0, 3.0]
    lrs = []
    for loss in losses:
        sched.step(gg.tensor(loss))           # a 0-d tensor metric is read back
        lrs.append(sched.get_last_lr())
    # bad epochs after the 4.0: 1, 2, 3 → cut at step 5; cooldown 1 swallows step 6; then 3 more bad → cut at 9
    assert [l[0] for l in lrs] == [1, 1, 1, 1, 0.5, 0.5, 0.5, 0.5, 0.3, 0.3, 0.3]
    assert [l[1] for l in lrs] == [1 * 2, 2, 2, 2, 1, 1, 1, 1, 0.5, 0.5, 0.5]
    sd = sched.state_dict()
    sched2 = S.ReduceLROnPlateau(_opt(1.0, groups=2), patience=2)
    sched2.load_state_dict(sd)
    assert sched2.get_last_lr() == [0.3, 0.5] and sched2.optimizer.param_groups[1]["lr"] == 0.5
