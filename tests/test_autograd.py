"""Autograd: graph and leaves, backward/grad arguments, hooks, grad modes, saved-tensor
version checks, error messages, custom Functions, gradcheck, higher order, and that
graphs are freed without the cycle collector."""
import copy
import gc
import math
import threading
import weakref

import numpy as np
import pytest

import microtensor as mt
from microtensor.autograd import Function, GradcheckError, gradcheck, gradgradcheck
from microtensor.testing import make

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (optional "
                                                       "test oracle)")


def leaf(*shape, **kwargs):
    return make(*shape, requires_grad=True, **kwargs)


def values(t):
    return np.array(t.detach()._array())


# ------------------------------------------------------------------ graph and leaves

def test_leaves_grad_fn_and_next_functions():
    x, y = leaf(3), make(3)
    assert x.is_leaf and x.grad_fn is None and x.requires_grad
    z = x * y + y
    assert not z.is_leaf and z.requires_grad
    assert z.grad_fn.name() == "AddBackward0"
    mul_edge, none_edge = z.grad_fn.next_functions
    assert mul_edge[0].name() == "MulBackward0" and none_edge == (None, 0)
    acc, _ = mul_edge[0].next_functions[0]
    assert acc.name() == "AccumulateGrad" and acc.variable is x
    assert (x * 2).grad_fn.next_functions[0][0] is acc      # one accumulator per leaf
    assert not (y * 2).requires_grad and (y * 2).grad_fn is None


def test_integer_and_bool_outputs_are_not_differentiable():
    x = leaf(4)
    assert not (x > 0).requires_grad
    assert not x.sign().long().requires_grad


def test_requires_grad_flag_rules():
    x = make(3)
    x.requires_grad = True
    assert x.requires_grad
    with pytest.raises(RuntimeError, match="only Tensors of floating point"):
        make(3, dtype=mt.int64).requires_grad_()
    with pytest.raises(RuntimeError, match="only change requires_grad flags of leaf"):
        (x * 2).requires_grad_(False)


def test_grad_accumulates_and_is_not_aliased():
    x = leaf(3)
    (x * 2).sum().backward()
    (x * 3).sum().backward()
    np.testing.assert_allclose(values(x.grad), 5.0)
    g = mt.ones(3, dtype=mt.float64)
    y = leaf(3)
    (y * 1).backward(g)
    y.grad.add_(1)                    # must not write into the caller's gradient
    np.testing.assert_allclose(values(g), 1.0)


def test_retain_grad_detach_and_detach_():
    x = leaf(3)
    h = x * 2
    h.retain_grad()
    (h * h).sum().backward()
    np.testing.assert_allclose(values(h.grad), 2 * values(h))
    d = h.detach()
    assert not d.requires_grad and d.is_leaf and d._base is None
    assert d.data_ptr() == h.data_ptr()
    h2 = x * 3
    h2.detach_()
    assert h2.is_leaf and not h2.requires_grad
    with pytest.raises(RuntimeError, match="Can't detach views in-place"):
        (x * 1)[0].detach_()


def test_tensor_hooks_on_leaves_and_non_leaves():
    x = leaf(3)
    seen = []
    handle = x.register_hook(lambda g: seen.append(values(g)))
    h = x * 2
    h.register_hook(lambda g: g * 10)
    h.sum().backward()
    np.testing.assert_allclose(values(x.grad), 20.0)
    np.testing.assert_allclose(seen[0], 20.0)
    handle.remove()
    x.grad = None
    (x * 1).sum().backward()
    assert len(seen) == 1 and np.allclose(values(x.grad), 1.0)
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        make(2).register_hook(lambda g: g)


def test_node_hooks():
    x = leaf(3)
    y = x.exp()
    calls = []
    y.grad_fn.register_prehook(lambda grads: calls.append("pre"))
    y.grad_fn.register_hook(lambda grad_inputs, grad_outputs: (grad_inputs[0] * 0,))
    y.sum().backward()
    assert calls == ["pre"] and not values(x.grad).any()


