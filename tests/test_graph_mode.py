"""Graph mode (SPEC §2, issue 3): deferral, sync points, fused backward, write ordering,
leaves not re-runs, drain failures, check mode, scale, memory, on/off equivalence."""
from __future__ import annotations

import gc
import re
import sys

import numpy as np
import pytest

import ggmlgrad as gg
from ggmlgrad.engine import ENGINE
from ggmlgrad.runtime import pool_stats


class Computes:
    """Counts graph computes (and drains by reason) inside a block."""

    def __enter__(self):
        self.c0 = gg.counters()
        return self

    def __exit__(self, *exc):
        pass

    @property
    def n(self) -> int:
        return gg.counters()["computes"] - self.c0["computes"]

    def drains(self, reason: str) -> int:
        return gg.counters()["drains_by_reason"].get(reason, 0) - self.c0["drains_by_reason"].get(reason, 0)


def eager_outside(fn):
    """Run a test that relies on eager mode outside its graph-mode blocks in an explicit eager
    context, so the file also passes with GGMLGRAD_GRAPH=1 set for the whole suite."""
    import functools

    @functools.wraps(fn)
    def wrapper(*a, **k):
        with gg.graph_mode(False):
            return fn(*a, **k)
    return wrapper


def _rng(seed=0):
    return np.random.default_rng(seed)


def _param(shape, seed):
    return gg.tensor(_rng(seed).standard_normal(shape).astype(np.float32) * 0.5, requires_grad=True)


# ---------------------------------------------------------------------------- deferral
def test_ops_queue_and_return_pending_tensors():
    x = gg.tensor([1.0, 2.0, 3.0])
    with gg.graph_mode(True):
        with Computes() as c:
            q0 = gg.queue_length()
            y = x * 2
            z = y + x
            w = z.relu()
            assert gg.pending(y) and gg.pending(z) and gg.pending(w)
            assert y.is_pending
            assert gg.queue_length() == q0 + 3
            assert c.n == 0
            assert not gg.pending(x)
            assert w.tolist() == [3.0, 6.0, 9.0]
            assert c.n == 1
            assert gg.queue_length() == 0
            assert not (gg.pending(y) or gg.pending(z) or gg.pending(w))
            assert y.tolist() == [2.0, 4.0, 6.0] and z.tolist() == [3.0, 6.0, 9.0]
            assert c.n == 1  # every queued op computed in that one graph


# ---------------------------------------------------------------------------- sync points
_READERS = {
    "numpy": lambda t: t.numpy(),
    "item": lambda t: t.item(),
    "tolist": lambda t: t.tolist(),
    "__array__": lambda t: np.asarray(t),
    "repr": repr,
    "str": str,
    "float": float,
    "int": int,
    "bool": bool,
    "format": lambda t: f"{t:.3f}",
}


@pytest.mark.parametrize("reader", list(_READERS))
def test_host_reads_are_sync_points(reader):
    with gg.graph_mode(True):
        y = gg.tensor([1.5]) * 2
        other = gg.tensor([1.0]) + 1  # queued too: drained by the same read
        assert gg.pending(y) and gg.pending(other)
        with Computes() as c:
            value = _READERS[reader](y)
            assert c.n == 1 and c.drains("read") == 1
        assert not gg.pending(y) and not gg.pending(other)
        assert np.asarray(y)[0] == 3.0 and other.item() == 2.0
        assert value is True if reader == "bool" else "3" in str(value)
        with Computes() as c:
            _READERS[reader](y)  # already computed: no drain, no compute
            assert c.n == 0 and c.drains("read") == 0


