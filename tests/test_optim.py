"""optim: every optimizer and scheduler against PyTorch (same problem, same options, float64),
state_dict round trips that resume bit-identically, argument checks."""
import copy
import math
import warnings

import numpy as np
import pytest

import microtensor as mt

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (optional "
                                                       "test oracle)")

_rng = np.random.default_rng(0)
W0, B0, U0 = _rng.standard_normal((4, 3)), _rng.standard_normal(3), _rng.standard_normal(2)
X, Y = _rng.standard_normal((8, 4)), _rng.standard_normal((8, 3))


def make_params(lib):
    """w, b (in the loss) and u (never given a gradient), float64."""
    return [lib.tensor(a.copy(), requires_grad=True) for a in (W0, B0, U0)]


def loss_of(lib, params):
    w, b, _ = params
    return ((lib.tensor(X) @ w + b).sin() * lib.tensor(Y)).sum() + 0.1 * (w * w).sum()


def numpy_of(t):
    return np.array(t.detach().numpy())


def run(lib, make, steps, params=None, opt=None):
    """``steps`` optimizer steps on the test problem; returns (params, optimizer)."""
    params = make_params(lib) if params is None else params
    opt = make(lib, params) if opt is None else opt
    for _ in range(steps):
        opt.zero_grad()
        loss_of(lib, params).backward()
        opt.step()
    return params, opt


def two_groups(lib, params, cls, group_options, **options):
    """w in a group of its own options, b and u with the defaults."""
    w, b, u = params
    return getattr(lib.optim, cls)([dict(params=[w], **group_options), {"params": [b, u]}],
                                   **options)


OPTIMIZERS = [
    ("SGD", dict(lr=0.1), {}),
    ("SGD", dict(lr=0.1, momentum=0.9, weight_decay=0.1), dict(lr=0.05)),
    ("SGD", dict(lr=0.1, momentum=0.9, dampening=0.3, maximize=True), {}),
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True), dict(momentum=0.5)),
    ("Adam", dict(lr=0.05), {}),
    ("Adam", dict(lr=0.05, weight_decay=0.1, amsgrad=True), dict(betas=(0.8, 0.9))),
    ("Adam", dict(lr=0.05, maximize=True, decoupled_weight_decay=True, weight_decay=0.1), {}),
    ("AdamW", dict(lr=0.05), {}),
    ("AdamW", dict(lr=0.05, amsgrad=True, maximize=True), dict(weight_decay=0.5)),
    ("Adamax", dict(lr=0.05), {}),
    ("Adamax", dict(lr=0.05, weight_decay=0.1, maximize=True), dict(betas=(0.5, 0.9))),
    ("NAdam", dict(lr=0.05), {}),
    ("NAdam", dict(lr=0.05, weight_decay=0.1, momentum_decay=0.01), dict(lr=0.01)),
    ("NAdam", dict(lr=0.05, weight_decay=0.1, decoupled_weight_decay=True, maximize=True), {}),
    ("RAdam", dict(lr=0.05), {}),
    ("RAdam", dict(lr=0.05, betas=(0.9, 0.5), weight_decay=0.1), dict(betas=(0.9, 0.999))),
    ("RAdam", dict(lr=0.05, decoupled_weight_decay=True, weight_decay=0.1, maximize=True), {}),
    ("RMSprop", dict(lr=0.01), {}),
    ("RMSprop", dict(lr=0.01, momentum=0.9, centered=True, weight_decay=0.1), dict(alpha=0.9)),
    ("RMSprop", dict(lr=0.01, centered=True, maximize=True), dict(momentum=0.5)),
    ("Adagrad", dict(lr=0.1), {}),
    ("Adagrad", dict(lr=0.1, lr_decay=0.1, weight_decay=0.1, initial_accumulator_value=0.5),
     dict(eps=1e-3)),
    ("Adagrad", dict(lr=0.1, maximize=True), {}),
    ("Adadelta", dict(), {}),
    ("Adadelta", dict(lr=0.5, rho=0.5, weight_decay=0.1, maximize=True), dict(eps=1e-3)),
    ("Rprop", dict(), {}),
    ("Rprop", dict(lr=0.05, etas=(0.3, 1.5), step_sizes=(1e-3, 0.2)), dict(lr=0.01)),
    ("Rprop", dict(lr=0.05, maximize=True), dict(etas=(0.6, 1.1))),
    ("ASGD", dict(lr=0.05), {}),
    # t0 small and lambd large, so that the average and eta move within the run.
    ("ASGD", dict(lr=0.05, lambd=0.5, alpha=0.5, t0=2, weight_decay=0.1), dict(lr=0.02)),
    ("ASGD", dict(lr=0.05, t0=0, maximize=True), dict(lambd=0.1)),
    ("Adafactor", dict(), {}),
    ("Adafactor", dict(lr=0.05, beta2_decay=-0.5, eps=(1e-6, 1e-2), d=1.5,
                       weight_decay=0.1), dict(lr=0.2)),
    ("Adafactor", dict(lr=0.5, maximize=True, d=1.0), dict(eps=(1e-20, 1e-3))),
]
OPTIMIZER_IDS = [f"{cls}-{options}-{group}" for cls, options, group in OPTIMIZERS]


