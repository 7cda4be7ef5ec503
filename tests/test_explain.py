"""``python -m microtensor explain``: ops (file:line of every layer), layouts (text and SVG
pictures of what a view reaches), autograd graphs (tree and DOT, names as PyTorch's); the
reference engine; the tour's pointers into the source."""
import os
import re
import shutil
import stat
import subprocess
import sys
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import microtensor as mt
from microtensor import __main__ as cli
from microtensor import explain
from microtensor._C.tensor import TensorBase
from microtensor.autograd import graph, reference_engine
from microtensor.ops import REGISTRY

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(argv, capsys):
    code = cli.main(["explain"] + argv)
    out = capsys.readouterr()
    return code, out.out, out.err


# --------------------------------------------------------------------------- explain OP

def _locations(text):
    """(label, path, line) of each 'label ... path:line' row of ``explain OP``."""
    rows = re.findall(r"^  (kernel|derivative|batching rule|C fast path) .*?(\S+):(\d+)", text,
                      re.M)
    return [(label, path, int(line)) for label, path, line in rows]


def test_explain_op_names_every_layer_with_file_and_line(capsys):
    code, out, _ = run(["mul"], capsys)
    assert code == 0
    rows = _locations(out)
    # one derivative row per input's formula (self's, then other's)
    assert [label for label, _, _ in rows] == ["kernel", "derivative", "derivative",
                                               "batching rule", "C fast path", "C fast path"]
    for label, path, line in rows:
        with open(os.path.join(os.getcwd(), path)) as f:
            text = f.readlines()[line - 1]
        expected = {"kernel": "def mul(", "derivative": "def mul(", "batching rule":
                    "def pointwise(", "C fast path": "def __"}[label]
        # decorated functions: the line is the decorator's, the def follows
        if expected not in text:
            with open(os.path.join(os.getcwd(), path)) as f:
                following = "".join(f.readlines()[line - 1:line + 3])
            assert expected in following, (label, path, line)
    assert "Tensor.__mul__" in out and "Tensor.__rmul__" in out
    assert "MulBackward0" in out and "family 'pointwise'" in out
    assert "return pointwise(np.multiply" in out     # the kernel's source follows


def test_explain_op_batching_rule_is_the_one_vmap_uses():
    from microtensor.vmap import rules
    for name in ("clone", "as_strided", "new_empty_strided", "sum", "add_"):
        rule, _ = explain.batching_rule(REGISTRY[name])
        assert rule is rules.rule_for(REGISTRY[name])
        assert f"batching rule  {rule.__qualname__}" in explain.op(name)


def test_explain_op_says_where_the_batching_rule_is_declared():
    def rule_row(name):
        return next(line for line in explain.op(name).splitlines()
                    if line.startswith("  batching rule"))
    assert "ops/view.py:" in rule_row("transpose") and "(declared with the op)" in \
        rule_row("transpose")
    assert "ops/indexing.py:" in rule_row("index_put_") and "declared with index_put" in \
        rule_row("index_put_")
    assert "random_rule" in rule_row("randn") and "randomness" in rule_row("randn")
    assert "family 'reduction'" in rule_row("sum")


def test_explain_op_without_fast_path_or_rule():
    text = explain.op("masked_select")
    assert "C fast path    none" in text
    assert "per-sample loop fallback" in text
    inplace = explain.op("mul_")
    assert "in-place variant of mul" in inplace and "MulBackward0" in inplace


def test_fast_path_table_names_real_methods_and_ops():
    for name, methods in explain.FAST_PATHS.items():
        assert name in REGISTRY
        for method in methods:
            assert method in vars(TensorBase), method
            location = explain._pyx_location(method)
            assert location and location.split(":")[0].endswith(".pyx")


