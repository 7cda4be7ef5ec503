"""PyTorch's pointwise and reduction names added for porting: the aliases (``absolute``,
``arccos``, ``greater`` ...), the tensor predicates (``is_signed``, ``is_nonzero`` ...),
the special functions (``lgamma``, ``digamma``, ``polygamma``, ``i0`` ...), the other new
pointwise ops and the NaN-aware and statistical reductions, each against PyTorch on edge
values (inf, nan, 0, negative numbers, integer and bool dtypes).  The registry sweeps
(tests/test_op_registry.py, test_vmap.py, test_func.py) run their samples too."""
import math
import warnings

import numpy as np
import pytest

import microtensor as mt
from microtensor.ops import REGISTRY

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (optional "
                                                       "test oracle)")

INF, NAN = math.inf, math.nan
EDGES = [0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 2.5, -2.5, 3.0, -3.0, 1e-300, -1e-300, 40.0, -40.5,
         1e10, -1e10, INF, -INF, NAN]


def pair(values, dtype="float64"):
    """The same values as a microtensor and a torch tensor."""
    arr = np.array(values, dtype=dtype)
    return mt.tensor(arr), torch.from_numpy(arr.copy())


def assert_same(ours, theirs, rtol=1e-12, atol=0.0):
    if isinstance(theirs, tuple):
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            assert_same(a, b, rtol, atol)
        return
    if not isinstance(theirs, torch.Tensor):
        assert ours == theirs
        return
    assert tuple(ours.shape) == tuple(theirs.shape)
    assert ours.dtype.name == str(theirs.dtype).split(".")[-1]
    np.testing.assert_allclose(np.asarray(ours.detach()._array(), dtype=np.float64),
                               theirs.detach().double().numpy(), rtol=rtol, atol=atol,
                               equal_nan=True)


def raises_like_torch(ours, theirs):
    """Both calls raise, with the same exception type and message."""
    with pytest.raises(Exception) as expected:
        theirs()
    with pytest.raises(type(expected.value)) as got:
        ours()
    assert str(got.value) == str(expected.value)


# ---------------------------------------------------------------- aliases

ALIASES = {"absolute": "abs", "arccos": "acos", "arcsin": "asin", "arctan": "atan",
           "greater": "gt", "greater_equal": "ge", "less": "lt", "less_equal": "le",
           "not_equal": "ne", "multiply": "mul", "divide": "div", "subtract": "sub",
           "negative": "neg", "true_divide": "div", "fix": "trunc"}
BINARY_ALIASES = {"greater", "greater_equal", "less", "less_equal", "not_equal", "multiply",
                  "divide", "subtract", "true_divide"}


@needs_torch
@pytest.mark.parametrize("name", sorted(ALIASES))
@pytest.mark.parametrize("dtype", ["float64", "int64"])
def test_alias_matches_torch_function_method_inplace_and_out(name, dtype):
    values = [v for v in EDGES if dtype == "float64" or math.isfinite(v)]
    a, ta = pair(values, dtype)
    args = (pair(values[::-1], dtype) if name in BINARY_ALIASES else None)
    extra, textra = ((args[0],), (args[1],)) if args else ((), ())
    assert_same(getattr(mt, name)(a, *extra), getattr(torch, name)(ta, *textra))
    assert_same(getattr(a, name)(*extra), getattr(ta, name)(*textra))
    # the alias is the op: the same graph node, so the same gradient
    if dtype == "float64" and name not in ("greater", "greater_equal", "less", "less_equal",
                                           "not_equal"):
        x = a.clone().requires_grad_()
        y = getattr(mt, name)(x, *extra)
        assert y.grad_fn.name() == getattr(mt, ALIASES[name])(x, *extra).grad_fn.name()
    target, ttarget = a.clone(), ta.clone()
    try:
        expected = getattr(ttarget, name + "_")(*textra)
    except RuntimeError as e:   # an integer result that cannot hold a float one
        with pytest.raises(RuntimeError):
            getattr(target, name + "_")(*extra)
        assert "can't be cast" in str(e)
    else:
        assert getattr(target, name + "_")(*extra) is target
        assert_same(target, expected)
    assert hasattr(mt, name + "_") == hasattr(torch, name + "_")
    out = mt.empty(0, dtype=getattr(mt, str(getattr(torch, name)(ta, *textra).dtype)[6:]))
    assert getattr(mt, name)(a, *extra, out=out) is out
    assert_same(out, getattr(torch, name)(ta, *textra))


def test_alias_keyword_arguments_are_the_ops():
    a = mt.tensor([7.0, -7.0])
    assert mt.divide(a, 2, rounding_mode="floor").tolist() == [3.0, -4.0]
    assert mt.subtract(a, 1, alpha=3).tolist() == [4.0, -10.0]
    assert mt.vmap(mt.arctan)(a.reshape(2, 1)).shape == (2, 1)


@needs_torch
def test_positive():
    a = mt.tensor([1.0, -2.0])
    assert mt.positive(a) is a and a.positive() is a
    raises_like_torch(lambda: mt.positive(mt.tensor([True])),
                      lambda: torch.positive(torch.tensor([True])))


# ---------------------------------------------------------------- predicates, type_as

DTYPES = ["float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8",
          "uint8", "bool"]


