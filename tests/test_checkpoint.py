"""``utils.checkpoint`` against running the function plainly and against PyTorch's
checkpoint: values and gradients (with dropout's random numbers replayed), what each
variant refuses, that a checkpointed block keeps none of its intermediate results, and
``checkpoint_sequential``."""
import gc
import warnings
import weakref

import numpy as np
import pytest

import microtensor as mt
from microtensor.utils.checkpoint import CheckpointError, checkpoint, checkpoint_sequential

torch = pytest.importorskip("torch", reason="PyTorch's checkpoint is the oracle")
import torch.utils.checkpoint as torch_checkpoint  # noqa: E402

VARIANTS = pytest.mark.parametrize("reentrant", [False, True], ids=["non_reentrant",
                                                                    "reentrant"])


def block(lib, x, w, b, *, p=0.0):
    """Ops of several kinds: a product, a layer norm, softmax, an activation, dropout."""
    F = lib.nn.functional
    h = F.layer_norm(F.linear(x, w, b), (w.shape[0],)).tanh()
    h = F.dropout(h, p, training=p > 0)
    return (F.softmax(h, -1) * h.exp()).sum(-1)


def leaves(lib, seed=0):
    rng = np.random.default_rng(seed)
    arrays = (rng.standard_normal((3, 4)), rng.standard_normal((5, 4)), rng.standard_normal(5))
    return [lib.tensor(a, requires_grad=True) for a in arrays]


def values(tensors):
    return [t.detach().numpy() for t in tensors]


@VARIANTS
def test_values_and_gradients_as_running_plainly_and_as_torch(reentrant):
    plain = leaves(mt)
    expected = block(mt, *plain)
    expected.sum().backward()
    ours = leaves(mt)
    result = checkpoint(block, mt, *ours, use_reentrant=reentrant)
    result.sum().backward()
    theirs = leaves(torch)
    torch_checkpoint.checkpoint(block, torch, *theirs, use_reentrant=reentrant).sum().backward()
    np.testing.assert_allclose(result.detach().numpy(), expected.detach().numpy())
    for a, b, c in zip(values(t.grad for t in ours), values(t.grad for t in plain),
                       values(t.grad for t in theirs)):
        np.testing.assert_allclose(a, b, rtol=1e-12)
        np.testing.assert_allclose(a, c, rtol=1e-10)


@VARIANTS
def test_dropout_draws_the_same_numbers_when_recomputed(reentrant):
    """The recomputation replays the forward's random state (else the gradient would be
    that of another mask), and leaves the generator where the forward left it."""
    mt.manual_seed(3)
    plain = leaves(mt)
    expected = block(mt, *plain, p=0.5)
    expected.sum().backward()
    after_plain = mt.rand(3)
    mt.manual_seed(3)
    ours = leaves(mt)
    result = checkpoint(block, mt, *ours, p=0.5, use_reentrant=False) if not reentrant else \
        checkpoint(lambda *a: block(mt, *a, p=0.5), *ours, use_reentrant=True)
    after_forward = mt.rand(3)
    result.sum().backward()
    np.testing.assert_array_equal(after_forward.numpy(), after_plain.numpy())
    np.testing.assert_allclose(result.detach().numpy(), expected.detach().numpy())
    for a, b in zip(values(t.grad for t in ours), values(t.grad for t in plain)):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_non_reentrant_works_with_autograd_grad_and_double_backward():
    x = mt.tensor([0.3, -1.2, 2.0], requires_grad=True)
    reference = mt.tensor([0.3, -1.2, 2.0], requires_grad=True)

    def f(t):
        return (t.sin() * t).exp()
    g, = mt.autograd.grad(checkpoint(f, x, use_reentrant=False).sum(), x, create_graph=True)
    gg, = mt.autograd.grad(g.sum(), x)
    g_ref, = mt.autograd.grad(f(reference).sum(), reference, create_graph=True)
    gg_ref, = mt.autograd.grad(g_ref.sum(), reference)
    np.testing.assert_allclose(g.detach().numpy(), g_ref.detach().numpy())
    np.testing.assert_allclose(gg.numpy(), gg_ref.numpy())


