#!/usr/bin/env bash
# One-shot GPU check for the CuPy backend: build, CUDA tests, a CPU sanity check and the
# GPU benchmark of issue 6.  Run from the repository root on a machine with a GPU and
# CuPy; every step has its own timeout and a failed step never stops the next one.
# The report goes to $OUT/gpu_report.md (or ./gpu_report.md) and is echoed at the end.
set -u
OUT="${OUT:-.}"
REPORT="$OUT/gpu_report.md"
export PYTHONPATH=src
PY=python3
: > "$REPORT"

note() { printf '%s\n' "$*" >> "$REPORT"; }

# step NAME SECONDS CMD...: run CMD with a timeout, keep the tail of its output in the report
step() {
    local name=$1 limit=$2; shift 2
    local log="$OUT/log_${name// /_}.txt" start=$SECONDS rc
    timeout "$limit" "$@" > "$log" 2>&1
    rc=$?
    note "## $name: $([ $rc -eq 0 ] && echo ok || echo "FAILED (exit $rc$([ $rc -eq 124 ] && echo ', timed out'))") in $((SECONDS - start)) s"
    note '```'
    tail -n 40 "$log" >> "$REPORT"
    note '```'
    return 0
}

note "# microtensor GPU check ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
note '```'
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >> "$REPORT" 2>&1
$PY -c "import sys, numpy, cupy; print(sys.version.split()[0], 'numpy', numpy.__version__, 'cupy', cupy.__version__)" >> "$REPORT" 2>&1
note '```'

step "build" 150 $PY setup.py build_ext --inplace -j 16
step "import and device" 30 $PY -c "
import sys, microtensor as mt
assert 'cupy' not in sys.modules, 'import microtensor imported cupy'
print('cuda available:', mt.cuda.is_available(), 'devices:', mt.cuda.device_count())
t = mt.arange(6.0, device='cuda').reshape(2, 3)
print(t.device, (t.t() * 2 + 1).sum(0).cpu())"
# CuPy compiles each kernel on first use (cached on disk): the first run is the slow one
step "CUDA tests" 240 $PY -m pytest --maxfail=30 -p no:cacheprovider tests/test_cuda.py -k "not fake" -rfEs
step "CPU sanity tests" 40 $PY -m pytest -p no:cacheprovider tests/test_meta.py tests/test_memory_format.py

cat > "$OUT/gpu_bench.py" <<'PYEOF'
"""Side-by-side rounds on the GPU: microtensor vs CuPy's own kernels (ratios < 1.2 wanted),
then per-sample gradients of an MLP on the GPU vs the CPU."""
import time

import cupy
import numpy as np

import microtensor as mt


def timed(fn, repeats):
    fn()
    cupy.cuda.Device().synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    cupy.cuda.Device().synchronize()
    return (time.perf_counter() - start) / repeats


def compare(name, ours, theirs, rounds=7, repeats=20):
    ratios, ours_t, theirs_t = [], [], []
    for _ in range(rounds):
        o, t = timed(ours, repeats), timed(theirs, repeats)
        ours_t.append(o)
        theirs_t.append(t)
        ratios.append(o / t)
    print(f"| {name} | {1e6 * min(ours_t):.1f} | {1e6 * min(theirs_t):.1f} | "
          f"{np.median(ratios):.3f} |")


n = 4096
a = mt.randn(n, n, device="cuda")
b = mt.randn(n, n, device="cuda")
ca, cb = cupy.from_dlpack(a), cupy.from_dlpack(b)
assert bool(cupy.allclose((a + b).cpu().numpy(), cupy.asnumpy(ca + cb)))
assert bool(cupy.array_equal(cupy.from_dlpack(a.t().contiguous()), cupy.ascontiguousarray(ca.T)))
print("| benchmark (4096x4096 float32) | microtensor us | CuPy us | median ratio |")
print("|---|---|---|---|")
compare("a + b", lambda: a + b, lambda: ca + cb)
compare("a.t().contiguous() vs ascontiguousarray(a.T)", lambda: a.t().contiguous(),
        lambda: cupy.ascontiguousarray(ca.T))

func = getattr(mt, "func", None)
if func is None or not hasattr(func, "grad") or not hasattr(func, "vmap"):
    print("\nper-sample gradients: skipped (mt.func.grad / mt.func.vmap not available)")
else:
    def per_sample_grads(device, batch=4096):
        gen = np.random.default_rng(0)
        params = {name: mt.tensor(gen.standard_normal(shape) * 0.1, dtype=mt.float32,
                                  device=device)
                  for name, shape in (("w1", (32, 128)), ("b1", (128,)),
                                      ("w2", (128, 10)), ("b2", (10,)))}
        x = mt.tensor(gen.standard_normal((batch, 32)), dtype=mt.float32, device=device)
        y = mt.tensor(np.eye(10)[gen.integers(0, 10, batch)], dtype=mt.float32,
                      device=device)

        def loss(p, xi, yi):
            h = (xi @ p["w1"] + p["b1"]).relu()
            logits = h @ p["w2"] + p["b2"]
            return logits.logsumexp(0) - (logits * yi).sum()

        g = func.vmap(func.grad(loss), in_dims=(None, 0, 0))

        def run():
            out = g(params, x, y)
            if device != "cpu":
                cupy.cuda.Device().synchronize()
            return out
        run()
        start = time.perf_counter()
        for _ in range(3):
            run()
        return (time.perf_counter() - start) / 3
    gpu, cpu = per_sample_grads("cuda"), per_sample_grads("cpu")
    print(f"\nper-sample gradients, MLP 32-128-10, batch 4096: GPU {1e3 * gpu:.1f} ms, "
          f"CPU {1e3 * cpu:.1f} ms, speed-up {cpu / gpu:.1f}x")
PYEOF
step "GPU benchmark" 100 $PY "$OUT/gpu_bench.py"

cat "$REPORT"
