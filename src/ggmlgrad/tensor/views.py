"""Views that alias their base, as in torch (issue 12).

A view (``x[0]``, ``x.view(-1)``, ``x.T``, ``x.narrow(...)``, ...) is a lens on its ROOT base (a
tensor that is not itself a view). It keeps a :class:`ViewRecord`: the root, the chain of view
steps that derives its value from the root's value (``slice``, ``reshape``, ``permute``,
``expand``: each an ordinary differentiable op), and torch's layout (storage offset and strides in
elements of the root's contiguous storage, worked out on first use).

Where a view's value lives:

- a contiguous part of a root's host memory read in eager mode (``x[i]``, ``x[1:3]``: the host path
  of tensor/host_writes.py) is a slice of that memory (``SliceAlias``) from the start: nothing is
  copied, and ops read it like any tensor;
- other views, while the root's memory is ggmlgrad's alone, in memory of their own, so every op
  reads them like any tensor (no strided read, and plans keep working);
- once that memory is shared outside ggmlgrad (``numpy()``, ``np.asarray``, ``from_numpy``,
  DLPack: :func:`share_memory`), in the root's memory itself (:func:`settle`): a contiguous view
  is a slice of it (``SliceAlias``), another a strided read of it (``StridedAlias``, which ops
  read through ``ggml_cont``), so writes made there by NumPy or DLPack are seen, as in torch.

A view in its root's memory sees every write to it; the others are re-derived after each write.

Writes keep the family consistent either way:

- a write through a view computes the view's new value, scatters it into the root (the inverse
  chain: ``slice_set`` / ``reshape`` / inverse ``permute``, all differentiable: torch's
  ``CopySlices``), writes the root in place and re-derives every live view of the root that has
  memory of its own;
- a write to the root (or an alias of it: ``detach()``, ``.data``) re-derives those views.

The root and its aliases share one :class:`Family` of live views (in the version cell, which
``detach()`` shares): only writes to tensors that have live views pay anything. Views share the
root's version counter, so a backward that saved a view or its base raises after an in-place
write to either, as in torch.

>>> import ggmlgrad as gg
>>> x = gg.zeros(2, 3)
>>> _ = x[0].fill_(5.0)
>>> x.view(-1)[4] = -1.0
>>> x.tolist()
[[5.0, 5.0, 5.0], [0.0, -1.0, 0.0]]
>>> x.T.stride(), x[1].storage_offset(), x.T.is_contiguous()
((1, 3), 3, False)
"""
from __future__ import annotations

import weakref

import numpy as np

from ..engine import COMPUTED, ENGINE, PENDING, context
from ..runtime import HostStorage, SliceAlias, Storage, StridedAlias, device_address
from ..ops import op
from .grad_mode import _enabled, is_grad_enabled, no_grad

_OVERLAP = ("unsupported operation: more than one element of the written-to tensor refers to a single "
            "memory location. Please clone() the tensor before performing the operation.")


class ViewRecord:
    """Where a view's value comes from: ``root`` (a tensor that is not a view), the ``steps``
    that derive it from the root's value, and how it was made (``multi``: one of several outputs
    of split/chunk/unbind; ``no_grad``: made with grad off), which decide torch's autograd errors
    for in-place writes through it. Its torch layout (offset, strides in elements) is worked out
    on first use (:meth:`layout`): making a view costs no layout arithmetic."""

    __slots__ = ("root", "steps", "multi", "no_grad", "_layout", "_pending")

    def __init__(self, root, steps: tuple, multi: bool, made_no_grad: bool, layout_or_pending):
        self.root, self.steps, self.multi, self.no_grad = root, steps, multi, made_no_grad
        if layout_or_pending[0] is None:
            self._layout, self._pending = None, layout_or_pending
        else:
            self._layout, self._pending = layout_or_pending, None

    def layout(self) -> tuple[int, tuple]:
        """(storage offset, strides) in elements of the root's contiguous memory."""
        lay = self._layout
        if lay is None:
            _, brec, bshape, fn, args = self._pending
            boff, bstrides = brec.layout() if brec is not None else (0, contiguous_strides(bshape))
            rel, strides = fn(bstrides, bshape, *args)
            lay = self._layout = (boff + rel, strides)
            self._pending = None
        return lay


