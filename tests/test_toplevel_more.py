"""PyTorch's remaining top-level names: settings and queries (threads, determinism,
matmul precision, warn-always, denormals, anomaly and inference mode, ``typename``,
``compile``, ``autocast``), factories (``asarray``, ``frombuffer``, ``randint_like``,
``range``, ``empty_permuted``), functions (``msort``, ``row_stack``, ``gradient``,
``histogram``, ``histogramdd``, ``constant_pad_nd``) and the aten-signature aliases of
nn.functional's ops; against torch where PyTorch is installed."""
import warnings

import numpy as np
import pytest

import microtensor as mt
from microtensor import _settings

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (optional "
                                                       "test oracle)")


def outcome(fn):
    """What a call does: ("ok", value) or (exception type name, message)."""
    try:
        return "ok", fn()
    except Exception as exc:   # noqa: BLE001  (compared with PyTorch's)
        return type(exc).__name__, str(exc)


def same_outcome(mt_call, torch_call, compare_message=True):
    ours, theirs = outcome(mt_call), outcome(torch_call)
    assert ours[0] == theirs[0], (ours, theirs)
    if ours[0] != "ok" and compare_message:
        assert ours[1] == theirs[1]
    return ours


# ---------------------------------------------------------------- settings and queries

@pytest.fixture
def restore_settings():
    """Put the global settings (microtensor's and PyTorch's) back after a test."""
    saved = (dict(_settings._threads), dict(_settings._deterministic),
             dict(_settings._matmul_precision), dict(_settings._warn_always),
             dict(_settings._autocast_dtypes), dict(_settings._autocast_cache),
             mt.get_default_dtype())
    torch_saved = torch and (torch.get_num_threads(), torch.get_float32_matmul_precision(),
                             torch.is_warn_always_enabled(), torch.get_default_dtype())
    yield
    for target, value in zip((_settings._threads, _settings._deterministic,
                              _settings._matmul_precision, _settings._warn_always,
                              _settings._autocast_dtypes, _settings._autocast_cache), saved):
        target.clear()
        target.update(value)
    mt.set_default_dtype(saved[-1])
    mt.set_default_device(None)
    mt.set_anomaly_enabled(False)
    mt.set_flush_denormal(False)
    if torch is not None:
        torch.set_num_threads(torch_saved[0])
        torch.set_float32_matmul_precision(torch_saved[1])
        torch.set_warn_always(torch_saved[2])
        torch.set_default_dtype(torch_saved[3])
        torch.use_deterministic_algorithms(False)
        torch.set_anomaly_enabled(False)
        torch.set_flush_denormal(False)


@needs_torch
@pytest.mark.parametrize("value", [3, 1, 0, -2, 2.0, "2", True])
def test_set_num_threads_as_pytorch(restore_settings, value):
    ours = same_outcome(lambda: mt.set_num_threads(value), lambda: torch.set_num_threads(value))
    if ours[0] == "ok":
        assert mt.get_num_threads() == torch.get_num_threads() == value


def test_interop_threads_are_set_once(restore_settings):
    _settings._threads["interop"] = None
    with pytest.raises(RuntimeError, match="positive integer"):
        mt.set_num_interop_threads(0)
    mt.set_num_interop_threads(3)
    assert mt.get_num_interop_threads() == 3
    with pytest.raises(RuntimeError, match="cannot set number of interop threads"):
        mt.set_num_interop_threads(2)
    assert mt.get_num_interop_threads() == 3


def test_default_thread_count_follows_omp_num_threads(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "5")
    assert _settings._default_threads() == 5
    monkeypatch.setenv("OMP_NUM_THREADS", "junk")
    assert _settings._default_threads() >= 1


@needs_torch
@pytest.mark.parametrize("steps", [
    [("use", True, False)], [("use", True, True)], [("use", 1, False)],
    [("debug", "warn")], [("debug", "error")], [("debug", 2), ("debug", "default")],
    [("debug", "bad")], [("debug", 3)], [("debug", 1.0)], [("debug", True)],
])
def test_deterministic_settings_as_pytorch(restore_settings, steps):
    for lib in (mt, torch):
        lib.use_deterministic_algorithms(False)
    for step in steps:
        if step[0] == "use":
            same_outcome(lambda lib=mt: lib.use_deterministic_algorithms(step[1], warn_only=step[2]),
                         lambda: torch.use_deterministic_algorithms(step[1], warn_only=step[2]),
                         compare_message=False)
        else:
            same_outcome(lambda: mt.set_deterministic_debug_mode(step[1]),
                         lambda: torch.set_deterministic_debug_mode(step[1]))
        for query in ("are_deterministic_algorithms_enabled",
                      "is_deterministic_algorithms_warn_only_enabled",
                      "get_deterministic_debug_mode"):
            assert getattr(mt, query)() == getattr(torch, query)(), query


