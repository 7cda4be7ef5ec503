"""privacy: the accountant against Opacus and published figures, the noise's scale, Poisson
sampling, private training with the ordinary loop (against the step computed by hand and
against Opacus), make_private_with_epsilon, and the refusals."""
import copy
import math
import sys

import numpy as np
import pytest

import microtensor as mt
from microtensor import nn
from microtensor.privacy import (DPDataLoader, DPOptimizer, PrivacyEngine,
                                 UniformWithReplacementSampler, UnsupportedModuleError,
                                 clipped_grad_sum, compute_rdp, get_epsilon,
                                 get_noise_multiplier)
from microtensor.privacy.accountant import RDP_ORDERS
from microtensor.utils.data import DataLoader, TensorDataset

try:
    import dp_accounting  # noqa: F401
except ImportError:
    dp_accounting = None
try:
    import opacus
    import torch
except ImportError:
    opacus = torch = None

needs_accounting = pytest.mark.skipif(
    dp_accounting is None, reason="dp-accounting is not installed (the privacy extra)")
needs_opacus = pytest.mark.skipif(
    opacus is None or dp_accounting is None,
    reason="Opacus (optional test oracle) or dp-accounting is not installed")

DELTA = 1e-5
# (noise_multiplier, sample_rate, steps): MNIST-like runs, a high-ε one, a short one
SETTINGS = [(1.1, 256 / 60000, 60 * 234), (1.0, 0.01, 1000), (0.8, 0.02, 500),
            (2.0, 0.05, 50)]


# -- the accountant ----------------------------------------------------------------------

@needs_opacus
@pytest.mark.parametrize("sigma, q, steps", SETTINGS)
def test_rdp_epsilon_agrees_with_opacus(sigma, q, steps):
    from opacus.accountants import RDPAccountant
    oracle = RDPAccountant()
    oracle.history = [(sigma, q, steps)]
    expected = oracle.get_epsilon(DELTA)
    ours = get_epsilon(noise_multiplier=sigma, sample_rate=q, steps=steps, delta=DELTA)
    assert ours == pytest.approx(expected, rel=0.02)


@needs_opacus
@pytest.mark.parametrize("sigma, q, steps", SETTINGS)
def test_prv_epsilon_agrees_with_opacus(sigma, q, steps):
    from opacus.accountants import PRVAccountant
    oracle = PRVAccountant()
    oracle.history = [(sigma, q, steps)]
    expected = oracle.get_epsilon(DELTA)
    ours = get_epsilon(noise_multiplier=sigma, sample_rate=q, steps=steps, delta=DELTA,
                       accountant="prv")
    assert ours == pytest.approx(expected, rel=0.02)
    # the tight accounting is below RDP's bound
    assert ours < get_epsilon(noise_multiplier=sigma, sample_rate=q, steps=steps,
                              delta=DELTA)


def _moments_accountant_epsilon(sigma, q, steps, delta):
    """ε by the conversion of the moments accountant (Abadi et al. 2016, Theorem 2),
    ε = min over orders of RDP(α) + log(1/δ) / (α - 1): the one the published figures
    below were computed with (Opacus's get_epsilon uses a tighter one, Balle et al. 2020)."""
    rdp = compute_rdp(noise_multiplier=sigma, sample_rate=q, steps=steps)
    return min(r + math.log(1 / delta) / (order - 1) for r, order in zip(rdp, RDP_ORDERS))


@needs_accounting
@pytest.mark.parametrize("sigma, q, steps, published", [
    # Abadi et al., "Deep Learning with Differential Privacy" (CCS 2016), section 3.1:
    # q = 0.01, sigma = 4, delta = 1e-5, T = 10000 steps give epsilon ~ 1.26.
    (4.0, 0.01, 10000, 1.26),
    # Opacus, scripts/compute_dp_sgd_privacy.py (docstring): 60000 samples, batch 256,
    # sigma 1.12, 60 epochs, delta 1e-5 satisfy (2.92, 1e-5)-DP.
    (1.12, 256 / 60000, math.ceil(60 * 60000 / 256), 2.92),
])
def test_rdp_agrees_with_published_figures(sigma, q, steps, published):
    assert _moments_accountant_epsilon(sigma, q, steps, DELTA) == pytest.approx(
        published, rel=0.02)
    # the tighter conversion can only lower it
    assert get_epsilon(noise_multiplier=sigma, sample_rate=q, steps=steps,
                       delta=DELTA) < published


