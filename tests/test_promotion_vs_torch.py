"""Every two-input elementwise op on every pair of dtypes, against PyTorch.

A wrong result dtype is a silent wrong answer (an integer result where PyTorch gives a
float, a float32 result computed from float64 values), and so is a kernel that computes
in another dtype than the result's (``nextafter`` of float16 values stepping by
float32's spacing).  Each op runs on tensors, 0-d tensors and Python numbers of eight
dtypes on either side, in both libraries: where PyTorch answers, microtensor gives the
same dtype and values; where PyTorch refuses, microtensor raises the same exception
type.  What differs on purpose is named by ``_known_difference``.
"""
import warnings

import numpy as np
import pytest

import microtensor as mt
from microtensor._C.tensor import TensorBase
from microtensor.ops import REGISTRY
from test_out_vs_torch import _functions

try:
    import torch
except ImportError:
    torch = None

pytestmark = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (the oracle "
                                                      "of every test here)")

DTYPES = ["bool", "uint8", "int32", "int64", "float16", "float32", "float64", "complex64"]
VALUES = [1, 2, 0, 3]
NUMBERS = [True, 3, 2.5, 1.5j]

OPS = sorted(name for name, op in REGISTRY.items()
             if op.family == "pointwise" and op.kind != "inplace" and len(op.inputs) >= 2
             and not name.startswith("_") and torch is not None
             and None not in _functions(name))


def _operand(L, dtype, zero_dim):
    values = [bool(v) for v in VALUES] if dtype == "bool" else VALUES
    return L.tensor(values[1] if zero_dim else values, dtype=getattr(L, dtype))


def _operands():
    found = [(_operand(mt, d, z), _operand(torch, d, z), d + (" 0-d" if z else ""))
             for d in DTYPES for z in (False, True)]
    return found + [(n, n, repr(n)) for n in NUMBERS]


def _known_difference(a, b, t_result, t_error):
    """Why microtensor's outcome may differ from PyTorch's here, or None."""
    if t_error is not None and isinstance(t_error, TypeError) and \
            not isinstance(a, TensorBase):
        return "lenient: PyTorch's function takes no Python number as its first argument"
    if t_error is not None and "must be Tensor, not" in str(t_error):
        return "lenient: PyTorch's function takes no Python number as its second argument"
    half_and_complex = {type(x) is complex or (isinstance(x, TensorBase) and x.dtype.is_complex)
                        for x in (a, b)} == {True, False} and any(
        isinstance(x, TensorBase) and x.dtype is mt.float16 for x in (a, b))
    if half_and_complex:
        return ("float16 with complex: PyTorch computes in complex32 (or has no ComplexHalf "
                "kernel); microtensor has no complex32 and computes in complex64")
    if isinstance(t_result, torch.Tensor) and t_result.dtype is torch.complex32:
        return "complex32 results: microtensor has no complex32 and refuses them"
    if isinstance(t_result, torch.Tensor) and t_result.dtype.is_complex and \
            torch.isnan(t_result).any():
        return ("0 ** 0 of complex tensors: PyTorch's exp(y log x) gives nan, microtensor "
                "NumPy's 1")
    if isinstance(t_error, NotImplementedError) and "'Half'" in str(t_error):
        return ("lenient: microtensor computes half types in float32 and rounds where "
                "PyTorch's CPU has no half kernel (special_zeta)")
    if t_error is not None and "cannot be converted to type" in str(t_error):
        return ("a complex bound for a real tensor: PyTorch's overflow RuntimeError, "
                "microtensor's NotImplementedError for complex clamp")
    return None


def _values(t):
    if isinstance(t, torch.Tensor):
        return (t.to(torch.complex128) if t.dtype.is_complex else t.double()).numpy()
    return np.asarray(t.tolist(), dtype=np.complex128 if t.dtype.is_complex else np.float64)


def outcome_problem(ours, error, expected, t_error, rtol=1e-3):
    """What differs between microtensor's outcome (a result or an error) and PyTorch's, in
    words, or None: the exception type of a refusal, else the dtype and the values."""
    if t_error is not None:
        if error is None or type(error) is not type(t_error):
            return f"PyTorch raises {t_error!r}, microtensor {error!r}"
        return None
    if error is not None:
        return f"microtensor raises {error!r}"
    if str(ours.dtype).split(".")[-1] != str(expected.dtype).split(".")[-1]:
        return f"dtype {ours.dtype}, PyTorch's {expected.dtype}"
    if not np.allclose(_values(ours), _values(expected), rtol=rtol, equal_nan=True):
        return f"values {ours.tolist()}, PyTorch's {expected.tolist()}"
    return None


@pytest.mark.parametrize("name", OPS)
def test_every_dtype_pair_matches_torch(name):
    t_fn, mt_fn = _functions(name)
    failures = []
    operands = _operands()
    for a, ta, left in operands:
        for b, tb, right in operands:
            if not (isinstance(a, TensorBase) or isinstance(b, TensorBase)):
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    expected, t_error = t_fn(ta, tb), None
                except Exception as error:   # noqa: BLE001 (compared below)
                    expected, t_error = None, error
                try:
                    ours, error = mt_fn(a, b), None
                except Exception as e:   # noqa: BLE001
                    ours, error = None, e
            problem = outcome_problem(ours, error, expected, t_error)
            if problem and _known_difference(a, b, expected, t_error) is None:
                failures.append(f"{name}({left}, {right}): {problem}")
    assert not failures, "\n".join(failures[:20])


SCALED = {
    "add": lambda L, x, f: L.add(x, x, alpha=f),
    "sub": lambda L, x, f: L.sub(x, x, alpha=f),
    "addr alpha": lambda L, x, f: L.addr(L.outer(x, x), x, x, alpha=f),
    "addr beta": lambda L, x, f: L.addr(L.outer(x, x), x, x, beta=f),
    "addcmul": lambda L, x, f: L.addcmul(x, x, x, value=f),
}


@pytest.mark.parametrize("name", sorted(SCALED))
def test_scale_factors_of_every_kind_match_torch(name):
    """``alpha``/``beta``/``value`` as bool, int, float and complex numbers on tensors of
    every dtype: PyTorch's refusals (a float factor of an integer result, a bool factor of
    a non-bool one) and its results (a float factor of a complex sum is fine)."""
    failures = []
    for dtype in DTYPES:
        for factor in (True, 2, 2.5, 1.5j):
            ours, theirs = _operand(mt, dtype, False), _operand(torch, dtype, False)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    expected, t_error = SCALED[name](torch, theirs, factor), None
                except Exception as error:   # noqa: BLE001
                    expected, t_error = None, error
                try:
                    result, error = SCALED[name](mt, ours, factor), None
                except Exception as e:   # noqa: BLE001
                    result, error = None, e
            problem = outcome_problem(result, error, expected, t_error)
            if problem:
                failures.append(f"{name}({dtype}, {factor!r}): {problem}")
    assert not failures, "\n".join(failures[:20])
