"""``microtensor.profiler``, as ``torch.profiler``: ``profile`` (a context, or
``start``/``stop``) times every op call (``aten::<name>``), backward node and
``record_function`` range on the CPU, with an optional ``schedule`` over training steps
(``prof.step()``) handing each finished recording to ``on_trace_ready``
(``tensorboard_trace_handler`` writes a Chrome trace).  The recording itself is
``autograd.profiler``'s."""
import enum
import gzip
import json
import os
import socket
import time

from microtensor.autograd.profiler import _Recorder, record_function

__all__ = ["ProfilerAction", "ProfilerActivity", "profile", "record_function", "schedule",
           "supported_activities", "tensorboard_trace_handler"]


class ProfilerActivity(enum.Enum):
    CPU = 0
    XPU = 1
    MTIA = 2
    CUDA = 3
    HPU = 4
    PrivateUse1 = 5


def supported_activities():
    """What can be timed here: the CPU (GPU work is timed by the calls that launch it)."""
    return {ProfilerActivity.CPU}


class ProfilerAction(enum.Enum):
    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3


def schedule(*, wait, warmup, active, repeat=0, skip_first=0, skip_first_wait=0):
    """PyTorch's step schedule: after ``skip_first`` steps, cycles of ``wait`` idle,
    ``warmup`` and ``active`` recorded steps (the last one saving), ``repeat`` times
    (0: forever); ``skip_first_wait`` skips the first cycle's wait."""
    if wait < 0 or warmup < 0 or active <= 0 or repeat < 0 or skip_first < 0:
        raise ValueError("Invalid profiler schedule arguments")
    if warmup == 0:
        import warnings
        warnings.warn("Profiler won't be using warmup, this can skew profiler results")

    def schedule_fn(step):
        if step < 0:
            raise ValueError(f"Invalid step number: {step}")
        if step < skip_first:
            return ProfilerAction.NONE
        step -= skip_first
        if skip_first_wait:
            step += wait
        cycle = wait + warmup + active
        if repeat > 0 and step / cycle >= repeat:
            return ProfilerAction.NONE
        position = step % cycle
        if position < wait:
            return ProfilerAction.NONE
        if position < wait + warmup:
            return ProfilerAction.WARMUP
        return ProfilerAction.RECORD if position < cycle - 1 else \
            ProfilerAction.RECORD_AND_SAVE
    return schedule_fn


def _always_record(step):
    return ProfilerAction.RECORD


_RECORDING = (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)


class profile:  # noqa: N801 - PyTorch's name
    def __init__(self, *, activities=None, schedule=None, on_trace_ready=None,
                 record_shapes=False, profile_memory=False, with_stack=False,
                 with_flops=False, with_modules=False, experimental_config=None,
                 execution_trace_observer=None, acc_events=False, use_cuda=None,
                 custom_trace_id_callback=None, post_processing_timeout_s=None):
        self.activities = set(activities) if activities else supported_activities()
        self.schedule = schedule or _always_record
        self.on_trace_ready = on_trace_ready
        self.record_shapes = record_shapes
        self.step_num = 0
        self.current_action = self.schedule(0)
        self._recorder = None
        self._events = None

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc_info):
        self.stop()
        return False

    def start(self):
        if self.current_action in _RECORDING:
            self._start_recording()

    def stop(self):
        if self._recorder is not None:
            self._finish_recording()

    def step(self):
        """The end of a training step: the schedule's next action."""
        previous = self.current_action
        self.step_num += 1
        self.current_action = self.schedule(self.step_num)
        if previous is ProfilerAction.RECORD_AND_SAVE or (
                previous in _RECORDING and self.current_action not in _RECORDING):
            self._finish_recording()
        if self.current_action in _RECORDING and self._recorder is None:
            self._start_recording()

    def _start_recording(self):
        self._recorder = _Recorder(self.record_shapes)
        self._recorder.start()

    def _finish_recording(self):
        self._events = self._recorder.stop()
        self._recorder = None
        if self.on_trace_ready is not None:
            self.on_trace_ready(self)

    def events(self):
        if self._events is None:
            raise RuntimeError("Profiler didn't finish running")
        return self._events

    def key_averages(self, group_by_input_shape=False, group_by_stack_n=0,
                     group_by_overload_name=False):
        return self.events().key_averages(group_by_input_shape, group_by_stack_n)

    def export_chrome_trace(self, path):
        self.events().export_chrome_trace(path)


def tensorboard_trace_handler(dir_name, worker_name=None, use_gzip=False,
                              use_python_export=False):
    """An ``on_trace_ready`` writing each recording as a Chrome trace file
    ``<worker_name>.<time in ns>.pt.trace.json`` into ``dir_name`` (which TensorBoard's
    profiler plugin reads)."""
    def handler(prof):
        os.makedirs(dir_name, exist_ok=True)
        worker = worker_name or f"{socket.gethostname()}_{os.getpid()}"
        path = os.path.join(dir_name, f"{worker}.{time.time_ns()}.pt.trace.json")
        if use_gzip:
            with gzip.open(path + ".gz", "wt") as f:
                json.dump(prof.events().chrome_trace(), f)
        else:
            prof.export_chrome_trace(path)
    return handler

