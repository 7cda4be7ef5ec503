"""Adagrad: per-coordinate learning rates from the sum of squared gradients."""
from microtensor.optim.optimizer import (Optimizer, _check_fused_param, _check_hyperparameters,
                                         _scalar_tensor)


class Adagrad(Optimizer):
    """As ``torch.optim.Adagrad``: ``s += g**2``;
    ``p -= lr / (1 + (t - 1) * lr_decay) * g / (sqrt(s) + eps)``.  The state of the
    parameters given to the constructor exists from the start, as PyTorch's."""

    def __init__(self, params, lr=1e-2, lr_decay=0, weight_decay=0,
                 initial_accumulator_value=0, eps=1e-10, foreach=None, *, maximize=False,
                 differentiable=False, fused=None):
        _check_hyperparameters(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                               initial_accumulator_value=initial_accumulator_value, eps=eps)
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, eps=eps,
                                      weight_decay=weight_decay,
                                      initial_accumulator_value=initial_accumulator_value,
                                      foreach=foreach, maximize=maximize,
                                      differentiable=differentiable, fused=fused))
        for group in self.param_groups:
            for p in group["params"]:
                self.state[p] = self._init_state(p, group)

    def _init_state(self, p, group):
        if group["fused"]:
            _check_fused_param(p)
        return {"step": _scalar_tensor(0.0, group["fused"]),
                "sum": p.new_full(p.shape, group["initial_accumulator_value"])}

    def _update(self, p, grad, state, group):
        clr = group["lr"] / (1 + (state["step"].item() - 1) * group["lr_decay"])
        std = state["sum"].add_(grad * grad).sqrt().add(group["eps"])
        p.add_(grad / std, alpha=-clr)
