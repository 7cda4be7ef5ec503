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
from test_pooling import distinct   # tie-free values, the shared maker of the pool tests

torch = pytest.importorskip("torch", reason="PyTorch is the test oracle")
TF = torch.nn.functional
RNG = np.random.default_rng(7)


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


def test_long_adaptive_windows_take_the_last_nan_as_torch():
    """A window of the whole input (one reduction, not a pass per position)."""
    values = RNG.standard_normal((2, 3, 6, 7, 5))
    values[0, 1, 2, 3, 1] = values[0, 1, 4, 0, 2] = values[1, 2, 0, 0, 0] = np.nan
    ours = F.adaptive_max_pool3d(mt.tensor(values), 1, True)
    theirs = TF.adaptive_max_pool3d(torch.tensor(values), 1, True)
    np.testing.assert_array_equal(ours[1].numpy(), theirs[1].numpy())
    np.testing.assert_array_equal(ours[0].numpy(), theirs[0].numpy())


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


# --------------------------------------------------------------------------- max unpooling

def pooled(d, shape, kernel, **kwargs):
    """Values and indices of a PyTorch max pooling of distinct values: the unpoolings'
    inputs, as microtensor and PyTorch tensors."""
    _, tx = distinct(*shape)
    values, indices = getattr(TF, f"max_pool{d}d")(tx, kernel, return_indices=True, **kwargs)
    return (mt.tensor(values.numpy()), mt.tensor(indices.numpy())), (values, indices)


UNPOOL_CASES = [
    (1, (2, 3, 8), 2, {}, {}), (1, (3, 9), 3, dict(stride=2, padding=1), {}),
    (1, (2, 2, 7), 2, {}, dict(output_size=(7,))),
    (2, (2, 3, 6, 4), 2, {}, {}), (2, (3, 5, 5), 2, {}, dict(output_size=(5, 5))),
    (2, (1, 2, 7, 6), (3, 2), dict(stride=(2, 1), padding=(1, 0)), {}),
    (2, (2, 2, 5, 6), 2, {}, dict(output_size=(2, 2, 5, 7))),
    (3, (1, 2, 4, 4, 5), 2, {}, dict(output_size=(4, 4, 5))),
    (3, (2, 5, 4, 6), (2, 1, 3), dict(padding=(1, 0, 1)), dict(output_size=(5, 4, 6))),
]


@pytest.mark.parametrize("d, shape, kernel, pool_kwargs, unpool_kwargs", UNPOOL_CASES)
def test_max_unpool_matches_torch(d, shape, kernel, pool_kwargs, unpool_kwargs):
    (values, indices), (tvalues, tindices) = pooled(d, shape, kernel, **pool_kwargs)
    kwargs = dict(pool_kwargs, **unpool_kwargs)
    compare(lambda s: getattr(F, f"max_unpool{d}d")(s, indices, kernel, **kwargs),
            lambda s: getattr(TF, f"max_unpool{d}d")(s, tindices, kernel, **kwargs),
            values, tvalues)


def test_max_unpool_keeps_the_last_of_repeated_indices_as_torch():
    values = np.array([[[[1.0], [2.0], [3.0]]]])
    indices = np.array([[[[1], [1], [0]]]])
    ours = F.max_unpool2d(mt.tensor(values), mt.tensor(indices), (1, 1), output_size=(3, 1))
    theirs = torch.ops.aten.max_unpool2d(torch.tensor(values), torch.tensor(indices), (3, 1))
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_max_unpool_layouts_and_dtypes_as_torch():
    (values, indices), (tvalues, tindices) = pooled(2, (2, 3, 6, 4), 2)
    cases = [(values.contiguous(memory_format=mt.channels_last),
              tvalues.contiguous(memory_format=torch.channels_last), indices, tindices),
             (values.transpose(2, 3), tvalues.transpose(2, 3), indices.transpose(2, 3),
              tindices.transpose(2, 3)),
             (values.float(), tvalues.float(), indices, tindices)]
    for x, tx, i, ti in cases:
        ours, theirs = F.max_unpool2d(x, i, 2), TF.max_unpool2d(tx, ti, 2)
        assert ours.stride() == theirs.stride() and ours.dtype.name == str(theirs.dtype)[6:]
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    (values, indices), (tvalues, tindices) = pooled(3, (2, 3, 4, 4, 4), 2)
    ours = F.max_unpool3d(values.contiguous(memory_format=mt.channels_last_3d), indices, 2)
    theirs = TF.max_unpool3d(tvalues.contiguous(memory_format=torch.channels_last_3d),
                             tindices, 2)
    assert ours.stride() == theirs.stride()
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def _unpool_inputs(m, d, shift=0):
    """Pooled values and indices (in module ``m``'s tensors) of a fixed input; ``shift``
    added to the first index alone (one invalid index: PyTorch reports any of several)."""
    shape = (2, 3, 4, 4) if d == 2 else (2, 3, 4, 4, 4) if d == 3 else (2, 3, 4)
    x = m.arange(float(np.prod(shape))).reshape(shape)
    pool = {1: "max_pool1d", 2: "max_pool2d", 3: "max_pool3d"}[d]
    values, indices = getattr(TF if m is torch else F, pool)(x, 2, return_indices=True)
    indices.view(-1)[0] += shift
    return values, indices


