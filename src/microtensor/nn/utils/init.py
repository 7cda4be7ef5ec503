"""``skip_init``, as ``torch.nn.utils.init``: a module built without initializing its
parameters and buffers."""
import inspect

__all__ = ["skip_init"]


def skip_init(module_cls, *args, **kwargs):
    """``module_cls(*args, **kwargs)`` with uninitialized parameters and buffers: built on
    the meta device (which computes nothing), then given empty tensors on ``device``
    (default CPU).  ``module_cls`` must take a ``device`` argument."""
    from microtensor.nn.modules import Module
    if not issubclass(module_cls, Module):
        raise RuntimeError(f"Expected a Module; got {module_cls}")
    if "device" not in inspect.signature(module_cls).parameters:
        raise RuntimeError("Module must support a 'device' arg to skip initialization")
    final_device = kwargs.pop("device", "cpu")
    kwargs["device"] = "meta"
    return module_cls(*args, **kwargs).to_empty(device=final_device)
