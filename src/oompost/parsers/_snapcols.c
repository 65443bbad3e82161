/* _snapcols: a restricted pickle reader that turns snapshot trace entries into columns.
 *
 * It interprets only the opcodes Python's pickler emits for builtin data (dicts, lists,
 * tuples, str, bytes, int, float, None, bool; memo put/get; framing).  Globals are
 * resolved only through a table of data-only types handed in by the caller (never
 * imported); REDUCE/NEWOBJ may call only those types.  Any other opcode, a memo index
 * out of order, a malformed stream or a value outside what the columns hold raises
 * ``Unsupported``: the caller then loads the file with the restricted unpickler, which
 * gives the right error.  Nothing in the file is imported or called.
 *
 * A list whose items are dicts with an "action" key is a device trace: its entries
 * become rows of C arrays (action code, addr, size, stream, time_us, stack index) and
 * are released at once; the list itself stays empty.  Frames are interned by
 * (name, filename, line); frame lists by their frame ids; memo slots of consumed
 * entries are tombstoned (a later reference to one raises Unsupported), memo slots of
 * frame dicts / frame lists point at one canonical object each.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>
#include <stdint.h>

static PyObject *Unsupported;

/* open-addressing map from object address to a small id; keys are objects kept alive
 * while they are in the map (canonical frames; a batch's own frame lists) */
typedef struct { void **k; Py_ssize_t *v; Py_ssize_t cap, n; } PtrMap;

static Py_ssize_t pm_get(PtrMap *m, void *k) {
    if (!m->cap) return -1;
    size_t h = ((uintptr_t)k >> 4) * 0x9E3779B97F4A7C15ull;
    for (size_t i = h & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (m->k[i] == k) return m->v[i];
        if (!m->k[i]) return -1;
    }
}

static int pm_put(PtrMap *m, void *k, Py_ssize_t v) {
    if ((m->n + 1) * 2 > m->cap) {
        Py_ssize_t nc = m->cap ? m->cap * 2 : 1024;
        void **ok = m->k; Py_ssize_t *ov = m->v, oc = m->cap;
        m->k = PyMem_Calloc(nc, sizeof(void *)); m->v = PyMem_Malloc(nc * sizeof(Py_ssize_t));
        if (!m->k || !m->v) { PyMem_Free(m->k); PyMem_Free(m->v); m->k = ok; m->v = ov; PyErr_NoMemory(); return -1; }
        m->cap = nc; m->n = 0;
        for (Py_ssize_t i = 0; i < oc; i++) if (ok[i]) pm_put(m, ok[i], ov[i]);
        PyMem_Free(ok); PyMem_Free(ov);
    }
    size_t h = ((uintptr_t)k >> 4) * 0x9E3779B97F4A7C15ull;
    for (size_t i = h & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (m->k[i] == k) { m->v[i] = v; return 0; }
        if (!m->k[i]) { m->k[i] = k; m->v[i] = v; m->n++; return 0; }
    }
}

static void pm_clear(PtrMap *m) { if (m->n) { memset(m->k, 0, m->cap * sizeof(void *)); m->n = 0; } }
static void pm_free(PtrMap *m) { PyMem_Free(m->k); PyMem_Free(m->v); m->k = NULL; m->v = NULL; m->cap = m->n = 0; }

typedef struct {
    PyObject *list;            /* the trace list (borrowed via memo/stack; we hold a ref) */
    uint8_t *action; int64_t *addr, *size, *stream, *time_us; int32_t *stack;
    Py_ssize_t n, cap;
    PyObject *codes;           /* dict action str -> int */
    PyObject *names;           /* list of action strs */
    int32_t *local;            /* global stack id -> local index + 1 (0 = not yet) */
    Py_ssize_t local_cap;
    PyObject *order;           /* list of global stack ids in local order (local 0 = empty) */
    PyObject *extras;          /* list of (index, entry dict) */
} Builder;

typedef struct {
    PyObject *file; PyObject *buf; const char *p; Py_ssize_t len, pos;
    PyObject **stack; Py_ssize_t *smemo; Py_ssize_t sp, scap;
    Py_ssize_t *marks; Py_ssize_t mp, mcap;
    PyObject **memo; Py_ssize_t mlen, mcap2;
    PyObject *strings;         /* intern table */
    PyObject *safe;            /* dict (module, name) -> type */
    PyObject *safe_types;      /* tuple of the types */
    PyObject *frame_ids;       /* (name, filename, line) -> int */
    PyObject *frames;          /* list: canonical frame dict per id */
    PyObject *stack_ids;       /* tuple of frame ids -> int */
    PyObject *stacks;          /* list: canonical frame list per id */
    PtrMap canon_frames;       /* canonical frame dict -> frame id */
    PtrMap canon_stacks;       /* canonical frame list -> stack id */
    PtrMap batch;              /* frame lists of the entries being appended -> stack id */
    Builder *b; Py_ssize_t nb, bcap;
    PyObject *k_action, *k_addr, *k_size, *k_stream, *k_time, *k_frames, *k_name, *k_filename, *k_line;
    PyObject *k_device_free, *k_pool_id, *k_user_metadata;
    PyObject *tomb;
} R;