@pytest.mark.parametrize("call", [
    lambda F, m: F.max_unpool2d(_unpool_inputs(m, 2)[0], _unpool_inputs(m, 2)[1].int(), 2),
    lambda F, m: F.max_unpool2d(_unpool_inputs(m, 2)[0], _unpool_inputs(m, 2)[1][:1], 2),
    lambda F, m: F.max_unpool2d(*_unpool_inputs(m, 2, 100), 2),
    lambda F, m: F.max_unpool2d(_unpool_inputs(m, 2)[0][0, 0], _unpool_inputs(m, 2)[1][0, 0], 2),
    lambda F, m: F.max_unpool2d(*_unpool_inputs(m, 2), 2, output_size=(9, 9)),
    lambda F, m: F.max_unpool2d(*_unpool_inputs(m, 2), 2, output_size=(5,)),
    lambda F, m: F.max_unpool2d(*_unpool_inputs(m, 2), 2, padding=3),
    lambda F, m: F.max_unpool2d(_unpool_inputs(m, 2)[0][:, :0], _unpool_inputs(m, 2)[1][:, :0],
                                2),
    lambda F, m: F.max_unpool2d(_unpool_inputs(m, 2)[0].int(), _unpool_inputs(m, 2)[1], 2),
    lambda F, m: F.max_unpool1d(*_unpool_inputs(m, 1, -10), 2),
    lambda F, m: F.max_unpool1d(_unpool_inputs(m, 2)[0], _unpool_inputs(m, 2)[1], 2),
    lambda F, m: F.max_unpool3d(*_unpool_inputs(m, 3), 2, stride=0),
    lambda F, m: F.max_unpool3d(*_unpool_inputs(m, 3, 1000), 2),
    lambda F, m: F.max_unpool3d(_unpool_inputs(m, 3)[0], _unpool_inputs(m, 3)[1].int(), 2),
    lambda F, m: F.max_unpool3d(_unpool_inputs(m, 3)[0][0, 0], _unpool_inputs(m, 3)[1][0, 0],
                                2),
    lambda F, m: F.max_unpool3d(_unpool_inputs(m, 3)[0], _unpool_inputs(m, 3)[1][:1], 2),
    lambda F, m: F.max_unpool3d(*_unpool_inputs(m, 3), 2, output_size=(1, 2, 3)),
    lambda F, m: F.max_unpool3d(_unpool_inputs(m, 3)[0].long(), _unpool_inputs(m, 3)[1], 2),
])
def test_max_unpool_errors_as_torch(call):
    assert_errors_alike(call)


