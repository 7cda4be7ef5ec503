"""Autograd and vmap hardening, each case compared with PyTorch (torch.func): no writable
NumPy alias of a tensor that requires grad, in-place ops on views made under no_grad,
retain_grad across in-place ops, validation of ``.grad`` assignment, hooks and custom
backward results, grad-mode decorators on generators, escaped BatchedTensors and the
neural-tangent-kernel pattern (jvp through ``F.linear`` under two vmaps)."""
import numpy as np
import pytest

import microtensor as mt
import microtensor.nn.functional as F
from microtensor.func import jvp, vmap

torch = pytest.importorskip("torch", reason="PyTorch is the oracle of these tests")


def both(build):
    """``build(lib)`` run on microtensor and on PyTorch."""
    return build(mt), build(torch)


def same_error(build, exc_type, match):
    """``build(lib)`` raises ``exc_type`` matching ``match`` on both libraries."""
    for lib in (mt, torch):
        with pytest.raises(exc_type, match=match):
            build(lib)


def assert_close(a, b):
    np.testing.assert_allclose(np.asarray(a.detach()), b.detach().numpy(), rtol=1e-5,
                               atol=1e-6)


# ------------------------------------------------------------------ NumPy aliases

NUMPY_REQUIRES_GRAD = r"Can't call numpy\(\) on Tensor that requires grad\. Use " \
                      r"tensor\.detach\(\)\.numpy\(\) instead\."


@pytest.mark.parametrize("convert", [np.asarray, np.array, lambda t: t.__array__(),
                                     lambda t: t.numpy()])
@pytest.mark.parametrize("make", [lambda lib: lib.ones(3, requires_grad=True),
                                  lambda lib: lib.ones(3, requires_grad=True) * 2,
                                  lambda lib: (lib.ones(3, 2, requires_grad=True) * 2)[0]])
def test_numpy_conversion_of_a_tensor_that_requires_grad_is_refused(convert, make):
    same_error(lambda lib: convert(make(lib)), RuntimeError, NUMPY_REQUIRES_GRAD)


def test_numpy_conversion_after_detach_or_without_grad_is_a_writable_alias():
    t = mt.ones(3, requires_grad=True)
    alias = np.asarray(t.detach())
    alias[0] = 5.0
    assert t[0].item() == 5.0
    plain = mt.zeros(2)
    np.asarray(plain)[1] = 3.0
    assert plain.tolist() == [0.0, 3.0]
    assert np.asarray(mt.ones(2), dtype=np.float64).dtype == np.float64


# ------------------------------------------------------------------ views made under no_grad

# PyTorch says "A view was created ..." or, for a view of such a view, "Output 0 of Select
# is a view of a view which was created ..."
NO_GRAD_VIEW = "created in no_grad mode and is being modified inplace with grad mode enabled"


@pytest.mark.parametrize("base", ["leaf", "non-leaf"])
@pytest.mark.parametrize("write", [lambda v, lib: v.mul_(2), lambda v, lib: v.zero_(),
                                   lambda v, lib: v.add_(lib.ones(2)),
                                   lambda v, lib: v.__setitem__(0, 5.0),
                                   lambda v, lib: v[1:].mul_(2), lambda v, lib: v[0].fill_(1)])
def test_inplace_on_a_view_made_under_no_grad_is_refused_in_grad_mode(base, write):
    def build(lib):
        x = lib.ones(3, requires_grad=True)
        if base == "non-leaf":
            x = x.clone()
        with lib.no_grad():
            v = x[:2]
        write(v, lib)
    same_error(build, RuntimeError, NO_GRAD_VIEW)


def test_refused_write_on_a_no_grad_view_changes_nothing():
    x = mt.ones(3, requires_grad=True).clone()
    with mt.no_grad():
        v = x[:2]
    version = x._version
    with pytest.raises(RuntimeError, match=NO_GRAD_VIEW):
        v.mul_(2)
    assert x.tolist() == [1.0, 1.0, 1.0] and x._version == version


def test_no_grad_views_may_still_be_written_where_torch_allows():
    def build(lib):
        x = lib.ones(3, requires_grad=True).clone()
        with lib.no_grad():
            v = x[:2]
            v.mul_(2)                 # view and write both under no_grad
        plain = lib.ones(3)
        with lib.no_grad():
            w = plain[:2]
        w.mul_(3)                     # the base does not require grad
        x.detach()[2:].mul_(5)        # a detached alias is not a view
        return x.detach(), plain
    (mx, mp), (tx, tp) = both(build)
    assert_close(mx, tx)
    assert_close(mp, tp)


# ------------------------------------------------------------------ retain_grad

