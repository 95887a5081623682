"""In host memory a replay reads a tensor argument where it lies (its leaves and their views are
pointed at the argument's memory), and writes an array argument straight into the memory the graph
reads. These tests switch between tensors, arrays, views and freed memory from call to call, and
compare every result with NumPy float64 running the same function."""
import gc

import numpy as np
import pytest

import ggmlgrad as gg

RNG = np.random.default_rng(41)


def _w():
    return RNG.standard_normal((6, 4)).astype(np.float32)


def _fn(w):
    # the argument is read directly, through views (reshape, a slice, a transpose) and by a reduction
    def f(x):
        flat = x.reshape(-1)
        return (x @ w) + x[1:2].sum() + flat[:4].sum() + x.T[0].sum()
    return f


def _ref(w, x):
    x = x.astype(np.float64)
    return x @ w.astype(np.float64) + x[1:2].sum() + x.reshape(-1)[:4].sum() + x.T[0].sum()


def test_tensors_arrays_and_views_alternate_in_one_recording():
    w = _w()
    f = gg.capture(_fn(gg.tensor(w)))
    xs = [RNG.standard_normal((3, 6)).astype(np.float32) for _ in range(4)]
    ts = [gg.tensor(x) for x in xs]
    base = gg.tensor(RNG.standard_normal((5, 6)).astype(np.float32))
    sl = base[1:4]                                  # a contiguous view of a bigger tensor: read in place too
    calls = [ts[0], ts[1], xs[2], ts[0], sl, ts[3], xs[1], sl, ts[2]]
    for a in calls:
        got = f(a)
        x = a if isinstance(a, np.ndarray) else a.detach().numpy()
        np.testing.assert_allclose(got, _ref(w, x), rtol=1e-5, atol=1e-5)
    assert f.n_recordings == 1


def test_writes_to_the_argument_between_calls_are_read():
    w = _w()
    f = gg.capture(_fn(gg.tensor(w)))
    x = gg.tensor(RNG.standard_normal((3, 6)).astype(np.float32))
    f(x)
    x.add_(1.5)                                     # a ggmlgrad write
    np.testing.assert_allclose(f(x), _ref(w, x.detach().numpy()), rtol=1e-5, atol=1e-5)
    x.numpy()[0, :] = 7.0                           # a write through shared NumPy memory
    expect = _ref(w, x.detach().numpy())
    assert (x.detach().numpy()[0] == 7.0).all()
    np.testing.assert_allclose(f(x), expect, rtol=1e-5, atol=1e-5)
    with gg.graph_mode(True):
        y = x * 2.0                                 # queued: the replay computes it first
        np.testing.assert_allclose(f(y), _ref(w, x.detach().numpy() * 2.0), rtol=1e-5, atol=1e-5)


def test_strided_argument_is_copied_and_freed_memory_is_not_read():
    w = _w()
    f = gg.capture(_fn(gg.tensor(w)))
    big = gg.tensor(RNG.standard_normal((6, 3)).astype(np.float32))
    big.numpy()                                      # shared: its transpose lives in its memory, strided
    strided = big.T
    np.testing.assert_allclose(f(strided), _ref(w, big.detach().numpy().T), rtol=1e-5, atol=1e-5)
    for _ in range(5):                               # each tensor freed before the next is made
        v = RNG.standard_normal((3, 6)).astype(np.float32)
        t = gg.tensor(v)
        np.testing.assert_allclose(f(t), _ref(w, v), rtol=1e-5, atol=1e-5)
        del t
        gc.collect()
    assert f.n_recordings == 1


@pytest.mark.parametrize("clip", [None, 1.0])
def test_captured_steps_on_tensor_batches_match_uncaptured_steps(clip):
    sizes = (5, 8, 3)
    init = [(RNG.standard_normal((b, a)) * 0.4).astype(np.float32) for a, b in zip(sizes[:-1], sizes[1:])]
    batches = [(RNG.standard_normal((7, 5)).astype(np.float32), RNG.standard_normal((7, 3)).astype(np.float32))
               for _ in range(4)]

    def run(captured: bool):
        ps = [gg.tensor(w, requires_grad=True) for w in init]
        opt = gg.optim.Adam(ps, lr=0.05)

        def loss(x, y):
            return ((gg.tanh(x @ ps[0].T) @ ps[1].T - y) ** 2).mean()
        step = gg.capture_step(loss, opt, max_grad_norm=clip) if captured else None
        tensors = [(gg.tensor(x), gg.tensor(y)) for x, y in batches]
        losses = []
        for i in (0, 1, 0, 2, 3, 1, 2):
            x, y = tensors[i]
            if captured:
                out = step(x, y)
                losses.append(float(np.asarray(out[0] if isinstance(out, tuple) else out)))
            else:
                opt.zero_grad()
                lv = loss(x, y)
                lv.backward()
                if clip is not None:
                    gg.nn.utils.clip_grad_norm_(ps, clip)
                opt.step()
                losses.append(float(lv.item()))
        return losses, [p.detach().numpy().copy() for p in ps]

    got_l, got_p = run(True)
    ref_l, ref_p = run(False)
    np.testing.assert_allclose(got_l, ref_l, rtol=1e-5, atol=1e-6)
    for a, b in zip(got_p, ref_p):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
