"""Helpers the distributions share (PyTorch's ``torch.distributions.utils``): broadcasting
parameters, converting between probabilities and logits, lazily computed properties, and
the all-samples validity test that lets argument validation run inside ``vmap``."""
from numbers import Number

import numpy as np

import microtensor as mt
from microtensor.ops.factory import default_generator
from microtensor.vmap.batched import BatchedTensor, active_levels

__all__ = ["broadcast_all", "logits_to_probs", "clamp_probs", "probs_to_logits",
           "lazy_property", "tril_matrix_to_vec", "vec_to_tril_matrix"]

euler_constant = 0.57721566490153286060  # Euler Mascheroni Constant


def broadcast_all(*values):
    """``values`` (tensors or numbers) as tensors broadcast together; numbers take the dtype
    and device of the first tensor, or the default dtype when all are numbers."""
    if not all(isinstance(v, (mt.Tensor, Number)) for v in values):
        raise ValueError("Input arguments must all be instances of Number or "
                         "microtensor.Tensor.")
    if not all(isinstance(v, mt.Tensor) for v in values):
        options = dict(dtype=mt.get_default_dtype())
        for value in values:
            if isinstance(value, mt.Tensor):
                options = dict(dtype=value.dtype, device=value.device)
                break
        values = [v if isinstance(v, mt.Tensor) else mt.tensor(v, **options) for v in values]
    return mt.broadcast_tensors(*values)


def batch_shape_of(given, broadcast):
    """The batch shape of a distribution whose parameters were ``given`` and broadcast to
    ``broadcast`` (one of them): empty when every parameter was a Python number."""
    return mt.Size() if all(isinstance(v, Number) for v in given) else broadcast.size()


def sum_rightmost(value, dim):
    """``value`` with its ``dim`` rightmost dimensions summed out."""
    if dim == 0:
        return value
    return value.reshape(tuple(value.shape[:-dim]) + (-1,)).sum(-1)


def logits_to_probs(logits, is_binary=False):
    """Probabilities from log-odds (``is_binary``) or from unnormalised log-probabilities
    along the last dimension."""
    if is_binary:
        return mt.sigmoid(logits)
    return mt.softmax(logits, dim=-1)


def clamp_probs(probs):
    """``probs`` clamped into ``[eps, 1 - eps]`` (``eps`` of its dtype)."""
    eps = mt.finfo(probs.dtype).eps
    return probs.clamp(min=eps, max=1 - eps)


def probs_to_logits(probs, is_binary=False):
    """Log-odds (``is_binary``) or log-probabilities of (clamped) probabilities."""
    ps_clamped = clamp_probs(probs)
    if is_binary:
        return mt.log(ps_clamped) - mt.log1p(-ps_clamped)
    return mt.log(ps_clamped)


class lazy_property:
    """A property computed on first access (with grad enabled) and then stored on the
    instance, so that a distribution built from ``probs`` derives ``logits`` only when
    asked."""

    def __init__(self, wrapped):
        self.wrapped = wrapped
        self.__doc__ = wrapped.__doc__
        self.__name__ = wrapped.__name__

    def __get__(self, instance, obj_type=None):
        if instance is None:
            return self
        with mt.enable_grad():
            value = self.wrapped(instance)
        setattr(instance, self.wrapped.__name__, value)
        return value


class BinaryProbsLogits:
    """``probs`` and ``logits`` (log-odds) of a distribution over two outcomes, each derived
    from the other on first access, and ``param_shape``: the shape of the one given
    (``_param``)."""

    @lazy_property
    def logits(self):
        return probs_to_logits(self.probs, is_binary=True)

    @lazy_property
    def probs(self):
        return logits_to_probs(self.logits, is_binary=True)

    @property
    def param_shape(self):
        return self._param.size()


def physical(t):
    """``t``'s values across every ``vmap`` sample (its physical tensor), for a decision
    that must hold for all samples at once."""
    while type(t) is BatchedTensor:
        t = t._value
    return t


