"""The tape: graph nodes recorded by ``apply`` and the reverse pass.

Tensors record as soon as an input requires grad (no tape context). Backward
appends gradient nodes to the engine queue like any other op: in graph mode it
computes nothing, and forward + backward run as one graph at the next sync point.
"""
from __future__ import annotations

import contextvars
import dataclasses
import weakref

from ..engine import COMPUTED, ENGINE, PENDING, float32 as _F32
from ..engine import context
from ..engine.context import current as _context
from ..engine.plans import SegmentPlan, freeze_params
from ..engine.trace_cache import SEGMENT
from ..engine.records import reset_phase, set_phase
from ..ops.higher_order import CREATE_GRAPH, DOUBLE_BACKWARD, ZERO_GRADIENT
from ..ops.registry import OpDef, op
from .call_plans import _STATE as _PLANS, planned_apply as _planned_apply, graph_planned_apply as _graph_planned_apply
from .grad_mode import _enabled, is_grad_enabled


class Node:
    """One recorded op: its inputs, their versions at record time, its params."""

    __slots__ = ("opdef", "inputs", "versions", "params", "out_ref", "out_shape", "released", "precision",
                 "__weakref__")

    def __init__(self, opdef: OpDef, inputs: tuple, params: dict, out):
        self.opdef = opdef
        self.inputs = inputs
        # Tensor._version is this cell's first item; read directly (a property call per input costs
        # ~0.1 us, and every op recorded for autograd saves every input's version)
        n = len(inputs)
        if n == 1:  # (the usual arities without a list: every op recorded for autograd makes one)
            self.versions = (inputs[0]._vcell[0],)
        elif n == 2:
            self.versions = (inputs[0]._vcell[0], inputs[1]._vcell[0])
        else:
            self.versions = tuple([x._vcell[0] for x in inputs])  # a list is faster than a generator here
        self.params = params
        self.out_ref = weakref.ref(out) if opdef.save_output else None
        self.out_shape = out.shape
        self.released = False
        self.precision = _context().precision  # its backward matmuls use the forward's matmul precision

    @property
    def name(self) -> str:
        return self.opdef.name

    @property
    def output(self):
        o = self.out_ref() if self.out_ref is not None else None
        if o is None:
            raise RuntimeError(f"{self.name} backward: its output was freed before backward")
        return o

    def __repr__(self) -> str:
        return f"<{self.name}Backward>"

    def check_versions(self) -> bool:
        """Raise when a tensor this node's backward reads (its declared ``saves``, or its output)
        was written in place since the op; True when no input was written at all (the usual case:
        its inputs' current ``grad_fn`` are the ones it saw), False when only unread ones were."""
        o = self.out_ref() if self.out_ref is not None else None
        if o is not None and o._vcell[0] != 0:  # the saved output was modified in place
            raise RuntimeError(
                f"{self.name} backward: its output (shape {o.shape}) was modified in place after it was "
                f"saved for backward (version 0 → {o._version}); its gradient would be wrong. Clone the "
                f"output before the in-place op.")
        if tuple([x._vcell[0] for x in self.inputs]) == self.versions:  # nothing written
            return True
        opdef = self.opdef
        always, cond = opdef.saved_always, opdef.saved_if
        for i, (x, v) in enumerate(zip(self.inputs, self.versions)):
            if x._version == v:
                continue
            if always is None or i in always or any(self._requires_grad(j) for j in cond.get(i, ())):
                raise RuntimeError(
                    f"{self.name} backward: input {i} (shape {x.shape}) was modified in place after "
                    f"it was saved for backward (version {v} → {x._version}); its gradient would be "
                    f"wrong. Clone the tensor before the in-place op, or do the in-place op after "
                    f"backward.")
        return False

    def _requires_grad(self, j: int) -> bool:
        """Whether input ``j`` required grad when this op ran."""
        if j >= len(self.inputs):
            return False
        return edge_at(self.inputs[j], self.versions[j])[0]

    def edges(self) -> list:
        """(requires_grad, grad_fn, retains_grad) of each input as when this op ran: an input
        written in place since then may have a new ``grad_fn`` (torch's edges keep the old one)."""
        if tuple([x._vcell[0] for x in self.inputs]) == self.versions:
            return [(x.requires_grad, x.grad_fn, x._retains_grad) for x in self.inputs]
        return [edge_at(x, v) for x, v in zip(self.inputs, self.versions)]


