"""Small names PyTorch programs use, against PyTorch: ``utils.hooks.RemovableHandle`` (the
one class every hook registration returns, and what custom registries build) and
``autograd.graph.save_on_cpu`` (saved tensors kept on the CPU), and the functions PyTorch 2
removed (``solve``, ``lstsq``, ``eig``, ``symeig``, ``matrix_rank``), which raise its error."""
import gc
import pickle
import weakref
from collections import OrderedDict

import numpy as np
import pytest

import microtensor as mt
from microtensor.backends import cuda as backend

torch = pytest.importorskip("torch", reason="PyTorch is the oracle of these tests")
LIBS = {"microtensor": mt, "torch": torch}


def to_np(t):
    return np.array(t.detach().cpu()._array()) if isinstance(t, mt.Tensor) else \
        t.detach().numpy()


# --------------------------------------------------------------------------- RemovableHandle

def test_removable_handle_is_the_class_hooks_return():
    import microtensor.utils.hooks as hooks_module
    assert mt.utils.hooks is hooks_module
    assert hooks_module.RemovableHandle is mt.nn.hooks.RemovableHandle   # one class
    for name, lib in LIBS.items():
        handle_cls = lib.utils.hooks.RemovableHandle
        leaf = lib.ones(2, requires_grad=True)
        y = leaf * 2
        layer = lib.nn.Linear(2, 2)
        opt = lib.optim.SGD([leaf], lr=0.1)
        handles = [leaf.register_hook(lambda g: g),
                   leaf.register_post_accumulate_grad_hook(lambda t: None),
                   y.register_hook(lambda g: g),
                   y.grad_fn.register_hook(lambda *a: None),
                   y.grad_fn.register_prehook(lambda *a: None),
                   layer.register_forward_pre_hook(lambda *a: None),
                   layer.register_forward_hook(lambda *a: None, with_kwargs=True),
                   layer.register_full_backward_hook(lambda *a: None),
                   layer.register_full_backward_pre_hook(lambda *a: None),
                   layer.register_state_dict_pre_hook(lambda *a: None),
                   layer.register_load_state_dict_post_hook(lambda *a: None),
                   opt.register_step_pre_hook(lambda *a: None),
                   opt.register_step_post_hook(lambda *a: None)]
        assert all(isinstance(h, handle_cls) for h in handles), name
        for handle in handles:
            handle.remove()
        assert not layer._forward_pre_hooks and not layer._forward_hooks
        assert not layer._forward_hooks_with_kwargs
        (leaf * 3).sum().backward()
        assert to_np(leaf.grad).tolist() == [3.0, 3.0]


def registry_trace(lib):
    """A custom hook registry as PyTorch's docs build them: what it holds along the way."""
    handle_cls = lib.utils.hooks.RemovableHandle
    hooks, flags = OrderedDict(), OrderedDict()
    trace = []
    first = handle_cls(hooks, extra_dict=flags)
    hooks[first.id], flags[first.id] = "first", True
    second = handle_cls(hooks, extra_dict=[flags])
    hooks[second.id] = "second"
    trace.append((second.id - first.id, list(hooks.values()), len(second.extra_dict_ref)))
    with first:
        trace.append((list(hooks.values()), list(flags.values())))
    trace.append((list(hooks.values()), list(flags.values())))
    second.remove()
    second.remove()                                # removing twice is harmless
    trace.append(list(hooks.values()))
    # the handle holds its table weakly
    table = OrderedDict()
    handle = handle_cls(table)
    ref = weakref.ref(table)
    del table
    gc.collect()
    handle.remove()
    trace.append(ref() is None)
    # a pickled handle carries its table along and hands out no id twice
    table = OrderedDict()
    handle = handle_cls(table)
    table[handle.id] = "kept"
    copy = pickle.loads(pickle.dumps((table, handle)))
    fresh = handle_cls(OrderedDict())
    copy[1].remove()
    trace.append((list(copy[0].values()), list(table.values()), fresh.id > handle.id))
    return trace


def test_removable_handle_behaves_as_torchs():
    assert registry_trace(mt) == registry_trace(torch)


# --------------------------------------------------------------------------- save_on_cpu

