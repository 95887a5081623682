/* ggmlgrad's optional compiled accelerator for the executor's hot path (``python -m ggmlgrad build
 * --accel``; loaded by ggmlgrad/_ggml/accel.py when present, off with GGMLGRAD_ACCEL=0).
 *
 * What it does, and nothing more: the pointer stores that rebind a cached plan's nodes to a run's
 * memory (the C twin of _ggml/nodes.py's PointerTable, same fields, same order, same results) and
 * ggml's scheduler compute, called directly with the GIL released (as ctypes does) instead of
 * through ctypes' argument conversion. A cached plan's whole run (take the compute lock, check the
 * executor's thread setting, choose an op's result memory, rebind, compute, check the status) is one
 * call: PointerTable.compute_planned, under a ComputeLock (threading.Lock's twin, taken in C).
 *
 * It links against no ggml: the address of ggml_backend_sched_graph_compute and the offsets of
 * ggml_tensor's ``data`` and ``buffer`` fields come from the loaded ctypes library at configure(),
 * so whichever ggml is loaded (the wheel, the fast build, GGMLGRAD_GGML_LIB) is the one called.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

#define ACCEL_ABI 5
#define KIND_OP 1
#define KIND_BOUND 2

typedef int (*sched_compute_fn)(void *sched, void *graph);

static sched_compute_fn g_compute = NULL;
static Py_ssize_t g_data_off = -1, g_buf_off = -1;
static PyObject *g_storage_type = NULL;   /* runtime.memory.Storage: a new result's memory */
static PyObject *g_failed_type = NULL;    /* engine.executor.ComputeFailed(status) */
static Py_ssize_t g_spare_bytes = 0;      /* results up to this size are kept as the plan's spare */
static PyObject *s_spare, *s_threads, *s_last_accelerated;
static unsigned long long g_planned_runs = 0;  /* compute_planned calls that computed (tests read it) */

/* A __slots__ attribute read without the generic lookup (a member descriptor's offset), as the
 * interpreter's own specialised attribute load does; any other attribute (a subclass's property,
 * an object of another type) goes through PyObject_GetAttr. */
typedef struct {
    PyObject *name;   /* interned */
    PyObject *descr;  /* the class's member descriptor, or NULL: always PyObject_GetAttr */
    Py_ssize_t offset;
} Slot;

static Slot slot_data, slot_buffer, slot_storage;

static int slot_init(Slot *slot, PyObject *type, const char *name) {
    if (slot->name == NULL && (slot->name = PyUnicode_InternFromString(name)) == NULL)
        return -1;
    Py_CLEAR(slot->descr);
    PyObject *d = type != NULL && PyType_Check(type) ? _PyType_Lookup((PyTypeObject *)type, slot->name) : NULL;
    if (d != NULL && Py_IS_TYPE(d, &PyMemberDescr_Type)) {
        PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
        if (m->type == T_OBJECT_EX && !(m->flags & READONLY)) {
            Py_INCREF(d);
            slot->descr = d;
            slot->offset = m->offset;
        }
    }
    return 0;
}

/* obj.<slot> as a new reference (NULL and AttributeError when unset, as getattr). */
static inline PyObject *slot_get(PyObject *obj, Slot *slot) {
    if (slot->descr != NULL && _PyType_Lookup(Py_TYPE(obj), slot->name) == slot->descr) {
        PyObject *v = *(PyObject **)((char *)obj + slot->offset);
        if (v != NULL) {
            Py_INCREF(v);
            return v;
        }
    }
    return PyObject_GetAttr(obj, slot->name);
}

static inline void store_ptr(uintptr_t node, Py_ssize_t off, uintptr_t value) {
    memcpy((char *)node + off, &value, sizeof(value));
}

/* An int attribute of ``obj`` as an address (-1 and an exception on failure). */
static inline int get_addr(PyObject *obj, Slot *slot, uintptr_t *out) {
    PyObject *v = slot_get(obj, slot);
    if (v == NULL)
        return -1;
    void *p = PyLong_AsVoidPtr(v);
    Py_DECREF(v);
    if (p == NULL && PyErr_Occurred())
        return -1;
    *out = (uintptr_t)p;
    return 0;
}

static inline int compute_status(uintptr_t sched, uintptr_t graph) {
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = g_compute((void *)sched, (void *)graph);
    Py_END_ALLOW_THREADS
    return status;
}

static int raise_failed(int status) {
    PyObject *err = PyObject_CallFunction(g_failed_type, "i", status);
    if (err != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(err), err);
        Py_DECREF(err);
    }
    return -1;
}

/* ------------------------------------------------------------------ PointerTable */
typedef struct {
    uintptr_t node;
    Py_ssize_t base;
    uintptr_t offs;
} View;

typedef struct {
    PyObject_HEAD
    Py_ssize_t n;          /* bases: leaves, then outputs */
    uintptr_t *nodes;      /* 0: a leaf the graph does not use */
    uintptr_t *bound_data; /* what bind() last wrote, per base */
    uintptr_t *bound_buf;
    unsigned char *moved;  /* scratch: bases rebound by the current call */
    Py_ssize_t n_views;
    View *views;
    uintptr_t sched, graph;  /* set_graph(): what compute_planned computes */
    struct ComputeLockS *lock;  /* ... under this lock */
    PyObject *executor;      /* ... when this executor's thread setting is the plan's */
    PyObject *accelerated;
    int kind;                /* KIND_OP or KIND_BOUND */
} PointerTable;