# How many in-place rebases each tensor remembers (a node recorded before older ones raises): the
# old grad_fns are held strongly, as torch's edges hold them, but by the tensor, so bounded.
_EDGE_HISTORY = 8
_REBASED = False   # no tensor was ever rebased: _topo skips the version check (backward's hot path)


def remember_edge(t) -> None:
    """Called by an in-place op that is about to give ``t`` a new ``grad_fn`` (after bumping its
    version): nodes recorded before keep routing gradients to the old one, as in torch."""
    global _REBASED
    _REBASED = True
    d = t.__dict__
    hist = d.get("_edges_before")
    if hist is None:
        hist = d["_edges_before"] = []
    hist.append((t._vcell[0], t.grad_fn, t.requires_grad))
    if len(hist) > _EDGE_HISTORY:
        d["_edges_floor"] = hist.pop(0)[0]


def edge_at(x, v: int) -> tuple:
    """(requires_grad, grad_fn, retains_grad) of ``x`` as at version ``v``."""
    if x._vcell[0] == v:
        return x.requires_grad, x.grad_fn, x._retains_grad
    d = x.__dict__
    if v < d.get("_edges_floor", -1):
        raise RuntimeError(f"backward: a tensor (shape {x.shape}) was modified in place too many times "
                           f"since an op used it; its gradient path is no longer known. Clone it first.")
    for after, fn, rg in d.get("_edges_before", ()):
        if after > v:
            return rg, fn, False
    return x.requires_grad, x.grad_fn, x._retains_grad


def _topo(root_fn: Node, more_roots: tuple = ()) -> list[Node]:
    order: list[Node] = []
    seen: set[int] = set()
    stack = [(r, False) for r in more_roots] + [(root_fn, False)]
    while stack:
        n, done = stack.pop()
        if done:
            order.append(n)
            continue
        if id(n) in seen:
            continue
        seen.add(id(n))
        stack.append((n, True))
        inputs = n.inputs
        if _REBASED and tuple([x._vcell[0] for x in inputs]) != n.versions:
            fns = [e[1] for e in n.edges()]  # an input written in place since: its grad_fn then
        else:
            fns = [x.grad_fn for x in inputs]
        for fn in fns:
            if fn is not None and id(fn) not in seen:
                stack.append((fn, False))
    return order


def run_backward(root, gradient, retain_graph: bool = False, create_graph: bool = False) -> None:
    """Accumulate d(root)/d(leaf) into every leaf's ``.grad`` (queued, not computed).

    ``gradient`` None is the implicit seed 1 of a one-element root. In graph mode a backward whose
    tape and queue are the same as an earlier one's appends that backward's records again
    instead of running the gradient rules (:class:`_BackwardCache`): the same ops, in the same order.
    ``create_graph`` records the gradient ops on the tape (second derivatives, see
    :mod:`..ops.higher_order`); such passes and passes with tensor hooks are never cached.
    """
    fn = root.grad_fn
    if fn is None:
        if root.requires_grad:  # a leaf: its gradient is the seed itself
            g = _seed(root) if gradient is None else gradient
            _accumulate_leaf(root, _leaf_hooks(root, g) if HOOKS.used else g, set())
            return
        raise RuntimeError("backward: tensor does not require grad and has no grad_fn")
    order = _topo(fn)
    if create_graph or HOOKS.used:
        with ENGINE.lock:
            _run_pass([(root, gradient)], order, retain_graph, create_graph)
        return
    # The engine lock for the whole pass: another thread's ops must not land between the mark
    # and the segment (they would be replayed as this backward's), nor before a replay.
    with ENGINE.lock:
        mark = ENGINE.lazy_mark() if _BACKWARD.wants_key() else None
        key = targets = None
        if mark is not None:
            key, targets = _BACKWARD.key(mark, root, gradient, order, retain_graph)
            if key is not None:
                entry = _BACKWARD.lookup(key)
                if entry is not None:
                    _BACKWARD.replay(entry, order, targets, retain_graph, root.device)
                    _BACKWARD.hits += 1
                    _BACKWARD.misses_in_row = 0
                    return
                _BACKWARD.missed()
        ran = _run_rules(root, gradient, order, retain_graph)
        if key is not None:
            _BACKWARD.store(key, mark, ran, targets)


