"""The nn.Module API as PyTorch's: conversions (``to``, ``float``...), registration,
hooks, state-dict protocol, traversal, ``repr``; the containers; the layer and loss
wrappers; ``nn.init`` and ``nn.utils``.  Compared with PyTorch where it is installed."""
import math
import re
import warnings
from collections import OrderedDict

import numpy as np
import pytest

import fake_cupy
import microtensor as mt
from microtensor import nn
from microtensor.backends import cuda as cuda_backend
from test_cuda import dev  # noqa: F401  (the device tests' fake-CuPy/GPU fixture)

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (optional "
                                                       "test oracle)")


def to_torch(t):
    return torch.tensor(np.array(t.detach().cpu().numpy()))


def same_weights(mt_model, torch_model):
    """Copy ``mt_model``'s parameters into ``torch_model`` (same architecture)."""
    with torch.no_grad():
        for (name, p), (tname, tp) in zip(mt_model.named_parameters(),
                                          torch_model.named_parameters()):
            assert name == tname
            tp.copy_(to_torch(p))


def close(a, b, atol=1e-5):
    np.testing.assert_allclose(a.detach().cpu().numpy(), b.detach().numpy(), rtol=1e-5,
                               atol=atol)


def same_error(mt_call, torch_call):
    """Both calls raise the same exception type with the same message (up to the library
    name)."""
    with pytest.raises(Exception) as theirs:
        torch_call()
    with pytest.raises(type(theirs.value)) as ours:
        mt_call()
    assert _unqualified(ours.value, "microtensor") == _unqualified(theirs.value, "torch")


def _unqualified(error, library):
    """The message without the library's name and module paths."""
    message = re.sub(r"<class '[\w.]*?(\w+)'>", r"<class '\1'>", str(error))
    return re.sub(library + r"(\.nn\.modules\.\w+\.)?", "", message)


def mlp(lib):
    return lib.nn.Sequential(lib.nn.Linear(3, 4), lib.nn.ReLU(), lib.nn.Linear(4, 2))


class WithBuffers(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)
        self.register_buffer("steps", mt.tensor(7))
        self.register_buffer("scale", mt.ones(2))


# ------------------------------------------------------------------ conversions
def test_double_keeps_parameter_objects_converts_grad_and_floating_buffers_only():
    model = WithBuffers()
    model.fc(mt.randn(5, 3)).sum().backward()
    weight, grad = model.fc.weight, model.fc.weight.grad
    assert model.double() is model
    assert model.fc.weight is weight and weight.grad is grad       # same objects, data swapped
    assert weight.dtype == mt.float64 and grad.dtype == mt.float64
    assert isinstance(weight, nn.Parameter) and weight.is_leaf and weight.requires_grad
    assert model.scale.dtype == mt.float64 and model.steps.dtype == mt.int64
    model.zero_grad()
    x = mt.randn(4, 3, dtype=mt.float64)
    model.fc(x).sum().backward()                                   # the graph sees the new data
    assert weight.grad.dtype == mt.float64
    np.testing.assert_allclose(weight.grad.numpy(), np.tile(x.sum(0).numpy(), (2, 1)))
    model.float()
    assert weight.dtype == mt.float32 and model.scale.dtype == mt.float32
    model.to(mt.float64)
    assert weight.dtype == mt.float64 and model.steps.dtype == mt.int64
    model.to(dtype=mt.float32, non_blocking=True)
    assert weight.dtype == mt.float32
    model.to("cpu", mt.float64)
    assert weight.dtype == mt.float64
    model.to(mt.zeros(1))                                          # to(tensor): its dtype
    assert weight.dtype == mt.float32
    model.to(device="cpu", dtype=mt.float64)
    assert weight.dtype == mt.float64
    model.type(mt.float32)                                         # type() casts ints too
    assert model.steps.dtype == mt.float32


@needs_torch
def test_conversion_matches_torch():
    for lib in (mt, torch):
        model = mlp(lib)
        w = model[0].weight
        assert model.double()[0].weight is w and w.dtype == lib.float64
        assert model.cpu()[0].weight is w
    same_error(lambda: mlp(mt).to(mt.int64), lambda: mlp(torch).to(torch.int64))


def test_module_to_refuses_bad_arguments_and_changes_nothing():
    model = mlp(mt)
    with pytest.raises(TypeError, match="only accepts floating point"):
        model.to(mt.int32)
    with pytest.raises(TypeError, match="invalid combination"):
        model.to(mt.float64, 3)
    assert model[0].weight.dtype == mt.float32


def test_half_and_bfloat16():
    model = mlp(mt)
    assert model.half()[0].weight.dtype == mt.float16
    try:
        model.bfloat16()
    except ImportError:    # without the optional 'bfloat16' extra: refused, nothing changed
        with pytest.raises(ImportError, match=r"microtensor\[bfloat16\]"):
            mt.bfloat16.np
        assert model[0].weight.dtype == mt.float16
    else:
        assert model[0].weight.dtype == mt.bfloat16


@pytest.fixture
def fake_cuda(monkeypatch):
    """``"cuda"`` backed by the fake CuPy of the device tests (CuPy's rules over host
    memory)."""
    monkeypatch.setattr(cuda_backend, "_cupy", fake_cupy)
    return "cuda"


