"""einsum and the contractions, scaled_dot_product_attention and MultiheadAttention against
PyTorch: values, gradients, errors, vmap and per-sample gradients."""
import math

import numpy as np
import pytest

import microtensor as mt
import microtensor.nn.functional as F
from microtensor.func import functional_call, grad, vmap
from microtensor.autograd.gradcheck import gradgradcheck

torch = pytest.importorskip("torch", reason="PyTorch is the oracle of these tests")

rng = np.random.default_rng(0)


def pair(*shape):
    a = rng.standard_normal(shape)
    return mt.tensor(a, dtype=mt.float64), torch.tensor(a, dtype=torch.float64)


def arr(t):
    return np.asarray(t.detach()._array())


# ------------------------------------------------------------------ einsum

EQUATIONS = [("ij,jk->ik", (2, 3), (3, 4)), ("...ij,...jk", (2, 1, 2, 3), (4, 3, 2)),
             ("bhqd,bhkd->bhqk", (2, 2, 3, 4), (2, 2, 5, 4)), ("ii->i", (3, 3)),
             ("iij->ji", (2, 2, 3)), ("i,i", (4,), (4,)), ("ij->", (2, 3)),
             ("abc,cd,bd->da", (2, 3, 4), (4, 5), (3, 5)), ("i...->...i", (2, 3, 4))]


@pytest.mark.parametrize("equation, shapes", [(e[0], e[1:]) for e in EQUATIONS])
def test_einsum_values_gradients_and_second_order_match_torch(equation, shapes):
    pairs = [pair(*s) for s in shapes]
    ours = [p[0].requires_grad_() for p in pairs]
    theirs = [p[1].requires_grad_() for p in pairs]
    out, expected = mt.einsum(equation, *ours), torch.einsum(equation, *theirs)
    assert tuple(out.shape) == tuple(expected.shape)
    np.testing.assert_allclose(arr(out), expected.detach().numpy(), rtol=1e-10, atol=1e-12)
    seed = rng.standard_normal(tuple(expected.shape))
    grads = mt.autograd.grad(out, ours, mt.tensor(seed))
    tgrads = torch.autograd.grad(expected, theirs, torch.tensor(seed))
    for g, tg in zip(grads, tgrads):
        np.testing.assert_allclose(arr(g), tg.numpy(), rtol=1e-10, atol=1e-12)
    assert gradgradcheck(lambda *xs: mt.einsum(equation, *xs), tuple(ours))


@pytest.mark.parametrize("equation, shapes", [
    ("ij,jk->ik", [(2, 3), (4, 5)]), ("ij,jk", [(2, 3)]), ("ij", [(2, 3), (2, 3)]), ("ij->i", [(2, 3, 4)]),
    ("ij->k", [(2, 3)]), ("ij->ii", [(2, 2)]), ("i.j->i", [(2, 3)]), ("i1->i", [(2, 3)])])
def test_einsum_errors_match_torch(equation, shapes):
    ours = [pair(*s)[0] for s in shapes]
    theirs = [torch.zeros(s, dtype=torch.float64) for s in shapes]
    with pytest.raises(Exception) as expected:
        torch.einsum(equation, *theirs)
    with pytest.raises(type(expected.value)):
        mt.einsum(equation, *ours)


def test_einsum_refuses_mixed_dtypes_as_torch():
    with pytest.raises(RuntimeError, match="expected scalar type"):
        mt.einsum("i,i", mt.ones(2), mt.ones(2, dtype=mt.float64))


def test_einsum_under_nested_vmap_is_one_physical_einsum():
    """A batched and an unbatched operand, two vmap levels: a fresh letter per level."""
    (a, ta), (b, tb), (c, tc) = pair(2, 3, 4, 5), pair(3, 5, 6), pair(2, 6)
    f = vmap(vmap(lambda x, y, z: mt.einsum("ij,jk,k->i", x, y, z), (0, 0, None)),
             (0, None, 0))
    expected = torch.func.vmap(torch.func.vmap(lambda x, y, z: torch.einsum(
        "ij,jk,k->i", x, y, z), (0, 0, None)), (0, None, 0))(ta, tb, tc)
    np.testing.assert_allclose(arr(f(a, b, c)), expected.numpy(), rtol=1e-10)


