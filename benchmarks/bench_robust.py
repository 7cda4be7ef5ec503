"""Strided and tiled kernels at geometries that stress cache sets and the TLB, against
PyTorch and NumPy, on whatever machine runs it.

Families: stacked outer products (per-sample weight gradients), sums / means / maxima
along a strided dim, cumulative sums, softmax along a strided dim, im2col (``unfold``, a
convolution's weight gradient), pooling, and elementwise ops with a transposed operand.
Each family runs at power-of-two row strides (4096, 8192 floats), odd sizes, transposed
views, and large and small leading dims.  Rounds time every side of every case once, in
turn; each side keeps its best time (the machine is shared and noisy; the best of many
runs is the kernel's own cost).  Printed per case: ns per element for each side,
mt / PyTorch, mt / NumPy, and mt's time per element over the best of the same op (the
first word of the case) at the same size class (its number of elements rounded to a
power of two): its geometry spread, 1.0 at the best geometry.  Sizes are kept apart
because a case that fits the caches is faster per element for reasons that have nothing
to do with its geometry.
Run: OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/bench_robust.py [--rounds N]
     [--only outer,sum,cumsum,softmax,im2col,pool,binary]
"""
import argparse
import math
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import microtensor as mt  # noqa: E402
import microtensor.nn.functional as F  # noqa: E402
from microtensor._C import kernels  # noqa: E402
from bench_copies import best_of  # noqa: E402
from run import machine_description  # noqa: E402

RNG = np.random.default_rng(0)


def _pair(array):
    return mt.from_numpy(array), torch.from_numpy(array)


def _floats(*shape, dtype=np.float32):
    return RNG.random(shape, dtype=dtype) if dtype == np.float32 else RNG.random(shape)


def outer_cases():
    """(B, m, n): a (B, m, 1) @ b (B, 1, n); `transposed` takes a and b as views of
    (m, B) and (n, B) arrays, so a's and b's element strides are B."""
    for batch, m, n, transposed in ((512, 128, 32, False), (2048, 128, 32, False),
                                    (8, 1024, 1024, False), (8, 1023, 1025, False),
                                    (64, 4096, 16, False), (4096, 64, 64, True),
                                    (8192, 32, 32, True), (4096, 63, 65, True)):
        if transposed:
            a_np, b_np = _floats(m, batch).T, _floats(n, batch).T
        else:
            a_np, b_np = _floats(batch, m), _floats(batch, n)
        (a, at), (b, bt) = _pair(a_np), _pair(b_np)
        name = f"outer ({batch}, {m}, {n}){' from transposed views' if transposed else ''}"
        yield (name, batch * m * n,
               lambda a=a, b=b: mt.matmul(a.unsqueeze(-1), b.unsqueeze(-2)),
               lambda a=at, b=bt: torch.matmul(a.unsqueeze(-1), b.unsqueeze(-2)),
               lambda a=a_np, b=b_np: np.multiply(a[:, :, None], b[:, None, :]))


def _matrices():
    """(label, NumPy array, dim to reduce): rows of power-of-two and odd strides, a
    transposed view, large and small leading dims; dim -1 of a contiguous matrix is the
    reference (a contiguous reduction)."""
    yield "4096² dim -1 (contiguous rows)", _floats(4096, 4096), 1
    for rows, cols in ((4096, 4096), (2048, 8192), (4096, 4000), (4001, 4097), (64, 65536),
                       (65536, 64), (16, 4096), (4096, 16), (128, 512)):
        yield f"{rows}x{cols} dim 0", _floats(rows, cols), 0
    yield "4096² transposed view, dim 1", _floats(4096, 4096).T, 1


def reduction_cases(name, np_name=None):
    np_fn = getattr(np, np_name or name)
    for label, array, dim in _matrices():
        x, xt = _pair(array)
        yield (f"{name} {label}", array.size,
               lambda x=x, d=dim: getattr(x, name)(d),
               lambda x=xt, d=dim: getattr(x, name)(d),
               lambda a=array, d=dim: np_fn(a, axis=d))


def sum_cases():
    yield from reduction_cases("sum")
    yield from reduction_cases("mean")
    yield from reduction_cases("amax")