@needs_torch
@pytest.mark.parametrize("dtype", DTYPES)
def test_is_signed_is_complex_type_as(dtype):
    a, ta = mt.zeros(2, dtype=getattr(mt, dtype)), torch.zeros(2, dtype=getattr(torch, dtype))
    assert a.is_signed() == ta.is_signed() and mt.is_signed(a) == torch.is_signed(ta)
    assert a.is_complex() is False and mt.is_complex(a) is False
    source = mt.tensor([1.5, -2.0])
    assert_same(source.type_as(a), torch.tensor([1.5, -2.0], dtype=torch.float32).type_as(ta))
    same = mt.ones(2, dtype=getattr(mt, dtype))
    assert same.type_as(a) is same


@needs_torch
def test_predicates_refuse_numbers_like_torch():
    raises_like_torch(lambda: mt.is_complex(1), lambda: torch.is_complex(1))
    raises_like_torch(lambda: mt.ones(2).type_as(1), lambda: torch.ones(2).type_as(1))
    raises_like_torch(lambda: mt.is_signed(1.0), lambda: torch.is_signed(1.0))


@needs_torch
@pytest.mark.parametrize("values", [[1.0], [0.0], [-0.0], [NAN], [[2]], [], [1.0, 2.0], 0.0, 3])
def test_is_nonzero(values):
    a, ta = mt.tensor(values), torch.tensor(values)
    try:
        expected = torch.is_nonzero(ta)
    except RuntimeError:
        raises_like_torch(lambda: mt.is_nonzero(a), lambda: torch.is_nonzero(ta))
        raises_like_torch(lambda: a.is_nonzero(), lambda: ta.is_nonzero())
    else:
        assert mt.is_nonzero(a) is expected and a.is_nonzero() is expected


@needs_torch
def test_is_same_size_and_get_device():
    a, b = mt.ones(2, 3), mt.ones(3, 2)
    assert a.is_same_size(mt.zeros(2, 3)) and not mt.is_same_size(a, b)
    assert a.get_device() == torch.ones(2).get_device() == mt.get_device(a) == -1


# ---------------------------------------------------------------- new pointwise ops

UNARY = ["acosh", "asinh", "atanh", "exp2", "deg2rad", "rad2deg", "lgamma", "digamma", "i0",
         "sinc", "logit", "signbit", "isposinf", "isneginf", "isreal", "sgn", "arccosh",
         "arcsinh", "arctanh"]
# float64 agreement; PyTorch's own float32 loops and its trigamma carry larger errors
# than these functions, which compute in float64 (see special_math)
RTOL = {"float64": 1e-12, "float32": 2e-6, "int64": 2e-6, "bool": 2e-6, "int32": 2e-6}


def _edge_values(dtype):
    if dtype in ("float64", "float32"):
        return EDGES + [1.4616321449683622, -2.4570247, 0.25, 0.75, 10.5, -10.5, 700.0]
    if dtype == "bool":
        return [True, False]
    return [0, 1, -1, 2, -2, 3, 5, -7, 40]


@needs_torch
@pytest.mark.parametrize("name", UNARY)
@pytest.mark.parametrize("dtype", ["float64", "float32", "int64", "bool"])
def test_unary_on_edge_values(name, dtype):
    a, ta = pair(_edge_values(dtype), dtype)
    # absolute near the zeros of lgamma and digamma (both computed to ~1e-15 there)
    atol = 1e-14 if dtype == "float64" else 1e-6
    expected = getattr(torch, name)(ta)
    assert_same(getattr(mt, name)(a), expected, RTOL[dtype], atol)
    assert_same(getattr(a, name)(), expected, RTOL[dtype], atol)
    out = mt.empty(0, dtype=getattr(mt, str(expected.dtype)[6:]))
    if name != "isreal":
        assert getattr(mt, name)(a, out=out) is out
        assert_same(out, expected, RTOL[dtype], atol)
    if hasattr(ta, name + "_"):
        target, ttarget = a.clone(), ta.clone()
        try:
            getattr(ttarget, name + "_")()
        except RuntimeError:
            raises_like_torch(lambda: getattr(target, name + "_")(),
                              lambda: getattr(ta.clone(), name + "_")())
        else:
            assert getattr(target, name + "_")() is target
            assert_same(target, ttarget, RTOL[dtype], atol)
    assert hasattr(mt.Tensor, name + "_") == hasattr(torch.Tensor, name + "_")


@needs_torch
def test_gamma_family_over_a_wide_range():
    rng = np.random.default_rng(0)
    values = np.concatenate([np.linspace(-30, 30, 2401), rng.uniform(-1e3, 1e3, 500),
                             10 ** rng.uniform(-300, 300, 500), -10 ** rng.uniform(-300, 15, 500),
                             [1.0, 2.0, 1 + 1e-9, 2 - 1e-9, 1e-320, -1e-320]])
    a, ta = mt.tensor(values), torch.from_numpy(values)
    # absolute near the zeros of lgamma and digamma (both compute them to ~1e-15)
    assert_same(mt.lgamma(a), torch.lgamma(ta), 1e-12, 1e-13)
    assert mt.lgamma(mt.tensor([1.0, 2.0])).tolist() == [0.0, 0.0]
    assert_same(mt.digamma(a), torch.digamma(ta), 1e-11, 1e-13)
    finite = values[np.abs(values) < 1e4]
    a, ta = mt.tensor(finite), torch.from_numpy(finite)
    assert_same(mt.i0(a), torch.i0(ta), 1e-13)
    assert_same(REGISTRY["special_i1"](a), torch.special.i1(ta), 1e-13)
    for n in (0, 2, 3, 6):   # (small values at negative x come from a sum that cancels)
        assert_same(mt.polygamma(n, a), torch.polygamma(n, ta), 1e-11, 1e-16)
    # PyTorch's trigamma stops its series early (relative error ~1e-10) and gives a
    # large finite number at the poles; ours gives +inf there
    off_poles = finite[(finite > 0) | (finite != np.round(finite))]
    assert_same(mt.polygamma(1, mt.tensor(off_poles)),
                torch.polygamma(1, torch.from_numpy(off_poles)), 1e-9)
    assert mt.polygamma(1, mt.tensor([-2.0, 0.0])).tolist() == [INF, INF]


