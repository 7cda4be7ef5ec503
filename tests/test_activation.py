"""Activations and their special functions against PyTorch: values over wide ranges,
the subgradients PyTorch picks at kinks (the registry sweeps keep away from those),
double backward, errors, graph node names, modules (reprs, state_dict) and vmap.

The registry sweeps (test_op_registry, test_vmap, test_func) already run every op's
samples through forward-vs-torch, gradcheck, gradgradcheck and the vmap checks."""
import numpy as np
import pytest

import microtensor as mt
import microtensor.nn.functional as F
from microtensor.autograd import gradgradcheck

torch = pytest.importorskip("torch", reason="PyTorch is the oracle of these tests")
TF = torch.nn.functional


def to_np(t):
    return np.array(t.detach()._array())


def pair(values, dtype=np.float64, requires_grad=False):
    values = np.asarray(values, dtype=dtype)
    return (mt.tensor(values, requires_grad=requires_grad),
            torch.tensor(values, requires_grad=requires_grad))


# Kinks and the points around them where PyTorch's subgradient choice shows
KINKS = [-6.0, -3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0, 6.0, -2.0, 2.0]
POINTS = sorted(set(KINKS + list(np.linspace(-8, 8, 33)) + [-30.0, 30.0, 1e-8, -1e-8]))

# (microtensor functional, torch functional, keyword arguments)
ACTIVATIONS = [
    (F.gelu, TF.gelu, {}), (F.gelu, TF.gelu, {"approximate": "tanh"}),
    (F.silu, TF.silu, {}), (F.mish, TF.mish, {}),
    (F.leaky_relu, TF.leaky_relu, {}), (F.leaky_relu, TF.leaky_relu, {"negative_slope": 0.3}),
    (F.elu, TF.elu, {}), (F.elu, TF.elu, {"alpha": 0.5}), (F.selu, TF.selu, {}),
    (F.celu, TF.celu, {"alpha": 2.0}), (F.softplus, TF.softplus, {}),
    (F.softplus, TF.softplus, {"beta": 2.0, "threshold": 3.0}),
    (F.hardtanh, TF.hardtanh, {}), (F.hardtanh, TF.hardtanh, {"min_val": -3.0, "max_val": 2.0}),
    (F.relu6, TF.relu6, {}), (F.hardsigmoid, TF.hardsigmoid, {}),
    (F.hardswish, TF.hardswish, {}), (F.logsigmoid, TF.logsigmoid, {}),
    (F.softsign, TF.softsign, {}), (F.tanhshrink, TF.tanhshrink, {}),
    (F.threshold, TF.threshold, {"threshold": 0.5, "value": -2.0}),
]
INPLACE = {F.silu, F.mish, F.leaky_relu, F.elu, F.selu, F.celu, F.hardtanh, F.relu6,
           F.hardsigmoid, F.hardswish, F.threshold}


def _id(case):
    return case[0].__name__ + "".join(f"-{k}={v}" for k, v in case[2].items())