# ---------------------------------------------------------------------------- layout
def contiguous_strides(shape: tuple) -> tuple:
    strides = _CONTIGUOUS.get(shape)
    if strides is None:
        acc, out = 1, []
        for s in reversed(shape):
            out.append(acc)
            acc *= max(s, 1)
        strides = _CONTIGUOUS[shape] = tuple(reversed(out))
    return strides


_CONTIGUOUS: dict = {}  # shape -> contiguous strides (shapes repeat: a training loop has few)


def record_of(t) -> ViewRecord | None:
    return t.__dict__.get("_view")


def layout(t) -> tuple[int, tuple]:
    """(storage offset, strides) of ``t``, as torch reports them."""
    rec = t.__dict__.get("_view")
    if rec is None:
        return 0, contiguous_strides(t.shape)
    return rec.layout()


def is_contiguous(t) -> bool:
    """torch's rule: strides are the contiguous ones, size-1 dims ignored (and empty is contiguous)."""
    _, strides = layout(t)
    if t.numel_ == 0:
        return True
    expected = 1
    for size, stride in zip(reversed(t.shape), reversed(strides)):
        if size == 1:
            continue
        if stride != expected:
            return False
        expected *= size
    return True


def view_strides(shape: tuple, strides: tuple, new_shape: tuple) -> tuple | None:
    """torch's ``computeStride``: the strides of ``view(new_shape)`` of a tensor with this layout,
    or None when no such view exists (``view`` raises, ``reshape`` copies)."""
    if not shape:
        return (1,) * len(new_shape)
    numel = int(np.prod(shape))
    if numel == 0:
        if tuple(shape) == tuple(new_shape):
            return tuple(strides)
        return contiguous_strides(new_shape)
    new_strides = [0] * len(new_shape)
    view_d = len(new_shape) - 1
    chunk_base = strides[-1]
    tensor_numel = view_numel = 1
    for tensor_d in range(len(shape) - 1, -1, -1):
        tensor_numel *= shape[tensor_d]
        if tensor_d == 0 or (shape[tensor_d - 1] != 1 and strides[tensor_d - 1] != tensor_numel * chunk_base):
            while view_d >= 0 and (view_numel < tensor_numel or new_shape[view_d] == 1):
                new_strides[view_d] = view_numel * chunk_base
                view_numel *= new_shape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if tensor_d > 0:
                chunk_base = strides[tensor_d - 1]
                tensor_numel = view_numel = 1
    if view_d != -1:
        return None
    return tuple(new_strides)


def _index_items(key, shape: tuple) -> list:
    """A validated basic-indexing key as ('n',) / ('i', index) / ('s', start, length, step) items,
    one per consumed dim plus the Nones (``...`` expanded, missing dims as full slices)."""
    key = key if isinstance(key, tuple) else (key,)
    consuming = sum(1 for k in key if k is not None and k is not Ellipsis)
    if any(k is Ellipsis for k in key):
        i = next(j for j, k in enumerate(key) if k is Ellipsis)
        key = key[:i] + (slice(None),) * (len(shape) - consuming) + key[i + 1:]
    else:
        key = key + (slice(None),) * (len(shape) - consuming)
    items, axis = [], 0
    for k in key:
        if k is None:
            items.append(("n",))
            continue
        n = shape[axis]
        if isinstance(k, slice):
            b, e, s = k.indices(n)
            items.append(("s", b, len(range(b, e, s)), s))
        else:
            items.append(("i", int(k) % n))
        axis += 1
    return items


def index_layout(offset: int, shape: tuple, strides: tuple, key) -> tuple[int, tuple]:
    """torch's layout of ``x[key]`` (dims processed left to right, as torch's indexing does)."""
    sizes, strd = list(shape), list(strides)
    pos = 0
    for item in _index_items(key, shape):
        if item[0] == "n":
            strd.insert(pos, sizes[pos] * strd[pos] if pos < len(sizes) else 1)
            sizes.insert(pos, 1)
            pos += 1
        elif item[0] == "i":
            offset += item[1] * strd[pos]
            del sizes[pos], strd[pos]
        else:
            _, b, length, s = item
            offset += b * strd[pos]  # (an empty slice too: torch's offset of x[:, 1:1] is 1)
            sizes[pos] = length
            strd[pos] *= s
            pos += 1
    return offset, tuple(strd)