@needs_accounting
def test_epsilon_grows_with_steps_and_shrinks_with_noise():
    def eps(sigma, steps):
        return get_epsilon(noise_multiplier=sigma, sample_rate=0.01, steps=steps, delta=DELTA)
    assert eps(1.0, 0) == 0.0
    assert eps(1.0, 100) < eps(1.0, 1000)
    assert eps(2.0, 1000) < eps(1.0, 1000)
    assert eps(0.0, 10) == math.inf


@needs_accounting
@pytest.mark.parametrize("kwargs, word", [
    (dict(noise_multiplier=-1.0), "noise_multiplier"),
    (dict(noise_multiplier=float("nan")), "noise_multiplier"),
    (dict(sample_rate=0.0), "sample_rate"),
    (dict(sample_rate=1.5), "sample_rate"),
    (dict(steps=-1), "steps"),
    (dict(delta=0.0), "delta"),
    (dict(accountant="gdp"), "accountant"),
])
def test_get_epsilon_checks_its_arguments(kwargs, word):
    args = dict(noise_multiplier=1.0, sample_rate=0.01, steps=10, delta=DELTA)
    args.update(kwargs)
    with pytest.raises(ValueError, match=word):
        get_epsilon(**args)


def test_missing_dp_accounting_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "dp_accounting", None)
    with pytest.raises(ImportError, match=r"microtensor\[privacy\]"):
        get_epsilon(noise_multiplier=1.0, sample_rate=0.01, steps=10, delta=DELTA)


@needs_accounting
def test_accountant_merges_steps_with_the_same_settings():
    engine = PrivacyEngine(accountant="rdp")
    for sigma in (1.0, 1.0, 2.0, 2.0, 2.0):
        engine.accountant.step(noise_multiplier=sigma, sample_rate=0.1)
    assert engine.accountant.history == [(1.0, 0.1, 2), (2.0, 0.1, 3)]
    assert engine.get_epsilon(DELTA) > get_epsilon(noise_multiplier=2.0, sample_rate=0.1,
                                                   steps=5, delta=DELTA)


# -- Poisson sampling --------------------------------------------------------------------

def test_poisson_sampler_includes_each_sample_independently_at_the_rate():
    n, q, steps = 1000, 0.05, 200
    sampler = UniformWithReplacementSampler(num_samples=n, sample_rate=q, steps=steps,
                                            generator=mt.Generator().manual_seed(0))
    batches = list(sampler)
    assert len(batches) == len(sampler) == steps
    sizes = np.array([len(b) for b in batches])
    # batch sizes ~ Binomial(n, q): mean within 4 standard errors, variance within 25%
    assert abs(sizes.mean() - n * q) < 4 * math.sqrt(n * q * (1 - q) / steps)
    assert sizes.var() == pytest.approx(n * q * (1 - q), rel=0.25)
    # each index in ~ Binomial(steps, q) batches: a chi-square over the n indices
    counts = np.bincount(np.concatenate([np.array(b, dtype=int) for b in batches]),
                         minlength=n)
    chi2 = ((counts - steps * q) ** 2 / (steps * q * (1 - q))).sum()
    assert abs(chi2 - n) < 5 * math.sqrt(2 * n)
    assert all(len(set(b)) == len(b) and b == sorted(b) for b in batches)
    assert UniformWithReplacementSampler(num_samples=n, sample_rate=q).steps == 20


def test_dp_data_loader_keeps_the_average_batch_size():
    data = TensorDataset(mt.randn(100, 3), mt.arange(100))
    loader = DPDataLoader.from_data_loader(DataLoader(data, batch_size=10))
    assert len(loader) == 10 and loader.sample_rate == 0.1
    assert loader.dataset is data
    sizes = [len(x) for x, _ in loader]
    assert len(sizes) == 10 and len(set(sizes)) > 1      # variable batch sizes


def test_dp_data_loader_gives_empty_batches_their_structure():
    data = TensorDataset(mt.randn(5, 3, 2), mt.arange(5))
    empty = DPDataLoader(data, sample_rate=1e-12)
    x, y = next(iter(empty))                        # empty before any batch was seen
    assert x.shape == (0, 3, 2) and x.dtype == mt.float32
    assert y.shape == (0,) and y.dtype == mt.int64
    collate = empty.collate_fn
    collate([{"a": mt.ones(4), "b": mt.zeros(2, dtype=mt.int32)}])
    batch = collate([])                              # after one: the same structure
    assert set(batch) == {"a", "b"}
    assert batch["a"].shape == (0, 4) and batch["b"].dtype == mt.int32
    with pytest.raises(ValueError, match="IterableDataset"):
        DPDataLoader(mt.utils.data.IterableDataset(), sample_rate=0.5)


