"""``nn.DataParallel`` (PyTorch's ``nn.parallel``): runs the wrapped module on its inputs.

With no accelerator PyTorch's ``DataParallel`` calls the module as it is, and so does this
one; with the CUDA backend the module moves to the first of ``device_ids`` and runs there
on the whole batch (no split across several GPUs: the same results, one device's speed).
The module is the ``module`` child, so the state_dict keys carry the ``module.`` prefix,
as PyTorch's.

``DistributedDataParallel`` wraps a module the same way once a process group is
initialised (``microtensor.distributed``: one process, so each gradient is already the
average over the ranks and nothing is exchanged); ``no_sync()`` and ``join()`` are
contexts that change nothing.
"""
import contextlib

from microtensor.nn.modules import Module

__all__ = ["DataParallel", "DistributedDataParallel"]


class DataParallel(Module):
    def __init__(self, module, device_ids=None, output_device=None, dim=0):
        super().__init__()
        from microtensor import cuda
        from microtensor._C.tensor import device
        if not cuda.is_available():
            self.module = module
            self.device_ids = []
            return
        if device_ids is None:
            device_ids = list(range(cuda.device_count()))
        self.dim = dim
        self.module = module
        self.device_ids = [d.index if isinstance(d, device) else int(d) for d in device_ids]
        self.output_device = self.device_ids[0] if output_device is None else output_device
        self.src_device_obj = device("cuda", self.device_ids[0])
        self.module.to(self.src_device_obj)

    def forward(self, *inputs, **kwargs):
        if not self.device_ids:
            return self.module(*inputs, **kwargs)
        for t in list(self.module.parameters()) + list(self.module.buffers()):
            if t.device != self.src_device_obj:
                raise RuntimeError(f"module must have its parameters and buffers on device "
                                   f"{self.src_device_obj} (device_ids[0]) but found one of "
                                   f"them on device: {t.device}")
        return self.module(*[x.to(self.src_device_obj) if hasattr(x, "to") else x
                             for x in inputs], **kwargs)


class DistributedDataParallel(Module):
    def __init__(self, module, device_ids=None, output_device=None, dim=0,
                 broadcast_buffers=None, init_sync=True, process_group=None,
                 bucket_cap_mb=None, find_unused_parameters=False, check_reduction=False,
                 gradient_as_bucket_view=False, static_graph=False,
                 delay_all_reduce_named_params=None, param_to_hook_all_reduce=None,
                 mixed_precision=None, device_mesh=None, skip_all_reduce_unused_params=False,
                 bucket_cap_mb_list=None, batched_grad_copy=False, forward_sync_buffers=None):
        super().__init__()
        from microtensor import distributed
        self.process_group = distributed._require_group(process_group)
        self.module = module
        self.device_ids = device_ids
        self.dim = dim
        self.find_unused_parameters = find_unused_parameters
        self.static_graph = static_graph

    def forward(self, *inputs, **kwargs):
        return self.module(*inputs, **kwargs)

    @contextlib.contextmanager
    def no_sync(self):
        yield

    @contextlib.contextmanager
    def join(self, divide_by_initial_world_size=True, enable=True,
             throw_on_early_termination=False):
        yield

    def register_comm_hook(self, state, hook):
        """Accepted: with one process there is no communication for ``hook`` to do."""
