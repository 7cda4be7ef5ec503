"""Adaptive pooling in 1-d and 3-d, the ``*_with_indices`` names, max unpooling, LP pooling
and fractional max pooling against PyTorch: values, indices, gradients, result layouts,
errors, modules, and vmap / vmap(grad) as torch.func runs them.  The ops also go through
the registry sweeps (their samples)."""
import inspect
import warnings

import numpy as np
import pytest

import microtensor as mt
from microtensor import nn
from microtensor.autograd import gradcheck, gradgradcheck
from microtensor.nn import functional as F

torch = pytest.importorskip("torch", reason="PyTorch is the test oracle")
TF = torch.nn.functional
RNG = np.random.default_rng(7)


def distinct(*shape):
    """Values without ties (the max's gradient is then defined everywhere)."""
    values = RNG.permutation(int(np.prod(shape))).reshape(shape) / np.prod(shape)
    return mt.tensor(values), torch.tensor(values)


def close(ours, theirs, tol=1e-7):
    assert tuple(ours.shape) == tuple(theirs.shape)
    assert ours.dtype.name == str(theirs.dtype)[6:]
    np.testing.assert_allclose(np.asarray(ours.detach().numpy()), theirs.detach().numpy(),
                               rtol=tol, atol=tol)


def as_tuple(value):
    return value if isinstance(value, tuple) else (value,)


def compare(ours_fn, theirs_fn, x, tx):
    """Outputs (values and indices, when a tuple) agree, and so does the input's
    gradient of a random weighting of the first output."""
    x, tx = x.clone().requires_grad_(), tx.clone().requires_grad_()
    ours, theirs = as_tuple(ours_fn(x)), as_tuple(theirs_fn(tx))
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        close(a, b)
    weights = RNG.standard_normal(tuple(theirs[0].shape))
    (ours[0] * mt.tensor(weights)).sum().backward()
    (theirs[0] * torch.tensor(weights)).sum().backward()
    close(x.grad, tx.grad)


def message(fn):
    """The type and text of what ``fn`` raises (None if nothing)."""
    try:
        fn()
    except Exception as e:      # noqa: BLE001 - compared with PyTorch's
        return type(e).__name__, str(e)
    return None


def assert_errors_alike(call):
    ours = message(lambda: call(F, mt))
    theirs = message(lambda: call(TF, torch))
    assert ours is not None and theirs is not None
    assert ours[0] == theirs[0], (ours, theirs)
    assert ours[1] == theirs[1], (ours, theirs)


def no_fallback(fn, in_dims=0):
    def run(*args):
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message=".*fallback.*")
            return mt.vmap(fn, in_dims=in_dims)(*args)
    return run


def assert_same_signature(name):
    ours, theirs = getattr(F, name), getattr(TF, name)
    if "args" in inspect.signature(theirs).parameters:   # a boolean dispatch: its full form
        theirs = getattr(TF, name + "_with_indices")
    params = [(p.name, p.default) for p in inspect.signature(ours).parameters.values()]
    expected = [(p.name, p.default) for p in inspect.signature(theirs).parameters.values()]
    assert params == expected, name


# --------------------------------------------------------------------------- adaptive pooling

ADAPTIVE_1D = [((2, 3, 7), 3), ((3, 9), 4), ((2, 3, 5), 5), ((2, 2, 6), 1), ((1, 2, 4), 7),
               ((2, 3, 5), (None,))]
ADAPTIVE_3D = [((2, 3, 4, 5, 6), (2, 3, 4)), ((3, 5, 4, 7), 3), ((2, 2, 5, 6, 7), (5, 1, 3)),
               ((1, 2, 3, 3, 3), (2, None, 2)), ((2, 1, 2, 3, 2), (4, 5, 3)),
               ((2, 2, 3, 2, 3), 1)]


@pytest.mark.parametrize("shape, size", ADAPTIVE_1D)
def test_adaptive_max_pool1d_matches_torch(shape, size):
    x, tx = distinct(*shape)
    theirs_size = shape[-1] if size == (None,) else size
    compare(lambda s: F.adaptive_max_pool1d(s, size, return_indices=True),
            lambda s: TF.adaptive_max_pool1d(s, theirs_size, return_indices=True), x, tx)


@pytest.mark.parametrize("shape, size", ADAPTIVE_3D)
def test_adaptive_max_pool3d_matches_torch(shape, size):
    x, tx = distinct(*shape)
    compare(lambda s: F.adaptive_max_pool3d(s, size, True),
            lambda s: TF.adaptive_max_pool3d(s, size, True), x, tx)


@pytest.mark.parametrize("shape, size", ADAPTIVE_3D)
def test_adaptive_avg_pool3d_matches_torch(shape, size):
    x, tx = distinct(*shape)
    compare(lambda s: F.adaptive_avg_pool3d(s, size), lambda s: TF.adaptive_avg_pool3d(s, size),
            x, tx)