# ------------------------------------------------------------------ backward / grad

def test_backward_arguments():
    x, w = leaf(3), leaf(3)
    y = x * w
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar"):
        y.backward()
    y.backward(mt.ones(3, dtype=mt.float64), retain_graph=True, inputs=[x])
    assert w.grad is None and np.allclose(values(x.grad), values(w))
    h = x * 2
    (h * h).sum().backward(inputs=[h])                 # a non-leaf input gets a .grad
    np.testing.assert_allclose(values(h.grad), 2 * values(h))
    with pytest.raises(RuntimeError, match="does not require grad and does not have a grad_fn"):
        make(2).sum().backward()


def test_backward_twice_needs_retain_graph():
    x = leaf(3)
    y = x.exp().sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(values(x.grad), 2 * np.exp(values(x)))
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        y.backward()
    z = (x + 1).sum()                  # nothing saved: a second pass is allowed, as in PyTorch
    z.backward()
    z.backward()


def test_grad_allow_unused_and_materialize():
    x, unused = leaf(3), leaf(2)
    y = (x * x).sum()
    with pytest.raises(RuntimeError, match="appears to not have been used in the graph"):
        mt.autograd.grad(y, [x, unused], retain_graph=True)
    gx, gu = mt.autograd.grad(y, [x, unused], retain_graph=True, allow_unused=True)
    assert gu is None and np.allclose(values(gx), 2 * values(x))
    _, gu = mt.autograd.grad(y, [x, unused], materialize_grads=True)
    assert np.array_equal(values(gu), np.zeros(2))
    with pytest.raises(ValueError, match="allow_unused"):
        mt.autograd.grad((x * 1).sum(), x, allow_unused=False, materialize_grads=True)
    with pytest.raises(RuntimeError, match="does not require grad"):
        mt.autograd.grad((x * 1).sum(), make(2))
    assert x.grad is None                                  # grad never accumulates


def test_grad_of_non_leaf_does_not_run_past_it():
    x = leaf(3)
    h = x.exp()
    (g,) = mt.autograd.grad((h * 3).sum(), h)
    np.testing.assert_allclose(values(g), 3.0)
    (gx,) = mt.autograd.grad((h * 3).sum(), x)            # h's graph was not released
    np.testing.assert_allclose(values(gx), 3 * np.exp(values(x)))


def test_is_grads_batched_needs_vmap():
    from microtensor.autograd import engine
    if engine.batched_grad_impl is not None:
        pytest.skip("microtensor.vmap provides batched gradients")
    x = leaf(3)
    with pytest.raises(NotImplementedError, match="vmap"):
        mt.autograd.grad(x * 2, x, make(2, 3), is_grads_batched=True)


def test_create_graph_builds_a_differentiable_backward():
    x = leaf(4)
    y = (x.sin() * x).sum()
    (g,) = mt.autograd.grad(y, x, create_graph=True)
    assert g.requires_grad and g.grad_fn is not None
    (gg,) = mt.autograd.grad(g.sum(), x)
    xv = values(x)
    np.testing.assert_allclose(values(gg), 2 * np.cos(xv) - xv * np.sin(xv), rtol=1e-12)
    z = leaf(3)
    (z ** 3).sum().backward(create_graph=True)
    assert z.grad.requires_grad
    (hz,) = mt.autograd.grad(z.grad.sum(), z)
    np.testing.assert_allclose(values(hz), 6 * values(z), rtol=1e-12)


def test_mt_autograd_backward_function():
    x = leaf(3)
    mt.autograd.backward([(x * 2).sum(), (x * 3).sum()])
    np.testing.assert_allclose(values(x.grad), 5.0)


# ------------------------------------------------------------------ grad modes