static void table_dealloc(PointerTable *self) {
    Py_XDECREF((PyObject *)self->lock);
    Py_XDECREF(self->executor);
    Py_XDECREF(self->accelerated);
    PyMem_Free(self->nodes);
    PyMem_Free(self->bound_data);
    PyMem_Free(self->bound_buf);
    PyMem_Free(self->moved);
    PyMem_Free(self->views);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int table_init(PointerTable *self, PyObject *args, PyObject *kwds) {
    PyObject *bases, *views;
    if (!PyArg_ParseTuple(args, "OO:PointerTable", &bases, &views))
        return -1;
    PyObject *bseq = PySequence_Fast(bases, "PointerTable: bases must be a sequence");
    if (bseq == NULL)
        return -1;
    PyObject *vseq = PySequence_Fast(views, "PointerTable: views must be a sequence");
    if (vseq == NULL) {
        Py_DECREF(bseq);
        return -1;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(bseq), nv = PySequence_Fast_GET_SIZE(vseq);
    PyMem_Free(self->nodes);  /* __init__ called again: start over */
    PyMem_Free(self->bound_data);
    PyMem_Free(self->bound_buf);
    PyMem_Free(self->moved);
    PyMem_Free(self->views);
    self->n = n;
    self->n_views = nv;
    self->nodes = PyMem_Calloc(n ? n : 1, sizeof(uintptr_t));
    self->bound_data = PyMem_Calloc(n ? n : 1, sizeof(uintptr_t));
    self->bound_buf = PyMem_Calloc(n ? n : 1, sizeof(uintptr_t));
    self->moved = PyMem_Calloc(n ? n : 1, 1);
    self->views = PyMem_Calloc(nv ? nv : 1, sizeof(View));
    int rc = -1;
    if (!self->nodes || !self->bound_data || !self->bound_buf || !self->moved || !self->views) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        void *p = PyLong_AsVoidPtr(PySequence_Fast_GET_ITEM(bseq, i));
        if (p == NULL && PyErr_Occurred())
            goto done;
        self->nodes[i] = (uintptr_t)p;
    }
    for (Py_ssize_t k = 0; k < nv; k++) {
        PyObject *node, *offs;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(vseq, k), "OnO:PointerTable view", &node,
                              &self->views[k].base, &offs))
            goto done;
        if (self->views[k].base < 0 || self->views[k].base >= n) {
            PyErr_SetString(PyExc_IndexError, "PointerTable: a view's base index is out of range");
            goto done;
        }
        void *p = PyLong_AsVoidPtr(node);
        if (p == NULL && PyErr_Occurred())
            goto done;
        self->views[k].node = (uintptr_t)p;
        size_t o = PyLong_AsSize_t(offs);
        if (o == (size_t)-1 && PyErr_Occurred())
            goto done;
        self->views[k].offs = (uintptr_t)o;
    }
    rc = 0;
done:
    Py_DECREF(bseq);
    Py_DECREF(vseq);
    return rc;
}

/* Point base ``i`` at (data, buf) when it moved; returns 1 when it did. */
static inline int bind_base(PointerTable *self, Py_ssize_t i, uintptr_t data, uintptr_t buf) {
    if (data == self->bound_data[i] && buf == self->bound_buf[i]) {
        self->moved[i] = 0;
        return 0;
    }
    uintptr_t node = self->nodes[i];
    if (node) {
        store_ptr(node, g_data_off, data);
        store_ptr(node, g_buf_off, buf);
    }
    self->bound_data[i] = data;
    self->bound_buf[i] = buf;
    self->moved[i] = 1;
    return 1;
}

static inline void bind_views(PointerTable *self) {
    for (Py_ssize_t k = 0; k < self->n_views; k++) {
        View *v = &self->views[k];
        if (self->moved[v->base]) {
            store_ptr(v->node, g_data_off, self->bound_data[v->base] + v->offs);
            store_ptr(v->node, g_buf_off, self->bound_buf[v->base]);
        }
    }
}

/* Bind base ``i`` to storage ``s`` (an object with ``data`` and ``buffer``). */
static inline int bind_storage(PointerTable *self, Py_ssize_t i, PyObject *s, int *any) {
    uintptr_t data, buf;
    if (get_addr(s, &slot_data, &data) < 0 || get_addr(s, &slot_buffer, &buf) < 0)
        return -1;
    *any |= bind_base(self, i, data, buf);
    return 0;
}

static int do_bind(PointerTable *self, PyObject *leaves, PyObject *outs) {
    PyObject *lseq = PySequence_Fast(leaves, "bind: leaf storages must be a sequence");
    if (lseq == NULL)
        return -1;
    PyObject *oseq = PySequence_Fast(outs, "bind: output storages must be a sequence");
    if (oseq == NULL) {
        Py_DECREF(lseq);
        return -1;
    }
    Py_ssize_t nl = PySequence_Fast_GET_SIZE(lseq), no = PySequence_Fast_GET_SIZE(oseq);
    int rc = -1, any = 0;
    if (nl + no > self->n) {
        PyErr_SetString(PyExc_IndexError, "bind: more storages than the plan has bases");
        goto done;
    }
    for (Py_ssize_t i = 0; i < nl; i++)
        if (bind_storage(self, i, PySequence_Fast_GET_ITEM(lseq, i), &any) < 0)
            goto done;
    for (Py_ssize_t k = 0; k < no; k++)
        if (bind_storage(self, nl + k, PySequence_Fast_GET_ITEM(oseq, k), &any) < 0)
            goto done;
    for (Py_ssize_t i = nl + no; i < self->n; i++)
        self->moved[i] = 0;
    if (any)
        bind_views(self);
    rc = 0;
done:
    Py_DECREF(lseq);
    Py_DECREF(oseq);
    return rc;
}

