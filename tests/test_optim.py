"""Optimizers against a NumPy float64 reference of PyTorch's update rules, graph-compute counts,
parameter groups, state-dict resume, clipping and gradient accumulation (eager and graph mode)."""
from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

import ggmlgrad as gg
from ggmlgrad.engine import ENGINE
from ggmlgrad.nn.utils import clip_grad_norm_, clip_grad_value_
from ggmlgrad.optim import SGD, Adam, AdamW

MODES = pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])


# ---------------------------------------------------------------------- the problem: least squares
def _problem(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((8, 4)).astype(np.float32)
    y = rng.standard_normal((8, 3)).astype(np.float32)
    w = rng.standard_normal((4, 3)).astype(np.float32)
    b = rng.standard_normal((3,)).astype(np.float32)
    return x, y, w, b


def _loss(xt, yt, w, b):
    return ((xt @ w + b - yt) ** 2).mean()


def _ref_grads(x, y, w, b):
    r = x @ w + b - y
    gr = 2.0 * r / r.size
    return x.T @ gr, gr.sum(0)


# ---------------------------------------------------------------------- PyTorch's rules in float64
class RefSGD:
    def __init__(self, lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False, maximize=False):
        self.o = dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay, nesterov=nesterov,
                      maximize=maximize)
        self.buf = {}

    def step(self, i, p, g):
        o = self.o
        g = -g if o["maximize"] else g
        if o["weight_decay"]:
            g = g + o["weight_decay"] * p
        if o["momentum"]:
            if i not in self.buf:
                self.buf[i] = np.array(g, dtype=np.float64)
            else:
                self.buf[i] = o["momentum"] * self.buf[i] + (1 - o["dampening"]) * g
            g = g + o["momentum"] * self.buf[i] if o["nesterov"] else self.buf[i]
        return p - o["lr"] * g


class RefAdam:
    def __init__(self, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, decoupled=False, maximize=False):
        self.o = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, maximize=maximize)
        self.decoupled = decoupled
        self.m, self.v, self.t = {}, {}, {}

    def step(self, i, p, g):
        o = self.o
        lr, (b1, b2), eps, wd = o["lr"], o["betas"], o["eps"], o["weight_decay"]
        g = -g if o["maximize"] else g
        if self.decoupled:
            p = p * (1 - lr * wd)
        elif wd:
            g = g + wd * p
        self.t[i] = self.t.get(i, 0) + 1
        t = self.t[i]
        self.m[i] = b1 * self.m.get(i, 0.0) + (1 - b1) * g
        self.v[i] = b2 * self.v.get(i, 0.0) + (1 - b2) * g * g
        denom = np.sqrt(self.v[i]) / math.sqrt(1 - b2 ** t) + eps
        return p - lr / (1 - b1 ** t) * self.m[i] / denom


CASES = [
    ("sgd", SGD, RefSGD, dict(lr=0.1)),
    ("sgd_wd_momentum", SGD, RefSGD, dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01)),
    ("sgd_nesterov", SGD, RefSGD, dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.02)),
    ("sgd_maximize", SGD, RefSGD, dict(lr=0.02, momentum=0.5, maximize=True)),
    ("adam", Adam, RefAdam, dict(lr=0.01)),
    ("adam_l2", Adam, RefAdam, dict(lr=0.02, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)),
    ("adam_composed", Adam, RefAdam, dict(lr=0.02, weight_decay=0.05, fused=False)),
    ("adamw", AdamW, lambda **k: RefAdam(decoupled=True, **k), dict(lr=0.01, weight_decay=0.1)),
    ("adamw_composed", AdamW, lambda **k: RefAdam(decoupled=True, **k), dict(lr=0.01, weight_decay=0.1, fused=False)),
    ("adamw_maximize", AdamW, lambda **k: RefAdam(decoupled=True, **k), dict(lr=0.005, weight_decay=0.01, maximize=True)),
]


