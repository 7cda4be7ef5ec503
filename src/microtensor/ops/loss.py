"""Losses that PyTorch computes as single ops: ``nll_loss`` and its backward, and the
elementwise binary cross-entropy.

``nn.functional.nll_loss`` (and so ``cross_entropy``) could be written with ``gather``,
masks and sums, but as one op it records one graph node (``NllLossBackward0``, as in
PyTorch) instead of a dozen, which is most of a small model's step.  The loss is linear
in its input, so its derivative, ``nll_loss_backward``, does not read the input, and the
derivative of that with respect to the incoming gradient is ``nll_loss`` again: both are
differentiable to any order.  Each one's batching rule follows its derivative.
"""
from operator import methodcaller

import numpy as np

from microtensor._C import kernels, meta, nnkernels
from microtensor._C.tensor import int64, compute_numpy
from microtensor._composite import _any
from microtensor.ops.activation import log_sigmoid, softplus
from microtensor.ops.contraction import pairwise_distance
from microtensor.ops.factory import arange, tensor
from microtensor.ops.pointwise import minimum, where
from microtensor.ops.loops import _type_name, array_module, from_numpy_result, pointwise
from microtensor.ops.registry import Sample, op
from microtensor.vmap.helpers import BatchedTensor, batch_size, call, front_or_expanded, wrap

REDUCTIONS = ("none", "mean", "sum")


def _nll_samples(make):
    return [Sample(make(3, 5), tensor([1, 4, 0])),
            Sample(make(3, 5), tensor([1, -100, 4]), reduction="sum"),
            Sample(make(4, 3), tensor([2, 0, 2, 1]), reduction="none"),
            Sample(make(3, 4), tensor([3, 1, 3]), make(4, low=0.5, high=2.0)),
            Sample(make(3, 4), tensor([0, 2, 1]), None, ignore_index=2),
            Sample(make(5), tensor(3)), Sample(make(5), tensor(1), reduction="none")]


def check_arguments(input_shape, input_dtype, target, weight, reduction):
    """PyTorch's checks of nll_loss's arguments, from shapes and dtypes alone (so that
    batching rules can make them per sample)."""
    if not input_shape:
        raise ValueError("Expected 1 or more dimensions (got 0)")
    if len(input_shape) > 2:
        raise NotImplementedError(f"nll_loss: inputs of 1 or 2 dimensions are supported, got "
                                  f"{len(input_shape)}")
    if reduction not in REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction")
    if target._dtype is not int64:
        raise RuntimeError(f"expected target dtype to be Long or Byte, but got "
                           f"{_type_name(target._dtype)}")
    rows = input_shape[0] if len(input_shape) == 2 else 1
    if target._numel != rows or target.dim() != len(input_shape) - 1:
        raise ValueError(f"Expected input batch_size ({rows}) to match target batch_size "
                         f"({target.shape[0] if target.dim() else 0}).")
    classes = input_shape[-1]
    if weight is not None:
        if tuple(weight.shape) != (classes,):
            raise RuntimeError(f"weight tensor should be defined either for all {classes} "
                               f"classes or no classes but got weight tensor of shape: "
                               f"{list(weight.shape)}")
        if weight._dtype is not input_dtype:
            raise RuntimeError(f"expected scalar type {_type_name(input_dtype)} but found "
                               f"{_type_name(weight._dtype)}")


def _out_of_bounds(bad):
    return IndexError(f"Target {bad} is out of bounds.")


def _row_weights(targets, classes, weight, ignore_index, dtype):
    """For arrays of another module than NumPy (CuPy): the targets with ignored ones at 0
    and each row's weight (0 where ignored), and the array module."""
    xp = array_module(targets)
    valid = targets != ignore_index
    picked = xp.where(valid, targets, 0)
    out_of_range = (picked < 0) | (picked >= classes)
    if bool(out_of_range.any()):
        raise _out_of_bounds(int(picked[out_of_range][0]))
    weights = valid.astype(dtype.np)
    if weight is not None:
        weights *= weight._array()[picked]
    return picked, weights, xp