static int do_bind_op(PointerTable *self, PyObject *inputs, PyObject *out) {
    PyObject *seq = PySequence_Fast(inputs, "bind_op: inputs must be a sequence");
    if (seq == NULL)
        return -1;
    Py_ssize_t ni = PySequence_Fast_GET_SIZE(seq);
    int rc = -1, any = 0;
    if (ni + 1 > self->n) {
        PyErr_SetString(PyExc_IndexError, "bind_op: more inputs than the plan has leaves");
        goto done;
    }
    for (Py_ssize_t i = 0; i < ni; i++) {
        PyObject *s = slot_get(PySequence_Fast_GET_ITEM(seq, i), &slot_storage);
        if (s == NULL)
            goto done;
        int r = bind_storage(self, i, s, &any);
        Py_DECREF(s);
        if (r < 0)
            goto done;
    }
    if (bind_storage(self, ni, out, &any) < 0)
        goto done;
    for (Py_ssize_t i = ni + 1; i < self->n; i++)
        self->moved[i] = 0;
    if (any)
        bind_views(self);
    rc = 0;
done:
    Py_DECREF(seq);
    return rc;
}

static PyObject *table_bind(PointerTable *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "bind(leaf_storages, out_storages)");
        return NULL;
    }
    if (do_bind(self, args[0], args[1]) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *table_bind_op(PointerTable *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "bind_op(inputs, out)");
        return NULL;
    }
    if (do_bind_op(self, args[0], args[1]) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ ComputeLock */
/* threading.Lock's twin (acquire, release, locked, with) that the planned compute below takes
 * without a Python call: runtime/executor.py's COMPUTE_LOCK is one when the accelerator loads. */
typedef struct ComputeLockS {
    PyObject_HEAD
    PyThread_type_lock lock;
    int locked;
} ComputeLock;

/* 1 acquired, 0 timed out, -1 an exception (a signal handler raised while waiting). The GIL is
 * released while waiting, in slices, so that signals (Ctrl-C) are handled as threading.Lock does. */
static int lock_take(ComputeLock *l, int blocking, double timeout) {
    if (PyThread_acquire_lock_timed(l->lock, 0, 0) == PY_LOCK_ACQUIRED) {
        l->locked = 1;
        return 1;
    }
    if (!blocking)
        return 0;
    double left = timeout;  /* seconds; < 0: forever */
    for (;;) {
        PY_TIMEOUT_T slice = 50000;  /* microseconds */
        if (left >= 0 && left * 1e6 < (double)slice)
            slice = (PY_TIMEOUT_T)(left * 1e6);
        PyLockStatus r;
        Py_BEGIN_ALLOW_THREADS
        r = PyThread_acquire_lock_timed(l->lock, slice, 0);
        Py_END_ALLOW_THREADS
        if (r == PY_LOCK_ACQUIRED) {
            l->locked = 1;
            return 1;
        }
        if (PyErr_CheckSignals() < 0)
            return -1;
        if (left >= 0) {
            left -= (double)slice / 1e6;
            if (left <= 0)
                return 0;
        }
    }
}

static inline void lock_give(ComputeLock *l) {
    l->locked = 0;
    PyThread_release_lock(l->lock);
}

static PyObject *lock_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    ComputeLock *self = (ComputeLock *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->lock = PyThread_allocate_lock();
    if (self->lock == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    return (PyObject *)self;
}

static void lock_dealloc(ComputeLock *self) {
    if (self->lock) {
        if (self->locked)
            PyThread_release_lock(self->lock);
        PyThread_free_lock(self->lock);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *lock_acquire(ComputeLock *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"blocking", "timeout", NULL};
    int blocking = 1;
    double timeout = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|pd:acquire", kwlist, &blocking, &timeout))
        return NULL;
    if (!blocking && timeout != -1) {
        PyErr_SetString(PyExc_ValueError, "can't specify a timeout for a non-blocking call");
        return NULL;
    }
    if (timeout < 0 && timeout != -1) {
        PyErr_SetString(PyExc_ValueError, "timeout value must be a non-negative number");
        return NULL;
    }
    int r = lock_take(self, blocking, timeout);
    if (r < 0)
        return NULL;
    return PyBool_FromLong(r);
}

static PyObject *lock_enter(ComputeLock *self, PyObject *unused) {
    int r = lock_take(self, 1, -1);
    if (r < 0)
        return NULL;
    Py_RETURN_TRUE;
}

static PyObject *lock_release(ComputeLock *self, PyObject *unused) {
    if (!self->locked) {
        PyErr_SetString(PyExc_RuntimeError, "release unlocked lock");
        return NULL;
    }
    lock_give(self);
    Py_RETURN_NONE;
}

static PyObject *lock_exit(ComputeLock *self, PyObject *args) {
    return lock_release(self, NULL);
}

static PyObject *lock_locked(ComputeLock *self, PyObject *unused) {
    return PyBool_FromLong(self->locked);
}

static PyMethodDef lock_methods[] = {
    {"acquire", (PyCFunction)(void (*)(void))lock_acquire, METH_VARARGS | METH_KEYWORDS,
     "acquire(blocking=True, timeout=-1) -> bool"},
    {"release", (PyCFunction)lock_release, METH_NOARGS, "release()"},
    {"locked", (PyCFunction)lock_locked, METH_NOARGS, "locked() -> bool"},
    {"__enter__", (PyCFunction)lock_enter, METH_NOARGS, "acquire()"},
    {"__exit__", (PyCFunction)lock_exit, METH_VARARGS, "release()"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ComputeLockType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ggmlgrad._ggml._accel.ComputeLock",
    .tp_basicsize = sizeof(ComputeLock),
    .tp_dealloc = (destructor)lock_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A lock with threading.Lock's methods that the accelerated compute takes in C.",
    .tp_methods = lock_methods,
    .tp_new = lock_new,
};

/* ------------------------------------------------------------------ the planned compute */
/* OpPlan.bind's body: the result's storage (new reference), bound with the inputs; NULL on error. */
static PyObject *bind_op_plan(PointerTable *self, PyObject *plan, PyObject *inputs, PyObject *device,
                              PyObject *nbytes_obj, PyObject *s) {
    Py_ssize_t nbytes = PyLong_AsSsize_t(nbytes_obj);
    if (nbytes == -1 && PyErr_Occurred())
        return NULL;
    if (s == Py_None) {
        s = PyObject_GetAttr(plan, s_spare);
        if (s == NULL)
            return NULL;
        /* Our reference and the plan's: nobody else holds the last result (OpPlan.bind's test). */
        if (s != Py_None && Py_REFCNT(s) == 2) {
            if (PyObject_SetAttr(plan, s_spare, Py_None) < 0) {
                Py_DECREF(s);
                return NULL;
            }
        } else {
            Py_DECREF(s);
            PyObject *call[2] = {device, nbytes_obj};
            s = PyObject_Vectorcall(g_storage_type, call, 2, NULL);
            if (s == NULL)
                return NULL;
        }
    } else {
        Py_INCREF(s);
    }
    if (do_bind_op(self, inputs, s) < 0 || (nbytes <= g_spare_bytes && PyObject_SetAttr(plan, s_spare, s) < 0)) {
        Py_DECREF(s);
        return NULL;
    }
    return s;
}

/* compute_planned(plan, threads, args): the executor's compute of a plan made with this table, when
 * its executor already runs ``threads`` threads for it: under the compute lock, bind (an op plan:
 * OpPlan.bind(*args); a graph plan: bind(*args)), compute, check the status (ComputeFailed).
 * Returns what the bind returns (an op plan's result storage, else None), or NotImplemented, having
 * done nothing, when the thread setting must change first (the executor's Python path does that). */
static PyObject *table_compute_planned(PointerTable *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyTuple_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "compute_planned(plan, threads, args: tuple)");
        return NULL;
    }
    if (g_compute == NULL || g_failed_type == NULL || self->lock == NULL || !self->sched || !self->graph) {
        PyErr_SetString(PyExc_RuntimeError, "ggmlgrad accelerator: not configured for this plan (set_graph)");
        return NULL;
    }
    PyObject *plan = args[0], *threads = args[1], *cargs = args[2];
    Py_ssize_t n = PyTuple_GET_SIZE(cargs);
    /* OpPlan.bind(inputs, device, nbytes, s=None); Plan.bind(leaf_storages, out_storages) */
    if (self->kind == KIND_OP ? (n != 3 && n != 4) : n != 2) {
        PyErr_SetString(PyExc_TypeError, "compute_planned: wrong number of bind arguments for this plan");
        return NULL;
    }
    ComputeLock *lock = self->lock;
    int r = lock_take(lock, 1, -1);
    if (r < 0)
        return NULL;
    PyObject *got = NULL;
    /* The thread setting the executor last made must be this plan's (else Python's set_threads). */
    PyObject *t = PyObject_GetAttr(self->executor, s_threads);
    if (t == NULL)
        goto unlock;
    int same = PyObject_RichCompareBool(t, threads, Py_EQ);
    Py_DECREF(t);
    if (same < 0)
        goto unlock;
    if (same) {
        PyObject *acc = PyObject_GetAttr(self->executor, s_last_accelerated);
        if (acc == NULL)
            goto unlock;
        same = acc == self->accelerated;
        Py_DECREF(acc);
    }
    if (!same) {
        got = Py_NewRef(Py_NotImplemented);
        goto unlock;
    }
    if (self->kind == KIND_OP) {
        got = bind_op_plan(self, plan, PyTuple_GET_ITEM(cargs, 0), PyTuple_GET_ITEM(cargs, 1),
                           PyTuple_GET_ITEM(cargs, 2), n == 4 ? PyTuple_GET_ITEM(cargs, 3) : Py_None);
    } else if (do_bind(self, PyTuple_GET_ITEM(cargs, 0), PyTuple_GET_ITEM(cargs, 1)) == 0) {
        got = Py_NewRef(Py_None);
    }
    if (got == NULL)
        goto unlock;
    g_planned_runs++;
    int status = compute_status(self->sched, self->graph);  /* the GIL released, the lock held */
    if (status != 0) {
        Py_CLEAR(got);
        lock_give(lock);
        raise_failed(status);
        return NULL;
    }
unlock:
    lock_give(lock);
    return got;
}

static PyObject *table_unbind(PointerTable *self, PyObject *arg) {
    Py_ssize_t start = PyLong_AsSsize_t(arg);
    if (start == -1 && PyErr_Occurred())
        return NULL;
    for (Py_ssize_t i = start < 0 ? 0 : start; i < self->n; i++)
        if (self->nodes[i]) {
            store_ptr(self->nodes[i], g_data_off, 0);
            store_ptr(self->nodes[i], g_buf_off, 0);
        }
    Py_RETURN_NONE;
}

/* set_graph(sched, graph, lock, executor, accelerated, kind): what compute_planned computes, under
 * which lock (a ComputeLock), for which executor's thread setting (``executor.threads`` and
 * ``executor.last_accelerated is accelerated``), and how it binds (kind 1: an op plan, 2: a graph plan). */
static PyObject *table_set_graph(PointerTable *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "set_graph(sched, graph, lock, executor, accelerated, kind)");
        return NULL;
    }
    void *sched = PyLong_AsVoidPtr(args[0]);
    if (sched == NULL && PyErr_Occurred())
        return NULL;
    void *graph = PyLong_AsVoidPtr(args[1]);
    if (graph == NULL && PyErr_Occurred())
        return NULL;
    if (!PyObject_TypeCheck(args[2], &ComputeLockType)) {
        PyErr_SetString(PyExc_TypeError, "set_graph: the lock must be a ComputeLock");
        return NULL;
    }
    long kind = PyLong_AsLong(args[5]);
    if (kind == -1 && PyErr_Occurred())
        return NULL;
    if (kind != KIND_OP && kind != KIND_BOUND) {
        PyErr_SetString(PyExc_ValueError, "set_graph: kind must be 1 (op plan) or 2 (graph plan)");
        return NULL;
    }
    self->sched = (uintptr_t)sched;
    self->graph = (uintptr_t)graph;
    Py_INCREF(args[2]);
    Py_XSETREF(self->lock, (ComputeLock *)args[2]);
    Py_INCREF(args[3]);
    Py_XSETREF(self->executor, args[3]);
    Py_INCREF(args[4]);
    Py_XSETREF(self->accelerated, args[4]);
    self->kind = (int)kind;
    Py_RETURN_NONE;
}

