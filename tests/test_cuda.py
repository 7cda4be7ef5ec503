"""CUDA tensors (``device="cuda"``, the CuPy backend) and DLPack.

The device tests run twice: on ``fake`` (``tests/fake_cupy.py``: CuPy's rules — its own
array type, no implicit conversion to NumPy — over host memory, so every CUDA code path
runs on any machine) and on ``gpu`` (real CuPy on a real GPU; skipped, with the reason,
where CuPy or a GPU is missing).  Each op's registry samples run on the device and must
match the CPU results.  Device plumbing, errors and DLPack on the CPU need no device.
"""
import subprocess
import sys

import numpy as np
import pytest

import fake_cupy
import microtensor as mt
from microtensor._C.tensor import TensorBase
from microtensor.backends import cuda as backend
from microtensor.ops import REGISTRY
from microtensor.testing import samples_of

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (optional "
                                                       "DLPack partner)")


def _gpu_skip_reason():
    try:
        import cupy  # noqa: F401
    except Exception as e:  # noqa: BLE001 - any import failure means "no CuPy here"
        return f"CuPy is not importable ({type(e).__name__}: {e})"
    if not mt.cuda.is_available():
        return "CuPy is installed but sees no CUDA GPU"
    return None


GPU_SKIP = _gpu_skip_reason()
needs_gpu = pytest.mark.skipif(GPU_SKIP is not None, reason=str(GPU_SKIP))


@pytest.fixture(params=["fake", pytest.param("gpu", marks=needs_gpu)])
def dev(request, monkeypatch):
    """``"cuda"`` backed by the fake CuPy or by the real GPU."""
    if request.param == "fake":
        monkeypatch.setattr(backend, "_cupy", fake_cupy)
    yield "cuda"
    if request.param == "gpu":
        mt.cuda.synchronize()


def _host(t):
    return np.array(t.detach().cpu()._array())


def _to_device(x, device):
    if isinstance(x, TensorBase):
        moved = x.detach().to(device)
        return moved.requires_grad_(x.requires_grad) if x.is_leaf else moved
    if isinstance(x, (list, tuple)):
        return type(x)(_to_device(v, device) for v in x)
    if isinstance(x, dict):
        return {k: _to_device(v, device) for k, v in x.items()}
    return x


# ------------------------------------------------------------------ no device needed

def test_import_does_not_import_cupy():
    code = "import sys, microtensor; assert 'cupy' not in sys.modules, 'cupy imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_device_parsing():
    assert mt.device("cuda").type == "cuda" and mt.device("cuda").index is None
    assert mt.device("cuda:0") == mt.device("cuda", 0)
    assert str(mt.device("cuda:1")) == "cuda:1"
    assert mt.device("cpu") == "cpu"
    with pytest.raises(RuntimeError, match="Expected one of cpu, cuda"):
        mt.device("tpu")
    with pytest.raises(RuntimeError, match="Invalid device string"):
        mt.device("cuda:x")


def test_cpu_tensor_device_queries():
    t = mt.zeros(2)
    assert t.device == mt.device("cpu") and not t.is_cuda and t.is_cpu
    assert t.cpu() is t and t.to("cpu") is t


def test_is_available_false_without_cupy(monkeypatch):
    monkeypatch.setattr(backend, "_cupy", None)
    monkeypatch.setitem(sys.modules, "cupy", None)   # makes ``import cupy`` fail
    assert mt.cuda.is_available() is False
    assert mt.cuda.device_count() == 0
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        mt.zeros(2, device="cuda")
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        mt.ones(2).cuda()


@pytest.mark.skipif(GPU_SKIP is None, reason="a GPU is present")
def test_is_available_false_without_gpu():
    assert mt.cuda.is_available() is False
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        mt.zeros(2, device="cuda:0")


def test_dlpack_cpu_numpy_zero_copy():
    arr = np.arange(6.0).reshape(2, 3)
    t = mt.from_dlpack(arr)
    t[0, 0] = 7.0
    assert arr[0, 0] == 7.0
    back = np.from_dlpack(t.t())
    back[1, 0] = -1.0
    assert t[0, 1].item() == -1.0 and back.strides == (8, 24)
    assert t.__dlpack_device__() == (1, 0)


@needs_torch
def test_dlpack_cpu_torch_zero_copy():
    theirs = torch.arange(6.0).reshape(2, 3)
    ours = mt.from_dlpack(theirs)
    ours.add_(1)
    assert theirs[0, 0].item() == 1.0
    again = torch.from_dlpack(ours[:, 1:])
    again.mul_(10)
    assert ours[1, 2].item() == 60.0 and again.stride() == (3, 1)