def test_grad_modes_as_context_managers_and_decorators():
    x = leaf(3)
    with mt.no_grad():
        assert not mt.is_grad_enabled() and not (x * 2).requires_grad
        with mt.enable_grad():
            assert (x * 2).requires_grad
    assert mt.is_grad_enabled()

    @mt.no_grad()
    def f():
        return x * 2
    assert not f().requires_grad

    @mt.enable_grad()
    def g():
        return x * 2
    with mt.no_grad():
        assert g().requires_grad

    with mt.set_grad_enabled(False):
        assert not (x * 2).requires_grad
    mt.set_grad_enabled(False)
    assert not mt.is_grad_enabled()
    mt.set_grad_enabled(True)
    assert mt.is_grad_enabled()


def test_grad_mode_is_thread_local():
    seen = []
    with mt.no_grad():
        thread = threading.Thread(target=lambda: seen.append(mt.is_grad_enabled()))
        thread.start()
        thread.join()
    assert seen == [True]


# ------------------------------------------------------------------ version counters

def test_modified_saved_input_raises_pytorch_error():
    x = leaf(3)
    a = x * 1
    b = a * a
    a.add_(1)
    with pytest.raises(RuntimeError, match=r"modified by an inplace operation: "
                                           r"\[microtensor.DoubleTensor \[3\]\], which is output "
                                           r"0 of AddBackward0, is at version 1; expected "
                                           r"version 0 instead"):
        b.sum().backward()


def test_modified_saved_output_raises():
    x = leaf(3)
    y = x.exp()
    y.mul_(2)
    with pytest.raises(RuntimeError, match="output 0 of ExpBackward0, is at version 1"):
        y.sum().backward()


def test_modified_leaf_under_no_grad_raises():
    x = leaf(3)
    y = (x * x).sum()
    with mt.no_grad():
        x.add_(1)
    with pytest.raises(RuntimeError, match=r"\[microtensor.DoubleTensor \[3\]\] is at version 1"):
        y.backward()


def test_inplace_errors_on_leaves_and_multi_output_views():
    x = leaf(3)
    with pytest.raises(RuntimeError, match="^a leaf Variable that requires grad"):
        x.add_(1)
    with pytest.raises(RuntimeError, match="^a view of a leaf Variable that requires grad"):
        x[0:2].add_(1)
    with mt.no_grad():
        x.add_(1)                                      # fine when not recorded
    if "unbind" in mt.ops.REGISTRY:
        parts = (x * 1).unbind(0)
        with pytest.raises(RuntimeError, match="This view is the output of a function that "
                                               "returns multiple views"):
            parts[0].mul_(2)


def test_view_created_in_no_grad_then_modified_with_grad_raises():
    x = leaf(3) * 1
    with mt.no_grad():
        v = x[:2]
    with pytest.raises(RuntimeError, match="A view was created in no_grad mode"):
        v.mul_(x[:2])


# ------------------------------------------------------------------ custom Function

class ScaledExp(Function):
    @staticmethod
    def forward(ctx, x, scale):
        result = x.exp() * scale
        ctx.save_for_backward(result)
        ctx.scale = scale
        return result

    @staticmethod
    def backward(ctx, grad):
        (result,) = ctx.saved_tensors
        assert ctx.needs_input_grad == (True, False)
        return grad * result, None


def test_function_forward_backward_and_node():
    x = leaf(4)
    y = ScaledExp.apply(x, 2.0)
    assert y.grad_fn.name() == "ScaledExpBackward"
    assert y.grad_fn.next_functions[0][0].name() == "AccumulateGrad"
    y.sum().backward()
    np.testing.assert_allclose(values(x.grad), 2 * np.exp(values(x)))
    assert gradcheck(lambda a: ScaledExp.apply(a, 3.0), (leaf(3),))
    assert gradgradcheck(lambda a: ScaledExp.apply(a, 3.0), (leaf(3),))
    with mt.no_grad():
        assert ScaledExp.apply(x, 1.0).grad_fn is None


