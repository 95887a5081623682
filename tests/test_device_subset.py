"""The device subset: what differs on a device with its own memory, run on a non-CPU device.

The device is ``GGMLGRAD_TEST_DEVICE`` (``vulkan:0``, ``cuda:0``) or else the first non-CPU device
of the loaded ggml; without one every test here skips, saying why. On Mesa's software Vulkan
driver (lavapipe), after ``python -m ggmlgrad build --vulkan``::

    GGMLGRAD_GGML_LIB=$VIRTUAL_ENV/share/ggmlgrad/ggml-0.20.2.post1-vulkan/lib GGML_VK_VISIBLE_DEVICES=0 \\
        GGMLGRAD_TEST_DEVICE=vulkan:0 python -m pytest -q tests/test_device_subset.py

(``GGML_VK_VISIBLE_DEVICES=0``: ggml skips CPU-type Vulkan devices such as lavapipe unless named.)
The same ``GGMLGRAD_TEST_DEVICE`` runs any other test file on the device (tests/conftest.py makes it
the default device of every test), e.g. the whole op table: ``tests/test_ops.py``.

Covered here: ``to()`` round trips of tensors, of
gradients through ``to()`` and of modules; a training step in eager mode, graph mode and
``capture_step`` against the same step on the CPU; a capture replay's transfers (one upload, one
compute, one download) and a capture called with NumPy arrays on a device model; save/load.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

import ggmlgrad as gg
from conftest import MATMUL_OPS_TOLERANCE, TEST_DEVICE_ENV, requested_test_device


def _device():
    spec = requested_test_device()
    if spec:
        try:
            return gg.runtime.resolve_device(spec), ""
        except ValueError as e:
            return None, f"{TEST_DEVICE_ENV}={spec}: {e}"
    other = [d for d in gg.devices() if d.kind != "cpu"]
    if other:
        return other[0], ""
    return None, ("the loaded ggml has no device besides the CPU: build one with `python -m ggmlgrad build "
                  "--vulkan` and select it with GGMLGRAD_GGML_LIB=<that build>/lib (lavapipe also needs "
                  "GGML_VK_VISIBLE_DEVICES=0); see this file's docstring")


DEVICE, WHY_ABSENT = _device()
pytestmark = pytest.mark.skipif(DEVICE is None, reason=WHY_ABSENT or "no device")
if DEVICE is None:
    print(f"\ntests/test_device_subset.py skips: {WHY_ABSENT}")

# Per-op tolerances where the device multiplies in float16 tiles: tests/conftest.py.
_VK_F16_TILES = DEVICE is not None and DEVICE.kind == "vulkan" and "GGML_VK_DISABLE_F16" not in os.environ
STEP_RTOL = 5e-3 if _VK_F16_TILES else 2e-5


def _tolerances(info):
    if _VK_F16_TILES and info.name in MATMUL_OPS_TOLERANCE:
        atol, rtol = MATMUL_OPS_TOLERANCE[info.name]
        return max(atol, info.atol), max(rtol, info.rtol), max(atol, info.grad_atol), max(rtol, info.grad_rtol)
    return info.atol, info.rtol, info.grad_atol, info.grad_rtol


@pytest.fixture(autouse=True)
def on_device():
    if DEVICE is None:
        yield None
        return
    prev = gg.set_device(DEVICE)
    try:
        yield DEVICE
    finally:
        gg.set_device(prev)


# ---------------------------------------------------------------------------- to() round trips
def test_tensor_round_trip_keeps_values_and_devices():
    x = np.random.default_rng(1).standard_normal((5, 3)).astype(np.float32)
    on_cpu = gg.tensor(x, device="cpu")
    there = on_cpu.to(DEVICE)
    assert there.device == DEVICE and on_cpu.device == gg.runtime.cpu_device()
    np.testing.assert_array_equal(there.numpy(), x)
    back = there.to("cpu")
    assert back.device.kind == "cpu"
    np.testing.assert_array_equal(back.numpy(), x)
    ints = gg.tensor(np.arange(6, dtype=np.int32), dtype=gg.int32, device="cpu").to(DEVICE)
    assert ints.dtype is gg.int32
    np.testing.assert_array_equal(ints.numpy(), np.arange(6))


def test_module_round_trip_keeps_parameter_objects():
    gg.manual_seed(0)
    m = gg.nn.Linear(3, 2, device="cpu") if _takes_device() else gg.nn.Linear(3, 2).to("cpu")
    weight, before = m.weight, m.weight.detach().numpy().copy()
    assert m.to(DEVICE) is m and m.weight is weight and m.weight.device == DEVICE
    np.testing.assert_array_equal(m.weight.detach().numpy(), before)
    m.to("cpu")
    assert m.weight.device.kind == "cpu"
    np.testing.assert_array_equal(m.weight.detach().numpy(), before)


def _takes_device() -> bool:
    import inspect
    return "device" in inspect.signature(gg.nn.Linear.__init__).parameters


# ---------------------------------------------------------------------------- training steps
def _mlp_and_data(device):
    gg.manual_seed(0)
    with _default_device("cpu"):
        model = gg.nn.Sequential(gg.nn.Linear(16, 32), gg.nn.Tanh(), gg.nn.Linear(32, 32), gg.nn.ReLU(),
                                 gg.nn.Linear(32, 4))
    model.to(device)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((24, 16)).astype(np.float32)
    y = rng.integers(0, 4, 24).astype(np.int32)
    return model, x, y


class _default_device:
    def __init__(self, spec):
        self.spec = spec

    def __enter__(self):
        self.prev = gg.set_device(self.spec)

    def __exit__(self, *exc):
        gg.set_device(self.prev)


def _train(device, mode: str, steps: int = 3):
    """Parameters after ``steps`` SGD steps of the MLP on ``device`` in ``mode``, and the losses."""
    with _default_device(device):
        model, x, y = _mlp_and_data(device)
        # SGD with momentum: the parameters' error stays proportional to the gradients' (Adam's
        # normalised steps turn a float16-tile rounding of a near-zero gradient into a full step)
        opt = gg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        gx, gy = gg.tensor(x), gg.tensor(y, dtype=gg.int32)

        def loss_fn(a, b):
            return gg.nn.functional.cross_entropy(model(a), b)

        losses = []
        if mode == "capture":
            step = gg.capture_step(loss_fn, opt)
            for _ in range(steps):
                losses.append(float(step(gx, gy)))
        else:
            with gg.graph_mode(mode == "graph"):
                for _ in range(steps):
                    opt.zero_grad()
                    loss = loss_fn(gx, gy)
                    loss.backward()
                    opt.step()
                    losses.append(loss.item())
        return [p.detach().to("cpu").numpy() for p in model.parameters()], losses, model


@pytest.mark.parametrize("mode", ["eager", "graph", "capture"])
def test_training_step_matches_cpu(mode):
    want, want_losses, _ = _train("cpu", mode)
    got, got_losses, model = _train(DEVICE, mode)
    assert all(p.device == DEVICE for p in model.parameters())
    np.testing.assert_allclose(got_losses, want_losses, rtol=STEP_RTOL, atol=1e-6)
    assert got_losses[-1] < got_losses[0]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=STEP_RTOL, atol=STEP_RTOL * 0.1)


# ---------------------------------------------------------------------------- IEEE signs, addresses
_SIGNED = np.array([0.0, -0.0, 1e-45, -1e-45, 1.0, -3.0, np.inf, -np.inf], np.float32)


@pytest.mark.parametrize("mode", ["eager", "graph", "capture"])
def test_scalar_products_keep_ieee_signed_zeros(mode):
    """x * c on a device gives NumPy's (IEEE, torch's) float32 product, the sign of a zero included:
    GPU scale kernels compute x * c + bias, and a +0.0 bias turned -2.0 * 0.0 into +0.0."""
    cases = {"x * -2.0": (lambda t: t * -2.0, _SIGNED * np.float32(-2.0)),
             "-0.5 * x": (lambda t: -0.5 * t, np.float32(-0.5) * _SIGNED),
             "x * 0.5": (lambda t: t * 0.5, _SIGNED * np.float32(0.5)),   # 1e-45 * 0.5 rounds to +-0
             "x / -2.0": (lambda t: t / -2.0, _SIGNED / np.float32(-2.0))}
    for name, (fn, want) in cases.items():
        if mode == "capture":
            captured = gg.capture(fn)
            got = [np.asarray(captured(_SIGNED.copy())) for _ in range(2)]   # records, then replays
        else:
            with gg.graph_mode(mode == "graph"):
                got = [fn(gg.tensor(_SIGNED, device=DEVICE)).numpy()]
        for g in got:
            np.testing.assert_array_equal(g, want, err_msg=name)
            np.testing.assert_array_equal(np.signbit(g), np.signbit(want), err_msg=f"{name}: signs of zeros")


def test_scaled_gradients_keep_ieee_signed_zeros():
    """The backward of x * c is g * c: a zero incoming gradient keeps its sign through it."""
    x = gg.tensor(np.ones(4, np.float32), device=DEVICE, requires_grad=True)
    upstream = gg.tensor(np.array([0.0, -0.0, 2.0, -0.0], np.float32), device=DEVICE)
    (x * -2.0).backward(upstream)
    want = np.array([0.0, -0.0, 2.0, -0.0], np.float32) * np.float32(-2.0)
    np.testing.assert_array_equal(np.signbit(x.grad.numpy()), np.signbit(want))
    np.testing.assert_array_equal(x.grad.numpy(), want)


def test_data_ptr_is_unique_per_live_allocation():
    """torch's data_ptr() of a device tensor is its device address: the memory of live tensors never
    overlaps, a view points into its base (storage_offset elements in), an empty tensor gives 0."""
    sizes = [1, 3, 64, 1000, 70000, 5]
    live = [gg.zeros(n, device=DEVICE) for n in sizes] + [gg.ones(2, 3, device=DEVICE, dtype=gg.int32)]
    spans = sorted((t.data_ptr(), t.data_ptr() + t.numel() * t.dtype.itemsize) for t in live)
    assert all(start > 0 for start, _ in spans)
    assert all(end <= nxt for (_, end), (nxt, _) in zip(spans, spans[1:])), spans   # disjoint
    base = live[3]
    for view in (base[7:], base.view(10, 100)[2], base.view(10, 100).t()[1]):
        assert view.data_ptr() - base.data_ptr() == view.storage_offset() * 4
    assert base.data_ptr() == base.detach().data_ptr() == base.view(10, 100).data_ptr()   # same memory
    assert gg.zeros(0, device=DEVICE).data_ptr() == 0
    again = [gg.zeros(4, device=DEVICE) for _ in range(3)]
    assert len({t.data_ptr() for t in again + live}) == len(again) + len(live)


def test_trig_of_large_arguments_within_the_documented_range():
    """sin/cos are the device's kernels: on the CPU (libm) every float is reduced exactly; lavapipe's
    Vulkan kernels match NumPy's float64 to 1e-6 up to |x| = 1e7 and drift beyond (README "GPU")."""
    x = np.concatenate([np.linspace(-1e7, 1e7, 20001), [1e5 + 0.5, -3e6 - 0.25]]).astype(np.float32)
    for name, ref in (("sin", np.sin), ("cos", np.cos)):
        got = getattr(gg, name)(gg.tensor(x, device=DEVICE)).numpy()
        np.testing.assert_allclose(got, ref(x.astype(np.float64)), atol=1e-6, rtol=0, err_msg=name)


