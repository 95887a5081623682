"""Normalisation, activation, dropout and parameter-container layers of issue 22 beyond the parity
table (tests/test_torch_parity_layers.py): torch's conventions at kinks and non-finite values, a
captured training step with batch norm (computes counted, running statistics against torch over
several steps), channel dropout structure, ParameterList/ParameterDict with optimizers and state
dicts, reprs and errors in every mode."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

import ggmlgrad as gg
import ggmlgrad.nn.functional as F

torch.set_num_threads(1)
MODES = ["eager", "graph"]
ACTS = ["hardtanh", "relu6", "hardsigmoid", "hardswish", "mish", "logsigmoid", "softsign", "tanhshrink"]
SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -3.0, 3.0, 6.0, -1.0, 1.0, -0.5, 0.7, -4.0, 4.0, 25.0, -25.0],
                   np.float32)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ACTS + ["prelu"])
def test_activation_values_and_gradients_at_kinks_and_nonfinite_match_torch(name, mode):
    tx = torch.tensor(SPECIAL, requires_grad=True)
    tw = torch.tensor([0.25], requires_grad=True)
    ty = torch.nn.functional.prelu(tx, tw) if name == "prelu" else getattr(torch.nn.functional, name)(tx)
    ty.sum().backward()
    with gg.graph_mode(mode == "graph"):
        gx = gg.tensor(SPECIAL, requires_grad=True)
        gw = gg.tensor([0.25], requires_grad=True)
        gy = F.prelu(gx, gw) if name == "prelu" else getattr(F, name)(gx)
        gy.sum().backward()
        np.testing.assert_allclose(gy.detach().numpy(), ty.detach().numpy(), atol=1e-6, rtol=1e-6)
        np.testing.assert_allclose(gx.grad.numpy(), tx.grad.numpy(), atol=1e-6, rtol=1e-6)
        if name == "prelu":
            np.testing.assert_allclose(gw.grad.numpy(), tw.grad.numpy())


# ---------------------------------------------------------------- batch norm in a captured training step
def _cnn_pair(with_bn: bool):
    def build(lib):
        layers = [lib.nn.Linear(6, 8)] + ([lib.nn.BatchNorm1d(8)] if with_bn else []) + \
            [lib.nn.ReLU(), lib.nn.Linear(8, 3)]
        return lib.nn.Sequential(*layers)
    torch.manual_seed(0)
    tm = build(torch)
    gm = build(gg)
    gm.load_state_dict({k: v.numpy() for k, v in tm.state_dict().items()})
    return tm, gm


def _batches(n=3):
    rng = np.random.default_rng(5)
    return [(rng.standard_normal((16, 6)).astype(np.float32), rng.standard_normal((16, 3)).astype(np.float32))
            for _ in range(n)]


def test_captured_step_with_batch_norm_computes_as_often_as_without_and_matches_torch():
    counts = {}
    for with_bn in (False, True):
        tm, gm = _cnn_pair(with_bn)
        opt = gg.optim.SGD(gm.parameters(), lr=0.1)
        topt = torch.optim.SGD(tm.parameters(), lr=0.1)
        step = gg.capture_step(lambda x, y: F.mse_loss(gm(x), y), opt)
        for i, (x, y) in enumerate(_batches()):
            if i == 2:
                gg.reset_counters()
            loss = step(x, y)
            if i == 2:
                counts[with_bn] = gg.counters()["computes"]
            topt.zero_grad()
            tl = torch.nn.functional.mse_loss(tm(torch.tensor(x)), torch.tensor(y))
            tl.backward()
            topt.step()
            np.testing.assert_allclose(loss, tl.item(), rtol=1e-5, atol=1e-6)
        for k, v in tm.state_dict().items():   # parameters and running statistics after 3 replays/steps
            np.testing.assert_allclose(gm.state_dict()[k].numpy(), v.numpy(), rtol=1e-4, atol=1e-6, err_msg=k)
    assert counts[True] == counts[False] == 1


def test_graph_mode_training_with_batch_norm_matches_torch():
    tm, gm = _cnn_pair(True)
    opt = gg.optim.SGD(gm.parameters(), lr=0.1)
    topt = torch.optim.SGD(tm.parameters(), lr=0.1)
    with gg.graph_mode(True):
        for x, y in _batches():
            opt.zero_grad()
            F.mse_loss(gm(gg.tensor(x)), gg.tensor(y)).backward()
            opt.step()
            topt.zero_grad()
            torch.nn.functional.mse_loss(tm(torch.tensor(x)), torch.tensor(y)).backward()
            topt.step()
    for k, v in tm.state_dict().items():
        np.testing.assert_allclose(gm.state_dict()[k].numpy(), v.numpy(), rtol=1e-4, atol=1e-6, err_msg=k)


def test_captured_eval_forward_follows_train_eval_switch():
    tm, gm = _cnn_pair(True)
    fwd = gg.capture(lambda x: gm(x))
    x = _batches(1)[0][0]
    for train in (True, False, True):
        gm.train(train)
        tm.train(train)
        np.testing.assert_allclose(fwd(x), tm(torch.tensor(x)).detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(gm[1].running_mean.numpy(), tm[1].running_mean.numpy(), rtol=1e-5, atol=1e-6)
    assert gm[1].num_batches_tracked.item() == tm[1].num_batches_tracked.item() == 2


def test_functional_batch_norm_updates_running_stats_as_torch():
    x = np.random.default_rng(2).standard_normal((5, 3, 4)).astype(np.float32)
    trm, trv = torch.zeros(3), torch.ones(3)
    ty = torch.nn.functional.batch_norm(torch.tensor(x), trm, trv, training=True, momentum=0.25)
    for mode in MODES:
        grm, grv = gg.zeros(3), gg.ones(3)
        with gg.graph_mode(mode == "graph"):
            gy = F.batch_norm(gg.tensor(x), grm, grv, training=True, momentum=0.25)
            np.testing.assert_allclose(gy.numpy(), ty.numpy(), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(grm.numpy(), trm.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(grv.numpy(), trv.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", MODES + ["capture"])
def test_batch_norm_errors_are_torch_errors_in_every_mode(mode):
    bn2, bn1 = gg.nn.BatchNorm2d(3), gg.nn.BatchNorm1d(3)
    gn, inn, glu, prelu = gg.nn.GroupNorm(2, 4), gg.nn.InstanceNorm1d(3, affine=True), gg.nn.GLU(), gg.nn.PReLU(3)
    cases = [(lambda x: bn2(x), (2, 3, 4), ValueError, "expected 4D input"),
             (lambda x: bn1(x), (1, 3), ValueError, "more than 1 value per channel"),
             (lambda x: bn1(x), (4, 5), RuntimeError, "running_mean should contain 5 elements not 3"),
             (lambda x: gn(x), (2, 3, 4), RuntimeError, "divisible by num_groups"),
             (lambda x: inn(x), (2, 4, 5), ValueError, "num_features"),
             (lambda x: glu(x), (2, 3), RuntimeError, "Halving dimension"),
             (lambda x: prelu(x), (2, 4), RuntimeError, "Mismatch of parameter numbers")]
    for fn, shape, err, match in cases:
        x = np.ones(shape, np.float32)
        with pytest.raises(err, match=match):
            if mode == "capture":
                gg.capture(fn)(x)
            else:
                with gg.graph_mode(mode == "graph"):
                    fn(gg.tensor(x)).numpy()
    assert bn1.num_batches_tracked.item() == 0    # nothing was written by the failed calls
    bn1.eval()
    assert bn1(gg.ones(1, 3)).shape == (1, 3)     # eval mode takes a batch of one (running statistics)


def test_reprs_match_torch():
    for make in (lambda lib: lib.nn.BatchNorm2d(3), lambda lib: lib.nn.BatchNorm1d(4, momentum=None, affine=False),
                 lambda lib: lib.nn.GroupNorm(2, 4), lambda lib: lib.nn.InstanceNorm1d(3),
                 lambda lib: lib.nn.RMSNorm([3, 4]), lambda lib: lib.nn.PReLU(3), lambda lib: lib.nn.Hardtanh(),
                 lambda lib: lib.nn.GLU(), lambda lib: lib.nn.Dropout2d(), lambda lib: lib.nn.AlphaDropout(0.2)):
        assert repr(make(gg)) == repr(make(torch))


# ---------------------------------------------------------------- dropout structure
@pytest.mark.parametrize("mode", MODES + ["capture"])
@pytest.mark.parametrize("fn,shape,lead", [(F.dropout2d, (4, 6, 3, 3), 2), (F.dropout1d, (4, 6, 5), 2),
                                           (F.dropout2d, (6, 3, 3), 1)])
def test_channel_dropout_zeroes_whole_channels(fn, shape, lead, mode):
    p = 0.4
    x = np.random.default_rng(3).uniform(1.0, 2.0, shape).astype(np.float32)
    if mode == "capture":
        cap = gg.capture(lambda t: fn(t, p, True))
        outs = [np.asarray(cap(x)) for _ in range(3)]
    else:
        with gg.graph_mode(mode == "graph"):
            outs = [fn(gg.tensor(x), p, True).numpy() for _ in range(3)]
    for out in outs:
        ratio = (out / x).reshape(shape[:lead] + (-1,))
        per_channel = ratio[..., :1]
        np.testing.assert_allclose(ratio, np.broadcast_to(per_channel, ratio.shape), rtol=1e-6)
        v = per_channel.ravel()
        assert np.all(np.isclose(v, 0.0) | np.isclose(v, 1 / (1 - p), rtol=1e-6))
    masks = [tuple((o.reshape(shape[:lead] + (-1,))[..., 0] == 0).ravel()) for o in outs]
    assert len(set(masks)) > 1          # a fresh mask per call (per replay in capture)


def test_alpha_dropout_keeps_zero_mean_and_unit_variance():
    gg.manual_seed(0)
    xs = np.random.default_rng(4).standard_normal(40000).astype(np.float32)
    x = gg.tensor(xs)
    y = F.alpha_dropout(x, 0.3, training=True).numpy()
    assert abs(y.mean()) < 0.03 and abs(y.std() - 1.0) < 0.03
    alpha, p = 1.7580993408473766, 0.3
    a = 1.0 / np.sqrt((alpha ** 2 * p + 1) * (1 - p))
    dropped = np.abs(y - (-alpha * a * (1 - p))) < 1e-5          # torch's value of a dropped unit
    kept = np.abs(y - (a * xs + alpha * a * p)) < 1e-5             # a x + b for the kept ones
    assert np.all(dropped | kept)
    assert abs(dropped.mean() - p) < 0.02
    np.testing.assert_array_equal(F.alpha_dropout(x, 0.3, training=False).numpy(), xs)


# ---------------------------------------------------------------- parameter containers
def test_parameter_list_and_dict_register_for_optimizers_and_state_dicts(tmp_path):
    def build(lib):
        m = lib.nn.Module()
        m.pl = lib.nn.ParameterList([lib.nn.Parameter(lib.ones(2)), lib.nn.Parameter(lib.zeros(3))])
        m.pd = lib.nn.ParameterDict({"scale": lib.nn.Parameter(lib.ones(1)), "shift": lib.nn.Parameter(lib.zeros(2))})
        return m
    tm, gm = build(torch), build(gg)
    with torch.no_grad():
        for i, p in enumerate(tm.parameters()):
            p.copy_(torch.arange(p.numel(), dtype=torch.float32) + i)
    assert list(gm.state_dict()) == list(tm.state_dict()) == ["pl.0", "pl.1", "pd.scale", "pd.shift"]
    save_file(tm.state_dict(), str(tmp_path / "p.safetensors"))
    gm.load_state_dict(gg.load(str(tmp_path / "p.safetensors")))
    opt = gg.optim.SGD(gm.parameters(), lr=0.5)
    loss = (gm.pl[0] * 2).sum() + (gm.pl[1] ** 2).sum() + gm.pd["scale"].sum() * gm.pd["shift"].sum()
    loss.backward()
    opt.step()
    topt = torch.optim.SGD(tm.parameters(), lr=0.5)
    tloss = (tm.pl[0] * 2).sum() + (tm.pl[1] ** 2).sum() + tm.pd["scale"].sum() * tm.pd["shift"].sum()
    tloss.backward()
    topt.step()
    for k, v in tm.state_dict().items():
        np.testing.assert_allclose(gm.state_dict()[k].numpy(), v.detach().numpy(), rtol=1e-6, err_msg=k)
    gm.pl.append(gg.zeros(4))                   # a plain tensor becomes a Parameter
    assert len(gm.pl) == 3 and isinstance(gm.pl[2], gg.nn.Parameter) and gm.pl[-1].requires_grad
    del gm.pd["shift"]
    assert list(gm.pd.keys()) == ["scale"] and len(list(gm.parameters())) == 4


# ---------------------------------------------------------------- loss value checks
def test_gaussian_nll_refuses_negative_variance():
    x = gg.zeros(3)
    with pytest.raises(ValueError, match="var has negative"):
        F.gaussian_nll_loss(x, x, gg.tensor([1.0, -1.0, 1.0]))
    with pytest.raises(ValueError, match="var has negative"):
        F.gaussian_nll_loss(x, x, -1.0)
    with gg.graph_mode(True):
        v = gg.tensor([1.0, -1.0, 1.0]) * 1.0    # pending: checked after the compute
        loss = F.gaussian_nll_loss(x, x, v)
        with pytest.raises(RuntimeError, match="var has negative"):
            loss.item()


# ---------------------------------------------------------------- the layers together, trained as torch trains them
def _block(lib):
    class Net(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.inp = lib.nn.Linear(5, 24)
            self.bn = lib.nn.BatchNorm2d(4, momentum=None)
            self.act = lib.nn.PReLU(4)
            self.gn = lib.nn.GroupNorm(2, 4)
            self.rms = lib.nn.RMSNorm(6)
            self.out = lib.nn.Linear(12, 3)

        def forward(self, x):
            h = self.inp(x).reshape(x.shape[0], 4, 2, 3)
            h = self.gn(self.act(self.bn(h))).reshape(x.shape[0], 4, 6)
            h = lib.nn.functional.glu(self.rms(h), dim=-1).reshape(x.shape[0], 12)
            return lib.nn.functional.hardswish(self.out(h))
    return Net()


@pytest.mark.parametrize("mode", ["eager", "graph", "capture"])
def test_network_of_the_new_layers_trains_as_in_torch(mode):
    torch.manual_seed(1)
    tm, gm = _block(torch), _block(gg)
    gm.load_state_dict({k: v.numpy() for k, v in tm.state_dict().items()})
    # SGD: the RMSNorm after the GroupNorm makes the GroupNorm's weight gradient 0 up to rounding, which
    # Adam would blow up to steps of lr
    topt = torch.optim.SGD(tm.parameters(), lr=0.1, momentum=0.9)
    opt = gg.optim.SGD(gm.parameters(), lr=0.1, momentum=0.9)
    rng = np.random.default_rng(9)
    step = gg.capture_step(lambda x, y: F.kl_div(F.log_softmax(gm(x), -1), y, reduction="batchmean"), opt)
    for _ in range(3):
        x = rng.standard_normal((8, 5)).astype(np.float32)
        y = rng.dirichlet(np.ones(3), 8).astype(np.float32)
        topt.zero_grad()
        tl = torch.nn.functional.kl_div(torch.log_softmax(tm(torch.tensor(x)), -1), torch.tensor(y),
                                        reduction="batchmean")
        tl.backward()
        topt.step()
        if mode == "capture":
            loss = step(x, y)
        else:
            with gg.graph_mode(mode == "graph"):
                opt.zero_grad()
                lv = F.kl_div(F.log_softmax(gm(gg.tensor(x)), -1), gg.tensor(y), reduction="batchmean")
                lv.backward()
                opt.step()
                loss = lv.item()
        np.testing.assert_allclose(loss, tl.item(), rtol=1e-4, atol=1e-6)
    for k, v in tm.state_dict().items():
        np.testing.assert_allclose(gm.state_dict()[k].numpy(), v.numpy(), rtol=2e-4, atol=2e-5, err_msg=k)
    gm.eval()
    tm.eval()
    x = rng.standard_normal((4, 5)).astype(np.float32)
    np.testing.assert_allclose(gm(gg.tensor(x)).detach().numpy(), tm(torch.tensor(x)).detach().numpy(), rtol=1e-4,
                               atol=1e-5)


@pytest.mark.parametrize("module", ["ggmlgrad.nn.functional_norm", "ggmlgrad.nn.functional_act",
                                    "ggmlgrad.nn.functional_loss", "ggmlgrad.nn.normalization",
                                    "ggmlgrad.nn.activations_extra", "ggmlgrad.nn.losses_extra",
                                    "ggmlgrad.nn.parameter_containers", "ggmlgrad.ops.norm_ops"])
def test_docstring_examples(module):
    import doctest
    import importlib
    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0


def test_captured_step_that_writes_a_parameter_keeps_two_computes_and_eager_values():
    """Only writes to memory the optimizer does not update join the update's graph (merge_ok)."""
    def run(captured: bool):
        gg.manual_seed(3)
        lin = gg.nn.Linear(3, 2)
        opt = gg.optim.SGD(lin.parameters(), lr=0.1)
        x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)

        def loss_fn(xb):
            with gg.no_grad():
                lin.bias.mul_(0.5)                 # an in-place write of an updated parameter
            return (lin(xb) ** 2).mean()
        counts = []
        if captured:
            step = gg.capture_step(loss_fn, opt)
            for _ in range(3):
                gg.reset_counters()
                step(x)
                counts.append(gg.counters()["computes"])
        else:
            for _ in range(3):
                opt.zero_grad()
                loss_fn(gg.tensor(x)).backward()
                opt.step()
        return lin.weight.detach().numpy(), lin.bias.detach().numpy(), counts
    w1, b1, counts = run(True)
    w0, b0, _ = run(False)
    np.testing.assert_allclose(w1, w0, rtol=1e-6)
    np.testing.assert_allclose(b1, b0, rtol=1e-6)
    assert counts[-1] == 2


