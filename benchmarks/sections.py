"""The benchmark cases of ``run.py``, grouped in sections with their targets.

A case is a name plus one zero-argument callable per library; callables are built once
(inputs allocated outside the timed call).
"""
import math


class Case:
    def __init__(self, name, **impls):
        self.name = name
        self.impls = {k: v for k, v in impls.items() if v is not None}

    def callables(self):
        return self.impls


class Section:
    key = ""
    title = ""
    rounds, rounds_quick = 15, 5
    target, target_quick = 0.02, 0.005

    def references(self, torch):
        return ["numpy", "torch"] if torch is not None else ["numpy"]

    def summary(self, rows):
        pass


def _geomean(values):
    values = [v for v in values if v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


class Tiny(Section):
    key = "tiny"
    title = "Per-op overhead on tiny tensors (float32, shape (4,); (8,8) and (4,4) where noted)"

    def cases(self, mt, np, torch):
        xn, yn = np.random.rand(4).astype(np.float32), np.random.rand(4).astype(np.float32)
        x, y = mt.from_numpy(xn.copy()), mt.from_numpy(yn.copy())
        mn = np.random.rand(8, 8).astype(np.float32)
        m = mt.from_numpy(mn.copy())
        mtn = mn.T
        mt_t = m.t()
        an, bn = np.random.rand(4, 4).astype(np.float32), np.random.rand(4, 4).astype(np.float32)
        a, b = mt.from_numpy(an.copy()), mt.from_numpy(bn.copy())
        if torch is not None:
            xt, yt = torch.from_numpy(xn.copy()), torch.from_numpy(yn.copy())
            mtt = torch.from_numpy(mn.copy())
            mtt_t = mtt.t()
            at, bt = torch.from_numpy(an.copy()), torch.from_numpy(bn.copy())
        t = torch is not None
        return [
            Case("x + y", microtensor=lambda: x + y, numpy=lambda: xn + yn,
                 torch=(lambda: xt + yt) if t else None),
            Case("x * y", microtensor=lambda: x * y, numpy=lambda: xn * yn,
                 torch=(lambda: xt * yt) if t else None),
            Case("x.sum()", microtensor=lambda: x.sum(), numpy=lambda: xn.sum(),
                 torch=(lambda: xt.sum()) if t else None),
            Case("x.clone()", microtensor=lambda: x.clone(), numpy=lambda: xn.copy(),
                 torch=(lambda: xt.clone()) if t else None),
            Case("x[1:3]", microtensor=lambda: x[1:3], numpy=lambda: xn[1:3],
                 torch=(lambda: xt[1:3]) if t else None),
            Case("x.reshape(2, 2)", microtensor=lambda: x.reshape(2, 2),
                 numpy=lambda: xn.reshape(2, 2), torch=(lambda: xt.reshape(2, 2)) if t else None),
            Case("(8,8).t()", microtensor=lambda: m.t(), numpy=lambda: mn.T,
                 torch=(lambda: mtt.t()) if t else None),
            Case("x.as_strided((2,2),(1,1))", microtensor=lambda: x.as_strided((2, 2), (1, 1)),
                 numpy=lambda: np.ndarray((2, 2), np.float32, xn, 0, (4, 4)),
                 torch=(lambda: xt.as_strided((2, 2), (1, 1))) if t else None),
            Case("(8,8).t().contiguous()", microtensor=lambda: mt_t.contiguous(),
                 numpy=lambda: np.ascontiguousarray(mtn),
                 torch=(lambda: mtt_t.contiguous()) if t else None),
            Case("(4,4) @ (4,4)", microtensor=lambda: a @ b, numpy=lambda: an @ bn,
                 torch=(lambda: at @ bt) if t else None),
        ]

    def summary(self, rows):
        g = _geomean([r["numpy"] for _, r, _ in rows])
        print(f"\ngeomean microtensor/numpy: {g:.2f} (target <= 1.5)")
        if rows and "torch" in rows[0][1]:
            slower = [c.name for c, r, _ in rows if r["torch"] > 1]
            print(f"ops slower than PyTorch eager: {', '.join(slower) or 'none'} (target: none)")


class Large(Section):
    key = "large"
    title = "Throughput on large tensors (4096x4096 float32; matmul 1024x1024)"
    rounds, rounds_quick = 7, 3
    target, target_quick = 0.1, 0.03

    def cases(self, mt, np, torch):
        n = 4096
        an = np.random.rand(n, n).astype(np.float32)
        bn = np.random.rand(n, n).astype(np.float32)
        a, b = mt.from_numpy(an), mt.from_numpy(bn)
        mn1 = np.random.rand(1024, 1024).astype(np.float32)
        mn2 = np.random.rand(1024, 1024).astype(np.float32)
        m1, m2 = mt.from_numpy(mn1), mt.from_numpy(mn2)
        t = torch is not None
        if t:
            at, bt = torch.from_numpy(an), torch.from_numpy(bn)
            mt1, mt2 = torch.from_numpy(mn1), torch.from_numpy(mn2)
        return [
            Case("a + b", microtensor=lambda: a + b, numpy=lambda: an + bn,
                 torch=(lambda: at + bt) if t else None),
            Case("a.sum()", microtensor=lambda: a.sum(), numpy=lambda: an.sum(),
                 torch=(lambda: at.sum()) if t else None),
            Case("a.t().clone(contiguous_format)",
                 microtensor=lambda: a.t().clone(memory_format=mt.contiguous_format),
                 numpy=lambda: an.T.copy(),
                 torch=(lambda: at.t().clone(memory_format=torch.contiguous_format))
                 if t else None),
            Case("matmul 1024", microtensor=lambda: m1 @ m2, numpy=lambda: mn1 @ mn2,
                 torch=(lambda: mt1 @ mt2) if t else None),
        ]

    def summary(self, rows):
        targets = {"a + b": ("numpy", 1.1), "a.sum()": ("numpy", 1.0),
                   "a.t().clone(contiguous_format)": ("numpy", 0.5), "matmul 1024": ("numpy", 1.2)}
        for case, ratios, _ in rows:
            ref, limit = targets[case.name]
            ok = "ok" if ratios[ref] <= limit else "MISSED"
            print(f"{case.name}: {ratios[ref]:.2f}x {ref} (target <= {limit}) {ok}")


def _median(values):
    values = sorted(values)
    return values[len(values) // 2]


def _slope_ratio(rows, long_name, short_name, ops):
    """(T(long) - T(short)) per extra op, microtensor over torch, from the same rounds."""
    times = {c.name: t for c, _, t in rows}
    ours = [(a - b) / ops for a, b in zip(times[long_name]["microtensor"],
                                          times[short_name]["microtensor"])]
    theirs = [(a - b) / ops for a, b in zip(times[long_name]["torch"],
                                            times[short_name]["torch"])]
    return _median(ours), _median(theirs), _median([a / b for a, b in zip(ours, theirs)])


def _chain(x, ops):
    for _ in range(ops):
        x = x * 1.01
    return x


class Autograd(Section):
    key = "autograd"
    title = "Autograd: recording, forward+backward of tiny functions, an MLP step"

    def references(self, torch):
        return ["torch"] if torch is not None else []

    def cases(self, mt, np, torch):
        if torch is None:
            return []
        x = mt.rand(4, requires_grad=True)
        xt = torch.rand(4, requires_grad=True)

        def fwd_bwd(lib, t, ops):
            return lambda: lib.autograd.grad(_chain(t, ops).sum(), t)
        mt.manual_seed(0)
        model = mt.nn.Sequential(mt.nn.Linear(256, 256), mt.nn.Tanh(), mt.nn.Linear(256, 10))
        tmodel = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Tanh(),
                                     torch.nn.Linear(256, 10))
        data, tdata = mt.randn(64, 256), torch.randn(64, 256)
        target, ttarget = mt.randint(0, 10, (64,)), torch.randint(0, 10, (64,))

        def step_mt():
            model.zero_grad()
            mt.nn.functional.cross_entropy(model(data), target).backward()

        def step_torch():
            tmodel.zero_grad()
            torch.nn.functional.cross_entropy(tmodel(tdata), ttarget).backward()
        return [
            Case("record 1 op", microtensor=lambda: _chain(x, 1),
                 torch=lambda: _chain(xt, 1)),
            Case("record 33 ops", microtensor=lambda: _chain(x, 33),
                 torch=lambda: _chain(xt, 33)),
            Case("forward+backward, 1 op", microtensor=fwd_bwd(mt, x, 1),
                 torch=fwd_bwd(torch, xt, 1)),
            Case("forward+backward, 33 ops", microtensor=fwd_bwd(mt, x, 33),
                 torch=fwd_bwd(torch, xt, 33)),
            Case("MLP 256-256-10, batch 64, forward+backward", microtensor=step_mt,
                 torch=step_torch),
        ]

    def summary(self, rows):
        if not rows:
            return
        ours, theirs, r = _slope_ratio(rows, "record 33 ops", "record 1 op", 32)
        print(f"\nrecording slope: {ours * 1e6:.2f} us/op vs PyTorch {theirs * 1e6:.2f} us/op "
              f"-> {r:.2f}x (target <= 0.5)")
        targets = {"forward+backward, 1 op": 0.5, "forward+backward, 33 ops": 0.5,
                   "MLP 256-256-10, batch 64, forward+backward": 1.2}
        for case, ratios, _ in rows:
            if case.name in targets:
                print(f"{case.name}: {ratios['torch']:.2f}x PyTorch (target <= "
                      f"{targets[case.name]})")


class Vmap(Section):
    key = "vmap"
    title = "vmap: call overhead, per-op slope, batched matmul"
    rounds, rounds_quick = 9, 3

    def references(self, torch):
        return ["torch"] if torch is not None else []

    def cases(self, mt, np, torch):
        if torch is None:
            return []
        import torch.func as tf
        x, xt = mt.rand(8, 4), torch.rand(8, 4)
        a, b = mt.randn(64, 128, 128), mt.randn(64, 128, 128)
        vmat = mt.vmap(mt.matmul)
        return [
            Case("vmap, 1-op function on (8, 4)", microtensor=lambda: mt.vmap(
                lambda v: _chain(v, 1))(x), torch=lambda: tf.vmap(lambda v: _chain(v, 1))(xt)),
            Case("vmap, 33-op function on (8, 4)", microtensor=lambda: mt.vmap(
                lambda v: _chain(v, 33))(x), torch=lambda: tf.vmap(lambda v: _chain(v, 33))(xt)),
            Case("vmap(matmul) over 64 pairs of 128x128 (reference: mt.bmm)",
                 microtensor=lambda: vmat(a, b), torch=lambda: mt.bmm(a, b)),
        ]

    def summary(self, rows):
        if not rows:
            return
        by_name = {c.name: r for c, r, _ in rows}
        print(f"\nvmap call overhead: {by_name['vmap, 1-op function on (8, 4)']['torch']:.2f}x "
              "torch.func.vmap (target <= 0.25)")
        ours, theirs, r = _slope_ratio(rows, "vmap, 33-op function on (8, 4)",
                                       "vmap, 1-op function on (8, 4)", 32)
        print(f"per-op slope inside vmap: {ours * 1e6:.2f} us/op vs torch.func "
              f"{theirs * 1e6:.2f} us/op -> {r:.2f}x (target <= 0.6)")
        print("vmap(matmul) / mt.bmm (the 'torch' column here): "
              f"{by_name['vmap(matmul) over 64 pairs of 128x128 (reference: mt.bmm)']['torch']:.2f}"
              " (target <= 1.2)")


ALL = [Tiny(), Large(), Autograd(), Vmap()]
