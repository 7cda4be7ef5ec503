"""mt.func's module helpers (stack_module_state, functional_call's tie_weights/strict,
replace_all_batch_norm_modules_), linearize, autograd.Function under vmap, and the rest of
autograd (once_differentiable, autograd.functional, saved_tensors_hooks, anomaly mode),
against torch when it is importable."""
import copy
import re
import warnings

import numpy as np
import pytest

import microtensor as mt
from microtensor import nn
from microtensor.func import (functional_call, grad, linearize, replace_all_batch_norm_modules_,
                              stack_module_state, vmap)

from test_func import arr, needs_torch, tfunc, torch  # the shared oracle and helpers


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
        # the class of a tensor is microtensor._tensor.Tensor where torch's is torch.Tensor
        assert str(mine.value).replace("microtensor._tensor.", "microtensor.") == \
            re.sub(r"\btorch\.", "microtensor.", str(theirs.value))
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
    """Against torch.func.jvp (torch.func.linearize gives the same values but traces with
    torch.fx, seconds of start-up for a unit test)."""
    x, tx = both(rand(3, 2))
    y, ty = both(rand(2, seed=1))

    def f(a, b):
        return (a.sin() * b).sum(1), a.exp()

    out, jvp_fn = linearize(f, x, y)
    close(out[0], f(x, y)[0])
    for seed in (2, 3):                        # one recorded graph, many tangents
        u, tu = both(rand(3, 2, seed=seed))
        v, tv = both(rand(2, seed=seed + 10))
        tangent = jvp_fn(u, v)
        assert isinstance(tangent, tuple) and len(tangent) == 2
        expected = mt.func.jvp(f, (x, y), (u, v))[1]
        close(tangent[0], expected[0])
        close(tangent[1], expected[1])
        if torch is not None:
            t0, t1 = tfunc.jvp(f, (tx, ty), (tu, tv))[1]
            close(tangent[0], t0)
            close(tangent[1], t1)


def test_linearize_errors():
    """PyTorch's messages (checked against torch.func.linearize by hand: it needs torch.fx,
    too slow to start for a unit test)."""
    x = mt.tensor(rand(3), dtype=mt.float64)
    _, jvp_fn = linearize(lambda a: a.sin(), x)
    with pytest.raises(RuntimeError, match=r"^tangent:0 with shape microtensor.Size\(\[2\]\) in "
                                           r"flattened pytree doesn't match the shape "
                                           r"microtensor.Size\(\[3\]\) of the corresponding "
                                           r"primal.$"):
        jvp_fn(mt.ones(2, dtype=mt.float64))
    with pytest.raises(RuntimeError, match=r"^tangent:0 with dtype microtensor.float32 in "
                                           r"flattened pytree doesn't match the dtype "
                                           r"microtensor.float64 of the corresponding primal.$"):
        jvp_fn(mt.ones(3))
    with pytest.raises(RuntimeError, match="to have the same argspec as the primals"):
        jvp_fn(mt.ones(3, dtype=mt.float64), mt.ones(3, dtype=mt.float64))


def test_forward_mode_results_need_no_grad_unless_inputs_do():
    """jvp, jacfwd and linearize record their tangents through internal leaves; their
    results must not look differentiable unless a primal or tangent requires grad."""
    x = mt.tensor([0.5, 1.0], dtype=mt.float64)
    assert not mt.func.jvp(mt.sin, (x,), (mt.ones_like(x),))[1].requires_grad
    assert not mt.func.jacfwd(mt.sin)(x).requires_grad
    assert not linearize(mt.sin, x)[1](mt.ones_like(x)).requires_grad
    # a function closing over a tensor an outer grad differentiates stays connected
    w = mt.tensor([3.0, 4.0], dtype=mt.float64)
    outer = grad(lambda w: mt.func.jvp(lambda a: a.sin() * w, (x,), (mt.ones_like(x),))[1]
                 .sum())(w)
    close(outer, x.cos())
    x.requires_grad_()
    tangent = mt.func.jvp(mt.sin, (x,), (mt.ones_like(x),))[1]
    assert tangent.requires_grad
    close(mt.autograd.grad(tangent.sum(), x)[0], -x.sin())