@pytest.mark.parametrize("inplace", [lambda y, lib: y.mul_(3), lambda y, lib: y.add_(1),
                                     lambda y, lib: y[1:].mul_(4),
                                     lambda y, lib: y.mul_(2).add_(1)])
def test_retain_grad_then_inplace_gives_the_gradient_of_the_new_value(inplace):
    def build(lib):
        w = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
        y = w * 2
        y.retain_grad()
        inplace(y, lib)
        (y * y).sum().backward()
        return y.grad, w.grad
    (my, mw), (ty, tw) = both(build)
    assert_close(my, ty)
    assert_close(mw, tw)


@pytest.mark.parametrize("retain_first", [True, False])
def test_retain_grad_sees_the_gradient_after_the_tensors_other_hooks(retain_first):
    def build(lib):
        w = lib.ones(3, requires_grad=True)
        y = w * 2
        if retain_first:
            y.retain_grad()
        y.register_hook(lambda g: g * 2)
        if not retain_first:
            y.retain_grad()
        y.sum().backward()
        return y.grad, w.grad
    (my, mw), (ty, tw) = both(build)
    assert_close(my, ty)
    assert_close(mw, tw)


def test_retain_grad_on_a_view_then_inplace_on_it():
    def build(lib):
        w = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
        y = w * 2
        v = y[1:]
        v.retain_grad()
        v.mul_(3)
        (y * y).sum().backward()
        return v.grad, w.grad
    (mv, mw), (tv, tw) = both(build)
    assert mv is None and tv is None      # the view's new history is not in y's graph
    assert_close(mw, tw)


# ------------------------------------------------------------------ .grad assignment

@pytest.mark.parametrize("value, exc, match", [
    (lambda lib: lib.ones(4), RuntimeError,
     r"attempting to assign a gradient of size '\[4\]' to a tensor of size '\[3\]'"),
    (lambda lib: lib.ones(3, dtype=lib.float64), RuntimeError,
     "attempting to assign a gradient with dtype 'double' to a tensor with grad_dtype 'Float'"),
    (lambda lib: lib.ones(4, dtype=lib.int64), RuntimeError,
     "attempting to assign a gradient with dtype 'long int' to a tensor with grad_dtype "
     "'Float'"),
    (lambda lib: 5, TypeError, "assigned grad expected to be a Tensor or None but got grad "
                               "of type int"),
])
def test_assigning_a_mismatched_grad_is_refused(value, exc, match):
    def build(lib):
        x = lib.ones(3, requires_grad=True)
        x.grad = value(lib)
    same_error(build, exc, match)


def test_refused_grad_assignment_keeps_the_old_grad_and_valid_ones_pass():
    x = mt.ones(3, requires_grad=True)
    x.grad = mt.full((3,), 2.0)
    with pytest.raises(RuntimeError):
        x.grad = mt.ones(2, 3)
    assert x.grad.tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(RuntimeError, match="can't assign Variable as its own grad"):
        x.grad = x
    x.grad = mt.zeros(3).expand(3)    # any strides
    x.grad = None
    assert x.grad is None


def test_assigning_a_grad_on_another_device_is_refused(monkeypatch):
    import fake_cupy
    from microtensor.backends import cuda as backend
    monkeypatch.setattr(backend, "_cupy", fake_cupy)   # CuPy's rules over host memory
    x = mt.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="attempting to assign a gradient with device type "
                                           "'cuda' to a tensor with device type 'cpu'"):
        x.grad = mt.ones(3, device="cuda")
    assert x.grad is None


# ------------------------------------------------------------------ hooks

def _tensor_hook(where, result):
    def build(lib):
        x = lib.ones(3, requires_grad=True)
        target = x if where == "leaf" else x * 2
        target.register_hook(result(lib))
        (target * 2).sum().backward()
    return build


@pytest.mark.parametrize("where", ["leaf", "non-leaf"])
def test_tensor_hook_changing_the_size_is_refused(where):
    def wrong_size(lib):
        def hook(grad):
            return lib.ones(4)
        return hook
    same_error(_tensor_hook(where, wrong_size), RuntimeError,
               "hook 'hook' has changed the size of value")


@pytest.mark.parametrize("where", ["leaf", "non-leaf"])
def test_tensor_hook_changing_the_dtype_is_refused(where):
    same_error(_tensor_hook(where, lambda lib: (lambda g: g.double())), RuntimeError,
               r"hook '<lambda>' has changed the type of value \(was (torch|microtensor)\."
               r"FloatTensor got (torch|microtensor)\.DoubleTensor\)")


