"""mt.func's module helpers (stack_module_state, functional_call's tie_weights/strict,
replace_all_batch_norm_modules_), linearize, autograd.Function under vmap, and the rest of
autograd (once_differentiable, autograd.functional, saved_tensors_hooks, anomaly mode),
against torch when it is importable."""
import copy
import warnings

import numpy as np
import pytest

import microtensor as mt
from microtensor import nn
from microtensor.func import (functional_call, grad, linearize, replace_all_batch_norm_modules_,
                              stack_module_state, vmap)

try:
    import torch
    import torch.func as tfunc
except ImportError:
    torch = tfunc = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (optional "
                                                       "test oracle)")


def arr(t):
    return np.array(t.detach()._array())


def close(actual, expected, rtol=1e-6, atol=1e-8):
    if torch is not None and isinstance(expected, torch.Tensor):
        expected = expected.detach().numpy()
    elif not isinstance(expected, np.ndarray):
        expected = arr(expected)
    np.testing.assert_allclose(arr(actual), expected, rtol=rtol, atol=atol)


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def both(a, requires_grad=False):
    """The same float64 values as a microtensor and (when importable) a torch tensor."""
    m = mt.tensor(a, dtype=mt.float64, requires_grad=requires_grad)
    t = torch.tensor(a, dtype=torch.float64, requires_grad=requires_grad) if torch else None
    return m, t


def errors_alike(mt_call, torch_call, exc):
    with pytest.raises(exc) as mine:
        mt_call()
    if torch is not None:
        with pytest.raises(exc) as theirs:
            torch_call()
        assert str(mine.value) == str(theirs.value).replace("torch.", "microtensor.")
    return str(mine.value)


# --------------------------------------------------------------------------- stack_module_state

def mlps(n, lib, seed=0):
    lib.manual_seed(seed)
    return [lib.nn.Sequential(lib.nn.Linear(3, 4), lib.nn.ReLU(), lib.nn.Linear(4, 2))
            for _ in range(n)]


def test_stack_module_state_stacks_new_leaves():
    models = mlps(3, mt)
    params, buffers = stack_module_state(models)
    assert list(params) == ["0.weight", "0.bias", "2.weight", "2.bias"] and buffers == {}
    for name, p in params.items():
        assert p.shape == (3,) + tuple(dict(models[0].named_parameters())[name].shape)
        assert p.is_leaf and p.requires_grad and p.grad_fn is None
        for i, m in enumerate(models):
            close(p[i], dict(m.named_parameters())[name])
    params["0.weight"].sum().backward()       # a new leaf: nothing reaches the models
    assert all(q.grad is None for m in models for q in m.parameters())


class WithBuffer(nn.Module):
    def __init__(self, value):
        super().__init__()
        self.w = nn.Parameter(mt.full((2,), value))
        self.register_buffer("scale", mt.full((2,), value * 10))

    def forward(self, x):
        return x * self.w + self.scale


def test_stack_module_state_buffers_and_frozen_params():
    models = [WithBuffer(1.0), WithBuffer(2.0)]
    for m in models:
        m.w.requires_grad_(False)
    params, buffers = stack_module_state(models)
    assert not params["w"].requires_grad and not buffers["scale"].requires_grad
    np.testing.assert_array_equal(arr(buffers["scale"]), [[10, 10], [20, 20]])
    models[0].w.requires_grad_(True)
    with pytest.raises(RuntimeError, match="Expected w from each model to have the same "
                                           r"\.requires_grad"):
        stack_module_state(models)


@needs_torch
def test_stack_module_state_errors_as_torch():
    errors_alike(lambda: stack_module_state([]), lambda: tfunc.stack_module_state([]),
                 RuntimeError)
    errors_alike(lambda: stack_module_state([nn.Linear(1, 1), nn.Linear(1, 1).eval()]),
                 lambda: tfunc.stack_module_state([torch.nn.Linear(1, 1),
                                                   torch.nn.Linear(1, 1).eval()]),
                 RuntimeError)
    errors_alike(lambda: stack_module_state([nn.Linear(1, 1), nn.ReLU()]),
                 lambda: tfunc.stack_module_state([torch.nn.Linear(1, 1), torch.nn.ReLU()]),
                 RuntimeError)


