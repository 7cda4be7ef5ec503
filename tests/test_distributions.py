"""microtensor.distributions against torch.distributions: densities, entropies, moments,
cdf/icdf, KL divergences and their gradients for the same parameter values; sample and
batch/event shapes, expand, validation errors; sample statistics under a fixed seed;
gradients through rsample with the same noise; vmap(grad(log_prob)) against a loop."""
import math
import warnings

import numpy as np
import pytest

import microtensor as mt
from microtensor.distributions import constraints

D = mt.distributions
torch = pytest.importorskip("torch", reason="torch.distributions is the oracle")
TD = torch.distributions

RNG = np.random.default_rng(1234)


def _pos(*shape):
    return RNG.uniform(0.5, 2.0, shape)


def _real(*shape):
    return RNG.normal(size=shape)


def _unit(*shape):
    return RNG.uniform(0.1, 0.9, shape)


def _simplex(*shape):
    w = RNG.uniform(0.1, 1.0, shape)
    return w / w.sum(-1, keepdims=True)


# name -> (parameters as float64 arrays (or Python numbers), values in the support)
CASES = {
    "normal": ("Normal", dict(loc=_real(3), scale=_pos(3)), _real(2, 3)),
    "normal_scalar": ("Normal", dict(loc=0.5, scale=2.0), _real(4)),
    "bernoulli_probs": ("Bernoulli", dict(probs=_unit(2, 3)), RNG.integers(0, 2, (2, 3)) * 1.0),
    "bernoulli_logits": ("Bernoulli", dict(logits=_real(3)), RNG.integers(0, 2, (4, 3)) * 1.0),
    "categorical_probs": ("Categorical", dict(probs=_simplex(2, 4)), RNG.integers(0, 4, (3, 2))),
    "categorical_logits": ("Categorical", dict(logits=_real(4)), RNG.integers(0, 4, (5,))),
    "uniform": ("Uniform", dict(low=_real(3) - 2, high=_real(3) + 2),
                RNG.uniform(-0.5, 0.5, (2, 3))),
}


def build(case, lib, requires_grad=False):
    """The distribution of ``case`` in microtensor (lib=mt) or torch, with its parameter
    tensors (leaves, float64)."""
    cls_name, params, _ = CASES[case]
    dists, tensor = (D, mt.tensor) if lib is mt else (TD, torch.tensor)
    leaves = {k: tensor(v, dtype=lib.float64, requires_grad=requires_grad)
              if isinstance(v, np.ndarray) else v for k, v in params.items()}
    return getattr(dists, cls_name)(**leaves), leaves


def value_of(case, lib):
    value = CASES[case][2]
    dtype = lib.int64 if value.dtype.kind == "i" else lib.float64
    return (mt.tensor if lib is mt else torch.tensor)(value, dtype=dtype)


def assert_close(actual, expected, rtol=1e-6, atol=1e-8):
    if expected is None:   # a gradient torch leaves undefined
        assert actual is None
        return
    assert tuple(actual.shape) == tuple(expected.shape)
    np.testing.assert_allclose(actual.detach().numpy(), expected.detach().numpy(), rtol=rtol,
                               atol=atol, equal_nan=True)


def outcome(fn):
    """``("ok", value)`` or ``("raises", exception type)``."""
    try:
        return "ok", fn()
    except (NotImplementedError, ValueError) as exc:
        return "raises", type(exc)


def same_outcome(mt_fn, torch_fn, **tol):
    (kind, got), (expected_kind, expected) = outcome(mt_fn), outcome(torch_fn)
    assert kind == expected_kind, (got, expected)
    if kind == "ok":
        assert_close(got, expected, **tol)
    else:
        assert got is expected


# --------------------------------------------------------------------------- values