@pytest.mark.parametrize("case", ACTIVATIONS, ids=[_id(c) for c in ACTIVATIONS])
def test_values_and_subgradients_match_torch(case):
    ours_f, torch_f, kwargs = case
    x, tx = pair(POINTS, requires_grad=True)
    y, ty = ours_f(x, **kwargs), torch_f(tx, **kwargs)
    np.testing.assert_allclose(to_np(y), ty.detach().numpy(), rtol=1e-12, atol=1e-14)
    # the gradient at every point, kinks included, and the second derivative
    (g,) = mt.autograd.grad(y.sum(), [x], create_graph=True)
    (tg,) = torch.autograd.grad(ty.sum(), [tx], create_graph=True)
    # (PyTorch's hardsigmoid gradient is float32's 1/6 even in float64: hence 1e-7)
    np.testing.assert_allclose(to_np(g), tg.detach().numpy(), rtol=1e-7, atol=1e-14)
    try:
        (tgg,) = torch.autograd.grad((tg * tg).sum(), [tx], allow_unused=True)
    except RuntimeError as e:     # hardsigmoid's: none in PyTorch (zero: it is piecewise linear)
        assert "not implemented" in str(e)
        tgg = torch.zeros(len(POINTS), dtype=torch.float64)
    if g.requires_grad:
        (gg,) = mt.autograd.grad((g * g).sum(), [x])
        np.testing.assert_allclose(to_np(gg), tgg.numpy(), rtol=1e-10, atol=1e-12)
    else:   # piecewise linear: PyTorch's second derivative is zero
        assert tgg is None or not tgg.any()
    # float32 and the in-place form
    x32, tx32 = pair(POINTS, np.float32)
    np.testing.assert_allclose(to_np(ours_f(x32, **kwargs)), torch_f(tx32, **kwargs).numpy(),
                               rtol=2e-6, atol=1e-6)
    if ours_f in INPLACE:
        result = ours_f(x32, inplace=True, **kwargs)
        torch_f(tx32, inplace=True, **kwargs)
        assert result is x32
        np.testing.assert_allclose(to_np(x32), tx32.numpy(), rtol=2e-6, atol=1e-6)


def test_grad_fn_names_match_torch():
    def name(fn):
        return type(fn).__name__ if hasattr(fn, "_saved_tensors") or "torch" in \
            type(fn).__module__ else fn.name()
    x, tx = pair([0.5, -1.5], requires_grad=True)
    w, tw = pair([0.25], requires_grad=True)
    for ours, theirs in [
            (F.gelu(x), TF.gelu(tx)), (F.selu(x), TF.selu(tx)), (F.relu6(x), TF.relu6(tx)),
            (F.logsigmoid(x), TF.logsigmoid(tx)), (F.prelu(x, w), TF.prelu(tx, tw)),
            (x.nan_to_num(), tx.nan_to_num()), (x.erfinv(), tx.erfinv()),
            (F.leaky_relu(x), TF.leaky_relu(tx)), (F.softplus(x), TF.softplus(tx)),
            (F.glu(x), TF.glu(tx)), (mt.atan2(x, x), torch.atan2(tx, tx))]:
        assert ours.grad_fn.name() == theirs.grad_fn.name()


# --------------------------------------------------------------------------- special functions

WIDE = np.concatenate([np.linspace(-30, 30, 60001), np.logspace(-300, 1.4, 500),
                       -np.logspace(-300, 1.4, 500), [0.0, -0.0, 0.46875, 4.0, -4.0, 26.5,
                                                      27.0, 40.0, np.inf, -np.inf, np.nan]])


@pytest.mark.parametrize("name", ["erf", "erfc"])
def test_erf_erfc_to_float64_precision(name):
    ours = to_np(getattr(mt, name)(mt.tensor(WIDE)))
    theirs = getattr(torch, name)(torch.tensor(WIDE)).numpy()
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(theirs))
    # relative to the value (erfc down to its smallest normal results)
    np.testing.assert_allclose(ours, theirs, rtol=2e-15, atol=1e-300)
    ours32 = to_np(getattr(mt, name)(mt.tensor(WIDE, dtype=mt.float32)))
    theirs32 = getattr(torch, name)(torch.tensor(WIDE, dtype=torch.float32)).numpy()
    np.testing.assert_allclose(ours32, theirs32, rtol=2e-6, atol=1e-37)


