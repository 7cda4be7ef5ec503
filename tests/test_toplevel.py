"""Top-level names as PyTorch's (constants, rng state, print options, default device,
legacy typed constructors), ``mt.testing.assert_close``, and a whole training run saved
with ``mt.save`` resuming bit-identically; against torch where PyTorch is installed."""
import collections
import io
import math
import pickle
import zipfile

import numpy as np
import pytest

import microtensor as mt
from microtensor import nn, optim
from microtensor.optim import lr_scheduler

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (optional "
                                                       "test oracle)")


# ---------------------------------------------------------------- saving a training run

X = mt.tensor(np.random.default_rng(0).standard_normal((8, 3)), dtype=mt.float32)
Y = mt.tensor(np.random.default_rng(1).standard_normal((8, 1)), dtype=mt.float32)


def make_model(seed):
    mt.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))


def loss_of(model):
    return ((model(X) - Y) ** 2).mean()


RUNS = {
    "sgd-momentum-steplr": (lambda p: optim.SGD(p, lr=0.1, momentum=0.9),
                            lambda o: lr_scheduler.StepLR(o, step_size=2, gamma=0.5)),
    "adam-onecycle": (lambda p: optim.Adam(p, lr=0.01, betas=(0.8, 0.95)),
                      lambda o: lr_scheduler.OneCycleLR(o, max_lr=0.05, total_steps=8)),
    "adam-multistep": (lambda p: optim.Adam(p, lr=0.01),
                       lambda o: lr_scheduler.MultiStepLR(o, milestones=[2, 2, 4], gamma=0.3)),
    "sgd-plateau": (lambda p: optim.SGD(p, lr=0.1),
                    lambda o: lr_scheduler.ReduceLROnPlateau(o, patience=0, threshold=0.5)),
    "lbfgs": (lambda p: optim.LBFGS(p, lr=0.5, max_iter=3, history_size=4), None),
}


def train(model, opt, sched, epochs):
    for _ in range(epochs):
        def closure():
            opt.zero_grad()
            loss = loss_of(model)
            loss.backward()
            return loss
        loss = opt.step(closure)
        if isinstance(sched, lr_scheduler.ReduceLROnPlateau):
            sched.step(loss.item())
        elif sched is not None:
            sched.step()


def fresh(run, seed):
    make_opt, make_sched = RUNS[run]
    model = make_model(seed)
    opt = make_opt(model.parameters())
    return model, opt, make_sched(opt) if make_sched else None


def checkpoint(model, opt, sched, epoch):
    return {"model": model.state_dict(), "optimizer": opt.state_dict(),
            "scheduler": sched.state_dict() if sched else None, "epoch": epoch}


@pytest.mark.parametrize("run", sorted(RUNS))
def test_a_training_run_saved_midway_resumes_bit_identically(run, tmp_path):
    model, opt, sched = fresh(run, seed=0)
    train(model, opt, sched, 6)

    model, opt, sched = fresh(run, seed=0)
    train(model, opt, sched, 3)
    mt.save(checkpoint(model, opt, sched, 3), tmp_path / "run.pt")
    del model, opt, sched

    resumed, opt, sched = fresh(run, seed=1)   # other initial weights: all must be loaded
    state = mt.load(tmp_path / "run.pt")
    resumed.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    if sched is not None:
        sched.load_state_dict(state["scheduler"])
    assert state["epoch"] == 3
    train(resumed, opt, sched, 3)

    uninterrupted, opt_u, sched_u = fresh(run, seed=0)
    train(uninterrupted, opt_u, sched_u, 6)
    for (name, a), b in zip(resumed.named_parameters(), uninterrupted.parameters()):
        assert np.array_equal(a.detach().numpy(), b.detach().numpy()), name
    assert opt.param_groups[0]["lr"] == opt_u.param_groups[0]["lr"]


