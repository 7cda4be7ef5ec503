"""Recurrent layers: ``RNNCell``/``LSTMCell``/``GRUCell`` and ``RNN``/``LSTM``/``GRU``, with
PyTorch's arguments, parameter names, gate order, shapes, default initialisation and repr
(a PyTorch ``state_dict`` loads unchanged).

Each step is a few composite ops (``linear``, ``sigmoid``/``tanh``/``relu``, ``chunk``), all
with derivatives and batching rules, so autograd, ``vmap`` and per-sample gradients work
through them; a layer projects its input for every time step with one ``linear`` and loops
over time in Python, as PyTorch's eager reference does."""
import math
import numbers
import warnings

from microtensor.nn import functional as F
from microtensor.nn import init
from microtensor.nn.modules import Module
from microtensor.nn.parameter import Parameter

__all__ = ["RNNCell", "LSTMCell", "GRUCell", "RNN", "LSTM", "GRU"]

_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


def _rnn_step(activation):
    def step(x_proj, h, w_hh, b_hh):
        return activation(x_proj + F.linear(h, w_hh, b_hh))
    return step


def _lstm_step(x_proj, state, w_hh, b_hh):
    h, c = state
    i, f, g, o = (x_proj + F.linear(h, w_hh, b_hh)).chunk(4, -1)
    c = i.sigmoid() * g.tanh() + f.sigmoid() * c
    return o.sigmoid() * c.tanh(), c


def _gru_step(x_proj, h, w_hh, b_hh):
    x_r, x_z, x_n = x_proj.chunk(3, -1)
    h_r, h_z, h_n = F.linear(h, w_hh, b_hh).chunk(3, -1)
    r = (x_r + h_r).sigmoid()
    z = (x_z + h_z).sigmoid()
    n = (x_n + r * h_n).tanh()
    return n + z * (h - n)


_STEPS = {"RNN_TANH": _rnn_step(lambda t: t.tanh()), "RNN_RELU": _rnn_step(lambda t: t.relu()),
          "LSTM": _lstm_step, "GRU": _gru_step}


def _zeros(shape, like):
    from microtensor.ops.factory import zeros
    return zeros(*shape, dtype=like.dtype, device=like.device)


def _check_nonlinearity(nonlinearity):
    if nonlinearity not in ("tanh", "relu"):
        raise ValueError(f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or 'relu'.")
    return "RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU"


def _uniform_init(module):
    """PyTorch's default for recurrent layers: every parameter ~ U(-1/sqrt(H), 1/sqrt(H))."""
    stdv = 1.0 / math.sqrt(module.hidden_size) if module.hidden_size > 0 else 0
    for weight in module.parameters():
        init.uniform_(weight, -stdv, stdv)


class _RNNCellBase(Module):
    """One time step: parameters ``weight_ih``, ``weight_hh``, ``bias_ih``, ``bias_hh``."""

    _name = None

    def __init__(self, input_size, hidden_size, bias, mode, device=None, dtype=None):
        super().__init__()
        from microtensor.ops.factory import empty
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.bias = bias
        self._mode = mode
        gate_size = _GATES[mode] * hidden_size
        kw = {"dtype": dtype, "device": device}
        self.weight_ih = Parameter(empty(gate_size, input_size, **kw))
        self.weight_hh = Parameter(empty(gate_size, hidden_size, **kw))
        if bias:
            self.bias_ih = Parameter(empty(gate_size, **kw))
            self.bias_hh = Parameter(empty(gate_size, **kw))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def reset_parameters(self):
        _uniform_init(self)

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if getattr(self, "nonlinearity", "tanh") != "tanh":
            s += f", nonlinearity={self.nonlinearity}"
        return s

    def _check_dim(self, tensor, what):
        if tensor.dim() not in (1, 2):
            raise ValueError(f"{self._name}: Expected {what} to be 1D or 2D, got "
                             f"{tensor.dim()}D instead")

    def _check_sizes(self, input, states):
        if input.shape[-1] != self.input_size:
            raise RuntimeError(f"input has inconsistent input_size: got {input.shape[-1]} "
                               f"expected {self.input_size}")
        for i, h in enumerate(states):
            if h.shape[0] != input.shape[0]:
                raise RuntimeError(f"Input batch size {input.shape[0]} doesn't match hidden{i} "
                                   f"batch size {h.shape[0]}")
            if h.shape[1] != self.hidden_size:
                raise RuntimeError(f"hidden{i} has inconsistent hidden_size: got {h.shape[1]}, "
                                   f"expected {self.hidden_size}")

    def _run(self, input, states):
        """Checks, adds the batch dimension of unbatched input, steps once, removes it."""
        self._check_dim(input, "input")
        batched = input.dim() == 2
        if not batched:
            input = input.unsqueeze(0)
            states = [h.unsqueeze(0) for h in states]
        if not states:
            zeros = _zeros((input.shape[0], self.hidden_size), input)
            states = [zeros] * (2 if self._mode == "LSTM" else 1)
        self._check_sizes(input, states)
        x_proj = F.linear(input, self.weight_ih, self.bias_ih)
        state = tuple(states) if self._mode == "LSTM" else states[0]
        out = _STEPS[self._mode](x_proj, state, self.weight_hh, self.bias_hh)
        if not batched:
            out = tuple(h.squeeze(0) for h in out) if self._mode == "LSTM" else out.squeeze(0)
        return out


class RNNCell(_RNNCellBase):
    """``h' = tanh(W_ih x + b_ih + W_hh h + b_hh)`` (or relu)."""

    _name = "RNNCell"

    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh", device=None,
                 dtype=None):
        mode = _check_nonlinearity(nonlinearity)
        self.nonlinearity = nonlinearity
        super().__init__(input_size, hidden_size, bias, mode, device, dtype)

    def forward(self, input, hx=None):
        if hx is not None:
            self._check_dim(hx, "hidden")
        return self._run(input, [] if hx is None else [hx])


