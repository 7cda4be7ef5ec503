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

import fake_cupy
import microtensor as mt
from microtensor.backends import cuda as cuda_backend
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
    # the lambda is not saved (None in the state dict, as PyTorch's): the fresh one is used
    "sgd-lambdalr": (lambda p: optim.SGD(p, lr=0.1, nesterov=True, momentum=0.5),
                     lambda o: lr_scheduler.LambdaLR(o, lambda epoch: 0.8 ** epoch)),
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


# ---------------------------------------------------------------- names and constants

@needs_torch
def test_constants_are_torch_s():
    assert (mt.pi, mt.e, mt.inf) == (torch.pi, torch.e, torch.inf)
    assert math.isnan(mt.nan) and math.isnan(torch.nan)


@needs_torch
@pytest.mark.parametrize("name", ["is_tensor", "is_floating_point", "numel"])
@pytest.mark.parametrize("make", [lambda lib: lib.ones(2, 3), lambda lib: lib.tensor(3),
                                  lambda lib: lib.zeros(0, dtype=lib.float64),
                                  lambda lib: lib.nn.Parameter(lib.ones(2)),
                                  lambda lib: [1.0, 2.0], lambda lib: 3.5])
def test_tensor_predicates_match_torch(name, make):
    ours = failure(lambda x: getattr(mt, name)(x), make(mt)) or getattr(mt, name)(make(mt))
    theirs = failure(lambda x: getattr(torch, name)(x), make(torch)) or \
        getattr(torch, name)(make(torch))
    assert ours == theirs


# ---------------------------------------------------------------- random number state

def test_rng_state_round_trips():
    mt.manual_seed(11)
    mt.randn(3)
    state = mt.get_rng_state()
    assert isinstance(state, mt.Tensor) and state.dtype is mt.uint8 and state.dim() == 1
    first = (mt.rand(5).tolist(), mt.randn(4).tolist(), mt.randint(0, 9, (3,)).tolist(),
             mt.randperm(6).tolist())
    mt.manual_seed(99)
    mt.set_rng_state(state)
    again = (mt.rand(5).tolist(), mt.randn(4).tolist(), mt.randint(0, 9, (3,)).tolist(),
             mt.randperm(6).tolist())
    assert first == again and mt.initial_seed() == 11
    assert mt.get_rng_state().tolist() != state.tolist()   # the generator moved on
    # a state survives mt.save / mt.load
    buffer = io.BytesIO()
    mt.save({"rng": state}, buffer)
    buffer.seek(0)
    mt.set_rng_state(mt.load(buffer)["rng"])
    assert mt.rand(5).tolist() == first[0]


def test_generator_state_round_trips_and_odd_numbers_of_32_bits():
    g = mt.Generator().manual_seed(3)
    mt.randint(0, 5, (3,), dtype=mt.int32, generator=g)   # may leave 32 buffered bits
    state = g.get_state()
    expected = mt.rand(7, generator=g).tolist()
    other = mt.Generator().manual_seed(4)
    assert other.set_state(state) is other
    assert mt.rand(7, generator=other).tolist() == expected
    assert other.initial_seed() == 3


@needs_torch
def test_rng_state_errors_as_torch():
    state = mt.get_rng_state()
    before = mt.get_rng_state().tolist()
    for bad, error, pattern in (
            ([1, 2], TypeError, "but got list"),
            (mt.zeros(3), TypeError, "RNG state must be a microtensor.ByteTensor"),
            (state.long(), TypeError, "RNG state must be a microtensor.ByteTensor"),
            (mt.zeros(3, dtype=mt.uint8), RuntimeError, "found the input RNG state size to be 3")):
        with pytest.raises(error, match=pattern):
            mt.set_rng_state(bad)
        assert mt.get_rng_state().tolist() == before   # a refused state changes nothing
    with pytest.raises(TypeError, match="but got list"):
        torch.set_rng_state([1, 2])
    with pytest.raises(TypeError, match="RNG state must be a torch.ByteTensor"):
        torch.set_rng_state(torch.zeros(3, dtype=torch.int64))
    with pytest.raises(RuntimeError, match="found the input RNG state size to be 3"):
        torch.set_rng_state(torch.zeros(3, dtype=torch.uint8))


# ---------------------------------------------------------------- print options

@pytest.fixture
def default_printoptions():
    yield
    mt.set_printoptions(profile="default")
    if torch is not None:
        torch.set_printoptions(profile="default")


