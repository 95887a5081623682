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