def _seed(root):
    token = _enabled.set(False)
    try:
        return op.fill_like(root, c=1.0)
    finally:
        _enabled.reset(token)


def _run_rules(root, gradient, order: list[Node], retain_graph: bool) -> list[int]:
    """The reverse pass: each node's gradient rule, in reverse topological order. Returns the
    positions in ``order`` of the nodes that ran."""
    return _run_pass([(root, gradient)], order, retain_graph, False)


def _run_pass(seeds: list, order: list[Node], retain_graph: bool, create_graph: bool,
              capture: dict | None = None, needed: set | None = None) -> list[int]:
    """The reverse pass from ``seeds`` ((root, gradient or None) pairs with a ``grad_fn``).

    ``create_graph``: the rules run with grad enabled, so their ops are recorded too.
    ``capture`` (autograd.grad): {id(tensor): [tensor, gradient or None]} collects the gradients of
    those tensors instead of accumulating any ``.grad``; only nodes in ``needed`` run then."""
    from .tensor import Tensor  # same layer
    # Saved outputs are weak refs (out.grad_fn → node would otherwise be a cycle); their
    # consumers' inputs keep them alive, and releasing a consumer must not free them mid-pass.
    saved_outputs = [n.out_ref() for n in order if n.out_ref is not None]
    grads: dict[int, Tensor] = {}
    for root, gradient in seeds:
        if gradient is None:
            gradient = _seed(root)
        prev = grads.get(id(root.grad_fn))
        grads[id(root.grad_fn)] = gradient if prev is None else _add_grads(prev, gradient)
    assigned: set[int] = set()
    ran: list[int] = []
    hooks = HOOKS.used
    token = _enabled.set(create_graph)
    higher_token = HIGHER.set("?") if create_graph else None
    composed_token = CREATE_GRAPH.set(create_graph)
    only_token = GRAD_ONLY.set(True) if capture is not None else None
    label_token = set_phase("backward")  # GraphError names these "backward"
    try:
        for pos in range(len(order) - 1, -1, -1):
            node = order[pos]
            g = grads.pop(id(node), None)
            if g is None or (needed is not None and id(node) not in needed):
                continue
            if hooks:
                g = _node_hooks(node, g)
            if create_graph:
                HIGHER.set(node.name)
            ran.append(pos)
            if node.released:
                raise RuntimeError(
                    f"backward: trying to go through the graph a second time ({node.name}); its saved "
                    f"tensors were freed after the first backward. Pass retain_graph=True the first time.")
            edges = None if node.check_versions() else node.edges()
            if node.precision == _context().precision:
                in_grads = node.opdef.backward(g, node)
            else:
                prec_token = context.push(precision=node.precision)
                try:
                    in_grads = node.opdef.backward(g, node)
                finally:
                    context.pop(prec_token)
            if not isinstance(in_grads, tuple):
                in_grads = (in_grads,)
            for k, (x, gx) in enumerate(zip(node.inputs, in_grads)):
                if edges is None:
                    rg, fn, rt = x.requires_grad, x.grad_fn, x._retains_grad
                else:  # an input written in place since: route to the grad_fn it had then
                    rg, fn, rt = edges[k]
                if gx is None or not rg:
                    continue
                if gx.shape != x.shape:
                    gx = reduce_to_shape(gx, x.shape)
                if capture is not None:
                    slot = capture.get(id(x))
                    if slot is not None:
                        slot[1] = gx if slot[1] is None else _add_grads(slot[1], gx)
                    if fn is not None:
                        prev = grads.get(id(fn))
                        grads[id(fn)] = gx if prev is None else _add_grads(prev, gx)
                    continue
                if fn is None:
                    _accumulate_leaf(x, _leaf_hooks(x, gx) if hooks else gx, assigned)
                else:
                    if rt:
                        _accumulate_leaf(x, gx, assigned)
                    prev = grads.get(id(fn))
                    grads[id(fn)] = gx if prev is None else _add_grads(prev, gx)
            if not retain_graph:
                _release(node)
    finally:
        reset_phase(label_token)
        if higher_token is not None:
            HIGHER.reset(higher_token)
        CREATE_GRAPH.reset(composed_token)
        if only_token is not None:
            GRAD_ONLY.reset(only_token)
        _enabled.reset(token)
        del saved_outputs
    return ran


