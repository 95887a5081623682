"""Packed sequences (torch.nn.utils.rnn): ``PackedSequence``, ``pack_padded_sequence``,
``pad_packed_sequence``, ``pad_sequence``, ``pack_sequence``, ``unpad_sequence``, ``unpack_sequence``.

A packed batch holds, time step after time step, the rows of the sequences still running at that
step (sorted by decreasing length), so a recurrent layer runs each step on exactly those rows.
Everything is built from slices and concatenations with the lengths as Python constants: no
index tensor is uploaded, so packing works in graph mode and inside a capture (a new set of
lengths records again).

Difference from torch (documented): ``batch_sizes``, ``sorted_indices`` and ``unsorted_indices``
are NumPy int64 arrays (torch: CPU int64 tensors), and so are the lengths ``pad_packed_sequence``
returns; they are host data in both libraries.

>>> import numpy as np, ggmlgrad as gg
>>> from ggmlgrad.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
>>> x = gg.tensor(np.arange(6, dtype=np.float32).reshape(3, 2, 1))   # (L=3, N=2, 1)
>>> p = pack_padded_sequence(x, [3, 1])
>>> p.batch_sizes.tolist(), p.data.reshape(-1).tolist()
([2, 1, 1], [0.0, 1.0, 2.0, 4.0])
>>> y, lengths = pad_packed_sequence(p)
>>> y.reshape(-1).tolist(), lengths.tolist()
([0.0, 1.0, 2.0, 0.0, 4.0, 0.0], [3, 1])
"""
from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

from ...ops import op
from ...tensor import Tensor
from ...tensor.functional_shape import cat, stack

__all__ = ["PackedSequence", "pack_padded_sequence", "pad_packed_sequence", "pad_sequence", "pack_sequence",
           "unpad_sequence", "unpack_sequence", "invert_permutation"]


class PackedSequence(NamedTuple):
    """``data`` (sum of lengths, *) and the host ``batch_sizes`` (rows per time step); with
    ``enforce_sorted=False`` also the batch permutation to sorted order and back."""

    data: Tensor
    batch_sizes: np.ndarray
    sorted_indices: np.ndarray | None = None
    unsorted_indices: np.ndarray | None = None

    def lengths(self) -> np.ndarray:
        """Each sequence's length, in the original batch order."""
        bs = self.batch_sizes
        n = int(bs[0]) if len(bs) else 0
        sorted_lengths = np.array([(bs > i).sum() for i in range(n)], dtype=np.int64)
        if self.unsorted_indices is None:
            return sorted_lengths
        return sorted_lengths[self.unsorted_indices]

    @property
    def is_cuda(self) -> bool:
        return False

    def is_pinned(self) -> bool:
        return False

    def to(self, *args, **kwargs) -> "PackedSequence":
        """The same sequence with ``data.to(*args, **kwargs)`` (the host index arrays stay)."""
        data = self.data.to(*args, **kwargs)
        return self if data is self.data else self._replace(data=data)

    def cpu(self) -> "PackedSequence":
        return self.to("cpu")

    def float(self) -> "PackedSequence":
        return self._replace(data=self.data.float())


def invert_permutation(permutation) -> np.ndarray | None:
    """The inverse of a permutation (host ints), as torch.nn.utils.rnn.invert_permutation."""
    if permutation is None:
        return None
    perm = np.asarray(permutation, dtype=np.int64)
    out = np.empty_like(perm)
    out[perm] = np.arange(len(perm))
    return out


# ---------------------------------------------------------------- helpers (slices, no uploads)
def narrow(x: Tensor, axis: int, start: int, stop: int) -> Tensor:
    """``x`` restricted to [start, stop) along ``axis`` (x itself when that is all of it)."""
    if start == 0 and stop == x.shape[axis]:
        return x
    begin = [0] * x.ndim
    end = list(x.shape)
    begin[axis], end[axis] = start, stop
    return op.slice(x, start=tuple(begin), stop=tuple(end), step=(1,) * x.ndim)


