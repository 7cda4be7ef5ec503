"""Where the time goes: per-call timings, Python call counts and cProfile tables for the
benchmarks whose cost is fixed overhead rather than arithmetic (see docs/performance.md,
"Where the time goes").  Single-threaded; every timing is the best of several repeats.
Run: PYTHONPATH=src python benchmarks/profile_overhead.py [--only tiny|frames|psg|jac|mlp]
"""
import argparse
import cProfile
import os
import pstats
import sys
import time
import timeit

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import microtensor as mt  # noqa: E402
from microtensor.func import grad, vmap  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_func  # noqa: E402


def best_seconds(fn, repeat=7, number=None, timer=time.perf_counter):
    if number is None:
        number = 1
        while timeit.timeit(fn, number=number, timer=timer) < 0.05:
            number *= 2
    return min(timeit.repeat(fn, repeat=repeat, number=number, timer=timer)) / number


def python_calls(fn):
    """Python function calls (frames) made by one call of fn, after a warm-up."""
    fn()
    count = 0

    def tracer(frame, event, arg):
        nonlocal count
        if event == "call":
            count += 1
    sys.setprofile(tracer)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return count - 1          # fn's own frame


def profile(title, fn, calls, top=12):
    fn()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    prof.disable()
    print(f"\n{title}: {calls} calls, top {top} by tottime")
    stats = pstats.Stats(prof)
    stats.sort_stats("tottime").print_stats(top)
    # the same time summed per source file: Cython code shows up in its Python caller
    per_file = {}
    for (filename, _, _), (_, _, tottime, _, _) in stats.stats.items():
        key = (filename.split("microtensor/")[-1] if "microtensor/" in filename
               else os.path.basename(filename))
        per_file[key] = per_file.get(key, 0.0) + tottime
    print("tottime share per file:")
    for key, t in sorted(per_file.items(), key=lambda kv: -kv[1])[:top]:
        print(f"  {t / stats.total_tt:6.1%}  {key}")


def tiny():
    x, y = mt.rand(4), mt.rand(4)
    m = mt.rand(8, 8)
    xn, yn, mn = np.random.rand(4).astype(np.float32), np.random.rand(4).astype(np.float32), \
        np.random.rand(8, 8).astype(np.float32)

    cases = [("x + y", lambda: x + y, lambda: xn + yn),
             ("x[1:3]", lambda: x[1:3], lambda: xn[1:3]),
             ("x.reshape(2, 2)", lambda: x.reshape(2, 2), lambda: xn.reshape(2, 2)),
             ("(8,8).t()", lambda: m.t(), lambda: mn.T)]
    print(f"{'case':<18}{'mt ns':>8}{'numpy ns':>10}{'ratio':>7}{'py calls':>9}")
    for name, f_mt, f_np in cases:
        a, b = best_seconds(f_mt), best_seconds(f_np)
        print(f"{name:<18}{a * 1e9:8.0f}{b * 1e9:10.0f}{a / b:7.2f}{python_calls(f_mt):9d}")
    # the call itself, and NumPy's cheapest view, for scale
    for name, fn in [("lambda: None", lambda: None), ("numpy xn[1:3]", lambda: xn[1:3])]:
        print(f"{name:<18}{best_seconds(fn) * 1e9:8.0f} ns")


def frames():
    w = mt.rand(8)
    xs = mt.rand(8, 8)
    f = vmap(grad(lambda w, x: (w * x).sum()), in_dims=(None, 0))
    print("vmap(grad(lambda w, x: (w * x).sum())), in_dims=(None, 0), w (8,), x (8, 8):",
          python_calls(lambda: f(w, xs)), "Python calls per call")
    f2 = vmap(grad(lambda w, x: (w * x * x).sum()), in_dims=(None, 0))
    print("the same with a second multiply, (w * x * x).sum():",
          python_calls(lambda: f2(w, xs)), "Python calls per call")
    print("vmap(grad) time:", f"{best_seconds(lambda: f(w, xs)) * 1e6:.1f} us")


def psg():
    cases = bench_func.per_sample_cases(8, with_loop=False)
    f = cases["microtensor vmap(grad) B=8"]
    t_mt = best_seconds(f)
    print(f"per-sample grads B=8: {python_calls(f)} Python calls per call, "
          f"{t_mt * 1e6:.0f} us", end="")
    tf = cases.get("torch.func vmap(grad) B=8")
    if tf is not None:
        t_t = best_seconds(tf)
        print(f", torch.func {t_t * 1e6:.0f} us, ratio {t_mt / t_t:.2f}")
    else:
        print()
    profile("per-sample grads, MLP 32-128-10, B=8", f, 300)


def jac():
    jac_cases, hess_cases, _ = bench_func.jacobian_cases()
    for cases in (jac_cases, hess_cases):
        (name, f), *rest = cases.items()
        t_mt = best_seconds(f)
        line = f"{name}: {python_calls(f)} Python calls, {t_mt * 1e6:.0f} us"
        if rest:
            t_t = best_seconds(rest[0][1])
            line += f", torch.func {t_t * 1e6:.0f} us, ratio {t_mt / t_t:.2f}"
        print(line)
        profile(name, f, 200)


def _mlp_steps(sizes, torch):
    """One training step (``zero_grad``, forward, ``cross_entropy``, ``backward``) of an
    MLP in-hidden-out at a batch, in microtensor and (when importable) PyTorch."""
    mt.manual_seed(0)
    step = _mlp_step(mt, sizes)
    return step, (_mlp_step(torch, sizes) if torch is not None else None)


