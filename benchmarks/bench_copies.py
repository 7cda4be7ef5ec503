"""Transposing copies against PyTorch and memcpy, on whatever machine runs it.

Each case copies a permuted view into a contiguous tensor (``a.t().clone(memory_format=
contiguous_format)`` and a 4-d ``permute``), for several sizes and dtypes.  Rounds time
every side once, in turn, and keep each side's best time: the machine is shared and
noisy, and the best of many runs is the copy's own cost.  memcpy is ``np.copy`` of the
result (a contiguous copy of the same bytes).
Run: PYTHONPATH=src python benchmarks/bench_copies.py [--rounds N]
"""
import argparse
import time

import numpy as np
import torch

import microtensor as mt
from microtensor._C import kernels
from run import machine_description


def cases():
    """(name, NumPy array to permute, permutation, dtype the copy casts to)."""
    rng = np.random.default_rng(0)
    for n in (1024, 2048, 4000, 4096, 8192):
        yield f"{n}² float32", rng.random((n, n), np.float32), (1, 0)
    yield "4096² float64", rng.random((4096, 4096)), (1, 0)
    yield "4096² int64", rng.integers(0, 9, (4096, 4096)), (1, 0)
    yield "64⁴ float32 permute(0,3,1,2)", rng.random((64,) * 4, np.float32), (0, 3, 1, 2)
    yield "32x128x32x128 float64 permute(2,1,3,0)", rng.random((32, 128, 32, 128)), (2, 1, 3, 0)


def best_of(fn, repeats):
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print(machine_description())
    print(f"copy geometry: {kernels.copy_geometry()}\n")
    print("| case | microtensor | PyTorch | memcpy | mt / PyTorch | mt / memcpy |")
    print("|---|---|---|---|---|---|")
    for name, array, perm in cases():
        a, at = mt.from_numpy(array), torch.from_numpy(array)
        expected = np.ascontiguousarray(array.transpose(perm))
        sides = {
            "mt": lambda: a.permute(*perm).clone(memory_format=mt.contiguous_format),
            "torch": lambda: at.permute(*perm).clone(memory_format=torch.contiguous_format),
            "memcpy": lambda: np.copy(expected),
        }
        assert np.array_equal(sides["mt"]().numpy(), expected)
        repeats = max(3, int(2e7 / array.size))
        best = dict.fromkeys(sides, float("inf"))
        for _ in range(args.rounds):
            for side, fn in sides.items():
                best[side] = min(best[side], best_of(fn, repeats))
        print(f"| {name} | {best['mt'] * 1e3:.2f} ms | {best['torch'] * 1e3:.2f} ms | "
              f"{best['memcpy'] * 1e3:.2f} ms | {best['mt'] / best['torch']:.2f} | "
              f"{best['mt'] / best['memcpy']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
