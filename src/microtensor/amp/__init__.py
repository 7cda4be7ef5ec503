"""``microtensor.amp``, as ``torch.amp``: ``GradScaler``, loss scaling for low-precision
training, and ``autocast`` (which casts nothing: see ``microtensor.autocast``)."""
from microtensor._settings import autocast
from microtensor.amp.grad_scaler import GradScaler

__all__ = ["GradScaler", "autocast"]
