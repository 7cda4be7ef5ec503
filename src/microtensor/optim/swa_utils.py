"""Stochastic weight averaging and exponential moving averages of a model, as
``torch.optim.swa_utils``: ``AveragedModel`` (a copy of a model whose parameters average
the model's over ``update_parameters`` calls), the averaging functions, ``SWALR`` (anneals
each group's rate to a constant SWA rate) and ``update_bn`` (recomputes batch-norm
statistics for the averaged weights)."""
import copy
import itertools
import math

import microtensor as mt
from microtensor.autograd.grad_mode import no_grad
from microtensor.nn.modules import Module
from microtensor.nn.norm import _BatchNorm
from microtensor.optim.lr_scheduler import LRScheduler, _per_group
from microtensor.optim.optimizer import _lerp

__all__ = ["AveragedModel", "update_bn", "SWALR", "get_ema_multi_avg_fn",
           "get_swa_multi_avg_fn", "get_ema_avg_fn", "get_swa_avg_fn"]


def _check_decay(decay):
    if decay < 0.0 or decay > 1.0:
        raise ValueError(f"Invalid decay value {decay} provided. Please provide a value in "
                         "[0,1] range.")


def get_ema_multi_avg_fn(decay=0.999):
    """An in-place exponential moving average of lists of tensors:
    ``ema <- decay * ema + (1 - decay) * current``."""
    _check_decay(decay)

    @no_grad()
    def ema_update(ema_param_list, current_param_list, _):
        if ema_param_list[0].is_floating_point() or ema_param_list[0].is_complex():
            for p_ema, p_model in zip(ema_param_list, current_param_list):
                p_ema.copy_(_lerp(p_ema, p_model, 1 - decay))
        else:
            for p_ema, p_model in zip(ema_param_list, current_param_list):
                p_ema.copy_(p_ema * decay + p_model * (1 - decay))
    return ema_update


def get_swa_multi_avg_fn():
    """An in-place running mean of lists of tensors over ``num_averaged + 1`` values."""
    @no_grad()
    def swa_update(averaged_param_list, current_param_list, num_averaged):
        if averaged_param_list[0].is_floating_point() or averaged_param_list[0].is_complex():
            weight = float(1 / (num_averaged + 1))
            for p_avg, p_model in zip(averaged_param_list, current_param_list):
                p_avg.copy_(_lerp(p_avg, p_model, weight))
        else:
            for p_avg, p_model in zip(averaged_param_list, current_param_list):
                diff = p_model - p_avg
                if isinstance(num_averaged, mt.Tensor):
                    p_avg.addcdiv_(diff, num_averaged + 1)
                else:
                    p_avg.add_(diff, alpha=1.0 / (num_averaged + 1))
    return swa_update


def get_ema_avg_fn(decay=0.999):
    """The exponential moving average of one tensor, returned (not in place)."""
    _check_decay(decay)

    @no_grad()
    def ema_update(ema_param, current_param, num_averaged):
        return decay * ema_param + (1 - decay) * current_param
    return ema_update


def get_swa_avg_fn():
    """The running mean of one tensor over ``num_averaged + 1`` values, returned."""
    @no_grad()
    def swa_update(averaged_param, current_param, num_averaged):
        return averaged_param + (current_param - averaged_param) / (num_averaged + 1)
    return swa_update


class AveragedModel(Module):
    """A deep copy of ``model`` (in ``self.module``) whose parameters (and buffers, with
    ``use_buffers``) ``update_parameters(model)`` averages with ``model``'s: the first call
    copies them, later ones apply ``avg_fn`` (one tensor at a time, returning the new
    average) or ``multi_avg_fn`` (lists of tensors of one dtype, in place); the default is
    the equal-weight running mean (SWA).  Without ``use_buffers`` the buffers are copied
    from ``model``.  ``n_averaged`` (an int64 buffer) counts the calls."""

    def __init__(self, model, device=None, avg_fn=None, multi_avg_fn=None, use_buffers=False):
        super().__init__()
        if avg_fn is not None and multi_avg_fn is not None:
            raise AssertionError("Only one of avg_fn and multi_avg_fn should be provided")
        self.module = copy.deepcopy(model)
        if device is not None:
            self.module = self.module.to(device)
        self.register_buffer("n_averaged", mt.tensor(0, dtype=mt.long, device=device))
        self.avg_fn = avg_fn
        self.multi_avg_fn = multi_avg_fn
        self.use_buffers = use_buffers

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def _averaged_tensors(self, model):
        if self.use_buffers:
            return (itertools.chain(self.module.parameters(), self.module.buffers()),
                    itertools.chain(model.parameters(), model.buffers()))
        return self.parameters(), model.parameters()

    def update_parameters(self, model):
        """Averages ``model``'s parameters into this copy's."""
        averaged, current = [], []
        first = bool(self.n_averaged == 0)
        for p_averaged, p_model in zip(*self._averaged_tensors(model)):
            p_model = p_model.detach().to(p_averaged.device)
            averaged.append(p_averaged.detach())
            current.append(p_model)
            if first:
                p_averaged.detach().copy_(p_model)
        if not first:
            n_averaged = self.n_averaged
            if self.avg_fn is not None:
                for p_averaged, p_model in zip(averaged, current):
                    p_averaged.copy_(self.avg_fn(p_averaged, p_model, n_averaged))
            else:
                # PyTorch's CPU path: multi_avg_fn per dtype, else the mean one at a time.
                by_dtype = {}
                for p_averaged, p_model in zip(averaged, current):
                    pair = by_dtype.setdefault((p_averaged.device, p_averaged.dtype), ([], []))
                    pair[0].append(p_averaged)
                    pair[1].append(p_model)
                swa = get_swa_avg_fn()
                for group_averaged, group_current in by_dtype.values():
                    if self.multi_avg_fn is not None:
                        self.multi_avg_fn(group_averaged, group_current, n_averaged)
                        continue
                    for p_averaged, p_model in zip(group_averaged, group_current):
                        p_averaged.copy_(swa(p_averaged, p_model, n_averaged))
        if not self.use_buffers:
            for b_swa, b_model in zip(self.module.buffers(), model.buffers(), strict=True):
                b_swa.detach().copy_(b_model.detach().to(b_swa.device))
        self.n_averaged += 1