# -- the engine ----------------------------------------------------------------------------

def make_setup():
    """An MLP, its SGD and a loader of 6 batches of 10 samples."""
    mt.manual_seed(0)
    x = mt.randn(60, 4)
    y = mt.randint(0, 3, (60,))
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
    optimizer = mt.optim.SGD(model.parameters(), lr=0.3, momentum=0.9)
    return model, optimizer, DataLoader(TensorDataset(x, y), batch_size=10)


def _mode_available(mode):
    """Whether this build's clipped_grad_sum has ``method=mode``."""
    try:
        clipped_grad_sum(lambda p, x: (p["w"] * x).sum(), {"w": mt.ones(2)}, mt.ones(3, 2),
                         max_grad_norm=1.0, method=mode)
    except NotImplementedError:
        return False
    return True


@pytest.mark.parametrize("mode", ["vmap", "ghost"])
def test_private_training_with_the_ordinary_loop_equals_the_step_by_hand(mode):
    if not _mode_available(mode):
        pytest.skip(f"clipped_grad_sum(method={mode!r}) is not in this build")
    model, optimizer, loader = make_setup()
    reference = copy.deepcopy(model)
    ref_optimizer = mt.optim.SGD(reference.parameters(), lr=0.3, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    sigma, clip = 0.7, 0.5
    engine = PrivacyEngine(accountant="rdp")
    private, dp_optimizer, dp_loader = engine.make_private(
        module=model, optimizer=optimizer, data_loader=loader, noise_multiplier=sigma,
        max_grad_norm=clip, grad_sample_mode=mode, criterion=criterion,
        noise_generator=mt.Generator().manual_seed(7))
    assert isinstance(dp_optimizer, DPOptimizer) and isinstance(dp_loader, DPDataLoader)
    assert dp_optimizer.expected_batch_size == 10
    hand_noise = mt.Generator().manual_seed(7)

    def sample_loss(params, x, y):
        out = mt.func.functional_call(reference, params, (x[None],))
        return nn.functional.cross_entropy(out, y[None])

    steps = 0
    for x, y in dp_loader:
        dp_optimizer.zero_grad()
        loss = criterion(private(x), y)
        loss.backward()
        ordinary = [p.grad.clone() for p in model.parameters()]
        dp_optimizer.step()
        steps += 1
        # by hand: clip and sum (by vmap, the reference), noise, divide by 10, SGD
        params = {k: p.detach() for k, p in reference.named_parameters()}
        summed, _ = clipped_grad_sum(sample_loss, params, x, y, max_grad_norm=clip,
                                     method="vmap")
        for (name, p), grad in zip(reference.named_parameters(), ordinary):
            noise = mt.randn(p.shape, generator=hand_noise)
            p.grad = (summed[name] + noise * (sigma * clip)) / 10
            assert not mt.allclose(p.grad, grad)      # the non-private gradient is unused
        ref_optimizer.step()
        for p, q in zip(model.parameters(), reference.parameters()):
            mt.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
    assert steps == 6
    assert engine.accountant.history == [(sigma, 1 / 6, 6)]


class ZeroLoss(nn.Module):
    """A loss whose gradient is zero: the private gradient is the noise alone."""

    def forward(self, output, target):
        return (output * 0.0).sum()


def test_noise_has_the_right_scale():
    mt.manual_seed(0)
    model = nn.Linear(50, 40)
    sigma, clip = 1.3, 0.7
    criterion = ZeroLoss()
    private, dp_optimizer, dp_loader = PrivacyEngine().make_private(
        module=model, optimizer=mt.optim.SGD(model.parameters(), lr=0.0),
        data_loader=DataLoader(TensorDataset(mt.randn(200, 50), mt.zeros(200)),
                               batch_size=25),
        noise_multiplier=sigma, max_grad_norm=clip, grad_sample_mode="vmap",
        criterion=criterion, noise_generator=mt.Generator().manual_seed(3))
    x, y = next(iter(dp_loader))
    criterion(private(x), y).backward()
    dp_optimizer.step()
    std = sigma * clip / 25                          # expected batch size 200 / 8 = 25
    values = np.concatenate([p.grad.numpy().ravel() / std for p in model.parameters()])
    n = values.size                                  # 2040 draws of N(0, 1) if right
    assert abs(values.mean()) < 4 / math.sqrt(n)
    assert abs((values ** 2).sum() - n) < 4 * math.sqrt(2 * n)     # chi-square(n)
    ordered = np.sort(values)
    normal_cdf = np.array([0.5 * (1 + math.erf(v / math.sqrt(2))) for v in ordered])
    ks = max(np.max(np.arange(1, n + 1) / n - normal_cdf),
             np.max(normal_cdf - np.arange(n) / n))
    assert ks < 1.63 / math.sqrt(n)                  # Kolmogorov-Smirnov at 1%


@pytest.mark.parametrize("loss_reduction, divisor", [("mean", 10), ("sum", 1)])
def test_an_empty_batch_steps_with_noise_only(loss_reduction, divisor):
    model, optimizer, loader = make_setup()
    criterion = nn.CrossEntropyLoss(reduction=loss_reduction)
    private, dp_optimizer, _ = PrivacyEngine().make_private(
        module=model, optimizer=optimizer, data_loader=loader, noise_multiplier=1.0,
        max_grad_norm=1.0, grad_sample_mode="vmap", criterion=criterion,
        noise_generator=mt.Generator().manual_seed(5), loss_reduction=loss_reduction)
    x, y = mt.zeros(0, 4), mt.zeros(0, dtype=mt.int64)
    criterion(private(x), y)
    dp_optimizer.step()
    noise = mt.Generator().manual_seed(5)
    for p in model.parameters():
        mt.testing.assert_close(p.grad, mt.randn(p.shape, generator=noise) / divisor)


@needs_opacus
def test_a_private_step_without_noise_equals_opacus():
    model, optimizer, loader = make_setup()
    tmodel = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(),
                                 torch.nn.Linear(8, 3))
    with torch.no_grad():
        for tp, p in zip(tmodel.parameters(), model.parameters()):
            tp.copy_(torch.tensor(p.detach().numpy()))
    data = loader.dataset.tensors
    tloader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(
        torch.tensor(data[0].numpy()), torch.tensor(data[1].numpy())), batch_size=10)
    toptimizer = torch.optim.SGD(tmodel.parameters(), lr=0.3, momentum=0.9)
    with pytest.warns(UserWarning):                  # Opacus: secure RNG is off
        tengine = opacus.PrivacyEngine(accountant="rdp")
    tmodel, toptimizer, tloader = tengine.make_private(
        module=tmodel, optimizer=toptimizer, data_loader=tloader, noise_multiplier=0.0,
        max_grad_norm=0.3, poisson_sampling=False)
    criterion = nn.CrossEntropyLoss()
    private, dp_optimizer, loader = PrivacyEngine(accountant="rdp").make_private(
        module=model, optimizer=optimizer, data_loader=loader, noise_multiplier=0.0,
        max_grad_norm=0.3, poisson_sampling=False, grad_sample_mode="vmap",
        criterion=criterion)
    for (x, y), (tx, ty) in zip(loader, tloader):
        dp_optimizer.zero_grad()
        criterion(private(x), y).backward()
        dp_optimizer.step()
        toptimizer.zero_grad()
        torch.nn.functional.cross_entropy(tmodel(tx), ty).backward()
        toptimizer.step()
    for p, tp in zip(model.parameters(), tmodel.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), tp.detach().numpy(), rtol=1e-4,
                                   atol=1e-5)