# --------------------------------------------------------------------------- once_differentiable

def square_function(lib):
    class Square(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        @lib.autograd.function.once_differentiable
        def backward(ctx, g):
            x, = ctx.saved_tensors
            assert not g.requires_grad or not lib.is_grad_enabled()
            return 2 * x * g
    return Square


def test_once_differentiable_refuses_double_backward():
    Square = square_function(mt)
    x = mt.tensor([1.0, 2.0], requires_grad=True)
    g, = mt.autograd.grad((Square.apply(x) ** 2).sum(), x, create_graph=True)
    np.testing.assert_allclose(arr(g), [4.0, 32.0])          # 4 x^3
    assert g.requires_grad and g.grad_fn.name() == "Error"
    with pytest.raises(RuntimeError, match="^trying to differentiate twice a function that was "
                                           "marked with @once_differentiable$"):
        g.sum().backward()
    if torch is not None:
        tx = torch.tensor([1.0, 2.0], requires_grad=True)
        tg, = torch.autograd.grad((square_function(torch).apply(tx) ** 2).sum(), tx,
                                  create_graph=True)
        close(g, tg)
        with pytest.raises(RuntimeError, match="differentiate twice"):
            tg.sum().backward()
    # a first-order backward is untouched
    y = Square.apply(x).sum()
    y.backward()
    np.testing.assert_allclose(arr(x.grad), [2.0, 4.0])
    assert Square.backward.__name__ == "backward"


# --------------------------------------------------------------------------- autograd.functional

def poly(x):
    return (x ** 3).sum() + x[0] * x[1]


def two_in_two_out(x, y):
    return x.sin() * y.exp().sum(), (x * x).sum() * y


def cube(x):
    return x ** 3 * 2.0


def scalar_of_two(x, y):
    return (x * y.sin()).sum()


def inputs_for(shapes, seed=7):
    """Float64 inputs of ``shapes`` for microtensor and for torch (None without it)."""
    pairs = [both(rand(*s, seed=seed + k)) for k, s in enumerate(shapes)]
    return tuple(m for m, _ in pairs), tuple(t for _, t in pairs)


def assert_tree_close(mine, theirs):
    if isinstance(theirs, (tuple, list)):
        assert type(mine) is type(theirs) and len(mine) == len(theirs)
        for a, b in zip(mine, theirs):
            assert_tree_close(a, b)
    else:
        assert tuple(mine.shape) == tuple(theirs.shape)
        close(mine, theirs)


def call_both(api, fn, shapes, *, single, v_shapes=None, **kwargs):
    """``autograd.functional.<api>`` on both libraries (one tensor rather than a tuple when
    ``single``), results compared; returns microtensor's and its inputs."""
    ms, ts = inputs_for(shapes)
    args_m, args_t = (ms[0], ts[0]) if single else (ms, ts)
    if v_shapes is not None:
        vm, vt = inputs_for(v_shapes, seed=30)
        args_m, args_t = (args_m, vm[0] if single else vm), (args_t, vt[0] if single else vt)
    else:
        args_m, args_t = (args_m,), (args_t,)
    mine = getattr(mt.autograd.functional, api)(fn, *args_m, **kwargs)
    theirs = getattr(torch.autograd.functional, api)(fn, *args_t, **kwargs)
    assert_tree_close(mine, theirs)
    return mine, args_m


@needs_torch
@pytest.mark.parametrize("vectorize", [False, True])
def test_functional_jacobian_and_hessian_as_torch(vectorize):
    call_both("jacobian", two_in_two_out, [(2,), (3,)], single=False, vectorize=vectorize)
    call_both("jacobian", cube, [(2, 2)], single=True, vectorize=vectorize)
    call_both("jacobian", cube, [(2, 2)], single=False, vectorize=vectorize)
    call_both("hessian", poly, [(3,)], single=True, vectorize=vectorize)
    call_both("hessian", scalar_of_two, [(3,), (3,)], single=False, vectorize=vectorize)
    if vectorize:
        call_both("jacobian", two_in_two_out, [(2,), (3,)], single=False, vectorize=True,
                  strategy="forward-mode")
        call_both("hessian", poly, [(3,)], single=True, vectorize=True,
                  outer_jacobian_strategy="forward-mode")


PRODUCTS = [("vjp", cube, [(2, 2)], True, [(2, 2)]),
            ("jvp", cube, [(2, 2)], True, [(2, 2)]),
            ("vjp", two_in_two_out, [(2,), (3,)], False, [(2,), (3,)]),
            ("jvp", two_in_two_out, [(2,), (3,)], False, [(2,), (3,)]),
            ("vhp", poly, [(3,)], True, [(3,)]),
            ("hvp", poly, [(3,)], True, [(3,)]),
            ("vhp", scalar_of_two, [(3,), (3,)], False, [(3,), (3,)]),
            ("hvp", scalar_of_two, [(3,), (3,)], False, [(3,), (3,)])]


@needs_torch
@pytest.mark.parametrize("api,fn,shapes,single,v_shapes", PRODUCTS,
                         ids=[f"{p[0]}-{p[1].__name__}" for p in PRODUCTS])
def test_functional_products_as_torch(api, fn, shapes, single, v_shapes):
    (out, product), _ = call_both(api, fn, shapes, single=single, v_shapes=v_shapes)
    assert all(not t.requires_grad for t in (out if isinstance(out, tuple) else (out,)))


@needs_torch
@pytest.mark.parametrize("api", ["vjp", "jvp", "vhp", "hvp"])
def test_functional_create_graph_as_torch(api):
    """With create_graph the product is differentiable with respect to the inputs."""
    fn = cube if api in ("vjp", "jvp") else poly
    x, tx = both(rand(3, seed=1), requires_grad=True)
    v, tv = both(rand(3, seed=2))
    _, mine = getattr(mt.autograd.functional, api)(fn, x, v, create_graph=True)
    _, theirs = getattr(torch.autograd.functional, api)(fn, tx, tv, create_graph=True)
    assert mine.requires_grad
    close(mine, theirs)
    g, = mt.autograd.grad((mine * mine).sum(), x)
    tg, = torch.autograd.grad((theirs * theirs).sum(), tx)
    close(g, tg)
    jac = mt.autograd.functional.jacobian(cube, x, create_graph=True)
    tjac = torch.autograd.functional.jacobian(cube, tx, create_graph=True)
    close(mt.autograd.grad(jac.sum(), x)[0], torch.autograd.grad(tjac.sum(), tx)[0])


@needs_torch
def test_functional_strict_and_argument_errors_as_torch():
    F, TF = mt.autograd.functional, torch.autograd.functional
    x, tx = both(rand(3))

    def constant(a):
        return a.new_ones(2)

    def linear(a):
        return (a * 2.0).sum()
    cases = [
        (lambda: F.vjp(constant, x, mt.ones(2, dtype=mt.float64), strict=True),
         lambda: TF.vjp(constant, tx, torch.ones(2, dtype=torch.float64), strict=True)),
        (lambda: F.jacobian(lambda a, b: a * 2, (x, x), strict=True),
         lambda: TF.jacobian(lambda a, b: a * 2, (tx, tx), strict=True)),
        (lambda: F.hessian(linear, x, strict=True), lambda: TF.hessian(linear, tx, strict=True)),
        (lambda: F.jvp(linear, x), lambda: TF.jvp(linear, tx)),
        (lambda: F.vjp(cube, x), lambda: TF.vjp(cube, tx)),
        (lambda: F.vjp(cube, x, mt.ones(2, dtype=mt.float64)),
         lambda: TF.vjp(cube, tx, torch.ones(2, dtype=torch.float64))),
        (lambda: F.hvp(cube, x, x), lambda: TF.hvp(cube, tx, tx)),
        (lambda: F.jacobian(cube, x, vectorize=True, strict=True),
         lambda: TF.jacobian(cube, tx, vectorize=True, strict=True)),
    ]
    for mine, theirs in cases:
        errors_alike(mine, theirs, RuntimeError)
    errors_alike(lambda: F.vjp(cube, [x]), lambda: TF.vjp(cube, [tx]), TypeError)
    # not strict: an independent input gets zeros, as torch
    jac = F.jacobian(lambda a, b: a * 2, (x, x))
    np.testing.assert_array_equal(arr(jac[1]), np.zeros((3, 3)))


# --------------------------------------------------------------------------- Function under vmap

def scaled_cube(lib, kind):
    """``x ** 3 * w`` with a backward that doubles the true gradient of ``x`` (so that a
    result computed by differentiating the forward's ops instead would differ), batched
    by ``kind``: "generated" (generate_vmap_rule) or "rule" (a vmap staticmethod)."""
    class ScaledCube(lib.autograd.Function):
        @staticmethod
        def forward(x, w):
            return x ** 3 * w

        @staticmethod
        def setup_context(ctx, inputs, output):
            x, w = inputs
            ctx.save_for_backward(x, w)

        @staticmethod
        def backward(ctx, g):
            x, w = ctx.saved_tensors
            return 2 * (3 * x ** 2 * w * g), (x ** 3 * g).sum_to_size(w.shape)

    if kind == "generated":
        ScaledCube.generate_vmap_rule = True
    else:
        def vmap_rule(info, in_dims, x, w):
            ScaledCube.infos.append((info.batch_size, info.randomness, in_dims))
            x = x.movedim(in_dims[0], 0) if in_dims[0] is not None else x.unsqueeze(0)
            w = w.movedim(in_dims[1], 0) if in_dims[1] is not None else w
            return ScaledCube.apply(x, w), 0
        ScaledCube.vmap = staticmethod(vmap_rule)
        ScaledCube.infos = []
    return ScaledCube


def loop_of(f, xs):
    return mt.stack([f(x) for x in xs.unbind(0)])


@pytest.mark.parametrize("kind", ["generated", "rule"])
def test_function_vmap_without_fallback(kind):
    Fn = scaled_cube(mt, kind)
    xs, txs = both(rand(4, 3))
    w, tw = both(rand(3, seed=1), requires_grad=True)

    def f(x):
        return Fn.apply(x, w)

    def loss(x):
        return Fn.apply(x, w).sum()
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # the per-sample fallback warns
        out = vmap(f)(xs)
        grads = vmap(grad(loss))(xs)
        grads_dim1 = vmap(grad(loss), in_dims=1)(xs.t().contiguous())
        nested = vmap(vmap(grad(loss)))(xs.reshape(2, 2, 3))
        outer = grad(lambda v: vmap(f)(v).sum())(xs)
        w_grad, = mt.autograd.grad(vmap(f)(xs).sum(), w)
    close(out, loop_of(f, xs))
    expected = loop_of(grad(loss), xs)
    close(grads, expected)
    close(grads_dim1, expected)
    close(nested, expected.reshape(2, 2, 3))
    close(outer, expected)
    close(w_grad, mt.autograd.grad(loop_of(f, xs).sum(), w)[0])
    close(expected, 2 * 3 * xs ** 2 * w)            # the custom backward was used
    if kind == "rule":
        assert Fn.infos[0] == (4, "error", (0, None))
    if torch is not None:
        TFn = scaled_cube(torch, kind)
        close(out, tfunc.vmap(lambda x: TFn.apply(x, tw))(txs))
        close(grads, tfunc.vmap(tfunc.grad(lambda x: TFn.apply(x, tw).sum()))(txs))
        tw_grad, = torch.autograd.grad(tfunc.vmap(lambda x: TFn.apply(x, tw))(txs).sum(), tw)
        close(w_grad, tw_grad)


def function_variants(lib):
    class NoSetup(lib.autograd.Function):
        generate_vmap_rule = True

        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    class Both(lib.autograd.Function):
        generate_vmap_rule = True

        @staticmethod
        def forward(x):
            return x * 2

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, g):
            return g * 2

        @staticmethod
        def vmap(info, in_dims, x):
            return x * 2, in_dims[0]

    class OneReturn(Both):
        generate_vmap_rule = False

        @staticmethod
        def vmap(info, in_dims, x):
            return x * 2

    class BadDims(OneReturn):
        @staticmethod
        def vmap(info, in_dims, x):
            return x * 2, (0, 1)
    return NoSetup, Both, OneReturn, BadDims


