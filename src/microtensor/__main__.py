"""The command line: ``python -m microtensor demo | bench | explain``."""
import argparse
import sys


def demo(args):
    from microtensor import _demo
    return _demo.main(args.rest)


def bench(args):
    import os
    import runpy
    path = os.path.join(os.getcwd(), "benchmarks", "run.py")
    if not os.path.exists(path):
        print("benchmarks/run.py is part of the source tree: run this from a checkout of "
              "microtensor.", file=sys.stderr)
        return 2
    sys.argv = [path] + args.rest
    runpy.run_path(path, run_name="__main__")
    return 0


def explain(args):
    parser = argparse.ArgumentParser(
        prog="python -m microtensor explain",
        description="How an op is declared, what a view reaches, what autograd recorded. "
                    "EXPR: Python with `mt` (microtensor) in scope; statements may come "
                    "before the final expression, separated by ';'.")
    parser.add_argument("op", nargs="?", help="an op's name: its kernel, derivative, "
                        "batching rule and C fast path, with file:line")
    parser.add_argument("--layout", metavar="EXPR", help="sizes, strides, offset, "
                        "contiguity and a picture of the storage the tensor EXPR reaches")
    parser.add_argument("--svg", metavar="FILE", help="with --layout: also write the picture "
                        "as SVG")
    parser.add_argument("--graph", metavar="EXPR", help="the autograd graph behind the "
                        "tensor EXPR, as a tree")
    parser.add_argument("--dot", metavar="FILE", help="with --graph: also write it as "
                        "Graphviz DOT (and render FILE.svg, FILE.png when `dot` is installed)")
    options = parser.parse_args(args.rest)
    if options.svg and not options.layout or options.dot and not options.graph:
        parser.error("--svg goes with --layout, --dot with --graph")
    if not (options.op or options.layout or options.graph):
        parser.print_usage()
        print("e.g.: explain mul | explain --layout 'mt.arange(12.).reshape(3, 4).t()[1:]' | "
              "explain --graph 'x = mt.ones(3, requires_grad=True); (x * x).sum()'")
        return 2
    from microtensor import explain as explaining
    if options.op:
        try:
            print(explaining.op(options.op))
        except KeyError as exc:
            print(exc.args[0], file=sys.stderr)
            return 2
    if options.layout:
        tensor = _tensor(explaining, options.layout)
        if tensor is None:
            return 2
        print(explaining.layout(tensor))
        if options.svg:
            with open(options.svg, "w") as f:
                f.write(explaining.layout_svg(tensor))
    if options.graph:
        from microtensor.autograd import graph
        tensor = _tensor(explaining, options.graph)
        if tensor is None:
            return 2
        if tensor.grad_fn is None and not tensor.requires_grad:
            print(f"{options.graph!r} has no autograd graph: nothing it was computed from "
                  "requires grad (e.g. mt.ones(3, requires_grad=True))", file=sys.stderr)
            return 2
        print(graph.to_text(tensor))
        if options.dot:
            with open(options.dot, "w") as f:
                f.write(graph.to_dot(tensor))
            _render(options.dot)
    return 0


def _tensor(explaining, expr):
    """The tensor ``expr`` evaluates to; None (having said why) for anything else."""
    from microtensor._C.tensor import TensorBase
    value = explaining.evaluate(expr)
    if not isinstance(value, TensorBase):
        print(f"{expr!r} is a {type(value).__name__}, not a tensor", file=sys.stderr)
        return None
    return value


def _render(path):
    """``dot -Tsvg`` and ``-Tpng`` of the DOT file ``path``, when Graphviz is installed."""
    import shutil
    import subprocess
    if shutil.which("dot") is None:
        print(f"wrote {path} (Graphviz's `dot` is not installed: not rendered)")
        return
    for fmt in ("svg", "png"):
        subprocess.run(["dot", f"-T{fmt}", path, "-o", f"{path}.{fmt}"], check=True)
    print(f"wrote {path}, {path}.svg and {path}.png")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m microtensor",
                                     description="microtensor's command line")
    parser.add_argument("command", choices=["demo", "bench", "explain"],
                        help="demo: the main example; bench: benchmarks/run.py; "
                             "explain: how an op is declared (explain OP), a "
                             "tensor's layout (--layout EXPR), an autograd graph "
                             "(--graph EXPR); explain -h for more")
    parser.add_argument("rest", nargs=argparse.REMAINDER, help="arguments for the command")
    args = parser.parse_args(argv)
    return {"demo": demo, "bench": bench, "explain": explain}[args.command](args) or 0


if __name__ == "__main__":
    sys.exit(main())