# --------------------------------------------------------------------------- functional_call

def tied_module(lib):
    """``x + foo + foo_tied`` with ``foo_tied`` the same parameter as ``foo``."""
    def __init__(self):
        lib.nn.Module.__init__(self)
        self.foo = lib.nn.Parameter(lib.ones(()))
        self.foo_tied = self.foo

    def forward(self, x):
        return x + self.foo + self.foo_tied
    return type("Tied", (lib.nn.Module,), {"__init__": __init__, "forward": forward})()


def tied_pair():
    return tied_module(mt), tied_module(torch)


@needs_torch
def test_functional_call_tie_weights_as_torch():
    mine, theirs = tied_pair()
    for tie in (True, False):
        a = functional_call(mine, {"foo": mt.zeros(())}, mt.zeros(()), tie_weights=tie)
        b = tfunc.functional_call(theirs, {"foo": torch.zeros(())}, torch.zeros(()),
                                  tie_weights=tie)
        assert a.item() == b.item() == (0.0 if tie else 1.0)
    z, tz = mt.zeros(()), torch.zeros(())
    assert functional_call(mine, {"foo": z, "foo_tied": z}, mt.zeros(())).item() == 0.0
    message = errors_alike(
        lambda: functional_call(mine, {"foo": mt.zeros(()), "foo_tied": mt.ones(())},
                                mt.zeros(())),
        lambda: tfunc.functional_call(theirs, {"foo": torch.zeros(()),
                                               "foo_tied": torch.ones(())}, torch.zeros(())),
        ValueError)
    assert "tie_weights=False" in message
    # untied, two values are fine
    out = functional_call(mine, {"foo": mt.zeros(()), "foo_tied": mt.full((), 5.0)},
                          mt.zeros(()), tie_weights=False)
    assert out.item() == 5.0
    assert mine.foo.item() == 1.0 and mine.foo_tied is mine.foo


@needs_torch
def test_functional_call_strict_as_torch():
    mine, theirs = nn.Linear(2, 2), torch.nn.Linear(2, 2)
    message = errors_alike(
        lambda: functional_call(mine, {"weight": mt.zeros(2, 2), "extra": mt.zeros(1)},
                                mt.zeros(2), strict=True),
        lambda: tfunc.functional_call(theirs, {"weight": torch.zeros(2, 2),
                                               "extra": torch.zeros(1)},
                                      torch.zeros(2), strict=True),
        RuntimeError)
    assert message == ("Error(s) in reparametrizing for Linear:\n\tUnexpected key(s): "
                       "'extra'.\n\tMissing key(s): 'bias'.")
    out = functional_call(mine, {"weight": mt.eye(2), "bias": mt.ones(2)},
                          mt.tensor([1.0, 2.0]), strict=True)
    np.testing.assert_array_equal(arr(out), [2.0, 3.0])
    # strict counts tied names, as torch: giving one of them is enough when tied
    m, t = tied_pair()
    assert functional_call(m, {"foo": mt.zeros(())}, mt.zeros(()), strict=True).item() == 0
    errors_alike(lambda: functional_call(m, {"foo": mt.zeros(())}, mt.zeros(()),
                                         strict=True, tie_weights=False),
                 lambda: tfunc.functional_call(t, {"foo": torch.zeros(())}, torch.zeros(()),
                                               strict=True, tie_weights=False),
                 RuntimeError)


