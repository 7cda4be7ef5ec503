"""``microtensor.distributed``: PyTorch's ``torch.distributed`` for one process.

microtensor has no communication backend, but training scripts written for
``torchrun`` call ``init_process_group`` and the collectives even when launched as a
single process.  Here a process group of world size 1 can be initialised (``backend``
"gloo" or None; any other world size raises), and every collective is what it computes
over one process: ``all_reduce`` leaves the tensor as it is (a sum, mean, max ... of
one contribution), ``all_gather`` copies the input into the one output slot,
``broadcast`` from rank 0 changes nothing.  Before ``init_process_group`` the calls
raise PyTorch's ValueError, as PyTorch's do.
"""
import enum
import os

from microtensor._C.tensor import TensorBase

__all__ = ["Backend", "ProcessGroup", "ReduceOp", "Work", "all_gather",
           "all_gather_into_tensor", "all_gather_object", "all_reduce", "all_to_all",
           "all_to_all_single", "barrier", "broadcast", "broadcast_object_list",
           "destroy_process_group", "gather", "gather_object", "get_backend",
           "get_global_rank", "get_node_local_rank", "get_process_group_ranks", "get_rank",
           "get_world_size", "group", "init_process_group", "is_available",
           "is_backend_available", "is_gloo_available", "is_initialized", "is_mpi_available",
           "is_nccl_available", "is_torchelastic_launched", "monitored_barrier", "new_group",
           "recv", "reduce", "reduce_scatter", "reduce_scatter_tensor", "scatter",
           "scatter_object_list", "send"]

_NOT_INITIALIZED = ("Default process group has not been initialized, please make sure to "
                    "call init_process_group.")


class Backend(str):
    """A backend's name, as PyTorch's ``dist.Backend("gloo")``; only "gloo" exists here."""
    UNDEFINED = "undefined"
    GLOO = "gloo"
    NCCL = "nccl"
    UCC = "ucc"
    MPI = "mpi"

    def __new__(cls, name):
        return super().__new__(cls, name.lower())


class ReduceOp(enum.Enum):
    SUM = 0
    AVG = 1
    PRODUCT = 2
    MIN = 3
    MAX = 4
    BAND = 5
    BOR = 6
    BXOR = 7
    PREMUL_SUM = 8
    UNUSED = 9


class ProcessGroup:
    """A group of ranks; here always the one process."""

    def __init__(self, backend):
        self._backend = backend

    def rank(self):
        return 0

    def size(self):
        return 1

    def name(self):
        return self._backend


class Work:
    """What an ``async_op=True`` collective returns: already complete."""

    def wait(self, timeout=None):
        return True

    def is_completed(self):
        return True

    def is_success(self):
        return True


class group:  # noqa: N801 - PyTorch's name
    WORLD = None      # the default group once ``init_process_group`` has run


_GROUP = group        # for the functions whose ``group`` parameter hides the class


def is_available():
    return True


def is_initialized():
    return _GROUP.WORLD is not None


def is_gloo_available():
    return True


def is_nccl_available():
    return False


def is_mpi_available():
    return False


def is_backend_available(backend):
    return Backend(backend) == Backend.GLOO


def is_torchelastic_launched():
    return os.environ.get("TORCHELASTIC_RUN_ID") is not None


def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1,
                       store=None, group_name="", pg_options=None, device_id=None):
    """The default group, of this one process: ``world_size`` (or the WORLD_SIZE variable
    ``torchrun`` sets) must be 1 and ``rank`` (or RANK) 0."""
    if is_initialized():
        raise ValueError("trying to initialize the default process group twice!")
    if backend is not None and Backend(backend) not in (Backend.GLOO, "cpu:gloo"):
        raise RuntimeError(f"microtensor's distributed package runs one process on the CPU: "
                           f"backend '{backend}' is not available (use 'gloo' or None)")
    world_size = int(os.environ.get("WORLD_SIZE", 1)) if world_size == -1 else world_size
    rank = int(os.environ.get("RANK", 0)) if rank == -1 else rank
    if world_size != 1 or rank != 0:
        raise RuntimeError(f"microtensor has no communication backend: a process group has "
                           f"one process (world_size 1, rank 0), not world_size {world_size}, "
                           f"rank {rank}")
    _GROUP.WORLD = ProcessGroup(Backend.GLOO)


def destroy_process_group(group=None):
    if (group or _GROUP.WORLD) is None:
        raise AssertionError("Process group cannot be None")
    _GROUP.WORLD = None


def _require_group(pg=None):
    if not is_initialized():
        raise ValueError(_NOT_INITIALIZED)
    return pg or _GROUP.WORLD


def new_group(ranks=None, timeout=None, backend=None, pg_options=None,
              use_local_synchronization=False, group_desc=None, device_id=None,
              sort_ranks=True):
    _require_group()
    if ranks is not None and sorted(ranks) != [0]:
        raise ValueError(f"Invalid rank in {list(ranks)}: the world has rank 0 only")
    return ProcessGroup(Backend.GLOO)


def get_rank(group=None):
    _require_group(group)
    return 0


def get_world_size(group=None):
    _require_group(group)
    return 1


def get_backend(group=None):
    return Backend(_require_group(group).name())


def get_global_rank(group, group_rank):
    _require_group(group)
    if group_rank != 0:
        raise ValueError(f"Group rank {group_rank} is not part of group {group}")
    return 0


def get_process_group_ranks(group):
    _require_group(group)
    return [0]