@pytest.mark.parametrize("mode", MODES)
def test_empty_batches_give_empty_results_as_torch(mode):
    tb = torch.nn.BatchNorm2d(3)
    tb(torch.zeros(0, 3, 4, 4))
    bn, gn, inn = gg.nn.BatchNorm2d(3), gg.nn.GroupNorm(1, 3), gg.nn.InstanceNorm1d(3)
    with gg.graph_mode(mode == "graph"):
        assert bn(gg.zeros(0, 3, 4, 4)).numpy().shape == (0, 3, 4, 4)
        assert gn(gg.zeros(0, 3, 4)).numpy().shape == (0, 3, 4)
        assert inn(gg.zeros(0, 3, 4)).numpy().shape == (0, 3, 4)
    np.testing.assert_array_equal(bn.running_mean.numpy(), tb.running_mean.numpy())
    assert bn.num_batches_tracked.item() == tb.num_batches_tracked.item() == 1


def test_int_inputs_of_the_new_activations_as_torch():
    import torch
    import torch.nn.functional as TF
    x = np.array([-7, -1, 0, 2, 9], np.int32)
    cases = [("relu6", {}), ("hardtanh", {}), ("hardtanh", {"min_val": -0.5, "max_val": 2.5}), ("softsign", {}),
             ("tanhshrink", {})]
    for name, kw in cases:
        want = getattr(TF, name)(torch.tensor(x.astype(np.int64)), **kw)
        got = getattr(gg.nn.functional, name)(gg.tensor(x), **kw)
        rule = {torch.int64: gg.int32, torch.float32: gg.float32}[want.dtype]
        assert got.dtype is rule, (name, got.dtype, want.dtype)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-6)
    for name in ("hardswish", "mish", "logsigmoid"):    # torch refuses integers here; so do we
        with pytest.raises((NotImplementedError, RuntimeError)):
            getattr(TF, name)(torch.tensor(x.astype(np.int64)))
        with pytest.raises((TypeError, RuntimeError)):
            getattr(gg.nn.functional, name)(gg.tensor(x))
