"""``microtensor.fft``: PyTorch's ``torch.fft`` namespace, the functions of
``microtensor.ops.fft`` (``fft_<name>`` in the registry)."""
from microtensor._tensor import _function
from microtensor.ops.fft import NAMES as _NAMES
from microtensor.ops.registry import REGISTRY as _REGISTRY

globals().update({name: _function(_REGISTRY["fft_" + name]) for name in _NAMES})

__all__ = list(_NAMES)
