"""Reductions: ops that combine elements along dimensions (``sum``, ``amax``, ``var`` ...)
and the dimension-wise ops built like them (``softmax``, ``log_softmax``, ``cumsum``).

Kernels run NumPy over zero-copy views (its reductions sum pairwise, so float32 sums are
as accurate as NumPy's; whole-tensor sums use the Cython ``sum_all``).  ``dim`` may be
None (all dims), an int or a tuple (``()`` also means all dims); ``keepdim`` keeps
reduced dims as size 1.  Derivatives broadcast the gradient back after restoring reduced
dims (``unsqueeze_reduced``).

Every single-tensor op here whose ``dim`` parameter names the dims it works on has
``family="reduction"`` (vmap shifts ``dim`` past the batch dim).  ``max``/``min``,
``var``/``std`` and ``norm`` are composites that sort out PyTorch's overloads and call
the kernel ops ``amax``, ``_max_dim``, ``_var``, ``_std``, ``_norm2``, ``_normp`` with a
clean ``dim``.
"""
from collections import namedtuple
import math
import warnings

import numpy as np

from microtensor._C import kernels, meta, nnkernels
from microtensor._C.dispatch import batching
from microtensor._C.tensor import (TensorBase, bool_, int64, is_grad_enabled, compute_numpy,
                                   float32, float64, uint8)
from microtensor._dtype import check_scalars_fit, info, promote_types
from microtensor.ops.arguments import int_arg, size_arg
from microtensor.ops.factory import arange
from microtensor.ops.loops import (_type_name, array_module, conj_if_complex, dims_of,
                                   float_dtype, from_numpy_result, new_result, owned, reduce,
                                   reduced_shape)
from microtensor.ops.pointwise import maximum, minimum, mul, where
from microtensor.ops.registry import Sample, op, out_with_dim
from microtensor.vmap.helpers import batch_size, call, front_or_expanded, to_front, wrap
from microtensor.vmap.rules import reduction as reduction_family

# torch.return_types.max / min: a tuple whose fields are also attributes
class _ValuesIndices:
    """Printing like ``torch.return_types``: ``microtensor.return_types.max(values=...``."""

    def __repr__(self):
        return (f"microtensor.return_types.{type(self).__name__}(\nvalues={self.values!r},"
                f"\nindices={self.indices!r})")


class ReturnMax(_ValuesIndices, namedtuple("max", ("values", "indices"))):
    __slots__ = ()


class ReturnMin(_ValuesIndices, namedtuple("min", ("values", "indices"))):
    __slots__ = ()


for _t in (ReturnMax, ReturnMin):
    _t.__module__ = "microtensor.return_types"
    _t.__name__ = _t.__qualname__ = _t.__name__[len("Return"):].lower()


# --------------------------------------------------------------------------- helpers

def unsqueeze_reduced(grad, self_shape, dim, keepdim):
    """Put back the dims a reduction removed so ``grad`` broadcasts against the input."""
    if keepdim or not self_shape:
        return grad
    for d in dims_of(dim, len(self_shape)):
        grad = grad.unsqueeze(d)
    return grad


def _reduced_count(shape, dim):
    return math.prod(shape[d] for d in dims_of(dim, len(shape))) if shape else 1


def refuse_bool_accumulation(name, dtype):
    """PyTorch has no kernel for a cumulative sum or product in bool."""
    if dtype is bool_:
        raise NotImplementedError(f"\"{name}_out_cpu\" not implemented for 'Bool'")


def _integer_to_int64(self, dtype):
    """Result dtype of sum-like ops: integers and bool accumulate in int64."""
    if dtype is not None:
        return dtype
    return self._dtype if self._dtype.kind >= 2 else int64


def _check_reducible(name, self, dim):
    """PyTorch refuses to reduce an empty extent for ops without an identity (max ...)."""
    if self._numel:
        return
    if dim is None or dim == ():
        raise RuntimeError(f"{name}(): Expected reduction dim to be specified for "
                           "input.numel() == 0. Specify the reduction dim with the 'dim' "
                           "argument.")
    # (before ``dims_of``'s check of repeated dims, as PyTorch's order is)
    for d in (dim if isinstance(dim, (tuple, list)) else (dim,)):
        d = meta.wrap_dim(d, self.dim())
        if self._sizes[d] == 0:
            raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.")


def _single_dim(dim, ndim):
    """The one dim of ops like ``softmax``, wrapped; 0-d tensors accept 0 and -1."""
    return meta.wrap_dim(dim, ndim)


def _fresh(arr, dtype=None):
    """A new tensor owning a copy of ``arr`` (which may be a NumPy view of a result)."""
    return from_numpy_result(arr, dtype)


def _float_only(name, self):
    if not self._dtype.is_floating_point:
        raise NotImplementedError(f'"{name}" not implemented for '
                                  f"'{_type_name(self._dtype)}'")


def _along(self, dim):
    """A NumPy view and axis for a one-dim op (0-d tensors act as one element)."""
    axis = _single_dim(dim, self.dim())
    arr = self._array()
    return (arr.reshape(1), 0) if self.dim() == 0 else (arr, axis)


def _contiguous_rows(axis, *arrays):
    """Whether ``nnkernels``' row kernels take ``arrays`` along ``axis``: float32/float64
    NumPy arrays, C-contiguous, ``axis`` their last (elsewhere the strided kernels of
    ``kernels`` avoid a copy)."""
    if not nnkernels.supports(*arrays):
        return False
    for a in arrays:       # a loop, not a comprehension: no frame of its own
        if not a.flags.c_contiguous or axis != a.ndim - 1:
            return False
    return True


# --------------------------------------------------------------------------- samples

def _reduction_samples(make):
    return [Sample(make(3, 4)), Sample(make(3, 4), 1), Sample(make(3, 4), -1, True),
            Sample(make(2, 3, 4), (0, 2)), Sample(make(2, 3, 4), (-1, 0), keepdim=True),
            Sample(make(2, 1, 4), 1), Sample(make(5), 0, keepdim=True), Sample(make()),
            Sample(make(), 0), Sample(make(3, 4), dim=())]


def _single_dim_samples(make):
    return [Sample(make(3, 4), 1), Sample(make(3, 4), 0), Sample(make(2, 3, 4), -1),
            Sample(make(2, 1, 4), 1), Sample(make(5), 0), Sample(make(), 0),
            Sample(make(4, 3).mT, 0)]


def _extremum_samples(make):
    # distinct values: ties would make the subgradient ambiguous
    return [Sample(make(3, 4)), Sample(make(3, 4), 1), Sample(make(3, 4), -1, True),
            Sample(make(2, 3, 4), (0, 2)), Sample(make(2, 1, 4), 1), Sample(make()),
            Sample(make(), 0)]


def _max_samples(make):
    return [Sample(make(3, 4)), Sample(make(3, 4), 1), Sample(make(3, 4), -1, True),
            Sample(make(2, 3, 4), dim=0, keepdim=False), Sample(make(2, 1, 4), 1),
            Sample(make()), Sample(make(), 0), Sample(make(3, 4), make(4)),
            Sample(make(3, 4), other=make(3, 1))]


def _arg_samples(make):
    return [Sample(make(3, 4)), Sample(make(3, 4), 1), Sample(make(3, 4), -2, True),
            Sample(make(2, 3, 4), keepdim=True), Sample(make(), 0), Sample(make())]


def _prod_samples(make):
    return [Sample(make(3, 4, low=0.5, high=2)), Sample(make(3, 4, low=0.5, high=2), 1),
            Sample(make(2, 3, 4, low=-2, high=-0.5), -1, True), Sample(make(5), 0),
            Sample(make()), Sample(make(), 0)]


