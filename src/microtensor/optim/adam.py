"""Adam and AdamW (Adam with decoupled weight decay), with AMSGrad as an option."""
from microtensor._tensor import Tensor
from microtensor.optim.optimizer import (Optimizer, _check_hyperparameters, _ema_, _ema_sq_,
                                         _operand, _scalar_tensor)


class Adam(Optimizer):
    """As ``torch.optim.Adam``: running averages ``m`` of the gradient and ``v`` of its
    square (the running maximum of ``v`` with ``amsgrad``), bias-corrected;
    ``p -= lr / (1 - beta1**t) * m / (sqrt(v / (1 - beta2**t)) + eps)``."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 amsgrad=False, *, foreach=None, maximize=False, capturable=False,
                 differentiable=False, fused=None, decoupled_weight_decay=False):
        if isinstance(lr, Tensor) and foreach and not capturable:
            raise ValueError("lr as a Tensor is not supported for capturable=False and "
                             "foreach=True")
        _check_hyperparameters(lr=lr, eps=eps, betas=betas, weight_decay=weight_decay)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, amsgrad=amsgrad,
                                      maximize=maximize, foreach=foreach,
                                      capturable=capturable, differentiable=differentiable,
                                      fused=fused,
                                      decoupled_weight_decay=decoupled_weight_decay))

    def _init_state(self, p, group):
        state = {"step": _scalar_tensor(0.0, group["fused"]), "exp_avg": p.new_zeros(p.shape),
                 "exp_avg_sq": p.new_zeros(p.shape)}
        if group["amsgrad"]:
            state["max_exp_avg_sq"] = p.new_zeros(p.shape)
        return state

    def _update(self, p, grad, state, group):
        beta1, beta2 = group["betas"]
        step = state["step"].item()
        exp_avg = _ema_(state["exp_avg"], grad, beta1)
        second = _ema_sq_(state["exp_avg_sq"], grad, beta2)
        if group["amsgrad"]:
            max_sq = state["max_exp_avg_sq"]
            second = max_sq.copy_(_operand(max_sq, group).maximum(second))
        # Out of place after sqrt, whose backward (differentiable steps) needs its result.
        denom = (second.sqrt() / (1 - beta2 ** step) ** 0.5).add_(group["eps"])
        p.add_(_operand(exp_avg, group) / denom, alpha=-group["lr"] / (1 - beta1 ** step))


class AdamW(Adam):
    """Adam with decoupled weight decay: ``p *= 1 - lr * weight_decay`` before each
    step, as ``torch.optim.AdamW``."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False, *, maximize=False, foreach=None, capturable=False,
                 differentiable=False, fused=None):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach=foreach,
                         maximize=maximize, capturable=capturable,
                         differentiable=differentiable, fused=fused,
                         decoupled_weight_decay=True)