#define FAIL(msg) do { PyErr_SetString(Unsupported, msg); return -1; } while (0)

static int refill(R *r, Py_ssize_t need) {
    /* make r->p[pos .. pos+need) available */
    while (r->len - r->pos < need) {        /* short reads (pipes, some streams): read again */
        Py_ssize_t have = r->len - r->pos;
        Py_ssize_t want = need - have; if (want < (1 << 20)) want = 1 << 20;
        PyObject *more = PyObject_CallMethod(r->file, "read", "n", want);
        if (!more) return -1;
        if (!PyBytes_Check(more)) { Py_DECREF(more); FAIL("read() did not return bytes"); }
        Py_ssize_t m = PyBytes_GET_SIZE(more);
        if (m == 0) { Py_DECREF(more); FAIL("truncated"); }
        PyObject *nb = PyBytes_FromStringAndSize(NULL, have + m);
        if (!nb) { Py_DECREF(more); return -1; }
        if (have) memcpy(PyBytes_AS_STRING(nb), r->p + r->pos, have);
        memcpy(PyBytes_AS_STRING(nb) + have, PyBytes_AS_STRING(more), m);
        Py_DECREF(more);
        Py_XDECREF(r->buf); r->buf = nb; r->p = PyBytes_AS_STRING(nb); r->len = have + m; r->pos = 0;
    }
    return 0;
}

#define NEED(n) if (r->len - r->pos < (Py_ssize_t)(n) && refill(r, (n)) < 0) return -1

static int push(R *r, PyObject *o, Py_ssize_t memo_idx) { /* steals o */
    if (!o) return -1;
    if (r->sp == r->scap) {
        Py_ssize_t nc = r->scap ? r->scap * 2 : 1024;
        PyObject **s = PyMem_Realloc(r->stack, nc * sizeof(PyObject *));
        if (!s) { Py_DECREF(o); PyErr_NoMemory(); return -1; }
        r->stack = s;
        Py_ssize_t *m = PyMem_Realloc(r->smemo, nc * sizeof(Py_ssize_t));
        if (!m) { Py_DECREF(o); PyErr_NoMemory(); return -1; }
        r->smemo = m; r->scap = nc;
    }
    r->stack[r->sp] = o; r->smemo[r->sp] = memo_idx; r->sp++;
    return 0;
}

static Py_ssize_t marker(R *r) {
    if (r->mp == 0) { PyErr_SetString(Unsupported, "no mark"); return -1; }
    Py_ssize_t m = r->marks[--r->mp];
    if (m > r->sp) { PyErr_SetString(Unsupported, "bad mark"); return -1; }
    return m;
}

static int memo_put(R *r, Py_ssize_t idx) {
    if (r->sp == 0) FAIL("put on empty stack");
    if (idx > r->mlen || idx < 0) FAIL("memo index out of order");
    if (idx == r->mlen) {
        if (r->mlen == r->mcap2) {
            Py_ssize_t nc = r->mcap2 ? r->mcap2 * 2 : 4096;
            PyObject **m = PyMem_Realloc(r->memo, nc * sizeof(PyObject *));
            if (!m) { PyErr_NoMemory(); return -1; }
            r->memo = m; r->mcap2 = nc;
        }
        r->memo[r->mlen++] = NULL;
    }
    PyObject *o = r->stack[r->sp - 1];
    Py_INCREF(o);
    Py_XSETREF(r->memo[idx], o);
    r->smemo[r->sp - 1] = idx;
    return 0;
}

static int memo_get(R *r, Py_ssize_t idx) {
    if (idx < 0 || idx >= r->mlen || !r->memo[idx]) FAIL("memo get of an unknown index");
    PyObject *o = r->memo[idx];
    if (o == r->tomb) FAIL("memo get of a consumed trace entry");
    Py_INCREF(o);
    return push(r, o, -1);
}

static PyObject *intern_str(R *r, const char *s, Py_ssize_t n) {
    PyObject *u = PyUnicode_DecodeUTF8(s, n, "surrogatepass");
    if (!u) return NULL;
    PyObject *v = PyDict_SetDefault(r->strings, u, u);
    Py_XINCREF(v); Py_DECREF(u);
    return v;
}

/* ---- frames and stacks */