def _var_samples(make):
    return [Sample(make(3, 4)), Sample(make(3, 4), 1), Sample(make(3, 4), -1, True),
            Sample(make(2, 3, 4), (0, 2), correction=0), Sample(make(5), 0, False),
            Sample(make(3, 4), unbiased=False), Sample(make(3, 4), True),
            Sample(make(2, 3, 4), dim=1, correction=2, keepdim=True)]


def _norm_samples(make):
    return [Sample(make(3, 4)), Sample(make(3, 4), 2, 1), Sample(make(3, 4), 1, -1, True),
            Sample(make(3, 4), float("inf"), 0), Sample(make(3, 4), -float("inf"), 1),
            Sample(make(3, 4), 3), Sample(make(2, 3, 4), "fro", (0, 2)),
            Sample(make(3, 2), "nuc"), Sample(make(2, 3, 4), "nuc", (0, 2), True),
            Sample(make(2, 3, 4), p=1.5, dim=1, keepdim=True), Sample(make(5), dim=0),
            Sample(make()), Sample(_with_zeros(make, 3, 4), 0, 1)]


def _norm0_samples(make):
    return [Sample(_with_zeros(make, 3, 4)), Sample(_with_zeros(make, 3, 4), (1,), True),
            Sample(_with_zeros(make, 2, 3, 4), (0, 2)), Sample(_with_zeros(make))]


def _logsumexp_samples(make):
    return [Sample(make(3, 4), 1), Sample(make(3, 4), -1, True), Sample(make(2, 3, 4), (0, 2)),
            Sample(make(2, 1, 4), 1), Sample(make(5), 0), Sample(make(), 0)]


def _with_zeros(make, *shape):
    return make(*shape, dtype=int64, low=-1, high=2).double()


def _bool_samples(make):
    return [Sample(_with_zeros(make, 3, 4)), Sample(_with_zeros(make, 3, 4), 1),
            Sample(_with_zeros(make, 2, 3, 4), (0, 2)),
            Sample(_with_zeros(make, 3, 4).bool(), -1, True), Sample(_with_zeros(make)),
            Sample(_with_zeros(make, 4, 3).mT, 0)]


def _count_samples(make):
    return [Sample(_with_zeros(make, 3, 4)), Sample(_with_zeros(make, 3, 4), 1),
            Sample(_with_zeros(make, 2, 3, 4), (0, -1)), Sample(_with_zeros(make)),
            Sample(_with_zeros(make, 4, 3).mT, dim=0)]


# --------------------------------------------------------------------------- sum, mean, prod

@op(out=out_with_dim, out_casting="dtype", family="reduction", samples=_reduction_samples)
def sum(self, dim=None, keepdim=False, *, dtype=None):
    out_dtype = _integer_to_int64(self, dtype)
    if dim is None and not keepdim and self.device.type == "cpu" and \
            compute_numpy(self._dtype) is self._dtype.np:    # not the half types
        value = kernels.sum_all(self._array())
        if self._dtype.is_complex and not out_dtype.is_complex:
            value = value.real   # the real parts' sum: complex values cast to a real dtype
        return from_numpy_result(np.asarray(value, dtype=out_dtype.np))
    return reduce(np.add.reduce, self, dim, keepdim, out_dtype)


@sum.def_derivative("self")
def sum(grad, self_shape, dim, keepdim):
    if dim is not None:   # a full reduction's 0-d gradient expands as it is
        grad = unsqueeze_reduced(grad, self_shape, dim, keepdim)
    return grad.expand(self_shape)


@op(kind="composite")
def sum_to_size(self, *size):
    """Sum ``self`` down to ``size`` (the inverse of broadcasting): how gradients of
    broadcast inputs are formed."""
    size = size_arg(size, required=False)
    if tuple(self.shape) == tuple(size):
        return self
    lead = self.dim() - len(size)
    dims = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(size)
                                      if s == 1 and self._sizes[lead + i] != 1)
    result = self.sum(dims, keepdim=True) if dims else self
    return result.view(size) if lead else result


@op(out=True, out_casting=True, kind="composite", samples=_reduction_samples)
def mean(self, dim=None, keepdim=False, *, dtype=None):
    if (dtype or self._dtype).kind < 2:
        raise RuntimeError("mean(): could not infer output dtype. Input dtype must be either a "
                           "floating point or complex dtype. Got: "
                           f"{_type_name(dtype or self._dtype)}")
    if dtype is None and compute_numpy(self._dtype) is not self._dtype.np:
        # float16, bfloat16: the float32 mean rounded once, as PyTorch's CPU
        return mean(self, dim, keepdim, dtype=float32).to(self._dtype)
    # without dtype, the tensor's C sum (by whole rows along a strided dim) serves it
    total = self.sum(dim, keepdim) if dtype is None else self.sum(dim, keepdim, dtype=dtype)
    count = _reduced_count(self._sizes, dim)
    return total / count if count else total * math.nan


@op(out=out_with_dim, out_casting="dtype", family="reduction", samples=_prod_samples)
def prod(self, dim=None, keepdim=False, *, dtype=None):
    return reduce(np.prod, self, dim, keepdim, _integer_to_int64(self, dtype),
                  round_each_step=True)


@prod.def_derivative("self")
def prod(grad, self, dim, keepdim, result):
    # d prod / d x_i is the product of the other elements: result / x_i, except where a
    # slice holds zeros (one zero: only that position gets a gradient).  Saving `result`
    # as PyTorch does makes an in-place write into the product fail the version check.
    if self.dim() == 0:     # the product of one number: its gradient is grad, as PyTorch's
        return grad
    grad = unsqueeze_reduced(grad, self._sizes, dim, keepdim)
    result = unsqueeze_reduced(result, self._sizes, dim, keepdim)
    reduce_dims = dims_of(dim, self.dim())
    is_zero = self == 0
    nonzero = self.masked_fill(is_zero, 1)
    zeros_in_slice = is_zero.sum(reduce_dims, keepdim=True)
    at_zero = nonzero.prod(reduce_dims, keepdim=True) * (zeros_in_slice == 1)
    elsewhere = result / nonzero * (zeros_in_slice == 0)
    return grad * conj_if_complex(where(is_zero, at_zero, elsewhere))


# --------------------------------------------------------------------------- extrema

def _refuse_complex(self, message, error=RuntimeError):
    """PyTorch's refusal of an ordering op (max, sort ...) on complex values."""
    if self._dtype.is_complex:
        raise error(message.format(_type_name(self._dtype)))


@op(out=True, family="reduction", samples=_extremum_samples)
def amax(self, dim=(), keepdim=False):
    _refuse_complex(self, "\"max_values_cpu\" not implemented for '{}'", NotImplementedError)
    _check_reducible("amax", self, dim)
    return reduce(np.amax, self, dim, keepdim, None)


@op(out=True, family="reduction", samples=_extremum_samples)
def amin(self, dim=(), keepdim=False):
    _refuse_complex(self, "\"min_values_cpu\" not implemented for '{}'", NotImplementedError)
    _check_reducible("amin", self, dim)
    return reduce(np.amin, self, dim, keepdim, None)


def _evenly_to_extrema(grad, self, dim, keepdim, result):
    """The gradient of amax/amin: shared evenly between the elements that attain it (the
    NaNs, where the result is NaN, as PyTorch's ``max()``)."""
    grad = unsqueeze_reduced(grad, self._sizes, dim, keepdim)
    result = unsqueeze_reduced(result, self._sizes, dim, keepdim)
    attains = (self == result) | (self.isnan() & result.isnan())
    count = attains.sum(dims_of(dim, self.dim()), keepdim=True)
    return where(attains, grad / count, 0.0)


