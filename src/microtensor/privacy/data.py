"""Poisson sampling for DP-SGD: ``UniformWithReplacementSampler`` draws each batch by
including every sample independently with probability ``sample_rate``, and
``DPDataLoader`` batches with it, as Opacus's.  Batches vary in size and may be empty;
an empty batch keeps the structure of the others with a batch dimension of 0."""
import copy
import warnings

import microtensor as mt
from microtensor._tensor import Tensor
from microtensor.utils.data import DataLoader, IterableDataset, default_collate


class UniformWithReplacementSampler:
    """Batches of indices for Poisson sampling: each of ``num_samples`` indices is in a
    batch with probability ``sample_rate``, independently of the others and of the other
    batches; ``steps`` batches (default ``int(1 / sample_rate)``) make an epoch."""

    def __init__(self, *, num_samples, sample_rate, generator=None, steps=None):
        if num_samples <= 0:
            raise ValueError("num_samples should be a positive integer value, but got "
                             f"num_samples={num_samples}")
        if not 0 < sample_rate <= 1:
            raise ValueError(f"sample_rate must be in (0, 1], but got {sample_rate}")
        self.num_samples = num_samples
        self.sample_rate = sample_rate
        self.generator = generator
        self.steps = int(1 / sample_rate) if steps is None else steps

    def __len__(self):
        return self.steps

    def __iter__(self):
        for _ in range(self.steps):
            mask = mt.rand(self.num_samples, generator=self.generator) < self.sample_rate
            yield mask.nonzero().reshape(-1).tolist()


class _CollateWithEmpty:
    """``collate_fn`` for non-empty batches; for an empty one, the structure of the first
    non-empty batch with a batch dimension of 0 (or, before any, zero-length tensors shaped
    like the dataset's first sample)."""

    def __init__(self, collate_fn, first_sample):
        self.collate_fn = collate_fn
        self.first_sample = first_sample
        self.first_batch = None

    def __call__(self, batch):
        if batch:
            output = self.collate_fn(batch)
            if self.first_batch is None:
                self.first_batch = copy.deepcopy(output)
            return output
        if self.first_batch is None:
            return [_empty_like((x if isinstance(x, Tensor) else mt.tensor(x))[None])
                    for x in self.first_sample]
        return _empty_like(self.first_batch)


def _empty_like(batch):
    if isinstance(batch, Tensor):
        return batch.new_empty((0,) + tuple(batch.shape[1:]))
    if isinstance(batch, dict):
        return {k: _empty_like(v) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(_empty_like(v) for v in batch)
    # anything else would carry data from a real batch into the empty one
    raise TypeError(f"Unsupported batch type: {type(batch).__name__}: an empty Poisson "
                    "batch can be made only of tensors, dicts, lists and tuples")


class DPDataLoader(DataLoader):
    """A ``DataLoader`` over ``dataset`` whose batches come from Poisson sampling at
    ``sample_rate`` (``UniformWithReplacementSampler``), empty batches included.
    ``from_data_loader`` makes one with the average batch size of another loader."""

    def __init__(self, dataset, *, sample_rate, collate_fn=None, drop_last=False,
                 generator=None, **kwargs):
        if isinstance(dataset, IterableDataset):
            raise ValueError("Uniform sampling is not supported for IterableDataset")
        if drop_last:
            warnings.warn("Ignoring drop_last as it is not compatible with DPDataLoader.",
                          stacklevel=2)
        batch_sampler = UniformWithReplacementSampler(num_samples=len(dataset),
                                                      sample_rate=sample_rate,
                                                      generator=generator)
        collate = _CollateWithEmpty(collate_fn or default_collate, dataset[0])
        self.sample_rate = sample_rate
        super().__init__(dataset, batch_sampler=batch_sampler, collate_fn=collate,
                         generator=generator, **kwargs)

    @classmethod
    def from_data_loader(cls, data_loader, *, generator=None):
        """A ``DPDataLoader`` over ``data_loader``'s dataset, with its collate function,
        at ``sample_rate = 1 / len(data_loader)`` (the same number of batches per epoch,
        of the same average size)."""
        return cls(data_loader.dataset, sample_rate=1 / len(data_loader),
                   collate_fn=data_loader.collate_fn, drop_last=data_loader.drop_last,
                   generator=generator or data_loader.generator,
                   num_workers=data_loader.num_workers, pin_memory=data_loader.pin_memory,
                   timeout=data_loader.timeout, worker_init_fn=data_loader.worker_init_fn)
