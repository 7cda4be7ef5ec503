"""``microtensor.amp``, as ``torch.amp``: ``GradScaler``, loss scaling for low-precision
training."""
from microtensor.amp.grad_scaler import GradScaler

__all__ = ["GradScaler"]
