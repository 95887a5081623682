"""Regressions of two process aborts the op-program fuzzer found, each run in a subprocess (an abort
fails the test instead of killing pytest), in eager, graph, check and capture mode:

- broadcast_to / expand / expand_as that only adds size-1 leading dims returned a reshape of its input
  (GGML_ASSERT(tensor->data == NULL) in ggml-backend.cpp when the engine allocated it);
- gg.capture / gg.capture_step with an empty (0-element) input, intermediate or output
  (GGML_ASSERT(tensor) in ggml-backend.cpp: an empty output has no node to place).
References: NumPy float64 for values, central finite differences for gradients, eager mode for errors.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")

_COMMON = textwrap.dedent("""
    import numpy as np, ggmlgrad as gg
    MODES = ("eager", "graph", "check", "capture")

    def run(mode, f, *args):
        \"\"\"f's outputs (a tuple of NumPy arrays) for NumPy arguments, in one mode.\"\"\"
        if mode == "capture":
            out = gg.capture(f)(*args)
        else:
            with gg.graph_mode(mode != "eager", check=(mode == "check")):
                out = f(*[gg.tensor(a) for a in args])
                out = tuple(o.detach().numpy() for o in out) if isinstance(out, tuple) else out.detach().numpy()
        return tuple(np.asarray(o) for o in out) if isinstance(out, tuple) else (np.asarray(out),)

    def same(got, ref, what):
        assert len(got) == len(ref), (what, len(got), len(ref))
        for g, r in zip(got, ref):
            assert g.shape == r.shape, (what, g.shape, r.shape)
            np.testing.assert_allclose(g.astype(np.float64), r, rtol=1e-6, atol=1e-6, equal_nan=True, err_msg=what)
""")

_BROADCAST_SCRIPT = _COMMON + textwrap.dedent("""
    rng = np.random.default_rng(0)
    CASES = [((2,), (1, 2)), ((), (1,)), ((3,), (1, 1, 3)), ((2, 3), (1, 2, 3)), ((), (1, 1))]
    for src, dst in CASES:
        x = rng.standard_normal(src).astype(np.float32)
        y = np.zeros(dst, np.float32)
        fns = {"broadcast_to": lambda a, b: gg.broadcast_to(a, dst),
               "expand": lambda a, b: a.expand(*dst),
               "expand_as": lambda a, b: a.expand_as(b),
               "expand_as then op": lambda a, b: a.expand_as(b) * 3.0 + b}
        refs = {"expand_as then op": np.broadcast_to(x, dst) * 3.0}
        for name, f in fns.items():
            for mode in MODES:
                print("CALL", mode, name, src, dst, flush=True)
                for _ in range(2):  # capture: record, then replay
                    same(run(mode, f, x, y), (refs.get(name, np.broadcast_to(x.astype(np.float64), dst)),),
                         f"{mode} {name} {src}->{dst}")

        # The result is a view, as torch's (only unit dims added: no overlap): a write into it
        # reaches the input.
        for graph in (False, True):
            with gg.graph_mode(graph):
                t = gg.tensor(x)
                r = gg.broadcast_to(t, dst)
                r.add_(1.0)
                np.testing.assert_array_equal(t.detach().numpy(), x + 1.0)
                np.testing.assert_array_equal(r.detach().numpy(), np.broadcast_to(x, dst) + 1.0)

        # Backward: the gradient of sum(broadcast_to(x) * w) against central finite differences.
        w = rng.standard_normal(dst)
        loss = lambda v: float((np.broadcast_to(v, dst) * w).sum())
        fd = np.zeros(src)
        for i in np.ndindex(src):
            e = np.zeros(src)
            e[i] = 1e-3
            fd[i] = (loss(x + e) - loss(x - e)) / 2e-3
        for mode in ("eager", "graph", "check"):
            print("CALL backward", mode, src, dst, flush=True)
            with gg.graph_mode(mode != "eager", check=(mode == "check")):
                t = gg.tensor(x, requires_grad=True)
                (gg.broadcast_to(t, dst) * gg.tensor(w.astype(np.float32))).sum().backward()
                np.testing.assert_allclose(t.grad.numpy(), fd, rtol=1e-4, atol=1e-4)
        print("CALL backward capture_step", src, dst, flush=True)
        p = gg.tensor(x.copy(), requires_grad=True)
        step = gg.capture_step(lambda wt: (p.expand_as(wt) * wt).sum(), gg.optim.SGD([p], lr=1.0))
        step(w.astype(np.float32))
        np.testing.assert_allclose(x - p.detach().numpy(), fd, rtol=1e-4, atol=1e-4)  # SGD, lr 1: x - grad
    print("BROADCAST-OK")
