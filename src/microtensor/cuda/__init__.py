"""``microtensor.cuda``: questions about the GPUs (``is_available``, ``synchronize`` ...).

The work is done by ``microtensor.backends.cuda``; this module is the public face, shaped
like ``torch.cuda``.  Every query answers without CuPy or a GPU; only ``synchronize`` and
``current_device`` need one.
"""
from microtensor.backends import cuda as _backend


def is_available():
    """True when CuPy is installed and sees at least one GPU (never raises)."""
    return _backend.is_available()


def device_count():
    return _backend.device_count()


def current_device():
    from microtensor._C.tensor import device
    return _backend.resolve_device(device("cuda")).index


def synchronize(device=None):
    """Wait for every queued kernel on ``device`` (default: the current GPU) to finish."""
    _backend.synchronize(device)


def manual_seed(seed):
    """Nothing to seed: microtensor's CUDA tensors draw from the one default generator,
    which ``microtensor.manual_seed`` seeds (programs that seed CUDA seed that too)."""
    int(seed)   # a seed that is no integer is refused, as by PyTorch


def manual_seed_all(seed):
    """As ``manual_seed``: every device shares the default generator."""
    int(seed)   # a seed that is no integer is refused, as by PyTorch


def empty_cache():
    """Hand CuPy's cached, unused GPU blocks back to the device (nothing to do before a
    CUDA tensor was made)."""
    if _backend._cupy is not None:
        _backend._cupy.get_default_memory_pool().free_all_blocks()


from microtensor.cuda import amp  # noqa: E402

__all__ = ["is_available", "device_count", "current_device", "synchronize", "manual_seed",
           "manual_seed_all", "empty_cache", "amp"]
