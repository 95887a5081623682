"""Ops of kind "writes" (issue 11, item 3): optimizer updates, ``copy_`` and ``load_state_dict``
are registered write ops, dispatched through ``ops.registry.write`` in every mode.

References: NumPy float64 for the update rules and the casts, torch (where installed) for the
semantics of ``copy_``'s casts; dispatch counts through the registry's per-op counters; the same
values and the same errors in eager, graph, check mode and capture.
"""
from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

import ggmlgrad as gg
from ggmlgrad._ggml import InitParams, consts, lib
from ggmlgrad.engine import ENGINE
from ggmlgrad.ops.registry import REGISTRY, WRITE_KIND, WRITES

OPTIMIZER_WRITES = {"sgd", "adam", "adamw_fused"}
ALL_WRITES = OPTIMIZER_WRITES | {"copy_", "load_state_dict"}
MODES = ["eager", "graph", "check", "capture"]


def _mode(mode: str):
    """The graph-mode setting of ``mode`` (a capture runs from eager mode)."""
    return gg.graph_mode(mode in ("graph", "check"), check=mode == "check")


def _calls(name: str) -> int:
    return WRITES[name].calls


# ---------------------------------------------------------------------- the registry
def test_every_write_op_is_registered_with_kind_writes():
    assert ALL_WRITES <= set(WRITES)
    for name, wd in WRITES.items():
        assert wd.name == name and wd.kind == WRITE_KIND == "writes"
        assert callable(wd.check) and callable(wd.build) and 0 < wd.tensors <= 96
        assert name not in REGISTRY            # one table per kind: no op is both


def _worst_case_inputs(name: str):
    """(options, input specs) of ``name``'s costliest target group (half floats convert, every
    option on)."""
    f16, f32 = gg.float16, gg.float32
    spec = lambda dt, shape=(3, 5): SimpleNamespace(shape=shape, dtype=dt, device=None)  # noqa: E731
    if name == "sgd":
        return dict(weight_decay=True, maximize=True, nesterov=True), [spec(f16), spec(f16), spec(f32, (4,)), spec(f32)]
    if name == "adam":
        return dict(l2=True, maximize=True), [spec(f16), spec(f16), spec(f32, (11,)), spec(f32), spec(f32)]
    if name == "adamw_fused":
        return dict(l2=True, maximize=True), [spec(f32), spec(f16), spec(f32, (11,)), spec(f32), spec(f32)]
    return {}, [spec(gg.int32), spec(f16)]          # copy_ / load_state_dict: half → int32 via float32


@pytest.mark.parametrize("name", sorted(ALL_WRITES))
def test_declared_tensor_bound_holds(name):
    """A write op builds at most ``tensors`` ggml tensors per target group (with the engine's copy
    of each write): the bound by which batched writes are split into records that fit."""
    wd = WRITES[name]
    options, specs = _worst_case_inputs(name)
    ctx = lib.init(InitParams(1 << 20, None, True))
    try:
        nodes = [lib.new_tensor_2d(ctx, s.dtype.ggml_type, s.shape[-1], s.shape[0]) if len(s.shape) == 2
                 else lib.new_tensor_1d(ctx, s.dtype.ggml_type, s.shape[0]) for s in specs]
        before = lib.used_mem(ctx)
        writes = wd.build(ctx, nodes, specs, **options)
        for target, node in writes:
            if target is not None:
                lib.cpy(ctx, node, nodes[target])
        made = (lib.used_mem(ctx) - before) // lib.tensor_overhead()
    finally:
        lib.free(ctx)
    assert 0 < made <= wd.tensors, f"{name} builds {made} tensors per target, declares {wd.tensors}"