@needs_torch
def test_function_vmap_errors_as_torch():
    *same_text, bad_dims = zip(function_variants(mt), function_variants(torch))
    for mine, theirs in same_text:
        errors_alike(lambda: vmap(mine.apply)(mt.ones(2, 3)),
                     lambda: tfunc.vmap(theirs.apply)(torch.ones(2, 3)), RuntimeError)
    # the same text but for how the tree specs print
    for fn, vmap_of, ones in zip(bad_dims, (vmap, tfunc.vmap), (mt.ones, torch.ones)):
        with pytest.raises(RuntimeError, match=r"^The autograd.Function's vmap staticmethod "
                                               r"returned an incompatible \(output, out_dims\) "
                                               r"tuple. Expected out_dims=\(0, 1\)"):
            vmap_of(fn.apply)(ones(2, 3))


def test_function_vmap_rule_out_dims_none_is_unbatched():
    class Shared(mt.autograd.Function):
        @staticmethod
        def forward(x):
            return x.sum()

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, g):
            raise AssertionError("not differentiated here")

        @staticmethod
        def vmap(info, in_dims, x):
            return x.sum(), None        # one value shared by every sample

    out = vmap(Shared.apply)(mt.ones(2, 3))
    np.testing.assert_array_equal(arr(out), [6.0, 6.0])


