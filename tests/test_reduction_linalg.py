"""Reductions (ops/reduction.py) and matrix products (ops/linalg.py).

Every op's registered samples run forward against PyTorch (values, shapes, dtypes),
first and second derivatives against PyTorch's autograd (same graph built in both), and
a few cases against NumPy; errors are compared by type and message.
"""
import math

import numpy as np
import pytest

import microtensor as mt
from microtensor.ops.registry import REGISTRY
from microtensor.testing import maker, sample_ids, samples_of, seed_for

try:
    import torch
except ImportError:
    torch = None

requires_torch = pytest.mark.skipif(torch is None, reason="PyTorch (the oracle) is not installed")

REDUCTIONS = ["sum", "mean", "prod", "amax", "amin", "max", "min", "argmax", "argmin", "var",
              "std", "norm", "logsumexp", "softmax", "log_softmax", "cumsum", "all", "any",
              "count_nonzero"]
LINALG = ["matmul", "mm", "bmm", "mv", "dot", "outer", "addmm"]
NOT_DIFFERENTIABLE = {"argmax", "argmin", "all", "any", "count_nonzero"}


# ------------------------------------------------------------------------------ helpers

def to_torch(x, requires_grad=False):
    if isinstance(x, mt.Tensor):
        t = torch.from_numpy(np.array(x.detach().numpy()))
        return t.requires_grad_() if requires_grad else t
    if isinstance(x, mt.dtype):
        return getattr(torch, x.name)
    return x


def as_leaf(x):
    """A fresh leaf over the same (possibly strided) memory that requires grad."""
    return x.detach().requires_grad_() if isinstance(x, mt.Tensor) and \
        x.dtype.is_floating_point else x


def primary(result):
    """The differentiable output of an op (``values`` of ``max(x, dim)``)."""
    return result[0] if isinstance(result, tuple) else result


def assert_close(actual, expected, rtol=1e-7, atol=1e-9):
    if expected is None:   # no dependence in PyTorch's graph: ours may hold rounding zeros
        assert actual is None or np.allclose(actual.detach().numpy(), 0, rtol=0, atol=atol)
        return
    expected = expected.detach().numpy(force=True)
    if actual is None:
        assert not np.any(expected)
        return
    assert tuple(actual.shape) == expected.shape
    np.testing.assert_allclose(actual.detach().numpy(), expected, rtol=rtol, atol=atol)


def run_both(name, sample, leaves=False):
    """The op on microtensor inputs and on equal torch inputs: (mt args, torch args, outs)."""
    convert = as_leaf if leaves else (lambda a: a)
    args = [convert(a) for a in sample.args]
    kwargs = {k: convert(v) for k, v in sample.kwargs.items()}
    t_args = [to_torch(a, leaves and isinstance(a, mt.Tensor) and a.dtype.is_floating_point)
              for a in args]
    t_kwargs = {k: to_torch(v, leaves and isinstance(v, mt.Tensor) and
                            v.dtype.is_floating_point) for k, v in kwargs.items()}
    ours = getattr(mt, name)(*args, **kwargs)
    theirs = getattr(torch, name)(*t_args, **t_kwargs)
    return (args, kwargs, ours), (t_args, t_kwargs, theirs)


def tensors_in(args, kwargs):
    return [a for a in list(args) + list(kwargs.values())
            if isinstance(a, (mt.Tensor, torch.Tensor if torch else ())) and a.requires_grad]


# ------------------------------------------------------------------------------ forward