def test_einsum_per_sample_gradients_match_torch_func():
    (w, tw), (x, tx) = pair(4, 3), pair(5, 2, 4)

    def loss(lib, weight, sample):
        return lib.einsum("ni,io->no", sample, weight).tanh().sum()
    ours = vmap(grad(lambda wt, s: loss(mt, wt, s)), (None, 0))(w, x)
    theirs = torch.func.vmap(torch.func.grad(lambda wt, s: loss(torch, wt, s)), (None, 0))(tw, tx)
    np.testing.assert_allclose(arr(ours), theirs.numpy(), rtol=1e-10)


# ------------------------------------------------------------------ contractions

@pytest.mark.parametrize("name, args, kwargs", [
    ("tensordot", [(2, 3, 4), (4, 3, 2)], {"dims": ([1, 2], [1, 0])}),
    ("baddbmm", [(2, 3, 4), (2, 3, 5), (2, 5, 4)], {"beta": 0.5, "alpha": 2.0}),
    ("kron", [(2, 3), (3, 2)], {}), ("cross", [(4, 3), (4, 3)], {"dim": 1}),
    ("cdist", [(2, 3, 4), (2, 5, 4)], {"p": 1.5}), ("cosine_similarity", [(3, 4), (3, 4)], {}),
    ("pairwise_distance", [(3, 4), (3, 4)], {"p": 3.0})])
def test_contraction_gradients_match_torch(name, args, kwargs):
    pairs = [pair(*s) for s in args]
    ours = [p[0].requires_grad_() for p in pairs]
    theirs = [p[1].requires_grad_() for p in pairs]
    out, expected = getattr(mt, name)(*ours, **kwargs), getattr(torch, name)(*theirs, **kwargs)
    np.testing.assert_allclose(arr(out), expected.detach().numpy(), rtol=1e-10)
    grads = mt.autograd.grad(out.sum(), ours)
    tgrads = torch.autograd.grad(expected.sum(), theirs)
    for g, tg in zip(grads, tgrads):
        np.testing.assert_allclose(arr(g), tg.numpy(), rtol=1e-9, atol=1e-12)


def test_cross_refuses_different_ranks_as_torch():
    with pytest.raises(RuntimeError, match="same number of dimensions"):
        torch.cross(torch.ones(2, 3), torch.ones(3), dim=1)
    with pytest.raises(RuntimeError, match="same number of dimensions"):
        mt.cross(mt.ones(2, 3), mt.ones(3), dim=1)


def test_cdist_errors_match_torch():
    with pytest.raises(RuntimeError, match="at least 2D"):
        mt.cdist(mt.ones(3), mt.ones(2, 3))
    with pytest.raises(RuntimeError, match="same number of columns"):
        mt.cdist(mt.ones(2, 3), mt.ones(2, 4))
    with pytest.raises(RuntimeError, match="non-negative"):
        mt.cdist(mt.ones(2, 3), mt.ones(2, 3), p=-1.0)
    with pytest.raises(ValueError, match="compute_mode"):
        mt.cdist(mt.ones(2, 3), mt.ones(2, 3), compute_mode="fast")


# ------------------------------------------------------------------ attention

def test_sdpa_matches_torch_with_masks_and_gradients():
    (q, tq), (k, tk), (v, tv) = pair(2, 2, 3, 4), pair(2, 2, 5, 4), pair(2, 2, 5, 3)
    (m, tm), = [pair(3, 5)]
    # a query whose every key is masked: PyTorch's CPU kernel gives zeros, not NaN
    rows = mt.tensor([[True], [False], [True]])
    blocked, tblocked = (m > 0) & rows, (tm > 0) & torch.tensor([[True], [False], [True]])
    inf = mt.zeros(3, 5, dtype=mt.float64).masked_fill(rows.logical_not(), -math.inf)
    for kwargs, tkwargs in [({}, {}), ({"attn_mask": m}, {"attn_mask": tm}),
                            ({"attn_mask": m > 0}, {"attn_mask": tm > 0}),
                            ({"attn_mask": blocked}, {"attn_mask": tblocked}),
                            ({"attn_mask": m + inf}, {"attn_mask": tm + torch.tensor(inf.numpy())}),
                            ({"scale": 0.3}, {"scale": 0.3})]:
        xs = [t.detach().requires_grad_() for t in (q, k, v)]
        txs = [t.detach().requires_grad_() for t in (tq, tk, tv)]
        out = F.scaled_dot_product_attention(*xs, **kwargs)
        expected = torch.nn.functional.scaled_dot_product_attention(*txs, **tkwargs)
        np.testing.assert_allclose(arr(out), expected.detach().numpy(), rtol=1e-10)
        for g, tg in zip(mt.autograd.grad(out.sum(), xs),
                         torch.autograd.grad(expected.sum(), txs)):
            np.testing.assert_allclose(arr(g), tg.numpy(), rtol=1e-9, atol=1e-12)
    with pytest.raises(RuntimeError, match="is_causal"):
        F.scaled_dot_product_attention(q, k, v, m, is_causal=True)