@pytest.mark.parametrize("case", CASES)
def test_values_match_torch(case):
    d, _ = build(case, mt)
    t, _ = build(case, torch)
    assert d.batch_shape == t.batch_shape and d.event_shape == t.event_shape
    assert d.has_rsample == t.has_rsample
    assert d.has_enumerate_support == t.has_enumerate_support
    for prop in ("mean", "variance", "stddev", "mode"):
        same_outcome(lambda: getattr(d, prop), lambda: getattr(t, prop))
    same_outcome(d.entropy, t.entropy)
    same_outcome(d.perplexity, t.perplexity)
    x, tx = value_of(case, mt), value_of(case, torch)
    same_outcome(lambda: d.log_prob(x), lambda: t.log_prob(tx))
    same_outcome(lambda: d.cdf(x), lambda: t.cdf(tx))
    q = RNG.uniform(0.05, 0.95, tuple(t.batch_shape))
    same_outcome(lambda: d.icdf(mt.tensor(q)), lambda: t.icdf(torch.tensor(q)))
    if t.has_enumerate_support:
        for expand in (True, False):
            assert_close(d.enumerate_support(expand), t.enumerate_support(expand))


@pytest.mark.parametrize("case", [c for c in CASES if c != "normal_scalar"])
def test_gradients_of_log_prob_and_entropy_match_torch(case):
    x, tx = value_of(case, mt), value_of(case, torch)
    for method, args, targs in (("log_prob", (x,), (tx,)), ("entropy", (), ())):
        d, leaves = build(case, mt, requires_grad=True)
        t, tleaves = build(case, torch, requires_grad=True)
        getattr(d, method)(*args).sum().backward()
        getattr(t, method)(*targs).sum().backward()
        for name, leaf in leaves.items():
            if isinstance(leaf, mt.Tensor):
                assert_close(leaf.grad, tleaves[name].grad)


def test_float32_parameters_keep_their_dtype():
    d = D.Normal(mt.tensor([0.0, 1.0]), 2.0)
    assert d.scale.dtype == mt.float32 and d.log_prob(mt.tensor(0.5)).dtype == mt.float32
    assert D.Normal(0.0, 1.0).loc.dtype == mt.get_default_dtype()
    assert D.Normal(mt.tensor([0.0], dtype=mt.float64), 1.0).scale.dtype == mt.float64


# --------------------------------------------------------------------------- shapes

@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("sample_shape", [(), (5,), (2, 3)])
def test_sample_shapes(case, sample_shape):
    d, _ = build(case, mt)
    t, _ = build(case, torch)
    expected = t.sample(sample_shape).shape
    assert d.sample(sample_shape).shape == expected
    assert d.sample(mt.Size(sample_shape)).shape == expected
    if t.has_rsample:
        assert d.rsample(sample_shape).shape == t.rsample(sample_shape).shape
    else:
        with pytest.raises(NotImplementedError):
            d.rsample(sample_shape)
    with pytest.warns(FutureWarning, match="sample_n"):
        assert d.sample_n(3).shape == (3,) + tuple(expected[len(sample_shape):])


@pytest.mark.parametrize("case", CASES)
def test_expand(case):
    d, _ = build(case, mt)
    t, _ = build(case, torch)
    new_batch = (2,) + tuple(t.batch_shape)
    e, te = d.expand(new_batch), t.expand(new_batch)
    assert type(e) is type(d)
    assert e.batch_shape == te.batch_shape and e.event_shape == te.event_shape
    assert isinstance(e.batch_shape, mt.Size)
    assert e.sample((3,)).shape == te.sample((3,)).shape
    x, tx = value_of(case, mt), value_of(case, torch)
    same_outcome(lambda: e.log_prob(x), lambda: te.log_prob(tx))
    same_outcome(e.entropy, te.entropy)
    assert e._validate_args == d._validate_args


def test_expand_refuses_an_impossible_shape():
    with pytest.raises(RuntimeError):
        D.Normal(mt.zeros(3), 1.0).expand((2,))


# --------------------------------------------------------------------------- validation

def _message(fn):
    """The ValueError's message, with microtensor's module names spelled as torch's."""
    with pytest.raises(ValueError) as info:
        fn()
    return str(info.value).replace("microtensor.", "torch.")