def test_dlpack_requires_grad_refused():
    with pytest.raises(RuntimeError, match="require gradient"):
        mt.ones(2, requires_grad=True).__dlpack__()


# ------------------------------------------------------------------ devices and factories

FACTORIES = [
    lambda d: mt.zeros(2, 3, device=d), lambda d: mt.ones(2, 3, device=d),
    lambda d: mt.empty(2, 3, device=d), lambda d: mt.full((2, 3), 1.5, device=d),
    lambda d: mt.empty_strided((2, 3), (1, 2), device=d), lambda d: mt.eye(3, device=d),
    lambda d: mt.arange(5, device=d), lambda d: mt.linspace(0, 1, 5, device=d),
    lambda d: mt.tensor([[1, 2], [3, 4]], device=d), lambda d: mt.as_tensor([1.0], device=d),
    lambda d: mt.scalar_tensor(2.0, device=d), lambda d: mt.rand(2, device=d),
    lambda d: mt.randn(2, device=d), lambda d: mt.randint(0, 5, (3,), device=d),
    lambda d: mt.randperm(4, device=d),
    lambda d: mt.zeros_like(mt.ones(2), device=d), lambda d: mt.ones_like(mt.ones(2), device=d),
    lambda d: mt.full_like(mt.ones(2), 3, device=d), lambda d: mt.empty_like(mt.ones(2), device=d),
    lambda d: mt.rand_like(mt.ones(2), device=d), lambda d: mt.randn_like(mt.ones(2), device=d),
    lambda d: mt.ones(2).new_zeros(3, device=d), lambda d: mt.ones(2).new_ones(3, device=d),
    lambda d: mt.ones(2).new_full((3,), 2.0, device=d),
    lambda d: mt.ones(2).new_empty(3, device=d),
    lambda d: mt.ones(2).new_tensor([1, 2], device=d),
    lambda d: mt.ones(2).new_empty_strided((2, 3), (1, 2), device=d),
]


@pytest.mark.parametrize("index", range(len(FACTORIES)))
def test_factories_take_device(dev, index):
    t = FACTORIES[index](dev)
    assert t.device == mt.device("cuda", 0) and t.is_cuda
    on_cpu = FACTORIES[index]("cpu")
    assert t.shape == on_cpu.shape and t.stride() == on_cpu.stride()
    assert t.dtype == on_cpu.dtype


def test_new_tensors_inherit_device(dev):
    t = mt.ones(2, 3, device=dev)
    for made in (t.new_zeros(2), t.new_empty_strided((2, 2), (1, 2)), mt.zeros_like(t),
                 mt.randn_like(t)):
        assert made.is_cuda


def test_transfers_round_trip(dev):
    cpu = mt.arange(12.0).reshape(3, 4)
    on_gpu = cpu.cuda()
    assert on_gpu.device == mt.device("cuda:0") and on_gpu.is_cuda
    assert on_gpu.to(dev) is on_gpu and on_gpu.to("cuda:0") is on_gpu
    np.testing.assert_array_equal(on_gpu.cpu().numpy(), cpu.numpy())
    # layouts survive the trip; dtype and device change in one call
    transposed = cpu.t().to(dev, mt.float64)
    assert transposed.stride() == cpu.t().stride() and transposed.dtype == mt.float64
    np.testing.assert_array_equal(transposed.cpu().numpy(), cpu.t().numpy())
    assert on_gpu.to(mt.int64).is_cuda and on_gpu.double().dtype == mt.float64
    assert on_gpu.to(mt.ones(1)).device == mt.device("cpu")
    assert float(on_gpu.sum()) == 66.0 and on_gpu[1, 2].item() == 6.0
    assert on_gpu.tolist() == cpu.tolist()
    assert "device='cuda:0'" in repr(on_gpu)


def test_copy_between_devices_casts_and_broadcasts(dev):
    target = mt.zeros(2, 3, device=dev).t()
    target.copy_(mt.tensor([1, 2]))
    assert target.cpu().tolist() == [[1.0, 2.0]] * 3
    host = mt.zeros(3, 2, dtype=mt.int64)
    host.copy_(target)
    assert host.tolist() == [[1, 2]] * 3


