"""Settings shared by microtensor's fuzz tests: by default a fixed (derandomized) number
of examples that keeps the suite fast; ``MICROTENSOR_FUZZ_EXAMPLES=N`` in the environment
runs ``N`` fresh random examples per test instead (a longer hunt, on demand)."""
import os

EXAMPLES = int(os.environ.get("MICROTENSOR_FUZZ_EXAMPLES", "0"))


def examples(ci_examples):
    """How many examples a fuzz test runs: ``ci_examples``, or the number asked for."""
    return EXAMPLES or ci_examples


def fuzz_settings(ci_examples):
    """Hypothesis settings for a fuzz test (no deadline, no health checks: programs vary
    in cost by design; no example database: a run depends on its settings only)."""
    from hypothesis import HealthCheck, settings
    return settings(max_examples=examples(ci_examples), deadline=None,
                    derandomize=not EXAMPLES, database=None,
                    suppress_health_check=list(HealthCheck))