def test_deterministic_mode_changes_no_result(restore_settings):
    index = mt.tensor([0, 1, 0, 2, 1, 0])
    source = mt.arange(6.0)
    before = mt.zeros(3).index_add(0, index, source)
    mt.use_deterministic_algorithms(True)
    assert mt.equal(mt.zeros(3).index_add(0, index, source), before)


@needs_torch
@pytest.mark.parametrize("precision", ["high", "medium", "highest", "foo"])
def test_float32_matmul_precision_as_pytorch(restore_settings, precision):
    mt.set_float32_matmul_precision("high")
    torch.set_float32_matmul_precision("high")
    with warnings.catch_warnings(record=True) as ours:
        warnings.simplefilter("always")
        mt.set_float32_matmul_precision(precision)
    with warnings.catch_warnings(record=True) as theirs:
        warnings.simplefilter("always")
        torch.set_float32_matmul_precision(precision)
    assert mt.get_float32_matmul_precision() == torch.get_float32_matmul_precision()
    assert len(ours) == len(theirs)
    if ours:
        # the gist (PyTorch's message lacks a space after "current")
        assert str(ours[0].message).split(";")[0] == str(theirs[0].message).split(";")[0]


@needs_torch
@pytest.mark.parametrize("value", [True, False, 1])
def test_warn_always_as_pytorch(restore_settings, value):
    same_outcome(lambda: mt.set_warn_always(value), lambda: torch.set_warn_always(value))
    assert mt.is_warn_always_enabled() == torch.is_warn_always_enabled()


@needs_torch
def test_flush_denormal_flushes_on_this_thread(restore_settings):
    tiny = np.float32(1e-39)                 # a float32 denormal
    x, t = mt.tensor([tiny]), torch.tensor([tiny])
    assert (x * 1.0).item() != 0.0
    supported = mt.set_flush_denormal(True)
    assert supported == torch.set_flush_denormal(True)
    if supported:
        assert (x * 1.0).item() == 0.0 == (t * 1.0).item()
    assert mt.set_flush_denormal(False) == supported
    assert (x * 1.0).item() == pytest.approx(1e-39, rel=1e-6)
    same_outcome(lambda: mt.set_flush_denormal(1), lambda: torch.set_flush_denormal(1))


@needs_torch
def test_set_anomaly_enabled_as_pytorch(restore_settings):
    for args in [(True,), (True, False), (False,)]:
        mt.set_anomaly_enabled(*args)
        torch.set_anomaly_enabled(*args)
        assert (mt.is_anomaly_enabled(), mt.is_anomaly_check_nan_enabled()) == \
            (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled())
    same_outcome(lambda: mt.set_anomaly_enabled(1), lambda: torch.set_anomaly_enabled(1))
    assert not mt.is_anomaly_enabled()


def test_set_anomaly_enabled_records_forward_traces(restore_settings):
    mt.set_anomaly_enabled(True)
    x = mt.ones(2, requires_grad=True)
    y = (x * 2).sum()
    assert "traceback_" in y.grad_fn.metadata
    mt.set_anomaly_enabled(False)
    assert "traceback_" not in (x * 2).sum().grad_fn.metadata


@needs_torch
def test_is_inference_mode_enabled_as_pytorch():
    def states(lib):
        seen = [lib.is_inference_mode_enabled()]
        with lib.inference_mode():
            seen.append((lib.is_inference_mode_enabled(), lib.is_grad_enabled()))
            with lib.inference_mode(False):
                seen.append((lib.is_inference_mode_enabled(), lib.is_grad_enabled()))
            with lib.no_grad():
                seen.append(lib.is_inference_mode_enabled())
            seen.append(lib.is_inference_mode_enabled())
        seen.append(lib.is_inference_mode_enabled())
        seen.append(lib.inference_mode()(lib.is_inference_mode_enabled)())
        return seen
    assert states(mt) == states(torch)


@needs_torch
def test_typename_and_is_storage_as_pytorch():
    cases = [(lambda lib: lib.zeros(2), "FloatTensor"),
             (lambda lib: lib.zeros(2, dtype=lib.int64), "LongTensor"),
             (lambda lib: lib.nn.Parameter(lib.zeros(2)), "FloatTensor")]
    for make, name in cases:
        assert mt.typename(make(mt)) == "microtensor." + name
        assert torch.typename(make(torch)) == "torch." + name
    for obj in (3, None, "s", [1], warnings.catch_warnings):
        assert mt.typename(obj) == torch.typename(obj)
    assert mt.typename(mt.nn.Linear(2, 2)) == mt.nn.Linear.__module__ + ".Linear"
    assert mt.is_storage(mt.zeros(2).untyped_storage())
    assert not mt.is_storage(mt.zeros(2)) and not mt.is_storage(3)


