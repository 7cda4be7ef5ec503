"""Differential privacy: per-sample gradient clipping (``clipped_grad_sum``, by ghost
norms declared on the ops or through per-sample gradients)."""
from microtensor.privacy.clipping import clipped_grad_sum, ghost_plan

__all__ = ["clipped_grad_sum", "ghost_plan"]
