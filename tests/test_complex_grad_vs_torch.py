"""Every op on complex inputs against PyTorch: forward values and dtypes, and gradients.

PyTorch's gradient for a complex input is the conjugate Wirtinger one (docs/complex.md):
for a holomorphic ``f``, ``grad_in = grad_out * conj(f'(z))``.  A derivative written for
real tensors only forgets the conjugate and is silently wrong on complex ones, which
gradcheck on the (real) registry samples cannot see.  So each registry sample's floating
tensors are made complex128 (the same real parts, seeded random imaginary parts), the op
runs on microtensor and on PyTorch, and the outputs (value, dtype) and the inputs'
gradients for one seeded complex upstream gradient must match.  An op that PyTorch refuses
on complex inputs is skipped; one PyTorch accepts must not be refused here.
"""
import warnings

import numpy as np
import pytest

import microtensor as mt
from microtensor._C.tensor import TensorBase
from microtensor.ops import REGISTRY
from microtensor.testing import seed_for
from test_grad_vs_torch import _compare_grads, _outputs, _pytorch_wrong
from test_op_registry import CASES, _differentiable, _sample, _to_torch, _torch_callable

try:
    import torch
except ImportError:
    torch = None

pytestmark = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (the oracle "
                                                      "of every test here)")


def _not_hermitian(bound):
    matrix = bound["A"] if "A" in bound else bound["input"] if "input" in bound else bound["self"]
    return not np.allclose(matrix._array(), np.conj(np.swapaxes(matrix._array(), -1, -2)))


# Complex samples not compared: (op, predicate on the bound complex arguments, reason).
# PyTorch's own wrong gradients on real input (test_grad_vs_torch.PYTORCH_WRONG) are
# skipped too.
CONVENTIONS = [
    ("cumprod", lambda bound: bound["dtype"] is not None and not bound["dtype"].is_complex,
     "PyTorch's backward of a complex input cast to a real dtype= uses the complex values "
     "(the gradient of the real cast is real; torch.autograd.gradcheck fails)"),
] + [
    (name, _not_hermitian,
     "the complex input (random imaginary parts) is not Hermitian, outside the domain: "
     "PyTorch and microtensor read different triangles of it (they agree on Hermitian "
     "input: tests/test_complex_linalg.py)")
    for name in ("cholesky", "linalg_cholesky", "linalg_cholesky_ex")
] + [
    ("cholesky_inverse", lambda bound: True,
     "PyTorch's formula reads the factor's product as Hermitian; microtensor's keeps the "
     "triangle it reads (the same on a triangular factor's Hermitian product)"),
]


def _convention(name, args, kwargs):
    for op_name, applies, reason in CONVENTIONS:
        if op_name == name and applies(REGISTRY[name].bind(args, kwargs)):
            return reason
    return None


def _map_floating(value, fn):
    """``value`` with each floating tensor ``t`` (in lists and tuples too) made ``fn(t)``."""
    if isinstance(value, TensorBase) and value.dtype.is_floating_point:
        return fn(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_map_floating(v, fn) for v in value)
    return value


def _complex(value, rng, dtype=mt.complex128, requires_grad=True):
    """``value`` with each floating tensor made complex (the same real parts, seeded random
    imaginary parts): a complex128 leaf by default."""
    def complex_(t):
        real = np.asarray(t.detach()._array(), dtype=np.float64)
        return mt.tensor(real + 0.3j * rng.standard_normal(real.shape), dtype=dtype,
                         requires_grad=requires_grad)
    return _map_floating(value, complex_)


def _leaves(value, tensor_type, found):
    if isinstance(value, tensor_type) and value.requires_grad:
        found.append(value)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _leaves(v, tensor_type, found)
    return found


def _mark(ours, theirs):
    """Makes PyTorch's copies of our leaves leaves too."""
    if isinstance(ours, TensorBase) and ours.requires_grad:
        theirs.requires_grad_(True)
    elif isinstance(ours, (list, tuple)):
        for a, b in zip(ours, theirs):
            _mark(a, b)


