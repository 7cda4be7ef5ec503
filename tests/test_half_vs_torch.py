"""Every op on float16 and bfloat16 inputs against PyTorch: result dtypes, shapes and
values, and the refusals.

PyTorch's CPU kernels compute the half types in float32 and round each result once; an op
that accumulated in the half type itself, or promoted to float32 and forgot to round back,
or refused a half input PyTorch takes (or took one it refuses), would differ.  Each
registry sample's floating tensors are rounded to the half type, the op runs in both
libraries, and the results must agree within two units in the last place of the half type
(one rounding each, in accumulations of possibly different order) of each value or of
the output's largest value (where terms cancel, PyTorch's kernels round partial sums).  Where PyTorch refuses
a half input, microtensor raises the same exception type, or computes (in float32, the
result rounded to the half type: it goes further than PyTorch's CPU kernels there).
"""
import warnings

import numpy as np
import pytest

import microtensor as mt
from microtensor._C.tensor import TensorBase
from microtensor.ops import REGISTRY
from test_grad_vs_torch import _tensors
from test_op_registry import CASES, GAUGE_DEPENDENT, _sample, _to_torch, _torch_callable

try:
    import torch
except ImportError:
    torch = None

pytestmark = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (the oracle "
                                                      "of every test here)")

# last-place size of each half type: 2^-10 (float16), 2^-7 (bfloat16)
ULP = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}


# ops whose half-type results PyTorch computes in the half type itself and loses: the
# reference is PyTorch's float32 result rounded to the half type
FLOAT32_REFERENCE = {
    # its scaling and squaring overflows float16/bfloat16 to NaN; microtensor's runs in
    # float32 and rounds the result
    "matrix_exp", "linalg_matrix_exp"}

# PyTorch's float16 results that microtensor has no dtype for
NO_COMPLEX32 = {"complex", "view_as_complex"}


def _halved(value, dtype):
    if isinstance(value, TensorBase) and value.dtype.is_floating_point:
        return value.detach().to(getattr(mt, dtype))
    if isinstance(value, (list, tuple)):
        return type(value)(_halved(v, dtype) for v in value)
    return value


def _torch_half(value):
    """PyTorch's copy of a sample's arguments (NumPy has no bfloat16 PyTorch takes: through
    float32, which holds every bfloat16 exactly)."""
    if isinstance(value, TensorBase) and value.dtype is mt.bfloat16:
        return _to_torch(value.float()).to(torch.bfloat16)
    if isinstance(value, (list, tuple)):
        return type(value)(_torch_half(v) for v in value)
    if isinstance(value, dict):
        return {k: _torch_half(v) for k, v in value.items()}
    return _to_torch(value)


def _float32_reference(fn, half):
    def reference(*args, **kwargs):
        widened = [a.float() if isinstance(a, torch.Tensor) else a for a in args]
        return fn(*widened, **kwargs).to(half)
    return reference


def _as_float64(t):
    return np.asarray(t.detach().double()._array()) if isinstance(t, TensorBase) \
        else t.detach().double().numpy()


@pytest.mark.parametrize("dtype", list(ULP))
@pytest.mark.parametrize("name, index", CASES)
def test_half_types_match_torch(name, index, dtype):
    op = REGISTRY[name]
    fn = _torch_callable(op)
    if fn is None or op.random or "empty" in name:
        pytest.skip("no PyTorch counterpart, random or uninitialized values")
    args, kwargs = _sample(name, index)
    args, kwargs = _halved(args, dtype), {k: _halved(v, dtype) for k, v in kwargs.items()}
    if not any(isinstance(v, TensorBase) and v.dtype.name == dtype
               for v in list(args) + list(kwargs.values())):
        pytest.skip("no floating tensor input")
    if name in NO_COMPLEX32 and dtype == "float16":
        with pytest.raises(NotImplementedError, match="complex32"):
            op(*args, **kwargs)
        return
    torch_args, torch_kwargs = _torch_half(args), _torch_half(kwargs)
    if name in FLOAT32_REFERENCE:
        fn = _float32_reference(fn, getattr(torch, dtype))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            expected = fn(*torch_args, **torch_kwargs)
        except (TypeError, AttributeError) as e:
            pytest.skip(f"PyTorch's {name} takes other arguments: {e}")
        except (RuntimeError, NotImplementedError, ValueError, IndexError) as e:
            if "schema" in str(e):
                pytest.skip(f"PyTorch's {name} takes other arguments: {e}")
            try:
                result = op(*args, **kwargs)
            except Exception as ours:
                assert isinstance(ours, type(e)), f"PyTorch raised {e!r}, microtensor {ours!r}"
                return
            # microtensor computes what PyTorch's CPU kernels refuse for the half types
            # (linear algebra, special functions ...): in float32, rounded to the half type
            assert all(o.dtype.name == dtype for o in _tensors(result, TensorBase)
                       if o.dtype.is_floating_point), f"PyTorch raised {e!r}"
            return
        result = op(*args, **kwargs)
    ours, theirs = _tensors(result, TensorBase), _tensors(expected, torch.Tensor)
    assert len(ours) == len(theirs)
    for i, (o, t) in enumerate(zip(ours, theirs)):
        assert o.dtype.name == str(t.dtype).split(".")[-1], f"output {i}: dtype"
        assert tuple(o.shape) == tuple(t.shape), f"output {i}: shape"
        if name in GAUGE_DEPENDENT or not t.dtype.is_floating_point:
            if not t.dtype.is_floating_point and name not in GAUGE_DEPENDENT:
                np.testing.assert_array_equal(_as_float64(o), _as_float64(t),
                                              err_msg=f"output {i}")
            continue
        expected_values = _as_float64(t)
        # an output's terms may cancel: a last place of its largest value is the bound
        scale = np.nanmax(np.abs(expected_values[np.isfinite(expected_values)]), initial=1.0)
        np.testing.assert_allclose(_as_float64(o), expected_values, rtol=2 * ULP[dtype],
                                   atol=2 * ULP[dtype] * scale, equal_nan=True,
                                   err_msg=f"output {i}")
