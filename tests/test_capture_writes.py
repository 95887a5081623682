"""In-place writes inside gg.capture / gg.capture_step (issue 12): each snippet runs eagerly and captured
(several replays, changing inputs), compared with NumPy float64 references and with the eager run.

Covered: writes to tensors made inside the function, to Tensor arguments (written back to the caller's
tensor every replay; array arguments are inputs by value), to outside tensors (parameters, buffers, the
RL soft-update idiom through ``.data``), writes through views (the base and live views follow, views made
after the recording too), ordering (a read before a write sees the old value, a read after it the new
one), version counters, the autograd errors of eager mode, and what stays refused (CaptureError).
"""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import ggmlgrad as gg

F32 = np.float32


def _arr(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(F32)


def _eager_and_captured(make, calls):
    """Run ``make()`` → (fn, state) once eagerly and once captured on fresh state; per call, the
    outputs and the state (a list of tensors) as float64 arrays."""
    runs = []
    for captured in (False, True):
        fn, state = make()
        f = gg.capture(fn) if captured else (lambda *a: fn(*[gg.tensor(x) for x in a]))
        per_call = []
        for args in calls:
            out = f(*args)
            outs = out if isinstance(out, tuple) else (out,)
            # (read by copy: a NumPy view of shared memory moves views into it: test_capture_sees_numpy_writes...)
            per_call.append(([np.asarray(o, np.float64) for o in outs],
                             [np.array(t.tolist(), np.float64) for t in state]))
        runs.append((per_call, f))
    return runs


def _assert_same(runs, refs):
    (eager, _), (capt, f) = runs
    assert f.n_recordings == 1
    for (eo, es), (co, cs), (ro, rs) in zip(eager, capt, refs):
        for a, b, r in zip(eo, co, ro):
            np.testing.assert_allclose(a, r, rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(b, r, rtol=1e-6, atol=1e-6)
        for a, b, r in zip(es, cs, rs):
            np.testing.assert_allclose(a, r, rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(b, r, rtol=1e-6, atol=1e-6)


CALLS = [(_arr(2, 3, seed=k),) for k in range(4)]


def test_writes_to_tensors_made_inside_the_function():
    def make():
        def fn(x):
            h = x * 2.0
            h.add_(1.0)
            h.mul_(x)
            h.clamp_(-1.0, 3.0)
            g = h.detach()                # an alias of a pending tensor follows its writes
            h[0] = 5.0
            h[1, 1:] += x[0, 1:]
            z = x * 0.0
            z.fill_(2.0)
            return h, g, z
        return fn, []
    refs = []
    for (x,) in CALLS:
        x = x.astype(np.float64)
        h = np.clip((x * 2 + 1) * x, -1, 3)
        h[0] = 5.0
        h[1, 1:] += x[0, 1:]
        refs.append(([h, h, np.full_like(x, 2.0)], []))
    _assert_same(_eager_and_captured(make, CALLS), refs)


def test_outside_tensor_writes_are_ordered_after_reads_of_the_old_value():
    p0 = _arr(2, 3, seed=9)

    def make():
        p = gg.tensor(p0)

        def fn(x):
            before = p * 1.0              # read before the write: the old value
            p.add_(x)
            after = p * 1.0               # read after: the new value
            p.mul_(2.0)
            return before, after, p + before
        return fn, [p]
    refs, p = [], p0.astype(np.float64)
    for (x,) in CALLS:
        before = p.copy()
        after = p + x
        p = after * 2
        refs.append(([before, after, p + before], [p]))
    _assert_same(_eager_and_captured(make, CALLS), refs)


def test_writes_through_views_reach_the_base_and_every_live_view():
    def make():
        base = gg.zeros(2, 3)
        row, col, t = base[1], base[:, 2], base.T   # views made before the recording

        def fn(x):
            base[0].fill_(1.0)
            base.view(-1)[4] = 7.0
            base.reshape(6).add_(1.0)
            base[:, 1] += x[:, 0]
            return base * 1.0, row + 0.0
        return fn, [base, row, col, t]
    refs, b = [], np.zeros((2, 3))
    for (x,) in CALLS:
        b[0] = 1.0
        b.reshape(-1)[4] = 7.0
        b += 1.0
        b[:, 1] += x[:, 0]
        refs.append(([b.copy(), b[1].copy()], [b.copy(), b[1].copy(), b[:, 2].copy(), b.T.copy()]))
    _assert_same(_eager_and_captured(make, CALLS), refs)


def test_a_view_made_after_the_recording_follows_the_replays():
    base = gg.zeros(3)
    f = gg.capture(lambda x: base.add_(x))
    f(np.ones(3, F32))
    late = base[1:]                               # not in the recording's family
    for k in range(2, 4):
        np.testing.assert_array_equal(f(np.ones(3, F32)), [k, k, k])   # the written tensor returned as is
        np.testing.assert_array_equal(late.numpy(), [k, k])
    assert f.n_recordings == 1


def test_tensor_arguments_are_written_back_and_arrays_are_inputs_by_value():
    def fn(t, a):
        t.mul_(2.0)
        t[0] += a[0]
        a.add_(100.0)                    # an array argument: the function's copy only
        return t + 0.0, a * 1.0
    f = gg.capture(fn)
    t = gg.tensor(np.ones(3, F32))
    view = t[1:]                          # the caller's live view follows the write-back
    te = gg.tensor(np.ones(3, F32))
    ref = np.ones(3)
    for k in range(3):
        a = np.full(3, k, F32)
        out_t, out_a = f(t, a)
        fn(te, gg.tensor(a))
        ref = ref * 2
        ref[0] += k
        np.testing.assert_array_equal(out_t, ref)
        np.testing.assert_array_equal(t.numpy(), ref)
        np.testing.assert_array_equal(view.numpy(), ref[1:])
        np.testing.assert_array_equal(te.numpy(), ref)
        np.testing.assert_array_equal(out_a, k + 100.0)
        np.testing.assert_array_equal(a, k)   # not written back
        assert t._version == te._version
    assert f.n_recordings == 1


def test_an_argument_view_is_written_through_to_its_base():
    f = gg.capture(lambda v: v.add_(1.0))
    base = gg.zeros(2, 2)
    for k in range(1, 3):
        f(base[0])
        np.testing.assert_array_equal(base.numpy(), [[k, k], [0, 0]])


def test_soft_update_through_data_replays_without_recording_again():
    tau = 0.25
    net, tgt = gg.nn.Linear(4, 3), gg.nn.Linear(4, 3)

    def soft_update():
        with gg.no_grad():
            for tp, p in zip(tgt.parameters(), net.parameters()):
                tp.data.copy_(tau * p.data + (1 - tau) * tp.data)
        return tgt.weight * 1.0

    eager_t = [p.detach().numpy().astype(np.float64) for p in tgt.parameters()]
    src = [p.detach().numpy().astype(np.float64) for p in net.parameters()]
    f = gg.capture(soft_update)
    for _ in range(4):
        out = f()
        eager_t = [tau * s + (1 - tau) * t for s, t in zip(src, eager_t)]
        np.testing.assert_allclose(out, eager_t[0], rtol=1e-6, atol=1e-7)
        for p, r in zip(tgt.parameters(), eager_t):
            np.testing.assert_allclose(p.detach().numpy(), r, rtol=1e-6, atol=1e-7)
        with gg.no_grad():
            net.weight.add_(1.0)          # the source moves between calls: read fresh by every replay
        src[0] = src[0] + 1.0
    assert f.n_recordings == 1


class _RunningMean(gg.nn.Module):
    """BatchNorm-style running statistics: a buffer updated under no_grad in forward."""

    def __init__(self, n: int, momentum: float = 0.1):
        super().__init__()
        self.lin = gg.nn.Linear(n, n)
        self.momentum = momentum
        self.register_buffer("running_mean", gg.zeros(n))

    def forward(self, x):
        h = self.lin(x)
        if self.training:
            with gg.no_grad():
                self.running_mean.mul_(1 - self.momentum).add_(h.mean(0) * self.momentum)
        return h - self.running_mean


def _train(captured: bool, xs):
    gg.manual_seed(0)
    m = _RunningMean(3)
    opt = gg.optim.SGD(m.parameters(), lr=0.1)
    loss_fn = lambda x: (m(x) ** 2).mean()  # noqa: E731
    step = gg.capture_step(loss_fn, opt) if captured else None
    losses = []
    for x in xs:
        if captured:
            losses.append(float(step(x)))
        else:
            opt.zero_grad()
            loss = loss_fn(gg.tensor(x))
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return losses, m, step


def test_capture_step_writes_a_buffer_once_per_replay():
    xs = [_arr(5, 3, seed=k) for k in range(4)]
    l_e, m_e, _ = _train(False, xs)
    l_c, m_c, step = _train(True, xs)
    assert step.n_recordings == 1
    np.testing.assert_allclose(l_c, l_e, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m_c.running_mean.numpy(), m_e.running_mean.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m_c.lin.weight.detach().numpy(), m_e.lin.weight.detach().numpy(), rtol=1e-5, atol=1e-6)
    # NumPy float64 reference of the running mean (the linear layer's outputs from the eager weights)
    gg.manual_seed(0)
    ref_m = _RunningMean(3)
    w, b = ref_m.lin.weight.detach().numpy().astype(np.float64), ref_m.lin.bias.detach().numpy().astype(np.float64)
    rm = np.zeros(3)
    for x in xs:
        h = x.astype(np.float64) @ w.T + b
        rm = rm * 0.9 + h.mean(0) * 0.1
        g = 2 * (h - rm) / h.size                 # d mean((h - rm)^2) / dh
        w, b = w - 0.1 * g.T @ x, b - 0.1 * g.sum(0)
    np.testing.assert_allclose(m_c.running_mean.numpy(), rm, rtol=1e-5, atol=1e-6)


def test_one_compute_per_replay_and_version_counters_as_eager():
    p = gg.zeros(3)
    f = gg.capture(lambda x: p.add_(x).mul_(0.5))
    f(np.ones(3, F32))
    assert p._version == 2
    before = gg.counters()["computes"]
    for _ in range(3):
        f(np.ones(3, F32))
    assert gg.counters()["computes"] - before == 3
    assert p._version == 8


def test_autograd_errors_are_eagers():
    w = gg.tensor([1.0, 2.0], requires_grad=True)
    fresh = gg.tensor([1.0, 2.0], requires_grad=True)

    def leaf_write(x):
        w.add_(x)
        return w * 1.0
    with pytest.raises(RuntimeError) as eager:
        leaf_write(gg.tensor([1.0, 1.0]))
    with pytest.raises(RuntimeError) as capt:
        gg.capture(leaf_write)(np.ones(2, F32))
    assert str(capt.value) == str(eager.value) and "leaf Variable" in str(capt.value)
    assert w.tolist() == [1.0, 2.0]

    def saved_then_written(x):
        y = (w * w * x).sum()         # w * w saves w (w * x alone saves only x, as in torch)
        with gg.no_grad():
            w.mul_(2.0)                  # w was saved by the product
        y.backward()
        return y
    with pytest.raises(RuntimeError) as eager:
        saved_then_written(gg.tensor([1.0, 1.0]))
    w = fresh                            # the same state for the captured run
    opt = gg.optim.SGD([w], lr=0.1)
    with pytest.raises(RuntimeError) as capt:
        gg.capture_step(saved_then_written, opt)(np.ones(2, F32))
    assert str(capt.value) == str(eager.value) and "modified in place" in str(capt.value)


def test_grad_mode_and_requires_grad_of_written_tensors_are_followed():
    p = gg.zeros(2)
    f = gg.capture(lambda x: p.add_(x))
    with gg.no_grad():
        f(np.ones(2, F32))
    p.requires_grad_(True)
    with gg.no_grad():
        f(np.ones(2, F32))               # replays: the rule allows it under no_grad
    with pytest.raises(RuntimeError, match="leaf Variable"):
        f(np.ones(2, F32))               # grad mode on: records again, and eager's error
    assert p.tolist() == [2.0, 2.0]
    arg = gg.tensor([1.0, 1.0], requires_grad=True)
    g = gg.capture(lambda t: t.add_(1.0))
    with pytest.raises(RuntimeError, match="leaf Variable"):
        g(arg)
    with gg.no_grad():
        g(arg)
    assert arg.tolist() == [2.0, 2.0]


def test_what_stays_refused_is_a_capture_error():
    p = gg.zeros(2)
    host = np.ones(2, F32)
    with pytest.raises(gg.CaptureError, match="copy_ from host data"):
        gg.capture(lambda x: p.copy_(host))(np.ones(2, F32))
    with pytest.raises(gg.CaptureError, match="data assignment"):
        gg.capture(lambda x: setattr(p, "data", x))(np.ones(2, F32))
    f = gg.capture(lambda t: (p.add_(1.0), t * 1.0)[1])
    f(gg.zeros(2))
    with pytest.raises(gg.CaptureError, match="shares memory"):
        f(p)                              # eager would read the written value through the argument
    g = gg.capture(lambda a, b: a.add_(b))
    t = gg.ones(2)
    with pytest.raises(gg.CaptureError, match="shares memory"):
        g(t, t)
    assert t.tolist() == [1.0, 1.0]
    # a Python number copied in is a constant of the recording, as fill_'s value
    h = gg.capture(lambda x: p.copy_(3.0) + x)
    np.testing.assert_array_equal(h(np.ones(2, F32)), [4.0, 4.0])


def test_an_output_and_its_alias_do_not_abort():
    code = ("import numpy as np, ggmlgrad as gg\n"
            "def f(x):\n    h = x * 2\n    return h, h.detach()\n"
            "g = gg.capture(f)\n"
            "for _ in range(2):\n    a, b = g(np.ones(2, np.float32))\n"
            "assert a.tolist() == b.tolist() == [2.0, 2.0]\nprint('ok')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-2000:]


def test_against_torch():
    torch = pytest.importorskip("torch")
    x0 = _arr(2, 3, seed=3)
    results = {}
    for lib in (torch, gg):
        base = lib.zeros(2, 3)
        view = base[1]

        def fn(x):
            before = base * 1.0
            base[0].fill_(1.0)
            base[:, 1] += x[:, 0]
            base.view(-1)[5] = 4.0
            return before + base

        f = gg.capture(fn) if lib is gg else (lambda x: fn(torch.tensor(x)).numpy())
        outs = [np.asarray(f(x0 + k)) for k in range(3)]
        results[lib.__name__] = (outs, base.numpy().copy(), view.numpy().copy())
    (t_outs, t_base, t_view), (g_outs, g_base, g_view) = results["torch"], results["ggmlgrad"]
    for a, b in zip(g_outs, t_outs):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(g_base, t_base, rtol=1e-6)
    np.testing.assert_allclose(g_view, t_view, rtol=1e-6)


def test_dtypes_aliases_and_a_view_read_after_the_write():
    i = gg.tensor(np.array([1, 2, 3], np.int32))
    h = gg.tensor(np.array([1, 2, 3], np.float16))
    p = gg.zeros(3)
    view = p[::2]  # strided: memory of its own until p's memory is shared (a contiguous p[1:] is in p's from the start)

    def fn(x):
        i.add_(2)
        h.copy_(h.float() * 2)
        p.add_(1.0)
        p.data.mul_(2.0)                  # three aliases of one memory, in program order
        p.detach().add_(x)
        return p[0] * 1.0, view * 1.0, i * 1, h.float() * 1.0
    f = gg.capture(fn)
    pr, ir, hr = np.zeros(3), np.array([1, 2, 3]), np.array([1.0, 2.0, 3.0])
    for k in range(3):
        x = np.full(3, k, F32)
        out = f(x)
        ir, hr, pr = ir + 2, hr * 2, (pr + 1) * 2 + x
        for got, ref in zip(out, (pr[0], pr[::2], ir, hr)):
            np.testing.assert_array_equal(got, ref)
        np.testing.assert_array_equal(p.numpy(), pr)
        np.testing.assert_array_equal(view.numpy(), pr[::2])
        np.testing.assert_array_equal(i.numpy(), ir)
        np.testing.assert_array_equal(h.numpy(), hr)
    # p.numpy() shares p's memory, so `view` moves into it after the first call: one new recording
    assert f.n_recordings == 2


def test_capture_step_clamping_a_weight_before_the_forward():
    def run(captured: bool, xs):
        w = gg.tensor(np.array([[2.0, -3.0]], F32), requires_grad=True)
        opt = gg.optim.SGD([w], lr=0.5)

        def loss_fn(x):
            with gg.no_grad():
                w.clamp_(-1.0, 1.0)       # the forward reads the clamped weight; the update writes it after
            return ((x @ w.T) ** 2).mean()
        step = gg.capture_step(loss_fn, opt) if captured else None
        out = []
        for x in xs:
            if captured:
                out.append(float(step(x)))
            else:
                opt.zero_grad()
                loss = loss_fn(gg.tensor(x))
                loss.backward()
                opt.step()
                out.append(loss.item())
        return out, w.detach().numpy()
    xs = [_arr(4, 2, seed=k) for k in range(3)]
    (le, we), (lc, wc) = run(False, xs), run(True, xs)
    w = np.array([[2.0, -3.0]])
    for x, l_e, l_c in zip(xs, le, lc):
        w = np.clip(w, -1, 1)
        h = x.astype(np.float64) @ w.T
        np.testing.assert_allclose([l_e, l_c], (h ** 2).mean(), rtol=1e-5)
        w = w - 0.5 * (2 * h / h.size).T @ x
    np.testing.assert_allclose(we, w, rtol=1e-5)
    np.testing.assert_allclose(wc, w, rtol=1e-5)


def test_a_module_captured_as_the_function_counts_calls_in_a_buffer():
    class Counting(gg.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = gg.nn.Linear(2, 2)
            self.register_buffer("calls", gg.zeros(1))

        def forward(self, x):
            with gg.no_grad():
                self.calls.data.add_(1.0)    # a temporary alias: the recording follows the buffer
            return self.lin(x) * 1.0
    m = Counting()
    f = gg.capture(m)
    for k in range(1, 4):
        f(np.ones((1, 2), F32))
        assert m.calls.tolist() == [float(k)]
    assert f.n_recordings == 1


def test_capture_sees_numpy_writes_to_the_base_of_a_view_it_reads():
    """A recording that reads an outside view; the base's memory is then shared with NumPy (the view
    moves into it: one new recording) and written through NumPy: every replay sees the write."""
    base = gg.tensor(np.arange(6, dtype=F32).reshape(2, 3))
    col = base[:, 1]
    f = gg.capture(lambda x: col * x)
    np.testing.assert_allclose(f(np.ones(2, F32)), [1, 4])
    arr = base.numpy()
    arr[:, 1] = [10, 20]
    np.testing.assert_allclose(f(np.ones(2, F32)), [10, 20])
    arr[0, 1] = -1
    np.testing.assert_allclose(f(np.full(2, 2, F32)), [-2, 40])
    assert f.n_recordings == 2          # the recording before the sharing, and one after it