static Py_ssize_t frame_id(R *r, PyObject *d) {
    Py_ssize_t hit = pm_get(&r->canon_frames, d);
    if (hit >= 0) return hit;
    if (!PyDict_CheckExact(d)) { PyErr_SetString(Unsupported, "frame is not a dict"); return -1; }
    PyObject *name = PyDict_GetItemWithError(d, r->k_name);
    PyObject *fn = name ? PyDict_GetItemWithError(d, r->k_filename) : NULL;
    PyObject *ln = fn ? PyDict_GetItemWithError(d, r->k_line) : NULL;
    if (!ln) { if (!PyErr_Occurred()) PyErr_SetString(Unsupported, "frame lacks a field"); return -1; }
    PyObject *key = PyTuple_Pack(3, name, fn, ln);
    if (!key) return -1;
    PyObject *v = PyDict_GetItemWithError(r->frame_ids, key);
    Py_ssize_t id;
    if (v) id = PyLong_AsSsize_t(v);
    else if (PyErr_Occurred()) { Py_DECREF(key); PyErr_Clear(); PyErr_SetString(Unsupported, "unhashable frame"); return -1; }
    else {
        id = PyList_GET_SIZE(r->frames);
        PyObject *iv = PyLong_FromSsize_t(id);
        if (!iv || PyDict_SetItem(r->frame_ids, key, iv) < 0 || PyList_Append(r->frames, d) < 0
            || pm_put(&r->canon_frames, d, id) < 0) { Py_XDECREF(iv); Py_DECREF(key); return -1; }
        Py_DECREF(iv);
    }
    Py_DECREF(key);
    return id;
}

/* global stack id of a non-empty frame list: the key is the bytes of its frame ids */
static Py_ssize_t stack_id(R *r, PyObject *lst) {
    Py_ssize_t hit = pm_get(&r->canon_stacks, lst);
    if (hit >= 0) return hit;
    hit = pm_get(&r->batch, lst);
    if (hit >= 0) return hit;
    Py_ssize_t n = PyList_GET_SIZE(lst);
    PyObject *key = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(int32_t));
    if (!key) return -1;
    int32_t *ids = (int32_t *)PyBytes_AS_STRING(key);
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t f = frame_id(r, PyList_GET_ITEM(lst, i));
        if (f < 0) { Py_DECREF(key); return -1; }
        ids[i] = (int32_t)f;
    }
    PyObject *v = PyDict_GetItemWithError(r->stack_ids, key);
    Py_ssize_t id;
    if (v) id = PyLong_AsSsize_t(v);
    else if (PyErr_Occurred()) { Py_DECREF(key); return -1; }
    else {
        id = PyList_GET_SIZE(r->stacks);
        PyObject *iv = PyLong_FromSsize_t(id);
        if (!iv || PyDict_SetItem(r->stack_ids, key, iv) < 0 || PyList_Append(r->stacks, lst) < 0
            || pm_put(&r->canon_stacks, lst, id) < 0) { Py_XDECREF(iv); Py_DECREF(key); return -1; }
        Py_DECREF(iv);
        Py_DECREF(key);
        return id;
    }
    Py_DECREF(key);
    if (pm_put(&r->batch, lst, id) < 0) return -1;
    return id;
}

/* ---- builders */

static Builder *builder_of(R *r, PyObject *lst, int create) {
    for (Py_ssize_t i = r->nb - 1; i >= 0; i--) if (r->b[i].list == lst) return &r->b[i];
    if (!create) return NULL;
    if (r->nb == r->bcap) {
        Py_ssize_t nc = r->bcap ? r->bcap * 2 : 8;
        Builder *nbp = PyMem_Realloc(r->b, nc * sizeof(Builder));
        if (!nbp) { PyErr_NoMemory(); return NULL; }
        r->b = nbp; r->bcap = nc;
    }
    Builder *b = &r->b[r->nb];
    memset(b, 0, sizeof(Builder));
    b->codes = PyDict_New(); b->names = PyList_New(0); b->order = PyList_New(0); b->extras = PyList_New(0);
    if (!b->codes || !b->names || !b->order || !b->extras) {
        Py_XDECREF(b->codes); Py_XDECREF(b->names); Py_XDECREF(b->order); Py_XDECREF(b->extras); return NULL;
    }
    PyObject *zero = PyLong_FromLong(-1);            /* local 0: the empty stack */
    PyList_Append(b->order, zero); Py_DECREF(zero);
    Py_INCREF(lst); b->list = lst;
    r->nb++;
    return b;
}

static int grow(Builder *b) {
    Py_ssize_t nc = b->cap ? b->cap * 2 : 65536;
#define G(f, t) { t *x = PyMem_Realloc(b->f, nc * sizeof(t)); if (!x) { PyErr_NoMemory(); return -1; } b->f = x; }
    G(action, uint8_t) G(addr, int64_t) G(size, int64_t) G(stream, int64_t) G(time_us, int64_t) G(stack, int32_t)
#undef G
    b->cap = nc;
    return 0;
}

static int get_i64(PyObject *d, PyObject *k, int64_t dflt, int64_t *out, int none_ok) {
    PyObject *v = PyDict_GetItemWithError(d, k);
    if (!v) { if (PyErr_Occurred()) return -1; *out = dflt; return 0; }
    if (v == Py_None && none_ok) { *out = INT64_MIN; return 1; }
    if (!PyLong_CheckExact(v)) FAIL("a trace value that is not an int");
    int ovf = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &ovf);
    if (ovf || (x == -1 && PyErr_Occurred()) || x == INT64_MIN) { PyErr_Clear(); FAIL("a trace value beyond int64"); }
    *out = x;
    return 1;
}