def test_adaptive_pools_of_float32_and_non_contiguous_inputs():
    values = RNG.standard_normal((2, 5, 3, 4, 6)).astype(np.float32)
    x, tx = mt.tensor(values).transpose(1, 4), torch.tensor(values).transpose(1, 4)
    for ours, theirs in zip(F.adaptive_max_pool3d(x, (2, 3, 1), True),
                            TF.adaptive_max_pool3d(tx, (2, 3, 1), True)):
        close(ours, theirs, 1e-6)
    close(F.adaptive_avg_pool3d(x, (2, 3, 1)), TF.adaptive_avg_pool3d(tx, (2, 3, 1)), 1e-6)
    for ours, theirs in zip(F.adaptive_max_pool1d(x[0, 0], 4, True),
                            TF.adaptive_max_pool1d(tx[0, 0], 4, True)):
        close(ours, theirs, 1e-6)


def test_adaptive_max_pools_take_nan_and_the_first_maximum_as_torch():
    values = np.array([[[1.0, np.nan, 3.0, np.nan, 2.0, 3.0, 3.0]]])
    for size in (1, 2, 3):
        ours, theirs = F.adaptive_max_pool1d(mt.tensor(values), size, True), \
            TF.adaptive_max_pool1d(torch.tensor(values), size, True)
        np.testing.assert_array_equal(ours[1].numpy(), theirs[1].numpy())
        np.testing.assert_array_equal(ours[0].numpy(), theirs[0].numpy())
    volume = np.array([[3.0, 1.0], [3.0, -np.inf]]).reshape(1, 1, 2, 2, 1)
    ours = F.adaptive_max_pool3d(mt.tensor(volume), 1, True)
    theirs = TF.adaptive_max_pool3d(torch.tensor(volume), 1, True)
    np.testing.assert_array_equal(ours[1].numpy(), theirs[1].numpy())


def test_adaptive_pools_of_empty_batches_and_outputs():
    for shape, size in [((0, 2, 3, 4, 5), 2), ((2, 2, 3, 4, 5), (0, 2, 2))]:
        ours, theirs = F.adaptive_max_pool3d(mt.ones(*shape), size, True), \
            TF.adaptive_max_pool3d(torch.ones(*shape), size, True)
        assert [tuple(t.shape) for t in ours] == [tuple(t.shape) for t in theirs]
        assert [t.dtype.name for t in ours] == ["float32", "int64"]
        assert tuple(F.adaptive_avg_pool3d(mt.ones(*shape), size).shape) == \
            tuple(TF.adaptive_avg_pool3d(torch.ones(*shape), size).shape)
    assert tuple(F.adaptive_max_pool1d(mt.ones(0, 2, 3), 2).shape) == (0, 2, 2)


@pytest.mark.parametrize("call", [
    lambda F, m: F.adaptive_max_pool1d(m.ones(2, 3, 4, 5), 2),
    lambda F, m: F.adaptive_max_pool1d(m.ones(2, 0, 4), 2),
    lambda F, m: F.adaptive_max_pool1d(m.ones(2, 4), (2, 3)),
    lambda F, m: F.adaptive_max_pool1d(m.ones(2, 4, dtype=m.int32), 2),
    lambda F, m: F.adaptive_max_pool1d(m.ones(1, 2, 4), -1),
    lambda F, m: F.adaptive_max_pool3d(m.ones(2, 4), 2),
    lambda F, m: F.adaptive_max_pool3d(m.ones(2, 0, 2, 2, 4), 2),
    lambda F, m: F.adaptive_max_pool3d(m.ones(2, 2, 2, 4), (2, 2)),
    lambda F, m: F.adaptive_max_pool3d(m.ones(2, 2, 2, 4), (2, -1, 1)),
    lambda F, m: F.adaptive_max_pool3d(m.ones(2, 2, 2, 4, dtype=m.int64), 2),
    lambda F, m: F.adaptive_avg_pool3d(m.ones(2, 4), 2),
    lambda F, m: F.adaptive_avg_pool3d(m.ones(2, 0, 2, 2, 4), 2),
    lambda F, m: F.adaptive_avg_pool3d(m.ones(2, 2, 2, 4), (2, 2)),
    lambda F, m: F.adaptive_avg_pool3d(m.ones(2, 2, 2, 4), (2, -1, 2)),
    lambda F, m: F.adaptive_avg_pool3d(m.ones(2, 2, 2, 4, dtype=m.int32), 2),
])
def test_adaptive_errors_as_torch(call):
    assert_errors_alike(call)