def test_fast_path_table_covers_every_method_that_falls_back_to_an_op():
    """Each ``def method(`` of the core that names an op it falls back to or records
    (``_dispatch_call("op"``, ``_binary(.., "op")``, ``_recorded_view(self, "op"``), itself
    or through the fast-path functions it calls (``fast_paths.pxi``), is listed."""
    folder = os.path.join(os.path.dirname(mt.__file__), "_C")
    names_op, calls = set(), {}
    for name in os.listdir(folder):
        if not name.endswith((".pyx", ".pxi")):
            continue
        function = None
        with open(os.path.join(folder, name)) as f:
            for line in f:
                start = re.match(r"\s*(?:c?p?def)\s+(?:[\w*]+\s+)*(\w+)\(", line)
                if start:
                    function = start.group(1)
                    calls.setdefault(function, set())
                    continue
                code = re.sub(r"``.*?``", "", line)   # not the code quoted in docstrings
                calls.get(function, set()).update(re.findall(r"(?<![\w.])(\w+)\(", code))
                for op_name in re.findall(r'(?:_dispatch_call|_recorded_view)\((?:self, )?"(\w+)"'
                                          r'|_binary\(.*, "(\w+)"\)', line):
                    names_op.add((function, next(n for n in op_name if n)))

    def ops_named(function, seen=()):
        direct = {o for f, o in names_op if f == function}
        for callee in calls.get(function, set()) - set(seen) - {function}:
            direct |= ops_named(callee, seen + (function,))
        return direct

    public = {(m, o) for m in vars(TensorBase) if m in calls for o in ops_named(m)}
    assert len(public) >= 15
    for method, op_name in public:
        assert method in explain.FAST_PATHS.get(op_name, ()), (method, op_name)


def test_unknown_op_suggests_close_names_and_exits_2(capsys):
    code, out, err = run(["transpos"], capsys)
    assert code == 2
    assert "unknown op 'transpos'" in err and "transpose" in err
    code, _, err = run(["zzzzzz"], capsys)
    assert code == 2 and "unknown op" in err and "did you mean" not in err


def test_explain_without_arguments_prints_usage(capsys):
    code, out, _ = run([], capsys)
    assert code == 2 and "usage" in out


def test_command_line_in_a_subprocess():
    env = dict(os.environ, PYTHONPATH=os.path.dirname(mt.__path__[0]))
    result = subprocess.run([sys.executable, "-m", "microtensor", "explain", "mull"],
                            capture_output=True, text=True, env=env, cwd=ROOT)
    assert result.returncode == 2
    assert "did you mean: mul" in result.stderr


# --------------------------------------------------------------------------- layouts

def _drawn_cells(text):
    """The storage picture of ``layout``'s text: {storage index: cell text}."""
    header = next(i for i, line in enumerate(text.splitlines()) if line.strip().startswith("+0"))
    cells = {}
    for line in text.splitlines()[header + 1:]:
        match = re.match(r"\s*(\d+): (.*)$", line)
        if not match:
            break
        for i, cell in enumerate(match.group(2).split()):
            cells[int(match.group(1)) + i] = cell
    return cells


def _expected_cells(t):
    """From the storage itself: fill the storage with -1, write each element's logical
    index through the view, read the storage back."""
    n = t.untyped_storage().nbytes() // t.element_size()
    probe = mt.full((n,), -1, dtype=mt.int64)
    view = probe.as_strided(tuple(t.shape), t.stride(), t.storage_offset())
    view.copy_(mt.arange(t.numel()).reshape(tuple(t.shape)))
    return {i: "." if v < 0 else str(v) for i, v in enumerate(probe.tolist())}


@pytest.mark.parametrize("expr", [
    "mt.arange(12.).reshape(3, 4).t()[1:]",
    "mt.arange(24.).reshape(2, 3, 4).permute(2, 0, 1)[1:, :, ::2]",
    "mt.arange(20.)[3:17:3]",
    "mt.zeros(2, 3, 2, 2).contiguous(memory_format=mt.channels_last)",
    "mt.arange(30.).as_strided((2, 3), (7, 2), 5)",
])
def test_layout_picture_marks_what_the_view_reaches(expr):
    t = explain.evaluate(expr)
    text = explain.layout(t)
    assert f"sizes {tuple(t.shape)}, strides {t.stride()}, storage offset " \
           f"{t.storage_offset()}" in text
    assert _drawn_cells(text) == _expected_cells(t)


def test_layout_states_contiguity_per_memory_format():
    t = mt.zeros(2, 3, 4, 5).contiguous(memory_format=mt.channels_last)
    assert "contiguous_format no, channels_last yes" in explain.layout(t)
    t5 = mt.zeros(2, 3, 2, 2, 2).contiguous(memory_format=mt.channels_last_3d)
    assert "contiguous_format no, channels_last_3d yes" in explain.layout(t5)
    assert "contiguous_format yes;" in explain.layout(mt.zeros(3, 4))
    assert "channels_last" not in explain.layout(mt.zeros(3, 4))


