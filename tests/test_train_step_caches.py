"""Caches on the training-step path (issue 11, "No speed is lost") invalidate correctly.

- ``ExecContext.with_modes`` reuses one derived context per (graph, check) setting: nested and
  repeated ``graph_mode`` blocks, threads, and a block whose context was changed inside must
  still restore exactly what they set.
- ``Optimizer._update_layout`` keeps, per layout key, the parameters that get updated: a step
  where another set of parameters has gradients, a parameter whose shape or dtype changed, or a
  changed ``lr`` must give what a fresh optimizer in the same state gives (NumPy float64
  reference for the values).
- ``Engine.exclusive`` is a class context manager now: an exception in its body discards what
  the body queued and leaves the engine usable.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

import ggmlgrad as gg
from ggmlgrad.engine import ENGINE, context


# ---------------------------------------------------------------------- contexts
def test_with_modes_is_reused_per_setting_and_has_the_modes_it_names():
    base = context.current()
    on = base.with_modes(True, None)
    assert on is base.with_modes(True, None)              # made once
    assert (on.graph, on.check) == (True, base.check)
    chk = base.with_modes(True, True)
    assert chk is not on and (chk.graph, chk.check) == (True, True)
    off = on.with_modes(False, False)
    assert (off.graph, off.check) == (False, False) and off is not base
    # a derived context copies every other setting
    assert (on.precision, on.observer, on.counters) == (base.precision, base.observer, base.counters)


def test_repeated_and_nested_graph_mode_blocks_restore_exactly():
    start = gg.graph_mode()
    for _ in range(3):
        with gg.graph_mode(True):
            assert gg.graph_mode()
            with gg.graph_mode(False):
                assert not gg.graph_mode()
                with gg.graph_mode(True, check=True):
                    assert gg.graph_mode() and gg.engine.modes.check_enabled()
                assert not gg.graph_mode()
            assert gg.graph_mode()
        assert gg.graph_mode() == start


def test_a_block_whose_context_changed_inside_still_restores_its_modes():
    start = gg.graph_mode()
    with gg.graph_mode(True):
        token = context.push(precision="f32")   # another change on top of the block's context
        assert gg.graph_mode()
    try:
        assert gg.graph_mode() == start         # the block's own settings came back
        assert context.current().precision == "f32"   # and the other change stayed
    finally:
        context.pop(token)                      # back to the context the push saw (the block's)
        context.update(graph_set=None, check_set=None)


def test_threads_reuse_contexts_without_seeing_each_others_modes():
    seen = {}
    barrier = threading.Barrier(2)

    def run(name, on):
        with gg.graph_mode(on):
            barrier.wait()
            seen[name] = gg.graph_mode()
            barrier.wait()
        seen[name + "_after"] = gg.graph_mode()

    t1 = threading.Thread(target=run, args=("a", True))
    t2 = threading.Thread(target=run, args=("b", False))
    t1.start(); t2.start(); t1.join(); t2.join()
    assert seen["a"] is True and seen["b"] is False
    assert seen["a_after"] == seen["b_after"]   # both back to the default


# ---------------------------------------------------------------------- exclusive
def test_exclusive_discards_on_error_and_the_engine_stays_usable():
    a = gg.tensor([1.0, 2.0])
    with pytest.raises(ZeroDivisionError):
        with ENGINE.exclusive("test"):
            1 / 0
    assert ENGINE.current._hold == 0
    assert (a * 2.0).tolist() == [2.0, 4.0]
    with ENGINE.exclusive("test") as e:
        assert e is ENGINE.current and e._hold == 1
    assert ENGINE.current._hold == 0


# ---------------------------------------------------------------------- optimizer layouts
def _adam_ref(p, g, m, v, t, lr, b1=0.9, b2=0.999, eps=1e-8):
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    p = p - lr * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)
    return p, m, v


class _Ref:
    """NumPy float64 Adam per parameter (its own step count, as torch's per-parameter state)."""

    def __init__(self, values):
        self.p = [np.asarray(v, np.float64) for v in values]
        self.m = [np.zeros_like(v) for v in self.p]
        self.v = [np.zeros_like(v) for v in self.p]
        self.t = [0] * len(values)

    def step(self, grads, lr):
        for i, g in enumerate(grads):
            if g is None:
                continue
            self.t[i] += 1
            self.p[i], self.m[i], self.v[i] = _adam_ref(self.p[i], g, self.m[i], self.v[i], self.t[i], lr)


@pytest.mark.parametrize("graph", [False, True])
def test_changing_which_params_have_grads_and_lr_between_steps(graph):
    rng = np.random.default_rng(1)
    init = [rng.standard_normal(3), rng.standard_normal((2, 2)), rng.standard_normal(1)]
    ps = [gg.tensor(v.astype(np.float32), requires_grad=True) for v in init]
    opt = gg.optim.Adam(ps, lr=0.1)
    ref = _Ref([v.astype(np.float32) for v in init])
    # which parameters get a gradient, and the lr, per step: the layout (and its updated list) changes
    plan = [((0, 1, 2), 0.1), ((0, 2), 0.1), ((0, 1, 2), 0.05), ((1,), 0.05), ((0, 2), 0.2), ((0, 1, 2), 0.2)]
    for used, lr in plan:
        for g in opt.param_groups:
            g["lr"] = lr
        with gg.graph_mode(graph):
            loss = sum(((ps[i] * ps[i]).sum() for i in used), gg.tensor(0.0))
            loss.backward()
            opt.step()
        ref.step([2.0 * ref.p[i] if i in used else None for i in range(3)], lr)
        opt.zero_grad()
        for i in range(3):
            np.testing.assert_allclose(ps[i].detach().numpy(), ref.p[i], rtol=1e-4, atol=1e-5)  # float32 update
            assert opt.state[ps[i]]["step"] == ref.t[i]


def test_a_parameter_with_a_new_shape_is_refused_not_updated_with_the_old_layout():
    p = gg.tensor([1.0, 2.0], requires_grad=True)
    opt = gg.optim.Adam([p], lr=0.1)
    for _ in range(2):
        (p * p).sum().backward()
        opt.step()
        opt.zero_grad()
    p.data = gg.tensor([1.0, 2.0, 3.0])
    (p * p).sum().backward()
    with pytest.raises(RuntimeError, match="shape"):
        opt.step()


def test_a_parameter_with_a_new_dtype_gets_a_new_layout_with_the_same_values_as_a_fresh_run():
    def run(switch_first: bool):
        p = gg.tensor([1.0, -2.0, 0.5], requires_grad=True)
        opt = gg.optim.Adam([p], lr=0.1)
        if switch_first:
            p.data = p.detach().to(gg.float16)
        else:
            (p * p).sum().backward()   # a float32 step first: its layout is cached
            opt.step()
            opt.zero_grad()
            with gg.no_grad():
                p.copy_(gg.tensor([1.0, -2.0, 0.5]))
            opt.state[p]["step"] = 0
            opt.state[p]["exp_avg"].zero_()
            opt.state[p]["exp_avg_sq"].zero_()
            p.data = p.detach().to(gg.float16)
        for _ in range(3):
            (p.float() * p.float()).sum().backward()
            opt.step()
            opt.zero_grad()
        assert p.dtype is gg.float16
        return p.float().detach().numpy()

    np.testing.assert_array_equal(run(False), run(True))
