"""Optimizer and scheduler arguments as torch.optim's: every signature, the implementation
switches (``foreach``, ``fused``, ``capturable``, ``differentiable``) with PyTorch's numbers
and refusals, ``param_groups`` and ``state_dict`` keys, state_dicts exchanged with PyTorch
in both directions, and the schedulers' ``state_dict`` keys and ``get_lr`` warning."""
import copy
import inspect
import warnings

import numpy as np
import pytest

import microtensor as mt
from test_optim import OPTIMIZERS, SCHEDULERS, factory, numpy_of, run

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (optional "
                                                       "test oracle)")

OPTIMIZER_NAMES = sorted(n for n in dir(mt.optim) if isinstance(getattr(mt.optim, n), type)
                         and issubclass(getattr(mt.optim, n), mt.optim.Optimizer))
SCHEDULER_NAMES = sorted(mt.optim.lr_scheduler.__all__)
SWITCHES = ("foreach", "fused", "capturable", "differentiable")


def signature(obj):
    return [(p.name, p.kind, p.default) for p in inspect.signature(obj).parameters.values()]


def switches_of(name):
    return [s for s in SWITCHES if s in inspect.signature(getattr(mt.optim, name)).parameters]


def make_optimizer(lib, name, **options):
    """``name`` on one 2-D parameter (Muon takes matrices only)."""
    return getattr(lib.optim, name)([lib.zeros(2, 3, requires_grad=True)], **options)


@needs_torch
def test_every_torch_optimizer_and_scheduler_is_here():
    theirs = {n for n in dir(torch.optim) if isinstance(getattr(torch.optim, n), type)
              and issubclass(getattr(torch.optim, n), torch.optim.Optimizer)}
    assert theirs == set(OPTIMIZER_NAMES)
    sched = torch.optim.lr_scheduler
    theirs = {n for n in dir(sched) if not n.startswith("_")
              and isinstance(getattr(sched, n), type) and issubclass(getattr(sched, n),
                                                                     sched.LRScheduler)}
    assert theirs - {"ReduceLROnPlateau"} <= set(SCHEDULER_NAMES)


@needs_torch
@pytest.mark.parametrize("name", OPTIMIZER_NAMES)
def test_optimizer_signature_is_torch_s(name):
    assert signature(getattr(mt.optim, name)) == signature(getattr(torch.optim, name))


@needs_torch
@pytest.mark.parametrize("name", SCHEDULER_NAMES)
def test_scheduler_signature_is_torch_s(name):
    ours, theirs = getattr(mt.optim.lr_scheduler, name), getattr(torch.optim.lr_scheduler, name)
    assert signature(ours) == signature(theirs)


@needs_torch
@pytest.mark.parametrize("name", [n for n in OPTIMIZER_NAMES if n != "Optimizer"])
def test_param_groups_and_defaults_are_torch_s(name):
    ours, theirs = make_optimizer(mt, name), make_optimizer(torch, name)
    assert list(ours.defaults.items()) == list(theirs.defaults.items())
    group, tgroup = ours.param_groups[0], theirs.param_groups[0]
    assert list(group) == list(tgroup)
    assert {k: v for k, v in group.items() if k != "params"} == \
        {k: v for k, v in tgroup.items() if k != "params"}


@needs_torch
@pytest.mark.parametrize("name", [n for n in OPTIMIZER_NAMES if n != "Optimizer"])
def test_a_switch_the_optimizer_lacks_is_refused_as_torch(name):
    """E.g. ``RMSprop(fused=True)``: PyTorch's TypeError, word for word."""
    for switch in set(SWITCHES) - set(switches_of(name)):
        messages = []
        for lib in (mt, torch):
            with pytest.raises(TypeError) as info:
                make_optimizer(lib, name, **{switch: True})
            messages.append(str(info.value))
        assert messages[0] == messages[1]
        assert f"unexpected keyword argument '{switch}'" in messages[0]


def switch_cases():
    cases = []
    for cls, options, group in OPTIMIZERS:
        for switch in switches_of(cls):
            if switch != "differentiable":     # needs non-leaf parameters: tested below
                cases.append(pytest.param(cls, options, group, switch,
                                          id=f"{cls}-{options}-{group}-{switch}"))
    return cases


