"""``DataLoader``: iterates over a dataset in batches, in the calling process."""
import warnings

from microtensor.utils.data.collate import default_collate, default_convert
from microtensor.utils.data.dataset import IterableDataset
from microtensor.utils.data.sampler import (BatchSampler, RandomSampler, SequentialSampler,
                                            _InfiniteConstantSampler)


def get_worker_info():
    """``None``: microtensor loads data in the calling process, never in workers."""
    return None


class DataLoader:
    """Batches of ``dataset`` samples, as ``torch.utils.data.DataLoader``.

    The order comes from ``sampler`` (``RandomSampler(generator=generator)`` when
    ``shuffle``, else ``SequentialSampler``), grouped by ``batch_size`` (or given whole by
    ``batch_sampler``) and merged by ``collate_fn`` (``default_collate``; with
    ``batch_size=None`` each sample goes through ``default_convert`` alone).  Loading
    always runs in the calling process: ``num_workers > 0`` warns and loads there too.
    """

    _frozen_after_init = ("batch_size", "batch_sampler", "sampler", "drop_last", "dataset",
                          "persistent_workers")

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None,
                 num_workers=0, collate_fn=None, pin_memory=False, drop_last=False,
                 timeout=0, worker_init_fn=None, multiprocessing_context=None,
                 generator=None, *, prefetch_factor=None, persistent_workers=False,
                 pin_memory_device="", in_order=True):
        self._check_worker_options(num_workers, timeout, prefetch_factor, persistent_workers,
                                   multiprocessing_context)
        iterable = isinstance(dataset, IterableDataset)
        if iterable:
            for name, value in (("shuffle", shuffle), ("sampler", sampler),
                                ("batch_sampler", batch_sampler)):
                if value not in (None, False):
                    raise ValueError("DataLoader with IterableDataset: expected unspecified "
                                     f"{name} option, but got {name}={value}")
        shuffle = bool(shuffle)
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with "
                                 "batch_size, shuffle, sampler, and drop_last")
            batch_size, drop_last = None, False
        elif batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is "
                             "mutually exclusive with drop_last")
        if sampler is None:
            if iterable:
                sampler = _InfiniteConstantSampler()
            elif shuffle:
                sampler = RandomSampler(dataset, generator=generator)
            else:
                sampler = SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)

        self.dataset = dataset
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.num_workers = num_workers
        self.collate_fn = collate_fn or (default_collate if batch_sampler is not None
                                         else default_convert)
        self.pin_memory = pin_memory
        self.pin_memory_device = pin_memory_device
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.generator = generator
        self.prefetch_factor = prefetch_factor
        self.persistent_workers = persistent_workers
        self.in_order = in_order
        self._initialized = True

    @staticmethod
    def _check_worker_options(num_workers, timeout, prefetch_factor, persistent_workers,
                              multiprocessing_context):
        if num_workers < 0:
            raise ValueError("num_workers option should be non-negative; use num_workers=0 "
                             "to disable multiprocessing.")
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError("prefetch_factor option could only be specified in "
                             "multiprocessing.let num_workers > 0 to enable multiprocessing, "
                             "otherwise set prefetch_factor to None.")
        if prefetch_factor is not None and prefetch_factor < 0:
            raise ValueError("prefetch_factor option should be non-negative")
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")
        if multiprocessing_context is not None and num_workers == 0:
            raise ValueError("multiprocessing_context can only be used with multi-process "
                             f"loading (num_workers > 0), but got num_workers={num_workers}")
        if num_workers > 0:
            # code written for PyTorch often asks for workers; it runs unchanged here
            warnings.warn(f"microtensor does not support multiprocessing data loading: "
                          f"num_workers={num_workers} loads in the main process (as "
                          f"num_workers=0) and worker_init_fn is not called", stacklevel=3)

    def __setattr__(self, name, value):
        if getattr(self, "_initialized", False) and name in self._frozen_after_init:
            raise ValueError(f"{name} attribute should not be set after "
                             f"{type(self).__name__} is initialized")
        super().__setattr__(name, value)

    @property
    def _auto_collation(self):
        return self.batch_sampler is not None

    @property
    def _index_sampler(self):
        return self.batch_sampler if self._auto_collation else self.sampler

    def __iter__(self):
        return _DataLoaderIter(self)

    def __len__(self):
        if isinstance(self.dataset, IterableDataset):
            length = len(self.dataset)
            if self.batch_size is not None:
                length = length // self.batch_size if self.drop_last \
                    else -(-length // self.batch_size)
            return length
        return len(self._index_sampler)


class _DataLoaderIter:
    """One pass over a ``DataLoader``: indices from its sampler, samples fetched from the
    dataset, batches merged by its ``collate_fn``."""

    def __init__(self, loader):
        self._loader = loader
        self._indices = iter(loader._index_sampler)
        self._iterable = isinstance(loader.dataset, IterableDataset)
        self._samples = iter(loader.dataset) if self._iterable else None
        self._ended = False

    def __iter__(self):
        return self

    def __len__(self):
        return len(self._loader)

    def __next__(self):
        index = next(self._indices)
        data = self._fetch_iterable(index) if self._iterable else self._fetch_map(index)
        return self._loader.collate_fn(data)

    def _fetch_map(self, index):
        dataset = self._loader.dataset
        if not self._loader._auto_collation:
            return dataset[index]
        if getattr(dataset, "__getitems__", None):
            return dataset.__getitems__(index)
        return [dataset[i] for i in index]

    def _fetch_iterable(self, index):
        if self._ended:
            raise StopIteration
        if not self._loader._auto_collation:
            return next(self._samples)
        batch = []
        for _ in index:
            try:
                batch.append(next(self._samples))
            except StopIteration:
                self._ended = True
                break
        if not batch or (self._loader.drop_last and len(batch) < len(index)):
            raise StopIteration
        return batch
