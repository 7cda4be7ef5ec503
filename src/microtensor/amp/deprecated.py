"""PyTorch's deprecated per-device spellings ``cuda.amp.GradScaler(...)``,
``cuda.amp.autocast(...)`` and their ``cpu.amp`` twins: classes that warn and stand for
``amp.GradScaler(device, ...)`` and ``amp.autocast(device, ...)``, as PyTorch's do."""
import warnings

from microtensor import _settings
from microtensor.amp.grad_scaler import GradScaler


def _warn(name, device):
    warnings.warn(f"`microtensor.{device}.amp.{name}(args...)` is deprecated. Please use "
                  f"`microtensor.amp.{name}('{device}', args...)` instead.", FutureWarning,
                  stacklevel=3)


def device_amp(device, default_dtype):
    """``(GradScaler, autocast)`` of ``device``'s deprecated ``amp`` module."""

    class DeviceGradScaler(GradScaler):
        def __init__(self, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5,
                     growth_interval=2000, enabled=True):
            _warn("GradScaler", device)
            super().__init__(device, init_scale=init_scale, growth_factor=growth_factor,
                             backoff_factor=backoff_factor, growth_interval=growth_interval,
                             enabled=enabled)

    class DeviceAutocast(_settings.autocast):
        def __init__(self, enabled=True, dtype=default_dtype, cache_enabled=True):
            _warn("autocast", device)
            super().__init__(device, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)

    for cls, name in ((DeviceGradScaler, "GradScaler"), (DeviceAutocast, "autocast")):
        cls.__name__ = cls.__qualname__ = name
        cls.__module__ = f"microtensor.{device}.amp"
    return DeviceGradScaler, DeviceAutocast
