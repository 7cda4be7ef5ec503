"""DLPack exchange: ``utils.dlpack.to_dlpack``/``from_dlpack``, ``mt.from_dlpack`` (objects
and capsules, ``device``/``copy``) and ``Tensor.__dlpack__``: zero-copy both ways with
NumPy and with PyTorch."""
import gc
import inspect

import numpy as np
import pytest

import microtensor as mt
from microtensor.utils import dlpack

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (optional "
                                                       "test oracle)")


def test_numpy_shares_memory_both_ways():
    t = mt.arange(6.0).view(2, 3)
    arr = np.from_dlpack(t)
    arr[0, 1] = 10.0
    assert t[0, 1].item() == 10.0
    source = np.arange(4.0)
    shared = mt.from_dlpack(source)
    shared[2] = -1.0
    assert source[2] == -1.0


@needs_torch
def test_torch_shares_memory_both_ways():
    t = mt.arange(12.0).view(3, 4)[:, 1::2]          # a strided view
    theirs = torch.from_dlpack(t)
    assert theirs.stride() == t.stride() and theirs.tolist() == t.tolist()
    theirs[1, 0] = 50.0
    assert t[1, 0].item() == 50.0
    source = torch.arange(6.0).view(2, 3).t()
    ours = mt.from_dlpack(source)
    assert ours.stride() == source.stride()
    ours[0, 1] = 7.0
    assert source[0, 1].item() == 7.0


@needs_torch
def test_capsules_both_ways():
    t = mt.arange(4.0)
    theirs = torch.from_dlpack(dlpack.to_dlpack(t))
    theirs[0] = 3.0
    assert t[0].item() == 3.0
    source = torch.arange(6, dtype=torch.int32).view(3, 2).t()
    capsule = torch.utils.dlpack.to_dlpack(source)
    ours = dlpack.from_dlpack(capsule)
    del capsule
    gc.collect()
    ours[1, 2] = 99                                   # writable, as PyTorch's import
    assert source[1, 2].item() == 99 and ours.dtype is mt.int32
    again = torch.utils.dlpack.to_dlpack(source)
    mt.from_dlpack(again)
    with pytest.raises(RuntimeError) as ours_error:
        mt.from_dlpack(again)
    with pytest.raises(RuntimeError) as theirs_error:
        torch.from_dlpack(again)
    assert str(ours_error.value) == str(theirs_error.value)


def test_to_dlpack_ignores_autograd_and_capsule_survives_the_tensor():
    t = mt.ones(3, requires_grad=True)
    capsule = dlpack.to_dlpack(t)
    del t
    gc.collect()
    assert mt.from_dlpack(capsule).tolist() == [1.0, 1.0, 1.0]


def test_copy_and_device_options():
    source = np.zeros(3)
    copied = mt.from_dlpack(source, copy=True)
    copied[0] = 1.0
    assert source[0] == 0.0
    same = mt.from_dlpack(source, device="cpu", copy=False)
    same[1] = 2.0
    assert source[1] == 2.0
    t = mt.arange(3.0)
    assert mt.from_dlpack(t).data_ptr() == t.data_ptr()
    assert mt.from_dlpack(t, copy=True).data_ptr() != t.data_ptr()


@needs_torch
def test_names_and_signatures_as_torch():
    assert mt.utils.dlpack.from_dlpack is mt.from_dlpack
    assert list(inspect.signature(mt.from_dlpack).parameters) == \
        list(inspect.signature(torch.utils.dlpack.from_dlpack).parameters)
    assert dict(dlpack.DLDeviceType.__members__.items()).keys() == \
        torch.utils.dlpack.DLDeviceType.__members__.keys()
    for name, member in dlpack.DLDeviceType.__members__.items():
        assert member.value == torch.utils.dlpack.DLDeviceType[name].value
    assert mt.to_dlpack is dlpack.to_dlpack
    assert mt.ones(2).__dlpack_device__() == (1, 0) == torch.ones(2).__dlpack_device__()
    with pytest.raises(RuntimeError, match="require gradient"):
        mt.ones(2, requires_grad=True).__dlpack__()
