"""Differentially private training (DP-SGD), as Opacus: per-sample clipping
(``clipped_grad_sum``), the ``PrivacyEngine`` with its ``DPOptimizer`` and Poisson-sampling
``DPDataLoader``, and privacy accounting (``get_epsilon``) through Google's dp-accounting."""
from microtensor.privacy.accountant import (PRVAccountant, RDPAccountant, compute_rdp,
                                            get_epsilon, get_noise_multiplier)
from microtensor.privacy.clipping import clipped_grad_sum
from microtensor.privacy.data import DPDataLoader, UniformWithReplacementSampler
from microtensor.privacy.engine import GradSampleModule, PrivacyEngine, UnsupportedModuleError
from microtensor.privacy.optimizer import DPOptimizer

__all__ = ["DPDataLoader", "DPOptimizer", "GradSampleModule", "PRVAccountant",
           "PrivacyEngine", "RDPAccountant", "UniformWithReplacementSampler",
           "UnsupportedModuleError", "clipped_grad_sum", "compute_rdp", "get_epsilon",
           "get_noise_multiplier"]
