"""ASGD: averaged stochastic gradient descent."""
from microtensor.optim.optimizer import Optimizer, _check_hyperparameters, _scalar_tensor


class ASGD(Optimizer):
    """As ``torch.optim.ASGD``: ``p <- p * (1 - lambd * eta) - eta * g``; the average ``ax``
    follows ``p`` (``ax += mu * (p - ax)``); after step ``t``,
    ``eta = lr / (1 + lambd * lr * t) ** alpha`` and ``mu = 1 / max(1, t - t0)``.  ``eta``
    and ``mu`` are 0-d tensors in the counters' dtype (float32 unless the default dtype is
    float64), rounded there as PyTorch rounds them."""

    def __init__(self, params, lr=1e-2, lambd=1e-4, alpha=0.75, t0=1e6, weight_decay=0,
                 foreach=None, maximize=False, differentiable=False, capturable=False):
        _check_hyperparameters(lr=lr, weight_decay=weight_decay)
        super().__init__(params, dict(lr=lr, lambd=lambd, alpha=alpha, t0=t0,
                                      weight_decay=weight_decay, foreach=foreach,
                                      maximize=maximize, differentiable=differentiable,
                                      capturable=capturable))

    def _init_state(self, p, group):
        return {"step": _scalar_tensor(0.0), "eta": _scalar_tensor(group["lr"]),
                "mu": _scalar_tensor(1.0), "ax": p.new_zeros(p.shape)}

    def _update(self, p, grad, state, group):
        lr, lambd = group["lr"], group["lambd"]
        eta, mu, ax = state["eta"].item(), state["mu"].item(), state["ax"]
        p.mul_(1 - lambd * eta)
        p.add_(grad, alpha=-eta)
        if mu != 1:
            ax.add_(p.sub(ax).mul_(mu))
        else:
            ax.copy_(p)
        step = state["step"].item()
        state["eta"].fill_(lr / ((1 + lambd * lr * step) ** group["alpha"]))
        state["mu"].fill_(1 / max(1, step - group["t0"]))