# ---------------------------------------------------------------- hooks and higher-order passes
# The op whose gradient rule a create_graph pass is running (None outside such a pass): apply()
# names it when the rule uses a fused gradient op that has no derivative of its own.
HIGHER: contextvars.ContextVar = contextvars.ContextVar("ggmlgrad_create_graph", default=None)
# True while an autograd.grad pass runs (it writes no .grad): a rule that accumulates into .grad
# itself (checkpoint's recomputation) refuses to run there.
GRAD_ONLY: contextvars.ContextVar = contextvars.ContextVar("ggmlgrad_grad_only", default=False)


class _Hooks:
    """Gradient hooks (``Tensor.register_hook``): a leaf's by the tensor, a non-leaf's by its node.
    ``used`` is on while a hook is registered, so backward without hooks never looks them up."""

    def __init__(self) -> None:
        self.used = False
        self.live = 0   # hooks registered and not removed (a dead tensor's hooks stay counted)
        self.by_node: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


HOOKS = _Hooks()


def _apply_hooks(hooks, g):
    for fn in list(hooks.values()):
        r = fn(g)
        if r is not None:
            if r.shape != g.shape:
                raise RuntimeError(f"hook: returned a gradient of shape {r.shape}, expected {g.shape}")
            g = r
    return g


def _leaf_hooks(x, g):
    hooks = x.__dict__.get("_grad_hooks")
    return _apply_hooks(hooks, g) if hooks else g


def _node_hooks(node: Node, g):
    hooks = HOOKS.by_node.get(node)
    return _apply_hooks(hooks, g) if hooks else g


def record_higher(opdef: OpDef, inputs: tuple, params: dict, out) -> None:
    """Called by apply() for a non-differentiable op during a create_graph pass: record the fused
    gradient op with its own rule (ops/higher_order.py), or raise naming the op being differentiated."""
    if not any(x.requires_grad for x in inputs):
        return
    name = opdef.name
    if name in ZERO_GRADIENT:
        return
    proxy = _HIGHER_DEFS.get(name)
    if proxy is None:
        rule = DOUBLE_BACKWARD.get(name)
        if rule is not None:
            proxy = _HIGHER_DEFS[name] = dataclasses.replace(opdef, backward=rule, differentiable=True, saves=None)
    accepts = getattr(proxy.backward, "accepts", None) if proxy is not None else None
    if proxy is None or (accepts is not None and not accepts(params)):
        raise RuntimeError(
            f"create_graph: the gradient of {HIGHER.get()} is computed by {name}, which has no derivative "
            f"of its own; second derivatives through {HIGHER.get()} are not supported (use create_graph=False, "
            f"or an op with a composed gradient)")
    out.requires_grad = True
    out.grad_fn = Node(proxy, inputs, params, out)


_HIGHER_DEFS: dict[str, OpDef] = {}


def _release(node: Node) -> None:
    """Free a node's saved tensors after its rule ran. A released node keeps no inputs: a second
    pass reaching it raises (its gradient arrives, and it is released) before any input is read."""
    node.released = True
    node.inputs = ()
    node.out_ref = None