@pytest.mark.parametrize("result, match", [
    (lambda lib, go: (lib.ones(4),), "has changed the size of value"),
    (lambda lib, go: (go[0].double(),), "has changed the type of value"),
    (lambda lib, go: (go[0], go[0]),
     r"has returned an incorrect number of values \(got 2, but expected 1\)"),
])
def test_node_prehook_results_are_checked(result, match):
    def build(lib):
        x = lib.ones(3, requires_grad=True)
        y = x * 2
        y.grad_fn.register_prehook(lambda go: result(lib, go))
        y.sum().backward()
    same_error(build, RuntimeError, match)


def test_node_post_hook_changing_the_size_is_refused():
    x = mt.ones(3, requires_grad=True)
    y = x.exp()
    y.grad_fn.register_hook(lambda gi, go: (mt.ones(4),))
    with pytest.raises(RuntimeError, match="hook '<lambda>' has changed the size of value"):
        y.sum().backward()
    assert x.grad is None


def test_hooks_returning_a_valid_gradient_still_replace_it():
    def build(lib):
        x = lib.ones(3, requires_grad=True)
        y = x * 2
        y.register_hook(lambda g: g * 10)
        y.grad_fn.register_prehook(lambda go: (go[0] + 1,))
        x.register_hook(lambda g: g - 3)
        y.sum().backward()
        return x.grad
    m, t = both(build)
    assert_close(m, t)


# ------------------------------------------------------------------ custom Function results