@pytest.mark.parametrize("make", [
    lambda lib, dists: dists.Normal(lib.tensor([0.0, 1.0]), lib.tensor([1.0, -1.0])),
    lambda lib, dists: dists.Normal(lib.tensor([math.nan]), 1.0),
    lambda lib, dists: dists.Bernoulli(probs=lib.tensor([0.5, 1.5])),
    lambda lib, dists: dists.Categorical(probs=lib.tensor([[0.5, -0.5]])),
    lambda lib, dists: dists.Uniform(lib.tensor([1.0]), lib.tensor([0.0])),
], ids=["scale", "loc_nan", "probs", "simplex", "low_high"])
def test_invalid_parameters_raise_value_error(make):
    expected = _message(lambda: make(torch, TD))
    got = _message(lambda: make(mt, D))
    head = lambda m: m.split(" of distribution")[0]  # noqa: E731
    assert head(got) == head(expected)
    constraint = expected.split("to satisfy the constraint ")[1].split(", but found")[0]
    assert f"to satisfy the constraint {constraint}, but found invalid values" in got


def test_invalid_parameters_pass_without_validation():
    d = D.Normal(mt.tensor([0.0]), mt.tensor([-1.0]), validate_args=False)
    assert d.scale.item() == -1.0
    D.Distribution.set_default_validate_args(False)
    try:
        assert D.Normal(0.0, -1.0).scale.item() == -1.0
        D.Normal(0.0, -1.0, validate_args=True).__class__  # noqa: B018
    except ValueError:
        pass
    else:
        raise AssertionError("validate_args=True must still validate")
    finally:
        D.Distribution.set_default_validate_args(True)
    with pytest.raises(ValueError):
        D.Normal(0.0, -1.0)
    with pytest.raises(ValueError):
        D.Distribution.set_default_validate_args("yes")


@pytest.mark.parametrize("cls, kwargs", [("Bernoulli", {}), ("Categorical", {}),
                                         ("Bernoulli", dict(probs=0.5, logits=0.0))])
def test_probs_or_logits_but_not_both(cls, kwargs):
    kwargs = {k: (torch.tensor([v]), mt.tensor([v])) for k, v in kwargs.items()}
    expected = _message(lambda: getattr(TD, cls)(**{k: v[0] for k, v in kwargs.items()}))
    assert _message(lambda: getattr(D, cls)(**{k: v[1] for k, v in kwargs.items()})) == expected


def test_categorical_refuses_a_scalar_parameter():
    assert (_message(lambda: D.Categorical(probs=mt.tensor(1.0)))
            == _message(lambda: TD.Categorical(probs=torch.tensor(1.0))))
    assert (_message(lambda: D.Categorical(logits=mt.tensor(1.0)))
            == _message(lambda: TD.Categorical(logits=torch.tensor(1.0))))


@pytest.mark.parametrize("case, bad", [
    ("categorical_probs", [[4, 0]]), ("categorical_probs", [[0.5, 1.0]]),
    ("bernoulli_probs", [[0.0, 2.0, 1.0]]), ("uniform", [[0.0, 50.0, 0.0]]),
    ("normal", [[math.nan, 0.0, 0.0]])], ids=str)
def test_values_outside_the_support_raise_value_error(case, bad):
    d, _ = build(case, mt)
    t, _ = build(case, torch)
    expected = _message(lambda: t.log_prob(torch.tensor(bad)))
    got = _message(lambda: d.log_prob(mt.tensor(bad)))
    assert got.split(" of the distribution")[0] == expected.split(" of the distribution")[0]


def test_value_shape_errors():
    d, t = D.Normal(mt.zeros(3), 1.0), TD.Normal(torch.zeros(3), 1.0)
    got = _message(lambda: d.log_prob(mt.zeros(2)))
    assert got.startswith("Value is not broadcastable with batch_shape+event_shape: ")
    assert got.endswith("torch.Size([2]) vs torch.Size([3]).")
    assert _message(lambda: d.log_prob(0.5)) == _message(lambda: t.log_prob(0.5))
    d.log_prob(mt.zeros(4, 1))   # broadcasts


