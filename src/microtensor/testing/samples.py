"""Random tensors for op samples: ``make(*shape, dtype=float64, low=None, high=None,
requires_grad=False, device=None)``, and the same values in other memory layouts.

Values are uniform in ``[low, high)`` (default ``[-3, 3)`` for floats, ``[-9, 10)`` for
integers; bools are fair coin flips).  ``maker(seed)`` gives a ``make`` with its own
random stream, so that an op's samples are the same in every test that asks for them.

One seed convention: a seed is ``seed_for(text)``, a stable hash of a name (an op's name
for its samples, ``samples_of(name)``; a test's node id for the global generators, which
the test suite's conftest seeds before each test), so a draw never depends on which other
tests ran before it.
"""
import zlib

import numpy as np

from microtensor._C.meta import contiguous_format
from microtensor._C.tensor import (TensorBase, bool_, complex128, empty_contiguous, float64,
                                   from_array)
from microtensor.ops.arguments import size_arg
from microtensor.ops.factory import zeros
from microtensor.ops.registry import REGISTRY


def seed_for(text):
    """The seed for ``text`` (a name): the same in every run and on every platform."""
    return zlib.crc32(text.encode())


def samples_of(name, salt=""):
    """Op ``name``'s registered samples, drawn from ``maker(seed_for(name + salt))``: the
    same tensors in every test file that asks (a ``salt`` asks for another draw)."""
    return REGISTRY[name].samples(maker(seed_for(name + salt)))


def sample_ids(names, salt=""):
    """``(name, index)`` for every sample of the ops ``names``: pytest parameters."""
    return [(name, i) for name in names for i in range(len(samples_of(name, salt)))]


def maker(seed=0):
    """A ``make`` function drawing from its own generator seeded with ``seed``."""
    rng = np.random.default_rng(seed)

    def make(*shape, dtype=float64, low=None, high=None, requires_grad=False, device=None):
        shape = size_arg(shape, required=False)
        if dtype is bool_:
            values = rng.random(shape) < 0.5
        elif dtype.kind >= 2:
            lo = -3.0 if low is None else low
            hi = 3.0 if high is None else high
            values = rng.uniform(lo, hi, shape)
            if dtype.is_complex:    # (the real and imaginary parts each in [low, high))
                values = values + 1j * rng.uniform(lo, hi, shape)
        else:
            lo = -9 if low is None else low
            hi = 10 if high is None else high
            values = rng.integers(lo, hi, shape)
        values = np.array(values, dtype=dtype.np, order="C")
        t = from_array(values) if values.size else empty_contiguous(values.shape, dtype)
        if device is not None:
            t = t.to(device)
        if requires_grad:
            t.requires_grad_()
        return t
    make.__doc__ = "A random tensor (see ``microtensor.testing.samples``)."
    return make


make = maker(0)


def noncontiguous(t):
    """The values of ``t`` in every other element of a twice-as-wide buffer (a leaf, with
    ``t.requires_grad``)."""
    if t.dim() == 0:
        return t.detach().clone().requires_grad_(t.requires_grad)
    wide = zeros(tuple(t.shape[:-1]) + (2 * t.shape[-1],), dtype=t.dtype, device=t.device)
    result = wide[..., ::2]
    result.copy_(t.detach())
    result = result.detach()
    return result.requires_grad_(t.requires_grad)


def transposed_layout(t):
    """The values of ``t`` stored in column-major (reversed dimension) order: same shape,
    reversed strides (a leaf, with ``t.requires_grad``)."""
    if t.dim() < 2:
        return noncontiguous(t)
    dims = tuple(range(t.dim() - 1, -1, -1))
    result = t.detach().permute(dims).clone(memory_format=contiguous_format).permute(dims)
    return result.detach().requires_grad_(t.requires_grad)


def variants(t):
    """``t`` and copies with the same values in other layouts: (name, tensor) pairs."""
    return [("contiguous", t), ("noncontiguous", noncontiguous(t)),
            ("transposed", transposed_layout(t))]


def differentiable_places(op, args, kwargs, every_floating=False):
    """Where the float64 and complex128 tensors among ``op``'s differentiable inputs are
    (every floating and complex one with ``every_floating``), as ``(container, key)`` pairs
    into ``args`` (a list) and ``kwargs``: what a gradient check perturbs.  Lists of tensors
    are entered (a tuple argument is turned into a list so that its items can be
    replaced)."""
    places = []

    def wanted(t):
        if every_floating:
            return t.is_floating_point() or t.is_complex()
        return t.dtype in (float64, complex128)

    def visit(container, key):
        value = container[key]
        if isinstance(value, TensorBase) and wanted(value):
            places.append((container, key))
        elif isinstance(value, list):
            for i in range(len(value)):
                visit(value, i)
    for name in op.inputs:
        if name in op.params and op.params.index(name) < len(args):
            position = op.params.index(name)
            if isinstance(args[position], tuple):
                args[position] = list(args[position])
            visit(args, position)
        elif name in kwargs:
            visit(kwargs, name)
        elif name == op.varargs:
            for position in range(len(op.params), len(args)):
                if isinstance(args[position], tuple):
                    args[position] = list(args[position])
                visit(args, position)
    return places