# ---------------------------------------------------------------------------- making views
class Family:
    """The live views of one memory, by id (a WeakSet would compare tensors with ``==``, which
    is elementwise here). Dead entries are pruned when the table doubles, so adding is O(1)."""

    __slots__ = ("refs", "limit", "shared")

    def __init__(self, shared: bool = False) -> None:
        self.refs: dict = {}
        self.limit = 16
        self.shared = shared  # the memory is visible outside ggmlgrad: views live in it (see share_memory)

    def add(self, t) -> None:
        refs = self.refs
        refs[id(t)] = weakref.ref(t)
        if len(refs) >= self.limit:
            self.live()
            self.limit = max(16, 2 * len(refs))

    def discard(self, t) -> None:
        self.refs.pop(id(t), None)

    def live(self) -> list:
        """The live views (dead entries dropped)."""
        out, dead = [], []
        for k, r in list(self.refs.items()):  # a copy: another thread may add a view meanwhile
            t = r()
            if t is None or "_view" not in t.__dict__:
                dead.append(k)
            else:
                out.append(t)
        for k in dead:
            self.refs.pop(k, None)
        return out

    def __bool__(self) -> bool:
        return bool(self.refs)


def family(t) -> Family:
    """The live views of ``t``'s memory, shared through the version cell by ``t`` and its aliases
    (``detach()`` shares the cell); made on the first view."""
    cell = t._vcell
    if len(cell) < 2:
        cell.append(Family())
    return cell[1]


def make_view(out, base, step: tuple, fn, *args, multi: bool = False):
    """Make ``out`` (the value ``step`` derived from ``base``) a view of ``base``'s root; its
    layout is ``fn(base strides, base shape, *args)`` → (offset relative to base, strides)."""
    if out is base:
        return out
    brec = base.__dict__.get("_view")
    grad_on = _enabled.get()
    if brec is None:
        rec = ViewRecord(base, (step,), multi, not grad_on, (None, None, base.shape, fn, args))
    else:
        rec = ViewRecord(brec.root, brec.steps + (step,), multi or brec.multi, brec.no_grad or not grad_on,
                         (None, brec, base.shape, fn, args))
    out._view = rec
    cell = base._vcell
    if len(cell) < 2:
        cell.append(Family())
    cell[1].add(out)
    out._vcell = cell  # one version counter for the base and all its views (torch's rule)
    if cell[1].shared:
        _settle_soon(out)
    return out


def _reshape_layout(bstrides, bshape, new_shape):
    return 0, view_strides(bshape, bstrides, new_shape)


def reshape_view(out, base, new_shape: tuple, name: str, must_view: bool):
    """``view``/``reshape``/``flatten``-style result: a view when the layout allows, else (reshape)
    the copy ``out`` already is, or (view) torch's error."""
    if "_view" in base.__dict__ and view_strides(base.shape, layout(base)[1], tuple(new_shape)) is None:
        if must_view:  # (a tensor that is not a view is contiguous: always viewable)
            raise RuntimeError(f"{name}: view size is not compatible with input tensor's size and stride (at "
                               f"least one dimension spans across two contiguous subspaces). Use "
                               f".reshape(...) instead.")
        return out
    return make_view(out, base, ("reshape", tuple(new_shape)), _reshape_layout, tuple(new_shape))


def _squeeze_layout(bstrides, bshape, kept):
    return 0, tuple(bstrides[i] for i in kept)


def squeeze_view(out, base, dim=None):
    """torch's squeeze strides: the kept dims keep theirs (``dim``: as squeeze took it, validated)."""
    n = len(base.shape)
    if dim is None or not n:
        dims = range(n)
    else:
        dims = {d % n for d in ((dim,) if isinstance(dim, int) else dim)}
    kept = tuple(i for i, s in enumerate(base.shape) if not (i in dims and s == 1))
    return make_view(out, base, ("reshape", out.shape), _squeeze_layout, kept)


