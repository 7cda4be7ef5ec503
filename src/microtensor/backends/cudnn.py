"""``torch.backends.cudnn``: the flags programs set (``benchmark``, ``deterministic``,
``enabled``, ``allow_tf32``), kept and checked as PyTorch's, and changing nothing: there
is no cuDNN here (``is_available()`` is False, ``version()`` None)."""
import contextlib
import sys
import types

from microtensor.backends.flags import BoolFlag, give_module_flags


class _CudnnModule(types.ModuleType):
    enabled = BoolFlag("set_enabled_cudnn", True)
    benchmark = BoolFlag("set_benchmark_cudnn", False)
    deterministic = BoolFlag("set_deterministic_cudnn", False)
    allow_tf32 = BoolFlag("set_allow_tf32_cudnn", True)


give_module_flags(__name__, _CudnnModule)
benchmark_limit = None


def is_available():
    return False


def version():
    return None


def is_acceptable(tensor):
    """Whether cuDNN would take ``tensor``: never, without cuDNN."""
    return False


@contextlib.contextmanager
def flags(enabled=False, benchmark=False, benchmark_limit=10, deterministic=False,
          allow_tf32=True):
    """Set the switches for the ``with`` block (checked as PyTorch checks them), and
    restore them after."""
    module = sys.modules[__name__]
    names = ("enabled", "benchmark", "benchmark_limit", "deterministic", "allow_tf32")
    saved = {name: getattr(module, name) for name in names}
    try:
        for name, value in zip(names, (enabled, benchmark, benchmark_limit, deterministic,
                                       allow_tf32)):
            setattr(module, name, value)
        yield
    finally:
        for name, value in saved.items():
            setattr(module, name, value)
