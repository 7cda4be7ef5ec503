"""PyTorch's shrink activations, RReLU, margin losses, bilinear, pdist and gumbel_softmax
against PyTorch: values, gradients (kinks included), errors (type and message), the
legacy ``size_average``/``reduce`` flags, modules (signatures, reprs, state_dicts) and
vmap, including vmap of the gradient for the ops written as composites (the registry
sweeps of test_func cover only ops with their own derivative).

The registry sweeps (test_op_registry, test_vmap, test_func) already run every op's
samples through forward-vs-torch, gradcheck, gradgradcheck and the vmap checks."""
import inspect
import warnings

import numpy as np
import pytest

import microtensor as mt
import microtensor.nn as nn
import microtensor.nn.functional as F
from microtensor.autograd import gradcheck, gradgradcheck

torch = pytest.importorskip("torch", reason="PyTorch is the oracle of these tests")
TF = torch.nn.functional


def to_np(t):
    return np.array(t.detach()._array())


def pair(values, dtype=np.float64, requires_grad=False):
    values = np.asarray(values, dtype=dtype)
    return (mt.tensor(values, requires_grad=requires_grad),
            torch.tensor(values, requires_grad=requires_grad))


def close(ours, theirs, rtol=1e-10, atol=1e-12):
    np.testing.assert_allclose(to_np(ours), theirs.detach().numpy(), rtol=rtol, atol=atol)


def raises_like_torch(ours, theirs, match=None):
    """Both calls raise, the same exception type, with ``match`` in our message (default:
    torch's message)."""
    with pytest.raises(Exception) as expected:
        theirs()
    with pytest.raises(type(expected.value)) as got:
        ours()
    assert (match or str(expected.value)) in str(got.value)


def same_signature(ours, theirs):
    assert inspect.signature(ours) == inspect.signature(theirs).replace(
        parameters=[p.replace(annotation=inspect.Parameter.empty)
                    for p in inspect.signature(theirs).parameters.values()],
        return_annotation=inspect.Signature.empty)


# --------------------------------------------------------------------------- shrinks

SHRINK_POINTS = [-3.0, -1.0, -0.5, -0.25, -1e-9, 0.0, 1e-9, 0.25, 0.5, 1.0, 3.0]


@pytest.mark.parametrize("name", ["hardshrink", "softshrink"])
@pytest.mark.parametrize("lambd", [0.5, 1.0, 0.0])
def test_shrink_values_and_subgradients_match_torch(name, lambd):
    x, tx = pair(SHRINK_POINTS, requires_grad=True)
    y, ty = getattr(F, name)(x, lambd), getattr(TF, name)(tx, lambd)
    close(y, ty, rtol=0, atol=0)
    assert y.grad_fn.name() == type(ty.grad_fn).__name__
    (g,) = mt.autograd.grad((y * y).sum(), [x], create_graph=True)
    (tg,) = torch.autograd.grad((ty * ty).sum(), [tx], create_graph=True)
    close(g, tg, rtol=0, atol=0)        # at +-lambd too: the subgradient PyTorch picks
    (gg,) = mt.autograd.grad(g.sum(), [x])
    (tgg,) = torch.autograd.grad(tg.sum(), [tx])
    close(gg, tgg)
    x32, tx32 = pair(SHRINK_POINTS, np.float32)
    close(getattr(F, name)(x32, lambd), getattr(TF, name)(tx32, lambd), rtol=0, atol=0)


def test_shrinks_keep_nan_and_sign_of_zero():
    x, tx = pair([np.nan, -0.25, 0.25])
    for name in ("hardshrink", "softshrink"):
        ours, theirs = to_np(getattr(F, name)(x)), getattr(TF, name)(tx).numpy()
        np.testing.assert_array_equal(ours, theirs)
        np.testing.assert_array_equal(np.signbit(ours), np.signbit(theirs))


def test_hardshrink_is_a_function_and_a_method():
    x, tx = pair([-1.0, 0.2, 0.7])
    close(mt.hardshrink(x, 0.3), torch.hardshrink(tx, 0.3))
    close(x.hardshrink(lambd=0.6), tx.hardshrink(lambd=0.6))
    assert not hasattr(mt.Tensor, "softshrink") and not hasattr(torch.Tensor, "softshrink")


def test_shrink_errors_match_torch():
    x, tx = pair([1.0, -2.0], np.float32)
    raises_like_torch(lambda: F.softshrink(x, -1.0), lambda: TF.softshrink(tx, -1.0))
    xd, txd = pair([1.0, -2.0])
    raises_like_torch(lambda: F.softshrink(xd, -0.5), lambda: TF.softshrink(txd, -0.5))
    raises_like_torch(lambda: F.softshrink(mt.arange(3)), lambda: TF.softshrink(torch.arange(3)))
    raises_like_torch(lambda: F.hardshrink(mt.arange(3)), lambda: TF.hardshrink(torch.arange(3)))
    # a negative lambd is allowed by hardshrink: nothing is zeroed
    close(F.hardshrink(x, -1.0), TF.hardshrink(tx, -1.0))


def test_shrink_modules_match_torch():
    for name in ("Hardshrink", "Softshrink"):
        same_signature(getattr(nn, name).__init__, getattr(torch.nn, name).__init__)
        for args in ((), (0.3,)):
            ours, theirs = getattr(nn, name)(*args), getattr(torch.nn, name)(*args)
            assert repr(ours) == repr(theirs)
            x, tx = pair([-1.0, -0.4, 0.1, 0.45, 2.0])
            close(ours(x), theirs(tx))


# --------------------------------------------------------------------------- rrelu

RRELU_POINTS = [-4.0, -1.0, -1e-9, 0.0, 1e-9, 0.5, 3.0]


