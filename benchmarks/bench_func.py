"""Function transforms side by side with ``torch.func``, reported as ratios.

* per-sample gradients of an MLP 32-128-10 (tanh, cross-entropy, float32) by
  ``vmap(grad)`` at batch 8, 512 and 2048, against ``torch.func`` and (at 512) against
  microtensor's own loop of one ``autograd.grad`` per sample;
* ``jacrev`` of f: R^128 -> R^128 and ``hessian`` of g: R^64 -> R;
* ``autograd.grad(..., is_grads_batched=True)`` with a 128-row identity;
* peak extra memory (tracemalloc) of per-sample gradients at batch 4096 against the size
  of the gradients plus the activations.

Each round times every case of a table once, in rotating order; a ratio is the median
over rounds of same-round ratios.  Single-threaded.
Run: PYTHONPATH=src python benchmarks/bench_func.py [--rounds N] [--quick]
"""
import argparse
import gc
import os
import statistics
import timeit
import tracemalloc

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import microtensor as mt  # noqa: E402
from microtensor.func import functional_call, grad, hessian, jacrev, vmap  # noqa: E402

try:
    import torch
    import torch.func as tfunc
    torch.set_num_threads(1)
except ImportError:   # the torch columns are left out
    torch = tfunc = None

IN, HIDDEN, OUT = 32, 128, 10


def seconds_per_call(fn, target):
    number = 1
    while True:
        elapsed = timeit.timeit(fn, number=number)
        if elapsed >= target or number >= 1 << 16:
            return elapsed / number
        number *= 2


def run_table(title, cases, comparisons, rounds, target):
    """cases: name -> callable; comparisons: (label, numerator, denominator)."""
    cases = {k: v for k, v in cases.items() if v is not None}
    names = list(cases)
    for fn in cases.values():
        fn()                                   # warm up
    samples = {name: [] for name in names}
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            samples[name].append(seconds_per_call(cases[name], target))
    print(f"\n{title}")
    for name in names:
        print(f"  {name:<40} median {statistics.median(samples[name]) * 1e3:9.3f} ms")
    results = {}
    for label, a, b in comparisons:
        if a in samples and b in samples:
            ratios = [x / y for x, y in zip(samples[a], samples[b])]
            results[label] = statistics.median(ratios)
            print(f"  {label:<56} {results[label]:6.2f}x "
                  f"(range {min(ratios):.2f}-{max(ratios):.2f})")
    return results


# --------------------------------------------------------------------------- the MLP

def mlp_mt():
    mt.manual_seed(0)
    model = mt.nn.Sequential(mt.nn.Linear(IN, HIDDEN), mt.nn.Tanh(), mt.nn.Linear(HIDDEN, OUT))
    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss(p, x, y):
        return mt.nn.functional.cross_entropy(functional_call(model, p, (x.unsqueeze(0),)),
                                              y.unsqueeze(0))
    return model, params, vmap(grad(loss), in_dims=(None, 0, 0))


def mlp_torch(params_np):
    model = torch.nn.Sequential(torch.nn.Linear(IN, HIDDEN), torch.nn.Tanh(),
                                torch.nn.Linear(HIDDEN, OUT))
    params = {k: torch.from_numpy(v.copy()) for k, v in params_np.items()}

    def loss(p, x, y):
        return torch.nn.functional.cross_entropy(tfunc.functional_call(model, p, (x[None],)),
                                                 y[None])
    return params, tfunc.vmap(tfunc.grad(loss), in_dims=(None, 0, 0))


def per_sample_cases(batch, with_loop):
    rng = np.random.default_rng(batch)
    xn = rng.standard_normal((batch, IN)).astype(np.float32)
    yn = rng.integers(0, OUT, batch)
    model, params, psg = mlp_mt()
    x, y = mt.from_numpy(xn), mt.from_numpy(yn)
    cases = {f"microtensor vmap(grad) B={batch}": lambda: psg(params, x, y)}
    if torch is not None:
        tparams, tpsg = mlp_torch({k: np.array(v._array()) for k, v in params.items()})
        xt, yt = torch.from_numpy(xn), torch.from_numpy(yn)
        cases[f"torch.func vmap(grad) B={batch}"] = lambda: tpsg(tparams, xt, yt)
    if with_loop:
        leaves = list(model.parameters())
        F = mt.nn.functional

        def loop():
            for i in range(batch):
                mt.autograd.grad(F.cross_entropy(model(x[i:i + 1]), y[i:i + 1]), leaves)
        cases[f"microtensor loop of autograd.grad B={batch}"] = loop
    return cases


# --------------------------------------------------------------------------- Jacobians

