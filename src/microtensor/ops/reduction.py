"""Reductions: ops that combine elements along dimensions (``sum``, ``mean`` ...).

Kernels run over views with NumPy's pairwise-summing reductions (or the Cython
``sum_all`` for whole-tensor sums).  ``dim`` may be None (all dims), an int or a tuple;
``keepdim`` keeps reduced dims as size 1.  Derivatives broadcast the gradient back with
``expand`` after restoring reduced dims.
"""
import numpy as np

from microtensor._C import kernels, meta
from microtensor._C.tensor import TensorBase, bool_, int64
from microtensor.ops.loops import dims_of, from_numpy_result, reduce
from microtensor.ops.registry import op


def _sum_dtype(self, dtype):
    if dtype is not None:
        return dtype
    return self._dtype if self._dtype.is_floating_point else int64


def unsqueeze_reduced(grad, self_shape, dim, keepdim):
    """Put back the dims a reduction removed so ``grad`` broadcasts against the input."""
    if keepdim or not self_shape:
        return grad
    for d in dims_of(dim, len(self_shape)):
        grad = grad.unsqueeze(d)
    return grad


@op(family="reduction")
def sum(self, dim=None, keepdim=False, *, dtype=None):
    out_dtype = _sum_dtype(self, dtype)
    if dim is None and not keepdim and self.device.type == "cpu":
        value = kernels.sum_all(self._array())
        return from_numpy_result(np.asarray(value, dtype=out_dtype.np))
    return reduce(np.sum, self, dim, keepdim, out_dtype)


@sum.def_derivative
def sum(grad, self_shape, dim, keepdim):
    return unsqueeze_reduced(grad, self_shape, dim, keepdim).expand(self_shape),


@op(kind="composite")
def sum_to_size(self, *size):
    """Sum ``self`` down to ``size`` (the inverse of broadcasting): how gradients of
    broadcast inputs are formed."""
    size = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list)) else size
    if tuple(self.shape) == tuple(size):
        return self
    lead = self.dim() - len(size)
    dims = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(size)
                                      if s == 1 and self._sizes[lead + i] != 1)
    result = self.sum(dims, keepdim=True) if dims else self
    return result.view(size) if lead else result


@op(kind="composite")
def mean(self, dim=None, keepdim=False, *, dtype=None):
    if not (dtype or self._dtype).is_floating_point:
        raise RuntimeError("mean(): could not infer output dtype. Input dtype must be either a "
                           f"floating point or complex dtype. Got: "
                           f"{self._dtype.name.capitalize()}")
    count = 1
    for d in dims_of(dim, self.dim()):
        count *= self._sizes[d]
    return self.sum(dim, keepdim, dtype=dtype) / max(count, 0) if count else \
        self.sum(dim, keepdim, dtype=dtype) * float("nan")