@needs_torch
@pytest.mark.parametrize("cls, options, group, switch", switch_cases())
def test_switches_give_torch_s_numbers_and_state(cls, options, group, switch):
    """``foreach`` and ``fused`` as PyTorch with the same switch; ``capturable`` (a CUDA
    graph switch, which PyTorch refuses for CPU parameters at the step) has no effect: the
    numbers are PyTorch's without it, and the groups keep it."""
    ours, opt = run(mt, factory(cls, dict(options, **{switch: True}), group), 5)
    torch_options = dict(options) if switch == "capturable" else dict(options, **{switch: True})
    theirs, topt = run(torch, factory(cls, torch_options, group), 5)
    # PyTorch's multi-tensor ASGD computes eta from the float32 step in float32 tensor
    # arithmetic (its single-tensor ASGD, which this one follows, in float64): ~1 ulp of
    # float32 apart.
    rtol = 1e-6 if (cls, switch) == ("ASGD", "foreach") else 1e-10
    for p, q in zip(ours, theirs):
        np.testing.assert_allclose(numpy_of(p), numpy_of(q), rtol=rtol, atol=1e-12)
    assert all(g[switch] is True for g in opt.param_groups)
    sd, tsd = opt.state_dict(), topt.state_dict()
    for index, state in sd["state"].items():
        assert list(state) == list(tsd["state"][index])
        for key, value in state.items():
            assert str(value.dtype).split(".")[-1] == str(tsd["state"][index][key].dtype) \
                .split(".")[-1], key


@needs_torch
@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW", "Adagrad"])
def test_fused_refusals_are_torch_s(name):
    for options in (dict(fused=True, foreach=True), dict(fused=True, differentiable=True)):
        messages = []
        for lib in (mt, torch):
            with pytest.raises(RuntimeError) as info:
                make_optimizer(lib, name, **options)
            messages.append(str(info.value))
        assert messages[0] == messages[1]
    messages = []
    for lib in (mt, torch):
        w = lib.ones(3, dtype=lib.int64)
        w.grad = lib.ones(3, dtype=lib.int64)
        with pytest.raises(RuntimeError) as info:
            getattr(lib.optim, name)([w], fused=True).step()
        messages.append(str(info.value).replace("torch.", "microtensor."))
        assert w.tolist() == [1, 1, 1]
    assert messages[0] == messages[1]
    assert "`fused=True` requires all the params to be floating point" in messages[0]


@pytest.mark.parametrize("name", ["Adam", "Adagrad"])
def test_fused_keeps_the_step_in_float32_as_torch(name):
    """Even with float64 as the default dtype (where the step is float64 otherwise)."""
    previous = mt.get_default_dtype()
    mt.set_default_dtype(mt.float64)
    try:
        for fused, dtype in ((True, mt.float32), (None, mt.float64)):
            w = mt.ones(3, requires_grad=True)
            opt = getattr(mt.optim, name)([w], fused=fused)
            w.grad = mt.ones(3)
            opt.step()
            assert opt.state[w]["step"].dtype == dtype
    finally:
        mt.set_default_dtype(previous)


DIFFERENTIABLE = [("SGD", dict(lr=0.1, momentum=0.9)),
                  ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.1)),
                  ("Adam", dict(lr=0.1, amsgrad=True)), ("AdamW", dict(lr=0.1)),
                  ("Adam", dict(lr=0.1, maximize=True, weight_decay=0.1)),
                  ("Adamax", dict(lr=0.1)), ("NAdam", dict(lr=0.1)), ("RAdam", dict(lr=0.1)),
                  ("RMSprop", dict(lr=0.01, momentum=0.5, centered=True)),
                  ("RMSprop", dict(lr=0.01)),
                  ("Adagrad", dict(lr=0.1)), ("Adadelta", dict()), ("Rprop", dict()),
                  ("ASGD", dict(lr=0.1, t0=1))]


def meta_gradient(lib, cls, steps, **options):
    """The gradient of a loss of the parameters after ``steps`` differentiable steps with
    respect to their starting point (as in meta-learning), and those parameters."""
    w0 = lib.tensor(np.array([0.5, -1.0, 2.0]), requires_grad=True)
    p = w0.clone()
    opt = getattr(lib.optim, cls)([p], differentiable=True, **options)
    for _ in range(steps):
        p.grad = 3 * p + 0.5
        opt.step()
    (p * p).sum().backward()
    return numpy_of(w0.grad), numpy_of(p)


