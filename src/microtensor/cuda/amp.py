"""``cuda.amp``: PyTorch's deprecated spellings ``cuda.amp.GradScaler(...)`` and
``cuda.amp.autocast(...)``, which warn and stand for ``amp.GradScaler("cuda", ...)`` and
``amp.autocast("cuda", ...)``, as PyTorch's do."""
import warnings

from microtensor import _settings
from microtensor import amp as _amp
from microtensor._C.tensor import float16


class GradScaler(_amp.GradScaler):
    def __init__(self, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, enabled=True):
        warnings.warn("`microtensor.cuda.amp.GradScaler(args...)` is deprecated. Please use "
                      "`microtensor.amp.GradScaler('cuda', args...)` instead.", FutureWarning,
                      stacklevel=2)
        super().__init__("cuda", init_scale=init_scale, growth_factor=growth_factor,
                         backoff_factor=backoff_factor, growth_interval=growth_interval,
                         enabled=enabled)


class autocast(_settings.autocast):
    def __init__(self, enabled=True, dtype=float16, cache_enabled=True):
        warnings.warn("`microtensor.cuda.amp.autocast(args...)` is deprecated. Please use "
                      "`microtensor.amp.autocast('cuda', args...)` instead.", FutureWarning,
                      stacklevel=2)
        super().__init__("cuda", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


__all__ = ["GradScaler", "autocast"]