def test_max_unpool_op_errors_as_torch():
    """The checks of the ops themselves (the functional forms pass them valid sizes)."""
    (values, indices), (tvalues, tindices) = pooled(2, (2, 3, 4, 4), 2)
    (values3, indices3), (tvalues3, tindices3) = pooled(3, (2, 3, 4, 4, 4), 2)
    from microtensor.ops import REGISTRY
    for ours, theirs in [
        (lambda: REGISTRY["max_unpool2d"](values, indices, (4,)),
         lambda: torch.ops.aten.max_unpool2d(tvalues, tindices, (4,))),
        (lambda: REGISTRY["max_unpool2d"](values, indices, (-1, 4)),
         lambda: torch.ops.aten.max_unpool2d(tvalues, tindices, (-1, 4))),
        (lambda: REGISTRY["max_unpool3d"](values3, indices3, (4, 4), (2, 2, 2), (0, 0, 0)),
         lambda: torch.ops.aten.max_unpool3d(tvalues3, tindices3, (4, 4), (2, 2, 2), (0, 0, 0))),
        (lambda: REGISTRY["max_unpool3d"](values3, indices3, (4, 4, 4), (2, 2), (0, 0, 0)),
         lambda: torch.ops.aten.max_unpool3d(tvalues3, tindices3, (4, 4, 4), (2, 2), (0, 0, 0))),
        (lambda: REGISTRY["max_unpool3d"](values3, indices3, (4, 4, 4), (2, 2, 2), (0, 0)),
         lambda: torch.ops.aten.max_unpool3d(tvalues3, tindices3, (4, 4, 4), (2, 2, 2), (0, 0))),
    ]:
        assert message(ours) == message(theirs) and message(ours) is not None


# --------------------------------------------------------------------------- LP pooling

LP_CASES = [(1, (2, 3, 7), 2, 3, {}), (1, (3, 8), 3, 2, dict(stride=2, ceil_mode=True)),
            (1, (2, 2, 7), 1.5, 2, dict(stride=3)),
            (2, (2, 3, 6, 5), 2, 2, {}), (2, (2, 7, 6), 3, (3, 2), dict(stride=(2, 1))),
            (2, (1, 2, 5, 5), 2.5, 2, dict(ceil_mode=True)),
            (2, (2, 2, 4, 6), float("inf"), 2, {}), (2, (2, 2, 4, 6), -float("inf"), 3, {}),
            (3, (1, 2, 4, 5, 4), 2, 2, {}), (3, (2, 4, 5, 5), 3, (2, 3, 2), dict(ceil_mode=True)),
            (3, (1, 2, 4, 4, 4), float("inf"), 2, dict(stride=1))]


@pytest.mark.parametrize("d, shape, norm_type, kernel, kwargs", LP_CASES)
def test_lp_pool_matches_torch(d, shape, norm_type, kernel, kwargs):
    x, tx = distinct(*shape)       # positive: every power is real
    x, tx = x + 0.5, tx + 0.5
    compare(lambda s: getattr(F, f"lp_pool{d}d")(s, norm_type, kernel, **kwargs),
            lambda s: getattr(TF, f"lp_pool{d}d")(s, norm_type, kernel, **kwargs), x, tx)


def test_lp_pool_zero_windows_have_zero_gradient_and_negative_sums_nan_as_torch():
    values = np.array([[[0.0, 0.0, 1.0, -2.0, -1.0, -1.0, 2.0, 0.5]]])
    for norm_type in (2, 3, 1.0):
        x = mt.tensor(values, requires_grad=True)
        tx = torch.tensor(values, requires_grad=True)
        with warnings.catch_warnings():   # NumPy's of roots of negatives, 0 ** -0.5
            warnings.simplefilter("ignore", RuntimeWarning)
            ours = F.lp_pool1d(x, norm_type, 2)
            ours.sum().backward()
        theirs = TF.lp_pool1d(tx, norm_type, 2)
        theirs.sum().backward()
        np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(),
                                   equal_nan=True)
        np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), equal_nan=True)


@pytest.mark.parametrize("call", [
    lambda F, m: F.lp_pool2d(m.ones(2, 3, 4, 4), 2, (2, 2, 2)),
    lambda F, m: F.lp_pool2d(m.ones(2, 3, 4, 4), 2, (2,)),
    lambda F, m: F.lp_pool3d(m.ones(2, 3, 4, 4, 4), 2, (2, 2)),
    lambda F, m: F.lp_pool2d(m.ones(2, 3, 4, 4), 2, 0),
    lambda F, m: F.lp_pool1d(m.ones(2, 4), 0, 2),
    lambda F, m: F.lp_pool2d(m.ones(2, 3, 1, 1), 2, 2),
])
def test_lp_pool_errors_as_torch(call):
    assert_errors_alike(call)


