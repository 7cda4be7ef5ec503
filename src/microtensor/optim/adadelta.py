"""Adadelta: steps scaled by the ratio of running RMS of updates and of gradients."""
from microtensor.optim.optimizer import Optimizer, _check_hyperparameters, _ema_sq_, _scalar_tensor


class Adadelta(Optimizer):
    """As ``torch.optim.Adadelta``: ``v`` and ``u`` running averages of the squared
    gradient and of the squared update; ``delta = sqrt(u + eps) / sqrt(v + eps) * g``,
    ``p -= lr * delta``."""

    def __init__(self, params, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0, foreach=None, *,
                 capturable=False, maximize=False, differentiable=False):
        _check_hyperparameters(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay)
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay,
                                      maximize=maximize, capturable=capturable,
                                      foreach=foreach, differentiable=differentiable))

    def _init_state(self, p, group):
        return {"step": _scalar_tensor(0.0), "square_avg": p.new_zeros(p.shape),
                "acc_delta": p.new_zeros(p.shape)}

    def _update(self, p, grad, state, group):
        rho, eps = group["rho"], group["eps"]
        std = _ema_sq_(state["square_avg"], grad, rho).add(eps).sqrt_()
        delta = state["acc_delta"].add(eps).sqrt_().div(std).mul_(grad)
        _ema_sq_(state["acc_delta"], delta, rho)
        p.add_(delta, alpha=-group["lr"])
