"""The ``meta`` device: tensors with sizes, strides, dtype and autograd flags but no data.

Each check runs the same calls on microtensor and on PyTorch and compares what they give:
reprs, the geometry of views and of op results, and the errors of everything that needs
data.  Without PyTorch the comparisons skip; the microtensor-only checks still run.
"""
import copy

import pytest

import microtensor as mt

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (the "
                                                       "reference the checks compare with)")


def both(fn):
    """``fn(lib)`` on microtensor and on PyTorch (microtensor's alone without PyTorch)."""
    return fn(mt), (fn(torch) if torch is not None else None)


def outcome(fn):
    """What ``fn()`` gives: its value, or the exception's type name and message."""
    try:
        return fn()
    except Exception as e:  # the error itself is what is compared
        return type(e).__name__, str(e)


def geometry(t):
    return tuple(t.shape), t.stride(), t.storage_offset(), str(t.dtype).split(".")[1], \
        t.device.type, t.requires_grad, t.is_contiguous()


def test_device_and_factories():
    m = mt.device("meta")
    assert str(m) == "meta" and repr(m) == "device(type='meta')" and m == "meta"
    for t in (mt.empty(2, 3, device="meta"), mt.zeros(2, 3, device=m), mt.ones(2, 3, device="meta"),
              mt.randn(2, 3, device="meta"), mt.full((2, 3), 7.0, device="meta"),
              mt.empty_strided((2, 3), (1, 2), device="meta"), mt.rand(2, 3, device="meta")):
        assert t.is_meta and not t.is_cpu and t.device == m and t.shape == (2, 3)
    assert not mt.zeros(1).is_meta


def test_meta_randn_draws_nothing():
    mt.manual_seed(3)
    mt.randn(5, device="meta")
    after_meta = mt.randn(2)
    mt.manual_seed(3)
    assert mt.equal(mt.randn(2), after_meta)


@needs_torch
@pytest.mark.parametrize("make", [
    lambda L: L.empty(2, 3, device="meta"),
    lambda L: L.zeros((), device="meta"),
    lambda L: L.empty(0, device="meta"),
    lambda L: L.ones(2, dtype=L.int64, device="meta"),
    lambda L: L.ones(2, dtype=L.bool, device="meta"),
    lambda L: L.randn(2, 3, dtype=L.float64, device="meta", requires_grad=True),
    lambda L: L.empty_strided((2, 3), (1, 2), device="meta"),
    lambda L: L.zeros_like(L.zeros(4, 1), device="meta"),
    lambda L: L.zeros(2, 3).to("meta"),
    lambda L: L.eye(3, device="meta"),
    lambda L: L.arange(5, device="meta"),
    lambda L: L.tensor([1.0, 2.0], device="meta"),
    lambda L: L.full_like(L.empty(2, device="meta"), 3),
])
def test_factories_repr_and_storage_as_pytorch(make):
    t, ref = both(make)
    assert repr(t).replace("microtensor.", "torch.") == repr(ref)
    assert geometry(t) == geometry(ref)
    assert t.untyped_storage().nbytes() == ref.untyped_storage().nbytes()
    assert t.element_size() == ref.element_size() and t.nbytes == ref.nbytes
    assert t.untyped_storage().data_ptr() == ref.untyped_storage().data_ptr() == 0


VIEWS = [
    lambda t: t.view(6, 4),
    lambda t: t.reshape(4, 6),
    lambda t: t.t() if t.dim() == 2 else t.transpose(0, 2),
    lambda t: t.transpose(1, 2),
    lambda t: t.permute(2, 0, 1),
    lambda t: t[:, 1:, ::2],
    lambda t: t[1],
    lambda t: t[..., None],
    lambda t: t.unsqueeze(1),
    lambda t: t[:1].expand(5, 3, 4),
    lambda t: t.as_strided((2, 2), (1, 5), 3),
    lambda t: t.transpose(0, 1).unsqueeze(0).squeeze(0),
    lambda t: t.flatten(),
    lambda t: t.unbind(1)[2],
    lambda t: t.narrow(2, 1, 2),
    lambda t: t.detach(),
]