def _train_vs_reference(cls, ref, kw, steps, graph, seed=0, before_step=None):
    """``steps`` optimizer steps on the least-squares problem and the same steps of the float64
    reference ``ref``; ``before_step(step, opt, ref)`` may change options first. Returns
    (opt, w, got w, got b, reference w, reference b, initial w)."""
    x, y, w0, b0 = _problem(seed)
    rw, rb = w0.astype(np.float64), b0.astype(np.float64)
    with gg.graph_mode(graph):
        xt, yt = gg.tensor(x), gg.tensor(y)
        w, b = gg.tensor(w0, requires_grad=True), gg.tensor(b0, requires_grad=True)
        opt = cls([w, b], **kw)
        for step in range(steps):
            if before_step is not None:
                before_step(step, opt, ref)
            opt.zero_grad()
            _loss(xt, yt, w, b).backward()
            opt.step()
            gw, gb = _ref_grads(x.astype(np.float64), y.astype(np.float64), rw, rb)
            rw, rb = ref.step(0, rw, gw), ref.step(1, rb, gb)
        got_w, got_b = w.detach().numpy().copy(), b.detach().numpy().copy()
    return opt, w, got_w, got_b, rw, rb, w0


@MODES
@pytest.mark.parametrize("name,cls,ref_cls,kw", CASES, ids=[c[0] for c in CASES])
def test_trajectory_100_steps_vs_reference(name, cls, ref_cls, kw, graph):
    def lower_lr(step, opt, ref):
        if step == 50:                      # lr changed mid-run: no rebuild, just a new value
            for g in opt.param_groups:
                g["lr"] *= 0.3
            ref.o["lr"] *= 0.3

    ref = ref_cls(**{k: v for k, v in kw.items() if k != "fused"})
    opt, w, got_w, got_b, rw, rb, w0 = _train_vs_reference(cls, ref, kw, 100, graph, before_step=lower_lr)
    assert opt.state[w]["step"] == 100
    scale = max(1.0, float(np.abs(rw - w0).max()))
    np.testing.assert_allclose(got_w, rw, atol=2e-5 * scale, rtol=1e-4)
    np.testing.assert_allclose(got_b, rb, atol=2e-5 * scale, rtol=1e-4)
    assert np.abs(rw - w0).max() > 1e-2        # the run moved: the comparison is not trivial


SWITCHES = [  # (optimizer, reference, options, {step: option changes}): structure changes mid-run
    (Adam, RefAdam, dict(lr=0.01), {30: dict(weight_decay=0.05), 60: dict(maximize=True)}),
    (AdamW, lambda **k: RefAdam(decoupled=True, **k), dict(lr=0.01, weight_decay=0.0),
     {30: dict(weight_decay=0.1), 60: dict(maximize=True)}),
    (SGD, RefSGD, dict(lr=0.05), {30: dict(momentum=0.9), 60: dict(nesterov=True, weight_decay=0.01)}),
]


@MODES
@pytest.mark.parametrize("cls,ref_cls,kw,switches", SWITCHES, ids=["adam", "adamw", "sgd"])
def test_option_changes_mid_run_change_the_update(cls, ref_cls, kw, switches, graph):
    """The per-step update layout is cached per structure: an option that changes the update's
    form (L2 decay on, maximize, momentum on, nesterov) must take effect at the next step."""
    def switch(step, opt, ref):
        for k, v in switches.get(step, {}).items():
            opt.param_groups[0][k] = v
            ref.o[k] = v

    _, _, got_w, got_b, rw, rb, _ = _train_vs_reference(cls, ref_cls(**kw), kw, 90, graph, seed=3, before_step=switch)
    np.testing.assert_allclose(got_w, rw, atol=5e-5, rtol=1e-4)
    np.testing.assert_allclose(got_b, rb, atol=5e-5, rtol=1e-4)


