"""Modes API: graph_mode / local_mode / matmul_precision, env vars, context isolation."""
from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import ggmlgrad as gg

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")


@pytest.fixture(autouse=True)
def _explicit_eager():
    """These tests start from graph mode off; pin it, so the file also passes when the whole
    suite runs with GGMLGRAD_GRAPH=1 (the environment is tested in subprocesses below)."""
    with gg.graph_mode(False):
        yield


def _thread_default() -> bool:
    """The graph mode a new thread starts with (the environment's default)."""
    box = []
    t = threading.Thread(target=lambda: box.append(gg.graph_mode()))
    t.start()
    t.join()
    return box[0]


def test_graph_mode_query_set_and_return_previous():
    assert gg.graph_mode() is False
    prev = gg.graph_mode(True)
    try:
        assert prev == False and not prev  # noqa: E712  (a ModeSetting compares and tests as the old value)
        assert gg.graph_mode() is True
        assert gg.graph_mode(True) == True  # noqa: E712
    finally:
        gg.graph_mode(False)
    assert gg.graph_mode() is False


def test_graph_mode_context_manager_restores_on_exit_and_on_error():
    with gg.graph_mode(True):
        assert gg.graph_mode()
        with gg.graph_mode(False):
            assert not gg.graph_mode()
        assert gg.graph_mode()
    assert not gg.graph_mode()
    with pytest.raises(ZeroDivisionError):
        with gg.graph_mode(True, check=True):
            assert gg.graph_mode()
            1 / 0
    assert gg.graph_mode() is False
    # check mode was restored too: a queued op stays pending again
    with gg.graph_mode(True):
        y = gg.ones(2) * 3
        assert gg.pending(y)
    assert not gg.pending(y) and y.tolist() == [3.0, 3.0]


def test_leaving_graph_mode_drains():
    before = gg.counters()["drains_by_reason"].get("graph_mode_off", 0)
    with gg.graph_mode(True):
        y = gg.ones(3) + 1
        assert gg.pending(y) and gg.queue_length() >= 1
    assert not gg.pending(y)
    assert gg.queue_length() == 0
    assert gg.counters()["drains_by_reason"]["graph_mode_off"] == before + 1
    prev = gg.graph_mode(True)
    z = gg.ones(2) * 5
    assert gg.pending(z)
    gg.graph_mode(False)  # the plain call drains too
    assert not gg.pending(z) and prev == False  # noqa: E712


@pytest.mark.parametrize("bad", ["yes", 1, 0, None.__class__, 1.0, [True], np.float32(1)])
def test_graph_mode_rejects_non_bool_and_changes_nothing(bad):
    with gg.graph_mode(True, check=False):
        with pytest.raises(TypeError, match="graph_mode"):
            gg.graph_mode(bad)
        assert gg.graph_mode() is True
        with pytest.raises(TypeError, match="check"):
            gg.graph_mode(False, check=bad)
        assert gg.graph_mode() is True  # `on` was valid, but a bad `check` changes nothing
        y = gg.ones(2) * 2
        assert gg.pending(y)  # check mode still off
    assert gg.graph_mode() is False


def test_check_mode_drains_every_op():
    with gg.graph_mode(True, check=True):
        c0 = gg.counters()["drains_by_reason"].get("check", 0)
        a = gg.ones(3) * 2
        assert not gg.pending(a)
        b = a + 1
        assert not gg.pending(b)
        assert gg.counters()["drains_by_reason"]["check"] == c0 + 2
    assert b.tolist() == [3.0, 3.0, 3.0]


def test_local_mode_sets_all_and_restores():
    assert gg.matmul_precision() == "default"
    with gg.local_mode(graph=True, matmul_precision="f32"):
        assert gg.graph_mode() is True and gg.matmul_precision() == "f32"
        y = gg.ones(2, 2) @ gg.ones(2, 2)
        assert gg.pending(y)
    assert gg.graph_mode() is False and gg.matmul_precision() == "default"
    assert y.tolist() == [[2.0, 2.0], [2.0, 2.0]]
    with pytest.raises(KeyError):
        with gg.local_mode(graph=True, matmul_precision="f32"):
            raise KeyError("x")
    assert gg.graph_mode() is False and gg.matmul_precision() == "default"


@pytest.mark.parametrize("kwargs", [dict(graph=True, matmul_precision="f16"),
                                    dict(graph="on", matmul_precision="f32"),
                                    dict(graph=True, matmul_precision="f32", check=2)])
def test_local_mode_validates_everything_before_changing_anything(kwargs):
    with pytest.raises((TypeError, ValueError)):
        with gg.local_mode(**kwargs):
            pass
    assert gg.graph_mode() is False and gg.matmul_precision() == "default"