@VARIANTS
def test_a_checkpointed_block_keeps_none_of_its_intermediates(reentrant):
    kept = []

    def f(x, w, b):
        t = mt.nn.functional.linear(x, w, b).tanh()
        e = t.exp()
        kept.extend(weakref.ref(v) for v in (t, e))     # both saved by the plain graph
        return (t * e).sum()
    result = checkpoint(f, *leaves(mt), use_reentrant=reentrant)
    gc.collect()
    assert all(ref() is None for ref in kept)
    kept.clear()
    plain = f(*leaves(mt))
    gc.collect()
    assert all(ref() is not None for ref in kept)      # the plain graph does keep them
    result.backward()
    plain.backward()


def test_reentrant_refuses_grad_and_backward_inputs_as_torch():
    for lib, ck in ((mt, checkpoint), (torch, torch_checkpoint.checkpoint)):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        for run in (lambda y: lib.autograd.grad(y.sum(), x),
                    lambda y: y.sum().backward(inputs=[x])):
            with pytest.raises(RuntimeError, match="use_reentrant=True, .* is incompatible "
                                                   "with .grad"):
                run(ck(lambda t: t.sin(), x, use_reentrant=True))


def test_use_reentrant_left_out_warns_and_means_reentrant():
    x = mt.tensor([1.0, 2.0], requires_grad=True)
    with pytest.warns(UserWarning, match="use_reentrant parameter should be passed"):
        y = checkpoint(lambda t: t.sin(), x)
    assert type(y.grad_fn).__name__ == "CheckpointFunctionBackward"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert checkpoint(lambda t: t.sin(), x, use_reentrant=False).grad_fn is not None


@pytest.mark.parametrize("call", [
    lambda lib, ck, x: ck(lambda t, k: t * k, x, k=2.0, use_reentrant=True),
    lambda lib, ck, x: ck(lambda t: t, x, use_reentrant=True, debug=True),
    lambda lib, ck, x: ck(lambda t: t, x, use_reentrant=False, determinism_check="bogus")])
def test_refusals_as_torch(call):
    x_ours, x_theirs = mt.ones(2, requires_grad=True), torch.ones(2, requires_grad=True)
    with pytest.raises(ValueError) as theirs:
        call(torch, torch_checkpoint.checkpoint, x_theirs)
    with pytest.raises(ValueError) as ours:
        call(mt, checkpoint, x_ours)
    assert str(ours.value).split(":")[0] == str(theirs.value).split(":")[0]


def test_a_recomputation_that_saves_other_tensors_is_an_error():
    calls = []

    def f(t):
        calls.append(1)
        return t.sin() if len(calls) == 1 else t.reshape(1, 2).sin().reshape(2)
    y = checkpoint(f, mt.ones(2, requires_grad=True), use_reentrant=False)
    with pytest.raises(CheckpointError, match="different metadata"):
        y.sum().backward()


def test_checkpoint_sequential_as_torch():
    torch.manual_seed(0)
    theirs = torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(5)]).double()
    ours = mt.nn.Sequential(*[mt.nn.Linear(4, 4) for _ in range(5)]).double()
    ours.load_state_dict({k: mt.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    data = np.random.default_rng(1).standard_normal((2, 4))
    x, tx = mt.tensor(data, requires_grad=True), torch.tensor(data, requires_grad=True)
    out = checkpoint_sequential(ours, 3, x, use_reentrant=False)
    torch_checkpoint.checkpoint_sequential(theirs, 3, tx, use_reentrant=False).sum().backward()
    out.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12)
    for (name, p), tp in zip(ours.named_parameters(), theirs.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-12, err_msg=name)
