"""Functional forms of layers and losses, written with microtensor ops (so they are
differentiable and vmappable without further work)."""
from microtensor.ops.dispatch import call_by_name as _op


def linear(input, weight, bias=None):
    """``input @ weight.T + bias``: one op, ``ops.linalg.linear``."""
    if weight.dim() > 2:
        raise RuntimeError(f"linear: weight must be 1-D or 2-D, got {weight.dim()}-D")
    return _op("linear", input, weight, bias)


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


def nll_loss(input, target, weight=None, ignore_index=-100, reduction="mean"):
    """Negative log-likelihood of class ``target`` under log-probabilities ``input``
    (shape (N, C), or (C,) with a 0-d target): one op, ``ops.loss.nll_loss``."""
    return _op("nll_loss", input, target, weight, reduction=reduction,
               ignore_index=ignore_index)


def cross_entropy(input, target, weight=None, ignore_index=-100, reduction="mean",
                  label_smoothing=0.0):
    logp = input.log_softmax(-1 if input.dim() == 1 else 1)
    if target.dtype.is_floating_point:
        loss = -(target * logp).sum(-1 if input.dim() == 1 else 1)
        return _reduce(loss, reduction)
    loss = nll_loss(logp, target, weight, ignore_index, reduction)
    if label_smoothing:
        smooth = _reduce(-logp.mean(-1 if input.dim() == 1 else 1), reduction)
        loss = (1 - label_smoothing) * loss + label_smoothing * smooth
    return loss


def mse_loss(input, target, reduction="mean"):
    diff = input - target
    return _reduce(diff * diff, reduction)


def l1_loss(input, target, reduction="mean"):
    return _reduce((input - target).abs(), reduction)


def binary_cross_entropy_with_logits(input, target, weight=None, reduction="mean",
                                     pos_weight=None):
    # log(1 + exp(-|x|)) + max(x, 0) - x * t, stable for large |x|
    log_weight = 1 if pos_weight is None else 1 + (pos_weight - 1) * target
    loss = (1 - target) * input + log_weight * ((-input.abs()).exp().log1p() +
                                                (-input).clamp(min=0))
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


def binary_cross_entropy(input, target, weight=None, reduction="mean"):
    loss = -(target * input.clamp(min=1e-12).log() +
             (1 - target) * (1 - input).clamp(min=1e-12).log())
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


def embedding(input, weight):
    return weight.index_select(0, input.reshape(-1)).reshape(tuple(input.shape) +
                                                             (weight.shape[1],))


def one_hot(tensor, num_classes=-1):
    from microtensor.ops.factory import arange
    if num_classes < 0:
        num_classes = int(tensor.max().item()) + 1
    return (tensor.unsqueeze(-1) == arange(num_classes)).long()
