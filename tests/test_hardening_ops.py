"""Regression tests for silent wrong results in the ops layer, each compared with PyTorch:
integer division by zero, out-of-range scalars written into tensors, ``out=`` arguments
(version counters, autograd, shapes, ``self`` of the index ops), writes into expanded or
overlapping memory, and the small cases the coverage probes found (0-d random tensors,
cross-entropy and binary cross-entropy, clamp with min > max, ``all(dim=())``, 0-norm)."""
import math
import warnings

import numpy as np
import pytest

import microtensor as mt
import microtensor.nn.functional as F

torch = pytest.importorskip("torch", reason="PyTorch (the oracle these cases are compared "
                                            "with) is not installed")
import torch.nn.functional as TF  # noqa: E402

LIBS = pytest.mark.parametrize("L", [mt, torch], ids=["microtensor", "torch"])


def outcome(fn, L):
    """``fn(L)`` as comparable data: ("ok", values) or ("error", type, message)."""
    try:
        result = fn(L)
    except Exception as e:  # noqa: BLE001 - the exception is what is compared
        return "error", type(e), str(e)
    if isinstance(result, (tuple, list)):
        return "ok", [np.asarray(r.detach().tolist() if hasattr(r, "detach") else r)
                      for r in result]
    return "ok", np.asarray(result.detach().tolist() if hasattr(result, "detach") else result)


def assert_same_outcome(fn, message=None):
    """``fn(mt)`` and ``fn(torch)`` give the same values, or raise the same exception type
    (whose message contains ``message`` when given)."""
    ours, theirs = outcome(fn, mt), outcome(fn, torch)
    assert ours[0] == theirs[0], f"microtensor: {ours}, torch: {theirs}"
    if ours[0] == "error":
        assert ours[1] is theirs[1], f"microtensor: {ours}, torch: {theirs}"
        if message is not None:
            assert message in ours[2] and message in theirs[2], (ours[2], theirs[2])
    else:
        for a, b in zip(ours[1] if isinstance(ours[1], list) else [ours[1]],
                        theirs[1] if isinstance(theirs[1], list) else [theirs[1]]):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6, equal_nan=True)


# --------------------------------------------------------------------------- division by zero

@pytest.mark.parametrize("fn", [
    lambda L: L.tensor([5, -7, 3]) // 0,
    lambda L: L.tensor([5, -7, 3]) % 0,
    lambda L: L.tensor([5, -7, 3]) // L.tensor([1, 0, 2]),
    lambda L: L.tensor([5, -7, 3]) % L.tensor([1, 0, 2]),
    lambda L: L.div(L.tensor([5, -7]), 0, rounding_mode="floor"),
    lambda L: L.div(L.tensor([5, -7]), L.tensor([0, 1]), rounding_mode="trunc"),
    lambda L: L.fmod(L.tensor([5, -7]), 0),
    lambda L: L.remainder(L.tensor([5, -7]), L.tensor([2, 0])),
    lambda L: L.tensor([5, -7], dtype=L.int32).floor_divide(0),
    lambda L: 5 // L.tensor([0]),
    lambda L: 5 % L.tensor([0, 1]),
    lambda L: L.tensor(5) // 0,
    lambda L: L.tensor([5, 6]).remainder_(0),
    lambda L: L.tensor([5, 6]).fmod_(L.tensor([0, 1])),
])
def test_integer_division_by_zero_raises(fn):
    assert_same_outcome(fn, "ZeroDivisionError")


@pytest.mark.parametrize("fn", [
    lambda L: L.tensor([5., -7.]) // 0,
    lambda L: L.tensor([5, -7]) // 0.0,
    lambda L: L.tensor([5, -7]) % L.tensor([0.0, 2.0]),
    lambda L: L.div(L.tensor([5, -7]), 0),
    lambda L: L.empty(0, dtype=L.int64) // 0,
    lambda L: L.tensor([5, -7]) // L.tensor([2, -3]),
    lambda L: 7 % L.tensor([2, -3]),
    lambda L: L.fmod(L.tensor([5, -7]), L.tensor([2, 3])),
])
def test_division_without_integer_zero_divisor(fn):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)   # NumPy's float divide by zero
        assert_same_outcome(fn)


@pytest.mark.parametrize("update", [
    lambda x: x.__ifloordiv__(0), lambda x: x.__imod__(0),
    lambda x: x.__imod__(mt.tensor([1, 0])), lambda x: x.fmod_(0),
    lambda x: x.div_(mt.tensor([0, 1]), rounding_mode="trunc"),
])
def test_refused_inplace_division_changes_nothing(update):
    x = mt.tensor([5, 6])
    version = x._version
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        update(x)
    assert x.tolist() == [5, 6] and x._version == version


@LIBS
def test_inplace_floor_divide_and_modulo_write_into_self(L):
    x = L.tensor([7, -7])
    alias = x
    x //= 2
    assert alias is x and x.tolist() == [3, -4]
    x %= 3
    assert alias is x and x.tolist() == [0, 2]