def test_module_to_device_and_back(dev):
    model = WithBuffers()
    model.fc(mt.randn(4, 3)).sum().backward()
    weight = model.fc.weight
    before = weight.detach().clone()
    assert model.to(dev) is model
    assert model.fc.weight is weight and weight.device.type == "cuda"
    assert weight.grad.device.type == "cuda" and model.steps.device.type == "cuda"
    out = model.fc(mt.randn(4, 3, device=dev))
    assert out.device.type == "cuda"
    out.sum().backward()
    model.cpu()
    assert weight.device.type == "cpu" and weight.grad.device.type == "cpu"
    np.testing.assert_array_equal(weight.detach().numpy(), before.numpy())
    model.cuda()
    assert weight.device.type == "cuda"
    model.to(device="cpu", dtype=mt.float64)
    assert weight.device.type == "cpu" and weight.dtype == mt.float64


# ------------------------------------------------------------------ registration
@needs_torch
@pytest.mark.parametrize("call", [
    lambda lib, m: m.register_parameter("a.b", None),
    lambda lib, m: m.register_parameter("", None),
    lambda lib, m: m.register_parameter(3, None),
    lambda lib, m: m.register_parameter("training", None),
    lambda lib, m: m.register_parameter("w", lib.ones(2)),
    lambda lib, m: m.register_parameter("w", lib.nn.Parameter(lib.ones(2)) * 2),
    lambda lib, m: m.add_module("x.y", lib.nn.ReLU()),
    lambda lib, m: m.add_module("x", 3),
    lambda lib, m: m.register_module("", lib.nn.ReLU()),
    lambda lib, m: m.add_module("forward", lib.nn.ReLU()),
])
def test_registration_checks_match_torch(call):
    same_error(lambda: call(mt, mt.nn.Module()), lambda: call(torch, torch.nn.Module()))


def test_register_module_and_parameter():
    m = nn.Module()
    m.register_module("act", nn.ReLU())
    m.register_parameter("w", nn.Parameter(mt.ones(2)))
    m.register_parameter("b", None)
    assert [n for n, _ in m.named_children()] == ["act"]
    assert [n for n, _ in m.named_parameters()] == ["w"]
    assert m.b is None and list(m.state_dict()) == ["w"]


@needs_torch
def test_get_submodule_parameter_buffer_match_torch():
    models = {}
    for lib in (mt, torch):
        outer = lib.nn.Module()
        outer.net = mlp(lib)
        outer.net[0].register_buffer("count", lib.zeros(1))
        models[lib] = outer
    for lib, outer in models.items():
        assert outer.get_submodule("net.0") is outer.net[0]
        assert outer.get_submodule("") is outer
        assert outer.get_parameter("net.2.bias") is outer.net[2].bias
        assert outer.get_buffer("net.0.count") is outer.net[0].count
    for bad in ("net.5", "net.0.weight", "nothing"):
        same_error(lambda: models[mt].get_submodule(bad),
                   lambda: models[torch].get_submodule(bad))
    for bad in ("net.0.count", "net.0.nothing", "net"):
        same_error(lambda: models[mt].get_parameter(bad),
                   lambda: models[torch].get_parameter(bad))
    for bad in ("net.0.weight", "net.9.x"):
        same_error(lambda: models[mt].get_buffer(bad), lambda: models[torch].get_buffer(bad))


def test_traversal_apply_train_eval_requires_grad_zero_grad():
    model = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.ReLU(), nn.Dropout()))
    assert list(model.children()) == [model[0], model[1]]
    assert len(list(model.modules())) == 5
    seen = []
    assert model.apply(lambda m: seen.append(type(m).__name__)) is model
    assert seen == ["Linear", "ReLU", "Dropout", "Sequential", "Sequential"]

    class Frozen(nn.Identity):     # train() overridden: propagation goes through it
        def train(self, mode=True):
            return super().train(False)
    model.append(Frozen())
    model.eval()
    assert not any(m.training for m in model.modules())
    model.train()
    assert model[1][1].training and not model[2].training
    with pytest.raises(ValueError, match="training mode is expected to be boolean"):
        model.train("yes")
    model.requires_grad_(False)
    assert not any(p.requires_grad for p in model.parameters())
    model.requires_grad_()
    model(mt.randn(3, 2)).sum().backward()
    grad = model[0].weight.grad
    model.zero_grad(set_to_none=False)
    assert model[0].weight.grad is grad and float(grad.abs().sum()) == 0
    model.zero_grad()
    assert model[0].weight.grad is None


# ------------------------------------------------------------------ forward hooks
def test_forward_pre_hooks_replace_arguments_in_order_and_remove():
    lin = nn.Identity()
    calls = []
    h1 = lin.register_forward_pre_hook(lambda m, args: calls.append("first") or (args[0] * 2,))
    lin.register_forward_pre_hook(lambda m, args: calls.append("prepended"), prepend=True)
    lin.register_forward_pre_hook(lambda m, args, kwargs: (args, {}), with_kwargs=True)
    out = lin(mt.ones(2))
    assert calls == ["prepended", "first"] and out.tolist() == [2.0, 2.0]
    h1.remove()
    h1.remove()                                   # a second remove is harmless
    assert lin(mt.ones(2)).tolist() == [1.0, 1.0]
    bad = lin.register_forward_pre_hook(lambda m, a, k: 3, with_kwargs=True)
    with pytest.raises(RuntimeError, match="forward pre-hook must return None or a tuple"):
        lin(mt.ones(2))
    bad.remove()
    assert not lin._forward_pre_hooks_with_kwargs or \
        bad.id not in lin._forward_pre_hooks_with_kwargs


