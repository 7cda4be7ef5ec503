"""NAdam: Adam with Nesterov momentum and a momentum schedule."""
from microtensor.optim.optimizer import (Optimizer, _check_hyperparameters, _ema_, _ema_sq_,
                                         _operand, _scalar_tensor)


class NAdam(Optimizer):
    """As ``torch.optim.NAdam``: the momentum coefficient at step ``t`` is
    ``mu_t = beta1 * (1 - 0.5 * 0.96 ** (t * momentum_decay))``; the step mixes the
    gradient and the running average ``m``, weighted by ``mu_t``, ``mu_{t+1}`` and the
    running product of the ``mu``, over ``sqrt(v / (1 - beta2**t)) + eps``."""

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 momentum_decay=4e-3, decoupled_weight_decay=False, *, foreach=None,
                 maximize=False, capturable=False, differentiable=False):
        _check_hyperparameters(lr=lr, eps=eps, betas=betas, weight_decay=weight_decay,
                               momentum_decay=momentum_decay)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay,
                                      momentum_decay=momentum_decay,
                                      decoupled_weight_decay=decoupled_weight_decay,
                                      maximize=maximize, foreach=foreach,
                                      capturable=capturable, differentiable=differentiable))

    def _init_state(self, p, group):
        return {"step": _scalar_tensor(0.0), "mu_product": _scalar_tensor(1.0),
                "exp_avg": p.new_zeros(p.shape), "exp_avg_sq": p.new_zeros(p.shape)}

    def _update(self, p, grad, state, group):
        beta1, beta2 = group["betas"]
        lr, decay = group["lr"], group["momentum_decay"]
        step = state["step"].item()
        mu = beta1 * (1.0 - 0.5 * 0.96 ** (step * decay))
        mu_next = beta1 * (1.0 - 0.5 * 0.96 ** ((step + 1) * decay))
        # The product stays a tensor of the state's dtype, rounded as PyTorch rounds it.
        state["mu_product"].mul_(mu)
        mu_product = state["mu_product"].item()
        exp_avg = _ema_(state["exp_avg"], grad, beta1)
        exp_avg_sq = _ema_sq_(state["exp_avg_sq"], grad, beta2)
        denom = exp_avg_sq.div(1 - beta2 ** step).sqrt().add(group["eps"])
        p.add_(grad / denom, alpha=-lr * (1.0 - mu) / (1.0 - mu_product))
        p.add_(_operand(exp_avg, group) / denom, alpha=-lr * mu_next / (1.0 - mu_product * mu_next))