def test_state_dict_types_survive_save_and_load():
    model, opt, sched = fresh("adam-multistep", seed=0)
    train(model, opt, sched, 3)
    saved = {"milestones": sched.state_dict()["milestones"], "betas": (0.9, 0.999),
             "best": math.inf, "worst": -math.inf, "nan": math.nan, "none": None,
             "phases": [{"end_step": 3.0, "start_lr": "initial_lr"}], "tag": {1, 2},
             "blob": b"\x00\xff", "empty": b"", "z": 1 + 2j, "step": mt.tensor(3.0),
             "history": [mt.ones(2), mt.zeros(2)], "ordered": collections.OrderedDict(a=1)}
    buffer = io.BytesIO()
    mt.save(saved, buffer)
    buffer.seek(0)
    loaded = mt.load(buffer)
    assert type(loaded["milestones"]) is collections.Counter
    assert loaded["milestones"] == collections.Counter({2: 2, 4: 1})
    assert type(loaded["betas"]) is tuple and type(loaded["ordered"]) is collections.OrderedDict
    assert math.isnan(loaded["nan"])
    assert {k: v for k, v in loaded.items() if k not in ("nan", "step", "history")} == \
        {k: v for k, v in saved.items() if k not in ("nan", "step", "history")}
    assert loaded["step"].dtype is mt.float32 and loaded["step"].item() == 3.0
    assert [t.tolist() for t in loaded["history"]] == [[1.0, 1.0], [0.0, 0.0]]


def test_load_still_refuses_other_globals():
    buffer = io.BytesIO()
    mt.save({"x": 1}, buffer)
    source = zipfile.ZipFile(buffer)
    patched = io.BytesIO()
    with zipfile.ZipFile(patched, "w") as out:
        for name in source.namelist():
            data = source.read(name)
            if name.endswith("data.pkl"):
                data = pickle.dumps({"x": print}, protocol=2)
            out.writestr(name, data)
    patched.seek(0)
    with pytest.raises(pickle.UnpicklingError, match="builtins.print|__builtin__.print"):
        mt.load(patched)


@needs_torch
@pytest.mark.parametrize("run", sorted(RUNS))
def test_a_saved_training_run_loads_in_torch(run):
    model, opt, sched = fresh(run, seed=0)
    train(model, opt, sched, 3)
    saved = checkpoint(model, opt, sched, 3)
    buffer = io.BytesIO()
    mt.save(saved, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)

    def same(a, b):
        if isinstance(a, mt.Tensor):
            assert isinstance(b, torch.Tensor) and a.tolist() == b.tolist()
        elif isinstance(a, dict):
            assert type(a) is type(b) and a.keys() == b.keys()
            for k in a:
                same(a[k], b[k])
        elif isinstance(a, (list, tuple)):
            assert type(a) is type(b) and len(a) == len(b)
            for x, y in zip(a, b):
                same(x, y)
        elif isinstance(a, float) and math.isnan(a):
            assert math.isnan(b)
        else:
            assert a == b and type(a) is type(b)
    same(saved, loaded)


# ---------------------------------------------------------------- testing.assert_close

def failure(assert_close, *args, **kwargs):
    """(exception type name, message) of a failed assert_close, or None when it passes."""
    try:
        assert_close(*args, **kwargs)
    except Exception as e:   # noqa: BLE001 - the type is part of what is compared
        return type(e).__name__, str(e)
    return None


def both(lib_args):
    """The arguments built with each library: ``lib_args(lib)``."""
    return lib_args(mt), lib_args(torch)


CLOSE_CASES = {
    "float32 one off": lambda lib: (lib.tensor([1., 2., 3.]), lib.tensor([1., 2.5, 3.])),
    "float32 within": lambda lib: (lib.tensor([1., 2.]), lib.tensor([1., 2. + 1e-6])),
    "float64 2-d": lambda lib: (lib.tensor([[1., 2.], [3., 4.]], dtype=lib.float64),
                                lib.tensor([[1., 2.], [3., 4.1]], dtype=lib.float64)),
    "int exact": lambda lib: (lib.tensor([1, 2, 3]), lib.tensor([1, 2, 4])),
    "int thirds": lambda lib: (lib.tensor([1, 2, 3]), lib.tensor([1, 2, 9])),
    "bool": lambda lib: (lib.tensor([True, False]), lib.tensor([True, True])),
    "shape": lambda lib: (lib.tensor([1., 2.]), lib.tensor([1., 2., 3.])),
    "dtype": lambda lib: (lib.tensor([1., 2.]), lib.tensor([1., 2.], dtype=lib.float64)),
    "int vs float": lambda lib: (lib.tensor([1, 2]), lib.tensor([1., 2.])),
    "0-d": lambda lib: (lib.tensor(0.), lib.tensor(1e-3)),
    "nan": lambda lib: (lib.tensor(float("nan")), lib.tensor(float("nan"))),
    "infs": lambda lib: (lib.tensor([1., math.inf]), lib.tensor([1., -math.inf])),
    "same infs": lambda lib: (lib.tensor([1., math.inf]), lib.tensor([1., math.inf])),
    "expected zero": lambda lib: (lib.tensor([1e-30, 1.]), lib.tensor([0., 0.])),
    "many": lambda lib: (lib.arange(2000.), lib.arange(2000.) + 1e-3),
    "3-d": lambda lib: (lib.ones(2, 2, 2), lib.ones(2, 2, 2) * 2),
    "strides ignored": lambda lib: (lib.ones(2, 3).t(), lib.ones(3, 2)),
    "floats": lambda lib: (1.0, 1.1),
    "ints": lambda lib: (1, 2),
    "int and float": lambda lib: (1, 1.0),
    "bools": lambda lib: (True, False),
    "nones": lambda lib: (None, 1),
    "list item": lambda lib: ([lib.tensor(1.), 2], [lib.tensor(1.), 3]),
    "dict item": lambda lib: ({"a": lib.tensor([1., 2.])}, {"a": lib.tensor([1., 3.])}),
    "nested": lambda lib: ({"b": [1, (2.0, lib.tensor([1]))]}, {"b": [1, (2.0, lib.tensor([2]))]}),
    "keys": lambda lib: ({"a": 1, "c": 2}, {"b": 1, "c": 2}),
    "lengths": lambda lib: ([1, 2], [1, 2, 3]),
    "tensor and list": lambda lib: (lib.tensor([1., 2.]), [1., 2.]),
    "strings": lambda lib: ("a", "b"),
    "numpy arrays": lambda lib: (np.array([1., 2.]), np.array([1., 2.5])),
    "numpy scalars": lambda lib: (np.float32(1.0), np.float32(1.5)),
}