static int add_entry(R *r, Builder *b, PyObject *e) {
    if (!PyDict_CheckExact(e)) FAIL("trace item that is not a dict");
    if (b->n == b->cap && grow(b) < 0) return -1;
    Py_ssize_t i = b->n;
    PyObject *a = PyDict_GetItemWithError(e, r->k_action);
    if (!a || !PyUnicode_CheckExact(a)) FAIL("trace entry without a string action");
    PyObject *c = PyDict_GetItemWithError(b->codes, a);
    long code;
    if (c) code = PyLong_AsLong(c);
    else {
        if (PyErr_Occurred()) return -1;
        code = PyList_GET_SIZE(b->names);
        if (code > 255) FAIL("too many actions");
        PyObject *cv = PyLong_FromLong(code);
        if (!cv || PyDict_SetItem(b->codes, a, cv) < 0 || PyList_Append(b->names, a) < 0) { Py_XDECREF(cv); return -1; }
        Py_DECREF(cv);
    }
    b->action[i] = (uint8_t)code;
    int p1, p2, p3, p4;
    if ((p1 = get_i64(e, r->k_addr, 0, &b->addr[i], 0)) < 0 || (p2 = get_i64(e, r->k_size, 0, &b->size[i], 0)) < 0
        || (p3 = get_i64(e, r->k_stream, 0, &b->stream[i], 0)) < 0
        || (p4 = get_i64(e, r->k_time, INT64_MIN, &b->time_us[i], 1)) < 0) return -1;
    Py_ssize_t known = 1 + p1 + p2 + p3 + p4;
    PyObject *fr = PyDict_GetItemWithError(e, r->k_frames);
    int32_t local = 0;
    if (fr) {
        if (!PyList_CheckExact(fr)) FAIL("frames that are not a list");
        if (PyList_GET_SIZE(fr)) {
            Py_ssize_t g = stack_id(r, fr);
            if (g < 0) return -1;
            if (g >= b->local_cap) {
                Py_ssize_t nc = b->local_cap ? b->local_cap : 256;
                while (nc <= g) nc *= 2;
                int32_t *x = PyMem_Realloc(b->local, nc * sizeof(int32_t));
                if (!x) { PyErr_NoMemory(); return -1; }
                memset(x + b->local_cap, 0, (nc - b->local_cap) * sizeof(int32_t));
                b->local = x; b->local_cap = nc;
            }
            if (!b->local[g]) {
                PyObject *gv = PyLong_FromSsize_t(g);
                if (!gv || PyList_Append(b->order, gv) < 0) { Py_XDECREF(gv); return -1; }
                Py_DECREF(gv);
                b->local[g] = (int32_t)PyList_GET_SIZE(b->order);   /* local + 1 */
            }
            local = b->local[g] - 1;
        }
        known++;
    } else if (PyErr_Occurred()) return -1;
    b->stack[i] = local;
    /* the rare fields (device_free, pool_id, user_metadata): keep the entry for the Python side */
    int rare = 0;
    if (PyDict_GET_SIZE(e) > known) {
        PyObject *df = PyDict_GetItemWithError(e, r->k_device_free);
        PyObject *pid = df || !PyErr_Occurred() ? PyDict_GetItemWithError(e, r->k_pool_id) : NULL;
        PyObject *um = pid || !PyErr_Occurred() ? PyDict_GetItemWithError(e, r->k_user_metadata) : NULL;
        if (PyErr_Occurred()) return -1;
        rare = (df && df != Py_None) || (pid && pid != Py_None);
        if (!rare && um) { rare = PyObject_IsTrue(um); if (rare < 0) { PyErr_Clear(); rare = 1; } }
    }
    if (rare) {
        PyObject *iv = PyLong_FromSsize_t(i);
        PyObject *pair = iv ? PyTuple_Pack(2, iv, e) : NULL;
        Py_XDECREF(iv);
        if (!pair || PyList_Append(b->extras, pair) < 0) { Py_XDECREF(pair); return -1; }
        Py_DECREF(pair);
    }
    b->n++;
    return 0;
}

/* after entries were consumed: memo slots [start, mlen) */
static int sweep(R *r, Py_ssize_t start) {
    for (Py_ssize_t j = start; j < r->mlen; j++) {
        PyObject *o = r->memo[j];
        if (!o || o == r->tomb) continue;
        if (PyDict_CheckExact(o)) {
            int is_entry = PyDict_Contains(o, r->k_action);
            if (is_entry < 0) return -1;
            if (is_entry) { Py_INCREF(r->tomb); Py_SETREF(r->memo[j], r->tomb); continue; }
            int is_frame = PyDict_Contains(o, r->k_filename);
            if (is_frame < 0) return -1;
            if (is_frame) {
                Py_ssize_t f = frame_id(r, o);
                if (f < 0) { PyErr_Clear(); continue; }
                PyObject *cf = PyList_GET_ITEM(r->frames, f);
                Py_INCREF(cf); Py_SETREF(r->memo[j], cf);
            }
        } else if (PyList_CheckExact(o) && PyList_GET_SIZE(o)) {
            Py_ssize_t s = stack_id(r, o);
            if (s < 0) { PyErr_Clear(); continue; }
            PyObject *cs = PyList_GET_ITEM(r->stacks, s);
            Py_INCREF(cs); Py_SETREF(r->memo[j], cs);
        }
    }
    return 0;
}