def cumsum_cases():
    for label, array, dim in _matrices():
        x, xt = _pair(array)
        yield (f"cumsum {label}", array.size, lambda x=x, d=dim: x.cumsum(d),
               lambda x=xt, d=dim: x.cumsum(d), lambda a=array, d=dim: np.cumsum(a, axis=d))


def softmax_cases():
    for label, array, dim in _matrices():
        x, xt = _pair(array)
        yield (f"softmax {label}", array.size, lambda x=x, d=dim: x.softmax(d),
               lambda x=xt, d=dim: x.softmax(d), None)
        if dim == 0 and array.shape == (4096, 4096):
            yield (f"log_softmax {label}", array.size, lambda x=x, d=dim: x.log_softmax(d),
                   lambda x=xt, d=dim: x.log_softmax(d), None)


def im2col_cases():
    """unfold (N, C, H, W) with a 3x3 kernel; planes of 32², 64², 128² floats (power-of-two
    plane strides), odd planes, many and few channels."""
    for n, c, h, w in ((8, 64, 32, 32), (8, 64, 31, 33), (2, 16, 128, 128), (2, 16, 127, 129),
                       (1, 256, 32, 32), (1, 256, 16, 16), (64, 4, 64, 64)):
        x, xt = _pair(_floats(n, c, h, w))
        elements = n * c * 9 * (h - 2) * (w - 2)
        yield (f"unfold 3x3 {(n, c, h, w)}", elements,
               lambda x=x: F.unfold(x, 3), lambda x=xt: torch.nn.functional.unfold(x, 3), None)
    # a convolution's weight gradient takes the columns with the positions major
    for n, c, h, w in ((8, 64, 32, 32), (8, 64, 31, 33), (2, 256, 32, 32), (2, 256, 33, 31)):
        x_np, g_np = _floats(n, c, h, w), _floats(n, c, h - 2, w - 2)
        (x, xt), (g, gt) = _pair(x_np), _pair(g_np)
        weight, weight_t = _pair(_floats(c, c, 3, 3))
        yield (f"conv2d weight grad {(n, c, h, w)}", n * c * c * 9 * (h - 2) * (w - 2),
               lambda x=x, g=g, w=weight: _weight_grad_mt(x, g, w),
               lambda x=xt, g=gt, w=weight_t: _weight_grad_torch(x, g, w), None)


def _weight_grad_mt(x, g, weight):
    w = weight.detach().requires_grad_()
    F.conv2d(x, w).backward(g)
    return w.grad


def _weight_grad_torch(x, g, weight):
    w = weight.detach().requires_grad_()
    torch.nn.functional.conv2d(x, w).backward(g)
    return w.grad


def binary_cases():
    """a + b with b a transposed view (the result runs along a's rows); a + b as the
    reference."""
    for n in (1024, 2048, 2000, 4096, 4000):
        a_np, b_np = _floats(n, n), _floats(n, n)
        (a, at), (b, bt) = _pair(a_np), _pair(b_np)
        yield (f"add {n}² a + b", n * n, lambda a=a, b=b: a + b, lambda a=at, b=bt: a + b,
               lambda a=a_np, b=b_np: a + b)
        yield (f"add {n}² a + b.t()", n * n, lambda a=a, b=b: a + b.t(),
               lambda a=at, b=bt: a + b.t(), lambda a=a_np, b=b_np: a + b.T)


def pool_cases():
    for n, c, h, w in ((8, 32, 64, 64), (8, 32, 63, 65), (1, 4, 1024, 1024),
                       (1, 4, 1023, 1025), (256, 64, 8, 8)):
        array = _floats(n, c, h, w)
        x, xt = _pair(array)
        yield (f"max_pool2d 2x2 {(n, c, h, w)}", array.size,
               lambda x=x: F.max_pool2d(x, 2), lambda x=xt: torch.nn.functional.max_pool2d(x, 2),
               None)
        yield (f"avg_pool2d 3x3/1 {(n, c, h, w)}", array.size,
               lambda x=x: F.avg_pool2d(x, 3, 1),
               lambda x=xt: torch.nn.functional.avg_pool2d(x, 3, 1), None)
    array = _floats(8, 64, 32, 32)
    x, xt = _pair(array)
    x_cl, xt_cl = x.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2), \
        xt.contiguous(memory_format=torch.channels_last)
    yield ("max_pool2d 2x2 (8, 64, 32, 32) channels_last", array.size,
           lambda x=x_cl: F.max_pool2d(x, 2), lambda x=xt_cl: torch.nn.functional.max_pool2d(x, 2),
           None)


