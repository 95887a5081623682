"""``default_collate`` and ``default_convert``: samples to batched tensors, by torch's rules.

Tensors and arrays are stacked along a new first axis; Python floats become float32 tensors, ints
int32 and bools bool (torch's float64/int64 by the dtype rule); strings and bytes stay a list;
mappings, named tuples and sequences are collated field by field (a tuple of fields gives a list,
as torch's).

>>> import numpy as np, ggmlgrad as gg
>>> xb, yb = default_collate([(np.zeros(2), 1), (np.ones(2), 0)])
>>> xb.shape, yb.dtype is gg.int32
((2, 2), True)
"""
from __future__ import annotations

import collections.abc

import numpy as np

from ..engine.dtypes import bool_ as gg_bool
from ..tensor import Tensor, tensor
from .dataset import to_tensor


def _stack(arrays, device) -> Tensor:
    try:
        return to_tensor(np.stack(arrays), device)
    except ValueError as e:
        raise RuntimeError(f"default_collate: stack expects each tensor to be equal size ({e})") from None


def collate(batch: list, device=None):
    """``default_collate`` with a target device (the loader's ``device=``)."""
    elem = batch[0]
    if isinstance(elem, Tensor):
        return _stack([t.detach().numpy() for t in batch], device)
    if isinstance(elem, np.ndarray) and elem.dtype.kind in "biuf":
        return _stack(batch, device)
    if isinstance(elem, (bool, np.bool_)):
        return tensor(np.array(batch, dtype=bool), dtype=gg_bool, device=device)
    if isinstance(elem, (int, float, np.number)):
        return to_tensor(np.array(batch), device)
    if isinstance(elem, (str, bytes)):
        return list(batch)
    if isinstance(elem, collections.abc.Mapping):
        return {k: collate([d[k] for d in batch], device) for k in elem}
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):
        return type(elem)(*(collate(list(f), device) for f in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        if any(len(s) != len(elem) for s in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        return [collate(list(f), device) for f in zip(*batch)]
    raise TypeError(f"default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; "
                    f"found {type(elem).__name__}")


def default_collate(batch: list):
    """Samples to a batch (see the module docstring)."""
    return collate(batch)


def convert(sample, device=None):
    """``default_convert`` with a target device: arrays become tensors, containers are walked, the
    rest is left alone (what ``batch_size=None`` yields)."""
    if isinstance(sample, np.ndarray) and sample.dtype.kind in "biuf":
        return to_tensor(sample, device)
    if isinstance(sample, collections.abc.Mapping):
        return {k: convert(v, device) for k, v in sample.items()}
    if isinstance(sample, tuple) and hasattr(sample, "_fields"):
        return type(sample)(*(convert(v, device) for v in sample))
    if isinstance(sample, (list, tuple)):
        return [convert(v, device) for v in sample]
    return sample


def default_convert(sample):
    """Arrays to tensors, without batching (see :func:`convert`)."""
    return convert(sample)


def to_host(obj):
    """Tensors to NumPy arrays, walking containers: what a worker process sends back."""
    if isinstance(obj, Tensor):
        return obj.detach().numpy().copy()
    if isinstance(obj, collections.abc.Mapping):
        return {k: to_host(v) for k, v in obj.items()}
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(to_host(v) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_host(v) for v in obj)
    return obj
