"""``python -m microtensor demo``: differentially private training (DP-SGD) of a small MLP.

DP-SGD clips the gradient of every sample to a maximum norm before they are summed and
Gaussian noise is added.  The demo trains with ``privacy.PrivacyEngine`` and the ordinary
loop (Poisson-sampled batches; per-sample clipping by ``clipped_grad_sum`` with
``--clipping ghost`` or ``vmap``), reports the privacy spent (ε at δ = 1e-5, from the
accountant), and times the clipped sum against the obvious alternative (a Python loop of
single-sample ``backward()``) in the same run, checking that both agree.

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
        description="Train a small MLP with DP-SGD (microtensor.privacy.PrivacyEngine): "
                    "per-sample clipping, Gaussian noise, Poisson sampling. Prints test "
                    "accuracy, the privacy spent (epsilon at delta 1e-5), the time of the "
                    "clipped gradient sum against a per-sample Python loop, and checks that "
                    "both agree.")
    parser.add_argument("--steps", type=int, default=300, help="training steps (default 300)")
    parser.add_argument("--batch-size", type=int, default=128,
                        help="average samples per step: Poisson sampling at batch-size / "
                             "train-size (default 128)")
    parser.add_argument("--noise-multiplier", type=float, default=1.0,
                        help="noise std as a multiple of the clip norm (default 1.0)")
    parser.add_argument("--clip-norm", type=float, default=1.0,
                        help="maximum L2 norm of each sample's gradient (default 1.0)")
    parser.add_argument("--clipping", choices=["ghost", "vmap"], default="vmap",
                        help="how per-sample gradients are clipped: ghost norms or "
                             "materialised by vmap(grad), faster for a model this small "
                             "(default vmap)")
    parser.add_argument("--accountant", choices=["prv", "rdp"], default="prv",
                        help="privacy accountant (default prv)")
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
    from microtensor.func import functional_call
    from microtensor.privacy import PrivacyEngine, clipped_grad_sum
    from microtensor.utils.data import DataLoader, TensorDataset
    F = nn.functional

    mt.manual_seed(args.seed)
    (x_train, y_train), (x_test, y_test) = make_data(args)
    x_train, y_train = mt.from_numpy(x_train), mt.from_numpy(y_train)
    x_test, y_test = mt.from_numpy(x_test), mt.from_numpy(y_test)
    model = nn.Sequential(nn.Linear(args.features, args.hidden), nn.Tanh(),
                          nn.Linear(args.hidden, args.classes))
    criterion = nn.CrossEntropyLoss()
    engine = PrivacyEngine(accountant=args.accountant)
    private_model, optimizer, loader = engine.make_private(
        module=model,
        optimizer=mt.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum),
        data_loader=DataLoader(TensorDataset(x_train, y_train), batch_size=args.batch_size),
        noise_multiplier=args.noise_multiplier, max_grad_norm=args.clip_norm,
        grad_sample_mode=args.clipping, criterion=criterion)

    print(f"DP-SGD on {args.train_size} synthetic samples ({args.features} features, "
          f"{args.classes} classes); MLP {args.features}-{args.hidden}-{args.classes}, "
          f"Poisson batches of {optimizer.expected_batch_size} on average, clip "
          f"{args.clip_norm}, noise x{args.noise_multiplier}, {args.clipping} clipping")
    progress = Progress(args.steps, not args.no_progress)
    step = 0
    while step < args.steps:
        for xb, yb in loader:
            loss = criterion(private_model(xb), yb)
            loss.backward()
            optimizer.step()       # clips per sample, adds the noise: see DPOptimizer
            optimizer.zero_grad()
            step += 1
            progress.update(loss.item())
            if step == args.steps:
                break
    progress.close()

    with mt.no_grad():
        accuracy = (model(x_test).argmax(1) == y_test).float().mean().item()
    print(f"\ntest accuracy: {accuracy:.3f}")
    try:
        print(f"privacy spent: epsilon = {engine.get_epsilon(1e-5):.2f} at delta = 1e-5 "
              f"({args.accountant} accountant, {step} steps)")
    except ImportError:
        print("privacy spent: epsilon needs the accountant's package, dp-accounting: "
              "pip install 'microtensor[privacy]'")

    # the clipped gradient sum by a Python loop, timed and compared in this run
    batch = min(args.batch_size, args.train_size)
    xb, yb = x_train[:batch], y_train[:batch]
    params = {name: p.detach() for name, p in model.named_parameters()}

    def sample_loss(values, x, y):
        return criterion(functional_call(model, values, (x[None],)), y[None])

    def fast():
        return clipped_grad_sum(sample_loss, params, xb, yb, max_grad_norm=args.clip_norm,
                                method=args.clipping)[0]

    def loop():
        """The reference: one backward() per sample, clipped, summed."""
        total = {name: mt.zeros_like(p) for name, p in params.items()}
        for i in range(batch):
            model.zero_grad()
            criterion(model(xb[i:i + 1]), yb[i:i + 1]).backward()
            grads = {name: p.grad for name, p in model.named_parameters()}
            norm = math.sqrt(sum(float((g * g).sum()) for g in grads.values()))
            factor = min(1.0, args.clip_norm / (norm + 1e-6))
            for name, g in grads.items():
                total[name] += g * factor
        return total

    summed, reference = fast(), loop()
    worst = max(float((summed[k] - reference[k]).abs().max()) for k in summed)
    scale = max(float(reference[k].abs().max()) for k in reference)
    agree = worst <= 1e-5 * max(1.0, scale)
    fast_time = loop_time = math.inf
    for _ in range(max(1, args.loop_steps)):
        t0 = time.perf_counter()
        fast()
        fast_time = min(fast_time, time.perf_counter() - t0)
        t0 = time.perf_counter()
        loop()
        loop_time = min(loop_time, time.perf_counter() - t0)
    print(f"clipped gradient sum, batch {batch}: {args.clipping} {fast_time * 1e3:.2f} "
          f"ms/step, Python loop {loop_time * 1e3:.2f} ms/step "
          f"({loop_time / fast_time:.1f}x slower)")
    print(f"clipped_grad_sum(method={args.clipping!r}) equals the loop: "
          f"{'yes' if agree else 'NO'} (max abs difference {worst:.2e})")
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
