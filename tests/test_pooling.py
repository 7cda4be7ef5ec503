"""Pooling against PyTorch: values, indices, gradients and errors over the arguments'
combinations, modules, and vmap / vmap(grad) as torch.func runs them.  The ops also go
through the registry sweeps."""
import itertools
import warnings

import numpy as np
import pytest

import microtensor as mt
from microtensor import nn
from microtensor.autograd import gradcheck, gradgradcheck
from microtensor.nn import functional as F

torch = pytest.importorskip("torch", reason="PyTorch is the test oracle")
TF = torch.nn.functional
RNG = np.random.default_rng(12)


def distinct(*shape):
    """Values without ties (the max's gradient is then defined everywhere)."""
    values = RNG.permutation(int(np.prod(shape))).reshape(shape) / np.prod(shape)
    return mt.tensor(values), torch.tensor(values)


def close(ours, theirs, tol=1e-7):
    np.testing.assert_allclose(np.asarray(ours.detach().numpy()), theirs.detach().numpy(),
                               rtol=tol, atol=tol)


def compare(ours_fn, theirs_fn, x, tx):
    """Outputs (a tuple: values and indices) and the input's gradient agree."""
    x, tx = x.clone().requires_grad_(), tx.clone().requires_grad_()
    ours, theirs = ours_fn(x), theirs_fn(tx)
    ours = ours if isinstance(ours, tuple) else (ours,)
    theirs = theirs if isinstance(theirs, tuple) else (theirs,)
    for a, b in zip(ours, theirs):
        assert tuple(a.shape) == tuple(b.shape) and a.dtype.name == str(b.dtype)[6:]
        close(a, b)
    weights = RNG.standard_normal(tuple(theirs[0].shape))
    (ours[0] * mt.tensor(weights)).sum().backward()
    (theirs[0] * torch.tensor(weights)).sum().backward()
    close(x.grad, tx.grad)


SPATIAL = {1: (7,), 2: (7, 6), 3: (5, 6, 4)}
GEOMETRIES = [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
              dict(kernel_size=2, stride=1, padding=1, ceil_mode=True),
              dict(kernel_size=3, stride=2, ceil_mode=True)]


@pytest.mark.parametrize("d", [1, 2, 3])
@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_max_pool_values_indices_and_gradients(d, geometry):
    for lead, dilation in itertools.product([(2, 3), (2,)], [1, 2]):
        shape = lead + SPATIAL[d]
        if dilation == 2 and geometry.get("padding", 0) > 1:
            continue
        kwargs = dict(geometry, dilation=dilation, return_indices=True)
        x, tx = distinct(*shape)
        compare(lambda x: getattr(F, f"max_pool{d}d")(x, **kwargs),
                lambda x: getattr(TF, f"max_pool{d}d")(x, **kwargs), x, tx)


@pytest.mark.parametrize("d", [1, 2, 3])
@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_avg_pool_matches_torch(d, geometry):
    options = [dict(), dict(count_include_pad=False)]
    if d > 1:
        options.append(dict(divisor_override=3))
    for lead, extra in itertools.product([(2, 3), (2,)], options):
        x, tx = distinct(*(lead + SPATIAL[d]))
        compare(lambda x: getattr(F, f"avg_pool{d}d")(x, **geometry, **extra),
                lambda x: getattr(TF, f"avg_pool{d}d")(x, **geometry, **extra), x, tx)


@pytest.mark.parametrize("size", [3, (2, 4), (5, 1), (None, 2), 7])
def test_adaptive_pools_match_torch(size):
    x, tx = distinct(2, 3, 5, 7)
    compare(lambda x: F.adaptive_avg_pool2d(x, size), lambda x: TF.adaptive_avg_pool2d(x, size),
            x, tx)
    compare(lambda x: F.adaptive_max_pool2d(x, size, True),
            lambda x: TF.adaptive_max_pool2d(x, size, True), x, tx)
    compare(lambda x: F.adaptive_max_pool2d(x, size), lambda x: TF.adaptive_max_pool2d(x, size),
            x[0], tx[0])
    if isinstance(size, int):
        compare(lambda x: F.adaptive_avg_pool1d(x, size),
                lambda x: TF.adaptive_avg_pool1d(x, size), x[0], tx[0])