@pytest.mark.parametrize("write", ["copy_array", "copy_tensor", "add_", "mul_", "fill_", "zero_"])
def test_inplace_writes_are_sync_points(write):
    w = gg.tensor([1.0, 2.0])
    with gg.graph_mode(True):
        y = w * 10  # reads w's storage
        with Computes() as c:
            {"copy_array": lambda: w.copy_(np.array([5.0, 5.0])),
             "copy_tensor": lambda: w.copy_(gg.tensor([5.0, 5.0])),
             "add_": lambda: w.add_(gg.tensor([4.0, 3.0])),
             "mul_": lambda: w.mul_(gg.tensor([5.0, 2.5])),
             "fill_": lambda: w.fill_(5.0),
             "zero_": lambda: w.zero_()}[write]()
            assert not gg.pending(y)  # the queued read ran before the write
            assert c.drains("inplace") >= 1
        assert y.tolist() == [10.0, 20.0]
        assert w.tolist() == ([0.0, 0.0] if write == "zero_" else [5.0, 5.0])


@eager_outside
def test_leaving_graph_mode_is_a_sync_point_with_its_reason():
    with Computes() as c:
        with gg.graph_mode(True):
            y = gg.ones(2) * 3
        assert c.drains("graph_mode_off") == 1 and c.n == 1
    assert not gg.pending(y)


@eager_outside
def test_every_drain_is_counted_by_reason():
    with gg.graph_mode(True):
        with Computes() as c:
            (gg.ones(1) * 2).item()
            w = gg.ones(2)
            _ = w * 2
            w.copy_(np.zeros(2))
            _ = w + 1
        snap = gg.counters()
        assert c.drains("read") == 1 and c.drains("inplace") == 1
        assert sum(snap["drains_by_reason"].values()) >= sum(c.c0["drains_by_reason"].values()) + 2
    assert c.drains("graph_mode_off") == 1


# ---------------------------------------------------------------------------- backward joins the queue
def _mlp_loss(x, y, params):
    w1, b1, w2, b2 = params
    h = (x @ w1 + b1).relu()
    out = (h @ w2 + b2).tanh()
    return ((out - y) * (out - y)).mean()


def _mlp_data():
    rng = _rng(3)
    x = gg.tensor(rng.standard_normal((8, 5)).astype(np.float32))
    y = gg.tensor(rng.standard_normal((8, 3)).astype(np.float32))
    params = [_param((5, 16), 1), _param((16,), 2), _param((16, 3), 3), _param((3,), 4)]
    return x, y, params


def test_backward_does_not_drain_and_grads_compute_in_one_graph():
    x, y, params = _mlp_data()
    with gg.graph_mode(True):
        with Computes() as c:
            loss = _mlp_loss(x, y, params)
            loss.backward()
            assert c.n == 0 and gg.pending(loss)
            assert all(p.grad is not None and gg.pending(p.grad) for p in params)
            g1 = params[0].grad.numpy()  # first read: forward + backward as ONE graph
            assert c.n == 1
            rest = [p.grad.numpy() for p in params[1:]]
            lv = loss.item()
            assert c.n == 1  # everything else came out of that graph
    # the same values as eager
    x2, y2, params2 = _mlp_data()
    loss2 = _mlp_loss(x2, y2, params2)
    loss2.backward()
    assert abs(lv - loss2.item()) <= 1e-6
    for g, p in zip([g1] + rest, params2):
        np.testing.assert_allclose(g, p.grad.numpy(), rtol=0, atol=1e-6)


def test_grad_accumulates_across_backward_calls_in_graph_mode():
    x = gg.tensor([1.0, -2.0, 3.0], requires_grad=True)
    with gg.graph_mode(True):
        with Computes() as c:
            (x * x).sum().backward()
            (x * 3).sum().backward()
            assert c.n == 0
            assert x.grad.tolist() == [5.0, -1.0, 9.0]
            assert c.n == 1


# ---------------------------------------------------------------------------- write ordering
def test_write_after_queued_read_keeps_the_old_value():
    rng = _rng(5)
    w0 = rng.standard_normal((4, 3)).astype(np.float32)
    xv = rng.standard_normal((3,)).astype(np.float32)
    expected = w0.astype(np.float64) @ xv
    for overwrite in ("copy_array", "copy_tensor", "sub_"):
        W = gg.tensor(w0)
        x = gg.tensor(xv)
        with gg.graph_mode(True):
            y = W @ x
            assert gg.pending(y)
            if overwrite == "copy_array":
                W.copy_(np.zeros((4, 3), np.float32))
            elif overwrite == "copy_tensor":
                W.copy_(gg.zeros(4, 3))
            else:
                W.sub_(gg.tensor(w0))
            y2 = W @ x  # reads the new value
            np.testing.assert_allclose(y.numpy(), expected, rtol=1e-5, atol=1e-5)
            assert y2.tolist() == [0.0, 0.0, 0.0, 0.0]
            assert W.numpy().tolist() == np.zeros((4, 3)).tolist()