def _unsqueeze_layout(bstrides, bshape, dim):
    s = bshape[dim] * bstrides[dim] if dim < len(bshape) else 1
    return 0, bstrides[:dim] + (s,) + bstrides[dim:]


def unsqueeze_view(out, base, dim: int):
    """torch's unsqueeze stride: size * stride of the dim it goes before (1 at the end)."""
    return make_view(out, base, ("reshape", out.shape), _unsqueeze_layout, dim)


def _permute_layout(bstrides, bshape, axes):
    return 0, tuple(bstrides[a] for a in axes)  # (axes may be negative: a valid Python index either way)


def permute_view(out, base, axes: tuple):
    """``axes`` as the permute op took them (validated; possibly negative)."""
    return make_view(out, base, ("permute", axes), _permute_layout, axes)


def _expand_layout(bstrides, bshape, out_shape):
    lead = len(out_shape) - len(bshape)
    return 0, (0,) * lead + tuple(0 if (bshape[i] == 1 and out_shape[lead + i] != 1) else bstrides[i]
                                  for i in range(len(bshape)))


def expand_view(out, base):
    return make_view(out, base, ("expand", out.shape), _expand_layout, out.shape)


def _unfold_layout(bstrides, bshape, dim, size, step):
    return 0, bstrides[:dim] + (bstrides[dim] * step,) + bstrides[dim + 1:] + (bstrides[dim],)


def unfold_value(x, dim: int, size: int, step: int):
    """The windows of ``x`` (validated by ``Tensor.unfold``): element ``j`` of every window is one
    step-``step`` slice, and the ``size`` slices are stacked last (no host index: capturable)."""
    from . import functional_shape as F  # (it imports this module)
    n = (x.shape[dim] - size) // step + 1
    rows = x.shape[:dim] + (n,) + x.shape[dim + 1:]

    def window_element(j: int, length: int):
        start = tuple(j if i == dim else 0 for i in range(x.ndim))
        stop = tuple(j + (length - 1) * step + 1 if i == dim else s for i, s in enumerate(x.shape))
        steps = tuple(step if i == dim else 1 for i in range(x.ndim))
        shape = x.shape[:dim] + (length,) + x.shape[dim + 1:]
        return op.slice(x, start=start, stop=tuple(max(a, b) for a, b in zip(start, stop)), step=steps, shape=shape)
    if size == 0:
        return op.reshape(window_element(0, 0), shape=rows + (0,))
    return F.stack([window_element(j, n) for j in range(size)], dim=-1)


def unfold_view(out, base, dim: int, size: int, step: int):
    """torch's unfold strides: the windows ``step`` elements apart, a window's elements 1 apart."""
    return make_view(out, base, ("unfold", dim, size, step, out.shape), _unfold_layout, dim, size, step)


def _index_layout(bstrides, bshape, key):
    return index_layout(0, bshape, bstrides, key)


def index_view(out, base, key, start: tuple, stop: tuple, step: tuple, multi: bool = False):
    """``base[key]`` for a basic key (``start/stop/step``: the slice op's parameters)."""
    return make_view(out, base, ("slice", start, stop, step, out.shape), _index_layout, key, multi=multi)


def _axis_layout(bstrides, bshape, dim, b, e):
    return b * bstrides[dim], bstrides


def axis_slice_views(pieces, base, dim: int, multi: bool, first: int = 0):
    """split/chunk/narrow results: consecutive slices of ``base`` along ``dim`` from ``first``."""
    b = first
    for piece in pieces:
        e = b + piece.shape[dim]
        start = tuple(b if i == dim else 0 for i in range(base.ndim))
        stop = tuple(e if i == dim else n for i, n in enumerate(base.shape))
        make_view(piece, base, ("slice", start, stop, (1,) * base.ndim, piece.shape), _axis_layout, dim, b, e,
                  multi=multi)
        b = e
    return pieces


# ---------------------------------------------------------------------------- gather / scatter
def _apply(step: tuple, v):
    kind = step[0]
    if kind == "slice":
        return op.slice(v, start=step[1], stop=step[2], step=step[3], shape=step[4])
    if kind == "reshape":
        return v if v.shape == step[1] else op.reshape(v, shape=step[1])
    if kind == "permute":
        return op.permute(v, axes=step[1])
    if kind == "unfold":
        return unfold_value(v, step[1], step[2], step[3])
    return op.broadcast_to(v, shape=step[1])


