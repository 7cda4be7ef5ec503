"""The CUDA backend: storages that are CuPy arrays in GPU memory.

A CUDA ``Storage`` holds a flat 1-D ``cupy.ndarray``.  ``array_view`` turns a tensor's
metadata (sizes, strides in elements, storage offset) into a zero-copy strided
``cupy.ndarray`` over that buffer, so the op kernels, which call NumPy functions on
``Tensor._array()``, reach CuPy's kernels through NumPy's ``__array_ufunc__`` /
``__array_function__`` protocols without GPU-specific code.  This module also owns
allocation, the strided (casting) copy, host <-> device transfers and DLPack import.

CuPy is optional: it is imported on first use, never when ``microtensor`` is imported.
"""
import contextlib

from microtensor._C import meta
from microtensor._C.tensor import Storage, device, dtype_from_numpy, wrap_storage
from microtensor.backends.flags import (SDP_KERNELS, BoolFlag, check_bool, set_sdp,
                                        warn_deprecated_sdp_kernel)

_cupy = None   # the cupy module once a CUDA tensor has been asked for

_NO_CUDA = ("CUDA is not available: microtensor's GPU backend needs CuPy and an NVIDIA GPU "
            "(pip install 'microtensor[cuda]')")

# DLPack device types (dlpack.h): where an exported buffer lives
DLPACK_CPU, DLPACK_CUDA, DLPACK_CUDA_HOST, DLPACK_CUDA_MANAGED = 1, 2, 3, 13


def _try_import():
    global _cupy
    if _cupy is None:
        try:
            import cupy
        except Exception:  # not installed, or installed without a usable CUDA runtime
            return None
        _cupy = cupy
    return _cupy


def cupy():
    """The cupy module; RuntimeError when CUDA tensors cannot exist here."""
    if not is_available():
        raise RuntimeError(_NO_CUDA)
    return _cupy


def device_count():
    """How many GPUs CuPy sees (0 without CuPy, a driver or a GPU; never raises)."""
    cp = _try_import()
    if cp is None:
        return 0
    try:
        return cp.cuda.runtime.getDeviceCount()
    except Exception:
        return 0


def is_available():
    return device_count() > 0


def synchronize(dev=None):
    """Wait until every kernel queued on ``dev`` (default: the current GPU) has finished."""
    cp = cupy()
    if dev is None:
        dev = device("cuda")
    elif isinstance(dev, int):
        dev = device("cuda", dev)
    cp.cuda.Device(resolve_device(device(dev)).index).synchronize()


def resolve_device(dev):
    """``dev`` with its index filled in (``cuda`` -> ``cuda:<current>``), checked to exist."""
    cp = cupy()
    index = dev.index if dev.index is not None else cp.cuda.runtime.getDevice()
    if index >= device_count():
        raise RuntimeError(f"CUDA error: invalid device ordinal (device index {index}, "
                           f"{device_count()} devices available)")
    return dev if dev.index is not None else device("cuda", index)


def is_device_array(x):
    """True for a CuPy array (without importing CuPy when no one has used it yet)."""
    return _cupy is not None and isinstance(x, _cupy.ndarray)


# --------------------------------------------------------------------------- memory

def empty_buffer(n, np_dtype, dev):
    """A fresh flat buffer of ``n`` elements on GPU ``dev`` (contents undefined)."""
    cp = cupy()
    with cp.cuda.Device(dev.index or 0):
        return cp.empty(n, dtype=np_dtype)


def array_view(t):
    """A zero-copy strided ``cupy.ndarray`` over exactly ``t``'s elements."""
    cp = _cupy
    buf = t._storage.data
    item = t._dtype.itemsize
    dt = t._dtype.np     # the storage's, or another that a view reads it as (view_as_real)
    if t._numel == 0:
        return cp.ndarray(t._sizes, dtype=dt)
    return cp.ndarray(t._sizes, dtype=dt, memptr=buf.data + t._offset * item,
                      strides=tuple(s * item for s in t._strides))