class _BackwardCache:
    """Backward passes recorded as engine segments, keyed by the tape and the queue so far: entries
    of kind SEGMENT in the context's trace cache (``engine/trace_cache.py``).

    The key holds the queue's record sequence at the start of backward (so every queued result and
    computed tensor has the same index or slot as when the segment was taken) and, per tape
    node, its op, parameters, precision and inputs (their queue references, producer nodes,
    requires_grad / retains_grad), so the gradient rules would build exactly the recorded ops.
    Only fresh gradients are cached (no ``.grad`` to accumulate into): zero_grad's default.
    """

    # Keying costs time linear in the queue and the tape. When backward passes never repeat (a
    # graph that changes every step), MISSES_BEFORE_PAUSE misses in a row pause keying for
    # PAUSE backward calls, so such workloads pay for it on a few calls only.
    MISSES_BEFORE_PAUSE = 8
    PAUSE = 64

    def __init__(self) -> None:
        self.enabled = True  # tests compare against the rules run every time
        self.hits = 0
        self.misses_in_row = 0
        self.paused = 0  # backward calls still to run without keying

    @property
    def entries(self) -> list:
        """The cached segments (the context's trace cache entries of kind SEGMENT, see
        ``engine/trace_cache.py``)."""
        return _context().trace_cache.entries(SEGMENT)

    def clear(self) -> None:
        """Forget every cached segment."""
        _context().trace_cache.clear(SEGMENT)

    def lookup(self, key):
        """The cached segment entry of ``key``, or None."""
        cache = _context().trace_cache
        entry = cache.plans.get(key)
        if entry is not None:
            b = cache.segment  # TraceCache.touch, inlined (once per backward)
            b.tick += 1
            entry.last_use = b.tick
        return entry

    def wants_key(self) -> bool:
        if not self.enabled:
            return False
        if self.paused:
            self.paused -= 1
            return False
        return True

    def missed(self) -> None:
        self.misses_in_row += 1
        if self.misses_in_row >= self.MISSES_BEFORE_PAUSE:
            self.misses_in_row = 0
            self.paused = self.PAUSE

    def key(self, mark, root, gradient, order: list[Node], retain_graph: bool):
        """(key, tensors that may receive .grad in walk order), or (None, None) when not cacheable."""
        e = ENGINE.current
        rq = e.queue_refs((root,) if gradient is None else (root, gradient))
        if rq is None:
            return None, None
        # Engine.queue_refs of each input, inlined: this loop runs over every tape input per backward
        epoch, slot_of = e.refs_state()
        slot = slot_of.get
        pos = {id(n): i for i, n in enumerate(order)}
        parts: list = [*mark.key, retain_graph, _context().precision, len(rq), *rq]
        targets = []
        for n in order:
            if n.released:
                return None, None  # the ordinary pass raises its error
            params = n.params
            if params:
                try:
                    fp = freeze_params(params)
                except TypeError:
                    return None, None
            else:
                fp = ()
            if n.out_ref is not None:
                o = n.out_ref()
                oq = None if o is None else e.queue_refs((o,))
                if oq is None:
                    return None, None
                oq = oq[0]
            else:
                oq = "none"
            inputs = n.inputs
            if tuple([x._vcell[0] for x in inputs]) != n.versions:
                return None, None  # an input written in place since: the ordinary pass routes its edges
            parts += (n.opdef.name, fp, n.precision, oq, len(inputs))
            for x in inputs:
                st = x._status
                if st == PENDING:
                    q = x._node
                    if q >= 0 or x._epoch != epoch:
                        return None, None
                    q = -1 - q
                elif st == COMPUTED:
                    q = slot(id(x))
                    if q is None:
                        return None, None
                    q = -1 - q
                else:
                    return None, None
                fn = x.grad_fn
                rg = x.requires_grad
                rt = x._retains_grad
                if rg and (fn is None or rt):
                    if x.grad is not None:
                        return None, None  # accumulates into an existing gradient: the ordinary pass
                    targets.append(x)
                parts += (q, -1 if fn is None else pos[id(fn)], rg, rt)
        return tuple(parts), targets

    def store(self, key, mark, ran: list[int], targets: list) -> None:
        seg = ENGINE.lazy_segment(mark)
        if seg is None:
            return
        assign = []
        seen: set[int] = set()
        for k, x in enumerate(targets):
            if id(x) in seen:
                continue
            seen.add(id(x))
            g = x.grad
            if g is None:
                continue
            j = ENGINE.result_index(g)
            if j is None or j < seg.start:
                return  # not a result of this backward's records
            assign.append((k, j, g.shape, g.dtype))
        _context().trace_cache.put(key, SegmentPlan(seg, tuple(ran), tuple(assign)))

    @staticmethod
    def replay(entry, order: list[Node], targets: list, retain_graph: bool, device) -> None:
        from .tensor import Tensor  # same layer
        seg, ran, assign = entry.segment, entry.ran, entry.assign
        for pos in ran:
            order[pos].check_versions()  # raises as the ordinary pass would, before anything is queued
        ENGINE.replay_segment(seg)
        for k, j, shape, dtype in assign:
            g = Tensor._blank(shape, dtype, device)
            ENGINE.adopt_result(g, j)
            targets[k].grad = g
        if not retain_graph:
            for pos in ran:
                _release(order[pos])