@op(inputs=("self",), method=False, function=False, samples=_nll_samples)
def nll_loss(self, target, weight=None, reduction="mean", ignore_index=-100):
    """The negative log-likelihood of each target class under log-probabilities ``self``
    ((N, C), or (C,) with a 0-d target), weighted, ignored targets left out."""
    check_arguments(self._sizes, self._dtype, target, weight, reduction)
    fast = nnkernels.nll_loss_rows(self, target, weight, reduction, ignore_index)
    if fast is not None:
        if type(fast) is int:
            raise _out_of_bounds(fast)
        return fast
    rows = self._array().reshape(-1, self._sizes[-1])
    targets = target._array().reshape(-1)
    if isinstance(rows, np.ndarray):
        compute = compute_numpy(self._dtype)   # float16, bfloat16: in float32, rounded once
        losses = np.empty(len(rows), compute)
        weights = np.empty(len(rows), compute)
        bad = kernels.nll_forward_(rows.astype(compute, copy=False), targets,
                                   None if weight is None else
                                   weight._array().astype(compute, copy=False),
                                   ignore_index, losses, weights)
        if bad is not None:
            raise _out_of_bounds(bad)
        sum_of = np.add.reduce   # the ufunc's own (ndarray.sum is a Python function)
    else:
        picked, weights, xp = _row_weights(targets, self._sizes[-1], weight, ignore_index,
                                           self._dtype)
        losses = -rows[xp.arange(len(picked)), picked] * weights
        sum_of = methodcaller("sum")
    if reduction == "none":
        # reshaped only when the shape differs: a reshaped view would be copied again
        shape = target._sizes
        return from_numpy_result(losses if losses.shape == shape else losses.reshape(shape),
                                 self._dtype)
    total = sum_of(losses)
    if reduction == "mean":
        weight_sum = sum_of(weights)
        if weight_sum:
            total = total / weight_sum
        else:
            with np.errstate(invalid="ignore"):   # every target ignored: nan, as in PyTorch
                total = total / weight_sum
    return from_numpy_result(total, self._dtype)


@nll_loss.def_derivative("self")
def nll_loss(grad, self_shape, target, weight, reduction, ignore_index):
    return call(nll_loss_backward, (grad, self_shape, target, weight, reduction, ignore_index),
                None)


def _backward_samples(make):
    return [Sample(make(), (3, 5), tensor([1, 4, 0])),
            Sample(make(4), (4, 3), tensor([2, -100, 2, 1]), reduction="none"),
            Sample(make(), (3, 4), tensor([3, 1, 3]), make(4, low=0.5, high=2.0),
                   reduction="sum"),
            Sample(make(), (5,), tensor(3))]


@op(inputs=("grad",), method=False, function=False, samples=_backward_samples)
def nll_loss_backward(grad, self_shape, target, weight=None, reduction="mean",
                      ignore_index=-100):
    """The gradient of ``nll_loss`` with respect to its input of shape ``self_shape``:
    minus the target's weight (over the total weight for "mean") times ``grad``, at each
    row's target class; zero elsewhere."""
    self_shape = tuple(self_shape)
    check_arguments(self_shape, grad._dtype, target, weight, reduction)
    fast = nnkernels.nll_loss_backward_rows(grad, self_shape, target, weight, reduction,
                                            ignore_index)
    if fast is not None:
        if type(fast) is int:
            raise _out_of_bounds(fast)
        return fast
    targets = target._array().reshape(-1)
    grads = grad._array().reshape(-1)
    if isinstance(grads, np.ndarray):
        compute = compute_numpy(grad._dtype)   # float16, bfloat16: in float32, rounded once
        result = np.empty(self_shape, compute)     # owned: no copy when it becomes a tensor
        out = result.reshape(target._numel, self_shape[-1])
        bad = kernels.nll_backward_(out, targets, None if weight is None else
                                    weight._array().astype(compute, copy=False),
                                    ignore_index, grads.astype(compute, copy=False),
                                    reduction == "mean")
        if bad is not None:
            raise _out_of_bounds(bad)
        return from_numpy_result(result, grad._dtype)
    picked, weights, xp = _row_weights(targets, self_shape[-1], weight, ignore_index,
                                       grad._dtype)
    scale = -weights * grads
    if reduction == "mean":
        with np.errstate(invalid="ignore", divide="ignore"):
            scale /= weights.sum()
    rows = xp.zeros((len(picked), self_shape[-1]), dtype=grad._dtype.np)
    rows[xp.arange(len(picked)), picked] = scale
    return from_numpy_result(rows.reshape(self_shape), grad._dtype)