def test_layout_marks_cells_read_by_several_elements():
    text = explain.layout(mt.arange(3.).expand(2, 3))
    assert _drawn_cells(text) == {0: "0*", 1: "1*", 2: "2*"}
    assert "more than one element" in text


def test_layout_caps_big_storages():
    t = mt.zeros(100, 100)[::3, 5]
    text = explain.layout(t)
    cells = _drawn_cells(text)
    assert len(cells) == explain.MAX_DRAWN_ROWS * explain._row_width(t) < 10000
    assert re.search(r"^\.\.\. \d+ more storage elements, \d+ of them read", text, re.M)
    assert "storage index of each element" in text  # 34 elements: the grid is small
    assert "storage index" not in explain.layout(mt.zeros(100, 100))


def test_layout_svg_is_xml_with_one_cell_per_drawn_storage_element(tmp_path, capsys):
    expr = "mt.arange(12.).reshape(3, 4).t()[1:]"
    path = tmp_path / "layout.svg"
    code, out, _ = run(["--layout", expr, "--svg", str(path)], capsys)
    assert code == 0 and out == explain.layout(explain.evaluate(expr)) + "\n"
    root = ET.parse(path).getroot()
    ns = "{http://www.w3.org/2000/svg}"
    assert root.tag == ns + "svg"
    assert len(root.findall(ns + "rect")) == 12
    texts = [t.text for t in root.findall(ns + "text") if t.get("class") == "cell"]
    expected = _expected_cells(explain.evaluate(expr))
    assert texts == [expected[i] for i in range(12)]


def test_library_form_is_mt_explain_layout():
    assert mt.explain.layout is explain.layout


# --------------------------------------------------------------------------- graphs

def _tree(node, strip=True):
    """Node names of a graph as a nested tuple, edges to nothing left out."""
    name = node.name()
    if strip:
        name = name.replace("torch::autograd::", "")
    return (name,) + tuple(_tree(n, strip) for n, _ in node.next_functions if n is not None)


def _build(lib, expr):
    x = lib.tensor(np.arange(1., 7.).reshape(2, 3), requires_grad=True)
    w = lib.tensor(np.full((2, 3), 0.5), requires_grad=True)
    return eval(expr, {"x": x, "w": w, "lib": lib})


GRAPHS = [
    "(x * w).sum()",
    "(x.exp() + w).sin().sum()",
    "x[1:].tanh()",
    "x.transpose(0, 1).unsqueeze(0).expand(2, 3, 2).sum()",
    "x.reshape(-1).pow(2).sum()",
    "(lambda y: (y.__getitem__(slice(1, None)).mul_(w[1:]), y.sum())[1])(x * 1)",
    "(lambda y: (y.__getitem__(0).add_(w[0]), (y * y).sum())[1])(x.clone())",
]


@pytest.mark.parametrize("expr", GRAPHS)
def test_graph_node_names_match_pytorch(expr):
    torch = pytest.importorskip("torch", reason="PyTorch (the oracle) is not installed")
    ours, theirs = _build(mt, expr), _build(torch, expr)
    # microtensor leaves no edge for a Python-number operand (PyTorch: an edge to None)
    assert _tree(ours.grad_fn) == _tree(theirs.grad_fn)
    drawn = re.findall(r"\w+Backward0|AccumulateGrad|CopySlices", graph.to_text(ours))
    assert set(drawn) >= set(re.findall(r"\w+Backward0|AccumulateGrad|CopySlices",
                                        str(_tree(ours.grad_fn))))


def test_graph_text_shows_saved_tensors_versions_and_copyslices():
    x = mt.ones(2, 3, requires_grad=True)
    w = mt.ones(3, requires_grad=True)
    y = x * 2
    y[1:].mul_(w)
    z = (y * y).sum()
    text = graph.to_text(z)
    lines = text.splitlines()
    assert lines[0] == "SumBackward0"
    assert "saved self: tensor (2, 3) float32, saved at version 1" in text
    assert "view: sizes (1, 3), strides (3, 1), offset 3" in text
    assert "base: sizes (2, 3), strides (3, 1), offset 0" in text
    assert "fn: MulBackward0" in text
    # y * y reaches CopySlices twice: drawn once, referred to after
    assert sum("CopySlices" in line for line in lines) == 2
    assert any(line.endswith("CopySlices [#1]") for line in lines)
    assert any("CopySlices -> see [#1] above" in line for line in lines)
    y.add_(1)
    assert "now at version 2: modified in place" in graph.to_text(z)