static PyObject *addr_list(const uintptr_t *v, Py_ssize_t n) {
    PyObject *l = PyList_New(n);
    if (l == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = PyLong_FromSize_t((size_t)v[i]);
        if (x == NULL) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SET_ITEM(l, i, x);
    }
    return l;
}

static PyObject *table_get_bound_data(PointerTable *self, void *closure) {
    return addr_list(self->bound_data, self->n);
}

static PyObject *table_get_bound_buf(PointerTable *self, void *closure) {
    return addr_list(self->bound_buf, self->n);
}

static PyMethodDef table_methods[] = {
    {"bind", (PyCFunction)(void (*)(void))table_bind, METH_FASTCALL,
     "bind(leaf_storages, out_storages): point the bases at these storages' memory (what moved)."},
    {"bind_op", (PyCFunction)(void (*)(void))table_bind_op, METH_FASTCALL,
     "bind_op(inputs, out): bind() for an eager op plan (inputs' _storage, then out)."},
    {"compute_planned", (PyCFunction)(void (*)(void))table_compute_planned, METH_FASTCALL,
     "compute_planned(plan, threads, args): lock, bind, compute, check (or NotImplemented: threads to set)."},
    {"unbind", (PyCFunction)table_unbind, METH_O, "unbind(start): clear the pointers of bases start.."},
    {"set_graph", (PyCFunction)(void (*)(void))table_set_graph, METH_FASTCALL,
     "set_graph(sched, graph, lock, executor, accelerated, kind): what compute_planned() computes."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef table_getset[] = {
    {"bound_data", (getter)table_get_bound_data, NULL, "what bind() last wrote as data, per base", NULL},
    {"bound_buf", (getter)table_get_bound_buf, NULL, "what bind() last wrote as buffer, per base", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject PointerTableType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ggmlgrad._ggml._accel.PointerTable",
    .tp_basicsize = sizeof(PointerTable),
    .tp_dealloc = (destructor)table_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A plan's base nodes and their views, rebound in C (see _ggml/nodes.py's PointerTable).",
    .tp_methods = table_methods,
    .tp_getset = table_getset,
    .tp_init = (initproc)table_init,
    .tp_new = PyType_GenericNew,
};


/* ------------------------------------------------------------------ graph-mode call plans */
/* graph_append(queue, record, args, device, numel, label): a graph call plan's one record
 * appended to ``queue`` as engine/graph_call_plans.py's Python loop appends it (the record, the plan key's
 * header and inputs, the label) with its result made as Tensor._blank makes one and marked pending;
 * returns the result, or None having changed nothing when an input is not a plain tensor the key
 * has seen (a view, a new leaf, a failed or foreign one) or the queue has no plan key: the Python
 * path then appends it. ``record``: (build, params, shape, dtype, prec, label, header, refs). */
enum { T_SHAPE, T_DTYPE, T_DEVICE, T_NUMEL, T_STORAGE, T_NODE, T_EPOCH, T_STATUS, T_LEAF, T_LEAF_EPOCH, T_ERROR,
       T_RG, T_GRAD, T_GRADFN, T_VCELL, T_RETAINS, T_COUNT };
static const char *TENSOR_SLOTS[T_COUNT] = {"shape", "dtype", "device", "numel_", "_storage", "_node", "_epoch",
    "_status", "_leaf", "_leaf_epoch", "_error", "requires_grad", "grad", "grad_fn", "_vcell", "_retains_grad"};
static Slot tslots[T_COUNT];
static PyTypeObject *g_tensor_type = NULL;
static PyObject *s_lazy, *s_sig, *s_sig_slot, *s_epoch, *s_labels;

static PyObject *mod_configure_graph_append(PyObject *mod, PyObject *cls) {
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "configure_graph_append(tensor_class)");
        return NULL;
    }
    for (int i = 0; i < T_COUNT; i++) {
        if (slot_init(&tslots[i], cls, TENSOR_SLOTS[i]) < 0)
            return NULL;
        if (tslots[i].descr == NULL) {
            PyErr_Format(PyExc_TypeError, "configure_graph_append: %s is not a writable slot of the tensor class",
                         TENSOR_SLOTS[i]);
            return NULL;
        }
    }
    Py_INCREF(cls);
    Py_XSETREF(g_tensor_type, (PyTypeObject *)cls);
    Py_RETURN_NONE;
}