def grads_after_inplace_change(lib, pin_memory, device="cpu"):
    """The gradients of a small graph built under ``save_on_cpu`` whose saved input ``b``
    is changed in place after saving."""
    rng = np.random.default_rng(0)
    a = lib.tensor(rng.standard_normal(3), device=device, requires_grad=True)
    b_values = rng.standard_normal((3, 4))
    b = lib.tensor(b_values, device=device).t()
    w = lib.tensor(rng.standard_normal(3), device=device, requires_grad=True)
    with lib.autograd.graph.save_on_cpu(pin_memory=pin_memory):
        y = (a * b).sin() * w
    b.mul_(2)
    y.sum().backward()
    return [to_np(a.grad), to_np(w.grad)]


@pytest.mark.parametrize("pin_memory", [False, True])
def test_save_on_cpu_matches_torch(pin_memory):
    """Without pinning a CPU tensor is saved as it is (an in-place change afterwards is
    seen by backward, hooks or not, as in PyTorch); with ``pin_memory=True`` a contiguous
    copy is saved (the change is not seen)."""
    theirs = grads_after_inplace_change(torch, pin_memory)
    ours = grads_after_inplace_change(mt, pin_memory)
    assert not np.allclose(theirs[0], grads_after_inplace_change(torch, not pin_memory)[0])
    for mine, reference in zip(ours, theirs):
        np.testing.assert_allclose(mine, reference, rtol=1e-6)
    for lib in LIBS.values():
        context = lib.autograd.graph.save_on_cpu(pin_memory=pin_memory)
        t = lib.ones(3, 4).t()
        device, packed = context.pack_hook(t)
        assert (packed is t) is (not pin_memory)
        assert packed.is_contiguous() is pin_memory and str(device) == "cpu"
        assert context.unpack_hook((device, packed)) is packed
    assert isinstance(mt.autograd.graph.save_on_cpu(), mt.autograd.graph.saved_tensors_hooks)


def test_save_on_cpu_nests_with_other_hooks():
    seen = []

    def pack(t):
        seen.append(tuple(t.shape))
        return t

    for lib in LIBS.values():
        a = lib.ones(2, requires_grad=True)
        with lib.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            with lib.autograd.graph.save_on_cpu(True):
                inner = (a * a).sum()          # the innermost hooks pack these
            outer = (a * 3.0).exp().sum()      # and these go through ``pack``
        (inner + outer).backward()
    assert seen[:len(seen) // 2] == seen[len(seen) // 2:] and seen


@pytest.fixture
def fake_cuda(monkeypatch):
    import fake_cupy
    monkeypatch.setattr(backend, "_cupy", fake_cupy)


@pytest.mark.parametrize("pin_memory", [False, True])
def test_save_on_cpu_moves_device_tensors_to_the_cpu_and_back(fake_cuda, pin_memory):
    context = mt.autograd.graph.save_on_cpu(pin_memory=pin_memory)
    t = mt.arange(6.0, device="cuda").reshape(2, 3)
    device, packed = context.pack_hook(t)
    assert packed.device.type == "cpu" and device.type == "cuda"
    back = context.unpack_hook((device, packed))
    assert back.device.type == "cuda"
    np.testing.assert_array_equal(to_np(back), to_np(t))
    # a device tensor's CPU copy is what backward reads: the later in-place change is not
    # seen, pinned or not (PyTorch's CPU result with the copy of pin_memory=True)
    on_device = grads_after_inplace_change(mt, pin_memory, device="cuda")
    on_cpu = grads_after_inplace_change(torch, pin_memory=True)
    for mine, reference in zip(on_device, on_cpu):
        np.testing.assert_allclose(mine, reference, rtol=1e-6)


REMOVED = [("solve", True), ("lstsq", True), ("eig", True), ("symeig", True),
           ("matrix_rank", False)]


@pytest.mark.parametrize("name, method", REMOVED)
def test_functions_pytorch_2_removed_raise_its_error_naming_the_replacement(name, method):
    """A PyTorch 1.x script calling them learns what to write, as under PyTorch 2."""
    for lib in (mt, torch):
        A = lib.eye(2)
        calls = [lambda: getattr(lib, name)(A, A)]
        if method:
            calls.append(lambda: getattr(A, name)(A))
        assert hasattr(A, name) == method
        for call in calls:
            with pytest.raises(RuntimeError, match="deprecated since version 1.9 and is now "
                                                   "removed") as refusal:
                call()
            assert "linalg." in str(refusal.value)