def gather(steps: tuple, root_value):
    """The view's value from its root's value (differentiable: each step is an ordinary op)."""
    v = root_value
    for s in steps:
        v = _apply(s, v)
    return v


def scatter(steps: tuple, parent, new):
    """``parent`` with the region ``steps`` select replaced by ``new`` (differentiable)."""
    if not steps:
        return new
    s = steps[0]
    child = _apply(s, parent) if len(steps) > 1 else None
    new_child = scatter(steps[1:], child, new) if child is not None else new
    kind = s[0]
    if kind == "slice":
        start, stop, step = s[1], s[2], s[3]
        sliced = tuple(len(range(b, e, k)) for b, e, k in zip(start, stop, step))
        if new_child.shape != sliced:
            new_child = op.reshape(new_child, shape=sliced)
        return op.slice_set(parent, new_child, start=start, stop=stop, step=step)
    if kind == "reshape":
        return new_child if new_child.shape == parent.shape else op.reshape(new_child, shape=parent.shape)
    if kind == "permute":
        inv = tuple(np.argsort([a % new_child.ndim for a in s[1]]).tolist())
        return op.permute(new_child, axes=inv)
    # expand: only constant values are written through an expanded view (fill_/zero_), so the
    # first element along each broadcast dim is the value of the shared memory location.
    lead = new_child.ndim - parent.ndim
    start = tuple(0 for _ in new_child.shape)
    stop = tuple(1 if (i < lead or parent.shape[i - lead] == 1) else n for i, n in enumerate(new_child.shape))
    v = op.slice(new_child, start=start, stop=stop, step=(1,) * new_child.ndim)
    return op.reshape(v, shape=parent.shape)


def overlaps(t) -> bool:
    """Whether two elements of ``t`` share a memory location (a stride-0 dim of size > 1)."""
    rec = t.__dict__.get("_view")
    return rec is not None and any(st == 0 and n > 1 for n, st in zip(t.shape, rec.layout()[1]))


# ---------------------------------------------------------------------------- writes
def has_views(t) -> bool:
    """Whether a write to ``t`` must go through this module (it is a view or has live views)."""
    cell = t._vcell
    return len(cell) > 1 and ("_view" in t.__dict__ or bool(cell[1].live()))


def check_view_write(t, name: str, differentiable: bool) -> None:
    """torch's refusals for an in-place write through the view ``t``."""
    rec = t.__dict__.get("_view")
    if rec is None:
        return
    if overlaps(t) and name not in ("fill_", "zero_"):
        raise RuntimeError(f"{name}: {_OVERLAP}")
    if any(s[0] == "unfold" for s in rec.steps):
        raise RuntimeError(f"{name}: writing through a view made by unfold() is not supported by ggmlgrad "
                           f"(its windows may share elements); clone() it, or write to the base")
    if any(s[0] == "expand" for s in rec.steps[:-1]):
        # (the write's region in the base would depend on which broadcast copy it went through)
        raise RuntimeError(f"{name}: writing through a view of an expanded tensor (expand/broadcast_to "
                           f"followed by indexing or another view op) is not supported; write to the base, or "
                           f"clone() the view first")
    root = rec.root
    if not (is_grad_enabled() and root.requires_grad):
        return
    if root.grad_fn is None:
        raise RuntimeError(f"{name}: a view of a leaf Variable that requires grad is being used in an in-place "
                           f"operation; wrap it in gg.no_grad() (e.g. a manual parameter update)")
    if rec.multi:
        raise RuntimeError(f"{name}: this tensor is a view and is being modified inplace. This view is the output "
                           f"of a function that returns multiple views (split/chunk/unbind). Such functions do "
                           f"not allow the output views to be modified inplace. You should replace the inplace "
                           f"operation by an out-of-place one.")
    if rec.no_grad:
        raise RuntimeError(f"{name}: a view was created in no_grad mode and is being modified inplace with grad "
                           f"mode enabled. Given that this use case is ambiguous and error-prone, it is "
                           f"forbidden. Move both the view and the inplace either both inside the no_grad "
                           f"block or both outside.")
    if not differentiable:
        raise RuntimeError(f"{name}: in-place operation on a view of a tensor that is part of the autograd "
                           f"graph; wrap it in gg.no_grad() or use the out-of-place op")