""")

_CAPTURE_EMPTY_SCRIPT = _COMMON + textwrap.dedent("""
    rng = np.random.default_rng(1)
    e03, ones13 = np.zeros((0, 3), np.float32), np.ones((1, 3), np.float32)
    x23 = rng.standard_normal((2, 3)).astype(np.float32)
    with np.errstate(invalid="ignore"):
        CASES = [  # name, f, args, NumPy float64 reference
            ("empty in, empty out", lambda x: x * 2, (e03,), lambda x: (x * 2,)),
            ("empty input returned", lambda x: x, (e03,), lambda x: (x,)),
            ("empty and full outputs", lambda x: (x * 2, x.sum(0) + 1, x.sum()), (e03,),
             lambda x: (x * 2, x.sum(0) + 1, x.sum())),
            ("mean of empty is nan", lambda x: x.mean(), (e03,), lambda x: (np.array(np.nan),)),
            ("empty slice by tensor index", lambda a, i: a[1:, i], (ones13, np.array([0, 2], np.int32)),
             lambda a, i: (a[1:, i],)),
            ("empty intermediate", lambda x: (x[:0] * 3).sum() + x.sum(), (x23,), lambda x: (x.sum(),)),
            ("empty intermediate in cat", lambda x: gg.cat([x[:0] * 5, x * 2]), (x23,), lambda x: (x * 2,)),
            ("empty matmul operands", lambda a, b: a @ b + 1, (np.zeros((3, 0), np.float32), np.zeros((0, 4), np.float32)),
             lambda a, b: (np.ones((3, 4)),)),
            ("empty and full inputs", lambda a, b: (a * 2, b + 1), (e03, x23), lambda a, b: (a * 2, b + 1)),
        ]
    f64 = lambda args: [a.astype(np.float64) if a.dtype.kind == "f" else a for a in args]
    for name, f, args, ref in CASES:
        expect = ref(*f64(args))
        for mode in MODES:
            print("CALL", mode, name, flush=True)
            for _ in range(2):  # capture: record, then replay
                same(run(mode, f, *args), expect, f"{mode}: {name}")
        if any(a.size for a in args):  # a replay with new values
            args2 = tuple(a * 3 if a.dtype.kind == "f" else a for a in args)
            same(run("capture", f, *args2), ref(*f64(args2)), f"replay: {name}")

    # An op that raises on an empty tensor raises the same error in every mode.
    for mode in MODES:
        print("CALL error", mode, flush=True)
        try:
            run(mode, lambda x: x.amax(0), e03)
        except ValueError as err:
            assert "empty" in str(err), err
        else:
            raise AssertionError(f"{mode}: amax of an empty tensor did not raise")

    # capture_step with an empty batch: the same loss, gradients and update as an eager step.
    def make():
        w = gg.tensor(np.arange(6, dtype=np.float32).reshape(3, 2) / 5, requires_grad=True)
        e = gg.zeros(0, requires_grad=True)
        return w, e, gg.optim.Adam([w, e], lr=0.1)
    loss_fn = lambda w, e: (lambda x: ((x @ w) ** 2).sum() + (w ** 2).sum() + e.sum())
    for batch in (e03, np.zeros((0, 3), np.float32), x23, e03):
        print("CALL capture_step", batch.shape, flush=True)
        w1, e1, opt1 = make()
        w2, e2, opt2 = make()
        step = gg.capture_step(loss_fn(w2, e2), opt2, max_grad_norm=1.0)
        for _ in range(2):
            opt1.zero_grad()
            l1 = loss_fn(w1, e1)(gg.tensor(batch))
            l1.backward()
            gg.nn.utils.clip_grad_norm_([w1, e1], 1.0)
            opt1.step()
            l2, _norm = step(batch)
            np.testing.assert_allclose(l2, l1.detach().numpy(), rtol=1e-5, atol=1e-6, equal_nan=True)
            np.testing.assert_allclose(w2.detach().numpy(), w1.detach().numpy(), rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(w2.grad.numpy(), w1.grad.numpy(), rtol=1e-5, atol=1e-6)
            assert e2.detach().numpy().shape == (0,) and e2.grad.shape == (0,)
    print("CAPTURE-EMPTY-OK")
""")


def _run(script: str, ok: str) -> None:
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""), GGML_NO_BACKTRACE="1")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    last = [ln for ln in r.stdout.splitlines() if ln.startswith("CALL")][-1:]
    assert r.returncode == 0 and ok in r.stdout, f"exit {r.returncode} during {last}:\n{r.stderr[-3000:]}"


def test_broadcast_adding_only_unit_dims_in_every_mode_with_backward():
    _run(_BROADCAST_SCRIPT, "BROADCAST-OK")


def test_capture_with_empty_inputs_intermediates_and_outputs():
    _run(_CAPTURE_EMPTY_SCRIPT, "CAPTURE-EMPTY-OK")