@MODES
@pytest.mark.parametrize("cls", [SGD, Adam, AdamW])
def test_step_is_one_graph_compute(cls, graph):
    x, y, w0, b0 = _problem()
    with gg.graph_mode(graph):
        ps = [gg.tensor(np.random.default_rng(i).standard_normal((5, 3)).astype(np.float32), requires_grad=True)
              for i in range(6)]
        opt = cls(ps, lr=0.1, **({"momentum": 0.9} if cls is SGD else {}))
        for _ in range(3):
            loss = sum(((p * p).sum() for p in ps[1:]), (ps[0] * ps[0]).sum())
            loss.backward()
            ENGINE.drain("test")               # forward+backward computed before counting
            before = gg.counters()
            opt.step()
            after = gg.counters()
            assert after["computes"] - before["computes"] == 1
            assert after["computes_by_site"].get("optimizer", 0) - before["computes_by_site"].get("optimizer", 0) == 1
            # only the per-group hyperparameter vector travels; no host read
            assert after["uploads"] - before["uploads"] == 1
            assert after["downloads"] == before["downloads"]
            opt.zero_grad()


def test_fused_adamw_is_used_for_float32():
    counts = []
    for fused in (None, False):
        w = gg.tensor(np.ones((4, 4), np.float32), requires_grad=True)
        opt = AdamW([w], lr=0.1, fused=fused)
        (w * w).sum().backward()
        ENGINE.drain("test")
        opt.step()
        counts.append(gg.engine.graph_node_counts()[-1])
    # fused: the OPT_STEP_ADAMW node and views of the hparams; composed: a dozen elementwise nodes
    assert counts[0] <= 3 and counts[1] >= 10, counts


def test_param_groups_per_group_options_and_add_param_group():
    x, y, w0, b0 = _problem()
    xt, yt = gg.tensor(x), gg.tensor(y)
    w, b = gg.tensor(w0, requires_grad=True), gg.tensor(b0, requires_grad=True)
    opt = SGD([{"params": [w]}, {"params": [b], "lr": 0.5, "momentum": 0.9}], lr=0.1)
    assert opt.param_groups[0]["lr"] == 0.1 and opt.param_groups[0]["momentum"] == 0.0
    assert opt.param_groups[1]["lr"] == 0.5 and opt.param_groups[1]["momentum"] == 0.9
    rw, rb = w0.astype(np.float64), b0.astype(np.float64)
    r0, r1 = RefSGD(lr=0.1), RefSGD(lr=0.5, momentum=0.9)
    for _ in range(10):
        opt.zero_grad()
        _loss(xt, yt, w, b).backward()
        opt.step()
        gw, gb = _ref_grads(x.astype(np.float64), y.astype(np.float64), rw, rb)
        rw, rb = r0.step(0, rw, gw), r1.step(1, rb, gb)
    np.testing.assert_allclose(w.detach().numpy(), rw, atol=1e-5, rtol=1e-4)
    np.testing.assert_allclose(b.detach().numpy(), rb, atol=1e-5, rtol=1e-4)
    c = gg.tensor([1.0, 2.0], requires_grad=True)
    opt.add_param_group({"params": [c], "lr": 0.25})
    (c * c).sum().backward()
    opt.step()
    np.testing.assert_allclose(c.detach().numpy(), [0.5, 1.0], rtol=1e-6)
    with pytest.raises(ValueError, match="more than one parameter group"):
        opt.add_param_group({"params": [w]})


def test_param_without_grad_is_skipped_and_keeps_its_step():
    a = gg.tensor([1.0, 2.0], requires_grad=True)
    b = gg.tensor([3.0], requires_grad=True)
    opt = Adam([a, b], lr=0.1)
    for _ in range(3):
        (a * a).sum().backward()
        opt.step()
        opt.zero_grad()
    assert opt.state[a]["step"] == 3 and opt.state[b]["step"] == 0
    assert b.tolist() == [3.0]
    # b's first step now uses its own bias corrections (t=1): a plain lr-sized move
    ((a * a).sum() + (b * b).sum()).backward()
    opt.step()
    np.testing.assert_allclose(b.detach().numpy(), [2.9], rtol=1e-6)
    assert opt.state[b]["step"] == 1 and opt.state[a]["step"] == 4