def _compare_outputs(ours, theirs):
    assert len(ours) == len(theirs)
    for i, (o, t) in enumerate(zip(ours, theirs)):
        assert o.dtype.name == str(t.dtype).split(".")[-1], f"output {i}: dtype"
        assert tuple(o.shape) == tuple(t.shape), f"output {i}: shape"
        np.testing.assert_allclose(np.asarray(o.detach()._array()),
                                   t.detach().resolve_conj().resolve_neg().numpy(),
                                   rtol=1e-7, atol=1e-9, equal_nan=True,
                                   err_msg=f"output {i}")


@pytest.mark.parametrize("name, index", CASES)
def test_complex_matches_torch(name, index):
    op = REGISTRY[name]
    fn = _torch_callable(op)
    if fn is None or op.random or not _differentiable(op) or op.kind == "inplace":
        pytest.skip("no PyTorch counterpart, random, not differentiable or in place")
    args, kwargs = _sample(name, index)
    reason = _pytorch_wrong(name, args, kwargs)
    if reason:
        pytest.skip(reason)
    rng = np.random.default_rng(seed_for(f"{name}-{index}"))
    args, kwargs = _complex(args, rng), {k: _complex(v, rng) for k, v in kwargs.items()}
    reason = _convention(name, args, kwargs)
    if reason:
        pytest.skip(reason)
    leaves = _leaves([args, list(kwargs.values())], TensorBase, [])
    if not leaves:
        pytest.skip("no floating input")
    targs, tkwargs = _to_torch(args), {k: _to_torch(v) for k, v in kwargs.items()}
    _mark([args, list(kwargs.values())], [targs, list(tkwargs.values())])
    try:
        expected = fn(*targs, **tkwargs)
    except Exception as error:      # (PyTorch refuses complex inputs here)
        pytest.skip(f"PyTorch refuses: {type(error).__name__}: {str(error)[:80]}")
    result = op(*args, **kwargs)
    # (eigenvectors and singular vectors through products free of their phase)
    (outputs, _), (t_outputs, _) = (_outputs(name, result, TensorBase),
                                    _outputs(name, expected, torch.Tensor))
    _compare_outputs(outputs, t_outputs)
    pairs = [(o, t) for o, t in zip(outputs, t_outputs) if t.requires_grad]
    assert [o.requires_grad for o, _ in pairs] == [True] * len(pairs)
    if not pairs:
        return
    t_leaves = _leaves([targs, list(tkwargs.values())], torch.Tensor, [])
    upstream = [rng.standard_normal(tuple(o.shape))
                + (1j * rng.standard_normal(tuple(o.shape)) if o.dtype.is_complex else 0)
                for o, _ in pairs]
    try:
        expected_grads = torch.autograd.grad(
            [t for _, t in pairs], t_leaves,
            [torch.tensor(u).to(t.dtype) for u, (_, t) in zip(upstream, pairs)],
            allow_unused=True)
    except (NotImplementedError, RuntimeError) as error:
        pytest.skip(f"PyTorch's backward refuses: {str(error)[:80]}")
    grads = mt.autograd.grad([o for o, _ in pairs], leaves,
                             [mt.tensor(u).to(o.dtype) for u, (o, _) in zip(upstream, pairs)],
                             allow_unused=True)
    _compare_grads(list(grads), list(expected_grads))


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
@pytest.mark.parametrize("equation, shape", [("ii", (3, 3)), ("iij->j", (2, 2, 3)),
                                             ("iji->j", (2, 3, 2)), ("iijj->", (2, 2, 3, 3))])