def _batch_norm_step(lib, bn, x, g):
    """One training-mode batch norm forward and backward (input and weight gradients)."""
    return lib.autograd.grad(bn(x), [x, bn.weight], g)


def batch_norm_cases():
    """BatchNorm2d in training mode, forward and backward, on contiguous and channels_last
    inputs: many small planes, few large ones, and wide channels."""
    for n, c, h, w in ((64, 32, 28, 28), (32, 64, 16, 16), (8, 256, 8, 8)):
        array, grad = _floats(n, c, h, w), _floats(n, c, h, w)
        for layout in ("contiguous", "channels_last"):
            (x, xt), (g, gt) = _pair(array), _pair(grad)
            if layout == "channels_last":
                x, g = (t.contiguous(memory_format=mt.channels_last) for t in (x, g))
                xt, gt = (t.contiguous(memory_format=torch.channels_last) for t in (xt, gt))
            x.requires_grad_()
            xt.requires_grad_()
            bn, bnt = mt.nn.BatchNorm2d(c), torch.nn.BatchNorm2d(c)
            yield (f"batch_norm fwd {(n, c, h, w)} {layout}", array.size,
                   lambda bn=bn, x=x: bn(x), lambda bn=bnt, x=xt: bn(x), None)
            yield (f"batch_norm fwd+bwd {(n, c, h, w)} {layout}", array.size,
                   lambda bn=bn, x=x, g=g: _batch_norm_step(mt, bn, x, g),
                   lambda bn=bnt, x=xt, g=gt: _batch_norm_step(torch, bn, x, g), None)


FAMILIES = {"outer": ("stacked outer products", outer_cases),
            "sum": ("reductions along a dim", sum_cases),
            "cumsum": ("cumulative sums", cumsum_cases),
            "softmax": ("softmax along a dim", softmax_cases),
            "im2col": ("im2col (unfold, convolution weight gradient)", im2col_cases),
            "pool": ("pooling", pool_cases),
            "binary": ("elementwise add with a transposed operand", binary_cases),
            "batch_norm": ("batch normalisation, training mode", batch_norm_cases)}


def run_family(title, cases, rounds):
    cases = list(cases)
    print(f"\n### {title}\n")
    print("| case | mt ns/elt | PyTorch ns/elt | NumPy ns/elt | mt / PyTorch | mt / NumPy "
          "| mt / best of op and size |")
    print("|---|---|---|---|---|---|---|")
    results = []
    elements_of = {}
    for name, elements, mt_fn, torch_fn, np_fn in cases:
        elements_of[name] = elements
        sides = {"mt": mt_fn, "torch": torch_fn}
        if np_fn is not None:
            sides["np"] = np_fn
        start = time.perf_counter()
        for fn in sides.values():
            fn()
        repeats = max(2, min(50, int(0.05 / max(time.perf_counter() - start, 1e-6) * 3)))
        best = dict.fromkeys(sides, float("inf"))
        for _ in range(rounds):
            for side, fn in sides.items():
                best[side] = min(best[side], best_of(fn, repeats))
        results.append((name, {side: t / elements * 1e9 for side, t in best.items()}))
    for name, per in results:
        size = round(math.log2(elements_of[name]))
        peers = [other["mt"] for other_name, other in results
                 if other_name.split()[0] == name.split()[0]
                 and round(math.log2(elements_of[other_name])) == size]
        numpy = f"{per['np']:.2f}" if "np" in per else "-"
        vs_numpy = f"{per['mt'] / per['np']:.2f}" if "np" in per else "-"
        print(f"| {name} | {per['mt']:.2f} | {per['torch']:.2f} | {numpy} | "
              f"{per['mt'] / per['torch']:.2f} | {vs_numpy} | {per['mt'] / min(peers):.2f} |",
              flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", default=",".join(FAMILIES))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print(machine_description())
    print(f"copy geometry: {kernels.copy_geometry()}")
    for key in args.only.split(","):
        title, cases = FAMILIES[key]
        run_family(title, cases(), args.rounds)


if __name__ == "__main__":
    main()
