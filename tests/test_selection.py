"""Sorting and selection against PyTorch: ties, NaN, errors, return types, gradients at
the selected indices (the registry sweeps cover values, gradcheck and vmap)."""
import numpy as np
import pytest

import microtensor as mt

torch = pytest.importorskip("torch", reason="PyTorch is the oracle of these tests")


def _np(t):
    return np.array(t.detach()._array()) if isinstance(t, mt.Tensor) else t.detach().numpy()


def assert_same(ours, theirs):
    if isinstance(theirs, tuple):
        assert type(ours).__name__ == type(theirs).__name__
        assert ours._fields == ("values", "indices")
        for a, b in zip(ours, theirs):
            assert_same(a, b)
        return
    assert tuple(ours.shape) == tuple(theirs.shape)
    assert ours.dtype.name == str(theirs.dtype).split(".")[-1]
    np.testing.assert_allclose(_np(ours), _np(theirs), equal_nan=True)


TIES = [[1.0, 3.0, 3.0, 2.0, 1.0, 3.0], [2.0, 2.0, 2.0, 1.0, 1.0, 0.0]]
WITH_NAN = [[1.0, float("nan"), 2.0, 0.5], [3.0, 1.0, 0.0, 1.0]]


@pytest.mark.parametrize("data", [TIES, WITH_NAN])
@pytest.mark.parametrize("call", [
    lambda m, x: m.sort(x, 1), lambda m, x: m.sort(x, 1, descending=True),
    lambda m, x: m.sort(x, dim=0, stable=True), lambda m, x: m.argsort(x, 1, descending=True),
    lambda m, x: m.cummax(x, 1), lambda m, x: m.cummin(x, 1), lambda m, x: m.median(x, 1),
    lambda m, x: m.median(x), lambda m, x: m.median(x, 0, keepdim=True),
    lambda m, x: m.kthvalue(x, 2, 1), lambda m, x: x.cumprod(1)])
def test_ties_and_nan_match_torch(call, data):
    assert_same(call(mt, mt.tensor(data)), call(torch, torch.tensor(data)))


def test_mode_ties_match_torch():
    data = [[1.0, 2, 2, 3, 3], [5, 4, 4, 5, 0], [7, 7, 7, 7, 7]]
    assert_same(mt.mode(mt.tensor(data)), torch.mode(torch.tensor(data)))
    assert_same(mt.mode(mt.tensor(data), 0, True), torch.mode(torch.tensor(data), 0, True))


@pytest.mark.parametrize("call", [
    lambda m, x: m.topk(x, 4), lambda m, x: m.topk(x, -1), lambda m, x: m.kthvalue(x, 0),
    lambda m, x: m.kthvalue(x, 4), lambda m, x: m.sort(x, 2), lambda m, x: m.median(x, 2),
    lambda m, x: m.median(x.new_zeros(2, 0), 1), lambda m, x: m.cummax(x, 1),
    lambda m, x: m.mode(x.new_zeros(2, 0), 1)])
def test_errors_match_torch(call):
    with pytest.raises(Exception) as theirs:
        call(torch, torch.tensor([1.0, 2.0, 3.0]))
    with pytest.raises(type(theirs.value), match=str(theirs.value).split("(")[0][:20]):
        call(mt, mt.tensor([1.0, 2.0, 3.0]))


@pytest.mark.parametrize("call", [
    lambda m, x: m.sort(x, 1, True).values, lambda m, x: m.topk(x, 2, 0).values,
    lambda m, x: m.kthvalue(x, 2, 0).values, lambda m, x: m.median(x, 1).values,
    lambda m, x: m.median(x), lambda m, x: m.mode(x, 1).values,
    lambda m, x: m.cummax(x, 1).values, lambda m, x: m.cummin(x, 0).values,
    lambda m, x: m.cumprod(x, 1)])
def test_gradients_go_to_the_selected_indices_as_torch(call):
    data = [[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 0.0, 2.0], [0.0, 0.0, 5.0, 1.0]]
    x, tx = mt.tensor(data, requires_grad=True), torch.tensor(data, requires_grad=True)
    out, tout = call(mt, x), call(torch, tx)
    g = np.linspace(0.5, 2.0, max(tout.numel(), 1)).reshape(tuple(tout.shape))
    out.backward(mt.tensor(g))
    tout.backward(torch.tensor(g, dtype=tout.dtype))
    np.testing.assert_allclose(_np(x.grad), _np(tx.grad), rtol=1e-6)


def test_cumprod_double_backward_with_zeros_matches_torch():
    data = [2.0, 0.0, 3.0, 0.0, 1.5]
    x, tx = mt.tensor(data, requires_grad=True), torch.tensor(data, requires_grad=True)
    (g,) = mt.autograd.grad(x.cumprod(0).sum(), x, create_graph=True)
    (tg,) = torch.autograd.grad(tx.cumprod(0).sum(), tx, create_graph=True)
    np.testing.assert_allclose(_np(g), _np(tg))
    np.testing.assert_allclose(_np(mt.autograd.grad((g * g).sum(), x)[0]),
                               _np(torch.autograd.grad((tg * tg).sum(), tx)[0]))


def test_return_types_are_exported_and_printed_like_torch():
    result = mt.sort(mt.tensor([2.0, 1.0]))
    assert isinstance(result, mt.return_types.sort)
    assert repr(result).startswith("microtensor.return_types.sort(\nvalues=")
    for name in ("topk", "kthvalue", "median", "mode", "cummax", "cummin"):
        assert getattr(mt.return_types, name)._fields == ("values", "indices")


@pytest.mark.parametrize("call", [
    lambda m, x: m.sort(x, -1, True), lambda m, x: m.topk(x, 2, 0),
    lambda m, x: m.kthvalue(x, 1, -1, True), lambda m, x: m.median(x, 0),
    lambda m, x: m.median(x), lambda m, x: m.mode(x, 1), lambda m, x: m.cummax(x, 0),
    lambda m, x: m.cumprod(x, 1), lambda m, x: m.argsort(x, 0)])
def test_vmap_over_any_dim_matches_torch_func(call):
    data = np.random.default_rng(0).permutation(24).reshape(2, 3, 4) / 4.0
    for in_dim in (0, 1, 2):
        ours = mt.vmap(lambda x: call(mt, x), in_dims=in_dim)(mt.tensor(data))
        theirs = torch.func.vmap(lambda x: call(torch, x), in_dims=in_dim)(torch.tensor(data))
        if isinstance(theirs, tuple):
            for a, b in zip(ours, theirs):
                np.testing.assert_allclose(_np(a), _np(b))
        else:
            np.testing.assert_allclose(_np(ours), _np(theirs))
