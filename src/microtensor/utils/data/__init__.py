"""Datasets, samplers and the ``DataLoader``, as ``torch.utils.data``."""
from microtensor.utils.data.collate import (collate, default_collate, default_collate_fn_map,
                                            default_convert)
from microtensor.utils.data.dataloader import DataLoader, get_worker_info
from microtensor.utils.data.dataset import (ChainDataset, ConcatDataset, Dataset,
                                            IterableDataset, Subset, TensorDataset,
                                            random_split)
from microtensor.utils.data import distributed  # noqa: F401  (the module, as in PyTorch)
from microtensor.utils.data.dataset import StackDataset
from microtensor.utils.data.distributed import DistributedSampler
from microtensor.utils.data.sampler import WeightedRandomSampler
from microtensor.utils.data.sampler import (BatchSampler, RandomSampler, Sampler,
                                            SequentialSampler, SubsetRandomSampler)

__all__ = ["BatchSampler", "ChainDataset", "ConcatDataset", "DataLoader", "Dataset",
           "IterableDataset", "RandomSampler", "Sampler", "SequentialSampler", "Subset",
           "SubsetRandomSampler", "TensorDataset", "collate", "default_collate",
           "default_collate_fn_map", "default_convert", "get_worker_info", "random_split"]
__all__ += ["StackDataset", "WeightedRandomSampler", "DistributedSampler"]
