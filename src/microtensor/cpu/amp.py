"""``cpu.amp``: PyTorch's deprecated spellings ``cpu.amp.GradScaler(...)`` and
``cpu.amp.autocast(...)`` (bfloat16 by default), which warn and stand for
``amp.GradScaler("cpu", ...)`` and ``amp.autocast("cpu", ...)``."""
from microtensor._C.tensor import bfloat16
from microtensor.amp.deprecated import device_amp

GradScaler, autocast = device_amp("cpu", bfloat16)

__all__ = ["GradScaler", "autocast"]