def test_lp_pool_keeps_the_average_poolings_layout():
    x = np.arange(2 * 3 * 6 * 4, dtype=np.float64).reshape(2, 3, 6, 4) / 10
    ours = F.lp_pool2d(mt.tensor(x).contiguous(memory_format=mt.channels_last), 2, 2)
    theirs = TF.lp_pool2d(torch.tensor(x).contiguous(memory_format=torch.channels_last), 2, 2)
    assert ours.stride() == theirs.stride()
    np.testing.assert_allclose(ours.numpy(), theirs.numpy())


UNPOOL_LP_MODULES = [("MaxUnpool1d(2)", dict(kernel_size=2)),
                     ("MaxUnpool2d((2, 3), stride=1, padding=(1, 0))",
                      dict(kernel_size=(2, 3), stride=1, padding=(1, 0))),
                     ("MaxUnpool3d(2, 2)", dict(kernel_size=2)), ("LPPool1d(2, 3)", None),
                     ("LPPool2d(1.5, (2, 3), stride=1)", None),
                     ("LPPool3d(3, 2, ceil_mode=True)", None)]
UNPOOL_INPUTS = {1: (2, 3, 8), 2: (2, 3, 6, 7), 3: (2, 2, 4, 6, 4)}


@pytest.mark.parametrize("spec, pool_kwargs", UNPOOL_LP_MODULES)
def test_unpool_and_lp_modules_as_torch(spec, pool_kwargs):
    ours, theirs = eval("nn." + spec), eval("torch.nn." + spec)
    assert repr(ours) == repr(theirs)
    d = int(spec.split("(")[0][-2])
    if pool_kwargs is None:
        x, tx = distinct(*MODULE_INPUTS[f"{d}d"])
        compare(ours, theirs, x, tx)
        return
    kernel = pool_kwargs.pop("kernel_size")
    (values, indices), (tvalues, tindices) = pooled(d, UNPOOL_INPUTS[d], kernel, **pool_kwargs)
    compare(lambda s: ours(s, indices), lambda s: theirs(s, tindices), values, tvalues)
    size = list(UNPOOL_INPUTS[d][-d:])       # the pooling's input size: a valid one
    close(ours(values, indices, size), theirs(tvalues, tindices, size))
    size = [n + 5 for n in size]
    expected = message(lambda: theirs(tvalues, tindices, size))
    assert expected is not None and message(lambda: ours(values, indices, size)) == expected


def test_unpool_and_lp_signatures_as_torch():
    for name in ["max_unpool1d", "max_unpool2d", "max_unpool3d", "lp_pool1d", "lp_pool2d",
                 "lp_pool3d"]:
        assert_same_signature(name)


@pytest.mark.parametrize("d, shape, batched", [
    (1, (2, 8), "both"), (2, (2, 3, 4, 4), "values"), (2, (3, 4, 6), "indices"),
    (3, (2, 2, 4, 4, 2), "both")])
def test_max_unpool_vmap_and_per_sample_gradients_match_torch_func(d, shape, batched):
    """Three samples of ``shape`` pooled as one batch, split back into samples."""
    (values, indices), (tvalues, tindices) = pooled(d, (3 * shape[0],) + shape[1:], 2)
    x, i = (t.reshape((3, -1) + tuple(t.shape[1:])) for t in (values, indices))
    tx, ti = (t.reshape((3, -1) + tuple(t.shape[1:])) for t in (tvalues, tindices))
    if batched == "values":
        i, ti = i[0], ti[0]
    if batched == "indices":
        x, tx = x[0], tx[0]
    in_dims = (0 if batched != "indices" else None, 0 if batched != "values" else None)
    name = f"max_unpool{d}d"
    ours = no_fallback(lambda s, j: getattr(F, name)(s, j, 2), in_dims)(x, i)
    theirs = torch.func.vmap(lambda s, j: getattr(TF, name)(s, j, 2), in_dims)(tx, ti)
    close(ours, theirs)
    if batched == "indices":
        return

    def loss(s, j):
        return getattr(F, name)(s, j, 2).sin().sum()

    def tloss(s, j):
        return getattr(TF, name)(s, j, 2).sin().sum()
    close(no_fallback(mt.func.grad(loss), in_dims)(x, i),
          torch.func.vmap(torch.func.grad(tloss), in_dims)(tx, ti))


