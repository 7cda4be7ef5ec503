"""``nn.utils.rnn``, as PyTorch's: ``PackedSequence`` and the functions that pad, pack, unpad
and unpack batches of variable-length sequences.

Every function moves rows with one ``index_select`` over a flat view of its input (with a
padding row appended where padding is needed), the index being computed from the lengths
with whole-tensor ops; so gradients flow through packing and padding and ``vmap`` batches
them like any other indexing."""
from collections.abc import Iterable
from typing import NamedTuple, Optional

import microtensor as mt
from microtensor._tensor import Tensor

__all__ = ["PackedSequence", "invert_permutation", "pack_padded_sequence",
           "pad_packed_sequence", "pad_sequence", "unpad_sequence", "pack_sequence",
           "unpack_sequence"]


class PackedSequence_(NamedTuple):
    data: Tensor
    batch_sizes: Tensor
    sorted_indices: Optional[Tensor]
    unsorted_indices: Optional[Tensor]


class PackedSequence(PackedSequence_):
    """A batch of variable-length sequences packed time step by time step: ``data`` holds
    step 0 of every sequence, then step 1 of those at least 2 long, ...; ``batch_sizes`` (a
    CPU int64 tensor) says how many sequences each step has.  The sequences are in order of
    decreasing length; ``sorted_indices`` maps that order to the caller's batch and
    ``unsorted_indices`` back (``None`` when the batch was already sorted).  Built by
    ``pack_padded_sequence`` and ``pack_sequence``, accepted by ``RNN``/``LSTM``/``GRU``."""

    def __new__(cls, data, batch_sizes=None, sorted_indices=None, unsorted_indices=None):
        if unsorted_indices is None:
            unsorted_indices = invert_permutation(sorted_indices)
        if batch_sizes is None:      # PackedSequence((data, batch_sizes), sorted_indices)
            if not (isinstance(data, (list, tuple)) and len(data) == 2):
                raise AssertionError("Expected data to be a list or tuple of length 2")
            data, batch_sizes = data
        elif batch_sizes.device.type != "cpu":
            raise ValueError(
                "batch_sizes should always be on CPU. Instances of PackedSequence should never "
                "be created manually. They should be instantiated by functions like "
                "pack_sequence and pack_padded_sequences in nn.utils.rnn.")
        return super().__new__(cls, data, batch_sizes, sorted_indices, unsorted_indices)

    def _with_data(self, data):
        """``self`` if ``data`` is ``self.data``, else a PackedSequence of ``data`` with the
        indices moved to its device (``batch_sizes`` stays on the CPU)."""
        if data is self.data:
            return self
        sorted_indices, unsorted_indices = (None if t is None else t.to(data.device)
                                            for t in (self.sorted_indices,
                                                      self.unsorted_indices))
        return type(self)(data, self.batch_sizes, sorted_indices, unsorted_indices)

    def to(self, *args, **kwargs):
        """``data.to(*args, **kwargs)``; ``self`` when that changes nothing."""
        return self._with_data(self.data.to(*args, **kwargs))

    def cuda(self, *args, **kwargs):
        return self._with_data(self.data.cuda(*args, **kwargs))

    def cpu(self, *args, **kwargs):
        return self._with_data(self.data.cpu(*args, **kwargs))

    def double(self):
        return self.to(dtype=mt.float64)

    def float(self):
        return self.to(dtype=mt.float32)

    def half(self):
        return self.to(dtype=mt.float16)

    def long(self):
        return self.to(dtype=mt.int64)

    def int(self):
        return self.to(dtype=mt.int32)

    def short(self):
        return self.to(dtype=mt.int16)

    def char(self):
        return self.to(dtype=mt.int8)

    def byte(self):
        return self.to(dtype=mt.uint8)

    @property
    def is_cuda(self):
        return self.data.is_cuda

    def is_pinned(self):
        """Always False: microtensor allocates no page-locked host memory."""
        return False


def invert_permutation(permutation):
    """The inverse of the 1-D index tensor ``permutation`` (``None`` for ``None``)."""
    if permutation is None:
        return None
    output = mt.empty_like(permutation, memory_format=mt.contiguous_format)
    return output.scatter_(0, permutation,
                           mt.arange(permutation.numel(), device=permutation.device))


