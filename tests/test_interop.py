"""Interop: ``numpy()`` and ``__array__`` (shared memory), ``tolist``, ``item``, Python
number conversions, DLPack both ways with NumPy and PyTorch (zero-copy), and ``repr``
text identical to PyTorch's (modulo the module name)."""
import math

import numpy as np
import pytest

import microtensor as mt

try:
    import torch
except ImportError:
    torch = None

requires_torch = pytest.mark.skipif(torch is None, reason="PyTorch (the oracle) is not installed")


# --------------------------------------------------------------- NumPy

def test_numpy_shares_memory_with_the_exact_geometry():
    t = mt.arange(12.).view(3, 4).clone()
    view = t.t()[1:]
    arr = view.numpy()
    assert arr.shape == (3, 3) and arr.strides == (4, 16)
    assert np.shares_memory(arr, t.numpy())
    arr[0, 0] = 100.0
    assert t[0, 1].item() == 100.0
    t.zero_()
    assert arr.sum() == 0


def test_numpy_refuses_tensors_that_require_grad():
    x = mt.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="detach"):
        x.numpy()
    assert x.detach().numpy().tolist() == [1.0, 1.0]
    with pytest.raises(RuntimeError, match="detach"):
        np.asarray(x)       # a writable alias would bypass autograd, as PyTorch refuses


def test_array_protocol():
    t = mt.tensor([[1, 2], [3, 4]], dtype=mt.int32)
    arr = np.asarray(t)
    assert arr.dtype == np.int32 and arr.tolist() == [[1, 2], [3, 4]]
    assert np.asarray(t, dtype=np.float64).dtype == np.float64
    assert (np.add(t, 1) == np.array([[2, 3], [4, 5]])).all()
    assert np.asarray(t.t()).tolist() == [[1, 3], [2, 4]]


@pytest.mark.parametrize("dtype, value, python_type", [
    ("float32", 1.5, float), ("float64", -2.25, float), ("int64", 7, int), ("int32", -3, int),
    ("bool", True, bool)])
def test_item_tolist_and_python_numbers(dtype, value, python_type):
    t = mt.tensor([value, value], dtype=getattr(mt, dtype))
    assert type(t[0].item()) is python_type and t[0].item() == value
    assert t.tolist() == [value, value] and type(t.tolist()[0]) is python_type
    assert mt.tensor(value, dtype=getattr(mt, dtype)).tolist() == value
    assert float(t[1]) == float(value) and int(t[0]) == int(value) and bool(t[0]) == bool(value)
    assert t.view(2, 1)[1].item() == value  # any one-element tensor


def test_conversion_errors_are_pytorchs():
    many = mt.ones(3)
    with pytest.raises(RuntimeError, match="3 elements"):
        many.item()
    with pytest.raises(ValueError, match="one element"):
        float(many)
    with pytest.raises(ValueError, match="one element"):
        int(many)
    with pytest.raises(RuntimeError, match="ambiguous"):
        bool(many)
    with pytest.raises(TypeError):
        [0, 1][mt.tensor(1.0)]
    assert [0, 1][mt.tensor(1)] == 1
    assert mt.tensor([[1, 2], [3, 4]]).t().tolist() == [[1, 3], [2, 4]]
    assert mt.zeros(2, 0).tolist() == [[], []]


# --------------------------------------------------------------- DLPack

def test_dlpack_with_numpy_both_ways():
    t = mt.arange(6.).view(2, 3).clone()
    arr = np.from_dlpack(t.t())
    assert arr.shape == (3, 2) and arr.strides == (4, 12) and arr.flags.writeable
    arr[0, 1] = -1.0
    assert t[1, 0].item() == -1.0
    source = np.arange(8, dtype=np.int64).reshape(2, 4)[:, 1:]
    back = mt.from_dlpack(source)
    assert back.dtype is mt.int64 and back.stride() == (4, 1) and back.shape == (2, 3)
    back.add_(100)
    assert source[0, 0] == 101


@requires_torch
def test_dlpack_with_torch_both_ways():
    t = mt.arange(12.).view(3, 4).clone()
    theirs = torch.from_dlpack(t[:, 1:])
    assert theirs.shape == (3, 3) and theirs.stride() == (4, 1)
    assert theirs.data_ptr() == t[:, 1:].data_ptr()
    theirs[0, 0] = 42.0
    assert t[0, 1].item() == 42.0
    source = torch.arange(10, dtype=torch.int32)[2:8].view(2, 3)
    ours = mt.from_dlpack(source)
    assert ours.dtype is mt.int32 and ours.data_ptr() == source.data_ptr()
    ours.mul_(-1)
    assert source.tolist() == [[-2, -3, -4], [-5, -6, -7]]
    assert mt.from_dlpack(torch.tensor(True)).item() is True
    assert mt.from_dlpack(torch.zeros(0, 3)).shape == (0, 3)


