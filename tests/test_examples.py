"""The scripts in examples/ and the ``python -m microtensor demo`` main job run, check
what they claim (each script asserts its own results) and finish quickly."""
import os
import runpy
import subprocess
import sys

import pytest

import microtensor
from microtensor import _demo

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")
SCRIPTS = sorted(f for f in os.listdir(EXAMPLES) if f.endswith(".py"))


def test_there_are_examples():
    assert {"per_sample_gradients.py", "jacobian_hessian.py", "batched_gradients_inplace.py",
            "training_loop.py"} <= set(SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_example_runs(script, capsys):
    runpy.run_path(os.path.join(EXAMPLES, script), run_name="__main__")
    assert capsys.readouterr().out.strip()


def test_demo_trains_and_checks_against_the_loop(capsys):
    code = _demo.main(["--steps", "40", "--batch-size", "32", "--train-size", "1024",
                       "--test-size", "512", "--loop-steps", "1", "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0
    assert "test accuracy" in out
    accuracy = float(out.split("test accuracy:")[1].split()[0])
    assert accuracy > 0.6
    assert "equals the loop: yes" in out
    assert "Python loop" in out and "ms/step" in out
    try:
        import dp_accounting  # noqa: F401
    except ImportError:
        assert "pip install 'microtensor[privacy]'" in out
    else:
        # 40 steps of Poisson batches at 32 / 1024, noise x1.0 (the default)
        expected = microtensor.privacy.get_epsilon(noise_multiplier=1.0, sample_rate=1 / 32,
                                                   steps=40, delta=1e-5, accountant="prv")
        assert float(out.split("epsilon =")[1].split()[0]) == pytest.approx(expected,
                                                                             abs=0.006)
        assert "delta = 1e-5" in out


def test_demo_help_documents_its_options():
    # the subprocess imports the same microtensor as this test (installed or built in place)
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(microtensor.__file__)))
    result = subprocess.run([sys.executable, "-m", "microtensor", "demo", "--help"],
                            capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0
    for option in ("--steps", "--batch-size", "--noise-multiplier", "--clip-norm", "--seed",
                   "--clipping", "--accountant"):
        assert option in result.stdout