@pytest.mark.parametrize("bounds", [(1.0 / 8, 1.0 / 3), (0.1, 0.6), (0.3, 0.3)])
def test_rrelu_in_evaluation_is_leaky_relu_with_the_mean_slope(bounds):
    x, tx = pair(RRELU_POINTS, requires_grad=True)
    y, ty = F.rrelu(x, *bounds), TF.rrelu(tx, *bounds)
    close(y, ty)
    assert y.grad_fn.name() == type(ty.grad_fn).__name__ == "RreluWithNoiseBackward0"
    (g,) = mt.autograd.grad(y.sum(), [x])
    (tg,) = torch.autograd.grad(ty.sum(), [tx])
    close(g, tg)                        # at 0 too: the slope, as PyTorch's
    close(mt.rrelu(x, *bounds), torch.rrelu(tx, *bounds))


def test_rrelu_in_training_draws_a_slope_per_negative_element():
    lower, upper = 0.1, 0.4
    x = mt.tensor(np.linspace(-3, 3, 4001), requires_grad=True)
    y = F.rrelu(x, lower, upper, training=True)
    xs, ys = to_np(x), to_np(y)
    positive = xs > 0
    np.testing.assert_array_equal(ys[positive], xs[positive])
    slopes = ys[~positive & (xs != 0)] / xs[~positive & (xs != 0)]
    assert slopes.min() >= lower and slopes.max() < upper
    assert len(np.unique(slopes)) > 1900                    # one draw per element
    assert abs(slopes.mean() - (lower + upper) / 2) < 0.01  # uniform: mean 0.25, sd 0.0019
    # the gradient is the slope drawn (1 where positive), as PyTorch's
    (g,) = mt.autograd.grad(y.sum(), [x])
    np.testing.assert_allclose(to_np(g)[~positive & (xs != 0)], slopes, rtol=1e-12)
    np.testing.assert_array_equal(to_np(g)[positive], 1.0)
    assert y.grad_fn.name() == "RreluWithNoiseBackward0"
    # torch's draws follow the same law
    ty = TF.rrelu(torch.tensor(xs), lower, upper, training=True).numpy()
    torch_slopes = ty[~positive & (xs != 0)] / xs[~positive & (xs != 0)]
    assert torch_slopes.min() >= lower and torch_slopes.max() < upper


def test_rrelu_generator_makes_draws_reproducible():
    x = mt.tensor([-1.0, -2.0, -3.0, 4.0])
    first = mt.rrelu(x, training=True, generator=mt.Generator().manual_seed(3))
    second = mt.rrelu(x, training=True, generator=mt.Generator().manual_seed(3))
    mt.testing.assert_close(first, second)
    assert not mt.equal(first, mt.rrelu(x, training=True, generator=mt.Generator().manual_seed(4)))


def test_rrelu_inplace_writes_self_and_differentiates():
    leaf = mt.tensor([-2.0, -1.0, 0.5, 3.0], requires_grad=True)
    y = leaf * 1.0
    out = F.rrelu(y, training=True, inplace=True)
    assert out is y and y.grad_fn.name() == "RreluWithNoiseBackward0"
    (g,) = mt.autograd.grad(out.sum(), [leaf])
    np.testing.assert_allclose(to_np(g)[:2], to_np(out)[:2] / np.array([-2.0, -1.0]))
    np.testing.assert_array_equal(to_np(g)[2:], 1.0)
    x, tx = pair([-2.0, 0.0, 1.0])
    assert F.rrelu_(x, 0.2, 0.4) is x
    TF.rrelu_(tx, 0.2, 0.4)
    close(x, tx)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        F.rrelu(mt.ones(2, requires_grad=True), inplace=True)


def test_rrelu_errors_match_torch():
    x, tx = pair([1.0, -2.0])
    for training in (False, True):
        raises_like_torch(lambda: F.rrelu(x, 0.5, 0.1, training),
                          lambda: TF.rrelu(tx, 0.5, 0.1, training))
        raises_like_torch(lambda: F.rrelu(mt.arange(3), training=training),
                          lambda: TF.rrelu(torch.arange(3), training=training))
    before = to_np(x)
    with pytest.raises(RuntimeError):
        F.rrelu_(x, 0.5, 0.1, True)
    np.testing.assert_array_equal(to_np(x), before)     # a refused call changes nothing


def test_rrelu_module_follows_training_mode():
    same_signature(nn.RReLU.__init__, torch.nn.RReLU.__init__)
    for args in ((), (0.1, 0.3, True)):
        assert repr(nn.RReLU(*args)) == repr(torch.nn.RReLU(*args))
    module = nn.RReLU(0.1, 0.3)
    x, tx = pair([-1.0] * 50 + [2.0])
    trained = to_np(module(x))
    assert len(np.unique(trained[:50])) > 40
    module.eval()
    close(module(x), torch.nn.RReLU(0.1, 0.3).eval()(tx))


def test_rrelu_under_vmap():
    x = -mt.ones(3, 5, dtype=mt.float64)
    with pytest.raises(RuntimeError, match="randomness"):
        mt.vmap(lambda t: F.rrelu(t, training=True))(x)
    different = to_np(mt.vmap(lambda t: F.rrelu(t, training=True), randomness="different")(x))
    assert not np.allclose(different[0], different[1])
    same = to_np(mt.vmap(lambda t: F.rrelu(t, training=True), randomness="same")(x))
    np.testing.assert_array_equal(same[0], same[1])
    assert (-same >= 1 / 8).all() and (-same < 1 / 3).all()
    with warnings.catch_warnings():
        warnings.simplefilter("error")       # the per-sample loop would warn
        ev = mt.vmap(lambda t: F.rrelu(t, 0.2, 0.4))(x)
    np.testing.assert_allclose(to_np(ev), -0.3)
