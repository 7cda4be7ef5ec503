"""vmap: run a function written for one sample on a whole batch (``torch.func.vmap``).

``batched`` holds the ``BatchedTensor`` and the active levels, ``rules`` the batching
rules the dispatcher hook applies, ``fallback`` the per-sample loop for ops without a
rule, ``function`` the batching of user ``autograd.Function``s, and ``api`` the transform
itself (and its hooks into autograd).
"""
from microtensor.autograd import function as _autograd_function
from microtensor.vmap import function as _function
from microtensor.vmap.api import vmap
from microtensor.vmap.batched import BatchedTensor

_autograd_function.batched_apply = _function.batched_apply

__all__ = ["vmap", "BatchedTensor"]
