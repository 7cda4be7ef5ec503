"""Research-style PyTorch programs that reach the less-travelled paths (double backward
through an optimizer's objective, functional_call, distributions, LBFGS's closure, scatter
and index reductions, weight averaging, schedulers and checkpoints mid-training), run twice:
on PyTorch and on microtensor, the same code with only the library differing.

Each program is ``program(torch, rec, rng)`` as in tests/test_port_vision.py: it copies the
PyTorch run's initial weights through ``rec.sync``, draws its inputs from one NumPy
generator, trains a few steps and records outputs, losses, gradients and parameters.  The
programs run in float64, where they must agree to round-off, and most of them in float32
too; the regression tests of what they found sit next to the program that found it.
"""
import io

import numpy as np
import pytest

import microtensor
from test_port_vision import (  # the shared harness (and its autouse fixture)
    _pytorch_on_one_thread, needs_torch, train_wgan_gp)  # noqa: F401
from test_port_vision import _run_both as _run_both_at_default_dtype

try:
    import torch as _torch
except ImportError:     # pragma: no cover
    _torch = None


# PyTorch's note that index_reduce is in beta is not what these tests look at
pytestmark = pytest.mark.filterwarnings("ignore:index_reduce:UserWarning")


# float64 programs agree to round-off; float32 ones to float32's (as tests/test_port_vision.py)
TOLERANCES = {"float64": dict(rtol=1e-9, atol=1e-11), "float32": dict(rtol=2e-4, atol=2e-5)}


def _run_both(program, dtype="float64", **tolerances):
    """Runs ``program`` with modules and data in ``dtype`` (the default dtype, as
    ``set_default_dtype`` users do), on PyTorch, then on microtensor, and compares."""
    _torch.set_default_dtype(getattr(_torch, dtype))
    microtensor.set_default_dtype(getattr(microtensor, dtype))
    return _run_both_at_default_dtype(program, **{**TOLERANCES[dtype], **tolerances})


def _data(torch, values):
    """NumPy values as a tensor of the default dtype."""
    return torch.tensor(values, dtype=torch.get_default_dtype())


def _normal(torch, rng, *shape):
    return _data(torch, rng.standard_normal(shape))


each_dtype = pytest.mark.parametrize("dtype", ["float64", "float32"])


@pytest.fixture(autouse=True)
def _float32_default_after():
    yield
    microtensor.set_default_dtype(microtensor.float32)
    if _torch is not None:
        _torch.set_default_dtype(_torch.float32)


# -- WGAN-GP: gradient penalty through autograd.grad(create_graph=True) --------------------

def wgan_gp(torch, rec, rng):
    """The vision file's WGAN-GP loop on MLPs, Adam betas (0.5, 0.9), in each dtype."""
    nn = torch.nn
    generator = nn.Sequential(nn.Linear(4, 12), nn.ReLU(), nn.Linear(12, 6))
    critic = nn.Sequential(nn.Linear(6, 12), nn.Softplus(), nn.Linear(12, 12), nn.Tanh(),
                           nn.Linear(12, 1))
    rec.sync("generator", generator)
    rec.sync("critic", critic)
    train_wgan_gp(torch, rec, generator, critic, (0.5, 0.9),
                  lambda: _normal(torch, rng, 8, 6) + 2, lambda: _normal(torch, rng, 8, 4),
                  lambda: _data(torch, rng.random((8, 1))), steps=3)


@needs_torch
@each_dtype
def test_wgan_gp(dtype):
    _run_both(wgan_gp, dtype)



_PIECEWISE_LINEAR = ["ReLU", "LeakyReLU", "Hardtanh", "ReLU6", "PReLU", "RReLU", "Hardshrink",
                     "Softshrink", "Threshold"]


@needs_torch
@pytest.mark.parametrize("activation", _PIECEWISE_LINEAR)
def test_penalty_alone_reaches_the_biases_under_piecewise_linear_activations(activation):
    # an R1 / gradient penalty stepped on its own (StyleGAN's lazy regularisation): the
    # first layer's bias moves only the activation's kinks, so its gradient is zeros (not
    # None, which optimizers skip, and not an error from autograd.grad)
    results = []
    for lib in (_torch, microtensor):
        nn = lib.nn
        layer = (nn.Threshold(0.1, -1.0) if activation == "Threshold"
                 else getattr(nn, activation)())
        critic = nn.Sequential(nn.Linear(4, 6), layer, nn.Linear(6, 1)).double().eval()
        with lib.no_grad():
            for i, p in enumerate(critic.parameters()):
                p.copy_(lib.tensor(np.random.default_rng(i).standard_normal(p.shape)))
        real = lib.tensor(np.random.default_rng(9).standard_normal((5, 4)), requires_grad=True)
        g, = lib.autograd.grad(critic(real).sum(), real, create_graph=True)
        penalty = g.pow(2).sum(1).mean()
        grads = lib.autograd.grad(penalty, list(critic.parameters()), retain_graph=True,
                                  allow_unused=True)        # the last bias: unused in both
        penalty.backward()
        results.append([None if t is None else t.numpy()
                        for t in (*grads, *(p.grad for p in critic.parameters()))])
    assert [r is None for r in results[1]] == [r is None for r in results[0]]
    for got, expected in zip(results[1], results[0]):
        if expected is not None:
            np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-14)

