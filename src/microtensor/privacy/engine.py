"""``PrivacyEngine``, in Opacus's shape: ``make_private`` turns a module, an optimizer and a
data loader into their private versions (the module recording its batches, a
``DPOptimizer``, Poisson sampling), and the engine's accountant counts the ε spent.

The ordinary loop then trains privately::

    loss = criterion(model(x), y); loss.backward(); optimizer.step()

``model`` records its input ``x`` and a forward hook on ``criterion`` records ``y``;
``optimizer.step()`` recomputes the loss of each sample from them with ``functional_call``
and clips the per-sample gradients through ``privacy.clipped_grad_sum``."""
import warnings

import microtensor as mt
from microtensor import nn
from microtensor.func import functional_call
from microtensor.nn.norm import _BatchNorm, _InstanceNorm
from microtensor.privacy.accountant import create_accountant, get_noise_multiplier
from microtensor.privacy.clipping import clipped_grad_sum
from microtensor.privacy.data import DPDataLoader
from microtensor.privacy.optimizer import DPOptimizer, check_privacy_settings

GRAD_SAMPLE_MODES = ("ghost", "vmap")


class UnsupportedModuleError(ValueError):
    """A module that cannot be trained with differential privacy (as Opacus's)."""


def _validation_errors(module):
    """What makes ``module`` unfit for DP-SGD: layers that mix the samples of a batch, and
    a module not in training mode (the messages are Opacus's validator's)."""
    errors = []
    if not module.training:
        errors.append("Model needs to be in training mode")
    for name, sub in module.named_modules():
        where = f"{name or 'module'} ({type(sub).__name__})"
        if isinstance(sub, _BatchNorm):
            errors.append(
                f"{where}: BatchNorm cannot support training with differential privacy. The "
                "reason for it is that BatchNorm makes each sample's normalized value depend "
                "on its peers in a batch, ie the same sample x will get normalized to a "
                "different value depending on who else is on its batch. Privacy-wise, this "
                "means that we would have to put a privacy mechanism there too. LayerNorm, "
                "InstanceNorm and GroupNorm do not have this property: use one of them "
                "instead.")
        elif isinstance(sub, _InstanceNorm) and sub.track_running_stats:
            errors.append(
                f"{where}: We do not support tracking running stats with differential "
                "privacy. To support it, we would have to add a DP mechanism for these "
                "statistics too, which would incur a privacy cost for little value in model "
                "accuracy. Just say no to running stats :)")
    return errors


class GradSampleModule(nn.Module):
    """The module ``make_private`` returns: calls the wrapped ``_module`` (its parameters
    are the same objects), recording the positional inputs of each forward run with grad
    enabled; a forward hook on ``criterion`` records the targets it is called with after.
    ``clipped_grad_sum`` clips the per-sample gradients of that recorded batch, the loss of
    sample i being ``criterion(functional_call(_module, params, x_i[None]), y_i[None])``.

    Each sample's loss is recomputed, so random layers (dropout) draw afresh and must be
    written for ``vmap``."""

    def __init__(self, module, criterion):
        super().__init__()
        self._module = module
        # plain attributes, not submodules: the criterion is the caller's own object
        object.__setattr__(self, "_criterion", criterion)
        object.__setattr__(self, "_hook", criterion.register_forward_hook(self._record))
        self._recording = True
        self._batch = None

    def forward(self, *args, **kwargs):
        if self._recording and mt.is_grad_enabled():
            self._batch = (args, kwargs, None)
        return self._module(*args, **kwargs)

    def _record(self, criterion, args, output):
        if self._recording and mt.is_grad_enabled() and self._batch is not None:
            inputs, kwargs, _ = self._batch
            self._batch = (inputs, kwargs, args[1:])

    def trainable_parameters(self):
        return {name: p for name, p in self._module.named_parameters() if p.requires_grad}

    def clipped_grad_sum(self, *, max_grad_norm, method):
        """``({parameter: clipped sum}, norms)`` for the recorded batch, which is then
        forgotten (the next step needs a new forward pass)."""
        if self._batch is None or self._batch[2] is None:
            raise RuntimeError(
                "DPOptimizer.step() needs the batch it makes private: run the module that "
                "make_private returned on it, then the criterion given to make_private "
                "(loss = criterion(model(x), y)), with grad enabled, before each step")
        inputs, kwargs, targets = self._batch
        self._batch = None
        batch = inputs + targets
        if not all(isinstance(t, mt.Tensor) and t.dim() > 0 for t in batch):
            raise TypeError("DPOptimizer.step(): the module's positional inputs and the "
                            "criterion's targets must be tensors whose first dimension is "
                            "the batch")
        params = self.trainable_parameters()
        if batch[0].shape[0] == 0:    # an empty Poisson batch: only noise
            return {p: mt.zeros_like(p) for p in params.values()}, mt.zeros(0)
        count = len(inputs)

        def sample_loss(values, *sample):
            out = functional_call(self._module, values,
                                  tuple(x.unsqueeze(0) for x in sample[:count]), kwargs)
            return self._criterion(out, *(y.unsqueeze(0) for y in sample[count:]))

        self._recording = False
        try:
            detached = {name: p.detach() for name, p in params.items()}
            summed, norms = clipped_grad_sum(sample_loss, detached, *batch,
                                             max_grad_norm=max_grad_norm, method=method)
        finally:
            self._recording = True
        return {p: summed[name] for name, p in params.items()}, norms