class LSTMCell(_RNNCellBase):
    """One LSTM step; gates stacked as PyTorch's (input, forget, cell, output); returns
    ``(h', c')``."""

    _name = "LSTMCell"

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, "LSTM", device, dtype)

    def forward(self, input, hx=None):
        if hx is not None:
            for i, h in enumerate(hx):
                self._check_dim(h, f"hx[{i}]")
        return self._run(input, [] if hx is None else list(hx))


class GRUCell(_RNNCellBase):
    """One GRU step; gates stacked as PyTorch's (reset, update, new), with
    ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``."""

    _name = "GRUCell"

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, "GRU", device, dtype)

    def forward(self, input, hx=None):
        if hx is not None:
            self._check_dim(hx, "hidden")
        return self._run(input, [] if hx is None else [hx])


class RNNBase(Module):
    """Stacked, optionally bidirectional recurrent layers over a sequence; parameters named
    ``weight_ih_l{k}``, ``weight_hh_l{k}``, ``bias_ih_l{k}``, ``bias_hh_l{k}`` (suffix
    ``_reverse`` for the backward direction), registered in PyTorch's order."""

    def __init__(self, mode, input_size, hidden_size, num_layers=1, bias=True,
                 batch_first=False, dropout=0.0, bidirectional=False, proj_size=0,
                 device=None, dtype=None):
        super().__init__()
        from microtensor.ops.factory import empty
        if (not isinstance(dropout, numbers.Number) or isinstance(dropout, bool)
                or not 0 <= dropout <= 1):
            raise ValueError("dropout should be a number in range [0, 1] representing the "
                             "probability of an element being zeroed")
        if dropout > 0 and num_layers == 1:
            warnings.warn("dropout option adds dropout after all but last recurrent layer, so "
                          "non-zero dropout expects num_layers greater than 1, but got "
                          f"dropout={dropout} and num_layers={num_layers}", stacklevel=3)
        for name, value, kind in (("bias", bias, bool), ("batch_first", batch_first, bool),
                                  ("input_size", input_size, int),
                                  ("hidden_size", hidden_size, int)):
            if not isinstance(value, kind):
                raise TypeError(f"{name} should be of type {kind.__name__}, got: "
                                f"{type(value).__name__}")
        if input_size <= 0:
            raise ValueError("input_size must be greater than zero")
        if hidden_size <= 0:
            raise ValueError("hidden_size must be greater than zero")
        if num_layers <= 0:
            raise ValueError("num_layers must be greater than zero")
        if proj_size < 0:
            raise ValueError("proj_size should be a positive integer or zero to disable "
                             "projections")
        if proj_size >= hidden_size:
            raise ValueError("proj_size has to be smaller than hidden_size")
        self.mode = mode
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bias = bias
        self.batch_first = batch_first
        self.dropout = float(dropout)
        self.bidirectional = bidirectional
        self.proj_size = proj_size
        num_directions = 2 if bidirectional else 1
        gate_size = _GATES[mode] * hidden_size
        real_hidden_size = proj_size or hidden_size      # the size of h, projected or not
        kw = {"dtype": dtype, "device": device}
        self._flat_weights_names = []
        for layer in range(num_layers):
            layer_input = input_size if layer == 0 else real_hidden_size * num_directions
            for suffix in ("", "_reverse")[:num_directions]:
                params = [("weight_ih", (gate_size, layer_input)),
                          ("weight_hh", (gate_size, real_hidden_size))]
                if bias:
                    params += [("bias_ih", (gate_size,)), ("bias_hh", (gate_size,))]
                if proj_size:
                    params.append(("weight_hr", (proj_size, hidden_size)))
                for name, shape in params:
                    full = f"{name}_l{layer}{suffix}"
                    setattr(self, full, Parameter(empty(*shape, **kw)))
                    self._flat_weights_names.append(full)
        self.reset_parameters()

    def reset_parameters(self):
        _uniform_init(self)

    def flatten_parameters(self):
        """Nothing to do: the weights are used where they are (PyTorch compacts them for
        cuDNN)."""

    @property
    def _flat_weights(self):
        return [getattr(self, name) for name in self._flat_weights_names]

    @property
    def all_weights(self):
        per = (4 if self.bias else 2) + (1 if self.proj_size else 0)
        flat = self._flat_weights
        return [flat[i:i + per] for i in range(0, len(flat), per)]

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size != 0:
            s += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if self.batch_first is not False:
            s += f", batch_first={self.batch_first}"
        if self.dropout != 0:
            s += f", dropout={self.dropout}"
        if self.bidirectional is not False:
            s += f", bidirectional={self.bidirectional}"
        return s

    def _prepare(self, input, hx):
        """Checks ``input`` and the initial states ``hx`` (a list, empty for zeros) as
        PyTorch does; returns the input as (L, N, H_in), the states as (D*layers, N, H)
        (h of size proj_size for an LSTM with projections) and whether the input was
        batched."""
        from microtensor._tensor import Tensor
        name = type(self).__name__
        if not isinstance(input, Tensor):
            raise TypeError(f"{name}: input must be a Tensor (PackedSequence is not supported "
                            f"yet), got {type(input).__name__}")
        if input.dim() not in (2, 3):
            raise ValueError(f"{name}: Expected input to be 2D or 3D, got {input.dim()}D "
                             f"{'tensor ' if self.mode.startswith('RNN') else ''}instead")
        batched = input.dim() == 3
        if hx:
            want = 3 if batched else 2
            if any(h.dim() != want for h in hx):
                kind = "batched 3-D" if batched else "unbatched 2-D"
                if len(hx) == 1:
                    raise RuntimeError(f"For {kind} input, hx should also be {want}-D but got "
                                       f"{hx[0].dim()}-D tensor")
                raise RuntimeError(f"For {kind} input, hx and cx should also be {want}-D but "
                                   f"got ({hx[0].dim()}-D, {hx[1].dim()}-D) tensors")
        if not batched:
            input = input.unsqueeze(1)
            hx = [h.unsqueeze(1) for h in hx]
        elif self.batch_first:
            input = input.transpose(0, 1)
        if input.dtype != self.weight_ih_l0.dtype:
            raise ValueError(f"RNN input dtype ({input.dtype}) does not match weight dtype "
                             f"({self.weight_ih_l0.dtype}). Convert input: "
                             f"input.to({self.weight_ih_l0.dtype}), or convert model: "
                             f"model.to({input.dtype})")
        if input.shape[-1] != self.input_size:
            raise RuntimeError(f"input.size(-1) must be equal to input_size. Expected "
                               f"{self.input_size}, got {input.shape[-1]}")
        lead = ((2 if self.bidirectional else 1) * self.num_layers, input.shape[1])
        expected = [lead + (self.proj_size or self.hidden_size,), lead + (self.hidden_size,)]
        names = ("hidden[0]", "hidden[1]") if self.mode == "LSTM" else ("hidden",)
        if not hx:
            hx = [_zeros(shape, input) for shape in expected[:len(names)]]
        for which, h, shape in zip(names, hx, expected):
            if tuple(h.shape) != shape:
                raise RuntimeError(f"Expected {which} size {shape}, got {list(h.shape)}")
        return input, hx, batched

    def _forward(self, input, hx):
        from microtensor.ops.shape import cat, stack
        input, hx, batched = self._prepare(input, hx)
        step = _STEPS[self.mode]
        lstm = self.mode == "LSTM"
        num_directions = 2 if self.bidirectional else 1
        finals = []
        x = input
        for layer in range(self.num_layers):
            outputs = []
            for direction in range(num_directions):
                suffix = "_reverse" if direction else ""
                k = layer * num_directions + direction
                w_ih, w_hh = (getattr(self, f"weight_{w}_l{layer}{suffix}") for w in ("ih", "hh"))
                b_ih, b_hh = ((getattr(self, f"bias_{w}_l{layer}{suffix}") for w in ("ih", "hh"))
                              if self.bias else (None, None))
                w_hr = getattr(self, f"weight_hr_l{layer}{suffix}") if self.proj_size else None
                state = tuple(h[k] for h in hx) if lstm else hx[0][k]
                steps = F.linear(x, w_ih, b_ih).unbind(0)
                seq = []
                for x_proj in (reversed(steps) if direction else steps):
                    state = step(x_proj, state, w_hh, b_hh)
                    if w_hr is not None:
                        state = (F.linear(state[0], w_hr), state[1])
                    seq.append(state[0] if lstm else state)
                if direction:
                    seq.reverse()
                outputs.append(stack(seq))
                finals.append(state)
            x = outputs[0] if num_directions == 1 else cat(outputs, -1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, True)
        if lstm:
            h_n = (stack([s[0] for s in finals]), stack([s[1] for s in finals]))
        else:
            h_n = stack(finals)
        if not batched:
            x = x.squeeze(1)
            h_n = tuple(h.squeeze(1) for h in h_n) if lstm else h_n.squeeze(1)
        elif self.batch_first:
            x = x.transpose(0, 1)
        return x, h_n