def jacobian_cases():
    rng = np.random.default_rng(1)
    a_np = (rng.standard_normal((128, 128)) / 12).astype(np.float32)
    b_np = (rng.standard_normal((64, 64)) / 8).astype(np.float32)
    x_np = rng.standard_normal(128).astype(np.float32)
    z_np = rng.standard_normal(64).astype(np.float32)
    a, b, x, z = (mt.from_numpy(v) for v in (a_np, b_np, x_np, z_np))

    def f(v):
        return (a @ v).tanh() * v

    def g(v):
        return ((b @ v).tanh() * v).sum()
    jac_cases = {"microtensor jacrev R^128->R^128": lambda: jacrev(f)(x)}
    hess_cases = {"microtensor hessian R^64->R": lambda: hessian(g)(z)}
    xg = x.detach().requires_grad_()
    out = f(xg)
    eye = mt.eye(128)
    batched_cases = {"microtensor is_grads_batched I_128": lambda: mt.autograd.grad(
        out, xg, eye, retain_graph=True, is_grads_batched=True)}
    if torch is not None:
        at, bt, xt, zt = (torch.from_numpy(v) for v in (a_np, b_np, x_np, z_np))

        def ft(v):
            return (at @ v).tanh() * v

        def gt(v):
            return ((bt @ v).tanh() * v).sum()
        jac_cases["torch.func jacrev R^128->R^128"] = lambda: tfunc.jacrev(ft)(xt)
        hess_cases["torch.func hessian R^64->R"] = lambda: tfunc.hessian(gt)(zt)
        xtg = xt.clone().requires_grad_()
        outt = ft(xtg)
        eyet = torch.eye(128)
        batched_cases["torch is_grads_batched I_128"] = lambda: torch.autograd.grad(
            outt, xtg, eyet, retain_graph=True, is_grads_batched=True)
    return jac_cases, hess_cases, batched_cases


# --------------------------------------------------------------------------- memory

def memory(batch):
    """Peak extra traced memory of one per-sample-gradient call, and what it must hold:
    the per-sample gradients plus the activations (input, pre-activation, tanh, logits,
    log-probabilities: the tensors a forward pass keeps for backward)."""
    _, params, psg = mlp_mt()
    rng = np.random.default_rng(0)
    x = mt.from_numpy(rng.standard_normal((batch, IN)).astype(np.float32))
    y = mt.from_numpy(rng.integers(0, OUT, batch))
    psg(params, x, y)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    grads = psg(params, x, y)
    peak = tracemalloc.get_traced_memory()[1] - before
    tracemalloc.stop()
    gradient_bytes = sum(g.numel() * g.element_size() for g in grads.values())
    activation_bytes = batch * (IN + HIDDEN + HIDDEN + OUT + OUT) * 4
    return peak, gradient_bytes, activation_bytes


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="3 rounds, short timings")
    args = parser.parse_args(argv)
    rounds = 3 if args.quick else args.rounds
    target = 0.05 if args.quick else 0.2
    if torch is None:
        print("PyTorch is not installed: the torch.func columns are left out.")
    summary = {}
    for batch in (8, 512, 2048):
        cases = per_sample_cases(batch, with_loop=batch == 512)
        comparisons = [(f"per-sample grads B={batch}: microtensor / torch.func",
                        f"microtensor vmap(grad) B={batch}", f"torch.func vmap(grad) B={batch}")]
        if batch == 512:
            comparisons.append(("B=512: own loop / vmap(grad) (speed-up)",
                                f"microtensor loop of autograd.grad B={batch}",
                                f"microtensor vmap(grad) B={batch}"))
        summary.update(run_table(f"Per-sample gradients, MLP {IN}-{HIDDEN}-{OUT}, batch {batch}",
                                 cases, comparisons, rounds, target))
    jac, hess, batched = jacobian_cases()
    summary.update(run_table("jacrev of f: R^128 -> R^128", jac,
                             [("jacrev: microtensor / torch.func",
                               "microtensor jacrev R^128->R^128",
                               "torch.func jacrev R^128->R^128")], rounds, target))
    summary.update(run_table("hessian of g: R^64 -> R", hess,
                             [("hessian: microtensor / torch.func",
                               "microtensor hessian R^64->R", "torch.func hessian R^64->R")],
                             rounds, target))
    summary.update(run_table("autograd.grad(is_grads_batched=True), 128-row identity", batched,
                             [("is_grads_batched: microtensor / torch",
                               "microtensor is_grads_batched I_128",
                               "torch is_grads_batched I_128")], rounds, target))
    peak, grads, acts = memory(4096)
    ratio = peak / (grads + acts)
    print(f"\nPeak extra memory of per-sample gradients at batch 4096: {peak / 2**20:.1f} MiB; "
          f"gradients {grads / 2**20:.1f} MiB + activations {acts / 2**20:.1f} MiB "
          f"-> {ratio:.2f}x")
    summary["memory: peak / (gradients + activations)"] = ratio
    print("\nSummary (targets: B=8 <= 0.15x, B=512/2048 <= 0.3x, loop speed-up >= 5x, "
          "jacrev <= 0.3x, hessian <= 0.2x, is_grads_batched <= 1.0x, memory <= 1.3x)")
    for label, value in summary.items():
        print(f"  {label:<56} {value:6.2f}x")
    return summary


if __name__ == "__main__":
    main()
