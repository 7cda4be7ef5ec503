"""The torch.func tutorials, written once against a library ``lib`` (``torch`` or
``microtensor``: renames only) and compared with PyTorch on the same weights and data:

* per-sample gradients, with the tutorial's CNN (conv 1->32 k3, relu, conv 32->64 k3,
  relu, max_pool 2, flatten, linear 9216->128, relu, linear 128->10, log_softmax,
  nll_loss on 28x28 images): the manual loop of ``autograd.grad`` and
  ``vmap(grad(compute_loss))``;
* the neural tangent kernel: both its computations (Jacobian contraction with einsum, and
  NTK-vector products with vjp/jvp), each in its "full", "trace" and "diagonal" forms;
* per-sample gradients of a small transformer block (embedding, MultiheadAttention,
  LayerNorm, MLP; sequence 16, width 64).

Model ensembling is in tests/test_func_rest.py.  Batches are small to keep the suite fast;
the code keeps the tutorials' shape.  No op may take vmap's loop fallback on the way.
"""
import contextlib
import warnings

import numpy as np
import pytest

import microtensor as mt

torch = pytest.importorskip("torch")

FALLBACK = "Batching rule not implemented"


def copied(model, reference):
    """``model`` (microtensor) holding ``reference``'s (PyTorch) weights, in float64."""
    model.double()
    model.load_state_dict({k: mt.tensor(v.detach().double().numpy())
                           for k, v in reference.state_dict().items()})
    return model


def close(ours, theirs, rtol=1e-9, atol=1e-11):
    np.testing.assert_allclose(np.asarray(ours.detach().numpy()),
                               theirs.detach().numpy(), rtol=rtol, atol=atol)


@contextlib.contextmanager
def no_fallback():
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=FALLBACK)
        yield


# --------------------------------------------------------------------------- per-sample gradients

def simple_cnn(lib):
    nn, F = lib.nn, lib.nn.functional

    class SimpleCNN(nn.Module):
        def __init__(self):
            super(SimpleCNN, self).__init__()
            self.conv1 = nn.Conv2d(1, 32, 3, 1)
            self.conv2 = nn.Conv2d(32, 64, 3, 1)
            self.fc1 = nn.Linear(9216, 128)
            self.fc2 = nn.Linear(128, 10)

        def forward(self, x):
            x = self.conv1(x)
            x = F.relu(x)
            x = self.conv2(x)
            x = F.relu(x)
            x = F.max_pool2d(x, 2)
            x = lib.flatten(x, 1)
            x = self.fc1(x)
            x = F.relu(x)
            x = self.fc2(x)
            output = F.log_softmax(x, dim=1)
            return output
    return SimpleCNN


def per_sample_gradients(lib, model, data, targets):
    """The tutorial's two computations: the manual loop and vmap(grad)."""
    F = lib.nn.functional
    batch_size = data.shape[0]

    def loss_fn(predictions, targets):
        return F.nll_loss(predictions, targets)

    def compute_grad(sample, target):
        sample = sample.unsqueeze(0)  # prepend batch dimension for processing
        target = target.unsqueeze(0)
        prediction = model(sample)
        loss = loss_fn(prediction, target)
        return lib.autograd.grad(loss, list(model.parameters()))

    def compute_sample_grads(data, targets):
        """ manually process each sample with per sample gradient """
        sample_grads = [compute_grad(data[i], targets[i]) for i in range(batch_size)]
        sample_grads = zip(*sample_grads)
        sample_grads = [lib.stack(shards) for shards in sample_grads]
        return sample_grads

    per_sample_grads = compute_sample_grads(data, targets)

    from_func = lib.func
    functional_call, vmap, grad = from_func.functional_call, from_func.vmap, from_func.grad
    params = {k: v.detach() for k, v in model.named_parameters()}
    buffers = {k: v.detach() for k, v in model.named_buffers()}

    def compute_loss(params, buffers, sample, target):
        batch = sample.unsqueeze(0)
        targets = target.unsqueeze(0)
        predictions = functional_call(model, (params, buffers), (batch,))
        loss = loss_fn(predictions, targets)
        return loss

    ft_compute_grad = grad(compute_loss)
    ft_compute_sample_grad = vmap(ft_compute_grad, in_dims=(None, None, 0, 0))
    ft_per_sample_grads = ft_compute_sample_grad(params, buffers, data, targets)
    return per_sample_grads, ft_per_sample_grads


