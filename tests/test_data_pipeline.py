"""The data pipeline against torch.utils.data: samplers, Subset/ConcatDataset/random_split,
IterableDataset, default_collate, DataLoader's argument rules, and worker processes that prefetch."""
from __future__ import annotations

import collections
import os

import numpy as np
import pytest
import torch
import torch.utils.data as tud

import ggmlgrad as gg
from ggmlgrad import data as gd


# ------------------------------------------------------------------ samplers
def test_sequential_and_batch_samplers_match_torch():
    for n, bs, drop in [(7, 3, False), (7, 3, True), (6, 2, False), (1, 4, False), (0, 2, False)]:
        ours = list(gd.BatchSampler(gd.SequentialSampler(range(n)), bs, drop))
        theirs = list(tud.BatchSampler(tud.SequentialSampler(range(n)), bs, drop))
        assert ours == theirs
        assert len(gd.BatchSampler(range(n), bs, drop)) == len(tud.BatchSampler(range(n), bs, drop))


@pytest.mark.parametrize("replacement,num_samples", [(False, None), (False, 23), (False, 4), (True, None), (True, 30)])
def test_random_sampler_counts_as_torch(replacement, num_samples):
    n = 10
    ours = list(gd.RandomSampler(range(n), replacement=replacement, num_samples=num_samples,
                                 generator=gg.Generator().manual_seed(1)))
    theirs = list(tud.RandomSampler(range(n), replacement=replacement, num_samples=num_samples,
                                    generator=torch.Generator().manual_seed(1)))
    assert len(ours) == len(theirs)
    assert all(0 <= i < n for i in ours)
    if not replacement:   # whole permutations first, then a partial one: each index's count as torch's
        assert collections.Counter(ours).most_common()[0][1] == collections.Counter(theirs).most_common()[0][1]
        assert sorted(ours[:n * (len(ours) // n)]) == sorted(theirs[:n * (len(theirs) // n)])


def test_random_sampler_reproducible_and_fresh_each_pass():
    s = gd.RandomSampler(range(50), generator=gg.Generator().manual_seed(3))
    a, b = list(s), list(s)
    assert sorted(a) == list(range(50)) and a != b
    assert list(gd.RandomSampler(range(50), generator=gg.Generator().manual_seed(3))) == a
    gg.manual_seed(5)
    c = list(gd.RandomSampler(range(50)))
    gg.manual_seed(5)
    assert list(gd.RandomSampler(range(50))) == c


def test_subset_random_and_weighted_samplers():
    idx = [3, 9, 11, 20]
    out = list(gd.SubsetRandomSampler(idx, generator=gg.Generator().manual_seed(0)))
    assert sorted(out) == idx and len(gd.SubsetRandomSampler(idx)) == 4
    w = [0.0, 1.0, 3.0, 0.0]
    draws = list(gd.WeightedRandomSampler(w, 4000, generator=gg.Generator().manual_seed(0)))
    counts = np.bincount(draws, minlength=4)
    assert counts[0] == counts[3] == 0
    assert abs(counts[2] / 4000 - 0.75) < 0.04          # binomial sd ~0.007: 5 sd
    no_rep = list(gd.WeightedRandomSampler([1.0, 2.0, 3.0], 3, replacement=False))
    assert sorted(no_rep) == [0, 1, 2]


@pytest.mark.parametrize("make", [
    lambda m: m.BatchSampler(range(3), 0, False),
    lambda m: m.BatchSampler(range(3), 2, 1),
    lambda m: m.RandomSampler(range(3), replacement=1),
    lambda m: m.RandomSampler(range(3), num_samples=0),
    lambda m: m.WeightedRandomSampler([1.0, 2.0], 0),
])
def test_sampler_argument_errors_as_torch(make):
    with pytest.raises(Exception) as theirs:
        make(tud)
    with pytest.raises(type(theirs.value)):
        make(gd)


# ------------------------------------------------------------------ datasets
def test_subset_concat_random_split_as_torch():
    base = np.arange(10.0)
    ours, theirs = gd.TensorDataset(base), tud.TensorDataset(torch.tensor(base))
    s_o, s_t = gd.Subset(ours, [7, 2, 5]), tud.Subset(theirs, [7, 2, 5])
    assert len(s_o) == len(s_t) and [float(s_o[i][0]) for i in range(3)] == [float(s_t[i][0]) for i in range(3)]
    c_o = gd.ConcatDataset([ours, gd.TensorDataset(base[:3] + 100)])
    c_t = tud.ConcatDataset([theirs, tud.TensorDataset(torch.tensor(base[:3] + 100))])
    assert len(c_o) == len(c_t) and c_o.cumulative_sizes == c_t.cumulative_sizes
    for i in (0, 9, 10, 12, -1, -13):
        assert float(c_o[i][0]) == float(c_t[i][0])
    for bad in (13, -14):
        with pytest.raises(type(_raised(lambda: c_t[bad]))):
            c_o[bad]
    for lengths in ([0.7, 0.2, 0.1], [0.5, 0.5], [3, 7], [1.0]):
        o = gd.random_split(ours, lengths, generator=gg.Generator().manual_seed(0))
        t = tud.random_split(theirs, lengths, generator=torch.Generator().manual_seed(0))
        assert [len(x) for x in o] == [len(x) for x in t]
        assert sorted(i for x in o for i in x.indices) == list(range(10))
    with pytest.raises(ValueError):
        tud.random_split(theirs, [3, 3])
    with pytest.raises(ValueError):
        gd.random_split(ours, [3, 3])


def _raised(fn):
    try:
        fn()
    except Exception as e:       # noqa: BLE001
        return e
    raise AssertionError("expected an error")


class _Stream(gd.IterableDataset):
    """0..n-1, split between workers by get_worker_info (torch's recipe)."""

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        info = gd.get_worker_info()
        lo, step = (0, 1) if info is None else (info.id, info.num_workers)
        return iter(range(lo, self.n, step))

    def __len__(self):
        return self.n


def test_iterable_dataset_batches_as_torch():
    class TStream(tud.IterableDataset):
        def __iter__(self):
            return iter(range(7))
    ours = [b.tolist() for b in gd.DataLoader(_Stream(7), batch_size=3)]
    theirs = [b.tolist() for b in tud.DataLoader(TStream(), batch_size=3)]
    assert ours == theirs
    assert [b.tolist() for b in gd.DataLoader(_Stream(7), batch_size=3, drop_last=True)] == [[0, 1, 2], [3, 4, 5]]
    assert len(gd.DataLoader(_Stream(7), batch_size=3)) == 3
    with pytest.raises(ValueError):
        gd.DataLoader(_Stream(3), shuffle=True)


# ------------------------------------------------------------------ collate and loader arguments
Point = collections.namedtuple("Point", "x y")


def test_default_collate_structure_and_dtypes_as_torch():
    samples = [{"a": np.ones(2), "b": (1, 2.5), "c": "s", "d": True, "p": Point(1.0, 2)} for _ in range(3)]
    ours, theirs = gd.default_collate(samples), tud.default_collate(samples)
    assert ours.keys() == theirs.keys()
    assert isinstance(ours["b"], list) and isinstance(theirs["b"], list)
    assert ours["c"] == theirs["c"]
    assert isinstance(ours["p"], Point) and isinstance(theirs["p"], Point)
    pairs = [(ours["a"], theirs["a"]), (ours["b"][0], theirs["b"][0]), (ours["b"][1], theirs["b"][1]),
             (ours["d"], theirs["d"]), (ours["p"].y, theirs["p"].y)]
    rule = {torch.float64: gg.float32, torch.float32: gg.float32, torch.int64: gg.int32, torch.bool: gg.bool}
    for o, t in pairs:
        np.testing.assert_array_equal(o.numpy(), t.numpy())
        assert o.dtype is rule[t.dtype]


@pytest.mark.parametrize("kwargs", [
    dict(shuffle=True, sampler=[0, 1]),
    dict(batch_sampler=[[0, 1]], batch_size=2),
    dict(batch_sampler=[[0, 1]], drop_last=True),
    dict(batch_sampler=[[0, 1]], shuffle=True),
    dict(num_workers=-1),
    dict(prefetch_factor=2),
    dict(persistent_workers=True),
])
def test_loader_argument_errors_as_torch(kwargs):
    with pytest.raises(ValueError):
        tud.DataLoader(tud.TensorDataset(torch.zeros(4)), **kwargs)
    with pytest.raises(ValueError):
        gd.DataLoader(gd.TensorDataset(np.zeros(4)), **kwargs)


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
def test_sampler_batch_sampler_collate_fn_and_batch_none(graph):
    x = np.arange(10.0) * 2
    ds = gd.TensorDataset(x)
    with gg.graph_mode(graph):
        got = [b[0].tolist() for b in gd.DataLoader(ds, batch_size=3, sampler=[9, 0, 4, 4])]
        assert got == [[18.0, 0.0, 8.0], [8.0]]
        got = [b[0].tolist() for b in gd.DataLoader(ds, batch_sampler=[[1, 2], [7]])]
        assert got == [[2.0, 4.0], [14.0]]
        assert len(gd.DataLoader(ds, batch_sampler=[[1, 2], [7]])) == 2
        sums = list(gd.DataLoader(ds, batch_size=4, collate_fn=lambda rows: sum(float(r[0]) for r in rows)))
        assert sums == [12.0, 44.0, 34.0]
        single = list(gd.DataLoader(ds, batch_size=None))
        assert len(single) == 10 and float(single[3][0]) == 6.0
        every = list(gd.DataLoader(ds, batch_size=4, pin_memory=True, drop_last=True,
                                   sampler=gd.RandomSampler(ds, generator=gg.Generator().manual_seed(0))))
        assert len(every) == 2 and all(b[0].shape == (4,) for b in every)


# ------------------------------------------------------------------ worker processes
class _PidRows(gd.Dataset):
    """Row i is (i, the pid of the process that read it)."""

    def __len__(self):
        return 12

    def __getitem__(self, i):
        if i == 11 and os.environ.get("GG_TEST_FAIL_ROW"):
            raise KeyError("row 11 is broken")
        return np.float32(i), np.int32(os.getpid())


def _init(worker_id):
    os.environ["GG_TEST_WORKER"] = str(worker_id)


def test_workers_read_in_other_processes_in_order_and_propagate_errors(monkeypatch):
    loader = gd.DataLoader(_PidRows(), batch_size=5, num_workers=2, worker_init_fn=_init, prefetch_factor=2)
    batches = list(loader)
    assert [b[0].tolist() for b in batches] == [list(map(float, range(0, 5))), list(map(float, range(5, 10))),
                                                 [10.0, 11.0]]
    pids = {int(p) for b in batches for p in b[1].tolist()}
    assert os.getpid() not in pids and len(pids) == 2          # read ahead by two worker processes
    stream = sorted(v for b in gd.DataLoader(_Stream(9), batch_size=2, num_workers=2) for v in b.tolist())
    assert stream == list(range(9))
    monkeypatch.setenv("GG_TEST_FAIL_ROW", "1")
    with pytest.raises(KeyError, match="row 11 is broken"):
        list(gd.DataLoader(_PidRows(), batch_size=4, num_workers=2))


@pytest.mark.parametrize("module", ["data", "data.sampler", "data.dataset", "data.collate", "data.loader",
                                    "data.workers", "tensor.generator"])
def test_docstring_examples_run(module):
    import doctest
    import importlib
    result = doctest.testmod(importlib.import_module(f"ggmlgrad.{module}"), extraglobs={"gg": gg})
    assert result.attempted > 0 and result.failed == 0
