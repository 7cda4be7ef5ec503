"""Losses that PyTorch computes as single ops: ``nll_loss`` and its backward, and the
elementwise binary cross-entropy.

``nn.functional.nll_loss`` (and so ``cross_entropy``) could be written with ``gather``,
masks and sums, but as one op it records one graph node (``NllLossBackward0``, as in
PyTorch) instead of a dozen, which is most of a small model's step.  The loss is linear
in its input, so its derivative, ``nll_loss_backward``, does not read the input, and the
derivative of that with respect to the incoming gradient is ``nll_loss`` again: both are
differentiable to any order.  Each one's batching rule follows its derivative.

The CTC loss (``_ctc_nll``, ``ctc_loss``) is the last block: see its header.
"""
from operator import methodcaller

import numpy as np

from microtensor._C import kernels, meta, nnkernels
from microtensor._C.tensor import int64, compute_numpy, is_grad_enabled
from microtensor._composite import _any
from microtensor.ops.activation import log_sigmoid, softplus
from microtensor.ops.arguments import int_arg
from microtensor.ops.contraction import pairwise_distance
from microtensor.ops.copy import linked
from microtensor.ops.factory import arange, tensor
from microtensor.ops.pointwise import minimum, where
from microtensor.ops.loops import (_type_name, array_module, from_numpy_result, owned,
                                   pointwise, refuse_unless_floating)
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
    refuse_unless_floating(self._dtype, "nll_loss_out_frame")
    ignore_index = int_arg(ignore_index, "ignore_index")
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
def nll_loss(grad, self, self_shape, target, weight, reduction, ignore_index):
    grad_input = call(nll_loss_backward,
                      (grad, self_shape, target, weight, reduction, ignore_index), None)
    # linked only while recording: a training step's plain backward makes no extra call
    return linked(grad_input, self) if is_grad_enabled() else grad_input


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
        return owned(losses.reshape(shape))
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


# --------------------------------------------------------------------------- CTC loss
#
# ``_ctc_nll`` is each sample's negative log-likelihood of its target under the
# alignments of Connectionist Temporal Classification, by the alpha recursion in log space
# over the extended labels (blank, l1, blank, l2, ..., blank), vectorised over the batch
# and the labels (a Python loop over time only).  Its derivative is PyTorch's: with the
# beta recursion, ``exp(lp) - sum_{s: l'(s)=c} alpha_t(s) beta_t(s) / (p exp(lp))`` for
# t below the input length, 0 after it; the ``exp(lp)`` term is PyTorch's convention
# (log_probs are taken to come from log_softmax, whose derivative then gives the true
# gradient of the logits).  The recursions are written once for NumPy arrays (the kernel,
# and the backward pass that records nothing) and for tensors (the derivative built with
# microtensor ops, differentiable again and vmappable).  ``ctc_loss`` (a composite)
# reads the lengths, zeroes infinite losses and reduces as PyTorch does.

from microtensor._C.dispatch import batching  # noqa: E402
from microtensor.ops.shape import cat, stack  # noqa: E402

_CTC = "(while checking arguments for ctc_loss_allocate_outputs)"


def _check_ctc(log_probs_shape, dtype, targets_shape, input_lengths, target_lengths, blank):
    """PyTorch's checks of the CTC loss's arguments; the lengths as NumPy arrays."""
    if dtype.name not in ("float32", "float64"):
        raise NotImplementedError(f"\"ctc_loss_cpu\" not implemented for '{_type_name(dtype)}'")
    if len(log_probs_shape) != 3:
        raise RuntimeError(f"Expected 3-dimensional tensor, but got {len(log_probs_shape)}-"
                           f"dimensional tensor for argument #1 'log_probs' {_CTC}")
    steps, batch, classes = log_probs_shape
    if not 0 <= blank < classes:
        raise RuntimeError("blank must be in label range")
    if len(input_lengths) != batch:
        raise RuntimeError("input_lengths must be of size batch_size")
    if len(target_lengths) != batch:
        raise RuntimeError("target_lengths must be of size batch_size")
    if len(targets_shape) == 1:
        total = int(target_lengths.sum())
        if targets_shape[0] != total:
            raise RuntimeError(f"Expected tensor to have size {total} at dimension 0, but got "
                               f"size {targets_shape[0]} for argument #2 'targets' {_CTC}")
    else:
        if targets_shape[0] != batch:
            raise RuntimeError(f"Expected tensor to have size {batch} at dimension 0, but got "
                               f"size {targets_shape[0]} for argument #2 'targets' {_CTC}")
        longest = int(target_lengths.max(initial=0))
        if targets_shape[1] < longest:
            raise RuntimeError(f"Expected tensor to have size at least {longest} at dimension "
                               f"1, but got size {targets_shape[1]} for argument #2 'targets' "
                               f"{_CTC}")
    for name, lengths, limit in (("input_lengths", input_lengths, steps),
                                 ("target_lengths", target_lengths, None)):
        if len(lengths) and lengths.min() < 0:
            raise RuntimeError(f"Expected {name} to have value at least 0, but got value "
                               f"{int(lengths.min())} {_CTC}")
        if limit is not None and len(lengths) and lengths.max() > limit:
            raise RuntimeError(f"Expected {name} to have value at most {limit}, but got "
                               f"value {int(lengths.max())} {_CTC}")