# --------------------------------------------------------------------------- saved_tensors_hooks

def hook_log(lib):
    """Run ``(x.exp() * x).sum()`` under logging hooks that pack copies; returns the log,
    the backward's gradient and x."""
    log = []

    def pack(t):
        log.append(("pack", tuple(t.shape), t.requires_grad, t.grad_fn is not None))
        return t.detach().clone()

    def unpack(packed):
        log.append(("unpack",))
        return packed
    x = lib.ones(3, requires_grad=True)
    with lib.autograd.graph.saved_tensors_hooks(pack, unpack):
        z = (x.exp() * x).sum()
    packed = list(log)
    z.backward()
    return packed, log[len(packed):], x.grad


def test_saved_tensors_hooks_pack_and_unpack():
    packed, unpacked, g = hook_log(mt)
    # exp's output, then mul's y and x (torch saves mul's two in the other order)
    assert packed[0] == ("pack", (3,), True, True)
    assert sorted(packed[1:]) == [("pack", (3,), True, False), ("pack", (3,), True, True)]
    assert unpacked == [("unpack",)] * 3
    np.testing.assert_allclose(arr(g), [2 * np.e] * 3)
    if torch is not None:
        t_packed, t_unpacked, t_g = hook_log(torch)
        assert (sorted(packed), unpacked) == (sorted(t_packed), t_unpacked)
        close(g, t_g)
    # outside the context nothing is packed
    x = mt.ones(2, requires_grad=True)
    calls = []
    with mt.autograd.graph.saved_tensors_hooks(lambda t: calls.append(1) or t, lambda t: t):
        pass
    (x.exp() * x).sum().backward()
    assert calls == []