def _mlp_step(lib, sizes):
    batch, n_in, hidden, n_out = sizes
    model = lib.nn.Sequential(lib.nn.Linear(n_in, hidden), lib.nn.Tanh(),
                              lib.nn.Linear(hidden, n_out))
    data, target = lib.randn(batch, n_in), lib.randint(0, n_out, (batch,))

    def step():
        model.zero_grad()
        lib.nn.functional.cross_entropy(model(data), target).backward()
    return step


def _numpy_step(batch, n_in, hidden, n_out):
    """The same step written by hand in NumPy, with no autograd, no op dispatch and no
    tensors: the two products in the faster order ``linear`` picks, the bias additions,
    ``tanh``, a log-softmax cross-entropy and the five gradients.  What any runtime that
    runs each op as a NumPy call needs at least."""
    r = np.random.default_rng(0)
    x = r.standard_normal((batch, n_in)).astype(np.float32)
    w1 = (r.standard_normal((hidden, n_in)) / np.sqrt(n_in)).astype(np.float32)
    w2 = (r.standard_normal((n_out, hidden)) / np.sqrt(hidden)).astype(np.float32)
    b1, b2 = np.zeros(hidden, np.float32), np.zeros(n_out, np.float32)
    rows, target = np.arange(batch), r.integers(0, n_out, batch)

    def step():
        h = np.dot(w1, x.T).T.copy()
        h += b1
        t = np.tanh(h)
        z = np.dot(t, w2.T)
        z += b2
        shifted = z - z.max(1, keepdims=True)
        e = np.exp(shifted)
        total = e.sum(1, keepdims=True)
        loss = (np.log(total)[:, 0] - shifted[rows, target]).mean()
        g = e / total
        g[rows, target] -= 1
        g /= batch
        grads = [np.dot(g.T, t), g.sum(0)]
        g1 = np.dot(g, w2)
        g1 *= 1 - t * t
        grads += [np.dot(g1.T, x), g1.sum(0)]
        return loss, grads
    return step


def mlp():
    try:
        import torch
        torch.set_num_threads(1)
    except ImportError:
        torch = None
    # CPU time of this thread: on a loaded machine, time spent descheduled is left out
    cpu = time.thread_time
    step, tstep = _mlp_steps((64, 256, 256, 10), torch)
    # rounds alternate the two libraries; the ratio is the median of same-round ratios
    rounds = [(best_seconds(step, timer=cpu), best_seconds(tstep, timer=cpu) if tstep else 0)
              for _ in range(5)]
    t_step = min(r[0] for r in rounds)
    # the five matrix products of the step (forward x W1^T, h W2^T; backward dW2 = g^T h,
    # dh = g W2, dW1 = g1^T x; the input needs no gradient), in NumPy (same BLAS)
    r = np.random.default_rng(0)
    x, w1 = r.random((64, 256), np.float32), r.random((256, 256), np.float32)
    h, w2 = r.random((64, 256), np.float32), r.random((10, 256), np.float32)
    g, g1 = r.random((64, 10), np.float32), r.random((64, 256), np.float32)
    arrays = (x, w1, h, w2, g, g1)

    def products(x, w1, h, w2, g, g1):
        return [lambda: x @ w1.T, lambda: h @ w2.T, lambda: g.T @ h, lambda: g @ w2,
                lambda: g1.T @ x]
    t_blas = sum(best_seconds(p, timer=cpu) for p in products(*arrays))
    t_tanh = best_seconds(lambda: np.tanh(x), timer=cpu)
    print(f"MLP step (CPU time): {t_step * 1e6:.0f} us; the 5 products in NumPy "
          f"{t_blas * 1e6:.0f} us ({t_blas / t_step:.0%}); one tanh (64,256) "
          f"{t_tanh * 1e6:.0f} us; {python_calls(step)} Python calls")
    t_numpy = best_seconds(_numpy_step(64, 256, 256, 10), timer=cpu)
    print(f"the step by hand in NumPy (no autograd): {t_numpy * 1e6:.0f} us")
    tiny, ttiny = _mlp_steps((2, 4, 4, 3), torch)
    t_tiny = best_seconds(tiny, timer=cpu)
    if torch is not None:
        t_t = min(r[1] for r in rounds)
        ratios = sorted(a / b for a, b in rounds)
        t_tblas = sum(best_seconds(p, timer=cpu)
                      for p in products(*(torch.from_numpy(a) for a in arrays)))
        t_ttiny = best_seconds(ttiny, timer=cpu)
        print(f"PyTorch step {t_t * 1e6:.0f} us, ratio {ratios[2]:.2f} (rounds "
              f"{ratios[0]:.2f}-{ratios[-1]:.2f}); its 5 products "
              f"{t_tblas * 1e6:.0f} us; the NumPy products alone would be "
              f"{t_blas / t_t:.2f}x PyTorch's step, the NumPy step {t_numpy / t_t:.2f}x")
        print(f"fixed cost (the same step, MLP 4-4-3 at batch 2): {t_tiny * 1e6:.0f} us, "
              f"PyTorch {t_ttiny * 1e6:.0f} us")
    else:
        print(f"fixed cost (the same step, MLP 4-4-3 at batch 2): {t_tiny * 1e6:.0f} us")
    profile("MLP 256-256-10 step, batch 64", step, 300)


def main():
    parts = {"tiny": tiny, "frames": frames, "psg": psg, "jac": jac, "mlp": mlp}
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=parts)
    args = parser.parse_args()
    for name, fn in parts.items():
        if args.only in (None, name):
            print(f"\n===== {name}")
            fn()


if __name__ == "__main__":
    main()