def test_support_and_arg_constraints():
    assert repr(D.Normal.support) == "Real()" and repr(D.Bernoulli.support) == "Boolean()"
    assert constraints.is_dependent(D.Uniform.support)
    assert D.Uniform.support.event_dim == 0 and not D.Uniform.support.is_discrete
    assert D.Categorical.support.is_discrete
    d = D.Categorical(logits=mt.zeros(5))
    assert repr(d.support) == repr(TD.Categorical(logits=torch.zeros(5)).support)
    assert D.Categorical.arg_constraints["logits"].event_dim == 1
    u = D.Uniform(0.0, 1.0)
    assert repr(u.arg_constraints) == repr(TD.Uniform(0.0, 1.0).arg_constraints)
    assert repr(d) == "Categorical(logits: microtensor.Size([5]))"


# --------------------------------------------------------------------------- constraints

@pytest.mark.parametrize("name, value", [
    ("real", [0.0, math.nan, math.inf]), ("positive", [0.0, 1.0, -1.0]),
    ("nonnegative", [0.0, -1e-9, 2.0]), ("unit_interval", [0.0, 1.0, 1.1]),
    ("boolean", [0.0, 1.0, 0.5]), ("nonnegative_integer", [0.0, 3.0, 1.5, -1.0]),
    ("positive_integer", [0.0, 3.0]), ("simplex", [[0.2, 0.8], [0.5, 0.6], [-0.5, 1.5]]),
    ("real_vector", [[0.0, math.nan], [1.0, 2.0]]), ("one_hot", [[0.0, 1.0], [1.0, 1.0]]),
    ("lower_cholesky", [[[1.0, 0.0], [2.0, 3.0]], [[1.0, 1.0], [0.0, 1.0]],
                        [[1.0, 0.0], [0.0, -1.0]]]),
    ("lower_triangular", [[[1.0, 0.0], [2.0, 3.0]], [[1.0, 1.0], [0.0, 1.0]]]),
    ("positive_definite", [[[2.0, 1.0], [1.0, 2.0]], [[1.0, 2.0], [2.0, 1.0]]]),
    ("positive_semidefinite", [[[1.0, 1.0], [1.0, 1.0]], [[1.0, 2.0], [2.0, 1.0]]]),
    ("symmetric", [[[1.0, 2.0], [2.0, 1.0]], [[1.0, 2.0], [0.0, 1.0]]]),
    ("square", [[[1.0, 2.0], [2.0, 1.0]]]),
])
def test_constraints_check_as_torch(name, value):
    ours, theirs = getattr(constraints, name), getattr(TD.constraints, name)
    assert repr(ours) == repr(theirs)
    assert ours.event_dim == theirs.event_dim and ours.is_discrete == theirs.is_discrete
    got = ours.check(mt.tensor(value, dtype=mt.float64))
    assert got.tolist() == theirs.check(torch.tensor(value, dtype=torch.float64)).tolist()


def test_parameterised_constraints():
    for ours, theirs in [(constraints.interval(0.0, 2.0), TD.constraints.interval(0.0, 2.0)),
                         (constraints.half_open_interval(0, 2),
                          TD.constraints.half_open_interval(0, 2)),
                         (constraints.integer_interval(0, 3),
                          TD.constraints.integer_interval(0, 3)),
                         (constraints.greater_than(1.0), TD.constraints.greater_than(1.0)),
                         (constraints.greater_than_eq(1.0), TD.constraints.greater_than_eq(1.0)),
                         (constraints.less_than(1.0), TD.constraints.less_than(1.0)),
                         (constraints.independent(constraints.positive, 1),
                          TD.constraints.independent(TD.constraints.positive, 1))]:
        assert repr(ours) == repr(theirs)
        value = [[0.0, 1.0, 2.0], [1.5, 2.5, 3.0]]
        assert (ours.check(mt.tensor(value)).tolist()
                == theirs.check(torch.tensor(value)).tolist())
    with pytest.raises(ValueError, match="Expected value.dim"):
        constraints.independent(constraints.real, 2).check(mt.zeros(3))
    with pytest.raises(ValueError, match="dependent"):
        constraints.dependent.check(mt.zeros(1))
    with pytest.raises(NotImplementedError, match="is_discrete"):
        constraints.dependent.is_discrete  # noqa: B018
    assert constraints.dependent(is_discrete=True, event_dim=1).event_dim == 1


