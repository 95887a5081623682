"""Data-parallel training on Ray actors, in the manner of torch's DistributedDataParallel.

Each of N actors builds the model and optimizer from your factories, computes the loss and
gradients (graph mode: forward and backward are one graph) on its 1/N of the global batch,
the gradients are averaged across the actors (one packed float32 array each), and every
actor takes the same optimizer step. All replicas start from rank 0's weights and see the
same averaged gradients, so they stay identical; against one process on the whole batch
the parameters agree within float32 summation-order rounding.
"""
from __future__ import annotations

import uuid
from typing import Any, Callable, Sequence

import numpy as np

from ..engine import graph_mode
from ..tensor import Tensor, tensor
from ..tensor.creation import manual_seed
from ._ray import ray_module, worker_setup
from .allreduce import ReduceMixin, ring_allreduce, tree_allreduce
from .packing import pack_gradients, pack_parameters, unpack_gradients, unpack_parameters

__all__ = ["DataParallel", "BACKENDS"]

BACKENDS = ("auto", "gloo", "tree", "ring")
# Object-store fallback when Ray's collective (gloo) backend is missing: tree measured faster
# here (scripts/ray_scaling.py; README "Scaling out").
_FALLBACK = "tree"


class _Replica(ReduceMixin):
    """One rank: a model and optimizer replica (the body of a Ray actor)."""

    def __init__(self, model_fn: Callable, optimizer_fn: Callable, loss_fn: Callable, rank: int, world: int,
                 seed: int, num_threads: int | None, group: str | None) -> None:
        worker_setup(num_threads)
        manual_seed(seed)
        self.model = model_fn()
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = optimizer_fn(self.params)
        self.loss_fn, self.rank, self.world, self.group = loss_fn, rank, world, group
        self._flat = np.zeros(0, np.float32)

    def get_parameters(self) -> np.ndarray:
        return pack_parameters(self.params)

    def set_parameters(self, flat: np.ndarray) -> None:
        unpack_parameters(flat, self.params)

    def state_dict(self) -> dict:
        return {k: v.detach().numpy().copy() for k, v in self.model.state_dict().items()}

    def local_gradient(self, arrays: Sequence[np.ndarray]) -> tuple[np.ndarray, float]:
        """Loss and packed gradient on this rank's shard: block ``rank`` of ``world`` equal row blocks."""
        n = len(arrays[0]) // self.world
        shard = [tensor(np.asarray(a[self.rank * n:(self.rank + 1) * n])) for a in arrays]
        with graph_mode(True):
            self.optimizer.zero_grad()
            loss = self.loss_fn(self.model, *shard)
            if not isinstance(loss, Tensor) or loss.numel() != 1:
                raise TypeError(f"DataParallel: loss_fn must return a one-element Tensor, got {type(loss).__name__}")
            loss.backward()
            self._flat = pack_gradients(self.params).copy()   # writable: the ring adds into it
            return self._flat, float(loss.item())

    def apply(self, total: np.ndarray | None = None) -> None:
        """Optimizer step with the averaged gradient (``total``: the sum; None: the sum in ``_flat``)."""
        summed = self._flat if total is None else total
        unpack_gradients((summed / np.float32(self.world)).astype(np.float32), self.params)
        self.optimizer.step()

    def step_gloo(self, arrays: Sequence[np.ndarray]) -> float:
        from ray.util import collective
        flat, loss = self.local_gradient(arrays)
        collective.allreduce(flat, group_name=self.group)     # in place, summed over the ranks
        self.apply()
        return loss

    def close(self) -> None:
        if self.group is not None:
            from ray.util import collective
            if collective.is_group_initialized(self.group):
                collective.destroy_collective_group(self.group)


def _resolve_backend(backend: str) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"DataParallel: backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "auto" or backend == "gloo":
        from ray.util import collective
        if collective.gloo_available():
            return "gloo"
        if backend == "gloo":
            raise RuntimeError("DataParallel: backend 'gloo' needs Ray's collective GLOO backend "
                               "(ray.util.collective, which uses torch.distributed): install torch")
        return _FALLBACK
    return backend