def test_function_saved_tensor_version_check_and_release():
    x = leaf(3)
    y = ScaledExp.apply(x, 1.0)
    y.sum().backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.sum().backward()
    y2 = ScaledExp.apply(x, 1.0)
    y2.add_(1)
    with pytest.raises(RuntimeError, match="has been modified by an inplace operation"):
        y2.sum().backward()


def test_function_mark_dirty_non_differentiable_and_materialize():
    class AddOneInPlace(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.mark_dirty(x)
            return x.add_(1)

        @staticmethod
        def backward(ctx, grad):
            return grad

    class SortedAndIndex(Function):
        @staticmethod
        def forward(ctx, x):
            index = (x > 0).long()
            ctx.mark_non_differentiable(index)
            ctx.set_materialize_grads(False)
            return x * 2, index

        @staticmethod
        def backward(ctx, grad, grad_index):
            assert grad_index is None
            return grad * 2

    x = leaf(3)
    h = x * 1
    out = AddOneInPlace.apply(h)
    assert out is h and h.grad_fn.name() == "AddOneInPlaceBackward"
    h.sum().backward()
    np.testing.assert_allclose(values(x.grad), 1.0)
    with pytest.raises(RuntimeError, match="^a leaf Variable that requires grad"):
        AddOneInPlace.apply(leaf(3))
    base = leaf(2, 3) * 1
    AddOneInPlace.apply(base[0])                         # a view: CopySlices on the base
    assert base.grad_fn.name() == "CopySlices"

    doubled, index = SortedAndIndex.apply(x)
    assert not index.requires_grad
    (g,) = mt.autograd.grad(doubled.sum(), x)
    np.testing.assert_allclose(values(g), 2.0)


def test_function_errors():
    class WrongCount(Function):
        @staticmethod
        def forward(ctx, x, y):
            return x * y

        @staticmethod
        def backward(ctx, grad):
            return grad

    with pytest.raises(RuntimeError, match="returned an incorrect number of gradients"):
        WrongCount.apply(leaf(2), leaf(2)).sum().backward()
    with pytest.raises(RuntimeError, match="non-static forward"):
        WrongCount()


def test_function_with_setup_context():
    class Square(Function):
        @staticmethod
        def forward(x):
            return x * x

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0])

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return 2 * x * grad

    x = leaf(3)
    (g,) = mt.autograd.grad(Square.apply(x).sum(), x)
    np.testing.assert_allclose(values(g), 2 * values(x))


# ------------------------------------------------------------------ gradcheck itself

