"""The optimizer base class, as ``torch.optim.Optimizer``: parameter groups with their own
options, per-parameter state, ``state_dict`` in PyTorch's layout, the step loop every
update rule shares, and the step and state_dict hooks (per optimizer, and the global step
hooks of ``register_optimizer_step_pre_hook``/``_post_hook``).  Updates write into the
parameters in place, under ``no_grad`` unless the optimizer is ``differentiable``; the
implementation switches ``foreach``, ``fused`` and ``capturable`` are kept in the groups
as PyTorch keeps them and all run the one single-tensor update (the same numbers)."""
import copy
import functools
import itertools
import warnings
from collections import OrderedDict, defaultdict

import microtensor as mt
from microtensor._tensor import Tensor
from microtensor.autograd.grad_mode import enable_grad, set_grad_enabled
from microtensor.nn.hooks import RemovableHandle

# The step hooks of every optimizer (run before, resp. after, each one's own).
_global_optimizer_pre_hooks = OrderedDict()
_global_optimizer_post_hooks = OrderedDict()
_HOOK_TABLES = ("_optimizer_step_pre_hooks", "_optimizer_step_post_hooks",
                "_optimizer_state_dict_pre_hooks", "_optimizer_state_dict_post_hooks",
                "_optimizer_load_state_dict_pre_hooks", "_optimizer_load_state_dict_post_hooks")


def register_optimizer_step_pre_hook(hook):
    """``hook(optimizer, args, kwargs)`` before every optimizer's ``step``; it may return
    ``(new_args, new_kwargs)``.  Returns a ``RemovableHandle``."""
    return _add_hook(_global_optimizer_pre_hooks, hook)


def register_optimizer_step_post_hook(hook):
    """``hook(optimizer, args, kwargs)`` after every optimizer's ``step``."""
    return _add_hook(_global_optimizer_post_hooks, hook)


def _add_hook(table, hook, prepend=False):
    handle = RemovableHandle(table)
    table[handle.id] = hook
    if prepend:
        table.move_to_end(handle.id, last=False)
    return handle

_LABELS = {"lr": "learning rate", "eps": "epsilon value"}
# Scalar state kept in its own dtype when loaded (PyTorch exempts only "step"): NAdam's
# mu_product, ASGD's eta and mu.
_COUNTERS = ("step", "mu_product", "eta", "mu")


def _check_hyperparameters(**values):
    """PyTorch's argument checks, in the order given: every value must be >= 0 (NaN fails
    too), each beta in [0, 1) and rho in [0, 1]; a tensor ``lr`` must have one element."""
    for name, value in values.items():
        if name == "lr":
            _check_tensor_lr(value)
        if name == "betas":
            for i, beta in enumerate(value):
                if not 0.0 <= beta < 1.0:
                    raise ValueError(f"Invalid beta parameter at index {i}: {beta}")
        elif not 0.0 <= value or (name == "rho" and value > 1.0):
            raise ValueError(f"Invalid {_LABELS.get(name, name + ' value')}: {value}")


def _check_tensor_lr(lr):
    if isinstance(lr, Tensor) and lr.numel() != 1:
        raise ValueError("Tensor lr must be 1-element")


def _scalar_tensor(value, fused=False):
    """A 0-d tensor for a per-parameter counter (``step``, NAdam's ``mu_product``), in
    float32 unless the default dtype is float64 (always float32 for a ``fused``
    optimizer), as PyTorch keeps them."""
    dtype = mt.float64 if mt.get_default_dtype() == mt.float64 and not fused else mt.float32
    return mt.tensor(value, dtype=dtype)


def _use_grad_for_differentiable(step):
    """``step`` run with grad mode on for a ``differentiable`` optimizer (so that autograd
    records the update) and off otherwise, as PyTorch's decorator of the same name."""
    @functools.wraps(step)
    def with_grad_mode(self, *args, **kwargs):
        with set_grad_enabled(self.defaults.get("differentiable", False)):
            return step(self, *args, **kwargs)
    return with_grad_mode


# PyTorch names these in its refusal of a parameter that a fused kernel cannot update.
_FUSED_DEVICES = ["mps", "cuda", "xpu", "hpu", "cpu", "mtia", "privateuseone"]


