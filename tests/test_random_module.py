"""``microtensor.random``: the same functions as the top-level seeding and state ones, and
``fork_rng`` restoring the generator's state; signatures against torch's."""
import inspect

import pytest

import microtensor as mt

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (optional "
                                                       "test oracle)")

NAMES = ["set_rng_state", "get_rng_state", "manual_seed", "seed", "initial_seed", "fork_rng"]


def test_functions_are_the_top_level_ones():
    for name in NAMES[:-1]:
        assert getattr(mt.random, name) is getattr(mt, name)
    assert set(NAMES) <= set(mt.random.__all__)


@needs_torch
@pytest.mark.parametrize("name", NAMES)
def test_signatures_match_torch(name):
    ours = inspect.signature(getattr(mt.random, name))
    theirs = inspect.signature(getattr(torch.random, name))
    assert list(ours.parameters) == list(theirs.parameters)
    assert [p.default for p in ours.parameters.values()] == \
        [p.default for p in theirs.parameters.values()]


def test_fork_rng_restores_the_state():
    mt.random.manual_seed(5)
    with mt.random.fork_rng():
        inside = mt.rand(4)
        mt.manual_seed(123)          # reseeding inside is undone too
        mt.rand(3)
    after = mt.rand(4)
    assert mt.equal(inside, after)
    assert mt.random.initial_seed() == 5


def test_fork_rng_restores_on_an_exception():
    mt.manual_seed(1)
    expected = mt.rand(3)
    mt.manual_seed(1)
    with pytest.raises(ValueError):
        with mt.random.fork_rng(devices=iter([])):
            mt.rand(10)
            raise ValueError("boom")
    assert mt.equal(mt.rand(3), expected)


def test_fork_rng_disabled_forks_nothing():
    mt.manual_seed(2)
    with mt.random.fork_rng(enabled=False):
        first = mt.rand(3)
    assert not mt.equal(mt.rand(3), first)


@needs_torch
def test_fork_rng_behaves_as_torch():
    """The numbers drawn after a fork are the ones drawn inside it, in both libraries."""
    for lib in (mt, torch):
        lib.manual_seed(0)
        with lib.random.fork_rng(devices=[]):
            inside = lib.rand(3)
        assert lib.equal(lib.rand(3), inside)
