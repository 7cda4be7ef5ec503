"""``scatter_reduce`` / ``scatter_reduce_``: ``src`` reduced into ``self`` at the positions
``index`` names along ``dim``, with "sum", "prod", "mean", "amax" or "amin", ``self``'s
own values included or not.

The kernel is one ``ufunc.at`` over all of ``src`` (repeated positions all count); its
derivative is PyTorch's (``scatter_reduce_backward``): prod divides the result by each
factor, taking care of zeros, and amax/amin share the gradient evenly between the values
equal to the result, declared as one joint formula (the two gradients share the count,
the shared extremum or the masked products).  Its batching rule is gather/scatter's.
"""
import numpy as np

from microtensor._C import meta
from microtensor._C.autograd import Node, detached_alias, gradient_edge
from microtensor._C.tensor import TensorBase, bool_, int64
from microtensor.ops.factory import arange, full, tensor
from microtensor.ops.indexing import (_along, _check_scatter, _padded, _shape_or_vector, _target,
                                     dimwise_index_batch_rule)
from microtensor.ops.loops import (_type_name, array_module, is_floating_array, owned,
                                   refuse_complex, update_at)
from microtensor.ops.registry import REGISTRY, Sample, inplace_variant, op

REDUCTIONS = ("sum", "prod", "mean", "amax", "amin")
_UFUNCS = {"sum": "add", "mean": "add", "prod": "multiply", "amax": "maximum",
           "amin": "minimum"}


def _identity(reduce, dtype):
    """The value a position starts from when ``self``'s own value is left out."""
    if reduce in ("sum", "mean"):
        return 0
    if reduce == "prod":
        return 1
    if dtype.kind not in "biu":         # floating, ml_dtypes' bfloat16 included
        return -np.inf if reduce == "amax" else np.inf
    if dtype == np.bool_:
        return reduce == "amin"
    info = np.iinfo(dtype)
    return info.min if reduce == "amax" else info.max


def _samples(make):
    index = tensor([[2, 0, 2, 1], [2, 2, 0, 2]])
    cases = [Sample(make(3, 4), 0, index, make(2, 4), reduce, include_self=include)
             for reduce in REDUCTIONS for include in (True, False)]
    # repeated factors, and zeros in self and src (prod's derivative divides by them)
    zeros = tensor([[0.0, 1.5, -2.0], [0.5, 0.0, 3.0]], dtype=make(1).dtype)
    cases += [Sample(make(2, 3) * zeros, 1, tensor([[1, 1, 2], [0, 0, 0]]),
                     make(2, 3) * zeros.flip(0), "prod"),
              Sample(make(3, 4), 1, tensor([[3, 3], [0, 3]]), make(2, 2), "amin"),
              Sample(make(), 0, tensor([0, 0]), make(2), "mean", include_self=False),
              Sample(make(4, 3, low=-3, high=3, dtype=int64), 0,
                     tensor([[1, 0, 3]]), make(1, 3, low=-3, high=3, dtype=int64), "mean")]
    return cases


@op(inputs=("self", "src"), samples=_samples)
def scatter_reduce(self, dim, index, src, reduce, *, include_self=True, out=None):
    if not isinstance(src, TensorBase):
        raise TypeError(f"scatter_reduce(): argument 'src' (position 3) must be Tensor, not "
                        f"{type(src).__name__}")
    if reduce not in REDUCTIONS:
        raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, "
                           f"got {reduce}")
    if reduce == "mean" and self._dtype is bool_:
        raise NotImplementedError("\"scatter_gather_tensor_cpu_reduce_mean\" not implemented "
                                  "for 'Bool'")
    if reduce in ("amax", "amin"):      # (complex numbers have no order)
        refuse_complex(self, f"scatter_gather_tensor_cpu_reduce_{reduce}")
    d, positions = _check_scatter("scatter", self, dim, index, src)
    result = _target(self, out, (index, src))
    target = result._array().reshape(_shape_or_vector(self))
    source = src._array().reshape(_shape_or_vector(src))[
        tuple(slice(0, n) for n in positions.shape)]
    if np.may_share_memory(source, target):       # the overlap PyTorch lets through
        source = source.copy()
    where = _along(positions, d)
    if not include_self:
        target[where] = _identity(reduce, target.dtype)
    update_at(_UFUNCS[reduce], target, where, source)
    if reduce == "mean":
        count = array_module(target).zeros(target.shape, np.int64)
        if include_self:
            count += 1
        update_at("add", count, where, 1)
        np.maximum(count, 1, out=count)
        divide = np.divide if is_floating_array(target) else np.floor_divide
        divide(target, count, out=target, casting="unsafe")
    return result