def test_sdpa_dropout_keeps_expectation_and_zeroes_some_weights():
    q = mt.ones(1, 64, 4, dtype=mt.float64)
    v = mt.ones(1, 64, 1, dtype=mt.float64)
    out = F.scaled_dot_product_attention(q, q, v, dropout_p=0.5)
    assert abs(arr(out).mean() - 1.0) < 0.1
    assert arr(out).std() > 0


def _mha_pair(**kwargs):
    torch.manual_seed(0)
    theirs = torch.nn.MultiheadAttention(4, 2, dtype=torch.float64, **kwargs)
    ours = mt.nn.MultiheadAttention(4, 2, dtype=mt.float64, **kwargs)
    ours.load_state_dict({k: mt.tensor(v.detach().numpy())
                          for k, v in theirs.state_dict().items()})
    return ours, theirs


@pytest.mark.parametrize("kwargs, call", [
    ({}, {}), ({"batch_first": True}, {"average_attn_weights": False}),
    ({"kdim": 3, "vdim": 5, "bias": False}, {"need_weights": False})])
def test_multihead_attention_matches_torch(kwargs, call):
    ours, theirs = _mha_pair(**kwargs)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert repr(ours) == repr(theirs)
    shape = (lambda n, s, e: (s, n, e)) if not kwargs.get("batch_first") else \
        (lambda n, s, e: (n, s, e))
    (q, tq), (k, tk), (v, tv) = pair(*shape(2, 3, 4)), pair(*shape(2, 5, kwargs.get("kdim", 4))), \
        pair(*shape(2, 5, kwargs.get("vdim", 4)))
    mask = rng.standard_normal((3, 5))
    padding = np.array([[False] * 4 + [True], [False] * 5])
    out, weights = ours(q, k, v, attn_mask=mt.tensor(mask), key_padding_mask=mt.tensor(padding),
                        **call)
    tout, tweights = theirs(tq, tk, tv, attn_mask=torch.tensor(mask),
                            key_padding_mask=torch.tensor(padding).double().masked_fill(
                                torch.tensor(padding), -np.inf), **call)
    np.testing.assert_allclose(arr(out), tout.detach().numpy(), rtol=1e-10)
    assert (weights is None) == (tweights is None)
    if weights is not None:
        np.testing.assert_allclose(arr(weights), tweights.detach().numpy(), rtol=1e-10)
    out.sum().backward()
    tout.sum().backward()
    for (name, p), (_, tp) in zip(ours.named_parameters(), theirs.named_parameters()):
        np.testing.assert_allclose(arr(p.grad), tp.grad.numpy(), rtol=1e-9, atol=1e-12,
                                   err_msg=name)


@pytest.mark.parametrize("batch_first", [False, True])
def test_multihead_self_attention_with_a_3d_mask_matches_torch(batch_first):
    """One tensor as query, key and value (the packed in-projection), a per-head 3-d mask
    and key padding, in both layouts: outputs, per-head weights and gradients."""
    ours, theirs = _mha_pair(batch_first=batch_first)
    x, tx = pair(2, 3, 4) if batch_first else pair(3, 2, 4)
    x.requires_grad_()
    tx.requires_grad_()
    mask = rng.standard_normal((2 * 2, 3, 3))
    padding = np.array([[False, False, True], [False] * 3])
    out, weights = ours(x, x, x, attn_mask=mt.tensor(mask), key_padding_mask=mt.tensor(padding),
                        average_attn_weights=False)
    tout, tweights = theirs(tx, tx, tx, attn_mask=torch.tensor(mask),
                            key_padding_mask=torch.zeros(2, 3, dtype=torch.float64).masked_fill(
                                torch.tensor(padding), -np.inf), average_attn_weights=False)
    np.testing.assert_allclose(arr(out), tout.detach().numpy(), rtol=1e-10)
    np.testing.assert_allclose(arr(weights), tweights.detach().numpy(), rtol=1e-10, atol=1e-15)
    (out * out).sum().backward()
    (tout * tout).sum().backward()
    for (name, p), (_, tp) in zip(ours.named_parameters(), theirs.named_parameters()):
        np.testing.assert_allclose(arr(p.grad), tp.grad.numpy(), rtol=1e-9, atol=1e-12,
                                   err_msg=name)
    np.testing.assert_allclose(arr(x.grad), tx.grad.numpy(), rtol=1e-9, atol=1e-12)


