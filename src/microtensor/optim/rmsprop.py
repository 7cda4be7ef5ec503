"""RMSprop, optionally centered and with momentum."""
from microtensor.optim.optimizer import (Optimizer, _check_hyperparameters, _ema_, _ema_sq_,
                                         _scalar_tensor)


class RMSprop(Optimizer):
    """As ``torch.optim.RMSprop``: ``v`` the running average of the squared gradient
    (minus the squared running average of the gradient when ``centered``);
    ``p -= lr * g / (sqrt(v) + eps)``, or with momentum ``b = momentum * b + g / (sqrt(v)
    + eps)`` and ``p -= lr * b``."""

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0,
                 centered=False, capturable=False, foreach=None, maximize=False,
                 differentiable=False):
        _check_hyperparameters(lr=lr, eps=eps, momentum=momentum, weight_decay=weight_decay,
                               alpha=alpha)
        super().__init__(params, dict(lr=lr, momentum=momentum, alpha=alpha, eps=eps,
                                      centered=centered, weight_decay=weight_decay,
                                      capturable=capturable, foreach=foreach,
                                      maximize=maximize, differentiable=differentiable))

    def _init_state(self, p, group):
        state = {"step": _scalar_tensor(0.0), "square_avg": p.new_zeros(p.shape)}
        if group["momentum"] > 0:
            state["momentum_buffer"] = p.new_zeros(p.shape)
        if group["centered"]:
            state["grad_avg"] = p.new_zeros(p.shape)
        return state

    def _update(self, p, grad, state, group):
        alpha = group["alpha"]
        square_avg = _ema_sq_(state["square_avg"], grad, alpha)
        if group["centered"]:
            grad_avg = _ema_(state["grad_avg"], grad, alpha)
            avg = (square_avg - grad_avg * grad_avg).sqrt()
        else:
            avg = square_avg.sqrt()
        avg = avg.add(group["eps"])
        if group["momentum"] > 0:
            buf = state["momentum_buffer"].mul_(group["momentum"]).add_(grad / avg)
            p.add_(buf, alpha=-group["lr"])
        else:
            p.add_(grad / avg, alpha=-group["lr"])
