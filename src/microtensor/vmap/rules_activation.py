"""Batching rules of the activations that are not pointwise: ``glu`` (a dim argument).

The pointwise ones (``gelu``, ``prelu``'s ``_prelu_kernel``, ...) take the pointwise
family's rule."""
from microtensor.ops.activation import glu_halves
from microtensor.vmap.batched import wrap
from microtensor.vmap.rules import _actual, call, rule


@rule("glu")
def glu(op, level, args, kwargs):
    """The per-sample dim shifted past the batch dim; checks made on the sample's shape."""
    bound = op.bind(args, kwargs)
    self = bound["self"]
    dim, _ = glu_halves(self._sizes, bound["dim"])
    b = self._bdim
    return wrap(call(op, (self._value, _actual(dim, b)), None), b, level)