@nll_loss_backward.def_derivative("grad")
def nll_loss_backward(grad, target, weight, reduction, ignore_index):
    # linear in its gradient argument, with nll_loss as the adjoint
    return nll_loss(grad, target, weight, reduction, ignore_index)


def _targets_and_weights(target, weight, ignore_index, level, size, dtype):
    """Physical targets (batch dim first) and each row's class weight (0 where ignored),
    or the targets as they are and None without class weights (the op itself then drops
    ignored targets).  Class weights may be batched: ignored targets read class 0."""
    targets = front_or_expanded(target, level, size)
    if weight is None:
        return targets, None
    valid = targets != ignore_index
    picked = targets.masked_fill(~valid, 0)
    per_sample = front_or_expanded(weight, level, size)
    weights = valid.to(dtype) * per_sample.gather(1, picked.reshape(size, -1)).reshape(
        targets.shape)
    return picked, weights


def _per_sample_mean(values, targets, weights, ignore_index, size):
    """``values`` (one per sample) over each sample's total target weight, "mean"'s
    denominator: the rows per sample when there are no class weights and no target is
    ignored (read from the physical targets when they hold concrete values; nothing to
    divide for one row), else a tensor of totals."""
    rows = targets._numel // size
    if weights is None:
        concrete = targets._array() if type(targets) is not BatchedTensor else None
        if isinstance(concrete, np.ndarray) and not kernels.holds_int64(concrete,
                                                                        ignore_index):
            return values if rows == 1 else values / rows
        return values / (targets != ignore_index).reshape(size, rows).sum(1)
    return values / weights.reshape(size, rows).sum(1)


def _in_front(t, level):
    """Whether ``t`` is batched at ``level`` with its batch dim first."""
    return type(t) is BatchedTensor and t._level == level and t._bdim == 0


@nll_loss.def_batch_rule
def nll_loss(op, level, args, kwargs):
    """Every sample's rows in one unweighted call with reduction "none", then weighted and
    reduced per sample (over the sample's own total weight for "mean")."""
    if len(args) == 3 and kwargs is not None and len(kwargs) == 2 and \
            "reduction" in kwargs and "ignore_index" in kwargs:
        # ``F.nll_loss``'s call: no binding
        self, target, weight = args
        reduction, ignore_index = kwargs["reduction"], kwargs["ignore_index"]
    else:
        bound = op.bind(args, kwargs)
        self, target, weight = bound["self"], bound["target"], bound["weight"]
        reduction, ignore_index = bound["reduction"], bound["ignore_index"]
    check_arguments(self._sizes, self._dtype, target, weight, reduction)
    if weight is None and _in_front(self, level) and _in_front(target, level):
        # the common call (per-sample logits and targets): both already batched in front
        inputs, targets, weights = self._value, target._value, None
        size = inputs._sizes[0]
    else:
        size = batch_size(level)
        inputs = front_or_expanded(self, level, size)
        targets, weights = _targets_and_weights(target, weight, ignore_index, level, size,
                                                inputs.dtype)
    losses = call(op, (inputs.reshape(-1, inputs.shape[-1]), targets.reshape(-1)),
                  {"reduction": "none", "ignore_index": ignore_index})
    if weights is not None:
        losses = losses * weights.reshape(-1)
    if reduction == "none":
        return wrap(losses.reshape(targets.shape), 0, level)
    rows = losses._numel // size
    if rows != 1:
        losses = losses.reshape(size, rows).sum(1)
    if reduction == "mean":
        losses = _per_sample_mean(losses, targets, weights, ignore_index, size)
    return wrap(losses, 0, level)


