"""gg.Buffer: ring writes, gathers (out-of-range indices refused, inside a recording too), use inside captured
steps, write ordering against queued reads, and lifetime while a queued node reads it."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import ggmlgrad as gg
from ggmlgrad.runtime import pool_stats


def test_ring_writes_wrap_around():
    buf = gg.Buffer(shape=(5, 2))
    ref = np.zeros((5, 2), np.float32)
    rows = np.arange(14, dtype=np.float32).reshape(7, 2)
    buf.write(rows[:3])
    ref[0:3] = rows[:3]
    assert (len(buf), buf.cursor) == (3, 3)
    buf.write(rows[3:7])                      # rows 3, 4, 0, 1
    ref[3:5] = rows[3:5]
    ref[0:2] = rows[5:7]
    assert (len(buf), buf.cursor) == (5, 2)
    np.testing.assert_array_equal(buf.numpy(), ref)
    buf.write(rows[0], offset=4)              # one row at an explicit offset
    ref[4] = rows[0]
    assert buf.cursor == 0
    np.testing.assert_array_equal(buf.numpy(), ref)
    big = np.arange(24, dtype=np.float32).reshape(12, 2)   # more rows than capacity: the last 5 survive
    buf.write(big)
    expect = np.empty((5, 2), np.float32)
    for i in range(12):
        expect[i % 5] = big[i]
    np.testing.assert_array_equal(buf.numpy(), expect)
    np.testing.assert_array_equal(buf.read(1, 3).numpy(), expect[1:3])
    with pytest.raises(ValueError):
        buf.write(np.zeros((2, 3), np.float32))
    with pytest.raises(IndexError):
        buf.write(rows[:1], offset=5)


def test_gather_eager_values_and_out_of_range_indices_raise():
    buf = gg.Buffer(shape=(4, 3))
    data = np.arange(12, dtype=np.float32).reshape(4, 3)
    buf.write(data)
    for idx in (np.array([3, 0, 0, 2], np.int32), gg.tensor(np.array([1, 1], np.int32))):
        got = buf.gather(idx).numpy()
        np.testing.assert_array_equal(got, data[np.asarray(idx)])
    for bad in ([4], [-1], [0, 7]):
        with pytest.raises(IndexError, match="out of range"):
            buf.gather(np.array(bad, np.int32))
        with pytest.raises(IndexError, match="out of range"):
            buf.gather(gg.tensor(np.array(bad, np.int32))).numpy()   # graph mode: raised where it computes
    with pytest.raises(TypeError):
        buf.gather(np.array([0.5]))


def test_int32_buffer_and_3d_rows():
    buf = gg.Buffer(shape=(3, 2, 2), dtype=gg.int32)
    data = np.arange(12, dtype=np.int32).reshape(3, 2, 2)
    buf.write(data)
    got = buf.gather(np.array([2, 0], np.int32)).numpy()
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, data[[2, 0]])


def test_gather_inside_a_recording_refuses_out_of_range_indices():
    buf = gg.Buffer(shape=(4, 2))
    data = np.arange(8, dtype=np.float32).reshape(4, 2)
    buf.write(data)
    f = gg.capture(lambda idx: buf.gather(idx))
    np.testing.assert_array_equal(f(np.array([0, 3], np.int32)), data[[0, 3]])
    for bad, first in (([-5, 9], -5), ([1, 4], 4)):
        with pytest.raises(IndexError, match=f"Buffer.gather: index {first} out of range"):
            f(np.array(bad, np.int32))
    np.testing.assert_array_equal(f(np.array([2, 1], np.int32)), data[[2, 1]])   # the next call is fine


def test_captured_step_samples_minibatches_from_device_buffers():
    r = np.random.default_rng(0)
    cap = 64
    obs, tgt = r.standard_normal((cap, 4)).astype(np.float32), r.standard_normal((cap, 1)).astype(np.float32)
    obs_buf, tgt_buf = gg.Buffer(shape=(cap, 4)), gg.Buffer(shape=(cap, 1))
    obs_buf.write(obs[:40])
    tgt_buf.write(tgt[:40])

    def params():
        q = np.random.default_rng(3)
        return [gg.tensor((q.standard_normal((1, 4)) * 0.5).astype(np.float32), requires_grad=True),
                gg.tensor(np.zeros(1, np.float32), requires_grad=True)]

    ps = params()
    opt = gg.optim.Adam(ps, lr=0.05)
    step = gg.capture_step(lambda idx: ((gg.linear(obs_buf.gather(idx), ps[0], ps[1]) - tgt_buf.gather(idx)) ** 2)
                           .mean(), opt)
    qs = params()
    opt_r = gg.optim.Adam(qs, lr=0.05)
    host_obs, host_tgt = np.zeros((cap, 4), np.float32), np.zeros((cap, 1), np.float32)
    host_obs[:40], host_tgt[:40] = obs[:40], tgt[:40]
    for i in range(6):
        if i == 3:   # new experience arrives: in place, seen by the recording
            obs_buf.write(obs[40:])
            tgt_buf.write(tgt[40:])
            host_obs[40:], host_tgt[40:] = obs[40:], tgt[40:]
        idx = r.integers(0, 40 if i < 3 else cap, size=16).astype(np.int32)
        before = gg.counters()
        loss = float(step(idx))
        after = gg.counters()
        if i > 0 and i != 3:
            assert after["computes"] - before["computes"] == 2
            assert after["uploads"] - before["uploads"] == 1
        with gg.graph_mode(True):
            opt_r.zero_grad()
            ref = ((gg.linear(gg.tensor(host_obs[idx]), qs[0], qs[1]) - gg.tensor(host_tgt[idx])) ** 2).mean()
            ref.backward()
            opt_r.step()
        assert abs(loss - ref.item()) < 1e-6
    assert step.n_recordings == 1
    for a, b in zip(ps, qs):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=0, atol=1e-6)


def test_write_drains_queued_reads_first():
    buf = gg.Buffer(shape=(3, 1))
    buf.write(np.ones((3, 1), np.float32))
    with gg.graph_mode(True):
        snap = buf.read()
        g = buf.gather(np.array([2], np.int32)) * 1.0
        assert gg.pending(snap) and gg.pending(g)
        buf.write(np.full((3, 1), 5.0, np.float32), offset=0)
        assert not gg.pending(snap)
        np.testing.assert_array_equal(snap.numpy(), np.ones((3, 1)))
        np.testing.assert_array_equal(g.numpy(), [[1.0]])
        np.testing.assert_array_equal(buf.read().numpy(), np.full((3, 1), 5.0))


def test_buffer_freed_while_queued_stays_alive_until_computed():
    gc.collect()
    base = pool_stats()["live_bytes"]
    big = 1 << 16
    with gg.graph_mode(True):
        buf = gg.Buffer(shape=(big, 4))
        buf.write(np.full((big, 4), 3.0, np.float32))
        g = buf.gather(np.array([5, big - 1], np.int32)).sum()
        del buf
        gc.collect()
        assert pool_stats()["live_bytes"] >= base + big * 16    # the queued node keeps the table alive
        assert g.item() == 24.0
    del g
    gc.collect()
    assert pool_stats()["live_bytes"] < base + big * 16          # released after the drain


def test_buffer_write_inside_a_recording_is_a_guard_error():
    buf = gg.Buffer(shape=(2, 1))

    def f(x):
        buf.write(np.ones((1, 1), np.float32))
        return x
    with pytest.raises(gg.CaptureError):
        gg.capture(f)(np.ones(1, np.float32))
    np.testing.assert_array_equal(buf.numpy(), np.zeros((2, 1)))