@requires_torch
@pytest.mark.parametrize("name,index", sample_ids(REDUCTIONS + LINALG))
def test_forward_matches_torch(name, index):
    sample = samples_of(name)[index]
    (args, kwargs, ours), (_, _, theirs) = run_both(name, sample)
    if isinstance(theirs, tuple):
        assert isinstance(ours, tuple) and len(ours) == len(theirs)
        assert type(ours).__name__ == type(theirs).__name__
        pairs = list(zip(ours, theirs)) + [(ours.values, theirs.values),
                                           (ours.indices, theirs.indices)]
    else:
        pairs = [(ours, theirs)]
    for o, t in pairs:
        assert tuple(o.shape) == tuple(t.shape)
        assert o.dtype.name == str(t.dtype).replace("torch.", "")
        assert o.is_contiguous()
        np.testing.assert_allclose(o.numpy(), t.numpy(), rtol=1e-7, atol=1e-9)
    if REGISTRY[name].method:
        method_result = getattr(args[0], name)(*args[1:], **kwargs)
        np.testing.assert_allclose(primary(method_result).numpy(), primary(ours).numpy())


NUMPY_CASES = [
    ("sum", lambda x: x.sum((0, 2)), lambda a: a.sum((0, 2))),
    ("mean", lambda x: x.mean(1, keepdim=True), lambda a: a.mean(1, keepdims=True)),
    ("prod", lambda x: x.prod(-1), lambda a: a.prod(-1)),
    ("amax", lambda x: x.amax((0, 1)), lambda a: a.max((0, 1))),
    ("amin", lambda x: x.amin(2), lambda a: a.min(2)),
    ("max", lambda x: x.max(1).values, lambda a: a.max(1)),
    ("min", lambda x: x.min(0).indices, lambda a: a.argmin(0)),
    ("argmax", lambda x: x.argmax(), lambda a: a.argmax()),
    ("var", lambda x: x.var(1), lambda a: a.var(1, ddof=1)),
    ("std", lambda x: x.std((0, 2), correction=0), lambda a: a.std((0, 2))),
    ("norm", lambda x: x.norm(dim=2), lambda a: np.linalg.norm(a, axis=2)),
    ("norm", lambda x: x.norm(1), lambda a: np.abs(a).sum()),
    ("logsumexp", lambda x: x.logsumexp(1), lambda a: np.log(np.exp(a).sum(1))),
    ("softmax", lambda x: x.softmax(0), lambda a: np.exp(a) / np.exp(a).sum(0)),
    ("log_softmax", lambda x: x.log_softmax(-1),
     lambda a: a - np.log(np.exp(a).sum(-1, keepdims=True))),
    ("cumsum", lambda x: x.cumsum(1), lambda a: a.cumsum(1)),
    ("all", lambda x: (x * 0.4).trunc().all(1), lambda a: np.trunc(a * 0.4).all(1)),
    ("any", lambda x: (x * 0.4).trunc().any(), lambda a: np.trunc(a * 0.4).any()),
    ("count_nonzero", lambda x: (x * 0.4).trunc().count_nonzero((0, 1)),
     lambda a: np.count_nonzero(np.trunc(a * 0.4), (0, 1))),
    ("matmul", lambda x: x @ x.mT, lambda a: a @ a.swapaxes(-1, -2)),
    ("bmm", lambda x: mt.bmm(x, x.mT), lambda a: a @ a.swapaxes(-1, -2)),
    ("dot", lambda x: mt.dot(x[0, 0], x[1, 1]), lambda a: a[0, 0] @ a[1, 1]),
]


@pytest.mark.parametrize("name,ours,reference", NUMPY_CASES, ids=[c[0] for c in NUMPY_CASES])
def test_forward_matches_numpy(name, ours, reference):
    x = maker(seed_for(name))(2, 3, 4, low=-1.5, high=1.5)
    np.testing.assert_allclose(ours(x).numpy(), reference(x.numpy()), rtol=1e-12, atol=1e-12)


def test_max_with_dim_returns_named_values_and_indices():
    x = mt.tensor([[1.0, 5.0, 3.0], [4.0, 2.0, 6.0]])
    values, indices = x.max(1)
    assert values.tolist() == [5.0, 6.0] and indices.tolist() == [1, 2]
    result = mt.min(x, dim=0, keepdim=True)
    assert result.values.tolist() == [[1.0, 2.0, 3.0]]
    assert result.indices.tolist() == [[0, 1, 0]] and result.indices.dtype is mt.int64
    assert mt.max(x, mt.tensor(4.5)).tolist() == [[4.5, 5.0, 4.5], [4.5, 4.5, 6.0]]


