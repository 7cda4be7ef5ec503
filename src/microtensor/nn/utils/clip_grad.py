"""Gradient clipping by total norm or by value, as ``torch.nn.utils.clip_grad``.
``foreach`` is accepted for compatibility and ignored: there is one code path."""
import types
import warnings

from microtensor._C.tensor import TensorBase
from microtensor.autograd.grad_mode import no_grad


def _tensor_list(tensors):
    return [tensors] if isinstance(tensors, TensorBase) else list(tensors)


def get_total_norm(tensors, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """The ``norm_type``-norm of all ``tensors`` as if concatenated into one vector (the
    norm of their norms)."""
    from microtensor.ops.factory import tensor as make_tensor
    import microtensor
    tensors = _tensor_list(tensors)
    norm_type = float(norm_type)
    if not tensors:
        return make_tensor(0.0)
    first_device = tensors[0].device
    with no_grad():
        norms = [t.norm(norm_type).to(first_device) for t in tensors]
        total = microtensor.stack(norms).norm(norm_type)
    if error_if_nonfinite and not bool(total.isfinite().item()):
        raise RuntimeError(f"The total norm of order {norm_type} for gradients from "
                           "`parameters` is non-finite, so it cannot be clipped. To disable "
                           "this error and scale the gradients by the non-finite norm anyway, "
                           "set `error_if_nonfinite=False`")
    return total


def clip_grads_with_norm_(parameters, max_norm, total_norm, foreach=None):
    """Scale the gradients of ``parameters`` by ``min(max_norm / (total_norm + 1e-6), 1)``."""
    grads = [p.grad for p in _tensor_list(parameters) if p.grad is not None]
    if not grads:
        return
    with no_grad():
        coef = (max_norm / (total_norm + 1e-6)).clamp(max=1.0)
        for g in grads:
            g.mul_(coef.to(g.device))


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False,
                    foreach=None):
    """Scale the gradients of ``parameters`` in place so that their total ``norm_type``-norm
    is at most ``max_norm``; returns the total norm before clipping."""
    is_generator = isinstance(parameters, types.GeneratorType)
    parameters = _tensor_list(parameters)
    if is_generator and not parameters:
        warnings.warn("`parameters` is an empty generator, no gradient clipping will occur.",
                      stacklevel=2)
    grads = [p.grad for p in parameters if p.grad is not None]
    total_norm = get_total_norm(grads, norm_type, error_if_nonfinite)
    clip_grads_with_norm_(parameters, max_norm, total_norm)
    return total_norm


def clip_grad_value_(parameters, clip_value, foreach=None):
    """Clamp the gradients of ``parameters`` in place to ``[-clip_value, clip_value]``."""
    clip_value = float(clip_value)
    with no_grad():
        for p in _tensor_list(parameters):
            if p.grad is not None:
                p.grad.clamp_(min=-clip_value, max=clip_value)


__all__ = ["get_total_norm", "clip_grads_with_norm_", "clip_grad_norm_", "clip_grad_value_"]


def clip_grad_norm(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False,
                   foreach=None):
    """Deprecated alias of ``clip_grad_norm_`` (with PyTorch's FutureWarning)."""
    warnings.warn("`microtensor.nn.utils.clip_grad_norm` is now deprecated in favor of "
                  "`microtensor.nn.utils.clip_grad_norm_`.", FutureWarning, stacklevel=2)
    return clip_grad_norm_(parameters, max_norm, norm_type, error_if_nonfinite, foreach)


__all__ += ["clip_grad_norm"]
