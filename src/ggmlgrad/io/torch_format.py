"""PyTorch's own checkpoint format (``torch.save``'s zip archive), written and read without torch.

The archive: ``<name>/data.pkl`` (a protocol-2 pickle of the object whose tensors are
``torch._utils._rebuild_tensor_v2`` calls on persistent-id storages ``('storage', torch.FloatStorage,
key, 'cpu', numel)``), ``<name>/data/<key>`` (each storage's raw little-endian bytes, 64-byte
aligned), ``<name>/byteorder``, ``<name>/version`` and ``<name>/.format_version``. What
:func:`write` makes ``torch.load(path, weights_only=True)`` reads.

:func:`read` never imports torch and never runs what a pickle asks for beyond rebuilding tensors,
storages, dtypes, devices and containers, as ``torch.load(weights_only=True)``: any other global is
refused with :class:`UnsafeCheckpointError` naming it, before it is looked up. Every storage's size
and every tensor's offset, shape and strides are checked against the bytes in the archive.
By the dtype rule, float64 becomes float32 and int64 (int16, int8, uint8) int32, where an int64
value outside int32's range is a :class:`CheckpointError`.

>>> import io, ggmlgrad as gg
>>> buf = io.BytesIO()
>>> gg.save({"w": gg.tensor([1.0, 2.0]), "step": 3}, buf)
>>> _ = buf.seek(0); d = gg.load(buf); d["w"].tolist(), d["step"]
([1.0, 2.0], 3)
"""
from __future__ import annotations

import codecs
import collections
import io
import math
import pickle
import struct
import zipfile

import numpy as np

from ..engine import DType, dtypes, new_from_host
from ..engine.dtypes import to_bool_storage
from ..tensor import Tensor
from .errors import MAX_DIMS, CheckpointError
from .tree import tensor_bits

ZIP_MAGIC = b"PK\x03\x04"
_ALIGN = 64                         # torch's storage alignment in the archive
_ARCHIVE = "archive"

# torch's storage class -> (NumPy dtype of its bytes, ggmlgrad dtype name of its tensors)
_STORAGES = {"FloatStorage": (np.float32, "float32"), "DoubleStorage": (np.float64, "float32"),
             "HalfStorage": (np.float16, "float16"), "BFloat16Storage": (np.uint16, "bfloat16"),
             "IntStorage": (np.int32, "int32"), "LongStorage": (np.int64, "int32"),
             "ShortStorage": (np.int16, "int32"), "CharStorage": (np.int8, "int32"),
             "ByteStorage": (np.uint8, "int32"), "BoolStorage": (np.bool_, "bool")}
_STORAGE_OF = {"float32": "FloatStorage", "float16": "HalfStorage", "bfloat16": "BFloat16Storage",
               "int32": "IntStorage", "bool": "BoolStorage"}
# torch dtype globals (``torch.float32``) -> ggmlgrad dtype, by the dtype rule
_TORCH_DTYPES = {"float32": "float32", "float": "float32", "float64": "float32", "double": "float32",
                 "float16": "float16", "half": "float16", "bfloat16": "bfloat16", "int32": "int32",
                 "int": "int32", "int64": "int32", "long": "int32", "int16": "int32", "int8": "int32",
                 "uint8": "int32", "bool": "bool"}


class UnsafeCheckpointError(CheckpointError, pickle.UnpicklingError):
    """A checkpoint's pickle asked for something other than tensors, storages and containers (torch's
    ``weights_only=True`` refuses the same with ``pickle.UnpicklingError``)."""


# ---------------------------------------------------------------------- writing
class _Global:
    """A name the pickle refers to (``GLOBAL module name``) without importing it (torch need not be here)."""

    __slots__ = ("module", "name")
    _made: dict = {}

    def __new__(cls, module: str, name: str):
        key = (module, name)
        g = cls._made.get(key)
        if g is None:
            g = cls._made[key] = super().__new__(cls)
            g.module, g.name = module, name
        return g

    def __call__(self, *args):      # a pickle REDUCE needs a callable; this one is never called here
        raise TypeError(f"{self.module}.{self.name} is a name in a torch checkpoint, not callable here")


class _StorageRef:
    __slots__ = ("key", "storage", "numel")

    def __init__(self, key: str, storage: str, numel: int):
        self.key, self.storage, self.numel = key, storage, numel


_REBUILD = _Global("torch._utils", "_rebuild_tensor_v2")


