"""Replayed forwards of built-in modules (nn/replay.py, engine/forward.py): an identical call appends
the records of an earlier call again. Values against NumPy float64; every change that must end a
replay is a test that fails when a stale segment is used; compute counters for eager mode."""
import numpy as np
import pytest

import ggmlgrad as gg
from ggmlgrad.engine import ENGINE

MODES = ["eager", "graph", "check"]


def _mode(name):
    return gg.graph_mode(name != "eager", check=name == "check")


def _mlp(n_in=4, hidden=16, n_out=3):
    return gg.nn.Sequential(gg.nn.Linear(n_in, hidden), gg.nn.Tanh(), gg.nn.Linear(hidden, hidden), gg.nn.ReLU(),
                            gg.nn.Linear(hidden, n_out))


def _ref(net, x):
    """The network's forward in NumPy float64 from its current parameters."""
    h = np.asarray(x, np.float64)
    for m in net:
        if isinstance(m, gg.nn.Linear):
            h = h @ m.weight.detach().numpy().astype(np.float64).T + m.bias.detach().numpy().astype(np.float64)
        elif isinstance(m, gg.nn.Tanh):
            h = np.tanh(h)
        elif isinstance(m, gg.nn.ReLU):
            h = np.maximum(h, 0)
        elif isinstance(m, gg.nn.LeakyReLU):
            h = np.where(h > 0, h, h * m.negative_slope)
        else:
            raise AssertionError(type(m))
    return h


def _obs(seed, shape=(4, 4)):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.fixture(autouse=True)
def _fresh_plan_caches():
    # Earlier test files may leave a plan cache pausing its builds after thrashing (test_plans.py
    # does so on purpose); the direct-path tests need the plans their warm-up makes.
    from ggmlgrad.engine.trace_cache import TRACE
    TRACE.clear()
    yield


def _call(net, x, mode):
    with gg.no_grad(), _mode(mode):
        return net(gg.tensor(x)).numpy()


def _replays(net) -> int:
    """How many segments the net's cache holds (0: its calls run the layers)."""
    return sum(e.seg is not None for e in net.__dict__.get("_replay_cache", {}).values())


@pytest.mark.parametrize("mode", MODES)
def test_values_over_repeated_calls(mode):
    net = _mlp()
    for seed in range(4):  # the first call records, the next ones replay (outside check mode)
        x = _obs(seed)
        np.testing.assert_allclose(_call(net, x, mode), _ref(net, x), rtol=1e-5, atol=1e-5)
    assert _replays(net) == (0 if mode == "check" else 1)


@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_actor_and_critic_on_one_input_then_one_read(mode):
    actor, critic = _mlp(n_out=2), _mlp(n_out=1)
    for seed in range(3):
        x = _obs(seed)
        with gg.no_grad(), _mode(mode):
            t = gg.tensor(x)
            h = t * 2.0  # a pending argument in graph mode
            a, v, v2 = actor(t), critic(t), critic(h)
            got = a.numpy(), v.numpy(), v2.numpy()
        np.testing.assert_allclose(got[0], _ref(actor, x), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got[1], _ref(critic, x), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got[2], _ref(critic, 2 * x), rtol=1e-5, atol=1e-5)


def test_eager_call_is_one_compute():
    net = _mlp()
    x = _obs(0)
    _call(net, x, "eager")
    gg.reset_counters()
    _call(net, x, "eager")
    assert gg.counters()["computes"] == 1  # five layers' ops, one drain (plain eager: one per op)


def test_check_mode_checks_each_op():
    net = _mlp()
    x = _obs(0)
    for _ in range(2):
        gg.reset_counters()
        _call(net, x, "check")
        assert gg.counters()["computes"] == 5