# --------------------------------------------------------------------------- sampling

def _check_mean_and_variance(samples, mean, variance, n):
    """Sample mean within 5 standard errors, sample variance within 5 of its own
    (asymptotic, with the fourth moment estimated from the samples)."""
    samples = samples.to(mt.float64).numpy()
    mean, variance = np.asarray(mean), np.asarray(variance)
    assert np.all(np.abs(samples.mean(0) - mean) < 5 * np.sqrt(variance / n) + 1e-12)
    m4 = ((samples - samples.mean(0)) ** 4).mean(0)
    var_se = np.sqrt(np.maximum(m4 - variance ** 2, 0) / n)
    assert np.all(np.abs(samples.var(0) - variance) < 5 * var_se + 1e-12)


@pytest.mark.parametrize("case", ["normal", "bernoulli_probs", "uniform", "normal_scalar"])
def test_sample_moments(case):
    mt.manual_seed(0)
    d, _ = build(case, mt)
    n = 20000
    samples = d.sample((n,))
    _check_mean_and_variance(samples, d.mean.numpy(), d.variance.numpy(), n)
    if d.has_rsample:
        _check_mean_and_variance(d.rsample((n,)).detach(), d.mean.numpy(),
                                 d.variance.numpy(), n)


def test_categorical_sample_frequencies():
    mt.manual_seed(0)
    probs = _simplex(2, 4)
    n = 20000
    samples = D.Categorical(probs=mt.tensor(probs)).sample((n,)).numpy()
    assert samples.dtype == np.int64
    for b in range(2):
        freq = np.bincount(samples[:, b], minlength=4) / n
        assert np.all(np.abs(freq - probs[b]) < 5 * np.sqrt(probs[b] * (1 - probs[b]) / n))


def test_sampling_is_reproducible_and_outside_autograd():
    loc = mt.tensor([0.0, 1.0], requires_grad=True)
    d = D.Normal(loc, 1.0)
    mt.manual_seed(7)
    a = d.sample((3,))
    mt.manual_seed(7)
    b = d.sample((3,))
    assert mt.equal(a, b) and not a.requires_grad
    assert d.rsample((3,)).requires_grad


# --------------------------------------------------------------------------- rsample gradients

def test_normal_rsample_gradients_match_torch_with_the_same_noise(monkeypatch):
    mt.manual_seed(3)
    loc, scale = _real(3), _pos(3)
    d = D.Normal(mt.tensor(loc, requires_grad=True), mt.tensor(scale, requires_grad=True))
    x = d.rsample((4,))
    eps = ((x - d.loc) / d.scale).detach().numpy()
    monkeypatch.setattr(TD.normal, "_standard_normal",
                        lambda shape, dtype, device: torch.tensor(eps, dtype=dtype))
    t = TD.Normal(torch.tensor(loc, requires_grad=True), torch.tensor(scale, requires_grad=True))
    tx = t.rsample((4,))
    assert_close(x, tx)
    (x ** 3).sum().backward()
    (tx ** 3).sum().backward()
    assert_close(d.loc.grad, t.loc.grad)
    assert_close(d.scale.grad, t.scale.grad)


