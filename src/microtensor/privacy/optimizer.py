"""``DPOptimizer``: the DP-SGD step around any microtensor optimizer — clip each sample's
gradient, sum, add Gaussian noise, scale, then the wrapped optimizer's own step."""
import microtensor as mt
from microtensor.autograd.grad_mode import enable_grad, no_grad


def check_privacy_settings(noise_multiplier, max_grad_norm, loss_reduction):
    """Raises ``ValueError`` for a noise multiplier below 0 (or NaN), a clip norm that is
    not positive or a loss reduction other than ``"mean"`` and ``"sum"``."""
    if not noise_multiplier >= 0:
        raise ValueError(f"noise_multiplier must be >= 0, but got {noise_multiplier}")
    if not max_grad_norm > 0:
        raise ValueError(f"max_grad_norm must be > 0, but got {max_grad_norm}")
    if loss_reduction not in ("mean", "sum"):
        raise ValueError(f"Unexpected value for loss_reduction: {loss_reduction!r} "
                         "(expected 'mean' or 'sum')")


class DPOptimizer:
    """Wraps ``optimizer`` so that each ``step()`` uses a differentially private gradient,
    as Opacus's ``DPOptimizer``: for the batch of the last forward pass of ``module`` (the
    ``GradSampleModule`` that ``PrivacyEngine.make_private`` returns), each sample's gradient
    is clipped to norm ``max_grad_norm`` and summed (``privacy.clipped_grad_sum`` with
    ``grad_sample_mode``), Gaussian noise of std ``noise_multiplier * max_grad_norm`` is
    added, and the result is divided by ``expected_batch_size`` (``loss_reduction="mean"``;
    ``"sum"`` leaves it undivided).  It becomes each parameter's ``.grad`` before the
    wrapped optimizer's step.

    The ``.grad`` that ``loss.backward()`` left is not used (it is the batch's ordinary,
    non-private gradient): ``step()`` recomputes the gradients per sample from the recorded
    batch and overwrites it.  ``zero_grad``, ``param_groups``, ``state``, ``defaults``,
    ``state_dict`` and ``load_state_dict`` are the wrapped optimizer's."""

    def __init__(self, optimizer, *, noise_multiplier, max_grad_norm, expected_batch_size,
                 module, loss_reduction="mean", generator=None, grad_sample_mode="ghost"):
        check_privacy_settings(noise_multiplier, max_grad_norm, loss_reduction)
        if loss_reduction == "mean" and not expected_batch_size > 0:
            raise ValueError("expected_batch_size must be > 0 with loss_reduction='mean', "
                             f"but got {expected_batch_size}")
        self.original_optimizer = optimizer
        self.noise_multiplier = noise_multiplier
        self.max_grad_norm = max_grad_norm
        self.expected_batch_size = expected_batch_size
        self.loss_reduction = loss_reduction
        self.generator = generator
        self.grad_sample_mode = grad_sample_mode
        self.module = module
        self.step_hook = None

    def __repr__(self):
        return f"DPOptimizer({self.original_optimizer!r})"

    @property
    def param_groups(self):
        return self.original_optimizer.param_groups

    @property
    def state(self):
        return self.original_optimizer.state

    @property
    def defaults(self):
        return self.original_optimizer.defaults

    def zero_grad(self, set_to_none=True):
        self.original_optimizer.zero_grad(set_to_none)

    def state_dict(self):
        return self.original_optimizer.state_dict()

    def load_state_dict(self, state_dict):
        self.original_optimizer.load_state_dict(state_dict)

    def attach_step_hook(self, fn):
        """``fn(optimizer)`` runs at every step, after the private gradient is made and
        before the wrapped optimizer's step (the privacy engine counts steps with it)."""
        self.step_hook = fn

    @no_grad()
    def add_noise_and_scale(self, summed):
        """Sets each parameter's ``.grad`` to its clipped sum (``summed``: parameter ->
        tensor) plus the noise, divided by the expected batch size."""
        std = self.noise_multiplier * self.max_grad_norm
        scale = self.expected_batch_size if self.loss_reduction == "mean" else 1
        for p, total in summed.items():
            noise = mt.randn(p.shape, generator=self.generator, dtype=total.dtype)
            p.grad = (total + noise * std) / scale

    def step(self, closure=None):
        """One private step of the batch the module last saw; ``closure`` (computing the
        loss, grad enabled) runs first and its loss is returned."""
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        summed, _ = self.module.clipped_grad_sum(max_grad_norm=self.max_grad_norm,
                                                 method=self.grad_sample_mode)
        self.add_noise_and_scale(summed)
        if self.step_hook is not None:
            self.step_hook(self)
        self.original_optimizer.step()
        return loss
