"""Counters for diagnosis and tests: graph computes, transfers, drains.

A test can assert "this step ran in N computes" by reading ``counters()``
before and after.
"""
from __future__ import annotations

from collections import Counter, deque


class Tally(Counter):
    """A ``Counter`` whose ``c[key] += 1`` costs half as much (every eager op counts two): it deletes
    with dict's own ``__delitem__`` (a missing key raises KeyError; nothing deletes a counter's keys),
    so the interpreter stores into it with dict's C slot instead of looking ``__setitem__`` up."""

    __slots__ = ()
    __delitem__ = dict.__delitem__


class _Counters:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.computes = Tally()          # by site (drain reason)
        self.drains = Tally()            # by reason, including empty/failed ones that computed nothing
        self.uploads = Tally()           # by site
        self.upload_bytes = Tally()
        self.downloads = Tally()
        self.download_bytes = Tally()
        self.nodes = deque(maxlen=1000)  # graph node counts of the last computes
        self.failed = 0
        self.call_plan_hits = 0          # eager calls computed by their call plan (tensor/call_plans.py)
        self.graph_call_plan_hits = 0         # graph-mode calls recorded by their graph call plan (engine/graph_call_plans.py)

    def totals(self) -> tuple:
        """(drains, computes, uploads, downloads, failed drains): what a call plan's learning compares
        before and after the call it watches (a planned call adds nothing else the engine counts)."""
        return (sum(self.drains.values()), sum(self.computes.values()), sum(self.uploads.values()),
                sum(self.downloads.values()), self.failed)

    def compute(self, site: str, n_nodes: int) -> None:
        self.computes[site] += 1
        self.nodes.append(n_nodes)

    def snapshot(self) -> dict:
        return {
            "computes": sum(self.computes.values()),
            "computes_by_site": dict(self.computes),
            "drains_by_reason": dict(self.drains),
            "uploads": sum(self.uploads.values()),
            "uploads_by_site": dict(self.uploads),
            "upload_bytes": sum(self.upload_bytes.values()),
            "downloads": sum(self.downloads.values()),
            "downloads_by_site": dict(self.downloads),
            "download_bytes": sum(self.download_bytes.values()),
            "last_graph_nodes": self.nodes[-1] if self.nodes else 0,
            "failed_drains": self.failed,
            "call_plan_hits": self.call_plan_hits,
            "graph_call_plan_hits": self.graph_call_plan_hits,
        }


COUNTERS = _Counters()


def counters() -> dict:
    """A snapshot of the engine counters.

    >>> import ggmlgrad as gg
    >>> before = gg.counters()["computes"]
    """
    return _current().counters.snapshot()


def reset_counters() -> None:
    _current().counters.reset()


def graph_node_counts() -> list[int]:
    """Node counts of recent graph computes, oldest first."""
    return list(_current().counters.nodes)


def _current():
    from .context import current  # the context module imports this one
    return current()
