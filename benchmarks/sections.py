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

    views = ("x[1:3]", "x.reshape(2, 2)", "(8,8).t()")

    def summary(self, rows):
        g = _geomean([r["numpy"] for _, r, _ in rows])
        print(f"\ngeomean microtensor/numpy: {g:.2f} (target <= 1.0)")
        for case, ratios, _ in rows:
            if case.name in self.views:
                ok = "ok" if ratios["numpy"] <= 1.5 else "MISSED"
                print(f"{case.name}: {ratios['numpy']:.2f}x numpy (target <= 1.5) {ok}")
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
                   "MLP 256-256-10, batch 64, forward+backward": 0.6}
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


def _cnn(lib):
    """The per-sample-gradients tutorial's CNN (28x28 inputs, 10 classes)."""
    nn, F = lib.nn, lib.nn.functional

    class CNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 32, 3, 1)
            self.conv2 = nn.Conv2d(32, 64, 3, 1)
            self.fc1 = nn.Linear(9216, 128)
            self.fc2 = nn.Linear(128, 10)

        def forward(self, x):
            x = F.relu(self.conv1(x))
            x = F.relu(self.conv2(x))
            x = F.max_pool2d(x, 2)
            x = lib.flatten(x, 1)
            x = F.relu(self.fc1(x))
            return F.log_softmax(self.fc2(x), dim=1)
    return CNN()


def _transformer_block(lib, vocab=100, width=64, heads=4):
    """Embedding, self-attention (nn.MultiheadAttention), LayerNorm and a GELU MLP, each
    sub-layer residual, and a linear head on the mean over the sequence."""
    nn, F = lib.nn, lib.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(vocab, width)
            self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
            self.norm1 = nn.LayerNorm(width)
            self.norm2 = nn.LayerNorm(width)
            self.fc1 = nn.Linear(width, 4 * width)
            self.fc2 = nn.Linear(4 * width, width)
            self.head = nn.Linear(width, vocab)

        def forward(self, tokens):
            x = self.embed(tokens)
            h = self.norm1(x)
            x = x + self.attn(h, h, h, need_weights=False)[0]
            x = x + self.fc2(F.gelu(self.fc1(self.norm2(x))))
            return F.log_softmax(self.head(x.mean(-2)), dim=-1)
    return Block()


def _copy_parameters(source, target, mt):
    """``target`` (a microtensor module) loaded with ``source``'s (a torch module's) values."""
    target.load_state_dict({k: mt.from_numpy(v.detach().numpy().copy())
                            for k, v in source.state_dict().items()})


def _per_sample_grads(lib, func, model, loss_of_output):
    """``vmap(grad(loss of one sample))`` over the batch, as in the tutorial."""
    params = {k: v.detach() for k, v in model.named_parameters()}
    buffers = {k: v.detach() for k, v in model.named_buffers()}

    def loss(p, b, sample, target):
        out = func.functional_call(model, (p, b), (sample.unsqueeze(0),))
        return loss_of_output(out, target.unsqueeze(0))
    per_sample = func.vmap(func.grad(loss), in_dims=(None, None, 0, 0))
    return lambda data, targets: per_sample(params, buffers, data, targets)