def test_forward_hooks_with_kwargs_always_call_and_context_manager():
    class Scale(nn.Module):
        def forward(self, x, factor=1.0):
            if factor < 0:
                raise ValueError("negative factor")
            return x * factor

    m = Scale()
    seen = []
    with m.register_forward_hook(lambda mod, args, kwargs, out: out + kwargs["factor"],
                                 with_kwargs=True):
        assert m(mt.ones(1), factor=2.0).tolist() == [4.0]
    assert m(mt.ones(1), factor=2.0).tolist() == [2.0]
    m.register_forward_hook(lambda mod, args, out: seen.append(out), always_call=True)
    with pytest.raises(ValueError, match="negative factor"):
        m(mt.ones(1), factor=-1.0)
    assert seen == [None]                     # always_call hooks run when forward raises


@needs_torch
def test_forward_hook_order_matches_torch():
    logs = {}
    for lib in (mt, torch):
        log = logs[lib] = []
        m = lib.nn.Sequential(lib.nn.ReLU())
        m.register_forward_hook(lambda *a, log=log: log.append("a"))
        m.register_forward_hook(lambda *a, log=log: log.append("b"), prepend=True)
        m.register_forward_pre_hook(lambda *a, log=log: log.append("pre"))
        m[0].register_forward_hook(lambda *a, log=log: log.append("child"))
        m(lib.ones(1))
    assert logs[mt] == logs[torch] == ["pre", "child", "b", "a"]


# ------------------------------------------------------------------ backward hooks
def _record_backward(lib, model, x, scale_output_grad=None, replace_input_grad=False):
    log = []

    def pre(module, grad_output):
        log.append(("pre", [None if g is None else g.clone() for g in grad_output]))
        if scale_output_grad is not None:
            return tuple(g * scale_output_grad for g in grad_output)

    def hook(module, grad_input, grad_output):
        log.append(("full", [None if g is None else g.clone() for g in grad_input],
                    [g.clone() for g in grad_output]))
        if replace_input_grad:
            return tuple(None if g is None else g * 0 + 1 for g in grad_input)

    model[0].register_full_backward_pre_hook(pre)
    model[0].register_full_backward_hook(hook)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")        # "no input requires gradients" (both libraries)
        model(x).pow(2).sum().backward()
    return log


@needs_torch
@pytest.mark.parametrize("x_requires_grad", [True, False])
@pytest.mark.parametrize("scale", [None, 3.0])
def test_full_backward_hooks_match_torch(x_requires_grad, scale):
    ours, theirs = mlp(mt), mlp(torch)
    same_weights(ours, theirs)
    x = mt.randn(5, 3)
    tx = to_torch(x).requires_grad_(x_requires_grad)
    x.requires_grad_(x_requires_grad)
    log = _record_backward(mt, ours, x, scale)
    tlog = _record_backward(torch, theirs, tx, scale)
    assert [e[0] for e in log] == [e[0] for e in tlog] == ["pre", "full"]
    for entry, tentry in zip(log, tlog):
        for ours_list, theirs_list in zip(entry[1:], tentry[1:]):
            assert len(ours_list) == len(theirs_list)
            for g, tg in zip(ours_list, theirs_list):
                assert (g is None) == (tg is None)
                if g is not None:
                    close(g, tg, atol=1e-4)
    for p, tp in zip(ours.parameters(), theirs.parameters()):
        close(p.grad, tp.grad, atol=1e-4)
    if x_requires_grad:
        close(x.grad, tx.grad, atol=1e-4)


@needs_torch
def test_full_backward_hook_replaces_grad_input_as_torch():
    ours, theirs = mlp(mt), mlp(torch)
    same_weights(ours, theirs)
    x = mt.randn(2, 3, requires_grad=True)
    tx = to_torch(x).requires_grad_()
    _record_backward(mt, ours, x, replace_input_grad=True)
    _record_backward(torch, theirs, tx, replace_input_grad=True)
    assert x.grad.tolist() == tx.grad.tolist() == [[1.0] * 3] * 2


def test_backward_hook_wrong_count_and_removal():
    model = mlp(mt)
    handle = model[0].register_full_backward_hook(lambda m, gi, go: (gi[0], gi[0]))
    x = mt.randn(2, 3, requires_grad=True)
    with pytest.raises(RuntimeError, match="invalid number of grad_input, got 2, but "
                                           "expected 1"):
        model(x).sum().backward()
    handle.remove()
    model(x).sum().backward()
    assert x.grad is not None