def test_saved_tensors_hooks_nested_functions_and_double_backward():
    class Square(mt.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            x, = ctx.saved_tensors
            return 2 * x * g
    outer, inner = [], []
    x = mt.tensor([1.0, 2.0], requires_grad=True)
    with mt.autograd.graph.saved_tensors_hooks(lambda t: outer.append(1) or t, lambda t: t):
        with mt.autograd.graph.saved_tensors_hooks(lambda t: inner.append(1) or t * 1,
                                                   lambda t: t):
            y = Square.apply(x).sum()
        assert (len(inner), len(outer)) == (1, 0)  # the innermost pair only
        w = (x ** 3).sum()                         # the outer pair again
    assert len(inner) == 1 and len(outer) >= 1
    y.backward()
    np.testing.assert_allclose(arr(x.grad), [2.0, 4.0])
    g, = mt.autograd.grad(w, x, create_graph=True)  # packed copies still reach x's history
    np.testing.assert_allclose(arr(mt.autograd.grad(g.sum(), x)[0]), [6.0, 12.0])


@needs_torch
def test_saved_tensors_hooks_errors_as_torch():
    def run(lib):
        x = lib.ones(2, requires_grad=True)
        with lib.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: 5):
            y = (x * x).sum()
        y.backward()
    errors_alike(lambda: run(mt), lambda: run(torch), TypeError)

    def twice(lib):
        x = lib.ones(2, requires_grad=True)
        with lib.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
            y = (x * x).sum()
        y.backward()
        y.backward()
    errors_alike(lambda: twice(mt), lambda: twice(torch), RuntimeError)