def test_gradient_accumulation():
    x, y, w0, b0 = _problem()
    w, b = gg.tensor(w0, requires_grad=True), gg.tensor(b0, requires_grad=True)
    opt = SGD([w, b], lr=0.1)
    for half in (slice(0, 4), slice(4, 8)):       # two micro-batches, then one step
        (_loss(gg.tensor(x[half]), gg.tensor(y[half]), w, b) * 0.5).backward()
    opt.step()
    gw, gb = _ref_grads(x.astype(np.float64), y.astype(np.float64), w0.astype(np.float64), b0.astype(np.float64))
    np.testing.assert_allclose(w.detach().numpy(), w0 - 0.1 * gw, atol=1e-6, rtol=1e-5)
    np.testing.assert_allclose(b.detach().numpy(), b0 - 0.1 * gb, atol=1e-6, rtol=1e-5)


def test_zero_grad_modes():
    w = gg.tensor([1.0, 2.0], requires_grad=True)
    opt = SGD([w], lr=0.1)
    (w * w).sum().backward()
    opt.zero_grad(set_to_none=False)
    assert w.grad is not None and w.grad.tolist() == [0.0, 0.0]
    opt.zero_grad()
    assert w.grad is None


@pytest.mark.parametrize("bad,match", [
    (dict(lr=-1.0), "learning rate"), (dict(lr=0.1, betas=(1.0, 0.9)), "beta"),
    (dict(lr=0.1, eps=-1.0), "eps"), (dict(lr=0.1, weight_decay=-0.1), "weight_decay"),
])
def test_adam_refuses_bad_hyperparameters(bad, match):
    with pytest.raises(ValueError, match=match):
        Adam([gg.tensor([1.0], requires_grad=True)], **bad)


def test_refusals():
    w = gg.tensor([1.0], requires_grad=True)
    with pytest.raises(ValueError, match="empty"):
        SGD([], lr=0.1)
    with pytest.raises(TypeError, match="iterable"):
        SGD(w, lr=0.1)
    with pytest.raises(ValueError, match="Nesterov"):
        SGD([w], lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="non-leaf"):
        SGD([w * 2], lr=0.1)
    with pytest.raises(RuntimeError, match="amsgrad"):
        Adam([w], amsgrad=True, fused=True)
    with pytest.raises(TypeError, match="float"):
        SGD([gg.tensor([1, 2])], lr=0.1)
    bf = gg.tensor([1.0], dtype=gg.bfloat16, requires_grad=True)
    with pytest.raises(TypeError, match="fused AdamW needs float32"):
        AdamW([bf], fused=True)
    opt = AdamW([w])
    with pytest.raises(TypeError, match="fused AdamW needs float32"):
        opt.add_param_group({"params": [bf], "fused": True})
    assert len(opt.param_groups) == 1 and bf not in opt.state      # refused before any change


# ---------------------------------------------------------------------- state dicts
def _train(opt, w, b, xt, yt, steps, lr_at=None):
    for i in range(steps):
        opt.zero_grad()
        _loss(xt, yt, w, b).backward()
        opt.step()


@MODES
@pytest.mark.parametrize("cls,kw", [(SGD, dict(lr=0.05, momentum=0.9, nesterov=True)), (Adam, dict(lr=0.01)),
                                    (AdamW, dict(lr=0.01, weight_decay=0.1)), (Adam, dict(lr=0.01, fused=False))])
