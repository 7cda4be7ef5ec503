"""Batching rules of the normalization ops (``ops.norm``) and of pooling (``ops.pooling``).

``layer_norm``: the vmap batch is one more leading dim of one call; per-sample weights
and biases scale and shift its result by broadcasting.  ``batch_norm`` follows
torch.func: a batched input gets per-sample statistics (the vmap batch moved into the
channels, one call), and a running-statistics update of unbatched buffers from a batched
input raises torch.func's error.  Pooling: the vmap batch folds into N.
"""
from microtensor.ops import norm as norm_ops
from microtensor.ops import pooling as pooling_ops
from microtensor.vmap.batched import batch_size, to_front, unwrap, wrap
from microtensor.vmap.rules import _front_or_expanded, _same_level, call, rule

RUNNING_STATS_ERROR = (
    "Batch norm got a batched tensor as input while the running_mean or running_var, which "
    "will be updated in place, were not batched.\nIf you are using a module and do not need "
    "eval mode, please set `track_running_stats` to be False.If you are using a prebuilt "
    "module and do not need eval mode, please see the functorch website for resources on how "
    "to patch your module to work with vmap")


def _affine(out, weight, bias, view=None):
    """``out * weight + bias`` as per-sample ops (weights and biases batched or not)."""
    if weight is not None:
        out = out * (weight if view is None else view(weight))
    if bias is not None:
        out = out + (bias if view is None else view(bias))
    return out


@rule("layer_norm")
def layer_norm(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    x, shape, weight, bias, eps = (bound["input"], bound["normalized_shape"],
                                   bound["weight"], bound["bias"], bound["eps"])
    norm_ops.check_layer_norm(x._sizes, shape, weight, bias)
    inputs = _front_or_expanded(x, level, batch_size(level))
    if not _same_level(weight, level) and not _same_level(bias, level):
        return wrap(call(op, (inputs, shape, weight, bias, eps), None), 0, level)
    out = wrap(call(op, (inputs, shape, None, None, eps), None), 0, level)
    return _affine(out, weight, bias)


@rule("batch_norm")
def batch_norm(op, level, args, kwargs):
    """Eval mode (running statistics): per-sample broadcasting ops.  Batch statistics of a
    batched input: (B, N, C, ...) seen as (N, B*C, ...), one call, per-sample buffers
    updated through a flat copy."""
    bound = op.bind(args, kwargs)
    x, weight, bias = bound["input"], bound["weight"], bound["bias"]
    mean, var = bound["running_mean"], bound["running_var"]
    training, momentum, eps = bound["training"], bound["momentum"], bound["eps"]
    norm_ops.check_batch_norm(x, weight, bias, mean, var, training)
    n = x.dim()

    def channels(t):
        return norm_ops.channel_view(t, n)
    if not training:
        out = (x - channels(mean)) * channels((var + eps).rsqrt())
        return _affine(out, weight, bias, channels)
    buffers = [t for t in (mean, var) if t is not None]
    if not _same_level(x, level) and not any(_same_level(t, level) for t in buffers):
        out = call(op, (x, None, None, mean, var, training, momentum, eps), None)
        return _affine(out, weight, bias, channels)
    if not all(_same_level(t, level) for t in buffers):
        raise RuntimeError(RUNNING_STATS_ERROR)
    size = batch_size(level)
    inputs = _front_or_expanded(x, level, size)
    sizes = tuple(inputs.shape)
    folded = inputs.transpose(0, 1).reshape((sizes[1], size * sizes[2]) + sizes[3:])
    physical = [None if t is None else unwrap(t, level)[0].movedim(unwrap(t, level)[1], 0)
                for t in (mean, var)]
    flat = [None if p is None else p.reshape(-1).clone() for p in physical]
    result = call(op, (folded, None, None, flat[0], flat[1], training, momentum, eps), None)
    if training:
        for p, f in zip(physical, flat):
            if p is not None:
                p.copy_(f.view(p.shape))
    out = result.reshape((sizes[1], size, sizes[2]) + sizes[3:]).transpose(0, 1)
    return _affine(wrap(out, 0, level), weight, bias, channels)


@rule(*pooling_ops.MAX_POOL_DIMS)
def max_pool(op, level, args, kwargs):
    """The vmap batch folded into N: (B, [N,] C, *spatial) as (B*N, C, *spatial), one
    call; values and indices (flat positions in each plane) reshaped back."""
    bound = op.bind(args, kwargs)
    x = bound.pop("self")
    d = pooling_ops.MAX_POOL_DIMS[op.name]
    if op.name.startswith("adaptive"):
        pooling_ops.check_adaptive_input(x._sizes, d, op.name)
    else:
        pooling_ops.check_pool_input(x._sizes, d, op.name.replace("_with_indices", ""))
    value = to_front(x._value, x._bdim)
    sample = tuple(x.shape)
    folded = value.reshape((-1,) + sample[-(d + 1):])
    results = call(op, (folded,), bound)
    lead = (value.shape[0],) + sample[:-(d + 1)]
    return tuple(wrap(r.reshape(lead + tuple(r.shape[1:])), 0, level) for r in results)