def test_erfinv_to_float64_precision():
    y = np.concatenate([np.linspace(-1, 1, 20001), 1 - np.logspace(-16, -0.5, 300),
                        -1 + np.logspace(-16, -0.5, 300), np.logspace(-300, -1, 300),
                        [1.0, -1.0, 1.5, -2.0, np.nan, 0.0, -0.0]])
    ours = to_np(mt.erfinv(mt.tensor(y)))
    theirs = torch.erfinv(torch.tensor(y)).numpy()
    np.testing.assert_array_equal(ours[-7:-2], theirs[-7:-2])      # inf, -inf and nans
    np.testing.assert_allclose(ours, theirs, rtol=4e-15, atol=1e-300)
    assert np.signbit(ours[-1]) and not np.signbit(ours[-2])
    ours32 = to_np(mt.erfinv(mt.tensor(y, dtype=mt.float32)))
    theirs32 = torch.erfinv(torch.tensor(y, dtype=torch.float32)).numpy()
    np.testing.assert_allclose(ours32, theirs32, rtol=1e-6, atol=1e-37)


def test_special_functions_tensor_methods_and_inplace():
    x, tx = pair([[0.3, -0.7], [0.9, 0.0]])
    for name in ["erf", "erfc", "erfinv", "square"]:
        np.testing.assert_allclose(to_np(getattr(x, name)()), getattr(tx, name)().numpy(),
                                   rtol=1e-14)
        a, ta = x.clone(), tx.clone()
        assert getattr(a, name + "_")() is a
        getattr(ta, name + "_")()
        np.testing.assert_allclose(to_np(a), ta.numpy(), rtol=1e-14)
    ints = mt.tensor([1, -2, 3])
    assert mt.erf(ints).dtype is mt.float32 and mt.square(ints).dtype is mt.int64
    np.testing.assert_array_equal(to_np(mt.clip(x, -0.5, 0.5)), torch.clip(tx, -0.5, 0.5))
    a = x.clone()
    assert a.clip_(max=0.1) is a and float(a.max()) == 0.1
    np.testing.assert_allclose(to_np(mt.arctan2(x, x.t())), torch.arctan2(tx, tx.t()))
    with pytest.raises(RuntimeError, match="can't be cast"):
        ints.erf_()


def test_addcmul_addcdiv_nan_to_num():
    a, ta = pair(np.random.default_rng(0).standard_normal((3, 4)))
    b, tb = pair(np.random.default_rng(1).uniform(0.5, 2, (4,)))
    np.testing.assert_allclose(to_np(mt.addcmul(a, a, b, value=0.5)),
                               torch.addcmul(ta, ta, tb, value=0.5).numpy(), rtol=1e-14)
    np.testing.assert_allclose(to_np(a.addcdiv(a, b, value=-2)),
                               ta.addcdiv(ta, tb, value=-2).numpy(), rtol=1e-14)
    c, tc = a.clone(), ta.clone()
    assert c.addcdiv_(a, b) is c
    tc.addcdiv_(ta, tb)
    np.testing.assert_allclose(to_np(c), tc.numpy(), rtol=1e-14)
    ints = mt.tensor([1, 2])
    # an integer result takes value as an integer, truncated
    assert to_np(mt.addcmul(ints, ints, ints, value=1.5)).tolist() == \
        torch.addcmul(torch.tensor([1, 2]), torch.tensor([1, 2]), torch.tensor([1, 2]),
                      value=1.5).tolist()
    with pytest.raises(RuntimeError, match="Integer division with addcdiv"):
        mt.addcdiv(ints, ints, ints)
    special = [np.nan, np.inf, -np.inf, 1.0]
    for dtype in (np.float32, np.float64):
        s, ts = pair(special, dtype)
        np.testing.assert_array_equal(to_np(s.nan_to_num()), ts.nan_to_num().numpy())
        np.testing.assert_array_equal(to_np(mt.nan_to_num(s, 1.0, 2.0, -3.0)),
                                      torch.nan_to_num(ts, 1.0, 2.0, -3.0).numpy())
    s, ts = pair(special, requires_grad=True)
    (g,) = mt.autograd.grad(s.nan_to_num().sum(), [s])
    np.testing.assert_array_equal(to_np(g), [0.0, 0.0, 0.0, 1.0])


# --------------------------------------------------------------------------- glu, prelu