# -- MAML: functional_call with a differentiable inner SGD step ----------------------------

def maml(torch, rec, rng):
    nn, F = torch.nn, torch.nn.functional
    model = nn.Sequential(nn.Linear(1, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(),
                          nn.Linear(16, 1))
    rec.sync("model", model)
    meta_opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    call = torch.func.functional_call

    def task():
        amplitude, phase = rng.uniform(0.5, 3), rng.uniform(0, np.pi)
        xs = _data(torch, rng.uniform(-3, 3, (10, 1)))
        return xs, amplitude * torch.sin(xs + phase)

    for step in range(3):
        meta_opt.zero_grad()
        outer = 0
        for t in range(2):
            (x_support, y_support), (x_query, y_query) = task(), task()
            params = dict(model.named_parameters())
            for inner in range(2):
                loss = F.mse_loss(call(model, params, (x_support,)), y_support)
                grads = torch.autograd.grad(loss, list(params.values()), create_graph=True)
                params = {name: p - 0.1 * g for (name, p), g in zip(params.items(), grads)}
                rec(f"inner{step}.{t}.{inner}", loss)
            outer = outer + F.mse_loss(call(model, params, x_query), y_query)
        outer = outer / 2
        outer.backward()
        rec(f"outer{step}", outer)
        rec.grads(f"meta{step}", model)
        meta_opt.step()
        rec.params(f"after{step}", model)


@needs_torch
@each_dtype
def test_maml(dtype):
    _run_both(maml, dtype)


def maml_functorch(torch, rec, rng):
    """The torch.func spelling: grad of a functional loss, vmapped over tasks."""
    nn, F = torch.nn, torch.nn.functional
    model = nn.Sequential(nn.Linear(1, 8), nn.Tanh(), nn.Linear(8, 1))
    rec.sync("model", model)
    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss_fn(p, x, y):
        return F.mse_loss(torch.func.functional_call(model, p, (x,)), y)

    def inner_then_query(p, xs, ys, xq, yq):
        g = torch.func.grad(loss_fn)(p, xs, ys)
        adapted = {k: p[k] - 0.1 * g[k] for k in p}
        return loss_fn(adapted, xq, yq)

    xs, xq = _normal(torch, rng, 3, 5, 1), _normal(torch, rng, 3, 5, 1)
    ys, yq = torch.sin(xs), torch.sin(xq)
    per_task = torch.func.vmap(inner_then_query, in_dims=(None, 0, 0, 0, 0))
    rec("query_losses", per_task(params, xs, ys, xq, yq))
    meta_grads = torch.func.grad(lambda p: per_task(p, xs, ys, xq, yq).mean())(params)
    rec("meta_grads", meta_grads)


@needs_torch
@each_dtype
def test_maml_functorch(dtype):
    _run_both(maml_functorch, dtype)


# -- VAE: reparameterisation, Normal + kl_divergence, BCE-with-logits ----------------------

def vae(torch, rec, rng):
    nn, F, D = torch.nn, torch.nn.functional, torch.distributions

    class VAE(nn.Module):
        def __init__(self, features=12, hidden=10, latent=3):
            super().__init__()
            self.fc1 = nn.Linear(features, hidden)
            self.fc_mu = nn.Linear(hidden, latent)
            self.fc_logvar = nn.Linear(hidden, latent)
            self.fc3 = nn.Linear(latent, hidden)
            self.fc4 = nn.Linear(hidden, features)

        def encode(self, x):
            h = F.elu(self.fc1(x))
            return self.fc_mu(h), self.fc_logvar(h)

        def forward(self, x, eps):
            mu, logvar = self.encode(x)
            posterior = D.Normal(mu, torch.exp(0.5 * logvar))
            z = posterior.loc + eps * posterior.scale       # rsample with the given noise
            return self.fc4(F.silu(self.fc3(z))), posterior, z

    model = VAE()
    rec.sync("vae", model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=1e-2)
    x = _data(torch, rng.random((6, 12)) > 0.5)
    pos_weight = _data(torch, rng.uniform(0.5, 2, 12))
    for step in range(3):
        eps = _normal(torch, rng, 6, 3)
        optimizer.zero_grad()
        logits, posterior, z = model(x, eps)
        prior = D.Normal(torch.zeros_like(z), torch.ones_like(z))
        recon = F.binary_cross_entropy_with_logits(logits, x, reduction="sum",
                                                   pos_weight=pos_weight) / x.shape[0]
        kl = D.kl_divergence(posterior, prior).sum(-1).mean()
        # the closed form against the Monte Carlo estimate through log_prob, and the
        # Independent spelling of the same posterior
        kl_mc = (posterior.log_prob(z) - prior.log_prob(z)).sum(-1).mean()
        kl_independent = D.kl_divergence(D.Independent(posterior, 1),
                                         D.Independent(prior, 1)).mean()
        loss = recon + kl + 0.1 * kl_mc + 0.1 * kl_independent
        loss.backward()
        rec(f"recon{step}", recon)
        rec(f"kl{step}", kl)
        rec(f"kl_mc{step}", kl_mc)
        rec(f"entropy{step}", posterior.entropy())
        rec(f"cdf{step}", posterior.cdf(z))
        rec.grads(f"step{step}", model)
        optimizer.step()
        rec.params(f"after{step}", model)
    with torch.no_grad():
        rec("decoded", torch.sigmoid(model.fc4(F.silu(model.fc3(torch.zeros(2, 3))))))


@needs_torch
@each_dtype
def test_vae(dtype):
    _run_both(vae, dtype)



@needs_torch
def test_bce_with_logits_gradient_at_zero_logits():
    # a zero-initialised head gives logits of exactly 0, where log(1 + exp(-|x|)) +
    # max(-x, 0) has two kinks: the derivative is sigmoid(0) - t, first and second order
    # (ContinuousBernoulli(probs=0.5).log_prob goes through it)
    results = []
    for lib in (_torch, microtensor):
        logits = lib.tensor([0.0, 0.0, 0.0, 3.0], dtype=lib.float64, requires_grad=True)
        target = lib.tensor([0.1, 0.9, 0.0, 0.7], dtype=lib.float64)
        loss = lib.nn.functional.binary_cross_entropy_with_logits(
            logits, target, weight=lib.tensor([1.0, 2.0, 3.0, 0.5], dtype=lib.float64),
            pos_weight=lib.tensor([1.0, 2.5, 0.3, 1.5], dtype=lib.float64), reduction="none")
        g, = lib.autograd.grad(loss.sum(), logits, create_graph=True)
        gg, = lib.autograd.grad((g * lib.arange(1.0, 5.0, dtype=lib.float64)).sum(), logits)
        probs = lib.tensor([0.5, 0.3], dtype=lib.float64, requires_grad=True)
        log_prob = lib.distributions.ContinuousBernoulli(probs=probs).log_prob(
            lib.tensor([0.1, 0.1], dtype=lib.float64))
        g_probs, = lib.autograd.grad(log_prob.sum(), probs)
        results.append([t.detach().numpy() for t in (loss, g, gg, log_prob, g_probs)])
    for got, expected in zip(results[1], results[0]):
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-14)