def test_numpy_on_cuda_raises(dev):
    with pytest.raises(TypeError, match=r"can't convert cuda:0 device type tensor to numpy\. "
                                        r"Use Tensor\.cpu\(\) to copy the tensor to host "
                                        r"memory first\."):
        mt.ones(2, device=dev).numpy()


def test_mixing_devices_raises(dev):
    a, b = mt.ones(2, device=dev), mt.ones(2)
    message = ("Expected all tensors to be on the same device, but found at least two "
               "devices, cuda:0 and cpu!")
    with pytest.raises(RuntimeError, match=message):
        a + b
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        b.mul_(a)
    # a 0-d CPU tensor joins a GPU op like a Python number, as in PyTorch
    assert (a * mt.tensor(3.0)).cpu().tolist() == [3.0, 3.0]
    assert (mt.tensor(3.0) - a).is_cuda


# ------------------------------------------------------------------ the registry on the device

def _cases():
    cases = []
    for name in sorted(REGISTRY):
        op = REGISTRY[name]
        if op.samples is not None and not op.random:
            count = len(samples_of(name))
            cases.extend(pytest.param(name, i, id=f"{name}-{i}") for i in range(count))
    return cases


def _assert_same(on_device, on_cpu, where):
    if isinstance(on_cpu, TensorBase):
        assert isinstance(on_device, TensorBase), f"{where}: expected a tensor"
        assert on_device.is_cuda, f"{where}: result left the GPU"
        assert on_device.shape == on_cpu.shape, f"{where}: shape"
        assert on_device.dtype == on_cpu.dtype, f"{where}: dtype"
        assert on_device.stride() == on_cpu.stride(), f"{where}: strides"
        tol = 1e-5 if on_cpu.dtype == mt.float32 else 1e-10
        np.testing.assert_allclose(_host(on_device), _host(on_cpu), rtol=tol, atol=tol,
                                   equal_nan=True, err_msg=where)
    elif isinstance(on_cpu, (tuple, list)):
        assert len(on_device) == len(on_cpu), f"{where}: number of outputs"
        for i, (a, b) in enumerate(zip(on_device, on_cpu)):
            _assert_same(a, b, f"{where}[{i}]")
    else:
        assert on_device == on_cpu, where


