"""What a profiler recorded, as ``torch.autograd.profiler_util`` shapes it: a
``FunctionEvent`` per op call, backward node or ``record_function`` range (times in
microseconds, with its parent and children, so that self time is its time less its
children's), ``EventList.key_averages()`` grouping them by name (and input shapes), the
``table()`` PyTorch prints, and a Chrome trace."""
import json
import os
from collections import namedtuple

__all__ = ["EventList", "FunctionEvent", "FunctionEventAvg", "Interval"]

Interval = namedtuple("Interval", ("start", "end"))


class FunctionEvent:
    """One timed range: an op (``aten::mul``), a backward node or a user's
    ``record_function``; ``start``/``end`` in microseconds of the profiler's clock."""

    def __init__(self, id, name, thread, start_us, input_shapes=None,
                 is_user_annotation=False):
        self.id = id
        self.name = name
        self.thread = thread
        self.time_range = Interval(start_us, start_us)
        self.input_shapes = input_shapes if input_shapes is not None else []
        self.is_user_annotation = is_user_annotation
        self.cpu_parent = None
        self.cpu_children = []
        self.count = 1
        self.device_type = "CPU"

    @property
    def key(self):
        return self.name

    @property
    def cpu_time_total(self):
        return self.time_range.end - self.time_range.start

    @property
    def cpu_time(self):
        return self.cpu_time_total

    @property
    def self_cpu_time_total(self):
        return self.cpu_time_total - sum(child.cpu_time_total for child in self.cpu_children)

    def __repr__(self):
        return (f"<FunctionEvent id={self.id} name={self.name} thread={self.thread} "
                f"cpu_time_total={self.cpu_time_total:.3f}us "
                f"self_cpu_time_total={self.self_cpu_time_total:.3f}us>")


class FunctionEventAvg:
    """The events of one key (name, and input shapes when grouped by them), summed."""

    def __init__(self):
        self.key = None
        self.count = 0
        self.cpu_time_total = 0.0
        self.self_cpu_time_total = 0.0
        self.input_shapes = None
        self.is_user_annotation = False
        self.device_type = "CPU"

    def add(self, other):
        if self.key is None:
            self.key, self.input_shapes = other.key, other.input_shapes
            self.is_user_annotation = other.is_user_annotation
        self.count += other.count
        self.cpu_time_total += other.cpu_time_total
        self.self_cpu_time_total += other.self_cpu_time_total
        return self

    @property
    def cpu_time(self):
        return self.cpu_time_total / self.count if self.count else 0.0

    def __repr__(self):
        return (f"<FunctionEventAvg key={self.key} count={self.count} "
                f"cpu_time_total={self.cpu_time_total:.3f}us "
                f"self_cpu_time_total={self.self_cpu_time_total:.3f}us>")


def _format_time(us):
    if us >= 1e6:
        return f"{us / 1e6:.3f}s"
    if us >= 1e3:
        return f"{us / 1e3:.3f}ms"
    return f"{us:.3f}us"


class EventList(list):
    """A list of events (``FunctionEvent`` or ``FunctionEventAvg``)."""

    @property
    def self_cpu_time_total(self):
        return sum(event.self_cpu_time_total for event in self)

    def key_averages(self, group_by_input_shape=False, group_by_stack_n=0):
        groups = {}
        for event in self:
            key = (event.key, str(event.input_shapes)) if group_by_input_shape else event.key
            groups.setdefault(key, FunctionEventAvg()).add(event)
        return EventList(groups.values())

    def total_average(self):
        total = FunctionEventAvg()
        for event in self:
            total.add(event)
        total.key = "Total"
        return total

    def table(self, sort_by=None, row_limit=100, max_src_column_width=75,
              max_name_column_width=55, max_shapes_column_width=80, header=None,
              top_level_events_only=False):
        """PyTorch's table: name, self and total CPU time (and their shares of the total
        self time), the average, the number of calls, and the input shapes when they were
        recorded; sorted by ``sort_by`` (an attribute such as "cpu_time_total"),
        largest first."""
        events = [e for e in self if not top_level_events_only or
                  getattr(e, "cpu_parent", None) is None]
        if sort_by is not None:
            events.sort(key=lambda e: getattr(e, sort_by), reverse=True)
        events = events[:row_limit] if row_limit is not None and row_limit > 0 else events
        total_self = self.self_cpu_time_total
        name_width = min(max([len(e.key) for e in events] + [4]) + 4, max_name_column_width)
        with_shapes = any(e.input_shapes for e in events)
        shapes_width = min(max([len(str(e.input_shapes)) for e in events] + [12]) + 4,
                           max_shapes_column_width)
        columns = [("Name", name_width)] + [(title, 12) for title in (
            "Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg",
            "# of Calls")]
        if with_shapes:
            columns.append(("Input Shapes", shapes_width))
        rule = "  ".join("-" * width for _, width in columns) + "  "

        def row(cells):
            return "  ".join(f"{cell:>{width}}" for cell, (_, width) in zip(cells, columns)) \
                + "  "

        def share(value):
            return f"{100 * value / total_self:.2f}%" if total_self else "0.00%"

        lines = [header] if header else []
        lines += [rule, row([title for title, _ in columns]), rule]
        for event in events:
            name = event.key if len(event.key) <= name_width else \
                event.key[:name_width - 3] + "..."
            cells = [name, share(event.self_cpu_time_total),
                     _format_time(event.self_cpu_time_total), share(event.cpu_time_total),
                     _format_time(event.cpu_time_total), _format_time(event.cpu_time),
                     str(event.count)]
            if with_shapes:
                shapes = str(event.input_shapes)
                cells.append(shapes if len(shapes) <= shapes_width else
                             shapes[:shapes_width - 3] + "...")
            lines.append(row(cells))
        lines += [rule, f"Self CPU time total: {_format_time(total_self)}", ""]
        return "\n".join(lines)

    def chrome_trace(self):
        """The events as a Chrome trace (``chrome://tracing``, Perfetto): complete
        ("X") events in microseconds, one track per thread."""
        trace = [{"name": e.name, "ph": "X", "cat": "user_annotation" if
                  e.is_user_annotation else "cpu_op", "ts": e.time_range.start,
                  "dur": e.cpu_time_total, "pid": os.getpid(), "tid": e.thread,
                  "args": {"Input Dims": e.input_shapes}}
                 for e in self if isinstance(e, FunctionEvent)]
        return {"traceEvents": trace, "displayTimeUnit": "ms"}

    def export_chrome_trace(self, path):
        with open(path, "w") as f:
            json.dump(self.chrome_trace(), f)

    def __str__(self):
        return self.table()
