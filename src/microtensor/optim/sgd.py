"""Stochastic gradient descent, with momentum, dampening and Nesterov momentum."""
from microtensor.optim.optimizer import Optimizer, _check_hyperparameters


class SGD(Optimizer):
    """As ``torch.optim.SGD``: ``p -= lr * g`` where ``g`` is the gradient (plus
    ``weight_decay * p``) or, with momentum, its running buffer
    ``b = momentum * b + (1 - dampening) * g`` (the first ``b`` is ``g``);
    Nesterov steps along ``g + momentum * b``."""

    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0,
                 nesterov=False, *, maximize=False, foreach=None, differentiable=False,
                 fused=None):
        _check_hyperparameters(lr=lr, momentum=momentum, weight_decay=weight_decay)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov,
                                      maximize=maximize, foreach=foreach,
                                      differentiable=differentiable, fused=fused))

    def _param_state(self, p, group):
        # Plain SGD keeps no state, and PyTorch's state_dict then has no entry for p.
        return self.state[p] if group["momentum"] != 0 else None

    def _update(self, p, grad, state, group):
        momentum = group["momentum"]
        if momentum != 0:
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = state["momentum_buffer"] = grad.detach().clone()
            else:
                buf.mul_(momentum).add_(grad, alpha=1 - group["dampening"])
            grad = grad.add(buf, alpha=momentum) if group["nesterov"] else buf
        p.add_(grad, alpha=-group["lr"])