@scatter_reduce.def_batch_rule
def scatter_reduce(op, level, args, kwargs):
    """gather/scatter's rule: every tensor argument batched, ``dim`` shifted."""
    return dimwise_index_batch_rule(op, level, args, kwargs)


@scatter_reduce.def_joint_derivative
def scatter_reduce(grad, self, dim, index, src, reduce, include_self, result):
    src_shape = src.shape
    if src.dim() and src.shape != index.shape:       # only the part the index covers counts
        src = src[tuple(slice(0, n) for n in index.shape)]
    if reduce == "sum":
        grad_self, grad_src = grad, grad.gather(dim, index)
    elif reduce == "mean":
        count = (grad.new_ones(grad.shape) if include_self else grad.new_zeros(grad.shape)) \
            .scatter_add(dim, index, src.new_ones(src.shape))
        count = count.masked_fill(count == 0, 1)
        grad_self = grad / count
        grad_src = grad.gather(dim, index) / count.gather(dim, index)
    elif reduce == "prod":
        grad_self, grad_src = _prod_backward(grad, self, dim, index, src, include_self, result)
    else:
        # several values equal to the extremum share its gradient evenly
        value = result.gather(dim, index)
        self_is_result = (self == result).to(grad.dtype)
        src_is_value = (src == value).to(grad.dtype)
        shared = grad / self_is_result.scatter_add(dim, index, src_is_value)
        grad_self = self_is_result * shared
        grad_src = src_is_value * shared.gather(dim, index)
    if not include_self:
        grad_self = grad_self.scatter(dim, index, 0)
    return grad_self, _padded(grad_src, src_shape)


def _prod_backward(grad, self, dim, index, src, include_self, result):
    """prod's gradients: each factor's is the product of the others, computed without
    dividing by zero (the products are taken again with the zero factors set to 1)."""
    masked_self = self.masked_fill(self == 0, 1)
    grad_self = grad * masked_self.scatter_reduce(dim, index, src, "prod",
                                                  include_self=include_self) / masked_self
    src_zero = src == 0
    zeros_there = self.new_zeros(self.shape).scatter_add(dim, index, src_zero.to(self.dtype)) \
        .gather(dim, index)
    single_zero = src_zero & (zeros_there == 1)
    others = self.scatter_reduce(dim, index, src.masked_fill(single_zero, 1), "prod",
                                 include_self=include_self)
    grad_src = (grad * others).gather(dim, index).where(
        single_zero, (grad * result).gather(dim, index) / src.masked_fill(src_zero, 1))
    if grad_src.requires_grad and bool((zeros_there > 1).any()):
        grad_src = _refusing_double_backward(grad_src)
    return grad_self, grad_src


class _DoubleBackwardError(Node):
    """PyTorch's refusal of the second derivative of a factor next to another zero, which
    is not the derivative of the formula above (its ``DelayedError``); its edge keeps the
    inputs reachable."""

    def __init__(self, edge):
        super().__init__((edge,), num_outputs=1)

    def name(self):
        return "Error"

    def apply(self, grads):
        raise RuntimeError("scatter_reduce(): Double backward is unsupported for src when >1 "
                           "zeros in src are scattered to the same position in self")


def _refusing_double_backward(t):
    """``t``, whose own gradient raises ``_DoubleBackwardError``'s error."""
    out = detached_alias(t)
    out._grad_fn, out._output_nr, out._requires_grad = _DoubleBackwardError(gradient_edge(t)), \
        0, True
    return out


scatter_reduce_ = inplace_variant(scatter_reduce)

__all__ = ["scatter_reduce", "scatter_reduce_"]
__all__ += ["segment_reduce"]


# --------------------------------------------------------------------------- segment_reduce

_SEGMENT_REDUCTIONS = {"sum": "sum", "mean": "sum", "max": "amax", "amax": "amax",
                       "min": "amin", "amin": "amin", "prod": "prod"}