def factory(cls, options, group):
    return lambda lib, params: two_groups(lib, params, cls, group, **options)


@needs_torch
@pytest.mark.parametrize("cls, options, group", OPTIMIZERS, ids=OPTIMIZER_IDS)
def test_optimizer_matches_torch(cls, options, group):
    make = factory(cls, options, group)
    ours, opt = run(mt, make, 8)
    theirs, topt = run(torch, make, 8)
    for p, q in zip(ours, theirs):
        np.testing.assert_allclose(numpy_of(p), numpy_of(q), rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(numpy_of(ours[2]), U0)     # no gradient: untouched
    # The same state, in PyTorch's layout.
    sd, tsd = opt.state_dict(), topt.state_dict()
    assert sd["state"].keys() == tsd["state"].keys()
    for index, state in sd["state"].items():
        assert state.keys() == tsd["state"][index].keys()
        for key, value in state.items():
            expected = tsd["state"][index][key]
            np.testing.assert_allclose(numpy_of(value), expected.numpy(), rtol=1e-10,
                                       atol=1e-12, err_msg=key)
            assert str(value.dtype).split(".")[-1] == str(expected.dtype).split(".")[-1]
    assert [g["params"] for g in sd["param_groups"]] == [[0], [1, 2]]
    for group, tgroup in zip(sd["param_groups"], tsd["param_groups"]):
        assert {k: v for k, v in tgroup.items() if k in group} == group


@pytest.mark.parametrize("cls, options, group", OPTIMIZERS, ids=OPTIMIZER_IDS)
def test_state_dict_resumes_bit_identically(cls, options, group):
    make = factory(cls, options, group)
    straight, _ = run(mt, make, 6)
    params, opt = run(mt, make, 3)
    saved = copy.deepcopy(opt.state_dict())
    fresh = [p.detach().clone().requires_grad_(True) for p in params]
    resumed = make(mt, fresh)
    resumed.load_state_dict(saved)
    run(mt, make, 3, fresh, resumed)
    for p, q in zip(fresh, straight):
        np.testing.assert_array_equal(numpy_of(p), numpy_of(q))
    # The loaded state is a copy: stepping on does not change what was saved.
    assert all(not any(v is w for v in s.values() for w in saved["state"][i].values())
               for i, s in resumed.state_dict()["state"].items())


@needs_torch
@pytest.mark.parametrize("cls, options, group", OPTIMIZERS[1::3], ids=OPTIMIZER_IDS[1::3])
def test_loads_a_torch_state_dict_and_continues_as_torch(cls, options, group):
    """PyTorch's state_dict (tensors converted) resumes here as it resumes in PyTorch."""
    make = factory(cls, options, group)
    theirs, topt = run(torch, make, 3)
    tsd = topt.state_dict()
    sd = {"state": {i: {k: mt.tensor(v.numpy()) for k, v in s.items()}
                    for i, s in tsd["state"].items()},
          "param_groups": tsd["param_groups"]}
    ours = [mt.tensor(p.detach().numpy().copy(), requires_grad=True) for p in theirs]
    opt = make(mt, ours)
    opt.load_state_dict(sd)
    run(torch, make, 4, theirs, topt)
    run(mt, make, 4, ours, opt)
    for p, q in zip(ours, theirs):
        np.testing.assert_allclose(numpy_of(p), numpy_of(q), rtol=1e-10, atol=1e-12)


@needs_torch
@pytest.mark.parametrize("options", [
    dict(), dict(line_search_fn="strong_wolfe"), dict(history_size=3, max_iter=7),
    dict(lr=0.5, line_search_fn="strong_wolfe", history_size=2)])
def test_lbfgs_matches_torch(options):
    def minimise(lib):
        params = make_params(lib)
        w, b, _ = params
        opt = lib.optim.LBFGS(params, **options)

        def closure():
            # Convex, so that rounding differences (in dot products) do not grow.
            opt.zero_grad()
            z = lib.tensor(X) @ w + b
            loss = ((z - lib.tensor(Y)) ** 2).sum() + 0.01 * (z ** 4).sum()
            loss.backward()
            return loss
        losses = [opt.step(closure).item() for _ in range(3)]
        return params, opt, losses

    ours, opt, losses = minimise(mt)
    theirs, topt, tlosses = minimise(torch)
    np.testing.assert_allclose(losses, tlosses, rtol=1e-10)
    for p, q in zip(ours, theirs):
        np.testing.assert_allclose(numpy_of(p), numpy_of(q), rtol=1e-9, atol=1e-11)
    state, tstate = opt.state[ours[0]], topt.state[theirs[0]]
    assert (state["n_iter"], state["func_evals"]) == (tstate["n_iter"], tstate["func_evals"])


@needs_torch
@pytest.mark.parametrize("options", [dict(lr=10.0), dict(max_iter=5, history_size=4)])
def test_lbfgs_line_search_on_rosenbrock_matches_torch(options):
    """A curved valley and long first steps: the line search brackets and zooms."""
    def minimise(lib):
        xy = lib.tensor([-1.5, 2.0], dtype=lib.float64, requires_grad=True)
        opt = lib.optim.LBFGS([xy], line_search_fn="strong_wolfe", **options)

        def closure():
            opt.zero_grad()
            loss = (1 - xy[0]) ** 2 + 100 * (xy[1] - xy[0] ** 2) ** 2
            loss.backward()
            return loss
        losses = [opt.step(closure).item() for _ in range(2)]
        return numpy_of(xy), losses, opt.state[xy]["func_evals"]

    ours, theirs = minimise(mt), minimise(torch)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-9)
    np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-9)
    assert ours[2] == theirs[2]


