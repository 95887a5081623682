"""A captured function follows the module state it reads (SPEC §4, §6; issue 13): train()/eval(),
replaced parameters, buffers and submodules, in-place loads (no new recording), and the cost of
following it (a plain replay compares one counter)."""
from __future__ import annotations

import logging

import numpy as np
import pytest

import ggmlgrad as gg
from ggmlgrad.capture import state as capture_state

F = gg.nn.functional


def _net(seed: int = 0, p: float = 0.5):
    gg.manual_seed(seed)
    return gg.nn.Sequential(gg.nn.Linear(4, 8), gg.nn.Tanh(), gg.nn.Dropout(p), gg.nn.Linear(8, 3))


def _np(t) -> np.ndarray:
    return t.detach().numpy().astype(np.float64)


def _eval_ref(net, x, weights=None) -> np.ndarray:
    """The eval-mode forward in NumPy float64 (dropout is the identity)."""
    w1, b1, w2, b2 = weights or (_np(net[0].weight), _np(net[0].bias), _np(net[3].weight), _np(net[3].bias))
    h = np.tanh(x.astype(np.float64) @ np.asarray(w1, np.float64).T + b1)
    return h @ np.asarray(w2, np.float64).T + b2


def _loss_ref(net, x, y, weights=None) -> float:
    return float(((_eval_ref(net, x, weights) - y) ** 2).mean())


X = np.random.default_rng(3).standard_normal((5, 16, 4)).astype(np.float32)
Y = np.random.default_rng(4).standard_normal((5, 16, 3)).astype(np.float32)


def _uncaptured(net, x):
    with gg.graph_mode(True):
        return net(gg.tensor(x)).detach().numpy().copy()


# ---------------------------------------------------------------------------- train()/eval()
def test_forward_follows_train_and_eval():
    net = _net()
    f = gg.capture(lambda x: net(x))
    gg.manual_seed(5)
    a1, a2 = f(X[0]), f(X[0])
    gg.manual_seed(5)
    r1, r2 = _uncaptured(net, X[0]), _uncaptured(net, X[0])
    assert np.abs(a1 - a2).max() > 1e-3                   # fresh dropout noise per replay
    np.testing.assert_allclose(a1, r1, rtol=0, atol=1e-6)   # the same noise stream as uncaptured
    np.testing.assert_allclose(a2, r2, rtol=0, atol=1e-6)
    net.eval()
    e1, e2 = f(X[0]), f(X[0])
    np.testing.assert_array_equal(e1, e2)                   # dropout off: deterministic
    np.testing.assert_allclose(e1, _eval_ref(net, X[0]), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(e1, _uncaptured(net, X[0]), rtol=0, atol=1e-6)
    net.train()
    t1, t2 = f(X[0]), f(X[0])
    assert np.abs(t1 - t2).max() > 1e-3 and np.abs(t1 - e1).max() > 1e-3   # dropout again
    assert f.n_recordings == 2                              # one recording per mode, both kept
    net.eval()
    np.testing.assert_array_equal(f(X[0]), e1)
    net.train()
    f(X[0])
    assert f.n_recordings == 2


def test_training_flag_read_outside_a_module_call_is_followed():
    net = gg.nn.Linear(4, 4)
    f = gg.capture(lambda x: F.dropout(x, 0.5, net.training))   # the flag as a plain argument
    ones = np.ones((64, 4), np.float32)
    assert (f(ones) == 0).mean() > 0.2
    net.eval()
    np.testing.assert_array_equal(f(ones), ones)
    assert f.n_recordings == 2


def test_captured_step_follows_train_and_eval_and_matches_uncaptured():
    def run(captured: bool):
        net = _net(1)
        opt = gg.optim.Adam(net.parameters(), lr=0.01)

        def loss_fn(x, y):
            return ((net(x) - y) ** 2).mean()
        step = gg.capture_step(loss_fn, opt) if captured else None
        gg.manual_seed(9)
        losses, evals = [], []
        for i in range(5):
            if i == 2:
                net.eval()
            if i == 4:
                net.train()
            before = [p.detach().numpy().copy() for p in net.parameters()]
            if captured:
                losses.append(float(step(X[i], Y[i])))
            else:
                with gg.graph_mode(True):
                    opt.zero_grad()
                    loss = loss_fn(gg.tensor(X[i]), gg.tensor(Y[i]))
                    loss.backward()
                    opt.step()
                losses.append(loss.item())
            if not net.training:   # eval steps: the loss is the deterministic forward's (before the update)
                evals.append((losses[-1], _loss_ref(net, X[i], Y[i], [b.astype(np.float64) for b in before])))
        return np.array(losses), [p.detach().numpy().copy() for p in net.parameters()], evals, step

    l1, w1, ev1, step = run(True)
    l2, w2, _, _ = run(False)
    np.testing.assert_allclose(l1, l2, rtol=0, atol=1e-5)
    for a, b in zip(w1, w2):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)
    for got, ref in ev1:
        assert abs(got - ref) < 1e-5 * max(1.0, abs(ref))
    assert step.n_recordings == 2


