"""scatter_reduce against PyTorch: ties and zeros in the gradients, errors, the in-place
variant, and per-sample gradients under vmap (the registry sweeps cover the samples)."""
import numpy as np
import pytest

import microtensor as mt
from microtensor.func import grad, vmap

torch = pytest.importorskip("torch")


def th(t):
    return torch.from_numpy(np.array(t.detach().numpy()))


def grads(lib, self, index, src, reduce, include_self, weights):
    x = self.clone().requires_grad_()
    s = src.clone().requires_grad_()
    out = x.scatter_reduce(0, index, s, reduce, include_self=include_self)
    (out * weights).sum().backward()
    return out.detach(), x.grad, s.grad


@pytest.mark.parametrize("reduce", ["prod", "amax", "amin", "mean", "sum"])
@pytest.mark.parametrize("include_self", [True, False])
def test_gradients_with_ties_and_zeros_match_torch(reduce, include_self):
    # ties (amax/amin share the gradient), single and double zeros (prod)
    self = mt.tensor([2.0, 0.0, 3.0, 1.0, 5.0], dtype=mt.float64)
    src = mt.tensor([2.0, 2.0, 0.0, 4.0, 0.0, 0.0, 1.0], dtype=mt.float64)
    index = mt.tensor([0, 0, 1, 2, 3, 3, 3])
    weights = mt.tensor([1.0, -2.0, 3.0, 0.5, 4.0], dtype=mt.float64)
    ours = grads(mt, self, index, src, reduce, include_self, weights)
    theirs = grads(torch, th(self), th(index), th(src), reduce, include_self, th(weights))
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12)


def test_double_backward_of_prod_with_two_zeros_in_a_position_raises_as_torch():
    x = mt.tensor([1.0, 2.0], dtype=mt.float64, requires_grad=True)
    src = mt.tensor([0.0, 0.0, 3.0], dtype=mt.float64, requires_grad=True)
    out = x.scatter_reduce(0, mt.tensor([0, 0, 1]), src, "prod")
    first, = mt.autograd.grad(out.sum(), src, create_graph=True)
    assert first.tolist() == [0.0, 0.0, 2.0]
    with pytest.raises(RuntimeError, match="Double backward is unsupported for src when >1 "
                                           "zeros in src are scattered to the same position"):
        mt.autograd.grad(first.sum(), src)


def test_errors_match_torch():
    x, index, src = mt.zeros(3), mt.tensor([0, 1]), mt.ones(2)
    with pytest.raises(RuntimeError, match="reduce argument must be either sum, prod, mean, "
                                           "amax or amin, got max"):
        x.scatter_reduce(0, index, src, "max")
    with pytest.raises(TypeError, match="argument 'src' \\(position 3\\) must be Tensor"):
        x.scatter_reduce(0, index, 1.0, "sum")
    with pytest.raises(RuntimeError, match="Expected self.dtype to be equal to src.dtype"):
        x.scatter_reduce(0, index, src.double(), "sum")
    with pytest.raises(RuntimeError, match="index 3 is out of bounds for dimension 0"):
        x.scatter_reduce(0, mt.tensor([3]), src, "amax")
    with pytest.raises(NotImplementedError, match="not implemented for 'Bool'"):
        mt.zeros(2, dtype=mt.bool).scatter_reduce(0, index, mt.ones(2, dtype=mt.bool), "mean")
    assert x.tolist() == [0.0, 0.0, 0.0]


def test_inplace_and_integer_mean_match_torch():
    x = mt.tensor([[-5, 7, 9], [1, 2, 3]])
    index = mt.tensor([[0, 0, 1], [2, 2, 2]])
    src = mt.tensor([[2, -3, 4], [6, 7, 8]])
    expected = th(x).scatter_reduce_(1, th(index), th(src), "mean", include_self=False)
    assert x.scatter_reduce_(1, index, src, "mean", include_self=False) is x
    assert x.tolist() == expected.tolist()


def test_per_sample_gradients_match_loop():
    index = mt.tensor([0, 2, 2, 1, 0])

    def loss(src, self):
        return (self.scatter_reduce(0, index, src, "amax", include_self=False) ** 2).sum()

    src = mt.randn(4, 5, dtype=mt.float64)
    self = mt.randn(3, dtype=mt.float64)
    batched = vmap(grad(loss), in_dims=(0, None))(src, self)
    for i in range(4):
        np.testing.assert_allclose(batched[i].numpy(), grad(loss)(src[i], self).numpy())


@pytest.mark.parametrize("call", [
    lambda src, index: mt.zeros(3, dtype=mt.float64).scatter_add(0, index, src=src),
    lambda src, index: mt.zeros(3, dtype=mt.float64).scatter_add(dim=0, index=index, src=src),
    lambda src, index: mt.ones(3, dtype=mt.float64).scatter_reduce(0, index, src=src,
                                                                   reduce="prod")])
def test_inputs_passed_by_name_are_differentiated(call):
    """Autograd records an op whose differentiable input comes by keyword (as vmap's
    batching rules pass them): per-sample gradients of ``src`` are not silently zero."""
    index = mt.tensor([0, 2, 2, 1, 0])
    src = mt.randn(4, 5, dtype=mt.float64)
    batched = vmap(grad(lambda s: (call(s, index) ** 2).sum()))(src)
    for i in range(4):
        leaf = src[i].clone().requires_grad_()
        expected, = mt.autograd.grad((call(leaf, index) ** 2).sum(), leaf)
        assert expected.abs().sum().item() > 0
        np.testing.assert_allclose(batched[i].numpy(), expected.numpy(), rtol=1e-12)
