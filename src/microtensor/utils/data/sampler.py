"""Samplers: iterables over dataset indices (or over lists of indices, for batches)."""
import itertools
from typing import Generic, TypeVar

T_co = TypeVar("T_co", covariant=True)


class Sampler(Generic[T_co]):
    """Base class of the index samplers: subclasses define ``__iter__`` (and ``__len__``)."""

    def __init__(self, data_source=None):
        pass

    def __iter__(self):
        raise NotImplementedError


class SequentialSampler(Sampler):
    """``0, 1, ..., len(data_source) - 1``."""

    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self):
        return len(self.data_source)


class RandomSampler(Sampler):
    """Random indices: a fresh permutation per pass (``num_samples`` beyond the length
    continues with further permutations), or independent draws with ``replacement``."""

    def __init__(self, data_source, replacement=False, num_samples=None, generator=None):
        self.data_source = data_source
        self.replacement = replacement
        self._num_samples = num_samples
        self.generator = generator
        if not isinstance(self.replacement, bool):
            raise TypeError("replacement should be a boolean value, but got "
                            f"replacement={self.replacement}")
        if not isinstance(self.num_samples, int) or self.num_samples <= 0:
            raise ValueError("num_samples should be a positive integer value, but got "
                             f"num_samples={self.num_samples}")

    @property
    def num_samples(self):
        # the dataset may grow or shrink between passes
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self):
        from microtensor.ops.factory import Generator, default_generator, randint, randperm
        n = len(self.data_source)
        generator = self.generator
        if generator is None:
            # as PyTorch: a generator seeded from the global one, so that manual_seed
            # makes the order reproducible while each pass differs
            seed = int(randint(0, 2 ** 62, (), generator=default_generator).item())
            generator = Generator().manual_seed(seed)
        if self.replacement:
            for count in [32] * (self.num_samples // 32) + [self.num_samples % 32]:
                yield from randint(0, n, (count,), generator=generator).tolist()
        else:
            for _ in range(self.num_samples // n):
                yield from randperm(n, generator=generator).tolist()
            yield from randperm(n, generator=generator).tolist()[:self.num_samples % n]

    def __len__(self):
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """The given ``indices`` in a random order, without replacement."""

    def __init__(self, indices, generator=None):
        self.indices = indices
        self.generator = generator

    def __iter__(self):
        from microtensor.ops.factory import randperm
        for i in randperm(len(self.indices), generator=self.generator).tolist():
            yield self.indices[i]

    def __len__(self):
        return len(self.indices)


class BatchSampler(Sampler):
    """Groups the indices of ``sampler`` into lists of ``batch_size`` (the last one shorter
    unless ``drop_last``)."""

    def __init__(self, sampler, batch_size, drop_last):
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
            raise ValueError("batch_size should be a positive integer value, but got "
                             f"batch_size={batch_size}")
        if not isinstance(drop_last, bool):
            raise ValueError("drop_last should be a boolean value, but got "
                             f"drop_last={drop_last}")
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last = drop_last

    def __iter__(self):
        indices = iter(self.sampler)
        while batch := list(itertools.islice(indices, self.batch_size)):
            if self.drop_last and len(batch) < self.batch_size:
                return
            yield batch

    def __len__(self):
        if self.drop_last:
            return len(self.sampler) // self.batch_size
        return -(-len(self.sampler) // self.batch_size)


class _InfiniteConstantSampler(Sampler):
    """``None`` forever: the index "sampler" of an iterable dataset, which ignores indices."""

    def __iter__(self):
        return itertools.repeat(None)


class WeightedRandomSampler(Sampler):
    """``num_samples`` indices drawn with probabilities proportional to ``weights``
    (float64), with replacement unless ``replacement=False``."""

    def __init__(self, weights, num_samples, replacement=True, generator=None):
        import microtensor as mt
        if not isinstance(num_samples, int) or isinstance(num_samples, bool) or \
                num_samples <= 0:
            raise ValueError("num_samples should be a positive integer value, but got "
                             f"num_samples={num_samples}")
        if not isinstance(replacement, bool):
            raise ValueError("replacement should be a boolean value, but got "
                             f"replacement={replacement}")
        weights = mt.as_tensor(weights, dtype=mt.double)
        if weights.dim() != 1:
            raise ValueError("weights should be a 1d sequence but given weights have shape "
                             f"{tuple(weights.shape)}")
        self.weights = weights
        self.num_samples = num_samples
        self.replacement = replacement
        self.generator = generator

    def __iter__(self):
        yield from self.weights.multinomial(self.num_samples, self.replacement,
                                            generator=self.generator).tolist()

    def __len__(self):
        return self.num_samples