@pytest.mark.parametrize("line_search_fn", [None, "strong_wolfe"])
def test_lbfgs_state_dict_resumes_bit_identically(line_search_fn):
    def minimise(params, opt, steps):
        w, b, _ = params

        def closure():
            opt.zero_grad()
            z = mt.tensor(X) @ w + b
            loss = ((z - mt.tensor(Y)) ** 2).sum() + 0.01 * (z ** 4).sum()
            loss.backward()
            return loss
        for _ in range(steps):
            opt.step(closure)

    def make(params):
        return mt.optim.LBFGS(params, max_iter=4, history_size=3, line_search_fn=line_search_fn)

    straight = make_params(mt)
    minimise(straight, make(straight), 4)
    params = make_params(mt)
    opt = make(params)
    minimise(params, opt, 2)
    saved = copy.deepcopy(opt.state_dict())
    assert saved["state"][0]["n_iter"] > 4 and len(saved["state"][0]["old_dirs"]) == 3
    fresh = [p.detach().clone().requires_grad_(True) for p in params]
    resumed = make(fresh)
    resumed.load_state_dict(saved)
    minimise(fresh, resumed, 2)
    for p, q in zip(fresh, straight):
        np.testing.assert_array_equal(numpy_of(p), numpy_of(q))


def test_lbfgs_rejects_groups_and_unknown_line_search():
    w, b, _ = make_params(mt)
    with pytest.raises(ValueError, match="doesn't support per-parameter options"):
        mt.optim.LBFGS([{"params": [w]}, {"params": [b]}])
    opt = mt.optim.LBFGS([w], line_search_fn="armijo")
    with pytest.raises(RuntimeError, match="only 'strong_wolfe' is supported"):
        opt.step(lambda: loss_of(mt, [w, b, None]))


