"""Map-style and iterable datasets, and the ways to combine and split them."""
import bisect
import itertools
import math
import warnings
from typing import Generic, TypeVar

T_co = TypeVar("T_co", covariant=True)


class Dataset(Generic[T_co]):
    """A map-style dataset: ``dataset[i]`` is sample ``i``; most also define ``__len__``.

    Subclasses may define ``__getitems__(indices)`` to fetch a whole batch at once; the
    ``DataLoader`` then calls it instead of ``__getitem__`` once per index.
    """

    def __getitem__(self, index):
        raise NotImplementedError("Subclasses of Dataset should implement __getitem__.")

    def __add__(self, other):
        return ConcatDataset([self, other])


class IterableDataset(Dataset[T_co]):
    """A stream of samples: subclasses define ``__iter__`` (and ``__len__`` if they can)."""

    def __add__(self, other):
        return ChainDataset([self, other])

    def __iter__(self):
        raise NotImplementedError("Subclasses of IterableDataset should implement __iter__.")


class TensorDataset(Dataset):
    """Sample ``i`` is the tuple of the ``i``-th rows of the given tensors."""

    def __init__(self, *tensors):
        if any(tensors[0].size(0) != t.size(0) for t in tensors):
            raise AssertionError("Size mismatch between tensors")
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self):
        return self.tensors[0].size(0)


class ConcatDataset(Dataset):
    """The samples of several map-style datasets, one after the other."""

    @staticmethod
    def cumsum(datasets):
        return list(itertools.accumulate(len(d) for d in datasets))

    def __init__(self, datasets):
        self.datasets = list(datasets)
        if not self.datasets:
            raise AssertionError("datasets should not be an empty iterable")
        if any(isinstance(d, IterableDataset) for d in self.datasets):
            raise AssertionError("ConcatDataset does not support IterableDataset")
        self.cumulative_sizes = self.cumsum(self.datasets)

    def __len__(self):
        return self.cumulative_sizes[-1]

    def __getitem__(self, idx):
        if idx < 0:
            if -idx > len(self):
                raise ValueError("absolute value of index should not exceed dataset length")
            idx += len(self)
        which = bisect.bisect_right(self.cumulative_sizes, idx)
        start = self.cumulative_sizes[which - 1] if which else 0
        return self.datasets[which][idx - start]


class ChainDataset(IterableDataset):
    """The samples of several iterable datasets, one stream after the other."""

    def __init__(self, datasets):
        self.datasets = datasets

    def _checked(self):
        for d in self.datasets:
            if not isinstance(d, IterableDataset):
                raise AssertionError("ChainDataset only supports IterableDataset")
            yield d

    def __iter__(self):
        for d in self._checked():
            yield from d

    def __len__(self):
        return sum(len(d) for d in self._checked())


class Subset(Dataset[T_co]):
    """The samples of ``dataset`` at ``indices``, in that order."""

    def __init__(self, dataset, indices):
        # the DataLoader fetches batches through __getitems__, which would bypass an
        # overridden __getitem__ without this check
        if type(self).__getitem__ is not Subset.__getitem__ \
                and type(self).__getitems__ is Subset.__getitems__:
            raise NotImplementedError(
                f"{type(self).__name__} overrides __getitem__ but not __getitems__. When "
                "subclassing Subset and overriding __getitem__, you must also override "
                "__getitems__ to ensure DataLoader works correctly with your custom logic.")
        self.dataset = dataset
        self.indices = indices

    def __getitem__(self, idx):
        if isinstance(idx, list):
            return self.dataset[[self.indices[i] for i in idx]]
        return self.dataset[self.indices[idx]]

    def __getitems__(self, indices):
        if callable(getattr(self.dataset, "__getitems__", None)):
            return self.dataset.__getitems__([self.indices[i] for i in indices])
        return [self.dataset[self.indices[i]] for i in indices]

    def __len__(self):
        return len(self.indices)


def _lengths_from_fractions(fractions, n):
    """PyTorch's rule: ``floor(n * fraction)`` each, then the remainder handed out one by
    one, round-robin from the first split."""
    lengths = []
    for i, frac in enumerate(fractions):
        if frac < 0 or frac > 1:
            raise ValueError(f"Fraction at index {i} is not between 0 and 1")
        lengths.append(math.floor(n * frac))
    for i in range(n - sum(lengths)):
        lengths[i % len(lengths)] += 1
    for i, length in enumerate(lengths):
        if length == 0:
            warnings.warn(f"Length of split at index {i} is 0. "
                          "This might result in an empty dataset.", stacklevel=3)
    return lengths


def random_split(dataset, lengths, generator=None):
    """Split ``dataset`` into non-overlapping random ``Subset``s of the given lengths, or of
    the given fractions of its length when they sum to 1."""
    from microtensor.ops.factory import default_generator, randperm
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        lengths = _lengths_from_fractions(lengths, len(dataset))
    if sum(lengths) != len(dataset):
        raise ValueError("Sum of input lengths does not equal the length of the input "
                         "dataset!")
    indices = randperm(sum(lengths), generator=generator or default_generator).tolist()
    return [Subset(dataset, indices[end - length:end])
            for end, length in zip(itertools.accumulate(lengths), lengths)]


class StackDataset(Dataset[T_co]):
    """Sample ``i`` is the tuple (datasets given by position) or the dict (given by name)
    of the datasets' samples ``i``; they must be equally long."""

    def __init__(self, *args, **kwargs):
        if args and kwargs:
            raise ValueError("Supported either ``tuple``- (via ``args``) or``dict``- (via "
                             "``kwargs``) like input/output, but both types are given.")
        if not (args or kwargs):
            raise ValueError("At least one dataset should be passed")
        datasets = list(args or kwargs.values())
        self._length = len(datasets[0])
        if any(self._length != len(dataset) for dataset in datasets):
            raise ValueError("Size mismatch between datasets")
        self.datasets = args or kwargs

    def __getitem__(self, index):
        if isinstance(self.datasets, dict):
            return {k: dataset[index] for k, dataset in self.datasets.items()}
        return tuple(dataset[index] for dataset in self.datasets)

    def __getitems__(self, indices):
        # each dataset fetches the batch at once when it can
        named = isinstance(self.datasets, dict)
        keys = list(self.datasets) if named else range(len(self.datasets))
        columns = [_batch_of(self.datasets[k], indices) for k in keys]
        if named:
            return [dict(zip(keys, row)) for row in zip(*columns)]
        return [tuple(row) for row in zip(*columns)]

    def __len__(self):
        return self._length


def _batch_of(dataset, indices):
    """``dataset``'s samples at ``indices``, through its ``__getitems__`` when it has one."""
    if callable(getattr(dataset, "__getitems__", None)):
        items = dataset.__getitems__(indices)
        if len(items) != len(indices):
            raise ValueError("Nested dataset's output size mismatch. Expected "
                             f"{len(indices)}, got {len(items)}")
        return items
    return [dataset[i] for i in indices]
