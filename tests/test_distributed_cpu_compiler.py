"""``microtensor.distributed`` (a process group of one process), ``microtensor.cpu`` and
``microtensor.compiler`` against PyTorch: signatures, the errors before a group exists,
the collectives' results over one process, and a ``torchrun``-style training script
(``init_process_group``, ``DistributedDataParallel``, ``DistributedSampler``,
``all_reduce`` of the loss) giving PyTorch's numbers when run as one process."""
import contextlib
import inspect
import warnings

import numpy as np
import pytest

import microtensor as mt
import microtensor.distributed as dist

try:
    import torch
    import torch.distributed as tdist
except ImportError:
    torch = tdist = None

requires_torch = pytest.mark.skipif(torch is None, reason="PyTorch (the oracle) is not installed")


@pytest.fixture
def world():
    dist.init_process_group("gloo")
    yield
    dist.destroy_process_group()


def _public_parameters(fn):
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()
            if not p.name.startswith("_")]


@requires_torch
@pytest.mark.parametrize("module, name", [(dist, n) for n in dist.__all__
                                          if inspect.isfunction(getattr(dist, n))] +
                         [(mt.compiler, n) for n in mt.compiler.__all__ if n != "compile"] +
                         [(mt.cpu, n) for n in mt.cpu.__all__
                          if inspect.isfunction(getattr(mt.cpu, n))])
def test_signatures_as_torch(module, name):
    theirs = getattr({dist: tdist, mt.compiler: torch.compiler, mt.cpu: torch.cpu}[module],
                     name)
    ours = _public_parameters(getattr(module, name))
    assert [p[:2] for p in ours] == [p[:2] for p in _public_parameters(theirs)]
    for (_, _, a), (_, _, b) in zip(ours, _public_parameters(theirs)):
        if isinstance(b, (int, float, str, bool, type(None))):
            assert a == b


@requires_torch
@pytest.mark.parametrize("call", [
    lambda d, lib: d.get_rank(),
    lambda d, lib: d.get_world_size(),
    lambda d, lib: d.barrier(),
    lambda d, lib: d.all_reduce(lib.ones(2)),
    lambda d, lib: d.broadcast(lib.ones(2), 0),
    lambda d, lib: d.destroy_process_group(),
    lambda d, lib: lib.nn.parallel.DistributedDataParallel(lib.nn.Linear(2, 2)),
    lambda d, lib: lib.utils.data.distributed.DistributedSampler(range(4)),
])
def test_before_a_group_exists_the_errors_are_torchs(call):
    assert not dist.is_initialized() and not tdist.is_initialized()
    with pytest.raises(Exception) as theirs:
        call(tdist, torch)
    with pytest.raises(type(theirs.value)) as ours:
        call(dist, mt)
    assert str(ours.value) == str(theirs.value)


def test_a_group_of_one_process(world):
    assert dist.is_initialized() and dist.get_rank() == 0 and dist.get_world_size() == 1
    assert dist.get_backend() == "gloo" and dist.get_process_group_ranks(dist.group.WORLD) == [0]
    with pytest.raises(ValueError, match="twice"):
        dist.init_process_group("gloo")
    x = mt.tensor([1.0, -2.0, 3.0])
    for op in (dist.ReduceOp.SUM, dist.ReduceOp.AVG, dist.ReduceOp.MAX):
        assert dist.all_reduce(x, op=op) is None
        assert x.tolist() == [1.0, -2.0, 3.0]
    assert dist.all_reduce(x, async_op=True).wait()
    slots = [mt.zeros(3)]
    dist.all_gather(slots, x * 2)
    assert slots[0].tolist() == [2.0, -4.0, 6.0]
    gathered = mt.zeros(3)
    dist.all_gather_into_tensor(gathered, x)
    assert gathered.tolist() == x.tolist()
    with pytest.raises(ValueError, match="one tensor per rank"):
        dist.all_gather([mt.zeros(3), mt.zeros(3)], x)
    objects = [None]
    dist.all_gather_object(objects, {"loss": 1.5})
    assert objects == [{"loss": 1.5}]
    with pytest.raises(ValueError, match="rank"):
        dist.broadcast(x, src=1)