@needs_accounting
@pytest.mark.parametrize("accountant", ["rdp", "prv"])
def test_make_private_with_epsilon_reaches_the_target(accountant):
    model, optimizer, loader = make_setup()
    criterion = nn.CrossEntropyLoss()
    engine = PrivacyEngine(accountant=accountant)
    private, dp_optimizer, dp_loader = engine.make_private_with_epsilon(
        module=model, optimizer=optimizer, data_loader=loader, target_epsilon=4.0,
        target_delta=DELTA, epochs=2, max_grad_norm=1.0, grad_sample_mode="vmap",
        criterion=criterion)
    sigma = dp_optimizer.noise_multiplier
    for _ in range(2):
        for x, y in dp_loader:
            criterion(private(x), y).backward()
            dp_optimizer.step()
            dp_optimizer.zero_grad()
    epsilon = engine.get_epsilon(DELTA)
    assert 4.0 - 0.011 <= epsilon <= 4.0
    # the smallest such sigma: 1% less noise spends more than the target
    assert engine.accountant.history == [(sigma, 1 / 6, 12)]
    assert get_epsilon(noise_multiplier=sigma * 0.99, sample_rate=1 / 6, steps=12,
                       delta=DELTA, accountant=accountant) > 4.0
    with pytest.raises(ValueError, match="EITHER"):
        get_noise_multiplier(target_epsilon=1.0, target_delta=DELTA, sample_rate=0.1)


