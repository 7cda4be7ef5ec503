"""``microtensor.profiler`` and ``autograd.profiler`` against PyTorch's: which ops and
backward nodes a recording holds (``a * b`` included, though it has a C fast path), how
many times each ran, nesting (self time = time less the children's), ``record_function``
ranges, the step ``schedule`` and when ``on_trace_ready`` runs, the table and the Chrome
trace, and that nothing is recorded (and the fast paths serve again) once it stops."""
import inspect
import json
import threading

import pytest

import microtensor as mt
from microtensor.profiler import ProfilerAction, profile, record_function, schedule

try:
    import torch
    import torch.profiler as tprofiler
except ImportError:
    torch = tprofiler = None

requires_torch = pytest.mark.skipif(torch is None, reason="PyTorch (the oracle) is not installed")


def _program(lib):
    x = lib.ones(4, 4, requires_grad=True)
    w = lib.full((4, 4), 0.5, requires_grad=True)
    with lib.profiler.record_function("forward"):
        y = (x * w).sum()
    y.backward()


def _counts(prof, names):
    counts = {e.key: e.count for e in prof.key_averages()}
    return {name: counts.get(name, 0) for name in names}


@requires_torch
def test_ops_and_nodes_recorded_as_torch():
    names = ["forward", "aten::mul", "aten::sum", "SumBackward0", "MulBackward0",
             "autograd::engine::evaluate_function: MulBackward0"]
    with profile() as ours:
        _program(mt)
    with tprofiler.profile() as theirs:
        _program(torch)
    assert _counts(ours, names) == _counts(theirs, names)
    assert _counts(ours, names)["aten::mul"] == 3   # forward, and one per input's gradient


def test_nesting_and_self_time():
    with profile(record_shapes=True) as prof:
        with record_function("outer"):
            with record_function("inner"):
                mt.ones(3) * 2
    events = prof.events()
    outer = next(e for e in events if e.name == "outer")
    inner = next(e for e in events if e.name == "inner")
    mul = next(e for e in events if e.name == "aten::mul")
    assert inner.cpu_parent is outer and mul.cpu_parent is inner
    assert outer.cpu_time_total >= inner.cpu_time_total >= mul.cpu_time_total >= 0
    assert outer.self_cpu_time_total == pytest.approx(outer.cpu_time_total -
                                                      inner.cpu_time_total)
    assert mul.input_shapes == [[3], []]
    assert prof.events().self_cpu_time_total == pytest.approx(outer.cpu_time_total)


def test_nothing_recorded_after_stop_and_fast_paths_serve_again():
    with profile() as prof:
        mt.ones(2) + 1
    count = len(prof.events())
    x = mt.ones(2)
    assert (x + 1).tolist() == [2.0, 2.0]
    assert len(prof.events()) == count
    with profile() as again:
        pass
    assert len(again.events()) == 0


def test_one_profiler_at_a_time():
    with profile():
        with pytest.raises(RuntimeError, match="already enabled"):
            with profile():
                pass
    with profile() as prof:       # the refused one left the first able to stop cleanly
        mt.ones(1).exp()
    assert _counts(prof, ["aten::exp"]) == {"aten::exp": 1}


def test_other_threads_ops_are_their_own_stack():
    with profile() as prof:
        thread = threading.Thread(target=lambda: mt.ones(2).exp())
        with record_function("main"):
            thread.start()
            thread.join()
    exp = next(e for e in prof.events() if e.name == "aten::exp")
    assert exp.thread == thread.ident and exp.cpu_parent is None


@requires_torch
@pytest.mark.parametrize("kwargs", [dict(wait=1, warmup=1, active=2),
                                    dict(wait=0, warmup=1, active=1, repeat=2),
                                    dict(wait=2, warmup=1, active=3, repeat=1, skip_first=3),
                                    dict(wait=2, warmup=1, active=1, skip_first_wait=1)])
def test_schedule_as_torch(kwargs):
    ours, theirs = schedule(**kwargs), tprofiler.schedule(**kwargs)
    assert [ours(s).name for s in range(20)] == [theirs(s).name for s in range(20)]


@requires_torch
def test_on_trace_ready_runs_at_torchs_steps():
    def run(lib, prof_module):
        saved = []
        x = lib.ones(3)
        with prof_module.profile(schedule=prof_module.schedule(wait=1, warmup=1, active=2,
                                                                repeat=2),
                                 on_trace_ready=lambda p: saved.append(
                                     (p.step_num, _counts(p, ["aten::exp"])))) as prof:
            for _ in range(10):
                x.exp()
                prof.step()
        return saved
    assert run(mt, mt.profiler) == run(torch, tprofiler)
    assert ProfilerAction.RECORD_AND_SAVE.name == "RECORD_AND_SAVE"


def test_table_and_chrome_trace(tmp_path):
    with profile(record_shapes=True, on_trace_ready=mt.profiler.tensorboard_trace_handler(
            str(tmp_path), worker_name="w")) as prof:
        _program(mt)
    table = prof.key_averages().table(sort_by="cpu_time_total", row_limit=3)
    lines = table.splitlines()
    assert "Self CPU %" in lines[1] and "# of Calls" in lines[1]
    assert len(lines) == 3 + 3 + 2 and lines[-1].startswith("Self CPU time total:")
    [trace_file] = list(tmp_path.iterdir())
    assert trace_file.name.startswith("w.") and trace_file.name.endswith(".pt.trace.json")
    trace = json.loads(trace_file.read_text())
    names = {event["name"] for event in trace["traceEvents"]}
    assert {"forward", "aten::mul", "MulBackward0"} <= names
    assert all(event["ph"] == "X" and event["dur"] >= 0 for event in trace["traceEvents"])


def test_record_function_decorates_and_is_free_when_nothing_records():
    @record_function("step")
    def step(x):
        return x.exp()

    assert step(mt.zeros(1)).tolist() == [1.0]
    with profile() as prof:
        step(mt.zeros(1))
    [event] = [e for e in prof.events() if e.name == "step"]
    assert [child.name for child in event.cpu_children] == ["aten::exp"]


def test_legacy_autograd_profiler():
    with mt.autograd.profiler.profile(record_shapes=True) as prof:
        _program(mt)
    assert any(e.name == "aten::sum" for e in prof.function_events)
    assert "aten::mul" in prof.table()
    assert prof.total_average().count == len(prof.function_events)
    with pytest.raises(RuntimeError, match="didn't finish"):
        mt.autograd.profiler.profile().key_averages()


@requires_torch
@pytest.mark.parametrize("ours, theirs", [
    ("profiler.profile.__init__", "profiler.profile.__init__"),
    ("profiler.schedule", "profiler.schedule"),
    ("profiler.record_function.__init__", "autograd.profiler.record_function.__init__"),
    ("profiler.tensorboard_trace_handler", "profiler.tensorboard_trace_handler"),
    ("autograd.profiler.profile.__init__", "autograd.profiler.profile.__init__"),
])
def test_signatures_as_torch(ours, theirs):
    def resolve(root, path):
        for part in path.split("."):
            root = getattr(root, part)
        return [p.name for p in inspect.signature(root).parameters.values()]
    assert resolve(mt, ours) == resolve(torch, theirs)
