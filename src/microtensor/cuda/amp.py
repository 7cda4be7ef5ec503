"""``cuda.amp``: PyTorch's deprecated spellings ``cuda.amp.GradScaler(...)`` and
``cuda.amp.autocast(...)``, which warn and stand for ``amp.GradScaler("cuda", ...)`` and
``amp.autocast("cuda", ...)``, as PyTorch's do."""
from microtensor._C.tensor import float16
from microtensor.amp.deprecated import device_amp

GradScaler, autocast = device_amp("cuda", float16)

__all__ = ["GradScaler", "autocast"]
