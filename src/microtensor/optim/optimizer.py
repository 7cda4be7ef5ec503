"""The optimizers.  Updates run under ``no_grad`` and write into the parameters in place."""
from microtensor.autograd.grad_mode import no_grad


class Optimizer:
    """Holds parameter groups (a list of dicts with ``params`` and hyper-parameters)."""

    def __init__(self, params, defaults):
        params = list(params)
        if not params:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(params[0], dict):
            params = [{"params": params}]
        self.defaults = defaults
        self.param_groups = []
        self.state = {}
        for group in params:
            self.add_param_group(group)

    def add_param_group(self, group):
        group = dict(group)
        group["params"] = list(group["params"])
        for key, value in self.defaults.items():
            group.setdefault(key, value)
        self.param_groups.append(group)

    def zero_grad(self, set_to_none=True):
        for group in self.param_groups:
            for p in group["params"]:
                if set_to_none:
                    p.grad = None
                elif p.grad is not None:
                    p.grad.zero_()

    def _state(self, p):
        return self.state.setdefault(id(p), {})

    def state_dict(self):
        return {"state": dict(self.state),
                "param_groups": [{k: v for k, v in g.items() if k != "params"}
                                 for g in self.param_groups]}


class SGD(Optimizer):
    def __init__(self, params, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0,
                 nesterov=False, maximize=False):
        if lr < 0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov,
                                      maximize=maximize))

    @no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                d_p = p.grad if not group["maximize"] else -p.grad
                if group["weight_decay"]:
                    d_p = d_p + group["weight_decay"] * p
                if group["momentum"]:
                    state = self._state(p)
                    buf = state.get("momentum_buffer")
                    if buf is None:
                        buf = state["momentum_buffer"] = d_p.clone()
                    else:
                        buf.mul_(group["momentum"]).add_(d_p, alpha=1 - group["dampening"])
                    d_p = d_p + group["momentum"] * buf if group["nesterov"] else buf
                p.add_(d_p, alpha=-group["lr"])
        return loss


class Adam(Optimizer):
    decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 amsgrad=False, maximize=False):
        if lr < 0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0 <= betas[0] < 1 or not 0 <= betas[1] < 1:
            raise ValueError(f"Invalid beta parameters: {betas}")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                      amsgrad=amsgrad, maximize=maximize))

    @no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad if not group["maximize"] else -p.grad
                if group["weight_decay"]:
                    if self.decoupled:
                        p.mul_(1 - group["lr"] * group["weight_decay"])
                    else:
                        grad = grad + group["weight_decay"] * p
                state = self._state(p)
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = p.new_zeros(p.shape)
                    state["exp_avg_sq"] = p.new_zeros(p.shape)
                    if group["amsgrad"]:
                        state["max_exp_avg_sq"] = p.new_zeros(p.shape)
                state["step"] += 1
                step = state["step"]
                state["exp_avg"].mul_(beta1).add_(grad, alpha=1 - beta1)
                state["exp_avg_sq"].mul_(beta2).add_(grad * grad, alpha=1 - beta2)
                second = state["exp_avg_sq"]
                if group["amsgrad"]:
                    state["max_exp_avg_sq"].copy_(state["max_exp_avg_sq"].maximum(second))
                    second = state["max_exp_avg_sq"]
                bias1 = 1 - beta1 ** step
                bias2 = 1 - beta2 ** step
                denom = (second / bias2).sqrt() + group["eps"]
                p.add_(state["exp_avg"] / denom, alpha=-group["lr"] / bias1)
        return loss


class AdamW(Adam):
    decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False, maximize=False):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize)


__all__ = ["Optimizer", "SGD", "Adam", "AdamW"]