def test_mixing_devices_raises_torchs_runtime_error():
    """torch raises RuntimeError ("Expected all tensors to be on the same device"); ggmlgrad's
    DeviceError is one (and a ValueError, as before)."""
    if DEVICE.is_host:
        pytest.skip(f"{DEVICE.name} is the CPU")
    a, c23, idx = gg.ones(2, 3, device=DEVICE), gg.ones(2, 3, device="cpu"), gg.tensor([0, 1], device="cpu")
    cases = {"matmul": lambda: a @ gg.ones(3, 2, device="cpu"), "add": lambda: a + c23,
             "cat": lambda: gg.cat([a, c23]), "linear": lambda: gg.nn.functional.linear(a, gg.ones(4, 3, device="cpu")),
             "index_select": lambda: a.index_select(0, idx), "embedding": lambda: gg.nn.functional.embedding(idx, a)}
    for name, fn in cases.items():
        with pytest.raises(RuntimeError, match="different devices") as e:
            fn()
        assert isinstance(e.value, ValueError), name


@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_threads_using_the_device_at_once_get_their_own_values(mode):
    """Uploads, downloads and computes of two Python threads on one device: each gets NumPy's values
    (an upload on one thread while another computed once wrote into the other's tensor)."""
    import threading
    rng = np.random.default_rng(5)
    w = rng.standard_normal((16, 8)).astype(np.float32)
    xs = [rng.standard_normal((40, 16)).astype(np.float32) * (k + 1) for k in range(2)]
    got: list = [[], []]
    errors: list = []

    def work(k):
        try:
            gg.set_device(DEVICE)                      # a new thread starts on the CPU
            gw = gg.tensor(w)
            for i in range(40):
                with gg.graph_mode(mode == "graph"):
                    y = (gg.tensor(xs[k][i:i + 1]) @ gw).tanh()
                got[k].append(y.numpy()[0])
        except BaseException as e:   # reported by the main thread
            errors.append(e)

    ts = [threading.Thread(target=work, args=(k,), daemon=True) for k in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not any(t.is_alive() for t in ts) and not errors, errors
    for k in range(2):
        np.testing.assert_allclose(np.array(got[k]), np.tanh(xs[k].astype(np.float64) @ w), rtol=STEP_RTOL, atol=1e-5)


# ---------------------------------------------------------------------------- capture
def test_capture_replay_is_one_upload_one_compute_one_download():
    """A replay with new NumPy inputs: one packed upload, one graph compute, one download; the
    same inputs again upload nothing (only changed bytes are sent to a device)."""
    model, x, _ = _mlp_and_data(DEVICE)
    captured = gg.capture(lambda t: model(t))
    captured(x)   # records
    x2 = x[::-1].copy()
    gg.reset_counters()
    out = captured(x2)
    c = gg.counters()
    assert (c["uploads"], c["computes"], c["downloads"]) == (1, 1, 1), c
    with gg.no_grad():
        want = model(gg.tensor(x2, device=DEVICE)).numpy()
        cpu_model, _, _ = _mlp_and_data("cpu")      # the same weights (seeded), on the CPU
        on_cpu = cpu_model(gg.tensor(x2, device="cpu")).numpy()
    np.testing.assert_allclose(np.asarray(out), want, rtol=1e-6, atol=1e-7)   # a capture returns NumPy
    np.testing.assert_allclose(np.asarray(out), on_cpu, rtol=STEP_RTOL, atol=STEP_RTOL * 0.1)
    if not DEVICE.is_host:
        gg.reset_counters()
        captured(x2)
        assert (gg.counters()["uploads"], gg.counters()["computes"]) == (0, 1)


def test_capture_with_device_tensor_arguments_matches_eager():
    model, x, _ = _mlp_and_data(DEVICE)
    gx = gg.tensor(x, device=DEVICE)
    captured = gg.capture(lambda t: model(t))
    for _ in range(2):
        out = captured(gx)
    with gg.no_grad():
        want = model(gx).numpy()
    np.testing.assert_allclose(np.asarray(out), want, rtol=1e-6, atol=1e-7)


def test_capture_with_numpy_arrays_runs_on_the_models_device():
    """A capture called with NumPy arrays records on the device of the tensors it reads (the model's),
    uploads the arrays there, and gives the CPU's result within float32 tolerance."""
    model, x, _ = _mlp_and_data(DEVICE)
    cpu_model, _, _ = _mlp_and_data("cpu")
    with _default_device("cpu"):     # the default device is not the model's
        captured = gg.capture(lambda t: model(t))   # before the fix: "on different devices"
        captured(x)
        x2 = x * 0.5   # new values: one packed upload (equal ones would send nothing to a device)
        gg.reset_counters()
        got = captured(x2)
        c = gg.counters()
        with gg.no_grad():
            want = cpu_model(gg.tensor(x2)).numpy()
    assert (c["uploads"], c["computes"], c["downloads"]) == (1, 1, 1), c   # the array's packed upload
    np.testing.assert_allclose(got, want, rtol=STEP_RTOL, atol=STEP_RTOL * 0.1)


# ---------------------------------------------------------------------------- save / load
def test_save_and_load_device_tensors(tmp_path):
    model, _, _ = _mlp_and_data(DEVICE)
    state = model.state_dict()
    for ext in ("safetensors", "gguf"):
        path = tmp_path / f"m.{ext}"
        gg.save(state, str(path))
        loaded = gg.load(str(path), device=DEVICE)
        assert set(loaded) == set(state)
        for k, v in state.items():
            assert loaded[k].device == DEVICE
            np.testing.assert_array_equal(loaded[k].detach().numpy(), v.detach().numpy())
        fresh, _, _ = _mlp_and_data("cpu")
        fresh.load_state_dict(gg.load(str(path)))
        for k, v in fresh.state_dict().items():
            np.testing.assert_array_equal(v.detach().numpy(), state[k].detach().numpy())



# ---------------------------------------------------------------------------- matmul precision
def test_matmul_precision_f32_is_float32_or_refused():
    """``matmul_precision("f32")`` gives float32 products, or (Vulkan with float16 tiles) a clear error."""
    rng = np.random.default_rng(4)
    a, b = (rng.standard_normal((64, 64)).astype(np.float32) for _ in range(2))
    ref = a.astype(np.float64) @ b.astype(np.float64)
    ga, gb = gg.tensor(a), gg.tensor(b)
    with gg.local_mode(matmul_precision="f32"):
        if _VK_F16_TILES:
            for fn in (lambda: ga @ gb, lambda: gg.nn.functional.linear(ga, gb)):
                with pytest.raises(RuntimeError, match="GGML_VK_DISABLE_F16=1"):
                    fn().numpy()
            return
        got = (ga @ gb).numpy()
        lin = gg.nn.functional.linear(ga, gg.tensor(b.T.copy())).numpy()
    for r in (got, lin):
        assert np.max(np.abs(r - ref)) / np.max(np.abs(ref)) < 2e-6


def test_tolerance_table_names_real_ops():
    from ggmlgrad.testing.opinfo import all_opinfos
    names = {info.name for info in all_opinfos()}
    assert set(MATMUL_OPS_TOLERANCE) <= names, sorted(set(MATMUL_OPS_TOLERANCE) - names)


def test_attention_matches_the_cpu():
    """Attention on the device (composed there: ggml's Vulkan flash kernel gave zeros) against the CPU."""
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((1, 2, 3, 4)).astype(np.float32) for _ in range(3))
    sdpa = gg.nn.functional.scaled_dot_product_attention
    got = sdpa(gg.tensor(q), gg.tensor(k), gg.tensor(v)).numpy()
    with _default_device("cpu"):
        want = sdpa(gg.tensor(q), gg.tensor(k), gg.tensor(v)).numpy()
    np.testing.assert_allclose(got, want, rtol=5e-3, atol=5e-3)
    assert np.abs(got).max() > 0.1


