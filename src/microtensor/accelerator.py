"""``microtensor.accelerator``: PyTorch's device-agnostic questions about the accelerator,
which programs ask to pick their device (``current_accelerator().type if is_available()
else "cpu"``).  microtensor's one accelerator is CUDA (``microtensor.cuda``)."""
from microtensor import cuda as _cuda
from microtensor._C.tensor import device as _device


def is_available():
    """True when a CUDA device can be used."""
    return _cuda.is_available()


def current_accelerator(check_available=False):
    """``device("cuda")`` when microtensor has CUDA, else None (also with
    ``check_available`` when no device is usable)."""
    if not _cuda.is_available():
        return None
    return _device("cuda")


def device_count():
    """How many accelerator devices there are (0 without one)."""
    return _cuda.device_count() if _cuda.is_available() else 0


def current_device_index():
    """The current device's index; RuntimeError when there is no accelerator."""
    if not _cuda.is_available():
        raise RuntimeError("Cannot access accelerator device when none is available.")
    return _cuda.current_device()


def synchronize(device=None):
    """Wait for the accelerator's queued work; RuntimeError when there is none."""
    if not _cuda.is_available():
        raise RuntimeError("Cannot access accelerator device when none is available.")
    _cuda.synchronize(device)


__all__ = ["is_available", "current_accelerator", "device_count", "current_device_index",
           "synchronize"]