# --------------------------------------------------------------------------- anomaly mode

def nan_backward(lib):
    """``(x / x).sum()`` at 0 under detect_anomaly: the error and the warnings' texts."""
    x = lib.tensor([0.0, 1.0], requires_grad=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with lib.autograd.detect_anomaly():
            y = (x / x).sum()                                   # the forward line
            with pytest.raises(RuntimeError) as error:
                y.backward()
    return str(error.value), [str(w.message) for w in caught]


def test_detect_anomaly_names_the_forward_op():
    message, warned = nan_backward(mt)
    assert message == "Function 'DivBackward0' returned nan values in its 1th output."
    assert warned[0].startswith("Anomaly Detection has been enabled.")
    assert warned[1].startswith("Error detected in DivBackward0. Traceback of forward call "
                                "that caused the error:\n")
    assert "y = (x / x).sum()                                   # the forward line" in warned[1]
    assert "microtensor" + "/ops" not in warned[1]       # the caller's frames only
    assert not mt.autograd.anomaly_mode.is_anomaly_enabled()
    if torch is not None:
        t_message, t_warned = nan_backward(torch)
        assert t_message == message
        assert t_warned[0] == warned[0]
        assert t_warned[1].split("\n")[0] == warned[1].split("\n")[0]


def test_anomaly_mode_off_lets_nan_through_and_names_raising_nodes():
    x = mt.tensor([0.0, 1.0], requires_grad=True)
    (x / x).sum().backward()                                    # off: NaN is no error
    assert np.isnan(arr(x.grad)).any()

    class Broken(mt.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, g):
            raise ValueError("broken backward")
    mode = mt.autograd.set_detect_anomaly(True)
    try:
        assert mt.autograd.anomaly_mode.is_anomaly_enabled()
        y = Broken.apply(x).sum()
        with pytest.warns(UserWarning, match="(?s)Error detected in BrokenBackward. Traceback of "
                                             "forward call that caused the error:\n.*Broken"
                                             r"\.apply\(x\)"):
            with pytest.raises(ValueError, match="broken backward"):
                y.backward()
    finally:
        mt.autograd.set_detect_anomaly(False)
    assert not mt.autograd.anomaly_mode.is_anomaly_enabled() and mode is not None
    with mt.autograd.set_detect_anomaly(True, check_nan=False):     # check_nan off
        z = mt.tensor([0.0], requires_grad=True)
        (z / z).sum().backward()
    assert not mt.autograd.anomaly_mode.is_anomaly_enabled()


# --------------------------------------------------------------------------- model ensembling

def simple_mlp(lib):
    """The model of PyTorch's model-ensembling tutorial (smaller layers), in ``lib``."""
    class SimpleMLP(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = lib.nn.Linear(48, 32)
            self.fc2 = lib.nn.Linear(32, 32)
            self.fc3 = lib.nn.Linear(32, 10)

        def forward(self, x):
            x = x.flatten(1)
            x = lib.nn.functional.relu(self.fc1(x))
            x = lib.nn.functional.relu(self.fc2(x))
            return self.fc3(x)
    return SimpleMLP


def ensemble(lib, models, minibatches, minibatch, base_model):
    """The tutorial's two vmapped calls: a minibatch per model, and one for all."""
    params, buffers = lib.func.stack_module_state(models)

    def fmodel(params, buffers, x):
        return lib.func.functional_call(base_model, (params, buffers), (x,))
    each = lib.func.vmap(fmodel, in_dims=(0, 0, 0))(params, buffers, minibatches)
    same = lib.func.vmap(fmodel, in_dims=(0, 0, None))(params, buffers, minibatch)
    return params, each, same


def test_model_ensembling_tutorial():
    """torch.func's model-ensembling tutorial: stacked models vmapped with functional_call,
    one minibatch per model (in_dims 0, 0, 0) and one minibatch for all (0, 0, None), equal
    to the loop of models and to torch; gradients reach the stacked parameters per model."""
    mt.manual_seed(0)
    num_models = 4
    data = mt.randn(num_models, 16, 1, 6, 8)
    SimpleMLP = simple_mlp(mt)
    models = [SimpleMLP() for _ in range(num_models)]
    minibatches = data[:num_models]
    loop_each = mt.stack([model(mb) for model, mb in zip(models, minibatches)])
    minibatch = data[0]
    loop_same = mt.stack([model(minibatch) for model in models])
    base_model = copy.deepcopy(models[0])
    base_model = base_model.to("meta")        # as the tutorial: a stateless skeleton
    assert all(p.is_meta and isinstance(p, mt.nn.Parameter) for p in base_model.parameters())
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # no per-sample fallback on the way
        params, each, same = ensemble(mt, models, minibatches, minibatch, base_model)
    assert each.shape == (num_models, 16, 10) and same.shape == (num_models, 16, 10)
    close(each, loop_each, rtol=1e-5, atol=1e-6)
    close(same, loop_same, rtol=1e-5, atol=1e-6)

    (same ** 2).sum().backward()
    for i, model in enumerate(models):
        (model(minibatch) ** 2).sum().backward()
        for name, p in model.named_parameters():
            close(params[name].grad[i], p.grad, rtol=1e-4, atol=1e-6)

    if torch is not None:
        TorchMLP = simple_mlp(torch)
        torch_models = [TorchMLP() for _ in range(num_models)]
        for model, tm in zip(models, torch_models):
            tm.load_state_dict({k: torch.tensor(arr(v)) for k, v in model.state_dict().items()})
        _, t_each, t_same = ensemble(torch, torch_models,
                                     torch.tensor(arr(minibatches)), torch.tensor(arr(minibatch)),
                                     copy.deepcopy(torch_models[0]).to("meta"))
        close(each, t_each, rtol=1e-5, atol=1e-6)
        close(same, t_same, rtol=1e-5, atol=1e-6)


def test_saved_tensors_hooks_are_per_thread():
    import threading
    packed = []
    x = mt.ones(2, requires_grad=True)
    results = {}

    def other_thread():
        results["y"] = (x * x).sum()          # saved without this thread's hooks
    with mt.autograd.graph.saved_tensors_hooks(lambda t: packed.append(1) or t, lambda t: t):
        worker = threading.Thread(target=other_thread)
        worker.start()
        worker.join()
        assert packed == []
        (x * x).sum()
        assert len(packed) == 2
    results["y"].backward()
    np.testing.assert_array_equal(arr(x.grad), [2.0, 2.0])


def test_detect_anomaly_as_decorator_restores_mode():
    @mt.autograd.detect_anomaly()
    def inside():
        return mt.autograd.anomaly_mode.is_anomaly_enabled()
    with pytest.warns(UserWarning, match="Anomaly Detection has been enabled"):
        assert inside()
    assert not mt.autograd.anomaly_mode.is_anomaly_enabled()
    with mt.autograd.set_detect_anomaly(True):
        with mt.autograd.set_detect_anomaly(False):
            assert not mt.autograd.anomaly_mode.is_anomaly_enabled()
        assert mt.autograd.anomaly_mode.is_anomaly_enabled()
    assert not mt.autograd.anomaly_mode.is_anomaly_enabled()