def _take_rows(rows, index, padding_value):
    """``rows[index]`` along dim 0, shaped ``index.shape + rows.shape[1:]``, where an index
    of -1 takes a row filled with ``padding_value``."""
    pad = mt.full((1,) + tuple(rows.shape[1:]), padding_value, dtype=rows.dtype,
                  device=rows.device)
    flat = mt.where(index < 0, rows.shape[0], index).reshape(-1).to(rows.device)
    taken = mt.cat([rows, pad]).index_select(0, flat)
    return taken.reshape(tuple(index.shape) + tuple(rows.shape[1:]))


def pack_padded_sequence(input, lengths, batch_first=False, enforce_sorted=True):
    """Packs ``input`` (T x B x * padded sequences, B x T x * with ``batch_first``) whose
    sequence b has ``lengths[b]`` steps (a list or a CPU tensor).  The lengths must be
    decreasing unless ``enforce_sorted=False``, which sorts the batch first (and records
    the order in ``sorted_indices``)."""
    if not isinstance(lengths, Tensor):
        lengths = mt.as_tensor(lengths, dtype=mt.int64, device="cpu")
    else:
        lengths = lengths.to(dtype=mt.int64)
    sorted_indices = None
    if not enforce_sorted:
        lengths, sorted_indices = mt.sort(lengths, descending=True)
        sorted_indices = sorted_indices.to(input.device)
        input = input.index_select(0 if batch_first else 1, sorted_indices)
    if lengths.device.type != "cpu" or lengths.dim() != 1:
        raise RuntimeError(f"'lengths' argument should be a 1D CPU int64 tensor, but got "
                           f"{lengths.dim()}D {lengths.device.type} Long tensor")
    time_dim, batch_dim = (1, 0) if batch_first else (0, 1)
    steps, batch_size = input.size(time_dim), input.size(batch_dim)
    if input.numel() == 0:
        raise RuntimeError("Cannot pack empty tensors.")
    if lengths.shape[0] != batch_size:
        raise RuntimeError(f"Expected `len(lengths)` to be equal to batch_size, but got "
                           f"{lengths.shape[0]} (batch_size={batch_size})")
    if lengths[-1].item() <= 0:
        raise RuntimeError("Length of all samples has to be greater than 0, but found an "
                           "element in 'lengths' that is <= 0")
    if bool((lengths[1:] > lengths[:-1]).any()):
        raise RuntimeError(
            "`lengths` array must be sorted in decreasing order when `enforce_sorted` is True. "
            "You can pass `enforce_sorted=False` to pack_padded_sequence and/or pack_sequence "
            "to sidestep this requirement if you do not need ONNX exportability.")
    longest = lengths[0].item()
    if longest > steps:      # PyTorch reads past the end of the input here
        raise RuntimeError(f"pack_padded_sequence: a sequence of length {longest} does not fit "
                           f"in an input of {steps} time steps (dim {time_dim})")
    # the row of (step t, sequence b) in the input's first two dims flattened, time-major
    rows = mt.arange(steps * batch_size).reshape(
        (batch_size, steps) if batch_first else (steps, batch_size))
    rows = (rows.t() if batch_first else rows)[:longest]
    present = mt.arange(longest).unsqueeze(1) < lengths.unsqueeze(0)
    data = input.reshape((steps * batch_size,) + tuple(input.shape[2:])).index_select(
        0, rows[present].to(input.device))
    return PackedSequence(data, present.sum(1), sorted_indices, None)


def pad_packed_sequence(sequence, batch_first=False, padding_value=0.0, total_length=None):
    """The inverse of ``pack_padded_sequence``: returns the padded batch (T x B x *, or
    B x T x * with ``batch_first``, in the caller's original order) and the lengths; T is
    ``total_length`` if given, else the longest length."""
    batch_sizes = sequence.batch_sizes
    steps = max_steps = batch_sizes.shape[0]
    if total_length is not None:
        if total_length < max_steps:
            raise ValueError("Expected total_length to be at least the length of the longest "
                             f"sequence in input, but got total_length={total_length} and max "
                             f"sequence length being {max_steps}")
        steps = total_length
    batch_sizes = batch_sizes.to(dtype=mt.int64)
    rows = sequence.data.shape[0]
    if (bool((batch_sizes[1:] > batch_sizes[:-1]).any()) or bool((batch_sizes <= 0).any())
            or batch_sizes.sum().item() != rows):
        raise RuntimeError(f"pad_packed_sequence: batch_sizes {batch_sizes.tolist()} are not "
                           f"positive, non-increasing batch sizes adding up to the {rows} rows "
                           "of data")
    batch_size = batch_sizes[0].item() if max_steps else 0
    # row of step t of sequence b in data: the rows of the steps before t, then b
    offsets = batch_sizes.cumsum(0) - batch_sizes
    lanes = mt.arange(batch_size).unsqueeze(0)
    present = lanes < batch_sizes.unsqueeze(1)
    index = mt.where(present, offsets.unsqueeze(1) + lanes, -1)
    lengths = present.sum(0)
    index = mt.cat([index, mt.full((steps - max_steps, batch_size), -1, dtype=mt.int64)])
    unsorted = sequence.unsorted_indices
    if unsorted is not None:
        index = index.index_select(1, unsorted.cpu())
        lengths = lengths[unsorted.cpu()]
    if batch_first:
        index = index.t()
    return _take_rows(sequence.data, index, padding_value), lengths


