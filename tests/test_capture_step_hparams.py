"""Captured Adam steps keep a table of hyperparameter rows (optim/capture_update.py): every way the
hyperparameters or step counters change between replays must reach the next replay, as in eager."""
import numpy as np
import pytest

import ggmlgrad as gg

C = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]], np.float32)   # d loss / d w: a constant gradient


def _adam_ref(w, m, v, t, lr, b1, b2, eps, wd, decoupled):
    """One Adam/AdamW step in float64 (PyTorch's formula) for the constant gradient C."""
    g = C.astype(np.float64)
    if decoupled:
        w = w * (1 - lr * wd)
    elif wd:
        g = g + wd * w
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    w = w - lr * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)
    return w, m, v


def _setup(cls=gg.optim.Adam, **kw):
    w = gg.tensor(np.ones_like(C), requires_grad=True)
    opt = cls([w], **kw)
    step = gg.capture_step(lambda c: (w * c).sum(), opt)
    return w, opt, step


def _run(changes, n, cls=gg.optim.Adam, **kw):
    """n captured replays; ``changes[i](opt)`` runs before replay i. Returns the weights and a float64
    reference that reads the optimizer's group options and step counter as they are at each replay."""
    w, opt, step = _setup(cls, **kw)
    c = gg.tensor(C)
    ref_w, m, v = np.ones_like(C, dtype=np.float64), 0.0, 0.0
    for i in range(n):
        if i in changes:
            changes[i](opt, w)
        g = opt.param_groups[0]
        t = opt.state[w]["step"] + 1
        step(c)
        ref_w, m, v = _adam_ref(ref_w, m, v, t, g["lr"], *g["betas"], g["eps"], g["weight_decay"],
                                cls is gg.optim.AdamW)
    assert step.recordings == 1   # value changes are inputs: no new recording
    return w, opt, ref_w


