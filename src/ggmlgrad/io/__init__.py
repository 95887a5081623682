"""``gg.save`` / ``gg.load``: state dicts (models and optimizers) as ``.safetensors``, ``.gguf`` or
PyTorch's own ``.pt`` format (``torch_format.py``: read and written without torch).

The format follows the file extension. Tensors keep their dtype bit for bit
(float32, float16, bfloat16, int32); everything else in a (nested) state dict —
ints, floats, strings, lists, tuples, dicts with str/int keys, NumPy arrays —
travels in the file's metadata as JSON, together with a CRC-32 of every tensor.
A flat ``{name: Tensor}`` dict is stored under its own names, so other tools
read the file as an ordinary checkpoint.

Writes are atomic (a temporary file in the same folder, fsync, then ``os.replace``):
an interrupted save leaves the previous file intact, and the temporary file of a
save that was killed is removed by the next save to the same path. Loading
validates every size and offset against the file length before reading data: a
truncated or corrupt file, a dtype ggmlgrad cannot hold or a tensor of more than
4 dimensions raises :class:`CheckpointError` naming the file and the tensor.

>>> import os, tempfile, ggmlgrad as gg
>>> w = gg.tensor([1.0, 2.0])
>>> path = os.path.join(tempfile.mkdtemp(), "ckpt.safetensors")
>>> gg.save({"w": w, "step": 3}, path)
>>> d = gg.load(path); d["w"].tolist(), d["step"]
([1.0, 2.0], 3)
"""
from .checkpoint import load, save
from .errors import CheckpointError
from .torch_format import UnsafeCheckpointError

__all__ = ["save", "load", "CheckpointError", "UnsafeCheckpointError"]
