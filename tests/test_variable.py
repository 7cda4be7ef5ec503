"""autograd.Variable, the legacy alias of Tensor, against PyTorch."""
import warnings

import numpy as np
import pytest

import microtensor as mt

try:
    import torch
except ImportError:
    torch = None

LIBS = [mt, pytest.param(torch, marks=pytest.mark.skipif(
    torch is None, reason="PyTorch is not installed (optional test oracle)"))]
IDS = ["microtensor", "torch"]


@pytest.mark.parametrize("lib", LIBS, ids=IDS)
def test_variable_is_a_detached_alias_of_its_tensor(lib):
    Variable = lib.autograd.Variable
    source = lib.ones(3, requires_grad=True) * 2          # not a leaf
    v = Variable(source)
    assert type(v) is lib.Tensor and v is not source
    assert not v.requires_grad and v.grad_fn is None
    v.add_(1)                                              # shares the data
    assert source.tolist() == [3.0, 3.0, 3.0]
    w = Variable(lib.ones(2), requires_grad=True)
    assert w.requires_grad and w.is_leaf
    (w * w).sum().backward()
    np.testing.assert_array_equal(np.array(w.grad.tolist()), [2.0, 2.0])
    assert isinstance(lib.zeros(1), Variable) and isinstance(w, Variable)
    assert not isinstance(np.zeros(1), Variable)
    assert type(Variable(lib.nn.Parameter(lib.ones(1)))) is lib.Tensor
    empty = Variable()
    assert tuple(empty.shape) == (0,) and empty.dtype == lib.float32


@pytest.mark.parametrize("lib", LIBS, ids=IDS)
def test_variable_checks_as_torch(lib):
    Variable = lib.autograd.Variable
    with pytest.raises(TypeError, match="Variable data has to be a tensor, but got int"):
        Variable(1)
    with pytest.raises(ValueError, match="Variable can't be volatile and require_grad at "
                                         "the same time!"):
        Variable(lib.ones(1), True, True)
    with pytest.raises(RuntimeError, match="(?i)only Tensors of floating point and complex "
                                           "dtype can require gradients"):
        Variable(lib.ones(2, dtype=lib.long), requires_grad=True)
    with pytest.warns(UserWarning, match="volatile was removed and now has no effect"):
        assert not Variable(lib.ones(1), volatile=True).requires_grad
    with pytest.raises(RuntimeError, match="autograd.variable\\(...\\) is deprecated"):
        lib.autograd.variable(lib.ones(1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Variable(lib.ones(1))