def test_uniform_rsample_gradients_match_torch_with_the_same_noise(monkeypatch):
    mt.manual_seed(3)
    low, high = _real(3), _real(3) + 3
    d = D.Uniform(mt.tensor(low, requires_grad=True), mt.tensor(high, requires_grad=True))
    x = d.rsample((4,))
    u = ((x - d.low) / (d.high - d.low)).detach().numpy()
    real_rand = torch.rand
    monkeypatch.setattr(torch, "rand", lambda shape, dtype=None, device=None:
                        torch.tensor(u, dtype=dtype) if tuple(shape) == u.shape
                        else real_rand(shape, dtype=dtype, device=device))
    t = TD.Uniform(torch.tensor(low, requires_grad=True), torch.tensor(high, requires_grad=True))
    tx = t.rsample((4,))
    assert_close(x, tx)
    mt.sin(x).sum().backward()
    torch.sin(tx).sum().backward()
    assert_close(d.low.grad, t.low.grad)
    assert_close(d.high.grad, t.high.grad)


# --------------------------------------------------------------------------- KL

KL_PAIRS = [("normal", "normal"), ("bernoulli_probs", "bernoulli_probs"),
            ("bernoulli_logits", "bernoulli_logits"), ("categorical_probs", "categorical_logits"),
            ("uniform", "uniform"), ("uniform", "normal"), ("normal", "uniform")]


def _shifted(case, lib, delta, requires_grad):
    """The distribution of ``case`` with its real/positive parameters moved a little, so
    that p and q differ."""
    cls_name, params, _ = CASES[case]
    tensor = mt.tensor if lib is mt else torch.tensor
    leaves = {}
    for k, v in params.items():
        v = np.asarray(v, dtype=np.float64)
        if k in ("loc", "logits", "high"):
            v = v + delta
        elif k in ("scale",):
            v = v * (1 + delta)
        elif k == "probs" and cls_name == "Bernoulli":
            v = np.clip(v + delta / 4, 0.05, 0.95)
        leaves[k] = tensor(v, requires_grad=requires_grad)
    dists = D if lib is mt else TD
    return getattr(dists, cls_name)(**leaves), leaves


@pytest.mark.parametrize("p_case, q_case", KL_PAIRS, ids=str)
def test_kl_divergence_and_its_gradients_match_torch(p_case, q_case):
    p, p_leaves = _shifted(p_case, mt, 0.0, True)
    q, q_leaves = _shifted(q_case, mt, 0.3, True)
    tp, tp_leaves = _shifted(p_case, torch, 0.0, True)
    tq, tq_leaves = _shifted(q_case, torch, 0.3, True)
    kl, tkl = D.kl_divergence(p, q), TD.kl_divergence(tp, tq)
    assert_close(kl, tkl)
    if np.isfinite(tkl.detach().numpy()).all():
        kl.sum().backward()
        tkl.sum().backward()
        for ours, theirs in ((p_leaves, tp_leaves), (q_leaves, tq_leaves)):
            for name in ours:
                assert_close(ours[name].grad, theirs[name].grad)


def test_kl_broadcasts_batch_shapes():
    # torch's Bernoulli pair fails here (its masked writes do not broadcast); ours broadcasts
    p, q = D.Bernoulli(logits=mt.tensor(_real(3))), D.Bernoulli(probs=mt.tensor(_unit(2, 3)))
    assert_close(D.kl_divergence(p, q), D.kl_divergence(p.expand((2, 3)), q))


