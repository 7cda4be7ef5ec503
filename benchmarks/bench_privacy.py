"""Per-sample clipping (``microtensor.privacy.clipped_grad_sum``): ghost norms against the
materialised per-sample gradients of ``method="vmap"``, in one run.

* MLP 784-512-512-10 (float32) at batch 256 (targets: ghost's peak extra memory <= 0.1x
  vmap's, its time <= 1.0x), 1024 and 4096;
* the per-sample-gradients tutorial's CNN (conv 1->32 k3, relu, conv 32->64 k3, relu,
  max_pool 2, linear 9216->128, relu, linear 128->10; 28x28 inputs) at batch 64.

Peak extra memory is what tracemalloc sees (NumPy reports its allocations to it) above the
memory held before the call.  Times: each round times every case once, in rotating order;
a ratio is the median over rounds of same-round ratios.  Single-threaded.
Run: PYTHONPATH=src python benchmarks/bench_privacy.py [--rounds N] [--quick]
"""
import argparse
import gc
import os
import statistics
import time
import tracemalloc

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import microtensor as mt  # noqa: E402
from microtensor.privacy import clipped_grad_sum  # noqa: E402

F = mt.nn.functional
# vmap's per-sample gradients of the MLP at batch 4096 take 4096 x 669,706 x 4 bytes =
# 10.2 GiB (its peak is about their size): more than this shared 23 GiB machine should
# give one benchmark
VMAP_MEMORY_LIMIT = 6 << 30


def mlp():
    mt.manual_seed(0)
    sizes = [(512, 784), (512, 512), (10, 512)]
    params = {}
    for i, (out, inp) in enumerate(sizes):
        params[f"w{i}"] = mt.randn(out, inp) * (1 / inp) ** 0.5
        params[f"b{i}"] = mt.zeros(out)

    def loss(p, x, y):
        h = F.relu(F.linear(x, p["w0"], p["b0"]))
        h = F.relu(F.linear(h, p["w1"], p["b1"]))
        return F.cross_entropy(F.linear(h, p["w2"], p["b2"]).unsqueeze(0), y.unsqueeze(0))

    def batch(size):
        return mt.randn(size, 784), mt.randint(0, 10, (size,))
    return loss, params, batch


def tutorial_cnn():
    mt.manual_seed(0)
    shapes = {"c1": (32, 1, 3, 3), "c1b": (32,), "c2": (64, 32, 3, 3), "c2b": (64,),
              "fc1": (128, 9216), "fc1b": (128,), "fc2": (10, 128), "fc2b": (10,)}
    params = {k: mt.randn(*s) * 0.05 for k, s in shapes.items()}

    def loss(p, x, y):
        h = F.relu(F.conv2d(x.unsqueeze(0), p["c1"], p["c1b"]))
        h = F.max_pool2d(F.relu(F.conv2d(h, p["c2"], p["c2b"])), 2).flatten(1)
        h = F.relu(F.linear(h, p["fc1"], p["fc1b"]))
        return F.nll_loss(F.linear(h, p["fc2"], p["fc2b"]).log_softmax(-1), y.unsqueeze(0))

    def batch(size):
        return mt.randn(size, 1, 28, 28), mt.randint(0, 10, (size,))
    return loss, params, batch


def peak_extra_memory(fn):
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    fn()
    peak = tracemalloc.get_traced_memory()[1] - before
    tracemalloc.stop()
    return peak


def per_sample_bytes(params, size):
    return size * sum(p.numel() * p.element_size() for p in params.values())


def compare(title, model, size, rounds, time_vmap=True):
    loss, params, make_batch = model
    inputs = make_batch(size)
    calls = {method: (lambda m=method: clipped_grad_sum(loss, params, *inputs,
                                                        max_grad_norm=1.0, method=m))
             for method in (("ghost", "vmap") if time_vmap else ("ghost",))}
    gradients = per_sample_bytes(params, size)
    print(f"\n{title}, batch {size} (per-sample gradients: {gradients / 2**20:.0f} MiB)")
    memory = {m: peak_extra_memory(fn) for m, fn in calls.items()}
    times = {m: [] for m in calls}
    names = list(calls)
    for r in range(rounds):
        for m in names[r % len(names):] + names[:r % len(names)]:
            start = time.perf_counter()
            calls[m]()
            times[m].append(time.perf_counter() - start)
    for m in names:
        print(f"  {m:<6} median {statistics.median(times[m]) * 1e3:9.1f} ms, "
              f"peak extra memory {memory[m] / 2**20:8.1f} MiB")
    if "vmap" not in calls:
        print("  vmap   not run: its per-sample gradients alone would exceed "
              f"{VMAP_MEMORY_LIMIT >> 30} GiB")
        return None
    ratios = [g / v for g, v in zip(times["ghost"], times["vmap"])]
    summary = (memory["ghost"] / memory["vmap"], statistics.median(ratios))
    print(f"  ghost / vmap: memory {summary[0]:.3f}x, time {summary[1]:.2f}x "
          f"(range {min(ratios):.2f}-{max(ratios):.2f})")
    return summary


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="2 rounds, batch 256 and CNN")
    args = parser.parse_args(argv)
    rounds = 2 if args.quick else args.rounds
    net = mlp()
    results = {}
    for size in ((256,) if args.quick else (256, 1024, 4096)):
        fits = per_sample_bytes(net[1], size) < VMAP_MEMORY_LIMIT
        results[size] = compare("MLP 784-512-512-10", net, size,
                                rounds if size == 256 else min(rounds, 3), fits)
    cnn = compare("Tutorial CNN", tutorial_cnn(), 64, rounds)
    memory, speed = results[256]
    print(f"\nSummary: MLP batch 256 ghost / vmap memory {memory:.3f}x (target <= 0.1), "
          f"time {speed:.2f}x (target <= 1.0); CNN batch 64 memory {cnn[0]:.3f}x, "
          f"time {cnn[1]:.2f}x")


if __name__ == "__main__":
    main()
