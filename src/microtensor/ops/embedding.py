"""Embedding lookups: ``embedding`` (rows of a weight picked by indices, PyTorch's
``torch.embedding``) and ``embedding_renorm_`` (``max_norm``: the rows looked up scaled
down in place to a norm of at most ``max_norm``), with ``embedding``'s derivative and its
ghost-norm rule (``microtensor.privacy``), and both ops' batching rules.

Batching: a shared weight with batched indices is one lookup over all samples' indices.
Per-sample weights (and a frequency-scaled gradient, whose counts are per sample) use one
lookup into the samples' weights stacked as rows ``(B * num_embeddings, dim)``, each
sample's indices offset to its own block; the padding row is then kept out of the gradient
by a mask, since it is a different row in each block.
"""
from microtensor._C.tensor import is_grad_enabled
from microtensor.ops import ghost
from microtensor.ops.factory import arange
from microtensor.ops.factory import tensor
from microtensor.ops.indexing import _is_integer_index, _out_of_range
from microtensor.ops.loops import _type_name, array_module
from microtensor.ops.registry import Sample, op
from microtensor.ops.shape import fresh_tensor
from microtensor.vmap.helpers import batch_size, call, front_or_expanded, same_level, wrap


def _check_indices(indices, argument, name):
    if not _is_integer_index(indices):
        raise RuntimeError(f"Expected tensor for argument {argument} 'indices' to have one of "
                           f"the following scalar types: Long, Int; but got "
                           f"torch.{_type_name(indices.dtype)}Tensor instead (while checking "
                           f"arguments for {name})")


def _positions(weight, indices):
    positions = indices._array()
    if _out_of_range(positions, 0, weight._sizes[0]) is not None:
        raise IndexError("index out of range in self")
    return positions


def _embedding_samples(make):
    return [Sample(make(5, 3), tensor([[0, 2, 2], [4, 1, 2]])),
            Sample(make(4, 2), tensor([3, 1, 3]), 1),
            Sample(make(4, 2), tensor([[3, 3, 0, 1]]), -1, True),
            Sample(make(6, 3), tensor([[5, 2, 5], [2, 2, 0]]), 2, True),
            Sample(make(3, 2), tensor(1))]


@op(inputs=("weight",), method=False, samples=_embedding_samples)
def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    """The rows of ``weight`` (num_embeddings, dim) that ``indices`` pick, shaped
    ``indices.shape + (dim,)``.  In the gradient, the ``padding_idx`` row gets nothing (-1:
    none) and, with ``scale_grad_by_freq``, each row's gradient is divided by how often
    the call picked it.  ``sparse`` is accepted; the gradient is always dense."""
    _check_indices(indices, "#1", "embedding")
    if weight.dim() != 2:
        raise RuntimeError("'weight' must be 2-D")
    if indices._numel and not weight._sizes[0]:     # PyTorch's index_select error
        raise RuntimeError("index_select(): self indexing axis dim should be positive")
    positions = _positions(weight, indices)
    rows = array_module(positions).take(weight._array(), positions.reshape(-1), axis=0)
    return fresh_tensor(rows.reshape(tuple(indices._sizes) + (weight._sizes[1],)))


def _row_gradients(grad, indices, padding_idx, scale_grad_by_freq):
    """``grad``'s rows, one per index, as ``embedding``'s backward weighs them (the
    padding row's zeroed, each divided by its index's count when scaling by frequency)."""
    picked = indices.reshape(-1)
    rows = grad.reshape(picked.shape[0], grad.shape[-1])
    if padding_idx >= 0:
        rows = rows * (picked != padding_idx).unsqueeze(-1).to(rows.dtype)
    if scale_grad_by_freq:
        counts = (picked.unsqueeze(-1) == picked.unsqueeze(0)).sum(-1)
        rows = rows / counts.unsqueeze(-1).to(rows.dtype)
    return picked, rows


@embedding.def_derivative("weight")
def embedding(grad, weight_shape, indices, padding_idx, scale_grad_by_freq):
    picked, rows = _row_gradients(grad, indices, padding_idx, scale_grad_by_freq)
    return grad.new_zeros(weight_shape).index_add(0, picked, rows)


def _offset(indices, size, rows):
    """Each sample's indices (batch first) moved to its block of ``rows`` rows."""
    shift = arange(size, dtype=indices.dtype, device=indices.device) * rows
    return indices + shift.reshape((size,) + (1,) * (indices.dim() - 1))