@pytest.mark.parametrize("d", [1, 2, 3])
def test_lp_pool_vmap_and_per_sample_gradients_match_torch_func(d):
    x, tx = distinct(3, 2, *(5, 4, 4)[:d])
    x, tx = x + 0.5, tx + 0.5
    name = f"lp_pool{d}d"
    ours = no_fallback(lambda s: getattr(F, name)(s, 2, 2))(x)
    close(ours, torch.func.vmap(lambda s: getattr(TF, name)(s, 2, 2))(tx))

    def loss(s):
        return getattr(F, name)(s, 3, 2, ceil_mode=True).sum()

    def tloss(s):
        return getattr(TF, name)(s, 3, 2, ceil_mode=True).sum()
    close(no_fallback(mt.func.grad(loss))(x), torch.func.vmap(torch.func.grad(tloss))(tx))


# --------------------------------------------------------------------------- fractional max pooling

def fractional_case(d, shape, dtype=np.float64, seed=0):
    """Distinct values and uniform samples (N, C, d), as microtensor and PyTorch tensors."""
    rng = np.random.default_rng(seed)
    values = (rng.permutation(int(np.prod(shape))).reshape(shape) / np.prod(shape))
    batch = shape[0] if len(shape) == d + 2 else 1
    samples = rng.random((batch, shape[-d - 1], d))
    return [(mt.tensor(a.astype(dtype)), torch.tensor(a.astype(dtype)))
            for a in (values, samples)]


FRACTIONAL_CASES = [
    (2, (2, 3, 7, 6), 2, (3, 4), {}), (2, (3, 9, 8), (3, 2), (4, 5), {}),
    (2, (2, 2, 6, 6), 2, (5, 5), {}), (2, (1, 2, 8, 7), 2, (1, 1), {}),
    (2, (2, 3, 10, 9), 3, None, dict(output_ratio=(0.5, 0.6))),
    (3, (1, 2, 5, 6, 4), 2, (3, 4, 2), {}), (3, (2, 5, 6, 7), (1, 2, 3), (4, 3, 2), {}),
    (3, (2, 1, 7, 6, 6), 2, None, dict(output_ratio=0.5)),
]


@pytest.mark.parametrize("d, shape, kernel, out, kwargs", FRACTIONAL_CASES)
def test_fractional_max_pool_matches_torch_with_the_same_samples(d, shape, kernel, out, kwargs):
    (x, tx), (u, tu) = fractional_case(d, shape)
    name = f"fractional_max_pool{d}d"
    compare(lambda s: getattr(F, name)(s, kernel, out, return_indices=True, _random_samples=u,
                                       **kwargs),
            lambda s: getattr(TF, name)(s, kernel, out, return_indices=True,
                                        _random_samples=tu, **kwargs), x, tx)


@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fractional_intervals_are_torchs_over_many_geometries(d, dtype):
    """The windows' starts follow PyTorch's arithmetic in the input's dtype exactly: the
    same indices over random sizes, kernels and samples."""
    rng = np.random.default_rng(d)
    name = f"fractional_max_pool{d}d"
    for _ in range(40):
        sizes = tuple(int(n) for n in rng.integers(3, 40, d))
        kernel = tuple(int(k) for k in rng.integers(1, 4, d))
        # PyTorch's 3-d pool leaves at least one element out of the last window's reach
        out = tuple(int(rng.integers(1, n - k + (2 if d == 2 else 1)))
                    for n, k in zip(sizes, kernel))
        values = rng.standard_normal((2, 2) + sizes).astype(dtype)
        samples = rng.random((2, 2, d)).astype(dtype)
        ours = getattr(F, name)(mt.tensor(values), kernel, out, return_indices=True,
                                _random_samples=mt.tensor(samples))
        theirs = getattr(TF, name)(torch.tensor(values), kernel, out, return_indices=True,
                                   _random_samples=torch.tensor(samples))
        np.testing.assert_array_equal(ours[1].numpy(), theirs[1].numpy())
        np.testing.assert_array_equal(ours[0].numpy(), theirs[0].numpy())