# what an empty segment holds without ``initial`` (the reduction's identity; mean: 0 / 0)
_EMPTY_SEGMENT = {"sum": 0.0, "mean": 0.0, "amax": float("-inf"), "amin": float("inf"),
                  "prod": 1.0}


def _segment_lengths(data, lengths, indices, offsets, axis, unsafe):
    """The segments' lengths (..., S) and the axis they split, with PyTorch's checks."""
    if indices is not None:
        raise RuntimeError("segment_reduce(): indices based reduction is not supported yet.")
    if lengths is None and offsets is None:
        raise RuntimeError("segment_reduce(): Either lengths or offsets must be defined.")
    if lengths is None:
        lengths = offsets.diff(dim=-1)
    axis = meta.wrap_dim(axis, data.dim())
    if axis != lengths.dim() - 1:
        raise RuntimeError(f"segment_reduce(): Expected axis to be the last dimension of "
                           f"lengths but got {axis}.")
    if bool((lengths < 0).any()):
        raise RuntimeError("lengths contains negative value!")
    if not unsafe and not bool((lengths.sum(-1) == data.shape[axis]).all()):
        raise RuntimeError("segment_reduce(): Expected all rows of lengths along axis to sum "
                           "to data.size(lengths.dim()-1) when !unsafe.")
    return lengths, axis


def _segment_reduce_samples(make):
    # an empty segment's mean, max or min without ``initial`` is NaN or infinite, where a
    # numerical gradient cannot be taken: those samples have none
    lengths, filled = tensor([2, 0, 3, 1]), tensor([2, 1, 3])
    return [Sample(make(6), "sum", lengths=lengths), Sample(make(6), "mean", lengths=filled),
            Sample(make(6), "max", lengths=filled), Sample(make(6), "min", lengths=lengths,
                                                           initial=0.5),
            Sample(make(6, 2), "prod", offsets=tensor([0, 2, 2, 5, 6])),
            Sample(make(2, 3), "sum", lengths=tensor([[1, 2], [3, 0]]), axis=1),
            Sample(make(6), "mean", lengths=lengths, initial=2.0)]


@op(kind="composite", inputs=("data",), method=False, samples=_segment_reduce_samples)
def segment_reduce(data, reduce, *, lengths=None, indices=None, offsets=None, axis=0,
                   unsafe=False, initial=None):
    """``data`` reduced ("sum", "mean", "max", "min" or "prod") over consecutive segments
    of dim ``axis``, given by their ``lengths`` (or by ``offsets`` into it): one
    ``scatter_reduce`` into the segments, each element sent to the segment it falls in.
    ``initial`` joins every segment (a mean still divides by the segment's length); an
    empty segment holds ``initial``, else the reduction's identity (NaN for a mean)."""
    if reduce not in _SEGMENT_REDUCTIONS:
        raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, "
                           f"got {reduce}")
    if not data.is_floating_point():
        raise NotImplementedError(f"\"_segment_reduce_cpu\" not implemented for "
                                  f"'{_type_name(data.dtype)}'")
    lengths, axis = _segment_lengths(data, lengths, indices, offsets, axis, unsafe)
    size = data.shape[axis]
    positions = arange(size, device=data.device).expand(tuple(lengths.shape[:-1]) + (size,))
    segment = REGISTRY["searchsorted"](lengths.cumsum(-1).contiguous(), positions, right=True)
    trailing = data.dim() - axis - 1
    index = segment.reshape(tuple(segment.shape) + (1,) * trailing).expand(tuple(data.shape))
    # one more segment collects what ``unsafe`` lengths leave uncovered, then is dropped
    segments = lengths.shape[-1]
    out_shape = tuple(data.shape[:axis]) + (segments + 1,) + tuple(data.shape[axis + 1:])
    how = _SEGMENT_REDUCTIONS[reduce]
    start = _EMPTY_SEGMENT[how] if initial is None else initial
    base = full(out_shape, start, dtype=data.dtype, device=data.device)
    result = base.scatter_reduce(axis, index, data, how, include_self=initial is not None)
    result = owned(result.narrow(axis, 0, segments).contiguous())
    if reduce != "mean":
        return result
    counts = lengths.reshape(tuple(lengths.shape) + (1,) * trailing).to(data.dtype)
    if initial is None:
        return result / counts          # an empty segment: 0 / 0
    return (result / counts).where(counts > 0, result)
