"""Convolution, pooling, padding and resampling layers against torch (issue 22).

Each case builds the torch module and the ggmlgrad module with the same constructor arguments,
moves the weights torch → ``.safetensors`` → ``load_state_dict``, and compares the ``repr``, the
outputs, the input gradient and the parameter gradients on random inputs, in train and eval mode,
in eager mode, graph mode and inside a capture (``gg.capture`` for the output and input gradient,
``gg.capture_step`` with SGD(lr=1) for the parameter gradients, seen as the updated parameters).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

import ggmlgrad as gg

CASES = {
    "conv2d": (lambda nn: nn.Conv2d(3, 4, 3, stride=2, padding=1), (2, 3, 7, 6)),
    "conv2d_groups_dilation": (lambda nn: nn.Conv2d(4, 6, (3, 2), padding=(2, 1), dilation=(2, 1), groups=2),
                               (2, 4, 6, 5)),
    "conv2d_depthwise_same": (lambda nn: nn.Conv2d(4, 8, 3, groups=4, padding="same", bias=False), (1, 4, 5, 6)),
    "conv2d_same_even": (lambda nn: nn.Conv2d(2, 3, (2, 4), padding="same"), (2, 2, 5, 6)),
    "conv2d_valid": (lambda nn: nn.Conv2d(2, 3, 2, padding="valid", stride=(1, 2)), (2, 2, 5, 6)),
    "conv2d_reflect": (lambda nn: nn.Conv2d(2, 3, 3, padding=1, padding_mode="reflect"), (2, 2, 5, 4)),
    "conv2d_replicate": (lambda nn: nn.Conv2d(2, 3, 3, padding=(2, 1), padding_mode="replicate"), (1, 2, 5, 4)),
    "conv2d_circular": (lambda nn: nn.Conv2d(2, 3, 3, padding=1, padding_mode="circular", stride=2), (1, 2, 5, 6)),
    "conv1d": (lambda nn: nn.Conv1d(3, 4, 3, padding=1, stride=2, dilation=1), (2, 3, 9)),
    "conv1d_same_circular": (lambda nn: nn.Conv1d(2, 4, 4, padding="same", padding_mode="circular", groups=2),
                             (2, 2, 7)),
    "conv_transpose2d": (lambda nn: nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1, output_padding=1), (2, 3, 4, 3)),
    "conv_transpose2d_groups": (lambda nn: nn.ConvTranspose2d(4, 6, 2, stride=(2, 1), groups=2, dilation=(1, 2)),
                                (1, 4, 3, 3)),
    "conv_transpose1d": (lambda nn: nn.ConvTranspose1d(3, 2, 4, stride=2, padding=1, bias=False), (2, 3, 5)),
    "max_pool2d": (lambda nn: nn.MaxPool2d(3, 2, 1, ceil_mode=True), (2, 3, 7, 6)),
    "max_pool2d_dilation": (lambda nn: nn.MaxPool2d(2, 1, dilation=2), (1, 2, 5, 5)),
    "max_pool1d": (lambda nn: nn.MaxPool1d(2), (2, 3, 8)),
    "avg_pool2d": (lambda nn: nn.AvgPool2d(3, 2, 1, count_include_pad=False, ceil_mode=True), (2, 3, 7, 6)),
    "avg_pool2d_default": (lambda nn: nn.AvgPool2d((2, 3)), (1, 2, 6, 6)),
    "avg_pool1d": (lambda nn: nn.AvgPool1d(3, 2, 1), (2, 3, 8)),
    "adaptive_avg_pool2d": (lambda nn: nn.AdaptiveAvgPool2d((3, 2)), (2, 3, 7, 5)),
    "adaptive_avg_pool2d_global": (lambda nn: nn.AdaptiveAvgPool2d(1), (2, 3, 4, 4)),
    "adaptive_avg_pool1d": (lambda nn: nn.AdaptiveAvgPool1d(3), (2, 3, 7)),
    "adaptive_max_pool2d": (lambda nn: nn.AdaptiveMaxPool2d((2, 3)), (2, 3, 5, 7)),
    "zero_pad2d": (lambda nn: nn.ZeroPad2d((1, 2, 0, 1)), (1, 2, 3, 4)),
    "constant_pad1d": (lambda nn: nn.ConstantPad1d(2, 0.5), (2, 3, 4)),
    "constant_pad2d": (lambda nn: nn.ConstantPad2d((1, 0, 2, 1), -1.5), (1, 2, 3, 4)),
    "reflection_pad1d": (lambda nn: nn.ReflectionPad1d((2, 1)), (2, 3, 4)),
    "reflection_pad2d": (lambda nn: nn.ReflectionPad2d(1), (1, 2, 3, 4)),
    "upsample_nearest": (lambda nn: nn.Upsample(scale_factor=2), (1, 2, 3, 4)),
    "upsample_bilinear": (lambda nn: nn.Upsample(size=(5, 7), mode="bilinear", align_corners=False), (1, 2, 3, 4)),
    "upsample_bilinear_align": (lambda nn: nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True),
                                (1, 2, 3, 4)),
    "pixel_shuffle": (lambda nn: nn.PixelShuffle(2), (2, 8, 3, 2)),
    "pixel_unshuffle": (lambda nn: nn.PixelUnshuffle(2), (2, 2, 4, 6)),
    "unflatten": (lambda nn: nn.Unflatten(1, (2, 3)), (4, 6, 2)),
    "small_cnn": (lambda nn: nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                           nn.Conv2d(4, 6, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                           nn.Linear(6, 3)), (3, 1, 8, 8)),
}


def _pair(name: str, tmp_path):
    """(torch module, ggmlgrad module with the torch weights loaded through a .safetensors file)."""
    build, _ = CASES[name]
    torch.manual_seed(0)
    tm = build(torch.nn)
    gm = build(gg.nn)
    state = tm.state_dict()
    if state:
        path = tmp_path / "weights.safetensors"
        save_file({k: v.contiguous() for k, v in state.items()}, str(path))
        gm.load_state_dict(gg.load(str(path)))
    return tm, gm


def _inputs(name: str):
    shape = CASES[name][1]
    rng = np.random.default_rng(sum(map(ord, name)))
    return rng.standard_normal(shape).astype(np.float32), rng


def _torch_run(tm, x, w):
    tx = torch.tensor(x, requires_grad=True)
    y = tm(tx)
    (y * torch.tensor(w)).sum().backward()
    return y.detach().numpy(), tx.grad.numpy(), {k: p.grad.numpy() for k, p in tm.named_parameters()}


def _close(got, want, what):
    np.testing.assert_allclose(np.asarray(got), want, atol=2e-5, rtol=2e-4, err_msg=what)


# None of these layers behaves differently in train and eval mode; both modes run for the networks
# and the layers the example uses, train mode for the others (keeps the file fast).
BOTH_MODES = {"small_cnn", "conv2d", "max_pool2d", "avg_pool2d", "conv_transpose2d"}
MODULE_CASES = [(n, t) for n in sorted(CASES) for t in ((True, False) if n in BOTH_MODES else (True,))]


@pytest.mark.filterwarnings("ignore:Using padding='same'")
@pytest.mark.parametrize("mode", ["eager", "graph"])
@pytest.mark.parametrize("name,training", MODULE_CASES)
def test_module_matches_torch(name, mode, training, tmp_path):
    tm, gm = _pair(name, tmp_path)
    tm.train(training)
    gm.train(training)
    assert repr(gm) == repr(tm)
    x, rng = _inputs(name)
    y_t = tm(torch.tensor(x))
    w = rng.standard_normal(tuple(y_t.shape)).astype(np.float32)
    want_y, want_gx, want_gp = _torch_run(tm, x, w)
    with gg.graph_mode(mode == "graph"):
        gx = gg.tensor(x, requires_grad=True)
        y = gm(gx)
        (y * gg.tensor(w)).sum().backward()
        _close(y.detach().numpy(), want_y, f"{name} output")
        _close(gx.grad.numpy(), want_gx, f"{name} input gradient")
        got_gp = dict(gm.named_parameters())
        assert set(got_gp) == set(want_gp)
        for k, g in want_gp.items():
            _close(got_gp[k].grad.numpy(), g, f"{name} gradient of {k}")


@pytest.mark.filterwarnings("ignore:Using padding='same'")
@pytest.mark.parametrize("name,training", MODULE_CASES)
def test_module_matches_torch_in_a_capture(name, training, tmp_path):
    tm, gm = _pair(name, tmp_path)
    tm.train(training)
    gm.train(training)
    x, rng = _inputs(name)
    w = rng.standard_normal(tuple(tm(torch.tensor(x)).shape)).astype(np.float32)
    want_y, want_gx, _ = _torch_run(tm, x, w)
    params = list(gm.parameters())
    for p in params:                  # the capture's backward reaches the input only
        p.requires_grad_(False)

    def forward_and_input_grad(xb, wb):
        xb.requires_grad_(True)
        y = gm(xb)
        (y * wb).sum().backward()
        return y, xb.grad

    captured = gg.capture(forward_and_input_grad)
    for _ in range(2):                # record, then replay
        y, gx = captured(x, w)
    _close(y, want_y, f"{name} output (capture)")
    _close(gx, want_gx, f"{name} input gradient (capture)")
    if not params:
        return
    for p in params:
        p.requires_grad_(True)
    # parameter gradients through capture_step: one SGD(lr=1) step each side, compared as parameters
    t_opt = torch.optim.SGD(tm.parameters(), lr=1.0)
    g_opt = gg.optim.SGD(gm.parameters(), lr=1.0)
    step = gg.capture_step(lambda xb, wb: (gm(xb) * wb).sum(), g_opt)
    for _ in range(2):
        t_opt.zero_grad()
        (tm(torch.tensor(x)) * torch.tensor(w)).sum().backward()
        t_opt.step()
        step(x, w)
    got = dict(gm.named_parameters())
    for k, p in tm.named_parameters():
        _close(got[k].detach().numpy(), p.detach().numpy(), f"{name} {k} after two captured SGD steps")


@pytest.mark.parametrize("fast", [True, False], ids=["ggml_pool", "window_rows"])
def test_max_pool_values_indices_and_gradients_match_torch_with_ties_nan_and_inf(fast, monkeypatch):
    """Both routes (ggml's pool_2d/pool_2d_back and the window rows) give torch's values, indices and
    gradients: the first maximum among ties, the LAST NaN of a window (torch's CPU kernel takes every
    NaN it meets), the first element of a window of only -inf."""
    from ggmlgrad.ops import pool
    monkeypatch.setattr(pool, "FAST_MAX_POOL", fast)
    rng = np.random.default_rng(5)
    x = np.maximum(rng.standard_normal((2, 3, 6, 6)), 0).astype(np.float32)       # many ties at 0
    x[0, 0, 0, 0] = x[0, 0, 1, 1] = x[0, 1, 4, 4] = x[0, 2, 2, 2] = np.nan
    x[1, 1, 2:4, 2:4] = -np.inf
    x[0, 2, 2, 3] = x[0, 2, 3, 2] = x[0, 2, 3, 3] = -np.inf
    x[1, 2, 0, 0] = np.inf
    for kw in (dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=3, stride=1, padding=1),
               dict(kernel_size=3, stride=2, padding=1, ceil_mode=True), dict(kernel_size=2, stride=1, dilation=2)):
        tx = torch.tensor(x, requires_grad=True)
        ty, ti = torch.nn.functional.max_pool2d(tx, return_indices=True, **kw)
        w = rng.standard_normal(tuple(ty.shape)).astype(np.float32)
        (ty * torch.tensor(w)).sum().backward()
        for mode in ("eager", "graph"):
            with gg.graph_mode(mode == "graph"):
                gx = gg.tensor(x, requires_grad=True)
                gy, gi = gg.nn.functional.max_pool2d(gx, return_indices=True, **kw)
                (gy * gg.tensor(w)).sum().backward()
                np.testing.assert_array_equal(gy.detach().numpy(), ty.detach().numpy())
                np.testing.assert_array_equal(gi.numpy(), ti.numpy().astype(np.int32))
                np.testing.assert_allclose(gx.grad.numpy(), tx.grad.numpy(), atol=1e-6, err_msg=str(kw))


@pytest.mark.parametrize("mode,kw", [("constant", {"value": 2.5}), ("reflect", {}), ("replicate", {}),
                                     ("circular", {})])
def test_functional_pad_matches_torch(mode, kw):
    x4 = np.random.default_rng(1).standard_normal((2, 3, 4, 5)).astype(np.float32)
    for pads, x in (((1, 2), x4[0]), ((2, 1, 1, 3), x4), ((2, 1, 1, 3), x4[0])):
        tx = torch.tensor(x, requires_grad=True)
        ty = torch.nn.functional.pad(tx, pads, mode=mode, **kw)
        ty.pow(2).sum().backward()
        gx = gg.tensor(x, requires_grad=True)
        gy = gg.nn.functional.pad(gx, pads, mode=mode, **kw)
        (gy * gy).sum().backward()
        np.testing.assert_array_equal(gy.detach().numpy(), ty.detach().numpy())
        np.testing.assert_allclose(gx.grad.numpy(), tx.grad.numpy(), rtol=1e-6)
    if mode != "constant":   # torch's rule: a 2-entry non-constant pad takes a 2-D or 3-D input
        with pytest.raises(NotImplementedError):
            torch.nn.functional.pad(torch.tensor(x4), (1, 2), mode=mode)
        with pytest.raises(NotImplementedError):
            gg.nn.functional.pad(gg.tensor(x4), (1, 2), mode=mode)


def test_fold_unfold_interpolate_functional_match_torch():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 6, 5)).astype(np.float32)
    tu = torch.nn.functional.unfold(torch.tensor(x), (2, 3), dilation=(2, 1), padding=1, stride=(1, 2))
    gu = gg.nn.functional.unfold(gg.tensor(x), (2, 3), dilation=(2, 1), padding=1, stride=(1, 2))
    np.testing.assert_array_equal(gu.numpy(), tu.numpy())
    tf = torch.nn.functional.fold(tu, (6, 5), (2, 3), dilation=(2, 1), padding=1, stride=(1, 2))
    gf = gg.nn.functional.fold(gu, (6, 5), (2, 3), dilation=(2, 1), padding=1, stride=(1, 2))
    np.testing.assert_allclose(gf.numpy(), tf.numpy(), rtol=1e-6, atol=1e-6)
    for kw in (dict(size=(4, 9), mode="nearest"), dict(scale_factor=(1.5, 2.0), mode="bilinear"),
               dict(scale_factor=0.5, mode="bilinear", align_corners=True)):
        ti = torch.nn.functional.interpolate(torch.tensor(x), **kw)
        gi = gg.nn.functional.interpolate(gg.tensor(x), **kw)
        np.testing.assert_allclose(gi.numpy(), ti.numpy(), rtol=1e-5, atol=1e-6)


def test_unbatched_inputs_match_torch():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 6, 5)).astype(np.float32)
    torch.manual_seed(0)
    tc = torch.nn.Conv2d(3, 2, 3)
    gc = gg.nn.Conv2d(3, 2, 3)
    gc.load_state_dict({k: gg.tensor(v.detach().numpy()) for k, v in tc.state_dict().items()})
    np.testing.assert_allclose(gc(gg.tensor(x)).detach().numpy(), tc(torch.tensor(x)).detach().numpy(), atol=1e-5)
    np.testing.assert_array_equal(gg.nn.functional.max_pool2d(gg.tensor(x), 2).numpy(),
                                  torch.nn.functional.max_pool2d(torch.tensor(x), 2).numpy())
    x1 = rng.standard_normal((3, 8)).astype(np.float32)
    np.testing.assert_allclose(gg.nn.functional.avg_pool1d(gg.tensor(x1), 2).numpy(),
                               torch.nn.functional.avg_pool1d(torch.tensor(x1), 2).numpy(), rtol=1e-6)


def test_conv_errors_match_torch_kinds():
    x = gg.ones(1, 3, 5, 5)
    with pytest.raises(ValueError, match="channels"):
        gg.nn.Conv2d(2, 4, 3)(x)
    with pytest.raises(ValueError, match="divisible by groups"):
        gg.nn.Conv2d(3, 4, 3, groups=3)
    with pytest.raises(ValueError, match="padding_mode"):
        gg.nn.Conv2d(3, 4, 3, padding_mode="mirror")
    with pytest.raises(ValueError, match="strided"):
        gg.nn.Conv2d(3, 4, 3, stride=2, padding="same")
    with pytest.raises(ValueError, match="zeros"):
        gg.nn.ConvTranspose2d(3, 4, 3, padding_mode="reflect")


def test_conv_transpose_output_size_matches_torch():
    torch.manual_seed(0)
    tm = torch.nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1)
    gm = gg.nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1)
    gm.load_state_dict({k: gg.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    x = np.random.default_rng(4).standard_normal((1, 2, 4, 5)).astype(np.float32)
    for size in ((7, 9), (8, 10), (1, 3, 8, 9)):
        want = tm(torch.tensor(x), output_size=list(size)).detach().numpy()
        got = gm(gg.tensor(x), output_size=size).detach().numpy()
        np.testing.assert_allclose(got, want, atol=1e-5)
    with pytest.raises(ValueError, match="output size"):
        gm(gg.tensor(x), output_size=(12, 9))


def test_gradient_penalty_through_convolutions_matches_torch():
    """Double backward (WGAN-GP's gradient penalty): the input gradient of a conv critic, differentiated
    again with respect to its parameters (conv2d's gradients are convolutions, to any order)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    torch.manual_seed(0)

    def build(nn):
        return nn.Sequential(nn.Conv2d(3, 4, 3, stride=2, padding=1), nn.LeakyReLU(0.2), nn.Conv2d(4, 2, 3, groups=2),
                             nn.Tanh(), nn.Flatten(), nn.Linear(8, 1))
    tm, gm = build(torch.nn), build(gg.nn)
    gm.load_state_dict({k: gg.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    tx = torch.tensor(x, requires_grad=True)
    (tg,) = torch.autograd.grad(tm(tx).sum(), tx, create_graph=True)
    tp = (tg.pow(2).sum(dim=(1, 2, 3)).sqrt() - 1).pow(2).mean()
    want = torch.autograd.grad(tp, list(tm.parameters())[:-1])     # the last bias does not reach the penalty
    for mode in ("eager", "graph"):
        with gg.graph_mode(mode == "graph"):
            gx = gg.tensor(x, requires_grad=True)
            (g,) = gg.autograd.grad(gm(gx).sum(), gx, create_graph=True)
            penalty = (((g * g).sum(axis=(1, 2, 3)).sqrt() - 1.0) ** 2).mean()
            got = gg.autograd.grad(penalty, list(gm.parameters())[:-1])
            np.testing.assert_allclose(penalty.item(), tp.item(), rtol=1e-5)
            for a, b in zip(got, want):
                np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-5, rtol=1e-4)