def _function(lib, backward):
    class Scale(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

    Scale.backward = staticmethod(backward)
    return Scale


@pytest.mark.parametrize("result, got, expected", [
    (lambda lib, g: lib.ones(4), "4", "3"),
    (lambda lib, g: lib.ones(2, 4), "2, 4", "3"),
])
def test_custom_backward_of_a_wrong_shape_is_refused(result, got, expected):
    def build(lib):
        fn = _function(lib, lambda ctx, g: result(lib, g))
        fn.apply(lib.ones(3, requires_grad=True)).sum().backward()
    same_error(build, RuntimeError,
               rf"Function ScaleBackward returned an invalid gradient at index 0 - got "
               rf"\[{got}\] but expected shape compatible with \[{expected}\]")


def test_custom_backward_of_a_broadcastable_shape_or_another_dtype_is_conformed():
    def build(lib):
        x = lib.ones(3, requires_grad=True)
        _function(lib, lambda ctx, g: lib.ones(2, 3)).apply(x).sum().backward()
        y = lib.ones(3, requires_grad=True)
        _function(lib, lambda ctx, g: g.double()).apply(y).sum().backward()
        return x.grad, y.grad
    (mx, my), (tx, ty) = both(build)
    assert_close(mx, tx)
    assert my.dtype == mt.float32 and ty.dtype == torch.float32


def test_custom_backward_with_the_wrong_number_of_gradients_is_refused():
    same_error(lambda lib: _function(lib, lambda ctx, g: (g, g)).apply(
                   lib.ones(3, requires_grad=True)).sum().backward(),
               RuntimeError,
               r"function ScaleBackward returned an incorrect number of gradients "
               r"\(expected 1, got 2\)")


# ------------------------------------------------------------------ grad-mode decorators

@pytest.mark.parametrize("decorator, outer, inside", [
    (lambda lib: lib.no_grad(), True, False),
    (lambda lib: lib.enable_grad(), False, True),
    (lambda lib: lib.set_grad_enabled(False), True, False),
    (lambda lib: lib.inference_mode(), True, False),
    (lambda lib: lib.inference_mode(False), False, True),
])
def test_grad_mode_decorators_hold_across_a_generators_yields(decorator, outer, inside):
    def build(lib):
        @decorator(lib)
        def steps(n):
            for _ in range(n):
                received = yield lib.is_grad_enabled()
                assert received is None or received == "sent"
            return "done"

        seen = []
        with lib.set_grad_enabled(outer):
            gen = steps(3)
            seen.append(next(gen))
            seen.append(lib.is_grad_enabled())     # the caller's mode between steps
            seen.append(gen.send("sent"))
            seen.append(lib.is_grad_enabled())
            seen.extend(gen)
            seen.append(lib.is_grad_enabled())
        return seen, lib.is_grad_enabled()
    m, t = both(build)
    assert m == t == ([inside, outer, inside, outer, inside, outer], True)


def test_grad_mode_decorated_generator_close_and_throw_run_in_the_mode():
    seen = []

    @mt.no_grad()
    def steps():
        try:
            yield 1
            yield 2
        except ValueError:
            seen.append(("throw", mt.is_grad_enabled()))
            yield 3
        finally:
            seen.append(("finally", mt.is_grad_enabled()))

    gen = steps()
    next(gen)
    assert gen.throw(ValueError()) == 3
    gen.close()
    assert seen == [("throw", False), ("finally", False)] and mt.is_grad_enabled()


def test_grad_mode_decorators_on_plain_functions_still_work():
    @mt.no_grad()
    def off():
        return mt.is_grad_enabled()

    @mt.set_grad_enabled(False)
    def also_off():
        return mt.is_grad_enabled()
    assert off() is False and also_off() is False and mt.is_grad_enabled()


# ------------------------------------------------------------------ escaped BatchedTensors

def _escape(lib, vmap_):
    kept = {}

    def f(x):
        kept["t"] = x
        return x * 2
    vmap_(f)(lib.randn(3, 2))
    return kept["t"]


@pytest.mark.parametrize("use", [lambda t: t + 1, lambda t: t.sum(), lambda t: t.sin(),
                                 lambda t: t * t, lambda t: t[0]])
def test_an_escaped_batched_tensor_is_refused_after_its_vmap(use):
    with pytest.raises(RuntimeError, match="escaped"):
        use(_escape(torch, torch.func.vmap))
    with pytest.raises(RuntimeError, match="escaped from inside the function being vmapped"):
        use(_escape(mt, vmap))


def test_an_escaped_batched_tensor_is_refused_by_a_custom_function():
    class Double(mt.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2
    with pytest.raises(RuntimeError, match="escaped from inside the function being vmapped"):
        Double.apply(_escape(mt, vmap))


def test_an_escaped_inner_level_is_refused_inside_an_outer_vmap():
    kept = {}

    def inner(y):
        kept["t"] = y
        return y

    def outer(x):
        vmap(inner)(x)
        return x + kept["t"]       # level 2 escaped into level 1
    with pytest.raises(RuntimeError, match="BatchedTensor of level 2 was used after"):
        vmap(outer)(mt.randn(3, 4, 2))


# ------------------------------------------------------------------ jvp through linear, nested vmaps

def _ntk_inputs(lib):
    rng = np.random.default_rng(0)
    return tuple(lib.tensor(rng.standard_normal(s).astype(np.float32))
                 for s in [(5, 4), (5, 3, 4), (3, 4), (3,)])


@pytest.mark.parametrize("with_bias", [False, True])
def test_jvp_wrt_linear_weight_under_two_vmaps_matches_torch_func(with_bias):
    def build(lib, vmap_, jvp_, linear):
        X, TS, W, b = _ntk_inputs(lib)
        bias = b if with_bias else None
        return vmap_(lambda x: vmap_(lambda t: jvp_(lambda w: linear(x, w, bias), (W,),
                                                    (t,))[1])(TS))(X)
    m = build(mt, vmap, jvp, F.linear)
    t = build(torch, torch.func.vmap, torch.func.jvp, torch.nn.functional.linear)
    assert tuple(m.shape) == tuple(t.shape) == (5, 5, 3)
    assert_close(m, t)


def test_jvp_wrt_linear_weight_under_two_vmaps_equals_the_matmul_form():
    X, TS, W, _ = _ntk_inputs(mt)
    via_linear = vmap(lambda x: vmap(lambda t: jvp(lambda w: F.linear(x, w), (W,),
                                                   (t,))[1])(TS))(X)
    via_matmul = vmap(lambda x: vmap(lambda t: jvp(lambda w: w @ x, (W,), (t,))[1])(TS))(X)
    np.testing.assert_allclose(np.asarray(via_linear), np.asarray(via_matmul), rtol=1e-5,
                               atol=1e-6)


@pytest.mark.parametrize("x_shape", [(4,), (2, 4)])
@pytest.mark.parametrize("inner, outer", [
    ((None, 0, 0), (0, 0, 0)), ((0, 0, None), (None, 0, 0)), ((None, 0, None), (0, 0, None)),
    ((0, 0, 0), (0, None, None)), ((None, None, 0), (0, 0, 0)),
])
def test_linear_under_two_vmaps_with_weights_batched_at_either_level(x_shape, inner, outer):
    rng = np.random.default_rng(1)

    def batched(shape, inner_dim, outer_dim):
        shape = ((3,) if inner_dim == 0 else ()) + shape
        shape = ((2,) if outer_dim == 0 else ()) + shape
        return rng.standard_normal(shape).astype(np.float32)
    arrays = [batched(s, i, o) for s, i, o in zip([x_shape, (5, 4), (5,)], inner, outer)]

    def build(lib, vmap_, linear):
        x, w, b = (lib.tensor(a) for a in arrays)
        return vmap_(vmap_(linear, in_dims=inner), in_dims=outer)(x, w, b)
    m = build(mt, vmap, F.linear)
    t = build(torch, torch.func.vmap, torch.nn.functional.linear)
    assert tuple(m.shape) == tuple(t.shape)
    assert_close(m, t)