def test_fractional_max_pool_of_half_precision_and_edge_geometries_as_torch():
    (x, tx), (u, tu) = fractional_case(2, (2, 3, 9, 8))
    for ours_dtype, their_dtype in [(mt.float16, torch.float16), (mt.bfloat16, torch.bfloat16)]:
        ours = F.fractional_max_pool2d(x.to(ours_dtype), 2, (5, 4), return_indices=True,
                                       _random_samples=u.to(ours_dtype))
        theirs = TF.fractional_max_pool2d(tx.to(their_dtype), 2, (5, 4), return_indices=True,
                                          _random_samples=tu.to(their_dtype))
        np.testing.assert_array_equal(ours[1].numpy(), theirs[1].numpy())
    from microtensor.ops import REGISTRY
    for kernel, out in [((0, 2), (3, 3)), ((2, 2), (0, 3)), ((2, 2), (1, 1))]:
        ours = REGISTRY["fractional_max_pool2d"](x, kernel, out, u)
        theirs = torch.ops.aten.fractional_max_pool2d(tx, kernel, out, tu)
        for a, b in zip(ours, theirs):
            assert tuple(a.shape) == tuple(b.shape)
            np.testing.assert_array_equal(a.numpy(), b.numpy())
    # more sample rows than the batch: the first rows are used
    (x, tx), _ = fractional_case(2, (2, 3, 7, 7))
    u = np.random.default_rng(3).random((4, 3, 2))
    close(F.fractional_max_pool2d(x, 2, 3, _random_samples=mt.tensor(u)),
          TF.fractional_max_pool2d(tx, 2, 3, _random_samples=torch.tensor(u)))


def test_fractional_max_pool_draws_its_samples_from_the_generator():
    x = mt.randn(2, 3, 9, 9)
    mt.manual_seed(5)
    first = F.fractional_max_pool2d(x, 2, output_ratio=(0.5, 0.5), return_indices=True)
    mt.manual_seed(5)
    samples = mt.rand(2, 3, 2)
    again = F.fractional_max_pool2d(x, 2, (4, 4), return_indices=True,
                                    _random_samples=samples)
    assert first[1].tolist() == again[1].tolist()
    assert tuple(first[0].shape) == (2, 3, 4, 4)
    one = F.fractional_max_pool3d(mt.randn(3, 6, 6, 6), 2, output_ratio=0.5)
    assert tuple(one.shape) == (3, 3, 3, 3)


def test_fractional_results_are_contiguous_as_torch():
    (x, tx), (u, tu) = fractional_case(3, (2, 3, 6, 7, 5))
    ours = F.fractional_max_pool3d(x.contiguous(memory_format=mt.channels_last_3d), 2, 3,
                                   return_indices=True, _random_samples=u)
    theirs = TF.fractional_max_pool3d(tx.contiguous(memory_format=torch.channels_last_3d), 2, 3,
                                      return_indices=True, _random_samples=tu)
    for a, b in zip(ours, theirs):
        assert a.stride() == b.stride()
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    (x, tx), (u, tu) = fractional_case(2, (2, 3, 7, 6))
    ours = F.fractional_max_pool2d(x.contiguous(memory_format=mt.channels_last), 2, 3,
                                   _random_samples=u)
    theirs = TF.fractional_max_pool2d(tx.contiguous(memory_format=torch.channels_last), 2, 3,
                                      _random_samples=tu)
    assert ours.stride() == theirs.stride()


def _samples(m, *shape, dtype=None):
    return m.full(shape, 0.5, dtype=dtype or m.float32)