@needs_torch
@pytest.mark.parametrize("view", VIEWS)
def test_views_keep_pytorchs_geometry(view):
    t, ref = both(lambda L: L.empty(2, 3, 4, device="meta", requires_grad=True))
    v, rv = view(t), view(ref)
    assert v.is_meta and geometry(v) == geometry(rv)


OPS = [
    lambda L, t: t + 1,
    lambda L, t: t * t,
    lambda L, t: t.exp(),
    lambda L, t: t.sum(),
    lambda L, t: t.sum(1, keepdim=True),
    lambda L, t: t.mean(0),
    lambda L, t: t @ t.transpose(0, 1),
    lambda L, t: L.nn.functional.linear(t, L.empty(5, 3, device="meta"),
                                        L.empty(5, device="meta")),
    lambda L, t: t.to(L.float64),
    lambda L, t: t.int() + 1.5,
    lambda L, t: L.cat([t, t]),
    lambda L, t: L.stack([t, t], 1),
    lambda L, t: t.max(1),
    lambda L, t: L.relu(t).clone(),
    lambda L, t: t.add_(1),
]


@needs_torch
@pytest.mark.parametrize("fn", OPS)
def test_ops_give_meta_results_of_pytorchs_shape_and_dtype(fn):
    out, ref = both(lambda L: fn(L, L.empty(2, 3, device="meta")))
    outs, refs = (out, ref) if isinstance(out, tuple) else ((out,), (ref,))
    for o, r in zip(outs, refs):
        assert o.is_meta
        assert (tuple(o.shape), str(o.dtype).split(".")[1]) == \
            (tuple(r.shape), str(r.dtype).split(".")[1])


def test_inplace_op_returns_its_meta_target():
    t = mt.empty(2, 3, device="meta")
    assert t.mul_(2) is t and t.is_meta


@needs_torch
@pytest.mark.parametrize("fn", [
    lambda L, t: t.item(),
    lambda L, t: t[0, 0].item(),
    lambda L, t: float(t[0, 0]),
    lambda L, t: bool(t[0, 0]),
    lambda L, t: t.tolist(),
    lambda L, t: t.numpy(),
    lambda L, t: t.cpu(),
    lambda L, t: t.to("cpu"),
    lambda L, t: L.zeros(2, 3).copy_(t),
])
def test_reading_data_raises_as_pytorch(fn):
    t, ref = both(lambda L: L.empty(2, 3, device="meta"))
    assert outcome(lambda: fn(mt, t)) == outcome(lambda: fn(torch, ref))


@pytest.mark.parametrize("fn, error", [
    (lambda t: t.nonzero(), NotImplementedError),
    (lambda t: t.unique(), NotImplementedError),
    (lambda t: t.masked_select(t > 0), NotImplementedError),
    (lambda t: t.flatten().repeat_interleave(t.flatten().long()), RuntimeError),
])
def test_ops_sized_by_values_are_refused(fn, error):
    """PyTorch's exception types; the message names the op."""
    t, ref = both(lambda L: L.empty(2, 3, device="meta"))
    with pytest.raises(error, match="meta"):
        fn(t)
    if ref is not None:
        with pytest.raises(error):
            fn(ref)


def test_copy_into_meta_writes_nothing():
    t = mt.empty(2, 3, device="meta")
    assert t.copy_(mt.ones(2, 3)) is t and t.is_meta


def test_module_to_meta_keeps_parameters():
    model = mt.nn.Sequential(mt.nn.Linear(3, 4), mt.nn.BatchNorm1d(4))
    meta_model = copy.deepcopy(model).to("meta")
    for p, q in zip(meta_model.parameters(), model.parameters()):
        assert isinstance(p, mt.nn.Parameter) and p.is_meta and p.requires_grad
        assert p.shape == q.shape and not q.is_meta
    assert all(b.is_meta for b in meta_model.buffers())
    assert meta_model(mt.empty(5, 3, device="meta")).shape == (5, 4)