@needs_torch
def test_polygamma_and_mvlgamma_arguments():
    a, ta = pair([0.5, 1.5, 3.0, -1.5])
    assert_same(a.polygamma(2), ta.polygamma(2))
    target, ttarget = a.clone(), ta.clone()
    assert target.polygamma_(1) is target
    assert_same(target, ttarget.polygamma_(1), 1e-9)
    raises_like_torch(lambda: mt.polygamma(-1, a), lambda: torch.polygamma(-1, ta))
    assert_same(mt.polygamma(1, mt.tensor([1, 2])), torch.polygamma(1, torch.tensor([1, 2])),
                1e-6)
    b, tb = pair([2.5, 3.0, 7.25, 1.0])
    for p in (1, 2, 3):
        assert_same(mt.mvlgamma(b, p), torch.mvlgamma(tb, p))
        assert_same(b.mvlgamma(p), tb.mvlgamma(p))
    target, ttarget = b.clone(), tb.clone()
    assert target.mvlgamma_(2) is target
    assert_same(target, ttarget.mvlgamma_(2))
    raises_like_torch(lambda: mt.mvlgamma(b, 0), lambda: torch.mvlgamma(tb, 0))
    assert_same(mt.mvlgamma(mt.tensor([2, 3]), 2), torch.mvlgamma(torch.tensor([2, 3]), 2), 1e-6)
    raises_like_torch(lambda: mt.tensor([2, 3]).mvlgamma_(2),
                      lambda: torch.tensor([2, 3]).mvlgamma_(2))


@needs_torch
def test_logit_eps():
    a, ta = pair([0.0, 0.05, 0.5, 0.95, 1.0, -0.5, 1.5, NAN])
    for eps in (None, 0.1, 0.6):
        assert_same(mt.logit(a, eps), torch.logit(ta, eps))
    x, tx = a.clone().requires_grad_(), ta.clone().requires_grad_()
    for eps in (None, 0.1):
        g, = mt.autograd.grad(mt.logit(x, eps).sum(), x)
        tg, = torch.autograd.grad(torch.logit(tx, eps).sum(), tx)
        assert_same(g, tg)


BINARY_FUNCTIONS = ["xlogy", "hypot", "copysign", "logaddexp", "logaddexp2", "nextafter",
                    "fmax", "fmin", "gcd", "lcm", "heaviside", "ldexp", "float_power"]


def _grid(dtype):
    values = _edge_values(dtype)
    x, y = np.meshgrid(np.array(values, dtype=dtype), np.array(values, dtype=dtype))
    return x.reshape(-1), y.reshape(-1)


@needs_torch
@pytest.mark.parametrize("name", BINARY_FUNCTIONS)
@pytest.mark.parametrize("dtypes", [("float64", "float64"), ("float32", "float32"),
                                    ("int64", "int64"), ("float32", "float64"),
                                    ("int64", "float32"), ("bool", "bool")])
def test_binary_on_edge_values(name, dtypes):
    """Every pair of edge values, mixed dtypes; PyTorch's errors where it refuses them."""
    x, _ = _grid(dtypes[0])
    _, y = _grid(dtypes[1]) if dtypes[0] == dtypes[1] else (None, np.resize(
        np.array(_edge_values(dtypes[1]), dtype=dtypes[1]), x.shape))
    a, b = mt.tensor(x), mt.tensor(y)
    ta, tb = torch.from_numpy(x.copy()), torch.from_numpy(y.copy())
    try:
        expected = getattr(torch, name)(ta, tb)
    except (RuntimeError, NotImplementedError, TypeError):
        raises_like_torch(lambda: getattr(mt, name)(a, b), lambda: getattr(torch, name)(ta, tb))
        return
    rtol, atol = (1e-12, 1e-15) if expected.dtype == torch.float64 else (2e-6, 1e-7)
    assert_same(getattr(mt, name)(a, b), expected, rtol, atol)
    assert_same(getattr(a, name)(b), getattr(ta, name)(tb), rtol, atol)
    assert hasattr(mt.Tensor, name + "_") == hasattr(torch.Tensor, name + "_")
    if hasattr(torch.Tensor, name + "_"):
        target, ttarget = a.clone(), ta.clone()
        try:
            getattr(ttarget, name + "_")(tb)
        except RuntimeError:
            raises_like_torch(lambda: getattr(target, name + "_")(b),
                              lambda: getattr(ta.clone(), name + "_")(tb))
        else:
            assert getattr(target, name + "_")(b) is target
            assert_same(target, ttarget, rtol, atol)
    out = mt.empty(0, dtype=getattr(mt, str(expected.dtype)[6:]))
    assert getattr(mt, name)(a, b, out=out) is out
    assert_same(out, expected, rtol, atol)


@needs_torch
@pytest.mark.parametrize("name, other", [("xlogy", 2.5), ("copysign", -1), ("copysign", 0.0),
                                         ("copysign", -0.0), ("hypot", 2.0), ("fmax", 1.0),
                                         ("gcd", 4), ("ldexp", 2), ("logaddexp", 1.0),
                                         ("heaviside", 1.0), ("float_power", 2)])
