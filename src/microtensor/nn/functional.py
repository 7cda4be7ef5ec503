"""Functional forms of layers and losses, written with microtensor ops (so they are
differentiable and vmappable without further work)."""
import math
import warnings

from microtensor._C.dispatch import call as _call
from microtensor._C.meta import channels_last, contiguous_format
from microtensor.ops.arguments import int_arg as _int_arg
from microtensor.ops.dispatch import call_by_name as _op
from microtensor.ops import norm as _norm
from microtensor.ops.loops import in_format, memory_format_of, refuse_unless_floating
from microtensor.ops.registry import REGISTRY

_LINEAR = REGISTRY["linear"]   # called on every layer: no lookup by name


def linear(input, weight, bias=None):
    """``input @ weight.T + bias``: one op, ``ops.linalg.linear``."""
    if weight.dim() > 2:
        raise RuntimeError(f"linear: weight must be 1-D or 2-D, got {weight.dim()}-D")
    return _call(_LINEAR, (input, weight, bias), None)


def relu(input, inplace=False):
    return input.relu_() if inplace else input.relu()


def tanh(input):
    return input.tanh()


def sigmoid(input):
    return input.sigmoid()


def softmax(input, dim, dtype=None):
    return input.softmax(dim) if dtype is None else input.to(dtype).softmax(dim)


def log_softmax(input, dim, dtype=None):
    return input.log_softmax(dim) if dtype is None else input.to(dtype).log_softmax(dim)


def _reduce(loss, reduction):
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise ValueError(f"{reduction} is not a valid value for reduction")


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
             reduction="mean"):
    """Negative log-likelihood of class ``target`` under log-probabilities ``input``
    (shape (N, C), (C,) with a 0-d target, or (N, C, d1, ...) with an (N, d1, ...) target):
    one op, ``ops.loss.nll_loss``, on the classes moved last and the rest flattened."""
    if size_average is not None or reduce is not None:
        reduction = _legacy_reduction(size_average, reduce, reduction)
    if len(input._sizes) <= 2:   # the op itself, dispatched without call_by_name's frame
        return _call(REGISTRY["nll_loss"], (input, target, weight),
                    {"reduction": reduction, "ignore_index": ignore_index})
    refuse_unless_floating(input.dtype, "nll_loss2d_forward_out_frame")
    expected = (input.shape[0],) + tuple(input.shape[2:])
    if tuple(target.shape) != expected:
        raise RuntimeError(f"Expected target size {list(expected)}, got "
                           f"{list(target.shape)}")
    rows = input.movedim(1, -1).reshape(-1, input.shape[1])
    loss = _op("nll_loss", rows, target.reshape(-1), weight, reduction=reduction,
               ignore_index=ignore_index)
    return loss.reshape(target.shape) if reduction == "none" else loss


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100,
                  reduce=None, reduction="mean", label_smoothing=0.0):
    """Cross-entropy of logits ``input`` (classes along dim 1, or dim 0 for one sample)
    against class indices, or class probabilities when ``target`` has ``input``'s shape;
    weights, ignored targets and label smoothing as PyTorch computes them."""
    if size_average is not None or reduce is not None:
        reduction = _legacy_reduction(size_average, reduce, reduction)
    class_dim = 0 if len(input._sizes) == 1 else 1
    classes = input._sizes[class_dim]
    if label_smoothing > 0.0 and label_smoothing > 1.0:
        raise RuntimeError(f"label_smoothing must be between 0.0 and 1.0. Got: "
                           f"{label_smoothing}")
    logp = input.log_softmax(class_dim)
    class_weight = None if weight is None else \
        weight.reshape([classes if d == class_dim else 1 for d in range(input.dim())])
    if target._sizes == input._sizes:
        return _cross_entropy_probabilities(logp, target, weight, class_weight, class_dim,
                                            ignore_index, reduction, label_smoothing)
    loss = nll_loss(logp, target, weight, ignore_index=ignore_index, reduction=reduction)
    if label_smoothing <= 0.0:
        return loss
    # the smoothing term: minus the (weighted) log-probabilities of every class, ignored
    # targets left out, normalised like nll_loss for "mean"
    smooth = -(logp if class_weight is None else logp * class_weight).sum(class_dim)
    ignored = target == ignore_index
    smooth = smooth.masked_fill(ignored, 0.0)
    if reduction == "mean":
        if weight is None:
            total_weight = (~ignored).sum().to(smooth.dtype)
        else:
            picked = weight.index_select(0, target.masked_fill(ignored, 0).reshape(-1))
            total_weight = picked.reshape(target.shape).masked_fill(ignored, 0.0).sum()
        smooth = smooth.sum() / total_weight
    else:
        smooth = _reduce(smooth, reduction)
    return (1 - label_smoothing) * loss + smooth * (label_smoothing / classes)


def _cross_entropy_probabilities(logp, target, weight, class_weight, class_dim, ignore_index,
                                 reduction, label_smoothing):
    classes = logp.shape[class_dim]
    if not target.dtype.is_floating_point:
        raise RuntimeError(f"Expected floating point type for target with class "
                           f"probabilities, got {target.dtype}")
    if ignore_index >= 0:
        raise RuntimeError("ignore_index is not supported for floating point target")
    if weight is not None and (weight.dim() != 1 or weight.numel() != classes):
        raise RuntimeError(f"cross_entropy: weight tensor should be defined either for all "
                           f"{classes} classes or no classes but got weight tensor of shape: "
                           f"{list(weight.shape)}")
    if label_smoothing > 0.0:
        target = target * (1 - label_smoothing) + label_smoothing / classes
    terms = logp * target if class_weight is None else logp * target * class_weight
    if reduction == "mean":
        samples = logp.numel() // classes if classes else 0
        return -terms.sum() / samples if samples else terms.sum() * math.nan
    if reduction == "sum":
        return -terms.sum()
    return _reduce(-terms.sum(class_dim), reduction)


def _warn_if_broadcast(input, target):
    """PyTorch's warning when a pointwise loss's target broadcasts against its input (an
    (N, 1) output against (N,) labels averages N*N differences)."""
    if tuple(target.shape) != tuple(input.shape):
        warnings.warn(f"Using a target size ({target.shape}) that is different to the input "
                      f"size ({input.shape}). This will likely lead to incorrect results due "
                      f"to broadcasting. Please ensure they have the same size.", UserWarning,
                      stacklevel=3)