def from_device_array(arr, dev=None):
    """A tensor sharing ``arr``'s GPU memory (a CuPy array); negative strides are copied."""
    cp = _cupy
    dt = dtype_from_numpy(arr.dtype)
    item = dt.itemsize
    if any(s < 0 or s % item for s in arr.strides):
        arr = cp.ascontiguousarray(arr)
    sizes = tuple(arr.shape)
    # like PyTorch (not NumPy/CuPy), empty tensors get contiguous strides
    strides = tuple(s // item for s in arr.strides) if arr.size else \
        tuple(meta.contiguous_strides(sizes))
    extent = 1 + sum((n - 1) * s for n, s in zip(sizes, strides)) if arr.size else 0
    flat = cp.ndarray((extent,), dtype=arr.dtype, memptr=arr.data, strides=(item,)) \
        if extent else cp.empty(0, dtype=arr.dtype)
    dev = dev or device("cuda", arr.device.id)
    return wrap_storage(Storage(flat, dev), sizes, strides, 0, dt)


def from_result(arr, dt=None):
    """A new tensor owning a CuPy array that a kernel computed (copied if it is a view)."""
    if dt is not None and arr.dtype != dt.np:
        arr = arr.astype(dt.np)
    if arr.base is not None or not arr.flags.c_contiguous:
        arr = arr.copy(order="C")
    return from_device_array(arr)


def scalar_operand(x):
    """A 0-d CPU tensor mixed into a GPU op becomes a Python number (CuPy refuses host
    arrays; the op's result dtype was already promoted with the tensor's dtype)."""
    return x._array().item()


# --------------------------------------------------------------------------- copies

def copy_(dst, dst_arr, src_arr):
    """Copy (casting) ``src_arr`` into ``dst_arr``: any strides, both on ``dst``'s GPU."""
    cp = _cupy
    if cp.may_share_memory(dst_arr, src_arr):
        src_arr = src_arr.copy()
    cp.copyto(dst_arr, src_arr, casting="unsafe")


def copy_between_devices(dst, src):
    """``dst.copy_(src)`` where the two live on different devices (host <-> GPU, GPU <-> GPU).

    The data crosses as a contiguous block; the layout change and the cast run on the side
    that receives it."""
    cp = cupy()
    from microtensor._C import kernels
    if src.device.type == "cpu":
        host = src._array()
        with cp.cuda.Device(dst.device.index or 0):
            staged = cp.asarray(host)
            staged = cp.broadcast_to(staged, dst._sizes)
            copy_(dst, dst._array(), staged)
        return
    with cp.cuda.Device(src.device.index or 0):
        host = cp.asnumpy(src._array())
    if dst.device.type == "cpu":
        import numpy as np
        kernels.copy_(dst._array(), np.broadcast_to(host, dst._sizes))
        return
    with cp.cuda.Device(dst.device.index or 0):
        copy_(dst, dst._array(), cp.broadcast_to(cp.asarray(host), dst._sizes))


# --------------------------------------------------------------------------- DLPack

def from_dlpack(ext_tensor):
    """A tensor sharing the GPU memory of an object exporting CUDA DLPack (CuPy, PyTorch...)."""
    cp = cupy()
    arr = ext_tensor if isinstance(ext_tensor, cp.ndarray) else cp.from_dlpack(ext_tensor)
    return from_device_array(arr)


def dlpack_export(arr, stream, max_version, dl_device, copy):
    """``arr.__dlpack__`` passing only the arguments the caller gave (older CuPy releases
    accept fewer keywords)."""
    kwargs = {k: v for k, v in (("max_version", max_version), ("dl_device", dl_device),
                                ("copy", copy)) if v is not None}
    return arr.__dlpack__(stream=stream, **kwargs)


# --------------------------------------------------------------------------- PyTorch's flags
# ``torch.backends.cuda``'s switches (see backends/flags.py): kept, checked, changing nothing.

def is_built():
    """Whether CUDA tensors are supported by this installation (CuPy importable), not
    whether a GPU is there (``is_available``)."""
    return _try_import() is not None


class _CuBLASModule:
    """``torch.backends.cuda.matmul``.  ``allow_tf32`` is the float32 matmul precision's
    other face, as in PyTorch: True is "high", False "highest"."""

    allow_fp16_reduced_precision_reduction = True
    allow_bf16_reduced_precision_reduction = True
    allow_fp16_accumulation = BoolFlag("set_allow_fp16_accumulation_cublas", False)

    @property
    def allow_tf32(self):
        from microtensor import _settings   # at import time this would cycle through ops
        return _settings.get_float32_matmul_precision() != "highest"

    @allow_tf32.setter
    def allow_tf32(self, value):
        from microtensor import _settings
        check_bool("set_allow_tf32_cublas", value)
        _settings.set_float32_matmul_precision("high" if value else "highest")

    def __setattr__(self, name, value):
        if name.endswith("_reduced_precision_reduction") and hasattr(self, name):
            if not (isinstance(value, bool) or isinstance(value, (tuple, list)) and
                    all(isinstance(v, bool) for v in value)):
                raise TypeError(f"{name} expects a bool or a tuple/list of bools, but got "
                                f"{type(value)}")
        elif not hasattr(type(self), name):
            raise AttributeError(f"Unknown attribute {name}")
        super().__setattr__(name, value)


matmul = _CuBLASModule()


def flash_sdp_enabled():
    return SDP_KERNELS["flash"]


def mem_efficient_sdp_enabled():
    return SDP_KERNELS["mem_efficient"]


def math_sdp_enabled():
    return SDP_KERNELS["math"]


def cudnn_sdp_enabled():
    return SDP_KERNELS["cudnn"]


def enable_flash_sdp(enabled):
    set_sdp("flash", enabled)


def enable_mem_efficient_sdp(enabled):
    set_sdp("mem_efficient", enabled)


def enable_math_sdp(enabled):
    set_sdp("math", enabled)


def enable_cudnn_sdp(enabled):
    set_sdp("cudnn", enabled)


@contextlib.contextmanager
def sdp_kernel(enable_flash=True, enable_math=True, enable_mem_efficient=True,
               enable_cudnn=True):
    """Deprecated in PyTorch for ``torch.nn.attention.sdpa_kernel``: the kernels' flags
    for the duration of a ``with`` block."""
    warn_deprecated_sdp_kernel()
    previous = dict(SDP_KERNELS)
    try:
        for kernel, value in (("flash", enable_flash), ("math", enable_math),
                              ("mem_efficient", enable_mem_efficient),
                              ("cudnn", enable_cudnn)):
            set_sdp(kernel, value)
        yield {}
    finally:
        SDP_KERNELS.update(previous)