def test_adaptive_result_layouts_as_torch():
    """Contiguous results from a channels_last_3d (or transposed) input, but for average
    pooling to one element, which keeps the input's format."""
    x = np.arange(2 * 3 * 4 * 5 * 6, dtype=np.float64).reshape(2, 3, 4, 5, 6)
    ours_in = mt.tensor(x).contiguous(memory_format=mt.channels_last_3d)
    theirs_in = torch.tensor(x).contiguous(memory_format=torch.channels_last_3d)
    for fn in [lambda f, s: f.adaptive_avg_pool3d(s, (2, 3, 4)),
               lambda f, s: f.adaptive_avg_pool3d(s, 1),
               lambda f, s: f.adaptive_max_pool3d(s, (2, 3, 4), True)[0],
               lambda f, s: f.adaptive_max_pool3d(s, (2, 3, 4), True)[1],
               lambda f, s: f.adaptive_max_pool1d(s[0, 0, 0], 3, True)[0]]:
        ours, theirs = fn(F, ours_in), fn(TF, theirs_in)
        assert ours.stride() == theirs.stride()
        np.testing.assert_allclose(ours.numpy(), theirs.numpy())


def test_with_indices_names_return_both_as_torch():
    x, tx = distinct(2, 3, 6, 5, 4)
    pairs = [(lambda f, s: f.max_pool1d_with_indices(s[0, :, :, 0], 2)),
             (lambda f, s: f.max_pool2d_with_indices(s[0, :, :, :, 0], 3, 2, 1)),
             (lambda f, s: f.max_pool3d_with_indices(s, 2, ceil_mode=True)),
             (lambda f, s: f.adaptive_max_pool1d_with_indices(s[0, :, :, 0], 4)),
             (lambda f, s: f.adaptive_max_pool2d_with_indices(s[0, :, :, :, 0], (2, 3))),
             (lambda f, s: f.adaptive_max_pool3d_with_indices(s, (3, 2, 2)))]
    for fn in pairs:
        ours, theirs = fn(F, x), fn(TF, tx)
        assert isinstance(ours, tuple) and len(ours) == 2
        for a, b in zip(ours, theirs):
            close(a, b)
    for name in ["max_pool1d_with_indices", "max_pool2d_with_indices",
                 "max_pool3d_with_indices", "adaptive_max_pool1d_with_indices",
                 "adaptive_max_pool2d_with_indices", "adaptive_max_pool3d_with_indices",
                 "adaptive_max_pool1d", "adaptive_max_pool3d", "adaptive_avg_pool3d"]:
        assert_same_signature(name)


ADAPTIVE_MODULES = ["AdaptiveAvgPool3d((2, None, 3))", "AdaptiveAvgPool3d(1)",
                    "AdaptiveMaxPool1d(3)", "AdaptiveMaxPool1d(2, True)",
                    "AdaptiveMaxPool3d((2, 3, 1))", "AdaptiveMaxPool3d(2, return_indices=True)"]
MODULE_INPUTS = {"1d": (2, 3, 8), "2d": (2, 3, 7, 6), "3d": (2, 2, 4, 5, 4)}


@pytest.mark.parametrize("spec", ADAPTIVE_MODULES)
def test_adaptive_modules_as_torch(spec):
    ours, theirs = eval("nn." + spec), eval("torch.nn." + spec)
    assert repr(ours) == repr(theirs)
    x, tx = distinct(*MODULE_INPUTS[spec.split("(")[0][-2:]])
    compare(ours, theirs, x, tx)


@pytest.mark.parametrize("name, kwargs, spatial", [
    ("adaptive_max_pool1d", dict(output_size=3, return_indices=True), (7,)),
    ("adaptive_max_pool3d", dict(output_size=(2, 3, 2), return_indices=True), (4, 5, 3)),
    ("adaptive_avg_pool3d", dict(output_size=(3, 2, 2)), (4, 5, 3)),
])
@pytest.mark.parametrize("sample_rank", ["batched", "unbatched"])
def test_adaptive_vmap_and_per_sample_gradients_match_torch_func(name, kwargs, spatial,
                                                                  sample_rank):
    shape = (3,) + ((2,) if sample_rank == "batched" else ()) + (2,) + spatial
    x, tx = distinct(*shape)
    ours = no_fallback(lambda s: getattr(F, name)(s, **kwargs))(x)
    theirs = torch.func.vmap(lambda s: getattr(TF, name)(s, **kwargs))(tx)
    for a, b in zip(as_tuple(ours), as_tuple(theirs)):
        close(a, b)
    plain = {k: v for k, v in kwargs.items() if k != "return_indices"}

    def loss(s):
        return getattr(F, name)(s, **plain).sin().sum()

    def tloss(s):
        return getattr(TF, name)(s, **plain).sin().sum()
    close(no_fallback(mt.func.grad(loss))(x), torch.func.vmap(torch.func.grad(tloss))(tx))


def test_adaptive_derivatives_are_differentiable():
    x, _ = distinct(1, 2, 4, 3, 5)
    x.requires_grad_()
    for fn in [lambda s: F.adaptive_max_pool3d(s, (2, 2, 3)),
               lambda s: F.adaptive_avg_pool3d(s, (3, 2, 2)),
               lambda s: F.adaptive_max_pool1d(s[0, 0, 0], 2)]:
        assert gradcheck(fn, (x,))
        assert gradgradcheck(fn, (x,))
