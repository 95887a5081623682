"""A captured function called again with the last call's signature replays through __call__'s
short path. Each test here changes one thing between two calls (what the signature key, the
module watch or the recording's references would notice) and checks the replay against the
function run uncaptured, so a short path that skipped a check gives a wrong value or a missed
recording."""
import numpy as np
import pytest

import ggmlgrad as gg

RNG = np.random.default_rng(7)


def _x(shape=(3, 4), dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def _check(f, fn, *args):
    got = f(*args)
    ref = fn(*(gg.tensor(a) if isinstance(a, np.ndarray) else a for a in args))
    ref = ref.detach().numpy() if isinstance(ref, gg.Tensor) else ref
    np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-5, atol=1e-5)


def test_shape_dtype_and_kind_changes_record_again():
    w = gg.tensor(_x((4, 2)))

    def fn(x):
        return (x @ w).sum(dim=0) * 2.0
    f = gg.capture(fn)
    calls = [_x(), _x(), _x((5, 4)), _x((5, 4)), gg.tensor(_x()), gg.tensor(_x()), _x(), _x((5, 4))]
    for a in calls:
        _check(f, fn, a)
    assert f.n_recordings == 2          # (3, 4) and (5, 4): a float32 array and tensor share a signature
    with pytest.raises(TypeError):
        f(_x(), _x())                    # another argument count: the slow path's error
    _check(f, fn, _x())


def test_float64_arrays_share_the_float32_signature_and_are_cast():
    w = gg.tensor(_x((4, 2)))

    def fn(x):
        return x @ w
    f = gg.capture(fn)
    a = _x()
    b = _x().astype(np.float64) * 1e3
    for arg in (a, a, b, b, a, b):
        got = f(arg)
        np.testing.assert_allclose(got, arg.astype(np.float32) @ w.detach().numpy(), rtol=1e-5, atol=1e-3)
    assert f.n_recordings == 1


def test_train_eval_switch_between_fast_replays():
    model = gg.nn.Sequential(gg.nn.Linear(4, 8), gg.nn.Dropout(0.5), gg.nn.Linear(8, 2))
    f = gg.capture(lambda x: model(x))
    x = _x()
    model.eval()
    a, b = f(x), f(x)
    np.testing.assert_array_equal(a, b)
    with gg.no_grad():
        np.testing.assert_allclose(a, model(gg.tensor(x)).numpy(), rtol=1e-5, atol=1e-6)
    model.train()
    outs = [f(x) for _ in range(4)]     # dropout on: draws differ from eval's output and between calls
    assert any(np.abs(o - a).max() > 1e-4 for o in outs)
    model.eval()
    np.testing.assert_array_equal(f(x), a)


def test_replaced_parameter_memory_is_noticed():
    lin = gg.nn.Linear(4, 3)
    f = gg.capture(lambda x: lin(x))
    x = _x()
    f(x)
    f(x)
    new_w = _x((3, 4))
    lin.weight.data = gg.tensor(new_w)   # the recording read the old memory
    with gg.no_grad():
        np.testing.assert_allclose(f(x), lin(gg.tensor(x)).numpy(), rtol=1e-5, atol=1e-5)
    closure_w = gg.tensor(_x((4, 2)))
    g = gg.capture(lambda x: x @ closure_w)
    g(x), g(x)
    closure_w.copy_(gg.tensor(np.zeros((4, 2), np.float32)))   # in place: the same memory, read again
    np.testing.assert_array_equal(g(x), np.zeros((3, 2), np.float32))


def test_matmul_precision_and_queued_inputs():
    w = gg.tensor(_x((4, 2)))

    def fn(x):
        return x @ w
    f = gg.capture(fn)
    x = _x()
    f(x), f(x)
    with gg.matmul_precision("f32"):
        got = f(x)
        assert f.n_recordings == 2
        f(x)
    assert f.n_recordings == 2
    f(x)
    assert f.n_recordings == 2                 # back to the first recording
    np.testing.assert_allclose(got, x @ w.detach().numpy(), rtol=1e-5, atol=1e-5)
    with gg.graph_mode(True):
        t = gg.tensor(x)
        f(t)
        y = t * 3.0                       # queued: the replay computes it before reading it
        np.testing.assert_allclose(f(y), (x * 3.0) @ w.detach().numpy(), rtol=1e-5, atol=1e-5)


def test_free_and_keyword_calls_leave_the_short_path():
    w = gg.tensor(_x((4, 2)))

    def fn(x, scale=1.0):
        return (x @ w) * scale
    f = gg.capture(fn)
    x = _x()
    f(x), f(x)
    f.free()
    _check(f, fn, x)
    assert f.n_recordings == 2
    np.testing.assert_allclose(f(x, scale=2.0), 2.0 * (x @ w.detach().numpy()), rtol=1e-5, atol=1e-5)
    _check(f, fn, x)


