"""Utilities around the tensor core, as ``torch.utils``: ``data`` (datasets and loaders)."""
from microtensor.utils import data

__all__ = ["data"]
