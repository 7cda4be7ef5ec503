"""Parameter initialisation (in place, without recording gradients)."""
import math

from microtensor.autograd.grad_mode import no_grad


def uniform_(tensor, a=0.0, b=1.0, generator=None):
    from microtensor.ops.factory import rand
    with no_grad():
        return tensor.copy_(rand(tensor.shape, dtype=tensor.dtype, generator=generator)
                            * (b - a) + a)


def normal_(tensor, mean=0.0, std=1.0, generator=None):
    from microtensor.ops.factory import randn
    with no_grad():
        return tensor.copy_(randn(tensor.shape, dtype=tensor.dtype, generator=generator)
                            * std + mean)


def zeros_(tensor):
    with no_grad():
        return tensor.zero_()


def ones_(tensor):
    with no_grad():
        return tensor.fill_(1)


def _fan_in(tensor):
    if tensor.dim() < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer than 2 "
                         "dimensions")
    receptive = 1
    for s in tensor.shape[2:]:
        receptive *= s
    return tensor.shape[1] * receptive


def kaiming_uniform_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    gain = math.sqrt(2.0 / (1 + a ** 2)) if nonlinearity == "leaky_relu" else math.sqrt(2.0)
    bound = gain * math.sqrt(3.0 / _fan_in(tensor)) if _fan_in(tensor) else 0.0
    return uniform_(tensor, -bound, bound, generator)


def xavier_uniform_(tensor, gain=1.0, generator=None):
    fan_in = _fan_in(tensor)
    fan_out = tensor.shape[0] * (fan_in // tensor.shape[1])
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(tensor, -bound, bound, generator)