def test_many_parameters_split_into_records_that_fit_subprocess():
    """400 float16 parameters with the composed Adam (~40 tensors each) once overflowed a node
    context in ONE record (a ggml abort): the write is split into records."""
    code = (
        "import numpy as np, ggmlgrad as gg\n"
        "for graph in (False, True):\n"
        "    with gg.graph_mode(graph):\n"
        "        ps = [gg.tensor(np.ones(3, np.float16), requires_grad=True) for _ in range(400)]\n"
        "        opt = gg.optim.Adam(ps, lr=0.1, fused=False)\n"
        "        for _ in range(2):\n"
        "            for p in ps: p.grad = gg.ones(3, dtype=gg.float16)\n"
        "            opt.step()\n"
        "        print(sorted({x for p in ps for x in p.tolist()}))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    ref = _adam_ref(np.ones(3), [np.ones(3)] * 2, lr=0.1)[0][0]   # Adam on a constant gradient
    for line in r.stdout.split("\n")[:2]:
        vals = eval(line)
        assert len(vals) == 1 and abs(vals[0] - np.float16(ref)) <= 1e-3


# ---------------------------------------------------------------------- NumPy float64 update rules
def _sgd_ref(p, grads, lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False, maximize=False):
    p, buf = np.array(p, np.float64), None
    for g, lr_t in zip(grads, lr if isinstance(lr, list) else [lr] * len(grads)):
        g = -g if maximize else g
        g = g + weight_decay * p
        if momentum:
            buf = g.copy() if buf is None else momentum * buf + (1 - dampening) * g
            g = g + momentum * buf if nesterov else buf
        p = p - lr_t * g
    return p


def _adam_ref(p, grads, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, decoupled=False, maximize=False):
    p, m, v = np.array(p, np.float64), 0.0, 0.0
    b1, b2 = betas
    for t, (g, lr_t) in enumerate(zip(grads, lr if isinstance(lr, list) else [lr] * len(grads)), 1):
        g = -g if maximize else g
        if decoupled:
            p = p * (1 - lr_t * weight_decay)
        else:
            g = g + weight_decay * p
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        p = p - lr_t * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)
    return p, m, v


