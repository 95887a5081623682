"""TensorDataset and DataLoader: batching, dtypes, drop_last, reproducible shuffles."""
from __future__ import annotations

import numpy as np
import pytest

import ggmlgrad as gg
from ggmlgrad.data import DataLoader, Dataset, TensorDataset


def test_tensor_dataset_rows_and_validation():
    x = np.arange(12.0).reshape(6, 2)
    y = np.arange(6)
    ds = TensorDataset(x, y)
    assert len(ds) == 6
    r = ds[4]
    np.testing.assert_array_equal(r[0], [8.0, 9.0])
    assert r[1] == 4
    with pytest.raises(ValueError, match="size mismatch"):
        TensorDataset(x, np.arange(5))
    with pytest.raises(TypeError, match="dtype"):
        TensorDataset(np.array(["a", "b"]))
    t = TensorDataset(gg.tensor(x))           # tensors are accepted too
    np.testing.assert_array_equal(t[5][0], [10.0, 11.0])


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
def test_batches_in_order_with_dtypes(graph):
    x = np.arange(14.0).reshape(7, 2)
    y = np.arange(7)
    with gg.graph_mode(graph):
        batches = list(DataLoader(TensorDataset(x, y), batch_size=3))
        assert len(batches) == 3
        xb, yb = batches[0]
        assert isinstance(xb, gg.Tensor) and xb.dtype is gg.float32 and yb.dtype is gg.int32
        np.testing.assert_array_equal(np.concatenate([b[0].numpy() for b in batches]), x)
        np.testing.assert_array_equal(np.concatenate([b[1].numpy() for b in batches]), y)
        assert batches[-1][0].shape == (1, 2)


def test_drop_last_and_len():
    ds = TensorDataset(np.zeros((10, 1)))
    assert len(DataLoader(ds, batch_size=4)) == 3
    dl = DataLoader(ds, batch_size=4, drop_last=True)
    assert len(dl) == 2
    assert [b[0].shape for b in dl] == [(4, 1), (4, 1)]


def test_shuffle_is_a_permutation_reproducible_and_new_each_epoch():
    x = np.arange(20.0)
    dl = DataLoader(TensorDataset(x), batch_size=6, shuffle=True, seed=123)
    e1 = np.concatenate([b[0].numpy() for b in dl])
    e2 = np.concatenate([b[0].numpy() for b in dl])
    assert sorted(e1) == list(x) and sorted(e2) == list(x)
    assert not np.array_equal(e1, x) and not np.array_equal(e1, e2)
    again = DataLoader(TensorDataset(x), batch_size=6, shuffle=True, seed=123)
    np.testing.assert_array_equal(np.concatenate([b[0].numpy() for b in again]), e1)
    np.testing.assert_array_equal(np.concatenate([b[0].numpy() for b in again]), e2)
    # the expected order is NumPy's permutation from that seed
    np.testing.assert_array_equal(e1, x[np.random.default_rng(123).permutation(20)])


def test_seed_from_manual_seed():
    x = np.arange(10.0)
    gg.manual_seed(7)
    a = np.concatenate([b[0].numpy() for b in DataLoader(TensorDataset(x), batch_size=3, shuffle=True)])
    gg.manual_seed(7)
    b = np.concatenate([b[0].numpy() for b in DataLoader(TensorDataset(x), batch_size=3, shuffle=True)])
    np.testing.assert_array_equal(a, b)


def test_loader_state_dict_resumes_the_shuffle_sequence():
    x = np.arange(10.0)
    dl = DataLoader(TensorDataset(x), batch_size=5, shuffle=True, seed=1)
    list(dl)
    sd = dl.state_dict()
    nxt = np.concatenate([b[0].numpy() for b in dl])
    dl2 = DataLoader(TensorDataset(x), batch_size=5, shuffle=True, seed=99)
    dl2.load_state_dict(sd)
    np.testing.assert_array_equal(np.concatenate([b[0].numpy() for b in dl2]), nxt)


def test_generic_dataset_with_dict_samples():
    class Squares(Dataset):
        def __len__(self):
            return 5

        def __getitem__(self, i):
            return {"x": np.array([i, i * i], np.float32), "label": i % 2}

    batches = list(DataLoader(Squares(), batch_size=2))
    assert [b["x"].shape for b in batches] == [(2, 2), (2, 2), (1, 2)]
    np.testing.assert_array_equal(batches[1]["x"].numpy(), [[2, 4], [3, 9]])
    assert batches[1]["label"].dtype is gg.int32 and batches[1]["label"].tolist() == [0, 1]


def test_refusals():
    ds = TensorDataset(np.zeros(3))
    with pytest.raises(ValueError, match="batch_size"):
        DataLoader(ds, batch_size=0)
    with pytest.raises(TypeError, match="__len__"):
        DataLoader(object())


def test_training_loop_with_loader():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 3)).astype(np.float32)
    true_w = np.array([[1.0], [-2.0], [0.5]], np.float32)
    y = x @ true_w
    w = gg.zeros(3, 1, requires_grad=True)
    opt = gg.optim.SGD([w], lr=0.1)
    for _ in range(30):
        for xb, yb in DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True, seed=0):
            opt.zero_grad()
            ((xb @ w - yb) ** 2).mean().backward()
            opt.step()
    np.testing.assert_allclose(w.detach().numpy(), true_w, atol=1e-3)
