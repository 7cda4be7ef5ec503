"""``autograd.profiler``: timing every op call, backward node and ``record_function``
range while a profiler records, as ``torch.autograd.profiler`` does.

The recorder installs two pairs of callbacks: the dispatcher's (``set_profiler``: around
every op call, with the C fast paths standing aside so that ``a * b`` is an
``aten::mul`` too) and the backward engine's (``set_node_profiler``: around each
node's backward, named as PyTorch names it).  Each thread keeps its own stack of open
ranges, so nested calls (a composite op's ops, the ops of a backward formula) become
children, and an event's self time is its time less its children's.  With no profiler
recording, each op pays one pointer test.
"""
import contextlib
import threading
import time

from microtensor._C import autograd as _engine
from microtensor._C import dispatch as _dispatch
from microtensor.autograd.profiler_util import EventList, FunctionEvent

__all__ = ["EventList", "profile", "record_function"]

_NODE_PREFIX = "autograd::engine::evaluate_function: "


def _now_us():
    return time.perf_counter_ns() / 1000.0


def _shape_of(value):
    shape = getattr(value, "shape", None)
    if shape is not None and not isinstance(value, type):
        return list(shape)
    if isinstance(value, (list, tuple)) and value and all(hasattr(v, "shape") for v in value):
        return [list(v.shape) for v in value]
    return []


class _Recorder:
    """The events of one recording and the per-thread stacks of open ranges."""

    active = None      # the recorder the callbacks feed (one at a time, as in PyTorch)

    def __init__(self, record_shapes):
        self.record_shapes = record_shapes
        self.events = []
        self._local = threading.local()
        self._lock = threading.Lock()

    def begin(self, name, shapes=None, is_user_annotation=False):
        stack = self._local.__dict__.setdefault("stack", [])
        event = FunctionEvent(len(self.events), name, threading.get_ident(), _now_us(),
                              shapes, is_user_annotation)
        if stack:
            event.cpu_parent = stack[-1]
            stack[-1].cpu_children.append(event)
        stack.append(event)
        with self._lock:
            self.events.append(event)
        return event

    def end(self):
        event = self._local.stack.pop()
        event.time_range = event.time_range._replace(end=_now_us())

    def begin_op(self, op, args):
        self.begin("aten::" + op.name,
                   [_shape_of(a) for a in args] if self.record_shapes else None)

    def begin_node(self, node):
        name = node.name()
        self.begin(_NODE_PREFIX + name)
        self.begin(name)

    def end_node(self):
        self.end()
        self.end()

    def start(self):
        if _Recorder.active is not None:
            raise RuntimeError("Profiler is already enabled on this thread")
        _Recorder.active = self
        _dispatch.set_profiler(self.begin_op, self.end)
        _engine.set_node_profiler(self.begin_node, self.end_node)

    def stop(self):
        _dispatch.set_profiler(None, None)
        _engine.set_node_profiler(None, None)
        _Recorder.active = None
        return EventList(sorted(self.events, key=lambda e: e.time_range.start))


class record_function(contextlib.ContextDecorator):  # noqa: N801 - PyTorch's name
    """A named range in the profile (``with record_function("loss"):`` or as a
    decorator); nothing when no profiler records."""

    def __init__(self, name, args=None):
        self.name = name
        self.args = args
        self._recorder = None

    def __enter__(self):
        self._recorder = _Recorder.active
        if self._recorder is not None:
            self._recorder.begin(self.name, is_user_annotation=True)
        return self

    def __exit__(self, *exc_info):
        if self._recorder is not None:
            self._recorder.end()
            self._recorder = None
        return False


class profile:  # noqa: N801 - PyTorch's name
    """``torch.autograd.profiler.profile``: records while the context is open; then
    ``function_events``, ``key_averages()``, ``table()``, ``export_chrome_trace()``.
    Only CPU time exists here (``use_cuda``/``use_device`` are accepted: microtensor's
    GPU arrays are timed by the calls that launch them)."""

    def __init__(self, enabled=True, *, use_cuda=False, use_device=None, record_shapes=False,
                 with_flops=False, profile_memory=False, with_stack=False, with_modules=False,
                 use_kineto=False, use_cpu=True, experimental_config=None, acc_events=False,
                 custom_trace_id_callback=None, post_processing_timeout_s=None,
                 activity_filters=None):
        self.enabled = enabled
        self.record_shapes = record_shapes
        self.function_events = None
        self._recorder = None

    def __enter__(self):
        if self.enabled:
            self._recorder = _Recorder(self.record_shapes)
            self._recorder.start()
        return self

    def __exit__(self, *exc_info):
        if self._recorder is not None:
            self.function_events = self._recorder.stop()
            self._recorder = None
        return False

    def _events(self):
        if self.function_events is None:
            raise RuntimeError("Profiler didn't finish running")
        return self.function_events

    def key_averages(self, group_by_input_shape=False, group_by_stack_n=0):
        return self._events().key_averages(group_by_input_shape, group_by_stack_n)

    def total_average(self):
        return self._events().total_average()

    @property
    def self_cpu_time_total(self):
        return self._events().self_cpu_time_total

    def table(self, *args, **kwargs):
        return self._events().table(*args, **kwargs)

    def export_chrome_trace(self, path):
        self._events().export_chrome_trace(path)

    def __str__(self):
        return str(self._events())