def _check_fused_param(p):
    """PyTorch's refusal, for ``fused=True``, of a parameter that is not floating point."""
    if not p.is_floating_point():
        raise RuntimeError("`fused=True` requires all the params to be floating point "
                           f"Tensors of supported devices: {_FUSED_DEVICES} but "
                           f"{p.dtype} and {p.device.type}")


def _lerp(start, end, weight):
    """``start + weight * (end - start)`` for a number ``weight``, rounded as PyTorch's
    lerp: from ``end`` back when ``weight >= 0.5`` (so that a weight of 1 gives ``end``)."""
    if weight < 0.5:
        return start + (end - start) * weight
    return end - (end - start) * (1 - weight)


def _operand(state_tensor, group):
    """``state_tensor`` as an operand of an op whose backward saves it: a copy when the
    step is ``differentiable`` (the state is updated in place after, which would spoil
    the saved value), the tensor itself otherwise, as PyTorch's update rules."""
    return state_tensor.clone() if group.get("differentiable") else state_tensor


def _ema_(average, value, beta):
    """average <- beta * average + (1 - beta) * value, in place."""
    return average.mul_(beta).add_(value, alpha=1 - beta)


def _ema_sq_(average, value, beta):
    """average <- beta * average + (1 - beta) * value**2, in place."""
    return average.mul_(beta).add_(value * value, alpha=1 - beta)


