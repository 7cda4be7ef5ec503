"""Every op's Tensor method, against PyTorch's.

Registry samples are run elsewhere through the function form (``mt.add(x, y)``); ported
code just as often calls the method (``x.add(y)``, ``x.clamp_(min=0)``), which binds its
own way (the tensor is ``self``; methods are compiled wrappers of their own).  Each sample
runs as a method in both libraries: a method microtensor has, PyTorch has (but two that
microtensor's own code uses); where PyTorch answers, microtensor answers the same;
where PyTorch refuses, microtensor raises the same exception type.
"""
import warnings

import pytest

from microtensor._C.tensor import TensorBase
from microtensor.ops import REGISTRY
from test_keywords_vs_torch import _outcome, assert_same_outcome
from test_op_registry import CASES, _sample, _to_torch
from test_out_vs_torch import _detached

try:
    import torch
except ImportError:
    torch = None

pytestmark = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (the oracle "
                                                      "of every test here)")

# Methods PyTorch does not have: microtensor's ops call them on tensors (a view of a
# range of one dim; a view of the whole tensor).
OWN_METHODS = {"slice", "alias"}

# {(op, sample index): reason}: where the outcomes differ (checked to still differ).
DIFFERENCES = {
    **{(name, 7): ("a tensor min with a number max: PyTorch's overloads take two tensors or "
                   "two numbers; microtensor takes the mix") for name in ("clamp", "clamp_")},
    **{(name, 2): ("None among the indices: PyTorch's index_put takes tensors only (None is "
                   "for tensor[...] indexing); microtensor's takes it as tensor[...] does")
       for name in ("index_put", "index_put_")},
}


@pytest.mark.parametrize("name, index", CASES)
def test_method_matches_torch(name, index):
    op = REGISTRY[name]
    if not op.method or name.startswith("_"):
        pytest.skip("not a Tensor method")
    args, kwargs = _sample(name, index)
    if not args or not isinstance(args[0], TensorBase):
        pytest.skip("the sample's first argument is not a tensor")
    if op.kind == "inplace":
        args = [args[0].detach().clone()] + [_detached(a) for a in args[1:]]
    else:
        args = _detached(args)
    kwargs = {k: _detached(v) for k, v in kwargs.items()}
    t_args, t_kwargs = _to_torch(args), _to_torch(kwargs)
    method = getattr(t_args[0], name, None)
    if method is None:
        assert name in OWN_METHODS, f"PyTorch's Tensor has no method {name}"
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs, t_error = _outcome(method, t_args[1:], t_kwargs)
        ours, error = _outcome(getattr(args[0], name), args[1:], kwargs)
    def returns_self():
        if op.kind == "inplace":
            assert ours is args[0], "an in-place method returns self"
    assert_same_outcome(op, (ours, error), (theirs, t_error), DIFFERENCES.get((name, index)),
                        returns_self)
