"""PyTorch's ``torch.backends`` switches that programs set before training
(``cudnn.benchmark``, ``cudnn.deterministic``, ``cuda.matmul.allow_tf32``, the
scaled-dot-product-attention kernels, ``mps.is_available()``): their values, checked as
PyTorch checks them, and the helpers that keep them.

microtensor has neither cuDNN nor TF32 products nor fused attention kernels: its float32
products are float32 and ``scaled_dot_product_attention`` is always the math one.  So a
flag is kept and read back and changes no result, which is what each flag permits (TF32,
"benchmark" algorithm choice) or asks for (determinism) anyway.
"""
import sys
import warnings


def check_bool(setter, value):
    """PyTorch's refusal of a flag that is not a bool (``1`` too)."""
    if not isinstance(value, bool):
        raise RuntimeError(f"{setter} expects a bool, but got {type(value).__name__}")


class BoolFlag:
    """A bool attribute of a flag module (or object), refusing other types with the name
    of PyTorch's setter."""

    def __init__(self, setter, default):
        self.setter, self.value = setter, default

    def __get__(self, obj, objtype=None):
        return self if obj is None else self.value

    def __set__(self, obj, value):
        check_bool(self.setter, value)
        self.value = value


def give_module_flags(module_name, flags_class):
    """Turns module ``module_name`` into an instance of ``flags_class`` (a ModuleType
    subclass holding ``BoolFlag`` s), so that ``module.flag = value`` is checked, as
    PyTorch's flag modules are."""
    sys.modules[module_name].__class__ = flags_class


# the scaled-dot-product-attention kernels that ``torch.backends.cuda`` and
# ``torch.nn.attention.sdpa_kernel`` switch on and off
SDP_KERNELS = {"flash": True, "mem_efficient": True, "math": True, "cudnn": True}


def set_sdp(kernel, enabled):
    check_bool(f"set_sdp_use_{kernel}", enabled)
    SDP_KERNELS[kernel] = enabled


def warn_deprecated_sdp_kernel():
    warnings.warn("`torch.backends.cuda.sdp_kernel()` is deprecated. In the future, this "
                  "context manager will be removed. Please see "
                  "`torch.nn.attention.sdpa_kernel()` for the new context manager, with "
                  "updated signature.", FutureWarning, stacklevel=3)