PRINT_CASES = [
    (dict(precision=2), lambda lib: lib.tensor([1.23456, 2.5, -3.75])),
    (dict(precision=6), lambda lib: lib.tensor([[1.23456789, 2.0], [3.0, 4.5]])),
    (dict(sci_mode=True), lambda lib: lib.tensor([1.5, 2.25, 300.0])),
    (dict(sci_mode=True), lambda lib: lib.tensor([0.0, 0.0])),
    (dict(sci_mode=True), lambda lib: lib.tensor([1.0, 2.0])),
    (dict(sci_mode=False), lambda lib: lib.tensor([1e-5, 1.0, 2.5])),
    (dict(sci_mode=False), lambda lib: lib.tensor([1e10, 1.0])),
    (dict(threshold=5, edgeitems=2), lambda lib: lib.arange(10.0)),
    (dict(threshold=5, edgeitems=1), lambda lib: lib.arange(36).reshape(6, 6)),
    (dict(linewidth=30), lambda lib: lib.arange(20.0) / 3),
    (dict(linewidth=20), lambda lib: lib.tensor([1.5, 2.5], requires_grad=True) * 2),
    (dict(linewidth=40), lambda lib: lib.arange(30).reshape(3, 10)),
    (dict(profile="short"), lambda lib: lib.arange(2000.0).reshape(40, 50) / 7),
    (dict(profile="full"), lambda lib: lib.arange(1200.0)),
    (dict(profile="full", precision=1), lambda lib: lib.tensor([1.25, 2.5])),
    (dict(precision=3, sci_mode=True), lambda lib: lib.tensor([1.5], dtype=lib.float64)),
]


@needs_torch
@pytest.mark.parametrize("options, make", PRINT_CASES,
                         ids=[str(options) for options, _ in PRINT_CASES])
def test_print_options_match_torch(options, make, default_printoptions):
    mt.set_printoptions(**options)
    torch.set_printoptions(**options)
    assert repr(make(mt)).replace("microtensor.", "torch.") == \
        repr(make(torch))


@needs_torch
def test_print_options_persist_and_reset(default_printoptions):
    mt.set_printoptions(precision=2)
    mt.set_printoptions(linewidth=100)          # later calls keep the others
    assert repr(mt.tensor([1.23456])) == "tensor([1.23])"
    mt.set_printoptions(sci_mode=True)
    mt.set_printoptions(precision=2)             # sci_mode goes back to automatic, as torch's
    assert repr(mt.tensor([1.23456])) == "tensor([1.23])"
    mt.set_printoptions(profile="default")
    assert repr(mt.tensor([1.23456])) == repr(torch.tensor([1.23456]))
    with pytest.raises(ValueError, match="profile must be one of"):
        mt.set_printoptions(profile="long")


# ---------------------------------------------------------------- default device

@pytest.fixture
def fake_cuda(monkeypatch):
    """``"cuda"`` backed by the fake CuPy (host memory), and the default device restored."""
    monkeypatch.setattr(cuda_backend, "_cupy", fake_cupy)
    yield
    mt.set_default_device(None)


DEVICE_CALLS = {
    "zeros": lambda lib, t: lib.zeros(2), "ones": lambda lib, t: lib.ones(2, 3),
    "empty": lambda lib, t: lib.empty(2), "full": lambda lib, t: lib.full((2,), 1.5),
    "eye": lambda lib, t: lib.eye(2), "arange": lambda lib, t: lib.arange(3),
    "linspace": lambda lib, t: lib.linspace(0, 1, 3),
    "empty_strided": lambda lib, t: lib.empty_strided((2,), (1,)),
    "tensor": lambda lib, t: lib.tensor([1.0]), "tensor of tensor": lambda lib, t: lib.tensor(t),
    "as_tensor": lambda lib, t: lib.as_tensor([1, 2]),
    "scalar_tensor": lambda lib, t: lib.scalar_tensor(2.0),
    "rand": lambda lib, t: lib.rand(2), "randn": lambda lib, t: lib.randn(2),
    "randint": lambda lib, t: lib.randint(0, 3, (2,)), "randperm": lambda lib, t: lib.randperm(3),
    "zeros_like": lambda lib, t: lib.zeros_like(t), "randn_like": lambda lib, t: lib.randn_like(t),
    "new_zeros": lambda lib, t: t.new_zeros(2), "explicit cpu": lambda lib, t: lib.ones(2,
                                                                                      device="cpu"),
    "Linear weight": lambda lib, t: lib.nn.Linear(2, 3).weight,
}


@needs_torch
@pytest.mark.filterwarnings("ignore:To copy construct from a tensor")
def test_default_device_reaches_the_factories_torch_s_does(fake_cuda):
    cpu_tensor = mt.ones(2)
    t_cpu_tensor = torch.ones(2)
    mt.set_default_device("cuda")
    torch.set_default_device("meta")   # a second device PyTorch has without a GPU
    try:
        assert mt.get_default_device() == mt.device("cuda:0") == mt.zeros(1).device
        for name, call in DEVICE_CALLS.items():
            moved = call(mt, cpu_tensor).device.type == "cuda"
            torch_moved = call(torch, t_cpu_tensor).device.type == "meta"
            assert moved == torch_moved, name
    finally:
        torch.set_default_device(None)
    mt.set_default_device(None)
    assert mt.get_default_device() == mt.device("cpu") and mt.zeros(1).device.type == "cpu"
    assert str(mt.get_default_device()) == str(torch.get_default_device())


