"""Muon: momentum SGD for matrices, each step orthogonalised by Newton-Schulz iterations."""
import math

from microtensor import bfloat16, float32
from microtensor.optim.optimizer import Optimizer, _check_tensor_lr, _lerp

# Keller Jordan's quintic Newton-Schulz coefficients, PyTorch's defaults.
_NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)


def _orthogonalized(update, coefficients, steps, eps):
    """``update`` moved towards the nearest semi-orthogonal matrix (``U V^T`` of its SVD) by
    ``steps`` Newton-Schulz iterations in bfloat16, as PyTorch: the wide orientation, scaled
    to norm at most 1; each ``addmm`` of PyTorch's is computed in float32 and rounded once."""
    if steps >= 100:
        raise ValueError("Number of steps must be less than 100 for computational efficiency")
    if update.dim() != 2:
        raise ValueError("Input tensor gradient must be a 2D matrix")
    if len(coefficients) != 3:
        raise ValueError("Coefficients must be a tuple of exactly 3 values")
    a, b, c = coefficients
    tall = update.size(0) > update.size(1)
    x = update.bfloat16()
    if tall:
        x = x.T
    x = x / x.norm().clamp(min=eps)
    for _ in range(steps):
        gram = (x @ x.T).to(float32)
        gram_update = (gram * b + (gram @ gram) * c).to(bfloat16)
        x32 = x.to(float32)
        x = (x32 * a + gram_update.to(float32) @ x32).to(bfloat16)
    return x.T if tall else x


def _adjusted_lr(lr, adjust_lr_fn, shape):
    rows, cols = shape[:2]
    if adjust_lr_fn is None or adjust_lr_fn == "original":
        return lr * math.sqrt(max(1, rows / cols))
    if adjust_lr_fn == "match_rms_adamw":
        return lr * 0.2 * math.sqrt(max(rows, cols))
    return lr


class Muon(Optimizer):
    """As ``torch.optim.Muon``, for 2-D parameters: the momentum buffer
    ``b = lerp(b, g, 1 - momentum)`` (with Nesterov, the step follows
    ``lerp(g, b, momentum)``) is orthogonalised (``ns_steps`` Newton-Schulz iterations in
    bfloat16), and ``p = p * (1 - lr * weight_decay) - lr' * O``, ``lr'`` the rate scaled
    by ``adjust_lr_fn`` for the matrix's shape."""

    def __init__(self, params, lr=1e-3, weight_decay=0.1, momentum=0.95, nesterov=True,
                 ns_coefficients=_NS_COEFFICIENTS, eps=1e-7, ns_steps=5, adjust_lr_fn=None):
        _check_tensor_lr(lr)
        if not 0.0 <= lr:
            raise ValueError(f"Learning rate should be >= 0 but is: {lr}")
        if not 0.0 <= momentum:
            raise ValueError(f"momentum should be >= 0 but is: {momentum}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"weight decay should be >= 0 but is: {weight_decay}")
        if adjust_lr_fn is not None and adjust_lr_fn not in ("original", "match_rms_adamw"):
            raise ValueError(f"Adjust learning rate function {adjust_lr_fn} is not supported")
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, momentum=momentum,
                                      nesterov=nesterov, ns_coefficients=ns_coefficients,
                                      eps=eps, ns_steps=ns_steps, adjust_lr_fn=adjust_lr_fn))
        for group in self.param_groups:
            for p in group["params"]:
                if p.dim() != 2:
                    raise ValueError("Muon only supports 2D parameters whereas we found a "
                                     f"parameter with size: {p.size()}")

    def _init_state(self, p, group):
        return {"momentum_buffer": p.new_zeros(p.shape)}

    @staticmethod
    def _weight_decayed(p, grad, group):
        # Decoupled, in _update, scaled by the group's rate before its shape adjustment.
        return grad

    def _update(self, p, grad, state, group):
        if grad.dim() != 2:
            raise ValueError("Param gradient must be a 2D matrix")
        lr, momentum = group["lr"], group["momentum"]
        buf = state["momentum_buffer"]
        buf.copy_(_lerp(buf, grad, 1 - momentum))
        update = _lerp(grad, buf, momentum) if group["nesterov"] else buf
        update = _orthogonalized(update, group["ns_coefficients"], group["ns_steps"],
                                 group["eps"])
        p.mul_(1 - lr * group["weight_decay"])
        # In the parameter's dtype before scaling: PyTorch scales the bfloat16 update there.
        p.add_(update.to(p.dtype), alpha=-_adjusted_lr(lr, group["adjust_lr_fn"], p.shape))
