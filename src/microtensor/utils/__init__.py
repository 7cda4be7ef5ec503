"""Utilities around the tensor core, as ``torch.utils``: ``data`` (datasets and loaders) and
``checkpoint`` (activation checkpointing) and ``dlpack`` (exchange with other libraries)."""
from microtensor.utils import checkpoint, data, dlpack

__all__ = ["checkpoint", "data", "dlpack"]