@no_grad()
def update_bn(loader, model, device=None):
    """Recomputes the running statistics of every batch-norm layer of ``model`` by one
    pass over ``loader`` (its batches, or the first item of each tuple or list batch), as a
    cumulative average (``momentum=None`` during the pass); the train/eval mode and each
    layer's momentum are restored."""
    momenta = {}
    for module in model.modules():
        if isinstance(module, _BatchNorm):
            module.reset_running_stats()
            momenta[module] = module.momentum
    if not momenta:
        return
    was_training = model.training
    model.train()
    for module in momenta:
        module.momentum = None
    for batch in loader:
        if isinstance(batch, (list, tuple)):
            batch = batch[0]
        if device is not None:
            batch = batch.to(device)
        model(batch)
    for module, momentum in momenta.items():
        module.momentum = momentum
    model.train(was_training)


class SWALR(LRScheduler):
    """Anneals each group's ``lr`` to its ``swa_lr`` over ``anneal_epochs`` steps (a cosine
    or linear ramp), then holds it."""

    def __init__(self, optimizer, swa_lr, anneal_epochs=10, anneal_strategy="cos",
                 last_epoch=-1):
        for value, group in zip(_per_group("swa_lr", optimizer, swa_lr),
                                optimizer.param_groups):
            group["swa_lr"] = value
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError("anneal_strategy must be one of 'cos' or 'linear', instead got "
                             f"{anneal_strategy}")
        self._set_anneal_func(anneal_strategy)
        if not isinstance(anneal_epochs, int) or anneal_epochs < 0:
            raise ValueError(f"anneal_epochs must be equal or greater than 0, got "
                             f"{anneal_epochs}")
        self.anneal_epochs = anneal_epochs
        super().__init__(optimizer, last_epoch)

    @staticmethod
    def _linear_anneal(t):
        return t

    @staticmethod
    def _cosine_anneal(t):
        return (1 - math.cos(math.pi * t)) / 2

    @staticmethod
    def _get_initial_lr(lr, swa_lr, alpha):
        if alpha == 1:
            return swa_lr
        return (lr - alpha * swa_lr) / (1 - alpha)

    def get_lr(self):
        # The rate before annealing is recovered from the current one, so that SWALR
        # composes with the schedulers that ran before it.
        step = self._step_count - 1
        if self.anneal_epochs == 0:
            step = max(1, step)
        prev_alpha = self.anneal_func(max(0, min(1, (step - 1) / max(1, self.anneal_epochs))))
        prev_lrs = [self._get_initial_lr(group["lr"], group["swa_lr"], prev_alpha)
                    for group in self.optimizer.param_groups]
        alpha = self.anneal_func(max(0, min(1, step / max(1, self.anneal_epochs))))
        return [group["swa_lr"] * alpha + lr * (1 - alpha)
                for group, lr in zip(self.optimizer.param_groups, prev_lrs)]

    def _set_anneal_func(self, anneal_strategy):
        self._anneal_strategy = anneal_strategy
        self.anneal_func = self._cosine_anneal if anneal_strategy == "cos" else self._linear_anneal

    def state_dict(self):
        return {key: value for key, value in self.__dict__.items()
                if key not in ("optimizer", "anneal_func")}

    def load_state_dict(self, state_dict):
        self.__dict__.update(state_dict)
        self._set_anneal_func(self._anneal_strategy)