def test_glu_values_gradients_and_errors():
    x, tx = pair(np.random.default_rng(2).standard_normal((2, 6, 3)), requires_grad=True)
    for dim in (1, -2, 0):
        y, ty = F.glu(x, dim), TF.glu(tx, dim)
        np.testing.assert_allclose(to_np(y), ty.detach().numpy(), rtol=1e-14)
        (g,) = mt.autograd.grad((y * y).sum(), [x])
        (tg,) = torch.autograd.grad((ty * ty).sum(), [tx])
        np.testing.assert_allclose(to_np(g), tg.numpy(), rtol=1e-12)
    assert gradgradcheck(lambda t: F.glu(t, 1), (x,))
    with pytest.raises(RuntimeError, match="Halving dimension must be even, but dimension 2 "
                                           "is size 3"):
        F.glu(x)
    with pytest.raises(RuntimeError, match="glu does not support scalars"):
        F.glu(mt.tensor(1.0))


def test_prelu_per_channel_and_errors():
    rng = np.random.default_rng(3)
    x, tx = pair(rng.standard_normal((2, 3, 4)), requires_grad=True)
    w, tw = pair([0.1, -0.2, 0.3], requires_grad=True)
    y, ty = F.prelu(x, w), TF.prelu(tx, tw)
    np.testing.assert_allclose(to_np(y), ty.detach().numpy(), rtol=1e-14)
    grads = mt.autograd.grad((y * y).sum(), [x, w])
    tgrads = torch.autograd.grad((ty * ty).sum(), [tx, tw])
    for g, tg in zip(grads, tgrads):
        np.testing.assert_allclose(to_np(g), tg.numpy(), rtol=1e-12)
    # at 0 the gradient is the weight's side, as PyTorch's
    z, tz = pair([0.0, 1.0], requires_grad=True)
    one, tone = pair([0.5])
    (g,) = mt.autograd.grad(F.prelu(z, one).sum(), [z])
    (tg,) = torch.autograd.grad(TF.prelu(tz, tone).sum(), [tz])
    np.testing.assert_array_equal(to_np(g), tg.numpy())
    with pytest.raises(RuntimeError, match="Found parameter numbers = 2 and channel size = 3"):
        F.prelu(x, mt.ones(2, dtype=mt.float64))
    with pytest.raises(RuntimeError, match="ndim = 2"):
        F.prelu(x, mt.ones(1, 3, dtype=mt.float64))


# --------------------------------------------------------------------------- errors and dtypes

@pytest.mark.parametrize("name", ["gelu", "silu", "mish", "leaky_relu", "elu", "selu", "celu",
                                  "softplus", "hardsigmoid", "hardswish", "logsigmoid"])
def test_float_only_activations_refuse_integers_as_torch(name):
    ints = mt.tensor([1, -2])
    with pytest.raises(NotImplementedError) as ours:
        getattr(F, name)(ints)
    with pytest.raises(NotImplementedError) as theirs:
        getattr(TF, name)(torch.tensor([1, -2]))
    assert str(ours.value) == str(theirs.value)


def test_integer_activations_keep_their_dtype():
    ints, tints = mt.tensor([-9, 0, 2, 7]), torch.tensor([-9, 0, 2, 7])
    for ours, theirs in [(F.hardtanh(ints), TF.hardtanh(tints)),
                         (F.relu6(ints), TF.relu6(tints)),
                         (F.threshold(ints, 1, 20), TF.threshold(tints, 1, 20))]:
        assert ours.dtype is mt.int64
        np.testing.assert_array_equal(to_np(ours), theirs.numpy())


def test_argument_errors():
    x = mt.ones(3)
    with pytest.raises(RuntimeError, match="approximate argument must be either none or tanh"):
        F.gelu(x, approximate="fast")
    with pytest.raises(RuntimeError, match="alpha cannot be 0 for CELU"):
        F.celu(x, alpha=0.0)
    with pytest.raises(ValueError, match="min_val cannot be greater than max_val"):
        F.hardtanh(x, 1.0, -1.0)
    with pytest.raises(AssertionError, match="must be greater than min_val"):
        mt.nn.Hardtanh(1.0, -1.0)
    before = to_np(x)
    with pytest.raises(RuntimeError):
        F.gelu(x, approximate="fast")
    np.testing.assert_array_equal(to_np(x), before)


