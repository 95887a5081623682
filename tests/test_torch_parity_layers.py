"""torch parity of the normalisation, activation and loss layers (issue 22): for each row the torch
module and the ggmlgrad module are built with the same constructor arguments, torch's state dict
(made non-trivial first) goes through a ``.safetensors`` file into ``load_state_dict``, and outputs,
gradients (parameters and inputs) and buffers (running statistics, ``num_batches_tracked``) are
compared after two calls, in train and eval mode, in eager mode, graph mode and capture.

Capture: a module with parameters runs as ``gg.capture_step`` with ``SGD(lr=0)`` (the parameters
stay put; ``p.grad`` holds the replay's gradient); one without runs as ``gg.capture`` of forward and
backward returning the input gradients. The first call records, the second replays.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

import ggmlgrad as gg

torch.set_num_threads(1)


class _Fn:
    """A functional under test as a module of either library (``lib.nn.Module`` subclass)."""

    @staticmethod
    def make(lib, fn):
        class Wrap(lib.nn.Module):
            def forward(self, *args):
                return fn(lib.nn.functional, *args)
        return Wrap()


# name, factory(lib) -> module, inputs ((shape, kind), ...), modes ("train", "eval"), scale of x
# kinds: x = N(0, 1) * scale with grad; prob = U(0.05, 0.95) with grad; pos = U(0.5, 2) with grad;
#        sign = ±1 target; t = N(0, 1) target; tprob = U(0, 1) target with zeros; tcount = Poisson target
ROWS = [
    ("bn1d_2d", lambda lib: lib.nn.BatchNorm1d(3), (((6, 3), "x"),), ("train", "eval")),
    ("bn1d_3d", lambda lib: lib.nn.BatchNorm1d(3, momentum=0.3), (((4, 3, 5), "x"),), ("train", "eval")),
    ("bn2d", lambda lib: lib.nn.BatchNorm2d(3), (((4, 3, 5, 5), "x"),), ("train", "eval")),
    ("bn2d_cumulative", lambda lib: lib.nn.BatchNorm2d(2, momentum=None), (((3, 2, 3, 3), "x"),), ("train", "eval")),
    ("bn2d_no_affine", lambda lib: lib.nn.BatchNorm2d(2, affine=False, eps=1e-3), (((3, 2, 3, 3), "x"),),
     ("train", "eval")),
    ("bn1d_untracked", lambda lib: lib.nn.BatchNorm1d(3, track_running_stats=False), (((5, 3), "x"),),
     ("train", "eval")),
    ("groupnorm", lambda lib: lib.nn.GroupNorm(2, 4), (((3, 4, 5), "x"),), ("train",)),
    ("groupnorm_4d", lambda lib: lib.nn.GroupNorm(3, 6, affine=False), (((2, 6, 3, 3), "x"),), ("train",)),
    ("instnorm1d", lambda lib: lib.nn.InstanceNorm1d(3), (((2, 3, 6), "x"),), ("train",)),
    ("instnorm2d_tracked", lambda lib: lib.nn.InstanceNorm2d(3, affine=True, track_running_stats=True),
     (((2, 3, 4, 4), "x"),), ("train", "eval")),
    ("instnorm1d_unbatched", lambda lib: lib.nn.InstanceNorm1d(3, affine=True), (((3, 6), "x"),), ("train",)),
    ("rmsnorm", lambda lib: lib.nn.RMSNorm([4, 5]), (((3, 4, 5), "x"),), ("train",)),
    ("rmsnorm_eps", lambda lib: lib.nn.RMSNorm(5, eps=1e-3, elementwise_affine=False), (((2, 5), "x"),), ("train",)),
    ("layernorm_2dims", lambda lib: lib.nn.LayerNorm((4, 5)), (((3, 4, 5), "x"),), ("train",)),
    ("prelu", lambda lib: lib.nn.PReLU(), (((4, 5), "x"),), ("train",)),
    ("prelu_channels", lambda lib: lib.nn.PReLU(3, init=0.1), (((4, 3, 5), "x"),), ("train",)),
    ("mish", lambda lib: lib.nn.Mish(), (((4, 5), "x"),), ("train",)),
    ("hardtanh", lambda lib: lib.nn.Hardtanh(-0.5, 0.7), (((4, 5), "x"),), ("train",)),
    ("relu6", lambda lib: lib.nn.ReLU6(), (((4, 5), "x4"),), ("train",)),
    ("hardswish", lambda lib: lib.nn.Hardswish(), (((4, 5), "x4"),), ("train",)),
    ("hardsigmoid", lambda lib: lib.nn.Hardsigmoid(), (((4, 5), "x4"),), ("train",)),
    ("logsigmoid", lambda lib: lib.nn.LogSigmoid(), (((4, 5), "x4"),), ("train",)),
    ("glu", lambda lib: lib.nn.GLU(dim=1), (((4, 6), "x"),), ("train",)),
    ("softsign", lambda lib: lib.nn.Softsign(), (((4, 5), "x"),), ("train",)),
    ("tanhshrink", lambda lib: lib.nn.Tanhshrink(), (((4, 5), "x"),), ("train",)),
    ("dropout2d_eval", lambda lib: lib.nn.Dropout2d(0.3), (((2, 3, 4, 4), "x"),), ("eval",)),
    ("alpha_dropout_eval", lambda lib: lib.nn.AlphaDropout(0.3), (((4, 5), "x"),), ("eval",)),
    ("bce", lambda lib: lib.nn.BCELoss(), (((4, 3), "prob"), ((4, 3), "tprob")), ("train",)),
    ("bce_sum", lambda lib: lib.nn.BCELoss(reduction="sum"), (((5,), "prob"), ((5,), "tprob")), ("train",)),
    ("kldiv_batchmean", lambda lib: lib.nn.KLDivLoss(reduction="batchmean"), (((4, 3), "x"), ((4, 3), "tprob")),
     ("train",)),
    ("kldiv_log_target", lambda lib: lib.nn.KLDivLoss(reduction="sum", log_target=True),
     (((4, 3), "x"), ((4, 3), "t")), ("train",)),
    ("cosine_embedding", lambda lib: lib.nn.CosineEmbeddingLoss(margin=0.2),
     (((5, 4), "x"), ((5, 4), "x"), ((5,), "sign")), ("train",)),
    ("margin_ranking", lambda lib: lib.nn.MarginRankingLoss(margin=0.1), (((6,), "x"), ((6,), "x"), ((6,), "sign")),
     ("train",)),
    ("triplet", lambda lib: lib.nn.TripletMarginLoss(margin=1.0), (((4, 5), "x"), ((4, 5), "x"), ((4, 5), "x")),
     ("train",)),
    ("triplet_swap_p1", lambda lib: lib.nn.TripletMarginLoss(margin=2.0, p=1, swap=True, reduction="none"),
     (((4, 5), "x"), ((4, 5), "x"), ((4, 5), "x")), ("train",)),
    ("poisson", lambda lib: lib.nn.PoissonNLLLoss(), (((4, 3), "x"), ((4, 3), "tcount")), ("train",)),
    ("poisson_full", lambda lib: lib.nn.PoissonNLLLoss(log_input=False, full=True, reduction="sum"),
     (((4, 3), "pos"), ((4, 3), "tcount")), ("train",)),
    ("gaussian_nll", lambda lib: lib.nn.GaussianNLLLoss(), (((4, 3), "x"), ((4, 3), "t"), ((4, 3), "pos")),
     ("train",)),
    ("gaussian_nll_homosc", lambda lib: lib.nn.GaussianNLLLoss(full=True, reduction="sum"),
     (((4, 3), "x"), ((4, 3), "t"), ((4,), "pos")), ("train",)),
    ("gaussian_nll_var1", lambda lib: lib.nn.GaussianNLLLoss(reduction="none"),
     (((4, 3), "x"), ((4, 3), "t"), ((4, 1), "pos")), ("train",)),
    ("cosine_similarity", lambda lib: _Fn.make(lib, lambda F, a, b: F.cosine_similarity(a, b, dim=1)),
     (((4, 5), "x"), ((4, 5), "x")), ("train",)),
    ("pairwise_distance", lambda lib: _Fn.make(lib, lambda F, a, b: F.pairwise_distance(a, b, p=3.0, keepdim=True)),
     (((4, 5), "x"), ((4, 5), "x")), ("train",)),
    ("normalize", lambda lib: _Fn.make(lib, lambda F, a: F.normalize(a)), (((3, 4, 2), "x"),), ("train",)),
    ("normalize_inf", lambda lib: _Fn.make(lib, lambda F, a: F.normalize(a, p=float("inf"), dim=-1)),
     (((3, 4), "x"),), ("train",)),
]


def _inputs(specs, rng) -> list[np.ndarray]:
    out = []
    for shape, kind in specs:
        if kind in ("x", "t"):
            a = rng.standard_normal(shape)
        elif kind == "x4":
            a = 4 * rng.standard_normal(shape)
        elif kind == "prob":
            a = rng.uniform(0.05, 0.95, shape)
        elif kind == "pos":
            a = rng.uniform(0.5, 2.0, shape)
        elif kind == "sign":
            a = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
        elif kind == "tprob":
            a = rng.random(shape) * (rng.random(shape) > 0.2)
        elif kind == "tcount":
            a = rng.poisson(2.0, shape).astype(np.float64)
        else:
            raise ValueError(kind)
        out.append(a.astype(np.float32))
    return out


def _grad_inputs(specs) -> list[int]:
    return [i for i, (_, kind) in enumerate(specs) if kind in ("x", "x4", "prob", "pos")]


def _randomize(tm: torch.nn.Module, rng) -> None:
    """Non-trivial weights and running statistics, so a wrong layout or a missed buffer shows."""
    with torch.no_grad():
        for name, t in list(tm.named_parameters()) + list(tm.named_buffers()):
            if t.dtype.is_floating_point:
                vals = rng.uniform(0.5, 1.5, t.shape) if "var" in name or "weight" in name else \
                    rng.uniform(-0.5, 0.5, t.shape)
                t.copy_(torch.tensor(vals, dtype=t.dtype))
            else:
                t.fill_(3)


def _torch_run(tm, arrays, gi, w, train: bool):
    tm.train(train)
    ts = [torch.tensor(a, requires_grad=i in gi) for i, a in enumerate(arrays)]
    for _ in range(2):
        for t in ts:
            t.grad = None
        tm.zero_grad()
        out = tm(*ts)
        (out * torch.tensor(w)).sum().backward()
    grads = {n: p.grad.numpy() for n, p in tm.named_parameters()}
    grads.update({f"input{i}": ts[i].grad.numpy() for i in gi})
    bufs = {n: b.numpy() for n, b in tm.named_buffers()}
    return out.detach().numpy(), grads, bufs


def _gg_eager_or_graph(gm, arrays, gi, w, train: bool, graph: bool):
    gm.train(train)
    with gg.graph_mode(graph):
        ts = [gg.tensor(a, requires_grad=i in gi) for i, a in enumerate(arrays)]
        for _ in range(2):
            for t in ts:
                t.grad = None
            gm.zero_grad()
            out = gm(*ts)
            (out * gg.tensor(w)).sum().backward()
        grads = {n: p.grad.numpy() for n, p in gm.named_parameters()}
        grads.update({f"input{i}": ts[i].grad.numpy() for i in gi})
        bufs = {n: b.numpy() for n, b in gm.named_buffers()}
        return out.detach().numpy(), grads, bufs


def _gg_capture(gm, arrays, gi, w, train: bool):
    gm.train(train)
    params = list(gm.parameters())
    if params:
        opt = gg.optim.SGD(params, lr=0.0)

        def loss_fn(wt, *xs):
            out = gm(*xs)
            return (out * wt).sum(), out
        step = gg.capture_step(loss_fn, opt)
        for _ in range(2):
            _, out = step(w, *arrays)
        grads = {n: p.grad.numpy() for n, p in gm.named_parameters()}
    else:
        def fn(wt, *xs):
            for i in gi:
                xs[i].requires_grad_(True)
            out = gm(*xs)
            (out * wt).sum().backward()
            return (out,) + tuple(xs[i].grad for i in gi)
        cap = gg.capture(fn)
        for _ in range(2):
            res = cap(w, *arrays)
        out = res[0]
        grads = {f"input{i}": g for i, g in zip(gi, res[1:])}
    bufs = {n: b.numpy() for n, b in gm.named_buffers()}
    return np.asarray(out), grads, bufs


def _cases():
    for name, factory, specs, modes in ROWS:
        for train_mode in modes:
            for mode in ("eager", "graph", "capture"):
                yield pytest.param(factory, specs, train_mode == "train", mode, id=f"{name}-{train_mode}-{mode}")


@pytest.mark.parametrize("factory,specs,train,mode", list(_cases()))
def test_layer_matches_torch(factory, specs, train, mode, tmp_path):
    rng = np.random.default_rng(len(specs) * 7 + 3)
    torch.manual_seed(0)
    tm = factory(torch)
    _randomize(tm, rng)
    path = tmp_path / "state.safetensors"
    save_file({k: v.contiguous() for k, v in tm.state_dict().items()}, str(path))
    gm = factory(gg)
    result = gm.load_state_dict(gg.load(str(path)))
    assert not result.missing_keys and not result.unexpected_keys
    assert sorted(gm.state_dict()) == sorted(tm.state_dict())
    arrays = _inputs(specs, rng)
    gi = _grad_inputs(specs)
    w = _weight(tm, arrays)
    t_out, t_grads, t_bufs = _torch_run(tm, arrays, gi, w, train)
    if mode == "capture":
        g_out, g_grads, g_bufs = _gg_capture(gm, arrays, gi, w, train)
        if list(gm.parameters()):
            t_grads = {k: v for k, v in t_grads.items() if not k.startswith("input")}
    else:
        g_out, g_grads, g_bufs = _gg_eager_or_graph(gm, arrays, gi, w, train, mode == "graph")
    np.testing.assert_allclose(g_out, t_out, atol=2e-5, rtol=2e-4, err_msg="output")
    assert sorted(g_grads) == sorted(t_grads)
    for k in t_grads:
        np.testing.assert_allclose(g_grads[k], t_grads[k], atol=5e-5, rtol=5e-4, err_msg=f"gradient of {k}")
    assert sorted(g_bufs) == sorted(t_bufs)
    for k in t_bufs:
        np.testing.assert_allclose(np.asarray(g_bufs[k], dtype=np.float64), t_bufs[k].astype(np.float64),
                                   atol=2e-5, rtol=2e-4, err_msg=f"buffer {k}")


def _weight(tm, arrays) -> np.ndarray:
    """The backward seed: fixed random weights of the output's shape."""
    with torch.no_grad():
        tm_state = tm.training
        tm.eval()
        shape = tuple(tm(*[torch.tensor(a) for a in arrays]).shape)
        tm.train(tm_state)
    return np.random.default_rng(1).standard_normal(shape).astype(np.float32)
