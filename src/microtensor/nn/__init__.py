"""Neural-network building blocks, just enough for real use: ``Module``, ``Parameter``,
layers, and ``functional`` (losses and activations)."""
from microtensor.nn import functional, init
from microtensor.nn.modules import (Dropout, Embedding, Identity, Linear, Module, ReLU,
                                    Sequential, Sigmoid, Tanh)
from microtensor.nn.parameter import Parameter

__all__ = ["Module", "Parameter", "Linear", "Sequential", "ReLU", "Tanh", "Sigmoid",
           "Dropout", "Embedding", "Identity", "functional", "init"]
