"""What a batching rule is written with: the helpers every rule shares.

Rules live with their ops (``@my_op.def_batch_rule`` in ``microtensor/ops/*.py``); they
import everything they need from here.  This module imports only ``vmap.batched``,
``vmap.fallback`` and the dispatcher, never an ops module, so that the ops modules can
import it at module level while ``microtensor.ops`` is being imported.

Vocabulary: a *logical* (per-sample) tensor is what the user's function sees; its
*physical* value (``unwrap``) holds every sample, the batch dim at ``bdim``.  A rule for
level ``L`` unwraps level ``L`` only, calls ops on physical values (``call``: through the
dispatcher, so autograd records them and lower vmap levels batch them again) and wraps
the result (``wrap``).
"""
from microtensor._C.meta import strides_for_format
from microtensor._C.tensor import TensorBase
from microtensor.ops.dispatch import call
from microtensor.vmap.batched import (BatchedTensor, aligned, batch_size, to_front, unwrap,
                                      wrap)
from microtensor.vmap.fallback import fallback, no_fallback

__all__ = ["BatchedTensor", "actual_dim", "aligned", "batch_size", "call", "empty_per_sample",
           "every_level_in_front",
           "fallback", "front_or_expanded", "inplace_error", "no_fallback", "same_level",
           "to_front", "unwrap", "wrap", "wrap_result"]


def same_level(a, level):
    """Whether ``a`` is batched at ``level`` (the level the running rule unwraps)."""
    return type(a) is BatchedTensor and a._level == level


def actual_dim(d, bdim):
    """The physical dim of per-sample dim ``d`` (wrapped) when the batch dim is ``bdim``."""
    return d if d < bdim else d + 1


def front_or_expanded(t, level, size):
    """``t`` physically with the batch dim first: moved there if batched, else expanded
    (stride 0, no copy)."""
    if same_level(t, level):
        return to_front(t._value, t._bdim)
    return t.unsqueeze(0).expand((size,) + tuple(t.shape))


def every_level_in_front(t, levels):
    """``t`` physically with one leading dim per vmap level of ``levels`` (outermost
    first): the level's batch dim where ``t`` is batched there, a size-1 dim where it is
    not; and whether it was batched at each level.  For what depends on every sample at
    once (a random op's draws, whether any sample's loop goes on)."""
    batched = []
    for lv in reversed(levels):          # innermost first: each moves in front of the last
        value, bdim = unwrap(t, lv.number)
        batched.append(bdim is not None)
        t = value.unsqueeze(0) if bdim is None else value.movedim(bdim, 0)
    return t, batched[::-1]


def wrap_result(result, bdim, level):
    """``wrap`` for a result that may be a tuple (or named tuple) of tensors and others."""
    if isinstance(result, TensorBase):
        return wrap(result, bdim, level)
    if isinstance(result, tuple):
        wrapped = [wrap(r, bdim, level) if isinstance(r, TensorBase) else r for r in result]
        return type(result)(*wrapped) if hasattr(result, "_fields") else tuple(wrapped)
    return result


def inplace_error(name):
    """PyTorch's error for an in-place op whose ``self`` is not batched while another
    argument is: ``self`` cannot hold every sample's result."""
    return RuntimeError(
        f"vmap: {name}(self, *extra_args) is not possible because there exists a Tensor "
        "`other` in extra_args that has more elements than `self`. This happened due to "
        "`other` being vmapped over but `self` not being vmapped over in a vmap. Please try "
        f"to use out-of-place operators instead of {name}. If said operator is being called "
        "inside the microtensor framework, please file a bug report instead.")


def empty_per_sample(value, sample_sizes, memory_format, dtype=None, device=None):
    """A fresh physical tensor, batch dim outermost, each sample laid out in
    ``memory_format`` (the channels-last formats act on the sample's own dims)."""
    strides = strides_for_format(tuple(sample_sizes), memory_format)
    numel = 1
    for s in sample_sizes:
        numel *= s
    kwargs = {}
    if dtype is not None:
        kwargs["dtype"] = dtype
    if device is not None:
        kwargs["device"] = device
    return value.new_empty_strided((value.shape[0],) + tuple(sample_sizes),
                                   (numel,) + tuple(strides), **kwargs)