# -- REINFORCE: Categorical policy, discounted returns, gradient clipping -------------------

def reinforce(torch, rec, rng):
    nn, F, D = torch.nn, torch.nn.functional, torch.distributions
    policy = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))
    rec.sync("policy", policy)
    optimizer = torch.optim.RMSprop(policy.parameters(), lr=1e-2, alpha=0.9)
    gamma = 0.9
    for episode in range(3):
        states = _normal(torch, rng, 7, 4)
        actions = torch.tensor(rng.integers(0, 3, 7))
        rewards = _data(torch, rng.standard_normal(7))
        logits = policy(states)
        dist = D.Categorical(logits=logits)
        by_probs = D.Categorical(probs=F.softmax(logits, dim=-1))
        log_probs = dist.log_prob(actions)
        # returns G_t = sum_k gamma^k r_{t+k}: reversed cumulative sums of discounted rewards
        discounts = gamma ** torch.arange(7.0)
        returns = torch.flip(torch.cumsum(torch.flip(rewards * discounts, [0]), 0), [0])
        returns = returns / discounts
        returns = (returns - returns.mean()) / (returns.std() + 1e-8)
        loss = -(log_probs * returns).sum() - 0.01 * dist.entropy().mean()
        optimizer.zero_grad()
        loss.backward()
        total_norm = nn.utils.clip_grad_norm_(policy.parameters(), max_norm=0.5)
        rec(f"returns{episode}", returns)
        rec(f"log_probs{episode}", log_probs)
        rec(f"log_probs_by_probs{episode}", by_probs.log_prob(actions))
        rec(f"entropy{episode}", by_probs.entropy())
        rec(f"loss{episode}", loss)
        rec(f"total_norm{episode}", total_norm)
        rec.grads(f"clipped{episode}", policy)
        optimizer.step()
        rec.params(f"after{episode}", policy)
        rec(f"sample_shape{episode}", tuple(dist.sample((5,)).shape))
    rec("value_clip", nn.utils.clip_grad_value_(policy.parameters(), 1e-3))
    rec.grads("value_clipped", policy)


@needs_torch
@each_dtype
def test_reinforce(dtype):
    _run_both(reinforce, dtype)