def is_all_true(valid):
    """Whether every entry of the boolean tensor ``valid`` is true, across every ``vmap``
    sample too (as torch.func's rule for ``_is_all_true``): validation may then run on
    batched parameters, and refuses if any sample is invalid."""
    return bool(physical(valid).all())


def numpy_rng(what):
    """The NumPy generator behind microtensor's default generator: samplers that have no
    microtensor kernel (gamma, Poisson, binomial) draw from it, so ``mt.manual_seed`` makes
    them reproducible. Inside ``vmap`` such a draw could honour neither ``randomness``
    mode nor per-sample parameters, so it is refused there."""
    if active_levels():
        raise RuntimeError(f"vmap: {what} draws its samples with NumPy's generator, which "
                           "cannot run inside vmap; draw the samples outside vmap")
    return default_generator._rng


def from_numpy_like(values, like):
    """NumPy ``values`` as a tensor of ``like``'s dtype and device."""
    return mt.tensor(np.asarray(values), dtype=like.dtype, device=like.device)



def given_probs_or_logits(probs, logits):
    """``(name, value)`` of the one of ``probs``/``logits`` given; refuses both or
    neither."""
    if (probs is None) == (logits is None):
        raise ValueError("Either `probs` or `logits` must be specified, but not both.")
    return ("probs", probs) if probs is not None else ("logits", logits)


def probs_or_logits(probs, logits):
    """The one of ``probs``/``logits`` given, as a broadcast tensor, its name, and whether
    it was a Python number (which makes an empty batch shape); refuses both or neither."""
    name, value = given_probs_or_logits(probs, logits)
    (param,) = broadcast_all(value)
    return param, name, isinstance(value, Number)


def count_and_probs_or_logits(total_count, probs, logits):
    """``(total_count, parameter, name)`` for the count distributions: the given one of
    ``probs``/``logits`` broadcast with ``total_count``, which takes its dtype."""
    name, value = given_probs_or_logits(probs, logits)
    total_count, param = broadcast_all(total_count, value)
    return total_count.type_as(param), param, name


def _tril_flat_indices(n, diag, device):
    """Positions in a flattened ``n x n`` matrix of the entries on or below diagonal
    ``diag``, row by row."""
    rows, cols = mt.tril_indices(n, n, offset=diag, device=device)
    return rows * n + cols


def tril_matrix_to_vec(mat, diag=0):
    """The entries of (a batch of) square ``mat`` on or below diagonal ``diag``, row by
    row, as vectors."""
    n = mat.shape[-1]
    if diag < -n or diag >= n:
        raise ValueError(f"diag ({diag}) provided is outside [{-n}, {n - 1}].")
    flat = mat.reshape(tuple(mat.shape[:-2]) + (n * n,))
    return flat.index_select(-1, _tril_flat_indices(n, diag, mat.device))


def vec_to_tril_matrix(vec, diag=0):
    """The inverse of ``tril_matrix_to_vec``: square matrices, zero above diagonal
    ``diag``."""
    # n solves n (n + 1) / 2 + diag n + ... = len(vec) for a diagonal offset diag
    n = (-(1 + 2 * diag) + ((1 + 2 * diag) ** 2 + 8 * vec.shape[-1]
                            + 4 * abs(diag) * (diag + 1)) ** 0.5) / 2
    eps = mt.finfo(vec.dtype).eps
    if round(n) - n > eps:
        raise ValueError(f"The size of last dimension is {vec.shape[-1]} which cannot be "
                         "expressed as the lower triangular part of a square D x D matrix.")
    n = round(n)
    flat = vec.new_zeros(tuple(vec.shape[:-1]) + (n * n,))
    flat = flat.index_copy(-1, _tril_flat_indices(n, diag, vec.device), vec)
    return flat.reshape(tuple(vec.shape[:-1]) + (n, n))