def test_a_larger_world_is_refused_and_changes_nothing(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(RuntimeError, match="world_size 1"):
        dist.init_process_group("gloo")
    assert not dist.is_initialized()
    with pytest.raises(RuntimeError, match="nccl"):
        dist.init_process_group("nccl", world_size=1, rank=0)
    assert not dist.is_initialized()


def _initial_weights():
    torch.manual_seed(0)
    return {k: v.detach().numpy().copy() for k, v in torch.nn.Linear(2, 3).state_dict().items()}


def _train(lib, d, initial):
    """A torchrun-style script: a DDP model, a DistributedSampler, the loss all-reduced
    for reporting, from given initial weights."""
    data = lib.utils.data.TensorDataset(lib.linspace(-1, 1, 24).reshape(12, 2),
                                        lib.arange(12) % 3)
    layer = lib.nn.Linear(2, 3)
    layer.load_state_dict({k: lib.tensor(v) for k, v in initial.items()})
    model = lib.nn.parallel.DistributedDataParallel(layer)
    sampler = lib.utils.data.distributed.DistributedSampler(data, shuffle=False)  # RNG streams differ
    loader = lib.utils.data.DataLoader(data, batch_size=4, sampler=sampler)
    optimizer = lib.optim.SGD(model.parameters(), lr=0.5)
    losses = []
    for epoch in range(3):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            with model.no_sync() if epoch == 1 else contextlib.nullcontext():
                loss = lib.nn.functional.cross_entropy(model(x), y)
                loss.backward()
            optimizer.step()
            reported = loss.detach().clone()
            d.all_reduce(reported, op=d.ReduceOp.SUM)
            losses.append(reported.item() / d.get_world_size())
    return losses, {k: v.detach().numpy() for k, v in model.state_dict().items()}


@requires_torch
def test_a_torchrun_script_as_one_process_matches_torch(tmp_path, world):
    initial = _initial_weights()
    tdist.init_process_group("gloo", init_method=f"file://{tmp_path}/group", world_size=1,
                             rank=0)
    try:
        theirs = _train(torch, tdist, initial)
    finally:
        tdist.destroy_process_group()
    ours = _train(mt, dist, initial)
    assert len(ours[0]) == len(theirs[0]) == 9
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-5)
    assert list(ours[1]) == list(theirs[1]) == ["module.weight", "module.bias"]
    for key in theirs[1]:
        np.testing.assert_allclose(ours[1][key], theirs[1][key], rtol=1e-5, atol=1e-6)


@requires_torch
def test_cpu_device_module_as_torch():
    for name in ("is_available", "is_initialized", "device_count", "current_device"):
        assert getattr(mt.cpu, name)() == getattr(torch.cpu, name)()
    assert mt.cpu.synchronize() is None
    assert mt.cpu.current_stream().query()
    with mt.cpu.stream(mt.cpu.current_stream()):
        pass
    assert mt.cpu.get_capabilities()["num_logical_cores"] >= 1
    # device-agnostic code: the module of a device type by name
    assert getattr(mt, mt.device("cpu").type) is mt.cpu


@pytest.mark.parametrize("make, kind", [(lambda: mt.cpu.amp.autocast(), "autocast"),
                                        (lambda: mt.cpu.amp.GradScaler(), "GradScaler"),
                                        (lambda: mt.cuda.amp.autocast(), "autocast")])
def test_deprecated_device_amp_warns_and_stands_for_amp(make, kind):
    with pytest.warns(FutureWarning, match=f"amp.{kind}\\('"):
        made = make()
    assert isinstance(made, getattr(mt.amp, kind))


def test_compiler_decorators_leave_functions_as_they_are():
    def f(x):
        return x * 2

    assert mt.compiler.disable(f) is f
    assert mt.compiler.disable(recursive=False)(f) is f
    assert mt.compiler.allow_in_graph(f) is f
    assert mt.compiler.substitute_in_graph(len)(f) is f
    assert not mt.compiler.is_compiling() and not mt.compiler.is_dynamo_compiling()
    assert mt.compiler.compile(f) is f
    assert "eager" in mt.compiler.list_backends()
    with pytest.raises(RuntimeError, match="stance"):
        mt.compiler.set_stance("sometimes")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mt.compiler.reset()