_NO_PROJ = "proj_size argument is only supported for LSTM, not RNN or GRU"


class RNN(RNNBase):
    """Elman RNN: ``h_t = tanh(W_ih x_t + b_ih + W_hh h_{t-1} + b_hh)`` (or relu); returns
    ``(output, h_n)``."""

    def __init__(self, input_size, hidden_size, num_layers=1, nonlinearity="tanh", bias=True,
                 batch_first=False, dropout=0.0, bidirectional=False, device=None, dtype=None,
                 *, proj_size=None):
        if proj_size is not None:
            raise ValueError(_NO_PROJ)
        self.nonlinearity = nonlinearity
        super().__init__(_check_nonlinearity(nonlinearity), input_size, hidden_size, num_layers,
                         bias, batch_first, dropout, bidirectional, 0, device, dtype)

    def forward(self, input, hx=None):
        return self._forward(input, [] if hx is None else [hx])


class LSTM(RNNBase):
    """LSTM over a sequence (gates i, f, g, o); returns ``(output, (h_n, c_n))``.  With
    ``proj_size > 0`` each step's h is projected by ``weight_hr_l{k}`` (proj_size,
    hidden_size), so h, the output and the next layer's input have proj_size features."""

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, proj_size=0, device=None, dtype=None):
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, proj_size, device, dtype)

    def forward(self, input, hx=None):
        return self._forward(input, [] if hx is None else list(hx))


class GRU(RNNBase):
    """GRU over a sequence (gates r, z, n); returns ``(output, h_n)``."""

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, device=None, dtype=None, *, proj_size=None):
        if proj_size is not None:
            raise ValueError(_NO_PROJ)
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, 0, device, dtype)

    def forward(self, input, hx=None):
        return self._forward(input, [] if hx is None else [hx])