def test_lbfgs_minimises_a_quadratic():
    target = mt.tensor([1.0, -2.0, 3.0], dtype=mt.float64)
    x = mt.zeros(3, dtype=mt.float64, requires_grad=True)
    opt = mt.optim.LBFGS([x], line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = ((x - target) ** 2).sum()
        loss.backward()
        return loss
    opt.step(closure)
    np.testing.assert_allclose(numpy_of(x), [1.0, -2.0, 3.0], atol=1e-8)


@pytest.mark.parametrize("cls, options, message", [
    ("SGD", dict(lr=-1), "Invalid learning rate: -1"),
    ("SGD", dict(momentum=-0.5), "Invalid momentum value: -0.5"),
    ("SGD", dict(weight_decay=-1), "Invalid weight_decay value: -1"),
    ("SGD", dict(nesterov=True), "Nesterov momentum requires a momentum and zero dampening"),
    ("Adam", dict(eps=-1.0), "Invalid epsilon value: -1.0"),
    ("Adam", dict(betas=(1.0, 0.9)), "Invalid beta parameter at index 0: 1.0"),
    ("AdamW", dict(betas=(0.9, -0.1)), "Invalid beta parameter at index 1: -0.1"),
    ("Adam", dict(lr=float("nan")), "Invalid learning rate: nan"),
    ("RMSprop", dict(alpha=-1), "Invalid alpha value: -1"),
    ("Adagrad", dict(lr_decay=-1), "Invalid lr_decay value: -1"),
    ("Adagrad", dict(initial_accumulator_value=-1),
     "Invalid initial_accumulator_value value: -1"),
    ("Adadelta", dict(rho=1.5), "Invalid rho value: 1.5"),
    ("NAdam", dict(momentum_decay=-1), "Invalid momentum_decay value: -1"),
    ("RAdam", dict(weight_decay=-0.1), "Invalid weight_decay value: -0.1"),
    ("Adamax", dict(betas=(0.9, 1.0)), "Invalid beta parameter at index 1: 1.0"),
    ("LBFGS", dict(lr=-1), "Invalid learning rate: -1"),
])
def test_argument_checks_as_torch(cls, options, message):
    for lib in (mt, torch) if torch is not None else (mt,):
        with pytest.raises(ValueError) as info:
            getattr(lib.optim, cls)(make_params(lib), **options)
        assert str(info.value) == message, lib.__name__


@pytest.mark.parametrize("params_of, message", [
    (lambda p: [], "optimizer got an empty parameter list"),
    (lambda p: [p[0] * 2], "can't optimize a non-leaf Tensor"),
    (lambda p: [{"params": p[:1]}, {"params": p}],
     "some parameters appear in more than one parameter group"),
])
def test_parameter_checks_as_torch(params_of, message):
    for lib in (mt, torch) if torch is not None else (mt,):
        with pytest.raises(ValueError) as info:
            lib.optim.SGD(params_of(make_params(lib)), lr=0.1)
        assert str(info.value) == message, lib.__name__


def test_type_checks_on_params():
    w, b, _ = make_params(mt)
    with pytest.raises(TypeError, match="should be an iterable of Tensors or dicts"):
        mt.optim.SGD(w)
    with pytest.raises(TypeError, match="optimizer can only optimize Tensors, but one of the "
                                        "params is int"):
        mt.optim.SGD([w, 3])
    opt = mt.optim.SGD([w])
    with pytest.raises(TypeError, match="ordered collections"):
        opt.add_param_group({"params": {b}})
    with pytest.raises(TypeError, match="param_group must be a dict"):
        opt.add_param_group([b])
    assert len(opt.param_groups) == 1


def test_add_param_group_takes_the_defaults_and_its_own_options():
    w, b, u = make_params(mt)
    opt = mt.optim.SGD([w], lr=0.1, momentum=0.9)
    opt.add_param_group({"params": b, "lr": 0.01})
    assert opt.param_groups[1]["params"] == [b]
    assert (opt.param_groups[1]["lr"], opt.param_groups[1]["momentum"]) == (0.01, 0.9)
    with pytest.raises(ValueError, match="more than one parameter group"):
        opt.add_param_group({"params": [u, w]})
    assert len(opt.param_groups) == 2


def test_named_parameters_keep_their_names():
    model = mt.nn.Linear(2, 1)
    opt = mt.optim.Adam(model.named_parameters())
    assert opt.param_groups[0]["param_names"] == ["weight", "bias"]
    assert opt.state_dict()["param_groups"][0]["param_names"] == ["weight", "bias"]
    with pytest.raises(ValueError, match="with/without names"):
        opt.add_param_group({"params": [mt.zeros(1, requires_grad=True)]})


def test_zero_grad_sets_to_none_or_zero():
    w, b, _ = make_params(mt)
    opt = mt.optim.SGD([w, b])
    loss_of(mt, [w, b, None]).backward()
    opt.zero_grad(set_to_none=False)
    np.testing.assert_array_equal(numpy_of(w.grad), np.zeros((4, 3)))
    opt.zero_grad()
    assert w.grad is None and b.grad is None


def test_step_runs_the_closure_with_grad_and_returns_its_loss():
    w, b, u = make_params(mt)
    opt = mt.optim.Adam([w, b], lr=0.1)

    def closure():
        opt.zero_grad()
        loss = loss_of(mt, [w, b, u])
        loss.backward()
        return loss
    with mt.no_grad():
        loss = opt.step(closure)
    assert loss.grad_fn is not None and w.grad is not None


def test_load_state_dict_checks_before_changing_anything():
    w, b, u = make_params(mt)
    _, opt = run(mt, factory("Adam", dict(lr=0.1), {}), 2, [w, b, u])
    before = copy.deepcopy(opt.state_dict())
    other = mt.optim.Adam([w, b], lr=0.1)
    with pytest.raises(ValueError, match="different number of parameter groups"):
        opt.load_state_dict(other.state_dict())
    other = mt.optim.Adam([{"params": [w, b]}, {"params": [u]}], lr=0.1)
    with pytest.raises(ValueError, match="doesn't match the size of optimizer's group"):
        opt.load_state_dict(other.state_dict())
    after = opt.state_dict()
    assert after["param_groups"] == before["param_groups"]
    np.testing.assert_array_equal(numpy_of(after["state"][0]["exp_avg"]),
                                  numpy_of(before["state"][0]["exp_avg"]))


def test_load_state_dict_casts_state_to_the_parameter_dtype():
    w = mt.zeros(3, dtype=mt.float32, requires_grad=True)
    opt = mt.optim.Adam([w])
    opt.load_state_dict({"state": {0: {"step": mt.tensor(2.0),
                                       "exp_avg": mt.ones(3, dtype=mt.float64),
                                       "exp_avg_sq": mt.ones(3, dtype=mt.float64)}},
                         "param_groups": [dict(opt.state_dict()["param_groups"][0], lr=0.5)]})
    assert opt.state[w]["exp_avg"].dtype == mt.float32
    assert opt.state[w]["step"].item() == 2.0
    assert opt.param_groups[0]["lr"] == 0.5 and opt.param_groups[0]["params"] == [w]


def test_float32_parameters_step_as_torch():
    """Adam's and NAdam's scalars (step, mu_product) round as PyTorch's float32 ones."""
    for cls in ("Adam", "NAdam"):
        ours = mt.tensor(W0.astype(np.float32), requires_grad=True)
        theirs = torch.tensor(W0.astype(np.float32), requires_grad=True) if torch else None
        for lib, p in ((mt, ours), (torch, theirs)):
            if lib is None:
                continue
            opt = getattr(lib.optim, cls)([p], lr=0.01)
            for _ in range(5):
                opt.zero_grad()
                (p.sin() * lib.tensor(X[:4, :3].astype(np.float32))).sum().backward()
                opt.step()
            assert opt.state[p]["step"].dtype == lib.float32
        if theirs is not None:
            np.testing.assert_allclose(numpy_of(ours), numpy_of(theirs), rtol=1e-6, atol=1e-6)


@needs_torch
def test_optimizer_repr_is_laid_out_as_torch():
    def text(lib):
        w, b, _ = make_params(lib)
        lines = repr(lib.optim.SGD([{"params": [w]}, {"params": [b], "lr": 0.5}], lr=0.1))
        # PyTorch's groups also list its foreach/fused/differentiable switches.
        return [line for line in lines.split("\n")
                if line.split(":")[0].strip() not in ("foreach", "fused", "differentiable")]
    assert text(mt) == text(torch)
    assert text(mt)[:3] == ["SGD (", "Parameter Group 0", "    dampening: 0"]


# -- schedulers ----------------------------------------------------------------------------

SCHEDULERS = {
    "StepLR": lambda s, o: [s.StepLR(o, step_size=4, gamma=0.5)],
    "MultiStepLR": lambda s, o: [s.MultiStepLR(o, milestones=[3, 7, 7, 20], gamma=0.3)],
    "ExponentialLR": lambda s, o: [s.ExponentialLR(o, gamma=0.9)],
    "CosineAnnealingLR": lambda s, o: [s.CosineAnnealingLR(o, T_max=7, eta_min=0.001)],
    "CosineAnnealingWarmRestarts": lambda s, o: [
        s.CosineAnnealingWarmRestarts(o, T_0=3, T_mult=2, eta_min=0.0005)],
    "LambdaLR": lambda s, o: [s.LambdaLR(o, [lambda e: 0.95 ** e, lambda e: 1 / (e + 1)])],
    "MultiplicativeLR": lambda s, o: [s.MultiplicativeLR(o, lambda e: 0.97)],
    "LinearLR": lambda s, o: [s.LinearLR(o, start_factor=0.25, end_factor=0.9, total_iters=9)],
    "ConstantLR": lambda s, o: [s.ConstantLR(o, factor=0.3, total_iters=6)],
    "PolynomialLR": lambda s, o: [s.PolynomialLR(o, total_iters=12, power=2.0)],
    "OneCycleLR": lambda s, o: [s.OneCycleLR(o, max_lr=[0.5, 0.05], total_steps=31)],
    "OneCycleLR-three-phase-linear": lambda s, o: [
        s.OneCycleLR(o, max_lr=0.4, epochs=4, steps_per_epoch=8, pct_start=0.25,
                     anneal_strategy="linear", three_phase=True)],
    "two-chained-by-hand": lambda s, o: [s.ExponentialLR(o, gamma=0.9),
                                         s.StepLR(o, step_size=5, gamma=0.2)],
    "cosine-and-multistep": lambda s, o: [s.CosineAnnealingLR(o, T_max=10),
                                          s.MultiStepLR(o, milestones=[5, 15])],
    "ChainedScheduler": lambda s, o: [s.ChainedScheduler([
        s.ConstantLR(o, factor=0.5, total_iters=4), s.ExponentialLR(o, gamma=0.95)])],
    "SequentialLR": lambda s, o: [s.SequentialLR(o, [
        s.LinearLR(o, start_factor=0.1, total_iters=5), s.CosineAnnealingLR(o, T_max=10),
        s.ExponentialLR(o, gamma=0.8)], milestones=[5, 15])],
}


def lr_sequence(lib, make, steps=30):
    """The rates (and momenta, which OneCycleLR cycles) after each of ``steps`` steps."""
    w = lib.zeros(2, requires_grad=True)
    b = lib.zeros(1, requires_grad=True)
    opt = lib.optim.SGD([{"params": [w]}, {"params": [b], "lr": 0.01}], lr=0.1, momentum=0.9)
    scheds = make(lib.optim.lr_scheduler, opt)
    seq = [[g["lr"] for g in opt.param_groups] + [scheds[-1].get_last_lr()]]
    for _ in range(steps):
        opt.step()
        for s in scheds:
            s.step()
        seq.append([g["lr"] for g in opt.param_groups] + [scheds[-1].get_last_lr()]
                   + [g["momentum"] for g in opt.param_groups])
    return seq, scheds, opt


@needs_torch
@pytest.mark.parametrize("name", SCHEDULERS)
def test_scheduler_lr_sequence_is_torch_s_exactly(name):
    assert_lr_sequence_as_torch(SCHEDULERS[name])


def assert_lr_sequence_as_torch(make):
    """The rates (and momenta) of 30 steps and the schedulers' epochs equal PyTorch's;
    returns microtensor's rates."""
    ours, scheds, _ = lr_sequence(mt, make)
    theirs, tscheds, _ = lr_sequence(torch, make)
    assert ours == theirs
    assert ([getattr(s, "last_epoch", None) for s in scheds]
            == [getattr(s, "last_epoch", None) for s in tscheds])
    return ours


@pytest.mark.parametrize("name", SCHEDULERS)
def test_scheduler_state_dict_resumes(name):
    assert_scheduler_resumes(SCHEDULERS[name])


def assert_scheduler_resumes(make, optimizer_first=False):
    """12 steps, the optimizer's and schedulers' state_dicts loaded into fresh ones, 18
    more steps: the same rates as 30 steps straight.  ``optimizer_first``: load the
    optimizer's state before the schedulers' (what a scheduler reading the optimizer's
    groups when it loads needs)."""
    straight, _, _ = lr_sequence(mt, make)
    first, scheds, opt = lr_sequence(mt, make, steps=12)
    opt_state = copy.deepcopy(opt.state_dict())
    sched_states = copy.deepcopy([s.state_dict() for s in scheds])
    w, b = mt.zeros(2, requires_grad=True), mt.zeros(1, requires_grad=True)
    opt2 = mt.optim.SGD([{"params": [w]}, {"params": [b], "lr": 0.5}], lr=0.7, momentum=0.9)
    scheds2 = make(mt.optim.lr_scheduler, opt2)
    if optimizer_first:
        opt2.load_state_dict(opt_state)
    for s, state in zip(scheds2, sched_states):
        s.load_state_dict(state)
    if not optimizer_first:
        opt2.load_state_dict(opt_state)
    rest = []
    for _ in range(18):
        opt2.step()
        for s in scheds2:
            s.step()
        rest.append([g["lr"] for g in opt2.param_groups] + [scheds2[-1].get_last_lr()]
                    + [g["momentum"] for g in opt2.param_groups])
    assert first + rest == straight


def test_one_cycle_cycles_adam_beta1_and_refuses_extra_steps():
    w = mt.zeros(2, requires_grad=True)
    opt = mt.optim.Adam([w], lr=0.1)
    sched = mt.optim.lr_scheduler.OneCycleLR(opt, max_lr=1.0, total_steps=4)
    assert opt.param_groups[0]["betas"] == (0.95, 0.999)
    for _ in range(3):
        opt.step()
        sched.step()
    assert opt.param_groups[0]["betas"][0] == pytest.approx(0.95)
    with pytest.raises(ValueError, match="Tried to step 5 times. The specified number of "
                                         "total steps is 4"):
        opt.step()
        sched.step()
        sched.step()


@needs_torch
def test_one_cycle_with_adam_matches_torch():
    def betas(lib):
        opt = lib.optim.Adam([lib.zeros(2, requires_grad=True)], lr=0.1)
        sched = lib.optim.lr_scheduler.OneCycleLR(opt, max_lr=1.0, total_steps=20,
                                                  base_momentum=0.8)
        out = []
        for _ in range(19):
            opt.step()
            sched.step()
            out.append((opt.param_groups[0]["betas"], sched.get_last_lr()))
        return out
    assert betas(mt) == betas(torch)


@pytest.mark.parametrize("options", [
    dict(), dict(mode="max", factor=0.5, patience=2, threshold=0.1, cooldown=2),
    dict(threshold_mode="abs", threshold=0.5, patience=1, min_lr=[0.02, 0.0]),
    dict(mode="max", threshold_mode="abs", patience=0, eps=0.01, min_lr=0.004)])
def test_reduce_lr_on_plateau_matches_torch(options):
    metrics = [5, 4, 4.5, 4.2, 4.1, 4.3, 6, 3, 3, 3, 3.1, 2.9, 2.95, 3, 3, 3, 7, 8, 8, 8,
               8.5, 8.4, 8.6, 9, 9, 9, 9, 9, 1, 1]

    def sequence(lib):
        opt = lib.optim.SGD([{"params": [lib.zeros(2, requires_grad=True)]},
                             {"params": [lib.zeros(1, requires_grad=True)], "lr": 0.05}],
                            lr=0.1)
        sched = lib.optim.lr_scheduler.ReduceLROnPlateau(opt, **options)
        out = []
        for i, m in enumerate(metrics):
            opt.step()
            sched.step(lib.tensor(m) if i % 2 else m)
            out.append((sched.get_last_lr(), sched.num_bad_epochs, sched.cooldown_counter,
                        sched.best, sched.last_epoch))
        return out, sched

    ours, sched = sequence(mt)
    assert ours[-1][0] != ours[0][0] or options.get("mode") == "max"
    if torch is not None:
        theirs, _ = sequence(torch)
        assert ours == theirs
    state = copy.deepcopy(sched.state_dict())
    opt = mt.optim.SGD([mt.zeros(1, requires_grad=True), mt.zeros(1, requires_grad=True)])
    fresh = mt.optim.lr_scheduler.ReduceLROnPlateau(opt)
    fresh.load_state_dict(state)
    assert (fresh.best, fresh.mode, fresh.patience) == (sched.best, sched.mode, sched.patience)


def test_reduce_lr_on_plateau_checks():
    opt = mt.optim.SGD(make_params(mt)[:1])
    with pytest.raises(ValueError, match="Factor should be < 1.0."):
        mt.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=1.0)
    with pytest.raises(ValueError, match="mode sideways is unknown!"):
        mt.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="sideways")
    with pytest.raises(ValueError, match="expected 1 min_lrs, got 2"):
        mt.optim.lr_scheduler.ReduceLROnPlateau(opt, min_lr=[0, 0])


