"""Recurrent layers: ``RNNCell``/``LSTMCell``/``GRUCell`` (on ``RNNCellBase``) and
``RNN``/``LSTM``/``GRU`` (on ``RNNBase``), with PyTorch's arguments, parameter names, gate
order, shapes, default initialisation and repr (a PyTorch ``state_dict`` loads unchanged).
The sequence layers take a padded tensor or a ``PackedSequence`` of variable-length
sequences.

Each step is a few composite ops (``linear``, ``sigmoid``/``tanh``/``relu``, ``chunk``), all
with derivatives and batching rules, so autograd, ``vmap`` and per-sample gradients work
through them; a layer projects its input for every time step with one ``linear`` and loops
over time in Python, as PyTorch's eager reference does.  On a ``PackedSequence`` (sequences
sorted by decreasing length) step t advances the first ``batch_sizes[t]`` sequences only:
going forwards the batch shrinks as sequences end, backwards it grows as they begin."""
import math
import numbers
import warnings

from microtensor.nn import functional as F
from microtensor.nn import init
from microtensor.nn.modules import Module
from microtensor.nn.parameter import Parameter

__all__ = ["RNNCellBase", "RNNCell", "LSTMCell", "GRUCell", "RNNBase", "RNN", "LSTM", "GRU"]

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


class RNNCellBase(Module):
    """One time step: parameters ``weight_ih``, ``weight_hh`` and ``bias_ih``, ``bias_hh``
    with ``num_chunks * hidden_size`` rows (one block per gate).  A subclass names its
    step in ``_mode`` (a key of ``_STEPS``) and its error messages in ``_name``."""

    _name = None
    _mode = None

    def __init__(self, input_size, hidden_size, bias, num_chunks, device=None, dtype=None):
        super().__init__()
        from microtensor.ops.factory import empty
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.bias = bias
        gate_size = num_chunks * hidden_size
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


class RNNCell(RNNCellBase):
    """``h' = tanh(W_ih x + b_ih + W_hh h + b_hh)`` (or relu)."""

    _name = "RNNCell"

    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh", device=None,
                 dtype=None):
        self._mode = _check_nonlinearity(nonlinearity)
        self.nonlinearity = nonlinearity
        super().__init__(input_size, hidden_size, bias, 1, device, dtype)

    def forward(self, input, hx=None):
        if hx is not None:
            self._check_dim(hx, "hidden")
        return self._run(input, [] if hx is None else [hx])


class LSTMCell(RNNCellBase):
    """One LSTM step; gates stacked as PyTorch's (input, forget, cell, output); returns
    ``(h', c')``."""

    _name = "LSTMCell"
    _mode = "LSTM"

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, 4, device, dtype)

    def forward(self, input, hx=None):
        if hx is not None:
            for i, h in enumerate(hx):
                self._check_dim(h, f"hx[{i}]")
        return self._run(input, [] if hx is None else list(hx))


