"""``GradScaler``: PyTorch's loss scaling for low-precision training, on any device.

The loss is multiplied by a scale before backward, so that small gradients of a float16
or bfloat16 graph stay representable; before the optimizer steps, the gradients are
divided by it again, and a step whose gradients hold an infinity or NaN is skipped while
the scale backs off.  After ``growth_interval`` clean steps the scale grows.  This is
PyTorch's dynamic loss scaling rule, step for step, so a training loop written for
``torch.amp.GradScaler`` behaves the same here (and a PyTorch scaler's ``state_dict``
loads).
"""
import warnings
from collections import abc

import numpy as np

from microtensor._C.tensor import TensorBase, float16, float32
from microtensor.autograd.grad_mode import no_grad
from microtensor.ops.factory import tensor

__all__ = ["GradScaler", "OptState"]


class OptState:
    """Where one optimizer is in the current iteration."""
    READY = 0
    UNSCALED = 1
    STEPPED = 2


def _new_state():
    return {"stage": OptState.READY, "found_inf": None}


class GradScaler:
    """Dynamic loss scaling: ``scale(loss).backward()``, ``step(optimizer)``, ``update()``
    (see the module docstring)."""

    def __init__(self, device="cuda", init_scale=2.0 ** 16, growth_factor=2.0,
                 backoff_factor=0.5, growth_interval=2000, enabled=True):
        self._device = device
        self._enabled = enabled
        if enabled and device == "cuda":
            from microtensor import cuda
            if not cuda.is_available():
                warnings.warn("microtensor.cuda.amp.GradScaler is enabled, but CUDA is not "
                              "available.  Disabling.")
                self._enabled = False
        if self._enabled:
            if growth_factor <= 1.0:
                raise AssertionError("The growth factor must be > 1.0.")
            if backoff_factor >= 1.0:
                raise AssertionError("The backoff factor must be < 1.0.")
        self._scale = float(init_scale)
        self._growth_factor = float(growth_factor)
        self._backoff_factor = float(backoff_factor)
        self._growth_interval = int(growth_interval)
        self._growth_tracker = 0
        self._per_optimizer_states = {}

    def scale(self, outputs):
        """``outputs`` (a tensor, or tensors in nested iterables) times the scale, a
        float32 scalar tensor as PyTorch's (a float16 loss is scaled in float32)."""
        if not self._enabled:
            return outputs
        if isinstance(outputs, TensorBase):
            return outputs * tensor(self._scale, dtype=float32, device=outputs.device)
        if isinstance(outputs, abc.Iterable):
            scaled = map(self.scale, outputs)
            return type(outputs)(scaled) if isinstance(outputs, (list, tuple)) else scaled
        raise ValueError("outputs must be a Tensor or an iterable of Tensors")

    def unscale_(self, optimizer):
        """Divide ``optimizer``'s gradients by the scale, in place, and note whether any
        holds an infinity or NaN.  At most once per optimizer between ``update``\\ s."""
        if not self._enabled:
            return
        state = self._per_optimizer_states.setdefault(id(optimizer), _new_state())
        if state["stage"] == OptState.UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since "
                               "the last update().")
        if state["stage"] == OptState.STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        inverse = float(np.float32(1.0 / self._scale))   # PyTorch's float32 inverse
        found_inf = False
        with no_grad():
            for group in optimizer.param_groups:
                for param in group["params"]:
                    grad = param.grad
                    if grad is None:
                        continue
                    if grad.dtype is float16:
                        raise ValueError("Attempting to unscale FP16 gradients.")
                    grad.mul_(inverse)
                    found_inf = found_inf or not bool(grad.isfinite().all())
        state["found_inf"] = found_inf
        state["stage"] = OptState.UNSCALED

    def step(self, optimizer, *args, **kwargs):
        """``optimizer.step(*args, **kwargs)`` on unscaled gradients, skipped when they
        hold an infinity or NaN; returns what the step returns (None when skipped)."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is "
                               "enabled.")
        state = self._per_optimizer_states.setdefault(id(optimizer), _new_state())
        if state["stage"] == OptState.STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if state["stage"] == OptState.READY:
            self.unscale_(optimizer)
        result = None if state["found_inf"] else optimizer.step(*args, **kwargs)
        state["stage"] = OptState.STEPPED
        return result

    def update(self, new_scale=None):
        """The next iteration's scale: ``new_scale`` when given, else backed off after a
        step with non-finite gradients, grown after ``growth_interval`` clean ones."""
        if not self._enabled:
            return
        if new_scale is not None:
            self._scale = self._checked_new_scale(new_scale)
        else:
            found = [s["found_inf"] for s in self._per_optimizer_states.values()
                     if s["found_inf"] is not None]
            if not found:
                raise AssertionError("No inf checks were recorded prior to update.")
            if any(found):
                self._scale *= self._backoff_factor
                self._growth_tracker = 0
            else:
                self._growth_tracker += 1
                if self._growth_tracker == self._growth_interval:
                    self._scale *= self._growth_factor
                    self._growth_tracker = 0
            # the scale is a float32 tensor in PyTorch: it rounds there
            self._scale = float(np.float32(self._scale))
        self._per_optimizer_states = {}

    @staticmethod
    def _checked_new_scale(new_scale):
        if isinstance(new_scale, TensorBase):
            reason = ("new_scale should be a float or a 1-element microtensor.cuda.FloatTensor "
                      "or microtensor.FloatTensor with requires_grad=False.")
            if new_scale.numel() != 1 or new_scale.requires_grad:
                raise AssertionError(reason)
            return float(np.float32(new_scale.item()))
        return float(np.float32(new_scale))

    def get_scale(self):
        return self._scale if self._enabled else 1.0

    def get_growth_factor(self):
        return self._growth_factor

    def set_growth_factor(self, new_factor):
        self._growth_factor = new_factor

    def get_backoff_factor(self):
        return self._backoff_factor

    def set_backoff_factor(self, new_factor):
        self._backoff_factor = new_factor

    def get_growth_interval(self):
        return self._growth_interval

    def set_growth_interval(self, new_interval):
        self._growth_interval = new_interval

    def is_enabled(self):
        return self._enabled

    def state_dict(self):
        """PyTorch's keys: the scale, the factors, the interval and the growth tracker
        (empty for a disabled scaler)."""
        if not self._enabled:
            return {}
        return {"scale": self._scale, "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor,
                "growth_interval": self._growth_interval,
                "_growth_tracker": self._growth_tracker}

    def load_state_dict(self, state_dict):
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError("The source state dict is empty, possibly because it was saved "
                               "from a disabled instance of GradScaler.")
        self._scale = float(state_dict["scale"])
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        self._growth_tracker = int(state_dict.get("_growth_tracker", 0))
