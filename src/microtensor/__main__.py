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
    import microtensor as mt
    op = mt.ops.REGISTRY.get(args.rest[0] if args.rest else "")
    if op is None:
        print("usage: python -m microtensor explain OP   (e.g. mul, transpose, sum)")
        print("ops: " + ", ".join(sorted(mt.ops.REGISTRY)))
        return 2
    import inspect
    print(f"op {op.name}: kind={op.kind}, family={op.family}, inputs={op.inputs}")
    print("\nkernel:\n" + inspect.getsource(op.kernel))
    derivative = op.derivative or (op.inplace_of.derivative if op.inplace_of else None)
    if derivative is not None:
        print("derivative:\n" + inspect.getsource(derivative))
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m microtensor",
                                     description="microtensor's command line")
    parser.add_argument("command", choices=["demo", "bench", "explain"],
                        help="demo: the main example; bench: benchmarks/run.py; "
                             "explain OP: show how an op is declared")
    parser.add_argument("rest", nargs=argparse.REMAINDER, help="arguments for the command")
    args = parser.parse_args(argv)
    return {"demo": demo, "bench": bench, "explain": explain}[args.command](args) or 0


if __name__ == "__main__":
    sys.exit(main())
