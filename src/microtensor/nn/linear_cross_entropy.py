"""A linear layer's logits and their cross entropy as one call: ``F.linear_cross_entropy``,
``nn.LinearCrossEntropyLoss`` and ``nn.LinearCrossEntropyOptions``, the options of its
chunked form.

The chunked form runs the batch in pieces of rows so that the whole ``(batch, classes)``
logits never exist at once (a language model's vocabulary head: tens of thousands of
classes).  Each piece's logits are a checkpoint: the backward pass recomputes them from
the piece's inputs instead of keeping them.  Its values are those of the reference form
(``cross_entropy(linear(input, weight, bias), target)``), summed piece by piece.
"""
import dataclasses
import math
import warnings

from microtensor._C.tensor import bfloat16, float16, float32, float64, int64
from microtensor.nn import functional as F
from microtensor.nn.modules import Linear, _WeightedLoss
from microtensor.ops.shape import cat
from microtensor.utils.checkpoint import checkpoint

# the piece size the ``"auto"`` chunking method resolves to, by (device type, dtype); other
# pairs take the fallback (PyTorch's table, so that memory follows the same plan)
_AUTO_CHUNKING = {("cpu", bfloat16): "aspect_ratio", ("cpu", float16): "aspect_ratio"}
_AUTO_CHUNKING_FALLBACK = "aspect_ratio:2"
_ACC_POLICIES = ("accurate", "balanced", "compact", "auto")
_ACC_DTYPES = (float16, bfloat16, float32, float64)


