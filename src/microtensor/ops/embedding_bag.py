"""``embedding_bag``: sums, means or maxima of bags of embedding rows, PyTorch's
``F.embedding_bag`` (its checks, ``max_norm``, ``scale_grad_by_freq``,
``per_sample_weights``, ``include_last_offset``, ``padding_idx``).

The reduction is one composite op, ``_embedding_bag_output``, written with whole-tensor
ops: the rows are picked with one ``index_select`` and reduced into their bags with one
``index_add`` (sum, mean) or one ``scatter_reduce(..., "amax")`` (max).  Entries that
belong to no bag (padding, or past the last offset with ``include_last_offset``) go to
one extra bag, dropped at the end.  Autograd and vmap therefore come from those ops: the
gradient of ``weight`` is an ``index_add`` of the bags' gradients (the max's goes to the
row that won), ``per_sample_weights`` gets each row's dot product with its bag's gradient.
"""
import warnings

import numpy as np

from microtensor._C.tensor import TensorBase, int32, int64
from microtensor.autograd.grad_mode import no_grad
from microtensor.ops.factory import arange, tensor, zeros
from microtensor.ops.registry import Sample, op
from microtensor.ops.selection import searchsorted
from microtensor.vmap.batched import BatchedTensor

MODES = ("sum", "mean", "max")


def _values(t):
    """The values of an integer tensor as an ndarray, or None when they are not at hand
    (a per-sample tensor inside vmap)."""
    return None if isinstance(t, BatchedTensor) else np.asarray(t._array())


def _gradient_scaled(t, scale):
    """``t`` unchanged, but the gradient flowing back through it multiplied by ``scale``
    (``t - t.detach()`` is exactly zero, so the value is exact)."""
    return t.detach() + (t - t.detach()) * scale


def _samples(make):
    index = tensor([1, 2, 4, 5, 4, 3, 2, 0, 4])
    offsets = tensor([0, 2, 2, 5])
    return [Sample(make(6, 3), index, offsets, mode)
            for mode in MODES] + [
        Sample(make(6, 3), index, offsets, "sum", per_sample_weights=make(9)),
        Sample(make(6, 3), index, tensor([0, 2, 2, 5, 9]), "mean", include_last_offset=True,
               padding_idx=4),
        Sample(make(6, 3), index, offsets, "max", padding_idx=4),
        Sample(make(5, 2), tensor([], dtype=int64), tensor([0, 0]), "max")]


@op(kind="composite", inputs=("weight", "per_sample_weights"), method=False, function=False,
    samples=_samples)
def _embedding_bag_output(weight, input, offsets, mode="mean", per_sample_weights=None,
                          include_last_offset=False, padding_idx=None,
                          scale_grad_by_freq=False):
    """The bags' reductions for a 1-D ``input`` cut into bags at ``offsets`` (checked by
    ``embedding_bag``); ``padding_idx`` already wrapped to a row number."""
    bags = offsets.shape[0] - (1 if include_last_offset else 0)
    n, width = input.shape[0], weight.shape[1]
    bag = searchsorted(offsets, arange(n, dtype=offsets.dtype, device=input.device),
                       right=True) - 1
    dropped = bag >= bags
    if padding_idx is not None:
        dropped = dropped | (input == padding_idx)
    bag = bag.masked_fill(dropped, bags).to(int64)
    rows = weight.index_select(0, input)
    if scale_grad_by_freq:
        count = zeros(weight.shape[0], dtype=weight.dtype, device=weight.device).index_add(
            0, input, rows.new_ones(n))
        rows = _gradient_scaled(rows, (1 / count.index_select(0, input)).unsqueeze(1))
    if mode == "max":
        out = rows.new_zeros((bags + 1, width)).scatter_reduce(
            0, bag.unsqueeze(1).expand(n, width), rows, "amax", include_self=False)
        return out[:bags]
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.unsqueeze(1)
    out = rows.new_zeros((bags + 1, width)).index_add(0, bag, rows)
    if mode == "mean":
        sizes = rows.new_zeros(bags + 1).index_add(0, bag, rows.new_ones(n))
        out = out / sizes.clamp(min=1).unsqueeze(1)
    return out[:bags]


