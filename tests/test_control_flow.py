"""``cond`` and ``while_loop``: results, argument checks and branch-output checks against
torch's, gradients through the chosen code, and vmap (a batched predicate decides per
sample) with and without ``grad``."""
import inspect
import json
import subprocess
import sys
import textwrap

import pytest

import microtensor as mt

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (optional "
                                                       "test oracle)")


def fresh_torch(source, **values):
    """``result`` as ``source`` computes it in a fresh Python with PyTorch (``values``
    given as globals): PyTorch's cond and while_loop run its compiler, which changes
    process-wide settings (distribution argument validation, gradient layouts) that later
    tests would see."""
    code = (f"import json, torch\nglobals().update(json.loads({json.dumps(values)!r}))\n" +
            textwrap.dedent(source) + "\nprint(json.dumps(result))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=600, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def outcome(fn):
    try:
        return "ok", fn()
    except Exception as exc:   # noqa: BLE001  (compared with PyTorch's)
        return type(exc).__name__, str(exc)


@needs_torch
def test_signatures_as_torch():
    assert list(inspect.signature(mt.cond).parameters) == \
        list(inspect.signature(torch.cond).parameters)
    assert inspect.signature(mt.cond).parameters["operands"].default == ()
    assert list(inspect.signature(mt.while_loop).parameters) == \
        list(inspect.signature(torch.while_loop).parameters)


COND_SOURCE = """
def run(lib, sign):
    x = lib.tensor([0.5, -1.0, 2.0], requires_grad=True)
    y = lib.tensor(3.0, requires_grad=True)
    out = lib.cond(x.sum() * sign > 0, lambda a, b: {"v": a.sin() * b},
                   lambda a, b: {"v": a.cos() + b}, (x, y))
    out["v"].sum().backward()
    plain = lib.cond(True, lambda: lib.tensor(1.0) + 0, lambda: lib.tensor(2.0) + 0).item()
    return out["v"].tolist() + x.grad.tolist() + [y.grad.item(), plain]
"""


@needs_torch
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_cond_values_and_gradients_as_torch(sign):
    """Values and gradients through the taken branch; a Python bool and no operands."""
    namespace = {}
    exec(COND_SOURCE, namespace)
    ours = namespace["run"](mt, sign)
    theirs = fresh_torch(COND_SOURCE + "result = run(torch, sign)", sign=sign)
    assert ours == pytest.approx(theirs)


CHECKS = [
    lambda lib: lib.cond(lib.tensor([True, False]), lambda a: a + 1, lambda a: a + 2,
                         (lib.tensor(1.0),)),
    lambda lib: lib.cond(lib.tensor(True), lambda a: a + 1, lambda a: a + 2,
                         lib.tensor([1.0, 2.0])),
    lambda lib: lib.cond(lib.tensor(True), lambda a: a + 1, lambda a: a + 2, (3,)),
    lambda lib: lib.cond("yes", lambda a: a + 1, lambda a: a + 2, (lib.tensor(1.0),)),
    lambda lib: lib.cond(lib.tensor(True), 1, lambda a: a + 2, (lib.tensor(1.0),)),
]


@needs_torch
@pytest.mark.parametrize("case", range(len(CHECKS)))
def test_cond_argument_checks_as_torch(case):
    ours, theirs = outcome(lambda: CHECKS[case](mt)), outcome(lambda: CHECKS[case](torch))
    assert ours == theirs and ours[0] == "RuntimeError"


@pytest.mark.parametrize("false_fn, message", [
    (lambda a: (a + 1, a + 2), "same number of outputs"),
    (lambda a: [a + 1], "Unmatched output spec"),
    (lambda a: (a + 1).long(), "expected same dtype"),
    (lambda a: (a + 1).sum(), "expected same dim"),
])
@pytest.mark.parametrize("pred", [True, False])
def test_cond_branches_must_match(false_fn, message, pred):
    """Refused whichever branch is taken (PyTorch traces both)."""
    with pytest.raises(RuntimeError, match=message):
        mt.cond(mt.tensor(pred), lambda a: a + 1, false_fn, (mt.ones(2),))


def test_cond_runs_the_untaken_branch_without_recording():
    x = mt.ones(2, requires_grad=True)
    seen = []

    def record(a):
        seen.append(a.requires_grad and mt.is_grad_enabled())
        return a * 2
    mt.cond(True, lambda a: a * 3, record, (x,))
    assert seen == [False]


@needs_torch
def test_cond_under_vmap_as_torch():
    """A batched predicate: both branches run and ``where`` picks per sample."""
    rows = [[1.0, 2.0], [-3.0, -4.0], [5.0, -9.0]]
    ours = mt.vmap(lambda a: mt.cond(a.sum() > 0, lambda b: b * 10, lambda b: b - 100,
                                     (a,)))(mt.tensor(rows))
    theirs = fresh_torch("""
        result = torch.func.vmap(lambda a: torch.cond(
            a.sum() > 0, lambda b: b * 10, lambda b: b - 100, (a,)))(torch.tensor(rows)).tolist()
    """, rows=rows)
    assert ours.tolist() == theirs


def test_cond_vmap_of_grad_and_grad_of_vmap():
    rows = mt.tensor([[1.0, 2.0], [-3.0, -4.0], [5.0, -9.0]])

    def f(a):
        return mt.cond(a.sum() > 0, lambda b: (b ** 2).sum(), lambda b: (3 * b).sum(), (a,))
    per_sample = mt.vmap(mt.func.grad(f))(rows)
    assert per_sample.tolist() == [[2.0, 4.0], [3.0, 3.0], [3.0, 3.0]]
    total = mt.func.grad(lambda r: mt.vmap(f)(r).sum())(rows)
    assert mt.equal(total, per_sample)


LOOP_SOURCE = """
def run(lib, loop):
    start = lib.tensor(1.0)
    out = loop(lambda i, v: i < 5, lambda i, v: (i + 1, v * 2), (lib.tensor(0), start))
    never = loop(lambda i, v: i < 0, lambda i, v: (i + 1, v * 2), (lib.tensor(0), start))
    try:
        loop(lambda i: i, lambda i: (i + 1,), (lib.tensor(0),))   # not a bool predicate
        refused = False
    except RuntimeError:
        refused = True
    return [type(out).__name__, [t.item() for t in out], [t.item() for t in never],
            never[1] is not start, refused]
"""


@needs_torch
def test_while_loop_as_torch():
    namespace = {}
    exec(LOOP_SOURCE, namespace)
    ours = namespace["run"](mt, mt.while_loop)
    theirs = fresh_torch(LOOP_SOURCE + "result = run(torch, torch.while_loop)")
    assert ours == theirs


@needs_torch
def test_while_loop_refuses_a_non_callable_as_torch():
    for lib, loop in ((mt, mt.while_loop), (torch, torch.while_loop)):
        with pytest.raises(RuntimeError, match="Expect cond_fn and body_fn to be callable"):
            loop(1, lambda i: (i + 1,), (lib.tensor(0),))


def test_while_loop_body_must_keep_the_structure():
    with pytest.raises(RuntimeError, match="carried_inputs must be a tuple or list"):
        mt.while_loop(lambda i: i < 3, lambda i: (i + 1,), mt.tensor(0))
    with pytest.raises(RuntimeError, match="same number of elements"):
        mt.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1,), (mt.tensor(0), mt.ones(1)))
    with pytest.raises(RuntimeError, match="should return a tuple"):
        mt.while_loop(lambda i: i < 3, lambda i: [i + 1], (mt.tensor(0),))


def test_while_loop_gradient():
    x = mt.tensor(1.5, requires_grad=True)
    _, y = mt.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, v * x), (mt.tensor(0), x))
    y.backward()
    assert x.grad.item() == pytest.approx(4 * 1.5 ** 3)


def test_while_loop_under_vmap_stops_each_sample_at_its_own_step():
    limits = mt.tensor([0, 3, 5])
    steps, values = mt.vmap(lambda n: mt.while_loop(
        lambda i, v: i < n, lambda i, v: (i + 1, v * 2), (mt.tensor(0), mt.tensor(1.0))))(limits)
    assert steps.tolist() == [0, 3, 5] and values.tolist() == [1.0, 8.0, 32.0]
    grads = mt.vmap(mt.func.grad(lambda x, n: mt.while_loop(
        lambda i, v: i < n, lambda i, v: (i + 1, v * x), (mt.tensor(0), mt.tensor(1.0)))[1]))(
        mt.tensor([2.0, 2.0, 3.0]), limits)
    assert grads.tolist() == [0.0, 3 * 2.0 ** 2, 5 * 3.0 ** 4]