def ppo(torch, rec, rng):
    """PPO's clipped objective: its first epoch has ratios of exactly 1, where the clamp
    sits inside its range and min() sees ties."""
    nn, D = torch.nn, torch.distributions

    class ActorCritic(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(4, 16), nn.Tanh())
            self.logits = nn.Linear(16, 3)
            self.mean = nn.Linear(16, 2)
            self.log_std = nn.Parameter(torch.zeros(2) - 0.5)
            self.value = nn.Linear(16, 1)

        def forward(self, states):
            h = self.body(states)
            discrete = D.Categorical(logits=self.logits(h))
            continuous = D.Independent(D.Normal(self.mean(h), self.log_std.exp()), 1)
            return discrete, continuous, self.value(h).squeeze(-1)

    model = ActorCritic()
    rec.sync("ppo", model)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, eps=1e-5)
    states = _normal(torch, rng, 8, 4)
    actions = torch.tensor(rng.integers(0, 3, 8))
    controls = _normal(torch, rng, 8, 2)
    returns = _normal(torch, rng, 8)
    with torch.no_grad():
        discrete, continuous, old_values = model(states)
        old_log_probs = discrete.log_prob(actions) + continuous.log_prob(controls)
        advantages = returns - old_values
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    for epoch in range(3):
        discrete, continuous, values = model(states)
        log_probs = discrete.log_prob(actions) + continuous.log_prob(controls)
        ratio = torch.exp(log_probs - old_log_probs)
        surrogate = torch.min(ratio * advantages,
                              torch.clamp(ratio, 1 - 0.2, 1 + 0.2) * advantages)
        clipped_values = old_values + (values - old_values).clamp(-0.2, 0.2)
        value_loss = torch.max((values - returns) ** 2, (clipped_values - returns) ** 2)
        entropy = discrete.entropy() + continuous.entropy()
        loss = -surrogate.mean() + 0.5 * value_loss.mean() - 0.01 * entropy.mean()
        optimizer.zero_grad()
        loss.backward()
        rec(f"ratio{epoch}", ratio)
        rec(f"loss{epoch}", loss)
        rec(f"total_norm{epoch}", nn.utils.clip_grad_norm_(model.parameters(), 0.5))
        rec.grads(f"epoch{epoch}", model)
        optimizer.step()
        rec.params(f"after{epoch}", model)


@needs_torch
@each_dtype
def test_ppo(dtype):
    _run_both(ppo, dtype)

# -- RealNVP: affine couplings with masks, slogdet, MultivariateNormal base ----------------

def real_nvp(torch, rec, rng):
    nn, D = torch.nn, torch.distributions

    class Coupling(nn.Module):
        def __init__(self, mask, hidden=8):
            super().__init__()
            self.register_buffer("mask", mask)
            dim = mask.numel()
            self.scale = nn.Sequential(nn.Linear(dim, hidden), nn.Tanh(),
                                       nn.Linear(hidden, dim), nn.Tanh())
            self.shift = nn.Sequential(nn.Linear(dim, hidden), nn.LeakyReLU(0.1),
                                       nn.Linear(hidden, dim))

        def forward(self, x):       # data -> latent
            kept = x * self.mask
            s = self.scale(kept) * (1 - self.mask)
            t = self.shift(kept) * (1 - self.mask)
            return kept + (1 - self.mask) * (x - t) * torch.exp(-s), -s.sum(dim=1)

        def inverse(self, z):
            kept = z * self.mask
            s = self.scale(kept) * (1 - self.mask)
            t = self.shift(kept) * (1 - self.mask)
            return kept + (1 - self.mask) * (z * torch.exp(s) + t)

    class Flow(nn.Module):
        def __init__(self, dim=4):
            super().__init__()
            mask = (torch.arange(dim) % 2).to(torch.get_default_dtype())
            self.couplings = nn.ModuleList([Coupling(mask), Coupling(1 - mask),
                                            Coupling(mask)])
            self.mix = nn.Parameter(torch.eye(dim) + 0.1 * torch.ones(dim, dim))
            self.loc = nn.Parameter(torch.zeros(dim))
            self.raw_tril = nn.Parameter(torch.zeros(dim, dim))

        def base(self):
            diag = torch.nn.functional.softplus(torch.diagonal(self.raw_tril)) + 0.5
            scale_tril = torch.tril(self.raw_tril, -1) + torch.diag_embed(diag)
            return D.MultivariateNormal(self.loc, scale_tril=scale_tril)

        def log_prob(self, x):
            log_det = torch.zeros(x.shape[0])
            for coupling in self.couplings:
                x, ld = coupling(x)
                log_det = log_det + ld
            sign, log_abs = torch.linalg.slogdet(self.mix)      # a Glow-style 1x1 mixing
            x = x @ self.mix.T
            return self.base().log_prob(x) + log_det + log_abs, sign

    flow = Flow()
    rec.sync("flow", flow)
    optimizer = torch.optim.Adam(flow.parameters(), lr=5e-3)
    data = _normal(torch, rng, 16, 4) @ _normal(torch, rng, 4, 4)
    for step in range(3):
        optimizer.zero_grad()
        log_prob, sign = flow.log_prob(data)
        loss = -log_prob.mean()
        loss.backward()
        rec(f"log_prob{step}", log_prob)
        rec(f"sign{step}", sign)
        rec.grads(f"step{step}", flow)
        optimizer.step()
        rec.params(f"after{step}", flow)
    with torch.no_grad():
        z = _normal(torch, rng, 5, 4)
        x = z
        for coupling in reversed(flow.couplings):
            x = coupling.inverse(x)
        back = x
        for coupling in flow.couplings:
            back, _ = coupling(back)
        rec("inverse", x)
        rec("round_trip", back)
        base = flow.base()
        full = D.MultivariateNormal(base.loc, covariance_matrix=base.covariance_matrix)
        rec("base.log_prob.covariance", full.log_prob(z))
        rec("base.entropy", base.entropy())
        rec("base.precision", full.precision_matrix)