class GRUCell(RNNCellBase):
    """One GRU step; gates stacked as PyTorch's (reset, update, new), with
    ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``."""

    _name = "GRUCell"
    _mode = "GRU"

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, 3, device, dtype)

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
        if mode not in _GATES:
            raise ValueError("Unrecognized RNN mode: " + mode)
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
        """Checks the padded ``input`` and the initial states ``hx`` (a list, empty for
        zeros) as PyTorch does; returns the input as (L, N, H_in), the states as
        (D*layers, N, H) (h of size proj_size for an LSTM with projections) and whether the
        input was batched."""
        from microtensor._tensor import Tensor
        name = type(self).__name__
        if not isinstance(input, Tensor):
            raise TypeError(f"{name}: input must be a Tensor or a PackedSequence, got "
                            f"{type(input).__name__}")
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
        return input, self._check_forward_args(input, hx, input.shape[1]), batched

    def _check_forward_args(self, input, hx, batch_size, input_dims=3):
        """PyTorch's checks of the time-major (3-D) or packed (2-D) ``input`` and of the
        initial states against ``batch_size``; returns the states (zeros when ``hx`` is
        empty)."""
        if input.dtype != self.weight_ih_l0.dtype:
            raise ValueError(f"RNN input dtype ({input.dtype}) does not match weight dtype "
                             f"({self.weight_ih_l0.dtype}). Convert input: "
                             f"input.to({self.weight_ih_l0.dtype}), or convert model: "
                             f"model.to({input.dtype})")
        if input.dim() != input_dims:
            raise RuntimeError(f"input must have {input_dims} dimensions, got {input.dim()}")
        if input.shape[-1] != self.input_size:
            raise RuntimeError(f"input.size(-1) must be equal to input_size. Expected "
                               f"{self.input_size}, got {input.shape[-1]}")
        lead = ((2 if self.bidirectional else 1) * self.num_layers, batch_size)
        expected = [lead + (self.proj_size or self.hidden_size,), lead + (self.hidden_size,)]
        names = ("hidden[0]", "hidden[1]") if self.mode == "LSTM" else ("hidden",)
        if not hx:
            hx = [_zeros(shape, input) for shape in expected[:len(names)]]
        for which, h, shape in zip(names, hx, expected):
            if tuple(h.shape) != shape:
                raise RuntimeError(f"Expected {which} size {shape}, got {list(h.shape)}")
        return hx

    def _forward(self, input, hx):
        from microtensor.nn.utils.rnn import PackedSequence
        if isinstance(input, PackedSequence):
            return self._forward_packed(input, hx)
        input, hx, batched = self._prepare(input, hx)
        x, h_n = self._layers(input, hx, None)
        if not batched:
            x = x.squeeze(1)
            h_n = tuple(h.squeeze(1) for h in h_n) if self.mode == "LSTM" else h_n.squeeze(1)
        elif self.batch_first:
            x = x.transpose(0, 1)
        return x, h_n

    def _forward_packed(self, input, hx):
        """As PyTorch: the states in ``hx`` follow the caller's batch order, so they are
        put in the packed (sorted) order on the way in and back on the way out."""
        from microtensor.nn.utils.rnn import PackedSequence
        data, batch_sizes, sorted_indices, unsorted_indices = input
        if sorted_indices is not None:
            hx = [h.index_select(1, sorted_indices) for h in hx]
        hx = self._check_forward_args(data, hx, batch_sizes[0].item(), input_dims=2)
        x, h_n = self._layers(data, hx, batch_sizes.tolist())
        if unsorted_indices is not None:
            h_n = (tuple(h.index_select(1, unsorted_indices) for h in h_n)
                   if self.mode == "LSTM" else h_n.index_select(1, unsorted_indices))
        return PackedSequence(x, batch_sizes, sorted_indices, unsorted_indices), h_n

    def _layers(self, x, hx, batch_sizes):
        """Runs every layer and direction over ``x`` (time-major (L, N, H_in), or packed
        rows when ``batch_sizes`` lists the packed batch sizes) from the states ``hx``;
        returns the last layer's output and the final states stacked as ``hx``."""
        from microtensor.ops.shape import cat, stack
        lstm = self.mode == "LSTM"
        num_directions = 2 if self.bidirectional else 1
        finals = []
        for layer in range(self.num_layers):
            outputs = []
            for direction in range(num_directions):
                k = layer * num_directions + direction
                state = tuple(h[k] for h in hx) if lstm else hx[0][k]
                output, state = self._direction(x, state, layer, direction, batch_sizes)
                outputs.append(output)
                finals.append(state)
            x = outputs[0] if num_directions == 1 else cat(outputs, -1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, True)
        if lstm:
            return x, (stack([s[0] for s in finals]), stack([s[1] for s in finals]))
        return x, stack(finals)

    def _direction(self, x, state, layer, direction, batch_sizes):
        """One direction of one layer: returns its output for every step, as ``x`` is laid
        out, and the final state of every sequence."""
        from microtensor.ops.shape import cat, stack
        suffix = "_reverse" if direction else ""
        w_ih, w_hh = (getattr(self, f"weight_{w}_l{layer}{suffix}") for w in ("ih", "hh"))
        b_ih, b_hh = ((getattr(self, f"bias_{w}_l{layer}{suffix}") for w in ("ih", "hh"))
                      if self.bias else (None, None))
        w_hr = getattr(self, f"weight_hr_l{layer}{suffix}") if self.proj_size else None
        step = _STEPS[self.mode]
        lstm = self.mode == "LSTM"

        def advance(x_proj, state):
            state = step(x_proj, state, w_hh, b_hh)
            if w_hr is not None:
                state = (F.linear(state[0], w_hr), state[1])
            return state

        x_proj = F.linear(x, w_ih, b_ih)
        seq = []
        if batch_sizes is None:
            steps = x_proj.unbind(0)
            for x_t in (reversed(steps) if direction else steps):
                state = advance(x_t, state)
                seq.append(state[0] if lstm else state)
            if direction:
                seq.reverse()
            return stack(seq), state
        steps = x_proj.split(batch_sizes)
        if direction:       # a sequence joins at its last step, from its initial state
            initial, batch = state, batch_sizes[-1]
            state = _state_rows(initial, 0, batch)
            for x_t, size in zip(reversed(steps), reversed(batch_sizes)):
                if size > batch:
                    state = _state_cat([state, _state_rows(initial, batch, size)])
                    batch = size
                state = advance(x_t, state)
                seq.append(state[0] if lstm else state)
            seq.reverse()
            return cat(seq), state
        ended, batch = [], batch_sizes[0]   # the final states of the sequences that ended
        for x_t, size in zip(steps, batch_sizes):
            if size < batch:
                ended.append(_state_rows(state, size, batch))
                state, batch = _state_rows(state, 0, size), size
            state = advance(x_t, state)
            seq.append(state[0] if lstm else state)
        ended.append(state)
        return cat(seq), _state_cat(ended[::-1])


def _state_rows(state, start, stop):
    """Rows ``start:stop`` (sequences) of a state: h, or (h, c) for an LSTM."""
    if isinstance(state, tuple):
        return tuple(s[start:stop] for s in state)
    return state[start:stop]


def _state_cat(states):
    """States of consecutive groups of sequences joined into one."""
    from microtensor.ops.shape import cat
    if isinstance(states[0], tuple):
        return tuple(cat(parts) for parts in zip(*states))
    return cat(states)


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