class PrivacyEngine:
    """Makes training differentially private (DP-SGD), as Opacus's ``PrivacyEngine``;
    ``accountant`` (``"prv"`` or ``"rdp"``, see ``privacy.accountant``) counts the ε of the
    steps taken by the optimizers it made."""

    def __init__(self, *, accountant="prv"):
        self.accountant = create_accountant(accountant)

    @staticmethod
    def is_compatible(*, module, **kwargs):
        """Whether ``module`` can be trained privately."""
        return not _validation_errors(module)

    @staticmethod
    def validate(*, module, **kwargs):
        """Raises ``UnsupportedModuleError`` listing what makes ``module`` unfit."""
        errors = _validation_errors(module)
        if errors:
            raise UnsupportedModuleError("; ".join(errors))

    def make_private(self, *, module, optimizer, data_loader, noise_multiplier,
                     max_grad_norm, loss_reduction="mean", poisson_sampling=True,
                     noise_generator=None, grad_sample_mode="ghost", criterion=None):
        """``(module, optimizer, data_loader)`` that train privately with the ordinary loop
        ``loss = criterion(module(x), y); loss.backward(); optimizer.step()``:

        - the module is a ``GradSampleModule`` around ``module``, recording its input;
        - the optimizer is a ``DPOptimizer`` around ``optimizer`` (clip to
          ``max_grad_norm``, noise of std ``noise_multiplier * max_grad_norm`` drawn from
          ``noise_generator``, divided by the expected batch size), per-sample gradients by
          ``grad_sample_mode`` (``"ghost"`` or ``"vmap"``, see ``clipped_grad_sum``);
        - the data loader a ``DPDataLoader`` (Poisson sampling at ``1 / len(data_loader)``)
          unless ``poisson_sampling=False``.

        ``criterion`` (an ``nn.Module``, default ``nn.CrossEntropyLoss()``) must be the one
        the loop computes the loss with: a forward hook on it records the targets."""
        if grad_sample_mode not in GRAD_SAMPLE_MODES:
            raise ValueError(f"grad_sample_mode must be one of {GRAD_SAMPLE_MODES}, but got "
                             f"{grad_sample_mode!r}")
        check_privacy_settings(noise_multiplier, max_grad_norm, loss_reduction)
        criterion = nn.CrossEntropyLoss() if criterion is None else criterion
        if not isinstance(criterion, nn.Module):
            raise TypeError("criterion must be an nn.Module (its forward hook records the "
                            f"targets), but got {type(criterion).__name__}")
        self.validate(module=module)
        model_parameters = {id(p) for p in module.parameters()}
        if any(id(p) not in model_parameters
               for group in optimizer.param_groups for p in group["params"]):
            raise ValueError("Module parameters are different than optimizer Parameters")
        if poisson_sampling:
            data_loader = DPDataLoader.from_data_loader(data_loader)
        sample_rate = 1 / len(data_loader)
        expected_batch_size = int(len(data_loader.dataset) * sample_rate)
        module = GradSampleModule(module, criterion)
        optimizer = DPOptimizer(optimizer, noise_multiplier=noise_multiplier,
                                max_grad_norm=max_grad_norm,
                                expected_batch_size=expected_batch_size, module=module,
                                loss_reduction=loss_reduction, generator=noise_generator,
                                grad_sample_mode=grad_sample_mode)
        optimizer.attach_step_hook(
            lambda opt: self.accountant.step(noise_multiplier=opt.noise_multiplier,
                                             sample_rate=sample_rate))
        return module, optimizer, data_loader

    def make_private_with_epsilon(self, *, module, optimizer, data_loader, target_epsilon,
                                  target_delta, epochs, max_grad_norm, epsilon_tolerance=0.01,
                                  **kwargs):
        """``make_private`` with the smallest noise multiplier whose ε after ``epochs``
        epochs is at most ``target_epsilon`` (at ``target_delta``), found by bisection on
        this engine's accountant."""
        if len(self.accountant) > 0:
            warnings.warn("You're calling make_private_with_epsilon with non-zero privacy "
                          "budget already spent. Returned noise_multiplier assumes zero "
                          "starting point, so your overall privacy budget will be higher.",
                          stacklevel=2)
        sample_rate = 1 / len(data_loader)
        sigma = get_noise_multiplier(target_epsilon=target_epsilon, target_delta=target_delta,
                                     sample_rate=sample_rate, epochs=epochs,
                                     accountant=self.accountant.mechanism(),
                                     epsilon_tolerance=epsilon_tolerance)
        return self.make_private(module=module, optimizer=optimizer, data_loader=data_loader,
                                 noise_multiplier=sigma, max_grad_norm=max_grad_norm, **kwargs)

    def get_epsilon(self, delta):
        """The ε spent so far by the steps of this engine's optimizers, at ``delta``."""
        return self.accountant.get_epsilon(delta)
