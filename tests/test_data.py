"""mt.utils.data: datasets, samplers, DataLoader and default_collate, against PyTorch."""
import collections
import warnings

import numpy as np
import pytest

import microtensor as mt
from microtensor.utils import data

try:
    import torch
    import torch.utils.data as tdata
except ImportError:
    torch = tdata = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (optional "
                                                       "test oracle)")

Point = collections.namedtuple("Point", "x y")


def structure(batch):
    """A batch's types, shapes and dtypes, comparable between the two libraries."""
    if isinstance(batch, (mt.Tensor,) + ((torch.Tensor,) if torch else ())):
        return ("tensor", tuple(batch.shape), str(batch.dtype).split(".")[-1], batch.tolist())
    if isinstance(batch, dict):
        return (type(batch).__name__, {k: structure(v) for k, v in batch.items()})
    if isinstance(batch, (list, tuple)):
        return (type(batch).__name__, [structure(v) for v in batch])
    return (type(batch).__name__, batch)


def both(make):
    """``make(lib)`` for microtensor and for torch (``lib`` is the module)."""
    return make(mt), make(torch)


def batches(loader):
    return [structure(b) for b in loader]


# ---------------------------------------------------------------- default_collate

COLLATE_CASES = {
    "ints": lambda lib: [0, 1, 2],
    "bools": lambda lib: [True, False],
    "floats": lambda lib: [0.5, 1.0],
    "strings": lambda lib: ["a", "b"],
    "tensors": lambda lib: [lib.ones(2, 3), lib.zeros(2, 3)],
    "int32 tensors": lambda lib: [lib.arange(3, dtype=lib.int32)] * 2,
    "numpy arrays": lambda lib: [np.ones((2,), np.float32), np.zeros((2,), np.float32)],
    "numpy scalars": lambda lib: [np.int32(1), np.int32(4)],
    "numpy float64 scalars": lambda lib: [np.float64(1.5), np.float64(4)],
    "tuples": lambda lib: [(lib.ones(2), 1, 0.5), (lib.zeros(2), 2, 1.5)],
    "lists": lambda lib: [[1, 2], [3, 4]],
    "dicts": lambda lib: [{"a": lib.ones(2), "b": {"c": 1.0}}, {"a": lib.zeros(2),
                                                                "b": {"c": 2.0}}],
    "ordered dicts": lambda lib: [collections.OrderedDict(x=1)] * 3,
    "namedtuples": lambda lib: [Point(1, lib.ones(1)), Point(2, lib.zeros(1))],
}


@needs_torch
@pytest.mark.parametrize("case", list(COLLATE_CASES))
def test_default_collate_matches_torch(case):
    ours, theirs = both(lambda lib: (data if lib is mt else tdata).default_collate(
        COLLATE_CASES[case](lib)))
    assert structure(ours) == structure(theirs)
    assert type(ours).__name__ == type(theirs).__name__


@needs_torch
def test_default_convert_matches_torch():
    sample = lambda lib: {"a": np.arange(3), "b": (np.float32(2), "s"), "c": [np.ones(2)]}
    ours, theirs = data.default_convert(sample(mt)), tdata.default_convert(sample(torch))
    assert structure(ours) == structure(theirs)


def test_default_collate_refuses_what_it_cannot_batch():
    with pytest.raises(TypeError, match="batch must contain tensors, numpy arrays, numbers"):
        data.default_collate([object(), object()])
    with pytest.raises(TypeError, match="batch must contain"):
        data.default_collate([np.array(["a"]), np.array(["b"])])
    with pytest.raises(RuntimeError, match="each element in list of batch should be of equal"):
        data.default_collate([[1, 2], [3]])


# ---------------------------------------------------------------- loading order

def make_dataset(lib):
    return (data if lib is mt else tdata).TensorDataset(
        lib.arange(20.0).reshape(10, 2), lib.arange(10))


@needs_torch
@pytest.mark.parametrize("kwargs", [dict(), dict(batch_size=3),
                                    dict(batch_size=3, drop_last=True), dict(batch_size=None),
                                    dict(batch_size=4, drop_last=False)])