def test_result_dtypes():
    ints = mt.tensor([[1, 2], [3, 4]])
    flags = mt.tensor([True, False])
    assert ints.sum().dtype is mt.int64 and flags.sum().dtype is mt.int64
    assert ints.prod().dtype is mt.int64 and flags.cumsum(0).dtype is mt.int64
    assert ints.sum(dtype=mt.float64).dtype is mt.float64
    assert ints.amax().dtype is mt.int64 and flags.amax().dtype is mt.bool
    assert ints.logsumexp(1).dtype is mt.float32
    assert ints.softmax(0, dtype=mt.float64).dtype is mt.float64
    assert (ints @ ints).dtype is mt.int64 and ints.argmax().dtype is mt.int64
    assert ints.all().dtype is mt.bool and ints.count_nonzero().dtype is mt.int64
    assert mt.outer(mt.arange(3), mt.ones(2)).dtype is mt.float32


def test_float32_sums_are_as_accurate_as_numpy():
    rng = np.random.default_rng(3)
    values = rng.uniform(0, 1, size=(1000, 1000)).astype(np.float32)
    exact = values.astype(np.float64)
    x = mt.from_numpy(values)
    for ours, numpy_result, reference in [
            (x.sum(), values.sum(), exact.sum()),
            (x.mT.sum(0), values.T.sum(0), exact.T.sum(0)),
            (x.sum(1), values.sum(1), exact.sum(1)),
            (x.mean(), values.mean(), exact.mean())]:
        our_error = np.max(np.abs(ours.numpy().astype(np.float64) - reference))
        numpy_error = np.max(np.abs(numpy_result.astype(np.float64) - reference))
        assert our_error <= 2 * numpy_error + 1e-7 * np.max(np.abs(reference))


def test_reductions_of_empty_tensors():
    empty = mt.zeros(0, 3)
    assert empty.sum().item() == 0 and empty.prod().item() == 1
    assert math.isnan(empty.mean().item())
    assert tuple(empty.amax(1).shape) == (0,)
    assert empty.logsumexp(0).tolist() == [-math.inf] * 3
    assert tuple(empty.softmax(0).shape) == (0, 3) and tuple(empty.cumsum(0).shape) == (0, 3)
    assert tuple((empty @ mt.ones(3, 2)).shape) == (0, 2)
    assert (mt.zeros(2, 0) @ mt.zeros(0, 3)).tolist() == [[0.0] * 3] * 2


def test_matmul_result_is_fresh_and_contiguous():
    a = mt.randn(3, 4, 2).transpose(0, 2)
    result = a @ mt.randn(3, 5)
    assert result.is_contiguous() and tuple(result.shape) == (2, 4, 5)
    assert result._base is None


# ------------------------------------------------------------------------------ gradients

def _grads(autograd, outputs, inputs, grad_outputs, create_graph):
    found = autograd.grad(outputs, inputs, grad_outputs, create_graph=create_graph,
                          allow_unused=True)
    return list(found)


@requires_torch
@pytest.mark.parametrize("name,index", sample_ids(
    [n for n in REDUCTIONS + LINALG if n not in NOT_DIFFERENTIABLE]))
