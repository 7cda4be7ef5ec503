"""mt.func: grad, grad_and_value, vjp, jvp, jacrev, jacfwd, hessian, functional_call, and
their compositions with vmap and each other.

References: Python loops of plain ``autograd.grad`` and central finite differences
always; ``torch.func`` when PyTorch is importable.  Every op with samples goes through
``vmap(grad)`` and ``autograd.grad(..., is_grads_batched=True)`` against loops.
"""

import numpy as np
import pytest

import microtensor as mt
from microtensor.testing import differentiable_places
from microtensor._C.tensor import TensorBase
from microtensor.func import (functional_call, grad, grad_and_value, hessian, jacfwd, jacrev,
                              jvp, vjp, vmap)
from microtensor.ops import REGISTRY
from microtensor.testing import samples_of, seed_for
from microtensor.vmap import BatchedTensor

try:
    import torch
    import torch.func as tfunc
except ImportError:
    torch = tfunc = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (optional "
                                                       "test oracle)")


def arr(t):
    return np.array(t.detach()._array())


def close(actual, expected, rtol=1e-7, atol=1e-9):
    if isinstance(expected, dict):
        assert set(actual) == set(expected)
        for k in expected:
            close(actual[k], expected[k], rtol, atol)
        return
    if isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            close(a, e, rtol, atol)
        return
    if torch is not None and isinstance(expected, torch.Tensor):
        expected = expected.detach().resolve_conj().numpy()
    elif isinstance(expected, TensorBase):
        expected = arr(expected)
    assert isinstance(actual, TensorBase), type(actual)
    assert type(actual) is not BatchedTensor, "a BatchedTensor escaped"
    got = arr(actual)
    assert got.shape == np.shape(expected), (got.shape, np.shape(expected))
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)


def mt_(a):
    return mt.tensor(np.asarray(a, dtype=np.float64))


def th(a):
    return torch.tensor(np.asarray(a, dtype=np.float64))


RNG = np.random.default_rng(0)
W = RNG.standard_normal(3)
X = RNG.standard_normal((4, 3))
XX = RNG.standard_normal((2, 4, 3))


def f_scalar(w, x):
    return (x * w).tanh().sum() + (w * w).sum()


def h_vector(x):
    return (x.sin() * x.sum()).cos() * x[0]


def s_scalar(x):
    return (x.sin() * x.sum()).cos().sum() + (x * x * x).sum()


# --------------------------------------------------------------------------- references

def loop_grad(f, *args, argnums=0):
    """d f / d args[argnums] by plain autograd."""
    args = [mt_(arr(a)) if isinstance(a, TensorBase) else a for a in args]
    args[argnums].requires_grad_()
    (g,) = mt.autograd.grad(f(*args), args[argnums])
    return arr(g)


def finite_jacobian(f, x, eps=1e-6):
    x = arr(x)
    out = arr(f(mt_(x)))
    jac = np.zeros(out.shape + x.shape)
    for idx in np.ndindex(*x.shape):
        plus, minus = x.copy(), x.copy()
        plus[idx] += eps
        minus[idx] -= eps
        jac[(Ellipsis,) + idx] = (arr(f(mt_(plus))) - arr(f(mt_(minus)))) / (2 * eps)
    return jac


# --------------------------------------------------------------------------- grad

def test_grad_matches_autograd():
    close(grad(f_scalar)(mt_(W), mt_(X[0])), loop_grad(f_scalar, mt_(W), mt_(X[0])))
    close(grad(f_scalar, argnums=1)(mt_(W), mt_(X[0])),
          loop_grad(f_scalar, mt_(W), mt_(X[0]), argnums=1))


def test_grad_argnums_tuple_and_pytrees():
    params = {"w": mt_(W), "b": mt_([0.5])}

    def f(p, x):
        return ((x * p["w"]).sum() + p["b"]).sin().sum()
    g = grad(f)(params, mt_(X[0]))
    assert set(g) == {"w", "b"}
    close(g["w"], loop_grad(lambda w: f({"w": w, "b": params["b"]}, mt_(X[0])), params["w"]))
    gp, gx = grad(f, argnums=(0, 1))(params, mt_(X[0]))
    close(gp["b"], loop_grad(lambda b: f({"w": params["w"], "b": b}, mt_(X[0])), params["b"]))
    close(gx, loop_grad(lambda x: f(params, x), mt_(X[0])))
    gx_neg = grad(f, argnums=-1)(params, mt_(X[0]))
    close(gx_neg, gx)