@needs_torch
@pytest.mark.parametrize("cls, options", DIFFERENTIABLE,
                         ids=[f"{c}-{o}" for c, o in DIFFERENTIABLE])
def test_differentiable_step_backpropagates_as_torch(cls, options):
    # As many steps as PyTorch's own update rule can backpropagate through: some of its
    # rules (Adam with amsgrad, Adamax, centered RMSprop, Rprop) update in place state that
    # an earlier step saved, and their backward fails after a second step.
    try:
        theirs = meta_gradient(torch, cls, 3, **options)
        steps = 3
    except RuntimeError:
        theirs, steps = meta_gradient(torch, cls, 1, **options), 1
    ours = meta_gradient(mt, cls, steps, **options)
    # PyTorch's differentiable Adam family computes its bias corrections from the float32
    # step tensor; microtensor's in float64 as in the ordinary step.
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-5)
    if steps > 1:   # (a first step of the sign-like rules has a Jacobian near identity)
        assert not np.allclose(ours[0], 2 * ours[1])     # the update was differentiated


@needs_torch
def test_differentiable_rules():
    """A leaf that requires grad cannot be updated in place under autograd; a non-leaf
    needs ``differentiable=True``; without it the step records nothing."""
    messages = []
    for lib in (mt, torch):
        w = lib.ones(3, requires_grad=True)
        opt = lib.optim.SGD([w], lr=0.1, differentiable=True)
        w.grad = lib.ones(3)
        with pytest.raises(RuntimeError) as info:
            opt.step()
        messages.append(str(info.value))
        assert w.tolist() == [1.0, 1.0, 1.0]
        with pytest.raises(ValueError, match="can't optimize a non-leaf Tensor"):
            lib.optim.SGD([w.clone()], lr=0.1)
        w0 = lib.ones(3, requires_grad=True)
        w.grad = w0 * 2
        lib.optim.SGD([w], lr=0.1).step()
        assert w.grad_fn is None and w.requires_grad
    assert messages[0] == messages[1]
    assert "a leaf Variable that requires grad is being used in an in-place operation" \
        in messages[0]