def test_first_and_second_derivatives_match_torch(name, index):
    sample = samples_of(name)[index]
    (args, kwargs, ours), (t_args, t_kwargs, theirs) = run_both(name, sample, leaves=True)
    ours, theirs = primary(ours), primary(theirs)
    inputs, t_inputs = tensors_in(args, kwargs), tensors_in(t_args, t_kwargs)
    assert len(inputs) == len(t_inputs) > 0

    rng = np.random.default_rng(index)
    cotangent = rng.uniform(-1, 1, size=tuple(theirs.shape))
    v = mt.from_numpy(np.array(cotangent)).requires_grad_()
    t_v = torch.from_numpy(np.array(cotangent)).requires_grad_()
    first = _grads(mt.autograd, ours, inputs, v, True)
    t_first = _grads(torch.autograd, theirs, t_inputs, t_v, True)
    for g, t_g in zip(first, t_first):
        assert_close(g, t_g)

    # second order: differentiate <first, w> w.r.t. the inputs and the cotangent
    weights = [rng.uniform(-1, 1, size=tuple(t.shape)) for t in t_inputs]
    pairs = [(g, t_g, w) for g, t_g, w in zip(first, t_first, weights)
             if t_g is not None and t_g.requires_grad]
    if not pairs:
        assert all(g is None or not g.requires_grad for g in first)
        return
    total = sum((g * mt.from_numpy(np.array(w))).sum() for g, _, w in pairs)
    t_total = sum((t_g * torch.from_numpy(np.array(w))).sum() for _, t_g, w in pairs)
    second = _grads(mt.autograd, total, inputs + [v], None, False)
    t_second = _grads(torch.autograd, t_total, t_inputs + [t_v], None, False)
    for g, t_g in zip(second, t_second):
        assert_close(g, t_g)


def test_prod_gradient_with_zeros():
    for values in ([2.0, 0.0, 3.0, 4.0], [0.0, 1.5, 0.0, 2.0], [1.0, 2.0, 3.0, -1.0]):
        x = mt.tensor(values, dtype=mt.float64, requires_grad=True)
        (g,) = mt.autograd.grad(x.prod(), x)
        expected = [math.prod(values[:i] + values[i + 1:]) for i in range(len(values))]
        assert g.tolist() == pytest.approx(expected)


def test_extremum_gradient_is_shared_between_ties():
    x = mt.tensor([[1.0, 3.0, 3.0], [2.0, 0.0, 2.0]], requires_grad=True)
    (g,) = mt.autograd.grad(x.amax(1).sum(), x)
    assert g.tolist() == [[0.0, 0.5, 0.5], [0.5, 0.0, 0.5]]
    (g,) = mt.autograd.grad(x.max(), x)
    assert g.tolist() == [[0.0, 0.5, 0.5], [0.0, 0.0, 0.0]]


def test_norm_and_std_gradients_at_zero_are_zero():
    x = mt.zeros(3, requires_grad=True)
    assert mt.autograd.grad(x.norm(), x)[0].tolist() == [0.0, 0.0, 0.0]
    c = mt.ones(4, requires_grad=True)
    assert mt.autograd.grad(c.std(), c)[0].tolist() == [0.0] * 4


# ------------------------------------------------------------------------------ errors