def _weighted_reduce(loss, weight, reduction, input):
    """A pointwise loss weighted elementwise, as PyTorch's ``mse_loss``/``l1_loss``:
    "mean" divides by the sum of the weights."""
    if tuple(weight.shape) != tuple(input.shape):
        raise ValueError("Weights and input must have the same size.")
    loss = loss * weight
    if reduction == "mean":
        return loss.sum() / weight.sum()
    if reduction not in ("none", "sum"):
        raise ValueError(f"Invalid reduction mode: {reduction}. Expected one of 'none', "
                         f"'mean', 'sum'.")
    return _reduce(loss, reduction)


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    _warn_if_broadcast(input, target)
    if size_average is not None or reduce is not None:
        reduction = _legacy_reduction(size_average, reduce, reduction)
    diff = input - target
    if weight is not None:
        return _weighted_reduce(diff * diff, weight, reduction, input)
    return _reduce(diff * diff, reduction)


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    _warn_if_broadcast(input, target)
    if size_average is not None or reduce is not None:
        reduction = _legacy_reduction(size_average, reduce, reduction)
    if weight is not None:
        return _weighted_reduce((input - target).abs(), weight, reduction, input)
    return _reduce((input - target).abs(), reduction)


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None,
                                     reduce=None, reduction="mean", pos_weight=None):
    if size_average is not None or reduce is not None:
        reduction = _legacy_reduction(size_average, reduce, reduction)
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(f"Target size ({target.shape}) must be the same as input size "
                         f"({input.shape})")
    # (1 - t) x - w log sigmoid(x), PyTorch's formula: log sigmoid is stable for large |x|
    # and its derivative is right at x = 0, where abs and clamp have kinks
    log_weight = 1 if pos_weight is None else 1 + (pos_weight - 1) * target
    loss = (1 - target) * input - log_weight * logsigmoid(input)
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None,
                         reduction="mean"):
    """PyTorch's binary cross-entropy of probabilities ``input``: each log clamped at -100
    (``ops.loss._binary_cross_entropy``), then weighted and reduced."""
    if size_average is not None or reduce is not None:
        reduction = _legacy_reduction(size_average, reduce, reduction)
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(f"Using a target size ({target.shape}) that is different to the input "
                         f"size ({input.shape}) is deprecated. Please ensure they have the same "
                         f"size.")
    loss = _op("_binary_cross_entropy", input, target)
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


def dropout(input, p=0.5, training=True, inplace=False):
    if not 0 <= p <= 1:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0:
        return input
    if p == 1:
        return input * 0
    keep = _op("rand_like", input) >= p
    out = input * keep / (1 - p)
    return input.copy_(out) if inplace else out


def _padding_index(padding_idx, num_embeddings):
    if padding_idx is None:
        return None
    if padding_idx > 0:
        assert padding_idx < num_embeddings, "Padding_idx must be within num_embeddings"
    elif padding_idx < 0:
        assert padding_idx >= -num_embeddings, "Padding_idx must be within num_embeddings"
        padding_idx = num_embeddings + padding_idx
    return padding_idx


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
              scale_grad_by_freq=False, sparse=False):
    """Rows of ``weight`` picked by ``input``: one op, ``ops.embedding.embedding``.  The
    ``padding_idx`` row gets no gradient; ``max_norm`` first scales the rows looked up down
    to that norm, in place (``embedding_renorm_``, under no_grad), as PyTorch does."""
    padding_idx = _padding_index(padding_idx, weight.shape[0])
    if max_norm is not None:
        from microtensor.autograd.grad_mode import no_grad
        input = input.contiguous()
        with no_grad():
            _op("embedding_renorm_", weight, input, max_norm, norm_type)
    return _op("embedding", weight, input, -1 if padding_idx is None else padding_idx,
               scale_grad_by_freq, sparse)


def one_hot(tensor, num_classes=-1):
    """PyTorch's checks of the class values, except under vmap (where, as PyTorch's, a
    class out of range gives a row of zeros, and ``num_classes`` must be given)."""
    from microtensor._C.tensor import int64
    from microtensor.ops.factory import arange
    from microtensor.vmap.batched import BatchedTensor
    num_classes = _int_arg(num_classes, "num_classes")
    if tensor.dtype is not int64:
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    if type(tensor) is BatchedTensor:
        if num_classes < 0:
            raise RuntimeError("When vmap-ing microtensor.nn.functional.one_hot, please provide "
                               "an explicit positive num_classes argument.")
    elif tensor.numel() == 0:
        if num_classes <= 0:
            raise RuntimeError("Can not infer total number of classes from empty tensor.")
    else:
        if tensor.min().item() < 0:
            raise RuntimeError("Class values must be non-negative.")
        if num_classes == -1:
            num_classes = int(tensor.max().item()) + 1
        elif tensor.max().item() >= num_classes:
            raise RuntimeError("Class values must be smaller than num_classes.")
    return (tensor.unsqueeze(-1) == arange(num_classes, device=tensor.device)).long()


# ------------------------------------------------------------------ normalization and pooling

def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Normalisation over the last dims: one op, ``ops.norm.layer_norm``."""
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    return _op("layer_norm", input, tuple(normalized_shape), weight, bias, eps)


def rms_norm(input, normalized_shape, weight=None, eps=None):
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    return _op("rms_norm", input, tuple(normalized_shape), weight, eps)


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    return _op("group_norm", input, num_groups, weight, bias, eps)


def _check_batch_statistics(input, count, what):
    if count == 1:
        raise ValueError(f"Expected more than 1 {what} when training, got input size "
                         f"torch.Size({list(input.shape)})")


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    """Normalisation per channel (dim 1): one op, ``ops.norm.batch_norm`` (running
    statistics updated in place when training)."""
    if training:
        _check_batch_statistics(input, input.shape[0] * math.prod(input.shape[2:]),
                                "value per channel")
    return _op("batch_norm", input, weight, bias, running_mean, running_var, training,
               momentum, eps)


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None,
                  use_input_stats=True, momentum=0.1, eps=1e-5):
    """Each (sample, channel) normalised over its spatial dims: ``batch_norm`` of the
    input seen as one sample of N*C channels; running statistics are the average over
    the samples' updates, as in PyTorch."""
    shape = tuple(input.shape)
    _norm.check_parameter_dtypes(input, weight, bias, running_mean, running_var)
    if use_input_stats:
        _check_batch_statistics(input, math.prod(shape[2:]), "spatial element")
    n, c = shape[0], shape[1]
    folded = input.contiguous().view((1, n * c) + shape[2:])   # as PyTorch: contiguous out
    repeated = [None if t is None else t.repeat(n) for t in (running_mean, running_var)]
    out = _op("batch_norm", folded, None, None, repeated[0], repeated[1], use_input_stats,
              momentum, eps).reshape(shape)
    if use_input_stats:
        from microtensor.autograd import no_grad
        with no_grad():
            for buffer, updated in zip((running_mean, running_var), repeated):
                if buffer is not None:
                    buffer.copy_(updated.view(n, c).mean(0))
    view = (c,) + (1,) * (len(shape) - 2)
    if weight is not None:
        out = out * weight.reshape(view)
    if bias is not None:
        out = out + bias.reshape(view)
    return out.to(input.dtype)   # float32 parameters of a half input: the input's dtype


