"""Fixtures shared by the test modules."""
from __future__ import annotations

import pytest

import ggmlgrad as gg


@pytest.fixture(params=[False, True], ids=["eager", "graph"])
def graph(request):
    """Run the test once in eager mode and once in graph mode."""
    with gg.graph_mode(request.param):
        yield request.param


@pytest.fixture(params=[True, False], ids=["flash", "composed"])
def flash(request):
    """Run the test with ggml's flash attention and with the composed matmul + softmax path."""
    from ggmlgrad.ops import nn_ops
    prev = nn_ops.FLASH_ATTENTION
    nn_ops.FLASH_ATTENTION = request.param
    yield request.param
    nn_ops.FLASH_ATTENTION = prev


TEST_DEVICE_ENV = "GGMLGRAD_TEST_DEVICE"


def requested_test_device() -> str:
    """The device ``GGMLGRAD_TEST_DEVICE`` names (``vulkan:0``, ``cuda:0``), or "" when unset."""
    import os
    return os.environ.get(TEST_DEVICE_ENV, "").strip()


def device_or_skip():
    """The requested test device as a gg.Device, or pytest.skip with the reason it is absent."""
    spec = requested_test_device()
    try:
        return gg.runtime.resolve_device(spec or "cpu")
    except ValueError as e:
        pytest.skip(f"{TEST_DEVICE_ENV}={spec}: {e}. Build it with `python -m ggmlgrad build --vulkan` "
                    "(or --cuda), select it with GGMLGRAD_GGML_LIB=<that build>/lib; lavapipe also needs "
                    "GGML_VK_VISIBLE_DEVICES=0")


# ggml's Vulkan matrix-multiply shaders keep their tiles in float16 on a device with float16
# arithmetic (lavapipe has it), whatever matmul_precision says: products carry about 2^-11 relative
# error per operand. Unless the process started with GGML_VK_DISABLE_F16=1 (float32 tiles), the
# ops built on ggml_mul_mat get these tolerances there (tests/test_ops.py, the device tests); every
# other op keeps its OpInfo's, on every device.
MATMUL_OPS_TOLERANCE = {  # op name -> (atol, rtol), forward and gradient: about ten times the
    # 3.3e-4 measured on a 64x64 matmul (inputs rounded to float16, products summed in float32)
    name: (5e-3, 5e-3) for name in (
        "matmul", "mm", "bmm", "linear", "linear_nobias", "einsum", "tensordot", "attention", "outer",
        "baddbmm",                              # beta * input + alpha * bmm (4.9e-4 abs measured)
        "interpolate", "adaptive_avg_pool2d",   # products with resampling/averaging matrices (4.8e-4, 1.9e-4)
        "conv2d", "conv2d_weight_grad",         # windows (im2col) times the weight (2.7e-3, 4.0e-3 on 1e0 values)
        "conv_transpose2d")}                    # its input gradient is a conv2d (1.9e-3 abs on values up to 7)


def float16_tiles() -> bool:
    """Whether the test device multiplies matrices in float16 tiles (Vulkan without GGML_VK_DISABLE_F16)."""
    import os
    return requested_test_device().startswith("vulkan") and "GGML_VK_DISABLE_F16" not in os.environ


def device_tolerances(info) -> tuple[float, float, float, float]:
    """(atol, rtol, grad_atol, grad_rtol) for an OpInfo on the test device: its own, or for an op
    built on the matrix product, at least :data:`MATMUL_OPS_TOLERANCE`'s where the device uses float16 tiles."""
    if float16_tiles() and info.name in MATMUL_OPS_TOLERANCE:
        atol, rtol = MATMUL_OPS_TOLERANCE[info.name]
        return max(atol, info.atol), max(rtol, info.rtol), max(atol, info.grad_atol), max(rtol, info.grad_rtol)
    return info.atol, info.rtol, info.grad_atol, info.grad_rtol


_HOST_MEMORY = ("asserts host-memory semantics: on the CPU t.numpy() and a capture's arrays share the "
                "tensor's memory; a device tensor's memory is not host memory (torch: .numpy() of a CUDA "
                "tensor raises), so NumPy sees copies there")
_CPU_GRAPHS = ("asserts the CPU's graph/transfer counts: on a device a captured step runs its update as a "
               "second graph, and unchanged input bytes are not uploaded again (README \"GPU\"; "
               "tests/test_device_subset.py checks the device's counts)")
_HOST_PATHS = ("asserts that an eager read/write of host memory is copied in place by NumPy with no compute "
               "(tensor/host_writes.py); a device tensor's memory is not host memory, so there the slice, "
               "write or index_select op runs, as the op table and test_writes.py check on the device")
_CPU_ACCEL = ("asserts that the compiled accelerator runs the plan: it runs CPU plans only (a device plan's "
              "compute also holds DEVICE_LOCK, which its C call does not take), so on a device every plan "
              "takes the Python path that the rest of the suite checks there")