# ------------------------------------------------------------------ state dict
def test_state_dict_hooks():
    model = mlp(mt)
    log = []
    model.register_state_dict_pre_hook(lambda m, prefix, keep_vars: log.append(prefix))
    model[0].register_state_dict_pre_hook(lambda m, prefix, keep_vars: log.append(prefix))

    def drop_bias(module, state, prefix, local_metadata):
        del state[prefix + "bias"]
    model[2].register_state_dict_post_hook(drop_bias)
    state = model.state_dict()
    assert log == ["", "0."] and list(state) == ["0.weight", "0.bias", "2.weight"]
    assert state._metadata[""] == {"version": 1} and "0" in state._metadata
    model[2].register_state_dict_post_hook(lambda *a: {})
    with pytest.raises(RuntimeError, match="state_dict post-hook must return None"):
        model.state_dict()


@needs_torch
def test_load_state_dict_strict_assign_and_messages_match_torch():
    ours, theirs = mlp(mt), mlp(torch)
    state = {k: v.clone() for k, v in ours.state_dict().items()}
    tstate = {k: to_torch(v) for k, v in state.items()}
    assert repr(ours.load_state_dict(state)) == repr(theirs.load_state_dict(tstate)) == \
        "<All keys matched successfully>"
    del state["2.bias"], tstate["2.bias"]
    state["extra"], tstate["extra"] = mt.ones(1), torch.ones(1)
    same_error(lambda: ours.load_state_dict(state), lambda: theirs.load_state_dict(tstate))
    result, tresult = ours.load_state_dict(state, strict=False), \
        theirs.load_state_dict(tstate, strict=False)
    assert result == tuple(tresult) == (["2.bias"], ["extra"])
    same_error(lambda: ours.load_state_dict([1]), lambda: theirs.load_state_dict([1]))
    state["2.bias"], tstate["2.bias"] = mt.ones(3), torch.ones(3)
    same_error(lambda: ours.load_state_dict(state, strict=False),
               lambda: theirs.load_state_dict(tstate, strict=False))


def test_load_state_dict_assign_makes_the_tensors_the_modules_own():
    model = WithBuffers()
    model.fc.bias.requires_grad_(False)
    state = {"fc.weight": mt.zeros(2, 3), "fc.bias": mt.ones(2), "steps": mt.tensor(1),
             "scale": mt.full((2,), 5.0)}
    model.load_state_dict(state, assign=True)
    assert isinstance(model.fc.weight, nn.Parameter) and model.fc.weight.requires_grad
    assert isinstance(model.fc.bias, nn.Parameter) and not model.fc.bias.requires_grad
    assert model.scale is state["scale"] and model.steps is state["steps"]
    state["fc.weight"].add_(1)                      # the Parameter shares its memory
    assert model.fc.weight.tolist() == [[1.0] * 3] * 2


def test_load_state_dict_refused_changes_nothing_and_post_hooks_may_forgive():
    model = mlp(mt)
    before = model[0].weight.detach().clone()
    state = {k: mt.zeros_like(v) for k, v in model.state_dict().items()}
    del state["2.bias"]
    with pytest.raises(RuntimeError, match='Missing key\\(s\\) in state_dict: "2.bias"'):
        model.load_state_dict(state)
    assert model[0].weight.tolist() == before.tolist()
    seen = []

    def forgive(module, keys):
        seen.append(list(keys.missing_keys))
        keys.missing_keys.clear()
    handle = model.register_load_state_dict_post_hook(forgive)
    assert model.load_state_dict(state).missing_keys == []
    assert seen == [["2.bias"]] and float(model[0].weight.abs().sum()) == 0
    handle.remove()
    model.register_load_state_dict_post_hook(lambda m, k: 1)
    with pytest.raises(AssertionError, match="not expected to return new values"):
        model.load_state_dict(state, strict=False)


def test_load_state_dict_pre_hook_may_rename_keys():
    model = mlp(mt)
    state = {k.replace("0.", "first."): v for k, v in model.state_dict().items()}

    def rename(state_dict, prefix, *rest):
        for key in [k for k in state_dict if k.startswith(prefix + "first.")]:
            state_dict[key.replace("first.", "0.", 1)] = state_dict.pop(key)
    model.register_load_state_dict_pre_hook(lambda module, *args: rename(*args))
    assert model.load_state_dict(state) == ([], [])


# ------------------------------------------------------------------ repr
@needs_torch
@pytest.mark.parametrize("build", [
    lambda nn_: nn_.Sequential(nn_.Linear(3, 4), nn_.ReLU(), nn_.Linear(4, 2, bias=False)),
    lambda nn_: nn_.Sequential(OrderedDict(flat=nn_.Flatten(), body=nn_.Sequential(
        nn_.Linear(6, 6), nn_.Tanh(), nn_.Dropout(0.2)), out=nn_.LogSoftmax(dim=1))),
    lambda nn_: nn_.ModuleList([nn_.Linear(2, 2) for _ in range(3)] + [nn_.Sigmoid(),
                                                                         nn_.Identity()]),
    lambda nn_: nn_.ModuleDict({"act": nn_.ReLU(inplace=True), "loss": nn_.CrossEntropyLoss(),
                                "un": nn_.Unflatten(1, (2, 3)), "sm": nn_.Softmax(-1)}),
    lambda nn_: nn_.Sequential(nn_.ModuleList([nn_.Sequential(nn_.Linear(1, 1))] * 2),
                               nn_.MSELoss(), nn_.Embedding(4, 2)),
    lambda nn_: nn_.Module(),
])
def test_repr_matches_torch(build):
    assert repr(build(nn)) == repr(build(torch.nn))