@needs_torch
@each_dtype
def test_real_nvp(dtype):
    _run_both(real_nvp, dtype)


# -- A graph network: message passing over an edge list -----------------------------------

def graph_network(torch, rec, rng):
    nn, F = torch.nn, torch.nn.functional
    nodes, features, hidden = 7, 5, 6
    pairs = rng.choice(nodes * nodes, 14, replace=False)
    src = np.concatenate([pairs // nodes, np.arange(nodes)])      # with self loops
    dst = np.concatenate([pairs % nodes, np.arange(nodes)])
    edge_index = torch.tensor(np.stack([src, dst]))
    graph_of_node = torch.repeat_interleave(torch.tensor([3, 4]))    # two graphs' nodes

    class GCNLayer(nn.Module):
        def __init__(self, fan_in, fan_out):
            super().__init__()
            self.lin = nn.Linear(fan_in, fan_out, bias=False)
            self.bias = nn.Parameter(torch.zeros(fan_out))

        def forward(self, x, edge_index):
            row, col = edge_index
            deg = torch.zeros(x.shape[0]).index_add_(0, col, torch.ones(col.shape[0]))
            norm = deg.pow(-0.5)[row] * deg.pow(-0.5)[col]
            messages = self.lin(x).index_select(0, row) * norm.unsqueeze(-1)
            out = torch.zeros(x.shape[0], messages.shape[1]).index_add_(0, col, messages)
            return out + self.bias

    class SAGEMaxLayer(nn.Module):
        """Max and mean aggregation through scatter_reduce."""

        def __init__(self, fan_in, fan_out):
            super().__init__()
            self.pool = nn.Linear(fan_in, fan_in)
            self.lin = nn.Linear(3 * fan_in, fan_out)

        def forward(self, x, edge_index):
            row, col = edge_index
            messages = torch.relu(self.pool(x))[row]
            index = col.unsqueeze(-1).expand_as(messages)
            empty = torch.zeros_like(x)
            pooled = empty.scatter_reduce(0, index, messages, reduce="amax",
                                          include_self=False)
            mean = empty.scatter_reduce(0, index, messages, reduce="mean",
                                        include_self=False)
            return self.lin(torch.cat([x, pooled, mean], dim=-1))

    class GATLayer(nn.Module):
        """Attention over in-edges: a softmax per destination node through scatter ops."""

        def __init__(self, fan_in, fan_out):
            super().__init__()
            self.lin = nn.Linear(fan_in, fan_out, bias=False)
            self.att = nn.Parameter(torch.randn(2 * fan_out) * 0.3)

        def forward(self, x, edge_index):
            row, col = edge_index
            h = self.lin(x)
            scores = F.leaky_relu(torch.cat([h[row], h[col]], dim=-1) @ self.att, 0.2)
            top = torch.full((x.shape[0],), float("-inf")).scatter_reduce(
                0, col, scores, reduce="amax")
            weights = torch.exp(scores - top[col])
            total = torch.zeros(x.shape[0]).scatter_add(0, col, weights)
            alpha = weights / total[col]
            return torch.zeros_like(h).index_add(0, col, alpha.unsqueeze(-1) * h[row])

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.gcn = GCNLayer(features, hidden)
            self.sage = SAGEMaxLayer(hidden, hidden)
            self.gat = GATLayer(hidden, hidden)
            self.readout = nn.Linear(hidden, 2)

        def forward(self, x, edge_index):
            x = F.relu(self.gcn(x, edge_index))
            x = F.elu(self.sage(x, edge_index))
            x = self.gat(x, edge_index)
            pooled = torch.zeros(2, x.shape[1]).index_reduce_(
                0, graph_of_node, x, "mean", include_self=False)
            return self.readout(pooled)

    model = Net()
    rec.sync("gnn", model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
    x = _normal(torch, rng, nodes, features)
    target = torch.tensor([1, 0])
    for step in range(3):
        optimizer.zero_grad()
        logits = model(x, edge_index)
        loss = F.cross_entropy(logits, target)
        loss.backward()
        rec(f"logits{step}", logits)
        rec.grads(f"step{step}", model)
        optimizer.step()
        rec.params(f"after{step}", model)


@needs_torch
@each_dtype
def test_graph_network(dtype):
    _run_both(graph_network, dtype)



@needs_torch
def test_repeat_interleave_of_the_repeats_alone():
    # repeat_interleave(counts): the batch vector of graphs of `counts` nodes
    for counts in ([3, 0, 2], []):
        for dtype in ("int64", "int32"):
            expected = _torch.repeat_interleave(_torch.tensor(counts, dtype=getattr(_torch, dtype)))
            got = microtensor.repeat_interleave(
                microtensor.tensor(counts, dtype=getattr(microtensor, dtype)))
            assert str(got.dtype).split(".")[-1] == dtype
            np.testing.assert_array_equal(got.numpy(), expected.numpy())
    refused = [(lambda lib: lib.repeat_interleave(lib.tensor([[1, 2]])), RuntimeError),
               (lambda lib: lib.repeat_interleave(lib.tensor([-1, 2])), RuntimeError),
               (lambda lib: lib.repeat_interleave(lib.tensor([1.0, 2.0])), NotImplementedError),
               (lambda lib: lib.ones(2).repeat_interleave(lib.tensor([1.0, 2.0])),
                NotImplementedError),
               (lambda lib: lib.repeat_interleave(lib.tensor([1, 2]), output_size=4),
                RuntimeError)]
    for call, error in refused:
        for lib in (_torch, microtensor):
            with pytest.raises(error):
                call(lib)

# -- Contrastive learning: SimCLR's NT-Xent and CLIP's symmetric loss ----------------------

def contrastive(torch, rec, rng):
    nn, F = torch.nn, torch.nn.functional
    encoder = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(),
                            nn.Linear(16, 6))
    projector = nn.Sequential(nn.Linear(6, 6), nn.GELU(), nn.Linear(6, 4))
    logit_scale = nn.Parameter(_data(torch, np.log(1 / 0.07)))
    rec.sync("encoder", encoder)
    rec.sync("projector", projector)
    params = [*encoder.parameters(), *projector.parameters(), logit_scale]
    optimizer = torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=1e-4)
    batch, tau = 5, 0.5
    for step in range(3):
        x = _normal(torch, rng, batch, 8)
        view1 = x + 0.1 * _normal(torch, rng, batch, 8)
        view2 = x * _data(torch, rng.uniform(0.8, 1.2, (batch, 8)))
        z = F.normalize(projector(encoder(torch.cat([view1, view2]))), dim=1)
        # NT-Xent: the positive of row i is its other view; the diagonal is masked out
        sim = F.cosine_similarity(z.unsqueeze(1), z.unsqueeze(0), dim=-1) / tau
        self_mask = torch.eye(2 * batch, dtype=torch.bool)
        positives = torch.cat([torch.arange(batch) + batch, torch.arange(batch)])
        masked = sim.masked_fill(self_mask, float("-inf"))
        nt_xent = (torch.logsumexp(masked, dim=1)
                   - masked[torch.arange(2 * batch), positives]).mean()
        # CLIP: a symmetric cross entropy over the cross-view block, label-smoothed
        z1, z2 = z.chunk(2)
        logits = logit_scale.exp() * z1 @ z2.t()
        labels = torch.arange(batch)
        clip = (F.cross_entropy(logits, labels, label_smoothing=0.1)
                + F.cross_entropy(logits.t(), labels, label_smoothing=0.1)) / 2
        loss = nt_xent + clip
        optimizer.zero_grad()
        loss.backward()
        rec(f"sim{step}", sim)
        rec(f"nt_xent{step}", nt_xent)
        rec(f"nt_xent_as_ce{step}", F.cross_entropy(masked, positives))
        rec(f"clip{step}", clip)
        rec(f"accuracy{step}", (logits.argmax(1) == labels).double().mean())
        rec.grads(f"encoder{step}", encoder)
        rec.grads(f"projector{step}", projector)
        rec(f"logit_scale.grad{step}", logit_scale.grad)
        optimizer.step()
        with torch.no_grad():
            logit_scale.clamp_(0, np.log(100))
        rec.params(f"after{step}", projector)
    rec.state("encoder", encoder)


@needs_torch
@each_dtype
def test_contrastive(dtype):
    _run_both(contrastive, dtype)



@needs_torch
def test_cosine_similarity_below_eps_keeps_the_norms_gradient():
    # PyTorch clamps the norms to eps in place, unrecorded: a vector shorter than eps
    # still passes its norm's gradient on (a recorded clamp would cut it)
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((2, 4, 3)) * 0.1
    b[1] = 0        # a zero vector: the norm's gradient there is zero in both
    results = []
    for lib in (_torch, microtensor):
        x1 = lib.tensor(a, requires_grad=True)
        x2 = lib.tensor(b, requires_grad=True)
        cos = lib.nn.functional.cosine_similarity(x1, x2, dim=1, eps=0.5)
        g1, g2 = lib.autograd.grad((cos * lib.arange(4.0)).sum(), (x1, x2),
                                   create_graph=True)
        gg1, = lib.autograd.grad((g1 * g2)[[0, 2, 3]].sum(), x1)
        results.append([t.detach().numpy() for t in (cos, g1, g2, gg1)])
    for got, expected in zip(results[1], results[0]):
        np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)


