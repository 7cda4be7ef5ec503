"""autograd.forward_ad: dual levels, make_dual/unpack_dual, and the tangents every op gives.

Every op with samples is run on dual float64 inputs and its tangents compared with
PyTorch's forward AD (with ``func.jvp`` of the op where PyTorch has no forward formula or
is not installed); then errors, levels, grad mode, in-place ops and views, and the
combinations with reverse mode and vmap.
"""
import numpy as np
import pytest

import microtensor as mt
import microtensor.autograd.forward_ad as fwAD
from microtensor._C.tensor import TensorBase
from microtensor.ops import REGISTRY
from microtensor.testing import differentiable_places, maker, seed_for
from test_op_registry import (CASES, CONVENTIONAL_GRADIENTS, GAUGE_DEPENDENT, _differentiable,
                              _sample, _to_torch, _torch_callable)

try:
    import torch
    import torch.autograd.forward_ad as tfwAD
except ImportError:
    torch = tfwAD = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (optional "
                                                       "test oracle)")


def arr(t):
    return np.array(t.detach()._array())


def close(actual, expected, rtol=1e-7, atol=1e-9):
    if torch is not None and isinstance(expected, torch.Tensor):
        expected = expected.detach().numpy()
    elif isinstance(expected, TensorBase):
        expected = arr(expected)
    assert isinstance(actual, TensorBase), type(actual)
    got = arr(actual)
    assert got.shape == np.shape(expected), (got.shape, np.shape(expected))
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol, equal_nan=True)


def tangent(t):
    return fwAD.unpack_dual(t).tangent


# ------------------------------------------------------------------ every op

def _floating(result, is_tensor, is_float):
    items = result if isinstance(result, (tuple, list)) else [result]
    return [r for r in items if is_tensor(r) and is_float(r)]


def _mt_tangents(op, args, kwargs, places, tangents):
    with fwAD.dual_level():
        for (container, key), t in zip(places, tangents):
            # clones: an in-place op writes into them (and the tangent, kept as it is), and
            # an expanded sample becomes dense (its tangent could not take its layout)
            container[key] = fwAD.make_dual(container[key].clone(), t.clone())
        result = op(*args, **kwargs)
        outs = _floating(result, lambda r: isinstance(r, TensorBase),
                         lambda r: r.is_floating_point())
        return [tangent(o) for o in outs]


def _torch_tangents(op, args, kwargs, paths, tangents):
    """PyTorch's tangents of the same call, or None when it has no such op."""
    fn = _torch_callable(op)
    if fn is None:
        return None
    targs, tkwargs = list(_to_torch(list(args))), _to_torch(dict(kwargs))
    with tfwAD.dual_level():
        for path, t in zip(paths, tangents):
            container, key = _resolve(targs, tkwargs, path)
            container[key] = tfwAD.make_dual(container[key].clone(), _to_torch(t))
        result = fn(*targs, **tkwargs)
        outs = _floating(result, lambda r: isinstance(r, torch.Tensor),
                         lambda r: r.is_floating_point())
        return [tfwAD.unpack_dual(o).tangent for o in outs]


def _paths(args, kwargs, places):
    """Each place as ``(top, index)``: an argument position or name, and an index into a
    list argument or None."""
    paths = []
    for container, key in places:
        if container is args:
            paths.append((key, None))
        elif container is kwargs:
            paths.append((key, None))
        else:
            top = next(k for k, v in list(enumerate(args)) + list(kwargs.items())
                       if v is container)
            paths.append((top, key))
    return paths


def _resolve(targs, tkwargs, path):
    top, index = path
    container = targs if isinstance(top, int) else tkwargs
    if index is None:
        return container, top
    container[top] = list(container[top])
    return container[top], index


def _jvp_reference(op, args, kwargs, places, tangents):
    """``func.jvp`` of the op as a function of the dual inputs (the op on a clone of its
    target when in place)."""
    primals = tuple(container[key] for container, key in places)

    def f(*xs):
        for (container, key), x in zip(places, xs):
            container[key] = x
        call_args = list(args)
        if op.kind == "inplace":
            call_args[0] = call_args[0].clone()
        result = op(*call_args, **kwargs)
        return tuple(_floating(result, lambda r: isinstance(r, TensorBase),
                               lambda r: r.is_floating_point()))
    _, out = mt.func.jvp(f, primals, tuple(tangents))
    return list(out)