@needs_torch
def test_parameter_container_repr_matches_torch():
    ours = nn.ParameterList([mt.ones(2, 3), nn.Parameter(mt.ones(1)), "x"])
    theirs = torch.nn.ParameterList([torch.ones(2, 3), torch.nn.Parameter(torch.ones(1)), "x"])
    assert repr(ours).replace("microtensor", "torch") == repr(theirs)
    ours = nn.ParameterDict({"b": mt.ones(2), "a": 3})
    theirs = torch.nn.ParameterDict({"b": torch.ones(2), "a": 3})
    assert repr(ours).replace("microtensor", "torch") == repr(theirs)


def test_custom_extra_repr_with_children():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(1, 1)

        def extra_repr(self):
            return "depth=2\nwidth=1"
    assert repr(Block()) == ("Block(\n  depth=2\n  width=1\n"
                             "  (fc): Linear(in_features=1, out_features=1, bias=True)\n)")


# ------------------------------------------------------------------ containers
@needs_torch
def test_sequential_api_matches_torch():
    def run(nn_):
        a, b, c, d = nn_.ReLU(), nn_.Tanh(), nn_.Sigmoid(), nn_.Identity()
        s = nn_.Sequential(a, b)
        s.insert(1, c).insert(-1, d).extend([nn_.ReLU()])
        popped = s.pop(0)
        names = [type(m).__name__ for m in s]
        doubled = s * 2
        joined = s + nn_.Sequential(a)
        s += nn_.Sequential(b)
        return (names, type(popped).__name__, list(s._modules), len(doubled), len(joined),
                type(s[1:3]).__name__, list(s[::2]._modules))
    assert run(nn) == run(torch.nn)
    same_error(lambda: nn.Sequential().insert(2, nn.ReLU()),
               lambda: torch.nn.Sequential().insert(2, torch.nn.ReLU()))
    same_error(lambda: nn.Sequential() + 1, lambda: torch.nn.Sequential() + 1)
    same_error(lambda: nn.Sequential() * 0, lambda: torch.nn.Sequential() * 0)


@needs_torch
def test_module_list_api_matches_torch():
    def run(nn_):
        layers = nn_.ModuleList([nn_.ReLU(), nn_.Tanh()])
        layers.append(nn_.Sigmoid()).extend([nn_.Identity()])
        layers.insert(1, nn_.Flatten())
        layers += [nn_.ReLU()]
        popped = layers.pop(-1)
        del layers[0]
        layers[0] = nn_.Softmax(1)
        sliced = layers[1:]
        combined = layers + sliced
        return ([type(m).__name__ for m in layers], type(popped).__name__,
                list(layers._modules), type(sliced).__name__, len(combined),
                len(list(combined.parameters())))
    assert run(nn) == run(torch.nn)
    same_error(lambda: nn.ModuleList([nn.ReLU()])[3],
               lambda: torch.nn.ModuleList([torch.nn.ReLU()])[3])
    same_error(lambda: nn.ModuleList().extend(3), lambda: torch.nn.ModuleList().extend(3))


@needs_torch
def test_module_dict_api_matches_torch():
    def run(nn_):
        d = nn_.ModuleDict({"b": nn_.ReLU(), "a": nn_.Linear(1, 1)})
        d.update([("c", nn_.Tanh())])
        d["z"] = nn_.Sigmoid()
        popped = d.pop("b")
        return (list(d.keys()), [type(m).__name__ for m in d.values()],
                [k for k, _ in d.items()], "a" in d, len(d), type(popped).__name__,
                [n for n, _ in d.named_parameters()])
    assert run(nn) == run(torch.nn)
    same_error(lambda: nn.ModuleDict().update([("a",)]),
               lambda: torch.nn.ModuleDict().update([("a",)]))
    same_error(lambda: nn.ModuleDict().update(3), lambda: torch.nn.ModuleDict().update(3))


@needs_torch
def test_parameter_list_and_dict_api_match_torch():
    def run(lib):
        nn_ = lib.nn
        pl = nn_.ParameterList([lib.ones(2)])
        pl.append(lib.zeros(3)).extend([nn_.Parameter(lib.ones(1))])
        pl[0] = lib.full((2,), 4.0)
        sliced = pl[1:]
        pd = nn_.ParameterDict({"b": lib.ones(1), "a": lib.zeros(2)})
        pd.update(OrderedDict(z=lib.ones(3), c=lib.ones(4)))
        pd["d"] = "not a tensor"
        pd.setdefault("e", lib.ones(5))
        popped = pd.pop("z")
        item = pd.popitem()
        merged = pd | nn_.ParameterDict({"q": lib.ones(1)})
        return ([type(p).__name__ for p in pl], len(pl), pl[0].tolist(), len(sliced),
                [n for n, _ in pl.named_parameters()], list(pd.keys()), popped.shape[0],
                item[0], pd.get("nothing", 3), "a" in pd, list(merged.keys()),
                list(pd.copy().keys()), [n for n, _ in pd.named_parameters()],
                list(reversed(pd)))
    ours, theirs = run(mt), run(torch)
    assert ours == theirs
    same_error(lambda: nn.ParameterDict()[1], lambda: torch.nn.ParameterDict()[1])
    same_error(lambda: nn.ParameterList()(1), lambda: torch.nn.ParameterList()(1))
    same_error(lambda: nn.ParameterList().extend(mt.ones(2)),
               lambda: torch.nn.ParameterList().extend(torch.ones(2)))


