"""Utilities around the tensor core, as ``torch.utils``: ``data`` (datasets and loaders) and
``checkpoint`` (activation checkpointing)."""
from microtensor.utils import checkpoint, data

__all__ = ["checkpoint", "data"]
