"""Explanations for readers: where an op is declared, and what a tensor's layout reaches.

``op(name)`` says where each layer keeps its part of an op (kernel, derivative, batching
rule, C fast path) with file:line; ``layout(t)`` and ``layout_svg(t)`` draw a tensor's
storage with the elements its view reaches numbered in logical (row-major) order.  The
command line ``python -m microtensor explain`` prints them (and autograd graphs, drawn by
``microtensor.autograd.graph``).
"""
import ast
import inspect
import os
import re
from xml.sax.saxutils import escape

import numpy as np

from microtensor._C import meta
from microtensor._C.dispatch import unary_kernels
from microtensor._C.meta import channels_last, channels_last_3d, contiguous_format

__all__ = ["batching_rule", "close_names", "evaluate", "layout", "layout_svg", "op", "reach"]

# The Tensor methods and operators of the Cython core that serve an op without the
# dispatcher for plain tensors (slots in ``_C/tensor.pyx``, bodies in
# ``_C/fast_paths.pxi``); anything they do not serve falls through to the registered op.
# (A test reads the core's sources to check that this table names every such method.)
FAST_PATHS = {
    "add": ("__add__", "__radd__"),
    "sub": ("__sub__", "__rsub__"),
    "mul": ("__mul__", "__rmul__"),
    "div": ("__truediv__", "__rtruediv__"),
    "matmul": ("__matmul__", "__rmatmul__"),
    "select": ("__getitem__",),
    "slice": ("__getitem__",),
    "t": ("t",),
    "transpose": ("transpose", "t"),
    "unsqueeze": ("unsqueeze",),
    "view": ("view", "reshape"),
    "reshape": ("reshape",),
    "expand": ("expand",),
    "as_strided": ("as_strided",),
    "clone": ("clone",),
    "contiguous": ("contiguous",),
    "sum": ("sum",),
}

MAX_DRAWN_ROWS = 16      # storage rows drawn before '...'
MAX_GRID_ELEMENTS = 64   # views with more elements get no logical grid


def _location(obj):
    """``path:line`` of a Python function or class (path relative to the working
    directory when below it)."""
    obj = inspect.unwrap(obj)
    try:
        path = inspect.getsourcefile(obj)
        line = inspect.getsourcelines(obj)[1]
    except (OSError, TypeError):
        return "(source not available)"
    return f"{_short(path)}:{line}"


def _short(path):
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def _pyx_location(method):
    """``path:line`` of ``def method(`` in the Cython core's sources, or None."""
    folder = os.path.join(os.path.dirname(__file__), "_C")
    pattern = re.compile(rf"^\s+def {re.escape(method)}\(")
    for name in sorted(os.listdir(folder)):
        if name.endswith(".pyx"):
            path = os.path.join(folder, name)
            with open(path) as f:
                for number, text in enumerate(f, 1):
                    if pattern.match(text):
                        return f"{_short(path)}:{number}"
    return None


def batching_rule(o):
    """The batching rule vmap applies to op ``o`` and where it comes from: declared with
    the op (``@o.def_batch_rule``), with its base op for an in-place variant, or the rule
    of its family."""
    from microtensor.vmap import rules
    from microtensor.vmap.fallback import fallback
    if o.random:
        return rules.random_rule, "every random op's: a draw per sample or one shared, as " \
            "vmap's randomness says"
    rule = rules.rule_for(o)
    if rule is fallback:
        if o.batch_rule is fallback:
            return rule, "declared with the op: the per-sample loop fallback, on purpose"
        return rule, "none: vmap runs the per-sample loop fallback (and warns once)"
    if o.batch_rule is rule:
        return rule, "declared with the op"
    if o.inplace_of is not None and o.inplace_of.batch_rule is rule:
        return rule, f"declared with {o.inplace_of.name}, of which this is the in-place variant"
    return rule, f"the rule of family {o.family!r}"


def close_names(name):
    """Op names that look like ``name`` (for a misspelt one)."""
    import difflib
    from microtensor.ops import REGISTRY
    return difflib.get_close_matches(name, REGISTRY, n=5, cutoff=0.6)