# ---------------------------------------------------------------------------- replaced state
def test_replaced_parameter_is_used_by_the_forward():
    net = _net(2)
    net.eval()
    f = gg.capture(lambda x: net(x))
    f(X[0])
    old = net[3].weight                                      # still alive: only replacement tells
    gg.manual_seed(3)
    net[3].weight = gg.nn.Parameter(gg.randn(3, 8))
    np.testing.assert_allclose(f(X[1]), _eval_ref(net, X[1]), rtol=1e-5, atol=1e-6)
    assert f.n_recordings == 2 and old is not net[3].weight


def test_replaced_submodule_and_buffer_are_used_by_the_forward():
    class Scaled(gg.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = _net(3)
            self.register_buffer("scale", gg.tensor(np.full(3, 2.0, np.float32)))

        def forward(self, x):
            return self.body(x) * self.scale

    m = Scaled().eval()
    f = gg.capture(lambda x: m(x))
    np.testing.assert_allclose(f(X[0]), 2 * _eval_ref(m.body, X[0]), rtol=1e-5, atol=1e-6)
    keep = (m.scale, m.body[0])
    m.scale = gg.tensor(np.full(3, 3.0, np.float32))
    np.testing.assert_allclose(f(X[0]), 3 * _eval_ref(m.body, X[0]), rtol=1e-5, atol=1e-6)
    m.body.add_module("0", gg.nn.Linear(4, 8))              # a submodule replaced
    np.testing.assert_allclose(f(X[0]), 3 * _eval_ref(m.body, X[0]), rtol=1e-5, atol=1e-6)
    setattr(m.body, "2", gg.nn.Identity())                   # the Dropout replaced (no parameters)
    m.train()
    a, b = f(X[0]), f(X[0])
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(a, 3 * _eval_ref(m.body, X[0]), rtol=1e-5, atol=1e-6)
    assert keep[0] is not m.scale and keep[1] is not m.body[0]


def _twin_steps(change, n_before=2, n_after=3):
    """Captured and uncaptured Adam steps with ``change(net, opt)`` applied after ``n_before`` steps."""
    out = []
    for captured in (True, False):
        net = _net(4)
        net.eval()                                        # deterministic: compare exactly
        opt = gg.optim.Adam(net.parameters(), lr=0.02)

        def loss_fn(x, y):
            return ((net(x) - y) ** 2).mean()
        step = gg.capture_step(loss_fn, opt) if captured else None
        losses = []
        for i in range(n_before + n_after):
            if i == n_before:
                gg.manual_seed(6)
                change(net, opt)
            if captured:
                losses.append(float(step(X[i], Y[i])))
            else:
                opt.zero_grad()
                loss = loss_fn(gg.tensor(X[i]), gg.tensor(Y[i]))
                loss.backward()
                opt.step()
                losses.append(loss.item())
        out.append((np.array(losses), net, step))
    (l1, n1, step), (l2, n2, _) = out
    np.testing.assert_allclose(l1, l2, rtol=0, atol=1e-5)
    for (name, a), b in zip(n1.named_parameters(), n2.parameters()):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=0, atol=1e-5, err_msg=name)
    return n1, step


def test_captured_step_trains_a_replaced_parameter_like_an_uncaptured_step():
    def replace(net, opt):
        net[3].weight = gg.nn.Parameter(gg.randn(3, 8) * 0.3)
        opt.add_param_group({"params": [net[3].weight]})
        replace.new = net[3].weight.detach().numpy().copy()
    net, step = _twin_steps(replace)
    assert np.abs(net[3].weight.detach().numpy() - replace.new).max() > 1e-3   # the new one is trained
    assert step.n_recordings == 2