def _host(t):
    """A tensor's values as a NumPy array (copied from a GPU: the recursions and the
    length checks run on the host)."""
    arr = t._array()
    return arr if isinstance(arr, np.ndarray) else array_module(arr).asnumpy(arr)


def _on_device_of(like, arr, dtype=None):
    """A host result as a tensor on ``like``'s device."""
    return from_numpy_result(array_module(like._array()).asarray(arr), dtype)


def _extended_labels(targets, target_lengths, blank, classes):
    """The extended labels (N, 2 S + 1) of padded (N, S') or concatenated targets (S the
    longest target; blank beyond each target), and where the skip from s - 2 to s is
    allowed (a label unlike the one before it)."""
    longest = int(target_lengths.max(initial=0))
    inside = np.arange(longest) < target_lengths[:, None]
    if targets.ndim == 1:
        starts = np.cumsum(target_lengths) - target_lengths
        labels = targets[np.where(inside, starts[:, None] + np.arange(longest), 0)] \
            if targets.size else np.zeros(inside.shape, np.int64)
    else:
        labels = targets[:, :longest]
    labels = np.where(inside, labels, blank).astype(np.int64)
    bad = inside & ((labels < 0) | (labels >= classes))
    if bad.any():
        raise IndexError(f"Target {int(labels[bad][0])} is out of bounds.")
    extended = np.full((len(target_lengths), 2 * longest + 1), blank, np.int64)
    extended[:, 1::2] = labels
    skip = np.zeros(extended.shape, bool)
    skip[:, 3::2] = labels[:, 1:] != labels[:, :-1]
    return extended, skip


class _ArrayMath:
    """The recursions' arithmetic on NumPy arrays: impossible states are exactly -inf."""
    impossible = -np.inf
    where = staticmethod(np.where)
    stack = staticmethod(np.stack)
    exp = staticmethod(np.exp)

    @staticmethod
    def logsumexp(*terms):
        top = terms[0]
        for term in terms[1:]:
            top = np.maximum(top, term)
        finite_top = np.where(np.isneginf(top), 0, top)
        with np.errstate(divide="ignore"):
            return finite_top + np.log(sum(np.exp(term - finite_top) for term in terms))

    @staticmethod
    def shift(states, k, like_value):
        """States moved ``k`` places (right for k > 0), impossible where they enter."""
        pad = np.full(states.shape[:-1] + (abs(k),), like_value, states.dtype)
        width = states.shape[-1]
        if k > 0:
            return np.concatenate([pad, states], -1)[..., :width]
        return np.concatenate([states, pad], -1)[..., -k:]

    @staticmethod
    def logsumexp_last(x):
        top = x.max(-1, keepdims=True, initial=-np.inf)
        finite_top = np.where(np.isneginf(top), 0, top)
        with np.errstate(divide="ignore"):
            return (finite_top + np.log(np.exp(x - finite_top).sum(-1, keepdims=True)))[..., 0]

    @staticmethod
    def positions(like, n):
        return np.arange(n)

    @staticmethod
    def gather_states(log_probs, extended):
        """The log-probabilities (T, N, W) of the extended labels (N, W)."""
        return np.take_along_axis(log_probs, extended[None], 2)

    @staticmethod
    def to_classes(per_state, extended, classes):
        """(T, N, W) values per extended label summed into their classes: (T, N, C)."""
        one_hot = (extended[..., None] == np.arange(classes)).astype(per_state.dtype)
        return np.einsum("tnw,nwc->tnc", per_state, one_hot)


