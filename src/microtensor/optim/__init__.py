"""Optimizers: ``SGD`` (momentum, weight decay, Nesterov) and ``Adam`` (with AdamW's
decoupled weight decay as an option)."""
from microtensor.optim.optimizer import SGD, Adam, AdamW, Optimizer

__all__ = ["Optimizer", "SGD", "Adam", "AdamW"]