def normalize(input, p=2.0, dim=1, eps=1e-12, out=None):
    """``input`` over its ``p``-norm along ``dim``, the norm kept at least ``eps``."""
    denominator = input.norm(p, dim, keepdim=True).clamp(min=eps).expand_as(input)
    if out is None:
        return input / denominator
    return _op("div", input, denominator, out=out)


def _max_pool(d, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices):
    values, indices = _op(f"max_pool{d}d_with_indices", input, kernel_size,
                          () if stride is None else stride, padding, dilation, ceil_mode)
    return (values, indices) if return_indices else values


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    return _max_pool(1, input, kernel_size, stride, padding, dilation, ceil_mode,
                     return_indices)


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    return _max_pool(2, input, kernel_size, stride, padding, dilation, ceil_mode,
                     return_indices)


def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    return _max_pool(3, input, kernel_size, stride, padding, dilation, ceil_mode,
                     return_indices)


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True):
    return _op("avg_pool1d", input, kernel_size, () if stride is None else stride, padding,
               ceil_mode, count_include_pad)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    return _op("avg_pool2d", input, kernel_size, () if stride is None else stride, padding,
               ceil_mode, count_include_pad, divisor_override)


def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    return _op("avg_pool3d", input, kernel_size, () if stride is None else stride, padding,
               ceil_mode, count_include_pad, divisor_override)


def adaptive_avg_pool1d(input, output_size):
    return _op("adaptive_avg_pool1d", input, output_size)


def adaptive_avg_pool2d(input, output_size):
    return _op("adaptive_avg_pool2d", input, output_size)


def adaptive_max_pool2d(input, output_size, return_indices=False):
    values, indices = _op("adaptive_max_pool2d", input, output_size)
    return (values, indices) if return_indices else values


# --------------------------------------------------------------------------- activations
# One op each (``ops.activation``); ``inplace=True`` runs the op's in-place variant.

def _activation(name, input, inplace, *args, **kwargs):
    return _op(name + "_" if inplace else name, input, *args, **kwargs)


def gelu(input, approximate="none"):
    return _op("gelu", input, approximate=approximate)


def silu(input, inplace=False):
    return _activation("silu", input, inplace)


def mish(input, inplace=False):
    return _activation("mish", input, inplace)


def leaky_relu(input, negative_slope=0.01, inplace=False):
    return _activation("leaky_relu", input, inplace, negative_slope)


def leaky_relu_(input, negative_slope=0.01):
    return _op("leaky_relu_", input, negative_slope)


def elu(input, alpha=1.0, inplace=False):
    return _activation("elu", input, inplace, alpha)


def elu_(input, alpha=1.0):
    return _op("elu_", input, alpha)


def selu(input, inplace=False):
    return _activation("selu", input, inplace)


def selu_(input):
    return _op("selu_", input)


def celu(input, alpha=1.0, inplace=False):
    return _activation("celu", input, inplace, alpha)


def celu_(input, alpha=1.0):
    return _op("celu_", input, alpha)


def softplus(input, beta=1.0, threshold=20.0):
    return _op("softplus", input, beta, threshold)


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    if min_val > max_val:
        raise ValueError("min_val cannot be greater than max_val")
    return _activation("hardtanh", input, inplace, min_val, max_val)


def hardtanh_(input, min_val=-1.0, max_val=1.0):
    return hardtanh(input, min_val, max_val, inplace=True)


def relu6(input, inplace=False):
    return _activation("relu6", input, inplace)


def hardsigmoid(input, inplace=False):
    return _activation("hardsigmoid", input, inplace)


def hardswish(input, inplace=False):
    return _activation("hardswish", input, inplace)


def logsigmoid(input):
    return _op("log_sigmoid", input)


def softsign(input):
    return _op("softsign", input)


def tanhshrink(input):
    return _op("tanhshrink", input)


def glu(input, dim=-1):
    return _op("glu", input, dim)


def prelu(input, weight):
    return _op("prelu", input, weight)


def threshold(input, threshold, value, inplace=False):
    return _activation("threshold", input, inplace, threshold, value)


def threshold_(input, threshold, value):
    return _op("threshold_", input, threshold, value)


# --------------------------------------------------------------------------- convolution
# One op, ``ops.conv.convolution``; these are the functions written with it.

from microtensor.ops import conv as _conv  # noqa: E402

conv1d = _conv.conv1d.kernel
conv2d = _conv.conv2d.kernel
conv3d = _conv.conv3d.kernel
conv_transpose1d = _conv.conv_transpose1d.kernel
conv_transpose2d = _conv.conv_transpose2d.kernel
conv_transpose3d = _conv.conv_transpose3d.kernel


def _pair(value, name):
    # a pair made in Python first, as PyTorch's: an int past int64 is then a list's TypeError
    return _conv.expand_param((value, value) if isinstance(value, int) else value, 2, name)


