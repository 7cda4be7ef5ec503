"""mt.utils.data, the rest of torch.utils.data: StackDataset (against PyTorch, through the
DataLoader), WeightedRandomSampler (the draws' statistics and determinism: the random
streams differ from PyTorch's) and DistributedSampler (index sequences against PyTorch
where they involve no random draws, the shuffled ones by their structure)."""
import collections

import numpy as np
import pytest

import microtensor as mt
from microtensor.utils import data
from test_data import batches, needs_torch, structure, tdata, torch  # the shared oracle


class Squares(data.Dataset):
    """A dataset with __getitems__ that records the batches asked of it."""

    def __init__(self, n, lib=mt):
        self.n, self.lib, self.asked = n, lib, []

    def __getitem__(self, i):
        return self.lib.tensor(float(i * i))

    def __getitems__(self, indices):
        self.asked.append(list(indices))
        return [self[i] for i in indices]

    def __len__(self):
        return self.n


def stack(lib, named):
    xs = lib.arange(12.0).reshape(6, 2)
    labels = list("abcdef")
    if named:
        return lib.utils.data.StackDataset(x=lib.utils.data.TensorDataset(xs), label=labels)
    return lib.utils.data.StackDataset(lib.utils.data.TensorDataset(xs), labels)


@needs_torch
@pytest.mark.parametrize("named", [False, True], ids=["tuple", "dict"])
def test_stack_dataset_matches_torch(named):
    ours, theirs = stack(mt, named), stack(torch, named)
    assert len(ours) == len(theirs) == 6
    assert structure(ours[4]) == structure(theirs[4])
    assert structure(ours.__getitems__([5, 0, 2])) == structure(theirs.__getitems__([5, 0, 2]))
    loaders = [lib.utils.data.DataLoader(d, batch_size=4) for lib, d in ((mt, ours),
                                                                         (torch, theirs))]
    assert batches(loaders[0]) == batches(loaders[1])


def test_stack_dataset_fetches_batches_through_getitems():
    squares = Squares(5)
    stacked = data.StackDataset(squares, list(range(5)))
    assert [(s.item(), i) for s, i in stacked.__getitems__([3, 1])] == [(9.0, 3), (1.0, 1)]
    assert squares.asked == [[3, 1]]
    named = data.StackDataset(sq=squares, i=list(range(5)))
    assert [(s["sq"].item(), s["i"]) for s in named.__getitems__([2, 4])] == [(4.0, 2),
                                                                             (16.0, 4)]


class Short(Squares):
    def __getitems__(self, indices):
        return [self[i] for i in indices[1:]]


@pytest.mark.parametrize("lib", [mt, pytest.param(torch, marks=needs_torch)],
                         ids=["microtensor", "torch"])
def test_stack_dataset_checks_as_torch(lib):
    sd = lib.utils.data
    cases = [
        (lambda: sd.StackDataset(), "At least one dataset should be passed"),
        (lambda: sd.StackDataset([1, 2], [1]), "Size mismatch between datasets"),
        (lambda: sd.StackDataset(a=[1, 2], b=[1]), "Size mismatch between datasets"),
        (lambda: sd.StackDataset([1], b=[2]), "Supported either ``tuple``- (via ``args``) "
                                              "or``dict``- (via ``kwargs``) like "
                                              "input/output, but both types are given."),
        (lambda: sd.StackDataset(Short(3, lib), [1, 2, 3]).__getitems__([0, 1]),
         "Nested dataset's output size mismatch. Expected 2, got 1"),
    ]
    for make, message in cases:
        with pytest.raises(ValueError) as info:
            make()
        assert str(info.value) == message


# ------------------------------------------------------------ WeightedRandomSampler

def test_weighted_sampler_draws_in_proportion_to_the_weights():
    weights = [1.0, 0.0, 3.0, 6.0]
    n = 20000
    draws = list(data.WeightedRandomSampler(weights, n, generator=mt.Generator().manual_seed(0)))
    counts = np.bincount(draws, minlength=4)
    expected = n * np.array(weights) / sum(weights)
    assert counts[1] == 0
    # each count within 5 standard deviations of its binomial mean
    spread = np.sqrt(expected * (1 - np.array(weights) / sum(weights)))
    assert np.all(np.abs(counts - expected) <= 5 * spread + 1e-9), counts
    assert len(data.WeightedRandomSampler(weights, n)) == n


