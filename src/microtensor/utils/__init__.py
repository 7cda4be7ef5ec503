"""Utilities around the tensor core, as ``torch.utils``: ``data`` (datasets and loaders),
``checkpoint`` (activation checkpointing), ``dlpack`` (exchange with other libraries) and
``hooks`` (the handles hooks return)."""
from microtensor.utils import checkpoint, data, dlpack, hooks

__all__ = ["checkpoint", "data", "dlpack"]
__all__ += ["hooks"]