class _Pickler(pickle._Pickler):
    """Protocol 2, as torch writes: tensors reduce to ``_rebuild_tensor_v2`` on persistent storages."""

    def __init__(self, f, storages: list):
        super().__init__(f, protocol=2)
        self.storages = storages
        self._tensors: dict[int, tuple] = {}

    def persistent_id(self, obj):
        if type(obj) is _StorageRef:
            return ("storage", _Global("torch", obj.storage), obj.key, "cpu", obj.numel)
        return None

    def save(self, obj, save_persistent_id=True):
        if isinstance(obj, DType):
            obj = _Global("torch", obj.name)        # GLOBAL torch float32: torch's dtype object
        if type(obj) is _Global:
            memo = self.memo.get(id(obj))
            if memo is not None:
                self.write(self.get(memo[0]))
                return
            self.write(pickle.GLOBAL + f"{obj.module}\n{obj.name}\n".encode("ascii"))
            self.memoize(obj)
            return
        super().save(obj, save_persistent_id)

    def reducer_override(self, obj):
        if isinstance(obj, Tensor):
            return self._tensor(obj)
        return NotImplemented

    def _tensor(self, t: Tensor):
        bits = np.ascontiguousarray(tensor_bits(t))
        if t.dtype.is_bool:
            bits = bits.astype(np.bool_)
        key = str(len(self.storages))
        self.storages.append(bits)
        shape = tuple(int(s) for s in t.shape)
        strides, acc = [], 1
        for s in reversed(shape):
            strides.append(acc)
            acc *= max(s, 1)
        ref = _StorageRef(key, _STORAGE_OF[t.dtype.name], int(bits.size))
        return (_REBUILD, (ref, 0, shape, tuple(reversed(strides)), bool(t.requires_grad), collections.OrderedDict()))


def _checked(obj, path: str = ""):
    """The object with NumPy scalars as Python numbers; TypeError for anything torch's weights-only
    loader would refuse (arrays, modules, other objects)."""
    if isinstance(obj, (Tensor, DType)) or obj is None or isinstance(obj, (bool, int, float, str, bytes)):
        return obj
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, dict):
        out = collections.OrderedDict() if isinstance(obj, collections.OrderedDict) else {}
        for k, v in obj.items():
            if not isinstance(k, (str, int, float, bool, tuple)) and k is not None:
                raise TypeError(f"gg.save: dict key {k!r} at {path or '<root>'} must be a str, number or tuple")
            out[k] = _checked(v, f"{path}.{k}" if path else str(k))
        return out
    if isinstance(obj, (list, tuple)):
        items = [_checked(v, f"{path}.{i}") for i, v in enumerate(obj)]
        return items if isinstance(obj, list) else tuple(items)
    if isinstance(obj, np.ndarray):
        raise TypeError(f"gg.save: a NumPy array (at {path or '<root>'}) cannot go into a .pt checkpoint "
                        f"(torch.load(weights_only=True) refuses arrays); convert it with gg.tensor(...)")
    hint = " (save its .state_dict())" if hasattr(obj, "state_dict") else ""
    raise TypeError(f"gg.save: cannot save a {type(obj).__name__} (at {path or '<root>'}){hint}; a .pt "
                    f"checkpoint may hold tensors, numbers, strings, None, lists, tuples and dicts")


def write(obj, f) -> None:
    """Write ``obj`` to the binary file object ``f`` in torch's zip format."""
    obj = _checked(obj)
    storages: list[np.ndarray] = []
    pkl = io.BytesIO()
    _Pickler(pkl, storages).dump(obj)
    with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as z:
        records = [("data.pkl", pkl.getvalue()), (".format_version", b"1"), (".storage_alignment", b"64"),
                   ("byteorder", b"little")]
        records += [(f"data/{i}", np.ascontiguousarray(s).astype(s.dtype.newbyteorder("<"), copy=False).tobytes())
                    for i, s in enumerate(storages)]
        records.append(("version", b"3\n"))
        for name, data in records:
            _write_aligned(z, f"{_ARCHIVE}/{name}", data)


def _write_aligned(z: zipfile.ZipFile, name: str, data: bytes) -> None:
    """One stored member whose bytes start at a multiple of 64 in the file (padding in the local
    header's extra field, as torch does), so a reader may map them."""
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_STORED
    try:
        start = z.fp.tell()
    except (AttributeError, OSError):
        start = None
    if start is not None:
        header = 30 + len(name.encode("utf-8"))
        pad = (-(start + header + 4)) % _ALIGN
        info.extra = struct.pack("<HH", 0x4246, pad) + b"Z" * pad   # "FB": torch's padding record
    z.writestr(info, data)


# ---------------------------------------------------------------------- reading
class _Storage:
    __slots__ = ("values", "dtype_name")

    def __init__(self, values: np.ndarray, dtype_name: str):
        self.values, self.dtype_name = values, dtype_name


