"""Out-of-range index and class values are an IndexError naming the op and the value in every mode:
eager, graph mode, check mode, gg.capture and gg.capture_step (issue 11, item 6). Nothing is clamped
silently: graph mode checks after the compute and fails the drain's results; a captured step checks
before its update, so a bad index changes no weight, moment or step counter."""
from __future__ import annotations

import re

import numpy as np
import pytest

import ggmlgrad as gg
import ggmlgrad.nn.functional as F
from ggmlgrad.engine import ENGINE

from conftest import requested_test_device

X = np.arange(12, dtype=np.float32).reshape(3, 4) / 4.0


def _i(*vals):
    return np.array(vals, np.int32)


def _logsoftmax(x):
    x = np.asarray(x, np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def _ce_rows(t, eps=0.0, ignore=-100):
    """Per-row cross-entropy of X against class targets t (label smoothing eps), 0 on ignored rows."""
    lp = _logsoftmax(X)
    c = X.shape[1]
    out = np.zeros(len(t))
    for r, k in enumerate(t):
        if k != ignore:
            q = np.full(c, eps / c)
            q[k] += 1.0 - eps
            out[r] = -(q * lp[r]).sum()
    return out


def _ce_mean(t, eps=0.0):
    return _ce_rows(t, eps).sum() / np.sum(np.asarray(t) != -100)


def _test_device():
    """The device tests run on (GGMLGRAD_TEST_DEVICE, tests/conftest.py), or the CPU."""
    try:
        return gg.runtime.resolve_device(requested_test_device() or "cpu")
    except ValueError:
        return gg.runtime.cpu_device()   # absent: every test skips


_prev = gg.set_device(_test_device())   # the constants live where the tests' tensors do
XT = gg.tensor(X)                                   # created outside the captured functions
LOGP = gg.tensor(_logsoftmax(X).astype(np.float32))
BUF = gg.Buffer(shape=(3, 4))
BUF.write(X)
EMB = gg.nn.Embedding(3, 4)
with gg.no_grad():
    EMB.weight.copy_(XT)
gg.set_device(_prev)


# name → (function of the int32 index tensor, op name in the message, valid index, NumPy reference of
#         it, [(bad index, the value the error names: the first bad one in flat order)])
CASES = {
    "getitem": (lambda i: XT[i], "indexing", _i(0, -3, 2, -1), X[[0, -3, 2, -1]],
                [(_i(0, 3, -9), 3), (_i(-4, 1), -4)]),
    "getitem_column": (lambda i: XT[:, i], "indexing", _i(3, -4), X[:, [3, -4]], [(_i(0, 4), 4)]),
    "index_select": (lambda i: gg.index_select(XT, 1, i), "index_select", _i(3, 0, 3), X[:, [3, 0, 3]],
                     [(_i(0, -1), -1), (_i(2, 9, 4), 9)]),
    "gather": (lambda i: gg.gather(XT, 1, i), "gather", _i(0, 3, 1).reshape(3, 1),
               np.take_along_axis(X, _i(0, 3, 1).reshape(3, 1), 1), [(_i(0, 4, 1).reshape(3, 1), 4)]),
    "embedding": (lambda i: F.embedding(i, XT), "embedding", _i(2, 0, 2).reshape(1, 3),
                  X[[[2, 0, 2]]], [(_i(2, 3).reshape(1, 2), 3), (_i(-1), -1)]),
    "nn.Embedding": (EMB, "embedding", _i(1, 2), X[[1, 2]], [(_i(1, 7), 7)]),
    "one_hot": (lambda i: F.one_hot(i, 3), "one_hot", _i(0, 2, 2), np.eye(3)[[0, 2, 2]],
                [(_i(0, 3), 3), (_i(1, -1), -1)]),
    "cross_entropy": (lambda i: F.cross_entropy(XT, i), "cross_entropy", _i(0, -100, 3),
                      _ce_mean([0, -100, 3]), [(_i(0, 4, 1), 4), (_i(-1, 0, 0), -1)]),
    "cross_entropy_none": (lambda i: F.cross_entropy(XT, i, reduction="none"), "cross_entropy",
                           _i(1, 3, -100), _ce_rows([1, 3, -100]), [(_i(1, 3, 5), 5)]),
    "cross_entropy_smoothing": (lambda i: F.cross_entropy(XT, i, label_smoothing=0.1), "cross_entropy",
                                _i(2, 2, 0), _ce_mean([2, 2, 0], 0.1), [(_i(2, -7, 0), -7)]),
    "cross_entropy_ignore_2": (lambda i: F.cross_entropy(XT, i, ignore_index=2, reduction="sum"),
                               "cross_entropy", _i(2, 1, 0), _ce_rows([2, 1, 0], ignore=2).sum(),
                               [(_i(-100, 1, 0), -100)]),
    "nll_loss": (lambda i: F.nll_loss(LOGP, i), "nll_loss", _i(3, 0, -100),
                 _ce_mean([3, 0, -100]), [(_i(3, 4, 0), 4)]),
    "categorical": (lambda i: gg.distributions.Categorical(logits=XT).log_prob(i), "Categorical.log_prob",
                    _i(0, 3, 1), _logsoftmax(X)[[0, 1, 2], [0, 3, 1]], [(_i(0, 4, 1), 4), (_i(-1, 0, 0), -1)]),
    "Buffer.gather": (BUF.gather, "Buffer.gather", _i(2, 0), X[[2, 0]], [(_i(0, 3), 3), (_i(-2, 9), -2)]),
}
MODES = ["eager", "graph", "check", "capture"]


def _message(opname: str, value: int) -> str:
    return rf"^{re.escape(opname)}: (index|class|target) {value} "


def _run(mode: str, fn, index: np.ndarray, captured=None) -> np.ndarray:
    """fn(index) read back in ``mode`` (the read is inside the mode: graph mode raises there)."""
    if mode == "capture":
        return np.asarray(captured(index))
    with gg.graph_mode(mode != "eager", check=mode == "check"):
        return fn(gg.tensor(index)).detach().numpy().copy()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_values_raise_index_error_naming_op_and_value_in_every_mode(case, mode):
    fn, opname, good, ref, bads = CASES[case]
    captured = gg.capture(fn) if mode == "capture" else None
    np.testing.assert_allclose(_run(mode, fn, good, captured), ref, rtol=1e-5, atol=1e-6)
    for bad, value in bads:
        with pytest.raises(IndexError, match=_message(opname, value)):
            _run(mode, fn, bad, captured)
        # the session (and a capture's recording) goes on: the next good call gives the right values
        np.testing.assert_allclose(_run(mode, fn, good, captured), ref, rtol=1e-5, atol=1e-6)
    if captured is not None:  # one recording per index shape: a failed replay never records again
        assert captured.n_recordings == len({good.shape} | {b.shape for b, _ in bads})


def test_torch_raises_the_same_kind_of_error():
    """torch raises IndexError (indexing, embedding, losses) or RuntimeError (gather, one_hot): ours is both."""
    torch = pytest.importorskip("torch")
    tF = torch.nn.functional
    x = torch.from_numpy(X)
    calls = {"getitem": (lambda i: x[i], _i(0, 3)), "index_select": (lambda i: torch.index_select(x, 1, i), _i(-1)),
             "gather": (lambda i: torch.gather(x, 1, i), _i(0, 4, 1).reshape(3, 1)),
             "embedding": (lambda i: tF.embedding(i, x), _i(3)), "one_hot": (lambda i: tF.one_hot(i, 3), _i(3)),
             "cross_entropy": (lambda i: tF.cross_entropy(x, i), _i(0, 4, 1)),
             "nll_loss": (lambda i: tF.nll_loss(x, i), _i(0, 4, 1))}
    for name, (tfn, bad) in calls.items():
        with pytest.raises(Exception) as theirs:
            tfn(torch.from_numpy(bad).long())
        assert isinstance(theirs.value, (IndexError, RuntimeError))
        for mode in ("eager", "graph"):
            with pytest.raises(type(theirs.value)):
                _run(mode, CASES[name][0], bad)


def test_graph_mode_fails_the_drains_results_and_raises_at_the_sync_point():
    x = gg.tensor(X)
    with gg.graph_mode(True):
        other = x * 2.0                          # queued in the same graph
        y = x[gg.tensor(_i(1, 5))]
        c0 = gg.counters()["computes"]
        with pytest.raises(IndexError, match=r"indexing: index 5 .*queued at .*test_index_checks.py"):
            other.numpy()                        # the sync point raises, whichever tensor it reads
        assert gg.counters()["computes"] == c0 + 1   # the graph ran once (clamped), then was refused
        for t in (y, other):                     # every result of that drain failed with the same error
            with pytest.raises(IndexError, match="index 5"):
                t.numpy()
        with pytest.raises(IndexError):
            (y + 1.0).numpy()                    # an op on a failed result names the same error
        z = x[gg.tensor(_i(-1, 0))] * 2.0        # the session goes on
        np.testing.assert_allclose(z.numpy(), X[[-1, 0]] * 2.0)


def test_graph_mode_check_costs_one_small_read_per_index_op_and_none_without():
    x = gg.tensor(X)
    idx = gg.tensor(_i(2, 0))
    with gg.graph_mode(True):
        before = gg.counters()
        (x * 3.0).sum().numpy()
        after = gg.counters()
    assert after["downloads_by_site"].get("index check", 0) == before["downloads_by_site"].get("index check", 0)
    with gg.graph_mode(True):
        before = gg.counters()
        y = x[idx]
        assert before["downloads"] == gg.counters()["downloads"]   # nothing read while queued
        out = (y.sum() + F.cross_entropy(x, gg.tensor(_i(0, 1, 3)))).numpy()
        after = gg.counters()
    assert after["downloads_by_site"]["index check"] - before["downloads_by_site"].get("index check", 0) == 2
    assert after["computes"] - before["computes"] == 1
    np.testing.assert_allclose(out, X[[2, 0]].sum() + _ce_mean([0, 1, 3]), rtol=1e-5)


def test_the_first_bad_value_is_named_and_large_values_exactly():
    for mode in ("eager", "graph", "check"):
        bad = _i(0, 1, -9, 2 ** 31 - 1, 5)
        with pytest.raises(IndexError, match=r"index -9 "):
            _run(mode, lambda i: XT[i], bad)
        with pytest.raises(IndexError, match=r"index 2147483647 "):
            _run(mode, lambda i: gg.index_select(XT, 0, i), _i(2 ** 31 - 1, -(2 ** 31)))


def _model_and_step(seed, lr=0.1):
    gg.manual_seed(seed)
    model = gg.nn.Sequential(gg.nn.Embedding(5, 4), gg.nn.Flatten(), gg.nn.Linear(8, 3))
    opt = gg.optim.Adam(model.parameters(), lr=lr)
    return model, opt


def _loss(model, tokens, target):
    return F.cross_entropy(model(tokens), target)


def _state(model, opt):
    params = [p.detach().numpy().copy() for p in model.parameters()]
    st = opt.state_dict()["state"]
    moments = {k: {n: (np.asarray(v.numpy()).copy() if isinstance(v, gg.Tensor) else v) for n, v in s.items()}
               for k, s in st.items()}
    return params, moments


def _same(a, b):
    (pa, ma), (pb, mb) = a, b
    assert all(np.array_equal(x, y) for x, y in zip(pa, pb))
    assert ma.keys() == mb.keys()
    for k in ma:
        for n in ma[k]:
            np.testing.assert_array_equal(np.asarray(ma[k][n]), np.asarray(mb[k][n]))


@pytest.mark.parametrize("clip", [None, 10.0])
def test_capture_step_bad_index_changes_nothing_and_the_next_step_is_right(clip):
    tokens, target = _i(0, 4, 1, 1).reshape(2, 2), _i(2, 0)
    model, opt = _model_and_step(3)
    step = gg.capture_step(lambda t, y: _loss(model, t, y), opt, max_grad_norm=clip)
    ref_model, ref_opt = _model_and_step(3)          # the same steps, uncaptured (eager)
    step(tokens, target)
    ref_opt.zero_grad()
    _loss(ref_model, gg.tensor(tokens), gg.tensor(target)).backward()
    if clip is not None:
        gg.nn.utils.clip_grad_norm_(ref_model.parameters(), clip)
    ref_opt.step()
    kept = _state(model, opt)
    for bad_tokens, bad_target, text in ((tokens, _i(2, 3), "cross_entropy: target 3 "),
                                         (_i(0, 5, 1, 1).reshape(2, 2), target, "embedding: index 5 "),
                                         (_i(0, 4, -1, 1).reshape(2, 2), _i(-100, 9), "embedding: index -1 ")):
        with pytest.raises(IndexError, match=re.escape(text) + ".*unchanged"):
            step(bad_tokens, bad_target)
        _same(_state(model, opt), kept)              # weights, moments and step counters
    out = step(tokens, _i(1, 1))
    ref_opt.zero_grad()
    ref = _loss(ref_model, gg.tensor(tokens), gg.tensor(_i(1, 1)))
    ref.backward()
    if clip is not None:
        gg.nn.utils.clip_grad_norm_(ref_model.parameters(), clip)
    ref_opt.step()
    loss = out[0] if clip is not None else out
    np.testing.assert_allclose(loss, ref.detach().numpy(), rtol=1e-5)
    for p, q in zip(model.parameters(), ref_model.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-5, atol=1e-6)
    assert step.n_recordings == 1


def test_capture_checks_ride_on_the_one_download_per_replay():
    w = gg.tensor(X)
    f = gg.capture(lambda i, t: (w[i] * 2.0, F.cross_entropy(w, t)))
    f(_i(0, 2), _i(1, 2, 3))
    before = gg.counters()
    for k in range(3):
        f(_i(k % 3, 2), _i(1, 2, 3))
    after = gg.counters()
    assert after["downloads"] - before["downloads"] == 3
    assert after["downloads_by_site"]["capture"] - before["downloads_by_site"]["capture"] == 3
    assert after["computes"] - before["computes"] == 3


def test_graph_mode_optimizer_step_with_a_bad_target_updates_nothing():
    model, opt = _model_and_step(5)
    kept = _state(model, opt)
    with gg.graph_mode(True):
        opt.zero_grad()
        _loss(model, gg.tensor(_i(0, 1, 2, 3).reshape(2, 2)), gg.tensor(_i(0, 3))).backward()
        with pytest.raises(IndexError, match="cross_entropy: target 3 "):
            opt.step()                               # the forward + backward drain is refused first
    _same(_state(model, opt), kept)
    with gg.graph_mode(True):
        opt.zero_grad()
        loss = _loss(model, gg.tensor(_i(0, 1, 2, 3).reshape(2, 2)), gg.tensor(_i(0, 2)))
        loss.backward()
        opt.step()
        assert np.isfinite(loss.item())
    assert not np.array_equal(model[0].weight.detach().numpy(), kept[0][0])


def test_backward_of_checked_ops_adds_no_checks():
    x = gg.tensor(X, requires_grad=True)
    with gg.graph_mode(True):
        n0 = len(ENGINE.checks)
        y = x[gg.tensor(_i(1, 1, -1))]
        assert len(ENGINE.checks) == n0 + 1          # the forward's check
        y.sum().backward()
        assert len(ENGINE.checks) == n0 + 1          # the backward reuses the checked index
        g = x.grad.numpy()
    np.testing.assert_array_equal(g, np.array([[0] * 4, [2] * 4, [1] * 4], np.float32))
