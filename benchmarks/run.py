"""Side-by-side benchmarks: microtensor against NumPy and PyTorch, as ratios.

    python benchmarks/run.py            # full run (several minutes)
    python benchmarks/run.py --quick    # under a minute
    python benchmarks/run.py --only tiny,large

The machine is noisy, so every case of a section is timed in the same rounds (each round
runs one repeat of every case, in rotating order) and each ratio is the median over
rounds of that round's ratio.  Absolute times are printed for orientation only.
Everything runs single-threaded (BLAS and PyTorch pinned to one thread).
"""
import argparse
import glob
import os
import platform
import statistics
import sys
import timeit

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import microtensor as mt  # noqa: E402

try:
    import torch
    torch.set_num_threads(1)
except ImportError:   # the PyTorch columns are then left out
    torch = None

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sections  # noqa: E402


def calibrate(fn, target):
    """How many calls of ``fn`` take about ``target`` seconds."""
    number = 1
    while True:
        t = timeit.timeit(fn, number=number)
        if t >= target / 4 or number > 1e7:
            return max(1, int(number * target / max(t, 1e-9)))
        number *= 4


def measure(cases, rounds, target):
    """Per case: list of seconds per call, one entry per round (rotating order)."""
    numbers = {name: calibrate(fn, target) for name, fn in cases.items()}
    times = {name: [] for name in cases}
    names = list(cases)
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            times[name].append(timeit.timeit(cases[name], number=numbers[name]) / numbers[name])
    return times


def ratio(times, a, b):
    return statistics.median(x / y for x, y in zip(times[a], times[b]))


def fmt_time(seconds):
    if seconds < 1e-6:
        return f"{seconds * 1e9:.0f} ns"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.2f} us"
    return f"{seconds * 1e3:.2f} ms"


def run_section(section, quick):
    rounds = section.rounds_quick if quick else section.rounds
    target = section.target_quick if quick else section.target
    rows = []
    print(f"\n## {section.title}\n")
    print("| case | microtensor | " + " | ".join(section.references(torch)) + " | " +
          " | ".join(f"mt / {ref}" for ref in section.references(torch)) + " |")
    print("|---" * (2 + 2 * len(section.references(torch))) + "|")
    for case in section.cases(mt, np, torch):
        times = measure(case.callables(), rounds, target)
        mids = {k: statistics.median(v) for k, v in times.items()}
        refs = [r for r in section.references(torch) if r in times]
        cells = [case.name, fmt_time(mids["microtensor"])]
        cells += [fmt_time(mids[r]) if r in mids else "-" for r in section.references(torch)]
        ratios = {r: ratio(times, "microtensor", r) for r in refs}
        cells += [f"{ratios[r]:.2f}" if r in ratios else "-" for r in section.references(torch)]
        print("| " + " | ".join(cells) + " |", flush=True)
        rows.append((case, ratios, times))
    section.summary(rows)
    return rows


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cache_sizes():
    """The first CPU's caches, as Linux reports them ("L1d 32K, L2 1024K, ...")."""
    found = []
    for index in sorted(glob.glob("/sys/devices/system/cpu/cpu0/cache/index*")):
        try:
            level, kind, size = (open(os.path.join(index, name)).read().strip()
                                 for name in ("level", "type", "size"))
        except OSError:
            continue
        if kind != "Instruction":
            found.append(f"L{level}{'d' if kind == 'Data' else ''} {size}")
    return ", ".join(found) or "unknown"


def _blas():
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        return f"{blas.get('name', '?')} {blas.get('version', '')}".strip()
    except (KeyError, TypeError):
        return "unknown"


def machine_description():
    """What a figure was measured on: the ratios depend on the CPU, its caches and BLAS."""
    return (f"CPU: {_cpu_model()}, {os.cpu_count()} logical CPUs; caches: {_cache_sizes()}; "
            f"NumPy's BLAS: {_blas()}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds, shorter repeats")
    keys = [s.key for s in sections.ALL] + ["func"]
    parser.add_argument("--only", default="", help="comma-separated sections: " + ",".join(keys))
    args = parser.parse_args(argv)
    chosen = args.only.split(",") if args.only else keys
    print(f"microtensor {mt.__version__}, numpy {np.__version__}, "
          f"torch {torch.__version__ if torch else 'not installed'}; one thread")
    print(machine_description())
    for section in sections.ALL:
        if section.key in chosen:
            run_section(section, args.quick)
    if "func" in chosen:
        import bench_func
        print("\n## Function transforms (per-sample gradients, Jacobians, Hessians, memory)\n")
        bench_func.main(["--quick"] if args.quick else [])


if __name__ == "__main__":
    main()
