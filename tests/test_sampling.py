"""``poisson`` and ``binomial``: their draws' distribution, reproducibility, dtypes,
errors and gradients against PyTorch's, and their vmap rule (every randomness mode,
nested levels, never the per-sample loop)."""
import numpy as np
import pytest

import microtensor as mt

from test_toplevel_more import needs_torch, outcome, torch


def test_poisson_moments():
    rates = mt.tensor([0.0, 0.5, 3.0, 40.0, 1e4], dtype=mt.float64)
    draws = mt.poisson(rates.expand(20000, 5))
    mean, var = draws.mean(0), draws.var(0)
    assert mt.allclose(mean, rates, rtol=0.05, atol=0.02)
    assert mt.allclose(var, rates, rtol=0.1, atol=0.02)
    assert mt.equal(draws, draws.round()) and (draws[:, 0] == 0).all()


def test_poisson_huge_rate_stays_near_its_mean():
    draws = mt.poisson(mt.full((1000,), 1e20, dtype=mt.float64))
    assert ((draws - 1e20).abs() < 1e12).all()   # ten standard deviations


def test_binomial_moments_and_bounds():
    count = mt.tensor([0.0, 1.0, 7.9, 30.0])      # floor: 7 trials
    prob = mt.tensor([0.5, 0.3, 0.5, 0.9])
    draws = mt.binomial(count.expand(20000, 4), prob.expand(20000, 4))
    n = count.floor()
    assert mt.allclose(draws.mean(0), n * prob, rtol=0.05, atol=0.02)
    assert mt.allclose(draws.var(0), n * prob * (1 - prob), rtol=0.1, atol=0.02)
    assert ((draws >= 0) & (draws <= n)).all()
    edges = mt.binomial(mt.tensor([4.0, 4.0, 4.0]), mt.tensor([0.0, 1.0, 1.5]))
    assert edges.tolist() == [0.0, 4.0, 4.0]


def test_reproducible_with_a_seed_or_generator():
    rates = mt.full((50,), 4.0)
    mt.manual_seed(3)
    first = mt.poisson(rates)
    mt.manual_seed(3)
    assert mt.equal(mt.poisson(rates), first)
    g1, g2 = mt.Generator().manual_seed(9), mt.Generator().manual_seed(9)
    assert mt.equal(mt.binomial(rates, rates / 8, generator=g1),
                    mt.binomial(rates, rates / 8, generator=g2))


@needs_torch
@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16", "float16"])
def test_dtype_and_layout_as_torch(dtype):
    for lib in (mt, torch):
        rates = lib.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=getattr(lib, dtype)).t()
        out = lib.poisson(rates)
        assert out.dtype == rates.dtype and tuple(out.shape) == (2, 2)
    ours = outcome(lambda: mt.binomial(mt.ones(2, dtype=getattr(mt, dtype)),
                                       mt.ones(2, dtype=getattr(mt, dtype))).dtype)
    theirs = outcome(lambda: torch.binomial(torch.ones(2, dtype=getattr(torch, dtype)),
                                            torch.ones(2, dtype=getattr(torch, dtype))).dtype)
    assert ours[0] == theirs[0] and (ours[0] == "ok" or ours[1] == theirs[1])


ERROR_CASES = [
    ("poisson", lambda lib: lib.poisson(lib.tensor([-1.0]))),
    ("poisson", lambda lib: lib.poisson(lib.tensor([float("nan")]))),
    ("poisson", lambda lib: lib.poisson(lib.tensor([1, 2]))),
    ("binomial", lambda lib: lib.binomial(lib.tensor([1]), lib.tensor([0.5]))),
    ("binomial", lambda lib: lib.binomial(lib.tensor([1.0]), lib.tensor([1]))),
    ("binomial", lambda lib: lib.binomial(lib.tensor([1.0]),
                                          lib.tensor([0.5], dtype=lib.float64))),
    ("binomial", lambda lib: lib.binomial(lib.tensor([1.0, 2.0]), lib.tensor([.1, .2, .3]))),
]


@needs_torch
@pytest.mark.parametrize("case", range(len(ERROR_CASES)))
def test_errors_as_torch(case):
    _, call = ERROR_CASES[case]
    ours, theirs = outcome(lambda: call(mt)), outcome(lambda: call(torch))
    assert ours[0] == theirs[0] != "ok"
    if "size of tensor" not in theirs[1]:
        assert ours[1] == theirs[1]