def test_grad_and_value_and_aux():
    g, value = grad_and_value(f_scalar)(mt_(W), mt_(X[0]))
    close(value, arr(f_scalar(mt_(W), mt_(X[0]))))
    close(g, loop_grad(f_scalar, mt_(W), mt_(X[0])))
    g2, aux = grad(lambda w: (f_scalar(w, mt_(X[0])), {"twice": w * 2}), has_aux=True)(mt_(W))
    close(g2, g)
    close(aux["twice"], 2 * W)
    assert not aux["twice"].requires_grad
    g3, (v3, a3) = grad_and_value(lambda w: (f_scalar(w, mt_(X[0])), 7), has_aux=True)(mt_(W))
    assert a3 == 7
    close(v3, value)


def test_unused_input_has_zero_gradient():
    close(grad(lambda x, y: (y * y).sum())(mt_(W), mt_(W)), np.zeros(3))
    close(grad(lambda x: (x * 0).sum() + 1)(mt_(W)), np.zeros(3))


def test_grad_ignores_outer_no_grad_and_leaves_inputs_alone():
    x = mt_(W)
    with mt.no_grad():
        g = grad(lambda x: (x * x).sum())(x)
    close(g, 2 * W)
    assert not g.requires_grad and not x.requires_grad and x.grad is None


def test_grad_of_closure_over_tensor_requiring_grad_is_differentiable():
    w = mt_(W).requires_grad_()
    g = grad(lambda x: (x * w).sin().sum())(mt_(X[0]))
    assert g.requires_grad
    g.sum().backward()
    # d/dw sum_i w_i cos(x_i w_i) = cos(x w) - x w sin(x w)
    xw = X[0] * W
    close(w.grad, np.cos(xw) - xw * np.sin(xw))


@pytest.mark.parametrize("call, error, match", [
    (lambda: grad(lambda x: x * 2)(mt_(W)), RuntimeError,
     r"grad_and_value\(f\)\(\*args\): Expected f\(\*args\) to return a scalar Tensor, got "
     r"tensor with 1 dims. Maybe you wanted to use the vjp or jacrev APIs instead\?"),
    (lambda: grad(lambda x: 1.0)(mt_(W)), RuntimeError,
     r"Expected f\(\*args\) to return a Tensor, got <class 'float'>"),
    (lambda: grad(lambda x: x.sum(), argnums=1.0)(mt_(W)), RuntimeError,
     r"argnums must be int or Tuple\[int, \.\.\.\], got: <class 'float'>"),
    (lambda: grad(lambda x: x.sum(), argnums=[0])(mt_(W)), RuntimeError,
     r"argnums must be int or Tuple"),
    (lambda: grad(lambda x: x.sum(), argnums=(0, 1))(mt_(W)), RuntimeError,
     r"Got argnum=1, but only 1 positional inputs"),
    (lambda: grad(lambda x: x.sum(), argnums=-2)(mt_(W)), RuntimeError,
     r"Got argnum=-2, but only 1 positional inputs"),
    (lambda: grad(lambda x: x.sum(), argnums=())(mt_(W)), RuntimeError,
     r"argnums must be non-empty"),
    (lambda: grad(lambda x, y: x.sum(), argnums=(0, -2))(mt_(W), mt_(W)), RuntimeError,
     r"argnums must be unique"),
    (lambda: grad(lambda x: x.sum(), has_aux=True)(mt_(W)), RuntimeError,
     r"output of function f should be a tuple: \(output, aux\) if has_aux is True"),
    (lambda: grad(lambda x: (x.sum(), 1, 2), has_aux=True)(mt_(W)), RuntimeError,
     r"should be a tuple: \(output, aux\)"),
    (lambda: grad(lambda x: (x.sum(), 1))(mt_(W)), RuntimeError,
     r"Expected f\(\*args\) to return a Tensor, got <class 'tuple'>"),
    (lambda: grad(lambda x: x.sum())(1.0), ValueError,
     r"Thing passed to transform API must be Tensor, got <class 'float'>"),
    (lambda: grad(lambda x: x.sum())(mt.ones(2, dtype=mt.int64)), RuntimeError,
     r"only Tensors of floating point dtype can require gradients"),
    (lambda: vjp(lambda x: x, mt_(W), has_aux=True), RuntimeError,
     r"vjp\(f, \*primals\): output of function f should be a tuple"),
    (lambda: vjp(lambda x: x * 2, mt_(W))[1](mt.ones(4)), RuntimeError,
     r"Mismatch in shape: grad_output\[0\] has a shape of"),
    (lambda: vjp(lambda x: x * 2, mt_(W))[1]((mt.ones(3),)), RuntimeError,
     r"Expected pytree structure of cotangents to be the same"),
    (lambda: jvp(lambda x: x, mt_(W), mt_(W)), RuntimeError,
     r"Expected primals to be a tuple"),
    (lambda: jvp(lambda x: x, (mt_(W),), (mt_(W), mt_(W))), RuntimeError,
     r"Expected primals and tangents to have the same python structure"),
    (lambda: jvp(lambda x: x, (mt_(W),), (mt.ones(4),)), RuntimeError,
     r"Trying to set a forward gradient that has a different size"),
])
def test_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()


