"""``python -m microtensor demo``: differentially private training (DP-SGD) of a small MLP.

DP-SGD needs the gradient of every sample separately: each one is clipped to a maximum
norm before they are summed and Gaussian noise is added.  microtensor computes them all
at once with ``vmap(grad(loss))`` over ``functional_call`` of the model; the demo also
times the obvious alternative (a Python loop of single-sample ``backward()``) in the same
run and checks that both give the same gradients.

The data set is generated here: Gaussian clusters in ``--features`` dimensions, one per
class, split into a training and a test set.
"""
import argparse
import math
import sys
import time

import numpy as np


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="python -m microtensor demo",
        description="Train a small MLP with DP-SGD: per-sample gradients by vmap(grad), "
                    "per-sample clipping, Gaussian noise. Prints test accuracy, time per step "
                    "against a per-sample Python loop, and checks that both agree.")
    parser.add_argument("--steps", type=int, default=300, help="training steps (default 300)")
    parser.add_argument("--batch-size", type=int, default=128,
                        help="samples per step (default 128)")
    parser.add_argument("--noise-multiplier", type=float, default=1.0,
                        help="noise std as a multiple of the clip norm (default 1.0)")
    parser.add_argument("--clip-norm", type=float, default=1.0,
                        help="maximum L2 norm of each sample's gradient (default 1.0)")
    parser.add_argument("--lr", type=float, default=0.5, help="learning rate (default 0.5)")
    parser.add_argument("--momentum", type=float, default=0.9, help="SGD momentum (default 0.9)")
    parser.add_argument("--hidden", type=int, default=64, help="hidden units (default 64)")
    parser.add_argument("--features", type=int, default=10,
                        help="input features of the synthetic data (default 10)")
    parser.add_argument("--classes", type=int, default=4, help="classes (default 4)")
    parser.add_argument("--train-size", type=int, default=4096,
                        help="training samples (default 4096)")
    parser.add_argument("--test-size", type=int, default=2048,
                        help="test samples (default 2048)")
    parser.add_argument("--loop-steps", type=int, default=3,
                        help="steps timed with the per-sample Python loop (default 3)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser.parse_args(list(argv))


def make_data(args):
    """Gaussian clusters: class ``c`` centred at a random point, unit spread."""
    rng = np.random.default_rng(args.seed)
    centres = rng.normal(0.0, 1.2, (args.classes, args.features))

    def draw(n):
        labels = rng.integers(0, args.classes, n)
        points = centres[labels] + rng.normal(0.0, 1.0, (n, args.features))
        return points.astype(np.float32), labels
    return draw(args.train_size), draw(args.test_size)


class Progress:
    """tqdm when it is installed, else a line every tenth of the way."""

    def __init__(self, total, enabled):
        self.total = total
        self.bar = None
        self.enabled = enabled
        if enabled:
            try:
                from tqdm import tqdm
                self.bar = tqdm(total=total, desc="DP-SGD", unit="step")
            except ImportError:
                pass
        self.every = max(1, total // 10)
        self.done = 0

    def update(self, loss):
        self.done += 1
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(loss=f"{loss:.3f}")
        elif self.enabled and (self.done % self.every == 0 or self.done == self.total):
            print(f"  step {self.done:>5}/{self.total}  loss {loss:.3f}", flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()


def main(argv=()):
    args = parse_args(argv)
    import microtensor as mt
    from microtensor import nn
    from microtensor.func import functional_call, grad, vmap
    F = nn.functional

    mt.manual_seed(args.seed)
    (x_train, y_train), (x_test, y_test) = make_data(args)
    x_train, y_train = mt.from_numpy(x_train), mt.from_numpy(y_train)
    x_test, y_test = mt.from_numpy(x_test), mt.from_numpy(y_test)
    model = nn.Sequential(nn.Linear(args.features, args.hidden), nn.Tanh(),
                          nn.Linear(args.hidden, args.classes))
    optimizer = mt.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)

    def sample_loss(params, x, y):
        logits = functional_call(model, params, (x.unsqueeze(0),))
        return F.cross_entropy(logits, y.unsqueeze(0))
    per_sample_grads = vmap(grad(sample_loss), in_dims=(None, 0, 0))

    def loop_grads(x, y):
        """The reference: one backward() per sample."""
        grads = {name: [] for name, _ in model.named_parameters()}
        for i in range(x.shape[0]):
            model.zero_grad()
            F.cross_entropy(model(x[i:i + 1]), y[i:i + 1]).backward()
            for name, p in model.named_parameters():
                grads[name].append(p.grad)
        return {name: mt.stack(g) for name, g in grads.items()}

    def private_step(grads, batch):
        """Clip each sample's gradient to ``clip_norm``, sum, add noise, average."""
        flat = [g.reshape(batch, -1) for g in grads.values()]
        norms = sum((f * f).sum(1) for f in flat).sqrt()
        scale = (args.clip_norm / (norms + 1e-6)).clamp(max=1.0)
        noise_std = args.noise_multiplier * args.clip_norm
        for p, g in zip(model.parameters(), grads.values()):
            clipped = (g * scale.reshape((batch,) + (1,) * (g.dim() - 1))).sum(0)
            p.grad = (clipped + mt.randn(p.shape) * noise_std) / batch
        optimizer.step()

    print(f"DP-SGD on {args.train_size} synthetic samples ({args.features} features, "
          f"{args.classes} classes); MLP {args.features}-{args.hidden}-{args.classes}, "
          f"batch {args.batch_size}, clip {args.clip_norm}, noise x{args.noise_multiplier}")
    n = args.train_size
    batch = min(args.batch_size, n)
    steps_per_epoch = n // batch
    progress = Progress(args.steps, not args.no_progress)
    vmap_time = 0.0
    for step in range(args.steps):
        if step % steps_per_epoch == 0:
            order = mt.randperm(n)
        start = (step % steps_per_epoch) * batch
        idx = order[start:start + batch]
        xb, yb = x_train[idx], y_train[idx]
        params = {name: p.detach() for name, p in model.named_parameters()}
        t0 = time.perf_counter()
        grads = per_sample_grads(params, xb, yb)
        vmap_time += time.perf_counter() - t0
        private_step(grads, batch)
        if progress.enabled:
            with mt.no_grad():
                loss = F.cross_entropy(model(xb), yb).item()
            progress.update(loss)
    progress.close()

    with mt.no_grad():
        accuracy = (model(x_test).argmax(1) == y_test).float().mean().item()
    print(f"\ntest accuracy: {accuracy:.3f}")

    # the same per-sample gradients by a Python loop, timed and compared in this run
    xb, yb = x_train[:batch], y_train[:batch]
    params = {name: p.detach() for name, p in model.named_parameters()}
    fast = per_sample_grads(params, xb, yb)
    slow = loop_grads(xb, yb)
    worst = max(float((fast[k] - slow[k]).abs().max()) for k in fast)
    scale = max(float(slow[k].abs().max()) for k in slow)
    agree = worst <= 1e-5 * max(1.0, scale)
    loop_time = math.inf
    for _ in range(max(1, args.loop_steps)):
        t0 = time.perf_counter()
        loop_grads(xb, yb)
        loop_time = min(loop_time, time.perf_counter() - t0)
    per_step = vmap_time / max(1, args.steps)
    print(f"per-sample gradients, batch {batch}: vmap(grad) {per_step * 1e3:.2f} ms/step, "
          f"Python loop {loop_time * 1e3:.2f} ms/step ({loop_time / per_step:.1f}x slower)")
    print(f"vmap(grad) equals the loop: {'yes' if agree else 'NO'} "
          f"(max abs difference {worst:.2e})")
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
