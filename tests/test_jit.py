"""``microtensor.jit``: PyTorch's TorchScript names run code eagerly (script/trace return
what they get, decorators the function), with PyTorch's signatures; ``save``/``load``
refuse clearly."""
import inspect
import typing
import warnings

import pytest

import microtensor as mt
from microtensor import jit, nn

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (optional "
                                                       "test oracle)")

PARAMETER_NAMES = ["script", "trace", "trace_module", "ignore", "unused", "export",
                   "interface", "script_method", "is_scripting", "is_tracing", "annotate",
                   "isinstance", "fork", "wait", "freeze", "optimize_for_inference", "save",
                   "load", "set_fusion_strategy", "enable_onednn_fusion",
                   "onednn_fusion_enabled"]


@needs_torch
@pytest.mark.parametrize("name", PARAMETER_NAMES)
def test_signatures_as_torch(name):
    ours = inspect.signature(getattr(jit, name)).parameters.values()
    theirs = inspect.signature(getattr(torch.jit, name)).parameters.values()
    assert [(p.name, p.kind) for p in ours] == [(p.name, p.kind) for p in theirs]
    assert [p.default for p in ours if p.name != "_compilation_unit"] == \
        [p.default for p in theirs if p.name != "_compilation_unit"]


class Net(nn.Module):
    limit: jit.Final[int]

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)
        self.limit = 2

    @jit.ignore
    def debug(self, x):
        return x

    @jit.ignore(drop=True)
    def dropped(self, x):
        return x * 0

    @jit.unused
    def unused_path(self, x):
        return x * 2

    @jit.export
    def exported(self, x):
        return self.fc(x).sum()

    def forward(self, x):
        if jit.is_scripting():
            raise AssertionError("never scripted here")
        hidden: typing.List[mt.Tensor] = jit.annotate(typing.List[mt.Tensor], [])
        hidden.append(self.debug(self.fc(x)))
        return hidden[0].relu()


def test_decorated_module_runs_eagerly():
    net = Net()
    scripted = jit.script(net)
    traced = jit.trace(net, (mt.ones(1, 3),))
    assert scripted is net and traced is net
    x = mt.randn(4, 3)
    assert mt.equal(scripted(x), net.fc(x).relu())
    assert net.dropped(x).abs().sum().item() == 0.0 and mt.equal(net.unused_path(x), x * 2)
    assert mt.jit.trace_module(net, {"forward": x}) is net
    scripted(x).sum().backward()            # autograd as usual
    assert net.fc.weight.grad is not None


def test_functions_and_control_flow_stay_python():
    @jit.script
    def clipped(x, limit: float):
        if x.sum() > limit:                 # live Python control flow
            return x.clamp(max=limit)
        return x
    assert clipped(mt.tensor([5.0]), 1.0).tolist() == [1.0]
    assert clipped(mt.tensor([0.5]), 1.0).tolist() == [0.5]
    future = jit.fork(clipped, mt.tensor([3.0]), 2.0)
    assert jit.wait(future).tolist() == [2.0] and future.done()
    assert not jit.is_scripting() and not jit.is_tracing()


@pytest.fixture(autouse=True)
def _no_deprecation_noise():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        yield


@needs_torch
def test_deprecations_as_torch():
    def f(x):
        return x
    calls = {"script": lambda lib: lib.jit.script(f),
             "trace": lambda lib: lib.jit.trace(f, (lib.ones(1),)),
             "fork": lambda lib: lib.jit.fork(f, 1),
             "ignore": lambda lib: lib.jit.ignore(f),
             "annotate": lambda lib: lib.jit.annotate(int, 1)}
    for name, call in calls.items():
        counts = []
        for lib in (mt, torch):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                call(lib)
            counts.append(any(w.category is DeprecationWarning for w in caught))
        assert counts[0] == counts[1], name


@needs_torch
def test_isinstance_as_torch():
    cases = [([1, 2], typing.List[int]), ([1, "a"], list[int]), ({"a": 1}, dict[str, int]),
             ({"a": "b"}, typing.Dict[str, int]), ((1, "a"), tuple[int, str]),
             ((1, 2, 3), typing.Tuple[int, ...]), (None, typing.Optional[int]), (3, int),
             ([], list[str])]
    for obj, kind in cases:
        assert jit.isinstance(obj, kind) == torch.jit.isinstance(obj, kind), (obj, kind)


@needs_torch
def test_freeze_attribute_fusion_as_torch():
    for lib in (mt, torch):
        module = lib.nn.Linear(2, 2)
        with pytest.raises(RuntimeError, match="only implemented for modules in eval mode"):
            lib.jit.freeze(lib.jit.script(module))
        assert lib.jit.Attribute(3, int) == (3, int) and lib.jit.Attribute(3, int).value == 3
        assert lib.jit.Final is typing.Final
        previous = lib.jit.set_fusion_strategy([("DYNAMIC", 3)])
        assert previous == [("STATIC", 2), ("DYNAMIC", 10)]
        lib.jit.set_fusion_strategy(previous)
    frozen = jit.freeze(jit.script(nn.Linear(2, 2).eval()))
    assert isinstance(frozen, nn.Linear)
    assert issubclass(jit.ScriptModule, nn.Module) and issubclass(jit.Error, Exception)


def test_save_and_load_refuse_clearly(tmp_path):
    with pytest.raises(NotImplementedError, match="no TorchScript compiler.*jit.save"):
        jit.save(jit.script(nn.Linear(2, 2)), tmp_path / "m.pt")
    with pytest.raises(NotImplementedError, match="jit.load.*state_dict"):
        jit.load(tmp_path / "m.pt")

    class Scripted(jit.ScriptModule):
        def forward(self, x):
            return x
    with pytest.raises(NotImplementedError, match="ScriptModule.save"):
        Scripted().save(tmp_path / "m.pt")