@needs_torch
def test_error_messages_match_torch():
    cases = [
        (lambda g, t: g(lambda x: x * 2)(t)),
        (lambda g, t: g(lambda x: x.sum(), argnums=1.0)(t)),
        (lambda g, t: g(lambda x: x.sum(), argnums=(0, 1))(t)),
        (lambda g, t: g(lambda x: x.sum(), argnums=())(t)),
        (lambda g, t: g(lambda x: x.sum(), has_aux=True)(t)),
    ]
    for case in cases:
        with pytest.raises(RuntimeError) as theirs:
            case(tfunc.grad, th(W))
        with pytest.raises(RuntimeError) as ours:
            case(grad, mt_(W))
        assert str(ours.value) == str(theirs.value)


# --------------------------------------------------------------------------- vjp, jvp

def test_vjp_and_reuse():
    out, fn = vjp(h_vector, mt_(W))
    close(out, arr(h_vector(mt_(W))))
    jac = finite_jacobian(h_vector, mt_(W))
    for v in (np.ones(3), RNG.standard_normal(3)):
        (g,) = fn(mt_(v))
        close(g, v @ jac, rtol=1e-6, atol=1e-7)


def test_vjp_pytrees_and_aux():
    out, fn, aux = vjp(lambda a, b: ({"s": a * b, "t": a.sum()}, b), mt_(W), mt_(X[0]),
                       has_aux=True)
    ga, gb = fn({"s": mt.ones(3, dtype=mt.float64), "t": mt.tensor(2.0, dtype=mt.float64)})
    close(ga, X[0] + 2)
    close(gb, W)
    close(aux, X[0])


def test_jvp_is_exact():
    v = RNG.standard_normal(3)
    out, tangent = jvp(h_vector, (mt_(W),), (mt_(v),))
    close(out, arr(h_vector(mt_(W))))
    close(tangent, finite_jacobian(h_vector, mt_(W)) @ v, rtol=1e-6, atol=1e-7)


# --------------------------------------------------------------------------- Jacobians

@pytest.mark.parametrize("transform", [jacrev, jacfwd])
def test_jacobians_match_finite_differences(transform):
    close(transform(h_vector)(mt_(W)), finite_jacobian(h_vector, mt_(W)), rtol=1e-6, atol=1e-7)


def test_jacobian_structures():
    def f(a, b):
        return {"p": a * b.sum(), "q": (a * a).sum()}
    for transform in (jacrev, jacfwd):
        jac = transform(f, argnums=(0, 1))(mt_(W), mt_(X[0]))
        assert jac["p"][0].shape == (3, 3) and jac["p"][1].shape == (3, 3)
        assert jac["q"][0].shape == (3,) and jac["q"][1].shape == (3,)
        close(jac["p"][0], np.eye(3) * X[0].sum())
        close(jac["p"][1], np.outer(W, np.ones(3)))
        close(jac["q"][0], 2 * W)
        close(jac["q"][1], np.zeros(3))
    jac, aux = jacrev(lambda x: (x.sin(), x.cos()), has_aux=True)(mt_(W))
    close(jac, np.diag(np.cos(W)))
    close(aux, np.cos(W))
    m = RNG.standard_normal((2, 3))
    close(jacrev(lambda x: x * x)(mt_(m)),
          np.einsum("ij,ik,jl->ijkl", 2 * m, np.eye(2), np.eye(3)))


def test_jacrev_chunk_size():
    close(jacrev(h_vector, chunk_size=2)(mt_(W)), arr(jacrev(h_vector)(mt_(W))))
    for bad in (0, -1):   # refused when the transform is made, as torch.func does
        with pytest.raises(ValueError, match=r"jacrev: `chunk_size` should be greater than 0"):
            jacrev(h_vector, chunk_size=bad)


