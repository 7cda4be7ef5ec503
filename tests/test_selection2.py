"""searchsorted, bucketize, repeat_interleave, nonzero, unique against PyTorch."""
import numpy as np
import pytest

import microtensor as mt

torch = pytest.importorskip("torch")


def th(t):
    return torch.from_numpy(np.array(t.tolist())) if isinstance(t, mt.Tensor) else t


def same(a, e):
    if isinstance(e, (tuple, list)):
        assert len(a) == len(e)
        for x, y in zip(a, e):
            same(x, y)
        return
    assert tuple(a.shape) == tuple(e.shape)
    assert str(a.dtype).split(".")[-1] == str(e.dtype).split(".")[-1]
    np.testing.assert_array_equal(np.array(a.tolist()).reshape(tuple(a.shape)), e.numpy())


SEQ = [-1.0, 0.0, 0.5, 0.5, 2.0]
VALS = [[0.5, -2.0, 3.0], [2.0, 0.0, 1.0]]


@pytest.mark.parametrize("kw", [{}, {"right": True}, {"side": "right"}, {"side": "left"},
                                {"out_int32": True}])
def test_searchsorted_matches_torch(kw):
    s, v = mt.tensor(SEQ), mt.tensor(VALS)
    same(mt.searchsorted(s, v, **kw), torch.searchsorted(th(s), th(v), **kw))
    rows = mt.tensor([[-1.0, 0.0, 1.0, 3.0], [0.0, 0.0, 2.0, 2.5]])
    same(mt.searchsorted(rows, v, **kw), torch.searchsorted(th(rows), th(v), **kw))


def test_searchsorted_sorter_and_errors():
    s, v, order = mt.tensor([2.0, -1.0, 0.5, 0.0]), mt.tensor(VALS), mt.tensor([1, 3, 2, 0])
    same(mt.searchsorted(s, v, sorter=order), torch.searchsorted(th(s), th(v), sorter=th(order)))
    with pytest.raises(RuntimeError, match="side and right can't be set to opposites"):
        mt.searchsorted(s, v, right=True, side="left")
    with pytest.raises(RuntimeError, match="first N-1"):
        mt.searchsorted(mt.zeros(3, 4), mt.zeros(2, 4))


@pytest.mark.parametrize("right", [False, True])
def test_bucketize_matches_torch(right):
    v, b = mt.tensor(VALS), mt.tensor([-1.0, 0.0, 1.0, 2.0])
    same(mt.bucketize(v, b, right=right), torch.bucketize(th(v), th(b), right=right))
    assert not hasattr(v, "bucketize")   # as torch.Tensor


def test_searchsorted_under_vmap_matches_torch():
    rows = mt.tensor([[-1.0, 0.0, 1.0, 3.0], [0.0, 0.0, 2.0, 2.5]])
    v = mt.tensor(VALS)
    same(mt.vmap(mt.searchsorted)(rows, v), torch.vmap(torch.searchsorted)(th(rows), th(v)))
    same(mt.vmap(mt.searchsorted, in_dims=(None, 0))(mt.tensor(SEQ), v),
         torch.vmap(torch.searchsorted, in_dims=(None, 0))(th(mt.tensor(SEQ)), th(v)))


NZ = [[0.0, 1.5, 0.0], [2.0, 0.0, -1.0]]


@pytest.mark.parametrize("x", [NZ, [[0, 3], [0, 0]], 3.0, 0.0, [True, False, True], []])
@pytest.mark.parametrize("as_tuple", [False, True])
def test_nonzero_matches_torch(x, as_tuple):
    t = mt.tensor(x)
    same(mt.nonzero(t, as_tuple=as_tuple), torch.nonzero(torch.tensor(x), as_tuple=as_tuple))
    same(t.nonzero(as_tuple=as_tuple), torch.tensor(x).nonzero(as_tuple=as_tuple))


UX = [[2.0, 1.0, 2.0], [0.0, 1.0, 2.0]]
UR = [[1, 2], [0, 5], [1, 2], [0, 5], [0, 1]]


@pytest.mark.parametrize("x,dim", [(UX, None), (UR, None), (UR, 0), (UR, 1), (UR, -1),
                                   (2.0, None)])
@pytest.mark.parametrize("flags", [(True, False, False), (True, True, False),
                                   (True, False, True), (False, True, True)])
def test_unique_matches_torch(x, dim, flags):
    sorted_, inverse, counts = flags
    got = mt.unique(mt.tensor(x), sorted_, inverse, counts, dim)
    same(got, torch.unique(torch.tensor(x), sorted_, inverse, counts, dim))
    same(mt.tensor(x).unique(sorted=sorted_, return_inverse=inverse, return_counts=counts,
                             dim=dim),
         torch.tensor(x).unique(sorted=sorted_, return_inverse=inverse, return_counts=counts,
                                dim=dim))


@pytest.mark.parametrize("name,aten", [("nonzero", "nonzero"), ("unique", "_unique2")])
def test_dynamic_shape_ops_refuse_vmap_as_torch(name, aten):
    message = f"dynamic shape. Attempted to vmap over aten::{aten}"
    with pytest.raises(RuntimeError, match=message):
        torch.vmap(getattr(torch, name))(torch.ones(2, 3))
    with pytest.raises(RuntimeError, match=message):
        mt.vmap(getattr(mt, name))(mt.ones(2, 3))
    assert mt.nonzero(mt.ones(2, 3)).shape == (6, 2)   # outside vmap, fine


@pytest.mark.parametrize("repeats,dim", [(2, None), (2, 1), (3, -2), ([1, 0, 2], 1),
                                         ([2], 1), (0, 0), ("t2", 0), ("t2", None)])
def test_repeat_interleave_forward_and_grad_match_torch(repeats, dim):
    x = np.arange(6.0).reshape(2, 3) - 2.5
    mr = mt.tensor(repeats) if isinstance(repeats, list) else \
        mt.tensor(2) if repeats == "t2" else repeats
    tr = torch.tensor(repeats) if isinstance(repeats, list) else \
        torch.tensor(2) if repeats == "t2" else repeats
    a = mt.tensor(x, requires_grad=True)
    b = torch.tensor(x, requires_grad=True)
    ya, yb = mt.repeat_interleave(a, mr, dim), torch.repeat_interleave(b, tr, dim)
    same(ya.detach(), yb.detach())
    w = np.arange(np.prod(tuple(yb.shape))).reshape(tuple(yb.shape)) + 1.0
    (ya * mt.tensor(w)).sum().backward()
    (yb * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(np.array(a.grad.tolist()), b.grad.numpy())
    same(a.detach().repeat_interleave(mr, dim), b.detach().repeat_interleave(tr, dim))


def test_repeat_interleave_errors_and_vmap():
    x = mt.ones(2, 3)
    with pytest.raises(RuntimeError, match="repeats must have the same size"):
        mt.repeat_interleave(x, mt.tensor([1, 2]), 1)
    with pytest.raises(RuntimeError, match="repeats must be 0-dim or 1-dim"):
        mt.repeat_interleave(x, mt.tensor([[1]]), 0)
    xs = np.arange(24.0).reshape(4, 2, 3)
    for dim in (None, 0, 1, -1):
        same(mt.vmap(lambda t: mt.repeat_interleave(t, 2, dim))(mt.tensor(xs)),
             torch.vmap(lambda t: torch.repeat_interleave(t, 2, dim))(torch.tensor(xs)))
