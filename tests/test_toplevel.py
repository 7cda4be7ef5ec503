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