@pytest.mark.parametrize("name, index", CASES)
def test_tangents_of_every_op(name, index):
    op = REGISTRY[name]
    if not _differentiable(op):
        pytest.skip(f"{name} is not differentiable")
    if op.random:
        pytest.skip("random: the tangent depends on the draw")
    if name in GAUGE_DEPENDENT or name in CONVENTIONAL_GRADIENTS or name == "embedding":
        pytest.skip("the derivative is fixed by a convention (gauge, padding, CTC's), which "
                    "PyTorch's forward formula does not follow")
    args, kwargs = _sample(name, index)
    places = differentiable_places(op, args, kwargs)
    if not places:
        pytest.skip("no float64 input to differentiate")
    make = maker(seed_for(f"{name}-{index}-tangent"))
    tangents = [make(*container[key].shape) for container, key in places]
    paths = _paths(args, kwargs, places)
    got = _mt_tangents(op, args, kwargs, places, tangents)
    expected = None
    if torch is not None:
        try:
            expected = _torch_tangents(op, *_sample(name, index), paths, tangents)
        except (NotImplementedError, RuntimeError, TypeError, AttributeError):
            expected = None    # PyTorch has no forward formula (or no such op)
    if expected is None or None in expected:
        # where PyTorch gives no tangent (an output it declares non-differentiable, such
        # as native_layer_norm's mean), func.jvp of the op is the reference
        a, k = _sample(name, index)
        reference = _jvp_reference(op, a, k, differentiable_places(op, a, k), tangents)
        expected = reference if expected is None else \
            [r if e is None else e for e, r in zip(expected, reference)]
    if not _matches(got, expected) and name not in TRIANGLE_READERS:
        assert not _torch_consistent(op, *_sample(name, index), paths, tangents, expected), \
            "PyTorch's forward and reverse modes agree, and this tangent differs"
        # PyTorch's two modes disagree (a convention of its derivative): func.jvp decides
        a, k = _sample(name, index)
        expected = _jvp_reference(op, a, k, differentiable_places(op, a, k), tangents)
    if name in TRIANGLE_READERS:
        a, k = _sample(name, index)
        expected = _jvp_reference(op, a, k, differentiable_places(op, a, k), tangents)
    assert _matches(got, expected, raise_=True)


# These read one triangle of a factor; their derivative (both modes, gradchecked in
# tests/test_op_registry.py) follows from that, while PyTorch's treats the factor whole
TRIANGLE_READERS = {"cholesky_solve", "cholesky_inverse"}


def _matches(got, expected, raise_=False):
    """Tangents equal, None (no tangent) standing for zeros."""
    try:
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            if g is None:
                assert not np.asarray(_numpy(e)).any(), "no tangent, but a nonzero one expected"
            else:
                close(g, _numpy(e), rtol=1e-6, atol=1e-8)
    except AssertionError:
        if raise_:
            raise
        return False
    return True


def _numpy(t):
    if torch is not None and isinstance(t, torch.Tensor):
        # PyTorch's tangent of an output with a zero derivative may be a ZeroTensor
        return np.zeros(tuple(t.shape)) if t._is_zerotensor() else t.detach().numpy()
    return arr(t)


def _torch_consistent(op, args, kwargs, paths, tangents, forward):
    """Whether PyTorch's forward-mode tangents ``forward`` agree with its reverse mode
    (``autograd.functional.jvp``, reverse mode twice)."""
    fn = _torch_callable(op)
    targs, tkwargs = list(_to_torch(list(args))), _to_torch(dict(kwargs))
    primals = []
    for path in paths:
        container, key = _resolve(targs, tkwargs, path)
        primals.append(container[key])

    def f(*xs):
        for path, x in zip(paths, xs):
            container, key = _resolve(targs, tkwargs, path)
            container[key] = x.clone() if op.kind == "inplace" and path == (0, None) else x
        return tuple(_floating(fn(*targs, **tkwargs), lambda r: isinstance(r, torch.Tensor),
                               lambda r: r.is_floating_point()))
    try:
        _, reverse = torch.autograd.functional.jvp(f, tuple(primals),
                                                   tuple(_to_torch(t) for t in tangents))
    except RuntimeError:    # an output PyTorch's reverse mode does not differentiate
        return False
    return all(np.allclose(_numpy(a), _numpy(b), rtol=1e-6, atol=1e-8)
               for a, b in zip(forward, reverse))