def test_kl_edge_values_match_torch():
    for probs_p, probs_q in [([0.0, 1.0, 0.5], [0.5, 0.5, 0.0]), ([0.2, 0.0, 1.0], [0.0, 1.0, 1.0])]:
        got = D.kl_divergence(D.Bernoulli(mt.tensor(probs_p)), D.Bernoulli(mt.tensor(probs_q)))
        expected = TD.kl_divergence(TD.Bernoulli(torch.tensor(probs_p)),
                                    TD.Bernoulli(torch.tensor(probs_q)))
        assert_close(got, expected)
    p, q = [[0.5, 0.5, 0.0], [0.0, 1.0, 0.0]], [[0.5, 0.0, 0.5], [0.2, 0.8, 0.0]]
    assert_close(D.kl_divergence(D.Categorical(mt.tensor(p)), D.Categorical(mt.tensor(q))),
                 TD.kl_divergence(TD.Categorical(torch.tensor(p)), TD.Categorical(torch.tensor(q))))
    got = D.kl_divergence(D.Uniform(mt.tensor([0.0, 0.0]), mt.tensor([1.0, 1.0])),
                          D.Uniform(mt.tensor([-1.0, 0.5]), mt.tensor([2.0, 2.0])))
    assert got[1].item() == math.inf and got[0].item() == pytest.approx(math.log(3.0))


def test_kl_dispatch_and_register_kl():
    with pytest.raises(NotImplementedError, match="No KL\\(p \\|\\| q\\) is implemented for "
                                                  "p type Bernoulli and q type Normal"):
        D.kl_divergence(D.Bernoulli(0.5), D.Normal(0.0, 1.0))

    class MyNormal(D.Normal):
        pass

    p, q = MyNormal(0.0, 1.0), D.Normal(1.0, 2.0)
    assert_close(D.kl_divergence(p, q), D.kl_divergence(D.Normal(0.0, 1.0), q))
    try:
        @D.register_kl(MyNormal, D.Normal)
        def _kl_mine(p, q):
            return mt.tensor(-1.0)

        assert D.kl_divergence(p, q).item() == -1.0   # the more specific pair wins
    finally:
        from microtensor.distributions import kl
        del kl._KL_REGISTRY[MyNormal, D.Normal]
        kl._KL_MEMOIZE.clear()
    with pytest.raises(TypeError, match="Expected type_p to be a Distribution subclass"):
        D.register_kl(int, D.Normal)


# --------------------------------------------------------------------------- vmap

def _no_fallback():
    context = warnings.catch_warnings()
    context.__enter__()
    warnings.filterwarnings("error", message="Batching rule not implemented")
    return context


def test_vmap_grad_of_normal_log_prob_matches_a_loop():
    locs, scales, xs = mt.tensor(_real(5, 3)), mt.tensor(_pos(5, 3)), mt.tensor(_real(5, 3))

    def loss(loc, scale, x):
        return D.Normal(loc, scale).log_prob(x).sum()

    context = _no_fallback()
    try:
        g_loc, g_scale = mt.vmap(mt.func.grad(loss, argnums=(0, 1)))(locs, scales, xs)
    finally:
        context.__exit__(None, None, None)
    for i in range(5):
        e_loc, e_scale = mt.func.grad(loss, argnums=(0, 1))(locs[i], scales[i], xs[i])
        assert_close(g_loc[i], e_loc)
        assert_close(g_scale[i], e_scale)


def test_vmap_grad_of_categorical_log_prob_matches_a_loop():
    logits, actions = mt.tensor(_real(6, 4)), mt.tensor(RNG.integers(0, 4, (6,)))

    def loss(logits, action):
        d = D.Categorical(logits=logits)
        return d.log_prob(action) + 0.1 * d.entropy()

    context = _no_fallback()
    try:
        got = mt.vmap(mt.func.grad(loss))(logits, actions)
    finally:
        context.__exit__(None, None, None)
    for i in range(6):
        assert_close(got[i], mt.func.grad(loss)(logits[i], actions[i]))


def test_validation_under_vmap_checks_every_sample():
    scales = mt.tensor([1.0, -1.0, 2.0])
    with pytest.raises(ValueError, match="scale"):
        mt.vmap(lambda s: D.Normal(0.0, s).log_prob(mt.tensor(0.0)))(scales)
    got = mt.vmap(lambda s: D.Normal(0.0, s).log_prob(mt.tensor(0.0)))(scales.abs())
    assert_close(got, TD.Normal(0.0, torch.tensor([1.0, 1.0, 2.0])).log_prob(torch.tensor(0.0)))