def test_sequential_loading_matches_torch(kwargs):
    ours, theirs = both(lambda lib: (data if lib is mt else tdata).DataLoader(
        make_dataset(lib), **kwargs))
    assert len(ours) == len(theirs)
    assert batches(ours) == batches(theirs)


@needs_torch
def test_loading_with_samplers_and_collate_fn_matches_torch():
    def loader(lib):
        d = data if lib is mt else tdata
        ds = d.ConcatDataset([make_dataset(lib), d.Subset(make_dataset(lib), [5, 1, 7])])
        sampler = d.BatchSampler(d.SequentialSampler(ds), 4, drop_last=False)
        return d.DataLoader(ds, batch_sampler=sampler, collate_fn=lambda b: [x for x, _ in b])
    ours, theirs = both(loader)
    assert len(ours) == len(theirs) == 4
    assert batches(ours) == batches(theirs)


@needs_torch
def test_iterable_dataset_batches_match_torch():
    def loader(lib, **kwargs):
        d = data if lib is mt else tdata

        class Stream(d.IterableDataset):
            def __init__(self, start, stop):
                self.range = range(start, stop)

            def __iter__(self):
                return iter({"i": i, "x": lib.full((2,), float(i))} for i in self.range)

            def __len__(self):
                return len(self.range)
        chained = Stream(0, 4) + Stream(4, 7)
        assert isinstance(chained, d.ChainDataset) and len(chained) == 7
        return d.DataLoader(chained, **kwargs)
    for kwargs in (dict(batch_size=3), dict(batch_size=3, drop_last=True),
                   dict(batch_size=None)):
        ours, theirs = loader(mt, **kwargs), loader(torch, **kwargs)
        assert len(ours) == len(theirs)
        assert batches(ours) == batches(theirs)


def test_shuffle_covers_each_index_once_and_follows_the_generator():
    ds = make_dataset(mt)
    order = lambda seed: [y for _, ys in data.DataLoader(
        ds, batch_size=3, shuffle=True, generator=mt.Generator().manual_seed(seed))
        for y in ys.tolist()]
    assert sorted(order(0)) == list(range(10))
    assert order(0) == order(0)
    assert order(0) != order(1)
    mt.manual_seed(3)   # without a generator: drawn from the global one, as PyTorch
    first = [y.item() for _, y in data.DataLoader(ds, shuffle=True)]
    mt.manual_seed(3)
    assert [y.item() for _, y in data.DataLoader(ds, shuffle=True)] == first
    assert sorted(first) == list(range(10))


def test_random_sampler_num_samples_and_replacement():
    without = list(data.RandomSampler(range(4), num_samples=10))
    assert len(without) == 10 and sorted(without[:4]) == sorted(without[4:8]) == [0, 1, 2, 3]
    drawn = list(data.RandomSampler(range(4), replacement=True, num_samples=70))
    assert len(drawn) == 70 and set(drawn) <= {0, 1, 2, 3}
    assert sorted(data.SubsetRandomSampler([5, 7, 9])) == [5, 7, 9]
    with pytest.raises(TypeError, match="replacement should be a boolean value"):
        data.RandomSampler(range(3), replacement=1)
    with pytest.raises(ValueError, match="num_samples should be a positive integer value"):
        data.RandomSampler(range(3), num_samples=0)


@needs_torch
def test_batch_sampler_matches_torch():
    for drop_last in (False, True):
        ours = data.BatchSampler(data.SequentialSampler(range(10)), 3, drop_last)
        theirs = tdata.BatchSampler(tdata.SequentialSampler(range(10)), 3, drop_last)
        assert list(ours) == list(theirs) and len(ours) == len(theirs)
    for bad, match in (((range(3), 0, False), "batch_size should be a positive integer"),
                       ((range(3), True, False), "batch_size should be a positive integer"),
                       ((range(3), 2, 1), "drop_last should be a boolean value")):
        with pytest.raises(ValueError, match=match):
            data.BatchSampler(*bad)


# ---------------------------------------------------------------- datasets

@needs_torch
@pytest.mark.parametrize("lengths", [[3, 7], [0.3, 0.3, 0.4], [0.5, 0.5], [0.34, 0.33, 0.33],
                                     [1 / 3] * 3, [0.1] * 10])