def test_hessian_matches_finite_differences():
    expected = finite_jacobian(lambda x: grad(s_scalar)(x), mt_(W))
    close(hessian(s_scalar)(mt_(W)), expected, rtol=1e-6, atol=1e-7)
    close(jacrev(jacrev(s_scalar))(mt_(W)), expected, rtol=1e-6, atol=1e-7)
    close(jacfwd(jacrev(s_scalar))(mt_(W)), expected, rtol=1e-6, atol=1e-7)
    close(jacrev(jacfwd(s_scalar))(mt_(W)), expected, rtol=1e-6, atol=1e-7)


# --------------------------------------------------------------------------- compositions

def test_vmap_grad_per_sample_gradients_of_unbatched_parameters():
    g = vmap(grad(f_scalar), in_dims=(None, 0))(mt_(W), mt_(X))
    close(g, np.stack([loop_grad(f_scalar, mt_(W), mt_(x)) for x in X]))


def test_vmap_grad_chunked_equals_unchunked():
    per_sample = vmap(grad(f_scalar), in_dims=(None, 0))
    chunked = vmap(grad(f_scalar), in_dims=(None, 0), chunk_size=3)
    close(chunked(mt_(W), mt_(X)), arr(per_sample(mt_(W), mt_(X))))


def test_vmap_grad_in_dims_none_0_0():
    def loss(w, x, y):
        return ((x * w).sum() - y) ** 2
    ys = RNG.standard_normal(4)
    g = vmap(grad(loss), in_dims=(None, 0, 0))(mt_(W), mt_(X), mt_(ys))
    close(g, np.stack([2 * ((x * W).sum() - y) * x for x, y in zip(X, ys)]))


def test_grad_of_vmap():
    g = grad(lambda w: vmap(f_scalar, in_dims=(None, 0))(w, mt_(X)).sum())(mt_(W))
    close(g, sum(loop_grad(f_scalar, mt_(W), mt_(x)) for x in X))


def test_grad_of_grad():
    def f(x):
        return (x.sin() * x).sum()
    g2 = grad(lambda x: grad(f)(x).sum())(mt_(W))
    # d/dx sum(sin x + x cos x) = 2 cos x - x sin x
    close(g2, 2 * np.cos(W) - W * np.sin(W))


def test_grad_grad_grad():
    g3 = grad(lambda x: grad(lambda y: grad(lambda z: (z ** 4).sum())(y).sum())(x).sum())
    close(g3(mt_(W)), 24 * W)


def test_vmap_vmap_grad():
    g = vmap(vmap(grad(f_scalar), in_dims=(None, 0)), in_dims=(None, 0))(mt_(W), mt_(XX))
    expected = np.stack([np.stack([loop_grad(f_scalar, mt_(W), mt_(x)) for x in xs])
                         for xs in XX])
    close(g, expected)
    # batched at both levels, at other dims
    g = vmap(vmap(grad(f_scalar), in_dims=(0, 1)), in_dims=(None, 2))(
        mt_(X), mt_(XX.transpose(2, 1, 0)))
    expected = np.stack([np.stack([loop_grad(f_scalar, mt_(X[j]), mt_(XX[i, j]))
                                   for j in range(4)]) for i in range(2)])
    close(g, expected)


def test_vmap_jacrev_and_vmap_jacfwd():
    expected = np.stack([finite_jacobian(h_vector, mt_(x)) for x in X])
    close(vmap(jacrev(h_vector))(mt_(X)), expected, rtol=1e-6, atol=1e-7)
    close(vmap(jacfwd(h_vector))(mt_(X)), expected, rtol=1e-6, atol=1e-7)
    close(vmap(hessian(s_scalar))(mt_(X)),
          np.stack([finite_jacobian(lambda x: grad(s_scalar)(x), mt_(x)) for x in X]),
          rtol=1e-6, atol=1e-7)


def test_vmap_jacrev_with_unbatched_argument():
    def f(w, x):
        return (x * w).sin() * w.sum()
    jac = vmap(jacrev(f), in_dims=(None, 0))(mt_(W), mt_(X))
    close(jac, np.stack([finite_jacobian(lambda w: f(w, mt_(x)), mt_(W)) for x in X]),
          rtol=1e-6, atol=1e-7)