def test_binary_with_a_number(name, other):
    a, ta = pair([0.5, -1.5, 0.0, INF, NAN])
    try:
        expected = getattr(torch, name)(ta, other)
    except TypeError:
        raises_like_torch(lambda: getattr(mt, name)(a, other),
                          lambda: getattr(torch, name)(ta, other))
    else:
        assert_same(getattr(mt, name)(a, other), expected)


@needs_torch
def test_xlogy_number_first_and_zero_times_nan():
    a, ta = pair([0.5, 0.0, NAN, -1.0, INF])
    assert_same(mt.xlogy(2, a), torch.xlogy(2, ta))
    assert_same(mt.xlogy(mt.zeros(5, dtype=mt.float64), a),
                torch.xlogy(torch.zeros(5, dtype=torch.float64), ta))


GRADIENT_CASES = {   # PyTorch's conventions at the special points
    "xlogy": ([0.0, 0.0, 1.5, 2.0], [0.0, -1.0, 2.0, 0.0]),
    "copysign": ([0.0, -0.0, 1.5, -2.0], [1.0, -1.0, -2.0, 0.0]),
    "fmax": ([1.0, NAN, 2.0, 1.0], [1.0, 1.0, NAN, 3.0]),
    "fmin": ([1.0, NAN, 2.0, 1.0], [1.0, 1.0, NAN, 3.0]),
    "hypot": ([3.0, 0.5, -1.0, 2.0], [4.0, -0.5, 1.0, 0.0]),
    "logaddexp": ([0.0, 700.0, -3.0, 1.0], [0.0, 1.0, 800.0, 1.0]),
    "logaddexp2": ([0.0, 700.0, -3.0, 1.0], [0.0, 1.0, 800.0, 1.0]),
}


@needs_torch
@pytest.mark.parametrize("name", sorted(GRADIENT_CASES))
def test_binary_gradients_at_special_points(name):
    x, y = GRADIENT_CASES[name]
    a, ta = pair(x)
    b, tb = pair(y)
    for t in (a, b, ta, tb):
        t.requires_grad_()
    ours = mt.autograd.grad(getattr(mt, name)(a, b).sum(), [a, b])
    theirs = torch.autograd.grad(getattr(torch, name)(ta, tb).sum(), [ta, tb])
    assert_same(tuple(ours), tuple(theirs))


@needs_torch
def test_unary_gradients_at_special_points():
    a, ta = pair([0.0, 1e-3, -2.5, 1.5, 3.0])
    for name in ("sinc", "i0", "lgamma", "digamma", "exp2", "deg2rad"):
        x, tx = a.clone().requires_grad_(), ta.clone().requires_grad_()
        g, = mt.autograd.grad(getattr(mt, name)(x).sum(), x)
        tg, = torch.autograd.grad(getattr(torch, name)(tx).sum(), tx)
        assert_same(g, tg, 1e-9)
    x, tx = a.clone().requires_grad_(), ta.clone().requires_grad_()
    g, = mt.autograd.grad(REGISTRY["special_i1"](x).sum(), x)
    tg, = torch.autograd.grad(torch.special.i1(tx).sum(), tx)
    assert_same(g, tg, 1e-12)


@needs_torch
def test_frexp():
    a, ta = pair([0.5, -1.5, 0.0, -0.0, 3.0, 1e-310, INF, -INF, NAN])
    ours, theirs = mt.frexp(a), torch.frexp(ta)
    assert_same(tuple(ours), tuple(theirs))
    assert ours.mantissa is ours[0] and ours.exponent is ours[1]
    assert_same(tuple(a.frexp()), tuple(theirs))
    for dtype in ("float32", "float16"):
        assert_same(tuple(mt.frexp(a.to(getattr(mt, dtype)))),
                    tuple(torch.frexp(ta.to(getattr(torch, dtype)))))
    raises_like_torch(lambda: mt.frexp(mt.tensor([1, 2])),
                      lambda: torch.frexp(torch.tensor([1, 2])))
    mantissa, exponent = mt.empty(0, dtype=mt.float64), mt.empty(0, dtype=mt.int32)
    result = mt.frexp(a, out=(mantissa, exponent))
    assert result[0] is mantissa and result[1] is exponent
    assert_same((mantissa, exponent), tuple(theirs))
    raises_like_torch(lambda: mt.frexp(a, out=(mt.empty(0), mt.empty(0, dtype=mt.int32))),
                      lambda: torch.frexp(ta, out=(torch.empty(0),
                                                   torch.empty(0, dtype=torch.int32))))
    x, tx = a[:6].clone().requires_grad_(), ta[:6].clone().requires_grad_()
    g, = mt.autograd.grad(mt.frexp(x).mantissa.sum(), x)
    tg, = torch.autograd.grad(torch.frexp(tx).mantissa.sum(), tx)
    assert_same(g, tg)


@needs_torch
def test_float_power_in_place_and_out():
    a, ta = pair([0.5, 2.0, -1.5])
    target, ttarget = a.clone(), ta.clone()
    assert target.float_power_(2) is target
    assert_same(target, ttarget.float_power_(2))
    assert_same(mt.float_power(2, a), torch.float_power(2, ta))
    raises_like_torch(lambda: a.float().float_power_(2), lambda: ta.float().float_power_(2))
    raises_like_torch(lambda: mt.float_power(a, 2, out=mt.empty(3)),
                      lambda: torch.float_power(ta, 2, out=torch.empty(3)))
    out = mt.empty(3, dtype=mt.float64)
    assert mt.float_power(a.float(), 2, out=out) is out