def test_multihead_attention_unbatched_and_causal_hint():
    ours, theirs = _mha_pair()
    (q, tq), = [pair(3, 4)]
    causal = np.triu(np.ones((3, 3), dtype=bool), 1)
    out, w = ours(q, q, q, attn_mask=mt.tensor(causal), is_causal=True)
    tout, tw = theirs(tq, tq, tq, attn_mask=torch.tensor(causal), is_causal=True)
    np.testing.assert_allclose(arr(out), tout.detach().numpy(), rtol=1e-10)
    np.testing.assert_allclose(arr(w), tw.detach().numpy(), rtol=1e-10)
    with pytest.raises(RuntimeError, match="Need attn_mask"):
        ours(q, q, q, is_causal=True)


def test_per_sample_gradients_of_an_attention_block_match_torch_func():
    """vmap(grad) through MultiheadAttention + LayerNorm + Linear, against torch.func."""
    ours, theirs = _mha_pair(batch_first=True)
    (x, tx), (y, ty) = pair(3, 5, 4), pair(3, 5, 4)
    params = {k: v.detach() for k, v in ours.named_parameters()}
    tparams = {k: v.detach() for k, v in theirs.named_parameters()}

    def loss(lib, call, model, p, sample, target):
        out, _ = call(model, p, (sample.unsqueeze(0),) * 3)
        out = lib.nn.functional.layer_norm(out + sample, (4,))
        return ((out - target) ** 2).mean()

    ours_grads = vmap(grad(lambda p, s, t: loss(mt, functional_call, ours, p, s, t)),
                      (None, 0, 0))(params, x, y)
    their_grads = torch.func.vmap(torch.func.grad(
        lambda p, s, t: loss(torch, torch.func.functional_call, theirs, p, s, t)),
        (None, 0, 0))(tparams, tx, ty)
    for name in their_grads:
        np.testing.assert_allclose(arr(ours_grads[name]), their_grads[name].numpy(),
                                   rtol=1e-8, atol=1e-12, err_msg=name)


@pytest.mark.parametrize("kwargs", [{}, {"norm_first": True, "activation": "gelu",
                                         "batch_first": True, "dropout": 0.0}])
def test_transformer_encoder_matches_torch(kwargs):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(4, 2, 8, dtype=torch.float64, **kwargs)
    theirs = torch.nn.TransformerEncoder(layer, 2, norm=torch.nn.LayerNorm(4, dtype=torch.float64),
                                         enable_nested_tensor=False)
    ours = mt.nn.TransformerEncoder(mt.nn.TransformerEncoderLayer(4, 2, 8, dtype=mt.float64,
                                                                  **kwargs),
                                    2, norm=mt.nn.LayerNorm(4, dtype=mt.float64))
    assert repr(ours) == repr(theirs)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    ours.load_state_dict({k: mt.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    if kwargs.get("dropout") != 0.0:
        ours.eval()
        theirs.eval()
    (x, tx), = [pair(3, 2, 4)]
    length = 2 if kwargs.get("batch_first") else 3
    mask = torch.nn.Transformer.generate_square_subsequent_mask(length, dtype=torch.float64)
    out, expected = ours(x, mask=mt.tensor(mask.numpy())), theirs(tx, mask=mask)
    np.testing.assert_allclose(arr(out), expected.detach().numpy(), rtol=1e-9, atol=1e-12)
    out.pow(2).sum().backward()
    expected.pow(2).sum().backward()
    for (name, p), (_, tp) in zip(ours.named_parameters(), theirs.named_parameters()):
        np.testing.assert_allclose(arr(p.grad), tp.grad.numpy(), rtol=1e-8, atol=1e-11,
                                   err_msg=name)