@nll_loss_backward.def_batch_rule
def nll_loss_backward(op, level, args, kwargs):
    """A reduced loss's per-sample gradient spread over the sample's rows (over its total
    weight for "mean"), weighted, then one unweighted call with reduction "none"."""
    if not kwargs and len(args) == 6:   # ``nll_loss``'s derivative's call: no binding
        grad, self_shape, target, weight, reduction, ignore_index = args
    else:
        bound = op.bind(args, kwargs)
        grad, self_shape, target, weight = (bound["grad"], bound["self_shape"],
                                            bound["target"], bound["weight"])
        reduction, ignore_index = bound["reduction"], bound["ignore_index"]
    size = batch_size(level)
    grads = front_or_expanded(grad, level, size)
    targets, weights = _targets_and_weights(target, weight, ignore_index, level, size,
                                            grads.dtype)
    if reduction != "none":
        if reduction == "mean":
            grads = _per_sample_mean(grads, targets, weights, ignore_index, size)
        grads = grads.reshape((size,) + (1,) * (targets.dim() - 1)).expand(targets.shape)
    if weights is not None:
        grads = grads * weights
    sample_shape = tuple(self_shape)
    result = call(op, (grads.reshape(-1), (targets._numel, sample_shape[-1]),
                       targets.reshape(-1)),
                  {"reduction": "none", "ignore_index": ignore_index})
    return wrap(result.reshape((size,) + sample_shape), 0, level)


# --------------------------------------------------------------------------- binary cross-entropy

def _bce_samples(make):
    return [Sample(make(3, 4, low=0.05, high=0.95), make(3, 4, low=0.0, high=1.0)),
            Sample(make(5, low=0.05, high=0.95), make(5, low=0.0, high=1.0)),
            Sample(make(low=0.05, high=0.95), make(low=0.0, high=1.0))]


def _bce_loop(p, t, out, dtype, casting):
    with np.errstate(divide="ignore"):
        log_p = np.maximum(np.log(p, dtype=dtype), -100)
        log_q = np.maximum(np.log1p(np.negative(p, dtype=dtype)), -100)
    return np.subtract((t - 1) * log_q, t * log_p, out=out, dtype=dtype, casting=casting)


@op("_binary_cross_entropy", inputs=("self", "target"), family="pointwise", method=False,
    function=False, samples=_bce_samples)
def _binary_cross_entropy(self, target):
    """The elementwise loss ``-(t log p + (1 - t) log(1 - p))`` of probabilities ``self``,
    each log clamped at -100 as PyTorch does, so that ``p`` of 0 or 1 costs 100, not
    infinity (``nn.functional.binary_cross_entropy`` weights and reduces it)."""
    arr = self._array()
    if not ((arr >= 0) & (arr <= 1)).all():
        raise RuntimeError("all elements of input should be between 0 and 1")
    return pointwise(_bce_loop, self, target)


# PyTorch's formulas: p (1 - p) is kept above 1e-12, so the input's gradient stays finite
# where the loss is clamped; the target's is -logit(p), infinite at 0 and 1
@_binary_cross_entropy.def_derivative("self")
def _binary_cross_entropy(grad, self, target):
    return grad * (self - target) / ((1 - self) * self).clamp(min=1e-12)


@_binary_cross_entropy.def_derivative("target")
def _binary_cross_entropy(grad, self):
    with np.errstate(divide="ignore", invalid="ignore"):
        return grad * ((-self).log1p() - self.log())