def test_gradcheck_detects_wrong_gradients():
    class WrongGrad(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            return grad * 3

    x = leaf(3)
    with pytest.raises(GradcheckError, match="Jacobian mismatch for output 0 with respect to "
                                             "input 0"):
        gradcheck(WrongGrad.apply, (x,))
    assert issubclass(GradcheckError, RuntimeError)
    assert gradcheck(WrongGrad.apply, (x,), raise_exception=False) is False
    assert gradcheck(WrongGrad.apply, (x,), raise_exception=False, fast_mode=True) is False
    assert gradcheck(lambda a: a.sin(), (x,), fast_mode=True)
    assert mt.autograd.gradcheck.gradcheck is gradcheck
    with pytest.raises(ValueError, match="at least one input tensor to require gradient"):
        gradcheck(lambda a: a * 2, (make(2),))


def test_gradgradcheck_detects_wrong_second_derivative():
    class FirstOrderOnly(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad * 2 * x.detach()      # second derivative lost

    x = leaf(3)
    assert gradcheck(FirstOrderOnly.apply, (x,))
    assert gradgradcheck(FirstOrderOnly.apply, (x,), raise_exception=False) is False


# ------------------------------------------------------------------ random composites

def _composite(lib, x, y):
    a = (x * y).sin() + x.exp() / (1 + y * y)
    b = a.tanh() * x - (y - 0.5).abs().sqrt()
    c = (b * a).sigmoid().log() + b.clamp(-1, 1) * a.cos()
    return (c * c).sum() + (a * b).sum()


@needs_torch
def test_random_composite_matches_torch_including_second_order():
    for seed in range(3):
        rng = np.random.default_rng(seed)
        xs, ys = rng.standard_normal(5), rng.standard_normal(5)
        x, y = mt.tensor(xs, requires_grad=True), mt.tensor(ys, requires_grad=True)
        tx = torch.tensor(xs, requires_grad=True)
        ty = torch.tensor(ys, requires_grad=True)
        gx, gy = mt.autograd.grad(_composite(mt, x, y), (x, y), create_graph=True)
        tgx, tgy = torch.autograd.grad(_composite(torch, tx, ty), (tx, ty), create_graph=True)
        np.testing.assert_allclose(values(gx), tgx.detach().numpy(), rtol=1e-10)
        np.testing.assert_allclose(values(gy), tgy.detach().numpy(), rtol=1e-10)
        (hx,) = mt.autograd.grad((gx * gy).sum(), x)
        (thx,) = torch.autograd.grad((tgx * tgy).sum(), tx)
        np.testing.assert_allclose(values(hx), thx.numpy(), rtol=1e-9)


def test_random_composite_passes_gradcheck_and_gradgradcheck():
    x, y = leaf(4), leaf(4)
    assert gradcheck(lambda a, b: _composite(mt, a, b), (x, y))
    assert gradgradcheck(lambda a, b: _composite(mt, a, b), (x, y))


# ------------------------------------------------------------------ no reference cycles

def test_graphs_are_freed_without_the_cycle_collector():
    w = leaf(4, 4)
    b = leaf(4)
    x = make(8, 4)
    gc.collect()
    gc.disable()
    try:
        nodes = weakref.WeakSet()
        for step in range(30):
            h = (x @ w + b).tanh() if "matmul" in mt.ops.REGISTRY else (x * w[0] + b).tanh()
            y = h * 3
            y[0].mul_(2)                                # CopySlices + AsStridedBackward0
            loss = (y * h).sum()
            nodes.add(loss.grad_fn)
            nodes.add(y.grad_fn)
            loss.backward()
            with mt.no_grad():
                w.sub_(0.01 * w.grad)
                w.grad = None
            del h, y, loss
        forward_only = (x * w[0]).exp().sum()            # never backpropagated
        nodes.add(forward_only.grad_fn)
        del forward_only
        assert len(nodes) == 0, "graph nodes kept alive by reference cycles"
    finally:
        gc.enable()


def test_training_loop_does_not_grow():
    w = leaf(4, 4)
    x = make(4, 4)

    def step():
        y = (x * w).sigmoid()
        z = y * y.exp()
        z[1].add_(1)
        z.sum().backward()
        w.grad = None

    gc.collect()
    gc.disable()
    try:
        step()
        before = len(gc.get_objects())
        for _ in range(50):
            step()
        after = len(gc.get_objects())
    finally:
        gc.enable()
    assert after - before < 20


def test_operand_read_only_by_the_other_gradient_is_not_saved():
    # ``x * 1.0`` needs no copy of ``x`` (the scalar gets no gradient), so modifying the
    # product in place afterwards is fine, as in PyTorch
    x = mt.randn(4, requires_grad=True)
    b = x * 1.0
    b[1:].add_(b[:-1] * 0.5)
    b.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.5, 1.5, 1.5, 1.0])
    # a constant matrix operand is not saved, and its (unneeded) gradient is not computed
    a = mt.randn(3, 3)
    v = mt.randn(3, requires_grad=True)
    y = a @ v
    assert y.grad_fn._saved_other is None and y.grad_fn._saved_self is not None


def test_only_the_formulas_of_inputs_that_require_grad_run(monkeypatch):
    # mul's formula for ``self`` must not run when only ``other`` requires grad
    derivative = mt.ops.REGISTRY["mul"].derivative
    calls = []
    formulas = list(derivative.formulas)
    for i, (formula, reads) in enumerate(formulas):
        formulas[i] = (lambda *a, f=formula, i=i: calls.append(i) or f(*a)), reads
    monkeypatch.setattr(derivative, "formulas", tuple(formulas))
    x, w = make(3), leaf(3)
    (x * w).sum().backward()
    assert calls == [1]
    np.testing.assert_allclose(values(w.grad), values(x))