@needs_torch
@pytest.mark.parametrize("name", ["torch.DoubleTensor", "FloatTensor", "torch.LongTensor"])
def test_set_default_tensor_type_as_pytorch(restore_settings, name):
    """A name or a typed constructor; a non-floating type is refused and changes nothing."""
    mt.set_default_dtype(mt.float32)
    torch.set_default_dtype(torch.float32)
    ours_arg, torch_arg = (name, name) if "." in name else (getattr(mt, name),
                                                            getattr(torch, name))
    with pytest.warns(UserWarning, match="set_default_tensor_type\\(\\) is deprecated"):
        ours = outcome(lambda: mt.set_default_tensor_type(ours_arg))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = outcome(lambda: torch.set_default_tensor_type(torch_arg))
    assert ours == theirs
    assert mt.zeros(1).dtype.name == str(torch.zeros(1).dtype).split(".")[1]


def test_compile_returns_the_callable():
    def f(x):
        return x * 2
    assert mt.compile(f) is f
    assert mt.compile(f, backend="eager", fullgraph=True, dynamic=False) is f
    decorated = mt.compile(mode="max-autotune")(f)
    assert decorated is f

    @mt.compile
    def g(x):
        return x + 1
    assert g(mt.ones(1)).item() == 2.0
    model = mt.nn.Linear(2, 2)
    assert mt.compile(model) is model
    with pytest.raises(RuntimeError, match="Either mode or options"):
        mt.compile(f, mode="default", options={})
    with pytest.raises(RuntimeError, match="Unrecognized mode=foo"):
        mt.compile(f, mode="foo")
    with pytest.raises(AssertionError, match="A callable function is expected"):
        mt.compile(1)
    with pytest.raises(TypeError):
        mt.compile(f, "eager")


@needs_torch
def test_compile_refuses_what_pytorch_refuses():
    for kwargs in ({"mode": "default", "options": {}}, {"mode": "foo"}):
        same_outcome(lambda: mt.compile(lambda x: x, **kwargs),
                     lambda: torch.compile(lambda x: x, **kwargs))


def test_autocast_warns_and_changes_nothing():
    x = mt.ones(2, 2)
    with pytest.warns(UserWarning, match="no autocasting.*Disabling autocast"):
        context = mt.autocast("cpu")
    with context:
        assert not mt.is_autocast_enabled("cpu")
        assert (x @ x).dtype is mt.float32
    assert context.fast_dtype is mt.bfloat16
    with pytest.warns(UserWarning, match="Disabling autocast"):
        @mt.autocast(device_type="cuda", dtype=mt.float16)
        def f(a):
            return a @ a
    assert f(x).dtype is mt.float32
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with mt.autocast("cpu", enabled=False):   # disabled: nothing to warn about
            pass


@needs_torch
@pytest.mark.parametrize("call", [
    lambda lib: lib.autocast("foo"), lambda lib: lib.autocast(device_type=1),
    lambda lib: lib.is_autocast_enabled("foo"), lambda lib: lib.is_autocast_enabled(),
    lambda lib: lib.is_autocast_enabled("cpu"), lambda lib: lib.is_autocast_cache_enabled(),
])
def test_autocast_queries_as_pytorch(call):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours, theirs = outcome(lambda: call(mt)), outcome(lambda: call(torch))
    assert ours[0] == theirs[0] and (ours[0] != "ok" and ours[1] == theirs[1] or
                                     ours[0] == "ok" and (isinstance(ours[1], mt.autocast)
                                                          or ours[1] == theirs[1]))


@needs_torch
def test_autocast_dtypes_as_pytorch(restore_settings):
    for device_type in ("cpu", "cuda"):
        assert str(mt.get_autocast_dtype(device_type)).split(".")[1] == \
            str(torch.get_autocast_dtype(device_type)).split(".")[1]
    with pytest.warns(DeprecationWarning, match="get_autocast_dtype\\('cpu'\\)"):
        assert mt.get_autocast_cpu_dtype() is mt.bfloat16
    mt.set_autocast_dtype("cpu", mt.float16)
    assert mt.get_autocast_dtype("cpu") is mt.float16
    with pytest.warns(UserWarning, match="Disabling autocast"):
        mt.set_autocast_enabled("cpu", True)
    assert not mt.is_autocast_enabled("cpu")
