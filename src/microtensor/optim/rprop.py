"""Rprop: resilient backpropagation, per-coordinate step sizes driven by gradient signs."""
import microtensor as mt
from microtensor.optim.optimizer import (Optimizer, _check_hyperparameters, _operand,
                                         _scalar_tensor)


class Rprop(Optimizer):
    """As ``torch.optim.Rprop``: each coordinate's step size is multiplied by ``etaplus``
    when its gradient kept its sign, by ``etaminus`` when it flipped (and that gradient is
    then taken as 0), and clamped to ``step_sizes``; ``p -= sign(g) * step_size``."""

    def __init__(self, params, lr=1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50), *,
                 capturable=False, foreach=None, maximize=False, differentiable=False):
        _check_hyperparameters(lr=lr)
        if not 0.0 < etas[0] < 1.0 < etas[1]:
            raise ValueError(f"Invalid eta values: {etas[0]}, {etas[1]}")
        super().__init__(params, dict(lr=lr, etas=etas, step_sizes=step_sizes,
                                      foreach=foreach, maximize=maximize,
                                      differentiable=differentiable, capturable=capturable))

    def _init_state(self, p, group):
        return {"step": _scalar_tensor(0.0), "prev": p.new_zeros(p.shape),
                "step_size": p.new_full(p.shape, group["lr"])}

    def _update(self, p, grad, state, group):
        etaminus, etaplus = group["etas"]
        sign = grad.mul(_operand(state["prev"], group)).sign()
        # sign + 1 maps an unchanged-sign-or-zero product 0 to the factor 1 and keeps a NaN
        # product NaN, as PyTorch's masked assignments do.
        factor = mt.where(sign.gt(0), etaplus, mt.where(sign.lt(0), etaminus, sign + 1))
        step_size = state["step_size"].mul_(factor).clamp_(*group["step_sizes"])
        grad = mt.where(sign.lt(0), 0.0, grad)
        p.addcmul_(grad.sign(), step_size, value=-1)
        state["prev"].copy_(grad)