def test_dlpack_refuses_tensors_that_require_grad():
    with pytest.raises(RuntimeError, match="detach"):
        mt.ones(2, requires_grad=True).__dlpack__()
    assert mt.ones(2).__dlpack_device__()[0] == 1  # kDLCPU


# --------------------------------------------------------------- repr

def normalized(ours):
    """Our repr written as PyTorch's module name, and a dtype suffix that our longer module
    name pushed onto a new line put back (PyTorch's would fit on the last line)."""
    return ours.replace("microtensor.", "torch.")


REPR_CASES = [
    [1.5, 2], [1, 2, 3], [True, False], 3.25, 7, True, False, -0.0, [], [[]], [[1., 2.], [3., 4.]],
    [0.], [0, 0], [1e-5, 1.], [1e9, 1.], [1., 1e4], [float("nan"), 1.], [float("inf"), -2.5],
    [float("-inf"), float("nan")], [1, -1000000], [[1.123456, -2.5], [300.25, 4]], [0.1] * 30,
    list(range(100)), [[1e-10]], [123456789.0, 1.], [-1.5e-4, 2.], [1e-4, 1e-4], [0.5, 1000.5],
    [[[1, 2], [3, 4]], [[5, 6], [7, 8]]], [100.0, 200.0],
]


def _arrays():
    rng = np.random.default_rng(0)
    return [rng.standard_normal((6, 7)), rng.standard_normal((3, 4, 5)),
            np.arange(2000).reshape(2, 1000), rng.standard_normal(2000),
            rng.integers(-5, 5, (11, 12)), rng.standard_normal((30, 40)), np.zeros((2, 0, 3))]


@requires_torch
@pytest.mark.parametrize("data", REPR_CASES + _arrays(), ids=lambda d: repr(d)[:30])
@pytest.mark.parametrize("dtype", [None, "float64", "int32", "bool"])
def test_repr_matches_torch(data, dtype):
    if dtype in ("int32", "bool") and not np.isfinite(np.asarray(data, dtype=np.float64)).all():
        return  # NaN and infinity have no integer value
    ours = mt.tensor(data, dtype=None if dtype is None else getattr(mt, dtype))
    theirs = torch.tensor(np.asarray(data) if isinstance(data, np.ndarray) else data,
                          dtype=None if dtype is None else getattr(torch, dtype))
    expected = repr(theirs)
    got = normalized(repr(ours))
    if got != expected and "dtype=" in expected:
        got = got.replace(",\n       dtype=", ", dtype=")
        expected = expected.replace(",\n       dtype=", ", dtype=")
    assert got == expected


@requires_torch
def test_repr_of_autograd_tensors_matches_torch():
    ours = mt.tensor([1.0, 2.0], requires_grad=True)
    theirs = torch.tensor([1.0, 2.0], requires_grad=True)
    assert repr(ours) == repr(theirs)
    for fn in (lambda t: t * 2, lambda t: t.sum(), lambda t: t[0]):
        got, expected = repr(fn(ours)), repr(fn(theirs))
        assert got.split("grad_fn")[0] == expected.split("grad_fn")[0]
        assert "grad_fn=<" in got


def test_repr_by_hand():
    assert repr(mt.tensor([1.5, 2])) == "tensor([1.5000, 2.0000])"
    assert repr(mt.tensor([1, 20])) == "tensor([ 1, 20])"
    assert repr(mt.tensor([True, False])) == "tensor([ True, False])"
    assert repr(mt.tensor(2.0)) == "tensor(2.)"
    assert repr(mt.tensor([], dtype=mt.int64)) == "tensor([], dtype=microtensor.int64)"
    assert repr(mt.zeros(2, 0)) == "tensor([], size=(2, 0))"
    assert repr(mt.tensor([1.0], dtype=mt.float64)) == "tensor([1.], dtype=microtensor.float64)"
    assert repr(mt.tensor([1e-5, 1.0])) == "tensor([1.0000e-05, 1.0000e+00])"
    assert repr(mt.ones(2, requires_grad=True)) == "tensor([1., 1.], requires_grad=True)"
    assert repr(mt.tensor([math.inf, 1.0])) == "tensor([inf, 1.])"
    assert repr(mt.arange(2000)).count("...") == 1


def test_dlpack_with_jax_both_ways():
    jax = pytest.importorskip("jax", reason="JAX is not installed (optional DLPack partner)")
    import jax.numpy as jnp
    theirs = jnp.arange(6.0, dtype=jnp.float32).reshape(2, 3)
    ours = mt.from_dlpack(theirs)
    assert ours.shape == (2, 3) and ours.dtype == mt.float32
    assert ours.data_ptr() == theirs.unsafe_buffer_pointer()      # zero-copy import
    # JAX arrays are immutable; it may copy on import (alignment), values must agree
    back = jnp.from_dlpack(mt.arange(6.0).reshape(2, 3).t())
    np.testing.assert_array_equal(np.asarray(back), np.arange(6.0).reshape(2, 3).T)
