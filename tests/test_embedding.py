"""Embedding: ``embedding``'s gradient conventions (padding row, frequency scaling) against
PyTorch, plainly and per sample under vmap(grad), ``max_norm``'s in-place renorm,
``nn.Embedding``'s arguments, and the errors.  The ops also go through the registry
sweeps (forward, gradcheck where the gradient is the derivative, vmap against a loop)."""
import numpy as np
import pytest

import microtensor as mt
from microtensor import nn
from microtensor.nn import functional as F

torch = pytest.importorskip("torch", reason="PyTorch is the oracle of these tests")
RNG = np.random.default_rng(5)
INDICES = np.array([[1, 3, 3, 0], [2, 2, 2, 4], [1, 0, 4, 4]])


def weights(rows=5, dim=3):
    values = RNG.standard_normal((rows, dim))
    return mt.tensor(values), torch.tensor(values)


def close(ours, theirs, tol=1e-10):
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=tol,
                               atol=tol)


@pytest.mark.parametrize("padding_idx, by_freq", [(None, False), (3, False), (-1, True),
                                                  (None, True), (2, True)])
def test_gradient_conventions_match_torch(padding_idx, by_freq):
    ours, theirs = weights()
    ours.requires_grad_(), theirs.requires_grad_()
    out = F.embedding(mt.tensor(INDICES), ours, padding_idx, scale_grad_by_freq=by_freq)
    expected = torch.nn.functional.embedding(torch.tensor(INDICES), theirs, padding_idx,
                                             scale_grad_by_freq=by_freq)
    close(out, expected)
    upstream = RNG.standard_normal(tuple(expected.shape))
    (out * mt.tensor(upstream)).sum().backward()
    (expected * torch.tensor(upstream)).sum().backward()
    close(ours.grad, theirs.grad)


@pytest.mark.parametrize("padding_idx, by_freq", [(3, False), (None, True), (2, True)])
def test_per_sample_gradients_match_torch_func(padding_idx, by_freq):
    """Counts and the padding row are per sample under vmap (the batching rule offsets
    each sample's indices into its own block when it must)."""
    ours, theirs = weights()
    upstream = RNG.standard_normal(INDICES.shape + (3,))

    def loss(w, idx, up, lib):
        emb = (F if lib is mt else torch.nn.functional).embedding
        return (emb(idx, w, padding_idx, scale_grad_by_freq=by_freq) * up).sum()

    got = mt.func.vmap(mt.func.grad(lambda w, i, u: loss(w, i, u, mt)), in_dims=(None, 0, 0))(
        ours, mt.tensor(INDICES), mt.tensor(upstream))
    want = torch.func.vmap(torch.func.grad(lambda w, i, u: loss(w, i, u, torch)),
                           in_dims=(None, 0, 0))(theirs, torch.tensor(INDICES),
                                                 torch.tensor(upstream))
    close(got, want)


def test_per_sample_weights_take_one_lookup():
    stacked = RNG.standard_normal((3, 5, 2))
    got = mt.vmap(lambda w, i: F.embedding(i, w, padding_idx=2))(mt.tensor(stacked),
                                                                  mt.tensor(INDICES))
    want = np.stack([stacked[b][INDICES[b]] for b in range(3)])
    np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf")])
def test_max_norm_renormalises_the_rows_looked_up_in_place(norm_type):
    ours, theirs = weights()
    ours, theirs = ours * 3, theirs * 3
    indices = np.array([[0, 2], [2, 4]])
    out = F.embedding(mt.tensor(indices), ours, max_norm=1.5, norm_type=norm_type)
    expected = torch.nn.functional.embedding(torch.tensor(indices), theirs, max_norm=1.5,
                                             norm_type=norm_type)
    close(out, expected, 1e-12)
    close(ours, theirs, 1e-12)             # rows 0, 2, 4 scaled, rows 1, 3 untouched


def test_max_norm_under_vmap_renorms_the_shared_weight_by_every_sample():
    ours, theirs = weights()
    ours, theirs = ours * 3, theirs * 3
    mt.vmap(lambda i: F.embedding(i, ours, max_norm=1.0), in_dims=0)(mt.tensor(INDICES))
    torch.nn.functional.embedding(torch.tensor(INDICES), theirs, max_norm=1.0)
    close(ours, theirs, 1e-12)


def test_module_takes_pytorchs_arguments():
    mt.manual_seed(0)
    module = nn.Embedding(6, 4, padding_idx=-2, max_norm=1.0, norm_type=1.0,
                          scale_grad_by_freq=True, sparse=True)
    reference = torch.nn.Embedding(6, 4, padding_idx=-2, max_norm=1.0, norm_type=1.0,
                                   scale_grad_by_freq=True, sparse=True)
    assert repr(module) == repr(reference)
    assert module.padding_idx == 4
    assert not module.weight[4].any().item()
    out = module(mt.tensor([[4, 1, 1]]))
    assert tuple(out.shape) == (1, 3, 4)
    assert (out.abs().sum(-1) <= 1.0 + 1e-6).all().item()
    frozen = nn.Embedding.from_pretrained(mt.ones(3, 2))
    assert not frozen.weight.requires_grad and frozen(mt.tensor([1])).sum().item() == 2


def test_errors_match_torch():
    w = mt.randn(4, 3)
    with pytest.raises(RuntimeError, match="'indices' to have one of the following scalar"):
        mt.embedding(w, mt.tensor([1.0]))
    with pytest.raises(IndexError, match="index out of range in self"):
        mt.embedding(w, mt.tensor([4]))
    with pytest.raises(RuntimeError, match="'weight' must be 2-D"):
        mt.embedding(mt.randn(4), mt.tensor([1]))
    leaf = mt.randn(4, 3, requires_grad=True)
    before = leaf.detach().clone()
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        mt.embedding_renorm_(leaf, mt.tensor([1]), 0.1, 2.0)
    assert mt.equal(leaf.detach(), before)