@needs_torch
def test_norm_double_backward_at_a_zero_vector_as_pytorch():
    # the first gradient is 0 there; its derivative with respect to the incoming gradient
    # is 0 too (it was 0/0), and with respect to the vector NaN in both libraries
    results = []
    for lib in (_torch, microtensor):
        v = lib.tensor([[0.0, 0.0, 0.0], [1.0, -2.0, 2.0]], dtype=lib.float64,
                       requires_grad=True)
        w = lib.tensor([[1.0], [3.0]], dtype=lib.float64, requires_grad=True)
        g, = lib.autograd.grad((v.norm(dim=1, keepdim=True) * w).sum(), v, create_graph=True)
        gw, gv = lib.autograd.grad((g * lib.arange(3.0, dtype=lib.float64)).sum(), (w, v))
        results.append([t.detach().numpy() for t in (g, gw, gv)])
    for got, expected in zip(results[1], results[0]):
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-14)


@needs_torch
@pytest.mark.filterwarnings("error::RuntimeWarning")   # ops are silent, as PyTorch's
@pytest.mark.parametrize("p", [3.0, 1.5, 0.5, -1.0])
def test_p_norm_gradient_at_zero_vectors_and_elements(p):
    # PyTorch's norm derivative gives zero vectors (and, for p < 1, zero elements) the
    # gradient 0, where the chain rule through abs, pow and sum is 0 * inf; F.normalize
    # with p = 3 of a zero row then has the finite gradient 1 / eps
    results = []
    for lib in (_torch, microtensor):
        x = lib.tensor([[0.0, 0.0, 0.0], [0.0, 1.0, -2.0]], dtype=lib.float64,
                       requires_grad=True)
        norm = lib.linalg.vector_norm(x, p, dim=1)
        g, = lib.autograd.grad((norm * lib.tensor([2.0, 3.0], dtype=lib.float64)).sum(), x,
                               create_graph=True)
        gg, = lib.autograd.grad((g[1] * g[1]).sum(), x)
        normalized, = lib.autograd.grad(lib.nn.functional.normalize(x, p=p, dim=1).sum(), x)
        results.append([t.detach().numpy() for t in (norm, g, gg[1], normalized)])
    for got, expected in zip(results[1], results[0]):
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-14)