@pytest.mark.parametrize("call", [
    lambda F, m: F.fractional_max_pool2d(m.ones(2, 3, 7, 6), 2),
    lambda F, m: F.fractional_max_pool2d(m.ones(2, 3, 7, 6), 2, output_ratio=(0.5, 0.5, 0.5)),
    lambda F, m: F.fractional_max_pool2d(m.ones(2, 3, 7, 6), 2, output_ratio=0.5),
    lambda F, m: F.fractional_max_pool2d(m.ones(2, 3, 7, 6), (2, 2, 2), 3),
    lambda F, m: F.fractional_max_pool2d(m.ones(2, 3, 7, 6), 2, (3, 3, 3)),
    lambda F, m: F.fractional_max_pool2d(m.ones(2, 3, 7, 6), 2, (7, 3)),
    lambda F, m: F.fractional_max_pool2d(m.ones(2, 3, 7, 6), 2, (3, 6)),
    lambda F, m: F.fractional_max_pool2d(m.ones(2, 0, 7, 6), 2, 3),
    lambda F, m: F.fractional_max_pool2d(m.ones(2, 3, 7, 6), 2, (-1, 3)),
    lambda F, m: F.fractional_max_pool2d(m.ones(2, 3, 7, 6), 2, 3,
                                         _random_samples=_samples(m, 2, 3, 2, dtype=m.float64)),
    lambda F, m: F.fractional_max_pool2d(m.ones(2, 3, 7, 6), 2, 3,
                                         _random_samples=_samples(m, 1, 3, 2)),
    lambda F, m: F.fractional_max_pool2d(m.ones(2, 3, 7, 6), 2, 3,
                                         _random_samples=_samples(m, 2, 2, 2)),
    lambda F, m: F.fractional_max_pool2d(m.ones(2, 3, 7, 6), 2, 3,
                                         _random_samples=_samples(m, 2, 3, 3)),
    lambda F, m: F.fractional_max_pool2d(m.ones(2, 3, 7, 6), 2, 3,
                                         _random_samples=_samples(m, 2, 3)),
    lambda F, m: F.fractional_max_pool2d(m.ones(2, 3, 7, 6, dtype=m.int32), 2, 3,
                                         _random_samples=_samples(m, 2, 3, 2, dtype=m.int32)),
    lambda F, m: F.fractional_max_pool2d(m.ones(7, 6), 2, 3),
    lambda F, m: F.fractional_max_pool3d(m.ones(2, 3, 6, 7, 5), 2),
    lambda F, m: F.fractional_max_pool3d(m.ones(6, 7, 5), 2, 3),
    lambda F, m: F.fractional_max_pool3d(m.ones(2, 3, 6, 7, 5), 2, (5, 3, 3)),
    lambda F, m: F.fractional_max_pool3d(m.ones(2, 3, 6, 7, 5), 2, (3, 6, 3)),
    lambda F, m: F.fractional_max_pool3d(m.ones(2, 3, 6, 7, 5), 2, (3, 3, 4)),
    lambda F, m: F.fractional_max_pool3d(m.ones(2, 3, 6, 7, 5), (2, 2), 3),
    lambda F, m: F.fractional_max_pool3d(m.ones(2, 3, 6, 7, 5), 2, (3, 3)),
    lambda F, m: F.fractional_max_pool3d(m.ones(2, 0, 6, 7, 5), 2, 3),
    lambda F, m: F.fractional_max_pool3d(m.ones(2, 3, 6, 7, 5), 2, 3,
                                         _random_samples=_samples(m, 2, 3, 2)),
    lambda F, m: F.fractional_max_pool3d(m.ones(2, 3, 6, 7, 5, dtype=m.float64), 2, 3,
                                         _random_samples=_samples(m, 1, 3, 3, dtype=m.float64)),
])
def test_fractional_errors_as_torch(call):
    assert_errors_alike(call)


def test_fractional_op_errors_as_torch():
    from microtensor.ops import REGISTRY
    x, u = mt.ones(6, 7, 5), mt.full((1, 3, 3), 0.5)
    tx, tu = torch.ones(6, 7, 5), torch.full((1, 3, 3), 0.5)
    for name, args in [("fractional_max_pool3d", ((2, 2, 2), (3, 3, 3))),
                       ("fractional_max_pool2d", ((2, 2), (3, 3)))]:
        ours = message(lambda: REGISTRY[name](x[0] if "2d" in name else x, *args, u))
        theirs = message(lambda: getattr(torch.ops.aten, name)(tx[0] if "2d" in name else tx,
                                                               *args, tu))
        assert ours == theirs and ours is not None


FRACTIONAL_MODULES = ["FractionalMaxPool2d(2, output_size=(3, 4))",
                      "FractionalMaxPool2d((2, 3), output_ratio=0.5, return_indices=True)",
                      "FractionalMaxPool3d(2, output_size=2)",
                      "FractionalMaxPool3d(2, output_ratio=(0.5, 0.6, 0.5))"]


@pytest.mark.parametrize("spec", FRACTIONAL_MODULES)
def test_fractional_modules_as_torch(spec):
    ours, theirs = eval("nn." + spec), eval("torch.nn." + spec)
    assert repr(ours) == repr(theirs)
    d = int(spec.split("(")[0][-2])
    (x, tx), (u, tu) = fractional_case(d, (2, 2, 7, 8) if d == 2 else (1, 2, 5, 6, 5))
    ours._random_samples, theirs._random_samples = u, tu
    compare(ours, theirs, x, tx)
    assert list(ours.state_dict()) == list(theirs.state_dict()) == ["_random_samples"]


