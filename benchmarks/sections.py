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
        g = _geomean([r["numpy"] for _, r in rows])
        print(f"\ngeomean microtensor/numpy: {g:.2f} (target <= 1.5)")
        if rows and "torch" in rows[0][1]:
            slower = [c.name for c, r in rows if r["torch"] > 1]
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
        for case, ratios in rows:
            ref, limit = targets[case.name]
            ok = "ok" if ratios[ref] <= limit else "MISSED"
            print(f"{case.name}: {ratios[ref]:.2f}x {ref} (target <= {limit}) {ok}")


ALL = [Tiny(), Large()]