@needs_torch
@pytest.mark.filterwarnings("error::RuntimeWarning")   # ops are silent, as PyTorch's
def test_atan2_gradient_at_the_origin():
    results = []
    for lib in (_torch, microtensor):
        y = lib.tensor([0.0, 0.0, 1.0], dtype=lib.float64, requires_grad=True)
        x = lib.tensor([0.0, -0.0, 0.5], dtype=lib.float64, requires_grad=True)
        results.append([g.numpy() for g in lib.autograd.grad(lib.atan2(y, x).sum(), (y, x))])
    for got, expected in zip(results[1], results[0]):
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-14)

# -- LBFGS on a small regression, with and without the strong-Wolfe line search ------------

def lbfgs_regression(torch, rec, rng, line_search_fn=None):
    nn, F = torch.nn, torch.nn.functional
    model = nn.Sequential(nn.Linear(3, 6), nn.Tanh(), nn.Linear(6, 1))
    rec.sync("model", model)
    x = _normal(torch, rng, 20, 3)
    y = torch.sin(x.sum(1, keepdim=True)) + 0.05 * _normal(torch, rng, 20, 1)
    optimizer = torch.optim.LBFGS(model.parameters(), lr=1, max_iter=8, history_size=4,
                                  line_search_fn=line_search_fn)
    evaluations = []

    def closure():
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y) + 1e-3 * sum(p.pow(2).sum()
                                                    for p in model.parameters())
        loss.backward()
        evaluations.append(loss.item())
        return loss

    for step in range(3):
        rec(f"loss{step}", optimizer.step(closure))
        rec.params(f"after{step}", model)
    rec("evaluations", np.array(evaluations))
    state = optimizer.state_dict()["state"][0]
    rec("state.keys", sorted(set(state) - {"al"}))
    rec("state.counts", (state["func_evals"], state["n_iter"]))
    rec("state.d", state["d"])
    rec("state.t", state["t"])
    rec("state.old_dirs", state["old_dirs"])
    rec("state.ro", state["ro"])