amax.def_derivative("self")(_evenly_to_extrema)
amin.def_derivative("self")(_evenly_to_extrema)


def _value_and_index(np_arg, self, dim, keepdim):
    arr, axis = _along(self, dim)
    index = np_arg(arr, axis=axis, keepdims=True)
    values = np.take_along_axis(arr, index, axis=axis)
    if self.dim() == 0:
        values, index = values.reshape(()), index.reshape(())
    elif not keepdim:
        values, index = values.squeeze(axis), index.squeeze(axis)
    return _fresh(values), _fresh(index, int64)


@op(family="reduction", method=False, function=False)
def _max_dim(self, dim, keepdim=False):
    _refuse_complex(self, "max(): does not support complex input")
    _check_reducible("max", self, dim)
    return _value_and_index(np.argmax, self, dim, keepdim)


@op(family="reduction", method=False, function=False)
def _min_dim(self, dim, keepdim=False):
    _refuse_complex(self, "min(): does not support complex input")
    _check_reducible("min", self, dim)
    return _value_and_index(np.argmin, self, dim, keepdim)


def _to_selected(grad, self_shape, dim, keepdim, indices):
    """Put ``grad`` (of the values picked along ``dim``) at the picked positions."""
    grad = grad[0]
    if not self_shape:
        return grad
    d = _single_dim(dim, len(self_shape))
    grad = unsqueeze_reduced(grad, self_shape, d, keepdim)
    if not keepdim:
        indices = indices.unsqueeze(d)
    shape = [1] * len(self_shape)
    shape[d] = self_shape[d]
    positions = arange(self_shape[d], device=grad.device).view(shape)
    return where(positions == indices, grad, 0.0)


@_max_dim.def_derivative("self")
def _max_dim(grad, self_shape, dim, keepdim, result1):
    # only the indices are saved (as PyTorch does), not the input
    return _to_selected(grad, self_shape, dim, keepdim, result1)


@_min_dim.def_derivative("self")
def _min_dim(grad, self_shape, dim, keepdim, result1):
    return _to_selected(grad, self_shape, dim, keepdim, result1)


def _elementwise(arguments):
    """``max(input, other)`` (``other`` also given as ``dim``): an elementwise op, which
    casts into its ``out``."""
    return isinstance(arguments["dim"], TensorBase) or arguments["other"] is not None


def _extremum(name, full, by_dim, binary, return_type):
    def extremum(self, dim=None, keepdim=False, *, other=None):
        if isinstance(dim, TensorBase):
            dim, other = None, dim
        if other is not None:
            return binary(self, other)
        if dim is None:
            _refuse_complex(self, f"\"{name}_all\" not implemented for '{{}}'",
                            NotImplementedError)
            _check_reducible(name, self, None)
            return full(self)
        return return_type(*by_dim(self, dim, keepdim))
    extremum.__name__ = name
    extremum.__doc__ = (f"``{name}(input)``: the {name}imum value; ``{name}(input, dim, "
                        f"keepdim=False)``: ``(values, indices)`` along ``dim``; "
                        f"``{name}(input, other)``: elementwise {name}imum.")
    return op(name, kind="composite", out=True, out_casting=_elementwise,
              samples=_max_samples)(extremum)


max = _extremum("max", amax, _max_dim, maximum, ReturnMax)
min = _extremum("min", amin, _min_dim, minimum, ReturnMin)


def _arg_extremum(name, np_arg):
    def kernel(self, dim=None, keepdim=False):
        if self._dtype is bool_:
            raise RuntimeError(f"{name}(): does not support bool input")
        _refuse_complex(self, f"{name}(): does not support complex input")
        if dim is None:
            if self._numel == 0:
                raise IndexError(f"{name}(): Expected reduction dim to be specified for "
                                 "input.numel() == 0.")
            index = np_arg(self._array())
            shape = (1,) * self.dim() if keepdim else ()
            return _fresh(np.reshape(index, shape), int64)
        if not isinstance(dim, (int, np.integer)) or isinstance(dim, bool):
            raise TypeError(f"{name}(): argument 'dim' must be int, not {type(dim).__name__}")
        dim = int(dim)
        _check_reducible(name, self, dim)
        arr, axis = _along(self, dim)
        index = np_arg(arr, axis=axis, keepdims=keepdim or self.dim() == 0)
        return _fresh(index.reshape(index.shape if self.dim() else ()), int64)
    kernel.__name__ = name
    # dim=None means the index into the flattened tensor: vmap needs a rule for that case
    return op(name, family="reduction", differentiable=False, out=True,
              samples=_arg_samples)(kernel)


argmax = _arg_extremum("argmax", np.argmax)
argmin = _arg_extremum("argmin", np.argmin)


def arg_extremum_batch_rule(op, level, args, kwargs):
    """``dim=None`` indexes the flattened sample: flatten each sample, then reduce dim 1."""
    bound = op.bind(args, kwargs)
    self = bound["self"]
    if bound["dim"] is not None:
        return reduction_family(op, level, args, kwargs)
    value = to_front(self._value, self._bdim)
    flat = value.reshape(value._sizes[0], -1)
    index = call(op, (flat, 1, False), None)
    if bound["keepdim"]:
        index = index.view((value._sizes[0],) + (1,) * self.dim())
    return wrap(index, 0, level)


argmax.def_batch_rule(arg_extremum_batch_rule)
argmin.def_batch_rule(arg_extremum_batch_rule)


# --------------------------------------------------------------------------- var, std, norm

def _check_var_input(self):
    if not self._dtype.is_floating_point:
        raise RuntimeError("std and var only support floating point and complex dtypes")


def _var_arguments(dim, unbiased, correction):
    """Normalise PyTorch's overloads: ``var(x, True)``, ``var(x, dim, unbiased)``,
    ``var(x, dim, correction=c)``."""
    if isinstance(dim, bool):
        if unbiased is not None:
            raise TypeError("var(): 'unbiased' given twice")
        dim, unbiased = None, dim
    if unbiased is not None and correction is not None:
        raise TypeError("var() received an invalid combination of arguments: both "
                        "'unbiased' and 'correction' were given")
    if correction is None:
        correction = 0 if unbiased is False else 1
    return dim, correction


@op(family="reduction", method=False, function=False)
def _var(self, dim=None, correction=1, keepdim=False):
    return _spread(np.var, "var", self, dim, correction, keepdim)


@op(family="reduction", method=False, function=False)
def _std(self, dim=None, correction=1, keepdim=False):
    return _spread(np.std, "std", self, dim, correction, keepdim)