@needs_torch
@pytest.mark.parametrize("case", sorted(CLOSE_CASES))
def test_assert_close_matches_torch(case):
    (mt_actual, mt_expected), (t_actual, t_expected) = both(CLOSE_CASES[case])
    ours = failure(mt.testing.assert_close, mt_actual, mt_expected)
    theirs = failure(torch.testing.assert_close, t_actual, t_expected)
    if ours is not None:
        ours = ours[0], ours[1].replace("microtensor._tensor.Tensor", "torch.Tensor") \
            .replace("microtensor.", "torch.")
    assert ours == theirs


OPTION_CASES = {
    "rtol atol": dict(rtol=0.1, atol=0.0),
    "atol only": dict(atol=1.0),
    "equal_nan": dict(equal_nan=True),
    "no dtype check": dict(check_dtype=False),
    "stride check": dict(check_stride=True),
    "message": dict(msg="custom"),
    "message function": dict(msg=lambda m: "prefix: " + m),
}


@needs_torch
@pytest.mark.parametrize("option", sorted(OPTION_CASES))
@pytest.mark.parametrize("case", ["float32 one off", "dtype", "nan", "strides ignored",
                                  "dict item", "keys"])
def test_assert_close_options_match_torch(case, option):
    (mt_actual, mt_expected), (t_actual, t_expected) = both(CLOSE_CASES[case])
    kwargs = OPTION_CASES[option]
    ours = failure(mt.testing.assert_close, mt_actual, mt_expected, **kwargs)
    theirs = failure(torch.testing.assert_close, t_actual, t_expected, **kwargs)
    if ours is not None:
        ours = ours[0], ours[1].replace("microtensor.", "torch.")
    assert ours == theirs


def test_assert_close_default_tolerances():
    mt.testing.assert_close(mt.tensor([1.0]), mt.tensor([1.0 + 1e-5]))   # atol 1e-5
    with pytest.raises(AssertionError, match=r"up to 1e-05 allowed"):
        mt.testing.assert_close(mt.tensor([0.0]), mt.tensor([2e-5]))
    mt.testing.assert_close(mt.tensor([1.0], dtype=mt.float64),
                            mt.tensor([1.0 + 1e-7], dtype=mt.float64))
    with pytest.raises(AssertionError, match=r"up to 1e-07 allowed"):
        mt.testing.assert_close(mt.tensor([1.0], dtype=mt.float64),
                                mt.tensor([1.0 + 1e-6], dtype=mt.float64))
    with pytest.raises(AssertionError, match=r"^Tensor-likes are not equal!\n\nMismatched "
                                             r"elements: 1 / 3 \(33.3%\)\nGreatest absolute "
                                             r"difference: 1 at index \(2,\)\n"):
        mt.testing.assert_close(mt.tensor([1, 2, 3]), mt.tensor([1, 2, 4]))
    mt.testing.assert_close(mt.ones(2, requires_grad=True), mt.ones(2))