def take(x: Tensor, index, axis: int) -> Tensor:
    """``x`` with its entries along ``axis`` in the order ``index`` (host ints): slices + concat."""
    index = [int(i) for i in index]
    if index == list(range(x.shape[axis])):
        return x
    return cat([narrow(x, axis, i, i + 1) for i in index], axis)


def filled(ref: Tensor, shape: tuple, value: float) -> Tensor:
    """A float tensor of ``shape`` holding ``value``, made from ``ref`` by ops (no upload)."""
    if 0 in shape:   # nothing to fill (e.g. a batch of 0): an empty slice of ``ref``, relabelled
        return narrow(ref.reshape(-1), 0, 0, 0).reshape(tuple(shape))
    one = op.fill_like(narrow(ref.reshape(-1), 0, 0, 1), c=float(value))
    return op.broadcast_to(one.reshape((1,) * len(shape)), shape=tuple(shape))


def _host_lengths(lengths) -> np.ndarray:
    if isinstance(lengths, Tensor):
        lengths = lengths.tolist()   # host data, as torch's CPU lengths (a download)
    arr = np.asarray(lengths)
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise ValueError(f"pack_padded_sequence: lengths must be a 1-D sequence of ints, got {arr!r}")
    return arr.astype(np.int64)


def batch_sizes_of(sorted_lengths: np.ndarray) -> np.ndarray:
    """Rows per time step for lengths sorted in decreasing order."""
    return np.array([(sorted_lengths > t).sum() for t in range(int(sorted_lengths[0]))], dtype=np.int64)


# ---------------------------------------------------------------- pack / pad
def pack_padded_sequence(input: Tensor, lengths, batch_first: bool = False,
                         enforce_sorted: bool = True) -> PackedSequence:
    """Pack a padded batch (L, N, *) (``batch_first``: (N, L, *)) of sequences of ``lengths``.

    ``enforce_sorted=True`` requires lengths in decreasing order (torch's rule); otherwise the
    batch is sorted here and the permutation kept for ``pad_packed_sequence`` and the RNNs.
    """
    if not isinstance(input, Tensor):
        raise TypeError(f"pack_padded_sequence: input must be a Tensor, got {type(input).__name__}")
    if input.ndim < 2:
        raise ValueError(f"pack_padded_sequence: input must have at least 2 dimensions, got {input.shape}")
    lens = _host_lengths(lengths)
    if batch_first:
        input = input.transpose(0, 1)
    steps, n = input.shape[0], input.shape[1]
    if len(lens) != n:
        raise ValueError(f"pack_padded_sequence: expected {n} lengths (the batch size), got {len(lens)}")
    if n == 0 or lens.min() <= 0:
        raise RuntimeError("pack_padded_sequence: Length of all samples has to be greater than 0")
    if lens.max() > steps:
        raise RuntimeError(f"pack_padded_sequence: a length ({lens.max()}) exceeds the sequence length {steps}")
    if enforce_sorted:
        if np.any(np.diff(lens) > 0):
            raise RuntimeError("pack_padded_sequence: `lengths` array must be sorted in decreasing order when "
                               "`enforce_sorted` is True. You can pass `enforce_sorted=False` to sidestep this "
                               "requirement.")
        sorted_idx = unsorted_idx = None
    else:
        sorted_idx = np.argsort(-lens, kind="stable").astype(np.int64)
        unsorted_idx = np.argsort(sorted_idx).astype(np.int64)
        input = take(input, sorted_idx, 1)
        lens = lens[sorted_idx]
    bs = batch_sizes_of(lens)
    rows = [narrow(narrow(input, 0, t, t + 1), 1, 0, int(b)).reshape((int(b),) + tuple(input.shape[2:]))
            for t, b in enumerate(bs)]
    return PackedSequence(cat(rows, 0), bs, sorted_idx, unsorted_idx)