def test_vmap_of_vjp_fn_called_inside_vmap():
    out, fn = vjp(h_vector, mt_(W))
    basis = np.eye(3)
    (rows,) = vmap(fn)(mt_(basis))
    close(rows, finite_jacobian(h_vector, mt_(W)), rtol=1e-6, atol=1e-7)


def test_vjp_inside_vmap_with_batched_and_unbatched_cotangents():
    v = RNG.standard_normal((4, 3))
    jacs = [finite_jacobian(h_vector, mt_(x)) for x in X]
    got = vmap(lambda x, v: vjp(h_vector, x)[1](v)[0])(mt_(X), mt_(v))
    close(got, np.stack([vi @ j for vi, j in zip(v, jacs)]), rtol=1e-6, atol=1e-7)
    got = vmap(lambda x: vjp(h_vector, x)[1](mt_(v[0]))[0])(mt_(X))
    close(got, np.stack([v[0] @ j for j in jacs]), rtol=1e-6, atol=1e-7)


def test_vmap_grad_of_output_not_depending_on_the_input():
    g = vmap(grad(lambda w, x: x.sum()), in_dims=(None, 0))(mt_(W), mt_(X))
    close(g, np.zeros((4, 3)))
    g = vmap(grad(lambda x: mt_(W).sum()))(mt_(X))
    close(g, np.zeros((4, 3)))


def test_inplace_inside_grad():
    close(grad(lambda x: x.clone().mul_(x).sum())(mt_(W)), 2 * W)
    g = vmap(grad(lambda x: x.clone()[1:].mul_(x[:2]).sum()))(mt_(X))
    close(g, np.stack([np.r_[x[1], x[2], 0] + np.r_[0, x[0], x[1]] for x in X]))
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used "
                                           "in an in-place operation"):
        grad(lambda x: x.mul_(2).sum())(mt_(W))


def test_closure_over_outer_input_no_perturbation_confusion():
    # d/dx [ d/dy (x * y) at y = x ] = d/dx x = 1  (not 2)
    g = grad(lambda x: grad(lambda y: (x * y).sum())(x).sum())(mt_(W))
    close(g, np.ones(3))
    # Siskind & Pearlmutter: d/dx [ x * d/dy (x + y) at y = 1 ] = 1
    one = mt_(1.0)
    g = grad(lambda x: x * grad(lambda y: x + y)(one))(mt_(2.0))
    close(g, 1.0)


def test_grad_inside_vmap_closing_over_batched_tensor():
    def per_sample(x):
        return grad(lambda w: (w * x).sin().sum())(mt_(W))
    g = vmap(per_sample)(mt_(X))
    close(g, np.stack([x * np.cos(W * x) for x in X]))


def test_grad_of_vmap_of_grad():
    def total(w):
        return vmap(grad(f_scalar), in_dims=(None, 0))(w, mt_(X)).sin().sum()
    expected = finite_jacobian(total, mt_(W))
    close(grad(total)(mt_(W)), expected, rtol=1e-6, atol=1e-7)


@needs_torch
def test_compositions_match_torch_func():
    w, x, xx = W, X, XX
    pairs = [
        (lambda G, V, J, F, H, a: G(f_scalar)(a(w), a(x[0]))),
        (lambda G, V, J, F, H, a: V(G(f_scalar), in_dims=(None, 0))(a(w), a(x))),
        (lambda G, V, J, F, H, a: G(lambda w: V(f_scalar, in_dims=(None, 0))(w, a(x)).sum())(
            a(w))),
        (lambda G, V, J, F, H, a: G(lambda w: G(f_scalar)(w, a(x[0])).sin().sum())(a(w))),
        (lambda G, V, J, F, H, a: V(V(G(f_scalar), in_dims=(None, 0)), in_dims=(None, 0))(
            a(w), a(xx))),
        (lambda G, V, J, F, H, a: V(J(h_vector))(a(x))),
        (lambda G, V, J, F, H, a: J(J(h_vector))(a(w))),
        (lambda G, V, J, F, H, a: F(J(h_vector))(a(w))),
        (lambda G, V, J, F, H, a: F(h_vector)(a(w))),
        (lambda G, V, J, F, H, a: H(s_scalar)(a(w))),
        (lambda G, V, J, F, H, a: V(H(s_scalar))(a(x))),
        (lambda G, V, J, F, H, a: G(lambda x: G(lambda y: (x * y).sum())(x).sum())(a(w))),
    ]
    for i, case in enumerate(pairs):
        expected = case(tfunc.grad, tfunc.vmap, tfunc.jacrev, tfunc.jacfwd, tfunc.hessian, th)
        actual = case(grad, vmap, jacrev, jacfwd, hessian, mt_)
        close(actual, expected, rtol=1e-7, atol=1e-9)