def op(name):
    """Where op ``name`` is declared, layer by layer, then its kernel's and derivative's
    source.  KeyError (with close names in its message) for an unknown name."""
    from microtensor.ops import REGISTRY
    o = REGISTRY.get(name)
    if o is None:
        close = close_names(name)
        hint = f"; did you mean: {', '.join(close)}?" if close else ""
        raise KeyError(f"unknown op {name!r}{hint}")
    kernel = o.inplace_of.kernel if o.inplace_of else o.kernel
    writes = f" (with out=self: the in-place variant of {o.inplace_of.name})" \
        if o.inplace_of else ""
    lines = [f"op {o.name}: kind={o.kind}, family={o.family}, inputs={o.inputs}",
             f"  kernel         {kernel.__qualname__}  {_location(kernel)}{writes}"]
    derivative = o.derivative
    if o.kind == "composite":
        lines += ["  derivative     none needed: a composite op runs other ops, which autograd "
                  "records",
                  "  batching rule  none needed: the ops it runs are batched"]
    else:
        if derivative is not None:
            lines += [f"  derivative     {_formula_text(o, derivative, i)}"
                      for i in range(len(derivative.functions()))]
            lines.append(f"                 (node {o.node_name}, may save "
                         f"{', '.join(o.saved_names) or 'nothing'})")
        else:
            lines.append("  derivative     none (not differentiable)")
        rule, rule_source = batching_rule(o)
        lines.append(f"  batching rule  {rule.__qualname__}  {_location(rule)}  "
                     f"({rule_source})")
    if o.norm_rule is not None:
        rule = o.norm_rule
        lines.append(f"  norm rule      {rule.fn.__qualname__}  {_location(rule.fn)}  (ghost "
                     f"clipping: activation {rule.activation}, for {', '.join(rule.params)})")
    for method in FAST_PATHS.get(o.name, ()):
        lines.append(f"  C fast path    Tensor.{method}  {_pyx_location(method) or ''}")
    if o in unary_kernels():
        lines.append("  C fast path    the dispatcher's one-input path (float32/float64 CPU "
                     "tensor, no other argument): unary_fast in _C/fast_paths.pxi")
    elif o.name not in FAST_PATHS:
        lines.append("  C fast path    none")
    lines += ["", "kernel:", inspect.getsource(kernel)]
    if derivative is not None:
        lines += ["derivative:"] + [inspect.getsource(f) for f in derivative.functions()]
    return "\n".join(lines)


def _formula_text(o, derivative, i):
    """Line ``i`` of the derivative: which input the formula serves, and where it is."""
    formula = derivative.functions()[i]
    if derivative.joint is not None:
        serves = "joint, every input"
    else:
        served = [name for name, entry in zip(o.inputs, derivative.formulas) if entry]
        serves = f"for {served[i]}"
    return f"{formula.__qualname__}  {_location(formula)}  ({serves})"


# --------------------------------------------------------------------------- layouts

def reach(t):
    """Storage index of each element of ``t``, as an int array of ``t``'s shape."""
    sizes, strides = tuple(t.shape), t.stride()
    positions = np.full(sizes, t.storage_offset(), dtype=np.int64)
    for d, (n, s) in enumerate(zip(sizes, strides)):
        shape = [1] * len(sizes)
        shape[d] = n
        positions = positions + np.arange(n, dtype=np.int64).reshape(shape) * s
    return positions


def _cells(t):
    """Per storage cell: the first logical (row-major) index among the elements that read
    it (-1: none) and how many elements read it, as two arrays."""
    n = t.untyped_storage().nbytes() // t.element_size()
    positions = reach(t).reshape(-1)
    first = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, positions, np.arange(positions.size, dtype=np.int64))
    first[first == np.iinfo(np.int64).max] = -1
    return first, np.bincount(positions, minlength=n)