class _TensorMath:
    """The recursions' arithmetic in microtensor ops.  Impossible states hold a very
    negative finite value rather than -inf, so that logsumexp's derivative over them stays
    finite (0, not NaN) at every order."""
    impossible = -1e30

    @staticmethod
    def where(condition, a, b):
        return where(condition, a, b)

    @staticmethod
    def stack(tensors, dim):
        return stack(tensors, dim)

    @staticmethod
    def exp(x):
        return x.exp()

    @staticmethod
    def logsumexp(*terms):
        return stack(terms, -1).logsumexp(-1)

    @staticmethod
    def shift(states, k, like_value):
        width = states.shape[-1]
        pad = states.new_full(tuple(states.shape[:-1]) + (abs(k),), like_value)
        if k > 0:
            return cat([pad, states], -1).narrow(-1, 0, width)
        return cat([states, pad], -1).narrow(-1, -k, width)

    @staticmethod
    def logsumexp_last(x):
        return x.logsumexp(-1)

    @staticmethod
    def positions(like, n):
        return arange(n, device=like.device)

    @staticmethod
    def gather_states(log_probs, extended):
        steps, batch, _ = log_probs.shape
        return log_probs.gather(2, extended.unsqueeze(0).expand(
            (steps, batch) + tuple(extended.shape[1:])))

    @staticmethod
    def to_classes(per_state, extended, classes):
        one_hot = (extended.unsqueeze(-1) == arange(classes, device=extended.device)).to(
            per_state.dtype)
        return (per_state.permute(1, 0, 2) @ one_hot).permute(1, 0, 2)


def _ctc_alphas(log_probs, extended, skip, input_lengths, target_lengths, math):
    """Each state's log-probability per time step (T, N, W), the log-probabilities of the
    extended labels (T, N, W) and each sample's negative log-likelihood (N,)."""
    steps, batch, _ = log_probs.shape
    width = extended.shape[-1]
    labelled = math.gather_states(log_probs, extended)
    impossible = math.impossible
    positions = math.positions(extended, width).reshape(1, width)
    # before the first step, every path is at state 0 with probability 1 (the condition
    # made (N, W) by a comparison with the batch's zeros)
    alpha = math.where(positions == target_lengths.reshape(batch, 1) * 0, 0.0, impossible)
    alphas = []
    for t in range(steps):
        step = labelled[t] + math.logsumexp(
            alpha, math.shift(alpha, 1, impossible),
            math.where(skip, math.shift(alpha, 2, impossible), impossible))
        alpha = math.where(input_lengths.reshape(batch, 1) > t, step, alpha)
        alphas.append(step)
    ends = _ctc_ends(positions, target_lengths, batch)
    nll = -math.logsumexp_last(math.where(ends, alpha, impossible))
    return math.stack(alphas, 0), labelled, nll


def _ctc_ends(positions, target_lengths, batch):
    """Where a path may end: the last label or the blank after it (N, W)."""
    last = 2 * target_lengths.reshape(batch, 1)
    return (positions == last) | (positions == last - 1)


def _ctc_betas(labelled, skip, input_lengths, target_lengths, math):
    """Each state's log-probability of the rest of the target from time t on (T, N, W),
    its own step included."""
    steps, batch, width = labelled.shape
    impossible = math.impossible
    ends = _ctc_ends(math.positions(labelled, width).reshape(1, width), target_lengths,
                     batch)
    last = input_lengths.reshape(batch, 1) - 1
    beta = math.where(ends, impossible, impossible)
    betas = [None] * steps
    for t in reversed(range(steps)):
        step = labelled[t] + math.logsumexp(
            beta, math.shift(beta, -1, impossible),
            math.shift(math.where(skip, beta, impossible), -2, impossible))
        beta = math.where(last == t, math.where(ends, labelled[t], impossible),
                          math.where(last > t, step, impossible))
        betas[t] = beta
    return math.stack(betas, 0)


def _ctc_gradient(grad, log_probs, extended, skip, input_lengths, target_lengths, infinite,
                  zero_infinity, math):
    """PyTorch's gradient of ``_ctc_nll`` with respect to ``log_probs``: NaN at the steps
    of a sample whose target no alignment reaches (0 with ``zero_infinity``)."""
    steps, batch, classes = log_probs.shape
    alphas, labelled, nll = _ctc_alphas(log_probs, extended, skip, input_lengths,
                                        target_lengths, math)
    betas = _ctc_betas(labelled, skip, input_lengths, target_lengths, math)
    # impossible samples: a finite stand-in, replaced below (no inf - inf on the way)
    nll = math.where(infinite, 0, nll).reshape(1, batch, 1)
    occupancy = math.to_classes(math.exp(alphas + betas - labelled + nll), extended, classes)
    gradient = (math.exp(log_probs) - occupancy) * grad.reshape(1, batch, 1)
    active = math.positions(log_probs, steps).reshape(steps, 1, 1) < \
        input_lengths.reshape(1, batch, 1)
    gradient = math.where(active, gradient, 0)
    return math.where(infinite.reshape(1, batch, 1) & active,
                      0 if zero_infinity else float("nan"), gradient)


