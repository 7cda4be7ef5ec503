"""Which dtypes each op accepts, against PyTorch.

NumPy computes on almost any dtype: an op whose kernel forgets to refuse a complex tensor
drops the imaginary parts (or orders complex numbers lexicographically) and answers, where
PyTorch raises; one that forgets to refuse an integer or bool tensor answers in floating
point or wraps around.  Either is a wrong answer.  So each registry sample's floating
tensors are made complex64 (seeded random imaginary parts), int64 and bool in turn, and
the op runs on PyTorch and on microtensor: where PyTorch raises, microtensor raises the
same exception type with the gist of its message (the dtype or the kind of dtype it names)
and leaves every input as it was; where PyTorch answers, microtensor answers the same
(dtype, shape and values).
"""
import re

import numpy as np
import pytest

import microtensor as mt
from microtensor._C.tensor import TensorBase
from microtensor.ops import REGISTRY
from microtensor.testing import seed_for
from test_complex_grad_vs_torch import _complex, _convention, _map_floating
from test_op_registry import (CASES, GAUGE_DEPENDENT, _assert_matches_torch, _sample,
                              _to_torch, _torch_callable)

try:
    import torch
except ImportError:
    torch = None

pytestmark = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (the oracle "
                                                      "of every test here)")

DTYPES = ["complex64", "int64", "bool"]

_SIZE_BLIND = ("PyTorch's kernel, and with it its dtype check, does not run on a 0-d or an "
               "empty input; microtensor refuses the dtype whatever the size")

# Samples whose outcome differs from PyTorch's: {(op, dtype): (sample indices, reason)}.
# Each is an xfail (strict: it fails the run once it passes).
DIFFERENCES = {
    **{(name, dtype): (indices, _SIZE_BLIND) for name, dtype, indices in [
        ("cummax", "complex64", [3, 5]), ("cummin", "complex64", [3, 5]),
        ("kthvalue", "complex64", [3]), ("kthvalue", "bool", [3]),
        ("median", "complex64", [1]), ("median", "bool", [1]),
        ("nanmedian", "complex64", [6]), ("nanmedian", "bool", [6]),
        ("mode", "complex64", [4]), ("mm", "bool", [3]), ("linear", "bool", [6]),
        ("matmul", "bool", [10])]},
    ("convolution", "complex64"): (range(13), (
        "ATen's convolution has no complex kernel, but PyTorch's conv1d/2d/3d and transposed "
        "convolutions (which microtensor computes with this op) convolve complex tensors: "
        "microtensor's convolution does too")),
    **{(name, "complex64"): ([index], (
        "complex Hermitian LDL factorisations (hermitian=True) are not implemented: refused "
        "with a NotImplementedError that says so")) for name, index in [
        ("linalg_ldl_factor", 3), ("linalg_ldl_factor_ex", 3), ("linalg_ldl_solve", 2)]},
    **{key: (indices, reason) for reason, keys in [
        ("bool contractions: PyTorch refuses them (its bmm, dot and addmm have no bool kernel) "
         "but sums a single bool operand into int64 and keeps a bool outer product; "
         "microtensor contracts bools into bools", [
             (("einsum", "bool"), [0, 1, 2, 3, 5, 6, 8, 9, 10, 11, 13]),
             (("bilinear", "bool"), [0, 1, 2]), (("inner", "bool"), [0, 1, 3]),
             (("tensordot", "bool"), [0, 1, 2, 3])]),
        ("addbmm of empty bool batches: PyTorch refuses with a RuntimeError (its int64 sum "
         "cannot be cast to bool), microtensor with mm's NotImplementedError (no bool "
         "kernel)", [(("addbmm", "bool"), [2])]),
        ("PyTorch's message names linalg.svd, which it calls when tolerances are given; "
         "microtensor's is matrix_rank's own on every path (the same exception type)", [
             (("linalg_matrix_rank", "int64"), [2, 5]),
             (("linalg_matrix_rank", "bool"), [2, 5])]),
        ("microtensor's op checks theta as torch.nn.functional.affine_grid does (a "
         "ValueError unless floating); PyTorch's ATen op underneath it checks nothing", [
             (("affine_grid_generator", dtype), [0, 1, 2, 3])
             for dtype in ("complex64", "int64", "bool")]),
        ("PyTorch's side of the comparison is its autograd of nll_loss, which refuses to "
         "make an integer or bool tensor require grad (and refuses complex tensors with a "
         "NotImplementedError); microtensor's op refuses them all with a TypeError", [
             (("nll_loss_backward", dtype), [0, 1, 2, 3])
             for dtype in ("complex64", "int64", "bool")]),
        ("not implemented: microtensor's soft_margin_loss is written with softplus, which "
         "has no complex kernel (refused with a NotImplementedError, no wrong answer)", [
             (("soft_margin_loss", "complex64"), [0, 1, 2, 3])]),
    ] for key, indices in keys},
    ("topk", "int64"): ([0, 3], (
        "ties (the samples truncated to integers): the order of tied indices is that of each "
        "library's sort, which PyTorch does not specify")),
}