@needs_torch
def test_functional_call_argument_errors_as_torch():
    mine, theirs = nn.Linear(2, 2), torch.nn.Linear(2, 2)
    errors_alike(lambda: functional_call(mine, 3, mt.zeros(2)),
                 lambda: tfunc.functional_call(theirs, 3, torch.zeros(2)), ValueError)
    errors_alike(lambda: functional_call(mine, [{}, 3], mt.zeros(2)),
                 lambda: tfunc.functional_call(theirs, [{}, 3], torch.zeros(2)), ValueError)
    errors_alike(lambda: functional_call(mine, ({"bias": mt.zeros(2)}, {"bias": mt.zeros(2)}),
                                         mt.zeros(2)),
                 lambda: tfunc.functional_call(theirs, ({"bias": torch.zeros(2)},
                                                        {"bias": torch.zeros(2)}),
                                               torch.zeros(2)), ValueError)


class Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", mt.zeros(()))

    def forward(self):
        self.count = self.count + 1
        return self.count


def test_functional_call_writes_reassigned_buffers_back():
    module, given = Counter(), {"count": mt.full((), 5.0)}
    assert functional_call(module, given).item() == 6.0        # args=None: no arguments
    assert given["count"].item() == 6.0 and module.count.item() == 0.0
    assert "count" in module._buffers


# --------------------------------------------------------------------------- batch norm

class StandInBatchNorm(nn.Module):
    """A stand-in with batch norm's running-stats attributes (no BatchNorm class yet)."""

    def __init__(self):
        super().__init__()
        self.track_running_stats = True
        self.register_buffer("running_mean", mt.zeros(3))
        self.register_buffer("running_var", mt.ones(3))
        self.register_buffer("num_batches_tracked", mt.tensor(0))


def test_replace_all_batch_norm_modules_():
    root = nn.Sequential(nn.Linear(3, 3), StandInBatchNorm(), nn.Sequential(StandInBatchNorm()))
    assert replace_all_batch_norm_modules_(root) is root
    for bn in (root[1], root[2][0]):
        assert bn.running_mean is None and bn.running_var is None
        assert bn.num_batches_tracked is None and bn.track_running_stats is False
        assert "running_mean" in bn._buffers           # still registered, as None
        assert dict(bn.named_buffers()) == {}
    assert root[0].weight is not None
    if torch is not None:
        bn = torch.nn.BatchNorm1d(3)
        tfunc.replace_all_batch_norm_modules_(torch.nn.Sequential(bn))
        assert bn.running_mean is None and bn.track_running_stats is False


# --------------------------------------------------------------------------- linearize

def test_linearize_matches_jvp_and_torch():
    x, tx = both(rand(3, 2))
    y, ty = both(rand(2, seed=1))

    def f(a, b):
        return (a.sin() * b).sum(1), a.exp()

    out, jvp_fn = linearize(f, x, y)
    close(out[0], f(x, y)[0])
    for seed in (2, 3):
        u, tu = both(rand(3, 2, seed=seed))
        v, tv = both(rand(2, seed=seed + 10))
        tangent = jvp_fn(u, v)
        assert isinstance(tangent, tuple) and len(tangent) == 2
        expected = mt.func.jvp(f, (x, y), (u, v))[1]
        close(tangent[0], expected[0])
        close(tangent[1], expected[1])
        if torch is not None:
            _, theirs = tfunc.linearize(f, tx, ty)
            t0, t1 = theirs(tu, tv)
            close(tangent[0], t0)
            close(tangent[1], t1)


@needs_torch
def test_linearize_errors_as_torch():
    x, tx = both(rand(3))
    _, jvp_fn = linearize(lambda a: a.sin(), x)
    _, theirs = tfunc.linearize(lambda a: a.sin(), tx)
    errors_alike(lambda: jvp_fn(mt.ones(2, dtype=mt.float64)),
                 lambda: theirs(torch.ones(2, dtype=torch.float64)), RuntimeError)
    errors_alike(lambda: jvp_fn(mt.ones(3)), lambda: theirs(torch.ones(3)), RuntimeError)
    with pytest.raises(RuntimeError, match="to have the same argspec as the primals"):
        jvp_fn(mt.ones(3, dtype=mt.float64), mt.ones(3, dtype=mt.float64))
