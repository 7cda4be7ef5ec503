"""PyTorch's ``torch.signal``: the window functions of ``signal.windows``."""
from microtensor.signal import windows  # noqa: F401

__all__ = ["windows"]