def _ctc_nll_samples(make):
    padded = tensor([[1, 2, 2], [3, 1, 0], [2, 2, 1]])
    return [Sample(make(5, 3, 4).log_softmax(2), padded, tensor([5, 4, 3]), tensor([3, 2, 1])),
            Sample(make(4, 2, 3).log_softmax(2), tensor([1, 2, 2, 1]), tensor([4, 3]),
                   tensor([3, 1]), zero_infinity=True),
            Sample(make(3, 2, 4).log_softmax(2), tensor([[1, 1], [3, 2]]), tensor([3, 0]),
                   tensor([2, 0]), blank=2),
            Sample(make(3, 2, 3), tensor([[1, 2], [2, 0]]), tensor([3, 2]), tensor([2, 1]))]


@op(method=False, function=False, inputs=("log_probs",), samples=_ctc_nll_samples)
def _ctc_nll(log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False):
    """Each sample's CTC negative log-likelihood (N,) of log-probabilities (T, N, C); inf
    where no alignment reaches the target."""
    lengths_in = _host(input_lengths).astype(np.int64).reshape(-1)
    lengths_out = _host(target_lengths).astype(np.int64).reshape(-1)
    _check_ctc(log_probs._sizes, log_probs._dtype, targets._sizes, lengths_in, lengths_out,
               blank)
    extended, skip = _extended_labels(_host(targets), lengths_out, blank, log_probs._sizes[2])
    _, _, nll = _ctc_alphas(_host(log_probs), extended, skip, lengths_in, lengths_out,
                            _ArrayMath)
    return _on_device_of(log_probs, nll, log_probs._dtype)


@_ctc_nll.def_derivative("log_probs")
def _ctc_nll(grad, log_probs, targets, input_lengths, target_lengths, blank, zero_infinity,
             result):
    extended, skip = call(_ctc_labels, (targets, target_lengths, blank, log_probs.shape[2]),
                          None)
    return _ctc_gradient(grad, log_probs, extended, skip, input_lengths.reshape(-1),
                         target_lengths.reshape(-1), result.isinf(), zero_infinity,
                         _TensorMath)


@_ctc_nll.def_unrecorded_backward
def _ctc_nll(grad, wanted, log_probs, targets, input_lengths, target_lengths, blank,
             zero_infinity, result):
    # the same formula on NumPy arrays, when no graph of it is wanted
    tensors = (grad, log_probs, targets, input_lengths, target_lengths, result)
    if batching() is not None or any(type(t) is BatchedTensor for t in tensors):
        return None
    arrays = [t._array() for t in tensors]
    if not all(type(a) is np.ndarray for a in arrays):
        return None
    grad, log_probs, targets, input_lengths, target_lengths, result = arrays
    lengths_in, lengths_out = input_lengths.reshape(-1), target_lengths.reshape(-1)
    extended, skip = _extended_labels(targets, lengths_out, blank, log_probs.shape[2])
    with np.errstate(invalid="ignore", over="ignore"):
        gradient = _ctc_gradient(grad, log_probs, extended, skip, lengths_in, lengths_out,
                                 np.isinf(result), zero_infinity, _ArrayMath)
    return [from_numpy_result(gradient.astype(log_probs.dtype, copy=False))]


def _ctc_labels_samples(make):
    return [Sample(tensor([[1, 2, 2], [3, 1, 0]]), tensor([3, 2]), 0, 4),
            Sample(tensor([1, 1, 2]), tensor([2, 0, 1]), 3, 4)]


@op(method=False, function=False, differentiable=False, samples=_ctc_labels_samples)
def _ctc_labels(targets, target_lengths, blank, classes):
    """The extended labels of the targets (N, 2 S + 1) and where a path may skip the
    blank before a label (see ``_extended_labels``)."""
    extended, skip = _extended_labels(
        _host(targets), _host(target_lengths).astype(np.int64).reshape(-1), blank, classes)
    return _on_device_of(targets, extended, int64), _on_device_of(targets, skip)