def test_non_contiguous_and_float32_inputs():
    x, tx = distinct(2, 6, 5, 3)
    compare(lambda x: F.max_pool2d(x.transpose(1, 3), 2, return_indices=True),
            lambda x: TF.max_pool2d(x.transpose(1, 3), 2, return_indices=True), x, tx)
    compare(lambda x: F.avg_pool2d(x.float()[:, ::2], 2),
            lambda x: TF.avg_pool2d(x.float()[:, ::2], 2), x, tx)


def test_nan_propagates_through_max_pool():
    x = mt.tensor([[[1.0, float("nan"), 3.0, 0.5]]])
    tx = torch.tensor([[[1.0, float("nan"), 3.0, 0.5]]])
    ours, theirs = F.max_pool1d(x, 2, return_indices=True), TF.max_pool1d(tx, 2,
                                                                         return_indices=True)
    np.testing.assert_array_equal(ours[0].numpy(), theirs[0].numpy())
    np.testing.assert_array_equal(ours[1].numpy(), theirs[1].numpy())


def test_ties_pick_the_first_maximum_as_torch():
    values = np.array([[[[1.0, 2.0, 2.0, 0.0], [2.0, 1.0, 2.0, 2.0],
                         [0.0, 0.0, 5.0, 5.0], [0.0, 0.0, 5.0, 5.0]]]])
    for kwargs in (dict(kernel_size=2), dict(kernel_size=3, stride=1, padding=1),
                   dict(kernel_size=2, stride=1, dilation=2)):
        ours = F.max_pool2d(mt.tensor(values), return_indices=True, **kwargs)
        theirs = TF.max_pool2d(torch.tensor(values), return_indices=True, **kwargs)
        np.testing.assert_array_equal(ours[1].numpy(), theirs[1].numpy())


def test_derivatives_are_differentiable():
    x, _ = distinct(1, 2, 5, 4)
    x.requires_grad_()
    for fn in (lambda x: F.max_pool2d(x, 2, 1, 1, ceil_mode=True),
               lambda x: F.adaptive_max_pool2d(x, (2, 3)),
               lambda x: F.avg_pool2d(x, 3, 2, 1, True, False),
               lambda x: F.adaptive_avg_pool2d(x, 3)):
        assert gradcheck(fn, (x,))
        assert gradgradcheck(fn, (x,))


def _message(fn):
    try:
        fn()
    except Exception as e:          # noqa: BLE001 - what is compared is the type and text
        return type(e), str(e)
    return None


@pytest.mark.parametrize("call", [
    lambda m, x: m.max_pool2d(x(1, 1, 4, 4), 2, padding=2),
    lambda m, x: m.max_pool2d(x(1, 1, 4, 4), 5),
    lambda m, x: m.max_pool2d(x(4, 4), 2),
    lambda m, x: m.max_pool1d(x(4), 2),
    lambda m, x: m.max_pool3d(x(4, 3), 2),
    lambda m, x: m.max_pool2d(x(1, 1, 4, 4), (2, 2, 2)),
    lambda m, x: m.max_pool2d(x(1, 1, 4, 4), 0, stride=1),
    lambda m, x: m.max_pool2d(x(1, 1, 4, 4), 2, stride=0),
    lambda m, x: m.max_pool2d(x(1, 1, 4, 4), 2, dilation=0),
    lambda m, x: m.avg_pool2d(x(1, 1, 4, 4), 2, padding=2),
    lambda m, x: m.avg_pool2d(x(1, 1, 1, 1), 2),
    lambda m, x: m.avg_pool1d(x(4), 2),
    lambda m, x: m.avg_pool3d(x(4), 2),
    lambda m, x: m.avg_pool2d(x(1, 1, 4, 4), 2, divisor_override=0),
    lambda m, x: m.adaptive_max_pool2d(x(4), 2),
    lambda m, x: m.adaptive_avg_pool2d(x(4), 2),
    lambda m, x: m.adaptive_avg_pool1d(x(4), 2),
])
def test_errors_as_torch(call):
    ours = _message(lambda: call(F, lambda *s: mt.ones(*s)))
    theirs = _message(lambda: call(TF, lambda *s: torch.ones(*s)))
    assert ours is not None and ours == theirs


MODULES = ["MaxPool1d(3)", "MaxPool2d((2, 3), stride=1, padding=1, dilation=2, ceil_mode=True)",
           "MaxPool2d(2, return_indices=True)", "MaxPool3d(2)", "AvgPool1d(3, 2, 1, True, False)",
           "AvgPool2d((2, 3), 1, 1, True, False, 2)", "AvgPool3d(2)",
           "AdaptiveAvgPool1d(2)", "AdaptiveAvgPool2d((3, None))",
           "AdaptiveMaxPool2d(2, True)"]