def test_resume_equals_continue_bit_exact(cls, kw, graph):
    x, y, w0, b0 = _problem()
    with gg.graph_mode(graph):
        xt, yt = gg.tensor(x), gg.tensor(y)
        w, b = gg.tensor(w0, requires_grad=True), gg.tensor(b0, requires_grad=True)
        opt = cls([w, b], **kw)
        _train(opt, w, b, xt, yt, 7)
        sd = opt.state_dict()
        saved_w, saved_b = w.detach().numpy().copy(), b.detach().numpy().copy()
        _train(opt, w, b, xt, yt, 5)
        cont_w, cont_b = w.detach().numpy().copy(), b.detach().numpy().copy()
        # a fresh run resumed from the snapshot
        w2, b2 = gg.tensor(saved_w, requires_grad=True), gg.tensor(saved_b, requires_grad=True)
        opt2 = cls([w2, b2], **kw)
        opt2.load_state_dict(sd)
        assert opt2.state[w2]["step"] == 7
        _train(opt2, w2, b2, xt, yt, 5)
        np.testing.assert_array_equal(w2.detach().numpy(), cont_w)
        np.testing.assert_array_equal(b2.detach().numpy(), cont_b)


def test_state_dict_is_a_snapshot_and_has_torch_layout():
    w = gg.tensor([1.0, 2.0], requires_grad=True)
    opt = Adam([w], lr=0.1)
    (w * w).sum().backward()
    opt.step()
    sd = opt.state_dict()
    assert set(sd) == {"state", "param_groups"}
    assert sd["param_groups"][0]["params"] == [0] and sd["param_groups"][0]["lr"] == 0.1
    assert sd["state"][0]["step"] == 1
    m = sd["state"][0]["exp_avg"].numpy()
    (w * w).sum().backward()
    opt.step()
    np.testing.assert_array_equal(sd["state"][0]["exp_avg"].numpy(), m)   # unchanged by later steps


def test_load_state_dict_refusals_leave_optimizer_unchanged():
    w = gg.tensor([1.0, 2.0], requires_grad=True)
    opt = Adam([w], lr=0.1)
    (w * w).sum().backward()
    opt.step()
    good = opt.state_dict()
    before_m = opt.state[w]["exp_avg"].numpy()

    def bad(mutate):
        sd = opt.state_dict()
        mutate(sd)
        return sd

    cases = [
        (bad(lambda sd: sd["state"][0].__setitem__("exp_avg", gg.zeros(3))), "shape"),
        (bad(lambda sd: sd["state"][0].pop("exp_avg_sq")), "missing"),
        (bad(lambda sd: sd["state"][0].__setitem__("step", -1)), "step"),
        (bad(lambda sd: sd["param_groups"].append(dict(sd["param_groups"][0]))), "groups"),
        (bad(lambda sd: sd["param_groups"][0].__setitem__("params", [0, 1])), "parameters"),
        (bad(lambda sd: sd["param_groups"][0].__setitem__("lr", -3.0)), "learning rate"),
        (bad(lambda sd: sd["state"].__setitem__(5, sd["state"][0])), "index 5"),
        ({"state": {}}, "param_groups"),
    ]
    for sd, match in cases:
        # poison a value that would be written if validation were skipped
        if isinstance(sd.get("state"), dict) and 0 in sd["state"] and "exp_avg" in sd["state"][0] \
                and sd["state"][0]["exp_avg"].shape == (2,):
            sd["state"][0]["exp_avg"] = gg.full((2,), 123.0)
        with pytest.raises(ValueError, match=match):
            opt.load_state_dict(sd)
        np.testing.assert_array_equal(opt.state[w]["exp_avg"].numpy(), before_m)
        assert opt.param_groups[0]["lr"] == 0.1 and opt.state[w]["step"] == 1
    opt.load_state_dict(good)