def test_internal_index_and_one_hot_tensors_follow_their_input_not_the_default(fake_cuda):
    x = mt.arange(5.0)
    labels = mt.tensor([0, 2])
    mt.set_default_device("cuda")
    assert x[[0, 2]].tolist() == [0.0, 2.0] and x[[True, False, True, False, True]].numel() == 3
    hot = nn.functional.one_hot(labels, 3)
    assert hot.device.type == "cpu" and hot.tolist() == [[1, 0, 0], [0, 0, 1]]
    on_gpu = nn.functional.one_hot(labels.to("cuda"), 3)
    assert on_gpu.device.type == "cuda" and on_gpu.cpu().tolist() == hot.tolist()


def test_default_device_values_and_errors(fake_cuda):
    mt.set_default_device(mt.device("cuda"))
    x = mt.tensor([1.0, 2.0])
    assert x.device.type == "cuda" and x.cpu().tolist() == [1.0, 2.0]
    mt.set_default_device("cpu")
    assert mt.zeros(1).device.type == "cpu"
    with pytest.raises(RuntimeError):
        mt.set_default_device("tpu")
    assert mt.get_default_device() == mt.device("cpu")   # a refused device changes nothing


# ---------------------------------------------------------------- legacy typed constructors

LEGACY = ["FloatTensor", "DoubleTensor", "LongTensor", "IntTensor", "BoolTensor"]


@needs_torch
@pytest.mark.parametrize("name", LEGACY)
@pytest.mark.parametrize("args", [([1, 2],), ([[1.5, -2.7], [0.0, 3.0]],), ((1, 0, 3),), (),
                                  ([],)], ids=str)
def test_legacy_constructors_from_data_match_torch(name, args):
    ours, theirs = getattr(mt, name)(*args), getattr(torch, name)(*args)
    assert repr(ours).replace("microtensor.", "torch.") == repr(theirs)
    assert type(ours) is mt.Tensor and isinstance(ours, getattr(mt, name))


@needs_torch
@pytest.mark.parametrize("name", LEGACY)
@pytest.mark.parametrize("sizes", [(2, 3), (0,), (4,)], ids=str)
def test_legacy_constructors_from_sizes_match_torch(name, sizes):
    ours, theirs = getattr(mt, name)(*sizes), getattr(torch, name)(*sizes)
    assert tuple(ours.shape) == tuple(theirs.shape) and ours.dtype.name == \
        str(theirs.dtype).split(".")[1]
    assert tuple(getattr(mt, name)(mt.Size(sizes)).shape) == sizes


@needs_torch
@pytest.mark.parametrize("name", LEGACY)
def test_legacy_isinstance_matches_torch(name):
    for make in (lambda lib: lib.ones(2), lambda lib: lib.ones(2, dtype=lib.float64),
                 lambda lib: lib.tensor([1, 2]), lambda lib: lib.tensor([1, 2], dtype=lib.int32),
                 lambda lib: lib.tensor([True]), lambda lib: lib.nn.Parameter(lib.ones(2)),
                 lambda lib: lib.ones(2, requires_grad=True) * 2, lambda lib: [1.0], lambda lib: 1):
        assert isinstance(make(mt), getattr(mt, name)) == isinstance(make(torch),
                                                                     getattr(torch, name))
    assert not issubclass(getattr(mt, name), mt.Tensor)
    assert repr(getattr(mt, name)) == repr(getattr(torch, name)).replace("torch.", "microtensor.")


@needs_torch
def test_legacy_constructor_errors_and_aliasing_match_torch():
    for lib in (mt, torch):
        x = lib.ones(2)
        y = lib.FloatTensor(x)
        y[0] = 5.0
        assert x.tolist() == [5.0, 1.0]            # an alias of x
        with pytest.raises(TypeError):
            lib.DoubleTensor(x)                     # of another dtype
        with pytest.raises(TypeError, match=r"data must be a sequence \(got float\)"):
            lib.FloatTensor(2.5)
        with pytest.raises(TypeError):
            lib.FloatTensor([1, 2], dtype=lib.float64)
        assert lib.FloatTensor(2, device="cpu").shape == (2,)


def test_legacy_constructor_refuses_cuda(fake_cuda):
    with pytest.raises(RuntimeError, match="legacy constructor expects device type: cpu"):
        mt.FloatTensor(2, device="cuda")
    assert not isinstance(mt.ones(2, device="cuda"), mt.FloatTensor)
    mt.set_default_device("cuda")
    assert mt.FloatTensor(2).device.type == "cpu"   # a CPU type, whatever the default


@pytest.mark.parametrize("init", ["uniform_", "normal_", "trunc_normal_", "eye_",
                                  "orthogonal_", "xavier_uniform_", "kaiming_normal_"])
def test_init_of_a_cpu_tensor_under_a_cuda_default(init, fake_cuda):
    mt.manual_seed(0)
    expected = getattr(nn.init, init)(mt.empty(3, 3)).tolist()
    weight = mt.empty(3, 3)
    mt.set_default_device("cuda")
    mt.manual_seed(0)
    assert getattr(nn.init, init)(weight) is weight and weight.tolist() == expected