# ---------------------------------------------------------------------------- ops the device lacks
def _conv_case():
    rng = np.random.default_rng(6)
    return (rng.standard_normal((2, 3, 6, 5)).astype(np.float32), rng.standard_normal((4, 3, 3, 2)).astype(np.float32),
            rng.standard_normal((2, 4, 4, 4)).astype(np.float32))


def _conv_grads(device, graph: bool):
    x, w, g = _conv_case()
    with _default_device(device), gg.graph_mode(graph):
        gx, gw = gg.tensor(x, requires_grad=True), gg.tensor(w, requires_grad=True)
        t = gg.nn.functional.conv_transpose2d(gg.tensor(g), gw)   # col2im (IM2COL_BACK) in the forward
        y = gg.nn.functional.conv2d(gx, gw)
        ((y * gg.tensor(g)).sum() + (t * t).sum()).backward()
        return t.detach().numpy(), gx.grad.numpy(), gw.grad.numpy()


@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_ops_the_device_lacks_give_the_cpus_values_from_the_first_call(mode):
    """conv_transpose2d's col2im and conv2d's input gradient use ggml's IM2COL_BACK, which the Vulkan
    backend lacks: the op runs on the CPU and its result (a graph output in device memory) is a copy
    the device makes. Before: the process aborted (a pre-allocated result on a backend that cannot
    run it), and a first call that split a graph between the devices gave wrong values (0.0 or
    another graph's numbers: the scheduler's copies were split twice)."""
    want = _conv_grads("cpu", mode == "graph")
    for _ in range(2):   # the first call (no plan yet) and a planned one
        got = _conv_grads(DEVICE, mode == "graph")
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=STEP_RTOL, atol=STEP_RTOL)