def get_node_local_rank(fallback_rank=None):
    if "LOCAL_RANK" in os.environ:
        return int(os.environ["LOCAL_RANK"])
    if fallback_rank is not None:
        return int(fallback_rank)
    raise RuntimeError("LOCAL_RANK is not in the environment. Consider passing fallback_rank "
                       "to allow `get_node_local_rank` to work, assuming you are not running "
                       "in a multi-device context and want the code to run locally instead.")


def _done(async_op):
    return Work() if async_op else None


def _check_rank(which, value):
    if value not in (None, 0):
        raise ValueError(f"Invalid {which} rank {value}: the group has rank 0 only")


def _check_tensor(tensor, name="tensor"):
    if not isinstance(tensor, TensorBase):
        raise TypeError(f"Invalid function argument. Expected parameter `{name}` of type "
                        f"torch.Tensor but got {type(tensor)} instead.")


def _one_slot(tensors, name):
    if len(tensors) != 1:
        raise ValueError(f"{name} must have one tensor per rank (1), got {len(tensors)}")
    return tensors[0]


def _copy_into(output, source):
    if output is not source:
        output.copy_(source)


# --------------------------------------------------------------------------- collectives
# Over one process, a reduction of one contribution is that contribution, a gather is a
# copy into the one slot and a broadcast from rank 0 leaves everything as it is.

def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    _require_group(group)
    _check_tensor(tensor)
    return _done(async_op)


def reduce(tensor, dst=None, op=ReduceOp.SUM, group=None, async_op=False, group_dst=None):
    _require_group(group)
    _check_tensor(tensor)
    _check_rank("dst", dst if group_dst is None else group_dst)
    return _done(async_op)


def broadcast(tensor, src=None, group=None, async_op=False, group_src=None):
    _require_group(group)
    _check_tensor(tensor)
    _check_rank("src", src if group_src is None else group_src)
    return _done(async_op)


def barrier(group=None, async_op=False, device_ids=None, timeout=None):
    _require_group(group)
    return _done(async_op)


def monitored_barrier(group=None, timeout=None, wait_all_ranks=False):
    _require_group(group)


def all_gather(tensor_list, tensor, group=None, async_op=False):
    _require_group(group)
    _check_tensor(tensor)
    _copy_into(_one_slot(tensor_list, "tensor_list"), tensor)
    return _done(async_op)


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    _require_group(group)
    _check_tensor(input_tensor, "input_tensor")
    if output_tensor.numel() != input_tensor.numel():
        raise ValueError(f"output tensor size must be equal to world_size times input tensor "
                         f"size: {output_tensor.numel()} != 1 * {input_tensor.numel()}")
    _copy_into(output_tensor, input_tensor.reshape(output_tensor.shape))
    return _done(async_op)


def gather(tensor, gather_list=None, dst=None, group=None, async_op=False, group_dst=None):
    _require_group(group)
    _check_tensor(tensor)
    _check_rank("dst", dst if group_dst is None else group_dst)
    if gather_list is not None:
        _copy_into(_one_slot(gather_list, "gather_list"), tensor)
    return _done(async_op)


def scatter(tensor, scatter_list=None, src=None, group=None, async_op=False, group_src=None):
    _require_group(group)
    _check_tensor(tensor)
    _check_rank("src", src if group_src is None else group_src)
    if scatter_list is not None:
        _copy_into(tensor, _one_slot(scatter_list, "scatter_list"))
    return _done(async_op)


def reduce_scatter(output, input_list, op=ReduceOp.SUM, group=None, async_op=False):
    _require_group(group)
    _copy_into(output, _one_slot(input_list, "input_list"))
    return _done(async_op)


def reduce_scatter_tensor(output, input, op=ReduceOp.SUM, group=None, async_op=False):
    _require_group(group)
    _copy_into(output, input.reshape(output.shape))
    return _done(async_op)


def all_to_all(output_tensor_list, input_tensor_list, group=None, async_op=False):
    _require_group(group)
    _copy_into(_one_slot(output_tensor_list, "output_tensor_list"),
               _one_slot(input_tensor_list, "input_tensor_list"))
    return _done(async_op)


def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None,
                      group=None, async_op=False):
    _require_group(group)
    _copy_into(output, input)
    return _done(async_op)


def send(tensor, dst=None, group=None, tag=0, group_dst=None):
    _require_group(group)
    raise ValueError("Invalid destination rank: should not be the same as the rank of the "
                     "current process (a process group of one cannot send)")


def recv(tensor, src=None, group=None, tag=0, group_src=None):
    _require_group(group)
    raise ValueError("Invalid source rank: should not be the same as the rank of the "
                     "current process (a process group of one cannot receive)")


def all_gather_object(object_list, obj, group=None):
    _require_group(group)
    object_list[0] = obj


def gather_object(obj, object_gather_list=None, dst=None, group=None, group_dst=None):
    _require_group(group)
    _check_rank("dst", dst if group_dst is None else group_dst)
    if object_gather_list is not None:
        object_gather_list[0] = obj


def broadcast_object_list(object_list, src=None, group=None, device=None, group_src=None):
    _require_group(group)
    _check_rank("src", src if group_src is None else group_src)


def scatter_object_list(scatter_object_output_list, scatter_object_input_list=None, src=None,
                        group=None, group_src=None):
    _require_group(group)
    _check_rank("src", src if group_src is None else group_src)
    scatter_object_output_list[0] = _one_slot(scatter_object_input_list,
                                              "scatter_object_input_list")