def test_captured_step_with_a_replaced_parameter_the_optimizer_does_not_hold():
    def replace(net, opt):
        net[3].weight = gg.nn.Parameter(gg.randn(3, 8) * 0.3)
        replace.new = net[3].weight.detach().numpy().copy()
    net, step = _twin_steps(replace)
    np.testing.assert_array_equal(net[3].weight.detach().numpy(), replace.new)  # used, not trained (as uncaptured)
    assert step.n_recordings == 2


def test_captured_step_trains_a_replaced_submodule_like_an_uncaptured_step():
    def replace(net, opt):
        net.add_module("3", gg.nn.Linear(8, 3))
        opt.add_param_group({"params": list(net[3].parameters())})
    _net_, step = _twin_steps(replace)
    assert step.n_recordings == 2


def test_load_state_dict_in_place_does_not_record_again_and_is_used():
    net, other = _net(5), _net(6)
    net.eval()
    f = gg.capture(lambda x: net(x))
    f(X[0])
    net.load_state_dict(other.state_dict())
    np.testing.assert_allclose(f(X[0]), _eval_ref(other, X[0]), rtol=1e-5, atol=1e-6)
    assert f.n_recordings == 1

    def reload(n, opt):
        n.load_state_dict(_net(7).state_dict())
    _n, step = _twin_steps(reload)
    assert step.n_recordings == 1


# ---------------------------------------------------------------------------- cost and explain
def test_plain_replays_and_unrelated_changes_do_not_record_again(monkeypatch):
    net = _net(8).eval()
    f = gg.capture(lambda x: net(x))
    f(X[0])
    checks = []
    real = capture_state.Structure.changed
    monkeypatch.setattr(capture_state.Structure, "changed", lambda self: checks.append(1) or real(self))
    for _ in range(10):
        f(X[0])
    assert checks == []                                  # a plain replay compares one counter
    gg.nn.Linear(3, 3).eval()                            # an unrelated module: the epoch moves
    for _ in range(3):
        f(X[0])
    assert len(checks) == 1 and f.n_recordings == 1      # compared once, nothing changed
    with gg.no_grad():
        net[0].weight.mul_(2.0)                          # in place: no new recording
    np.testing.assert_allclose(f(X[0]), _eval_ref(net, X[0]), rtol=1e-5, atol=1e-6)
    assert f.n_recordings == 1


def test_explain_names_the_mode_and_the_replaced_object(caplog):
    net = _net(9)
    f = gg.capture(lambda x: net(x), explain=True)
    f(X[0])
    with caplog.at_level(logging.WARNING, logger="ggmlgrad.capture"):
        net.eval()
        f(X[0])
        assert "Dropout module: training True → False" in caplog.text
        net[0].bias = gg.nn.Parameter(gg.zeros(8))
        f(X[0])
        assert "Linear: the parameter 'bias' was replaced" in caplog.text
        net.add_module("1", gg.nn.ReLU())
        f(X[0])
        assert "Sequential: the submodule '1' was replaced" in caplog.text
    assert f.n_recordings == 4


def test_a_captured_step_with_dropout_in_eval_mode_is_deterministic():
    net = _net(10)
    opt = gg.optim.SGD(net.parameters(), lr=0.0)
    step = gg.capture_step(lambda x, y: ((net(x) - y) ** 2).mean(), opt)
    a, b = float(step(X[0], Y[0])), float(step(X[0], Y[0]))
    assert a != b
    net.eval()
    c, d = float(step(X[0], Y[0])), float(step(X[0], Y[0]))
    assert c == d and c == pytest.approx(_loss_ref(net, X[0], Y[0]), rel=1e-5)