# Tests that state what the CPU device does and cannot apply to a device with its own memory: they
# skip, saying why, when GGMLGRAD_TEST_DEVICE names such a device (checked one by one on lavapipe).
# A key is a test, or one parametrization of it ("...::test_x[param]").
CPU_ONLY_TESTS = {
    "tests/test_tensor.py::test_numpy_is_a_view_and_host_reads": _HOST_MEMORY,
    "tests/test_tensor.py::test_array_protocol_honours_numpy2_copy_argument": _HOST_MEMORY,
    "tests/test_capture_args_in_place.py::test_writes_to_the_argument_between_calls_are_read": _HOST_MEMORY,
    "tests/test_capture_replay.py::test_replay_outputs_are_fresh_arrays_the_caller_owns": _HOST_MEMORY,
    "tests/test_capture_replay.py::test_a_replay_downloads_once_and_reads_tensor_arguments_in_place": _HOST_MEMORY,
    "tests/test_capture.py::test_replay_hands_back_fresh_memory_and_writes_arrays_in_place": _HOST_MEMORY,
    "tests/test_capture.py::test_step_writes_arrays_in_place_and_reads_tensors_where_they_lie": _HOST_MEMORY,
    "tests/test_capture_writes.py::test_capture_sees_numpy_writes_to_the_base_of_a_view_it_reads": _HOST_MEMORY,
    "tests/test_capture_writes.py::test_dtypes_aliases_and_a_view_read_after_the_write": _HOST_MEMORY,
    "tests/test_view_memory.py::test_views_of_shared_memory_are_slices_or_strided_reads_of_it": _HOST_MEMORY,
    "tests/test_view_memory.py::test_a_numpy_write_reaches_views_made_before_it_through_every_read": _HOST_MEMORY,
    "tests/test_view_memory.py::test_a_module_forward_replay_reads_a_strided_argument_through_its_strides":
        _HOST_MEMORY,
    "tests/test_view_memory.py::test_autograd_through_a_strided_view_of_shared_memory": _HOST_MEMORY,
    "tests/test_view_memory.py::test_unfold_is_a_view_with_torch_strides": _HOST_MEMORY,
    "tests/test_rnn.py::test_packed_sequence_helpers": "asserts that .to('cpu') of the test's (CPU) tensors is a no-op",
    "tests/test_capture.py::test_captured_step_equals_graph_mode": _CPU_GRAPHS,
    "tests/test_capture.py::test_one_graph_step_reads_every_weight_before_updating_it": _CPU_GRAPHS,
    "tests/test_norm_layers.py::test_captured_step_with_batch_norm_computes_as_often_as_without_and_matches_torch":
        _CPU_GRAPHS,
    "tests/test_capture_creation.py::test_creation_ops_inside_capture_are_recorded_constants": _CPU_GRAPHS,
    "tests/test_host_paths.py::test_setitem_host_path_gives_the_write_ops_bits": _HOST_PATHS,
    "tests/test_host_paths.py::test_setitem_host_path_refreshes_live_views_as_the_write_op_does": _HOST_PATHS,
    "tests/test_host_paths.py::test_index_array_host_path_gives_the_ops_bits": _HOST_PATHS,
    "tests/test_host_paths.py::test_getitem_host_path_gives_the_slice_ops_values": _HOST_PATHS,
    "tests/test_port_checker.py::test_a_supported_script_ports_with_no_missing_name_and_runs":
        "the ported script picks its device as torch scripts do (cuda, else \"cpu\") and makes its "
        "evaluation tensor on the default device, which is the test device here: it would mix devices "
        "in torch too (torch.set_default_device)",
    "tests/test_torch_names.py::test_docstring_examples_run[ggmlgrad.tensor.printing]":
        "the module's docstring examples print tensors made on the CPU (torch's repr adds device='...' elsewhere; "
        "test_torch_names.py::test_set_printoptions_changes_repr checks printing on the device)",
    "tests/test_call_plans.py::test_a_strided_view_input_takes_the_ordinary_path": _HOST_MEMORY,
    "tests/test_host_fast_paths.py::test_row_read_is_the_slice_ops_view_and_lies_in_the_base_memory": _HOST_PATHS,
    "tests/test_host_fast_paths.py::test_row_read_aliases_both_ways_and_shares_the_version_counter": _HOST_PATHS,
    "tests/test_host_fast_paths.py::test_row_read_with_grad_and_without": _HOST_PATHS,
    "tests/test_host_fast_paths.py::test_row_write_gives_the_write_ops_bits_and_version": _HOST_PATHS,
    "tests/test_host_fast_paths.py::test_numpy_is_a_view_of_the_memory_that_keeps_it_alive": _HOST_PATHS,
    "tests/test_host_fast_paths.py::test_tensor_from_an_array_reuses_only_a_dropped_uploads_storage": _HOST_PATHS,
    "tests/test_host_fast_paths.py::test_numpy_of_a_row_is_a_writable_view_of_the_base": _HOST_PATHS,
    "tests/test_accel.py::test_the_op_table_eager_samples_are_the_same_bits_with_and_without": _CPU_ACCEL,
    "tests/test_accel.py::test_graph_plans_and_segments_are_the_same_bits_with_and_without": _CPU_ACCEL,
    "tests/test_accel.py::test_a_failure_status_from_c_fails_as_the_pure_path_does": _CPU_ACCEL,
    "tests/test_accel.py::test_an_armed_fault_or_a_replaced_compute_takes_the_python_path": _CPU_ACCEL,
    "tests/test_accel.py::test_a_thread_setting_change_goes_through_python_then_c": _CPU_ACCEL,
    "tests/test_accel.py::test_an_op_plan_runs_with_or_without_its_optional_storage_argument": _CPU_ACCEL,
    "tests/test_capture.py::test_thread_count_autotuned_on_the_first_replays":
        "asserts the CPU backend's thread tuning (a device's kernels do not take ggmlgrad's thread count)",
}


