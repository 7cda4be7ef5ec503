"""Side-by-side timing of microtensor._C.kernels against NumPy, reported as ratios.

Each round times every case once, in rotating order, so both sides of a ratio see the same
machine phase; the ratio printed is the median over rounds of the same-round ratios.
Run: PYTHONPATH=src python benchmarks/bench_kernels.py [--rounds N]
"""
import argparse
import statistics
import timeit

import numpy as np

from microtensor._C import kernels


def seconds_per_call(fn, target_seconds):
    number = 1
    while True:
        elapsed = timeit.timeit(fn, number=number)
        if elapsed >= target_seconds or number >= 1 << 20:
            return elapsed / number
        number *= 2


def run_table(title, cases, comparisons, rounds, target_seconds):
    """cases: name -> callable; comparisons: (label, numerator case, denominator case)."""
    names = list(cases)
    samples = {name: [] for name in names}
    for round_index in range(rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            samples[name].append(seconds_per_call(cases[name], target_seconds))
    print(f"\n{title}")
    for name in names:
        print(f"  {name:<34} median {statistics.median(samples[name]) * 1e3:9.4f} ms")
    for label, numerator, denominator in comparisons:
        ratios = [n / d for n, d in zip(samples[numerator], samples[denominator])]
        print(f"  {label:<52} {statistics.median(ratios):6.2f}x "
              f"(range {min(ratios):.2f}-{max(ratios):.2f})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--size", type=int, default=4096)
    args = parser.parse_args()
    n = args.size
    rng = np.random.default_rng(0)
    a = rng.random((n, n), dtype=np.float32)
    out = np.empty_like(a)
    out64 = np.empty(a.shape, np.float64)

    run_table(
        f"copy, {n}x{n} float32",
        {
            "numpy a.T.copy()": lambda: a.T.copy(),
            "numpy copyto(out, a) (memcpy)": lambda: np.copyto(out, a),
            "numpy copyto(out64, a) (cast)": lambda: np.copyto(out64, a),
            "kernels.copy_(out, a.T)": lambda: kernels.copy_(out, a.T),
            "kernels.copy_(out, a)": lambda: kernels.copy_(out, a),
            "kernels.copy_(out64, a)": lambda: kernels.copy_(out64, a),
        },
        [
            ("transposed copy_ / numpy a.T.copy()  (target <= 0.5)",
             "kernels.copy_(out, a.T)", "numpy a.T.copy()"),
            ("transposed copy_ / numpy memcpy      (target <= 4)",
             "kernels.copy_(out, a.T)", "numpy copyto(out, a) (memcpy)"),
            ("contiguous copy_ / numpy memcpy",
             "kernels.copy_(out, a)", "numpy copyto(out, a) (memcpy)"),
            ("float32->float64 copy_ / numpy copyto",
             "kernels.copy_(out64, a)", "numpy copyto(out64, a) (cast)"),
        ],
        args.rounds, target_seconds=0.1)

    strided = a[:, ::2]
    run_table(
        f"sum of all elements, {n}x{n} float32",
        {
            "numpy a.sum()": lambda: a.sum(),
            "kernels.sum_all(a)": lambda: kernels.sum_all(a),
            "numpy a[:, ::2].sum()": lambda: strided.sum(),
            "kernels.sum_all(a[:, ::2])": lambda: kernels.sum_all(strided),
        },
        [
            ("sum_all / numpy sum, contiguous        (target <= 0.8)",
             "kernels.sum_all(a)", "numpy a.sum()"),
            ("sum_all / numpy sum, every other column",
             "kernels.sum_all(a[:, ::2])", "numpy a[:, ::2].sum()"),
        ],
        args.rounds, target_seconds=0.1)

    run_table(
        f"fill, {n}x{n} float32",
        {"numpy out.fill(1.5)": lambda: out.fill(1.5),
         "kernels.fill_(out, 1.5)": lambda: kernels.fill_(out, 1.5)},
        [("fill_ / numpy fill", "kernels.fill_(out, 1.5)", "numpy out.fill(1.5)")],
        args.rounds, target_seconds=0.1)

    x = rng.random(4, dtype=np.float32)
    y = rng.random(4, dtype=np.float32)
    z = np.empty(4, np.float32)
    run_table(
        "tiny contiguous add, (4,) float32 (Python entry point, not the cdef slot path)",
        {"numpy np.add(x, y, out=z)": lambda: np.add(x, y, out=z),
         "kernels.binary_contiguous_('add', ...)":
             lambda: kernels.binary_contiguous_("add", z, x, y)},
        [("binary_contiguous_ / numpy add",
          "kernels.binary_contiguous_('add', ...)", "numpy np.add(x, y, out=z)")],
        args.rounds, target_seconds=0.02)


if __name__ == "__main__":
    main()
