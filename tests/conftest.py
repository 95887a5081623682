"""Fixtures shared by the test modules."""
from __future__ import annotations

import pytest

import ggmlgrad as gg


@pytest.fixture(params=[False, True], ids=["eager", "graph"])
def graph(request):
    """Run the test once in eager mode and once in graph mode."""
    with gg.graph_mode(request.param):
        yield request.param