class DataParallel:
    """Train one model on ``num_workers`` Ray actors: ``step(*batch)`` splits the global batch into
    equal contiguous shards, each actor computes ``loss_fn(model, *shard)`` and its gradients, the
    gradients are averaged (``backend``: ``"gloo"`` = ``ray.util.collective``; ``"tree"``/``"ring"``
    = over the object store; ``"auto"``: gloo where it is installed, else tree) and every actor
    takes the same ``optimizer_fn(params)`` step.

    ``model_fn`` and ``optimizer_fn`` run inside the actors (after ``gg.manual_seed(seed)``), so
    they must be picklable (functions, lambdas and classes are; Ray pickles them by value when
    they live in ``__main__``). Rank 0's initial weights are broadcast to every rank. Call
    ``ray.init(...)`` first to choose the cluster (else Ray starts a local one). The attribute
    ``backend`` may be switched between steps to ``"tree"`` or ``"ring"`` (and back to ``"gloo"`` if
    the object was made with it): ``scripts/ray_scaling.py`` compares them on the same actors. A rank
    that dies fails the step (as in torch's DDP); for fault tolerance use :class:`WorkerPool`.

    >>> import numpy as np, ray, ggmlgrad as gg
    >>> _ = ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    >>> dp = gg.distributed.DataParallel(lambda: gg.nn.Linear(4, 1),
    ...                                  lambda ps: gg.optim.SGD(ps, lr=0.1),
    ...                                  lambda m, x, y: ((m(x) - y) ** 2).mean(), num_workers=2, backend="tree")
    >>> x, y = np.ones((8, 4), np.float32), np.zeros((8, 1), np.float32)
    >>> loss = dp.step(x, y)                     # one data-parallel SGD step: loss before it
    >>> dp.state_dict()["weight"].shape
    (1, 4)
    >>> dp.close(); ray.shutdown()
    """

    def __init__(self, model_fn: Callable[[], Any], optimizer_fn: Callable[[list], Any],
                 loss_fn: Callable[..., Tensor], num_workers: int = 2, *, backend: str = "auto", seed: int = 0,
                 num_threads: int | None = 1) -> None:
        if not isinstance(num_workers, int) or num_workers < 1:
            raise ValueError(f"DataParallel: num_workers must be a positive int, got {num_workers!r}")
        ray = ray_module()
        self.backend = _resolve_backend(backend)
        self.num_workers = num_workers
        self._group = f"gg_dp_{uuid.uuid4().hex[:12]}" if self.backend == "gloo" else None
        actor = ray.remote(_Replica)
        self.workers = [actor.remote(model_fn, optimizer_fn, loss_fn, r, num_workers, seed, num_threads, self._group)
                        for r in range(num_workers)]
        if self._group is not None:
            from ray.util import collective
            collective.create_collective_group(self.workers, num_workers, list(range(num_workers)),
                                               backend="gloo", group_name=self._group)
        first = self.workers[0].get_parameters.remote()
        ray.get([w.set_parameters.remote(first) for w in self.workers[1:]] + [first])

    def step(self, *arrays: np.ndarray) -> float:
        """One data-parallel step on the global batch ``arrays`` (each split along axis 0);
        returns the global mean loss (the mean of the shards' losses, taken before the step)."""
        ray = ray_module()
        arrays = [np.asarray(a) for a in arrays]
        if not arrays:
            raise ValueError("DataParallel.step: expected at least one batch array")
        rows = {len(a) if a.ndim else -1 for a in arrays}
        if len(rows) != 1 or -1 in rows or next(iter(rows)) % self.num_workers or next(iter(rows)) == 0:
            raise ValueError(f"DataParallel.step: the batch arrays must share a leading dimension divisible by "
                             f"num_workers={self.num_workers} (equal shards), got shapes {[a.shape for a in arrays]}")
        batch = ray.put(arrays)      # one object read by every rank (its own rows)
        if self.backend == "gloo":
            losses = ray.get([w.step_gloo.remote(batch) for w in self.workers])
        else:
            parts = [w.local_gradient.options(num_returns=2).remote(batch) for w in self.workers]
            grads, loss_refs = [p[0] for p in parts], [p[1] for p in parts]
            if self.backend == "tree":
                total = tree_allreduce(self.workers, grads)
                done = [w.apply.remote(total) for w in self.workers]
            else:
                last = ring_allreduce(self.workers, grads)
                done = [w.apply.remote() for w in self.workers]
            ray.get(done + (last if self.backend == "ring" else []))
            losses = ray.get(loss_refs)
        return float(np.mean(losses))

    def worker_parameters(self) -> list[np.ndarray]:
        """Each rank's parameters, packed (they are identical after every step)."""
        ray = ray_module()
        return ray.get([w.get_parameters.remote() for w in self.workers])

    def state_dict(self) -> dict[str, np.ndarray]:
        """Rank 0's model state as NumPy arrays (``model.load_state_dict`` accepts it)."""
        return ray_module().get(self.workers[0].state_dict.remote())

    def close(self) -> None:
        """End the actors (and the collective group)."""
        ray = ray_module()
        if self._group is not None:
            ray.get([w.close.remote() for w in self.workers])
            try:
                ray.kill(ray.get_actor("info_" + self._group))   # Ray's detached group-info actor
            except ValueError:
                pass
        for w in self.workers:
            ray.kill(w)
        self.workers = []

    def __enter__(self) -> "DataParallel":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