@needs_torch
@pytest.mark.parametrize("name", ["StepLR", "MultiStepLR", "ExponentialLR", "LinearLR",
                                  "ConstantLR", "CosineAnnealingLR", "PolynomialLR",
                                  "CosineAnnealingWarmRestarts"])
def test_step_with_an_epoch_uses_the_closed_form_as_torch(name):
    epochs = [0, 3, 4, 4, 9, 2, 15, 30, 1, 6.5 if name == "CosineAnnealingWarmRestarts" else 6]

    def sequence(lib):
        w = lib.zeros(2, requires_grad=True)
        opt = lib.optim.SGD([w], lr=0.1)
        sched = SCHEDULERS[name](lib.optim.lr_scheduler, opt)[0]
        out = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for e in epochs:
                opt.step()
                sched.step(e)
                out.append(sched.get_last_lr())
        return out
    assert sequence(mt) == sequence(torch)


def test_scheduler_warns_when_stepped_before_the_optimizer():
    opt = mt.optim.SGD(make_params(mt)[:1], lr=0.1)
    sched = mt.optim.lr_scheduler.StepLR(opt, 2)
    with pytest.warns(UserWarning, match="before `optimizer.step\\(\\)`"):
        sched.step()
    opt.step()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sched.step()


def test_scheduler_checks():
    s = mt.optim.lr_scheduler
    opt = mt.optim.SGD(make_params(mt)[:1], lr=0.1)
    with pytest.raises(TypeError, match="list is not an Optimizer"):
        s.StepLR([], 3)
    with pytest.raises(KeyError, match="param 'initial_lr' is not specified in "
                                       "param_groups\\[0\\]"):
        s.StepLR(opt, 3, last_epoch=4)
    with pytest.raises(ValueError, match="Expected positive integer T_0, but got 0"):
        s.CosineAnnealingWarmRestarts(opt, T_0=0)
    with pytest.raises(ValueError, match="Starting multiplicative factor"):
        s.LinearLR(opt, start_factor=0)
    with pytest.raises(ValueError, match="You must define either total_steps OR"):
        s.OneCycleLR(opt, max_lr=1.0)
    with pytest.raises(ValueError, match="number of milestones to be equal to 0"):
        s.SequentialLR(opt, [s.StepLR(opt, 2), s.StepLR(opt, 3)], milestones=[])
    with pytest.raises(ValueError, match="Expected 1 lr_lambdas, but got 2"):
        s.LambdaLR(opt, [math.exp, math.exp])
    other = mt.optim.SGD(make_params(mt)[1:2], lr=0.1)
    with pytest.raises(ValueError, match="expects all schedulers to belong to the same"):
        s.ChainedScheduler([s.StepLR(opt, 2), s.StepLR(other, 2)])