def test_containers_are_seen_by_to_and_state_dict():
    model = nn.Module()
    model.blocks = nn.ModuleList([nn.Linear(2, 2), nn.Linear(2, 2)])
    model.heads = nn.ModuleDict({"cls": nn.Linear(2, 3)})
    model.extra = nn.ParameterList([mt.zeros(2)])
    model.table = nn.ParameterDict({"emb": mt.zeros(4)})
    assert list(model.state_dict()) == ["blocks.0.weight", "blocks.0.bias", "blocks.1.weight",
                                        "blocks.1.bias", "heads.cls.weight", "heads.cls.bias",
                                        "extra.0", "table.emb"]
    model.double()
    assert all(p.dtype == mt.float64 for p in model.parameters())


# ------------------------------------------------------------------ layers and losses
@needs_torch
@pytest.mark.parametrize("build,shape", [
    (lambda nn_: nn_.Flatten(), (2, 3, 4)),
    (lambda nn_: nn_.Flatten(0, 1), (2, 3, 4)),
    (lambda nn_: nn_.Unflatten(1, (2, 2)), (3, 4)),
    (lambda nn_: nn_.Identity(54, unused="x"), (2, 2)),
    (lambda nn_: nn_.Tanh(), (3,)),
    (lambda nn_: nn_.Sigmoid(), (3,)),
    (lambda nn_: nn_.ReLU(), (3,)),
    (lambda nn_: nn_.Softmax(dim=1), (2, 3)),
    (lambda nn_: nn_.LogSoftmax(dim=0), (2, 3)),
    (lambda nn_: nn_.Dropout(0.3).eval(), (2, 3)),
])
def test_layers_match_torch(build, shape):
    x = mt.randn(*shape)
    close(build(nn)(x), build(torch.nn)(to_torch(x)))


@needs_torch
@pytest.mark.parametrize("name,kwargs,target", [
    ("MSELoss", {}, "float"), ("L1Loss", {"reduction": "sum"}, "float"),
    ("CrossEntropyLoss", {}, "class"), ("CrossEntropyLoss", {"label_smoothing": 0.1}, "class"),
    ("NLLLoss", {"reduction": "none"}, "class"), ("BCELoss", {}, "prob"),
    ("BCEWithLogitsLoss", {}, "prob"), ("MSELoss", {"size_average": False}, "float"),
])
def test_losses_match_torch(name, kwargs, target):
    x = mt.randn(4, 3)
    if name == "NLLLoss":
        x = x.log_softmax(1)
    if name == "BCELoss":
        x = x.sigmoid()
    y = {"float": mt.randn(4, 3), "class": mt.tensor([0, 2, 1, 2]),
         "prob": mt.rand(4, 3)}[target]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")        # the deprecated size_average (both libraries)
        ours = getattr(nn, name)(**kwargs)
        theirs = getattr(torch.nn, name)(**kwargs)
    assert ours.reduction == theirs.reduction
    close(ours(x, y), theirs(to_torch(x), to_torch(y)))


def test_weighted_loss_keeps_weight_as_buffer():
    loss = nn.CrossEntropyLoss(weight=mt.tensor([1.0, 2.0]))
    assert list(loss.state_dict()) == ["weight"]
    loss.double()
    assert loss.weight.dtype == mt.float64


# ------------------------------------------------------------------ init
@needs_torch
@pytest.mark.parametrize("args", [("linear",), ("conv2d",), ("sigmoid",), ("tanh",),
                                  ("relu",), ("leaky_relu",), ("leaky_relu", 0.2),
                                  ("leaky_relu", 3), ("selu",)])
def test_calculate_gain_matches_torch(args):
    assert nn.init.calculate_gain(*args) == torch.nn.init.calculate_gain(*args)


@needs_torch
@pytest.mark.parametrize("call", [
    lambda lib, t: lib.nn.init.calculate_gain("leaky_relu", True),
    lambda lib, t: lib.nn.init.calculate_gain("gelu"),
    lambda lib, t: lib.nn.init.xavier_uniform_(t(3)),
    lambda lib, t: lib.nn.init.kaiming_normal_(t(3, 2), mode="fan_avg"),
    lambda lib, t: lib.nn.init.eye_(t(2, 2, 2)),
    lambda lib, t: lib.nn.init.dirac_(t(2, 2)),
    lambda lib, t: lib.nn.init.dirac_(t(3, 2, 3), groups=2),
    lambda lib, t: lib.nn.init.orthogonal_(t(3)),
])
def test_init_errors_match_torch(call):
    same_error(lambda: call(mt, mt.empty), lambda: call(torch, torch.empty))