def test_weighted_sampler_is_deterministic_with_a_generator():
    def draws(seed):
        return list(data.WeightedRandomSampler(mt.tensor([0.2, 0.5, 0.3]), 50,
                                               generator=mt.Generator().manual_seed(seed)))
    assert draws(3) == draws(3)
    assert draws(3) != draws(4)
    sampler = data.WeightedRandomSampler([1.0, 2.0, 3.0], 8)
    mt.manual_seed(7)
    first = list(sampler)
    mt.manual_seed(7)
    assert list(sampler) == first           # the global generator, when none is given
    assert list(sampler) != first           # the next pass continues the global stream


def test_weighted_sampler_without_replacement_draws_distinct_indices():
    weights = np.arange(1.0, 11.0)
    g = mt.Generator().manual_seed(1)
    for _ in range(20):
        draws = list(data.WeightedRandomSampler(weights, 6, replacement=False, generator=g))
        assert len(set(draws)) == 6 and all(0 <= i < 10 for i in draws)
    everything = list(data.WeightedRandomSampler(weights, 10, replacement=False, generator=g))
    assert sorted(everything) == list(range(10))


@needs_torch
def test_weighted_sampler_state_and_loader_as_torch():
    ours = data.WeightedRandomSampler([1, 2, 3], 4, replacement=False)
    theirs = tdata.WeightedRandomSampler([1, 2, 3], 4, replacement=False)
    assert ours.weights.dtype == mt.float64 and ours.weights.tolist() == theirs.weights.tolist()
    for sampler in (ours, theirs):
        with pytest.raises(RuntimeError, match="cannot sample n_sample > prob_dist.size\\(-1\\) "
                                               "samples without replacement"):
            list(sampler)
    loader = data.DataLoader(list(range(10)), batch_size=3,
                             sampler=data.WeightedRandomSampler([0.0] * 9 + [1.0], 7))
    assert [b.tolist() for b in loader] == [[9, 9, 9], [9, 9, 9], [9]]


@pytest.mark.parametrize("lib", [mt, pytest.param(torch, marks=needs_torch)],
                         ids=["microtensor", "torch"])
def test_weighted_sampler_checks_as_torch(lib):
    cls = lib.utils.data.WeightedRandomSampler
    cases = [
        (lambda: cls([1.0, 2.0], 0), "num_samples should be a positive integer value, but "
                                     "got num_samples=0"),
        (lambda: cls([1.0, 2.0], True), "num_samples should be a positive integer value, "
                                        "but got num_samples=True"),
        (lambda: cls([1.0, 2.0], 2.0), "num_samples should be a positive integer value, "
                                       "but got num_samples=2.0"),
        (lambda: cls([1.0, 2.0], 3, replacement=1), "replacement should be a boolean "
                                                    "value, but got replacement=1"),
        (lambda: cls([[1.0, 2.0]], 3), "weights should be a 1d sequence but given weights "
                                       "have shape (1, 2)"),
    ]
    for make, message in cases:
        with pytest.raises(ValueError) as info:
            make()
        assert str(info.value) == message


# ------------------------------------------------------------ DistributedSampler

@needs_torch
@pytest.mark.parametrize("n, replicas", [(10, 3), (9, 3), (2, 5), (7, 1), (11, 4)])
@pytest.mark.parametrize("drop_last", [False, True])
def test_distributed_sampler_in_order_matches_torch(n, replicas, drop_last):
    for rank in range(replicas):
        ours = data.DistributedSampler(range(n), replicas, rank, shuffle=False,
                                       drop_last=drop_last)
        theirs = tdata.DistributedSampler(range(n), replicas, rank, shuffle=False,
                                          drop_last=drop_last)
        assert list(ours) == list(theirs)
        assert len(ours) == len(theirs) and ours.total_size == theirs.total_size