def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type=2,
                  scale_grad_by_freq=False, mode="mean", sparse=False,
                  per_sample_weights=None, include_last_offset=False, padding_idx=None):
    """``F.embedding_bag``: a 2-D ``input`` is a batch of bags of equal length; a 1-D one
    is cut into bags at ``offsets``."""
    if weight._dtype is int64 and input.is_floating_point():
        warnings.warn("Argument order of nn.functional.embedding_bag was changed. Usage "
                      "`embedding_bag(weight, input, ...)` is deprecated, and should now be "
                      "`embedding_bag(input, weight, ...)`.", stacklevel=2)
        weight, input = input, weight
    if per_sample_weights is not None and tuple(input.shape) != tuple(per_sample_weights.shape):
        raise ValueError(f"embedding_bag: If per_sample_weights ({_size(per_sample_weights)}) "
                         f"is not None, then it must have the same shape as the input "
                         f"({_size(input)})")
    if weight.dim() != 2:
        raise ValueError(f"weight has to be a 2D Tensor, but got Tensor of dimension "
                         f"{weight.dim()}")
    if input.dim() == 2:
        if offsets is not None:
            raise ValueError(f"if input is 2D, then offsets has to be None, as input is "
                             f"treated is a mini-batch of fixed length sequences. However, "
                             f"found offsets of type {_type_str(offsets)}")
        offsets = arange(0, input.numel(), input.shape[1], dtype=input.dtype,
                         device=input.device)
        input = input.reshape(-1)
        include_last_offset = False      # as in PyTorch: every row is a bag
        if per_sample_weights is not None:
            per_sample_weights = per_sample_weights.reshape(-1)
    elif input.dim() == 1:
        if offsets is None:
            raise ValueError("offsets has to be a 1D Tensor but got None")
        if offsets.dim() != 1:
            raise ValueError("offsets has to be a 1D Tensor")
    else:
        raise ValueError(f"input has to be 1D or 2D Tensor, but got Tensor of dimension "
                         f"{input.dim()}")
    if mode not in MODES:
        raise ValueError("mode has to be one of sum, mean or max")
    if mode == "max" and scale_grad_by_freq:
        raise ValueError("max mode does not support scaling the gradient by the frequency")
    if mode == "max" and sparse:
        raise ValueError("max mode does not support sparse weights")
    if per_sample_weights is not None and mode != "sum":
        raise NotImplementedError(f"embedding_bag: per_sample_weights was not None. "
                                  f"per_sample_weights is only supported for mode='sum' "
                                  f"(got mode='{mode}'). Please open a feature request on "
                                  f"GitHub.")
    if per_sample_weights is not None and per_sample_weights._dtype is not weight._dtype:
        raise RuntimeError(f"Expected tensor for argument #1 'weight' to have the same type as "
                           f"tensor for argument #1 'per_sample_weights'; but type "
                           f"{_legacy_type(weight)} does not equal "
                           f"{_legacy_type(per_sample_weights)} (while checking arguments for "
                           f"embedding_bag)")
    if sparse:
        raise NotImplementedError("embedding_bag: sparse=True needs sparse gradients, which "
                                  "microtensor does not have")
    _check_indices(input, offsets, weight.shape[0])
    padding_idx = _padding_row(padding_idx, weight.shape[0])
    if max_norm is not None:
        _renorm_rows(weight, input, max_norm, norm_type)
    return _embedding_bag_output(weight, input, offsets, mode, per_sample_weights,
                                 include_last_offset, padding_idx, scale_grad_by_freq)


def _size(t):
    return f"torch.Size([{', '.join(str(n) for n in t.shape)}])"


def _type_str(x):
    return "<class 'torch.Tensor'>" if isinstance(x, TensorBase) else str(type(x))


def _check_indices(input, offsets, rows):
    """PyTorch's checks of the indices and offsets (those whose values are at hand)."""
    for name, t in (("indices", input), ("offsets", offsets)):
        if t._dtype is not int64 and t._dtype is not int32:
            raise RuntimeError(f"Expected tensor for argument #{1 if name == 'indices' else 2}"
                               f" '{name}' to have one of the following scalar types: Long, "
                               f"Int; but got {_legacy_type(t)} instead (while checking "
                               f"arguments for embedding_bag)")
    cuts, positions = _values(offsets), _values(input)
    if cuts is not None and cuts.size:
        if cuts[0] != 0:
            raise RuntimeError(f"offsets[0] has to be 0, i.e., the first sequence in the "
                               f"mini-batch has to start from position 0. However, got "
                               f"{cuts[0]}")
        if cuts[-1] > input.shape[0]:
            raise RuntimeError(f"offsets[-1] can not be greater than input's length "
                               f"{input.shape[0]} but got offsets[-1] of {cuts[-1]}")
        if (np.diff(cuts) < 0).any():
            raise RuntimeError("offsets must be non-decreasing")
    if positions is not None:
        bad = np.flatnonzero((positions < 0) | (positions >= rows))
        if bad.size:
            raise RuntimeError(f"Index {bad[0]} of input takes value {positions[bad[0]]} "
                               f"which is not in the valid range [0, {rows})")


def _legacy_type(t):
    return "torch." + {"float32": "Float", "float64": "Double", "float16": "Half",
                       "bfloat16": "BFloat16", "bool": "Bool", "int8": "Char",
                       "uint8": "Byte", "int16": "Short"}.get(t._dtype.name, "") + "Tensor"


def _padding_row(padding_idx, rows):
    if padding_idx is None:
        return None
    if not -rows <= padding_idx < rows:
        raise RuntimeError(f"padding_idx must be within the number of embeddings, {-rows} "
                           f"through {rows - 1}, but got {padding_idx}")
    return padding_idx % rows


def _renorm_rows(weight, input, max_norm, norm_type):
    """PyTorch's ``embedding_renorm_``: in place and unrecorded, each row ``input`` uses
    whose ``norm_type``-norm exceeds ``max_norm`` is scaled down to it."""
    with no_grad():
        used = input.unique()
        rows = weight.index_select(0, used)
        norms = rows.norm(norm_type, dim=1, keepdim=True)
        scale = (max_norm / (norms + 1e-7)).where(norms > max_norm, norms.new_ones(()))
        weight[used] = rows * scale


__all__ = ["embedding_bag"]