def test_manual_sgd_under_graph_mode_matches_eager():
    """Reads of the weights (forward+backward) are queued, then the update writes them:
    each step must see the previous step's weights (the ggmlR Adam failure mode)."""
    def train(graph: bool):
        x, y, params = _mlp_data()
        losses = []
        with gg.graph_mode(graph):
            for _ in range(5):
                for p in params:
                    p.grad = None
                loss = _mlp_loss(x, y, params)
                loss.backward()
                with gg.no_grad():
                    for p in params:
                        p.sub_(p.grad * 0.1)
                losses.append(loss.item())
        return losses, [p.detach().numpy().copy() for p in params]

    l_eager, p_eager = train(False)
    l_graph, p_graph = train(True)
    assert l_eager[-1] < l_eager[0]  # it trains
    np.testing.assert_allclose(l_graph, l_eager, rtol=0, atol=1e-6)
    for a, b in zip(p_graph, p_eager):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)


# ---------------------------------------------------------------------------- leaves, not re-runs
def _nodes_of_last_compute() -> int:
    return gg.engine.graph_node_counts()[-1]


def test_computed_tensor_enters_later_graphs_as_a_leaf():
    x = gg.tensor(_rng(1).standard_normal((4, 4)).astype(np.float32))
    # how many nodes a single `relu` on a leaf takes
    x.relu().numpy()
    relu_nodes = _nodes_of_last_compute()
    with gg.graph_mode(True):
        a = x @ x
        b = (a * 2 + 1).tanh()
        b.numpy()
        chain_nodes = _nodes_of_last_compute()
        assert chain_nodes > relu_nodes
        with Computes() as c:
            r = b.relu()
            r.numpy()
            assert c.n == 1
        assert _nodes_of_last_compute() == relu_nodes  # b's ancestry was not re-run
    expected = np.maximum(np.tanh((x.numpy().astype(np.float64) @ x.numpy()) * 2 + 1), 0)
    np.testing.assert_allclose(r.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_pending_tensor_used_twice_and_read_twice_computes_once():
    x = gg.tensor([1.0, 2.0])
    with gg.graph_mode(True):
        with Computes() as c:
            y = x * 3
            a = y + 1
            b = y * 2  # y feeds two consumers: one node, computed once
            assert a.tolist() == [4.0, 7.0]
            n1 = _nodes_of_last_compute()
            assert b.tolist() == [6.0, 12.0]
            assert y.tolist() == [3.0, 6.0]
            assert c.n == 1
    # 3 ops (scale, add_scalar, scale): the graph holds each node once (no duplicate subgraph for y)
    x2 = gg.tensor([1.0, 2.0])
    singles = 0
    for f in (lambda t: t * 3, lambda t: t + 1, lambda t: t * 2):
        f(x2).numpy()
        singles += _nodes_of_last_compute()
    assert n1 == singles


def test_all_roots_are_computed_residual_branches():
    """Two branches not reachable from one another are both computed by one drain."""
    rng = _rng(7)
    xv = rng.standard_normal((6, 4)).astype(np.float32)
    w1 = rng.standard_normal((4, 4)).astype(np.float32)
    w2 = rng.standard_normal((4, 4)).astype(np.float32)
    x, W1, W2 = gg.tensor(xv), gg.tensor(w1), gg.tensor(w2)
    with gg.graph_mode(True):
        h = x.relu()
        left = (h @ W1).tanh()
        right = (h @ W2).sigmoid()
        with Computes() as c:
            lv = left.numpy()
            rv = right.numpy()  # computed by the same drain
            assert c.n == 1
    h64 = np.maximum(xv.astype(np.float64), 0)
    np.testing.assert_allclose(lv, np.tanh(h64 @ w1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rv, 1 / (1 + np.exp(-(h64 @ w2))), rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------- drain failures
def test_failed_drain_raises_graph_error_and_keeps_the_session_usable():
    keep = gg.tensor([1.0, 2.0, 3.0])
    earlier = keep * 2
    earlier_val = earlier.numpy()
    with gg.graph_mode(True):
        a, line = keep * 2, sys._getframe().f_lineno  # the first op of the failing graph: its line is named
        b = a.relu()
        c_ = a * b
        d = c_.relu()
        ENGINE.fail_next_drain()
        failed0 = gg.counters()["failed_drains"]
        with pytest.raises(gg.GraphError) as ei:
            d.numpy()
        msg = str(ei.value)
        assert "(4 queued ops: scale x1, relu x2, mul x1)" in msg, msg  # counts in order of first appearance
        assert f"test_graph_mode.py:{line}" in msg, msg
        assert "check=True" in msg
        assert gg.counters()["failed_drains"] == failed0 + 1
        assert gg.queue_length() == 0
        # every tensor of the failed graph raises a clear error when read or used
        for t in (a, b, c_, d):
            assert not gg.pending(t)
            with pytest.raises(gg.PendingError, match="graph failed"):
                t.numpy()
        with pytest.raises(gg.PendingError):
            d + 1
        assert "failed" in repr(d)
        # earlier computed tensors are intact, and the session keeps working
        assert keep.tolist() == [1.0, 2.0, 3.0]
        np.testing.assert_array_equal(earlier.numpy(), earlier_val)
        e = (keep * 5).relu()
        assert e.tolist() == [5.0, 10.0, 15.0]


def test_failed_drain_with_backward_names_backward_nodes():
    x = gg.tensor([1.0, 2.0], requires_grad=True)
    with gg.graph_mode(True):
        loss = (x.relu() * x).sum()
        loss.backward()
        ENGINE.fail_next_drain()
        with pytest.raises(gg.GraphError) as ei:
            x.grad.numpy()
        assert re.search(r"relu x1, mul x1, sum x1, (fill_like x1, )?backward x\d+", str(ei.value)), str(ei.value)
        with pytest.raises(gg.PendingError):
            x.grad.numpy()
        # a fresh step works
        x.grad = None
        (x * x).sum().backward()
        assert x.grad.tolist() == [2.0, 4.0]


@eager_outside
def test_failed_eager_op_raises_at_its_call():
    x = gg.tensor([1.0])
    ENGINE.fail_next_drain()
    with pytest.raises(gg.GraphError, match=r"test_graph_mode.py:\d+"):
        x * 2
    assert (x * 2).tolist() == [2.0]


def test_check_mode_raises_at_the_call_that_failed():
    x = gg.tensor([1.0, 2.0])
    with gg.graph_mode(True, check=True):
        a = x * 2
        assert not gg.pending(a)
        ENGINE.fail_next_drain()
        with pytest.raises(gg.GraphError) as ei:
            line = sys._getframe().f_lineno; a.relu()  # noqa: E702  (the failing op raises here, not at a later read)
        assert "relu x1" in str(ei.value) and f"test_graph_mode.py:{line}" in str(ei.value)
        assert a.tolist() == [2.0, 4.0]
        assert (a + 1).tolist() == [3.0, 5.0]


def test_failure_in_exclusive_block_discards_and_recovers():
    w = gg.tensor([1.0, 2.0])
    with gg.graph_mode(True):
        y = w * 2
        with pytest.raises(ValueError):
            with ENGINE.exclusive("inplace"):
                raise ValueError("boom")
        assert y.tolist() == [2.0, 4.0]  # drained before the block: not lost
        assert gg.queue_length() == 0
        w.add_(gg.tensor([1.0, 1.0]))
        assert w.tolist() == [2.0, 3.0]


# ---------------------------------------------------------------------------- scale
def test_deep_chain_of_5000_ops_drains_in_one_graph():
    x = gg.tensor([1.0, -0.5, 2.0])
    with gg.graph_mode(True):
        y = x
        for _ in range(5000):
            y = y * 1.0001
        assert gg.queue_length() >= 5000
        ENGINE._materialize()  # build the recorded nodes now (a drain would)
        assert len(ENGINE.ctx_list) > 1  # the queue spans several chained ggml contexts
        with Computes() as c:
            v = y.numpy()
            assert c.n == 1
    ref = np.array([1.0, -0.5, 2.0], np.float32)
    for _ in range(5000):
        ref = ref * np.float32(1.0001)
    np.testing.assert_allclose(v, ref, rtol=1e-6)
    np.testing.assert_allclose(v, np.array([1.0, -0.5, 2.0]) * 1.0001 ** 5000, rtol=1e-3)


def test_wide_fan_out_of_5000_ops():
    x = gg.tensor([1.0, 2.0])
    with gg.graph_mode(True):
        outs = [x * float(i) for i in range(5000)]
        with Computes() as c:
            assert outs[4999].tolist() == [4999.0, 9998.0]
            assert c.n == 1
        assert gg.engine.graph_node_counts()[-1] >= 5000
        for i in (0, 1, 2500, 4998):
            assert outs[i].tolist() == [float(i), 2.0 * i]


def test_long_chain_with_backward_in_one_graph():
    x0 = np.array([0.3, -0.2, 0.7], np.float32)
    x = gg.tensor(x0, requires_grad=True)
    with gg.graph_mode(True):
        y = x
        for _ in range(1200):  # ~2,400 forward + ~3,600 backward nodes in one queue
            y = (y * 0.999 + 0.001).tanh()
        loss = y.sum()
        loss.backward()
        with Computes() as c:
            g = x.grad.numpy()
            assert c.n == 1
    v, dv = x0.astype(np.float64), np.ones(3)
    for _ in range(1200):
        t = np.tanh(v * 0.999 + 0.001)
        dv = dv * (1 - t * t) * 0.999
        v = t
    np.testing.assert_allclose(loss.item(), v.sum(), rtol=1e-4)
    np.testing.assert_allclose(g, dv, rtol=2e-3, atol=1e-7)


# ---------------------------------------------------------------------------- memory
def test_storage_read_by_queued_nodes_stays_alive_until_computed():
    with gg.graph_mode(True):
        a = gg.tensor(np.full(1000, 3.0, np.float32))
        b = a * 2
        del a
        gc.collect()
        # new tensors of the same size must not reuse a's memory while b still reads it
        junk = [gg.tensor(np.full(1000, 7.0, np.float32)) for _ in range(4)]
        live_before = pool_stats()["live_count"]
        assert b.numpy().tolist() == [6.0] * 1000
        del b
        gc.collect()
        assert pool_stats()["live_count"] < live_before  # a's storage released after the drain
        assert junk[0].numpy()[0] == 7.0


def test_dead_pending_tensors_do_not_leak():
    x = gg.tensor(np.ones(256, np.float32))
    gc.collect()
    base = pool_stats()["live_count"]
    with gg.graph_mode(True):
        for _ in range(200):
            y = x * 2
            z = y + 1
            del y
        z.numpy()
        del z
    gc.collect()
    assert pool_stats()["live_count"] <= base + 1


# ---------------------------------------------------------------------------- equivalence on vs off
def _grads_of(fn, graph: bool):
    with gg.graph_mode(graph):
        out, leaves = fn()
        out.backward()
        return out.detach().numpy().copy(), [p.grad.detach().numpy().copy() for p in leaves]


def _residual_block():
    rng = _rng(11)
    x = gg.tensor(rng.standard_normal((5, 8)).astype(np.float32), requires_grad=True)
    w1, w2, w3 = _param((8, 8), 21), _param((8, 8), 22), _param((8, 8), 23)
    h = (x @ w1).relu()
    branch_a = (h @ w2).tanh()
    branch_b = (h @ w3).sigmoid()
    out = x + branch_a * branch_b + branch_a
    loss = (out * out).mean() + branch_b.sum() * 0.01
    return loss, [x, w1, w2, w3]


def _mlp_case():
    x, y, params = _mlp_data()
    return _mlp_loss(x, y, params), params


@pytest.mark.parametrize("case", [_mlp_case, _residual_block], ids=["mlp", "residual"])
def test_graph_mode_matches_eager(case):
    v_e, g_e = _grads_of(case, False)
    v_g, g_g = _grads_of(case, True)
    np.testing.assert_allclose(v_g, v_e, rtol=0, atol=1e-6)
    assert len(g_e) == len(g_g)
    for a, b in zip(g_g, g_e):
        assert np.abs(b).max() > 0  # every gradient is real, not an uncomputed buffer
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)


# ---------------------------------------------------------------------------- PPO-shaped loss, Adam
def _ppo_setup(seed=0):
    """Policy + value MLP (gg.nn) and one PPO minibatch, deterministic."""
    gg.manual_seed(seed)
    rng = _rng(seed + 100)
    body = gg.nn.Sequential(gg.nn.Linear(6, 32), gg.nn.Tanh(), gg.nn.Linear(32, 32), gg.nn.Tanh())
    pi_head, v_head = gg.nn.Linear(32, 4), gg.nn.Linear(32, 1)
    batch = dict(
        obs=gg.tensor(rng.standard_normal((64, 6)).astype(np.float32)),
        actions=gg.tensor(rng.integers(0, 4, (64, 1)).astype(np.int32), dtype="int32"),
        old_logp=gg.tensor((np.log(0.25) + rng.normal(0, 0.3, 64)).astype(np.float32)),
        adv=gg.tensor(rng.standard_normal(64).astype(np.float32)),
        returns=gg.tensor(rng.standard_normal(64).astype(np.float32)),
    )
    params = list(body.parameters()) + list(pi_head.parameters()) + list(v_head.parameters())
    return (body, pi_head, v_head), params, batch


def _ppo_loss(nets, b):
    body, pi_head, v_head = nets
    h = body(b["obs"])
    logp_all = gg.log_softmax(pi_head(h), dim=-1)
    logp = gg.gather(logp_all, 1, b["actions"]).reshape(-1)       # log-prob of the taken actions
    ratio = (logp - b["old_logp"]).exp()
    surr1 = ratio * b["adv"]
    surr2 = gg.clamp(ratio, 0.8, 1.2) * b["adv"]
    policy_loss = -gg.minimum(surr1, surr2).mean()
    value_loss = ((v_head(h).reshape(-1) - b["returns"]) ** 2).mean()
    entropy = -(logp_all.exp() * logp_all).sum(axis=-1).mean()
    return policy_loss + 0.5 * value_loss - 0.01 * entropy


def _ppo_grads(graph: bool):
    nets, params, batch = _ppo_setup()
    with gg.graph_mode(graph):
        loss = _ppo_loss(nets, batch)
        loss.backward()
        return loss.item(), [p.grad.numpy() for p in params]


def test_ppo_loss_graph_mode_matches_eager():
    l_e, g_e = _ppo_grads(False)
    l_g, g_g = _ppo_grads(True)
    assert abs(l_g - l_e) <= 1e-6
    assert len(g_e) == len(g_g) == 8
    for a, b in zip(g_g, g_e):
        assert np.abs(b).max() > 0
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)


def test_ppo_loss_value_against_numpy():
    nets, params, b = _ppo_setup()
    loss = _ppo_loss(nets, b).item()
    P = [p.detach().numpy().astype(np.float64) for p in params]
    h = np.tanh(np.tanh(b["obs"].numpy() @ P[0].T + P[1]) @ P[2].T + P[3])
    logits = h @ P[4].T + P[5]
    z = logits - logits.max(-1, keepdims=True)
    logp_all = z - np.log(np.exp(z).sum(-1, keepdims=True))
    logp = np.take_along_axis(logp_all, b["actions"].numpy(), 1)[:, 0]
    ratio = np.exp(logp - b["old_logp"].numpy())
    adv = b["adv"].numpy()
    pol = -np.minimum(ratio * adv, np.clip(ratio, 0.8, 1.2) * adv).mean()
    val = (((h @ P[6].T + P[7])[:, 0] - b["returns"].numpy()) ** 2).mean()
    ent = -(np.exp(logp_all) * logp_all).sum(-1).mean()
    np.testing.assert_allclose(loss, pol + 0.5 * val - 0.01 * ent, rtol=1e-5, atol=1e-6)


def _ppo_train(graph: bool, steps: int, fused=None):
    nets, params, batch = _ppo_setup()
    opt = gg.optim.Adam(params, lr=3e-3, fused=fused)
    w0 = params[0].detach().numpy().copy()
    losses, computes = [], []
    with gg.graph_mode(graph):
        for _ in range(steps):
            with Computes() as c:
                opt.zero_grad()
                loss = _ppo_loss(nets, batch)
                loss.backward()
                opt.step()
                losses.append(loss.item())
                computes.append(c.n)
    return losses, [p.detach().numpy().copy() for p in params], w0, computes


def test_ppo_training_step_compute_counts():
    _, _, _, eager = _ppo_train(False, 2)
    _, _, _, graph = _ppo_train(True, 2)
    # forward + backward as one graph, the Adam update as its own graph (+1 spare)
    assert all(n <= 3 for n in graph), graph
    assert all(e >= 10 * g for e, g in zip(eager, graph)), (eager, graph)


@pytest.mark.parametrize("fused", [None, False], ids=["fused-adamw", "composed"])
def test_adam_training_graph_mode_matches_eager_step_for_step(fused):
    """The case that broke ggmlR: the update writes the weights the queued graph read."""
    l_e, p_e, w0, _ = _ppo_train(False, 10, fused)
    l_g, p_g, _, _ = _ppo_train(True, 10, fused)
    assert np.abs(p_g[0] - w0).max() > 1e-3  # the weights really moved
    assert l_g[-1] < l_g[0]
    np.testing.assert_allclose(l_g, l_e, rtol=0, atol=1e-6)
    for a, b in zip(p_g, p_e):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)


