"""``gg.distributed``: scale out on Ray (``pip install 'ggmlgrad[distributed]'``).

- :class:`DataParallel`: data-parallel training on N Ray actors (gradients averaged with
  ``ray.util.collective`` or an allreduce over the object store), like torch's DDP.
- :class:`WorkerPool`: N restartable actors (e.g. RL rollout workers) called together;
  array arguments are broadcast once per round, a dead worker drops out of that round only.
- :func:`pack_parameters` / :func:`unpack_parameters`: weights as ONE float32 array.
- :func:`save_checkpoint` / :func:`load_checkpoint`: model, optimizer and iteration.

Ray is imported only when an actor is made: ``import ggmlgrad`` does not need it.

>>> import ggmlgrad as gg
>>> flat = gg.distributed.pack_parameters(gg.nn.Linear(2, 2).parameters())
>>> flat.size
6
"""
from .checkpoint import load_checkpoint, save_checkpoint
from .data_parallel import BACKENDS, DataParallel
from .packing import pack_gradients, pack_parameters, unpack_gradients, unpack_parameters
from .pool import WorkerPool

__all__ = ["DataParallel", "BACKENDS", "WorkerPool", "pack_parameters", "unpack_parameters", "pack_gradients",
           "unpack_gradients", "save_checkpoint", "load_checkpoint"]
