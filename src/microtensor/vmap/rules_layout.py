"""Batching rules of ``pad`` and ``_pad_backward``: the vmap batch and every dim before
the padded ones fold into one leading dim (a (C, *spatial) input), one call."""
import math

from microtensor.ops import layout
from microtensor.vmap.batched import to_front, wrap
from microtensor.vmap.rules import call, rule


@rule("pad", "_pad_backward")
def pad(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    x = bound.pop("self" if op.name == "pad" else "grad")
    pads = tuple(int(p) for p in bound["pad"])
    k = len(pads) // 2
    shape = tuple(x.shape) if op.name == "pad" else tuple(bound["self_shape"])
    layout.check_pad(shape, pads, bound["mode"], bound.get("value"))
    value = to_front(x._value, x._bdim)
    lead = (value.shape[0],) + tuple(x.shape)[:len(x.shape) - k]
    folded = value.reshape((math.prod(lead),) + tuple(x.shape)[len(x.shape) - k:])
    if op.name == "_pad_backward":
        bound["self_shape"] = (math.prod(lead),) + shape[len(shape) - k:]
    out = call(op, (folded,), bound)
    return wrap(out.reshape(lead + tuple(out.shape[1:])), 0, level)