class Optimizer:
    """Holds ``param_groups`` (dicts of ``params`` and options; options a group leaves out
    come from ``defaults``) and ``state`` (a dict per parameter).

    Subclasses give ``_init_state(p, group)`` (the state a parameter starts with) and
    ``_update(p, grad, state, group)`` (one step for one parameter); ``step`` calls them
    for every parameter with a gradient, after negating it (``maximize``), counting
    ``state["step"]`` and applying weight decay."""

    _stepping = False   # inside a hooked step (a subclass's step calling super().step())

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "step" in vars(cls):
            cls.step = _hooked_step(vars(cls)["step"])

    def __init__(self, params, defaults):
        for table in _HOOK_TABLES:
            setattr(self, table, OrderedDict())
        if isinstance(params, Tensor):
            raise TypeError("params argument given to the optimizer should be an iterable "
                            f"of Tensors or dicts, but got {type(params).__name__}")
        self.defaults = defaults
        self.state = defaultdict(dict)
        self.param_groups = []
        groups = list(params)
        if not groups:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for group in groups:
            self.add_param_group(group)
        if defaults.get("fused"):
            if defaults["differentiable"]:
                raise RuntimeError("`fused` does not support `differentiable`")
            if defaults.get("foreach"):
                raise RuntimeError("`fused` and `foreach` cannot be `True` together.")

    def __repr__(self):
        text = f"{type(self).__name__} ("
        for i, group in enumerate(self.param_groups):
            text += f"\nParameter Group {i}\n"
            text += "".join(f"    {k}: {group[k]}\n" for k in sorted(group) if k != "params")
        return text + ")"

    def add_param_group(self, param_group):
        """Adds a group (a dict with ``params`` and options) to ``param_groups``."""
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {type(param_group)}")
        params = param_group["params"]
        if isinstance(params, set):
            raise TypeError("optimizer parameters need to be organized in ordered "
                            "collections, but the ordering of tensors in sets will change "
                            "between runs. Please use a list instead.")
        params = [params] if isinstance(params, Tensor) else list(params)
        named = [p for p in params if isinstance(p, tuple)]
        if named and len(named) != len(params):
            raise ValueError("all optimizer params should be with/without names. "
                             "Some param names are missing")
        group = dict(param_group)
        if named:
            group["param_names"] = [name for name, _ in named]
            params = [p for _, p in named]
        for p in params:
            if not isinstance(p, Tensor):
                raise TypeError("optimizer can only optimize Tensors, but one of the params "
                                f"is {type(p).__name__}")
            if not (self.defaults.get("differentiable") or p.is_leaf or p.retains_grad):
                raise ValueError("can't optimize a non-leaf Tensor")
        group["params"] = params
        for name, default in self.defaults.items():
            group.setdefault(name, default)
        if len({id(p) for p in params}) != len(params):
            warnings.warn("optimizer contains a parameter group with duplicate parameters; "
                          "in future, this will cause an error", stacklevel=2)
        seen = set()
        for other in self.param_groups:
            seen.update(id(p) for p in other["params"])
            if ("param_names" in other) != bool(named):
                kind = "with names" if named else "without names"
                raise ValueError("all optimizer param groups should be with/without names. "
                                 f"cannot add param group {kind} to the optimizer")
        if any(id(p) in seen for p in params):
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(group)

    def zero_grad(self, set_to_none=True):
        """Sets the gradients to None (default) or to zero."""
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    if p.grad.grad_fn is not None:
                        p.grad.detach_()
                    else:
                        p.grad.requires_grad_(False)
                    p.grad.zero_()

    # -- one step ----------------------------------------------------------------------

    @_use_grad_for_differentiable
    def step(self, closure=None):
        """One update of every parameter that has a gradient; ``closure`` (re-evaluating
        the loss, with grad enabled) runs first and its loss is returned."""
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if group.get("fused"):
                    _check_fused_param(p)
                grad = p.grad.neg() if group.get("maximize") else p.grad
                state = self._param_state(p, group)
                grad = self._weight_decayed(p, grad, group)
                self._update(p, grad, state, group)
        return loss

    def _param_state(self, p, group):
        """The parameter's state, created on its first step, with ``step`` counted."""
        state = self.state[p]
        if not state:
            state.update(self._init_state(p, group))
        if "step" in state:
            state["step"] += 1
        return state

    @staticmethod
    def _weight_decayed(p, grad, group):
        """L2 weight decay added to the gradient or, with ``decoupled_weight_decay``
        (AdamW), the parameter shrunk by ``lr * weight_decay`` before the update."""
        decay = group.get("weight_decay", 0)
        if decay == 0:
            return grad
        if group.get("decoupled_weight_decay"):
            p.mul_(1 - group["lr"] * decay)
            return grad
        return grad.add(p, alpha=decay)

    def _init_state(self, p, group):
        raise NotImplementedError

    def _update(self, p, grad, state, group):
        raise NotImplementedError

    # -- hooks -----------------------------------------------------------------------------

    def register_step_pre_hook(self, hook):
        """``hook(optimizer, args, kwargs)`` before each ``step``; it may return
        ``(new_args, new_kwargs)`` for the step.  Returns a ``RemovableHandle``."""
        return _add_hook(self._optimizer_step_pre_hooks, hook)

    def register_step_post_hook(self, hook):
        """``hook(optimizer, args, kwargs)`` after each ``step``."""
        return _add_hook(self._optimizer_step_post_hooks, hook)

    def register_state_dict_pre_hook(self, hook, prepend=False):
        """``hook(optimizer)`` before ``state_dict`` builds the dict."""
        return _add_hook(self._optimizer_state_dict_pre_hooks, hook, prepend)

    def register_state_dict_post_hook(self, hook, prepend=False):
        """``hook(optimizer, state_dict)`` on the dict built; a dict it returns replaces it."""
        return _add_hook(self._optimizer_state_dict_post_hooks, hook, prepend)

    def register_load_state_dict_pre_hook(self, hook, prepend=False):
        """``hook(optimizer, state_dict)`` before loading (on a shallow copy of the dict
        given); a dict it returns is loaded instead."""
        return _add_hook(self._optimizer_load_state_dict_pre_hooks, hook, prepend)

    def register_load_state_dict_post_hook(self, hook, prepend=False):
        """``hook(optimizer)`` after loading."""
        return _add_hook(self._optimizer_load_state_dict_post_hooks, hook, prepend)

    # -- saving and resuming -------------------------------------------------------------

    def state_dict(self):
        """``{"state": {index: {...}}, "param_groups": [{..., "params": [indices]}]}``:
        parameters are numbered in group order, as PyTorch.  The state's tensors are the
        optimizer's own (not copies), as PyTorch: save or deepcopy the dict to keep it.
        The state_dict hooks run before and on the dict."""
        for pre_hook in self._optimizer_state_dict_pre_hooks.values():
            pre_hook(self)
        index = {}
        groups = []
        for group in self.param_groups:
            packed = {k: v for k, v in group.items() if k != "params"}
            # Numbered by position, as PyTorch: a parameter repeated in a group takes its
            # last position there (leaving a gap), one in an earlier group keeps that index.
            start = sum(len(g["params"]) for g in groups)
            positions = {id(p): i for i, p in enumerate(group["params"], start)}
            for key, i in positions.items():
                index.setdefault(key, i)
            packed["params"] = [index[id(p)] for p in group["params"]]
            groups.append(packed)
        state = {index[id(p)] if isinstance(p, Tensor) else p: value
                 for p, value in self.state.items()}
        state_dict = {"state": state, "param_groups": groups}
        for post_hook in self._optimizer_state_dict_post_hooks.values():
            result = post_hook(self, state_dict)
            if result is not None:
                state_dict = result
        return state_dict

    def load_state_dict(self, state_dict):
        """Loads a ``state_dict()``: parameters are matched by their index in group order;
        the state is copied, floating tensors cast to their parameter's dtype (``step``
        and NAdam's ``mu_product`` kept as saved, so that a resumed run is bit-identical).
        Mismatched groups raise before anything changes.  The load_state_dict pre-hooks
        see (and may replace) a shallow copy of ``state_dict``; the post-hooks run after."""
        state_dict = dict(state_dict)
        for pre_hook in self._optimizer_load_state_dict_pre_hooks.values():
            result = pre_hook(self, state_dict)
            if result is not None:
                state_dict = result
        saved_groups = copy.deepcopy(state_dict["param_groups"])
        if len(saved_groups) != len(self.param_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        if any(len(g["params"]) != len(s["params"])
               for g, s in zip(self.param_groups, saved_groups)):
            raise ValueError("loaded state dict contains a parameter group that doesn't "
                             "match the size of optimizer's group")
        params = {i: p for s, g in zip(saved_groups, self.param_groups)
                  for i, p in zip(s["params"], g["params"])}
        # PyTorch keeps the step of a fused or capturable group's parameter in float32.
        float32_steps = {i for s in saved_groups if s.get("fused") or s.get("capturable")
                         for i in s["params"]}
        state = defaultdict(dict)
        for key, value in state_dict["state"].items():
            if key in params:
                state[params[key]] = _cast_state(params[key], value,
                                                 float32_step=key in float32_steps)
            else:
                state[key] = copy.deepcopy(value)
        for group, saved in zip(self.param_groups, saved_groups):
            saved["params"] = group["params"]
            if "param_names" in group:
                saved.setdefault("param_names", group["param_names"])
        self.state = state
        self.param_groups = saved_groups
        for post_hook in self._optimizer_load_state_dict_post_hooks.values():
            post_hook(self)


def _hooked_step(step):
    """``step`` with the step hooks (global pre-hooks, the optimizer's pre-hooks, then
    after it the optimizer's and the global post-hooks), noting that it ran for the
    schedulers' warning about stepping them first.  Also wraps the ``step`` of optimizers
    written outside this package; a ``step`` that calls ``super().step()`` runs them once."""
    @functools.wraps(step)
    def hooked(*args, **kwargs):
        # The hooks see the optimizer in args, as PyTorch's (and return it in new args).
        self = args[0]
        if self._stepping:
            return step(*args, **kwargs)
        self._opt_called = True
        for pre_hook in itertools.chain(_global_optimizer_pre_hooks.values(),
                                        self._optimizer_step_pre_hooks.values()):
            result = pre_hook(self, args, kwargs)
            if result is not None:
                if not (isinstance(result, tuple) and len(result) == 2):
                    raise RuntimeError(f"{step} must return None or a tuple of (new_args, "
                                       f"new_kwargs), but got {result}.")
                args, kwargs = result
        self._stepping = True
        try:
            out = step(*args, **kwargs)
        finally:
            self._stepping = False
        for post_hook in itertools.chain(self._optimizer_step_post_hooks.values(),
                                         _global_optimizer_post_hooks.values()):
            post_hook(self, args, kwargs)
        return out
    return hooked


Optimizer.step = _hooked_step(Optimizer.step)


def _cast_state(param, value, key=None, float32_step=False):
    """A copy of saved state, its floating tensors in ``param``'s dtype and device (a
    ``step`` in float32 when ``float32_step``)."""
    if isinstance(value, Tensor):
        if key == "step" and float32_step:
            return value.to(dtype=mt.float32, device=param.device).clone()
        if key in _COUNTERS or not (param.is_floating_point() and value.is_floating_point()):
            return value.to(device=param.device).clone()
        return value.to(dtype=param.dtype, device=param.device).clone()
    if isinstance(value, dict):
        return {k: _cast_state(param, v, k, float32_step) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_cast_state(param, v) for v in value)
    return copy.deepcopy(value)