def test_graph_text_after_backward_says_saved_values_were_freed():
    x = mt.ones(3, requires_grad=True)
    z = (x * x).sum()
    z.backward()
    assert "freed" in graph.to_text(z)
    assert ".grad set" in graph.to_text(z)


def test_graph_of_a_tensor_without_history_is_refused():
    with pytest.raises(ValueError, match="does not require grad"):
        graph.to_text(mt.ones(3))


def _dot_graph(text):
    """Nodes {id: label} and edges [(tail, head, attributes)] of ``to_dot``'s output."""
    nodes = dict(re.findall(r'^  (\w+) \[label="((?:[^"\\]|\\.)*)"', text, re.M))
    edges = re.findall(r"^  (\w+) -> (\w+)(?: \[(.*)\])?;$", text, re.M)
    return nodes, edges


def test_dot_has_the_graph_nodes_and_edges(tmp_path, capsys):
    expr = "x = mt.ones(3, requires_grad=True); y = x * 2; y[1:].mul_(x[1:]); (y * y).sum()"
    path = tmp_path / "graph.dot"
    code, out, _ = run(["--graph", expr, "--dot", str(path)], capsys)
    assert code == 0 and out.startswith("SumBackward0\n")
    text = path.read_text()
    assert text.startswith("digraph autograd {") and text.rstrip().endswith("}")
    assert text == graph.to_dot(explain.evaluate(expr))
    nodes, edges = _dot_graph(text)
    names = {i: label.split("\\n")[0] for i, label in nodes.items()}
    z = explain.evaluate(expr)
    order, _ = graph._walk(z.grad_fn)
    expected_edges = [(a.name(), b.name()) for a in order for b, _ in a.next_functions
                      if b is not None]
    drawn = [(names[a], names[b]) for a, b, attrs in edges if "dashed" not in attrs
             and a != "output"]
    assert sorted(drawn) == sorted(expected_edges)
    assert ("CopySlices", "MulBackward0") in [(names[a], names[b]) for a, b, attrs in edges
                                              if "dashed" in attrs]
    assert sorted(names.values()).count("AccumulateGrad") == 1   # x's, shared
    assert ("output", "n0", "") in edges
    if not shutil.which("dot"):
        assert "not rendered" in out


def test_dot_labels_carry_saved_values_and_are_escaped():
    x = mt.ones(3, requires_grad=True)
    nodes, _ = _dot_graph(graph.to_dot(x.sum(dim=0, keepdim=False)))
    assert any("saved dim: 0" in label for label in nodes.values())
    assert graph._dot_label(['say "hi"', "a\\b"]) == r'"say \"hi\"\na\\b"'


def test_library_form_is_mt_autograd_graph():
    x = mt.ones(2, requires_grad=True)
    assert mt.autograd.graph.to_dot(x * 2).startswith("digraph")
    assert mt.autograd.graph.to_text(x).startswith("AccumulateGrad")


def test_dot_is_rendered_when_graphviz_is_installed(tmp_path, monkeypatch, capsys):
    # a stand-in for Graphviz's `dot` that records its arguments and writes the -o file
    fake = tmp_path / "bin" / "dot"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho \"$@\" >> \"$(dirname \"$0\")/calls\"\n"
                    "while [ $# -gt 1 ]; do shift; done; echo drawn > \"$1\"\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    path = tmp_path / "g.dot"
    code, out, _ = run(["--graph", "x = mt.ones(2, requires_grad=True); x * 3", "--dot",
                        str(path)], capsys)
    assert code == 0 and "g.dot.svg" in out
    calls = (fake.parent / "calls").read_text().splitlines()
    assert calls == [f"-Tsvg {path} -o {path}.svg", f"-Tpng {path} -o {path}.png"]
    assert (tmp_path / "g.dot.png").read_text() == "drawn\n"