# --------------------------------------------------------------------------- functional_call

def _mlp(dtype=mt.float64):
    mt.manual_seed(0)
    return mt.nn.Sequential(mt.nn.Linear(3, 5, dtype=dtype), mt.nn.Tanh(),
                            mt.nn.Linear(5, 2, dtype=dtype))


def test_functional_call_swaps_and_restores():
    model = _mlp()
    original = {k: v for k, v in model.named_parameters()}
    zeros = {k: mt.zeros_like(v) for k, v in original.items()}
    out = functional_call(model, zeros, (mt_(X),))
    close(out, np.zeros((4, 2)))
    assert all(p is original[k] for k, p in model.named_parameters())
    partial = functional_call(model, {"2.bias": mt.ones(2, dtype=mt.float64)}, mt_(X))
    expected = model(mt_(X)).detach() - model[2].bias.detach() + 1
    close(partial, arr(expected))


def test_functional_call_restores_on_error():
    model = _mlp()
    original = {k: v for k, v in model.named_parameters()}
    bad = {k: mt.zeros(7, dtype=mt.float64) for k in original}
    with pytest.raises(RuntimeError):
        functional_call(model, bad, (mt_(X),))
    assert all(p is original[k] for k, p in model.named_parameters())
    with pytest.raises(RuntimeError, match="Unexpected key"):
        functional_call(model, {"nope": mt_(W)}, (mt_(X),), strict=True)
    # a name whose path does not exist, after names already put in place: those are put
    # back too
    with pytest.raises(AttributeError):
        functional_call(model, {"0.weight": mt.zeros_like(original["0.weight"]),
                                "nope.weight": mt_(W)}, (mt_(X),))
    assert all(p is original[k] for k, p in model.named_parameters())
    assert "nope" not in model.__dict__ and "weight" not in model.__dict__


def test_functional_call_tied_weights_and_buffers():
    model = mt.nn.Sequential(mt.nn.Linear(2, 2, dtype=mt.float64),
                             mt.nn.Linear(2, 2, dtype=mt.float64))
    model[1].weight = model[0].weight
    model.register_buffer("scale", mt_(3.0))
    x = mt_([[1.0, 2.0]])
    zero = mt.zeros(2, 2, dtype=mt.float64)
    close(functional_call(model, {"0.weight": zero}, x), arr(model[1].bias)[None])
    untied = functional_call(model, {"0.weight": zero}, x, tie_weights=False)
    close(untied, arr(model[1](model[0].bias.unsqueeze(0))))
    assert model[1].weight is model[0].weight
    assert functional_call(model, ({"scale": mt_(5.0)}, {}), x) is not None
    assert model.scale.item() == 3.0
    with pytest.raises(ValueError, match="appeared in multiple dictionaries"):
        functional_call(model, ({"scale": mt_(5.0)}, {"scale": mt_(1.0)}), x)


def test_functional_call_keeps_no_module_alive():
    # the reused walk of the tree must not outlive the module, even when a sub-module
    # refers back to its root (a cycle only the garbage collector can free)
    import gc
    import weakref
    model = mt.nn.Sequential(mt.nn.Linear(2, 2))
    model[0].owners = [model]
    functional_call(model, dict(model.named_parameters()), mt.ones(1, 2))
    alive = weakref.ref(model)
    del model
    gc.collect()
    assert alive() is None


def test_functional_call_on_a_copied_module_uses_the_copy():
    import copy
    model = mt.nn.Linear(2, 2, dtype=mt.float64)
    x = mt_([[1.0, 2.0]])
    functional_call(model, {"bias": mt.zeros(2, dtype=mt.float64)}, x)
    twin = copy.deepcopy(model)
    twin.weight = mt.nn.Parameter(mt.ones(2, 2, dtype=mt.float64))
    out = functional_call(twin, {"bias": mt.zeros(2, dtype=mt.float64)}, x)
    close(out, arr(x) @ np.ones((2, 2)))
    assert model.weight.detach().numpy().tolist() != [[1.0, 1.0], [1.0, 1.0]]