static int is_entry(R *r, PyObject *o) {
    return PyDict_CheckExact(o) && PyDict_GetItemWithError(o, r->k_action) != NULL;
}

/* append stack[from:sp] to the list at stack[from-1] */
static int do_appends(R *r, Py_ssize_t from) {
    if (from < 1) FAIL("append without a list");
    PyObject *lst = r->stack[from - 1];
    Py_ssize_t n = r->sp - from;
    if (!PyList_CheckExact(lst)) FAIL("append to a non-list");
    if (pm_get(&r->canon_stacks, lst) >= 0) FAIL("a frame list changed after it was interned");
    Builder *b = builder_of(r, lst, 0);
    if (!b && n && PyList_GET_SIZE(lst) == 0 && is_entry(r, r->stack[from])) {
        b = builder_of(r, lst, 1);
        if (!b) return -1;
    }
    if (PyErr_Occurred()) return -1;
    if (b) {
        Py_ssize_t start = PY_SSIZE_T_MAX;
        for (Py_ssize_t k = from; k < r->sp; k++) {
            if (add_entry(r, b, r->stack[k]) < 0) return -1;
            if (r->smemo[k] >= 0 && r->smemo[k] < start) start = r->smemo[k];
        }
        for (Py_ssize_t k = from; k < r->sp; k++) Py_DECREF(r->stack[k]);
        r->sp = from;
        if (start != PY_SSIZE_T_MAX && sweep(r, start) < 0) return -1;
        pm_clear(&r->batch);
        return 0;
    }
    for (Py_ssize_t k = from; k < r->sp; k++) {
        if (PyList_Append(lst, r->stack[k]) < 0) return -1;
        Py_DECREF(r->stack[k]);
    }
    r->sp = from;
    return 0;
}

static int do_setitems(R *r, Py_ssize_t from) {
    if (from < 1 || (r->sp - from) % 2) FAIL("bad setitems");
    PyObject *d = r->stack[from - 1];
    if (!PyDict_CheckExact(d)) FAIL("setitems on a non-dict");
    if (pm_get(&r->canon_frames, d) >= 0) FAIL("a frame changed after it was interned");
    for (Py_ssize_t k = from; k < r->sp; k += 2)
        if (PyDict_SetItem(d, r->stack[k], r->stack[k + 1]) < 0) { PyErr_Clear(); FAIL("unhashable key"); }
    for (Py_ssize_t k = from; k < r->sp; k++) Py_DECREF(r->stack[k]);
    r->sp = from;
    return 0;
}

static int do_tuple(R *r, Py_ssize_t from) {
    Py_ssize_t n = r->sp - from;
    PyObject *t = PyTuple_New(n);
    if (!t) return -1;
    for (Py_ssize_t k = 0; k < n; k++) PyTuple_SET_ITEM(t, k, r->stack[from + k]);
    r->sp = from;
    return push(r, t, -1);
}

static int is_safe_type(R *r, PyObject *o) {
    Py_ssize_t n = PyTuple_GET_SIZE(r->safe_types);
    for (Py_ssize_t i = 0; i < n; i++) if (PyTuple_GET_ITEM(r->safe_types, i) == o) return 1;
    return 0;
}

static uint64_t rd_u(const unsigned char *s, int n) {
    uint64_t x = 0;
    for (int i = n - 1; i >= 0; i--) x = (x << 8) | s[i];
    return x;
}