def _row_width(t):
    """Storage cells per drawn row: the view's largest stride that fits a row (so that
    its rows are drawn as columns of the picture), else the last size of the tensor the
    storage was made for, else 10."""
    strides = [s for n, s in zip(t.shape, t.stride()) if n > 1 and 2 <= s <= 16]
    base = t._base if t._base is not None else t
    width = base.shape[-1] if base.dim() else 1
    width = max(strides) if strides else width if 2 <= width <= 16 else 10
    return max(1, min(width, t.untyped_storage().nbytes() // t.element_size()))


def _contiguity(t):
    formats = [("contiguous_format", contiguous_format)]
    if t.dim() == 4:
        formats.append(("channels_last", channels_last))
    if t.dim() == 5:
        formats.append(("channels_last_3d", channels_last_3d))
    sizes, strides = tuple(t.shape), t.stride()
    return ", ".join(f"{name} {'yes' if meta.is_contiguous(sizes, strides, fmt) else 'no'}"
                     for name, fmt in formats)


def layout(t):
    """A text picture of ``t``'s layout: sizes, strides, offset, dtype, contiguity per
    memory format, and its storage with each cell showing the logical index of the
    element it holds ('.' where the view does not reach; '*' after a number: more than
    one element reads that cell)."""
    storage = t.untyped_storage()
    first, count = _cells(t)
    reached = int(np.count_nonzero(count))
    lines = [f"sizes {tuple(t.shape)}, strides {t.stride()}, storage offset "
             f"{t.storage_offset()}, dtype {t.dtype}",
             f"contiguous: {_contiguity(t)}; non-overlapping and dense: "
             f"{'yes' if t.is_non_overlapping_and_dense() else 'no'}",
             f"storage: {storage.nbytes() // t.element_size()} elements of {t.element_size()} bytes; the view's "
             f"{t.numel()} elements read {reached} of them, numbered in logical order:"]
    width = _row_width(t)
    cell_width = max(len(str(max(t.numel() - 1, 0))), len(str(width - 1)) + 1) + 2
    label_width = len(str(max(len(first) - 1, 0)))
    lines.append(" " * (label_width + 2) + "".join(f"+{i}".rjust(cell_width)
                                                    for i in range(width)))
    rows = range(0, len(first), width)
    for start in rows[:MAX_DRAWN_ROWS]:
        lines.append(f"{start:>{label_width}}: " + "".join(
            _cell_text(first[i], count[i]).rjust(cell_width)
            for i in range(start, min(start + width, len(first)))))
    if len(rows) > MAX_DRAWN_ROWS:
        hidden = count[MAX_DRAWN_ROWS * width:]
        lines.append(f"... {len(hidden)} more storage elements, {np.count_nonzero(hidden)} "
                     "of them read by the view")
    if (count > 1).any():
        lines.append("(* more than one element reads this cell: the first is shown)")
    if 0 < t.numel() <= MAX_GRID_ELEMENTS:
        lines.append("storage index of each element:")
        lines.append(np.array2string(reach(t), separator=", "))
    return "\n".join(lines)


def _cell_text(first, count):
    return "." if not count else str(first) + ("*" if count > 1 else "")


def layout_svg(t):
    """``layout``'s storage picture as an SVG document (a string)."""
    first, count = _cells(t)
    width = _row_width(t)
    rows = min(MAX_DRAWN_ROWS, -(-len(first) // width))
    size, left, top = 40, 50, 50
    more = len(first) > rows * width
    height = top + rows * size + (30 if more else 10)
    title = (f"sizes {tuple(t.shape)}, strides {t.stride()}, offset {t.storage_offset()}, "
             f"{t.dtype}")
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width * size + 10}" '
             f'height="{height}" font-family="monospace" font-size="13">',
             f'<text x="{left}" y="20">{escape(title)}</text>']
    for i in range(width):
        parts.append(f'<text x="{left + i * size + size // 2}" y="{top - 8}" '
                     f'text-anchor="middle" fill="#888">+{i}</text>')
    n = max(t.numel(), 1)
    for index in range(min(len(first), rows * width)):
        row, col = divmod(index, width)
        x, y = left + col * size, top + row * size
        if col == 0:
            parts.append(f'<text x="{left - 6}" y="{y + size // 2 + 5}" text-anchor="end" '
                         f'fill="#888">{index}</text>')
        # earlier elements darker, so the logical order reads as a gradient
        fill = "#eeeeee" if not count[index] else \
            f"hsl(210, 70%, {50 + int(40 * first[index] / n)}%)"
        parts.append(f'<rect x="{x}" y="{y}" width="{size}" height="{size}" fill="{fill}" '
                     'stroke="#444"/>')
        parts.append(f'<text class="cell" x="{x + size // 2}" y="{y + size // 2 + 5}" '
                     'text-anchor="middle">'
                     f'{escape(_cell_text(first[index], count[index]))}</text>')
    if more:
        parts.append(f'<text x="{left}" y="{top + rows * size + 20}">... '
                     f'{len(first) - rows * width} more storage elements</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


# --------------------------------------------------------------------------- expressions

def evaluate(source, namespace=None):
    """The value of ``source``: Python statements whose last one is an expression, run
    with ``mt`` (microtensor) in scope, as the command line's ``EXPR`` arguments."""
    import microtensor as mt
    scope = {"mt": mt, "microtensor": mt}
    scope.update(namespace or {})
    tree = ast.parse(source, mode="exec")
    if not tree.body or not isinstance(tree.body[-1], ast.Expr):
        raise ValueError(f"the expression must end with a value: {source!r}")
    last = ast.Expression(tree.body.pop().value)
    exec(compile(tree, "<explain>", "exec"), scope)
    return eval(compile(last, "<explain>", "eval"), scope)
