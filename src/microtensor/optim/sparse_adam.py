"""SparseAdam: Adam for sparse gradients.  microtensor has no sparse tensors, so every
gradient is dense and ``step`` refuses it, as ``torch.optim.SparseAdam`` refuses dense
gradients; the class exists so that code constructing it ports, and fails where PyTorch's
would with dense gradients."""
from microtensor.optim.optimizer import Optimizer


class SparseAdam(Optimizer):
    """As ``torch.optim.SparseAdam``: the constructor's checks and ``state_dict``; ``step``
    raises ``RuntimeError`` on the first parameter with a (dense) gradient, before any
    state is made."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, maximize=False):
        if not 0.0 < lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 < eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        for i, beta in enumerate(betas):
            if not 0.0 <= beta < 1.0:
                raise ValueError(f"Invalid beta parameter at index {i}: {beta}")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, maximize=maximize))

    def _param_state(self, p, group):
        raise RuntimeError("SparseAdam does not support dense gradients, please consider "
                           "Adam instead")
