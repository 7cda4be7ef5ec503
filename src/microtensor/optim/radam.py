"""RAdam: Adam with the variance of the adaptive learning rate rectified."""
from microtensor.optim.optimizer import (Optimizer, _check_hyperparameters, _ema_, _ema_sq_,
                                         _scalar_tensor)


class RAdam(Optimizer):
    """As ``torch.optim.RAdam``: while the length of the approximated simple moving
    average ``rho_t`` is at most 5 the step is SGD with momentum (``lr * m_hat``); after,
    Adam's step scaled by the rectification term."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 decoupled_weight_decay=False, *, foreach=None, maximize=False,
                 capturable=False, differentiable=False):
        _check_hyperparameters(lr=lr, eps=eps, betas=betas, weight_decay=weight_decay)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, maximize=maximize,
                                      foreach=foreach, capturable=capturable,
                                      decoupled_weight_decay=decoupled_weight_decay,
                                      differentiable=differentiable))

    def _init_state(self, p, group):
        return {"step": _scalar_tensor(0.0), "exp_avg": p.new_zeros(p.shape),
                "exp_avg_sq": p.new_zeros(p.shape)}

    def _update(self, p, grad, state, group):
        beta1, beta2 = group["betas"]
        step = state["step"].item()
        exp_avg = _ema_(state["exp_avg"], grad, beta1)
        exp_avg_sq = _ema_sq_(state["exp_avg_sq"], grad, beta2)
        bias_correction2 = 1 - beta2 ** step
        update = exp_avg / (1 - beta1 ** step) * group["lr"]
        rho_inf = 2 / (1 - beta2) - 1
        rho_t = rho_inf - 2 * step * beta2 ** step / bias_correction2
        if rho_t > 5.0:
            rect = ((rho_t - 4) * (rho_t - 2) * rho_inf
                    / ((rho_inf - 4) * (rho_inf - 2) * rho_t)) ** 0.5
            update = update * (bias_correction2 ** 0.5
                               / exp_avg_sq.sqrt().add_(group["eps"])) * rect
        p.sub_(update)