# ---------------------------------------------------------------------- clipping
@MODES
@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, math.inf])
def test_clip_grad_norm(norm_type, graph):
    rng = np.random.default_rng(1)
    ga, gb = rng.standard_normal((3, 4)), rng.standard_normal(5)
    with gg.graph_mode(graph):
        a = gg.tensor(np.zeros((3, 4), np.float32), requires_grad=True)
        b = gg.tensor(np.zeros(5, np.float32), requires_grad=True)
        ((a * gg.tensor(ga.astype(np.float32))).sum() + (b * gg.tensor(gb.astype(np.float32))).sum()).backward()
        flat = np.concatenate([ga.ravel(), gb]).astype(np.float32).astype(np.float64)
        total = np.abs(flat).max() if norm_type == math.inf else (np.abs(flat) ** norm_type).sum() ** (1 / norm_type)
        max_norm = total / 3
        before = gg.counters()["downloads"]
        n = clip_grad_norm_([a, b], max_norm, norm_type=norm_type)
        assert gg.counters()["downloads"] == before      # no host round trip
        assert isinstance(n, gg.Tensor) and n.shape == ()
        np.testing.assert_allclose(n.item(), total, rtol=1e-5)
        coef = max_norm / (total + 1e-6)
        np.testing.assert_allclose(a.grad.numpy(), ga.astype(np.float32) * coef, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(b.grad.numpy(), gb.astype(np.float32) * coef, rtol=1e-5, atol=1e-7)
        # below the limit: unchanged
        clip_grad_norm_([a, b], 1e6, norm_type=norm_type)
        np.testing.assert_allclose(a.grad.numpy(), ga.astype(np.float32) * coef, rtol=1e-5, atol=1e-7)


def test_clipped_grads_are_what_the_optimizer_uses():
    w = gg.tensor([3.0, 4.0], requires_grad=True)
    opt = SGD([w], lr=1.0)
    (w * gg.tensor([3.0, 4.0])).sum().backward()      # grad (3, 4), norm 5
    clip_grad_norm_([w], 1.0)
    opt.step()
    np.testing.assert_allclose(w.detach().numpy(), [3.0 - 0.6, 4.0 - 0.8], rtol=1e-5)


def test_clip_grad_norm_nonfinite():
    w = gg.tensor([1.0, 2.0], requires_grad=True)
    (w * gg.tensor([np.inf, 1.0])).sum().backward()
    with pytest.raises(RuntimeError, match="non-finite"):
        clip_grad_norm_([w], 1.0, error_if_nonfinite=True)
    assert not np.isfinite(clip_grad_norm_([w], 1.0).item())


@MODES
def test_clip_grad_value(graph):
    with gg.graph_mode(graph):
        w = gg.tensor([1.0, 2.0, 3.0], requires_grad=True)
        (w * gg.tensor([-5.0, 0.5, 7.0])).sum().backward()
        clip_grad_value_([w], 1.0)
        assert w.grad.tolist() == [-1.0, 0.5, 1.0]


# ---------------------------------------------------------------------- capture contract
def test_capture_contract_methods_reproduce_step():
    """capture_update(): hparams → queue → advance inside exclusive is what step() does."""
    x, y, w0, b0 = _problem()
    xt, yt = gg.tensor(x), gg.tensor(y)
    runs = []
    for manual in (False, True):
        w, b = gg.tensor(w0, requires_grad=True), gg.tensor(b0, requires_grad=True)
        opt = AdamW([{"params": [w]}, {"params": [b], "lr": 0.05}], lr=0.01)
        for _ in range(4):
            opt.zero_grad()
            _loss(xt, yt, w, b).backward()
            if not manual:
                opt.step()
                continue
            upd = opt.capture_update()
            arrays = upd.hparams()
            assert len(arrays) == 2 and all(a.dtype == np.float32 for a in arrays)
            hps = [gg.tensor(a) for a in arrays]
            with ENGINE.exclusive("optimizer"):
                before = gg.counters()["uploads"]
                upd.queue([p.grad for p in upd.params], hps)
                assert gg.counters()["uploads"] == before
            upd.advance()
        runs.append((w.detach().numpy(), b.detach().numpy(), opt.state[w]["step"]))
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    np.testing.assert_array_equal(runs[0][1], runs[1][1])
    assert runs[0][2] == runs[1][2] == 4


def test_hparams_change_without_structure_change():
    w = gg.tensor([1.0], requires_grad=True)
    opt = SGD([w], lr=0.1, momentum=0.9)
    upd = opt.capture_update()
    opt.param_groups[0]["lr"] = 0.01
    assert not upd.changed()
    a1 = upd.hparams()[0]
    assert a1[0] == np.float32(0.01)
    opt.param_groups[0]["nesterov"] = True
    assert upd.changed()


def test_bf16_params_use_composed_update_subprocess_safe():
    # bfloat16 parameters: the composed path (ggml's fused op is F32 only); checked in a subprocess
    code = (
        "import numpy as np, ggmlgrad as gg\n"
        "w = gg.tensor([1.0, -2.0], dtype=gg.bfloat16, requires_grad=True)\n"
        "opt = gg.optim.AdamW([w], lr=0.125, weight_decay=0.0)\n"
        "wf = w.float()\n(wf * wf).sum().backward()\n"
        "opt.step()\n"
        "print(w.dtype.name, w.tolist())\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    name, vals = r.stdout.strip().split(" ", 1)
    assert name == "bfloat16"
    assert eval(vals) == [0.875, -1.875]


def test_state_dict_snapshot_is_one_graph_in_eager_mode():
    with gg.graph_mode(False):        # explicit eager, also when GGMLGRAD_GRAPH=1 runs the suite
        ps = [gg.tensor(np.ones(4, np.float32), requires_grad=True) for _ in range(5)]
        opt = Adam(ps, lr=0.1)
        sum(((p * p).sum() for p in ps[1:]), (ps[0] * ps[0]).sum()).backward()
        opt.step()
        before = gg.counters()["computes"]
        sd = opt.state_dict()
        assert gg.counters()["computes"] - before == 1          # 10 clones, one graph
        assert not any(t.is_pending for st in sd["state"].values() for t in st.values() if isinstance(t, gg.Tensor))
        before = gg.counters()["computes"]
        opt.load_state_dict(sd)
        assert gg.counters()["computes"] - before == 1          # every state tensor written in one graph


@pytest.mark.parametrize("cls,kw", [(SGD, dict(lr=0.1, momentum=0.9)), (Adam, dict(lr=0.1)),
                                    (AdamW, dict(lr=0.1, weight_decay=0.1))])
def test_float16_empty_and_0d_parameters(cls, kw):
    h0 = np.array([1.0, -2.0, 0.5], np.float16)
    empty = gg.zeros(0, 3, requires_grad=True)
    s = gg.tensor(2.0, requires_grad=True)
    h = gg.tensor(h0, requires_grad=True)
    opt = cls([empty, s, h], **kw)
    ref = (RefSGD if cls is SGD else (lambda **k: RefAdam(decoupled=cls is AdamW, **k)))(**kw)
    rs, rh = 2.0, h0.astype(np.float64)
    for _ in range(3):
        opt.zero_grad()
        hf = h.float()
        (empty.sum() + s * s + (hf * hf).sum()).backward()
        opt.step()
        rs, rh = ref.step(0, rs, 2 * rs), ref.step(1, rh, 2 * rh.astype(np.float16).astype(np.float64))
        rh = rh.astype(np.float16).astype(np.float64)      # the parameter is stored as float16
    assert h.dtype is gg.float16 and empty.shape == (0, 3) and s.shape == ()
    np.testing.assert_allclose(s.item(), rs, rtol=1e-5)
    np.testing.assert_allclose(h.detach().numpy().astype(np.float64), rh, rtol=2e-3, atol=2e-3)


def test_capture_update_queue_checks_its_arguments():
    w = gg.tensor([1.0, 2.0], requires_grad=True)
    upd = AdamW([w]).capture_update()
    with ENGINE.exclusive("test"):
        with pytest.raises(ValueError, match="adamw_fused: gradient shape"):
            upd.queue([gg.zeros(3)], [gg.tensor(upd.hparams()[0])])
    with ENGINE.exclusive("test"):
        with pytest.raises(ValueError, match="adamw_fused: hyperparameter"):
            upd.queue([gg.zeros(2)], [gg.zeros(3)])
    with ENGINE.exclusive("test"):
        with pytest.raises(ValueError, match="1 grads for 1 parameters|2 grads for 1 parameters"):
            upd.queue([gg.zeros(2), gg.zeros(2)], [gg.tensor(upd.hparams()[0])])
    assert w.tolist() == [1.0, 2.0]


@pytest.mark.parametrize("fused", [None, False], ids=["fused", "composed"])
@pytest.mark.parametrize("cls", [Adam, AdamW])
def test_single_step_from_loaded_state_eps_placement(cls, fused):
    """One step from a restored state (t=5, tiny v, large eps) where eps inside vs outside the
    square root would differ by orders of magnitude: must match PyTorch's rule to float32 precision."""
    rng = np.random.default_rng(7)
    p0 = rng.standard_normal(50).astype(np.float32)
    m0 = (rng.standard_normal(50) * 1e-3).astype(np.float32)
    v0 = (rng.random(50) * 1e-6).astype(np.float32)
    g0 = (rng.standard_normal(50) * 1e-3).astype(np.float32)
    lr, b1, b2, eps, wd = 0.01, 0.9, 0.99, 1e-3, 0.1
    w = gg.tensor(p0, requires_grad=True)
    opt = cls([w], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd, fused=fused)
    sd = opt.state_dict()
    sd["state"][0] = {"step": 5, "exp_avg": gg.tensor(m0), "exp_avg_sq": gg.tensor(v0)}
    opt.load_state_dict(sd)
    w.grad = gg.tensor(g0)
    opt.step()
    p, g = p0.astype(np.float64), g0.astype(np.float64)
    if cls is AdamW:
        p = p * (1 - lr * wd)
    else:
        g = g + wd * p
    m = b1 * m0 + (1 - b1) * g
    v = b2 * v0 + (1 - b2) * g * g
    t = 6
    expected = p - lr / (1 - b1 ** t) * m / (np.sqrt(v) / math.sqrt(1 - b2 ** t) + eps)
    np.testing.assert_allclose(w.detach().numpy(), expected, rtol=2e-6, atol=2e-7)
    np.testing.assert_allclose(opt.state[w]["exp_avg"].numpy(), m, rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(opt.state[w]["exp_avg_sq"].numpy(), v, rtol=1e-5, atol=1e-12)
    assert opt.state[w]["step"] == 6


@pytest.mark.parametrize("make_opt,make_sched", [
    (lambda ps: AdamW(ps, lr=0.01, weight_decay=0.1),
     lambda o: gg.optim.lr_scheduler.OneCycleLR(o, max_lr=0.05, total_steps=12)),      # lr and beta1 move
    (lambda ps: SGD(ps, lr=0.05, momentum=0.9, dampening=0.2, nesterov=False),
     lambda o: gg.optim.lr_scheduler.CyclicLR(o, base_lr=0.01, max_lr=0.1, step_size_up=3)),  # lr and momentum
], ids=["adamw_onecycle", "sgd_cyclic"])
def test_captured_step_with_schedulers_equals_plain_steps(make_opt, make_sched):
    """The capture contract: hyperparameters a scheduler changes (lr, beta1, momentum, SGD's first-step
    dampening switch) are inputs of the recording: one recording, the same trajectory as step()."""
    x, y, w0, b0 = _problem()
    finals = []
    for captured in (False, True):
        w, b = gg.tensor(w0, requires_grad=True), gg.tensor(b0, requires_grad=True)
        opt = make_opt([w, b])
        sched = make_sched(opt)
        if captured:
            step = gg.capture_step(lambda xx, yy: _loss(xx, yy, w, b), opt)
        for _ in range(10):
            if captured:
                step(x, y)
            else:
                opt.zero_grad()
                _loss(gg.tensor(x), gg.tensor(y), w, b).backward()
                opt.step()
            sched.step()
        if captured:
            assert step.n_recordings == 1
        assert opt.state[w]["step"] == 10
        finals.append((w.detach().numpy(), b.detach().numpy()))
    np.testing.assert_allclose(finals[1][0], finals[0][0], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(finals[1][1], finals[0][1], rtol=1e-6, atol=1e-6)
