"""``torch.backends.cudnn``: the flags programs set (``benchmark``, ``deterministic``,
``enabled``, ``allow_tf32``), kept and checked as PyTorch's, and changing nothing: there
is no cuDNN here (``is_available()`` is False, ``version()`` None)."""
import types

from microtensor.backends.flags import BoolFlag, give_module_flags


class _CudnnModule(types.ModuleType):
    enabled = BoolFlag("set_enabled_cudnn", True)
    benchmark = BoolFlag("set_benchmark_cudnn", False)
    deterministic = BoolFlag("set_deterministic_cudnn", False)
    allow_tf32 = BoolFlag("set_allow_tf32_cudnn", True)


give_module_flags(__name__, _CudnnModule)
benchmark_limit = 10


def is_available():
    return False


def version():
    return None
