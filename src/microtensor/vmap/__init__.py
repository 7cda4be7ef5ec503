"""vmap: run a function written for one sample on a whole batch (``torch.func.vmap``).

``batched`` holds the ``BatchedTensor`` and the active levels, ``rules`` the batching
rules the dispatcher hook applies, ``fallback`` the per-sample loop for ops without a
rule, and ``api`` the transform itself (and its hooks into autograd).
"""
from microtensor.vmap.api import vmap
from microtensor.vmap.batched import BatchedTensor

__all__ = ["vmap", "BatchedTensor"]