@needs_torch
def test_heaviside_dtypes():
    a, ta = pair([-1.0, 0.0, 2.0, NAN])
    raises_like_torch(lambda: mt.heaviside(a, mt.tensor(1)),
                      lambda: torch.heaviside(ta, torch.tensor(1)))
    raises_like_torch(lambda: mt.heaviside(a, 1.0), lambda: torch.heaviside(ta, 1.0))
    x = a.clone().requires_grad_()
    with pytest.raises(RuntimeError):
        mt.heaviside(x, mt.tensor(0.5, dtype=mt.float64)).sum().backward()


@needs_torch
@pytest.mark.parametrize("invert", [False, True])
def test_isin(invert):
    cases = [([[1, 2, 3], [4, 5, 6]], [2, 6, 9]), ([0.5, -1.0, NAN, INF], [NAN, 0.5, INF]),
             ([1, 2, 3], []), ([], [1, 2])]
    for elements, tests in cases:
        a, ta = pair(elements, "float64" if isinstance(tests[0] if tests else 0.0, float)
                     else "int64")
        b, tb = pair(tests, a.dtype.name)
        assert_same(mt.isin(a, b, invert=invert), torch.isin(ta, tb, invert=invert))
        assert_same(mt.isin(a, b.float(), invert=invert),
                    torch.isin(ta, tb.float(), invert=invert))
    a, ta = pair([1, 2, 3], "int64")
    assert_same(mt.isin(2, a, invert=invert), torch.isin(2, ta, invert=invert))
    assert_same(mt.isin(a, 3, invert=invert), torch.isin(ta, 3, invert=invert))
    raises_like_torch(lambda: mt.isin(mt.tensor([True]), a),
                      lambda: torch.isin(torch.tensor([True]), ta))