__all__ = ["check_arguments", "nll_loss", "nll_loss_backward"]
__all__ += ["soft_margin_loss", "multilabel_soft_margin_loss", "hinge_embedding_loss",
            "multi_margin_loss", "multilabel_margin_loss", "triplet_margin_with_distance_loss"]


# --------------------------------------------------------------------------- margin losses
# Composites: each is a few pointwise ops, a gather and a reduction, so its gradient (to
# any order) and its batching come from those ops.

def _check_reduction(reduction):
    if reduction not in REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction")


def _reduced(loss, reduction):
    """``loss`` reduced as ``reduction`` (checked already) says."""
    if reduction == "mean":
        return loss.mean()
    return loss.sum() if reduction == "sum" else loss


def _check_broadcasts_to(self, target):
    """PyTorch's elementwise losses write into the input's shape: the target broadcasts to
    it, never past it."""
    shape = meta.broadcast_shapes(self._sizes, target._sizes)
    if tuple(shape) != tuple(self._sizes):
        raise RuntimeError(f"output with shape {list(self._sizes)} doesn't match the "
                           f"broadcast shape {list(shape)}")


def _signs(make, *shape):
    """A tensor of -1 and 1 (a random float is never 0)."""
    return make(*shape).sign()


def _soft_margin_samples(make):
    return [Sample(make(3, 4), _signs(make, 3, 4)),
            Sample(make(3, 4), _signs(make, 4), reduction="sum"),
            Sample(make(5), _signs(make, 5), reduction="none"),
            Sample(make(()), _signs(make, ()))]


@op(kind="composite", inputs=("self", "target"), method=False, function=False,
    samples=_soft_margin_samples)
def soft_margin_loss(self, target, reduction="mean"):
    """``log(1 + exp(-target * self))`` (a softplus: finite where the exponential
    overflows)."""
    _check_reduction(reduction)
    _check_broadcasts_to(self, target)
    return _reduced(softplus(-target * self), reduction)


def _multilabel_soft_samples(make):
    return [Sample(make(3, 4), make(3, 4, low=0, high=1)),
            Sample(make(3, 4), make(3, 4, low=0, high=1), make(4, low=0.5, high=2),
                   reduction="none"),
            Sample(make(2, 3, 4), make(2, 3, 4, low=0, high=1), reduction="sum"),
            Sample(make(5), make(5, low=0, high=1))]


@op(kind="composite", inputs=("self", "target", "weight"), method=False, function=False,
    samples=_multilabel_soft_samples)
def multilabel_soft_margin_loss(self, target, weight=None, reduction="mean"):
    """The binary cross-entropy of ``sigmoid(self)`` against ``target`` for each class
    (the last dim), weighted, averaged over the classes."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"{reduction} is not valid")     # PyTorch's message for this loss
    if self.dim() == 0:
        raise IndexError("Dimension specified as -1 but tensor has no dimensions")
    loss = -(target * log_sigmoid(self) + (1 - target) * log_sigmoid(-self))
    if weight is not None:
        loss = loss * weight
    return _reduced(loss.sum(-1) / self.shape[-1], reduction)


def _hinge_samples(make):
    return [Sample(make(3, 4), _signs(make, 3, 4)),
            Sample(make(3, 4, low=-2, high=2), _signs(make, 3, 1), margin=0.5,
                   reduction="none"),
            Sample(make(5), tensor([1, -1, -1, 1, 1]), 2.0, reduction="sum"),
            Sample(make(()), tensor(-1.0))]


@op(kind="composite", method=False, function=False, samples=_hinge_samples)
def hinge_embedding_loss(self, target, margin=1.0, reduction="mean"):
    """``self`` where the target is 1, ``max(0, margin - self)`` where it is -1 (both
    summed elsewhere, as PyTorch does), in ``self``'s dtype (an integer input takes the
    margin cast to its type, as PyTorch's)."""
    _check_reduction(reduction)
    zero = self.new_zeros(())
    below_margin = where(target != 1, (self.new_full((), margin) - self).clamp(min=0), zero)
    return _reduced(below_margin + where(target != -1, self, zero), reduction)