MODULE_INPUTS = {"1d": (2, 3, 8), "2d": (2, 3, 7, 6), "3d": (2, 2, 4, 4, 4)}


@pytest.mark.parametrize("spec", MODULES)
def test_modules_as_torch(spec):
    ours, theirs = eval("nn." + spec), eval("torch.nn." + spec)
    assert repr(ours) == repr(theirs)
    x, tx = distinct(*MODULE_INPUTS[spec.split("(")[0][-2:]])
    compare(ours, theirs, x, tx)


# --------------------------------------------------------------------------- vmap

def no_fallback(fn, in_dims=0):
    def run(*args):
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message=".*fallback.*")
            return mt.vmap(fn, in_dims=in_dims)(*args)
    return run


@pytest.mark.parametrize("name, kwargs", [
    ("max_pool1d", dict(kernel_size=2, return_indices=True)),
    ("max_pool2d", dict(kernel_size=3, stride=2, padding=1, return_indices=True)),
    ("max_pool3d", dict(kernel_size=2, ceil_mode=True)),
    ("avg_pool2d", dict(kernel_size=2, padding=1, count_include_pad=False)),
    ("adaptive_max_pool2d", dict(output_size=(2, 3), return_indices=True)),
    ("adaptive_avg_pool2d", dict(output_size=3)),
])
@pytest.mark.parametrize("sample_rank", ["batched", "unbatched"])
def test_vmap_and_per_sample_gradients_match_torch_func(name, kwargs, sample_rank):
    d = 3 if "3d" in name else 1 if "1d" in name else 2
    shape = (4,) + ((2,) if sample_rank == "batched" else ()) + (2,) + SPATIAL[d]
    x, tx = distinct(*shape)
    ours = no_fallback(lambda s: getattr(F, name)(s, **kwargs))(x)
    theirs = torch.func.vmap(lambda s: getattr(TF, name)(s, **kwargs))(tx)
    for a, b in zip(ours if isinstance(ours, tuple) else (ours,),
                    theirs if isinstance(theirs, tuple) else (theirs,)):
        close(a, b)
    plain = dict(kwargs, return_indices=False) if "return_indices" in kwargs else kwargs

    def loss(s):
        return getattr(F, name)(s, **plain).sin().sum()

    def tloss(s):
        return getattr(TF, name)(s, **plain).sin().sum()
    close(no_fallback(mt.func.grad(loss))(x), torch.func.vmap(torch.func.grad(tloss))(tx))


def test_per_sample_gradients_of_the_tutorial_cnn_pooling_layer():
    """conv-free part of the per-sample-gradients tutorial's model: max_pool, flatten,
    linear, log_softmax, nll_loss, per-sample gradients against torch.func."""
    ours = nn.Sequential(nn.MaxPool2d(2), nn.Flatten(), nn.Linear(2 * 3 * 3, 5))
    theirs = torch.nn.Sequential(torch.nn.MaxPool2d(2), torch.nn.Flatten(),
                                 torch.nn.Linear(2 * 3 * 3, 5)).double()
    ours.double().load_state_dict({k: mt.tensor(v.detach().numpy())
                                   for k, v in theirs.state_dict().items()})
    x, tx = distinct(6, 2, 7, 6)
    y = RNG.integers(0, 5, 6)

    def loss(params, x, y):
        out = mt.func.functional_call(ours, params, (x.unsqueeze(0),))
        return F.nll_loss(F.log_softmax(out, 1), y.unsqueeze(0))

    def tloss(params, x, y):
        out = torch.func.functional_call(theirs, params, (x.unsqueeze(0),))
        return TF.nll_loss(TF.log_softmax(out, 1), y.unsqueeze(0))
    params = {k: v.detach() for k, v in ours.named_parameters()}
    tparams = {k: v.detach() for k, v in theirs.named_parameters()}
    grads = no_fallback(mt.func.grad(loss), in_dims=(None, 0, 0))(params, x, mt.tensor(y))
    expected = torch.func.vmap(torch.func.grad(tloss), in_dims=(None, 0, 0))(
        tparams, tx, torch.tensor(y))
    for key in expected:
        close(grads[key], expected[key], 1e-6)


@pytest.mark.parametrize("case", ["max_pool2d", "avg_pool2d", "adaptive_avg_pool2d",
                                  "adaptive_max_pool2d", "max_pool3d", "avg_pool3d"])