def test_recordings_on_two_threads_each_see_only_their_own_module_reads():
    import threading
    nets = [_net(11), _net(12)]
    seen = {}
    gate = threading.Barrier(2)

    def observe(i):
        with capture_state.observing() as obs:
            gate.wait()
            _ = nets[i][2].training
            gate.wait()
        seen[i] = [m for m, _ in obs.live_modes()]

    threads = [threading.Thread(target=observe, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen[0] == [nets[0][2]] and seen[1] == [nets[1][2]]
    assert gg.engine.context.current().module_observer is None  # each recording popped its context


def test_container_edits_are_followed():
    net = _net(13).eval()
    f = gg.capture(lambda x: net(x))
    f(X[0])
    extra = gg.nn.Linear(3, 3)
    net.append(extra)
    np.testing.assert_allclose(f(X[0]), _eval_ref(net, X[0]) @ _np(extra.weight).T + _np(extra.bias),
                               rtol=1e-5, atol=1e-6)
    popped = net.pop()                                     # alive (held here), removed from the model
    np.testing.assert_allclose(f(X[0]), _eval_ref(net, X[0]), rtol=1e-5, atol=1e-6)
    heads = gg.nn.ModuleDict({"a": gg.nn.Linear(4, 2), "b": gg.nn.Linear(4, 2)})
    g = gg.capture(lambda x: sum(h(x) for h in heads.values()))
    g(X[0])
    b = heads["b"]
    del heads["b"]
    a = heads["a"]
    np.testing.assert_allclose(g(X[0]), X[0].astype(np.float64) @ _np(a.weight).T + _np(a.bias),
                               rtol=1e-5, atol=1e-6)
    ml = gg.nn.ModuleList([gg.nn.Linear(4, 4), gg.nn.Linear(4, 4)])
    ml[0] = gg.nn.Identity()                               # replaced in place: the order is kept
    assert list(ml._modules) == ["0", "1"] and isinstance(ml[0], gg.nn.Identity)
    assert popped is extra and b is not None and f.n_recordings == 3 and g.n_recordings == 2


def test_docstring_examples():
    import doctest
    import importlib
    result = doctest.testmod(importlib.import_module("ggmlgrad.capture.state"))
    assert result.attempted > 0 and result.failed == 0


def test_a_module_built_inside_the_function_is_not_followed_and_a_freed_one_is_forgotten():
    f = gg.capture(lambda x: gg.nn.Dropout(0.5)(x))          # a fresh module per call: always training
    ones = np.ones(256, np.float32)
    a, b, c = f(ones), f(ones), f(ones)
    assert (a == 0).mean() > 0.3 and (a != b).mean() > 0.3 and f.n_recordings == 1
    drop = gg.nn.Dropout(0.5).eval()
    g = gg.capture(lambda x: drop(x))
    np.testing.assert_array_equal(g(ones), ones)
    assert len(g._watched) == 1
    del drop                                                 # g's function now fails; its watch list forgets
    import gc
    gc.collect()
    assert g._mode_key() == () and len(g._watched) == 0


def test_plain_tensor_attributes_count_when_read_not_when_written():
    class Net(gg.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = gg.nn.Linear(4, 3)
            self.shift = gg.tensor(np.ones(3, np.float32))    # a plain tensor attribute, read below

        def forward(self, x):
            out = self.fc(x) + self.shift
            self.last = out                                   # written, not read: no dependency
            return out

    net = Net()
    f = gg.capture(lambda x: net(x))
    ref = lambda: X[0].astype(np.float64) @ _np(net.fc.weight).T + _np(net.fc.bias) + _np(net.shift)  # noqa: E731
    f(X[0])
    with gg.graph_mode(True):
        net(gg.tensor(X[0]))                                  # an uncaptured forward rewrites net.last
    np.testing.assert_allclose(f(X[0]), ref(), rtol=1e-5, atol=1e-6)
    assert f.n_recordings == 1
    old = net.shift
    net.shift = gg.tensor(np.full(3, 4.0, np.float32))
    np.testing.assert_allclose(f(X[0]), ref(), rtol=1e-5, atol=1e-6)
    assert f.n_recordings == 2 and old is not net.shift


def test_captured_step_follows_frozen_parameters_like_an_uncaptured_step():
    def freeze(net, opt):
        freeze.before = [p.detach().numpy().copy() for p in net[0].parameters()]
        for p in net[0].parameters():
            p.requires_grad = False
    net, step = _twin_steps(freeze)
    for p, b in zip(net[0].parameters(), freeze.before):
        np.testing.assert_array_equal(p.numpy(), b)              # frozen: not updated any more
    assert step.n_recordings == 2