/* obj's slot ``i`` as a borrowed reference, or NULL (no error set) when obj's class does not read
 * it through the tensor class's member (a property of a subclass) or it is unset. */
static inline PyObject *tslot(PyObject *obj, int i) {
    if (_PyType_Lookup(Py_TYPE(obj), tslots[i].name) != tslots[i].descr)
        return NULL;
    return *(PyObject **)((char *)obj + tslots[i].offset);
}

static inline void tset(PyObject *obj, int i, PyObject *v) {   /* steals v; obj's slot is empty */
    *(PyObject **)((char *)obj + tslots[i].offset) = v;
}

static PyObject *mod_graph_append(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "graph_append(queue, record, args, device, numel, label)");
        return NULL;
    }
    if (g_tensor_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "ggmlgrad accelerator: configure_graph_append() was not called");
        return NULL;
    }
    PyObject *q = args[0], *one = args[1], *cargs = args[2], *device = args[3], *numel = args[4], *label = args[5];
    if (!PyTuple_CheckExact(one) || PyTuple_GET_SIZE(one) != 8 || !PyTuple_CheckExact(cargs) ||
        !PyTuple_CheckExact(PyTuple_GET_ITEM(one, 6)) || !PyTuple_CheckExact(PyTuple_GET_ITEM(one, 7))) {
        PyErr_SetString(PyExc_TypeError, "graph_append: a record tuple of 8 and an argument tuple");
        return NULL;
    }
    PyObject *header = PyTuple_GET_ITEM(one, 6), *refs = PyTuple_GET_ITEM(one, 7);
    Py_ssize_t n = PyTuple_GET_SIZE(refs), nh = PyTuple_GET_SIZE(header);
    PyObject *lazy = NULL, *sig = NULL, *slot_of = NULL, *epoch = NULL, *labels = NULL;
    PyObject *rec = NULL, *keys = NULL, *out = NULL, *result = NULL;
    lazy = PyObject_GetAttr(q, s_lazy);
    sig = lazy ? PyObject_GetAttr(q, s_sig) : NULL;
    if (sig == NULL)
        goto done;
    if (!PyList_CheckExact(sig) || !PyList_CheckExact(lazy)) {   /* no plan key: the Python path */
        result = Py_None;
        Py_INCREF(result);
        goto done;
    }
    slot_of = PyObject_GetAttr(q, s_sig_slot);
    epoch = slot_of ? PyObject_GetAttr(q, s_epoch) : NULL;
    labels = epoch ? PyObject_GetAttr(q, s_labels) : NULL;
    if (labels == NULL)
        goto done;
    if (!PyDict_CheckExact(slot_of) || !PyList_CheckExact(labels)) {
        PyErr_SetString(PyExc_TypeError, "graph_append: not a record queue");
        goto done;
    }
    rec = PyTuple_New(6 + n);
    keys = PyTuple_New(n);   /* the plan key's entry per input */
    if (rec == NULL || keys == NULL)
        goto done;
    for (Py_ssize_t k = 0; k < n; k++) {
        Py_ssize_t r = PyLong_AsSsize_t(PyTuple_GET_ITEM(refs, k));
        if (r < 0 || r >= PyTuple_GET_SIZE(cargs)) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "graph_append: an input reference out of range");
            goto done;
        }
        PyObject *x = PyTuple_GET_ITEM(cargs, r);
        PyObject **dp = _PyObject_GetDictPtr(x);
        if (dp != NULL && *dp != NULL && PyDict_GET_SIZE(*dp) != 0)
            goto not_handled;   /* a view (its layout), or attributes of its own */
        PyObject *st = tslot(x, T_STATUS);
        if (st == NULL || !PyLong_CheckExact(st))
            goto not_handled;
        long status = PyLong_AsLong(st);
        if (status == 0) {   /* COMPUTED: a leaf the key has a slot for */
            PyObject *id = PyLong_FromVoidPtr(x);
            if (id == NULL)
                goto done;
            PyObject *s = PyDict_GetItemWithError(slot_of, id);
            Py_DECREF(id);
            if (s == NULL) {
                if (PyErr_Occurred())
                    goto done;
                goto not_handled;   /* a new leaf: the Python path gives it its slot */
            }
            Py_ssize_t slot = PyLong_AsSsize_t(s);
            if (slot == -1 && PyErr_Occurred())
                goto done;
            PyObject *key = PyLong_FromSsize_t(-1 - slot);
            if (key == NULL)
                goto done;
            Py_INCREF(x);
            PyTuple_SET_ITEM(rec, 6 + k, x);
            PyTuple_SET_ITEM(keys, k, key);
        } else if (status == 1) {   /* PENDING: a lazy result of this queue */
            PyObject *xe = tslot(x, T_EPOCH), *xn = tslot(x, T_NODE);
            if (xe == NULL || xn == NULL)
                goto not_handled;
            int same = PyObject_RichCompareBool(xe, epoch, Py_EQ);
            if (same < 0)
                goto done;
            Py_ssize_t node = PyLong_AsSsize_t(xn);
            if (node == -1 && PyErr_Occurred())
                goto done;
            if (!same || node >= 0)
                goto not_handled;
            PyObject *p = PyLong_FromSsize_t(-1 - node);
            if (p == NULL)
                goto done;
            Py_INCREF(p);
            PyTuple_SET_ITEM(rec, 6 + k, p);
            PyTuple_SET_ITEM(keys, k, p);
        } else {
            goto not_handled;
        }
    }
    /* Every input resolved: make the result (Tensor._blank's fields, then pending) and commit. */
    out = g_tensor_type->tp_alloc(g_tensor_type, 0);
    if (out == NULL)
        goto done;
    PyObject *vcell = PyList_New(1);
    PyObject *node = PyLong_FromSsize_t(-1 - PyList_GET_SIZE(lazy));
    PyObject *pending = PyLong_FromLong(1), *zero = PyLong_FromLong(0), *minus_one = PyLong_FromLong(-1);
    if (vcell == NULL || node == NULL || pending == NULL || zero == NULL || minus_one == NULL) {
        Py_XDECREF(vcell); Py_XDECREF(node); Py_XDECREF(pending); Py_XDECREF(zero); Py_XDECREF(minus_one);
        goto done;
    }
    Py_INCREF(zero);
    PyList_SET_ITEM(vcell, 0, zero);
    PyObject *shape = PyTuple_GET_ITEM(one, 2), *dtype = PyTuple_GET_ITEM(one, 3);
    Py_INCREF(shape); tset(out, T_SHAPE, shape);
    Py_INCREF(dtype); tset(out, T_DTYPE, dtype);
    Py_INCREF(device); tset(out, T_DEVICE, device);
    Py_INCREF(numel); tset(out, T_NUMEL, numel);
    Py_INCREF(Py_None); tset(out, T_STORAGE, Py_None);
    tset(out, T_NODE, node);
    Py_INCREF(epoch); tset(out, T_EPOCH, epoch);
    tset(out, T_STATUS, pending);
    tset(out, T_LEAF, zero);
    tset(out, T_LEAF_EPOCH, minus_one);
    Py_INCREF(Py_None); tset(out, T_ERROR, Py_None);
    Py_INCREF(Py_False); tset(out, T_RG, Py_False);
    Py_INCREF(Py_None); tset(out, T_GRAD, Py_None);
    Py_INCREF(Py_None); tset(out, T_GRADFN, Py_None);
    tset(out, T_VCELL, vcell);
    Py_INCREF(Py_False); tset(out, T_RETAINS, Py_False);
    PyObject *ref = PyWeakref_NewRef(out, NULL);
    if (ref == NULL)
        goto done;
    for (int i = 0; i < 5; i++) {
        PyObject *v = PyTuple_GET_ITEM(one, i);
        Py_INCREF(v);
        PyTuple_SET_ITEM(rec, i, v);
    }
    PyTuple_SET_ITEM(rec, 5, ref);
    if (PyList_Append(lazy, rec) < 0)
        goto done;
    for (Py_ssize_t i = 0; i < nh; i++)
        if (PyList_Append(sig, PyTuple_GET_ITEM(header, i)) < 0)
            goto done;
    for (Py_ssize_t k = 0; k < n; k++)
        if (PyList_Append(sig, PyTuple_GET_ITEM(keys, k)) < 0)
            goto done;
    if (PyList_Append(labels, label) < 0)
        goto done;
    result = out;
    out = NULL;
    goto done;