@dataclasses.dataclass(frozen=True)
class LinearCrossEntropyOptions:
    """How ``linear_cross_entropy`` runs in pieces (PyTorch's fields and checks).

    ``batch_chunk_size``: rows per piece (None: one piece, or what ``chunking_method``
    picks); ``chunking_method``: ``"auto"``, ``"aspect_ratio"`` or ``"aspect_ratio:N"``
    (pieces whose logits take about the input's memory, N times less), or None.
    ``acc_policy`` and ``acc_dtype`` are checked and kept: microtensor's float16 and
    bfloat16 products and reductions already accumulate in float32.
    ``allow_retain_graph`` is accepted: a second backward through the pieces always works
    here with ``retain_graph=True`` (PyTorch refuses it unless this is True)."""
    allow_retain_graph: bool = False
    batch_chunk_size: int = None
    chunking_method: str = "auto"
    acc_policy: str = "auto"
    acc_dtype: object = None

    def __post_init__(self):
        if self.acc_policy not in _ACC_POLICIES:
            raise ValueError(f"invalid acc_policy: {self.acc_policy!r}")
        if self.chunking_method is not None and self.chunking_method != "auto" and \
                _aspect_ratio_factor(self.chunking_method) is None:
            raise ValueError(f"invalid chunking_method: {self.chunking_method!r}")
        size = self.batch_chunk_size
        if size is not None and (type(size) is not int or size <= 0):
            raise ValueError(f"batch_chunk_size must be positive int or None, got {size!r}")
        if self.acc_dtype is not None and self.acc_dtype not in _ACC_DTYPES:
            raise ValueError(f"acc_dtype must be one of {{None, microtensor.float16, "
                             f"microtensor.bfloat16, microtensor.float32, microtensor.float64}}"
                             f", got {self.acc_dtype!r}. Pass acc_dtype=None to let the op "
                             "pick automatically.")

    def _rows_per_piece(self, rows, in_features, num_classes, dtype, device):
        """The piece size for a call: the explicit size, or the chunking method's."""
        method = self.chunking_method
        if method == "auto":
            method = None if self.batch_chunk_size is not None else \
                _AUTO_CHUNKING.get((device.type, dtype), _AUTO_CHUNKING_FALLBACK)
        if method is None:
            size = rows if self.batch_chunk_size is None else min(self.batch_chunk_size, rows)
            return max(1, size)
        factor = _aspect_ratio_factor(method)
        target = -(-rows // -(-num_classes // in_features))
        size = min((1 << (target - 1).bit_length()) // factor, rows)
        if self.batch_chunk_size is not None and self.batch_chunk_size != size:
            raise ValueError(f"batch_chunk_size (={self.batch_chunk_size}) and chunking_method "
                             f"('{method}') give different chunk sizes "
                             f"({self.batch_chunk_size} vs {size}); pass only one.")
        return max(1, size)


def _aspect_ratio_factor(method):
    """N of ``"aspect_ratio:N"`` (1 for ``"aspect_ratio"``), None for another name."""
    name, colon, factor = str(method).partition(":")
    if not colon:
        factor = "1"
    if name != "aspect_ratio" or not factor.isdigit() or int(factor) <= 0:
        return None
    return int(factor)


def linear_cross_entropy(input, linear_weight, target, *, linear_bias=None, weight=None,
                         reduction="mean", ignore_index=None, label_smoothing=0.0,
                         options=None):
    """``cross_entropy(linear(input, linear_weight, linear_bias), target, ...)``: input
    ``(N, in)`` or ``(in,)``, ``linear_weight`` ``(C, d1, ..., dK, in)`` (K-dimensional
    loss over logits ``(N, C, d1, ..., dK)``).  ``ignore_index=None`` means -100 for class
    indices.  With ``options``, the batch runs in pieces (see the module docstring) when
    the call allows it (class-index int64 targets, no label smoothing, K = 0); otherwise a
    warning says why and the reference form runs."""
    if input.dim() < 1 or input.dim() > 2:
        raise RuntimeError(f"expected input with dimensionality 1 or 2, got {input.dim()}")
    if linear_weight.dim() < 2:
        raise RuntimeError(f"expected linear_weight with dimensionality at least 2, got "
                           f"{linear_weight.dim()}")
    batch, in_features = tuple(input.shape[:-1]), input.shape[-1]
    if in_features != linear_weight.shape[-1]:
        raise RuntimeError(f"expected equal input and linear_weight last dimensions "
                           f"(in_features), got {input.shape[-1]} and "
                           f"{linear_weight.shape[-1]}, respectively")
    num_classes, out_features = linear_weight.shape[0], tuple(linear_weight.shape[1:-1])
    if linear_bias is not None and tuple(linear_bias.shape) != (num_classes, *out_features):
        raise RuntimeError(f"expected linear_bias shape {(num_classes, *out_features)}, got "
                           f"{tuple(linear_bias.shape)}")
    if out_features and not batch:
        raise RuntimeError(f"K-dimensional loss defined by linear_weight shape "
                           f"{tuple(linear_weight.shape)} requires batched input, "
                           f"(N, {in_features}), got unbatched input with shape "
                           f"{tuple(input.shape)}")
    logits_shape = (*batch, num_classes, *out_features)
    if tuple(target.shape) == logits_shape and ignore_index is not None:
        raise RuntimeError("ignore_index cannot be specified when target contains "
                           "probabilities")
    ignore_index = -100 if ignore_index is None else ignore_index
    if options is not None:
        if out_features or reduction not in ("mean", "sum", "none") or \
                label_smoothing != 0.0 or target.dtype is not int64:
            warnings.warn(f"linear_cross_entropy: ``options`` ignored; chunked path needs "
                          f"reduction in {{'mean','sum','none'}}, label_smoothing == 0, "
                          f"target.dtype == int64, out_features == (). Got "
                          f"reduction={reduction!r}, label_smoothing={label_smoothing}, "
                          f"target.dtype={target.dtype}, out_features={out_features}, "
                          f"linear_bias.shape="
                          f"{None if linear_bias is None else tuple(linear_bias.shape)}.",
                          stacklevel=2)
        elif input.numel():
            return _in_pieces(input, linear_weight, target, linear_bias, weight, reduction,
                              ignore_index, options)
    if out_features:
        classes = math.prod(out_features, start=num_classes)
        linear_weight = linear_weight.reshape(classes, in_features)
        if linear_bias is not None:
            linear_bias = linear_bias.reshape(classes)
    logits = F.linear(input, linear_weight, linear_bias).reshape(logits_shape)
    return F.cross_entropy(logits, target, weight=weight, reduction=reduction,
                           ignore_index=ignore_index, label_smoothing=label_smoothing)


def _piece_losses(input, linear_weight, target, linear_bias, weight, ignore_index):
    return F.cross_entropy(F.linear(input, linear_weight, linear_bias), target, weight=weight,
                           reduction="none", ignore_index=ignore_index)


def _in_pieces(input, linear_weight, target, linear_bias, weight, reduction, ignore_index,
               options):
    """The chunked form: each piece's per-row losses through a checkpoint, then the
    reduction over all rows (a mean divides by the targets' summed class weights, the
    ignored rows left out, as ``cross_entropy``'s)."""
    batched = input.dim() == 2
    if not batched:
        input, target = input.unsqueeze(0), target.unsqueeze(0)
    rows = input.shape[0]
    size = options._rows_per_piece(rows, input.shape[1], linear_weight.shape[0], input.dtype,
                                   input.device)
    losses = cat([checkpoint(_piece_losses, input[start:start + size], linear_weight,
                             target[start:start + size], linear_bias, weight, ignore_index,
                             use_reentrant=False)
                  for start in range(0, rows, size)])
    if reduction == "none":
        return losses if batched else losses.squeeze(0)
    if reduction == "sum":
        return losses.sum()
    counted = target != ignore_index
    if weight is None:
        return losses.sum() / counted.sum()
    return losses.sum() / (weight[target.masked_fill(~counted, 0)] * counted).sum()


class LinearCrossEntropyLoss(_WeightedLoss):
    """``linear_cross_entropy`` with its own linear layer: ``self.linear`` maps
    ``in_features`` to ``num_classes * prod(out_features)`` logits (a flat 2-D weight,
    reshaped to ``(C, d1, ..., dK, in)`` in ``forward``)."""

    def __init__(self, in_features, num_classes, *, out_features=(), bias=False, device=None,
                 dtype=None, reduction="mean", weight=None, ignore_index=None,
                 label_smoothing=0.0, options=None):
        if weight is not None and tuple(weight.shape) != (num_classes,):
            raise RuntimeError(f"expected weight shape to be {(num_classes,)}, got "
                               f"{tuple(weight.shape)}")
        if label_smoothing < 0 or label_smoothing > 1.0:
            raise RuntimeError(f"expected label_smoothing to be in range [0, 1], got "
                               f"{label_smoothing}")
        super().__init__(weight=weight, reduction=reduction)
        self.num_classes = num_classes
        self.out_features = out_features
        self.ignore_index = ignore_index
        self.label_smoothing = label_smoothing
        self.linear = Linear(in_features, math.prod(out_features, start=num_classes),
                             bias=bias, device=device, dtype=dtype)
        self.options = options

    def forward(self, input, target):
        linear_weight = self.linear.weight.reshape(
            (self.num_classes, *self.out_features, self.linear.in_features))
        linear_bias = None if self.linear.bias is None else \
            self.linear.bias.reshape((self.num_classes, *self.out_features))
        return linear_cross_entropy(input, linear_weight, target, linear_bias=linear_bias,
                                    weight=self.weight, reduction=self.reduction,
                                    ignore_index=self.ignore_index,
                                    label_smoothing=self.label_smoothing, options=self.options)

    def extra_repr(self):
        return (f"in_features={self.linear.in_features}, num_classes={self.num_classes}, "
                f"out_features={self.out_features}, bias={self.linear.bias is not None}, "
                f"reduction={self.reduction}, ignore_index={self.ignore_index}, "
                f"label_smoothing={self.label_smoothing}, options={self.options}")


__all__ = ["LinearCrossEntropyLoss", "LinearCrossEntropyOptions"]
