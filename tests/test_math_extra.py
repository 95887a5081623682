"""Structural checks of issue 22's composed math kernels (values are in test_ops.py and
test_torch_parity_math.py): each op builder stays within the tensors the engine reserves for one op
(ggml aborts the process past them), and the composed ops stay in the graph (one compute per
captured call: nothing runs on the host)."""
from __future__ import annotations

import numpy as np
import pytest

import ggmlgrad as gg
from ggmlgrad._ggml import lib
from ggmlgrad.engine import build as engine_build
from ggmlgrad.ops import REGISTRY

_OPS = ("tan", "rsqrt", "log2", "log10", "log1p", "expm1", "erf", "ceil", "trunc", "round", "frac", "nan_to_num",
        "atan2", "hypot", "logaddexp", "cumsum", "argsort", "where", "where_scalar", "maximum", "clamp", "sqrt")


@pytest.fixture
def builder_sizes(monkeypatch):
    """op name → the most ggml tensors its builder made in one call (measured on the context)."""
    sizes: dict[str, int] = {}
    for name in _OPS:
        opdef = REGISTRY[name]

        def measured(ctx, nodes, inputs, out, _f=opdef.forward, _name=name, **params):
            before = lib.used_mem(ctx)
            node = _f(ctx, nodes, inputs, out, **params)
            sizes[_name] = max(sizes.get(_name, 0), (lib.used_mem(ctx) - before) // engine_build._OVERHEAD)
            return node
        monkeypatch.setattr(opdef, "forward", measured)
    return sizes


def test_builders_stay_within_the_engines_room_per_op(builder_sizes):
    for shape in [(3, 4), (), (40, 3), (2, 3, 5)]:
        for dtype in (np.float32, np.int32):
            x = gg.tensor((np.arange(int(np.prod(shape))).reshape(shape) % 7 - 3).astype(dtype))
            y = gg.tensor(np.ones(shape, np.float32))
            with gg.no_grad():
                outs = [getattr(gg, n)(x) for n in ("tan", "rsqrt", "log2", "log10", "log1p", "expm1", "erf", "ceil",
                                                    "trunc", "round", "nan_to_num", "sqrt")]
                outs += [gg.frac(x.float()), gg.round(x.float(), decimals=2), gg.atan2(x, y), gg.hypot(x, y),
                         gg.logaddexp(x, y), gg.cumsum(x, 0), gg.argsort(x, 0), gg.where(x > 0, x, 0.5), gg.where(x > 0, x, y),
                         gg.maximum(x, y), x.clamp(0, 1)]
            for o in outs:
                o.numpy()
    assert set(builder_sizes) == set(_OPS)
    too_big = {n: k for n, k in builder_sizes.items() if k > engine_build._OP_HEADROOM - 6}
    assert not too_big, f"op builders near or past the {engine_build._OP_HEADROOM} tensors reserved per op: {too_big}"


def test_composed_ops_run_in_one_captured_compute():
    def step(x, w):
        y = gg.sort(x * w, 1).values + gg.erf(x).cumsum(0) + gg.atan2(x, w) + gg.round(x, decimals=1)
        return y.sum() + gg.topk(x, 2).values.sum() + gg.median(x, 0).values.sum() + gg.prod(w, 1).sum() \
            + gg.linalg.vector_norm(x, 3) + gg.cdist(x, w).sum() + gg.cumprod(w, 1).sum()

    f = gg.capture(step)
    r = np.random.default_rng(0)
    a, b = r.standard_normal((3, 4)).astype(np.float32), r.standard_normal((3, 4)).astype(np.float32)
    first = f(a, b)
    gg.reset_counters()
    again = f(a, b)
    assert gg.counters()["computes"] == 1
    np.testing.assert_allclose(again, first, rtol=1e-6)
    with gg.no_grad():
        eager = step(gg.tensor(a), gg.tensor(b)).item()
    np.testing.assert_allclose(float(again), eager, rtol=1e-5)


def test_linalg_and_norm_examples_run():
    """gg.linalg's examples (its functions are not op front ends, so test_public_surfaces does not run them)."""
    import doctest

    import ggmlgrad.linalg
    from ggmlgrad.tensor import reductions_extra
    result = doctest.testmod(ggmlgrad.linalg)
    assert result.failed == 0 and result.attempted > 0
    for fn in (reductions_extra.vector_norm, reductions_extra.linalg_norm):
        runner = doctest.DocTestRunner()
        runner.run(doctest.DocTestParser().get_doctest(fn.__doc__, {}, fn.__name__, None, 0))
        assert runner.failures == 0 and runner.tries > 0, fn.__name__