def test_lambda_scheduler_state_saves_callable_objects_not_functions():
    class Warmup:
        def __init__(self):
            self.length = 3

        def __call__(self, epoch):
            return min(1.0, (epoch + 1) / self.length)

    opt = mt.optim.SGD(make_params(mt)[:2], lr=0.1)
    warm = Warmup()
    sched = mt.optim.lr_scheduler.LambdaLR(opt, warm)
    assert sched.state_dict()["lr_lambdas"] == [{"length": 3}]
    other = Warmup()
    other.length = 10
    fresh = mt.optim.lr_scheduler.LambdaLR(mt.optim.SGD(make_params(mt)[:1]), other)
    fresh.load_state_dict(sched.state_dict())
    assert other.length == 3 and fresh.lr_lambdas == [other]
    plain = mt.optim.lr_scheduler.LambdaLR(opt, lambda e: 1.0)
    assert plain.state_dict()["lr_lambdas"] == [None]


def test_an_optimizer_written_outside_marks_its_steps_for_the_schedulers():
    """A user's Optimizer subclass with its own step() is seen as stepped (no warning)."""
    class SignSGD(mt.optim.Optimizer):
        def __init__(self, params, lr=0.1):
            super().__init__(params, {"lr": lr})

        @mt.no_grad()
        def step(self, closure=None):
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        p.sub_(p.grad.sign(), alpha=group["lr"])

    w, b, u = make_params(mt)
    opt = SignSGD([w, b])
    sched = mt.optim.lr_scheduler.ExponentialLR(opt, gamma=0.5)
    loss_of(mt, [w, b, u]).backward()
    opt.step()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sched.step()
    assert opt.param_groups[0]["lr"] == 0.05
    np.testing.assert_allclose(numpy_of(b), B0 - 0.1 * np.sign(numpy_of(b.grad)))