not_handled:
    result = Py_None;
    Py_INCREF(result);
done:
    Py_XDECREF(lazy); Py_XDECREF(sig); Py_XDECREF(slot_of); Py_XDECREF(epoch); Py_XDECREF(labels);
    Py_XDECREF(rec); Py_XDECREF(keys); Py_XDECREF(out);
    return result;
}

/* ------------------------------------------------------------------ module */
static PyObject *mod_configure(PyObject *mod, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"compute", "data_offset", "buffer_offset", "storage", "failed", "spare_bytes",
                             "array", NULL};
    PyObject *compute, *storage, *failed, *array;
    Py_ssize_t data_off, buf_off, spare;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OnnOOnO:configure", kwlist, &compute, &data_off, &buf_off,
                                     &storage, &failed, &spare, &array))
        return NULL;
    void *fn = PyLong_AsVoidPtr(compute);
    if (fn == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "configure: a null compute function");
        return NULL;
    }
    if (data_off < 0 || buf_off < 0) {
        PyErr_SetString(PyExc_ValueError, "configure: negative field offsets");
        return NULL;
    }
    if (!PyCallable_Check(storage) || !PyCallable_Check(failed)) {
        PyErr_SetString(PyExc_TypeError, "configure: storage and failed must be callable");
        return NULL;
    }
    if (slot_init(&slot_data, storage, "data") < 0 || slot_init(&slot_buffer, storage, "buffer") < 0 ||
        slot_init(&slot_storage, array, "_storage") < 0)
        return NULL;
    g_compute = (sched_compute_fn)fn;
    g_data_off = data_off;
    g_buf_off = buf_off;
    Py_INCREF(storage);
    Py_XSETREF(g_storage_type, storage);
    Py_INCREF(failed);
    Py_XSETREF(g_failed_type, failed);
    g_spare_bytes = spare;
    Py_RETURN_NONE;
}