class _StorageType:
    """What ``GLOBAL torch FloatStorage`` unpickles to: the storage's element type."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name


class _Reader(pickle._Unpickler):
    """A restricted unpickler: the globals of tensor, storage and container reconstruction only."""

    dispatch = dict(pickle._Unpickler.dispatch)

    def __init__(self, data: bytes, archive: "_Archive", device):
        super().__init__(io.BytesIO(data))
        self.archive, self.device = archive, device
        self._storages: dict[str, _Storage] = {}
        self._allowed = {
            ("collections", "OrderedDict"): collections.OrderedDict,
            ("torch._utils", "_rebuild_tensor_v2"): self._rebuild_tensor,
            ("torch._utils", "_rebuild_tensor"): self._rebuild_tensor,
            ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
            ("torch._tensor", "_rebuild_from_type_v2"): _rebuild_from_type,
            ("torch", "Tensor"): _TENSOR_TYPE, ("torch.nn.parameter", "Parameter"): _TENSOR_TYPE,
            ("torch", "Size"): _size, ("torch", "device"): _device_value,
            ("_codecs", "encode"): _latin1, ("builtins", "set"): set, ("builtins", "frozenset"): frozenset,
            ("builtins", "bytearray"): bytearray,
        }

    def find_class(self, module: str, name: str):
        module = "builtins" if module == "__builtin__" else module      # protocol 2's Python 2 name
        fn = self._allowed.get((module, name))
        if fn is not None:
            return fn
        if module in ("torch", "torch.cuda") and name in _STORAGES:
            return _StorageType(name)
        if module == "torch" and name in _TORCH_DTYPES:
            return dtypes.from_any(_TORCH_DTYPES[name])
        raise UnsafeCheckpointError(f"{self.archive.where}: the checkpoint asks for {module}.{name}, which a "
                                    f"weights-only load does not run (only tensors, storages, dtypes and "
                                    f"containers are rebuilt)")

    def persistent_load(self, pid):
        where = self.archive.where
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"
                and isinstance(pid[1], _StorageType) and isinstance(pid[2], str)):
            raise CheckpointError(f"{where}: unexpected persistent id in the pickle: {pid!r}")
        _, kind, key, _location, numel = pid
        s = self._storages.get(key)
        if s is None:
            np_dt, name = _STORAGES[kind.name]
            if isinstance(numel, bool) or not isinstance(numel, int) or numel < 0:
                raise CheckpointError(f"{where}: storage {key!r} has a bad size {numel!r}")
            raw = self.archive.member(f"data/{key}", numel * np.dtype(np_dt).itemsize)
            s = self._storages[key] = _Storage(np.frombuffer(raw, np.dtype(np_dt).newbyteorder("<"), numel), name)
        return s

    def _rebuild_tensor(self, storage, offset, size, stride, requires_grad=False, hooks=None, metadata=None):
        where = self.archive.where
        if not isinstance(storage, _Storage):
            raise CheckpointError(f"{where}: a tensor is rebuilt from {type(storage).__name__}, not a storage")
        size, stride = _ints(size, where, "size"), _ints(stride, where, "stride")
        if len(size) != len(stride) or isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise CheckpointError(f"{where}: a tensor has a bad layout (size {size}, stride {stride}, offset {offset})")
        if len(size) > MAX_DIMS:
            raise CheckpointError(f"{where}: a tensor of shape {list(size)} has {len(size)} dimensions; ggmlgrad "
                                  f"tensors have at most {MAX_DIMS}")
        vals = storage.values
        if math.prod(size):
            last = offset + sum((n - 1) * s for n, s in zip(size, stride))
            if last >= vals.size:
                raise CheckpointError(f"{where}: a tensor (size {list(size)}, stride {list(stride)}, offset "
                                      f"{offset}) reaches past its storage of {vals.size} elements")
            item = vals.itemsize
            host = np.lib.stride_tricks.as_strided(vals[offset:], size, [s * item for s in stride]).copy()
        else:
            host = np.zeros(size, vals.dtype)
        t = _make(host, storage.dtype_name, self.device, where)
        return t.requires_grad_(True) if requires_grad is True and t.dtype.is_float else t

    def _build(self):
        state = self.stack.pop()
        inst = self.stack[-1]
        if type(inst) is collections.OrderedDict and isinstance(state, dict) and all(type(k) is str for k in state):
            inst.__dict__.update(state)     # a state dict's ``_metadata`` (plain data, as torch keeps it)
            return
        if state:
            raise UnsafeCheckpointError(f"{self.archive.where}: the checkpoint sets the state of a "
                                        f"{type(inst).__name__}, which a weights-only load does not do")

    dispatch[pickle.BUILD[0]] = _build


_TENSOR_TYPE = object()     # torch.Tensor / Parameter as a type argument of _rebuild_from_type_v2


def _rebuild_parameter(data, requires_grad=True, hooks=None):
    if not isinstance(data, Tensor):
        raise CheckpointError(f"a parameter is rebuilt from {type(data).__name__}, not a tensor")
    return data.requires_grad_(True) if requires_grad is True and data.dtype.is_float else data


def _rebuild_from_type(func, new_type, args, state):
    if new_type is not _TENSOR_TYPE or state:      # func came from find_class: one of the rebuilders
        raise UnsafeCheckpointError("a tensor subclass with its own state cannot be rebuilt by a weights-only load")
    return func(*args)


def _size(*args):
    return tuple(args[0]) if len(args) == 1 and isinstance(args[0], (tuple, list)) else tuple(args)


def _device_value(*args):
    from ..runtime import device
    return device(*args)


def _latin1(text, encoding="latin1"):
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise UnsafeCheckpointError(f"_codecs.encode({encoding!r}) is not a bytes literal")
    return codecs.encode(text, encoding)


def _ints(xs, where: str, what: str) -> tuple:
    if not isinstance(xs, tuple) or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in xs):
        raise CheckpointError(f"{where}: a tensor has a bad {what} {xs!r}")
    return xs


def _make(host: np.ndarray, name: str, device, where: str) -> Tensor:
    """A tensor from a storage's values, narrowed by the dtype rule."""
    from .tree import _device
    if name == "int32" and host.dtype != np.int32:
        if host.size and (int(host.max()) > 2**31 - 1 or int(host.min()) < -2**31):
            raise CheckpointError(f"{where}: a {host.dtype} tensor has values outside int32's range")
        host = host.astype(np.int32)
    elif name == "float32" and host.dtype != np.float32:
        with np.errstate(over="ignore"):            # beyond float32's range rounds to ±inf, as astype does
            host = host.astype(np.float32)
    d = dtypes.from_any(name)
    t = Tensor._blank(tuple(host.shape), d, _device(device))
    return new_from_host(t, to_bool_storage(host) if d.is_bool else np.ascontiguousarray(host), "load()")


