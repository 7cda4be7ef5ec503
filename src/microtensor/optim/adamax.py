"""Adamax: Adam with the infinity norm in place of the second moment."""
from microtensor.optim.optimizer import (Optimizer, _check_hyperparameters, _ema_, _operand,
                                         _scalar_tensor)


class Adamax(Optimizer):
    """As ``torch.optim.Adamax``: ``m`` the running average of the gradient,
    ``u = max(beta2 * u, |g| + eps)``; ``p -= lr / (1 - beta1**t) * m / u``."""

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 foreach=None, *, maximize=False, differentiable=False, capturable=False):
        _check_hyperparameters(lr=lr, eps=eps, betas=betas, weight_decay=weight_decay)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, foreach=foreach,
                                      maximize=maximize, differentiable=differentiable,
                                      capturable=capturable))

    def _init_state(self, p, group):
        return {"step": _scalar_tensor(0.0), "exp_avg": p.new_zeros(p.shape),
                "exp_inf": p.new_zeros(p.shape)}

    def _update(self, p, grad, state, group):
        beta1, beta2 = group["betas"]
        exp_avg = _ema_(state["exp_avg"], grad, beta1)
        exp_inf = state["exp_inf"]
        exp_inf.mul_(beta2)
        exp_inf.copy_(_operand(exp_inf, group).maximum(grad.abs().add_(group["eps"])))
        clr = group["lr"] / (1 - beta1 ** state["step"].item())
        p.add_(exp_avg / exp_inf, alpha=-clr)