@pytest.mark.parametrize("spec", [
    "FractionalMaxPool2d(2)", "FractionalMaxPool2d(2, output_size=2, output_ratio=0.5)",
    "FractionalMaxPool2d(2, output_ratio=1.5)", "FractionalMaxPool3d(0, output_size=2)",
    "FractionalMaxPool3d(2, output_ratio=(0.5, 0.5, 1.0))"])
def test_fractional_module_errors_as_torch(spec):
    ours = message(lambda: eval("nn." + spec))
    assert ours is not None and ours == message(lambda: eval("torch.nn." + spec))


def test_fractional_signatures_as_torch():
    for name in ["fractional_max_pool2d", "fractional_max_pool3d",
                 "fractional_max_pool2d_with_indices", "fractional_max_pool3d_with_indices"]:
        assert_same_signature(name)


@pytest.mark.parametrize("d, shape, batched", [
    (2, (2, 3, 7, 6), "both"), (2, (3, 7, 6), "values"), (2, (2, 3, 7, 6), "samples"),
    (3, (2, 5, 6, 4), "both"), (3, (1, 2, 5, 6, 4), "values")])
def test_fractional_vmap_and_per_sample_gradients_match_torch_func(d, shape, batched):
    rng = np.random.default_rng(len(shape))
    x, tx = distinct(3, *shape)
    batch = shape[0] if len(shape) == d + 2 else 1
    u = rng.random((3, batch, shape[-d - 1], d))
    u, tu = mt.tensor(u), torch.tensor(u)
    if batched == "values":
        u, tu = u[0], tu[0]
    if batched == "samples":
        x, tx = x[0], tx[0]
    in_dims = (None if batched == "samples" else 0, None if batched == "values" else 0)
    name = f"fractional_max_pool{d}d"
    out = (3, 2, 2)[:d]
    ours = no_fallback(lambda s, v: getattr(F, name)(s, 2, out, return_indices=True,
                                                     _random_samples=v), in_dims)(x, u)
    theirs = torch.func.vmap(lambda s, v: getattr(TF, name)(
        s, 2, out, return_indices=True, _random_samples=v), in_dims)(tx, tu)
    for a, b in zip(ours, theirs):
        close(a, b)
    if batched == "samples":
        return

    def loss(s, v):
        return getattr(F, name)(s, 2, out, _random_samples=v).sin().sum()

    def tloss(s, v):
        return getattr(TF, name)(s, 2, out, _random_samples=v).sin().sum()
    close(no_fallback(mt.func.grad(loss), in_dims)(x, u),
          torch.func.vmap(torch.func.grad(tloss), in_dims)(tx, tu))


def test_fractional_derivatives_are_differentiable():
    (x, _), (u, _) = fractional_case(2, (1, 2, 7, 6))
    x.requires_grad_()
    assert gradcheck(lambda s: F.fractional_max_pool2d(s, 2, (3, 4), _random_samples=u), (x,))
    assert gradgradcheck(lambda s: F.fractional_max_pool2d(s, 2, (3, 4), _random_samples=u),
                         (x,))


@pytest.mark.parametrize("d", [1, 3])
def test_adaptive_max_pool_of_half_precision_takes_the_same_windows(d):
    """float16 planes take the gathering path, float32 ones the C kernel: the same maxima
    and indices, ties and a NaN included."""
    x = mt.tensor(np.random.default_rng(0).integers(0, 5, (2, 3, 5, 6, 7)).astype(np.float32))
    x[0, 0, 0, 0, 0] = float("nan")
    if d == 1:
        x = x.reshape(6, 210)[:, :9]
    pool = getattr(mt.nn.functional, f"adaptive_max_pool{d}d")
    size = 4 if d == 1 else (2, 3, 4)
    values, indices = pool(x, size, return_indices=True)
    half_values, half_indices = pool(x.half(), size, return_indices=True)
    np.testing.assert_array_equal(indices.numpy(), half_indices.numpy())
    np.testing.assert_array_equal(values.numpy(), half_values.float().numpy())