def pad_packed_sequence(sequence: PackedSequence, batch_first: bool = False, padding_value: float = 0.0,
                        total_length: int | None = None) -> tuple[Tensor, np.ndarray]:
    """The inverse of :func:`pack_padded_sequence`: (padded batch, lengths as a NumPy int64 array)."""
    if not isinstance(sequence, PackedSequence):
        raise TypeError(f"pad_packed_sequence: expected a PackedSequence, got {type(sequence).__name__}")
    data, bs = sequence.data, sequence.batch_sizes
    n, steps = int(bs[0]), len(bs)
    if total_length is not None:
        if total_length < steps:
            raise ValueError(f"pad_packed_sequence: Expected total_length to be at least {steps} (the longest "
                             f"sequence), got {total_length}")
        steps_out = total_length
    else:
        steps_out = steps
    feat = tuple(data.shape[1:])
    frames, at = [], 0
    for t in range(steps_out):
        b = int(bs[t]) if t < steps else 0
        parts = [narrow(data, 0, at, at + b)] if b else []
        if b < n:
            parts.append(filled(data, (n - b,) + feat, padding_value))
        frames.append(parts[0] if len(parts) == 1 else cat(parts, 0))
        at += b
    padded = stack(frames, 0)
    lengths = PackedSequence(data, bs).lengths()
    if sequence.unsorted_indices is not None:
        padded = take(padded, sequence.unsorted_indices, 1)
        lengths = lengths[sequence.unsorted_indices]
    if batch_first:
        padded = padded.transpose(0, 1)
    return padded, lengths


def pad_sequence(sequences: Sequence[Tensor], batch_first: bool = False, padding_value: float = 0.0,
                 padding_side: str = "right") -> Tensor:
    """Stack tensors of shapes (L_i, *) into (L_max, N, *) (``batch_first``: (N, L_max, *)), padding
    with ``padding_value`` on ``padding_side`` ("right" or "left")."""
    seqs = list(sequences)
    if not seqs:
        raise ValueError("pad_sequence: received an empty list of sequences")
    if padding_side not in ("right", "left"):
        raise ValueError(f"pad_sequence: padding_side must be 'right' or 'left', got {padding_side!r}")
    for s in seqs:
        if not isinstance(s, Tensor):
            raise TypeError(f"pad_sequence: expected Tensors, got {type(s).__name__}")
        if s.ndim < 1 or tuple(s.shape[1:]) != tuple(seqs[0].shape[1:]):
            raise ValueError(f"pad_sequence: sequences must share their trailing shape, got "
                             f"{[tuple(t.shape) for t in seqs]}")
    longest = max(s.shape[0] for s in seqs)
    out = []
    for s in seqs:
        k = longest - s.shape[0]
        if k:
            pad = filled(seqs[0], (k,) + tuple(s.shape[1:]), padding_value)
            s = cat([s, pad] if padding_side == "right" else [pad, s], 0)
        out.append(s)
    return stack(out, 0 if batch_first else 1)


def pack_sequence(sequences: Sequence[Tensor], enforce_sorted: bool = True) -> PackedSequence:
    """Pack a list of tensors (L_i, *) (torch.nn.utils.rnn.pack_sequence)."""
    lengths = [s.shape[0] for s in sequences]
    return pack_padded_sequence(pad_sequence(sequences), lengths, enforce_sorted=enforce_sorted)


def unpad_sequence(padded_sequences: Tensor, lengths, batch_first: bool = False) -> list[Tensor]:
    """The list of sequences (L_i, *) in a padded batch."""
    lens = _host_lengths(lengths)
    x = padded_sequences if batch_first else padded_sequences.transpose(0, 1)
    return [narrow(narrow(x, 0, i, i + 1), 1, 0, int(n)).reshape((int(n),) + tuple(x.shape[2:]))
            for i, n in enumerate(lens)]


def unpack_sequence(packed_sequences: PackedSequence) -> list[Tensor]:
    """The list of sequences in a packed batch (original order)."""
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)