def test_interrupted_drain_leaves_no_pending_tensor_behind():
    """A KeyboardInterrupt during a compute propagates as is; the queue it took is gone,
    so its tensors become failed (reading or using them raises, never touches freed nodes)."""
    x = gg.tensor([1.0, 2.0])
    with gg.graph_mode(True):
        y = x * 2
        z = y.relu()
        ENGINE.fail_next_drain("interrupted", error=KeyboardInterrupt)
        with pytest.raises(KeyboardInterrupt):
            z.numpy()
        for t in (y, z):
            assert not gg.pending(t)
            with pytest.raises(gg.PendingError):
                t.numpy()
        with pytest.raises(gg.PendingError):
            z + 1
        assert (x * 3).tolist() == [3.0, 6.0]


def test_optimizer_step_and_load_state_dict_are_sync_points():
    gg.manual_seed(3)
    net = gg.nn.Linear(3, 2)
    opt = gg.optim.SGD(net.parameters(), lr=0.1)
    x = gg.tensor(_rng(4).standard_normal((5, 3)).astype(np.float32))
    with gg.graph_mode(True):
        loss = net(x).sum()
        loss.backward()
        with Computes() as c:
            opt.step()
            assert c.drains("optimizer") >= 1 and not gg.pending(loss)
            assert c.n == 2  # the queued forward+backward, then the update as its own graph
        y = net(x)  # queued read of the weights
        state = {k: v * 0 for k, v in net.state_dict().items()}
        with Computes() as c:
            net.load_state_dict(state)
            assert c.drains("load_state_dict") >= 1 and not gg.pending(y)
        assert np.abs(y.detach().numpy()).max() > 0  # y kept the value of the old weights
        assert np.abs(net(x).detach().numpy()).max() == 0.0