static int run(R *r, PyObject **result) {
    for (;;) {
        NEED(1);
        unsigned char op = (unsigned char)r->p[r->pos++];
        const unsigned char *s;
        switch (op) {
        case 0x80: NEED(1); r->pos++; break;                                   /* PROTO */
        case 0x95: NEED(8); r->pos += 8; break;                                /* FRAME */
        case '.':                                                              /* STOP */
            if (r->sp != 1) FAIL("stop with a bad stack");
            *result = r->stack[--r->sp];
            return 0;
        case '(':                                                              /* MARK */
            if (r->mp == r->mcap) {
                Py_ssize_t nc = r->mcap ? r->mcap * 2 : 64;
                Py_ssize_t *m = PyMem_Realloc(r->marks, nc * sizeof(Py_ssize_t));
                if (!m) { PyErr_NoMemory(); return -1; }
                r->marks = m; r->mcap = nc;
            }
            r->marks[r->mp++] = r->sp;
            break;
        case '0': if (!r->sp) FAIL("pop"); Py_DECREF(r->stack[--r->sp]); break;        /* POP */
        case '1': { Py_ssize_t m = marker(r); if (m < 0) return -1;                    /* POP_MARK */
                    while (r->sp > m) Py_DECREF(r->stack[--r->sp]); break; }
        case '2': if (!r->sp) FAIL("dup"); Py_INCREF(r->stack[r->sp - 1]);            /* DUP */
                  if (push(r, r->stack[r->sp - 1], -1) < 0) return -1; break;
        case '}': if (push(r, PyDict_New(), -1) < 0) return -1; break;                 /* EMPTY_DICT */
        case ']': if (push(r, PyList_New(0), -1) < 0) return -1; break;                /* EMPTY_LIST */
        case ')': if (push(r, PyTuple_New(0), -1) < 0) return -1; break;               /* EMPTY_TUPLE */
        case 'N': Py_INCREF(Py_None); if (push(r, Py_None, -1) < 0) return -1; break;
        case 0x88: Py_INCREF(Py_True); if (push(r, Py_True, -1) < 0) return -1; break;
        case 0x89: Py_INCREF(Py_False); if (push(r, Py_False, -1) < 0) return -1; break;
        case 't': { Py_ssize_t m = marker(r); if (m < 0 || do_tuple(r, m) < 0) return -1; break; }
        case 0x85: case 0x86: case 0x87: {                                      /* TUPLE1-3 */
            Py_ssize_t n = op - 0x84;
            if (r->sp < n) FAIL("tuple");
            if (do_tuple(r, r->sp - n) < 0) return -1; break; }
        case 'l': { Py_ssize_t m = marker(r); if (m < 0) return -1;              /* LIST */
            PyObject *l = PyList_New(r->sp - m); if (!l) return -1;
            for (Py_ssize_t k = m; k < r->sp; k++) PyList_SET_ITEM(l, k - m, r->stack[k]);
            r->sp = m; if (push(r, l, -1) < 0) return -1; break; }
        case 'd': { Py_ssize_t m = marker(r); if (m < 0) return -1;              /* DICT */
            if (push(r, PyDict_New(), -1) < 0) return -1;
            /* move the new dict below the items */
            PyObject *d = r->stack[r->sp - 1];
            memmove(&r->stack[m + 1], &r->stack[m], (r->sp - 1 - m) * sizeof(PyObject *));
            memmove(&r->smemo[m + 1], &r->smemo[m], (r->sp - 1 - m) * sizeof(Py_ssize_t));
            r->stack[m] = d; r->smemo[m] = -1;
            if (do_setitems(r, m + 1) < 0) return -1; break; }
        case 'a': if (r->sp < 2 || do_appends(r, r->sp - 1) < 0) { if (!PyErr_Occurred()) FAIL("append"); return -1; } break;
        case 'e': { Py_ssize_t m = marker(r); if (m < 0 || do_appends(r, m) < 0) return -1; break; }
        case 's': if (r->sp < 3 || do_setitems(r, r->sp - 2) < 0) { if (!PyErr_Occurred()) FAIL("setitem"); return -1; } break;
        case 'u': { Py_ssize_t m = marker(r); if (m < 0 || do_setitems(r, m) < 0) return -1; break; }
        case 'K': NEED(1); s = (const unsigned char *)r->p + r->pos; r->pos += 1;
                  if (push(r, PyLong_FromLong(s[0]), -1) < 0) return -1; break;
        case 'M': NEED(2); s = (const unsigned char *)r->p + r->pos; r->pos += 2;
                  if (push(r, PyLong_FromLong((long)rd_u(s, 2)), -1) < 0) return -1; break;
        case 'J': NEED(4); s = (const unsigned char *)r->p + r->pos; r->pos += 4;
                  if (push(r, PyLong_FromLong((long)(int32_t)(uint32_t)rd_u(s, 4)), -1) < 0) return -1; break;
        case 0x8a: case 0x8b: {                                                 /* LONG1 / LONG4 */
            int w = op == 0x8a ? 1 : 4;
            NEED(w); s = (const unsigned char *)r->p + r->pos;
            int64_t n = (int64_t)(w == 1 ? s[0] : (int32_t)(uint32_t)rd_u(s, 4));
            if (n < 0 || n > 1024) FAIL("long length");
            r->pos += w;
            NEED(n); s = (const unsigned char *)r->p + r->pos; r->pos += n;
            PyObject *v = n ? _PyLong_FromByteArray(s, (size_t)n, 1, 1) : PyLong_FromLong(0);
            if (push(r, v, -1) < 0) return -1; break; }
        case 'G': { NEED(8); s = (const unsigned char *)r->p + r->pos; r->pos += 8;
            #if PY_VERSION_HEX < 0x030B0000
            double x = _PyFloat_Unpack8(s, 0);
#else
            double x = PyFloat_Unpack8((const char *)s, 0);
#endif
            if (x == -1.0 && PyErr_Occurred()) return -1;
            if (push(r, PyFloat_FromDouble(x), -1) < 0) return -1; break; }
        case 0x8c: case 'X': case 0x8d:                                          /* SHORT_BINUNICODE, BINUNICODE(8) */
        case 'C': case 'B': case 0x8e: {                                         /* SHORT_BINBYTES, BINBYTES(8) */
            int w = (op == 0x8c || op == 'C') ? 1 : (op == 'X' || op == 'B') ? 4 : 8;
            NEED(w); s = (const unsigned char *)r->p + r->pos;
            uint64_t n = rd_u(s, w); r->pos += w;
            if (n > ((uint64_t)1 << 31)) FAIL("string too long");
            NEED((Py_ssize_t)n);
            const char *q = r->p + r->pos; r->pos += (Py_ssize_t)n;
            PyObject *v = (op == 0x8c || op == 'X' || op == 0x8d) ? intern_str(r, q, (Py_ssize_t)n)
                                                                  : PyBytes_FromStringAndSize(q, (Py_ssize_t)n);
            if (!v) { if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) { PyErr_Clear(); FAIL("bad utf-8"); } return -1; }
            if (push(r, v, -1) < 0) return -1; break; }
        case 'q': NEED(1); s = (const unsigned char *)r->p + r->pos; r->pos += 1;
                  if (memo_put(r, s[0]) < 0) return -1; break;
        case 'r': NEED(4); s = (const unsigned char *)r->p + r->pos; r->pos += 4;
                  if (memo_put(r, (Py_ssize_t)rd_u(s, 4)) < 0) return -1; break;
        case 0x94: if (memo_put(r, r->mlen) < 0) return -1; break;               /* MEMOIZE */
        case 'h': NEED(1); s = (const unsigned char *)r->p + r->pos; r->pos += 1;
                  if (memo_get(r, s[0]) < 0) return -1; break;
        case 'j': NEED(4); s = (const unsigned char *)r->p + r->pos; r->pos += 4;
                  if (memo_get(r, (Py_ssize_t)rd_u(s, 4)) < 0) return -1; break;
        case 0x93: {                                                            /* STACK_GLOBAL: data-only types */
            if (r->sp < 2) FAIL("stack_global");
            PyObject *key = PyTuple_Pack(2, r->stack[r->sp - 2], r->stack[r->sp - 1]);
            if (!key) return -1;
            PyObject *t = PyDict_GetItemWithError(r->safe, key);
            Py_DECREF(key);
            if (!t) { PyErr_Clear(); FAIL("a global"); }
            Py_DECREF(r->stack[--r->sp]); Py_DECREF(r->stack[--r->sp]);
            Py_INCREF(t);
            if (push(r, t, -1) < 0) return -1; break; }
        case 'R': case 0x81: {                                                  /* REDUCE / NEWOBJ of a data-only type */
            if (r->sp < 2) FAIL("reduce");
            PyObject *cls = r->stack[r->sp - 2], *args = r->stack[r->sp - 1];
            if (!is_safe_type(r, cls) || !PyTuple_CheckExact(args)) FAIL("a call");
            for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(args); k++) {
                PyObject *x = PyTuple_GET_ITEM(args, k);
                if (!PyUnicode_CheckExact(x) && !PyList_CheckExact(x) && !PyDict_CheckExact(x)) FAIL("call args");
            }
            PyObject *v = PyObject_Call(cls, args, NULL);
            if (!v) { PyErr_Clear(); FAIL("data-only type rejected its arguments"); }
            Py_DECREF(r->stack[--r->sp]); Py_DECREF(r->stack[--r->sp]);
            if (push(r, v, -1) < 0) return -1; break; }
        default:
            PyErr_Format(Unsupported, "opcode 0x%02x", op);
            return -1;
        }
    }
}