def _converted(value, dtype, rng):
    if dtype == "complex64":
        return _complex(value, rng, mt.complex64, requires_grad=False)
    return _map_floating(value, lambda t: t.detach().to(getattr(mt, dtype)))


def _tensors(value, found):
    if isinstance(value, TensorBase):
        found.append(value)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _tensors(v, found)
    return found


# The words of PyTorch's refusals that say what is refused: the dtype's ScalarType name
# ('ComplexFloat') or the kind of dtype.
_GIST = re.compile(r"\b(ComplexFloat|Long|Bool|complex|integer|integral|boolean|floating)\b",
                   re.IGNORECASE)


def _gist(message):
    """A pattern for the part of PyTorch's ``message`` that names what it refuses (None
    when it names no dtype)."""
    found = _GIST.search(message)
    return None if found is None else "(?i)" + re.escape(found.group(0))


def _pytorch_takes_the_sample(fn, args, kwargs):
    try:
        fn(*_to_torch(args), **_to_torch(kwargs))
    except Exception:
        return False
    return True


def _cases():
    cases = []
    for case in CASES:
        name, index = case.values
        for dtype in DTYPES:
            indices, reason = DIFFERENCES.get((name, dtype), ((), None))
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if index in indices else []
            cases.append(pytest.param(name, index, dtype, id=f"{case.id}-{dtype}", marks=marks))
    return cases


@pytest.mark.parametrize("name, index, dtype", _cases())
def test_dtype_acceptance_matches_torch(name, index, dtype):
    op = REGISTRY[name]
    fn = _torch_callable(op)
    if fn is None or op.random:
        pytest.skip("no PyTorch counterpart, or random")
    args, kwargs = _sample(name, index)
    if not any(t.dtype.is_floating_point for t in _tensors([args, list(kwargs.values())], [])):
        pytest.skip("no floating input")
    if not _pytorch_takes_the_sample(fn, args, kwargs):
        pytest.skip("PyTorch's op of this name takes other arguments (or refuses the sample)")
    rng = np.random.default_rng(seed_for(f"{name}-{index}-{dtype}"))
    args, kwargs = _converted(args, dtype, rng), {k: _converted(v, dtype, rng)
                                                  for k, v in kwargs.items()}
    reason = _convention(name, args, kwargs)
    if reason:
        pytest.skip(reason)
    targs, tkwargs = _to_torch(args), _to_torch(kwargs)
    try:
        expected = fn(*targs, **tkwargs)
    except Exception as error:
        inputs = _tensors([args, list(kwargs.values())], [])
        before = [np.array(t._array()) for t in inputs]
        with pytest.raises(type(error), match=_gist(str(error))):
            op(*args, **kwargs)
        for t, value in zip(inputs, before):
            np.testing.assert_array_equal(np.asarray(t._array()), value,
                                          err_msg="a refused call changed an input")
        return
    result = op(*args, **kwargs)
    compare_values = "empty" not in name and name not in GAUGE_DEPENDENT
    # (complex64 or float32 results: single precision)
    _assert_matches_torch(result, expected, compare_values, rtol=1e-4, atol=1e-5)