def test_einsum_diagonal_gradient(equation, shape, dtype):
    """A letter repeated in one operand and summed away: the gradient lies on the diagonal
    (it was spread over the whole operand)."""
    rng = np.random.default_rng(seed_for(equation))
    value = rng.standard_normal(shape) + (1j * rng.standard_normal(shape)
                                          if dtype == "complex128" else 0)
    x, tx = mt.tensor(value, requires_grad=True), torch.tensor(value, requires_grad=True)
    out, t_out = mt.einsum(equation, x), torch.einsum(equation, tx)
    upstream = rng.standard_normal(tuple(t_out.shape)).astype(value.dtype)
    grad, = mt.autograd.grad(out, x, mt.tensor(upstream))
    t_grad, = torch.autograd.grad(t_out, tx, torch.tensor(upstream))
    np.testing.assert_allclose(np.asarray(grad._array()), t_grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize("base", [2.0, 1.5 + 0.5j, 0.0])
def test_pow_of_a_number_to_a_complex_exponent(base):
    """The exponent's gradient conjugates ``base ** e * log(base)``."""
    exponent = [0.5 + 1j, 2 - 1j, 1.5 + 0j]
    upstream = [1 + 2j, 0.5 - 1j, -1 + 0.5j]
    x = mt.tensor(exponent, dtype=mt.complex128, requires_grad=True)
    tx = torch.tensor(exponent, dtype=torch.complex128, requires_grad=True)
    out, t_out = mt.pow(base, x), torch.pow(base, tx)
    np.testing.assert_allclose(np.asarray(out.detach()._array()), t_out.detach().numpy())
    grad, = mt.autograd.grad(out, x, mt.tensor(upstream, dtype=mt.complex128))
    t_grad, = torch.autograd.grad(t_out, tx, torch.tensor(upstream, dtype=torch.complex128))
    np.testing.assert_allclose(np.asarray(grad._array()), t_grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize("values", [[1 + 4j, 0.5 + 2j, -3 + 0.1j], [-np.inf + 0j, 1 + 0j],
                                    [1000 + 3j, 999 - 2j, 2 + 0j], [0j, 0j, -5 + 7j]])
def test_logcumsumexp_complex_branch_and_range(values):
    """Large real parts do not overflow, and the imaginary part is on PyTorch's branch (that
    of the leading term, past pi here), not the principal one."""
    out = mt.logcumsumexp(mt.tensor(values, dtype=mt.complex128), 0)
    expected = torch.logcumsumexp(torch.tensor(values, dtype=torch.complex128), 0)
    np.testing.assert_allclose(np.asarray(out._array()), expected.numpy(), rtol=1e-12)


def test_logcumsumexp_complex_gradient_with_zero_upstream():
    value = np.array([[0.3 + 1j, -1 + 0.2j, 2 - 0.5j], [1j, 0.5, -0.5 - 1j]])
    upstream = np.array([[1 + 1j, 0, 2 - 1j], [0, 0, 1j]])
    x, tx = mt.tensor(value, requires_grad=True), torch.tensor(value, requires_grad=True)
    grad, = mt.autograd.grad(mt.logcumsumexp(x, 1), x, mt.tensor(upstream))
    t_grad, = torch.autograd.grad(torch.logcumsumexp(tx, 1), tx, torch.tensor(upstream))
    np.testing.assert_allclose(np.asarray(grad._array()), t_grad.resolve_conj().numpy(),
                               rtol=1e-10, atol=1e-12)


def test_logaddexp_complex_infinities():
    """Real parts both infinite of one sign: PyTorch's values, not NaN."""
    inf = float("inf")
    a = [-inf + 0j, -inf + 2j, inf + 0j, inf + 1j, -inf + 0j, complex(1, inf), 1 + 1j]
    b = [-inf + 1j, -inf + 2j, inf + 1j, -inf + 0j, 1 + 1j, 0j, 2 - 1j]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = mt.logaddexp(mt.tensor(a, dtype=mt.complex128), mt.tensor(b, dtype=mt.complex128))
    expected = torch.logaddexp(torch.tensor(a, dtype=torch.complex128),
                               torch.tensor(b, dtype=torch.complex128))
    np.testing.assert_allclose(np.asarray(out._array()), expected.numpy(), rtol=1e-12)