def _block_selector(input, channels, kernel_size):
    """The weight of a grouped convolution that copies each of the kernel's offsets of each
    channel into a channel of its own: (channels * kh * kw, 1, kh, kw), one-hot."""
    from microtensor.ops.factory import eye
    count = kernel_size[0] * kernel_size[1]
    return eye(count, dtype=input.dtype, device=input.device).reshape(
        (1, count, 1) + tuple(kernel_size)).expand(
        (channels, count, 1) + tuple(kernel_size)).reshape(
        (channels * count, 1) + tuple(kernel_size))


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    """im2col: the sliding blocks of a (N, C, H, W) or (C, H, W) input as columns
    (N, C * kh * kw, blocks), as a grouped convolution with a one-hot weight (so it is
    differentiable and batched like ``conv2d``)."""
    shape, rank = tuple(input.shape), input.dim()
    if rank in (1, 2):     # PyTorch reads dim 2 before checking the rank
        raise IndexError(f"Dimension out of range (expected to be in range of [{-rank}, "
                         f"{rank - 1}], but got {rank})")
    if rank not in (3, 4) or 0 in (shape[1:] if rank == 4 else shape):
        raise RuntimeError(f"Expected 3D or 4D (batch mode) tensor with possibly 0 batch size "
                           f"and other non-zero dimensions for input, but got: {list(shape)}")
    kernel_size = _pair(kernel_size, "kernel_size")
    unbatched = input.dim() == 3
    if unbatched:
        input = input.unsqueeze(0)
    channels = input.shape[1]
    blocks = _conv.convolution(input, _block_selector(input, channels, kernel_size), None,
                               _pair(stride, "stride"), _pair(padding, "padding"),
                               _pair(dilation, "dilation"), False, (0, 0), channels)
    # contiguous (exactly, size-1 dims too), as PyTorch's, whatever layout the convolution
    # chose
    out = in_format(blocks.reshape(tuple(blocks.shape[:2]) +
                                   (blocks.shape[2] * blocks.shape[3],)), contiguous_format)
    return out.squeeze(0) if unbatched else out


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """col2im, the transpose of ``unfold``: columns (N, C * kh * kw, blocks) summed into
    an (N, C, *output_size) image where the blocks overlap."""
    shape, rank = tuple(input.shape), input.dim()
    if rank not in (2, 3) or 0 in shape[rank - 2:]:
        raise RuntimeError(f"Expected 2D or 3D (batch mode) tensor for input with possibly 0 "
                           f"batch size and non-zero dimensions for input, but got: "
                           f"{list(shape)}")
    output_size, kernel_size = _pair(output_size, "output_size"), _pair(kernel_size,
                                                                        "kernel_size")
    dilation, padding, stride = (_pair(dilation, "dilation"), _pair(padding, "padding"),
                                 _pair(stride, "stride"))
    unbatched = input.dim() == 2
    if unbatched:
        input = input.unsqueeze(0)
    count = kernel_size[0] * kernel_size[1]
    rows, cols = input.shape[1:]
    if rows % count:
        raise RuntimeError(f"Expected size of input's dimension 1 to be divisible by the "
                           f"product of kernel_size, but got input.size(1)={rows} and "
                           f"kernel_size=({kernel_size[0]}, {kernel_size[1]}).")
    blocks = [(o + 2 * p - d * (k - 1) - 1) // s + 1 for o, p, d, k, s in
              zip(output_size, padding, dilation, kernel_size, stride)]
    if blocks[0] * blocks[1] != cols:
        raise RuntimeError(f"Given output_size=({output_size[0]}, {output_size[1]}), "
                           f"kernel_size=({kernel_size[0]}, {kernel_size[1]}), "
                           f"dilation=({dilation[0]}, {dilation[1]}), padding=({padding[0]}, "
                           f"{padding[1]}), stride=({stride[0]}, {stride[1]}), expected "
                           f"size of input's dimension 2 to match the calculated number of "
                           f"sliding blocks {blocks[0]} * {blocks[1]} = "
                           f"{blocks[0] * blocks[1]}, but got input.size(2)={cols}.")
    channels = rows // count
    reached = [(b - 1) * s - 2 * p + d * (k - 1) + 1 for b, s, p, d, k in
               zip(blocks, stride, padding, dilation, kernel_size)]
    out = _conv.convolution(input.reshape((input.shape[0], rows) + tuple(blocks)),
                            _block_selector(input, channels, kernel_size), None, stride,
                            padding, dilation, True,
                            tuple(o - r for o, r in zip(output_size, reached)), channels)
    out = in_format(out, contiguous_format)   # as PyTorch's, whatever layout the convolution chose
    return out.squeeze(0) if unbatched else out


# --------------------------------------------------------------------------- layout

def pad(input, pad, mode="constant", value=None):
    """``input`` padded on its last ``len(pad) // 2`` dims: one op, ``ops.layout.pad``."""
    return _op("pad", input, tuple(pad), mode, value)


