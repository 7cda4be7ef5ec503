"""Batching rule of ``scatter_reduce``: gather/scatter's (every tensor argument batched,
unbatched ones expanded, ``dim`` shifted past the batch dim)."""
from microtensor._C import meta
from microtensor.vmap.batched import batch_size, wrap
from microtensor.vmap.rules import _check_indexed_write, _prepared, call, rule


@rule("scatter_reduce", "scatter_reduce_")
def scatter_reduce(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    self = bound["self"]
    _check_indexed_write(op, bound, self, level)
    dim = meta.wrap_dim(bound["dim"], max(self.dim(), 1)) + 1
    _prepared(bound, ("self", "index", "src"), level, batch_size(level))
    # the differentiable inputs positional: autograd records those
    result = call(op, (bound["self"], dim, bound["index"], bound["src"], bound["reduce"]),
                  {"include_self": bound["include_self"]})
    if op.kind == "inplace":
        return self
    return wrap(result.squeeze(1) if self.dim() == 0 else result, 0, level)