class Layers(Section):
    key = "layers"
    title = "Layers: a CNN and a transformer block (training, per-sample gradients), " \
            "normalisation, activations, attention"
    rounds, rounds_quick = 7, 3
    target, target_quick = 0.2, 0.05

    TARGETS = {"CNN training step, batch 64": 1.5,
               "CNN per-sample gradients, batch 32 (torch.func)": 1.0,
               "CNN inference, channels_last batch 64": 1.5,
               "layer_norm fwd+bwd (64, 128, 256)": 1.5,
               "gelu fwd+bwd (64, 128, 256)": 1.5,
               "softmax fwd+bwd (64, 128, 256)": 1.5,
               "scaled_dot_product_attention fwd+bwd (64, 128, 256)": 1.5,
               "avg_pool2d fwd+bwd (64, 32, 28, 28), kernel 3, stride 2, padding 1": 1.5,
               "transformer block per-sample gradients, batch 32 (torch.func)": 1.0}

    def references(self, torch):
        return ["torch"] if torch is not None else []

    def cases(self, mt, np, torch):
        if torch is None:
            return []
        import warnings

        import torch.func as tfunc
        # torch.func warns that its attention kernel has no batching rule (and loops)
        warnings.filterwarnings("ignore", message="There is a performance drop")
        F, tF = mt.nn.functional, torch.nn.functional
        torch.manual_seed(0)
        cases = []

        # the CNN, same weights in both libraries
        tcnn = _cnn(torch)
        cnn = _cnn(mt)
        _copy_parameters(tcnn, cnn, mt)
        images = np.random.rand(64, 1, 28, 28).astype(np.float32)
        labels = np.random.randint(0, 10, 64)
        x, tx = mt.from_numpy(images), torch.from_numpy(images)
        y, ty = mt.from_numpy(labels), torch.from_numpy(labels)

        def train_step(lib, model, data, target):
            def step():
                model.zero_grad()
                lib.nn.functional.nll_loss(model(data), target).backward()
            return step
        cases.append(Case("CNN training step, batch 64", microtensor=train_step(mt, cnn, x, y),
                          torch=train_step(torch, tcnn, tx, ty)))
        psg = _per_sample_grads(mt, mt.func, cnn, F.nll_loss)
        tpsg = _per_sample_grads(torch, tfunc, tcnn, tF.nll_loss)
        cases.append(Case("CNN per-sample gradients, batch 32 (torch.func)",
                          microtensor=lambda: psg(x[:32], y[:32]),
                          torch=lambda: tpsg(tx[:32], ty[:32])))
        xcl = x.contiguous(memory_format=mt.channels_last)
        txcl = tx.contiguous(memory_format=torch.channels_last)

        def infer(lib, model, data):
            def run():
                with lib.no_grad():
                    model(data)
            return run
        cases.append(Case("CNN inference, channels_last batch 64",
                          microtensor=infer(mt, cnn, xcl), torch=infer(torch, tcnn, txcl)))

        # single layers on (64, 128, 256) float32, forward + backward
        shape = (64, 128, 256)
        data = np.random.randn(*shape).astype(np.float32)
        upstream = np.random.randn(*shape).astype(np.float32)
        a = mt.from_numpy(data.copy()).requires_grad_()
        ta = torch.from_numpy(data.copy()).requires_grad_()
        g, tg = mt.from_numpy(upstream), torch.from_numpy(upstream)
        w = mt.ones(256, requires_grad=True)
        b = mt.zeros(256, requires_grad=True)
        tw = torch.ones(256, requires_grad=True)
        tb = torch.zeros(256, requires_grad=True)

        def fwd_bwd(lib, fn, inputs, grad):
            return lambda: lib.autograd.grad(fn(), inputs, grad)
        layers = [
            ("layer_norm", lambda: F.layer_norm(a, (256,), w, b), (a, w, b),
             lambda: tF.layer_norm(ta, (256,), tw, tb), (ta, tw, tb)),
            ("gelu", lambda: F.gelu(a), (a,), lambda: tF.gelu(ta), (ta,)),
            ("softmax", lambda: F.softmax(a, -1), (a,), lambda: tF.softmax(ta, -1), (ta,)),
            ("scaled_dot_product_attention",
             lambda: F.scaled_dot_product_attention(a, a, a), (a,),
             lambda: tF.scaled_dot_product_attention(ta, ta, ta), (ta,)),
        ]
        for name, fn, inputs, tfn, tinputs in layers:
            cases.append(Case(f"{name} fwd+bwd (64, 128, 256)",
                              microtensor=fwd_bwd(mt, fn, inputs, g),
                              torch=fwd_bwd(torch, tfn, tinputs, tg)))

        # average pooling of feature maps, forward + backward
        maps = np.random.randn(64, 32, 28, 28).astype(np.float32)
        pooled = np.random.randn(64, 32, 14, 14).astype(np.float32)
        m = mt.from_numpy(maps.copy()).requires_grad_()
        tm = torch.from_numpy(maps.copy()).requires_grad_()
        cases.append(Case("avg_pool2d fwd+bwd (64, 32, 28, 28), kernel 3, stride 2, padding 1",
                          microtensor=fwd_bwd(mt, lambda: F.avg_pool2d(m, 3, 2, 1), (m,),
                                              mt.from_numpy(pooled)),
                          torch=fwd_bwd(torch, lambda: tF.avg_pool2d(tm, 3, 2, 1), (tm,),
                                        torch.from_numpy(pooled))))

        # per-sample gradients of a small transformer block
        tblock = _transformer_block(torch)
        block = _transformer_block(mt)
        _copy_parameters(tblock, block, mt)
        tokens = np.random.randint(0, 100, (32, 16))
        targets = np.random.randint(0, 100, 32)
        bpsg = _per_sample_grads(mt, mt.func, block, F.nll_loss)
        tbpsg = _per_sample_grads(torch, tfunc, tblock, tF.nll_loss)
        tok, ttok = mt.from_numpy(tokens), torch.from_numpy(tokens)
        tgt, ttgt = mt.from_numpy(targets), torch.from_numpy(targets)
        cases.append(Case("transformer block per-sample gradients, batch 32 (torch.func)",
                          microtensor=lambda: bpsg(tok, tgt), torch=lambda: tbpsg(ttok, ttgt)))
        return cases

    def summary(self, rows):
        if not rows:
            return
        print()
        for case, ratios, _ in rows:
            limit = self.TARGETS[case.name]
            ok = "met" if ratios["torch"] <= limit else "MISSED"
            print(f"{case.name}: {ratios['torch']:.2f}x (target <= {limit}) {ok}")


ALL = [Tiny(), Large(), Autograd(), Vmap(), Layers()]