def _close(w, ref):
    np.testing.assert_allclose(w.detach().numpy(), ref, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("cls", [gg.optim.Adam, gg.optim.AdamW])
def test_rows_equal_group_hparams_bitwise(cls):
    w = gg.tensor(np.ones(3, np.float32), requires_grad=True)
    opt = cls([w], lr=0.0123, betas=(0.87, 0.9993), eps=3e-7, weight_decay=0.031)
    g = opt.param_groups[0]
    rows = opt._hparams_rows(g, 5, 300)
    want = np.stack([opt._group_hparams(g, 5 + i) for i in range(300)])
    assert rows.dtype == np.float32 and rows.tobytes() == want.tobytes()


def test_lr_edited_by_hand_between_replays():
    changes = {3: lambda o, w: o.param_groups[0].__setitem__("lr", 0.05),
               6: lambda o, w: o.param_groups[0].__setitem__("lr", 0.001)}
    w, _, ref = _run(changes, 9, lr=0.01)
    _close(w, ref)


def test_betas_eps_and_weight_decay_edited_by_hand():
    changes = {2: lambda o, w: o.param_groups[0].__setitem__("betas", (0.5, 0.9)),
               4: lambda o, w: o.param_groups[0].__setitem__("eps", 1e-2),
               6: lambda o, w: o.param_groups[0].__setitem__("weight_decay", 0.3)}   # nonzero: same graph
    w, _, ref = _run(changes, 8, cls=gg.optim.AdamW, lr=0.01, weight_decay=0.1)
    _close(w, ref)


def test_scheduler_changes_lr_between_replays():
    w, opt, step = _setup(lr=0.1)
    sched = gg.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    c = gg.tensor(C)
    ref_w, m, v = np.ones_like(C, dtype=np.float64), 0.0, 0.0
    for t in range(1, 8):
        lr = 0.1 * 0.5 ** ((t - 1) // 2)
        assert opt.param_groups[0]["lr"] == pytest.approx(lr)
        step(c)
        sched.step()
        ref_w, m, v = _adam_ref(ref_w, m, v, t, lr, 0.9, 0.999, 1e-8, 0.0, False)
    _close(w, ref_w)


def test_step_counter_edited_and_state_dict_loaded_between_replays():
    saved = {}

    def save(o, w):
        saved["sd"] = o.state_dict()

    def load(o, w):   # rewinds the step counter to 2 (bias corrections of step 3 next)
        o.load_state_dict(saved["sd"])

    def set_step(o, w):
        o.state[w]["step"] = 40

    w, opt, step = _setup(lr=0.01)
    c = gg.tensor(C)
    for i in range(2):
        step(c)
    save(opt, w)
    ref_opt_w = gg.tensor(np.ones_like(C), requires_grad=True)   # eager twin, same history
    ref_opt = gg.optim.Adam([ref_opt_w], lr=0.01)
    for i in range(2):
        ref_opt_w.grad = gg.tensor(C)
        ref_opt.step()
    eager_sd = ref_opt.state_dict()
    for _ in range(3):
        step(c)
    load(opt, w)
    opt_w_after_load = w.detach().numpy().copy()
    ref_opt.load_state_dict(eager_sd)
    ref_opt_w.data = gg.tensor(opt_w_after_load)
    for i in range(4):
        if i == 2:
            set_step(opt, w)
            ref_opt.state[ref_opt_w]["step"] = 40
        step(c)
        ref_opt_w.grad = gg.tensor(C)
        ref_opt.step()
        assert opt.state[w]["step"] == ref_opt.state[ref_opt_w]["step"]
    np.testing.assert_array_equal(w.detach().numpy(), ref_opt_w.detach().numpy())
    sd, rsd = opt.state_dict()["state"][0], ref_opt.state_dict()["state"][0]
    assert sd["step"] == rsd["step"] == 42
    for k in ("exp_avg", "exp_avg_sq"):
        np.testing.assert_array_equal(sd[k].numpy(), rsd[k].numpy())


def test_more_replays_than_one_table_matches_eager_bitwise():
    w, opt, step = _setup(lr=0.003, betas=(0.8, 0.99))
    e = gg.tensor(np.ones_like(C), requires_grad=True)
    eager = gg.optim.Adam([e], lr=0.003, betas=(0.8, 0.99))
    c = gg.tensor(C)
    for _ in range(300):   # past the 256 rows computed at once
        step(c)
        e.grad = gg.tensor(C)
        eager.step()
    assert opt.state[w]["step"] == eager.state[e]["step"] == 300
    np.testing.assert_array_equal(w.detach().numpy(), e.detach().numpy())


def test_mutable_lr_is_not_kept_in_a_table():
    w, opt, step = _setup(lr=0.01)
    lr = np.array(0.01)
    opt.param_groups[0]["lr"] = lr
    c = gg.tensor(C)
    step(c)
    lr[...] = 0.2   # edited in place: the same object, so only a key of plain numbers can be trusted
    ref_w, m, v = _adam_ref(np.ones_like(C, dtype=np.float64), 0.0, 0.0, 1, 0.01, 0.9, 0.999, 1e-8, 0, False)
    ref_w, m, v = _adam_ref(ref_w, m, v, 2, 0.2, 0.9, 0.999, 1e-8, 0, False)
    step(c)
    _close(w, ref_w)


def test_state_dicts_replaced_between_replays_are_read():
    """load_state_dict of a state without entries gives every parameter a new state dict (step 0)."""
    w, opt, step = _setup(lr=0.01)
    e = gg.tensor(np.ones_like(C), requires_grad=True)
    eager = gg.optim.Adam([e], lr=0.01)
    c = gg.tensor(C)
    for i in range(6):
        if i == 3:
            for o in (opt, eager):
                sd = o.state_dict()
                sd["state"] = {}
                o.load_state_dict(sd)
            assert opt.state[w]["step"] == 0
        step(c)
        e.grad = gg.tensor(C)
        eager.step()
    assert opt.state[w]["step"] == eager.state[e]["step"] == 3
    np.testing.assert_array_equal(w.detach().numpy(), e.detach().numpy())


def test_structure_edit_by_hand_records_again_and_matches_reference():
    """weight_decay 0 -> nonzero adds Adam's L2 term (another graph): changed() must see it."""
    w, opt, step = _setup(lr=0.01)
    c = gg.tensor(C)
    ref_w, m, v = np.ones_like(C, dtype=np.float64), 0.0, 0.0
    for t in range(1, 6):
        if t == 3:
            opt.param_groups[0]["weight_decay"] = 0.5
        step(c)
        ref_w, m, v = _adam_ref(ref_w, m, v, t, 0.01, 0.9, 0.999, 1e-8, 0.5 if t >= 3 else 0.0, False)
    assert step.n_recordings == 2
    _close(w, ref_w)
    upd = opt.capture_update()
    assert not upd.changed()
    w.grad = None
    w.data = gg.tensor(np.ones((3,), np.float32))   # another shape: the update no longer fits
    assert upd.changed()