class _Archive:
    """The members of a torch zip checkpoint, under its one top-level folder."""

    def __init__(self, z: zipfile.ZipFile, where: str):
        self.z, self.where = z, where
        pkls = [n for n in z.namelist() if n.endswith("/data.pkl") and n.count("/") == 1]
        if len(pkls) != 1:
            if any(n.endswith("constants.pkl") for n in z.namelist()):
                raise CheckpointError(f"{where}: a TorchScript archive (torch.jit.save), not a torch.save checkpoint")
            raise CheckpointError(f"{where}: not a torch checkpoint (no single <name>/data.pkl in the zip archive)")
        self.prefix = pkls[0][: -len("data.pkl")]
        order = self.optional("byteorder")
        if order not in (None, b"little"):
            raise CheckpointError(f"{where}: a {order!r}-endian checkpoint; ggmlgrad reads little-endian ones")

    def optional(self, name: str):
        try:
            return self.z.read(self.prefix + name)
        except KeyError:
            return None

    def member(self, name: str, need: int) -> bytes:
        try:
            info = self.z.getinfo(self.prefix + name)
        except KeyError:
            raise CheckpointError(f"{self.where}: storage {name!r} is missing from the archive") from None
        if info.file_size < need:
            raise CheckpointError(f"{self.where}: {name!r} has {info.file_size} bytes, its tensors need {need} "
                                  f"(truncated or corrupt file)")
        try:
            with self.z.open(info) as f:
                return f.read(need)
        except (zipfile.BadZipFile, OSError, EOFError) as e:
            raise CheckpointError(f"{self.where}: {name!r} cannot be read ({e})") from None


def read(f, device, where: str):
    """The object of a torch zip checkpoint in the binary file object ``f`` (tensors on ``device``)."""
    try:
        z = zipfile.ZipFile(f)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
        raise CheckpointError(f"{where}: not a valid torch checkpoint: {e}") from None
    with z:
        archive = _Archive(z, where)
        data = archive.optional("data.pkl")
        try:
            return _Reader(data, archive, device).load()
        except CheckpointError:
            raise
        except (pickle.UnpicklingError, EOFError, IndexError, KeyError, TypeError, ValueError, AttributeError,
                RecursionError, struct.error) as e:
            raise CheckpointError(f"{where}: the checkpoint's pickle is corrupt ({type(e).__name__}: {e})") from None