CASES = {  # id: (optimizer, options, write op, reference)
    "sgd": (gg.optim.SGD, dict(), "sgd", _sgd_ref),
    "sgd-momentum-wd": (gg.optim.SGD, dict(momentum=0.9, dampening=0.1, weight_decay=0.05), "sgd", _sgd_ref),
    "sgd-nesterov-max": (gg.optim.SGD, dict(momentum=0.8, nesterov=True, maximize=True), "sgd", _sgd_ref),
    "adam-l2": (gg.optim.Adam, dict(weight_decay=0.1), "adamw_fused", _adam_ref),
    "adam-composed": (gg.optim.Adam, dict(weight_decay=0.1, fused=False, maximize=True), "adam", _adam_ref),
    "adamw": (gg.optim.AdamW, dict(weight_decay=0.1), "adamw_fused", _adam_ref),
    "adamw-composed": (gg.optim.AdamW, dict(weight_decay=0.1, fused=False), "adam", _adam_ref),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", list(CASES))
def test_updates_match_numpy_float64_in_every_mode(case, mode):
    """Three steps with a learning rate changed between them (as a scheduler does): float64
    reference values, and one dispatch of the write op per step (none per replay)."""
    cls, options, opname, ref = CASES[case]
    rng = np.random.default_rng(3)
    p0 = rng.standard_normal(6).astype(np.float32)
    grads = [rng.standard_normal(6).astype(np.float32) for _ in range(3)]
    lrs = [0.1, 0.05, 0.02]
    with _mode(mode):
        w = gg.tensor(p0, requires_grad=True)
        opt = cls([w], lr=lrs[0], **options)
        step = gg.capture_step(lambda c: (w * c).sum(), opt) if mode == "capture" else None
        before = _calls(opname)
        for lr, g in zip(lrs, grads):
            opt.param_groups[0]["lr"] = lr
            if step is not None:
                step(g)
            else:
                opt.zero_grad()
                (w * gg.tensor(g)).sum().backward()
                opt.step()
        got = w.detach().numpy().copy()
    kw = dict(options, lr=lrs)
    kw.pop("fused", None)
    if ref is _adam_ref:
        kw["decoupled"] = cls is gg.optim.AdamW
        want = ref(p0, grads, **kw)[0]
    else:
        want = ref(p0, grads, **kw)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
    assert opt.state[w]["step"] == 3
    assert _calls(opname) - before == (1 if mode == "capture" else 3)


def test_optimizer_write_ops_match_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    p0 = rng.standard_normal(5).astype(np.float32)
    grads = [rng.standard_normal(5).astype(np.float32) for _ in range(3)]
    for name, (cls, options, _, _) in CASES.items():
        tcls = getattr(torch.optim, cls.__name__)
        topts = {k: v for k, v in options.items() if k != "fused"}
        tw = torch.tensor(p0, requires_grad=True)
        topt = tcls([tw], lr=0.05, **topts)
        w = gg.tensor(p0, requires_grad=True)
        opt = cls([w], lr=0.05, **options)
        for g in grads:
            tw.grad = torch.tensor(g)
            topt.step()
            w.grad = gg.tensor(g)
            opt.step()
        np.testing.assert_allclose(w.detach().numpy(), tw.detach().numpy(), rtol=2e-5, atol=2e-6, err_msg=name)


def test_capture_update_is_the_optimizers_whole_capture_protocol():
    w = gg.tensor([1.0, -1.0], requires_grad=True)
    opt = gg.optim.SGD([w], lr=0.5, momentum=0.9)
    for private in ("_hparams_arrays", "_queue_update", "_advance", "_last_updated"):
        assert not hasattr(opt, private)
    upd = opt.capture_update()
    assert upd.params == [w] and not upd.changed()
    with pytest.raises(TypeError, match="capture_update"):
        gg.capture_step(lambda: (w * w).sum(), SimpleNamespace(param_groups=[{"params": [w]}]))
    hps = [gg.tensor(a) for a in upd.hparams()]
    with ENGINE.exclusive("test"):
        upd.queue([gg.tensor([2.0, 4.0])], hps)
    assert opt.state[w]["step"] == 0          # counted only when the caller says the update ran
    upd.advance()
    assert opt.state[w]["step"] == 1
    np.testing.assert_allclose(w.detach().numpy(), _sgd_ref([1.0, -1.0], [np.array([2.0, 4.0])], 0.5, momentum=0.9),
                               rtol=1e-6)
    opt.param_groups[0]["momentum"] = 0.0     # a structural change: a recording must record again
    assert upd.changed()
    with ENGINE.exclusive("test"), pytest.raises(RuntimeError, match="changed since"):
        upd.queue([gg.tensor([2.0, 4.0])], hps)


def test_capture_replays_follow_state_loaded_between_them():
    """load_state_dict (model and optimizer) between replays writes in place: the next replay
    reads the loaded values without recording again, as an uncaptured step would."""
    rng = np.random.default_rng(1)
    runs = []
    for captured in (True, False):
        m = gg.nn.Linear(3, 2)
        if not runs:
            x, w0 = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal((2, 3))
        m.load_state_dict({"weight": w0, "bias": np.zeros(2)})
        opt = gg.optim.Adam(m.parameters(), lr=0.05)
        loss = lambda xb: (m(xb) ** 2).mean()  # noqa: E731
        step = gg.capture_step(loss, opt)

        def one():
            if captured:
                step(x)
            else:
                opt.zero_grad()
                loss(gg.tensor(x)).backward()
                opt.step()
        one()
        model_sd = {k: v.clone() for k, v in m.state_dict().items()}   # torch's are live references
        opt_sd = opt.state_dict()
        snapshot = {k: v.numpy() for k, v in model_sd.items()}
        one()
        one()
        m.load_state_dict(model_sd)
        opt.load_state_dict(opt_sd)
        np.testing.assert_array_equal(m.weight.detach().numpy(), snapshot["weight"])
        one()
        runs.append((x, m.weight.detach().numpy(), m.bias.detach().numpy(), opt.state[m.weight]["step"]))
        if captured:
            assert step.recordings == 1
    np.testing.assert_allclose(runs[0][1], runs[1][1], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(runs[0][2], runs[1][2], rtol=1e-6, atol=1e-7)
    assert runs[0][3] == runs[1][3] == 2


# ---------------------------------------------------------------------- copy_
COPY_CASES = [  # (target dtype, source values, source dtype)
    ("int32", [[-1.7, 2.5, 3.9]], "float32"),       # float → int truncates toward zero; broadcast rows
    ("float16", [[0.1, -2.0001, 65504.0]], "float32"),
    ("float16", [[7, -3, 2048]], "int32"),          # int32 → half goes through float32
    ("int32", [[1.5, -2.75, 300.0]], "float16"),    # half → int32 goes through float32
    ("float32", [[1.25, -0.5, 3.0]], "bfloat16"),
]


def _np_cast(values, src: str, dst: str) -> np.ndarray:
    """NumPy float64 reference of copy_: the source rounded to its dtype, then torch's conversion."""
    a = np.asarray(values, np.float64)
    if src == "float16":
        a = a.astype(np.float16).astype(np.float64)
    if dst == "int32":
        return np.trunc(a)
    if dst == "float16":
        return a.astype(np.float16).astype(np.float64)
    return a


@pytest.mark.parametrize("mode", ["eager", "graph", "check"])
@pytest.mark.parametrize("dst,values,src", COPY_CASES)
def test_copy_casts_and_broadcasts_as_torch_in_every_mode(mode, dst, values, src):
    with _mode(mode):
        t = gg.zeros(2, 3, dtype=dst)
        s = gg.tensor(values, dtype=src)
        before = _calls("copy_")
        assert t.copy_(s) is t
        got = t.numpy().astype(np.float64)
    assert t.dtype.name == dst and _calls("copy_") - before == 1
    np.testing.assert_array_equal(got, np.broadcast_to(_np_cast(values, src, dst), (2, 3)))


def test_copy_casts_match_torch():
    torch = pytest.importorskip("torch")
    for dst, values, src in COPY_CASES:
        t = torch.zeros(2, 3, dtype=getattr(torch, dst))
        t.copy_(torch.tensor(values, dtype=getattr(torch, src)))
        g = gg.zeros(2, 3, dtype=dst).copy_(gg.tensor(values, dtype=src))
        np.testing.assert_array_equal(g.numpy().astype(np.float64), t.double().numpy(), err_msg=f"{src}->{dst}")


def _outcome(fn):
    try:
        return ("ok", np.asarray(fn(), np.float64).tolist())
    except Exception as e:  # the error's type and message are what must match across modes
        return (type(e).__name__, str(e))


COPY_PROGRAMS = {
    "shape": lambda: gg.zeros(2, 3).copy_(gg.ones(4)).numpy(),
    "broadcast-up": lambda: gg.zeros(3).copy_(gg.ones(2, 3)).numpy(),
    "leaf-requires-grad": lambda: gg.zeros(2, requires_grad=True).copy_(gg.ones(2)).numpy(),
    "grad-flows": lambda: _copy_grad(),
    "host-array": lambda: gg.zeros(2, dtype="int32").copy_(np.array([1.9, -1.9])).numpy(),
}


def _copy_grad():
    src = gg.tensor([1.0, 2.0], requires_grad=True)
    dst = gg.zeros(2) * 1.0
    dst.copy_(src)
    (dst * gg.tensor([3.0, 5.0])).sum().backward()
    return src.grad.numpy()


def test_copy_values_and_errors_are_the_same_in_every_mode():
    outcomes = {}
    for mode in ("eager", "graph", "check"):
        with _mode(mode):
            outcomes[mode] = {k: _outcome(f) for k, f in COPY_PROGRAMS.items()}
    assert outcomes["graph"] == outcomes["eager"] == outcomes["check"]
    got = outcomes["eager"]
    # ShapeError: a ValueError and, as torch's copy_ raises, a RuntimeError
    assert got["shape"][0] == "ShapeError" and "(4,)" in got["shape"][1] and "(2, 3)" in got["shape"][1]
    assert got["broadcast-up"][0] == "RuntimeError" and "[3]" in got["broadcast-up"][1]
    assert got["leaf-requires-grad"][0] == "RuntimeError" and "copy_" in got["leaf-requires-grad"][1]
    assert got["grad-flows"] == ("ok", [3.0, 5.0])
    assert got["host-array"] == ("ok", [1.0, -1.0])


def test_copy_inside_a_capture_is_recorded_and_outside_it_is_read_by_the_replay():
    w = gg.tensor([1.0, 2.0])
    f = gg.capture(lambda x: w.copy_(x))
    np.testing.assert_array_equal(f(np.full(2, 3.0, np.float32)), [3.0, 3.0])
    assert w.tolist() == [3.0, 3.0]
    w.copy_(gg.tensor([1.0, 2.0]))
    g = gg.capture(lambda x: w * x)
    np.testing.assert_array_equal(g(np.ones(2, np.float32)), [1.0, 2.0])
    w.copy_(gg.tensor([5.0, 7.0]))           # written in place: the replay reads the new value
    np.testing.assert_array_equal(g(np.ones(2, np.float32)), [5.0, 7.0])
    assert g.recordings == 1


def test_copy_bad_device_value_is_refused_by_the_write_op():
    """The write op's own validation (the tensor layer broadcasts first, so reaching it takes a
    direct call): the op's name and both shapes, before anything is queued."""
    from ggmlgrad.ops.writes import write_value
    t = gg.zeros(2, 3)
    with ENGINE.exclusive("test"), pytest.raises(ValueError, match=r"copy_: value of shape \(3,\).*\(2, 3\)"):
        write_value(t, gg.ones(3))
    assert t.tolist() == [[0.0] * 3] * 2


# ---------------------------------------------------------------------- Module.load_state_dict
class _Net(gg.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = gg.nn.Linear(3, 2)
        self.register_buffer("count", gg.zeros(2, dtype="int32"))
        self.register_buffer("f16", gg.zeros(3, dtype="float16"))


def _state(rng):
    return {"lin.weight": gg.tensor(rng.standard_normal((2, 3)), dtype="float16"),   # cast up
            "lin.bias": rng.standard_normal(2),                                        # float64 array
            "count": gg.tensor([3, -4], dtype="int32"),
            "f16": gg.tensor([0.1, 1e-3, 70000.0 / 2])}                               # cast down


@pytest.mark.parametrize("mode", ["eager", "graph", "check"])
def test_module_load_state_dict_casts_as_torch_in_every_mode(mode):
    rng = np.random.default_rng(2)
    sd = _state(rng)
    want = {k: (v.numpy() if isinstance(v, gg.Tensor) else v).astype(np.float64) for k, v in sd.items()}
    with _mode(mode):
        net = _Net()
        before = _calls("load_state_dict")
        net.load_state_dict(sd)
        got = {k: v.numpy().astype(np.float64) for k, v in net.state_dict().items()}
    assert _calls("load_state_dict") - before == 1       # every tensor value: ONE write op
    np.testing.assert_array_equal(got["lin.weight"], want["lin.weight"])
    np.testing.assert_array_equal(got["lin.bias"], want["lin.bias"].astype(np.float32))
    np.testing.assert_array_equal(got["count"], [3, -4])
    np.testing.assert_array_equal(got["f16"], want["f16"].astype(np.float16))
    assert net.f16.dtype is gg.float16 and net.count.dtype is gg.int32


def test_module_load_state_dict_errors_are_the_same_in_every_mode():
    def bad(key, value):
        net = _Net()
        before = net.lin.weight.detach().numpy().copy()
        sd = dict(_state(np.random.default_rng(0)), **{key: value})
        try:
            net.load_state_dict(sd)
        finally:
            np.testing.assert_array_equal(net.lin.weight.detach().numpy(), before)   # nothing was loaded
    programs = {"shape": lambda: bad("lin.weight", gg.ones(3, 2)),
                "float-into-int": lambda: bad("count", gg.tensor([1.5, 2.0])),
                "int-range": lambda: bad("count", np.array([2**40, 0]))}
    outcomes = {}
    for mode in ("eager", "graph", "check"):
        with _mode(mode):
            outcomes[mode] = {k: _outcome(f) for k, f in programs.items()}
    assert outcomes["graph"] == outcomes["eager"] == outcomes["check"]
    for k, (kind, msg) in outcomes["eager"].items():
        assert kind == "RuntimeError" and "nothing was loaded" in msg, k
    assert "(3, 2)" in outcomes["eager"]["shape"][1] and "(2, 3)" in outcomes["eager"]["shape"][1]


def test_optimizer_load_state_dict_is_one_write_op():
    ps = [gg.tensor(np.ones(4, np.float32), requires_grad=True) for _ in range(3)]
    opt = gg.optim.Adam(ps, lr=0.1)
    for p in ps:
        p.grad = gg.ones(4)
    opt.step()
    sd = opt.state_dict()
    sd["state"][0]["exp_avg"] = sd["state"][0]["exp_avg"].to(gg.float16)   # cast back up to float32
    opt.step()
    before = _calls("load_state_dict")
    opt.load_state_dict(sd)
    assert _calls("load_state_dict") - before == 1
    m, v = _adam_ref(np.ones(4), [np.ones(4)], lr=0.1)[1:]
    np.testing.assert_allclose(opt.state[ps[0]]["exp_avg"].numpy(), np.float16(m), rtol=1e-3)
    np.testing.assert_allclose(opt.state[ps[1]]["exp_avg_sq"].numpy(), v, rtol=2e-5)   # 1 - 0.999 in float32
    assert all(opt.state[p]["step"] == 1 for p in ps)


def test_writes_inside_a_capture_are_refused_at_the_users_line():
    """load_state_dict (model, optimizer) and optimizer.step in a captured function: a CaptureError
    naming the write and this file (never the engine's drain), and nothing changes."""
    m = gg.nn.Linear(2, 2)
    opt = gg.optim.SGD(m.parameters(), lr=0.1)
    w0 = m.weight.detach().numpy().copy()
    sd, opt_sd = {k: v.clone() for k, v in m.state_dict().items()}, opt.state_dict()

    def stepping(x):
        m(x).sum().backward()
        opt.step()
        return m(x)
    programs = {"load_state_dict": lambda x: (m.load_state_dict(sd), m(x))[1],
                "SGD.load_state_dict": lambda x: (opt.load_state_dict(opt_sd), m(x))[1],
                "SGD.step": stepping}
    for name, fn in programs.items():
        with pytest.raises(gg.CaptureError, match=rf"{name} at .*test_writes.py:\d+"):
            gg.capture(fn)(np.ones((1, 2), np.float32))
        m.zero_grad()
    np.testing.assert_array_equal(m.weight.detach().numpy(), w0)
    assert opt.state[m.weight]["step"] == 0


def test_module_load_state_dict_of_tensors_and_arrays_is_one_compute():
    net = _Net()
    sd = _state(np.random.default_rng(4))
    before = gg.counters()["computes"]
    net.load_state_dict(sd)
    assert gg.counters()["computes"] - before == 1
    np.testing.assert_array_equal(net.lin.bias.detach().numpy(), sd["lin.bias"].astype(np.float32))


def _group(opname, p=(2, 3), g=None, hp=None, state=None, hp_dtype="float32", state_dtype="float32"):
    """One target group of an optimizer write op, with one thing replaced."""
    n_hp = 4 if opname == "sgd" else 11
    n_state = 1 if opname == "sgd" else 2
    state = state or [p] * n_state
    return (gg.zeros(*p), gg.zeros(*(g or p)), gg.zeros(*(hp or (n_hp,)), dtype=hp_dtype),
            *[gg.zeros(*s, dtype=state_dtype) for s in state])


BAD_WRITES = [  # (op, group, error type, message pattern)
    ("sgd", dict(g=(3, 2)), ValueError, r"sgd: gradient shape \(3, 2\) does not match its parameter's shape \(2, 3\)"),
    ("sgd", dict(state=[(6,)]), ValueError, r"sgd: momentum buffer shape \(6,\) .*\(2, 3\)"),
    ("sgd", dict(hp=(11,)), ValueError, r"sgd: hyperparameter tensor \(11,\):float32, expected \(4,\):float32"),
    ("adam", dict(state=[(2, 3), (3,)]), ValueError, r"adam: exp_avg_sq shape \(3,\) .*\(2, 3\)"),
    ("adam", dict(hp_dtype="float16"), ValueError, r"adam: hyperparameter tensor \(11,\):float16"),
    ("adamw_fused", dict(g=(6,)), ValueError, r"adamw_fused: gradient shape \(6,\)"),
    ("adamw_fused", dict(state_dtype="float16"), TypeError, r"adamw_fused: .*float32 .*float16"),
]


@pytest.mark.parametrize("opname,change,error,match", BAD_WRITES)
def test_write_op_validation_names_the_op_and_shapes(opname, change, error, match):
    """Bad input to a write op raises in Python before anything is queued (ggml would abort)."""
    from ggmlgrad.engine.plans import Exact
    from ggmlgrad.ops.registry import write
    group = _group(opname, **change)
    options = (("weight_decay", False), ("maximize", False), ("nesterov", False)) if opname == "sgd" else \
        (("l2", False), ("maximize", False))
    with ENGINE.exclusive("test"), pytest.raises(error, match=match):
        write(opname, group, Exact(((len(group), options),)))
    assert len(ENGINE) == 0 and group[0].tolist() == [[0.0] * 3] * 2