def _folded_ctc_arguments(level, log_probs, targets, input_lengths, target_lengths):
    """The vmap batch folded into the CTC batch: log_probs (T, B N, C), targets (B N, S)
    or concatenated (B L), lengths (B N); and B."""
    size = batch_size(level)
    targets = front_or_expanded(targets, level, size)
    folded_targets = targets.reshape((-1,) + tuple(targets.shape[2:]))
    lengths = [None if t is None else front_or_expanded(t, level, size).reshape(-1)
               for t in (input_lengths, target_lengths)]
    if log_probs is not None:
        log_probs = front_or_expanded(log_probs, level, size).movedim(0, 1)
        log_probs = log_probs.reshape((log_probs.shape[0], -1, log_probs.shape[-1]))
    return log_probs, folded_targets, lengths[0], lengths[1], size


@_ctc_nll.def_batch_rule
def _ctc_nll(op, level, args, kwargs):
    """Every sample's batch in one call."""
    bound = op.bind(args, kwargs)
    log_probs, targets, input_lengths, target_lengths, size = _folded_ctc_arguments(
        level, bound.pop("log_probs"), bound.pop("targets"), bound.pop("input_lengths"),
        bound.pop("target_lengths"))
    nll = call(op, (log_probs, targets, input_lengths, target_lengths), bound)
    return wrap(nll.reshape(size, -1), 0, level)


@_ctc_labels.def_batch_rule
def _ctc_labels(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    _, targets, _, target_lengths, size = _folded_ctc_arguments(
        level, None, bound.pop("targets"), None, bound.pop("target_lengths"))
    extended, skip = call(op, (targets, target_lengths), bound)
    return (wrap(extended.reshape((size, -1) + tuple(extended.shape[1:])), 0, level),
            wrap(skip.reshape((size, -1) + tuple(skip.shape[1:])), 0, level))


def _lengths_tensor(lengths, name, like):
    """Lengths given as a tensor (integral) or a sequence of ints, as an int64 tensor."""
    if hasattr(lengths, "_sizes"):
        if lengths.dtype.is_floating_point:
            raise RuntimeError(f"{name} must be integral")
        return lengths.to(int64).reshape(-1)
    return tensor(list(lengths), dtype=int64, device=like.device)


def _ctc_loss_samples(make):
    def log_probs(*shape):
        return make(*shape).log_softmax(-1)
    return [Sample(log_probs(5, 2, 4), tensor([[1, 3, 3], [2, 1, 0]]), tensor([5, 4]),
                   tensor([3, 2])),
            Sample(log_probs(4, 3, 3), tensor([1, 2, 2, 1, 1]), (4, 3, 3), (2, 1, 2),
                   reduction=2),
            Sample(log_probs(3, 2, 3), tensor([[1, 1, 1], [2, 0, 0]]), tensor([3, 2]),
                   tensor([3, 1]), 0, 0, True),
            Sample(log_probs(4, 3), tensor([2, 1]), tensor(4), tensor(2), reduction=0),
            Sample(log_probs(4, 2, 3), tensor([[2, 2], [1, 0]]), tensor([4, 1]),
                   tensor([2, 0]), 1, 1)]


@op(kind="composite", method=False, inputs=("log_probs",), samples=_ctc_loss_samples)
def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction=0,
             zero_infinity=False):
    """PyTorch's ``ctc_loss``: ``reduction`` 0 (none), 1 (mean: each loss over its target
    length, then the batch mean) or 2 (sum); infinite losses zeroed with
    ``zero_infinity``; log_probs (T, C) with a 1-d target are one unbatched sample.  The
    default reduction is none, as ``torch.ctc_loss`` applies (its schema names mean)."""
    if log_probs.numel() == 0:
        raise RuntimeError("log_probs tensor must not be empty")
    input_lengths = _lengths_tensor(input_lengths, "input_lengths", log_probs)
    target_lengths = _lengths_tensor(target_lengths, "target_lengths", log_probs)
    batched = log_probs.dim() == 3
    if not batched:
        log_probs, targets = log_probs.unsqueeze(1), targets.unsqueeze(0)
    nll = _ctc_nll(log_probs, targets, input_lengths, target_lengths, blank, zero_infinity)
    if zero_infinity:
        nll = where(nll.isinf(), 0.0, nll)
    if reduction == 1:
        return (nll / target_lengths.clamp(min=1).to(nll.dtype)).mean()
    if reduction == 2:
        return nll.sum()
    return nll if batched else nll.squeeze(0)


__all__ += ["ctc_loss"]