# float64 only: LBFGS's scalars (curvatures, step sizes) are PyTorch's float32 tensors but
# microtensor's Python floats, and the iterations amplify that rounding beyond float32's
# tolerances
@needs_torch
@pytest.mark.parametrize("line_search_fn", [None, "strong_wolfe"])
def test_lbfgs_regression(line_search_fn):
    _run_both(lambda torch, rec, rng: lbfgs_regression(torch, rec, rng, line_search_fn),
              rtol=1e-8, atol=1e-10)


# -- Weight averaging, one-cycle and warm-restart schedules, a checkpoint mid-training ------

def averaged_training(torch, rec, rng, schedule="one_cycle"):
    nn, F = torch.nn, torch.nn.functional
    swa_utils = torch.optim.swa_utils
    steps_per_epoch, epochs, resume_at = 2, 3, 3
    data = [(_normal(torch, rng, 6, 5), _normal(torch, rng, 6, 1))
            for _ in range(steps_per_epoch)]

    def build(state=None):
        # no bias before the BatchNorm: its gradient is round-off, which Adam scales up
        model = nn.Sequential(nn.Linear(5, 8, bias=False), nn.BatchNorm1d(8), nn.SiLU(),
                              nn.Linear(8, 1))
        rec.sync("model", model)
        if schedule == "one_cycle":
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.05)
            scheduler = torch.optim.lr_scheduler.OneCycleLR(
                optimizer, max_lr=0.05, epochs=epochs, steps_per_epoch=steps_per_epoch,
                pct_start=0.4, three_phase=True)
        else:
            optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9,
                                        nesterov=True, weight_decay=1e-3)
            scheduler = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(
                optimizer, T_0=1, T_mult=2, eta_min=1e-3)
        ema = swa_utils.AveragedModel(model, multi_avg_fn=swa_utils.get_ema_multi_avg_fn(0.8),
                                      use_buffers=True)
        shadow = {k: v.detach().clone() for k, v in model.state_dict().items()
                  if v.is_floating_point()}
        if state is not None:
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            scheduler.load_state_dict(state["scheduler"])
            ema.load_state_dict(state["ema"])
            shadow = state["shadow"]
        return model, optimizer, scheduler, ema, shadow

    def train(run, model, optimizer, scheduler, ema, shadow, start, stop):
        for it in range(start, stop):
            epoch, i = divmod(it, steps_per_epoch)
            x, y = data[i]
            optimizer.zero_grad()
            loss = F.smooth_l1_loss(model(x), y, beta=0.5)
            loss.backward()
            optimizer.step()
            if schedule == "one_cycle":
                scheduler.step()
            else:           # fractional epochs, as the warm-restart docs do
                scheduler.step(epoch + (i + 1) / steps_per_epoch)
            ema.update_parameters(model)
            with torch.no_grad():
                for key, value in model.state_dict().items():
                    if key in shadow:
                        shadow[key].lerp_(value, 0.2)
            rec(f"{run}.loss{it}", loss)
            rec(f"{run}.lr{it}", scheduler.get_last_lr())
            rec(f"{run}.momentum{it}", optimizer.param_groups[0].get(
                "betas", (optimizer.param_groups[0].get("momentum"),))[0])
            rec.params(f"{run}.after{it}", model)

    total = steps_per_epoch * epochs
    straight = build()
    train("straight", *straight, 0, total)
    model, optimizer, scheduler, ema, shadow = build()
    train("resumed", model, optimizer, scheduler, ema, shadow, 0, resume_at)
    buffer = io.BytesIO()
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "ema": ema.state_dict(),
                "shadow": shadow}, buffer)
    buffer.seek(0)
    del model, optimizer, scheduler, ema, shadow
    resumed = build(torch.load(buffer, weights_only=True))
    train("resumed", *resumed, resume_at, total)
    for run, (model, optimizer, scheduler, ema, shadow) in [("straight", straight),
                                                            ("resumed", resumed)]:
        rec.state(f"{run}.ema", ema)
        rec(f"{run}.shadow", shadow)
        rec(f"{run}.optimizer", optimizer.state_dict()["state"])
        rec(f"{run}.scheduler.last_epoch", scheduler.last_epoch)
        ema.eval()
        with torch.no_grad():
            rec(f"{run}.ema.output", ema(data[0][0]))
        swa_utils.update_bn([x for x, _ in data], ema)
        rec(f"{run}.ema.running_mean", ema.module[1].running_mean)
    for a, b in zip(straight[0].parameters(), resumed[0].parameters()):
        assert torch.equal(a, b)     # resuming reproduces the uninterrupted run exactly


@needs_torch
@each_dtype
@pytest.mark.parametrize("schedule", ["one_cycle", "warm_restarts"])
def test_averaged_training_with_checkpoint(schedule, dtype):
    _run_both(lambda torch, rec, rng: averaged_training(torch, rec, rng, schedule), dtype)