@needs_torch
def test_a_repeated_parameter_warns_and_is_numbered_as_torch():
    def layout(lib):
        a, b, c = (lib.zeros(1, requires_grad=True) for _ in range(3))
        with pytest.warns(UserWarning, match="duplicate parameters"):
            opt = lib.optim.SGD([{"params": [a, a, b]}, {"params": [c]}], lr=0.1, momentum=0.9)
        a.grad = lib.ones(1)
        opt.step()
        sd = opt.state_dict()
        return [g["params"] for g in sd["param_groups"]], list(sd["state"])
    assert layout(mt) == layout(torch)


@needs_torch
def test_a_scheduler_written_outside_steps_as_torch():
    def sequence(lib):
        class HalveOddEpochs(lib.optim.lr_scheduler._LRScheduler):
            def get_lr(self):
                factor = 0.5 if self.last_epoch % 2 else 1.0
                return [group["lr"] * factor for group in self.optimizer.param_groups]

        opt = lib.optim.Adam([lib.zeros(1, requires_grad=True)], lr=0.1)
        sched = HalveOddEpochs(opt)
        out = []
        for _ in range(6):
            opt.step()
            sched.step()
            out.append((sched.get_last_lr(), sched.last_epoch))
        return out
    assert sequence(mt) == sequence(torch)