def test_per_sample_gradients_tutorial():
    torch.manual_seed(0)
    reference = simple_cnn(torch)().double()
    model = copied(simple_cnn(mt)(), reference)
    rng = np.random.default_rng(0)
    data, targets = rng.standard_normal((3, 1, 28, 28)), rng.integers(0, 10, 3)

    with no_fallback():
        loop, ft = per_sample_gradients(mt, model, mt.tensor(data), mt.tensor(targets))
    t_loop, t_ft = per_sample_gradients(torch, reference, torch.tensor(data),
                                        torch.tensor(targets))
    assert list(ft) == list(t_ft)
    for ours, mine_by_loop, theirs in zip(ft.values(), loop, t_ft.values()):
        assert tuple(ours.shape) == tuple(theirs.shape)
        close(ours, theirs)
        close(mine_by_loop, theirs)
    for ours, theirs in zip(loop, t_loop):
        close(ours, theirs)


# --------------------------------------------------------------------------- neural tangent kernel

def ntk_cnn(lib):
    nn = lib.nn

    class CNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 32, (3, 3))
            self.conv2 = nn.Conv2d(32, 32, (3, 3))
            self.conv3 = nn.Conv2d(32, 32, (3, 3))
            self.fc = nn.Linear(128, 10)       # 21632 on the tutorial's 32x32 images

        def forward(self, x):
            x = self.conv1(x)
            x = x.relu()
            x = self.conv2(x)
            x = x.relu()
            x = self.conv3(x)
            x = x.flatten(1)
            x = self.fc(x)
            return x
    return CNN


def ntk_functions(lib, net):
    """The tutorial's ``fnet_single`` and its two NTK computations."""
    functional_call, vmap, jacrev = lib.func.functional_call, lib.func.vmap, lib.func.jacrev
    vjp, jvp = lib.func.vjp, lib.func.jvp

    def fnet_single(params, x):
        return functional_call(net, params, (x.unsqueeze(0),)).squeeze(0)

    def empirical_ntk_jacobian_contraction(fnet_single, params, x1, x2, compute='full'):
        # Compute J(x1)
        jac1 = vmap(jacrev(fnet_single), (None, 0))(params, x1)
        jac1 = jac1.values()
        jac1 = [j.flatten(2) for j in jac1]

        # Compute J(x2)
        jac2 = vmap(jacrev(fnet_single), (None, 0))(params, x2)
        jac2 = jac2.values()
        jac2 = [j.flatten(2) for j in jac2]

        # Compute J(x1) @ J(x2).T
        einsum_expr = None
        if compute == 'full':
            einsum_expr = 'Naf,Mbf->NMab'
        elif compute == 'trace':
            einsum_expr = 'Naf,Maf->NM'
        elif compute == 'diagonal':
            einsum_expr = 'Naf,Maf->NMa'
        else:
            assert False

        result = lib.stack([lib.einsum(einsum_expr, j1, j2) for j1, j2 in zip(jac1, jac2)])
        result = result.sum(0)
        return result

    def empirical_ntk_ntk_vps(func, params, x1, x2, compute='full'):
        # This computes the vector-Jacobian product with the given vector
        def get_ntk(x1, x2):
            def func_x1(params):
                return func(params, x1)

            def func_x2(params):
                return func(params, x2)

            output, vjp_fn = vjp(func_x1, params)

            def get_ntk_slice(vec):
                # This computes ``vec @ J(x2).T``
                # `vec` is some unit vector (a single slice of the Identity matrix)
                vjps = vjp_fn(vec)
                # This computes ``J(X1) @ vjps``
                _, jvps = jvp(func_x2, (params,), vjps)
                return jvps

            # Here's our identity matrix
            basis = lib.eye(output.numel(), dtype=output.dtype,
                            device=output.device).view(output.numel(), -1)
            return vmap(get_ntk_slice)(basis)

        # ``get_ntk(x1, x2)`` computes the NTK for a single data point x1, x2
        # Since the x1, x2 inputs to ``empirical_ntk_ntk_vps`` are batched,
        # we actually wish to compute the NTK between every pair of data points
        # between {x1} and {x2}. That's what the ``vmaps`` here do.
        result = vmap(vmap(get_ntk, (None, 0)), (0, None))(x1, x2)

        if compute == 'full':
            return result
        if compute == 'trace':
            return lib.einsum('NMKK->NM', result)
        if compute == 'diagonal':
            return lib.einsum('NMKK->NMK', result)

    return fnet_single, empirical_ntk_jacobian_contraction, empirical_ntk_ntk_vps