def _peak_bytes(fn):
    import tracemalloc
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_inplace_op_copies_self_only_when_a_formula_that_runs_reads_it():
    n = 1 << 17
    size = n * 4
    x = leaf(n, dtype=mt.float32) * 1.0
    storage = x.untyped_storage().data_ptr()
    assert _peak_bytes(lambda: x.mul_(2.0)) < size // 8      # grad * 2.0: no copy of x
    assert x.untyped_storage().data_ptr() == storage and x.grad_fn.name() == "MulBackward0"
    assert x.grad_fn._saved_self is None and x.grad_fn._saved_other == 2.0
    y = make(n, dtype=mt.float32)
    assert _peak_bytes(lambda: x.mul_(y)) < size // 8        # grad * y: y saved, not copied
    assert x.grad_fn._saved_self is None and x.grad_fn._saved_other is y
    w = leaf(n, dtype=mt.float32)
    assert _peak_bytes(lambda: x.mul_(w)) >= size            # w's gradient reads old x
    assert x.grad_fn._saved_self is not None
    x.sum().backward()
    np.testing.assert_allclose(values(w.grad), values(x) / values(w), rtol=1e-5)


def _modified_inplace_error(lib, program):
    """Whether backward of ``program(lib, leaf_or_constant)`` fails PyTorch's version check
    (``program`` modifies a saved tensor in place after using it)."""
    try:
        program(lib).sum().backward()
    except RuntimeError as e:
        assert "modified by an inplace operation" in str(e)
        return True
    return False


def _pair(lib, grads):
    """Two operands; those with ``grads[i]`` require grad (non-leaves, so that they may be
    modified in place)."""
    return tuple(lib.tensor(v, requires_grad=True) * 1.0 if g else lib.tensor(v)
                 for v, g in zip(([1.5, -2.0, 3.0], [0.5, 4.0, -1.0]), grads))


def _after(result, modified):
    with_grad = result * 1.0
    modified.add_(1.0)
    return with_grad


SAVED_VALUE_PROGRAMS = {
    # out of place: which operand the formulas that run read
    "mul_modify_x_w_grad": lambda lib: (lambda x, w: _after(x * w, x))(*_pair(lib, (False, True))),
    "mul_modify_w_w_grad": lambda lib: (lambda x, w: _after(x * w, w))(*_pair(lib, (False, True))),
    "div_modify_y_x_grad": lambda lib: (lambda x, y: _after(x.exp() / y, y))(
        *_pair(lib, (True, False))),
    "div_modify_num_x_grad": lambda lib: (lambda x, y: (lambda n: _after(n / y, n))(
        x * 2))(*_pair(lib, (True, False))),
    "div_modify_num_y_grad": lambda lib: (lambda x, y: (lambda n: _after(n / y, n))(
        x * 2))(*_pair(lib, (False, True))),
    "matmul_modify_a_v_grad": lambda lib: (lambda a, v: _after(a.reshape(3, 1) @ v.reshape(
        1, 3), a))(*_pair(lib, (False, True))),
    "matmul_modify_v_v_grad": lambda lib: (lambda a, v: _after(a.reshape(3, 1) @ v.reshape(
        1, 3), v))(*_pair(lib, (False, True))),
    "lerp_modify_end_weight_const": lambda lib: (lambda s, e: _after(
        s.exp().lerp(e, 0.3), e))(*_pair(lib, (True, False))),
    "lerp_modify_end_weight_tensor": lambda lib: (lambda s, e: (lambda w: _after(
        s.lerp(e, w), e))(lib.tensor([0.2, 0.4, 0.6], requires_grad=True)))(
        *_pair(lib, (False, False))),
    # in place: the old ``self`` is copied only when read, the other operand saved when read
    "mul__modify_y_self_grad": lambda lib: (lambda x, y: (lambda t: _after(t.mul_(y), y))(
        x * 1.0))(*_pair(lib, (True, False))),
    "mul__modify_y_y_grad": lambda lib: (lambda x, y: (lambda t: _after(t.mul_(y), y))(
        x * 1.0))(*_pair(lib, (False, True))),
    "mul__modify_self_y_grad": lambda lib: (lambda x, y: (lambda t: _after(t.mul_(y) * 1.0,
                                                                         t))(
        x * 1.0))(*_pair(lib, (False, True))),
    "mul__then_exp_": lambda lib: (lambda x, y: (lambda t: _after(t.mul_(y).exp_(), t))(
        x * 1.0))(*_pair(lib, (True, False))),
}


