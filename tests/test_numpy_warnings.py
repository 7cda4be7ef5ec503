"""Ops are as silent as PyTorch's: log(0), 1/0, sqrt(-1), overflow in exp or in a cast give
-inf, inf or NaN without NumPy's RuntimeWarning (a test suite run with warnings as errors
would otherwise fail on them), while the caller's own NumPy code keeps its warnings: the
dispatcher and the backward engine switch NumPy's errors off around each op, not globally.
Where PyTorch itself warns (no degrees of freedom left in ``var``), the warning is its."""
import threading
import warnings

import numpy as np
import pytest

import microtensor as mt

try:
    import torch
except ImportError:
    torch = None

requires_torch = pytest.mark.skipif(torch is None, reason="PyTorch (the oracle) is not installed")

CASES = {
    "log(0)": lambda lib: lib.tensor([0.0, 1.0]).log(),
    "1/0": lambda lib: lib.tensor([0.0, 1.0]) / 0,
    "0/0 tensors": lambda lib: lib.tensor([0.0]).div(lib.tensor([0.0])),
    "x ** -1 at 0": lambda lib: lib.tensor([0.0, 2.0]) ** -1,
    "float_power": lambda lib: lib.tensor([0.0]).float_power(-1),
    "sqrt(-1)": lambda lib: lib.tensor([-1.0, 4.0]).sqrt(),
    "rsqrt(0)": lambda lib: lib.tensor([0.0]).rsqrt(),
    "exp overflow": lambda lib: lib.tensor([100.0], dtype=lib.float32).exp(),
    "cosh overflow": lambda lib: lib.tensor([1e20], dtype=lib.float32).cosh(),
    "atanh(2)": lambda lib: lib.tensor([2.0]).atanh(),
    "reciprocal(0)": lambda lib: lib.tensor([0.0], dtype=lib.float64).reciprocal(),
    "floor division by 0": lambda lib: lib.tensor([1.0, 0.0]).div(0, rounding_mode="floor"),
    "fmod by 0": lambda lib: lib.tensor([5.0]).fmod(0.0),
    "remainder by 0": lambda lib: lib.tensor([5.0]).remainder(0.0),
    "pow of a negative base": lambda lib: lib.tensor([-1.0]).pow(0.5),
    "digamma(0)": lambda lib: lib.tensor([0.0]).digamma(),
    "cast overflow": lambda lib: lib.tensor([1e300], dtype=lib.float64).float(),
    "tensor() overflow": lambda lib: lib.tensor([1e300]),
    "as_tensor overflow": lambda lib: lib.as_tensor(np.array([1e300]), dtype=lib.float32),
    "float16 overflow": lambda lib: lib.tensor(1e300, dtype=lib.float16),
    "sum overflow": lambda lib: lib.tensor([3e38, 3e38], dtype=lib.float32).sum(),
    "log_softmax of -inf": lambda lib: lib.log_softmax(lib.tensor([-float("inf")] * 2), 0),
    "normalize zeros": lambda lib: lib.nn.functional.normalize(lib.zeros(2, 2)),
    "cosine_similarity zeros": lambda lib: lib.nn.functional.cosine_similarity(
        lib.zeros(2, 2), lib.zeros(2, 2)),
}


def _backward_through_log_at_zero(lib):
    x = lib.tensor([0.0, 1.0], requires_grad=True)
    (x.log() * x.sqrt()).sum().backward()
    return x.grad


CASES["backward through log(0)"] = _backward_through_log_at_zero


@pytest.mark.parametrize("name", CASES)
def test_ops_warn_no_more_than_pytorch(name):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ours = CASES[name](mt)
    if torch is not None:
        theirs = CASES[name](torch)
        np.testing.assert_array_equal(ours.detach().numpy(), theirs.detach().numpy())


def test_the_callers_numpy_keeps_its_warnings():
    mt.tensor([0.0]).log()
    x = mt.tensor([0.0], requires_grad=True)
    x.log().sum().backward()
    with pytest.warns(RuntimeWarning, match="divide by zero"):
        np.log(np.zeros(1))


def test_an_op_that_raises_restores_numpys_state():
    with pytest.raises(RuntimeError):
        mt.ones(2, 3) @ mt.ones(2, 3)
    with pytest.raises(RuntimeError):
        mt.ones(2).view(3)
    with pytest.warns(RuntimeWarning):
        np.sqrt(-np.ones(1))


def test_numpy_errors_set_by_the_caller_survive():
    with np.errstate(divide="raise"):
        mt.tensor([0.0]).log()
        with pytest.raises(FloatingPointError):
            np.log(np.zeros(1))


def test_other_threads_numpy_is_untouched():
    seen = []

    def other():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            np.log(np.zeros(1))
        seen.append(len(caught))

    thread = threading.Thread(target=other)
    mt.tensor([0.0]).log()
    thread.start()
    thread.join()
    assert seen == [1]


@requires_torch
@pytest.mark.parametrize("fn", [
    lambda lib: lib.tensor([1.0, 2.0]).var(0, correction=5),
    lambda lib: lib.tensor([[0.0]]).std(1),
    lambda lib: lib.tensor([]).var(),
])
def test_no_degrees_of_freedom_warns_as_pytorch(fn):
    with pytest.warns(UserWarning) as theirs:
        expected = fn(torch)
    with warnings.catch_warnings(record=True) as ours:
        warnings.simplefilter("always")
        result = fn(mt)
    assert [type(w.message) for w in ours] == [UserWarning]
    assert str(ours[0].message) in str(theirs[0].message)
    np.testing.assert_array_equal(result.numpy(), expected.numpy())