@pytest.mark.parametrize("compute", ["full", "trace", "diagonal"])
def test_neural_tangent_kernel_tutorial(compute):
    torch.manual_seed(0)
    reference = ntk_cnn(torch)().double()
    net = copied(ntk_cnn(mt)(), reference)
    net.eval()
    reference.eval()
    rng = np.random.default_rng(1)
    x_train, x_test = rng.standard_normal((3, 3, 8, 8)), rng.standard_normal((2, 3, 8, 8))

    results = {}
    for lib, model in ((mt, net), (torch, reference)):
        params = {k: v.detach() for k, v in model.named_parameters()}
        fnet_single, contraction, ntk_vps = ntk_functions(lib, model)
        with no_fallback():
            results[lib] = (contraction(fnet_single, params, lib.tensor(x_test),
                                        lib.tensor(x_train), compute),
                            ntk_vps(fnet_single, params, lib.tensor(x_test),
                                    lib.tensor(x_train), compute))
    (by_jacobians, by_products), (t_jacobians, t_products) = results[mt], results[torch]
    expected_shape = {"full": (2, 3, 10, 10), "trace": (2, 3), "diagonal": (2, 3, 10)}
    assert tuple(by_jacobians.shape) == tuple(by_products.shape) == expected_shape[compute]
    close(by_jacobians, t_jacobians)
    close(by_products, t_products)
    close(by_products, t_jacobians)


# --------------------------------------------------------------------------- a small transformer

def tiny_transformer(lib, vocab=50, width=64, heads=4):
    nn, F = lib.nn, lib.nn.functional

    class Block(nn.Module):
        """Token and position embeddings, a pre-norm self-attention block with an MLP, and
        a next-token head."""

        def __init__(self, seq=16):
            super().__init__()
            self.tokens = nn.Embedding(vocab, width)
            self.positions = nn.Embedding(seq, width)
            self.norm1 = nn.LayerNorm(width)
            self.attention = nn.MultiheadAttention(width, heads, batch_first=True)
            self.norm2 = nn.LayerNorm(width)
            self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                     nn.Linear(4 * width, width))
            self.head = nn.Linear(width, vocab)

        def forward(self, x):
            h = self.tokens(x) + self.positions(lib.arange(x.shape[1]))
            y = self.norm1(h)
            h = h + self.attention(y, y, y, need_weights=False)[0]
            h = h + self.mlp(self.norm2(h))
            return self.head(h)

    def compute_loss(model, params, sample, target):
        logits = lib.func.functional_call(model, params, (sample.unsqueeze(0),))
        return F.cross_entropy(logits.reshape(-1, vocab), target)
    return Block, compute_loss


def test_transformer_per_sample_gradients():
    torch.manual_seed(0)
    TorchBlock, torch_loss = tiny_transformer(torch)
    Block, loss = tiny_transformer(mt)
    reference = TorchBlock().double()
    model = copied(Block(), reference)
    rng = np.random.default_rng(2)
    tokens = rng.integers(0, 50, (3, 17))
    samples, targets = tokens[:, :-1], tokens[:, 1:]

    params = {k: v.detach() for k, v in model.named_parameters()}
    with no_fallback():
        ours = mt.func.vmap(mt.func.grad(lambda p, x, y: loss(model, p, x, y)),
                            in_dims=(None, 0, 0))(params, mt.tensor(samples),
                                                  mt.tensor(targets))
    t_params = {k: v.detach() for k, v in reference.named_parameters()}
    theirs = torch.func.vmap(torch.func.grad(lambda p, x, y: torch_loss(reference, p, x, y)),
                             in_dims=(None, 0, 0))(t_params, torch.tensor(samples),
                                                   torch.tensor(targets))
    assert list(ours) == list(theirs)
    for name in theirs:
        close(ours[name], theirs[name])
    # and the per-sample gradients are those of each sample alone
    first = mt.func.grad(lambda p: loss(model, p, mt.tensor(samples[1]),
                                        mt.tensor(targets[1])))(params)
    for name in first:
        np.testing.assert_allclose(ours[name][1].numpy(), first[name].numpy(), rtol=1e-9,
                                   atol=1e-11)
