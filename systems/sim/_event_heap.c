/* The simulator's event heap with each event's order key stored beside it (systems/sim/events.py).

   A binary heap of (time, key, item) entries in one contiguous array, smallest (time, key) first. The heap in
   Python keeps the items (event objects) in a list and reads their time and key to compare them: a sift through
   a heap of a thousand pending events (one per instance of a large cluster) reads some twenty event objects that
   have left the cache since they were scheduled. Here a sift reads only the array; the item of an entry is
   touched when it is popped. The keys are the queue's: a time (a double) and an integer (priority and sequence
   number); no two entries share a key, so every pop takes the one smallest entry, as the heap in Python does. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

typedef struct {
    double time;
    long long key;
    PyObject *item;
} Entry;

typedef struct {
    PyObject_HEAD
    Py_ssize_t n;
    Py_ssize_t capacity;
    Entry *entries;
} HeapObject;

static inline int before(const Entry *a, const Entry *b) {
    return a->time < b->time || (a->time == b->time && a->key < b->key);
}

/* The (time, key) of a call's first two arguments into *e, after checking that it got ``expected`` arguments
   (``usage`` names them in the error); -1 with an exception set when they are not what the heap takes. */
static int parse_entry(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t expected, const char *usage, Entry *e) {
    if (nargs != expected) {
        PyErr_Format(PyExc_TypeError, "%s takes %zd arguments, %zd given", usage, expected, nargs);
        return -1;
    }
    e->time = PyFloat_CheckExact(args[0]) ? PyFloat_AS_DOUBLE(args[0]) : PyFloat_AsDouble(args[0]);
    if (e->time == -1.0 && PyErr_Occurred()) {
        return -1;
    }
    if (e->time != e->time) {
        PyErr_SetString(PyExc_ValueError, "an event heap's time must not be NaN");
        return -1;
    }
    e->key = PyLong_AsLongLong(args[1]);
    if (e->key == -1 && PyErr_Occurred()) {
        return -1;
    }
    return 0;
}

/* Remove the first entry into *out (its item's reference passes to the caller); the heap is not empty. */
static void take_first(HeapObject *self, Entry *out) {
    Entry *a = self->entries;
    *out = a[0];
    Py_ssize_t n = --self->n;
    if (n == 0) {
        return;
    }
    Entry last = a[n];
    Py_ssize_t i = 0;
    for (;;) {
        Py_ssize_t c = 2 * i + 1;
        if (c >= n) {
            break;
        }
        if (c + 1 < n && before(&a[c + 1], &a[c])) {
            c += 1;
        }
        if (before(&a[c], &last)) {
            a[i] = a[c];
            i = c;
        } else {
            break;
        }
    }
    a[i] = last;
}

static PyObject *heap_push(HeapObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Entry e;
    if (parse_entry(args, nargs, 3, "push(time, key, item)", &e) < 0) {
        return NULL;
    }
    if (self->n == self->capacity) {
        Py_ssize_t capacity = self->capacity ? 2 * self->capacity : 64;
        Entry *grown = PyMem_Realloc(self->entries, (size_t)capacity * sizeof(Entry));
        if (grown == NULL) {
            return PyErr_NoMemory();
        }
        self->entries = grown;
        self->capacity = capacity;
    }
    Py_INCREF(args[2]);
    e.item = args[2];
    Entry *a = self->entries;
    Py_ssize_t i = self->n++;
    while (i > 0) {
        Py_ssize_t parent = (i - 1) >> 1;
        if (before(&e, &a[parent])) {
            a[i] = a[parent];
            i = parent;
        } else {
            break;
        }
    }
    a[i] = e;
    Py_RETURN_NONE;
}

static PyObject *heap_pop(HeapObject *self, PyObject *Py_UNUSED(ignored)) {
    if (self->n == 0) {
        PyErr_SetString(PyExc_IndexError, "pop from an empty event heap");
        return NULL;
    }
    Entry first;
    take_first(self, &first);
    return first.item;
}

static PyObject *heap_pop_before(HeapObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Entry other;
    if (parse_entry(args, nargs, 2, "pop_before(time, key)", &other) < 0) {
        return NULL;
    }
    if (self->n == 0 || before(&other, &self->entries[0])) {
        Py_RETURN_NONE;
    }
    Entry first;
    take_first(self, &first);
    return first.item;
}

static PyObject *heap_first(HeapObject *self, PyObject *Py_UNUSED(ignored)) {
    if (self->n == 0) {
        Py_RETURN_NONE;
    }
    Py_INCREF(self->entries[0].item);
    return self->entries[0].item;
}

static Py_ssize_t heap_len(HeapObject *self) { return self->n; }

static int heap_traverse(HeapObject *self, visitproc visit, void *arg) {
    for (Py_ssize_t i = 0; i < self->n; i++) {
        Py_VISIT(self->entries[i].item);
    }
    return 0;
}

static int heap_clear(HeapObject *self) {
    Py_ssize_t n = self->n;
    self->n = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_DECREF(self->entries[i].item);
    }
    return 0;
}

static void heap_dealloc(HeapObject *self) {
    PyObject_GC_UnTrack(self);
    heap_clear(self);
    PyMem_Free(self->entries);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *heap_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    if (PyTuple_GET_SIZE(args) != 0 || (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0)) {
        PyErr_SetString(PyExc_TypeError, "EventHeap() takes no arguments");
        return NULL;
    }
    HeapObject *self = (HeapObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->n = 0;
    self->capacity = 0;
    self->entries = NULL;
    return (PyObject *)self;
}

static PyMethodDef heap_methods[] = {
    {"push", (PyCFunction)(void (*)(void))heap_push, METH_FASTCALL,
     "push(time, key, item): add item at (time, key); no two items may share a key."},
    {"pop", (PyCFunction)heap_pop, METH_NOARGS, "pop() -> the item of the smallest (time, key); IndexError if empty."},
    {"pop_before", (PyCFunction)(void (*)(void))heap_pop_before, METH_FASTCALL,
     "pop_before(time, key) -> pop() unless the heap is empty or (time, key) comes first (then None)."},
    {"first", (PyCFunction)heap_first, METH_NOARGS, "first() -> the item pop() would return, or None if empty."},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods heap_as_sequence = {
    .sq_length = (lenfunc)heap_len,
};

static PyTypeObject HeapType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "systems.sim._event_heap.EventHeap",
    .tp_doc = PyDoc_STR("A binary heap of (time, key, item), smallest (time, key) first, keys stored inline."),
    .tp_basicsize = sizeof(HeapObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = heap_new,
    .tp_dealloc = (destructor)heap_dealloc,
    .tp_traverse = (traverseproc)heap_traverse,
    .tp_clear = (inquiry)heap_clear,
    .tp_methods = heap_methods,
    .tp_as_sequence = &heap_as_sequence,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "systems.sim._event_heap",
                                    "The simulator's event heap, keys stored inline.", -1, NULL};

PyMODINIT_FUNC PyInit__event_heap(void) {
    if (PyType_Ready(&HeapType) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    Py_INCREF(&HeapType);
    if (PyModule_AddObject(m, "EventHeap", (PyObject *)&HeapType) < 0) {
        Py_DECREF(&HeapType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