def _fit(v, like):
    if v.shape != like.shape:
        v = op.expand_as(v, like)
    if v.dtype is not like.dtype:
        v = op.cast(v, dtype=like.dtype)
    return v


def write(t, name: str, compute, other, record: bool):
    """In-place ``t ← compute(current value of t, other)`` for a view ``t`` or a tensor with live
    views; ``record``: the write goes on the tape (grad on and something requires grad)."""
    rec = t.__dict__.get("_view")
    root = rec.root if rec is not None else t
    steps = rec.steps if rec is not None else ()
    recorder = context.current().recorder  # capture: no compute, writes are rebindings (capture/writes.py)
    grad_on = is_grad_enabled()  # (a recording follows torch's rule for the written memory: see capture/writes.py)
    with ENGINE.exclusive("inplace") if recorder is None else ENGINE.lock:
        ok = (COMPUTED,) if recorder is None else (COMPUTED, PENDING)
        if root._status not in ok or t._status not in ok:
            raise RuntimeError(f"{name}: this tensor has no value (its graph failed)")
        if record:
            with no_grad():
                snapshot = copy_of(root)  # the old value, in memory the write does not touch (saved
            snapshot.requires_grad, snapshot.grad_fn = root.requires_grad, root.grad_fn  # for backward)
            new_root, derived = _write_body(root, steps, snapshot, compute, other, t, True, True)
        else:
            with no_grad():  # every read of the root is an ancestor of the write into it
                new_root, derived = _write_body(root, steps, root, compute, other, t, grad_on, False)
    t._version += 1  # the root's counter too, except through ``.data`` (its own counter, as in torch)
    if record:
        root._rebase(new_root)
        for w, v in derived:
            if w._view.root is root:
                w._rebase(v)
    return t


def copy_of(t):
    """A copy of ``t`` in memory of its own, any dtype (clone is float32 only), differentiable."""
    return op.reshape(t, shape=t.shape)


def _write_body(root, steps, snapshot, compute, other, t, grad_on: bool, record: bool):
    old = gather(steps, snapshot)
    new = _fit(compute(old, other), old)
    new_root = scatter(steps, snapshot, new)
    _queue_write(root, new_root, "view write", grad_on)
    return new_root, _rederive_queued(root, new_root, record)


def _queue_write(target, value, label: str, grad_on: bool = False) -> None:
    """``target ← value`` in an exclusive block, or a capture recording's rebinding (``grad_on``: grad
    mode at the write's call)."""
    recorder = context.current().recorder
    if recorder is None:
        ENGINE.queue_write(target, ENGINE.node_of(value), label)
    else:
        recorder.write(target, value, label, grad_on)


def _rederive_queued(root, new_root, record: bool = False) -> list:
    """Queue each live view of ``root``'s family ← its value from ``new_root`` (in an exclusive block)."""
    cell = root._vcell
    derived = []
    storage = root._storage
    recording = context.current().recorder is not None
    for w in cell[1].live() if len(cell) > 1 else ():
        # same memory only (nn.Parameter(view) shares the version cell, not the root's memory)
        if _same_memory(w, root, storage):
            refresh = recording or type(w._storage) not in _ALIASES  # (a view in the root's memory sees the write)
            if refresh or record:  # (recorded: the view's new value is its new grad_fn's output)
                v = gather(w._view.steps, new_root)
                if refresh:
                    _queue_write(w, v, "view refresh")
                derived.append((w, v))
    return derived


def _same_memory(w, root, storage) -> bool:
    """Whether the live view ``w`` derives from ``root``'s memory; in a capture recording also a pending
    view the function made (of the same root object, or of an alias of its node)."""
    r = w._view.root
    if w._status == COMPUTED:
        return storage is not None and r._storage is storage
    if w._status != PENDING or context.current().recorder is None:
        return False
    if r is root:
        return True
    if r._status == COMPUTED:
        return storage is not None and r._storage is storage
    return root._status == PENDING and r._status == PENDING and r._node == root._node