def _spread(moment, name, self, dim, correction, keepdim):
    """``np.var``/``np.std`` of ``self`` over ``dim``; with no degrees of freedom left
    (NaN or inf results), PyTorch's warning instead of NumPy's."""
    _check_var_input(self)
    if _reduced_count(self._sizes, dim) - correction > 0:
        return reduce(moment, self, dim, keepdim, None, ddof=correction)
    warnings.warn(f"{name}(): degrees of freedom is <= 0. Correction should be strictly "
                  f"less than the reduction factor (input numel divided by output numel).",
                  UserWarning, stacklevel=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return reduce(moment, self, dim, keepdim, None, ddof=correction)


def _var_backward(grad, self, dim, correction, keepdim):
    degrees_of_freedom = _reduced_count(self._sizes, dim) - correction
    scale = 2.0 / degrees_of_freedom if degrees_of_freedom else math.inf
    grad = unsqueeze_reduced(grad, self._sizes, dim, keepdim)
    return grad * (self - self.mean(dims_of(dim, self.dim()), keepdim=True)) * scale


_var.def_derivative("self")(_var_backward)


@_std.def_derivative("self")
def _std(grad, self, dim, correction, keepdim, result):
    # d std = d var / (2 std); zero where std is zero (a constant slice), as PyTorch does
    grad = (grad / (2 * result)).masked_fill(result == 0, 0)
    return _var_backward(grad, self, dim, correction, keepdim)


def _without_unbiased(arguments):
    """PyTorch's ``var``/``std`` take ``out=`` except in their legacy form
    ``(input, unbiased)``."""
    dim = arguments["dim"]
    return not isinstance(dim, bool) and not (dim is None and arguments["unbiased"] is not None)


@op(out=_without_unbiased, out_casting="kind", kind="composite", samples=_var_samples)
def var(self, dim=None, unbiased=None, keepdim=False, *, correction=None):
    dim, correction = _var_arguments(dim, unbiased, correction)
    if self._dtype.is_complex:
        return _complex_var(self, dim, correction, keepdim)
    return _var(self, dim, correction, keepdim)


def _complex_var(self, dim, correction, keepdim):
    """The variance of complex values (of ``|z - mean|``, real): the parts' summed."""
    return _var(self.real, dim, correction, keepdim) + _var(self.imag, dim, correction, keepdim)


@op(out=_without_unbiased, out_casting="kind", kind="composite", samples=_var_samples)
def std(self, dim=None, unbiased=None, keepdim=False, *, correction=None):
    dim, correction = _var_arguments(dim, unbiased, correction)
    if self._dtype.is_complex:
        return _complex_var(self, dim, correction, keepdim).sqrt()
    return _std(self, dim, correction, keepdim)


@op(family="reduction", method=False, function=False)
def _norm2(self, dim=None, keepdim=False):
    # float16, bfloat16: in float32, rounded once (PyTorch's CPU)
    squares = np.square(self._array().astype(compute_numpy(self._dtype), copy=False))
    if self.dim() == 0:
        return from_numpy_result(np.sqrt(squares), self._dtype)
    return from_numpy_result(np.sqrt(np.sum(squares, axis=dims_of(dim, self.dim()),
                                            keepdims=keepdim)), self._dtype)


@_norm2.def_derivative("self")
def _norm2(grad, self, dim, keepdim, result):
    # the subgradient 0 at the zero vector, as PyTorch does; grad multiplies the masked
    # direction (not divided by the norm before the mask), so that the derivative with
    # respect to grad is 0 there, not 0/0
    result = unsqueeze_reduced(result, self._sizes, dim, keepdim)
    direction = (self / result).masked_fill(result == 0, 0)
    return unsqueeze_reduced(grad, self._sizes, dim, keepdim) * direction


def _normp_samples(make):
    return [Sample(make(3, 4), 3.0), Sample(make(2, 3, 4), 1.5, 1, True),
            Sample(make(3, 4), 4.0, (0, 1)), Sample(make(5), 3.0, 0),
            Sample(make(3, 4, low=0.5, high=2.0), 0.5, -1),     # p < 1 away from zero
            Sample(make(3, 4, low=0.5, high=2.0), -1.5, 0)]


@op(family="reduction", method=False, function=False, samples=_normp_samples)
def _normp(self, p, dim=None, keepdim=False):
    """The ``p``-norm for ``p`` other than 0, 1, 2 and the infinities."""
    magnitudes = np.abs(self._array().astype(compute_numpy(self._dtype), copy=False))
    with np.errstate(divide="ignore"):     # negative p: a zero element gives an infinite term
        powers = np.power(magnitudes, p)
        if self.dim():
            powers = np.sum(powers, axis=dims_of(dim, self.dim()), keepdims=keepdim)
        return from_numpy_result(np.power(powers, 1.0 / p), self._dtype)


@_normp.def_derivative("self")
def _normp(grad, self, p, dim, keepdim, result):
    # PyTorch's formula: zero elements (p < 1) and zero vectors get the gradient 0, where
    # the chain rule through abs, pow and sum would give 0 * inf
    grad = unsqueeze_reduced(grad, self._sizes, dim, keepdim)
    norm = unsqueeze_reduced(result, self._sizes, dim, keepdim)
    if p < 1:
        scaled = self.sgn() * self.abs().pow(p - 1).masked_fill(self == 0, 0)
        return scaled * grad * norm.pow(1 - p)
    scaled = self.sgn() * self.abs().pow(p - 1) if p < 2 else self * self.abs().pow(p - 2)
    return scaled * (grad / norm.pow(p - 1)).masked_fill(norm == 0, 0)


@op(family="reduction", method=False, function=False, samples=_norm0_samples)
def _norm0(self, dim=None, keepdim=False):
    """The number of nonzero elements over ``dim``, in ``self``'s dtype."""
    nonzero = np.not_equal(self._array(), 0)
    if self.dim() == 0:
        return from_numpy_result(nonzero, self._dtype)
    return from_numpy_result(np.sum(nonzero, axis=dims_of(dim, self.dim()), keepdims=keepdim),
                             self._dtype)


@_norm0.def_derivative("self")
def _norm0(grad):
    # a step function: PyTorch records the op but sends no gradient to the input
    return None


def _nuclear_norm(self, dim, keepdim, dtype):
    """``norm(p="nuc")``: ``linalg.matrix_norm`` over the two dims ``dim`` (every dim when
    None), with its errors."""
    from microtensor import linalg
    result_dtype = dtype or self._dtype
    if not (result_dtype.is_floating_point or result_dtype.is_complex):
        raise RuntimeError("linalg.matrix_norm: Expected a floating point or complex tensor as "
                           f"input. Got {_type_name(result_dtype)}")
    dims = tuple(range(self.dim())) if dim is None else \
        (dim,) if isinstance(dim, (int, np.integer)) else tuple(dim)
    if self.dim() >= 2 and len(dims) != 2:
        raise RuntimeError(f"linalg.matrix_norm: dim must be a 2-tuple. Got "
                           f"{' '.join(map(str, dims))}")
    return linalg.matrix_norm(self, "nuc", dims, keepdim, dtype=dtype)


@op(out=True, kind="composite", samples=_norm_samples)
def norm(self, p="fro", dim=None, keepdim=False, dtype=None):
    """The vector ``p``-norm over ``dim`` (``"fro"``: 2-norm of the flattened dims;
    ``"nuc"``: the nuclear norm over two dims)."""
    if p == "nuc":
        return _nuclear_norm(self, dim, keepdim, dtype)
    if self._dtype.kind < 2 or (dtype or self._dtype).kind < 2:   # (kinds: floats, complex)
        raise RuntimeError("linalg.vector_norm: Expected a floating point or complex tensor "
                           f"as input. Got {_type_name(self._dtype)}")
    if dtype is not None:
        if dtype.is_complex != self._dtype.is_complex:
            kind = "complex" if self._dtype.is_complex else "real"
            raise RuntimeError(f"linalg.vector_norm: dtype should be {kind} for {kind} "
                               f"inputs, but got {_type_name(dtype)}")
        if promote_types(self._dtype, dtype) is not dtype:
            raise RuntimeError(f"linalg.vector_norm: the dtype of the input "
                               f"({_type_name(self._dtype)}) should be convertible without "
                               f"narrowing to the specified dtype ({_type_name(dtype)})")
        self = self.to(dtype)
    if self._dtype.is_complex:
        return norm(self.abs(), p, dim, keepdim)     # a norm of the magnitudes (real)
    if isinstance(dim, (int, np.integer)):
        dim = (dim,)
    if p == "fro" and dim is not None and len(dim) > 2:
        raise RuntimeError(f"linalg.matrix_norm: dim must be a 2-tuple. Got "
                           f"{' '.join(map(str, dim))}")
    if p is None or p == "fro" or p == 2:
        return _norm2(self, dim, keepdim)
    if isinstance(p, str):
        raise RuntimeError(f"norm(): p={p!r} is not supported (only vector norms and 'fro')")
    if math.isinf(p):
        if self._numel == 0:   # only an empty reduced dim has no maximum (PyTorch's rule)
            if dim is None or not self.dim():
                raise RuntimeError(f"linalg.vector_norm cannot compute the {p} norm on an "
                                   f"empty tensor because the operation does not have an "
                                   f"identity")
            for d in dims_of(dim, self.dim()):
                if not self._sizes[d]:
                    raise RuntimeError(f"linalg.vector_norm cannot compute the {p} norm on the "
                                       f"dimension {d}because this dimension is empty and the "
                                       f"operation does not have an identity")
        magnitude = self.abs()
        return magnitude.amax(dim, keepdim) if p > 0 else magnitude.amin(dim, keepdim)
    if p == 0:
        return _norm0(self, dim, keepdim)
    if p == 1:
        return self.abs().sum(dim, keepdim)
    return _normp(self, p, dim, keepdim)


# --------------------------------------------------------------------------- exp-normalising

@op(out=True, out_casting=True, family="reduction", samples=_logsumexp_samples)
def logsumexp(self, dim, keepdim=False):
    dtype = float_dtype(self._dtype)
    shape = reduced_shape(self._sizes, dims_of(dim, self.dim()), keepdim)
    if self._numel == 0:
        return from_numpy_result(np.full(shape, -np.inf, dtype=dtype.np))
    if self.dim() == 0:
        arr, dims = self._array().reshape(1), 0
    else:
        arr, dims = self._array(), dims_of(dim, self.dim())
    arr = arr.astype(compute_numpy(dtype), copy=False)
    shift = np.amax(arr, axis=dims, keepdims=True)
    np.copyto(shift, 0, where=~np.isfinite(shift))   # all-infinite slices: no shift needed
    total = np.sum(np.exp(arr - shift), axis=dims, keepdims=True)
    with np.errstate(divide="ignore"):
        result = np.log(total) + shift
    return _fresh(result.reshape(shape), dtype)


@logsumexp.def_derivative("self")
def logsumexp(grad, self, dim, keepdim, result):
    grad = unsqueeze_reduced(grad, self._sizes, dim, keepdim)
    result = unsqueeze_reduced(result, self._sizes, dim, keepdim)
    return grad * conj_if_complex((self - result).exp())


def _normalised_exp(name, log):
    def kernel(self, dim, dtype=None):
        if dtype is None:   # the common case, served in C
            result = nnkernels.softmax_rows(self, dim, log)
            if result is not None:
                return result
        else:
            self = self.to(dtype)
        _float_only(f"{name}_kernel_impl", self)
        result = new_result(self._sizes, self._dtype, device=self.device)
        if not self._numel:
            return result
        arr, axis = _along(self, dim)
        out = result._array().reshape(arr.shape)
        if _contiguous_rows(axis, arr, out):
            nnkernels.softmax(out, arr, log)
            return result
        if isinstance(arr, np.ndarray):
            compute = compute_numpy(self._dtype)
            if compute is self._dtype.np:
                kernels.softmax_(out, arr, axis, log)
            else:    # float16, bfloat16: in float32, rounded once (PyTorch's CPU)
                wide = np.empty(arr.shape, compute)
                kernels.softmax_(wide, arr.astype(compute), axis, log)
                out[...] = wide
            return result
        np.subtract(arr, np.amax(arr, axis=axis, keepdims=True), out=out)
        if log:
            out -= np.log(np.sum(np.exp(out), axis=axis, keepdims=True))
        else:
            np.exp(out, out=out)
            out /= np.sum(out, axis=axis, keepdims=True)
        return result
    kernel.__name__ = name
    return op(name, family="reduction", out=True, samples=_single_dim_samples)(kernel)


softmax = _normalised_exp("softmax", log=False)
log_softmax = _normalised_exp("log_softmax", log=True)


@softmax.def_derivative("self")
def softmax(grad, dim, result):
    if result.dim() and batching() is None and not is_grad_enabled():
        # no graph of the backward pass is being built, nor a vmap: one fused pass
        g, y = grad._array(), result._array()
        if _contiguous_rows(_single_dim(dim, result.dim()), g, y):
            return from_numpy_result(nnkernels.softmax_backward(np.empty_like(y), g, y, False),
                                     result._dtype)
    dim = _single_dim(dim, result.dim()) if result.dim() else ()
    return result * (grad - (grad * result).sum(dim, keepdim=True))


@log_softmax.def_derivative("self")
def log_softmax(grad, dim, result):
    return call(_log_softmax_backward_data, (grad, result, dim), None)


def _log_softmax_backward_samples(make):
    return [Sample(make(3, 4), make(3, 4).log_softmax(1).detach(), 1),
            Sample(make(2, 3, 4), make(2, 3, 4).log_softmax(0).detach(), 0),
            Sample(make(4, 3).mT, make(3, 4).log_softmax(-1).detach(), -1),
            Sample(make(), make(), 0)]


@op(inputs=("grad", "output"), method=False, function=False,
    samples=_log_softmax_backward_samples)
def _log_softmax_backward_data(grad, output, dim):
    """The gradient of ``log_softmax`` for the incoming ``grad``, from its ``output``:
    ``grad - exp(output) * grad.sum(dim)``, one pass per row (PyTorch's op of this name)."""
    result = nnkernels.log_softmax_backward_rows(grad, output, dim)   # the common case, in C
    if result is not None:
        return result
    if grad._sizes != output._sizes or grad._dtype is not output._dtype:
        raise RuntimeError("_log_softmax_backward_data: grad and output must have one shape "
                           "and dtype")
    _float_only("log_softmax_backward", grad)
    result = new_result(grad._sizes, grad._dtype, device=grad.device)
    if not grad._numel:
        return result
    g, axis = _along(grad, dim)
    y = output._array().reshape(g.shape)
    out = result._array().reshape(g.shape)
    if _contiguous_rows(axis, g, y, out):
        nnkernels.softmax_backward(out, g, y, True)
    elif isinstance(g, np.ndarray):
        compute = compute_numpy(grad._dtype)   # float16, bfloat16: in float32, rounded once
        wide = out if compute is grad._dtype.np else np.empty(g.shape, compute)
        kernels.log_softmax_backward_(wide, g.astype(compute, copy=False),
                                      y.astype(compute, copy=False), axis)
        if wide is not out:
            out[...] = wide
    else:
        np.subtract(g, np.exp(y) * g.sum(axis=axis, keepdims=True), out=out)
    return result


def _softmax_dim(output, dim):
    return _single_dim(dim, output.dim()) if output.dim() else ()


@_log_softmax_backward_data.def_derivative("grad")
def _log_softmax_backward_data(ggrad, output, dim):
    # linear in grad: its adjoint is gg - sum(gg * p), with p = exp(output)
    return ggrad - (ggrad * output.exp()).sum(_softmax_dim(output, dim), keepdim=True)


@_log_softmax_backward_data.def_derivative("output")
def _log_softmax_backward_data(ggrad, grad, output, dim):
    return -(ggrad * output.exp()) * grad.sum(_softmax_dim(output, dim), keepdim=True)


@_log_softmax_backward_data.def_batch_rule
def _log_softmax_backward_data(op, level, args, kwargs):
    """Both tensors with the batch dim first and ``dim`` shifted past it; per-sample
    scalars get a size-1 dim to work along, removed afterwards."""
    bound = op.bind(args, kwargs)
    grad, output = bound["grad"], bound["output"]
    size = batch_size(level)
    grads = front_or_expanded(grad, level, size)
    outputs = front_or_expanded(output, level, size)
    if grad.dim() == 0:
        meta.wrap_dim(bound["dim"], 0)
        result = call(op, (grads.unsqueeze(1), outputs.unsqueeze(1), 1), None)
        return wrap(result.squeeze(1), 0, level)
    dim = meta.wrap_dim(bound["dim"], grad.dim()) + 1
    return wrap(call(op, (grads, outputs, dim), None), 0, level)


# --------------------------------------------------------------------------- scans

@op(out=True, out_casting="dtype", family="reduction", samples=_single_dim_samples)
def cumsum(self, dim, *, dtype=None):
    refuse_bool_accumulation("cumsum", dtype)
    result = new_result(self._sizes, _integer_to_int64(self, dtype), device=self.device)
    arr, axis = _along(self, dim)
    if not self._numel:
        return result
    out = result._array().reshape(arr.shape)
    if isinstance(arr, np.ndarray) and arr.dtype == out.dtype and \
            arr.dtype in (np.float32, np.float64):
        # accumulated in double, row by row along a strided dim (PyTorch's CPU sums float32
        # in double too; NumPy's in float32, and walking down each column)
        kernels.cumsum_(out, arr, axis)
    else:
        # the half types accumulate in float32, each output rounded once (PyTorch's CPU)
        out[...] = np.cumsum(arr, axis=axis, dtype=compute_numpy(result._dtype))
    return result


@cumsum.def_derivative("self")
def cumsum(grad, dim):
    # the reversed cumulative sum: total - (inclusive prefix sum) + own term
    if grad.dim() == 0:
        return grad
    d = _single_dim(dim, grad.dim())
    return grad.sum(d, keepdim=True) - grad.cumsum(d) + grad


# --------------------------------------------------------------------------- logical


def _logical_reduction(np_reduction, self, dim, keepdim):
    """``all``/``any``: unlike ``sum``'s, their ``dim=()`` reduces no dim; a uint8 input
    gives a uint8 result (PyTorch's exception), any other a bool one."""
    arr = self._array()
    dims = () if isinstance(dim, (tuple, list)) and len(dim) == 0 else dims_of(dim, self.dim())
    result_dtype = uint8 if self._dtype is uint8 else bool_
    if self.dim() == 0:   # dims checked: a 0-d tensor takes dim 0 or -1 only
        return from_numpy_result(np_reduction(arr), result_dtype)
    return from_numpy_result(np_reduction(arr, axis=dims, keepdims=keepdim), result_dtype)


@op(out=True, family="reduction", differentiable=False, samples=_bool_samples)
def all(self, dim=None, keepdim=False):
    return _logical_reduction(np.all, self, dim, keepdim)


@op(out=True, family="reduction", differentiable=False, samples=_bool_samples)
def any(self, dim=None, keepdim=False):
    return _logical_reduction(np.any, self, dim, keepdim)


@op(family="reduction", differentiable=False, samples=_count_samples)
def count_nonzero(self, dim=None):
    dims = dims_of(dim, self.dim()) if self.dim() else None
    return from_numpy_result(np.count_nonzero(self._array(), axis=dims), int64)


__all__ = ["sum", "sum_to_size", "mean", "prod", "amax", "amin", "max", "min", "argmax",
           "argmin", "var", "std", "norm", "logsumexp", "softmax", "log_softmax", "cumsum",
           "all", "any", "count_nonzero", "unsqueeze_reduced", "ReturnMax", "ReturnMin"]


# --------------------------------------------------------------------------- NaN-aware, statistics
# nansum, nanmean, aminmax, var_mean, std_mean, logcumsumexp, quantile, nanquantile, histc:
# composites of the ops above where PyTorch's definition is one (their autograd and vmap
# are their parts'), kernels otherwise.

def _nan_samples(make):
    with_nans = make(3, 4)
    with_nans._array()[0, 1] = with_nans._array()[2, 0] = with_nans._array()[2, 3] = np.nan
    return [Sample(make(3, 4)), Sample(with_nans), Sample(with_nans, 1),
            Sample(with_nans, (0, 1), True), Sample(make(2, 3, 4), -1, keepdim=True),
            Sample(make()), Sample(make(2, 3, dtype=float32), 0)]


@op(kind="composite", samples=_nan_samples)
def nansum(self, dim=None, keepdim=False, *, dtype=None, out=None):
    """``sum`` with NaN counted as 0 (no gradient to them)."""
    if self._dtype.is_complex:
        raise RuntimeError("nansum on CPU does not support complex inputs")
    if self._dtype.is_floating_point and getattr(dtype, "is_complex", False):
        # (an integer tensor is summed as sum sums it)
        raise NotImplementedError(f"\"nansum_cpu\" not implemented for "
                                  f"'{info(dtype).scalar_name}'")
    if self._dtype.is_floating_point:
        self = self.masked_fill(self.isnan(), 0)
    result = sum(self, dim, keepdim, dtype=dtype)
    return result if out is None else _into(out, result, cast=True)


@op(kind="composite", samples=_nan_samples)
def nanmean(self, dim=None, keepdim=False, *, dtype=None, out=None):
    """``mean`` of the values that are not NaN (NaN where there are none)."""
    if not self._dtype.is_floating_point:
        raise RuntimeError(f"nanmean(): expected input to have floating point or complex "
                           f"dtype but got {_type_name(self._dtype)}")
    if getattr(dtype, "kind", 2) < 2:
        raise RuntimeError(f"nanmean(): could not infer output dtype. Optional dtype must be "
                           f"either a floating point or complex dtype. Got: {_type_name(dtype)}")
    present = self.isnan().logical_not()
    result = nansum(self, dim, keepdim, dtype=dtype) / present.sum(dim, keepdim)
    return result if out is None else _into(out, result, cast=True)


class ReturnAminmax(namedtuple("aminmax", ("min", "max"))):
    __slots__ = ()

    def __repr__(self):
        return (f"microtensor.return_types.aminmax(\nmin={self.min!r},\nmax={self.max!r})")


ReturnAminmax.__module__ = "microtensor.return_types"
ReturnAminmax.__name__ = ReturnAminmax.__qualname__ = "aminmax"


def _aminmax_samples(make):
    return [Sample(make(3, 4)), Sample(make(3, 4), dim=1), Sample(make(3, 4), dim=-1,
                                                                  keepdim=True),
            Sample(make(2, 3), keepdim=True), Sample(make()), Sample(make(), dim=0),
            Sample(make(2, 3, dtype=int64), dim=0)]


@op(kind="composite", samples=_aminmax_samples)
def aminmax(self, *, dim=None, keepdim=False, out=None):
    """``(amin, amax)`` over ``dim`` (every dim when None)."""
    if not self._numel and dim is not None and self.dim() and \
            not self._sizes[meta.wrap_dim(dim, self.dim())]:
        raise IndexError(f"aminmax: Expected reduction dim {meta.wrap_dim(dim, self.dim())} "
                         f"to have non-zero size.")
    if not self._numel and (dim is None or not self.dim()):
        raise RuntimeError("aminmax(): cannot compute aminmax over an empty dimension as the "
                           "operation has no identity.")
    dims = () if dim is None else dim
    if dim is None and keepdim and self.dim() == 0:
        keepdim = False
    result = ReturnAminmax(amin(self, dims, keepdim), amax(self, dims, keepdim))
    return result if out is None else ReturnAminmax(*map(_into, out, result))


def _statistic_and_mean(name, statistic):
    def composite(self, dim=None, unbiased=None, keepdim=False, *, correction=None):
        if self._dtype.kind < 2:    # (neither floating nor complex)
            raise RuntimeError(f"{name} only support floating point and complex dtypes")
        dim, correction = _var_arguments(dim, unbiased, correction)
        return (statistic(self, dim, keepdim=keepdim, correction=correction),
                mean(self, dim, keepdim))
    composite.__name__ = name
    composite.__doc__ = f"``({name[:3]}, mean)`` over ``dim``, as ``{name[:3]}`` takes them."
    return op(name, kind="composite", method=False, samples=_var_samples)(composite)


var_mean = _statistic_and_mean("var_mean", var)
std_mean = _statistic_and_mean("std_mean", std)


def _logcumsumexp_samples(make):
    return _single_dim_samples(make) + [Sample(make(2, 3, dtype=float32), 1)]


@op(family="reduction", samples=_logcumsumexp_samples)
def logcumsumexp(self, dim, *, out=None):
    """``log(cumsum(exp(self)))`` along ``dim``, without overflow (running ``logaddexp``)."""
    if self._dtype.kind < 2:    # (neither floating nor complex)
        raise NotImplementedError(f"\"logcumsumexp_out_cpu\" not implemented for "
                                  f"'{_type_name(self._dtype)}'")
    arr, axis = _along(self, dim)
    result = new_result(self._sizes, self._dtype, device=self.device)
    if self._numel:
        with np.errstate(invalid="ignore", divide="ignore"):
            if self._dtype.is_complex:
                accumulated = _complex_logcumsumexp(arr, axis)
            else:
                accumulated = np.logaddexp.accumulate(arr.astype(compute_numpy(self._dtype)),
                                                      axis=axis)
        result._array().reshape(arr.shape)[...] = accumulated
    return result


def _complex_logcumsumexp(z, axis):
    """``log(cumsum(exp(z)))`` of complex ``z`` without overflow: the real and imaginary
    parts of ``exp(z)``, split by sign, are each accumulated in log space (real
    ``logaddexp``), then combined relative to the largest.  The imaginary part is taken
    on the branch nearest to that of the running element of largest real part, where
    PyTorch's running ``logaddexp`` keeps it."""
    magnitude, angle = z.real, z.imag
    parts = []
    for wave in (np.cos(angle), np.sin(angle)):
        for sign in (1, -1):
            parts.append(np.logaddexp.accumulate(
                magnitude + np.log(np.maximum(sign * wave, 0)), axis=axis))
    largest = np.maximum.reduce(parts)
    shift = np.where(np.isfinite(largest), largest, 0)
    real, imag = (np.exp(parts[i] - shift) - np.exp(parts[i + 1] - shift) for i in (0, 2))
    logged = shift + np.log(real + 1j * imag)
    # the element of largest real part so far (the last one reaching the running maximum)
    positions = np.arange(z.shape[axis]).reshape((-1,) + (1,) * (z.ndim - axis - 1))
    running = np.maximum.accumulate(magnitude, axis=axis)
    leader = np.maximum.accumulate(np.where(magnitude == running, positions, 0), axis=axis)
    near = np.take_along_axis(angle, leader, axis=axis)
    turns = np.round((near - logged.imag) / (2 * np.pi))
    return np.where(np.isfinite(turns), logged + 2j * np.pi * turns, logged)


@logcumsumexp.def_derivative("self")
def logcumsumexp(grad, self, dim, result):
    # grad_j = sum_{i >= j} grad_i exp(self_j - result_i), the positive and negative parts
    # of grad summed apart in log space (PyTorch's formula): no overflow
    if grad.dim() == 0:
        return grad
    d = _single_dim(dim, grad.dim())

    def reverse_logcumsumexp(x):
        return logcumsumexp(x.flip(d), d).flip(d)
    if grad.dtype.is_complex:   # (no sign to split: conj(exp(self_j - result_i)) in log space)
        return (reverse_logcumsumexp(grad.log() - result.conj()) + self.conj()).exp()
    lowest = float(np.finfo(grad._dtype.np).min)
    log_abs = grad.abs().log()
    positive = where(grad > 0, log_abs, log_abs.new_full((), lowest))
    negative = where(grad < 0, log_abs, log_abs.new_full((), lowest))
    return (reverse_logcumsumexp(positive - result) + self).exp() - \
        (reverse_logcumsumexp(negative - result) + self).exp()


_INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


def _quantile(name, self, q, dim, keepdim, interpolation, ignore_nan):
    """PyTorch's definition: sort along ``dim`` (NaN last), take the values at ranks
    ``q * (n - 1)`` (n: the values that are not NaN for ``nanquantile``; a slice with NaN
    gives NaN for ``quantile``) and interpolate between the two neighbours."""
    from microtensor.vmap.batched import active_levels
    if self._dtype not in (float32, float64):
        raise RuntimeError(f"{name}() input tensor must be either float or double dtype")
    if not self._numel:
        raise RuntimeError(f"{name}() input tensor must be non-empty")
    if isinstance(q, TensorBase):
        if q.dim() > 1:
            raise RuntimeError(f"{name}() q must be a scalar or 1D tensor")
        if q._dtype is not self._dtype:
            raise RuntimeError(f"{name}() q tensor must be same dtype as the input tensor")
        if not active_levels() and q._numel and bool(((q < 0) | (q > 1)).any()):
            raise RuntimeError(f"{name}() q values must be in the range [0, 1]")
        scalar_q, qs = q.dim() == 0, q.reshape(-1)
    else:
        if not 0 <= q <= 1:
            raise RuntimeError(f"{name}() q must be in the range [0, 1] but got {q}")
        scalar_q, qs = True, self.new_full((1,), q)
    if interpolation not in _INTERPOLATIONS:
        raise RuntimeError(f"{name}() interpolation must be one of linear, lower, higher, "
                           f"midpoint or nearest, but got {interpolation}")
    rows = self.reshape(-1) if dim is None else self.movedim(
        _single_dim(dim, self.dim()), -1) if self.dim() else self.reshape(1)
    ordered = rows.sort(-1).values.unsqueeze(0)           # [1, *kept, n]
    n = ordered.shape[-1]
    qs = qs.reshape((-1,) + (1,) * (ordered.dim() - 1))   # [m, 1, ..., 1]
    nans = ordered.isnan()
    if ignore_nan:
        ranks = qs * (nans.logical_not().sum(-1, keepdim=True) - 1).to(self._dtype)
        ranks = ranks.clamp(min=0)
    else:
        ranks = where(nans.any(-1, keepdim=True), qs.new_full((), n - 1), qs * (n - 1))
    if interpolation == "lower":
        ranks = ranks.floor()
    elif interpolation == "higher":
        ranks = ranks.ceil()
    elif interpolation == "nearest":
        ranks = ranks.round()
    ordered = ordered.expand(ranks.shape[:1] + ordered.shape[1:])
    below = ranks.long()
    values = ordered.gather(-1, below)
    if interpolation in ("linear", "midpoint"):
        weights = ranks - below.to(ranks.dtype) if interpolation == "linear" else \
            ranks.new_full((), 0.5).expand(ranks.shape)
        values = values.lerp(ordered.gather(-1, ranks.ceil().long()), weights)
    values = values.squeeze(-1)                           # [m, *kept]
    if keepdim:
        if dim is None:
            values = values.reshape((values.shape[0],) + (1,) * self.dim())
        elif self.dim():
            values = values.unsqueeze(_single_dim(dim, self.dim()) + 1)
    return owned(values.squeeze(0) if scalar_q else values)


def _quantile_samples(make):
    return [Sample(make(3, 5), 0.3), Sample(make(3, 5), make(2, low=0, high=1), 1),
            Sample(make(2, 3, 4), 0.75, -1, True), Sample(make(4, 3), 0.4, 0,
                                                           interpolation="lower"),
            Sample(make(4, 3), make(3, low=0, high=1), 1, interpolation="higher"),
            Sample(make(7), 0.5, interpolation="midpoint"),
            Sample(make(2, 5), 0.375, 1, True, interpolation="nearest"),
            Sample(make(2, 3), 0.6, keepdim=True), Sample(make(2, 3, dtype=float32), 0.25, 0)]


def _nanquantile_samples(make):
    with_nans = make(3, 5)
    with_nans._array()[0, 1] = with_nans._array()[2, 0] = with_nans._array()[2, 3] = np.nan
    return _quantile_samples(make) + [Sample(with_nans, 0.5, 1), Sample(with_nans, 0.3)]


_QUANTILE_OUT = "quantile() out tensor must be same dtype as the input tensor"


@op(kind="composite", samples=_quantile_samples)
def quantile(self, q, dim=None, keepdim=False, *, interpolation="linear", out=None):
    """The ``q``-th quantiles over ``dim`` (of all elements when None), NaN for a slice
    with NaN; ``q`` a number in [0, 1] or a 1-D tensor of them (its dim first)."""
    result = _quantile("quantile", self, q, dim, keepdim, interpolation, ignore_nan=False)
    return result if out is None else _into(out, result, _QUANTILE_OUT)


@op(kind="composite", samples=_nanquantile_samples)
def nanquantile(self, q, dim=None, keepdim=False, *, interpolation="linear", out=None):
    """``quantile`` of the values that are not NaN (NaN for a slice of NaN only)."""
    # (PyTorch's messages name quantile() for both)
    result = _quantile("quantile", self, q, dim, keepdim, interpolation, ignore_nan=True)
    return result if out is None else _into(out, result, _QUANTILE_OUT)


def _into(out, result, message=None, cast=False):
    """``result`` written into ``out`` by the rules of ``out=`` (resized, refused when
    autograd would record; ``mul`` by 1 keeps every value).  An ``out`` of another dtype
    takes the result cast when ``cast``, else is refused with ``message`` (by default the
    message of PyTorch's reductions)."""
    if out._dtype is not result._dtype and not cast:
        raise RuntimeError(message or f"Expected out tensor to have dtype "
                           f"{info(result._dtype).cpp_name}, but got "
                           f"{info(out._dtype).cpp_name} instead")
    return mul(result, 1, out=out)


def _histc_samples(make):
    return [Sample(make(2, 12)), Sample(make(3, 10), 4), Sample(make(2, 6), 5, -0.5, 0.5),
            Sample(make(2, 4, dtype=float32), 3, 0, 1), Sample(make(1, 5).expand(3, 5), 2)]


@op(method=False, function=False, differentiable=False, samples=_histc_samples)
def _histc_rows(self, bins=100, min=0, max=0):
    """``histc`` of each row of the 2-D ``self`` (rows: what vmap stacks), each row over its
    own range when ``min == max == 0``."""
    if not self._dtype.is_floating_point:
        raise NotImplementedError(f"\"histogram_cpu\" not implemented for "
                                  f"'{_type_name(self._dtype)}'")
    if int_arg(bins, "bins") <= 0:
        raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {bins} for "
                           f"dimension 0")
    rows = self._array()
    xp = array_module(rows)
    dt = rows.dtype.type
    zeros = xp.zeros((rows.shape[0], 1), dtype=rows.dtype)
    lows, highs = zeros + dt(min), zeros + dt(max)
    if min == max and rows.shape[1]:
        lows, highs = rows.min(axis=1, keepdims=True), rows.max(axis=1, keepdims=True)
    for low, high in zip(lows[:, 0].tolist(), highs[:, 0].tolist()):
        if not (math.isfinite(low) and math.isfinite(high)):
            raise RuntimeError(f"torch.histc: range of [{low:g}, {high:g}] is not finite")
    same = lows == highs
    lows, highs = np.where(same, lows - 1, lows), np.where(same, highs + 1, highs)
    if (lows > highs).any():
        raise RuntimeError("torch.histc: max must be larger than min")
    with np.errstate(invalid="ignore"):
        # PyTorch's position, in the input's dtype: (x - low) * bins / (high - low)
        position = ((rows - lows) * bins / (highs - lows))
        inside = (rows >= lows) & (rows <= highs)
    index = np.minimum(np.where(inside, position, 0).astype(np.int64), bins - 1)
    flat = (index + bins * xp.arange(rows.shape[0])[:, None])[inside]
    counts = np.bincount(flat, minlength=rows.shape[0] * bins)
    return _fresh(counts.reshape(rows.shape[0], bins).astype(rows.dtype), self._dtype)


