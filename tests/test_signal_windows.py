"""``microtensor.signal.windows`` against ``torch.signal.windows``: every window, both
forms (symmetric and periodic), lengths 0 to 9 and a long one, float32 and float64, the
parameters of each, the checks and their errors, and windows with a history when
``requires_grad=True``."""
import numpy as np
import pytest

import microtensor as mt
import microtensor.signal.windows as windows

torch = pytest.importorskip("torch", reason="PyTorch is the oracle of these tests")
import torch.signal.windows as torch_windows  # noqa: E402

PARAMETERS = {"exponential": [{}, {"tau": 2.5}], "gaussian": [{}, {"std": 0.4}],
              "kaiser": [{}, {"beta": 0.0}, {"beta": 3.5}],
              "general_cosine": [{"a": [0.5, 0.3, 0.2]}, {"a": (1.0,)}],
              "general_hamming": [{}, {"alpha": 0.7}]}
CASES = [(name, params) for name in windows.__all__
         for params in PARAMETERS.get(name, [{}])]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("sym", [True, False])
@pytest.mark.parametrize("name, params", CASES, ids=str)
def test_windows_match_torch(name, params, sym, dtype):
    """float64 to the last places; float32 as close to the float64 window as PyTorch's
    float32 window is (the grid of points is computed in the result's type, and in
    the Gaussian and exponential windows its rounding is amplified)."""
    for length in list(range(10)) + [257]:
        ours = getattr(windows, name)(length, sym=sym, dtype=getattr(mt, dtype), **params)
        theirs = getattr(torch_windows, name)(length, sym=sym, dtype=getattr(torch, dtype),
                                              **params)
        assert ours.dtype.name == dtype and tuple(ours.shape) == tuple(theirs.shape)
        if dtype == "float64":
            np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-13, atol=1e-13,
                                       err_msg=f"length {length}")
            continue
        exact = getattr(torch_windows, name)(length, sym=sym, dtype=torch.float64,
                                             **params).numpy()
        our_error = np.abs(ours.numpy() - exact).max(initial=0)
        their_error = np.abs(theirs.numpy() - exact).max(initial=0)
        assert our_error <= 2 * their_error + 2e-7, f"length {length}"


def test_exponential_center_and_default_dtype():
    ours = windows.exponential(7, center=2.0, sym=False)
    theirs = torch_windows.exponential(7, center=2.0, sym=False)
    assert ours.dtype is mt.get_default_dtype()
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6)


@pytest.mark.parametrize("name", windows.__all__)
def test_requires_grad_gives_a_window_with_a_history(name):
    params = PARAMETERS.get(name, [{}])[0]
    ours = getattr(windows, name)(6, requires_grad=True, **params)
    theirs = getattr(torch_windows, name)(6, requires_grad=True, **params)
    assert ours.requires_grad == theirs.requires_grad
    assert (ours.grad_fn is None) == (theirs.grad_fn is None)


ERRORS = [("hann", (-1,), {}), ("gaussian", (5,), {"dtype": "int64"}),
          ("cosine", (5,), {"dtype": "float16"}), ("exponential", (5,), {"tau": 0}),
          ("exponential", (5,), {"center": 1.0}), ("gaussian", (5,), {"std": -1.0}),
          ("kaiser", (5,), {"beta": -0.5}), ("general_cosine", (5,), {"a": 3}),
          ("general_cosine", (5,), {"a": []}), ("bartlett", (3,), {"layout": "sparse"}),
          ("blackman", (-2,), {})]


@pytest.mark.parametrize("name, args, kwargs", ERRORS, ids=str)
def test_errors_match_torch(name, args, kwargs):
    def call(lib, module):
        converted = {k: (getattr(lib, v) if k == "dtype" else
                         (getattr(lib, "sparse_coo", None) if k == "layout" else v))
                     for k, v in kwargs.items()}
        return getattr(module, name)(*args, **converted)
    with pytest.raises(Exception) as theirs:
        call(torch, torch_windows)
    if "layout" in kwargs and not hasattr(mt, "sparse_coo"):
        pytest.skip("microtensor has no other layout to pass")
    with pytest.raises(type(theirs.value)) as ours:
        call(mt, windows)
    assert str(ours.value).replace("microtensor.", "torch.") == str(theirs.value)