def test_isin_under_vmap_takes_its_rule():
    elements = mt.tensor([[1, 2, 3], [4, 5, 6]])
    tests = mt.tensor([[1, 5], [6, 6]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")      # the per-sample loop warns
        for fn, args in [(mt.isin, (elements, tests)),
                         (lambda x: mt.isin(x, mt.tensor([2, 4]), invert=True), (elements,)),
                         (lambda t: mt.isin(5, t), (tests,))]:
            loop = mt.stack([fn(*(a[i] for a in args)) for i in range(2)])
            assert mt.equal(mt.vmap(fn)(*args), loop)


# ---------------------------------------------------------------- reductions

WITH_NANS = [[1.0, NAN, 3.0, -2.0], [NAN, NAN, NAN, NAN], [0.5, INF, -1.0, NAN],
             [2.0, 2.0, -INF, 0.0]]


@needs_torch
@pytest.mark.parametrize("name", ["nansum", "nanmean"])
@pytest.mark.parametrize("dtype", ["float64", "float32", "int64"])
def test_nansum_nanmean(name, dtype):
    values = WITH_NANS if dtype != "int64" else [[1, 2, 3], [4, -5, 6]]
    a, ta = pair(values, dtype)
    for args, kwargs in [((), {}), ((1,), {}), ((0, True), {}), (((0, 1),), {}),
                         ((), {"dtype": torch.float64})]:
        mt_kwargs = {k: getattr(mt, str(v)[6:]) for k, v in kwargs.items()}
        try:
            expected = getattr(torch, name)(ta, *args, **kwargs)
        except RuntimeError:
            raises_like_torch(lambda: getattr(mt, name)(a, *args, **mt_kwargs),
                              lambda: getattr(torch, name)(ta, *args, **kwargs))
            continue
        assert_same(getattr(mt, name)(a, *args, **mt_kwargs), expected, 1e-6)
        assert_same(getattr(a, name)(*args, **mt_kwargs), expected, 1e-6)
    if dtype == "float64":
        # (along dim 0 no slice is all NaN: there PyTorch's gradient is NaN, ours 0)
        x, tx = a.clone().requires_grad_(), ta.clone().requires_grad_()
        g, = mt.autograd.grad(getattr(mt, name)(x, 0).nan_to_num().sum(), x)
        tg, = torch.autograd.grad(getattr(torch, name)(tx, 0).nan_to_num().sum(), tx)
        assert_same(g, tg)


@needs_torch
def test_aminmax():
    for values in (WITH_NANS, [[1, 5, -3], [2, 2, 0]], [[True, False]], 3.5):
        a, ta = mt.tensor(values), torch.tensor(values)
        for kwargs in ({}, {"dim": 1}, {"dim": -1, "keepdim": True}, {"keepdim": True},
                       {"dim": 0}):
            if a.dim() == 0 and kwargs.get("dim") == 1:
                continue
            ours, theirs = mt.aminmax(a, **kwargs), torch.aminmax(ta, **kwargs)
            assert_same(tuple(ours), tuple(theirs))
            assert ours.min is ours[0] and ours.max is ours[1]
            assert_same(tuple(a.aminmax(**kwargs)), tuple(theirs))
    raises_like_torch(lambda: mt.aminmax(mt.zeros(0)), lambda: torch.aminmax(torch.zeros(0)))
    assert_same(tuple(mt.aminmax(mt.zeros(2, 0), dim=0)),
                tuple(torch.aminmax(torch.zeros(2, 0), dim=0)))
    assert repr(mt.aminmax(mt.tensor([1.0]))).startswith("microtensor.return_types.aminmax(")


@needs_torch
@pytest.mark.parametrize("name", ["var_mean", "std_mean"])
def test_var_mean_std_mean(name):
    a, ta = pair([[1.0, 2.0, 4.0], [3.0, -1.0, 0.5]])
    for args, kwargs in [((), {}), ((1,), {}), ((1,), {"correction": 0}), ((1, True, True), {}),
                         ((False,), {}), (((0, 1),), {"keepdim": True, "correction": 2}),
                         ((), {"unbiased": False})]:
        assert_same(getattr(mt, name)(a, *args, **kwargs),
                    getattr(torch, name)(ta, *args, **kwargs))
    raises_like_torch(lambda: getattr(mt, name)(mt.tensor([1, 2])),
                      lambda: getattr(torch, name)(torch.tensor([1, 2])))
    x, tx = a.clone().requires_grad_(), ta.clone().requires_grad_()
    ours = mt.autograd.grad(sum(t.sum() * w for t, w in zip(getattr(mt, name)(x, 1), (2, 3))), x)
    theirs = torch.autograd.grad(sum(t.sum() * w for t, w in zip(getattr(torch, name)(tx, 1),
                                                                 (2, 3))), tx)
    assert_same(ours[0], theirs[0])


@needs_torch
def test_logcumsumexp():
    for values in ([0.0, 1000.0, -INF, INF, 2.0], [-INF, -INF, 3.0], [[1.0, -700.0, 5.0],
                                                                      [NAN, 0.0, 1.0]], 2.5):
        a, ta = pair(values)
        for dim in range(-max(a.dim(), 1), max(a.dim(), 1)):
            assert_same(mt.logcumsumexp(a, dim), torch.logcumsumexp(ta, dim))
            assert_same(a.logcumsumexp(dim), ta.logcumsumexp(dim))
            assert_same(mt.logcumsumexp(a.float(), dim), torch.logcumsumexp(ta.float(), dim),
                        1e-6)
    raises_like_torch(lambda: mt.logcumsumexp(mt.tensor([1, 2]), 0),
                      lambda: torch.logcumsumexp(torch.tensor([1, 2]), 0))
    # large values: no overflow in the gradient either
    a, ta = pair([[800.0, -5.0, 900.0, 1.0], [0.5, 0.25, -3.0, 2.0]])
    w, tw = pair([[1.0, -2.0, 0.5, 3.0], [-1.0, 0.0, 2.0, 1.0]])
    x, tx = a.clone().requires_grad_(), ta.clone().requires_grad_()
    g, = mt.autograd.grad((mt.logcumsumexp(x, 1) * w).sum(), x)
    tg, = torch.autograd.grad((torch.logcumsumexp(tx, 1) * tw).sum(), tx)
    assert_same(g, tg)
    out = mt.empty(0, dtype=mt.float64)
    assert mt.logcumsumexp(a, 1, out=out) is out
    assert_same(out, torch.logcumsumexp(ta, 1))


@needs_torch
def test_nanmedian():
    a, ta = pair(WITH_NANS)
    assert_same(mt.nanmedian(a), torch.nanmedian(ta))
    assert_same(a.nanmedian(), ta.nanmedian())
    for dim, keepdim in [(1, False), (0, True), (-1, True)]:
        ours, theirs = mt.nanmedian(a, dim, keepdim), torch.nanmedian(ta, dim, keepdim)
        assert_same(ours.values, theirs.values)
        # indices: where a row has a value that is not NaN (PyTorch's index in a row of NaN
        # only is whichever NaN its partial sort leaves in the middle; ours is the first)
        rows = ~torch.isnan(ta).all(dim, keepdim=keepdim)
        np.testing.assert_array_equal(ours.indices._array()[rows.numpy()],
                                      theirs.indices[rows].numpy())
    b, tb = mt.tensor([[3, 1, 2], [1, 1, 5]]), torch.tensor([[3, 1, 2], [1, 1, 5]])
    assert_same(mt.nanmedian(b), torch.nanmedian(tb))
    assert_same(tuple(mt.nanmedian(b, 1)), tuple(torch.nanmedian(tb, 1)))
    assert_same(mt.nanmedian(mt.zeros(0)), torch.nanmedian(torch.zeros(0)))
    raises_like_torch(lambda: mt.nanmedian(mt.zeros(2, 0), 1),
                      lambda: torch.nanmedian(torch.zeros(2, 0), 1))


QUANTILE_CASES = [[[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 9.0], [0.5, -1.0, 8.0, 2.0]],
                  [[1.0, NAN, 3.0, -2.0], [NAN, NAN, NAN, NAN], [0.5, 2.0, -1.0, 4.0]]]


@needs_torch
@pytest.mark.parametrize("name", ["quantile", "nanquantile"])
@pytest.mark.parametrize("interpolation", ["linear", "lower", "higher", "midpoint", "nearest"])
def test_quantile(name, interpolation):
    for values in QUANTILE_CASES:
        a, ta = pair(values)
        for q in (0.0, 0.5, 1 / 3, 1.0, [0.25, 0.5, 1 / 6], [0.75]):
            mq, tq = (pair(q)) if isinstance(q, list) else (q, q)
            for args in [(), (1,), (0, True), (-1, True), (None, True)]:
                # (PyTorch's lerp rounds differently when the weight is 1/2 or more)
                assert_same(getattr(mt, name)(a, mq, *args, interpolation=interpolation),
                            getattr(torch, name)(ta, tq, *args, interpolation=interpolation),
                            1e-12, 1e-15)
                assert_same(getattr(a, name)(mq, *args, interpolation=interpolation),
                            getattr(ta, name)(tq, *args, interpolation=interpolation),
                            1e-12, 1e-15)
    a, ta = pair(QUANTILE_CASES[0])
    x, tx = a.clone().requires_grad_(), ta.clone().requires_grad_()
    g, = mt.autograd.grad(getattr(mt, name)(x, 0.3, 1, interpolation=interpolation).sum(), x)
    tg, = torch.autograd.grad(getattr(torch, name)(tx, 0.3, 1,
                                                   interpolation=interpolation).sum(), tx)
    assert_same(g, tg)


@needs_torch
def test_quantile_errors_and_out():
    a, ta = pair([[1.0, 2.0], [3.0, 4.0]])
    for args, kwargs in [((1.5,), {}), ((-0.1,), {}), ((0.5,), {"interpolation": "bad"})]:
        raises_like_torch(lambda: mt.quantile(a, *args, **kwargs),
                          lambda: torch.quantile(ta, *args, **kwargs))
    raises_like_torch(lambda: mt.quantile(mt.tensor([1, 2]), 0.5),
                      lambda: torch.quantile(torch.tensor([1, 2]), 0.5))
    raises_like_torch(lambda: mt.quantile(mt.zeros(0), 0.5),
                      lambda: torch.quantile(torch.zeros(0), 0.5))
    raises_like_torch(lambda: mt.nanquantile(a, mt.tensor([[0.5]], dtype=mt.float64)),
                      lambda: torch.nanquantile(ta, torch.tensor([[0.5]], dtype=torch.float64)))
    raises_like_torch(lambda: mt.quantile(a, mt.tensor([0.5])),
                      lambda: torch.quantile(ta, torch.tensor([0.5])))
    raises_like_torch(lambda: mt.quantile(a, mt.tensor([0.5, 2.0], dtype=mt.float64)),
                      lambda: torch.quantile(ta, torch.tensor([0.5, 2.0], dtype=torch.float64)))
    out = mt.empty(0, dtype=mt.float64)
    assert mt.quantile(a, 0.5, 1, out=out) is out
    assert_same(out, torch.quantile(ta, 0.5, 1))


@needs_torch
def test_histc():
    rng = np.random.default_rng(0)
    data = np.concatenate([rng.standard_normal(200), [0.0, 1.0, -1.0, 3.0, NAN, 0.5, 2.5]])
    for dtype in ("float64", "float32"):
        a, ta = mt.tensor(data.astype(dtype)), torch.from_numpy(data.astype(dtype))
        finite = a[~a.isnan()]
        tfinite = ta[~ta.isnan()]
        for args in [(), (7,), (4, 0, 3), (5, -1.0, 1.0), (3, 1.0, 1.0), (10, 0.5, 2.5)]:
            assert_same(mt.histc(finite, *args), torch.histc(tfinite, *args))
            assert_same(finite.histc(*args), tfinite.histc(*args))
            if len(args) == 3 and args[1] != args[2]:   # the NaN is not counted
                assert_same(mt.histc(a, *args), torch.histc(ta, *args))
            else:   # the data's range is NaN (PyTorch prints it as C++ does: -nan)
                with pytest.raises(RuntimeError, match="is not finite"):
                    mt.histc(a, *args)
    assert_same(mt.histc(mt.tensor([1.0, 1.0]), 3), torch.histc(torch.tensor([1.0, 1.0]), 3))
    for bad, tbad in [((mt.tensor([1.0, 2.0]), 3, 3, 1), (torch.tensor([1.0, 2.0]), 3, 3, 1)),
                      ((mt.tensor([1.0, INF]), 3), (torch.tensor([1.0, INF]), 3)),
                      ((mt.tensor([1.0, 2.0]), -1), (torch.tensor([1.0, 2.0]), -1)),
                      ((mt.tensor([1, 2]), 3), (torch.tensor([1, 2]), 3))]:
        raises_like_torch(lambda: mt.histc(*bad), lambda: torch.histc(*tbad))
    out = mt.empty(0)
    assert mt.histc(mt.tensor([1.0, 2.0]), 4, out=out) is out
    assert_same(out, torch.histc(torch.tensor([1.0, 2.0]), 4))


def test_histc_under_vmap_takes_each_sample_range():
    rows = mt.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 1.0], [5.0, 5.0, 5.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for args in [(3,), (4, 0, 5)]:
            batched = mt.vmap(lambda r: mt.histc(r, *args))(rows)
            assert mt.equal(batched, mt.stack([mt.histc(r, *args) for r in rows]))


@needs_torch
def test_bincount():
    a, ta = pair([1, 4, 1, 0, 6, 4], "int64")
    w, tw = pair([0.5, 1.0, 2.0, -1.0, 3.0, 0.25])
    assert_same(mt.bincount(a), torch.bincount(ta))
    assert_same(a.bincount(), ta.bincount())
    assert_same(mt.bincount(a, w), torch.bincount(ta, tw))
    assert_same(mt.bincount(a, w.float(), 9), torch.bincount(ta, tw.float(), 9))
    assert_same(mt.bincount(a, mt.tensor([1, 2, 3, 4, 5, 6])),
                torch.bincount(ta, torch.tensor([1, 2, 3, 4, 5, 6])))
    assert_same(mt.bincount(mt.tensor([], dtype=mt.int64), minlength=3),
                torch.bincount(torch.tensor([], dtype=torch.int64), minlength=3))
    assert_same(mt.bincount(a.to(mt.uint8)), torch.bincount(ta.to(torch.uint8)))
    for bad, tbad in [((mt.tensor([-1]),), (torch.tensor([-1]),)),
                      ((mt.tensor([1.0]),), (torch.tensor([1.0]),)),
                      ((mt.tensor([[1]]),), (torch.tensor([[1]]),)),
                      ((a, w[:2]), (ta, tw[:2])), ((a, None, -1), (ta, None, -1))]:
        raises_like_torch(lambda: mt.bincount(*bad), lambda: torch.bincount(*tbad))
    with pytest.raises(RuntimeError, match="dynamic shape"):
        mt.vmap(mt.bincount)(mt.tensor([[1, 2], [0, 0]]))


@needs_torch
def test_out_of_the_reductions_and_isin():
    a, ta = pair(WITH_NANS)
    for name in ("nansum", "nanmean"):
        out = mt.empty(0, dtype=mt.float64)
        assert getattr(mt, name)(a, 1, out=out) is out
        assert_same(out, getattr(torch, name)(ta, 1))
        cast = mt.empty(0)     # the result is cast into an out of another float dtype
        getattr(mt, name)(a, 1, out=cast)
        assert_same(cast, getattr(torch, name)(ta, 1, out=torch.empty(0)), 1e-6)
    low, high = mt.empty(0, dtype=mt.float64), mt.empty(0, dtype=mt.float64)
    result = mt.aminmax(a, dim=0, out=(low, high))
    assert result.min is low and result.max is high
    assert_same((low, high), tuple(torch.aminmax(ta, dim=0)))
    values, indices = mt.empty(0, dtype=mt.float64), mt.empty(0, dtype=mt.int64)
    result = mt.nanmedian(a, 0, out=(values, indices))
    assert result.values is values and result.indices is indices
    assert_same((values, indices), tuple(torch.nanmedian(ta, 0)))
    raises_like_torch(lambda: mt.nanmedian(a, out=(values, indices)),
                      lambda: torch.nanmedian(ta, out=(torch.empty(0), torch.empty(0))))
    for ours, theirs in [
            (lambda: mt.nanmedian(a, 0, out=(mt.empty(0), indices)),
             lambda: torch.nanmedian(ta, 0, out=(torch.empty(0), torch.empty(0).long()))),
            (lambda: mt.aminmax(a, dim=0, out=(mt.empty(0), mt.empty(0))),
             lambda: torch.aminmax(ta, dim=0, out=(torch.empty(0), torch.empty(0)))),
            (lambda: mt.quantile(a, 0.5, 1, out=mt.empty(0)),
             lambda: torch.quantile(ta, 0.5, 1, out=torch.empty(0))),
            (lambda: mt.histc(a[0, :1], 3, out=mt.empty(0)),
             lambda: torch.histc(ta[0, :1], 3, out=torch.empty(0)))]:
        raises_like_torch(ours, theirs)
    found = mt.empty(0, dtype=mt.bool)
    assert mt.isin(a, mt.tensor([1.0, 2.0], dtype=mt.float64), out=found) is found
    assert_same(found, torch.isin(ta, torch.tensor([1.0, 2.0], dtype=torch.float64)))


@needs_torch
@pytest.mark.parametrize("dtype", ["int64", "int32", "int8"])
@pytest.mark.parametrize("form", ["pow", "pow_", "**", "**="])
def test_integer_powers_with_negative_exponents_as_torch(dtype, form):
    """0 for |base| > 1, 1 for a base of 1, +-1 for -1: also in place, where the base
    is overwritten by the result (it was read after being overwritten)."""
    results = []
    for lib in (mt, torch):
        base = lib.tensor([[3, 2, 1, -1, -2, 0], [1, -1, -1, 2, 5, 7]], dtype=getattr(lib, dtype))
        exponent = lib.tensor([-2, -1, -3, -3, -1, 2], dtype=getattr(lib, dtype))
        if form == "pow":
            results.append(base.pow(exponent))
        elif form == "pow_":
            results.append(base.pow_(exponent))
        elif form == "**":
            results.append(base ** exponent)
        else:
            base **= exponent
            results.append(base)
    ours, theirs = results
    assert ours.dtype.name == str(theirs.dtype).split(".")[-1]
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


@needs_torch
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "complex64"])
@pytest.mark.parametrize("exponent", [3, 3.0, -2, -0.5, 0.5, 2, -1])
@pytest.mark.parametrize("form", ["pow", "pow_", "**"])
def test_scalar_powers_bitwise_as_torch(dtype, exponent, form):
    """The exponents PyTorch computes with products, quotients and square roots give its
    bits, not ``np.power``'s (which differ in the last place for a third of the values):
    ``x ** 3`` is ``x * x * x``, ``x ** -2`` is ``1 / (x * x)``, ``x ** -0.5`` is
    ``1 / sqrt(x)``, a complex ``x ** 0.5`` is ``sqrt(x)``.  Real ``x ** 0.5`` is left
    out: PyTorch's float32 square root is not correctly rounded here, NumPy's is."""
    if exponent == 0.5 and dtype != "complex64" or (exponent == -2 and dtype == "complex64"):
        pytest.skip("PyTorch's kernel has no exact NumPy counterpart for this pair")
    if exponent in (-0.5, -1) and dtype == "complex64":
        pytest.skip("PyTorch's kernel has no exact NumPy counterpart for this pair")
    rng = np.random.default_rng(7)
    values = rng.standard_normal(4096) * 4
    if dtype == "complex64":
        values = values + 1j * rng.standard_normal(4096)
    elif exponent == -0.5:
        values = np.abs(values)
    results = []
    for lib in (mt, torch):
        base = lib.tensor(values.astype(np.complex64 if dtype == "complex64" else np.float64)
                          ).to(getattr(lib, dtype))
        if form == "pow":
            results.append(base.pow(exponent))
        elif form == "pow_":
            results.append(base.pow_(exponent))
        else:
            results.append(base ** exponent)
    ours, theirs = results
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
