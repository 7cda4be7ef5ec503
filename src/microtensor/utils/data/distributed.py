"""``DistributedSampler``: each of ``num_replicas`` processes reads its own share of a
dataset.  Without ``num_replicas`` and ``rank`` they are those of the default process
group (``microtensor.distributed``: one process), which must be initialised, as in
PyTorch."""
import math

from microtensor.utils.data.sampler import Sampler, T_co

__all__ = ["DistributedSampler"]

class DistributedSampler(Sampler[T_co]):
    """As ``torch.utils.data.distributed.DistributedSampler``: the indices (a permutation
    drawn from ``seed + epoch`` with ``shuffle``, else in order) padded by repeating
    from the start to a multiple of ``num_replicas`` (or cut to one with ``drop_last``);
    replica ``rank`` takes every ``num_replicas``-th from position ``rank``.  Call
    ``set_epoch`` before each epoch for a new order."""

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0,
                 drop_last=False):
        from microtensor import distributed
        if num_replicas is None:
            num_replicas = distributed.get_world_size()
        if rank is None:
            rank = distributed.get_rank()
        if rank >= num_replicas or rank < 0:
            raise ValueError(f"Invalid rank {rank}, rank should be in the interval "
                             f"[0, {num_replicas - 1}]")
        self.dataset = dataset
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self.drop_last = drop_last
        if drop_last and len(dataset) % num_replicas != 0:
            # the largest share every replica can have in full
            self.num_samples = math.ceil((len(dataset) - num_replicas) / num_replicas)
        else:
            self.num_samples = math.ceil(len(dataset) / num_replicas)
        self.total_size = self.num_samples * num_replicas
        self.shuffle = shuffle
        self.seed = seed

    def __iter__(self):
        from microtensor.ops.factory import Generator, randperm
        n = len(self.dataset)
        if self.shuffle:
            generator = Generator().manual_seed(self.seed + self.epoch)
            indices = randperm(n, generator=generator).tolist()
        else:
            indices = list(range(n))
        if self.drop_last:
            indices = indices[:self.total_size]
        else:
            padding = self.total_size - n
            indices += (indices * math.ceil(padding / n))[:padding] if padding > n \
                else indices[:padding]
        return iter(indices[self.rank:self.total_size:self.num_replicas])

    def __len__(self):
        return self.num_samples

    def set_epoch(self, epoch):
        """Sets the epoch that seeds the next shuffle (every replica must use the same)."""
        self.epoch = epoch
