"""Adam/AdamW's fused update: on the fast build one ``adamw`` kernel node per parameter (ggml's
opt_step_adamw rule, vectorised), elsewhere ggml's op. Values against a float64 implementation of
torch's rule over several steps, for sizes that are not multiples of the vector width, with
weight decay, in every mode and on one or two threads."""
from __future__ import annotations

import numpy as np
import pytest

import ggmlgrad as gg
from ggmlgrad.ops import fast_math

SHAPES = [(37,), (5, 13), (64, 64), (3,)]


def _reference(ws, grads_per_step, lr, betas, eps, wd, decoupled):
    ws = [w.astype(np.float64) for w in ws]
    m = [np.zeros_like(w) for w in ws]
    v = [np.zeros_like(w) for w in ws]
    b1, b2 = betas
    for t, grads in enumerate(grads_per_step, start=1):
        for i, g in enumerate(grads):
            g = g.astype(np.float64)
            if not decoupled:
                g = g + wd * ws[i]
            else:
                ws[i] = ws[i] * (1 - lr * wd)
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            mh, vh = m[i] / (1 - b1 ** t), v[i] / (1 - b2 ** t)
            ws[i] = ws[i] - lr * mh / (np.sqrt(vh) + eps)
    return ws


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("mode", ["eager", "graph", "capture"])
@pytest.mark.parametrize("decoupled", [True, False])
def test_fused_adam_matches_float64(mode, decoupled, threads):
    r = np.random.default_rng(3)
    init = [r.standard_normal(s).astype(np.float32) for s in SHAPES]
    targets = [r.standard_normal(s).astype(np.float32) for s in SHAPES]
    ps = [gg.tensor(w, requires_grad=True) for w in init]
    cls = gg.optim.AdamW if decoupled else gg.optim.Adam
    opt = cls(ps, lr=0.01, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1)
    tt = [gg.tensor(t) for t in targets]

    def loss_fn():
        return sum(((p - t) ** 2).sum() * (k + 1.0) for k, (p, t) in enumerate(zip(ps, tt)))
    grads = []
    old = gg.get_num_threads()
    gg.set_num_threads(threads)
    try:
        step = gg.capture_step(loss_fn, opt) if mode == "capture" else None
        for _ in range(4):
            now = [p.detach().numpy().astype(np.float64) for p in ps]
            grads.append([2.0 * (k + 1.0) * (w - t) for k, (w, t) in enumerate(zip(now, targets))])
            if step is not None:
                step()
            else:
                with gg.graph_mode(mode == "graph"):
                    opt.zero_grad()
                    loss_fn().backward()
                    opt.step()
    finally:
        gg.set_num_threads(old)
    ref = _reference(init, grads, 0.01, (0.8, 0.95), 1e-6, 0.1, decoupled)
    for p, w in zip(ps, ref):
        np.testing.assert_allclose(p.detach().numpy(), w, rtol=2e-5, atol=2e-6)


def test_the_kernel_computes_the_fused_update_on_the_fast_build_only():
    from ggmlgrad._ggml import lib
    from ggmlgrad._ggml.kernels import KERNELS, custom_fun
    w = gg.tensor(np.ones((6, 7), np.float32), requires_grad=True)
    step = gg.capture_step(lambda: (w * w).sum(), gg.optim.Adam([w], lr=0.1))
    step()
    rec = next(iter(step._cache.values()))
    funs = {custom_fun(lib.graph_node(g.graph, i)) for g in rec.graphs for i in range(g.n_nodes)}
    ops = {lib.op_desc(lib.graph_node(g.graph, i)).decode() for g in rec.graphs for i in range(g.n_nodes)}
    if fast_math.ACTIVE:
        assert KERNELS["adamw"] in funs and "OPT_STEP_ADAMW" not in ops
    else:   # no fast build, or a ggml with a GPU device (its kernels are CPU code, fast_math.py): ggml's own
        assert KERNELS.get("adamw") not in funs and "OPT_STEP_ADAMW" in ops