def test_graph_and_layout_refuse_what_they_cannot_draw(capsys):
    code, _, err = run(["--graph", "mt.ones(3) * 2"], capsys)
    assert code == 2 and "has no autograd graph" in err
    code, _, err = run(["--layout", "3 + 4"], capsys)
    assert code == 2 and "is a int, not a tensor" in err


def test_graph_of_a_multi_output_node_says_which_output():
    x = mt.ones(2, 2, requires_grad=True)
    first, second = x.unbind(0)
    assert graph.to_text(second).splitlines()[0] == "UnbindBackward0 (output 1)"
    lines = graph.to_text(first + second).splitlines()
    assert lines[2] == "|-- UnbindBackward0 (output 0) [#1]"
    assert lines[-1] == "`-- UnbindBackward0 (output 1) -> see [#1] above"
    assert 'output -> n0 [label="1"];' in graph.to_dot(second)


# --------------------------------------------------------------------------- reference engine

def _graphs():
    def copyslices(x, w):
        y = x * 1
        y[1:].mul_(w)
        return (y * y).sum(), (x, w)

    def two_copyslices(x, w):
        y = x.clone()
        y[0].add_(w)
        y[:, 1:].mul_(x[:, :2])
        return y.exp().sum(), (x, w)

    def shared(x, w):
        h = x * w
        return (h * h + h.sin()).sum(), (x, w)

    def broadcast(x, w):
        return (x @ x.t()).relu().sum() + (x + w).mean(), (x, w)

    def several_outputs(x, w):
        return [(x * w).sum(dim=0), x.cos()], (x, w)
    return [copyslices, two_copyslices, shared, broadcast, several_outputs]


@pytest.mark.parametrize("build", _graphs(), ids=lambda f: f.__name__)
def test_reference_engine_agrees_with_the_c_engine(build):
    mt.manual_seed(0)
    x = mt.randn(3, 3, dtype=mt.float64, requires_grad=True)
    w = mt.randn(3, dtype=mt.float64, requires_grad=True)
    outputs, inputs = build(x, w)
    outputs = outputs if isinstance(outputs, list) else [outputs]
    seeds = [mt.randn(o.numel(), dtype=mt.float64).reshape(o.shape) for o in outputs]
    ours = reference_engine.grad(outputs, inputs, seeds)
    theirs = mt.autograd.grad(outputs, inputs, seeds)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-12)


# --------------------------------------------------------------------------- the tour

_POINTER = re.compile(r"`(src/microtensor/[\w/]+\.(?:pyx?|pxi))(?:::([\w.]+))?`")


def _defines(source, name):
    """Whether ``source`` defines ``name`` (a function, class or module-level name)."""
    keyword = r"(?:(?:cp|c)?def|(?:cdef )?class)\s+(?:[\w*]+\s+)*"   # Cython: return types
    return re.search(rf"^\s*{keyword}{re.escape(name)}\b|^{re.escape(name)}\s*=", source,
                     re.M) is not None


def _class_body(source, name):
    start = re.search(rf"^(?:cdef )?class\s+{name}\b.*\n", source, re.M)
    assert start, name
    end = re.compile(r"^\S", re.M).search(source, start.end())
    return source[start.end():end.start() if end else len(source)]


def test_every_file_and_symbol_the_tour_names_exists():
    with open(os.path.join(ROOT, "docs", "tour.md")) as f:
        pointers = _POINTER.findall(f.read())
    assert len(pointers) > 40
    for path, symbol in pointers:
        full = os.path.join(ROOT, path)
        assert os.path.exists(full), path
        if symbol:
            with open(full) as f:
                source = f.read()
            owner, _, member = symbol.rpartition(".")
            if owner:
                assert _defines(_class_body(source, owner), member), f"{path}::{symbol}"
            else:
                assert _defines(source, symbol), f"{path}::{symbol}"


def test_tour_pointer_check_catches_a_missing_symbol():
    assert _defines("cpdef tuple view_strides(a):\n", "view_strides")
    assert _defines("cdef class OpNode(Node):\n", "OpNode")
    assert _defines("cpdef long long storage_size_for(s):\n", "storage_size_for")
    assert not _defines("def view_stride(a):\n", "view_strides")
