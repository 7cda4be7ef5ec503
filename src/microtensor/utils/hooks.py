"""``utils.hooks``, as PyTorch's ``torch.utils.hooks``: ``RemovableHandle``, what every
``register_*_hook`` returns (and what a custom hook registry can hand out), and
``BackwardHook``, which runs a module's full backward hooks.  Both live in
``microtensor.nn.hooks``."""
from microtensor.nn.hooks import BackwardHook, RemovableHandle

__all__ = ["BackwardHook", "RemovableHandle"]