@_histc_rows.def_batch_rule
def _histc_rows(op, level, args, kwargs):
    """The batch's rows are more rows."""
    bound = op.bind(args, kwargs)
    self = bound.pop("self")
    rows = to_front(self._value, self._bdim)
    size = rows.shape[0]
    result = call(op, (rows.reshape((-1,) + tuple(rows.shape[2:])),), bound)
    return wrap(result.reshape((size, -1) + tuple(result.shape[1:])), 0, level)


@op(kind="composite", samples=lambda make: [Sample(s.args[0][0], *s.args[1:])
                                            for s in _histc_samples(make)])
def histc(self, bins=100, min=0, max=0, *, out=None):
    """A histogram of ``bins`` equal bins over [min, max] (the data's range when both are
    0); values outside the range, and NaN, are not counted."""
    check_scalars_fit(float64, min, max)
    result = owned(_histc_rows(self.reshape(1, -1), bins, min, max).reshape(bins))
    if out is None:
        return result
    return _into(out, result, f"torch.histogram: input tensor and hist tensor should have the "
                              f"same dtype, but got input {info(self._dtype).cpp_name} and "
                              f"hist {info(out._dtype).cpp_name}")


__all__ += ["nansum", "nanmean", "aminmax", "ReturnAminmax", "var_mean", "std_mean",
            "logcumsumexp", "quantile", "nanquantile", "histc"]


# --------------------------------------------------------------------------- more in-place

def cumulative_(op, self, dim, dtype, source=None):
    """``op`` (``cumsum`` or ``cumprod``) of ``source`` (``self``, or a clone of it when
    ``op``'s derivative reads its input) written into ``self``.  PyTorch computes into
    ``self`` itself: a ``dtype`` must be its own, and bools (whose cumulative results are
    integers) are refused."""
    if dtype is not None and dtype is not self._dtype:
        raise RuntimeError(f"Bad in-place call: input tensor dtype {info(self._dtype).cpp_name} "
                           f"and output tensor dtype {info(dtype).cpp_name} should match")
    if self._dtype is bool_:
        raise NotImplementedError(f"\"{op.name}_out_cpu\" not implemented for 'Bool'")
    return self.copy_(op(self if source is None else source, dim, dtype=self._dtype))


@op(kind="composite", function=False)
def cumsum_(self, dim, *, dtype=None):
    return cumulative_(cumsum, self, dim, dtype)


__all__ += ["cumsum_"]
