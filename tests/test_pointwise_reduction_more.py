"""PyTorch's pointwise and reduction names added for porting: the aliases (``absolute``,
``arccos``, ``greater`` ...), the tensor predicates (``is_signed``, ``is_nonzero`` ...),
the special functions (``lgamma``, ``digamma``, ``polygamma``, ``i0`` ...), the other new
pointwise ops and the NaN-aware and statistical reductions, each against PyTorch on edge
values (inf, nan, 0, negative numbers, integer and bool dtypes).  The registry sweeps
(tests/test_op_registry.py, test_vmap.py, test_func.py) run their samples too."""
import math

import numpy as np
import pytest

import microtensor as mt

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