def _events_run(captured: bool, frozen: int = 1, groups: bool = False):
    """Steps with one change between some of them; returns the parameters after each step."""
    r = np.random.default_rng(3)
    w1, w2 = (r.standard_normal(s).astype(np.float32) * 0.5 for s in ((6, 4), (2, 6)))
    ps = [gg.tensor(w1, requires_grad=True), gg.tensor(w2, requires_grad=True)]
    opt = gg.optim.Adam([{"params": [ps[0]]}, {"params": [ps[1]], "lr": 0.02}] if groups else ps, lr=0.05)
    X = [r.standard_normal((5, 4)).astype(np.float32) for _ in range(3)]
    Y = [r.standard_normal((5, 2)).astype(np.float32) for _ in range(3)]

    def loss(x, y):
        return ((gg.tanh(x @ ps[0].T) @ ps[1].T - y) ** 2).mean()
    step = gg.capture_step(loss, opt)

    def one(x, y):
        if captured:
            res = step(x, y)
            return float(np.asarray(res[0] if isinstance(res, tuple) else res))  # with clipping: (loss, norm)
        opt.zero_grad()
        lv = loss(gg.tensor(x), gg.tensor(y))
        lv.backward()
        opt.step()
        return float(lv.item())

    out = []
    events = [None, None, "lr", None, "freeze", None, "unfreeze", None, "clip", None, "unclip", None,
              "state", None, "replace", None, None]
    for i, ev in enumerate(events):
        if ev == "lr":
            opt.param_groups[0]["lr"] = 0.01
        elif ev == "freeze":
            ps[frozen].requires_grad_(False)
        elif ev == "unfreeze":
            ps[frozen].requires_grad_(True)
        elif ev == "clip" and captured:
            step.set(max_grad_norm=1e9)    # clipping on (a limit that never clips: the same values)
        elif ev == "unclip" and captured:
            step.set(max_grad_norm=None)
        elif ev == "state":
            opt.load_state_dict(opt.state_dict())
        elif ev == "replace":
            ps[0].data = gg.tensor(ps[0].detach().numpy() * 0.5)
        lv = one(X[i % 3], Y[i % 3])
        out.append((lv, [p.detach().numpy().copy() for p in ps]))
    return out, (step.n_recordings if captured else 0)


@pytest.mark.parametrize("frozen,groups", [(1, False), (0, False), (0, True)])
def test_step_changes_between_fast_replays_match_uncaptured_steps(frozen, groups):
    """Includes a parameter frozen for two steps: afterwards the parameters of one group have
    different step counts, and each must get its own Adam bias corrections (as in torch)."""
    got, n_rec = _events_run(True, frozen, groups)
    ref, _ = _events_run(False, frozen, groups)
    for (lg, pg), (lr, pr) in zip(got, ref):
        np.testing.assert_allclose(lg, lr, rtol=1e-5, atol=1e-6)
        for a, b in zip(pg, pr):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert n_rec >= 3      # frozen parameter, clipping, replaced memory: each records again


def test_a_frozen_then_unfrozen_parameter_steps_as_in_torch():
    """The same program in torch: Adam skips a parameter without a gradient and its bias
    corrections follow its own step count after it is unfrozen."""
    torch = pytest.importorskip("torch")
    r = np.random.default_rng(3)
    w1, w2 = (r.standard_normal(s).astype(np.float32) * 0.5 for s in ((6, 4), (2, 6)))
    X = [r.standard_normal((5, 4)).astype(np.float32) for _ in range(3)]
    Y = [r.standard_normal((5, 2)).astype(np.float32) for _ in range(3)]
    tp = [torch.tensor(w1, requires_grad=True), torch.tensor(w2, requires_grad=True)]
    topt = torch.optim.Adam(tp, lr=0.05)
    gp = [gg.tensor(w1, requires_grad=True), gg.tensor(w2, requires_grad=True)]
    step = gg.capture_step(lambda x, y: ((gg.tanh(x @ gp[0].T) @ gp[1].T - y) ** 2).mean(),
                           gg.optim.Adam(gp, lr=0.05))
    for i, frozen in enumerate([False, False, True, True, False, False, False]):
        tp[0].requires_grad_(not frozen)
        gp[0].requires_grad_(not frozen)
        topt.zero_grad()
        x, y = X[i % 3], Y[i % 3]
        ((torch.tanh(torch.tensor(x) @ tp[0].T) @ tp[1].T - torch.tensor(y)) ** 2).mean().backward()
        topt.step()
        step(x, y)
        for a, b in zip(tp, gp):
            np.testing.assert_allclose(b.detach().numpy(), a.detach().numpy(), rtol=1e-5, atol=1e-5)