# Whole files about zero-copy sharing of host memory with NumPy/DLPack (issue 12).
CPU_ONLY_FILES = {"tests/test_interop.py": _HOST_MEMORY, "tests/test_view_storage.py": _HOST_MEMORY,
                  "tests/test_view_random_programs.py": _HOST_MEMORY}


def pytest_collection_modifyitems(config, items):
    """On a test device with its own memory, the tests in :data:`CPU_ONLY_TESTS` and
    :data:`CPU_ONLY_FILES` skip with their reason."""
    if not requested_test_device():
        return
    try:
        if gg.runtime.resolve_device(requested_test_device()).is_host:
            return
    except ValueError:
        return   # the device is absent: every test skips anyway (_on_test_device)
    for item in items:
        reason = (CPU_ONLY_TESTS.get(item.nodeid) or CPU_ONLY_TESTS.get(item.nodeid.split("[")[0])
                  or CPU_ONLY_FILES.get(item.nodeid.split("::")[0]))
        if reason:
            item.add_marker(pytest.mark.skip(reason=f"on {requested_test_device()}: {reason}"))


@pytest.fixture(autouse=True)
def _on_test_device():
    """With ``GGMLGRAD_TEST_DEVICE`` set, every test creates its tensors on that device (the current
    default device), or skips saying why when the loaded ggml lacks it."""
    if not requested_test_device():
        yield None
        return
    prev = gg.set_device(device_or_skip())
    try:
        yield gg.get_device()
    finally:
        gg.set_device(prev)


def pytest_report_header(config):
    spec = requested_test_device()
    return f"ggmlgrad test device: {spec or 'cpu (GGMLGRAD_TEST_DEVICE unset)'}"


def pytest_configure(config):
    """In CI (``CI`` set) torch must be importable: a torch-parity test that skips there proves nothing."""
    import importlib.util
    import os
    if os.environ.get("CI") and importlib.util.find_spec("torch") is None:
        raise pytest.UsageError("CI is set but torch is not installed: `.ci/run` installs torch==2.13.0 "
                                "(the CPU wheel) so that every torch-parity test runs")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """In CI, a skip whose reason names a missing peer (torch, ray) fails the test instead."""
    import os
    outcome = yield
    report = outcome.get_result()
    if not (os.environ.get("CI") and report.skipped):
        return
    reason = str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else str(report.longrepr)
    if "could not import 'torch'" in reason or "could not import 'ray'" in reason:
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, where this peer must be installed: {reason}"


DEVICE_TEST_COMMAND = ("GGMLGRAD_GGML_LIB=$VIRTUAL_ENV/share/ggmlgrad/ggml-0.20.2.post1-vulkan/lib "
                       "GGML_VK_VISIBLE_DEVICES=0 GGMLGRAD_TEST_DEVICE=vulkan:0 python -m pytest "
                       "tests/test_device_subset.py tests/test_device_op_table.py tests/test_ops.py")


def pytest_terminal_summary(terminalreporter):
    """When the device tests skipped (no GPU backend in the loaded ggml: CI, the wheel), say so and
    why at the end of the run, with the command that runs them on a device (README "GPU")."""
    skipped = [r for r in terminalreporter.stats.get("skipped", [])
               if "test_device_" in str(getattr(r, "nodeid", "") or getattr(r, "fspath", ""))]
    if not skipped:
        return
    r = skipped[0]
    reason = str(r.longrepr[-1]) if isinstance(r.longrepr, tuple) else str(r.longrepr)
    terminalreporter.write_line(f"ggmlgrad device tests: {len(skipped)} skipped ({reason.removeprefix('Skipped: ')}). "
                                f"On a device (README \"GPU\"): {DEVICE_TEST_COMMAND}")