def converted(value, lib):
    """A state_dict's tensors as ``lib``'s (same dtype), the rest as it is."""
    if isinstance(value, dict):
        return {k: converted(v, lib) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(converted(v, lib) for v in value)
    if hasattr(value, "numpy") and hasattr(value, "dtype"):
        return lib.tensor(numpy_of(value).copy())
    return value


def exchange_cases():
    cases = []
    for cls, options, group in OPTIMIZERS:
        # The last of a class's switches, so that the groups exchanged carry one set (none
        # for ASGD, whose foreach rounding differs, see above).
        switches = [s for s in switches_of(cls) if s in ("foreach", "fused") and cls != "ASGD"]
        options = dict(options, **{switches[-1]: True}) if switches else options
        cases.append(pytest.param(factory(cls, options, group), id=f"{cls}-{options}"))
    cases.append(pytest.param(lambda lib, params: lib.optim.Muon([params[0]], lr=0.05),
                              id="Muon"))
    return cases


@needs_torch
@pytest.mark.parametrize("make", exchange_cases())
def test_state_dict_exchanged_with_torch_both_ways(make):
    """3 steps in each library; each state_dict loads into the other library's optimizer
    (on copies of the parameters), and 4 more steps match PyTorch's: PyTorch continuing
    for microtensor's optimizer and the one that loaded PyTorch's state; PyTorch resumed
    from its own state_dict for the one that loaded microtensor's (PyTorch's load casts
    NAdam's and ASGD's float32 scalars to the parameter's dtype, so its resumed run is not
    bit-identical to its straight one)."""
    ours, opt = run(mt, make, 3)
    theirs, topt = run(torch, make, 3)
    sd, tsd = opt.state_dict(), topt.state_dict()
    assert [list(g) for g in sd["param_groups"]] == [list(g) for g in tsd["param_groups"]]
    assert {i: list(s) for i, s in sd["state"].items()} == \
        {i: list(s) for i, s in tsd["state"].items()}
    ours_from_torch = [mt.tensor(numpy_of(p).copy(), requires_grad=True) for p in theirs]
    opt_from_torch = make(mt, ours_from_torch)
    opt_from_torch.load_state_dict(converted(tsd, mt))
    theirs_from_ours = [torch.tensor(numpy_of(p).copy(), requires_grad=True) for p in ours]
    topt_from_ours = make(torch, theirs_from_ours)
    topt_from_ours.load_state_dict(converted(sd, torch))
    theirs_resumed = [torch.tensor(numpy_of(p).copy(), requires_grad=True) for p in theirs]
    topt_resumed = make(torch, theirs_resumed)
    topt_resumed.load_state_dict(copy.deepcopy(tsd))   # (PyTorch's load may share tensors)
    runs = ((mt, ours, opt), (torch, theirs, topt), (mt, ours_from_torch, opt_from_torch),
            (torch, theirs_from_ours, topt_from_ours), (torch, theirs_resumed, topt_resumed))
    for lib, params, optimizer in runs:
        run(lib, make, 4, params, optimizer)
    for results, expected in ((ours, theirs), (ours_from_torch, theirs),
                              (theirs_from_ours, theirs_resumed)):
        for p, q in zip(results, expected):
            np.testing.assert_allclose(numpy_of(p), numpy_of(q), rtol=1e-10, atol=1e-12)


SCHEDULER_CASES = dict(SCHEDULERS, **{
    "CyclicLR": lambda s, o: [s.CyclicLR(o, base_lr=0.01, max_lr=0.1, step_size_up=3)],
    "ReduceLROnPlateau": lambda s, o: [s.ReduceLROnPlateau(o)]})


def scheduler_record(lib, name):
    """After 3 steps: each scheduler's state_dict keys (in order) with their value types,
    the warnings of the steps and of calling ``get_lr()`` outside of a step."""
    w, b = lib.zeros(2, requires_grad=True), lib.zeros(1, requires_grad=True)
    opt = lib.optim.SGD([{"params": [w]}, {"params": [b], "lr": 0.01}], lr=0.1, momentum=0.9)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        schedulers = SCHEDULER_CASES[name](lib.optim.lr_scheduler, opt)
        for _ in range(3):
            opt.step()
            for s in schedulers:
                s.step(1.0) if name == "ReduceLROnPlateau" else s.step()
        during_steps = [str(w.message) for w in caught]
        outside = []
        for s in schedulers:
            try:
                s.get_lr()
            except (AttributeError, NotImplementedError) as error:
                outside.append(type(error).__name__)
        outside += [str(w.message) for w in caught[len(during_steps):]]
    states = [[(k, type(v).__name__) for k, v in s.state_dict().items()] for s in schedulers]
    return states, during_steps, outside


@needs_torch
@pytest.mark.parametrize("name", list(SCHEDULER_CASES))
def test_scheduler_state_dict_keys_and_get_lr_warning_are_torch_s(name):
    ours, theirs = scheduler_record(mt, name), scheduler_record(torch, name)
    assert ours == theirs


@needs_torch
@pytest.mark.parametrize("name", [n for n in OPTIMIZER_NAMES
                                  if n not in ("Optimizer", "LBFGS", "SparseAdam")])
def test_a_tensor_lr_as_torch(name):
    """A one-element tensor steps as the number; more elements, or (Adam, AdamW) a tensor
    with ``foreach=True`` and not ``capturable``, are refused with PyTorch's ValueError."""
    outcomes = []
    for lib in (mt, torch):
        row = []
        for lr, options in ((lib.tensor(0.01), {}), (lib.tensor([0.1, 0.2]), {}),
                            (lib.tensor(0.01), {"foreach": True})):
            if set(options) - set(switches_of(name)):
                continue
            w = lib.ones(2, 3, requires_grad=True)
            try:
                opt = getattr(lib.optim, name)([w], lr=lr, **options)
                for _ in range(2):
                    w.grad = lib.ones(2, 3)
                    opt.step()
                row.append(np.round(numpy_of(w), 12).tolist())
            except (ValueError, RuntimeError) as error:
                row.append((type(error).__name__, str(error)))
        outcomes.append(row)
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][1] == ("ValueError", "Tensor lr must be 1-element")
