"""The arithmetic the ops' ghost-norm rules share (``Op.def_norm_rule``, used by
``microtensor.privacy``): per-sample squared norms of gradients that are sums of outer
products, computed from activations and output gradients without forming one gradient
per sample.  Every tensor here carries the batch of samples first.
"""
import math

from microtensor.ops.registry import REGISTRY

# the direct path forms per-sample products in chunks of at most this many elements (or
# the size of the operands, if larger): memory of the order of the activations
_CHUNK_ELEMENTS = 1 << 20


def squared_norms(t):
    """``‖t_i‖²`` for each sample ``i`` of ``t`` ([B, ...] -> [B]), as one batched dot
    product (no squared copy of ``t``)."""
    rows = t.reshape(t.shape[0], -1)
    return rows.unsqueeze(1).matmul(rows.unsqueeze(-1)).reshape(t.shape[0])


def sum_except(t, keep):
    """``t`` ([B, ...]) summed over every dim except the batch and the dims in ``keep``."""
    dims = tuple(d for d in range(1, t.dim()) if d not in keep)
    return t.sum(dims) if dims else t


def outer_product_norms(a, g):
    """``‖Σ_t a_t g_tᵀ‖²`` per sample, summed over groups: ``a`` [B, (G,) T, i] holds each
    sample's input rows, ``g`` [B, (G,) T, o] the gradients of its output rows.

    By ``‖Σ_t a_t g_tᵀ‖² = Σ_{t,s} (a_t·a_s)(g_t·g_s)`` the two Gram matrices (T² numbers a
    sample) give it; when ``i·o`` is below ``T²`` the product ``gᵀa`` itself is cheaper, as
    Opacus chooses, formed in chunks of samples so that memory stays near the operands'."""
    rows, width, outs = a.shape[-2], a.shape[-1], g.shape[-1]
    if rows == 1:
        return sum_except((a * a).sum(-1) * (g * g).sum(-1), ())
    if rows * rows <= width * outs:
        grams = a.matmul(a.mT) * g.matmul(g.mT)
        return grams.reshape(grams.shape[0], -1).sum(1)
    return by_chunks(lambda rows, grads: squared_norms(grads.mT.matmul(rows)),
                     math.prod(g.shape[1:-2]) * width * outs, a.numel() + g.numel(), a, g)


def by_chunks(fn, per_sample, budget, *tensors):
    """``fn`` over chunks of samples of ``tensors``, the results ([chunk]) joined, each
    chunk sized so that ``per_sample`` elements a sample stay within ``budget`` (or
    ``_CHUNK_ELEMENTS``, if larger)."""
    count = tensors[0].shape[0]
    chunk = max(1, max(_CHUNK_ELEMENTS, budget) // max(per_sample, 1))
    if chunk >= count:
        return fn(*tensors)
    return REGISTRY["cat"]([fn(*(t[i:i + chunk] for t in tensors))
                            for i in range(0, count, chunk)])


def index_gram_norms(indices, g):
    """``‖Σ_t e_{idx_t} g_tᵀ‖²`` per sample (an embedding's gradient, rows picked by
    ``indices`` [B, T]): ``a_t·a_s`` is ``[idx_t == idx_s]``."""
    same = indices.unsqueeze(-1) == indices.unsqueeze(-2)
    grams = g.matmul(g.mT) * same.to(g.dtype)
    return grams.reshape(grams.shape[0], -1).sum(1)


__all__ = ["squared_norms", "sum_except", "outer_product_norms", "by_chunks",
           "index_gram_norms"]