_BACKWARD = _BackwardCache()


def _accumulate_leaf(x, g, assigned: set[int]) -> None:
    if id(g) in assigned or g is x.grad:
        g = g.clone()
    if x.grad is None:
        x.grad = g
    else:
        x.grad = _add_grads(x.grad, g)
    assigned.add(id(x.grad))


def _add_grads(a, b):
    """a + b for gradients; float16/bfloat16 gradients (of storage-dtype tensors) add in float32."""
    if a.dtype is b.dtype and a.dtype.is_float and a.dtype.name != "float32":
        return op.cast(op.add(op.cast(a, dtype=_F32), op.cast(b, dtype=_F32)), dtype=a.dtype)
    return a + b


def reduce_to_shape(g, shape: tuple):
    """Sum a broadcast gradient back to ``shape`` (NumPy broadcasting rules)."""
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(i + lead for i, s in enumerate(shape) if s == 1 and g.shape[i + lead] != 1)
    if axes:
        g = g.sum(axis=axes, keepdim=True)
    if g.shape != shape:
        g = g.reshape(shape)
    return g


_Tensor = None  # tensor.py imports this module: the class is looked up once, at first use


def apply(opdef: OpDef, inputs: tuple, params: dict):
    """Validate, queue the node, and record it on the tape when an input requires grad. A repeated
    call runs its op plan from its signature in eager mode (``call_plans.planned_apply``) and appends
    its record from its graph call plan in graph mode (``call_plans.graph_planned_apply``)."""
    if inputs and _PLANS["on"]:
        c = _context()
        if c.observer is None and (opdef.differentiable or HIGHER.get() is None):
            if not c.graph:
                return _planned_apply(opdef, inputs, params, c, _apply)
            if not c.check:
                return _graph_planned_apply(opdef, inputs, params, c, _apply, _taped)
    return _apply(opdef, inputs, params)


def _apply(opdef: OpDef, inputs: tuple, params: dict):
    """:func:`apply`'s ordinary path: infer, queue (an eager op drains at once), tape."""
    global _Tensor
    Tensor = _Tensor
    if Tensor is None:  # a function-level import runs the import machinery on every op (~0.5 us)
        from .tensor import Tensor
        _Tensor = Tensor
    # (without ``**params`` when there are none: unpacking an empty dict still copies it)
    shape, dtype = opdef.infer(*inputs, **params) if params else opdef.infer(*inputs)
    out = Tensor._blank(shape, dtype, inputs[0].device if inputs else params["device"])
    work = opdef.work
    work = (work(*inputs, **params) if params else work(*inputs)) if work is not None else 0.0
    ENGINE.record(out, opdef.name, opdef.forward, inputs, work, params)
    return _taped(opdef, inputs, params, out)


def _taped(opdef: OpDef, inputs: tuple, params: dict, out):
    """The recorded op's result ``out``, on the tape when an input requires grad (with grad mode on)."""
    if opdef.differentiable:
        for x in inputs:  # (the inputs first: grad mode is a context variable read, and most ops need none)
            if x.requires_grad:
                if _enabled.get():
                    if opdef.backward is None:
                        raise RuntimeError(f"{opdef.name}: no backward rule; call it under gg.no_grad() "
                                           f"or detach its inputs")
                    out.requires_grad = True
                    out.grad_fn = Node(opdef, inputs, params, out)
                break
    elif HIGHER.get() is not None and _enabled.get():
        record_higher(opdef, inputs, params, out)
    return out


_ = is_grad_enabled
