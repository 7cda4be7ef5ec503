"""``microtensor.utils.dlpack``: exchange tensors with other libraries through DLPack
(PyTorch's ``torch.utils.dlpack``).

``to_dlpack`` makes a capsule over a tensor's memory, and ``from_dlpack`` (also
``microtensor.from_dlpack``) makes a tensor over the memory of a capsule or of any object
exporting DLPack (a NumPy or CuPy array, a PyTorch tensor): no copy either way, so writes
show through both.  Tensors export themselves (``Tensor.__dlpack__``), so
``torch.from_dlpack(t)`` and ``numpy.from_dlpack(t)`` share ``t``'s memory too.
"""
import ctypes
import enum

import numpy as np

from microtensor.ops.factory import from_dlpack

__all__ = ["DLDeviceType", "from_dlpack", "to_dlpack"]


class DLDeviceType(enum.IntEnum):
    """DLPack's device types (the numbers of ``__dlpack_device__``)."""
    kDLCPU = 1
    kDLCUDA = 2
    kDLCUDAHost = 3
    kDLOpenCL = 4
    kDLVulkan = 7
    kDLMetal = 8
    kDLVPI = 9
    kDLROCM = 10
    kDLROCMHost = 11
    kDLExtDev = 12
    kDLCUDAManaged = 13
    kDLOneAPI = 14
    kDLWebGPU = 15
    kDLHexagon = 16
    kDLMAIA = 17


def to_dlpack(tensor):
    """A DLPack capsule (``"dltensor"``) over ``tensor``'s memory, for a consumer to take
    once; as PyTorch's, it ignores autograd (the tensor's data, detached)."""
    return tensor.detach().__dlpack__()


_UNUSABLE_CAPSULE = ("from_dlpack received an invalid capsule. Note that DLTensor capsules "
                     "can be consumed only once, so you might have already constructed a "
                     "tensor from it once.")


class CapsuleExporter:
    """What ``numpy.from_dlpack`` and CuPy consume: an object exporting a capsule that a
    producer's ``to_dlpack`` made (its device read from the ``DLTensor`` it holds)."""

    def __init__(self, capsule):
        get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
        get_pointer.restype, get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object,
                                                                      ctypes.c_char_p]
        is_valid = ctypes.pythonapi.PyCapsule_IsValid
        is_valid.restype, is_valid.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]
        if not is_valid(capsule, b"dltensor"):
            raise RuntimeError(_UNUSABLE_CAPSULE)
        # DLManagedTensor begins with its DLTensor: a data pointer, then DLDevice (two int32)
        address = get_pointer(capsule, b"dltensor") + ctypes.sizeof(ctypes.c_void_p)
        device = (ctypes.c_int32 * 2).from_address(address)
        self.device = (int(device[0]), int(device[1]))
        self.capsule = capsule

    def __dlpack__(self, **kwargs):
        return self.capsule

    def __dlpack_device__(self):
        return self.device

    def host_array(self):
        """The capsule's CPU memory as a writable NumPy array (NumPy imports a capsule
        without a version read-only; PyTorch's import of one is writable), which keeps
        NumPy's import, and so the producer's memory, alive."""
        imported = np.from_dlpack(self)
        sizes, strides = imported.shape, imported.strides
        low = sum((n - 1) * s for n, s in zip(sizes, strides) if s < 0)
        high = sum((n - 1) * s for n, s in zip(sizes, strides) if s > 0) + imported.itemsize
        if imported.size == 0:
            return np.empty(sizes, imported.dtype)
        memory = (ctypes.c_char * (high - low)).from_address(imported.ctypes.data + low)
        memory.owner = imported
        return np.ndarray(sizes, imported.dtype, buffer=memory, offset=-low, strides=strides)