def test_random_split_lengths_match_torch(lengths):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # a zero-length split warns in both
        ours = data.random_split(range(10), lengths, generator=mt.Generator().manual_seed(0))
        theirs = tdata.random_split(range(10), lengths)
    assert [len(s) for s in ours] == [len(s) for s in theirs]
    assert sorted(i for s in ours for i in s) == list(range(10))


def test_random_split_checks_lengths():
    with pytest.raises(ValueError, match="Sum of input lengths does not equal"):
        data.random_split(range(10), [3, 3])
    with pytest.raises(ValueError, match="Fraction at index 1 is not between 0 and 1"):
        data.random_split(range(10), [0.5, 1.5, -1.0])
    with pytest.warns(UserWarning, match="Length of split at index 1 is 0"):
        data.random_split(range(2), [0.5, 0.0, 0.5])


def test_concat_subset_and_tensor_dataset():
    a, b = data.TensorDataset(mt.arange(3)), data.TensorDataset(mt.arange(10, 12))
    both_ = a + b
    assert isinstance(both_, data.ConcatDataset) and len(both_) == 5
    assert [both_[i][0].item() for i in range(-5, 5)] == [0, 1, 2, 10, 11] * 2
    with pytest.raises(ValueError, match="absolute value of index should not exceed"):
        both_[-6]
    with pytest.raises(AssertionError, match="datasets should not be an empty iterable"):
        data.ConcatDataset([])
    with pytest.raises(AssertionError, match="Size mismatch between tensors"):
        data.TensorDataset(mt.zeros(3), mt.zeros(4))
    with pytest.raises(AssertionError, match="ChainDataset only supports IterableDataset"):
        list(data.ChainDataset([a]))
    sub = data.Subset(both_, [4, 0])
    assert [x.item() for (x,) in sub] == [11, 0]
    with pytest.raises(NotImplementedError, match="Subclasses of Dataset should implement"):
        data.Dataset()[0]


def test_dataset_getitems_fetches_whole_batches():
    class Batched(data.Dataset):
        calls = []

        def __getitems__(self, indices):
            self.calls.append(list(indices))
            return [i * 10 for i in indices]

        def __len__(self):
            return 5
    loader = data.DataLoader(data.Subset(Batched(), [4, 3, 2, 1, 0]), batch_size=2)
    assert [b.tolist() for b in loader] == [[40, 30], [20, 10], [0]]
    assert Batched.calls == [[4, 3], [2, 1], [0]]


# ---------------------------------------------------------------- DataLoader options

def test_dataloader_option_checks():
    ds = make_dataset(mt)
    cases = [(dict(sampler=data.SequentialSampler(ds), shuffle=True), "mutually exclusive"),
             (dict(batch_sampler=data.BatchSampler(range(10), 2, False), batch_size=2),
              "batch_sampler option is mutually exclusive"),
             (dict(batch_size=None, drop_last=True), "disables auto-batching"),
             (dict(num_workers=-1), "num_workers option should be non-negative"),
             (dict(persistent_workers=True), "persistent_workers option needs num_workers"),
             (dict(prefetch_factor=2), "prefetch_factor option could only be specified"),
             (dict(multiprocessing_context="spawn"),
              "multiprocessing_context can only be used")]
    for kwargs, match in cases:
        with pytest.raises(ValueError, match=match):
            data.DataLoader(ds, **kwargs)

    class Stream(data.IterableDataset):
        def __iter__(self):
            return iter(range(3))
    with pytest.raises(ValueError, match="expected unspecified shuffle option"):
        data.DataLoader(Stream(), shuffle=True)
    loader = data.DataLoader(ds, batch_size=2)
    with pytest.raises(ValueError, match="batch_size attribute should not be set after"):
        loader.batch_size = 3
    loader.collate_fn = data.default_convert   # not frozen, as PyTorch


def test_workers_load_in_process_with_a_warning():
    ds = make_dataset(mt)
    with pytest.warns(UserWarning, match="does not support multiprocessing data loading"):
        loader = data.DataLoader(ds, batch_size=4, num_workers=2, persistent_workers=True)
    assert [y.tolist() for _, y in loader] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert data.get_worker_info() is None