static PyObject *col(void *p, Py_ssize_t n, size_t w) {
    return PyBytes_FromStringAndSize(n ? (const char *)p : NULL, n * (Py_ssize_t)w);
}

static void free_builder(Builder *b) {
    PyMem_Free(b->action); PyMem_Free(b->addr); PyMem_Free(b->size); PyMem_Free(b->stream);
    PyMem_Free(b->time_us); PyMem_Free(b->stack); PyMem_Free(b->local);
    b->action = NULL; b->addr = b->size = b->stream = b->time_us = NULL; b->stack = NULL; b->local = NULL;
    Py_CLEAR(b->codes); Py_CLEAR(b->names); Py_CLEAR(b->order); Py_CLEAR(b->extras); Py_CLEAR(b->list);
}

static PyObject *builder_result(Builder *b) {
    PyObject *cols[6] = {0};
    PyObject *out = NULL;
    /* one column at a time, each freed once copied */
#define C(k, f, t) cols[k] = col(b->f, b->n, sizeof(t)); PyMem_Free(b->f); b->f = NULL; if (!cols[k]) goto done;
    C(0, action, uint8_t) C(1, addr, int64_t) C(2, size, int64_t) C(3, stream, int64_t) C(4, time_us, int64_t) C(5, stack, int32_t)
#undef C
    out = Py_BuildValue("(NOOOOOOOOO)", PyLong_FromVoidPtr(b->list), cols[0], cols[1], cols[2], cols[3], cols[4], cols[5],
                        b->names, b->order, b->extras);
done:
    for (int k = 0; k < 6; k++) Py_XDECREF(cols[k]);
    return out;
}