ERRORS = [
    (lambda m: m.matmul(m.ones(3), m.ones(4)), RuntimeError,
     "inconsistent tensor size, expected tensor [3] and src [4]"),
    (lambda m: m.matmul(m.ones(2, 3), m.ones(4, 5)), RuntimeError,
     "mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)"),
    (lambda m: m.matmul(m.ones(7, 2, 3), m.ones(4, 5)), RuntimeError,
     "mat1 and mat2 shapes cannot be multiplied (14x3 and 4x5)"),
    (lambda m: m.matmul(m.ones(3), m.ones(4, 5)), RuntimeError,
     "mat1 and mat2 shapes cannot be multiplied (1x3 and 4x5)"),
    (lambda m: m.matmul(m.ones(2, 3), m.ones(4)), RuntimeError,
     "size mismatch, got input (2), mat (2x3), vec (4)"),
    (lambda m: m.matmul(m.ones(5, 7, 2, 3), m.ones(7, 4, 5)), RuntimeError,
     "Expected size for first two dimensions of batch2 tensor to be: [35, 3] but got: [35, 4]."),
    (lambda m: m.matmul(m.ones(7, 2, 3), m.ones(6, 3, 5)), RuntimeError,
     "The size of tensor a (7) must match the size of tensor b (6) at non-singleton dimension 0"),
    (lambda m: m.matmul(m.tensor(1.0), m.ones(2, 2)), RuntimeError,
     "both arguments to matmul need to be at least 1D, but they are 0D and 2D"),
    (lambda m: m.matmul(m.ones(2, 3), m.ones(3, 4, dtype=m.float64)), RuntimeError,
     "expected m1 and m2 to have the same dtype, but got: float != double"),
    (lambda m: m.matmul(m.ones(3), m.ones(3, dtype=m.float64)), RuntimeError,
     "dot : expected both vectors to have same dtype, but found Float and Double"),
    (lambda m: m.matmul(m.ones(2, 2, dtype=m.bool), m.ones(2, 2, dtype=m.bool)),
     NotImplementedError, "not implemented for 'Bool'"),
    (lambda m: m.mm(m.ones(3), m.ones(3, 3)), RuntimeError, "self must be a matrix"),
    (lambda m: m.mm(m.ones(3, 3), m.ones(3)), RuntimeError, "mat2 must be a matrix"),
    (lambda m: m.mm(m.ones(2, 3), m.ones(2, 3)), RuntimeError,
     "mat1 and mat2 shapes cannot be multiplied (2x3 and 2x3)"),
    (lambda m: m.bmm(m.ones(2, 3), m.ones(2, 3, 4)), RuntimeError, "batch1 must be a 3D tensor"),
    (lambda m: m.bmm(m.ones(2, 3, 4), m.ones(3, 4)), RuntimeError, "batch2 must be a 3D tensor"),
    (lambda m: m.bmm(m.ones(2, 3, 4), m.ones(3, 4, 4)), RuntimeError,
     "Expected size for first two dimensions of batch2 tensor to be: [2, 4] but got: [3, 4]."),
    (lambda m: m.mv(m.ones(2, 3), m.ones(2, 3)), RuntimeError,
     "vector + matrix @ vector expected, got 1, 2, 2"),
    (lambda m: m.mv(m.ones(2, 3), m.ones(4)), RuntimeError,
     "size mismatch, got input (2), mat (2x3), vec (4)"),
    (lambda m: m.dot(m.ones(3), m.ones(3, 1)), RuntimeError,
     "1D tensors expected, but got 1D and 2D tensors"),
    (lambda m: m.dot(m.ones(3), m.ones(4)), RuntimeError, "inconsistent tensor size"),
    (lambda m: m.outer(m.ones(3), m.ones(2, 2)), RuntimeError,
     "outer: Expected 1-D argument vec2, but got 2-D"),
    (lambda m: m.max(m.ones(0, 3)), RuntimeError,
     "max(): Expected reduction dim to be specified for input.numel() == 0."),
    (lambda m: m.amin(m.ones(0, 3)), RuntimeError,
     "amin(): Expected reduction dim to be specified for input.numel() == 0."),
    (lambda m: m.max(m.ones(0, 3), 0), IndexError,
     "max(): Expected reduction dim 0 to have non-zero size."),
    (lambda m: m.amax(m.ones(3, 0), 1), IndexError,
     "amax(): Expected reduction dim 1 to have non-zero size."),
    (lambda m: m.argmax(m.ones(0, 3)), IndexError,
     "argmax(): Expected reduction dim to be specified for input.numel() == 0."),
    (lambda m: m.argmax(m.ones(3, dtype=m.bool)), RuntimeError,
     "argmax(): does not support bool input"),
    (lambda m: m.sum(m.ones(2, 3), (0, 0)), RuntimeError,
     "dim 0 appears multiple times in the list of dims"),
    (lambda m: m.mean(m.ones(2, 3, 4), (2, 0, -1)), RuntimeError,
     "dim 2 appears multiple times in the list of dims"),
    (lambda m: m.ones(2, 3).flip(0, 1, 1, 0), RuntimeError,
     "dim 1 appears multiple times in the list of dims"),
    (lambda m: m.amax(m.ones(0, 3, 4), (1, 1, 0)), IndexError,
     "amax(): Expected reduction dim 0 to have non-zero size."),
    (lambda m: m.amax(m.ones(2, 3), 2), IndexError,
     "Dimension out of range (expected to be in range of [-2, 1], but got 2)"),
    (lambda m: m.softmax(m.ones(2, 3), 2), IndexError, "Dimension out of range"),
    (lambda m: m.cumsum(m.tensor(1.0), 1), IndexError, "Dimension out of range"),
    (lambda m: m.mean(m.ones(3, dtype=m.int64)), RuntimeError,
     "mean(): could not infer output dtype. Input dtype must be either a floating point or "
     "complex dtype. Got: Long"),
    (lambda m: m.var(m.ones(3, dtype=m.int64)), RuntimeError,
     "std and var only support floating point and complex dtypes"),
    (lambda m: m.norm(m.ones(3, dtype=m.int64)), RuntimeError,
     "linalg.vector_norm: Expected a floating point or complex tensor as input. Got Long"),
    (lambda m: m.norm(m.ones(0), float("inf")), RuntimeError,
     "linalg.vector_norm cannot compute the inf norm on an empty tensor"),
    (lambda m: m.softmax(m.ones(3, dtype=m.int64), 0), NotImplementedError,
     "not implemented for 'Long'"),
    (lambda m: m.log_softmax(m.ones(3, dtype=m.int64), 0), NotImplementedError,
     "not implemented for 'Long'"),
]


