"""Every op's arguments given by keyword, under PyTorch's names, against PyTorch.

PyTorch code names arguments: ``torch.sum(input=x, dim=1)``, ``torch.where(condition=c,
input=x, other=y)``, and its argument parser takes NumPy's spellings too
(``x.sum(axis=1, keepdims=True)``).  Each registry sample runs in both libraries with all
its arguments passed by keyword under the names of PyTorch's documented signature (the
first line of the function's docstring), then with ``dim``/``keepdim`` spelled
``axis``/``keepdims``: where PyTorch answers, microtensor answers the same; where PyTorch
refuses, microtensor raises the same exception type.
"""
import re
import warnings

import numpy as np
import pytest

from microtensor._C.tensor import TensorBase
from microtensor.ops import REGISTRY
from test_op_registry import CASES, GAUGE_DEPENDENT, _sample, _to_torch
from test_out_vs_torch import _detached, _functions

try:
    import torch
except ImportError:
    torch = None

pytestmark = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (the oracle "
                                                      "of every test here)")

_LENIENT = ("PyTorch's argument parser does not take NumPy's spelling in this overload "
            "(or this call with dim and keepdim by keyword at all); microtensor takes "
            "axis/keepdims wherever it takes dim/keepdim")

# {(op, sample index): reason}: where the outcomes with NumPy's spellings differ (checked
# to still differ).
DIFFERENCES = {
    **{(name, index): _LENIENT for name, index in [
        ("scatter", 2), ("scatter", 4), ("std", 6), ("std_mean", 6), ("var", 6),
        ("var_mean", 6), ("sum", 6), ("tensor_split", 1), ("unique", 4), ("unique", 5),
        ("mean", 4)]},
    ("mean", 6): ("a tuple given as mean's dtype (the sample's dims named by PyTorch's "
                  "documented order): PyTorch's TypeError, microtensor's AttributeError"),
    ("linalg_vecdot", 1): ("microtensor's torch.linalg functions are Python functions with "
                           "PyTorch's names, which take no NumPy spellings"),
}


def _documented_names(fn):
    """The parameter names of ``fn``'s documented signature, in order (None when its
    docstring does not start with one); keyword-only ones after the positional ones."""
    first = (fn.__doc__ or "").strip().split("\n", 1)[0]
    found = re.match(r"[\w.]+\((.*)\)\s*(->.*)?$", first)
    if found is None:
        return None
    names = []
    for part in found.group(1).split(","):
        name = part.split("=")[0].strip()
        if name in ("*", "/", ""):
            continue
        if not name.isidentifier():
            return None
        names.append(name)
    return names


def _outcome(fn, args, kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return fn(*args, **kwargs), None
        except Exception as error:   # noqa: BLE001 (compared with the other library's)
            return None, error


def _same(ours, theirs, compare_values):
    if isinstance(theirs, torch.Tensor):
        assert isinstance(ours, TensorBase), f"expected a tensor, got {ours!r}"
        assert tuple(ours.shape) == tuple(theirs.shape)
        assert str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1]
        if compare_values:
            np.testing.assert_allclose(np.asarray(ours.detach()._array()),
                                       theirs.detach().resolve_conj().numpy(), rtol=1e-6,
                                       atol=1e-7, equal_nan=True)
    elif isinstance(theirs, (tuple, list)):
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            _same(a, b, compare_values)
    elif compare_values:
        assert ours == theirs


def _spelled(kwargs, numpy):
    if not numpy:
        return kwargs
    names = {"dim": "axis", "keepdim": "keepdims"}
    return {names.get(k, k): v for k, v in kwargs.items()}


@pytest.mark.parametrize("numpy_names", [False, True], ids=["torch names", "numpy names"])
@pytest.mark.parametrize("name, index", CASES)
def test_keywords_match_torch(name, index, numpy_names):
    op = REGISTRY[name]
    t_fn, mt_fn = _functions(name)
    if op.kind == "inplace" or t_fn is None or mt_fn is None:
        pytest.skip("no function of this name in both libraries")
    names = _documented_names(t_fn)
    args, kwargs = _sample(name, index)
    args, kwargs = _detached(args), {k: _detached(v) for k, v in kwargs.items()}
    if names is None or len(args) > len(names) or any(k in names[:len(args)] for k in kwargs):
        pytest.skip("PyTorch documents no signature that names these arguments")
    by_name = dict(zip(names, args), **kwargs)
    if numpy_names and not {"dim", "keepdim"} & set(by_name):
        pytest.skip("no dim or keepdim argument")
    positional, positional_error = _outcome(t_fn, _to_torch(args), _to_torch(kwargs))
    if positional_error is not None:
        pytest.skip("PyTorch's function of this name takes other arguments")
    t_kwargs = _spelled({k: _to_torch(v) for k, v in by_name.items()}, numpy_names)
    theirs, t_error = _outcome(t_fn, (), t_kwargs)
    if t_error is not None and not numpy_names:
        pytest.skip(f"PyTorch's documented names are not its parser's here ({t_error})")
    ours, error = _outcome(mt_fn, (), _spelled(by_name, numpy_names))
    assert_same_outcome(op, (ours, error), (theirs, t_error),
                        DIFFERENCES.get((name, index)) if numpy_names else None)


def assert_same_outcome(op, ours, theirs, reason, then=None):
    """Microtensor's ``(result, error)`` of ``op`` is PyTorch's: the same exception type,
    or the same results (and ``then()`` holds); where ``reason`` names a known difference,
    that they still differ."""
    (result, error), (expected, t_error) = ours, theirs
    try:
        if t_error is not None:
            assert error is not None and type(error) is type(t_error), \
                f"PyTorch raises {type(t_error).__name__} ({t_error}), microtensor {error!r}"
        else:
            assert error is None, f"microtensor raises {type(error).__name__}: {error}"
            _same(result, expected, not op.random and op.name not in GAUGE_DEPENDENT and
                  "empty" not in op.name)
            if then is not None:
                then()
    except AssertionError:
        if reason is None:
            raise
        return
    assert reason is None, f"now the same as PyTorch (remove from DIFFERENCES): {reason}"
