"""``backends.cudnn``: PyTorch's cuDNN switches, for the programs that set them
(``torch.backends.cudnn.benchmark = True`` opens most vision scripts).

microtensor has no cuDNN (its GPU convolutions are CuPy array code): ``is_available()`` is
False and the switches hold what is set without changing any computation, as PyTorch's do
on a machine without cuDNN.
"""
import contextlib

enabled = True
benchmark = False
benchmark_limit = None
deterministic = False
allow_tf32 = True

_FLAGS = ("enabled", "benchmark", "benchmark_limit", "deterministic", "allow_tf32")


def is_available():
    """False: microtensor does not use cuDNN."""
    return False


def version():
    """None: no cuDNN library is loaded."""
    return None


def is_acceptable(tensor):
    """Whether cuDNN would take ``tensor``: never, without cuDNN."""
    return False


@contextlib.contextmanager
def flags(enabled=False, benchmark=False, benchmark_limit=10, deterministic=False,
          allow_tf32=True):
    """Set the switches for the ``with`` block, and restore them after."""
    saved = {name: globals()[name] for name in _FLAGS}
    globals().update(enabled=enabled, benchmark=benchmark, benchmark_limit=benchmark_limit,
                     deterministic=deterministic, allow_tf32=allow_tf32)
    try:
        yield
    finally:
        globals().update(saved)
