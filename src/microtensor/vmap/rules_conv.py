"""The batching rule of ``convolution``: one physical convolution for any mix of batched
arguments, never a loop over samples.

* Shared weight: the samples are more images of the batch (the vmap dim folded into N).
* Per-sample weights (model ensembles; under ``vmap(grad)`` the weight gradient, which is a
  convolution of the input with the incoming gradient, both per sample): the samples
  become groups, as torch.func does: input (B, N, C, ...) -> (N, B * C, ...), weight
  (B, O, C / g, ...) -> (B * O, C / g, ...) with ``groups * B``; the result's channels are
  (B, O) and unfold back.
"""
from microtensor.ops import conv as conv_ops
from microtensor.vmap.batched import batch_size, to_front, wrap
from microtensor.vmap.rules import _front_or_expanded, _same_level, call, rule


@rule("convolution")
def convolution(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    x, w, b = bound["input"], bound["weight"], bound["bias"]
    options = [bound[name] for name in ("stride", "padding", "dilation", "transposed",
                                        "output_padding")]
    groups = bound["groups"]
    conv_ops.check_convolution(x, w, b, *options, groups)
    if not _same_level(w, level):
        if _same_level(b, level):   # a per-sample bias alone: added to the result
            out = call(op, (x, w, None, *options, groups), None)
            return out + b.reshape((-1,) + (1,) * (w.dim() - 2))
        images = to_front(x._value, x._bdim)
        size, n = images.shape[:2]
        out = call(op, (images.reshape((size * n,) + tuple(images.shape[2:])), w, b,
                        *options, groups), None)
        return wrap(out.reshape((size, n) + tuple(out.shape[1:])), 0, level)
    size = batch_size(level)
    images = _front_or_expanded(x, level, size).movedim(0, 1)
    n = images.shape[0]
    images = images.reshape((n, size * images.shape[2]) + tuple(images.shape[3:]))
    weights = to_front(w._value, w._bdim)
    weights = weights.reshape((size * weights.shape[1],) + tuple(weights.shape[2:]))
    if b is not None:
        b = _front_or_expanded(b, level, size)
        b = b.reshape(size * b.shape[1])
    out = call(op, (images, weights, b, *options, groups * size), None)
    return wrap(out.reshape((n, size, out.shape[1] // size) + tuple(out.shape[2:])), 1, level)