/* graph_compute(sched, graph) -> status: ggml_backend_sched_graph_compute without ctypes. */
static PyObject *mod_graph_compute(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "graph_compute(sched, graph)");
        return NULL;
    }
    if (g_compute == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "ggmlgrad accelerator: configure() was not called");
        return NULL;
    }
    void *sched = PyLong_AsVoidPtr(args[0]);
    if (sched == NULL && PyErr_Occurred())
        return NULL;
    void *graph = PyLong_AsVoidPtr(args[1]);
    if (graph == NULL && PyErr_Occurred())
        return NULL;
    return PyLong_FromLong(compute_status((uintptr_t)sched, (uintptr_t)graph));
}

static PyObject *mod_planned_runs(PyObject *mod, PyObject *unused) {
    return PyLong_FromUnsignedLongLong(g_planned_runs);
}

static PyMethodDef module_methods[] = {
    {"configure_graph_append", (PyCFunction)mod_configure_graph_append, METH_O,
     "configure_graph_append(tensor_class): the class graph_append makes results of (its slots are written directly)"},
    {"graph_append", (PyCFunction)(void (*)(void))mod_graph_append, METH_FASTCALL,
     "graph_append(queue, record, args, device, numel, label) -> the result, or None (the Python path)"},
    {"planned_runs", (PyCFunction)mod_planned_runs, METH_NOARGS,
     "planned_runs() -> how many plan computes compute_planned made (for tests)"},
    {"configure", (PyCFunction)(void (*)(void))mod_configure, METH_VARARGS | METH_KEYWORDS,
     "configure(compute, data_offset, buffer_offset, storage, failed, spare_bytes, array)"},
    {"graph_compute", (PyCFunction)(void (*)(void))mod_graph_compute, METH_FASTCALL,
     "graph_compute(sched, graph) -> ggml status (the GIL released during the compute)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef accel_module = {
    PyModuleDef_HEAD_INIT, "_accel", "ggmlgrad's optional compiled executor hot path.", -1, module_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__accel(void) {
    if (PyType_Ready(&PointerTableType) < 0 || PyType_Ready(&ComputeLockType) < 0)
        return NULL;
    s_spare = PyUnicode_InternFromString("spare");
    s_threads = PyUnicode_InternFromString("threads");
    s_last_accelerated = PyUnicode_InternFromString("last_accelerated");
    s_lazy = PyUnicode_InternFromString("lazy");
    s_sig = PyUnicode_InternFromString("_sig");
    s_sig_slot = PyUnicode_InternFromString("_sig_slot");
    s_epoch = PyUnicode_InternFromString("epoch");
    s_labels = PyUnicode_InternFromString("labels");
    if (!s_lazy || !s_sig || !s_sig_slot || !s_epoch || !s_labels)
        return NULL;
    if (slot_init(&slot_data, NULL, "data") < 0 || slot_init(&slot_buffer, NULL, "buffer") < 0 ||
        slot_init(&slot_storage, NULL, "_storage") < 0)
        return NULL;
    if (!s_spare || !s_threads || !s_last_accelerated)
        return NULL;
    PyObject *m = PyModule_Create(&accel_module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&PointerTableType);
    Py_INCREF(&ComputeLockType);
    if (PyModule_AddObject(m, "ComputeLock", (PyObject *)&ComputeLockType) < 0) {
        Py_DECREF(&ComputeLockType);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddObject(m, "PointerTable", (PyObject *)&PointerTableType) < 0 ||
        PyModule_AddIntConstant(m, "ABI", ACCEL_ABI) < 0 ||
        PyModule_AddIntConstant(m, "POINTER_SIZE", (long)sizeof(void *)) < 0) {
        Py_DECREF(&PointerTableType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
