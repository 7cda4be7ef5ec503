"""One-input pointwise ops on tiny tensors: ``x.tanh()`` and friends against NumPy's
ufunc, against the dispatcher's Python path (the same call with ``out=None``, which the
C path leaves to the op's kernel) and against PyTorch, recorded and unrecorded.

Each round times every case once; a ratio is the median over rounds of same-round
ratios.  Single-threaded.
Run: OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/bench_unary.py [--rounds N]
"""
import argparse
import os
import statistics
import timeit

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import microtensor as mt  # noqa: E402

try:
    import torch
    torch.set_num_threads(1)
except ImportError:   # the torch column is left out
    torch = None


def seconds(fn, number=20000):
    return min(timeit.repeat(fn, number=number, repeat=3)) / number


def cases(shape):
    a = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    x = mt.from_numpy(a.copy())
    w = mt.from_numpy(a.copy()).requires_grad_()
    rows = {"np.tanh(a)": lambda: np.tanh(a),
            "x.tanh()": lambda: x.tanh(),
            "x.tanh(out=None) [Python path]": lambda: x.tanh(out=None),
            "x.relu()": lambda: x.relu(),
            "x.relu(out=None) [Python path]": lambda: x.relu(out=None),
            "w.tanh() recorded": lambda: w.tanh(),
            "w.tanh(out=None) recorded [Python path]": lambda: w.tanh(out=None)}
    if torch is not None:
        t = torch.from_numpy(a.copy())
        tw = torch.from_numpy(a.copy()).requires_grad_()
        rows["torch: t.tanh()"] = lambda: t.tanh()
        rows["torch: t.tanh() recorded"] = lambda: tw.tanh()
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    rounds = parser.parse_args().rounds
    for shape in ((4,), (8, 8)):
        table = cases(shape)
        samples = {name: [] for name in table}
        names = list(table)
        for r in range(rounds):
            shift = r % len(names)
            for name in names[shift:] + names[:shift]:
                samples[name].append(seconds(table[name]))
        print(f"shape {shape}, median of {rounds} rounds; ratios of same-round times")
        for name in names:
            s = samples[name]
            vs_numpy = statistics.median(v / n for v, n in zip(s, samples["np.tanh(a)"]))
            print(f"  {name:42s} {statistics.median(s) * 1e9:7.0f} ns  {vs_numpy:5.2f}x numpy")
        for fast, slow in (("x.tanh()", "x.tanh(out=None) [Python path]"),
                           ("x.relu()", "x.relu(out=None) [Python path]"),
                           ("w.tanh() recorded", "w.tanh(out=None) recorded [Python path]")):
            ratio = statistics.median(f / s for f, s in zip(samples[fast], samples[slow]))
            print(f"  {fast} / Python path: {ratio:.2f}x")


if __name__ == "__main__":
    main()
