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