@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_parameter_values_written_in_place_are_read(mode):
    net = _mlp()
    x = _obs(1)
    _call(net, x, mode)
    with gg.no_grad():
        net[0].weight.copy_(gg.tensor(_obs(5, (16, 4))))
    np.testing.assert_allclose(_call(net, x, mode), _ref(net, x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_parameter_replaced(mode):
    net = _mlp()
    x = _obs(1)
    _call(net, x, mode)
    net[2].weight = gg.nn.Parameter(gg.tensor(_obs(6, (16, 16))))
    np.testing.assert_allclose(_call(net, x, mode), _ref(net, x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_parameter_data_reshaped(mode):
    net = _mlp()
    x = _obs(1)
    _call(net, x, mode)
    last = net[4]
    last.weight.data = gg.tensor(_obs(7, (5, 16)))  # same Parameter objects, new shapes
    last.bias.data = gg.tensor(_obs(8, (5,)))
    got = _call(net, x, mode)
    assert got.shape == (4, 5)
    np.testing.assert_allclose(got, _ref(net, x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_module_replaced_and_appended(mode):
    net = _mlp()
    x = _obs(2)
    _call(net, x, mode)
    net.add_module("3", gg.nn.Tanh())  # replaces the ReLU in its place
    net.append(gg.nn.ReLU())
    np.testing.assert_allclose(_call(net, x, mode), _ref(net, x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_activation_attribute_changed(mode):
    net = gg.nn.Sequential(gg.nn.Linear(4, 8), gg.nn.LeakyReLU(0.01), gg.nn.Linear(8, 2))
    x = _obs(3)
    _call(net, x, mode)
    net[1].negative_slope = 0.5  # a plain attribute: no module epoch moves
    np.testing.assert_allclose(_call(net, x, mode), _ref(net, x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_forward_patched_on_instance(mode):
    lin = gg.nn.Linear(4, 2)
    x = _obs(4)
    _call(lin, x, mode)
    lin.forward = lambda inp: inp * 3.0
    np.testing.assert_allclose(_call(lin, x, mode), 3.0 * x, rtol=1e-6)


def test_requires_grad_turned_on_records_the_tape():
    net = _mlp(n_out=1)
    for p in net.parameters():
        p.requires_grad_(False)
    x = _obs(5)
    for _ in range(2):
        out = net(gg.tensor(x))  # grad enabled, nothing requires it: replayed
        assert not out.requires_grad
    w = net[4].weight
    w.requires_grad_(True)
    out = net(gg.tensor(x))
    assert out.requires_grad
    out.sum().backward()
    # d(sum)/dW_last = sum over the batch of the last hidden activations
    h = np.maximum(np.tanh(x.astype(np.float64) @ net[0].weight.numpy().T + net[0].bias.numpy())
                   @ net[2].weight.numpy().T + net[2].bias.numpy(), 0)
    np.testing.assert_allclose(w.grad.numpy(), h.sum(0, keepdims=True), rtol=1e-4, atol=1e-5)


def test_training_flag_reaches_dropout():
    gg.manual_seed(0)
    net = gg.nn.Sequential(gg.nn.Linear(4, 64), gg.nn.Dropout(0.5))
    x = _obs(6)
    net.eval()
    a, b = _call(net, x, "graph"), _call(net, x, "graph")
    np.testing.assert_allclose(a, b)
    net.train()
    c = _call(net, x, "graph")
    assert (c == 0).sum() > 0 and not np.allclose(c, a)


@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_new_input_shape_and_bad_input(mode):
    net = _mlp()
    for rows in (4, 3, 4):
        x = _obs(rows, (rows, 4))
        np.testing.assert_allclose(_call(net, x, mode), _ref(net, x), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError) as replayed:
        _call(net, _obs(0, (4, 5)), mode)
    with pytest.raises(ValueError) as plain:
        with gg.no_grad(), _mode(mode):
            net[0].forward(gg.tensor(_obs(0, (4, 5))))
    assert str(replayed.value) == str(plain.value)


def test_matmul_precision_in_the_records():
    net = _mlp()
    x = _obs(7)
    _call(net, x, "graph")
    with gg.no_grad(), gg.graph_mode(True):
        prev = gg.matmul_precision("f32")
        try:
            out = net(gg.tensor(x))
            precs = {rec[4] for rec in ENGINE.lazy}  # REC_PREC
            np.testing.assert_allclose(out.numpy(), _ref(net, x), rtol=1e-5, atol=1e-5)
        finally:
            gg.matmul_precision(prev)
    assert "f32" in precs


def test_capture_runs_the_layers():
    net = _mlp()
    x = _obs(8)
    _call(net, x, "graph")
    f = gg.capture(lambda t: net(t))
    for seed in (8, 9):
        x = _obs(seed)
        np.testing.assert_allclose(np.asarray(f(gg.tensor(x))), _ref(net, x), rtol=1e-5, atol=1e-5)
    with gg.no_grad():
        net[0].weight.copy_(gg.tensor(_obs(10, (16, 4))))
    np.testing.assert_allclose(np.asarray(f(gg.tensor(x))), _ref(net, x), rtol=1e-5, atol=1e-5)


def test_parameter_as_argument_is_not_replayed_as_the_argument():
    lin = gg.nn.Linear(3, 3)
    with gg.no_grad(), gg.graph_mode(True):
        for _ in range(2):
            got = lin(lin.weight).numpy()
        w, b = lin.weight.detach().numpy().astype(np.float64), lin.bias.detach().numpy().astype(np.float64)
        np.testing.assert_allclose(got, w @ w.T + b, rtol=1e-5, atol=1e-5)
        x = _obs(11, (3, 3))
        np.testing.assert_allclose(lin(gg.tensor(x)).numpy(), x @ w.T + b, rtol=1e-5, atol=1e-5)


def test_deepcopy_has_its_own_calls():
    import copy
    net = _mlp()
    x = _obs(12)
    _call(net, x, "graph")
    target = copy.deepcopy(net)
    assert "_replay_cache" not in target.__dict__
    with gg.no_grad():
        net[0].weight.copy_(gg.tensor(_obs(13, (16, 4))))
    for _ in range(2):
        np.testing.assert_allclose(_call(target, x, "graph"), _ref(target, x), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(_call(net, x, "graph"), _ref(net, x), rtol=1e-5, atol=1e-5)
    assert not np.allclose(_ref(target, x), _ref(net, x))


# ---------------------------------------------------------------------- small forwards (issue 14 item 5)
# A replayed forward is one queued record; in eager mode the plan of an earlier replay computes
# it directly. Each test runs enough calls for the direct path to be in use (the plan is made on
# the second replay), then changes one thing and checks values against NumPy float64.
N_WARM = 4


def _warm(net, x, mode="eager"):
    for _ in range(N_WARM):
        np.testing.assert_allclose(_call(net, x, mode), _ref(net, x), rtol=1e-5, atol=1e-5)


def _entry(net, x, mode="eager"):
    key = (x.shape, gg.float32, gg.tensor(x).device, mode != "eager", gg.matmul_precision())
    return net.__dict__["_replay_cache"][key]


def test_replay_is_one_record_with_every_op_label():
    net = _mlp()
    x = _obs(20)
    _warm(net, x, "graph")
    with gg.no_grad(), gg.graph_mode(True):
        y = net(gg.tensor(x))
        assert len(ENGINE.lazy) == 1
        assert ENGINE.labels == ["linear", "tanh", "linear", "relu", "linear"]
        ENGINE.fail_next_drain("injected")
        with pytest.raises(gg.GraphError, match=r"linear x3, tanh x1, relu x1"):
            y.numpy()
    np.testing.assert_allclose(_call(net, x, "graph"), _ref(net, x), rtol=1e-5, atol=1e-5)


def test_eager_direct_path_counts_one_compute_per_call():
    net = _mlp()
    x = _obs(21)
    _warm(net, x)
    assert _entry(net, x).plan is not None and _entry(net, x).plan() is not None
    gg.reset_counters()
    for _ in range(3):
        _call(net, x, "eager")
    snap = gg.counters()
    assert snap["computes_by_site"] == {"eager": 3}
    assert snap["drains_by_reason"] == {"eager": 3}


def test_eager_direct_path_follows_in_place_and_replaced_parameter_memory():
    net = _mlp()
    x = _obs(22)
    _warm(net, x)
    with gg.no_grad():
        net[0].weight.copy_(gg.tensor(_obs(23, (16, 4))))
    _warm(net, x)
    net[2].weight.data = gg.tensor(_obs(24, (16, 16)))  # same shape, new memory
    _warm(net, x)
    net[4].bias = gg.nn.Parameter(gg.tensor(_obs(25, (3,))))
    _warm(net, x)


@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_input_shape_and_dtype_changes(mode):
    net = _mlp()
    for rows in (4, 3, 4):
        _warm(net, _obs(rows, (rows, 4)), mode)
    half = gg.tensor(_obs(1)).half()
    with pytest.raises(Exception) as replayed:
        with gg.no_grad(), _mode(mode):
            net(half).numpy()
    with pytest.raises(Exception) as plain:
        with gg.no_grad(), _mode(mode):
            net[0].forward(half).numpy()
    assert type(replayed.value) is type(plain.value) and str(replayed.value) == str(plain.value)
    _warm(net, _obs(4), mode)


def test_train_eval_switch_and_requires_grad():
    net = _mlp(n_out=1)
    x = _obs(26)
    for p in net.parameters():
        p.requires_grad_(False)
    _warm(net, x)
    net.eval()
    _warm(net, x)
    net.train()
    _warm(net, x)
    w = net[4].weight
    w.requires_grad_(True)
    out = net(gg.tensor(x))  # grad enabled and a parameter requires it: the layers run, on the tape
    assert out.requires_grad
    out.sum().backward()
    h = np.maximum(np.tanh(x.astype(np.float64) @ net[0].weight.numpy().T + net[0].bias.numpy())
                   @ net[2].weight.numpy().T + net[2].bias.numpy(), 0)
    np.testing.assert_allclose(w.grad.numpy(), h.sum(0, keepdims=True), rtol=1e-4, atol=1e-5)
    _warm(net, x)  # under no_grad: replayed again


def test_eager_direct_path_after_the_plans_were_freed():
    from ggmlgrad.engine.trace_cache import GRAPH, TRACE
    net = _mlp()
    x = _obs(27)
    _warm(net, x)
    TRACE.clear(GRAPH)  # frees the plan the entry refers to
    assert _entry(net, x).plan() is None or not _entry(net, x).plan().sched
    _warm(net, x)


def test_eager_direct_path_failure_is_a_graph_error_naming_the_ops(monkeypatch):
    from ggmlgrad.engine import executor
    net = _mlp()
    x = _obs(28)
    _warm(net, x)
    plan = _entry(net, x).plan()
    real = executor._graph_compute
    # a failing ggml compute (status 1) of this plan only
    monkeypatch.setattr(executor, "_graph_compute", lambda sched, graph: 1 if graph == plan.graph else real(sched, graph))
    with pytest.raises(gg.GraphError, match=r"linear x3, tanh x1, relu x1"):
        _call(net, x, "eager")
    monkeypatch.undo()
    _warm(net, x)  # the session stays usable


@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_results_held_by_the_caller_are_never_reused(mode):
    """A run reuses an earlier run's result memory only when nothing holds it: every result kept
    here (tensors, NumPy views of them, views whose tensor is gone) keeps its own value."""
    actor, critic = _mlp(n_out=2), _mlp(n_out=1)
    kept = []
    for seed in range(8):
        x = _obs(30 + seed)
        with gg.no_grad(), _mode(mode):
            t = gg.tensor(x)
            a, v = actor(t), critic(t)
            got = (a, v.numpy()) if seed % 2 else (a.numpy(), v.numpy())
        kept.append((x, got))
        for x_old, (a_old, v_old) in kept:
            np.testing.assert_allclose(np.asarray(a_old), _ref(actor, x_old), rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(v_old, _ref(critic, x_old), rtol=1e-5, atol=1e-5)
        if seed % 3 == 0:
            kept = kept[-2:]  # some results dropped: their memory may be taken again


def test_graph_queue_mixing_a_replay_and_plain_ops_on_its_parameters():
    """A replayed segment's inputs add one key element each: a plain op reading the same parameter
    before or after it must still get a plan of its own graph."""
    lin = gg.nn.Linear(4, 4)
    for seed in range(5):
        x = _obs(40 + seed)
        w, b = lin.weight.detach().numpy().astype(np.float64), lin.bias.detach().numpy().astype(np.float64)
        with gg.no_grad(), gg.graph_mode(True):
            t = gg.tensor(x)
            before = t @ lin.weight
            y = lin(t)
            after = y @ lin.weight.T + lin.bias
            got = before.numpy(), y.numpy(), after.numpy()
        np.testing.assert_allclose(got[0], x @ w, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got[1], x @ w.T + b, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got[2], (x @ w.T + b) @ w.T + b, rtol=1e-5, atol=1e-5)


def test_threads_share_the_module_and_its_plan():
    import threading
    net = _mlp()
    _warm(net, _obs(50))
    errors = []
    device = gg.get_device()

    def work(seed):
        try:
            gg.set_device(device)   # a new thread starts on the CPU: run where the test runs
            for i in range(30):
                x = _obs(seed * 100 + i)
                np.testing.assert_allclose(_call(net, x, "eager"), _ref(net, x), rtol=1e-5, atol=1e-5)
        except BaseException as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[0]


def test_uploads_into_recycled_host_blocks():
    """gg.tensor copies into pooled host memory through a cached view of each block: a block
    recycled for a smaller or other-dtype tensor gets exactly the new bytes."""
    rng = np.random.default_rng(60)
    for _ in range(3):
        for data in (rng.standard_normal(1000), rng.standard_normal((3, 5)).astype(np.float32),
                     rng.integers(-9, 9, (7,)).astype(np.int32), rng.standard_normal((2, 2)) > 0,
                     rng.standard_normal((4, 3)).astype(np.float16), rng.standard_normal(1)):
            t = gg.tensor(data)
            expect = data.astype(np.float32) if data.dtype == np.float64 else data
            np.testing.assert_array_equal(t.numpy(), expect)
            del t


@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_segment_without_parameters(mode):
    net = gg.nn.Sequential(gg.nn.Tanh(), gg.nn.ReLU())
    x = _obs(61)
    for _ in range(N_WARM):
        np.testing.assert_allclose(_call(net, x, mode), np.maximum(np.tanh(x.astype(np.float64)), 0),
                                   rtol=1e-6, atol=1e-6)
    assert _replays(net) == 1


def test_a_replayed_forward_reports_its_own_heaviest_node_to_the_thread_policy():
    """The thread policy reads the queue's heaviest node: a segment recorded behind a heavier op
    must still carry its own (it once carried 0, so replays of a 51 MFLOP layer ran on one thread)."""
    from ggmlgrad.engine import ENGINE
    net = gg.nn.Sequential(gg.nn.Linear(64, 32), gg.nn.Tanh())
    x = gg.tensor(np.ones((16, 64), np.float32))
    big = gg.tensor(np.ones((128, 128), np.float32))
    expected = 2.0 * 16 * 64 * 32                           # the Linear's flops, its heaviest node
    with gg.no_grad(), gg.graph_mode(True):
        for _ in range(3):                                  # recorded while a heavier matmul is queued
            heavy = big @ big
            y = net(x)
            heavy.numpy(), y.numpy()
        assert ENGINE.current.max_work == 0.0 and not len(ENGINE.current)
        y = net(x)                                          # replayed on an empty queue
        assert ENGINE.current.max_work == expected
        y.numpy()