def _check_rows(self):
    """PyTorch's shape check of the multi-class margin losses' input: (C,) or (N, C), C
    not 0, or 0-d."""
    if not ((self.dim() in (1, 2) and self.shape[-1] != 0) or self.dim() == 0):
        raise RuntimeError(f"Expected non-empty vector or matrix with optional 0-dim batch "
                           f"size, but got: {list(self.shape)}")


def _check_kernel_dtype(kernel, self):
    """PyTorch's kernels of the multi-class margin losses exist for float32 and float64."""
    if self._dtype.name not in ("float32", "float64"):
        raise NotImplementedError(f"\"{kernel}\" not implemented for "
                                  f"'{_type_name(self._dtype)}'")


def _as_rows(self):
    """``self`` as (N, C) rows (a 0-d input is one row of one class)."""
    return self.reshape(-1, self.shape[-1] if self.dim() else 1)


def _check_long(what):
    if what._dtype is not int64:
        raise RuntimeError(f"expected scalar type Long but found {_type_name(what._dtype)}")


def _per_row(losses, shape, reduction):
    """Per-row losses reduced, or, unreduced, in ``shape``."""
    if reduction == "none":
        return losses.reshape(shape)
    return _reduced(losses, reduction)


def _class_index(rows):
    return arange(rows.shape[-1], device=rows.device)


def _multi_margin_samples(make):
    return [Sample(make(3, 4), tensor([1, 0, 3])),
            Sample(make(3, 4), tensor([2, 2, 0]), p=2, margin=0.5, reduction="none"),
            Sample(make(3, 4), tensor([3, 1, 0]), 1, 1.5, make(4, low=0.5, high=2),
                   reduction="sum"),
            Sample(make(4), tensor(2)), Sample(make(5), tensor([4]), reduction="none")]


@op(kind="composite", inputs=("self", "weight"), method=False, function=False,
    samples=_multi_margin_samples)
def multi_margin_loss(self, target, p=1, margin=1.0, weight=None, reduction="mean"):
    """``sum over i != y of max(0, margin - x[y] + x[i])^p``, times ``weight[y]``, over
    the number of classes, for each row ``x`` of ``self`` and its target class ``y``."""
    _check_reduction(reduction)
    if p not in (1, 2):
        raise ValueError("only p == 1 and p == 2 supported")
    if weight is not None and weight.dim() != 1:
        raise ValueError("weight must be one-dimensional")
    _check_rows(self)
    count = self.shape[0] if self.dim() == 2 else 1
    if target.dim() > 1 or target.numel() != count:
        raise RuntimeError(f"multi_margin_loss: target tensor should be 1-D with size equal "
                           f"to the number of input samples (batch size). Expected target "
                           f"size [{count}], but got {list(target.shape)}. Input has shape "
                           f"{list(self.shape)}.")
    classes = self.shape[-1] if self.dim() else 1
    if weight is not None and weight.numel() != classes:
        raise RuntimeError(f"inconsistent weight size, expected {classes} but got "
                           f"{list(weight.shape)}")
    _check_long(target)
    if weight is not None and weight._dtype is not self._dtype:
        raise RuntimeError(f"expected scalar type {_type_name(self._dtype)} but found "
                           f"{_type_name(weight._dtype)}")
    _check_kernel_dtype("multi_margin_loss_cpu_kernel", self)
    rows = _as_rows(self)
    target_shape, target = target.shape, target.reshape(-1, 1)
    if _any((target < 0) | (target >= classes)):
        raise RuntimeError("target out of range")
    # the margin violations: relu's gradient is 0 at 0, where PyTorch's kernel adds none
    violations = (margin - rows.gather(1, target) + rows).relu()
    if p == 2:
        violations = violations * violations
    violations = violations.masked_fill(target == _class_index(rows), 0.0)
    if weight is not None:
        violations = violations * weight.gather(0, target.reshape(-1)).unsqueeze(1)
    # unreduced, the losses take the target's shape (a 1-d input's may be (1,) or ())
    return _per_row(violations.sum(1) / classes, target_shape, reduction)