def pad_sequence(sequences, batch_first=False, padding_value=0.0, padding_side="right"):
    """Stacks the sequences (each L_i x *, as the first's dtype) into one T x B x * tensor
    (B x T x * with ``batch_first``), T the longest length, padding each sequence at its end
    (``padding_side="right"``) or start (``"left"``) with ``padding_value``."""
    if not isinstance(sequences, Iterable):
        raise RuntimeError("pad_sequence: Expected iterable for input sequences, but got arg "
                           f"of type: {type(sequences)}")
    sequences = tuple(sequences)
    for i, seq in enumerate(sequences):
        if not isinstance(seq, Tensor):
            raise TypeError(f"expected Tensor as element {i} in argument 0, but got "
                            f"{type(seq).__name__}")
    if not sequences:
        raise RuntimeError("received an empty list of sequences")
    if any(seq.dim() == 0 for seq in sequences):
        raise RuntimeError("pad_sequence: expected sequences of at least one dimension (the "
                           "time steps), but got a 0-D tensor")
    if padding_side not in ("left", "right"):
        raise RuntimeError("Expected padding_side to be one of left or right, but got "
                           f"{padding_side}.")
    first = sequences[0]
    trailing = tuple(first.shape[1:])
    # each sequence is copied into the first's trailing shape, broadcasting as PyTorch does
    rows = mt.cat([seq.to(dtype=first.dtype, device=first.device).expand(
        (seq.shape[0],) + trailing) for seq in sequences])
    lengths = mt.tensor([seq.shape[0] for seq in sequences], dtype=mt.int64)
    offsets = lengths.cumsum(0) - lengths
    steps = max(seq.shape[0] for seq in sequences)
    start = steps - lengths if padding_side == "left" else mt.zeros_like(lengths)
    step = mt.arange(steps).unsqueeze(1) - start.unsqueeze(0)    # step of each sequence
    index = mt.where((step >= 0) & (step < lengths), offsets + step, -1)
    return _take_rows(rows, index.t() if batch_first else index, padding_value)


def unpad_sequence(padded_sequences, lengths, batch_first=False):
    """The sequences of a padded batch (T x B x *, or B x T x * with ``batch_first``), the
    b-th cut to ``lengths[b]`` steps, as a list of new tensors."""
    batch_dim = 0 if batch_first else 1
    lengths = lengths.tolist() if isinstance(lengths, Tensor) else list(lengths)
    batch_size = padded_sequences.shape[batch_dim]
    if len(lengths) != batch_size:
        raise ValueError(f"unpad_sequence: lengths is "
                         f"{'longer' if len(lengths) > batch_size else 'shorter'} than the "
                         f"batch: {len(lengths)} lengths for {batch_size} sequences")
    return [padded_sequences.select(batch_dim, b)[:max(length, 0)].clone(
        memory_format=mt.contiguous_format) for b, length in enumerate(lengths)]


def pack_sequence(sequences, enforce_sorted=True):
    """``pack_padded_sequence(pad_sequence(sequences), lengths)``: packs a list of
    sequences, each L_i x *, decreasing in length unless ``enforce_sorted=False``."""
    lengths = mt.as_tensor([seq.size(0) for seq in sequences], dtype=mt.int64)
    return pack_padded_sequence(pad_sequence(sequences), lengths, enforce_sorted=enforce_sorted)


def unpack_sequence(packed_sequences):
    """The inverse of ``pack_sequence``: the list of sequences, in their original order."""
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)
