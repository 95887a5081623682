"""Writes through views: torch's view ops share memory with their base, and so do ggmlgrad's.

Until issue 12 this file pinned "a write through a view raises RuntimeError" (views were copies).
Views alias now (tensor/views.py), so each write must reach the base as in torch: checked against
the same write on a NumPy view (exact aliasing semantics) and, when installed, against torch.
"""
from __future__ import annotations

import gc

import numpy as np
import pytest

import ggmlgrad as gg

VIEW_WRITES = {  # name -> write through a view of x (shape (2, 3)); both libraries spell it alike
    "index_fill": lambda x: x[0].fill_(5.0),
    "index_setitem": lambda x: x[1].__setitem__(0, -1.0),
    "slice_add": lambda x: x[:, 1:].add_(1.0),
    "view_setitem": lambda x: x.view(-1).__setitem__(0, -1.0),
    "reshape_add": lambda x: x.reshape(6).add_(1.0),
    "flatten_mul": lambda x: x.flatten().mul_(2.0),
    "transpose_zero": lambda x: x.transpose(0, 1).zero_(),
    "permute_sub": lambda x: x.permute(1, 0).sub_(1.0),
    "T_copy": lambda x: x.T.copy_(x.T * 0.0 + 1.0),
    "mT_div": lambda x: x.mT.div_(2.0),
    "unsqueeze_iadd": lambda x: x.unsqueeze(0).__iadd__(1.0),
    "squeeze_clamp": lambda x: x.unsqueeze(0).squeeze(0).clamp_(0.0, 1.0),
    "narrow_fill": lambda x: x.narrow(1, 0, 2).fill_(3.0),
    "chunk_fill": lambda x: x.chunk(2, dim=0)[0].fill_(3.0),
    "split_fill": lambda x: x.split(1, dim=1)[2].fill_(3.0),
    "chain_fill": lambda x: x.reshape(6)[0:2].fill_(9.0),
    "detached_view_fill": lambda x: x[0].detach().fill_(7.0),
}


# the same writes on NumPy views of the same base
NP_WRITES = {
    "index_fill": lambda a: a[0].fill(5.0),
    "index_setitem": lambda a: a[1].__setitem__(0, -1.0),
    "slice_add": lambda a: np.add(a[:, 1:], 1.0, out=a[:, 1:]),
    "view_setitem": lambda a: a.reshape(-1).__setitem__(0, -1.0),
    "reshape_add": lambda a: np.add(a.reshape(6), 1.0, out=a.reshape(6)),
    "flatten_mul": lambda a: np.multiply(a.reshape(-1), 2.0, out=a.reshape(-1)),
    "transpose_zero": lambda a: a.T.fill(0.0),
    "permute_sub": lambda a: np.subtract(a.T, 1.0, out=a.T),
    "T_copy": lambda a: a.T.__setitem__(Ellipsis, 1.0),
    "mT_div": lambda a: np.divide(a.T, 2.0, out=a.T),
    "unsqueeze_iadd": lambda a: np.add(a[None], 1.0, out=a[None]),
    "squeeze_clamp": lambda a: np.clip(a, 0.0, 1.0, out=a),
    "narrow_fill": lambda a: a[:, 0:2].fill(3.0),
    "chunk_fill": lambda a: a[0:1].fill(3.0),
    "split_fill": lambda a: a[:, 2:3].fill(3.0),
    "chain_fill": lambda a: a.reshape(6)[0:2].fill(9.0),
    "detached_view_fill": lambda a: a[0].fill(7.0),
}


def _base():
    return np.arange(6, dtype=np.float32).reshape(2, 3) / 4 - 0.5


def _expected(case):
    a = _base()
    NP_WRITES[case](a)
    return a


@pytest.mark.parametrize("case", sorted(VIEW_WRITES))
def test_torch_writes_through_the_view(case):
    torch = pytest.importorskip("torch")
    x = torch.tensor(_base())
    VIEW_WRITES[case](x)
    np.testing.assert_allclose(x.numpy(), _expected(case), rtol=1e-6)


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
@pytest.mark.parametrize("case", sorted(VIEW_WRITES))
def test_write_through_a_view_reaches_the_base(case, graph):
    with gg.graph_mode(graph):
        x = gg.tensor(_base())
        VIEW_WRITES[case](x)
        assert not np.array_equal(_expected(case), _base())   # each write changes something
        np.testing.assert_allclose(x.numpy(), _expected(case), rtol=1e-6)


def test_the_view_keeps_its_base_alive():
    # The view holds its base (torch's ._base), so the write reaches it in every mode whatever
    # the GC does; .clone() is the explicit copy.
    for graph in (False, True):
        with gg.graph_mode(graph):
            y = gg.tensor(_base()).reshape(6)
            gc.collect()
            y.add_(1.0)
            np.testing.assert_allclose(y.numpy(), _base().reshape(6) + 1.0)
            z = gg.tensor(_base())
            c = z.reshape(6).clone()
            c.add_(1.0)
            np.testing.assert_allclose(c.numpy(), _base().reshape(6) + 1.0)
            np.testing.assert_array_equal(z.numpy(), _base())


def test_copies_in_torch_too_stay_writable():
    x = gg.tensor(_base())
    picked = x[gg.tensor([1, 0])]               # advanced indexing: a copy in torch as well
    picked.add_(1.0)
    c = x[0].clone()                            # an explicit copy
    c.fill_(4.0)
    x[0] = 5.0                                  # writing the base itself
    x[0:1].clone().zero_()
    expected = _base()
    expected[0] = 5.0
    np.testing.assert_array_equal(x.numpy(), expected)
    np.testing.assert_allclose(picked.numpy(), _base()[[1, 0]] + 1.0)
    np.testing.assert_array_equal(c.numpy(), [4.0, 4.0, 4.0])


def test_torch_copies_stay_copies_in_torch():
    torch = pytest.importorskip("torch")
    x = torch.tensor(_base())
    x[torch.tensor([1, 0])].add_(1.0)
    x[0].clone().fill_(4.0)
    np.testing.assert_array_equal(x.numpy(), _base())


def test_out_of_place_use_of_views_is_unchanged():
    x = gg.tensor(_base(), requires_grad=True)
    (x[0] * 2 + x.reshape(6)[:3] + x.T[:, 0]).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [[4.0, 4.0, 4.0], [0.0, 0.0, 0.0]])