def test_pools_keep_a_channels_last_input_layout_as_torch(case):
    """2-d pools (and 3-d max pooling) of a channels_last input return channels_last
    results, indices included; 3-d average pooling returns a contiguous one."""
    three_d = case.endswith("3d")
    shape = (2, 3, 4, 4, 4) if three_d else (2, 3, 8, 8)
    x = np.random.default_rng(0).random(shape)
    calls = {"max_pool2d": lambda F, x: F.max_pool2d(x, 2, return_indices=True),
             "avg_pool2d": lambda F, x: F.avg_pool2d(x, 2),
             "adaptive_avg_pool2d": lambda F, x: F.adaptive_avg_pool2d(x, 3),
             "adaptive_max_pool2d": lambda F, x: F.adaptive_max_pool2d(x, 3, return_indices=True),
             "max_pool3d": lambda F, x: F.max_pool3d(x, 2, return_indices=True),
             "avg_pool3d": lambda F, x: F.avg_pool3d(x, 2)}
    t_format = torch.channels_last_3d if three_d else torch.channels_last
    m_format = mt.channels_last_3d if three_d else mt.channels_last
    expected = calls[case](torch.nn.functional,
                           torch.tensor(x).contiguous(memory_format=t_format))
    got = calls[case](mt.nn.functional, mt.tensor(x).contiguous(memory_format=m_format))
    expected = expected if isinstance(expected, tuple) else (expected,)
    got = got if isinstance(got, tuple) else (got,)
    for e, g in zip(expected, got):
        assert g.stride() == e.stride()
        np.testing.assert_allclose(g.numpy(), e.numpy())


@pytest.mark.parametrize("geometry", GEOMETRIES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_channels_last_max_pool2d_as_torch(geometry, dtype):
    """The channels-last kernel (pooling the input as it lies, all channels at once) gives
    PyTorch's values, indices (ties: the first maximum; NaN: the last), strides, and a
    channels-last gradient, for every geometry and dilation."""
    rng = np.random.default_rng(3)
    for channels, dilation in itertools.product([1, 5, 19], [1, 2]):
        if dilation == 2 and geometry.get("padding", 0) > 1:
            continue
        x = rng.integers(0, 4, (2, channels, 7, 6)).astype(dtype)   # many ties
        x[0, 0, 2, 1:3] = np.nan
        kwargs = dict(geometry, dilation=dilation, return_indices=True)
        tx = torch.tensor(x).contiguous(memory_format=torch.channels_last).requires_grad_()
        mx = mt.tensor(x).contiguous(memory_format=mt.channels_last).requires_grad_()
        expected, got = TF.max_pool2d(tx, **kwargs), F.max_pool2d(mx, **kwargs)
        for e, g in zip(expected, got):
            assert g.stride() == e.stride() and g.dtype.name == str(e.dtype)[6:]
            np.testing.assert_array_equal(g.detach().numpy(), e.detach().numpy())
        weights = rng.standard_normal(tuple(expected[0].shape)).astype(dtype)
        expected[0].backward(torch.tensor(weights).contiguous(memory_format=torch.channels_last))
        got[0].backward(mt.tensor(weights).contiguous(memory_format=mt.channels_last))
        assert mx.grad.stride() == tx.grad.stride()
        np.testing.assert_allclose(mx.grad.numpy(), tx.grad.numpy(), rtol=1e-6)


@pytest.mark.parametrize("pool,args", [("max_pool2d", (2,)), ("max_pool3d", (2,)),
                                       ("avg_pool2d", (2,)), ("avg_pool3d", (2,)),
                                       ("adaptive_max_pool2d", (2,)),
                                       ("fractional_max_pool2d", (2,))])
def test_pooling_nodes_are_named_as_pytorch_names_them(pool, args):
    """PyTorch capitalises the dimension count: ``MaxPool2DWithIndicesBackward0``."""
    names = []
    for lib, functional in ((mt, F), (torch, TF)):
        shape = (1, 2, 4, 4, 4) if pool.endswith("3d") else (1, 2, 4, 4)
        x = lib.ones(shape, dtype=lib.float64, requires_grad=True)
        kwargs = {"output_size": 2} if pool.startswith("fractional") else {}
        out = getattr(functional, pool)(x, *args, **kwargs)
        names.append(type(out.grad_fn).__name__ if lib is torch else out.grad_fn.name())
    assert names[0] == names[1]