@pytest.mark.parametrize("n, replicas", [(10, 3), (12, 4), (3, 5)])
@pytest.mark.parametrize("drop_last", [False, True])
def test_distributed_sampler_shuffles_one_permutation_across_replicas(n, replicas,
                                                                      drop_last):
    def shares(epoch, seed=0):
        out = []
        for rank in range(replicas):
            sampler = data.DistributedSampler(range(n), replicas, rank, seed=seed,
                                              drop_last=drop_last)
            sampler.set_epoch(epoch)
            out.append(list(sampler))
        return out
    first = shares(0)
    assert first == shares(0)                     # every replica, every pass: one order
    if n - n % replicas > 1 or not drop_last:     # (3 among 5 with drop_last: nothing)
        assert first != shares(1) and first != shares(0, seed=5)
    assert len({len(share) for share in first}) == 1
    # interleaved back, the shares are a permutation of the dataset, padded from its start
    # (or cut to a multiple of the replica count)
    merged = [i for row in zip(*first) for i in row]
    if drop_last:
        assert len(set(merged)) == len(merged) == n - n % replicas
    else:
        order = merged[:n]
        assert sorted(order) == list(range(n))
        assert merged[n:] == (order * replicas)[:len(merged) - n]


def test_distributed_sampler_in_a_loader():
    sampler = data.DistributedSampler(list(range(8)), num_replicas=2, rank=1, shuffle=False)
    loader = data.DataLoader(list(range(8)), batch_size=2, sampler=sampler)
    assert [b.tolist() for b in loader] == [[1, 3], [5, 7]]


@pytest.mark.parametrize("lib", [mt, pytest.param(torch, marks=needs_torch)],
                         ids=["microtensor", "torch"])
def test_distributed_sampler_checks_as_torch(lib):
    cls = lib.utils.data.distributed.DistributedSampler
    no_group = ("Default process group has not been initialized, please make sure to call "
                "init_process_group.")
    cases = [
        (lambda: cls(range(4)), no_group),
        (lambda: cls(range(4), num_replicas=2), no_group),
        (lambda: cls(range(4), num_replicas=2, rank=2),
         "Invalid rank 2, rank should be in the interval [0, 1]"),
        (lambda: cls(range(4), num_replicas=2, rank=-1),
         "Invalid rank -1, rank should be in the interval [0, 1]"),
    ]
    for make, message in cases:
        with pytest.raises(ValueError) as info:
            make()
        assert str(info.value) == message


@needs_torch
def test_names_and_signatures_as_torch():
    import inspect
    for name in ("StackDataset", "WeightedRandomSampler", "DistributedSampler"):
        ours, theirs = getattr(data, name), getattr(tdata, name)
        assert inspect.signature(ours) == inspect.signature(theirs).replace(
            return_annotation=inspect.Signature.empty, parameters=[
                p.replace(annotation=inspect.Parameter.empty)
                for p in inspect.signature(theirs).parameters.values()]), name
    assert data.distributed.DistributedSampler is data.DistributedSampler
    assert collections.Counter(n for n in dir(data) if not n.startswith("_")) >= \
        collections.Counter(["StackDataset", "WeightedRandomSampler", "DistributedSampler"])


@needs_torch
def test_the_generic_classes_are_torch_s():
    """``class MySampler(Sampler[int])`` and the like, as PyTorch code writes them."""
    names = ["Sampler", "SequentialSampler", "RandomSampler", "BatchSampler", "Dataset",
             "IterableDataset", "TensorDataset", "Subset", "StackDataset",
             "WeightedRandomSampler", "DistributedSampler"]

    def subscriptable(module, name):
        try:
            getattr(module, name)[int]
        except TypeError:
            return False
        return True
    assert [subscriptable(data, n) for n in names] == [subscriptable(tdata, n) for n in names]

    class Reversed(data.Sampler[int]):
        def __init__(self, n):
            self.n = n

        def __iter__(self):
            return iter(range(self.n - 1, -1, -1))

        def __len__(self):
            return self.n
    loader = data.DataLoader(list(range(5)), sampler=Reversed(5), batch_size=2)
    assert [b.tolist() for b in loader] == [[4, 3], [2, 1], [0]]