def test_a_result_placed_on_the_device_for_an_op_it_lacks_raises_naming_both():
    """The placement check before ggml allocates a graph: an op result already in device memory that
    the device cannot compute raises a RuntimeError naming the op and the device (ggml would abort)."""
    from ggmlgrad._ggml import api as ggml_api, lib, new_context
    from ggmlgrad.runtime.memory import Storage
    from ggmlgrad.runtime.placement import check_placement, device_result
    if DEVICE.is_host:
        pytest.skip(f"{DEVICE.name} is host memory: every op has a CPU kernel there")
    ctx = new_context(1 << 16)
    try:
        grad = lib.new_tensor_4d(ctx, gg.float32.ggml_type, 6, 4, 4, 1)
        kernel = lib.new_tensor_4d(ctx, gg.float32.ggml_type, 2, 3, 1, 1)
        node = ggml_api.im2col_back(ctx, grad, kernel, (5, 6, 1, 1), 1, 1, 0, 0, 1, 1)
        if lib.backend_supports_op(DEVICE.backend, node):
            pytest.skip(f"{DEVICE.name} computes IM2COL_BACK itself")
        assert device_result(ctx, node, DEVICE) != node   # what op builders' results get: a copy
        s = Storage(DEVICE, lib.nbytes(node))
        lib.backend_tensor_alloc(s.buffer, node, s.data)
        graph = lib.new_graph_custom(ctx, 16, False)
        lib.build_forward_expand(graph, node)
        with pytest.raises(RuntimeError, match=f"IM2COL_BACK.*{DEVICE.name}"):
            check_placement(DEVICE, graph)
    finally:
        lib.free(ctx)