def refresh_views(t) -> None:
    """Re-derive the live views of ``t``'s family after a write to ``t`` that this module did not
    make (a host upload into ``t``: ``copy_`` from an array)."""
    if has_views(t):
        with ENGINE.exclusive("inplace"), no_grad():
            _rederive_queued(t, t)


def refresh_views_of(tensors) -> None:
    """After writes made below the tensor layer (an optimizer step): re-derive the live views of
    each tensor (a length check per tensor when none has views)."""
    for t in tensors:
        if len(t._vcell) > 1:
            refresh_views(t)


# ---------------------------------------------------------------------------- shared memory
_ALIASES = (SliceAlias, StridedAlias)
_PLAIN = (Storage, HostStorage)


def share_memory(t) -> None:
    """``t``'s memory becomes visible outside ggmlgrad (a NumPy view, DLPack, ``from_numpy``), where
    writes are made that no ggmlgrad write sees: from now on the views of that memory live in it
    (a slice of it, or strided reads of it), as torch's views do, so that they see those writes.

    Views of memory never shared keep their value in memory of their own, kept equal by every
    ggmlgrad write (module docstring); both are the same to every ggmlgrad read."""
    rec = t.__dict__.get("_view")
    fam = family(rec.root if rec is not None else t)
    if not fam.shared:
        fam.shared = True
        for w in fam.live():
            settle(w)
    elif rec is not None:
        settle(t)


def _settle_soon(out) -> None:
    """A new view of shared memory: settle it now, or when its queued value is computed."""
    if out._status == COMPUTED:
        settle(out)
    elif out._status == PENDING and context.current().recorder is None:
        ENGINE.settle_when_computed(out, settle)


def settle(w) -> None:
    """Move the computed view ``w`` into its root's memory (a slice, or strided reads of it); no-op
    when it is there already or the root's memory is not plain host or device memory of its own
    (a capture recording's packed block, which replays rewrite)."""
    rec = w.__dict__.get("_view")
    if rec is None or w._status != COMPUTED or type(w._storage) in _ALIASES or not w.numel_:
        return
    root = rec.root
    rs = root._storage
    if root._status != COMPUTED or type(rs) not in _PLAIN or root.device is not w.device:
        return
    offset, strides = rec.layout()
    size = w.dtype.itemsize
    if is_contiguous(w):
        w._storage = SliceAlias(rs, offset * size, w.nbytes)
    else:
        w._storage = StridedAlias(rs, offset * size, w.shape, tuple(st * size for st in strides), size)
    w._leaf_epoch = -1  # a leaf cached for this epoch reads the old memory


def detach_views(t) -> None:
    """``t.data = other``: ``t`` takes new memory; its views keep the old values (as torch's
    views keep the old storage) and stop following ``t``, and ``t`` stops being a view."""
    if t.__dict__.pop("_view", None) is not None:
        t._vcell = [t._version]
    cell = t._vcell
    for w in cell[1].live() if len(cell) > 1 else ():
        if w._view.root is t:
            del w._view
            w._vcell = [w._version]
            cell[1].discard(w)


def alias_view(t, twin) -> None:
    """``twin = t.detach()`` of a view ``t``: the same view of the same root (writes reach it)."""
    rec = t.__dict__.get("_view")
    if rec is not None:
        twin._view = ViewRecord(rec.root, rec.steps, False, rec.no_grad, rec.layout())
        fam = family(t)
        fam.add(twin)
        if fam.shared:
            _settle_soon(twin)


def data_alias(t, twin) -> None:
    """``twin = t.data``: same memory and views, its own version counter (torch's ``.data``)."""
    twin._vcell = [0, family(t)]


def data_ptr(t) -> int:
    """The address of ``t``'s first element in its root's memory (torch's ``data_ptr``)."""
    if t.numel_ == 0:
        return 0  # torch's data_ptr of an empty tensor
    rec = t.__dict__.get("_view")
    root = rec.root if rec is not None else t
    if root._status == PENDING:
        ENGINE.drain("data_ptr()")
    if root._status != COMPUTED or root._storage is None:
        raise RuntimeError("data_ptr(): this tensor has no value (its graph failed)")
    return device_address(root._storage) + (rec.layout()[0] if rec is not None else 0) * t.dtype.itemsize
