"""Batching rules of ``embedding`` and ``embedding_renorm_`` (``ops.embedding``).

A shared weight with batched indices is one lookup over all samples' indices.  Per-sample
weights (and a frequency-scaled gradient, whose counts are per sample) use one lookup into
the samples' weights stacked as rows ``(B * num_embeddings, dim)``, each sample's indices
offset to its own block; the padding row is then kept out of the gradient by a mask, since
it is a different row in each block.
"""
from microtensor.ops.factory import arange
from microtensor.vmap.batched import batch_size, to_front, unwrap, wrap
from microtensor.vmap.rules import call, rule


def _stacked(value, bdim, size):
    if bdim is None:
        return value.unsqueeze(0).expand((size,) + tuple(value._sizes))
    return to_front(value, bdim)


def _offset(indices, size, rows):
    """Each sample's indices moved to its block of ``rows`` rows."""
    shift = arange(size, dtype=indices.dtype, device=indices.device) * rows
    return indices + shift.reshape((size,) + (1,) * (indices.dim() - 1))


@rule("embedding")
def embedding(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    weight, wdim = unwrap(bound["weight"], level)
    indices, idim = unwrap(bound["indices"], level)
    padding_idx, by_freq, sparse = (bound["padding_idx"], bound["scale_grad_by_freq"],
                                    bound["sparse"])
    if weight.dim() - (wdim is not None) != 2:
        raise RuntimeError("'weight' must be 2-D")
    size = batch_size(level)
    if wdim is None and not by_freq:
        return wrap(call(op, (weight, to_front(indices, idim), padding_idx, False, sparse),
                         None), 0, level)
    weights = _stacked(weight, wdim, size)
    count = weights.shape[1]
    indices = _stacked(indices, idim, size)
    flat = weights.reshape(size * count, weights.shape[2])
    out = call(op, (flat, _offset(indices, size, count), -1, by_freq, sparse), None)
    if padding_idx >= 0:
        padding = (indices == padding_idx).unsqueeze(-1)
        out = out.detach().where(padding, out)
    return wrap(out, 0, level)


@rule("embedding_renorm_")
def embedding_renorm_(op, level, args, kwargs):
    """Renorming a shared weight by every sample's indices is renorming it by each sample's
    in turn (a renormed row is within ``max_norm`` and stays as it is)."""
    bound = op.bind(args, kwargs)
    self = bound["self"]
    weight, wdim = unwrap(self, level)
    indices, idim = unwrap(bound["indices"], level)
    options = (bound["max_norm"], bound["norm_type"])
    if wdim is None:
        call(op, (weight, to_front(indices, idim)) + options, None)
        return self
    size = batch_size(level)
    weights = to_front(weight, wdim)
    count = weights.shape[1]
    flat = weights.reshape(size * count, weights.shape[2])
    call(op, (flat, _offset(_stacked(indices, idim, size), size, count)) + options, None)
    if flat._storage is not weights._storage:     # the stacked rows were a copy
        weights.copy_(flat.view(weights.shape))
    return self