@embedding.def_batch_rule
def embedding(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    weight, indices = bound["weight"], bound["indices"]
    padding_idx, by_freq, sparse = (bound["padding_idx"], bound["scale_grad_by_freq"],
                                    bound["sparse"])
    if weight.dim() != 2:
        raise RuntimeError("'weight' must be 2-D")
    size = batch_size(level)
    indices = front_or_expanded(indices, level, size)
    if not same_level(weight, level) and not by_freq:
        return wrap(call(op, (weight, indices, padding_idx, False, sparse), None), 0, level)
    weights = front_or_expanded(weight, level, size)
    count = weights.shape[1]
    flat = weights.reshape(size * count, weights.shape[2])
    out = call(op, (flat, _offset(indices, size, count), -1, by_freq, sparse), None)
    if padding_idx >= 0:
        padding = (indices == padding_idx).unsqueeze(-1)
        out = out.detach().where(padding, out)
    return wrap(out, 0, level)


@embedding.def_norm_rule(activation="indices", params=("weight",))
def embedding(grad, indices, padding_idx, scale_grad_by_freq):
    # a row picked several times by one sample sums its gradients: a_t·a_s = [idx_t == idx_s]
    if scale_grad_by_freq:
        return NotImplemented
    count = indices.shape[0]
    picked = indices.reshape(count, -1)
    rows = grad.reshape(count, picked.shape[1], grad.shape[-1])
    if padding_idx >= 0:
        rows = rows * (picked != padding_idx).unsqueeze(-1).to(rows.dtype)
    return {"weight": ghost.index_gram_norms(picked, rows)}


def _renorm_samples(make):
    return [Sample(make(5, 3, low=-2, high=2), tensor([[0, 2], [4, 2]]), 1.0, 2.0),
            Sample(make(4, 2, low=-2, high=2), tensor([3, 1]), 0.5, 1.0),
            Sample(make(4, 2, low=-2, high=2), tensor([0, 1, 2]), 1.5, float("inf"))]


@op(inputs=(), method=False, kind="inplace", differentiable=False, samples=_renorm_samples)
def embedding_renorm_(self, indices, max_norm, norm_type):
    """Each row of ``self`` that ``indices`` pick (once, however often picked) whose
    ``norm_type``-norm exceeds ``max_norm`` is scaled to ``max_norm`` (PyTorch's
    ``max_norm / (norm + 1e-7)``), in place; returns ``self``."""
    _check_indices(indices, "#2", "embedding_renorm_")
    if is_grad_enabled() and self.requires_grad and self.is_leaf:
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place "
                           "operation.")
    if self.dim() != 2:
        raise RuntimeError("embedding_renorm_(): 'self' must be 2-D")
    if self._dtype.kind < 2:     # (neither floating nor complex)
        raise RuntimeError(f"norm(): input dtype should be either floating point or complex. "
                           f"Got {_type_name(self._dtype)} instead.")
    positions = _positions(self, indices).reshape(-1)
    target = self._array()
    # a row picked twice is scaled once: both writes carry the value computed from the
    # original row
    picked = target[positions]
    magnitude = array_module(picked).abs(picked)
    if norm_type == float("inf"):
        if not magnitude.shape[1]:
            raise RuntimeError("linalg.vector_norm cannot compute the inf norm on an empty "
                               "tensor because the operation does not have an identity")
        norms = magnitude.max(axis=1, keepdims=True)
    elif norm_type == 0:
        norms = (magnitude != 0).sum(axis=1, keepdims=True)
    else:
        norms = (magnitude ** norm_type).sum(axis=1, keepdims=True) ** (1.0 / norm_type)
    scale = array_module(picked).where(norms > max_norm, max_norm / (norms + 1e-7), 1.0)
    target[positions] = picked * scale.astype(picked.dtype)
    return self


@embedding_renorm_.def_batch_rule
def embedding_renorm_(op, level, args, kwargs):
    """Renorming a shared weight by every sample's indices is renorming it by each sample's
    in turn (a renormed row is within ``max_norm`` and stays as it is)."""
    bound = op.bind(args, kwargs)
    self = bound["self"]
    size = batch_size(level)
    indices = front_or_expanded(bound["indices"], level, size)
    options = (bound["max_norm"], bound["norm_type"])
    if not same_level(self, level):
        call(op, (self, indices) + options, None)
        return self
    weights = front_or_expanded(self, level, size)
    count = weights.shape[1]
    flat = weights.reshape(size * count, weights.shape[2])
    call(op, (flat, _offset(indices, size, count)) + options, None)
    if flat._storage is not weights._storage:     # the stacked rows were a copy
        weights.copy_(flat.view(weights.shape))
    return self


__all__ = ["embedding", "embedding_renorm_"]
