"""Optimizers and learning-rate schedulers with ``torch.optim``'s API: parameter groups,
``state_dict``/``load_state_dict`` in PyTorch's layout, ``maximize``, and PyTorch's update
rules (single-tensor: ``foreach``/``fused``/``capturable`` are accepted and kept, and select
no other code; ``differentiable`` records the step for autograd)."""
from microtensor.optim import lr_scheduler, swa_utils
from microtensor.optim.adadelta import Adadelta
from microtensor.optim.adafactor import Adafactor
from microtensor.optim.adagrad import Adagrad
from microtensor.optim.adam import Adam, AdamW
from microtensor.optim.adamax import Adamax
from microtensor.optim.asgd import ASGD
from microtensor.optim.lbfgs import LBFGS
from microtensor.optim.muon import Muon
from microtensor.optim.nadam import NAdam
from microtensor.optim.optimizer import Optimizer
from microtensor.optim.radam import RAdam
from microtensor.optim.rmsprop import RMSprop
from microtensor.optim.rprop import Rprop
from microtensor.optim.sgd import SGD
from microtensor.optim.sparse_adam import SparseAdam

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "Adamax", "NAdam", "RAdam", "RMSprop",
           "Adagrad", "Adadelta", "LBFGS", "lr_scheduler"]
__all__ += ["Rprop", "ASGD", "Adafactor", "SparseAdam", "Muon", "swa_utils"]
