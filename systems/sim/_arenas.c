/* Python's object arenas on transparent huge pages, for the length of a simulation (systems/sim/arenas.py).

   CPython's small-object allocator takes its memory in arenas of 1 MiB, each mmap'ed on its own. A simulation at
   a million requests keeps gigabytes of small objects alive and touches them in no order the processor's caches
   can follow: with 4 KiB pages most of those touches also miss the TLB, and the kernel takes a page fault for
   every 4 KiB the run grows. install() replaces the arena allocator with one that carves arenas, one after
   another, out of 64 MiB regions aligned to 2 MiB and advised MADV_HUGEPAGE, so the kernel can back them with
   2 MiB pages where transparent huge pages are enabled for advised memory ("madvise", the usual default, or
   "always"). Only where objects live changes, never what the program computes.

   An arena is freed with munmap, as CPython's own allocator frees it, so arenas handed out by either allocator
   can be freed by the other: uninstall() puts the previous allocator back at any time. The allocator is
   process-wide by CPython's design; the state below is the one this module keeps for it, used under the GIL. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#define HUGE_PAGE ((size_t)2 << 20)
#define REGION ((size_t)64 << 20)

typedef struct {
    char *next;            /* the next free byte of the current region */
    char *end;             /* the end of the current region */
    size_t regions;        /* regions reserved since the module was loaded */
    size_t arenas;         /* arenas handed out since the module was loaded */
    int installed;
    PyObjectArenaAllocator previous;
} arena_state;

static arena_state state;

static char *reserve_region(void) {
    size_t span = REGION + HUGE_PAGE;
    char *raw = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED) {
        return NULL;
    }
    char *start = (char *)(((uintptr_t)raw + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    if (start > raw) {
        munmap(raw, (size_t)(start - raw));
    }
    char *tail = start + REGION;
    if (raw + span > tail) {
        munmap(tail, (size_t)(raw + span - tail));
    }
#ifdef MADV_HUGEPAGE
    madvise(start, REGION, MADV_HUGEPAGE); /* advice only: without huge pages the region works as before */
#endif
    return start;
}

static void *arena_alloc(void *ctx, size_t size) {
    arena_state *st = (arena_state *)ctx;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size = (size + page - 1) & ~(page - 1);
    if (size > REGION) {
        return st->previous.alloc(st->previous.ctx, size);
    }
    if ((size_t)(st->end - st->next) < size) {
        char *start = reserve_region();
        if (start == NULL) {
            return NULL;
        }
        if (st->end > st->next) {
            munmap(st->next, (size_t)(st->end - st->next)); /* the old region's unused tail, never touched */
        }
        st->next = start;
        st->end = start + REGION;
        st->regions++;
    }
    void *arena = st->next;
    st->next += size;
    st->arenas++;
    return arena;
}

static void arena_free(void *ctx, void *ptr, size_t size) {
    (void)ctx;
    munmap(ptr, size);
}

static PyObject *install(PyObject *self, PyObject *unused) {
    if (state.installed) {
        Py_RETURN_FALSE;
    }
    PyObject_GetArenaAllocator(&state.previous);
    PyObjectArenaAllocator ours = {&state, arena_alloc, arena_free};
    PyObject_SetArenaAllocator(&ours);
    state.installed = 1;
    Py_RETURN_TRUE;
}

static PyObject *uninstall(PyObject *self, PyObject *unused) {
    if (!state.installed) {
        Py_RETURN_FALSE;
    }
    PyObject_SetArenaAllocator(&state.previous);
    state.installed = 0;
    if (state.end > state.next) {
        munmap(state.next, (size_t)(state.end - state.next));
    }
    state.next = state.end = NULL;
    Py_RETURN_TRUE;
}

static PyObject *stats(PyObject *self, PyObject *unused) {
    return Py_BuildValue("{s:O,s:n,s:n}", "installed", state.installed ? Py_True : Py_False,
                         "regions", (Py_ssize_t)state.regions, "arenas", (Py_ssize_t)state.arenas);
}

static PyMethodDef methods[] = {
    {"install", install, METH_NOARGS, "Take Python's arenas from huge-page regions; False when already installed."},
    {"uninstall", uninstall, METH_NOARGS, "Put the previous arena allocator back; False when not installed."},
    {"stats", stats, METH_NOARGS, "Whether installed, and the regions reserved and arenas handed out so far."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "systems.sim._arenas",
                                    "Python's object arenas on transparent huge pages.", -1, methods};

PyMODINIT_FUNC PyInit__arenas(void) { return PyModule_Create(&module); }