def pixel_shuffle(input, upscale_factor):
    """(*, C r², H, W) -> (*, C, H r, W r): a reshape and a permute."""
    r = _int_arg(upscale_factor, "upscale_factor")
    if input.dim() < 3:
        raise RuntimeError(f"pixel_shuffle expects input to have at least 3 dimensions, but "
                           f"got input with {input.dim()} dimension(s)")
    *lead, c, h, w = input.shape
    if r <= 0:
        raise RuntimeError(f"pixel_shuffle expects a positive upscale_factor, but got {r}")
    if c % (r * r):
        raise RuntimeError(f"pixel_shuffle expects its input's 'channel' dimension to be "
                           f"divisible by the square of upscale_factor, but input.size(-3)={c}"
                           f" is not divisible by {r * r}")
    if input.dim() == 4 and memory_format_of(input) is channels_last:
        # shuffled in the (N, H, W, C) order of its memory: PyTorch's channels-last result
        n = lead[0]
        out = input.permute(0, 2, 3, 1).reshape(n, h, w, c // (r * r), r, r)
        out = out.permute(0, 1, 4, 2, 5, 3).reshape(n, h * r, w * r, c // (r * r))
        # (in_format: a reshape that could stay a view leaves other strides)
        return in_format(out.permute(0, 3, 1, 2), channels_last)
    k = len(lead)
    out = input.reshape(tuple(lead) + (c // (r * r), r, r, h, w))
    out = out.permute(tuple(range(k)) + (k, k + 3, k + 1, k + 4, k + 2))
    # laid out as PyTorch allocates it: in the input's suggested memory format
    return in_format(out.reshape(tuple(lead) + (c // (r * r), h * r, w * r)),
                     memory_format_of(input))


def pixel_unshuffle(input, downscale_factor):
    """(*, C, H r, W r) -> (*, C r², H, W): the inverse of ``pixel_shuffle``."""
    r = _int_arg(downscale_factor, "downscale_factor")
    if input.dim() < 3:
        raise RuntimeError(f"pixel_unshuffle expects input to have at least 3 dimensions, "
                           f"but got input with {input.dim()} dimension(s)")
    *lead, c, h, w = input.shape
    if r <= 0:
        raise RuntimeError(f"pixel_unshuffle expects a positive downscale_factor, but got {r}")
    if h % r:
        raise RuntimeError(f"pixel_unshuffle expects height to be divisible by "
                           f"downscale_factor, but input.size(-2)={h} is not divisible by {r}")
    if w % r:
        raise RuntimeError(f"pixel_unshuffle expects width to be divisible by "
                           f"downscale_factor, but input.size(-1)={w} is not divisible by {r}")
    if input.dim() == 4 and memory_format_of(input) is channels_last:
        n = lead[0]
        out = input.permute(0, 2, 3, 1).reshape(n, h // r, r, w // r, r, c)
        out = out.permute(0, 1, 3, 5, 2, 4).reshape(n, h // r, w // r, c * r * r)
        return in_format(out.permute(0, 3, 1, 2), channels_last)
    k = len(lead)
    out = input.reshape(tuple(lead) + (c, h // r, r, w // r, r))
    out = out.permute(tuple(range(k)) + (k, k + 2, k + 4, k + 1, k + 3))
    return in_format(out.reshape(tuple(lead) + (c * r * r, h // r, w // r)),
                     memory_format_of(input))


# --------------------------------------------------------------------------- more losses

def _legacy_reduction(size_average, reduce, reduction):
    from microtensor.nn.modules import _reduction
    return _reduction(size_average, reduce, reduction)


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    """``0.5 d² / beta`` where ``|d| < beta``, else ``|d| - 0.5 beta``."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    _warn_if_broadcast(input, target)
    d = (input - target).abs()
    if beta == 0:
        return _reduce(d, reduction)
    return _reduce(_op("where", d < beta, 0.5 * d * d / beta, d - 0.5 * beta), reduction)


def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):
    """``0.5 d²`` where ``|d| < delta``, else ``delta (|d| - 0.5 delta)``, optionally
    weighted elementwise."""
    if delta <= 0:
        raise RuntimeError("huber_loss does not support non-positive values for delta.")
    _warn_if_broadcast(input, target)
    d = (input - target).abs()
    loss = _op("where", d < delta, 0.5 * d * d, delta * (d - 0.5 * delta))
    return _reduce(loss if weight is None else loss * weight, reduction)


def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    """``target (log target - input)`` pointwise (0 where target is 0), ``input`` being
    log-probabilities; "batchmean" divides the sum by the batch size."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if reduction not in ("none", "mean", "sum", "batchmean"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    if log_target:
        loss = target.exp() * (target - input)
    else:
        # as PyTorch: target log target is 0 at target 0, and the gradient is xlogy's
        loss = REGISTRY["xlogy"](target, target) - target * input
    if reduction == "batchmean":
        return loss.sum() / input.shape[0] if input.dim() else loss.sum()
    return _reduce(loss, reduction)


def margin_ranking_loss(input1, input2, target, margin=0, size_average=None, reduce=None,
                        reduction="mean"):
    """``max(0, -target (input1 - input2) + margin)``."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if input1.dim() != input2.dim() or input1.dim() != target.dim():
        raise RuntimeError(f"margin_ranking_loss : All input tensors should have same "
                           f"dimension but got sizes: input1: {input1.shape}, input2: "
                           f"{input2.shape}, target: {target.shape} ")
    return _reduce((-target * (input1 - input2) + margin).clamp(min=0), reduction)


def cosine_embedding_loss(input1, input2, target, margin=0, size_average=None, reduce=None,
                          reduction="mean"):
    """``1 - cos(x1, x2)`` where target is 1, ``max(0, cos - margin)`` where it is -1
    (PyTorch's cosine, with 1e-12 added to each squared norm)."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if input1.dim() not in (1, 2) or input1.shape != input2.shape:
        raise RuntimeError(f"cosine_embedding_loss: expected inputs of the same 1-D or 2-D "
                           f"shape, got {list(input1.shape)} and {list(input2.shape)}")
    eps = 1e-12
    dot = (input1 * input2).sum(-1)
    denom = (((input1 * input1).sum(-1) + eps) * ((input2 * input2).sum(-1) + eps)).sqrt()
    cos = dot / denom
    loss = _op("where", target == 1, 1 - cos, 0.0 * cos) + \
        _op("where", target == -1, (cos - margin).clamp(min=0), 0.0 * cos)
    return _reduce(loss, reduction)


def poisson_nll_loss(input, target, log_input=True, full=False, size_average=None, eps=1e-8,
                     reduce=None, reduction="mean"):
    """``exp(input) - target input`` (or ``input - target log(input + eps)``), plus
    Stirling's term for targets above 1 when ``full``."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if log_input:
        loss = input.exp() - target * input
    else:
        loss = input - target * (input + eps).log()
    if full:
        safe = target.clamp(min=1.0)   # the term is 0 where target <= 1
        stirling = safe * safe.log() - safe + 0.5 * (2 * math.pi * safe).log()
        loss = loss + stirling.masked_fill(target <= 1, 0.0)
    return _reduce(loss, reduction)


def gaussian_nll_loss(input, target, var, full=False, eps=1e-6, reduction="mean"):
    """``0.5 (log var + (input - target)² / var)`` (+ ``0.5 log 2π`` when ``full``), var
    clamped at ``eps`` for the value only, as PyTorch does."""
    from microtensor._C.tensor import TensorBase
    if not isinstance(var, TensorBase):
        if var < 0:
            raise ValueError("var has negative entry/entries")
        var = input.new_full(tuple(input.shape), float(var))
    if tuple(var.shape) != tuple(input.shape):
        if tuple(input.shape[:-1]) == tuple(var.shape):
            var = var.unsqueeze(-1)
        # broadcastable with a single mismatched dim of size 1 (homoscedastic there)
        elif not (input.dim() == var.dim() and
                  sum(v for i, v in zip(input.shape, var.shape) if i != v) == 1):
            raise ValueError("var is of incorrect size")
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"{reduction} is not valid")
    var = var + (var.clamp(min=eps) - var).detach()   # clamped value, identity gradient
    loss = 0.5 * (var.log() + (input - target) ** 2 / var)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction)


def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2, eps=1e-6, swap=False,
                        size_average=None, reduce=None, reduction="mean"):
    """``max(0, margin + d(anchor, positive) - d(anchor, negative))``; with ``swap``, the
    negative's distance is the smaller of its distances to anchor and positive."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    dims = (anchor.dim(), positive.dim(), negative.dim())
    if len(set(dims)) != 1:
        raise RuntimeError(f"The anchor, positive, and negative tensors are expected to have "
                           f"the same number of dimensions, but got: anchor {dims[0]}D, "
                           f"positive {dims[1]}D, and negative {dims[2]}D inputs")
    if margin <= 0:
        raise ValueError(f"TripletMarginLoss: expected margin to be greater than 0, got "
                         f"{margin} instead")
    d_pos = pairwise_distance(anchor, positive, p, eps)
    d_neg = pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_neg = _op("minimum", d_neg, pairwise_distance(positive, negative, p, eps))
    return _reduce((margin + d_pos - d_neg).clamp(min=0), reduction)


# --------------------------------------------------------------------------- attention and distances

def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False):
    return _op("scaled_dot_product_attention", query, key, value, attn_mask, dropout_p,
               is_causal, scale=scale, enable_gqa=enable_gqa)


def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    return _op("cosine_similarity", x1, x2, dim, eps)


def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    return _op("pairwise_distance", x1, x2, p, eps, keepdim)


# ------------------------------------------------------------------ bags of embeddings, resizing

from microtensor.ops.embedding_bag import embedding_bag  # noqa: E402,F401
from microtensor.nn.interpolation import (interpolate, upsample,  # noqa: E402,F401
                                          upsample_bilinear, upsample_nearest)


# ------------------------------------------------------------------ missing layers: dropouts
# Channel-wise and alpha dropout: PyTorch's rank checks and warnings here, the computation
# in ``ops.dropout`` (``inplace=True`` writes into ``input`` and returns it).


from microtensor.ops import dropout as _dropouts  # noqa: E402


def _check_dropout_p(p):
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")


_NOISE_DROPOUTS = {(True, False): "feature_dropout", (False, True): "alpha_dropout",
                   (True, True): "feature_alpha_dropout"}


def _noise_dropout(input, p, training, inplace, feature, alpha):
    """One of ``ops.dropout``'s variants (``feature``: a draw per channel, ``alpha``:
    SELU's saturation for dropped values)."""
    if inplace:
        return _dropouts.inplace_dropout(input, p, training, feature, alpha)
    return _op(_NOISE_DROPOUTS[feature, alpha], input, p, training)


def _channel_dropout(input, p, training, inplace, batched):
    """``feature_dropout`` of ``input``, seen with a batch of one when not ``batched``."""
    if batched:
        return _noise_dropout(input, p, training, inplace, True, False)
    result = _noise_dropout(input.unsqueeze(0), p, training, inplace, True, False)
    return input if inplace else result.squeeze(0)


def _warn_channel_dropout_rank(d, rank):
    warnings.warn(
        f"dropout{d}d: Received a {rank}-D input to dropout{d}d, which is deprecated and will "
        f"result in an error in a future release. To retain the behavior and silence this "
        f"warning, please use dropout instead. Note that dropout{d}d exists to provide "
        f"channel-wise dropout on inputs with {d} spatial dimensions, a channel dimension, "
        f"and an optional batch dimension (i.e. {d + 1}D or {d + 2}D inputs).", stacklevel=3)


def dropout1d(input, p=0.5, training=True, inplace=False):
    """Each channel of a (N, C, L) or (C, L) input zeroed with probability ``p``."""
    _check_dropout_p(p)
    rank = input.dim()
    if rank not in (2, 3):
        raise RuntimeError(
            f"dropout1d: Expected 2D or 3D input, but received a {rank}D input. Note that "
            f"dropout1d exists to provide channel-wise dropout on inputs with 1 spatial "
            f"dimension, a channel dimension, and an optional batch dimension (i.e. 2D or 3D "
            f"inputs).")
    return _channel_dropout(input, p, training, inplace, rank == 3)


def dropout2d(input, p=0.5, training=True, inplace=False):
    """Each channel (dim 1) zeroed with probability ``p``; a 3-D input is read as
    (N, C, L), as PyTorch still does (with its warning)."""
    _check_dropout_p(p)
    rank = input.dim()
    if rank not in (3, 4):
        _warn_channel_dropout_rank(2, rank)
    if rank == 3:
        warnings.warn(
            "dropout2d: Received a 3D input to dropout2d and assuming that channel-wise 1D "
            "dropout behavior is desired - input is interpreted as shape (N, C, L), where C is "
            "the channel dim. This behavior will change in a future release to interpret the "
            "input as one without a batch dimension, i.e. shape (C, H, W). To maintain the 1D "
            "channel-wise dropout behavior, please switch to using dropout1d instead.",
            stacklevel=2)
    return _channel_dropout(input, p, training, inplace, True)


def dropout3d(input, p=0.5, training=True, inplace=False):
    """Each channel of a (N, C, D, H, W) or (C, D, H, W) input zeroed with probability
    ``p``."""
    _check_dropout_p(p)
    rank = input.dim()
    if rank not in (4, 5):
        _warn_channel_dropout_rank(3, rank)
    return _channel_dropout(input, p, training, inplace, rank == 5)


def alpha_dropout(input, p=0.5, training=False, inplace=False):
    _check_dropout_p(p)
    return _noise_dropout(input, p, training, inplace, False, True)


def feature_alpha_dropout(input, p=0.5, training=False, inplace=False):
    _check_dropout_p(p)
    return _noise_dropout(input, p, training, inplace, True, True)


# ------------------------------------------------------------------ missing layers: the rest
# softmin, relu_, channel_shuffle, local_response_norm

def _get_softmax_dim(name, ndim, stacklevel):
    """PyTorch's legacy dim of a softmax called without one (with its warning)."""
    warnings.warn(f"Implicit dimension choice for {name} has been deprecated. Change the "
                   f"call to include dim=X as an argument.", stacklevel=stacklevel)
    return 0 if ndim in (0, 1, 3) else 1


def softmin(input, dim=None, _stacklevel=3, dtype=None):
    """``softmax(-input)``: one op, ``ops.activation.softmin``."""
    if dim is None:
        dim = _get_softmax_dim("softmin", input.dim(), _stacklevel)
    return _op("softmin", input, dim, dtype)


def relu_(input):
    return _op("relu_", input)


def channel_shuffle(input, groups):
    """The channels split into ``groups`` and interleaved: one op, ``ops.shape``'s."""
    return _op("channel_shuffle", input, groups)


def native_channel_shuffle(input, groups):
    return _op("native_channel_shuffle", input, groups)


def local_response_norm(input, size, alpha=1e-4, beta=0.75, k=1.0):
    """Normalisation across channels: one op, ``ops.norm.local_response_norm``."""
    return _op("local_response_norm", input, size, alpha, beta, k)
# ------------------------------------------- shrinks, rrelu, margin losses, bilinear, pdist,
# gumbel_softmax

def hardshrink(input, lambd=0.5):
    return _op("hardshrink", input, lambd)


def softshrink(input, lambd=0.5):
    return _op("softshrink", input, lambd)


def rrelu(input, lower=1.0 / 8, upper=1.0 / 3, training=False, inplace=False):
    """Leaky ReLU whose negative slopes are drawn from U(lower, upper) in training, and are
    ``(lower + upper) / 2`` in evaluation."""
    return _activation("rrelu", input, inplace, lower, upper, training)


def rrelu_(input, lower=1.0 / 8, upper=1.0 / 3, training=False):
    return _op("rrelu_", input, lower, upper, training)


def soft_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """``log(1 + exp(-target * input))``: one composite op, ``ops.loss``."""
    return _op("soft_margin_loss", input, target,
               _legacy_reduction(size_average, reduce, reduction))


def multilabel_soft_margin_loss(input, target, weight=None, size_average=None, reduce=None,
                                reduction="mean"):
    return _op("multilabel_soft_margin_loss", input, target, weight,
               _legacy_reduction(size_average, reduce, reduction))


def hinge_embedding_loss(input, target, margin=1.0, size_average=None, reduce=None,
                         reduction="mean"):
    return _op("hinge_embedding_loss", input, target, margin,
               _legacy_reduction(size_average, reduce, reduction))


def multi_margin_loss(input, target, p=1, margin=1.0, weight=None, size_average=None,
                      reduce=None, reduction="mean"):
    return _op("multi_margin_loss", input, target, p, margin, weight,
               _legacy_reduction(size_average, reduce, reduction))


def multilabel_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """``target`` holds each row's classes, ended by -1 (PyTorch's convention)."""
    return _op("multilabel_margin_loss", input, target,
               _legacy_reduction(size_average, reduce, reduction))


def triplet_margin_with_distance_loss(anchor, positive, negative, *, distance_function=None,
                                      margin=1.0, swap=False, reduction="mean"):
    return _op("triplet_margin_with_distance_loss", anchor, positive, negative,
               distance_function=distance_function, margin=margin, swap=swap,
               reduction=reduction)


def bilinear(input1, input2, weight, bias=None):
    """``input1ᵀ weight[k] input2 + bias[k]`` for each output feature ``k``."""
    return _op("bilinear", input1, input2, weight, bias)


def pdist(input, p=2):
    """The ``p``-norm distances between the pairs of rows ``i < j`` of ``input`` (N, M)."""
    return _op("pdist", input, p)


def gumbel_softmax(logits, tau=1, hard=False, eps=1e-10, dim=-1):
    """A sample of the Gumbel-softmax distribution: ``softmax((logits + g) / tau)`` with
    ``g`` Gumbel(0, 1) noise (``-log`` of an exponential draw, drawn with ``rand_like``, so
    that vmap's ``randomness`` governs it); ``hard`` returns the one-hot of its argmax,
    with the soft sample's gradient (straight through)."""
    import warnings
    if eps != 1e-10:
        warnings.warn("`eps` parameter is deprecated and has no effect.", stacklevel=2)
    # -log(U), U uniform in [0, 1): an exponential draw, never 0 (U < 1), so the Gumbel
    # noise -log(-log(U)) is never +inf
    exponential = -_op("rand_like", logits).log()
    soft = ((logits - exponential.log()) / tau).softmax(dim)
    if not hard:
        return soft
    index = soft.argmax(dim, keepdim=True)
    one_hot = _op("zeros_like", logits).scatter(dim, index, 1.0)
    return one_hot - soft.detach() + soft


# --------------------------------------------------------------------------- sampling grids

_GRID_MODES = {"bilinear": 0, "nearest": 1, "bicubic": 2}
_GRID_PADDINGS = {"zeros": 0, "border": 1, "reflection": 2}


def _default_align_corners(align_corners):
    if align_corners is None:
        warnings.warn("Default grid_sample and affine_grid behavior has changed to "
                      "align_corners=False since 1.3.0. Please specify align_corners=True if "
                      "the old behavior is desired. See the documentation of grid_sample for "
                      "details.", stacklevel=3)
        return False
    return align_corners


def affine_grid(theta, size, align_corners=None):
    """The sampling grid of a batch of affine maps ``theta`` (N, 2, 3) or (N, 3, 4) for an
    output of ``size`` (N, C, H, W) or (N, C, D, H, W), for ``grid_sample``."""
    align_corners = _default_align_corners(align_corners)
    if not theta.is_floating_point():
        raise ValueError(f"Expected theta to have floating point type, but got {theta.dtype}")
    if len(size) not in (4, 5):
        raise NotImplementedError(f"affine_grid only supports 4D and 5D sizes, for 2D and 3D "
                                  f"affine transforms, respectively. Got size {size}.")
    d = len(size) - 2
    if theta.dim() != 3 or tuple(theta.shape[-2:]) != (d, d + 1):
        raise ValueError(f"Expected a batch of {d}D affine matrices of shape Nx{d}x{d + 1} "
                         f"for size {size}. Got {tuple(theta.shape)}.")
    if align_corners and min(size[2:]) == 1:
        warnings.warn("Since version 1.3.0, affine_grid behavior has changed for unit-size "
                      "grids when align_corners=True. This is not an intended use case of "
                      "affine_grid. See the documentation of affine_grid for details.",
                      stacklevel=2)
    elif min(size) <= 0:
        raise ValueError(f"Expected non-zero, positive output size. Got {size}")
    return _op("affine_grid_generator", theta, list(size), align_corners)


def grid_sample(input, grid, mode="bilinear", padding_mode="zeros", align_corners=None):
    """``input`` (N, C, *spatial) sampled at the normalised positions of ``grid``
    (N, *out, 2 or 3): (N, C, *out)."""
    if mode not in _GRID_MODES:
        raise ValueError(f"nn.functional.grid_sample(): expected mode to be 'bilinear', "
                         f"'nearest' or 'bicubic', but got: '{mode}'")
    if padding_mode not in _GRID_PADDINGS:
        raise ValueError(f"nn.functional.grid_sample(): expected padding_mode to be 'zeros', "
                         f"'border', or 'reflection', but got: '{padding_mode}'")
    align_corners = _default_align_corners(align_corners)
    return _op("grid_sampler", input, grid, _GRID_MODES[mode], _GRID_PADDINGS[padding_mode],
               align_corners)


# --------------------------------------------------------------------------- CTC loss

_REDUCTION_ENUM = {"none": 0, "mean": 1, "sum": 2}


def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean",
             zero_infinity=False):
    """The Connectionist Temporal Classification loss of log-probabilities (T, N, C) or
    (T, C) against padded (N, S) or concatenated targets; lengths as tensors or tuples."""
    if reduction not in _REDUCTION_ENUM:
        raise ValueError(f"{reduction} is not a valid value for reduction")
    return _op("ctc_loss", log_probs, targets, input_lengths, target_lengths, blank,
               _REDUCTION_ENUM[reduction], zero_infinity)
# ------------------------------------------------------------------ more pooling
# Adaptive pooling in 1-d and 3-d, the ``*_with_indices`` names, max unpooling, LP pooling
# and fractional max pooling: the ops of ``ops.pooling_more``.

from microtensor.ops.factory import rand as _rand  # noqa: E402
from microtensor.ops.pooling_more import ntuple as _ntuple  # noqa: E402


def max_pool1d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1,
                            ceil_mode=False, return_indices=False):
    return _max_pool(1, input, kernel_size, stride, padding, dilation, ceil_mode, True)


def max_pool2d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1,
                            ceil_mode=False, return_indices=False):
    return _max_pool(2, input, kernel_size, stride, padding, dilation, ceil_mode, True)


def max_pool3d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1,
                            ceil_mode=False, return_indices=False):
    return _max_pool(3, input, kernel_size, stride, padding, dilation, ceil_mode, True)


def adaptive_max_pool1d(input, output_size, return_indices=False):
    values, indices = _op("adaptive_max_pool1d", input, output_size)
    return (values, indices) if return_indices else values


def adaptive_max_pool3d(input, output_size, return_indices=False):
    values, indices = _op("adaptive_max_pool3d", input, output_size)
    return (values, indices) if return_indices else values


def adaptive_max_pool1d_with_indices(input, output_size, return_indices=False):
    return _op("adaptive_max_pool1d", input, output_size)


def adaptive_max_pool2d_with_indices(input, output_size, return_indices=False):
    return _op("adaptive_max_pool2d", input, output_size)


def adaptive_max_pool3d_with_indices(input, output_size, return_indices=False):
    return _op("adaptive_max_pool3d", input, output_size)


def adaptive_avg_pool3d(input, output_size):
    return _op("adaptive_avg_pool3d", input, output_size)


def _unpool_output_size(input, kernel_size, stride, padding, output_size):
    """The spatial output size of max unpooling: the pooling's input size by default, or
    ``output_size`` (its last dims) within a stride of it, PyTorch's checks."""
    d = len(kernel_size)
    default = [(input.shape[-d + i] - 1) * stride[i] + kernel_size[i] - 2 * padding[i]
               for i in range(d)]
    if output_size is None:
        size = default
    else:
        if len(output_size) == d + 2:
            output_size = output_size[2:]
        if len(output_size) != d:
            raise ValueError(f"output_size should be a sequence containing {d} or {d + 2} "
                             f"elements, but it has a length of '{len(output_size)}'")
        for i in range(d):
            low, high = default[i] - stride[i], default[i] + stride[i]
            if not low < output_size[i] < high:
                raise ValueError(f'invalid output_size "{output_size}" (dim {i} must be '
                                 f'between {low} and {high})')
        size = output_size
    for i in range(d):
        if size[i] < 0:
            raise ValueError(f"max_unpooling: output_size must contain non-negative spatial "
                             f"dimensions, but got output_size[{i}]={size[i]}")
    return size


def _unpool_geometry(d, kernel_size, stride, padding):
    kernel_size = _ntuple(kernel_size, d)
    return kernel_size, kernel_size if stride is None else _ntuple(stride, d), \
        _ntuple(padding, d)


def max_unpool1d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """The partial inverse of ``max_pool1d``: 2-d unpooling of planes one column wide, as
    PyTorch computes it."""
    kernel_size, stride, padding = _unpool_geometry(1, kernel_size, stride, padding)
    size = tuple(_unpool_output_size(input, kernel_size, stride, padding, output_size))
    return _op("max_unpool2d", input.unsqueeze(-1), indices.unsqueeze(-1),
               size + (1,)).squeeze(-1)


def max_unpool2d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    kernel_size, stride, padding = _unpool_geometry(2, kernel_size, stride, padding)
    size = _unpool_output_size(input, kernel_size, stride, padding, output_size)
    return _op("max_unpool2d", input, indices, size)


def max_unpool3d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    kernel_size, stride, padding = _unpool_geometry(3, kernel_size, stride, padding)
    size = _unpool_output_size(input, kernel_size, stride, padding, output_size)
    return _op("max_unpool3d", input, indices, size, stride, padding)


def lp_pool1d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    return _op("lp_pool1d", input, norm_type, kernel_size, stride, ceil_mode)


def lp_pool2d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    return _op("lp_pool2d", input, norm_type, kernel_size, stride, ceil_mode)


def lp_pool3d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    return _op("lp_pool3d", input, norm_type, kernel_size, stride, ceil_mode)


def _fractional_max_pool(d, input, kernel_size, output_size, output_ratio, _random_samples):
    """The op's call as PyTorch's functional form makes it: ``output_size`` from
    ``output_ratio`` (truncated products), and one uniform sample per plane and dim drawn
    from microtensor's generator unless ``_random_samples`` is given."""
    name = f"fractional_max_pool{d}d"
    if output_size is None and output_ratio is None:
        raise ValueError(f"{name} requires specifying either an output_size or an "
                         f"output_ratio")
    if output_size is None:
        if d == 2 and len(output_ratio) > 2:
            raise ValueError(f"{name} requires output_ratio to either be a single Int or "
                             f"tuple of Ints.")
        ratio = _ntuple(output_ratio, d)
        output_size = [int(input.size(-d + i) * ratio[i]) for i in range(d)]
    if _random_samples is None:
        batch = 1 if input.dim() == d + 1 else input.size(0)
        _random_samples = _rand(batch, input.size(-d - 1), d, dtype=input.dtype,
                                device=input.device)
    return _op(name, input, kernel_size, output_size, _random_samples)


def fractional_max_pool2d_with_indices(input, kernel_size, output_size=None, output_ratio=None,
                                       return_indices=False, _random_samples=None):
    return _fractional_max_pool(2, input, kernel_size, output_size, output_ratio,
                                _random_samples)


def fractional_max_pool3d_with_indices(input, kernel_size, output_size=None, output_ratio=None,
                                       return_indices=False, _random_samples=None):
    return _fractional_max_pool(3, input, kernel_size, output_size, output_ratio,
                                _random_samples)


def fractional_max_pool2d(input, kernel_size, output_size=None, output_ratio=None,
                          return_indices=False, _random_samples=None):
    values, indices = _fractional_max_pool(2, input, kernel_size, output_size, output_ratio,
                                           _random_samples)
    return (values, indices) if return_indices else values


def fractional_max_pool3d(input, kernel_size, output_size=None, output_ratio=None,
                          return_indices=False, _random_samples=None):
    values, indices = _fractional_max_pool(3, input, kernel_size, output_size, output_ratio,
                                           _random_samples)
    return (values, indices) if return_indices else values


from microtensor.nn.linear_cross_entropy import linear_cross_entropy  # noqa: E402,F401