# --------------------------------------------------------------------------- modules

MODULES = [("GELU", ()), ("GELU", ("tanh",)), ("SiLU", ()), ("SiLU", (True,)), ("Mish", ()),
           ("LeakyReLU", ()), ("LeakyReLU", (0.2, True)), ("ELU", ()), ("ELU", (0.5, True)),
           ("SELU", (True,)), ("CELU", (2.0,)), ("Softplus", ()), ("Softplus", (2, 5)),
           ("Hardtanh", ()), ("Hardtanh", (-2, 2, True)), ("ReLU6", ()), ("ReLU6", (True,)),
           ("Hardsigmoid", (True,)), ("Hardswish", ()), ("LogSigmoid", ()), ("Softsign", ()),
           ("Tanhshrink", ()), ("GLU", ()), ("GLU", (0,)), ("PReLU", ()), ("PReLU", (4, 0.1)),
           ("Threshold", (0.1, 20)), ("Threshold", (0.1, 20, True))]


@pytest.mark.parametrize("name, args", MODULES)
def test_modules_match_torch(name, args):
    ours, theirs = getattr(mt.nn, name)(*args), getattr(torch.nn, name)(*args)
    assert repr(ours) == repr(theirs)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    values = np.random.default_rng(4).uniform(-8, 8, (2, 4, 6)).astype(np.float32)
    x, tx = mt.tensor(values), torch.tensor(values)
    y, ty = ours(x), theirs(tx)
    np.testing.assert_allclose(to_np(y), ty.detach().numpy(), rtol=2e-6, atol=1e-6)


def test_prelu_module_loads_a_torch_state_dict():
    theirs = torch.nn.PReLU(3)
    with torch.no_grad():
        theirs.weight.copy_(torch.tensor([0.1, 0.2, 0.3]))
    ours = mt.nn.PReLU(3)
    assert ours.weight.shape == (3,) and float(ours.weight[0]) == 0.25
    ours.load_state_dict({k: mt.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    x = np.random.default_rng(5).standard_normal((2, 3, 4)).astype(np.float32)
    np.testing.assert_allclose(to_np(ours(mt.tensor(x))),
                               theirs(torch.tensor(x)).detach().numpy(), rtol=1e-6)


# --------------------------------------------------------------------------- vmap

def test_per_sample_gradients_of_an_mlp_with_activations_match_torch_func():
    """vmap(grad) through gelu, prelu (a shared weight) and glu, without the fallback."""
    import warnings
    rng = np.random.default_rng(6)
    xs = rng.standard_normal((5, 3, 8))
    w = rng.standard_normal((8, 8)) * 0.3
    a = rng.uniform(-0.5, 0.5, 8)

    def make_loss(lib, Fn):
        def loss(weight, slope, x):
            h = Fn.gelu(x @ weight, approximate="tanh")
            h = Fn.prelu(h, slope)
            return (Fn.glu(Fn.silu(h), -1) ** 2).sum()
        return loss

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ours = mt.func.vmap(mt.func.grad(make_loss(mt, F), argnums=(0, 1)),
                            in_dims=(None, None, 0))(mt.tensor(w), mt.tensor(a),
                                                     mt.tensor(xs))
    theirs = torch.func.vmap(torch.func.grad(make_loss(torch, TF), argnums=(0, 1)),
                             in_dims=(None, None, 0))(torch.tensor(w), torch.tensor(a),
                                                      torch.tensor(xs))
    for o, t in zip(ours, theirs):
        np.testing.assert_allclose(to_np(o), t.numpy(), rtol=1e-10, atol=1e-12)