@pytest.mark.parametrize("name, index", _cases())
def test_registry_samples_match_cpu(dev, name, index):
    op = REGISTRY[name]
    sample = samples_of(name)[index]
    args, kwargs = list(sample.args), dict(sample.kwargs)
    dev_args, dev_kwargs = _to_device(args, dev), _to_device(kwargs, dev)
    if op.kind == "factory" and "device" in REGISTRY[name].params and \
            not any(isinstance(a, TensorBase) for a in args):
        dev_kwargs["device"] = dev
    try:
        expected = op(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - the device must refuse the same inputs
        with pytest.raises(type(e)):
            op(*dev_args, **dev_kwargs)
        return
    result = op(*dev_args, **dev_kwargs)
    if "empty" not in name:
        _assert_same(result, expected, f"{name} output")
        if op.kind == "inplace":
            _assert_same(dev_args[0], args[0], f"{name} written tensor")


# ------------------------------------------------------------------ metadata on the device

def test_views_share_storage_and_version(dev):
    base = mt.arange(24.0, device=dev).reshape(2, 3, 4)
    view = base.transpose(0, 2)[1:, :, ::2]
    assert view.untyped_storage() is base.untyped_storage()
    assert view.stride() == (1, 4, 24) and view.storage_offset() == 1
    version = base._version
    view.mul_(-1)
    assert base._version == view._version == version + 1
    expected = np.arange(24.0).reshape(2, 3, 4)
    expected.transpose(2, 1, 0)[1:, :, ::2] *= -1
    np.testing.assert_array_equal(_host(base), expected)
    with pytest.raises(RuntimeError, match="out of bounds"):
        base.as_strided((5, 5), (5, 1))


def test_memory_formats_and_new_empty_strided(dev):
    x = mt.randn(2, 3, 4, 5, device=dev)
    cl = x.contiguous(memory_format=mt.channels_last)
    assert cl.is_contiguous(memory_format=mt.channels_last) and cl.stride() == (60, 1, 15, 3)
    np.testing.assert_array_equal(_host(cl), _host(x))
    assert mt.empty_like(cl).stride() == cl.stride() and mt.empty_like(cl).is_cuda
    assert (cl + 1).stride() == cl.stride()
    strided = x.new_empty_strided((3, 4), (1, 3))
    assert strided.stride() == (1, 3) and strided.is_cuda
    assert x.clone(memory_format=mt.channels_last).stride() == cl.stride()


def test_inplace_through_overlapping_views_refused(dev):
    t = mt.zeros(3, device=dev)
    with pytest.raises(RuntimeError, match="single memory location"):
        t.expand(2, 3).copy_(mt.ones(2, 3, device=dev))


def test_autograd_on_device(dev):
    w = mt.randn(4, 3, device=dev, requires_grad=True)
    x = mt.randn(5, 4, device=dev)
    loss = (x @ w).tanh().pow(2).mean()
    loss.backward()
    assert w.grad.is_cuda
    w_cpu = w.detach().cpu().requires_grad_()
    (x.cpu() @ w_cpu).tanh().pow(2).mean().backward()
    np.testing.assert_allclose(_host(w.grad), _host(w_cpu.grad), rtol=1e-5, atol=1e-6)


def test_autograd_through_inplace_on_view(dev):
    a = mt.randn(3, 4, device=dev, requires_grad=True)
    b = a.clone()
    b[:, 1].mul_(2)
    b.sum().backward()
    expected = np.ones((3, 4))
    expected[:, 1] = 2
    np.testing.assert_array_equal(_host(a.grad), expected)


def test_vmap_and_batched_grads(dev):
    x = mt.randn(6, 3, device=dev)
    w = mt.randn(3, device=dev, requires_grad=True)
    out = mt.vmap(lambda row: (row * w).sum())(x)
    assert out.is_cuda and out.shape == (6,)
    np.testing.assert_allclose(_host(out), _host(x) @ _host(w), rtol=1e-5)
    y = x @ w
    (grads,) = mt.autograd.grad(y, w, mt.eye(6, device=dev), is_grads_batched=True)
    assert grads.is_cuda
    np.testing.assert_allclose(_host(grads), _host(x), rtol=1e-6)


def test_per_sample_grads_with_func(dev):
    func = getattr(mt, "func", None)
    if func is None or not hasattr(func, "grad"):
        pytest.skip("microtensor.func.grad is not implemented yet")
    w = mt.randn(3, device=dev)
    xs = mt.randn(5, 3, device=dev)
    per_sample = func.vmap(func.grad(lambda w, x: (w * x).sum().sin()), in_dims=(None, 0))(w, xs)
    assert per_sample.is_cuda
    expected = np.cos(_host(xs) @ _host(w))[:, None] * _host(xs)
    np.testing.assert_allclose(_host(per_sample), expected, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------ DLPack on the GPU

@needs_gpu
def test_dlpack_cupy_zero_copy():
    import cupy
    theirs = cupy.arange(6, dtype=cupy.float32).reshape(2, 3)
    ours = mt.from_dlpack(theirs)
    assert ours.device == mt.device("cuda:0")
    ours.add_(1)
    assert float(theirs[0, 0]) == 1.0
    back = cupy.from_dlpack(ours.t())
    back[0, 1] = 50
    assert ours[1, 0].item() == 50.0 and back.strides == (4, 12)
    assert ours.__dlpack_device__() == (2, 0)


@needs_gpu
@needs_torch
def test_dlpack_torch_cuda_zero_copy():
    if not torch.cuda.is_available():
        pytest.skip("this PyTorch build has no CUDA")
    theirs = torch.arange(6.0, device="cuda").reshape(2, 3)
    ours = mt.from_dlpack(theirs)
    ours.mul_(2)
    torch.cuda.synchronize()
    mt.cuda.synchronize()
    assert theirs[1, 2].item() == 10.0
    again = torch.from_dlpack(ours[:, 1:])
    assert again.device.type == "cuda" and again.data_ptr() == ours[:, 1:].data_ptr()


@needs_gpu
def test_dlpack_jax_cuda():
    jax = pytest.importorskip("jax", reason="JAX is not installed (optional DLPack partner)")
    import jax.numpy as jnp
    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    if not gpus:
        pytest.skip("this JAX build sees no GPU")
    theirs = jax.device_put(jnp.arange(6.0, dtype=jnp.float32).reshape(2, 3), gpus[0])
    ours = mt.from_dlpack(theirs)
    assert ours.device.type == "cuda" and ours.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert ours.data_ptr() == theirs.unsafe_buffer_pointer()      # zero-copy import
    back = jnp.from_dlpack(ours * 2)
    np.testing.assert_array_equal(np.asarray(back), np.arange(6.0).reshape(2, 3) * 2)
