"""The scripts of PyTorch's "Learning PyTorch with Examples" in examples/pytorch_examples/
run on microtensor with the import renamed, train, and match PyTorch step for step.

Each script is run as written, except for two knobs the test turns in its source text: the
number of training steps (fewer, to stay fast) and, for the comparison, the
``dtype = torch.float`` line (float64, so that both libraries follow the same trajectory to
round-off). Random initial weights come from one NumPy generator for both libraries
(``randn`` and ``nn.Linear.reset_parameters`` are patched), and Python's ``random``, which
drives the dynamic net's control flow, is seeded identically.
"""
import math
import os
import random
import re

import numpy as np
import pytest

import microtensor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples", "pytorch_examples")
SCRIPTS = sorted(f for f in os.listdir(EXAMPLES) if f.endswith(".py"))
IMPORT = "import microtensor as torch\n"
LOOP = re.compile(r"^for t in range\((\d+)\):$", re.MULTILINE)
FLOAT32 = "dtype = torch.float\n"
# The weights each script trains, read from its globals after the run.
WEIGHTS = ("a", "b", "c", "d")


def test_the_tutorial_scripts_are_all_here():
    assert set(SCRIPTS) == {
        "polynomial_tensor.py", "polynomial_autograd.py", "polynomial_custom_function.py",
        "polynomial_nn.py", "polynomial_optim.py", "polynomial_module.py", "dynamic_net.py"}


@pytest.mark.parametrize("script", SCRIPTS)
def test_only_the_import_is_renamed(script):
    code = _source(script).split('"""', 2)[2]  # below the docstring
    assert code.count(IMPORT) == 1
    assert "import torch" not in code
    # the one import is the only mention of microtensor in the code
    assert code.count("microtensor") == 1


def _source(script):
    with open(os.path.join(EXAMPLES, script)) as f:
        return f.read()


def _seeded_randn(lib, rng):
    """``lib.randn`` drawing from ``rng`` (NumPy), so both libraries start alike."""
    def randn(*size, dtype=None, requires_grad=False, **kwargs):
        if len(size) == 1 and isinstance(size[0], (tuple, list)):
            size = tuple(size[0])
        values = rng.standard_normal(size)
        return lib.tensor(values, dtype=dtype or lib.get_default_dtype(),
                          requires_grad=requires_grad)
    return randn


def _seeded_reset_parameters(lib, rng):
    """``nn.Linear.reset_parameters`` with PyTorch's bounds, drawing from ``rng``."""
    def reset_parameters(self):
        bound = 1 / math.sqrt(self.in_features)
        with lib.no_grad():
            for param in (p for p in (self.weight, self.bias) if p is not None):
                values = rng.uniform(-bound, bound, tuple(param.shape))
                param.copy_(lib.tensor(values, dtype=param.dtype))
    return reset_parameters


def run_script(script, lib, monkeypatch, steps, float64=False, seed=0):
    """Run ``script`` on ``lib`` for ``steps`` training steps; return its globals."""
    source = _source(script)
    source = source.replace(IMPORT, f"import {lib.__name__} as torch\n")
    (count,) = LOOP.findall(source)
    source = LOOP.sub(f"for t in range({steps}):", source)
    rng = np.random.default_rng(seed)
    previous_dtype = lib.get_default_dtype()
    if float64:
        source = source.replace(FLOAT32, "dtype = torch.float64\n")
        lib.set_default_dtype(lib.float64)
    random.seed(seed)
    with monkeypatch.context() as patch:
        patch.setattr(lib, "randn", _seeded_randn(lib, rng))
        patch.setattr(lib.nn.Linear, "reset_parameters", _seeded_reset_parameters(lib, rng))
        namespace = {"__name__": "__main__", "__file__": os.path.join(EXAMPLES, script)}
        try:
            exec(compile(source, namespace["__file__"], "exec"), namespace)
        finally:
            lib.set_default_dtype(previous_dtype)
    return namespace


def _trained(namespace):
    """The script's final loss and weights, as NumPy arrays."""
    if "model" in namespace:
        weights = list(namespace["model"].parameters())
    else:
        weights = [namespace[name] for name in WEIGHTS]
    loss = namespace["loss"]
    loss = loss if isinstance(loss, float) else loss.item()
    return loss, [np.array(w.detach().tolist()) for w in weights]


@pytest.mark.parametrize("script", SCRIPTS)
def test_script_trains_on_microtensor(script, monkeypatch, capsys):
    first, _ = _trained(run_script(script, microtensor, monkeypatch, steps=1))
    last, weights = _trained(run_script(script, microtensor, monkeypatch, steps=150))
    assert last < 0.5 * first
    assert all(np.isfinite(w).all() for w in weights)
    out = capsys.readouterr().out
    assert out.splitlines()[-1].startswith("Result: y = ")


@pytest.mark.parametrize("script", SCRIPTS)
@pytest.mark.parametrize("float64", [True, False], ids=["float64", "as_written"])
def test_script_matches_pytorch(script, float64, monkeypatch, capsys):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed: the comparison "
                                "of the tutorial scripts with PyTorch needs it")
    steps = 100
    ours = _trained(run_script(script, microtensor, monkeypatch, steps, float64))
    theirs = _trained(run_script(script, torch, monkeypatch, steps, float64))
    # float64 follows PyTorch's trajectory to round-off; float32 (the tutorial's dtype)
    # to float32 round-off accumulated over the steps.
    rtol, atol = (1e-10, 1e-12) if float64 else (1e-5, 1e-6)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=rtol, atol=atol)
    assert len(ours[1]) == len(theirs[1])
    for mine, reference in zip(ours[1], theirs[1]):
        np.testing.assert_allclose(mine, reference, rtol=rtol, atol=atol)
    out = capsys.readouterr().out
    assert out.count("Result: y = ") == 2
