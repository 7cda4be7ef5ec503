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