def test_functional_call_follows_changes_to_the_module_between_calls():
    # functional_call reuses its walk of the module tree: every change between calls
    # (ties made or broken, members registered, replaced or deleted) must be seen
    model = mt.nn.Sequential(mt.nn.Linear(2, 2, dtype=mt.float64),
                             mt.nn.Linear(2, 2, dtype=mt.float64))
    x = mt_([[1.0, 2.0]])
    zero = mt.zeros(2, 2, dtype=mt.float64)
    untied = functional_call(model, {"0.weight": zero}, x)
    close(untied, arr(model[1](model[0].bias.unsqueeze(0))))
    model[1].weight = model[0].weight                       # tie after a first call
    close(functional_call(model, {"0.weight": zero}, x), arr(model[1].bias)[None])
    model[1].weight = mt.nn.Parameter(mt.ones(2, 2, dtype=mt.float64))   # untie again
    close(functional_call(model, {"0.weight": zero}, x),
          arr(model[1](model[0].bias.unsqueeze(0))))
    model.register_buffer("scale", mt_(3.0))                # a new buffer is a known key
    functional_call(model, {"scale": mt_(5.0)}, x, strict=False)
    full = dict(model.named_parameters()) | dict(model.named_buffers())
    functional_call(model, full, x, strict=True)
    del model.scale                                         # and a deleted one unknown
    with pytest.raises(RuntimeError, match="Unexpected key"):
        functional_call(model, full, x, strict=True)
    model[1] = mt.nn.Linear(2, 2, dtype=mt.float64)         # a replaced sub-module
    out = functional_call(model, {"1.bias": mt.ones(2, dtype=mt.float64)}, x)
    expected = model(x).detach() - model[1].bias.detach() + 1
    close(out, arr(expected))
    assert model[1].bias is not None and model[1].bias.shape == (2,)


def test_per_sample_gradients_of_a_model_equal_single_sample_backward():
    model = _mlp()
    params = {k: v.detach() for k, v in model.named_parameters()}
    targets = mt.tensor([0, 1, 1, 0])

    def loss(p, x, y):
        out = functional_call(model, p, (x.unsqueeze(0),))
        return mt.nn.functional.cross_entropy(out, y.unsqueeze(0))
    per_sample = vmap(grad(loss), in_dims=(None, 0, 0))(params, mt_(X), targets)
    for i in range(4):
        model.zero_grad()
        mt.nn.functional.cross_entropy(model(mt_(X[i:i + 1])), targets[i:i + 1]).backward()
        for name, p in model.named_parameters():
            close(per_sample[name][i], arr(p.grad))


@needs_torch
def test_per_sample_gradients_match_torch_func():
    model = _mlp()
    tmodel = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2))
    tmodel = tmodel.double()
    params = {k: v.detach() for k, v in model.named_parameters()}
    tparams = {k: th(arr(v)) for k, v in params.items()}
    y = np.array([0, 1, 1, 0])

    def loss(p, x, y):
        return mt.nn.functional.cross_entropy(functional_call(model, p, (x[None],)), y[None])

    def tloss(p, x, y):
        return torch.nn.functional.cross_entropy(tfunc.functional_call(tmodel, p, (x[None],)),
                                                 y[None])
    ours = vmap(grad(loss), in_dims=(None, 0, 0))(params, mt_(X), mt.tensor(y))
    theirs = tfunc.vmap(tfunc.grad(tloss), in_dims=(None, 0, 0))(tparams, th(X),
                                                                  torch.tensor(y))
    close(ours, theirs)


# --------------------------------------------------------------------------- every op

_samples = samples_of


def _differentiable(op):
    return op.differentiable and (op.derivative is not None or (
        op.inplace_of is not None and op.inplace_of.derivative is not None))


def _sweep():
    names = []
    for name, op in sorted(REGISTRY.items()):
        if op.samples is not None and _differentiable(op) and not op.random:
            names.append(name)
    return names


def _float_outputs(result):
    results = result if isinstance(result, (tuple, list)) else (result,)
    return [r for r in results if isinstance(r, TensorBase) and r.dtype.is_floating_point]


def _op_cases(name):
    """(function of the differentiated tensors, their values) per usable sample."""
    op = REGISTRY[name]
    cases = []
    for sample in _samples(name):
        args, kwargs = list(sample.args), dict(sample.kwargs)
        places = differentiable_places(op, args, kwargs)
        if not places:
            continue
        values = [container[key].detach().clone() for container, key in places]

        def f(*tensors, args=args, kwargs=kwargs, places=places):
            for (container, key), t in zip(places, tensors):
                container[key] = t
            call_args = list(args)
            if op.kind == "inplace":
                call_args[0] = call_args[0].clone()
            return _float_outputs(op(*call_args, **kwargs))
        try:
            outputs = f(*values)
        except Exception:      # samples that check errors
            continue
        if outputs:
            cases.append((f, values, [tuple(o.shape) for o in outputs]))
    return cases


