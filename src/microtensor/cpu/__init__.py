"""``microtensor.cpu``, as ``torch.cpu``: the device-module interface for the CPU, which
device-agnostic code reaches through ``getattr(torch, device.type)``.  There is one CPU
device, always available; streams and events exist for the interface's sake, and work on
the CPU is done by the time a call returns, so synchronising waits for nothing."""
import contextlib
import os
import platform

from microtensor.cpu import amp

__all__ = ["Event", "Stream", "StreamContext", "amp", "current_device", "current_stream",
           "device_count", "get_capabilities", "is_available", "is_initialized",
           "set_device", "stream", "synchronize"]


def is_available():
    return True


def is_initialized():
    return True


def device_count():
    return 1


def current_device():
    return "cpu"


def set_device(device):
    """Accepted: there is one CPU device."""


def synchronize(device=None):
    """Returns at once: CPU work is finished when its call returns."""


def get_capabilities():
    """The CPU's architecture, name and logical core count (a subset of PyTorch's keys;
    the name where the system tells it)."""
    capabilities = {"architecture": platform.machine(), "num_logical_cores": os.cpu_count(),
                    "cpu_name": platform.processor() or platform.machine()}
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    capabilities["cpu_name"] = line.split(":", 1)[1].strip()
                    break
    return capabilities


class Stream:
    """The CPU's one stream: work submitted to it is already done."""

    def __init__(self, priority=-1):
        self.priority = priority

    def wait_stream(self, stream):
        pass

    def wait_event(self, event):
        pass

    def record_event(self, event=None):
        return event if event is not None else Event()

    def query(self):
        return True

    def synchronize(self):
        pass


class Event:
    def __init__(self, enable_timing=False):
        self.enable_timing = enable_timing

    def query(self):
        return True

    def record(self, stream=None):
        pass

    def wait(self, stream=None):
        pass

    def synchronize(self):
        pass


_default_stream = Stream()


def current_stream(device=None):
    return _default_stream


class StreamContext(contextlib.AbstractContextManager):
    def __init__(self, stream):
        self.stream = stream

    def __exit__(self, *exc_info):
        return None


def stream(stream):
    return StreamContext(stream)