@needs_torch
@pytest.mark.parametrize("shape", [(4, 3), (5, 3, 2), (2, 6, 3, 3)])
def test_fans_match_torch(shape):
    ours = nn.init._calculate_fan_in_and_fan_out(mt.empty(*shape))
    assert ours == torch.nn.init._calculate_fan_in_and_fan_out(torch.empty(*shape))


@pytest.mark.parametrize("shape", [(300, 200), (64, 50, 3, 3)])
def test_random_initialisers_have_the_formula_spread(shape):
    t = mt.empty(*shape)
    fan_in = shape[1] * math.prod(shape[2:])
    fan_out = shape[0] * math.prod(shape[2:])

    def spread(fn, **kwargs):
        fn(t, **kwargs)
        values = t.numpy()
        return float(values.std()), float(np.abs(values).max()), float(values.mean())

    std = 1.5 * math.sqrt(2 / (fan_in + fan_out))
    s, top, mean = spread(nn.init.xavier_uniform_, gain=1.5)
    assert top <= math.sqrt(3) * std and s == pytest.approx(std, rel=0.05)
    s, _, mean = spread(nn.init.xavier_normal_, gain=1.5)
    assert s == pytest.approx(std, rel=0.05) and abs(mean) < 0.05 * std
    std = math.sqrt(2) / math.sqrt(fan_out)
    s, top, _ = spread(nn.init.kaiming_uniform_, mode="fan_out", nonlinearity="relu")
    assert top <= math.sqrt(3) * std and s == pytest.approx(std, rel=0.05)
    std = math.sqrt(2 / (1 + 0.1 ** 2)) / math.sqrt(fan_in)
    s, _, _ = spread(nn.init.kaiming_normal_, a=0.1)
    assert s == pytest.approx(std, rel=0.05)
    s, top, mean = spread(nn.init.uniform_, a=-2.0, b=4.0)
    assert t.numpy().min() >= -2 and t.numpy().max() < 4 and mean == pytest.approx(1, abs=0.1)
    s, _, mean = spread(nn.init.normal_, mean=3.0, std=0.5)
    assert s == pytest.approx(0.5, rel=0.05) and mean == pytest.approx(3.0, abs=0.02)


def test_trunc_normal_stays_in_bounds_with_the_truncated_spread():
    t = mt.empty(200, 300)
    nn.init.trunc_normal_(t, mean=1.0, std=2.0, a=-1.0, b=3.0)
    values = t.numpy()
    assert values.min() >= -1.0 and values.max() <= 3.0
    # N(1, 2²) truncated to 1 ± 1 std: variance std² (1 - 2 φ(1) / (Φ(1) - Φ(-1)))
    unit = 1 - 2 * math.exp(-0.5) / math.sqrt(2 * math.pi) / math.erf(1 / math.sqrt(2))
    assert values.std() == pytest.approx(2.0 * math.sqrt(unit), rel=0.03)
    assert values.mean() == pytest.approx(1.0, abs=0.02)
    with pytest.warns(UserWarning, match="mean is more than 2 std from"):
        nn.init.trunc_normal_(t, mean=0.0, std=1.0, a=4.0, b=4.5)  # a window far in the tail
    assert t.numpy().min() >= 4.0 and t.numpy().max() <= 4.5


def test_deterministic_initialisers():
    t = mt.empty(3, 4)
    assert nn.init.constant_(t, 2.5).tolist() == [[2.5] * 4] * 3
    assert nn.init.ones_(t) is t and t.tolist() == [[1.0] * 4] * 3
    assert nn.init.zeros_(t).tolist() == [[0.0] * 4] * 3
    assert nn.init.eye_(t).tolist() == np.eye(3, 4).tolist()
    w = mt.empty(4, 2, 3, 3)
    if torch is not None:
        tw = torch.empty(4, 2, 3, 3)
        torch.nn.init.dirac_(tw, groups=2)
        assert nn.init.dirac_(w, groups=2).tolist() == tw.tolist()
    for shape in ((6, 4), (3, 8), (4, 2, 2)):
        q = nn.init.orthogonal_(mt.empty(*shape), gain=2.0).reshape(shape[0], -1).numpy()
        gram = q @ q.T if shape[0] <= q.shape[1] else q.T @ q
        np.testing.assert_allclose(gram, 4 * np.eye(len(gram)), atol=1e-5)


def test_init_does_not_record_and_keeps_dtype():
    w = nn.Parameter(mt.empty(3, 3, dtype=mt.float64))
    nn.init.kaiming_uniform_(w)
    nn.init.orthogonal_(w)
    assert w.is_leaf and w.grad_fn is None and w.dtype == mt.float64
    with pytest.warns(UserWarning, match="zero-element"):
        nn.init.kaiming_normal_(mt.empty(0, 3))


# ------------------------------------------------------------------ nn.utils
def _model_with_grads(lib, seed_grads):
    model = mlp(lib)
    for p, g in zip(model.parameters(), seed_grads):
        p.grad = g.clone()
    return model


