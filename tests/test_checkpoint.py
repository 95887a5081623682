"""gg.utils.checkpoint: recomputation in backward gives the gradients of the plain block (same dropout
masks), in eager mode, graph mode and capture, and torch's with the same weights."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.utils.checkpoint

import ggmlgrad as gg
import ggmlgrad.utils.checkpoint
from ggmlgrad import nn
from torch_transfer import grads_close, transfer

checkpoint = ggmlgrad.utils.checkpoint.checkpoint


def _block():
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Dropout(0.5), nn.Linear(8, 4))


@pytest.mark.parametrize("mode", ["eager", "graph", "check", "capture"])
def test_checkpointed_block_has_the_plain_blocks_values_and_gradients(mode):
    xs = np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32)
    results = []
    for use_checkpoint in (False, True):
        gg.manual_seed(1)
        block, head = _block(), nn.Linear(4, 1)
        pre = nn.Linear(4, 4)

        def loss_fn(x):
            h = pre(x)   # an input that requires grad: the checkpoint's node is on the tape
            h = checkpoint(block, h) if use_checkpoint else block(h)
            return head(h).square().mean()

        gg.manual_seed(2)
        if mode == "capture":
            opt = gg.optim.SGD(list(block.parameters()) + list(head.parameters()) + list(pre.parameters()), lr=0.0)
            step = gg.capture_step(loss_fn, opt)
            loss = float(step(xs))
            loss2 = float(step(xs))   # a replay: fresh masks, the same ones in both runs of the block
        else:
            with gg.graph_mode(mode != "eager", check=mode == "check"):
                lv = loss_fn(gg.tensor(xs))
                lv.backward()
                loss, loss2 = lv.item(), None
        results.append((loss, loss2, [p.grad.numpy().copy() for p in block.parameters()],
                        pre.weight.grad.numpy().copy()))
    (l0, r0, g0, p0), (l1, r1, g1, p1) = results
    np.testing.assert_allclose(l1, l0, rtol=1e-6)
    if r0 is not None:
        np.testing.assert_allclose(r1, r0, rtol=1e-6)
    for a, b in zip(g1, g0):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(p1, p0, rtol=1e-5, atol=1e-7)


def test_checkpoint_matches_torch_and_refuses_autograd_grad(tmp_path):
    torch.manual_seed(0)
    tb = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 4))
    gb = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 4))
    transfer(tb, gb, tmp_path)
    xs = np.random.default_rng(3).standard_normal((5, 4)).astype(np.float32)
    tx = torch.tensor(xs, requires_grad=True)
    torch.utils.checkpoint.checkpoint(tb, tx, use_reentrant=True).square().sum().backward()
    gx = gg.tensor(xs, requires_grad=True)
    out = checkpoint(gb, gx, use_reentrant=True)
    out.square().sum().backward()
    np.testing.assert_allclose(gx.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-6)
    grads_close(tb, gb, rtol=1e-4)
    with pytest.raises(RuntimeError, match="autograd.grad"):
        gg.autograd.grad(checkpoint(gb, gx).sum(), gx)


def test_checkpoint_sequential_and_no_grad_inputs():
    gg.manual_seed(0)
    seq = nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 2))
    x = gg.tensor(np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32), requires_grad=True)
    ggmlgrad.utils.checkpoint.checkpoint_sequential(seq, 2, x).sum().backward()
    want = [p.grad.numpy().copy() for p in seq.parameters()]
    seq.zero_grad()
    x.grad = None
    seq(x).sum().backward()
    for a, p in zip(want, seq.parameters()):
        np.testing.assert_allclose(a, p.grad.numpy(), rtol=1e-5, atol=1e-7)
    # no input requires grad: the block records as usual, so its parameters still get gradients
    seq.zero_grad()
    checkpoint(seq, gg.ones(2, 3)).sum().backward()
    assert all(p.grad is not None for p in seq.parameters())


def test_docstring_examples():
    import doctest
    result = doctest.testmod(ggmlgrad.utils.checkpoint)
    assert result.attempted > 0 and result.failed == 0
