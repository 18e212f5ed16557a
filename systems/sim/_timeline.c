/* Writing a decode segment's end times into an instance's timeline (systems/sim/timeline_writes.py).

   The simulator keeps each instance's decode iteration end times in an array('d'). The performance model
   hands a planned segment's end times over as a list of Python floats; array's own ways to take them (fromlist,
   slice assignment, the constructor) convert every item through a format-string parser, several hundred
   instructions a number. put() reads each float's double and stores it: the same 8 bytes, without the parser. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

/* put(timeline, offset, values): timeline[offset:offset + len(values)] = values, for a writable buffer of
   doubles (format "d") and a list of floats; the buffer must already hold those entries (nothing grows). */
static PyObject *put(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "put() takes 3 arguments (timeline, offset, values), %zd given", nargs);
        return NULL;
    }
    Py_ssize_t offset = PyLong_AsSsize_t(args[1]);
    if (offset == -1 && PyErr_Occurred()) {
        return NULL;
    }
    PyObject *values = args[2];
    if (!PyList_Check(values)) {
        PyErr_Format(PyExc_TypeError, "put() values must be a list of floats, not %.100s", Py_TYPE(values)->tp_name);
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_WRITABLE | PyBUF_FORMAT) < 0) {
        return NULL;
    }
    if (view.itemsize != (Py_ssize_t)sizeof(double) || view.format == NULL || strcmp(view.format, "d") != 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_TypeError, "put() timeline must be a writable buffer of doubles (array('d'))");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(values), size = view.len / (Py_ssize_t)sizeof(double);
    if (offset < 0 || offset > size - n) {
        PyBuffer_Release(&view);
        PyErr_Format(PyExc_IndexError, "put() of %zd values at %zd: the timeline holds %zd", n, offset, size);
        return NULL;
    }
    double *out = (double *)view.buf + offset;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyList_GET_ITEM(values, i);
        double x = PyFloat_CheckExact(v) ? PyFloat_AS_DOUBLE(v) : PyFloat_AsDouble(v);
        if (x == -1.0 && PyErr_Occurred()) {
            PyBuffer_Release(&view);
            return NULL;
        }
        out[i] = x;
    }
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"put", (PyCFunction)(void (*)(void))put, METH_FASTCALL,
     "put(timeline, offset, values): write a list of floats into a buffer of doubles at offset."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "systems.sim._timeline",
                                    "A decode segment's end times into an instance's timeline.", -1, methods};

PyMODINIT_FUNC PyInit__timeline(void) { return PyModule_Create(&module); }