static PyObject *decode(PyObject *self, PyObject *args) {
    PyObject *file, *safe;
    if (!PyArg_ParseTuple(args, "OO!", &file, &PyDict_Type, &safe)) return NULL;
    R r; memset(&r, 0, sizeof r);
    r.file = file; r.safe = safe;
    PyObject *result = NULL, *out = NULL, *traces = NULL;
    r.strings = PyDict_New(); r.frame_ids = PyDict_New(); r.frames = PyList_New(0);
    r.stack_ids = PyDict_New(); r.stacks = PyList_New(0);
    { PyObject *vals = PyDict_Values(safe); r.safe_types = vals ? PySequence_Tuple(vals) : NULL; Py_XDECREF(vals); }
    r.tomb = PyList_New(0);  /* a private object nothing else holds */
    r.k_action = PyUnicode_InternFromString("action"); r.k_addr = PyUnicode_InternFromString("addr");
    r.k_size = PyUnicode_InternFromString("size"); r.k_stream = PyUnicode_InternFromString("stream");
    r.k_time = PyUnicode_InternFromString("time_us"); r.k_frames = PyUnicode_InternFromString("frames");
    r.k_name = PyUnicode_InternFromString("name"); r.k_filename = PyUnicode_InternFromString("filename");
    r.k_line = PyUnicode_InternFromString("line");
    r.k_device_free = PyUnicode_InternFromString("device_free"); r.k_pool_id = PyUnicode_InternFromString("pool_id");
    r.k_user_metadata = PyUnicode_InternFromString("user_metadata");
    if (!r.strings || !r.frame_ids || !r.frames || !r.stack_ids || !r.stacks || !r.safe_types || !r.tomb
        || !r.k_action || !r.k_line || !r.k_user_metadata) goto done;
    if (run(&r, &result) < 0) goto done;
    traces = PyList_New(0);
    if (!traces) goto done;
    for (Py_ssize_t i = 0; i < r.nb; i++) {
        PyObject *t = builder_result(&r.b[i]);
        if (!t || PyList_Append(traces, t) < 0) { Py_XDECREF(t); goto done; }
        Py_DECREF(t);
        free_builder(&r.b[i]);
    }
    out = Py_BuildValue("(OOO)", result, traces, r.stacks);
done:
    Py_XDECREF(result); Py_XDECREF(traces);
    while (r.sp) Py_DECREF(r.stack[--r.sp]);
    for (Py_ssize_t j = 0; j < r.mlen; j++) Py_XDECREF(r.memo[j]);
    for (Py_ssize_t i = 0; i < r.nb; i++) free_builder(&r.b[i]);
    PyMem_Free(r.stack); PyMem_Free(r.smemo); PyMem_Free(r.marks); PyMem_Free(r.memo); PyMem_Free(r.b);
    Py_XDECREF(r.buf); Py_XDECREF(r.strings); Py_XDECREF(r.frame_ids); Py_XDECREF(r.frames);
    Py_XDECREF(r.stack_ids); Py_XDECREF(r.stacks); pm_free(&r.canon_frames); pm_free(&r.canon_stacks); pm_free(&r.batch); Py_XDECREF(r.safe_types); Py_XDECREF(r.tomb);
    Py_XDECREF(r.k_action); Py_XDECREF(r.k_addr); Py_XDECREF(r.k_size); Py_XDECREF(r.k_stream); Py_XDECREF(r.k_time);
    Py_XDECREF(r.k_frames); Py_XDECREF(r.k_name); Py_XDECREF(r.k_filename); Py_XDECREF(r.k_line);
    Py_XDECREF(r.k_device_free); Py_XDECREF(r.k_pool_id); Py_XDECREF(r.k_user_metadata);
    return out;
}

static PyMethodDef methods[] = {
    {"decode", decode, METH_VARARGS,
     "decode(file, safe_types) -> (raw, traces, stacks); raises Unsupported for anything but builtin data."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "_snapcols", "Restricted pickle reader into trace columns.", -1, methods};

PyMODINIT_FUNC PyInit__snapcols(void) {
    PyObject *m = PyModule_Create(&mod);
    if (!m) return NULL;
    Unsupported = PyErr_NewException("oompost.parsers._snapcols.Unsupported", PyExc_ValueError, NULL);
    if (!Unsupported || PyModule_AddObject(m, "Unsupported", Unsupported) < 0) return NULL;
    Py_INCREF(Unsupported);
    return m;
}
