"""vmap: run a function written for one sample on a whole batch (``torch.func.vmap``).

``batched`` holds the ``BatchedTensor`` and the active levels; ``helpers`` the tools every
batching rule uses (each op declares its own rule next to its kernel, in ``ops``);
``rules`` the dispatcher hook and the shared rules of the op families; ``fallback`` the
per-sample loop for ops without a rule; ``function`` the batching of user
``autograd.Function``s; and ``api`` the transform itself (and its hooks into the
dispatcher and autograd).

The transform loads on first use of ``vmap``: importing ``batched`` or ``helpers`` (which
the ops modules do while ``microtensor.ops`` is still being imported) must not import the
ops back.
"""
from microtensor.vmap.batched import BatchedTensor

__all__ = ["vmap", "BatchedTensor"]


def __getattr__(name):
    if name == "vmap":
        from microtensor.vmap.api import vmap
        return vmap
    raise AttributeError(f"module 'microtensor.vmap' has no attribute {name!r}")