def _multilabel_margin_samples(make):
    return [Sample(make(3, 4), tensor([[3, 0, -1, 1], [0, 1, 2, 3], [1, -1, 2, 2]])),
            Sample(make(2, 5), tensor([[4, 4, 1, -1, 0], [2, -1, -1, -1, -1]]),
                   reduction="none"),
            Sample(make(4), tensor([2, 0, -1, 3]), reduction="sum"),
            Sample(make(3), tensor([1, -1, 0]), reduction="none")]


@op(kind="composite", method=False, function=False, samples=_multilabel_margin_samples)
def multilabel_margin_loss(self, target, reduction="mean"):
    """For each row ``x`` with target classes ``y`` (the row of ``target`` up to its first
    -1; a class listed twice counts twice): ``sum over j in y, i not in y of
    max(0, 1 - (x[j] - x[i]))`` over the number of classes."""
    _check_reduction(reduction)
    _check_rows(self)
    if tuple(target.shape) != tuple(self.shape):
        raise RuntimeError(f"inconsistent target size: {list(target.shape)} for input of "
                           f"size: {list(self.shape)}")
    _check_long(target)
    _check_kernel_dtype("multilabel_margin_loss_forward_out_frame", self)
    rows = _as_rows(self)
    classes = rows.shape[-1]
    targets = target.reshape(rows.shape)
    if _any((targets < -1) | (targets >= classes)):
        raise RuntimeError("argument #2 'target' is out of range")
    listed = (targets < 0).cumsum(1) == 0              # the entries before the first -1
    picked = targets.clamp(min=0)
    # (N, listed entry, class): whether the entry names the class
    names = (picked.unsqueeze(2) == _class_index(rows)) & listed.unsqueeze(2)
    is_target = names.any(1)
    violations = (1 - rows.gather(1, picked).unsqueeze(2) + rows.unsqueeze(1)).relu()
    counted = listed.unsqueeze(2) & ~is_target.unsqueeze(1)
    losses = violations.masked_fill(~counted, 0.0).sum((1, 2)) / classes
    return _per_row(losses, losses.shape if self.dim() == 2 else (), reduction)


def _triplet_samples(make):
    return [Sample(make(3, 4), make(3, 4), make(3, 4)),
            Sample(make(3, 4), make(3, 4), make(3, 4), swap=True, margin=0.5,
                   reduction="none"),
            Sample(make(5), make(5), make(5), reduction="sum")]


@op(kind="composite", inputs=("anchor", "positive", "negative"), method=False,
    function=False, samples=_triplet_samples)
def triplet_margin_with_distance_loss(anchor, positive, negative, *, distance_function=None,
                                      margin=1.0, swap=False, reduction="mean"):
    """``max(0, margin + d(anchor, positive) - d(anchor, negative))`` for any distance
    ``d`` (default: ``pairwise_distance``); with ``swap``, the negative's distance is the
    smaller of its distances to anchor and positive."""
    _check_reduction(reduction)
    if margin <= 0:
        raise ValueError(f"margin must be greater than 0, got {margin}")
    dims = (anchor.dim(), positive.dim(), negative.dim())
    if len(set(dims)) != 1:
        raise RuntimeError(f"The anchor, positive, and negative tensors are expected to have "
                           f"the same number of dimensions, but got: anchor {dims[0]}D, "
                           f"positive {dims[1]}D, and negative {dims[2]}D inputs")
    distance = pairwise_distance if distance_function is None else distance_function
    to_positive, to_negative = distance(anchor, positive), distance(anchor, negative)
    if swap:
        to_negative = minimum(to_negative, distance(positive, negative))
    return _reduced((margin + to_positive - to_negative).clamp(min=0), reduction)