@pytest.mark.parametrize("call,error,message", ERRORS, ids=[e[2][:40] for e in ERRORS])
def test_errors(call, error, message):
    with pytest.raises(error) as info:
        call(mt)
    assert message in str(info.value)
    if torch is not None:
        with pytest.raises(error) as info:
            call(torch)
        assert message in str(info.value)


def test_max_with_dim_returns_a_return_types_tuple_that_prints_like_pytorch():
    result = mt.tensor([[1.0, 3.0], [4.0, 2.0]]).max(1)
    assert type(result) is mt.return_types.max and isinstance(result, tuple)
    values, indices = result
    assert values.tolist() == [3.0, 4.0] and indices.tolist() == [1, 0]
    assert repr(result) == ("microtensor.return_types.max(\nvalues=tensor([3., 4.]),"
                            "\nindices=tensor([1, 0]))")
    assert type(mt.tensor([1.0, 0.0]).min(0)) is mt.return_types.min


def test_linear_with_stacked_weights_and_biases_is_a_product_per_stack():
    """Beyond PyTorch's 2-D weights (what vmap passes for per-sample weights): weights
    (B, out, in) with a bias stacked like them, (B, out), and their gradients."""
    from microtensor.autograd import gradcheck
    linear = REGISTRY["linear"]
    x = mt.randn(3, 2, 4, dtype=mt.float64, requires_grad=True)
    w = mt.randn(3, 5, 4, dtype=mt.float64, requires_grad=True)
    b = mt.randn(3, 5, dtype=mt.float64, requires_grad=True)
    out = linear(x, w, b)
    expected = np.matmul(x.detach().numpy(), np.swapaxes(w.detach().numpy(), -1, -2)) + \
        b.detach().numpy()[:, None, :]
    np.testing.assert_allclose(out.detach().numpy(), expected, rtol=1e-12)
    assert out.grad_fn.name() == "LinearBackward0"
    assert gradcheck(lambda x, w, b: linear(x, w, b), (x, w, b))
    one_row = mt.randn(3, 1, 4, dtype=mt.float64, requires_grad=True)   # outer products
    assert gradcheck(lambda x, w, b: linear(x, w, b), (one_row, w, b))


def test_matmul_with_one_matrix_repeated_over_the_batch_is_one_product():
    a = mt.randn(6, 3, 4)
    shared = mt.randn(4, 5)
    out = a.matmul(shared.unsqueeze(0).expand(6, 4, 5))
    np.testing.assert_allclose(out.numpy(), a.numpy() @ shared.numpy(), rtol=1e-5, atol=1e-6)
    assert out.is_contiguous() and out.shape == (6, 3, 5)