def test_write_ordering_with_load_state_dict():
    gg.manual_seed(5)
    net = gg.nn.Linear(4, 3)
    w_old, b_old = net.weight.detach().numpy().astype(np.float64), net.bias.detach().numpy().astype(np.float64)
    xv = _rng(6).standard_normal((2, 4)).astype(np.float32)
    with gg.graph_mode(True):
        y = net(gg.tensor(xv))
        net.load_state_dict({"weight": gg.ones(3, 4), "bias": gg.zeros(3)})
        np.testing.assert_allclose(y.detach().numpy(), xv @ w_old.T + b_old, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(net(gg.tensor(xv)).detach().numpy(), np.repeat(xv.sum(1, keepdims=True), 3, 1),
                                   rtol=1e-5, atol=1e-6)


def test_threads_in_graph_and_eager_mode_train_correctly_at_once():
    """Each thread has its own queue (one thread's drain never computes another's nodes).
    Every thread's losses must equal a sequential eager run of the same training."""
    import threading

    def train(seed, graph, out):
        rng = _rng(seed)
        x = gg.tensor(rng.standard_normal((8, 4)).astype(np.float32))
        y = gg.tensor(rng.standard_normal((8, 2)).astype(np.float32))
        ps = [gg.tensor(rng.standard_normal(s).astype(np.float32) * 0.3, requires_grad=True)
              for s in [(4, 8), (8,), (8, 2), (2,)]]
        opt = gg.optim.Adam(ps, lr=0.01)
        losses = []
        with gg.graph_mode(graph):
            for _ in range(30):
                w1, b1, w2, b2 = ps
                loss = ((((x @ w1 + b1).relu() @ w2 + b2) - y) ** 2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(loss.item())
        out[seed] = losses

    ref: dict = {}
    for s in range(4):
        train(s, False, ref)
    out: dict = {}
    ts = [threading.Thread(target=train, args=(s, s % 2 == 0, out)) for s in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert sorted(out) == [0, 1, 2, 3]
    for s in range(4):
        assert ref[s][-1] < ref[s][0]
        np.testing.assert_allclose(out[s], ref[s], rtol=0, atol=1e-6)


def test_clipping_stays_queued_unless_it_must_read_the_norm():
    """clip_grad_norm_ is graph ops (no sync); error_if_nonfinite=True must read the norm:
    a host read, so a sync point like any other."""
    w = gg.tensor([3.0, 4.0], requires_grad=True)
    with gg.graph_mode(True):
        (w * 1).sum().backward()
        with Computes() as c:
            norm = gg.nn.utils.clip_grad_norm_([w], 1.0)
            assert c.n == 0 and gg.pending(norm) and gg.pending(w.grad)
        np.testing.assert_allclose(w.grad.numpy(), np.ones(2) / np.sqrt(2), rtol=1e-5)
        w.grad = None
        (w * 1).sum().backward()
        with Computes() as c:
            gg.nn.utils.clip_grad_norm_([w], 1.0, error_if_nonfinite=True)
            assert c.drains("read") == 1
        np.testing.assert_allclose(w.grad.numpy(), np.ones(2) / np.sqrt(2), rtol=1e-5)


def test_detach_of_a_pending_tensor_is_an_alias_like_in_eager():
    for graph in (False, True):
        with gg.graph_mode(graph):
            base = gg.tensor([1.0, 2.0]) * 2
            alias = base.detach()
            assert gg.pending(alias) == graph and not alias.requires_grad
            alias.add_(gg.ones(2))  # writes the shared memory in both modes
            assert base.tolist() == [3.0, 5.0] and alias.tolist() == [3.0, 5.0]
            assert base._storage is alias._storage
            # the alias alone keeps the value when the base dies before the drain
            b2 = gg.tensor([1.0, 2.0]) * 3
            a2 = b2.detach()
            del b2
            gc.collect()
            assert a2.tolist() == [3.0, 6.0]
    with gg.graph_mode(True):
        base = gg.tensor([1.0]) * 2
        alias = base.detach()
        ENGINE.fail_next_drain()
        with pytest.raises(gg.GraphError):
            alias.numpy()
        for t in (base, alias):
            with pytest.raises(gg.PendingError):
                t.numpy()