def test_matmul_precision_api():
    assert gg.matmul_precision() == "default"
    prev = gg.matmul_precision("f32")
    try:
        assert prev == "default" and gg.matmul_precision() == "f32"
        a = np.random.default_rng(0).standard_normal((5, 7)).astype(np.float32)
        b = np.random.default_rng(1).standard_normal((7, 3)).astype(np.float32)
        x = gg.tensor(a, requires_grad=True)
        y = x @ gg.tensor(b)
        np.testing.assert_allclose(y.detach().numpy(), a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
        y.sum().backward()  # backward matmuls are built under the same precision
        np.testing.assert_allclose(x.grad.numpy(), np.ones((5, 3)) @ b.T, rtol=1e-5, atol=1e-5)
    finally:
        gg.matmul_precision("default")
    with gg.matmul_precision("f32"):
        assert gg.matmul_precision() == "f32"
    assert gg.matmul_precision() == "default"
    for bad in ("f16", "F32", 32, None.__class__):
        with pytest.raises(ValueError):
            gg.matmul_precision(bad)
        assert gg.matmul_precision() == "default"


def _run(code: str, **env) -> str:
    e = {k: v for k, v in os.environ.items() if not k.startswith("GGMLGRAD_GRAPH")}
    e.update(env)
    e["PYTHONPATH"] = SRC + os.pathsep + e.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


_ENV_PROBE = """
import ggmlgrad as gg
y = gg.ones(2) * 2
z = gg.ones(2) * 3
print(gg.graph_mode(), gg.pending(y), gg.pending(z))
with gg.graph_mode(False):
    print(gg.graph_mode())
print(gg.graph_mode())
"""


def test_env_vars_apply_where_nothing_set_the_mode():
    assert _run(_ENV_PROBE).split("\n") == ["False False False", "False", "False"]
    assert _run(_ENV_PROBE, GGMLGRAD_GRAPH="1").split("\n") == ["True True True", "False", "True"]
    # check mode from the environment: graph mode on, but every op drained at once
    assert _run(_ENV_PROBE, GGMLGRAD_GRAPH="1", GGMLGRAD_GRAPH_CHECK="1").split("\n") == \
        ["True False False", "False", "True"]
    # an explicit setting wins over the environment
    assert _run("import ggmlgrad as gg\ngg.graph_mode(False)\nprint(gg.graph_mode(), gg.pending(gg.ones(1)+1))",
                GGMLGRAD_GRAPH="1") == "False False"


def test_modes_are_thread_local():
    default = _thread_default()  # a new thread starts from the defaults (GGMLGRAD_GRAPH, or off)
    barrier = threading.Barrier(2, timeout=30)
    seen: dict[str, object] = {}
    errors: list[BaseException] = []

    def graph_thread():
        try:
            with gg.local_mode(graph=True, matmul_precision="f32"):
                barrier.wait()  # the other thread reads its modes while these are set
                seen["a_modes"] = (gg.graph_mode(), gg.matmul_precision())
                x = gg.tensor([1.0, 2.0], requires_grad=True)
                y = (x * x).sum()
                y.backward()
                barrier.wait()
                seen["a_value"] = (y.item(), x.grad.tolist())
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    def eager_thread():
        try:
            barrier.wait()
            seen["b_modes"] = (gg.graph_mode(), gg.matmul_precision())
            z = gg.ones(2) * 4
            seen["b_pending"] = gg.pending(z)
            barrier.wait()
            seen["b_value"] = z.tolist()
        except BaseException as e:  # pragma: no cover
            errors.append(e)

    ts = [threading.Thread(target=graph_thread), threading.Thread(target=eager_thread)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert not errors, errors
    assert seen["a_modes"] == (True, "f32")
    assert seen["b_modes"] == (default, "default")
    assert seen["b_pending"] is default
    assert seen["a_value"] == (5.0, [2.0, 4.0])
    assert seen["b_value"] == [4.0, 4.0]
    assert gg.graph_mode() is False and gg.matmul_precision() == "default"


def test_modes_are_task_local():
    async def task(on: bool):
        with gg.graph_mode(on):
            await asyncio.sleep(0.01)  # the other task runs with its own setting meanwhile
            return gg.graph_mode()

    async def main():
        return await asyncio.gather(task(True), task(False), task(True))

    assert asyncio.run(main()) == [True, False, True]
    assert gg.graph_mode() is False


def _matmul_precisions(node: int) -> list[int]:
    """ggml precision flags (op_params[0]) of every MUL_MAT node reachable from ``node``."""
    from ggmlgrad._ggml import TensorStruct, lib
    seen, out, stack = set(), [], [node]
    while stack:
        n = stack.pop()
        if not n or n in seen:
            continue
        seen.add(n)
        t = TensorStruct.from_address(n)
        if lib.op_name(t.op) == b"MUL_MAT":
            out.append(t.op_params[0])
        stack.extend(s for s in t.src if s)
    return out


def _built(t) -> int:
    """The ggml node of a pending tensor (graph mode builds recorded nodes when asked for one)."""
    from ggmlgrad.engine import ENGINE
    return ENGINE.node_of(t)


def test_matmul_precision_marks_forward_and_backward_nodes():
    from ggmlgrad._ggml import consts
    x = gg.tensor(np.ones((3, 4), np.float32), requires_grad=True)
    w = gg.tensor(np.ones((4, 2), np.float32), requires_grad=True)
    with gg.graph_mode(True):
        with gg.matmul_precision("f32"):
            y = x @ w
            assert _matmul_precisions(_built(y)) == [consts.PREC_F32]
        y.sum().backward()  # outside the block: the gradient matmuls follow the forward's precision
        for g in (x.grad, w.grad):
            precs = _matmul_precisions(_built(g))
            assert precs and all(p == consts.PREC_F32 for p in precs), precs
        z = x @ w  # default precision again: no node asks for F32 (on the CPU it may be an out_prod)
        assert all(p == consts.PREC_DEFAULT for p in _matmul_precisions(_built(z)))
        assert x.grad.tolist() == [[2.0] * 4] * 3 and w.grad.tolist() == [[3.0] * 2] * 4


def test_previous_value_can_be_passed_back_to_restore():
    base = gg.graph_mode()
    prev = gg.graph_mode(not base)
    assert gg.graph_mode() is (not base)
    gg.graph_mode(prev)                 # the returned setting restores, as in ag_graph_mode(old)
    assert gg.graph_mode() is base


def test_previous_precision_can_be_passed_back():
    prev = gg.matmul_precision("f32")
    gg.matmul_precision(prev)
    assert gg.matmul_precision() == "default" and isinstance(gg.matmul_precision(), str)
