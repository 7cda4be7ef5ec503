"""Threads, as in PyTorch: grad mode and vmap levels are per thread, and backward passes
run from several threads into shared leaves lose no contribution."""
import sys
import threading

import numpy as np
import pytest

import microtensor as mt
from microtensor.func import grad, vmap


@pytest.fixture(autouse=True)
def frequent_switches():
    """Threads switch every few bytecodes (not every 5 ms), so that races show up."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(interval)


def run_threads(targets):
    """Start one thread per callable, join them and re-raise the first error."""
    errors = []

    def guarded(target):
        def run():
            try:
                target()
            except BaseException as exc:   # noqa: BLE001  (handed to the main thread)
                errors.append(exc)
        return run
    threads = [threading.Thread(target=guarded(t)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


# ------------------------------------------------------------------ grad mode

def test_a_new_thread_starts_with_grad_enabled_whatever_the_parent_mode():
    seen = []
    with mt.no_grad():
        run_threads([lambda: seen.append(mt.is_grad_enabled())])
        assert not mt.is_grad_enabled()
    assert seen == [True]


def test_grad_mode_changes_in_one_thread_do_not_leak_into_another():
    inside_no_grad = threading.Event()
    checked = threading.Event()
    seen = {}

    def disabler():
        with mt.no_grad():
            inside_no_grad.set()
            checked.wait(5)
            seen["disabler"] = mt.is_grad_enabled()

    def observer():
        inside_no_grad.wait(5)
        x = mt.ones(2, requires_grad=True)
        seen["observer"] = mt.is_grad_enabled()
        seen["recorded"] = (x * 2).requires_grad
        checked.set()
    run_threads([disabler, observer])
    assert seen == {"disabler": False, "observer": True, "recorded": True}


# ------------------------------------------------------------------ vmap

def _slow_sum_of_squares(rounds):
    """A function whose vmap takes long enough for another thread to interleave."""
    def f(x, y):
        out = x * 0
        for _ in range(rounds):
            out = out + (x * y).sin()
        return out.sum()
    return f


def test_vmap_in_two_threads_at_once_gives_the_single_thread_results():
    rng = np.random.default_rng(0)
    inputs = [tuple(mt.tensor(rng.standard_normal(s)) for s in [(4, 3), (4, 3)]),
              tuple(mt.tensor(rng.standard_normal(s)) for s in [(6, 2, 3), (6, 2, 3)])]
    f = _slow_sum_of_squares(40)
    expected = [vmap(f)(*args) for args in inputs]
    expected_nested = vmap(vmap(f))(*inputs[1])
    results = {}
    barrier = threading.Barrier(3)

    def work(key, fn, args):
        def run():
            barrier.wait(5)
            for _ in range(5):
                results.setdefault(key, []).append(fn(*args))
        return run
    run_threads([work(0, vmap(f), inputs[0]), work(1, vmap(f), inputs[1]),
                 work(2, vmap(vmap(f)), inputs[1])])
    for got in results[0]:
        np.testing.assert_allclose(np.asarray(got), np.asarray(expected[0]), rtol=1e-12)
    for got in results[1]:
        np.testing.assert_allclose(np.asarray(got), np.asarray(expected[1]), rtol=1e-12)
    for got in results[2]:
        np.testing.assert_allclose(np.asarray(got), np.asarray(expected_nested), rtol=1e-12)


def test_vmaps_of_two_threads_may_end_in_any_order():
    """Thread A enters vmap, then B; A returns while B is still inside: each thread's
    levels are its own, so B's batch (a different size) is still there."""
    a_entered, b_entered, a_returned = threading.Event(), threading.Event(), threading.Event()
    results = {}

    def a(x):
        a_entered.set()
        b_entered.wait(5)
        return x * 2

    def b(x):
        b_entered.set()
        a_returned.wait(5)
        return mt.cat([x * 3, mt.ones(1)])     # cat's rule reads this level's batch size

    def thread_a():
        results["a"] = vmap(a)(mt.arange(4.0))
        a_returned.set()

    def thread_b():
        a_entered.wait(5)
        results["b"] = vmap(b)(mt.arange(6.0).reshape(3, 2))
    run_threads([thread_a, thread_b])
    assert results["a"].tolist() == [0.0, 2.0, 4.0, 6.0]
    assert results["b"].tolist() == [[0.0, 3.0, 1.0], [6.0, 9.0, 1.0], [12.0, 15.0, 1.0]]


def test_random_ops_and_backward_in_a_thread_while_another_is_inside_vmap():
    entered = threading.Event()
    done = threading.Event()
    seen = {}

    def vmapper():
        def f(x):
            entered.set()
            done.wait(5)          # stay inside vmap while the other thread works
            return x * 2
        seen["vmap"] = vmap(f)(mt.ones(3, 2))

    def worker():
        entered.wait(5)
        try:
            seen["randn"] = mt.randn(2, 3).shape
            seen["rand"] = mt.rand(4).shape
            x = mt.ones(3, requires_grad=True)
            (x * 3).sum().backward()
            seen["grad"] = x.grad.tolist()
            seen["func.grad"] = grad(lambda t: (t * t).sum())(mt.ones(2)).tolist()
        finally:
            done.set()
    run_threads([vmapper, worker])
    assert seen["randn"] == (2, 3) and seen["rand"] == (4,)
    assert seen["grad"] == [3.0, 3.0, 3.0] and seen["func.grad"] == [2.0, 2.0]
    assert seen["vmap"].shape == (3, 2)


def test_a_thread_inside_vmap_still_refuses_random_ops_with_randomness_error():
    entered = threading.Event()
    done = threading.Event()
    errors = []

    def vmapper():
        def f(x):
            entered.set()
            done.wait(5)
            try:
                mt.randn(2)
            except RuntimeError as exc:
                errors.append(str(exc))
            return x
        vmap(f)(mt.ones(3))

    def other():
        entered.wait(5)
        mt.randn(2)               # outside vmap in this thread: fine
        done.set()
    run_threads([vmapper, other])
    assert len(errors) == 1 and "randomness" in errors[0]


# ------------------------------------------------------------------ concurrent backward

@pytest.mark.parametrize("create_graph", [False, True])
def test_concurrent_backward_into_shared_leaves_loses_no_contribution(create_graph):
    # leaves large enough that NumPy releases the GIL while adding into ``.grad``: without
    # a lock two threads' read-modify-writes of the same memory overlap
    threads, calls, n = 4, 50, 1 << 20
    w = mt.zeros(n, requires_grad=True)
    b = mt.zeros((), requires_grad=True)
    barrier = threading.Barrier(threads)

    def worker(k):
        def run():
            x = mt.full((n,), float(k + 1))
            barrier.wait(5)
            for i in range(calls):
                loss = (w * x).sum() + b * (i + 1)
                loss.backward(create_graph=create_graph)
        return run
    run_threads([worker(k) for k in range(threads)])
    per_call = sum(k + 1 for k in range(threads))
    g = np.asarray(w.grad.detach())
    assert g.min() == g.max() == per_call * calls
    assert b.grad.item() == threads * calls * (calls + 1) / 2
