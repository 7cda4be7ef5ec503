"""Adafactor: Adam-like steps from a factored (row and column) second moment."""
import microtensor as mt
from microtensor.optim.optimizer import Optimizer, _check_tensor_lr, _lerp, _scalar_tensor


class Adafactor(Optimizer):
    """As ``torch.optim.Adafactor``: for a parameter of two or more dims the second moment
    is the outer product of running row and column means of ``g**2`` over the last two
    dims (divided by the mean row factor), for a vector a running average of ``g**2``;
    the averaging weight at step ``t`` is ``t ** beta2_decay``.  The update
    ``g / sqrt(v)`` is clipped to RMS ``d`` and scaled by
    ``max(eps2, RMS(p)) * min(lr, 1 / sqrt(t))``; weight decay is decoupled
    (``p *= 1 - lr * weight_decay``)."""

    def __init__(self, params, lr=1e-2, beta2_decay=-0.8, eps=(None, 1e-3), d=1.0,
                 weight_decay=0.0, *, foreach=None, maximize=False):
        _check_tensor_lr(lr)
        if not 0.0 <= lr:
            raise ValueError(f"Learning rate should be >= 0 but is: {lr}")
        if not 0.0 >= beta2_decay:
            raise ValueError(f"beta2_decay should be <= 0 but is: {beta2_decay}")
        if eps[0] is not None and not 0.0 <= eps[0]:
            raise ValueError(f"epsilon1 should be >= 0 but is: {eps[0]}")
        if not 0.0 <= eps[1]:
            raise ValueError(f"epsilon2 should be >= 0 but is: {eps[1]}")
        if not 1.0 <= d:
            raise ValueError(f"Clipping threshold d should be >= 1 but is: {d}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"weight_decay should be >= 0 but is: {weight_decay}")
        super().__init__(params, dict(lr=lr, beta2_decay=beta2_decay, eps=eps, d=d,
                                      weight_decay=weight_decay, foreach=foreach,
                                      maximize=maximize))

    def _init_state(self, p, group):
        if p.dim() > 1:
            shape = tuple(p.shape)
            return {"step": _scalar_tensor(0.0),
                    "row_var": p.new_zeros(shape[:-1] + (1,)),
                    "col_var": p.new_zeros(shape[:-2] + (1,) + shape[-1:])}
        return {"step": _scalar_tensor(0.0), "variance": p.new_zeros(p.shape)}

    @staticmethod
    def _weight_decayed(p, grad, group):
        # The decay comes in _update, after the step size has read the parameter's norm.
        return grad

    def _update(self, p, grad, state, group):
        lr, eps2 = group["lr"], group["eps"][1]
        eps1 = group["eps"][0]
        if eps1 is None:
            eps1 = mt.finfo(p.dtype).eps
        step = state["step"].item()
        weight = step ** group["beta2_decay"]
        alpha = max(eps2, p.norm(2).item() / p.numel() ** 0.5) * min(lr, 1 / step ** 0.5)
        if group["weight_decay"] != 0:
            p.mul_(1 - lr * group["weight_decay"])
        if grad.dim() > 1:
            row_var, col_var = state["row_var"], state["col_var"]
            # mean(g**2) over a dim, as the squared norm over its size (as PyTorch).
            row_var.copy_(_lerp(row_var, grad.norm(dim=-1, keepdim=True).square_()
                                .div_(grad.size(-1)), weight))
            col_var.copy_(_lerp(col_var, grad.norm(dim=-2, keepdim=True).square_()
                                .div_(grad.size(-2)), weight))
            var_estimate = (row_var @ col_var).div_(
                row_var.mean(dim=-2, keepdim=True).clamp_(min=eps1))
        else:
            variance = state["variance"]
            var_estimate = variance.copy_(_lerp(variance, grad * grad, weight)).clone()
        update = var_estimate.clamp_(min=eps1 * eps1).rsqrt_().mul_(grad)
        denom = max(1.0, update.norm(2).item() / (update.numel() ** 0.5 * group["d"]))
        p.add_(update, alpha=-alpha / denom)