@needs_torch
@pytest.mark.parametrize("name", sorted(SAVED_VALUE_PROGRAMS))
def test_modified_by_inplace_error_exactly_when_pytorch_raises(name):
    program = SAVED_VALUE_PROGRAMS[name]
    assert _modified_inplace_error(mt, program) == _modified_inplace_error(torch, program)


@needs_torch
def test_saved_value_programs_cover_both_outcomes():
    outcomes = {_modified_inplace_error(torch, p) for p in SAVED_VALUE_PROGRAMS.values()}
    assert outcomes == {True, False}


def test_leaf_grad_takes_the_parameter_layout():
    # PyTorch's layout contract: ``.grad`` has the parameter's strides (here the weight
    # gradient arrives transposed from matmul's derivative and must not stay that way)
    lin = mt.nn.Linear(4, 3)
    lin(mt.randn(2, 4)).sum().backward()
    assert lin.weight.grad.stride() == lin.weight.stride() == (4, 1)
    w = mt.randn(3, 4).t().requires_grad_()          # a non-contiguous dense parameter
    (w * 2).sum().backward()
    assert w.grad.stride() == w.stride() == (1, 4)
    np.testing.assert_allclose(w.grad.numpy(), np.full((4, 3), 2.0))


def _post_accumulate_grad_hook_log(lib):
    """What post-accumulate-grad hooks see in a script of backward passes, in ``lib``."""
    log = []
    w = lib.ones(3, requires_grad=True)
    first = w.register_post_accumulate_grad_hook(lambda p: log.append(("a", p.grad.tolist())))
    w.register_post_accumulate_grad_hook(lambda p: log.append(("b", p is w)))
    (w * 2).sum().backward()
    (w * 3).sum().backward()               # after accumulating: the sum of both
    first.remove()
    (w * lib.ones(3)).sum().backward(create_graph=True)
    lib.autograd.grad((w * 2).sum(), w)    # accumulates nothing: no hook
    (w * 2).sum().backward(inputs=[w])
    log.append(("copy", copy.deepcopy(w)._post_accumulate_grad_hooks))
    for make_target in (lambda: (w * 2), lambda: lib.ones(2)):
        try:
            make_target().register_post_accumulate_grad_hook(lambda p: None)
        except RuntimeError as error:
            log.append(("refused", str(error)))
    return log


@needs_torch
def test_post_accumulate_grad_hooks_as_torch():
    assert _post_accumulate_grad_hook_log(mt) == _post_accumulate_grad_hook_log(torch)


@pytest.mark.parametrize("name", ["sign", "floor", "ceil", "round", "trunc"])
def test_a_zero_derivative_stays_zero_for_an_infinite_gradient(name):
    """PyTorch's derivative of a step function is zeros, not ``grad * 0`` (NaN for inf)."""
    x = mt.tensor([-1.5, 0.0, 2.5], requires_grad=True)
    getattr(mt, name)(x).backward(mt.tensor([math.inf, -math.inf, math.nan]))
    assert x.grad.tolist() == [0.0, 0.0, 0.0]