def test_dp_optimizer_passes_through_to_the_wrapped_optimizer():
    model, optimizer, loader = make_setup()
    private, dp_optimizer, _ = PrivacyEngine().make_private(
        module=model, optimizer=optimizer, data_loader=loader, noise_multiplier=1.0,
        max_grad_norm=1.0, criterion=nn.CrossEntropyLoss())
    assert dp_optimizer.param_groups is optimizer.param_groups
    assert dp_optimizer.state is optimizer.state
    assert dp_optimizer.state_dict() == optimizer.state_dict()
    for p in model.parameters():
        p.grad = mt.ones_like(p)
    dp_optimizer.zero_grad()
    assert all(p.grad is None for p in model.parameters())
    assert list(private.parameters()) == list(model.parameters())


# -- refusals ------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, error, match", [
    (dict(noise_multiplier=-0.5), ValueError, "noise_multiplier"),
    (dict(noise_multiplier=float("nan")), ValueError, "noise_multiplier"),
    (dict(max_grad_norm=0.0), ValueError, "max_grad_norm"),
    (dict(loss_reduction="none"), ValueError, "loss_reduction"),
    (dict(grad_sample_mode="hooks"), ValueError, "grad_sample_mode"),
    (dict(criterion=nn.functional.cross_entropy), TypeError, "criterion"),
    (dict(module=nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 3))),
     UnsupportedModuleError, "BatchNorm cannot support training with differential privacy"),
    (dict(module=nn.Sequential(nn.InstanceNorm1d(4, track_running_stats=True))),
     UnsupportedModuleError, "running stats"),
    (dict(optimizer=mt.optim.SGD([nn.Parameter(mt.ones(2))], lr=0.1)), ValueError,
     "Module parameters are different than optimizer Parameters"),
])
def test_make_private_refuses_and_changes_nothing(kwargs, error, match):
    model, optimizer, loader = make_setup()
    criterion = nn.CrossEntropyLoss()
    args = dict(module=model, optimizer=optimizer, data_loader=loader, noise_multiplier=1.0,
                max_grad_norm=1.0, criterion=criterion)
    args.update(kwargs)
    engine = PrivacyEngine()
    with pytest.raises(error, match=match):
        engine.make_private(**args)
    assert issubclass(UnsupportedModuleError, ValueError)
    assert not criterion._forward_hooks and len(engine.accountant) == 0


def test_make_private_refuses_a_module_in_eval_mode():
    model, optimizer, loader = make_setup()
    with pytest.raises(UnsupportedModuleError, match="training mode"):
        PrivacyEngine().make_private(module=model.eval(), optimizer=optimizer,
                                     data_loader=loader, noise_multiplier=1.0,
                                     max_grad_norm=1.0)


def test_step_without_a_recorded_batch_says_what_is_missing():
    model, optimizer, loader = make_setup()
    criterion = nn.CrossEntropyLoss()
    private, dp_optimizer, _ = PrivacyEngine().make_private(
        module=model, optimizer=optimizer, data_loader=loader, noise_multiplier=1.0,
        max_grad_norm=1.0, criterion=criterion, grad_sample_mode="vmap")
    x, y = next(iter(loader))
    before = [p.clone() for p in model.parameters()]
    nn.functional.cross_entropy(private(x), y).backward()    # not the criterion given
    with pytest.raises(RuntimeError, match="criterion given to make_private"):
        dp_optimizer.step()
    assert all(mt.equal(p, b) for p, b in zip(model.parameters(), before))
    with mt.no_grad():                                       # evaluation is not recorded
        criterion(private(x), y)
    with pytest.raises(RuntimeError, match="before each step"):
        dp_optimizer.step()