@needs_torch
@pytest.mark.parametrize("norm_type", [2.0, 1, 0.5, float("inf"), "inf"])
@pytest.mark.parametrize("max_norm", [0.1, 1000.0])
def test_clip_grad_norm_matches_torch(norm_type, max_norm):
    shapes = [p.shape for p in mlp(mt).parameters()]
    grads = [mt.randn(*s) for s in shapes]
    ours = _model_with_grads(mt, grads)
    theirs = _model_with_grads(torch, [to_torch(g) for g in grads])
    total = nn.utils.clip_grad_norm_(ours.parameters(), max_norm, norm_type)
    ttotal = torch.nn.utils.clip_grad_norm_(theirs.parameters(), max_norm, norm_type)
    close(total, ttotal)
    for p, tp in zip(ours.parameters(), theirs.parameters()):
        close(p.grad, tp.grad)


@needs_torch
def test_clip_grad_value_and_errors_match_torch():
    grads = [mt.randn(*p.shape) * 3 for p in mlp(mt).parameters()]
    ours = _model_with_grads(mt, grads)
    theirs = _model_with_grads(torch, [to_torch(g) for g in grads])
    assert nn.utils.clip_grad_value_(ours.parameters(), 0.5) is None
    torch.nn.utils.clip_grad_value_(theirs.parameters(), 0.5)
    for p, tp in zip(ours.parameters(), theirs.parameters()):
        close(p.grad, tp.grad)
    ours[0].weight.grad[0, 0] = float("nan")
    theirs[0].weight.grad[0, 0] = float("nan")
    same_error(lambda: nn.utils.clip_grad_norm_(ours.parameters(), 1.0,
                                                error_if_nonfinite=True),
               lambda: torch.nn.utils.clip_grad_norm_(theirs.parameters(), 1.0,
                                                      error_if_nonfinite=True))
    assert float(nn.utils.clip_grad_norm_([], 1.0)) == 0.0
    single = nn.Parameter(mt.ones(2))
    single.grad = mt.full((2,), 3.0)
    assert float(nn.utils.clip_grad_norm_(single, 1.0)) == pytest.approx(math.sqrt(18))


@needs_torch
def test_parameters_to_vector_and_back_match_torch():
    ours, theirs = mlp(mt), mlp(torch)
    same_weights(ours, theirs)
    vec = nn.utils.parameters_to_vector(ours.parameters())
    close(vec, torch.nn.utils.parameters_to_vector(theirs.parameters()))
    new = mt.arange(vec.numel(), dtype=mt.float32)
    nn.utils.vector_to_parameters(new, ours.parameters())
    torch.nn.utils.vector_to_parameters(to_torch(new), theirs.parameters())
    for p, tp in zip(ours.parameters(), theirs.parameters()):
        close(p, tp)
    assert isinstance(ours[0].weight, nn.Parameter)
    same_error(lambda: nn.utils.vector_to_parameters([1.0], ours.parameters()),
               lambda: torch.nn.utils.vector_to_parameters([1.0], theirs.parameters()))


def test_parameters_on_two_devices_are_refused(fake_cuda):
    params = [nn.Parameter(mt.ones(2)), nn.Parameter(mt.ones(2, device=fake_cuda))]
    with pytest.raises(TypeError, match="Found two parameters on different devices"):
        nn.utils.parameters_to_vector(params)


@needs_torch
def test_softmax_without_dim_warns_and_picks_torchs_dimension():
    x = mt.randn(2, 3)
    for cls in ("Softmax", "LogSoftmax"):
        with pytest.warns(UserWarning, match="Implicit dimension choice"):
            ours = getattr(nn, cls)()(x)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            theirs = getattr(torch.nn, cls)()(to_torch(x))
        close(ours, theirs)


def test_module_call_without_hooks_is_forward():
    class Twice(nn.Module):
        def forward(self, x, *, k=2):
            return x * k
    m = Twice()
    assert m(mt.ones(1), k=3).tolist() == [3.0]
    handle = m.register_forward_pre_hook(lambda mod, args: None)
    assert m(mt.ones(1), k=3).tolist() == [3.0]
    handle.remove()
    assert not m._forward_pre_hooks


@needs_torch
@pytest.mark.parametrize("call", [
    lambda lib: ((lib.float64,), {}), lambda lib: ((lib.float64, True), {}),
    lambda lib: (("cpu", lib.float64, True), {}), lambda lib: (("cpu",), {"dtype": lib.float64}),
    lambda lib: ((), {"device": "cpu", "dtype": lib.float64, "non_blocking": True}),
    lambda lib: ((lib.ones(1, dtype=lib.float64),), {"non_blocking": False}),
    lambda lib: ((), {"copy": True}), lambda lib: ((), {"foo": 1}),
    lambda lib: ((lib.float64, 3), {}), lambda lib: ((lib.float64,), {"device": "cpu"}),
    lambda lib: (("cpu",), {"device": "cpu"}),
    lambda lib: ((lib.ones(1),), {"dtype": lib.float64}),
])
def test_module_to_argument_forms_match_torch(call):
    outcomes = []
    for lib in (mt, torch):
        model = lib.nn.Linear(2, 2)
        args, kwargs = call(lib)
        try:
            model.to(*args, **kwargs)
            outcomes.append(str(model.weight.dtype).split(".")[-1])
        except (TypeError, RuntimeError) as e:
            outcomes.append(type(e).__name__)
    assert outcomes[0] == outcomes[1]