@needs_torch
def test_names_and_signatures_as_torch():
    assert not hasattr(mt.Tensor, "poisson") and not hasattr(torch.Tensor, "poisson")
    assert not hasattr(mt.Tensor, "binomial") and not hasattr(torch.Tensor, "binomial")
    assert mt.ops.REGISTRY["poisson"].params == ("input", "generator")
    assert mt.ops.REGISTRY["binomial"].params == ("count", "prob", "generator")


@needs_torch
def test_poisson_gradient_is_zero_as_torch():
    for lib in (mt, torch):
        rates = lib.tensor([1.0, 5.0], requires_grad=True)
        out = lib.poisson(rates)
        assert out.grad_fn.name() == "PoissonBackward0"
        (out * 3).sum().backward()
        assert rates.grad.tolist() == [0.0, 0.0]


def test_binomial_is_not_differentiable():
    count = mt.tensor([3.0], requires_grad=True)
    out = mt.binomial(count, mt.tensor([0.5]))
    with pytest.raises(RuntimeError):
        out.sum().backward()


# --------------------------------------------------------------------------- vmap

@pytest.fixture
def no_loop(monkeypatch):
    """Fail the test if vmap takes its per-sample loop."""
    from microtensor.vmap import fallback as module

    def refuse(op, *args, **kwargs):
        raise AssertionError(f"{op.name} took vmap's per-sample loop")
    monkeypatch.setattr(module, "fallback", refuse)
    from microtensor.vmap import rules
    monkeypatch.setattr(rules, "fallback", refuse)


CALLS = {
    "batched rates": (lambda x: mt.poisson(x), lambda x: torch.poisson(x)),
    "shared rates": (lambda x: mt.poisson(mt.full((4,), 30.0)) + 0 * x,
                     lambda x: torch.poisson(torch.full((4,), 30.0)) + 0 * x),
    "binomial": (lambda x: mt.binomial(x.floor(), mt.full((4,), 0.5)),
                 lambda x: torch.binomial(x.floor(), torch.full((4,), 0.5))),
}


@needs_torch
@pytest.mark.parametrize("randomness", ["error", "same", "different"])
@pytest.mark.parametrize("call", list(CALLS))
def test_vmap_randomness_as_torch(no_loop, randomness, call):
    """What each randomness mode does: an error, one draw shared by the samples (refused
    for batched parameters) or a draw per sample."""
    x = np.random.default_rng(0).uniform(20, 40, (3, 4))
    results = []
    for lib, fn in ((mt, CALLS[call][0]), (torch, CALLS[call][1])):
        vmap = mt.vmap if lib is mt else torch.func.vmap

        def run():
            out = vmap(fn, randomness=randomness)(lib.tensor(x))
            return tuple(out.shape), bool((out[0] == out[1]).all())
        results.append(outcome(run))
    assert results[0] == results[1]


def test_vmap_nested_levels(no_loop):
    rates = mt.full((3, 4, 5), 20.0)
    different = mt.vmap(mt.vmap(mt.poisson, randomness="different"),
                        randomness="different")(rates)
    assert different.shape == (3, 4, 5)
    assert not (different[0] == different[1]).all() and \
        not (different[:, 0] == different[:, 1]).all()
    inner_same = mt.vmap(mt.vmap(lambda t: mt.poisson(mt.full((5,), 20.0)) + t,
                                 randomness="same"), randomness="different")(mt.zeros(3, 4))
    assert (inner_same[:, 0] == inner_same[:, 1]).all()
    assert not (inner_same[0] == inner_same[1]).all()
    # rates batched at the outer level only: the inner level still draws per sample
    outer_rates = mt.vmap(lambda r: mt.vmap(lambda t: mt.poisson(r) + t,
                                            randomness="different")(mt.zeros(4)),
                          randomness="different")(mt.full((3, 5), 20.0))
    assert outer_rates.shape == (3, 4, 5)
    assert not (outer_rates[:, 0] == outer_rates[:, 1]).all()


def test_vmap_broadcasts_per_sample(no_loop):
    count = mt.tensor([[10.0], [20.0], [30.0]])            # per sample: shape (1,)
    prob = mt.tensor([0.0, 1.0, 1.0, 0.0])                 # unbatched: shape (4,)
    out = mt.vmap(lambda c: mt.binomial(c, prob), randomness="different")(count)
    assert out.tolist() == [[0.0, 10.0, 10.0, 0.0], [0.0, 20.0, 20.0, 0.0],
                            [0.0, 30.0, 30.0, 0.0]]