def _per_sample(values, size=3):
    return [mt.stack([v * (1 - 0.1 * i) for i in range(size)]) for v in values]


@pytest.mark.parametrize("name", _sweep())
def test_vmap_grad_of_every_op_equals_loop_of_grad(name):
    cases = _op_cases(name)
    if not cases:
        pytest.skip(f"{name} has no sample with a float64 input and a float output")
    rng = np.random.default_rng(seed_for(name))
    for f, values, shapes in cases:
        weights = [mt_(rng.standard_normal(s)) for s in shapes]

        def scalar(*tensors, f=f, weights=weights):
            return sum((o * w).sum() for o, w in zip(f(*tensors), weights))
        batched = _per_sample(values)
        argnums = tuple(range(len(values)))
        actual = vmap(grad(scalar, argnums=argnums))(*batched)
        for i in range(3):
            leaves = [b[i].detach().clone().requires_grad_() for b in batched]
            expected = mt.autograd.grad(scalar(*leaves), leaves, allow_unused=True,
                                        materialize_grads=True)
            for a, e in zip(actual, expected):
                close(a[i], arr(e), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("name", _sweep())
def test_is_grads_batched_of_every_op_equals_loop_of_backward(name):
    cases = _op_cases(name)
    if not cases:
        pytest.skip(f"{name} has no sample with a float64 input and a float output")
    rng = np.random.default_rng(seed_for(name) + 1)
    compared = 0
    for f, values, shapes in cases:
        leaves = [v.detach().clone().requires_grad_() for v in values]
        outputs = f(*leaves)
        if not any(o.requires_grad for o in outputs):
            continue
        pairs = [(o, mt_(rng.standard_normal((3,) + s))) for o, s in zip(outputs, shapes)
                 if o.requires_grad]
        outs = [o for o, _ in pairs]
        vs = [v for _, v in pairs]
        actual = mt.autograd.grad(outs, leaves, vs, retain_graph=True, is_grads_batched=True,
                                  allow_unused=True, materialize_grads=True)
        for i in range(3):
            expected = mt.autograd.grad(outs, leaves, [v[i] for v in vs], retain_graph=True,
                                        allow_unused=True, materialize_grads=True)
            for a, e in zip(actual, expected):
                close(a[i], arr(e), rtol=1e-6, atol=1e-8)
        compared += 1
    assert compared, f"{name}: no sample has an output that requires grad"


def test_is_grads_batched_through_inplace_view_writes():
    x = mt_(W).requires_grad_()
    base = x * 2
    base[1:].mul_(x[:2])          # CopySlices
    view = base[:2]
    view.mul_(x[1:].sin())        # another one, over an overlapping region
    out = base * x
    v = mt_(RNG.standard_normal((4, 3)))
    (batched,) = mt.autograd.grad(out, x, v, retain_graph=True, is_grads_batched=True)
    for i in range(4):
        (expected,) = mt.autograd.grad(out, x, v[i], retain_graph=True)
        close(batched[i], arr(expected))
    # and batched vector-Hessian products through a create_graph graph
    (g,) = mt.autograd.grad(out.sum(), x, create_graph=True)
    (hv,) = mt.autograd.grad(g, x, v[:3], retain_graph=True, is_grads_batched=True)
    for i in range(3):
        (expected,) = mt.autograd.grad(g, x, v[i], retain_graph=True)
        close(hv[i], arr(expected))


def test_per_sample_gradients_leave_no_reference_cycles():
    # cycles would keep every call's gradients alive until the garbage collector runs
    # (timeit, and many training loops, run with it disabled)
    import gc
    w = mt.randn(3, 4)
    x = mt.randn(5, 4)
    g = mt.func.vmap(mt.func.grad(lambda w, x: (w @ x).tanh().sum()), in_dims=(None, 0))
    g(w, x)
    gc.collect()
    gc.disable()
    try:
        before = len(gc.get_objects())
        for _ in range(5):
            g(w, x)
        assert len(gc.get_objects()) - before < 10
    finally:
        gc.enable()
